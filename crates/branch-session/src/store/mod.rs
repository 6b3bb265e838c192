//! Durable storage of branches: the [`BranchStore`] seam, its embedded
//! SQLite default ([`SqliteStore`]) and, with the `postgres` feature, a
//! PostgreSQL store shared by many workers ([`PgStore`]); each with a
//! durable memory store.

mod error;
mod layout;
mod memory;
mod pool;
mod schema;
mod sqlite;

#[cfg(feature = "postgres")]
pub mod postgres;

pub use error::StoreError;
pub use memory::SqliteMemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::{PgMemoryStore, PgOptions, PgStore, Watch, WatchEvent};
pub use sqlite::{Durability, SqliteOptions, SqliteStore};

use async_trait::async_trait;
use branch_core::{Branch, Message};
use uuid::Uuid;

/// What [`BranchStore::list`] reports about one stored branch.
#[derive(Debug, Clone, PartialEq)]
pub struct BranchSummary {
    /// The branch id.
    pub id: Uuid,
    /// The branch name, if it has one.
    pub name: Option<String>,
    /// Number of stored messages (the system message included).
    pub message_count: u64,
    /// When the branch was last written, float seconds since the epoch.
    pub updated_at: f64,
    /// The branch's version: bumped by every write (save or turn).
    pub version: u64,
}

/// A stored message as [`BranchStore::load_since`] returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredMessage {
    /// Its place in insertion order (the pile's `collections`), from 0.
    pub seq: u64,
    /// Its place in the conversation's order (the progression).
    pub pos: u64,
    /// The message.
    pub message: Message,
}

/// What changed in a stored branch past a sequence number.
#[derive(Debug, Clone, PartialEq)]
pub struct Since {
    /// The branch's version these rows belong to.
    pub version: u64,
    /// How many messages the branch holds in all.
    pub message_count: u64,
    /// The messages whose `seq` is at least the one asked for, in order,
    /// at most [`crate::limits::MAX_ROWS_PER_BATCH`] of them.
    pub messages: Vec<StoredMessage>,
}

/// Durable storage of conversations.
///
/// A store keeps what `Branch::to_dict` keeps (messages, logs, models,
/// metadata; messages and logs in rows of their own) and nothing live:
/// tools, memory, providers and session references are set up again by
/// the caller after [`BranchStore::load`].
/// Loading a saved branch reproduces its `to_dict` exactly.
#[async_trait]
pub trait BranchStore: Send + Sync {
    /// Writes the whole branch, replacing what was stored under its id.
    async fn save(&self, branch: &Branch) -> Result<(), StoreError>;

    /// [`BranchStore::save`], only if the stored branch is still at
    /// `expected_version`: otherwise nothing is written and the answer is
    /// [`StoreError::Conflict`] ([`StoreError::NotFound`] when it is not
    /// stored). Returns the branch's new version. This is how a writer
    /// that must also change metadata (a turn paused for approval) writes
    /// the whole branch without overwriting another writer's newer turns.
    async fn save_at(&self, branch: &Branch, expected_version: u64) -> Result<u64, StoreError>;

    /// Appends one turn's messages to a stored branch, atomically: after a
    /// crash either every message of the turn is stored or none is. A
    /// message whose id is already stored replaces it in place (an action
    /// request completed during the turn); the others are appended in
    /// order. Only messages change: [`BranchStore::record_turn_at`] also
    /// brings the metadata and logs up to date.
    async fn append_turn(&self, branch_id: Uuid, messages: &[Message]) -> Result<(), StoreError>;

    /// [`BranchStore::append_turn`], only if the branch is still at
    /// `expected_version`: otherwise nothing is written and the answer is
    /// [`StoreError::Conflict`]. Returns the branch's new version. The
    /// version is the fencing token of a worker that may have lost its
    /// claim on the conversation during a long model call.
    async fn append_turn_at(
        &self,
        branch_id: Uuid,
        expected_version: u64,
        messages: &[Message],
    ) -> Result<u64, StoreError>;

    /// [`BranchStore::append_turn_at`] for a live branch: `messages` (the
    /// ones the store lacks, as for `append_turn`) are appended, and the
    /// rest of the branch (metadata and curated view, user, name, models,
    /// log settings, logs) is stored as it is now, in the same
    /// transaction, without writing the earlier messages again. Logs past
    /// the stored ones are appended; when the logger holds another pile
    /// than the stored one, or fewer logs (it was cleared after a capacity
    /// dump, whose file keeps the old ones), the stored logs are replaced
    /// by the branch's, as a whole save would. A system message set,
    /// replaced, edited or removed since the last whole save moves the
    /// front of the pile, which rows appended cannot: the turn is then
    /// written as a whole save ([`BranchStore::save_at`], on the same
    /// version). A system message among `messages` is refused either way
    /// ([`StoreError::SystemInTurn`]). Returns the branch's new version.
    async fn record_turn_at(
        &self,
        branch: &Branch,
        expected_version: u64,
        messages: &[Message],
    ) -> Result<u64, StoreError>;

    /// Restores a stored branch. [`StoreError::NotFound`] when absent.
    async fn load(&self, id: Uuid) -> Result<Branch, StoreError> {
        Ok(self.load_versioned(id).await?.0)
    }

    /// Restores a stored branch with the version it was read at (one
    /// snapshot), the base of a later [`BranchStore::append_turn_at`].
    async fn load_versioned(&self, id: Uuid) -> Result<(Branch, u64), StoreError>;

    /// The messages stored at `seq` and after (a cached copy holding
    /// `seq` messages catches up without a full load), with the version
    /// they belong to. A message completed in place below `seq` (an
    /// action request linked to its response) is not repeated; a whole
    /// [`BranchStore::save`] that reorders messages needs a full load.
    async fn load_since(&self, branch_id: Uuid, seq: u64) -> Result<Since, StoreError>;

    /// Every stored branch, in the order they were first saved.
    async fn list(&self) -> Result<Vec<BranchSummary>, StoreError>;

    /// Deletes a branch, its messages and its logs; returns whether it
    /// existed.
    async fn delete(&self, id: Uuid) -> Result<bool, StoreError>;
}
