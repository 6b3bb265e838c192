//! Sessions of lionagi branches and durable conversation storage.
//!
//! Charter: [`Session`], which includes and removes branches by attaching
//! and detaching coordination references (observer, owning-session id, the
//! shared operation registry, a default memory store) without ever owning
//! a conversation; and [`BranchStore`], durable storage of branches with an
//! embedded SQLite default ([`SqliteStore`]) and a PostgreSQL store shared
//! by many workers (`PgStore`, feature `postgres`). It must not know the verbs'
//! algorithms.

// Stored rows and files are hostile: nothing outside tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod limits;
pub mod session;
pub mod store;
pub mod transfer;

pub use session::{BranchRun, Session, SessionBuilder, SessionError, SharedBranch, share};
pub use store::{
    BranchStore, BranchSummary, Durability, Since, SqliteMemoryStore, SqliteOptions, SqliteStore,
    StoreError, StoredMessage,
};
#[cfg(feature = "postgres")]
pub use store::{PgMemoryStore, PgOptions, PgStore, Watch, WatchEvent};
pub use transfer::{
    export_file, import_file, read_branch_file, read_branch_file_capped, write_branch_file,
};
