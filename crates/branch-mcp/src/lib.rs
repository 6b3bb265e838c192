//! Model Context Protocol for lionagi branches.
//!
//! Charter: the MCP client and server of lionagi-rs, over the official Rust
//! SDK `rmcp`. It owns the transports (a stdio child process in its own
//! process group with only the configured environment; streamable HTTP
//! over `branch-models`' guarded reqwest client, falling back to the older
//! HTTP+SSE transport), the session with a server (initialize, version
//! negotiation, ping, paginated listings, calls with deadlines, progress
//! and cancellation, shutdown that reaps the child), the configuration
//! format (`{"mcpServers": ...}`) and the fail-closed [`McpPolicy`], MCP
//! tools behind `branch-actions`' dynamic-tool seam, resources as a
//! `branch-core` context provider, and the server half that offers a
//! conversation as an `ask` tool over stdio or Streamable HTTP
//! ([`HttpServing`]: token, host and origin checks, connection and session
//! caps, deadlines, shutdown). It must not know the verbs, storage or
//! the command line: answering a question is the caller's [`Ask`].
//!
//! ```no_run
//! # async fn demo(branch: &mut branch_core::Branch) -> Result<(), branch_mcp::McpError> {
//! use branch_mcp::{McpConfig, McpPolicy, McpServers};
//! let config = McpConfig::from_json_str(
//!     r#"{"mcpServers": {"files": {"command": "/usr/local/bin/files-server", "args": ["/srv"]}}}"#,
//! )?;
//! let policy = McpPolicy::new().allow_command("/usr/local/bin/files-server");
//! let servers = McpServers::connect(&config, &policy).await?;
//! servers.register(branch).await?; // every verb can now call the tools
//! servers.shutdown().await;
//! # Ok(()) }
//! ```

#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod answer_clock;
mod asking;
mod call;
mod config;
mod elicit;
mod elicit_url;
mod error;
mod http;
mod hub;
mod legacy_sse;
pub mod limits;
mod naming;
mod policy;
mod progress;
mod redact;
mod resources;
mod serve;
mod serve_confirm;
mod serve_http;
mod serve_http_body;
mod serve_progress;
mod session;
mod stdio;
mod tool;

pub use config::{McpConfig, ServerSpec, TransportSpec};
pub use elicit::{
    Asks, ElicitAnswer, ElicitHook, Elicitation, Field, FieldKind, Form, FormChoice,
    MAX_FORM_ANSWER_BYTES, MAX_FORM_CHOICES, MAX_FORM_FIELDS, MAX_FORM_TEXT_BYTES, TextFormat,
};
pub use elicit_url::{
    Address, AddressWarning, MAX_ELICITATION_ID_BYTES, MAX_URL_BYTES, MAX_URLS_PER_ERROR,
    URL_ELICITATION_REQUIRED,
};
pub use error::McpError;
pub use http::{GuardedHttp, HttpFailure};
pub use hub::{McpServers, McpToolInfo};
pub use naming::{assign as assign_names, sanitize as sanitize_name};
pub use policy::McpPolicy;
pub use progress::{Progress, ProgressHook};
pub use redact::{REDACTED, Secret, scrub};
pub use resources::McpResources;
pub use serve::{Ask, BranchServer, Cancelled};
pub use serve_confirm::{Choice, Confirmation, Confirmer, MAX_CONFIRM_MESSAGE_BYTES};
pub use serve_http::{HttpAccess, HttpLimits, HttpServing, MCP_PATH, MIN_TOKEN_BYTES};
pub use serve_progress::ProgressReporter;
pub use session::McpServer;
pub use tool::{CallEvent, CallHook, map_result};
