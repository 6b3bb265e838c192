//! Message rendering and provider-request compilation.
//!
//! Charter: this crate turns a branch's conversation (the message model that
//! lives in `branch-core`) into what a provider sees: the rendering of an
//! Instruction into prompt text, the folding of the system message and
//! context-provider blocks into guidance, and the compilation of history into
//! the provider's role/content list. It knows messages and requests; it must
//! not know HTTP, tools' implementations or the verbs' algorithms.
//!
//! Everything here is a pure function of `branch-core` values:
//!
//! * [`yaml::minimal_yaml`] — the reference's "minimal YAML" (PyYAML
//!   semantics, byte for byte), which every rendering uses;
//! * [`render`] — the `rendered` text of each message kind, the
//!   response-format banner ([`ResponseFormat`]);
//! * [`compile`] — history + current instruction → the request's `messages`
//!   ([`compile_request`], [`CompileOptions`]), including the system fold,
//!   action-output folding, the merge pass, the curated view and ReAct's
//!   context de-duplication; [`ToolMode::Native`] switches to the
//!   provider's own function calling;
//! * [`token_usage_note`] — the text ReAct appends to the last message.
//!
//! How a verb builds its request (`branch.msgs()` is the branch's
//! `MessageManager`; the current instruction is not in the branch yet):
//!
//! ```
//! use branch_core::message::{InstructionContent, Message, MessageManager, SystemContent};
//! use branch_messages::{compile_request, CompileOptions, ResponseFormat};
//! use serde_json::json;
//!
//! let mut msgs = MessageManager::new();
//! msgs.set_system(Message::system(SystemContent::new("You are terse.")));
//! let current = InstructionContent {
//!     instruction: Some("Say hello".into()),
//!     guidance: Some("One sentence.".into()),
//!     response_format: Some(ResponseFormat::from_value(&json!({"greeting": "str"})).unwrap().to_value()),
//!     ..Default::default()
//! };
//! let request = compile_request(&msgs, &current, &CompileOptions::default()).unwrap();
//! let text = request[0].content.as_text().unwrap();
//! assert!(text.starts_with("Guidance: You are terse.One sentence.\nInstruction: Say hello\nResponseFormat: "));
//! // `RequestMessage::to_value` is the provider's `{"role", "content"}`.
//! assert_eq!(request[0].to_value()["role"], "user");
//! ```

// Messages come from stored documents and model replies: nothing outside
// tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod compile;
mod error;
pub mod render;
mod response_format;
mod token_usage;
pub mod yaml;

pub use compile::{
    CompileOptions, RenderCache, RequestMessage, RequestRole, ToolMode, compile_request,
    compile_request_cached,
};
pub use error::{CompileError, ImageOwner};
pub use render::{RenderedContent, render_instruction, render_message};
pub use response_format::ResponseFormat;
pub use token_usage::token_usage_note;
