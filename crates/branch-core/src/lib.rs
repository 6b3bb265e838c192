//! The lionagi `Branch` aggregate: one conversation, its managers, and the
//! vocabulary and seams every other lionagi-rs crate shares.
//!
//! Charter: `branch-core` owns the conversation state and its exact JSON
//! form: [`Element`], [`Progression`], [`Pile`], the five message kinds and
//! [`MessageManager`], [`Log`] / [`DataLogger`] / [`DataLoggerConfig`], the
//! plain-data model configuration ([`model::ModelConfig`]), the tool
//! registry ([`ActionManager`]), named operations ([`OperationManager`]),
//! memory ([`MemoryStore`], [`InMemoryStore`]) and the [`Branch`] itself
//! with construction, `to_dict` / `from_dict` and clone. It defines the
//! seams other crates plug into: [`model::ChatModel`], [`Tool`],
//! [`ContextProvider`], [`MemoryStore`], [`Observer`] and named
//! [`Operation`]s. It must not know HTTP, tool implementations, the verbs'
//! algorithms, storage engines or sessions' membership rules.

// Stored documents, model replies and tool arguments reach this crate's
// readers: nothing outside tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod action;
pub mod branch;
mod canonical_uuid;
pub mod capped_read;
pub mod checked_read;
mod classed_metadata;
pub mod context;
pub mod element;
pub mod error;
pub mod extensions;
pub mod gate;
pub mod json_repair;
pub mod lazy_json;
mod load;
pub mod log;
mod log_settings;
pub mod memory;
pub mod message;
pub mod metadata;
pub mod model;
pub mod object_only;
pub mod observer;
pub mod operation;
pub mod parsed_json;
pub mod participant;
pub mod pile;
pub mod progression;
mod small_map;
mod str_or_value;
pub mod telemetry;
pub mod tool_logs;

pub use action::{ActionManager, RegisteredTool, Tool, ToolError};
pub use branch::{
    Branch, BranchBuilder, FromDictOptions, ModelChoice, ModelManager, OperationLookup,
    SerializationMode, SharedOperations, SystemDatetime, SystemSpec, ToDictOptions,
};
pub use context::{ContextProvider, ProviderError};
pub use element::{Element, lion_class};
pub use error::{BranchError, Result};
pub use extensions::Extensions;
pub use gate::{Gate, GateFuture, GateSlot, ToolInvocation, gate_fn};
pub use lazy_json::LazyJson;
pub use log::{ApiCallHead, DataLogger, DataLoggerConfig, KeptJson, Log, LogExtension};
pub use memory::{InMemoryStore, MemoryError, MemoryItem, MemoryQuery, MemoryStore};
pub use message::{Message, MessageContent, MessageKind, MessageManager};
pub use metadata::Metadata;
pub use observer::{
    CapabilityViolation, EmissionRejected, Observer, ObserverSlot, QueueStats, QueuedObserver,
    QueuedObserverError, RunUsage, Signal, WeakObserverSlot,
};
pub use operation::{Operation, OperationError, OperationManager};
pub use parsed_json::ParsedJson;
pub use participant::{Participant, Role};
pub use pile::{Pile, Stored};
pub use progression::Progression;
