//! Durable storage of branches: the [`BranchStore`] seam and its embedded
//! SQLite default ([`SqliteStore`]), plus a SQLite-backed memory store.

mod error;
mod layout;
mod memory;
mod pool;
mod schema;
mod sqlite;

pub use error::StoreError;
pub use memory::SqliteMemoryStore;
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
}

/// Durable storage of conversations.
///
/// A store keeps what `Branch::to_dict` keeps (messages, logs, models,
/// metadata) and nothing live: tools, memory, providers and session
/// references are set up again by the caller after [`BranchStore::load`].
/// Loading a saved branch reproduces its `to_dict` exactly.
#[async_trait]
pub trait BranchStore: Send + Sync {
    /// Writes the whole branch, replacing what was stored under its id.
    async fn save(&self, branch: &Branch) -> Result<(), StoreError>;

    /// Appends one turn's messages to a stored branch, atomically: after a
    /// crash either every message of the turn is stored or none is. A
    /// message whose id is already stored replaces it in place (an action
    /// request completed during the turn); the others are appended in
    /// order. Only messages change: logs and metadata are written by
    /// [`BranchStore::save`].
    async fn append_turn(&self, branch_id: Uuid, messages: &[Message]) -> Result<(), StoreError>;

    /// Restores a stored branch. [`StoreError::NotFound`] when absent.
    async fn load(&self, id: Uuid) -> Result<Branch, StoreError>;

    /// Every stored branch, in the order they were first saved.
    async fn list(&self) -> Result<Vec<BranchSummary>, StoreError>;

    /// Deletes a branch and its messages; returns whether it existed.
    async fn delete(&self, id: Uuid) -> Result<bool, StoreError>;
}
