//! `Branch`: the aggregate that owns one conversation.

// Parsing of stored data: nothing read from outside may panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod builder;
mod clone;
mod models;
mod serialize;
mod system;

pub use builder::{BranchBuilder, ModelChoice};
pub use models::{ModelManager, same_model};
pub use serialize::{FromDictOptions, SerializationMode, ToDictOptions};
pub use system::{LION_SYSTEM_MESSAGE, SystemDatetime, SystemSpec};

use std::sync::{Arc, OnceLock, RwLock};

use serde_json::{Map, Value};
use uuid::Uuid;

use crate::action::{ActionManager, RegisteredTool};
use crate::element::Element;
use crate::extensions::Extensions;
use crate::gate::{Gate, GateSlot, ToolInvocation};
use crate::log::{DataLogger, Log};
use crate::memory::{InMemoryStore, MemoryStore};
use crate::message::{Message, MessageManager};
use crate::metadata::Metadata;
use crate::model::ChatModel;
use crate::observer::{Observer, ObserverSlot, Signal};
use crate::operation::{Operation, OperationManager};
use crate::participant::Participant;
use crate::pile::Pile;
use crate::progression::Progression;

/// An operation registry that a session can share among its branches.
pub type SharedOperations = Arc<RwLock<OperationManager>>;

/// The name of the callback that forwards added messages to the observer.
pub const EMIT_CALLBACK: &str = "emit_message_added";

/// One conversation: its identity, messages, tools, models, logs and named
/// operations, plus the optional branch-scoped extensions (memory, context
/// providers, capability grants) and the detachable session references.
///
/// The verbs (`chat`, `communicate`, `operate`, ...) are attached by
/// extension traits in `branch-operations`; this type only owns state.
pub struct Branch {
    element: Element,
    user: Option<Participant>,
    name: Option<String>,
    msgs: MessageManager,
    acts: ActionManager,
    models: ModelManager,
    logger: DataLogger,
    operations: SharedOperations,
    memory: OnceLock<Arc<dyn MemoryStore>>,
    extensions: Extensions,
    observer: ObserverSlot,
    gate: GateSlot,
    owning_session: Option<Uuid>,
}

impl std::fmt::Debug for Branch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Branch")
            .field("id", &self.element.id)
            .field("name", &self.name)
            .field("user", &self.user)
            .field("messages", &self.msgs.len())
            .field("tools", &self.acts)
            .field("models", &self.models)
            .field("logs", &self.logger.logs().len())
            .field("owning_session", &self.owning_session)
            .finish_non_exhaustive()
    }
}

impl Branch {
    /// The builder: the Rust face of the reference's keyword constructor.
    pub fn builder() -> BranchBuilder {
        BranchBuilder::default()
    }

    /// A branch with every default: no system message, the default chat
    /// model (`LIONAGI_CHAT_PROVIDER` / `LIONAGI_CHAT_MODEL`).
    pub fn new() -> crate::Result<Self> {
        Self::builder().build()
    }

    pub(crate) fn assemble(parts: Parts) -> Self {
        let Parts {
            element,
            user,
            name,
            msgs,
            acts,
            models,
            logger,
            memory,
        } = parts;
        let observer = ObserverSlot::default();
        let mut msgs = msgs;
        let slot = observer.clone();
        let branch_id = element.id;
        msgs.on_message_added(
            EMIT_CALLBACK,
            Arc::new(move |m: &Message| {
                if let Some(o) = slot.get() {
                    o.observe(Signal::MessageAdded {
                        branch_id,
                        message: m.clone(),
                    });
                }
            }),
        );
        let memory_cell = OnceLock::new();
        if let Some(m) = memory {
            let _ = memory_cell.set(m);
        }
        Self {
            element,
            user,
            name,
            msgs,
            acts,
            models,
            logger,
            operations: Arc::new(RwLock::new(OperationManager::new())),
            memory: memory_cell,
            extensions: Extensions::default(),
            observer,
            gate: GateSlot::default(),
            owning_session: None,
        }
    }

    // ---- identity -------------------------------------------------------

    /// The branch id.
    pub fn id(&self) -> Uuid {
        self.element.id
    }

    /// The creation time, float seconds since the epoch.
    pub fn created_at(&self) -> f64 {
        self.element.created_at
    }

    /// The metadata (`clone_from` among it for a clone).
    pub fn metadata(&self) -> &Metadata {
        &self.element.metadata
    }

    /// The metadata, mutably.
    pub fn metadata_mut(&mut self) -> &mut Metadata {
        &mut self.element.metadata
    }

    /// The human side of the conversation.
    pub fn user(&self) -> Option<&Participant> {
        self.user.as_ref()
    }

    /// Sets the human side.
    pub fn set_user(&mut self, user: Option<Participant>) {
        self.user = user;
    }

    /// The branch name.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Sets the branch name.
    pub fn set_name(&mut self, name: Option<String>) {
        self.name = name;
    }

    // ---- managers -------------------------------------------------------

    /// The message manager (`msgs`).
    pub fn msgs(&self) -> &MessageManager {
        &self.msgs
    }

    /// The message manager, mutably. Every message added through it runs
    /// the `on_message_added` callbacks.
    pub fn msgs_mut(&mut self) -> &mut MessageManager {
        &mut self.msgs
    }

    /// The tool registry (`acts`).
    pub fn acts(&self) -> &ActionManager {
        &self.acts
    }

    /// The tool registry, mutably.
    pub fn acts_mut(&mut self) -> &mut ActionManager {
        &mut self.acts
    }

    /// The model manager (`mdls`).
    pub fn mdls(&self) -> &ModelManager {
        &self.models
    }

    /// The model manager, mutably.
    pub fn mdls_mut(&mut self) -> &mut ModelManager {
        &mut self.models
    }

    /// The logger.
    pub fn logger(&self) -> &DataLogger {
        &self.logger
    }

    /// The logger, mutably.
    pub fn logger_mut(&mut self) -> &mut DataLogger {
        &mut self.logger
    }

    // ---- conversation views ---------------------------------------------

    /// The message pile.
    pub fn messages(&self) -> &Pile<Message> {
        self.msgs.messages()
    }

    /// The active order: the curated view if set, else the pile order.
    pub fn progression(&self) -> &Progression {
        self.msgs.progression()
    }

    /// The system message, if any.
    pub fn system(&self) -> Option<&Message> {
        self.msgs.system()
    }

    /// The logs.
    pub fn logs(&self) -> &Pile<Log> {
        self.logger.logs()
    }

    /// Token usage and cost summed over every assistant response of the
    /// conversation (OpenAI- or Anthropic-style usage, as `RunEnd`
    /// reports it; `duration_ms` is 0).
    pub fn usage(&self) -> crate::observer::RunUsage {
        crate::observer::RunUsage::from_messages(self.messages().iter())
    }

    /// Appends a log entry.
    pub fn log(&mut self, log: Log) {
        self.logger.log(log);
    }

    /// The registered tools by name, in registration order.
    pub fn tools(&self) -> impl Iterator<Item = &RegisteredTool> {
        self.acts.iter()
    }

    /// The chat model.
    pub fn chat_model(&self) -> &Arc<dyn ChatModel> {
        self.models.chat()
    }

    /// Replaces the chat model; the parse model is left as it was.
    pub fn set_chat_model(&mut self, model: Arc<dyn ChatModel>) {
        self.models.set_chat(model);
    }

    /// The parse model.
    pub fn parse_model(&self) -> &Arc<dyn ChatModel> {
        self.models.parse()
    }

    /// Replaces the parse model.
    pub fn set_parse_model(&mut self, model: Arc<dyn ChatModel>) {
        self.models.set_parse(model);
    }

    /// Names of the `on_message_added` callbacks.
    pub fn on_message_added(&self) -> Vec<&str> {
        self.msgs.callback_names()
    }

    // ---- memory (D3) ----------------------------------------------------

    /// The memory store: the one given at construction (kept by identity),
    /// else a private [`InMemoryStore`] created on first access. There is no
    /// setter; a session can only fill an empty slot.
    pub fn memory(&self) -> &Arc<dyn MemoryStore> {
        self.memory.get_or_init(|| Arc::new(InMemoryStore::new()))
    }

    /// Whether the branch has claimed a memory store yet.
    pub fn has_memory(&self) -> bool {
        self.memory.get().is_some()
    }

    /// Session attachment: adopts `store` only when the branch has none yet
    /// (first claim wins). Returns whether it was adopted.
    pub fn adopt_memory(&self, store: Arc<dyn MemoryStore>) -> bool {
        self.memory.set(store).is_ok()
    }

    // ---- extensions (D3) ------------------------------------------------

    /// Branch-scoped live extensions (context providers, capability grants),
    /// attached by other crates; never serialized nor cloned.
    pub fn extensions(&self) -> &Extensions {
        &self.extensions
    }

    /// The extensions, mutably.
    pub fn extensions_mut(&mut self) -> &mut Extensions {
        &mut self.extensions
    }

    // ---- named operations (D5) ------------------------------------------

    /// The operation registry in use (the branch's own, or its session's).
    pub fn operations(&self) -> &SharedOperations {
        &self.operations
    }

    /// Registers a named async operation in the registry in use.
    pub fn register_operation<F, Fut>(
        &self,
        name: impl Into<String>,
        func: F,
        update: bool,
    ) -> crate::Result<()>
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Value, crate::operation::OperationError>>
            + Send
            + 'static,
    {
        self.operations
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .register(name, func, update)
    }

    /// Looks up an operation, attribute first as in the reference: a
    /// built-in verb or method of the branch always wins over a registered
    /// name ([`BUILTIN_NAMES`]); a data field (`id`, `created_at`,
    /// `metadata`, `user`, `name`) resolves to its value, and a field that
    /// is unset resolves to nothing, still shadowing the registry.
    pub fn get_operation(&self, name: &str) -> Option<OperationLookup> {
        let field = match name {
            "id" => Some(Value::String(self.id().to_string())),
            "created_at" => Some(serde_json::json!(self.created_at())),
            "metadata" => Some(Value::Object(self.element.metadata.to_map())),
            "user" => Some(
                self.user
                    .as_ref()
                    .map_or(Value::Null, |u| Value::String(u.to_string())),
            ),
            "name" => Some(self.name.clone().map_or(Value::Null, Value::String)),
            _ => None,
        };
        if let Some(value) = field {
            return (!value.is_null()).then_some(OperationLookup::Attribute(value));
        }
        if BUILTIN_NAMES.contains(&name) {
            return Some(OperationLookup::Builtin(name.to_owned()));
        }
        self.operations
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
            .map(OperationLookup::Registered)
    }

    // ---- session attachment (D4) ----------------------------------------

    /// The session that owns this branch, if any.
    pub fn owning_session(&self) -> Option<Uuid> {
        self.owning_session
    }

    /// Attaches session references: owner, observer and the shared
    /// operation registry (which replaces the branch's own).
    pub fn attach_session(
        &mut self,
        session: Uuid,
        observer: Option<Arc<dyn Observer>>,
        operations: SharedOperations,
    ) {
        self.owning_session = Some(session);
        self.observer.set(observer);
        self.operations = operations;
    }

    /// Detaches every session reference (owner, observer, gate); the branch
    /// gets a fresh operation registry. Nothing of the conversation is
    /// touched.
    pub fn detach_session(&mut self) {
        self.owning_session = None;
        self.observer.set(None);
        self.gate.set(None);
        self.operations = Arc::new(RwLock::new(OperationManager::new()));
    }

    /// Attaches an observer without a session.
    pub fn set_observer(&mut self, observer: Option<Arc<dyn Observer>>) {
        self.observer.set(observer);
    }

    /// The attached observer.
    pub fn observer(&self) -> Option<Arc<dyn Observer>> {
        self.observer.get()
    }

    /// Attaches (or removes) the governance gate consulted before every
    /// tool call. Like the observer, it is a live reference: never
    /// serialized, never cloned.
    pub fn set_gate(&mut self, gate: Option<Arc<dyn Gate>>) {
        self.gate.set(gate);
    }

    /// The attached gate.
    pub fn gate(&self) -> Option<Arc<dyn Gate>> {
        self.gate.get()
    }

    /// The verdict on a proposed call of this branch (the reference's
    /// `authorize`): allowed without a gate, else the gate's answer, a
    /// failing gate denying; a denial is signalled as `GateDenied`.
    pub async fn authorize(&self, function: &str, arguments: &Map<String, Value>) -> bool {
        let call = ToolInvocation {
            function: function.to_owned(),
            arguments: arguments.clone(),
            branch_id: self.id(),
        };
        self.gate.authorize(&call, &self.observer).await
    }

    /// A handle on the observer slot itself: a message callback holding it
    /// reaches whichever observer is attached when it fires.
    pub fn observer_slot(&self) -> ObserverSlot {
        self.observer.clone()
    }
}

/// The owned state a branch is assembled from.
pub(crate) struct Parts {
    pub(crate) element: Element,
    pub(crate) user: Option<Participant>,
    pub(crate) name: Option<String>,
    pub(crate) msgs: MessageManager,
    pub(crate) acts: ActionManager,
    pub(crate) models: ModelManager,
    pub(crate) logger: DataLogger,
    pub(crate) memory: Option<Arc<dyn MemoryStore>>,
}

/// What `get_operation` found.
#[derive(Clone)]
pub enum OperationLookup {
    /// A built-in verb or method of `Branch` (always wins).
    Builtin(String),
    /// The value of a data field of `Branch` (always wins).
    Attribute(Value),
    /// A registered async operation.
    Registered(Operation),
}

impl std::fmt::Debug for OperationLookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OperationLookup::Builtin(n) => write!(f, "Builtin({n})"),
            OperationLookup::Attribute(v) => write!(f, "Attribute({v})"),
            OperationLookup::Registered(_) => f.write_str("Registered(..)"),
        }
    }
}

/// Names that resolve to the branch itself in `get_operation`: the verbs
/// and the public attributes of the reference's `Branch`, so a registered
/// operation can never shadow them.
pub const BUILTIN_NAMES: &[&str] = &[
    // verbs
    "chat",
    "communicate",
    "parse",
    "operate",
    "act",
    "interpret",
    "ReAct",
    "ReActStream",
    "run",
    "instruct",
    "select",
    "translate",
    "connect",
    "chat_and_record",
    // fields and properties
    "id",
    "created_at",
    "metadata",
    "user",
    "name",
    "msgs",
    "acts",
    "mdls",
    "messages",
    "progression",
    "system",
    "logs",
    "tools",
    "chat_model",
    "parse_model",
    "memory",
    "providers",
    "last_context_report",
    "capabilities",
    "on_message_added",
    "token_budget",
    // methods
    "to_dict",
    "from_dict",
    "clone",
    "aclone",
    "get_operation",
    "register_tools",
    "grant_capabilities",
    "revoke_capabilities",
    "emit",
    "authorize",
    "emit_and_log",
    "control",
    "drain_signals",
    "dump_logs",
    "adump_logs",
    "to_df",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_branch_can_move_between_tasks() {
        fn send_sync<T: Send + Sync + 'static>() {}
        send_sync::<Branch>();
    }

    #[test]
    fn memory_is_lazy_and_first_claim_wins() {
        let b = Branch::new().unwrap();
        assert!(!b.has_memory());
        let first = b.memory().clone();
        assert!(Arc::ptr_eq(&first, b.memory()));
        assert!(
            !b.adopt_memory(Arc::new(InMemoryStore::new())),
            "already claimed"
        );
        let fresh = Branch::new().unwrap();
        let shared: Arc<dyn MemoryStore> = Arc::new(InMemoryStore::new());
        assert!(fresh.adopt_memory(shared.clone()));
        assert!(Arc::ptr_eq(&shared, fresh.memory()));
    }

    #[test]
    fn explicit_memory_is_kept_by_identity() {
        let store: Arc<dyn MemoryStore> = Arc::new(InMemoryStore::new());
        let b = Branch::builder().memory(store.clone()).build().unwrap();
        assert!(Arc::ptr_eq(&store, b.memory()));
    }

    #[test]
    fn session_attachment_detaches_cleanly() {
        let mut b = Branch::builder().system("S").build().unwrap();
        let shared: SharedOperations = Arc::new(RwLock::new(OperationManager::new()));
        shared
            .write()
            .unwrap()
            .register("x", |_v| async { Ok(Value::Null) }, false)
            .unwrap();
        let session = Uuid::new_v4();
        b.attach_session(session, None, shared);
        assert_eq!(b.owning_session(), Some(session));
        assert!(b.get_operation("x").is_some());
        b.detach_session();
        assert!(b.owning_session().is_none());
        assert!(
            b.get_operation("x").is_none(),
            "removal gives a fresh registry"
        );
        assert!(b.system().is_some(), "the conversation stays");
    }
}
