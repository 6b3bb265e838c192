//! What can go wrong with an MCP server, each with the server's name and
//! never a secret (header and environment values are redacted before an
//! error is built; see [`crate::redact`]).

use std::time::Duration;

/// A failure of the MCP client or of a server it talks to.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The configuration file or value is malformed.
    #[error("MCP configuration: {0}")]
    Config(String),
    /// The policy refuses what the configuration asks for (a command not
    /// allowed, a bare name without PATH search, a guarded address).
    #[error("MCP server `{server}` refused: {reason}")]
    Refused {
        /// The server's name in the configuration.
        server: String,
        /// Why.
        reason: String,
    },
    /// The server could not be started or reached.
    #[error("MCP server `{server}` could not start: {reason}")]
    Start {
        /// The server's name.
        server: String,
        /// Why (with the tail of its stderr for a stdio server).
        reason: String,
    },
    /// A deadline passed.
    #[error("MCP server `{server}`: {what} did not finish within {limit:?}")]
    Timeout {
        /// The server's name.
        server: String,
        /// What was waited for.
        what: String,
        /// The deadline.
        limit: Duration,
    },
    /// The server broke the protocol (malformed JSON-RPC, an oversized
    /// message, an unexpected reply).
    #[error("MCP server `{server}` broke the protocol: {reason}")]
    Protocol {
        /// The server's name.
        server: String,
        /// What it sent.
        reason: String,
    },
    /// The connection ended (the server exited or hung up).
    #[error("MCP server `{server}` is gone: {reason}")]
    Closed {
        /// The server's name.
        server: String,
        /// What is known of why.
        reason: String,
    },
    /// The server answered a request with a JSON-RPC error.
    #[error("MCP server `{server}` answered {method} with an error: {message}")]
    Remote {
        /// The server's name.
        server: String,
        /// The request's method.
        method: String,
        /// The error's message.
        message: String,
    },
    /// A cap was reached.
    #[error("MCP server `{server}`: {what} exceeds the cap of {cap}")]
    Cap {
        /// The server's name.
        server: String,
        /// What was too big or too many.
        what: String,
        /// The cap.
        cap: usize,
    },
}
