//! `Session`: a set of branches sharing coordination references
//! (ADR-0016 D4, extensions.md §4).
//!
//! # Why every member sits behind its own async mutex
//!
//! A member is a [`SharedBranch`], `Arc<tokio::sync::Mutex<Branch>>`. A turn
//! mutates its branch for its whole duration (the instruction, the reply,
//! tool results), across awaits on the network; one lock per branch lets
//! any number of tasks run turns on *different* branches at once, while two
//! turns on the *same* branch queue instead of interleaving their messages.
//! The session itself only holds handles: membership changes take
//! `&mut Session`, lookups and concurrent runs take `&Session`, and no
//! session-wide lock is ever held across a turn.
//!
//! # What inclusion does
//!
//! The session's id becomes the branch's owner, its observer and its shared
//! operation registry replace the branch's, and its default memory store is
//! adopted only where the branch has not claimed one. Removal undoes the
//! references (a fresh empty registry) and never touches the conversation,
//! models, tools, logs, metadata, extensions or adopted memory. Unlike the
//! reference, the branch's `user` is never overwritten with the session id.
//! Session references never appear in `to_dict`, `from_dict` or clones.

mod error;
mod run;

pub use error::SessionError;
pub use run::BranchRun;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use branch_core::{
    Branch, Gate, InMemoryStore, MemoryStore, Observer, OperationError, OperationManager,
    SharedOperations,
};
use indexmap::IndexMap;
use serde_json::Value;
use uuid::Uuid;

/// A branch that tasks share: each turn locks it for its duration.
pub type SharedBranch = Arc<tokio::sync::Mutex<Branch>>;

/// Wraps a branch so a session can hold it.
pub fn share(branch: Branch) -> SharedBranch {
    Arc::new(tokio::sync::Mutex::new(branch))
}

/// Branches that share an observer, named operations and a default memory
/// store. See the module documentation.
pub struct Session {
    id: Uuid,
    members: IndexMap<Uuid, SharedBranch>,
    default_branch: Option<Uuid>,
    operations: SharedOperations,
    observer: Option<Arc<dyn Observer>>,
    gate: Option<Arc<dyn Gate>>,
    memory: OnceLock<Arc<dyn MemoryStore>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("branches", &self.members.keys().collect::<Vec<_>>())
            .field("default_branch", &self.default_branch)
            .field("observer", &self.observer.is_some())
            .finish_non_exhaustive()
    }
}

/// Builds a [`Session`].
#[derive(Default)]
pub struct SessionBuilder {
    id: Option<Uuid>,
    memory: Option<Arc<dyn MemoryStore>>,
    observer: Option<Arc<dyn Observer>>,
    branches: Vec<SharedBranch>,
}

impl SessionBuilder {
    /// The session id (default: a new v4 id).
    pub fn id(mut self, id: Uuid) -> Self {
        self.id = Some(id);
        self
    }

    /// The default memory store offered to members that have none (default:
    /// an in-process store created when first needed).
    pub fn memory(mut self, store: Arc<dyn MemoryStore>) -> Self {
        self.memory = Some(store);
        self
    }

    /// The observer attached to every member.
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// A branch to include; the first one becomes the default branch.
    pub fn branch(mut self, branch: SharedBranch) -> Self {
        self.branches.push(branch);
        self
    }

    /// Builds the session, including the given branches as one batch. With
    /// none given, one default [`Branch`] is created, as in the reference.
    pub async fn build(self) -> Result<Session, SessionError> {
        let memory = OnceLock::new();
        if let Some(m) = self.memory {
            let _ = memory.set(m);
        }
        let mut session = Session {
            id: self.id.unwrap_or_else(Uuid::new_v4),
            members: IndexMap::new(),
            default_branch: None,
            operations: Arc::new(RwLock::new(OperationManager::new())),
            observer: self.observer,
            gate: None,
            memory,
        };
        let branches = if self.branches.is_empty() {
            vec![share(Branch::new()?)]
        } else {
            self.branches
        };
        session.include(branches).await?;
        Ok(session)
    }
}

impl Session {
    /// A session with one default branch.
    pub async fn new() -> Result<Self, SessionError> {
        Self::builder().build().await
    }

    /// The builder.
    pub fn builder() -> SessionBuilder {
        SessionBuilder::default()
    }

    /// The session id (the owner recorded on its members).
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// The default memory store, created on first use unless one was given.
    pub fn memory(&self) -> &Arc<dyn MemoryStore> {
        self.memory.get_or_init(|| Arc::new(InMemoryStore::new()))
    }

    /// The shared operation registry.
    pub fn operations(&self) -> &SharedOperations {
        &self.operations
    }

    /// The governance gate attached to members (the reference's gate on
    /// the session observer): consulted before every tool call of a member.
    pub fn gate(&self) -> Option<&Arc<dyn Gate>> {
        self.gate.as_ref()
    }

    /// Replaces the gate, on the session and on every member.
    pub async fn set_gate(&mut self, gate: Option<Arc<dyn Gate>>) {
        self.gate = gate;
        for h in self.members.values() {
            h.lock().await.set_gate(self.gate.clone());
        }
    }

    /// The observer attached to members.
    pub fn observer(&self) -> Option<&Arc<dyn Observer>> {
        self.observer.as_ref()
    }

    /// Replaces the observer, on the session and on every member.
    pub async fn set_observer(&mut self, observer: Option<Arc<dyn Observer>>) {
        self.observer = observer;
        for h in self.members.values() {
            h.lock().await.set_observer(self.observer.clone());
        }
    }

    // ---- membership -----------------------------------------------------

    /// Includes a batch of branches. First every branch is checked: one
    /// owned by another session, or a different branch reusing a member's
    /// id, refuses the whole batch and nothing changes for any branch.
    /// Then each branch gets the session as owner, its observer and shared
    /// operation registry (replacing the branch's own: local registrations
    /// are dropped) and, if it has not claimed a memory store yet, the
    /// session's. The first member becomes the default branch. Including a
    /// member again only refreshes its references.
    ///
    /// This waits for each branch's lock: do not call it while holding the
    /// lock of a branch in the batch.
    pub async fn include(
        &mut self,
        batch: impl IntoIterator<Item = SharedBranch>,
    ) -> Result<(), SessionError> {
        let batch: Vec<SharedBranch> = batch.into_iter().collect();
        // Lock in one global order (by address) so two sessions including
        // overlapping batches cannot deadlock, and each handle only once.
        let mut order: Vec<&SharedBranch> = batch.iter().collect();
        order.sort_by_key(|h| Arc::as_ptr(h) as usize);
        order.dedup_by_key(|h| Arc::as_ptr(h) as usize);
        let mut guards = Vec::with_capacity(order.len());
        for h in &order {
            guards.push(h.lock().await);
        }

        let mut batch_ids: HashMap<Uuid, usize> = HashMap::new();
        for (i, g) in guards.iter().enumerate() {
            if let Some(owner) = g.owning_session().filter(|o| *o != self.id) {
                return Err(SessionError::AlreadyOwned {
                    branch: g.id(),
                    owner,
                });
            }
            let id = g.id();
            if let Some(member) = self.members.get(&id) {
                if !Arc::ptr_eq(member, order[i]) {
                    return Err(SessionError::DuplicateBranchId(id));
                }
            }
            if batch_ids.insert(id, i).is_some() {
                return Err(SessionError::DuplicateBranchId(id));
            }
        }

        for g in guards.iter_mut() {
            g.attach_session(self.id, self.observer.clone(), Arc::clone(&self.operations));
            g.set_gate(self.gate.clone());
            if !g.has_memory() {
                g.adopt_memory(Arc::clone(self.memory()));
            }
        }
        // Membership follows the caller's order, not the locking order.
        let position: HashMap<usize, Uuid> = order
            .iter()
            .zip(&guards)
            .map(|(h, g)| (Arc::as_ptr(h) as usize, g.id()))
            .collect();
        drop(guards);
        for h in batch {
            let id = position[&(Arc::as_ptr(&h) as usize)];
            self.members.entry(id).or_insert(h);
            self.default_branch.get_or_insert(id);
        }
        Ok(())
    }

    /// Removes a member and detaches the session's references from it: no
    /// owner, no observer, a fresh empty operation registry. Everything of
    /// the conversation, and any memory store it adopted, stays with it.
    /// The default branch moves to the first remaining member.
    pub async fn remove(&mut self, id: Uuid) -> Result<SharedBranch, SessionError> {
        let handle = self
            .members
            .shift_remove(&id)
            .ok_or(SessionError::UnknownBranch(id))?;
        {
            let mut b = handle.lock().await;
            if b.owning_session() == Some(self.id) {
                b.detach_session();
            }
        }
        if self.default_branch == Some(id) {
            self.default_branch = self.members.keys().next().copied();
        }
        Ok(handle)
    }

    /// Removes every member (see [`Session::remove`]) and returns them.
    pub async fn close(mut self) -> Vec<SharedBranch> {
        let ids: Vec<Uuid> = self.members.keys().copied().collect();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Ok(h) = self.remove(id).await {
                out.push(h);
            }
        }
        out
    }

    /// Clones a member (`clone_branch` with the session as sender of the
    /// copied messages) and includes the clone.
    pub async fn split(&mut self, id: Uuid) -> Result<SharedBranch, SessionError> {
        let source = self.get(id).ok_or(SessionError::UnknownBranch(id))?;
        let clone = source.lock().await.clone_branch_with_sender(self.id)?;
        let handle = share(clone);
        self.include([Arc::clone(&handle)]).await?;
        Ok(handle)
    }

    // ---- lookups --------------------------------------------------------

    /// The member with this id.
    pub fn get(&self, id: Uuid) -> Option<SharedBranch> {
        self.members.get(&id).cloned()
    }

    /// The first member (in inclusion order) with this name. Names live in
    /// the branches, so this waits for each member's lock in turn: do not
    /// call it while holding a member's lock.
    pub async fn find_by_name(&self, name: &str) -> Option<SharedBranch> {
        for h in self.members.values() {
            if h.lock().await.name() == Some(name) {
                return Some(Arc::clone(h));
            }
        }
        None
    }

    /// Member ids in inclusion order.
    pub fn branch_ids(&self) -> Vec<Uuid> {
        self.members.keys().copied().collect()
    }

    /// Members in inclusion order.
    pub fn branches(&self) -> impl Iterator<Item = (&Uuid, &SharedBranch)> {
        self.members.iter()
    }

    /// Token usage and cost summed over every member's assistant
    /// responses. Each member is locked in turn, so a turn in progress is
    /// waited for and counted whole or not at all.
    pub async fn usage(&self) -> branch_core::RunUsage {
        let mut total = branch_core::RunUsage::default();
        for b in self.members.values() {
            total.merge(&b.lock().await.usage());
        }
        total
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the session has no member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Whether this id is a member.
    pub fn contains(&self, id: Uuid) -> bool {
        self.members.contains_key(&id)
    }

    /// The default branch's id.
    pub fn default_branch_id(&self) -> Option<Uuid> {
        self.default_branch
    }

    /// The default branch.
    pub fn default_branch(&self) -> Option<SharedBranch> {
        self.default_branch.and_then(|id| self.get(id))
    }

    /// Makes a member the default branch.
    pub fn set_default_branch(&mut self, id: Uuid) -> Result<(), SessionError> {
        if !self.members.contains_key(&id) {
            return Err(SessionError::UnknownBranch(id));
        }
        self.default_branch = Some(id);
        Ok(())
    }

    // ---- named operations -----------------------------------------------

    /// Registers an async operation in the registry every member shares. A
    /// duplicate name fails unless `update`. Registration does not check
    /// the branch's own verbs and attributes; they win at lookup.
    pub fn register_operation<F, Fut>(
        &self,
        name: impl Into<String>,
        func: F,
        update: bool,
    ) -> Result<(), SessionError>
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Value, OperationError>> + Send + 'static,
    {
        self.operations
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .register(name, func, update)?;
        Ok(())
    }
}

impl Drop for Session {
    /// Best effort: members that are not busy are detached, so a dropped
    /// session does not keep them claimed. Prefer [`Session::close`].
    fn drop(&mut self) {
        for h in self.members.values() {
            if let Ok(mut b) = h.try_lock() {
                if b.owning_session() == Some(self.id) {
                    b.detach_session();
                }
            }
        }
    }
}
