//! Errors of branch storage.

use std::path::PathBuf;

use branch_core::BranchError;
use uuid::Uuid;

/// Everything that can go wrong reading or writing a store. Messages name
/// the store file and the operation; they never quote conversation text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No branch with this id is stored.
    #[error("branch `{0}` is not in the store")]
    NotFound(Uuid),
    /// SQLite refused an operation.
    #[error("sqlite store `{path}`: {op} failed: {source}")]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// What was being done (`open`, `save`, `migrate to version 2`, ...).
        op: String,
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
    },
    /// PostgreSQL refused an operation, or the server could not be reached.
    #[error("postgres store `{store}`: {op} failed: {source}")]
    Postgres {
        /// The server and database, as a URL without its password.
        store: String,
        /// What was being done.
        op: String,
        /// The driver's or pool's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The database was written by a newer lionagi-rs whose schema this
    /// build does not know; it is left untouched.
    #[error("store `{path}` has schema version {found}; this build supports up to {supported}")]
    NewerSchema {
        /// The database file, or the server URL without its password.
        path: PathBuf,
        /// The version found in the file (`PRAGMA user_version`).
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// Stored data does not describe a valid branch or memory item, or the
    /// file is not an intact store.
    #[error("store `{path}`: table `{table}`: {what} is corrupt: {reason}")]
    Corrupt {
        /// The database file, or the server URL without its password.
        path: PathBuf,
        /// The table holding the bad data (`branches`, `messages`, ...;
        /// `file` for the database file itself).
        table: &'static str,
        /// The branch or item at fault.
        what: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The branch could not be serialized or restored.
    #[error("branch `{id}`: {source}")]
    Branch {
        /// The branch at fault.
        id: Uuid,
        /// The aggregate's error.
        #[source]
        source: BranchError,
    },
    /// A turn tried to append a System message; a new system prompt moves
    /// to the front of the conversation, so it is written by `save`.
    #[error(
        "branch `{branch_id}`: message `{message_id}` is a System message; write a new system prompt with save(), not append_turn()"
    )]
    SystemInTurn {
        /// The branch.
        branch_id: Uuid,
        /// The offending message.
        message_id: Uuid,
    },
    /// A file could not be read or written.
    #[error("cannot {op} `{path}`: {source}")]
    Io {
        /// `read` or `write`.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A file is not a valid `to_dict` JSON document.
    #[error("`{path}` is not a branch file: {source}")]
    InvalidFile {
        /// The file.
        path: PathBuf,
        /// Why the branch could not be read from it.
        #[source]
        source: BranchError,
    },
    /// Another writer changed the branch since the version this write was
    /// based on; nothing was written. Catch up with `load_since` (or
    /// `load_versioned`) and try again, or report it.
    #[error(
        "branch `{branch}`: written by someone else meanwhile (expected version {expected}, found {found}); nothing was written"
    )]
    Conflict {
        /// The branch.
        branch: Uuid,
        /// The version the write was based on.
        expected: u64,
        /// The version stored now.
        found: u64,
    },
    /// The file given as a store exists but is not a SQLite database; it
    /// is left untouched.
    #[error("`{path}` is not a SQLite conversation store ({reason}); refusing to open it")]
    NotAStore {
        /// The file.
        path: PathBuf,
        /// What was found instead.
        reason: String,
    },
    /// A connection URL or option is invalid.
    #[error("store `{store}`: {reason}")]
    Config {
        /// The store as given, without any password.
        store: String,
        /// What is wrong.
        reason: String,
    },
    /// A blocking database task panicked or was cancelled by the runtime.
    #[error("store `{path}`: the database task did not complete: {reason}")]
    Task {
        /// The database file.
        path: PathBuf,
        /// The panic message or cancellation.
        reason: String,
    },
    /// The store is shutting down.
    #[error("store `{0}` is closed")]
    Closed(PathBuf),
}
