//! lionagi-rs: the lionagi `Branch` (one LLM conversation) in Rust.
//!
//! This umbrella crate re-exports the workspace's crates and offers a
//! [`prelude`]. Depend on a single `branch-*` crate instead when only one
//! part is needed (for example `branch-models` as a provider client).
//!
//! ```
//! use lionagi::prelude::*;
//!
//! let branch = Branch::builder()
//!     .system("You are terse.")
//!     .user("alice")
//!     .build()?;
//! let stored = branch.to_dict(&ToDictOptions::default())?;
//! let restored = Branch::from_dict(&stored)?;
//! assert_eq!(restored.to_dict(&ToDictOptions::default())?, stored);
//! # Ok::<(), lionagi::core::BranchError>(())
//! ```

//! A turn with a model (this is the README's example, compiled here so it
//! stays true):
//!
//! ```no_run
//! use lionagi::prelude::*;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let mut branch = Branch::builder()
//!     .system("You are terse.")
//!     .user("alice")
//!     .chat_model("openai/gpt-4.1-mini")
//!     .build()?;
//! let reply = branch
//!     .communicate(CommunicateOptions::new("What is the capital of France?"))
//!     .await?;
//! println!("{reply:?}");
//! let saved = branch.to_dict(&ToDictOptions::default())?;
//! let restored = Branch::from_dict(&saved)?;
//! let copy = branch.clone_branch()?;
//! # let _ = (restored, copy);
//! # Ok(()) }
//! ```

// The CLI reads stdin, files and stores: nothing outside tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod cli;
pub mod limits;
#[cfg(feature = "otel")]
pub mod telemetry;

pub use branch_actions as actions;
pub use branch_capabilities as capabilities;
pub use branch_core as core;
pub use branch_mcp as mcp;
pub use branch_messages as messages;
pub use branch_models as models;
pub use branch_operations as operations;
pub use branch_providers as providers;
pub use branch_session as session;

/// The names most programs need: the aggregate, its data types, the verbs
/// (`BranchOperations`) with their option structs and replies, and the
/// extension traits the README uses (context providers, capabilities).
///
/// ```
/// use lionagi::prelude::*;
///
/// struct Prefs;
///
/// #[async_trait::async_trait]
/// impl ContextProvider for Prefs {
///     async fn provide(&self, _: &Branch, _: &Message) -> Result<Option<String>, ProviderError> {
///         Ok(Some("The user likes tea.".into()))
///     }
/// }
///
/// let mut branch = Branch::builder().system("S").build()?;
/// branch.providers().register_with(Prefs, ProviderOptions::default().name("prefs"));
/// branch.grant_capabilities(Grant::new(Some("Note".into()), vec![FieldSpec::string("note")])?, true);
/// assert!(branch.capabilities().is_some());
/// // A provider for one call only (the branch does not keep it):
/// let once = CommunicateOptions::new("Hi").context_provider(Prefs, ProviderOptions::default());
/// assert_eq!(once.turn.context_providers.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub mod prelude {
    pub use branch_capabilities::{CapabilitiesExt, FieldSpec, Grant};
    pub use branch_core::message::{InstructionContent, SystemContent};
    pub use branch_core::model::{ChatModel, ModelConfig};
    pub use branch_core::{
        Branch, BranchBuilder, BranchError, DataLoggerConfig, FromDictOptions, Log, MemoryItem,
        MemoryQuery, MemoryStore, Message, MessageContent, MessageKind, Participant, Role,
        SerializationMode, SystemDatetime, ToDictOptions, Tool,
    };
    pub use branch_core::{ContextProvider, ProviderError};
    pub use branch_models::IModel;
    pub use branch_operations::{
        ActOptions, BranchOperations, ChatOptions, CommunicateOptions, InstructionBuilder,
        InterpretOptions, OnParseFailure, OperateOptions, Operated, ParseOptions, Parsed,
        ReActOptions, ReActOutcome, Reply, ResponseFormat, RunOptions, Strategy, VerbReply,
    };
    pub use branch_providers::{ProviderOptions, ProvidersExt};
}
