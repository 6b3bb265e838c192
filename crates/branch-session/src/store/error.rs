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
    /// The file was written by a newer lionagi-rs whose schema this build
    /// does not know; it is left untouched.
    #[error(
        "sqlite store `{path}` has schema version {found}; this build supports up to {supported}"
    )]
    NewerSchema {
        /// The database file.
        path: PathBuf,
        /// The version found in the file (`PRAGMA user_version`).
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// Stored data does not describe a valid branch or memory item.
    #[error("store `{path}`: stored data of `{what}` is corrupt: {reason}")]
    Corrupt {
        /// The database file.
        path: PathBuf,
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
