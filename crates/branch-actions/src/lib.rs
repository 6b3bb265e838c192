//! Tools for lionagi branches.
//!
//! Charter: the concrete tools that plug into `branch-core`'s tool seam: a
//! function tool built from a Rust async function whose argument type derives
//! `Deserialize` and `JsonSchema` (schema generated once and cached, arguments
//! validated before decoding), dynamic tools from a raw JSON schema plus a
//! handler, and invocation with timeouts, concurrency and panic containment.
//! It must not know models, providers or the verbs that decide when to call
//! a tool.
//!
//! For the verbs (`act`, `operate`, `ReAct`):
//!
//! * register [`FunctionTool`]s / [`DynamicTool`]s with
//!   `ActionManager::register(tool.into_tool(), update)`;
//! * offer them with [`ActionManagerExt::tool_schemas`] (registration
//!   order, or a named subset; an unknown name fails);
//! * read the model's requests with [`ToolCall::from_request_value`], and
//!   a native tool call's JSON text with [`ToolCall::from_text`] (text that
//!   is not a JSON object makes a call that fails without running);
//! * run them with [`ActionManagerExt::invoke_all`]
//!   (results in request order, never a panic) and record each
//!   [`CallOutcome`]: [`CallOutcome::response_output`] is the
//!   ActionResponse `output`, [`CallOutcome::returned_output`] what `act`
//!   returns with errors suppressed, [`CallOutcome::log_content`] the log
//!   entry, [`CallOutcome::tool_id`] the ActionRequest recipient.
//!
//! Schemas differ from the reference's on purpose (see docs/compat.md):
//! integers are `"integer"` (the reference maps `int` to `"number"`), and
//! only fields without a default (not `Option`, not `#[serde(default)]`)
//! are `required` (the reference lists every parameter).

// This crate reads tool arguments a model made up: nothing here may panic on them.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod arguments;
mod calling;
mod dynamic_tool;
mod error;
mod function_tool;
mod invoke;
pub mod limits;
mod outcome;
mod schema;
mod select;

pub use arguments::parse_arguments;
pub use calling::{CallStatus, FunctionCalling};
pub use dynamic_tool::DynamicTool;
pub use error::ToolBuildError;
pub use function_tool::FunctionTool;
pub use invoke::{ActionManagerExt, CallError, InvokeOptions, ToolCall, invoke_calls, invoke_tool};
pub use outcome::{ActionParticipants, CallOutcome};
pub use schema::{ArgSchema, function_schema};
pub use select::{ToolSelection, tool_schemas};
