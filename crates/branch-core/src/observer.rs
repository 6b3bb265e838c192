//! The observer seam: typed signals about a branch, delivered to whoever
//! is attached (normally a session).

use std::sync::{Arc, RwLock};

use uuid::Uuid;

use crate::message::Message;

/// Something that happened on a branch.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Signal {
    /// A message was added to the branch's conversation.
    MessageAdded {
        /// The branch.
        branch_id: Uuid,
        /// The message as added.
        message: Message,
    },
}

/// Receives signals. `observe` is called on the path of a turn, so it must
/// return quickly: queue the signal and do the work elsewhere.
pub trait Observer: Send + Sync + 'static {
    /// Takes one signal.
    fn observe(&self, signal: Signal);
}

/// The branch's attachment point for an observer, shared with the message
/// callback that forwards `MessageAdded`.
#[derive(Clone, Default)]
pub(crate) struct ObserverSlot(Arc<RwLock<Option<Arc<dyn Observer>>>>);

impl ObserverSlot {
    pub(crate) fn set(&self, o: Option<Arc<dyn Observer>>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = o;
    }

    pub(crate) fn get(&self) -> Option<Arc<dyn Observer>> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
