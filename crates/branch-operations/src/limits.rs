//! The caps this crate puts on what a local CLI agent sends back (see
//! `docs/security.md`, "Tool arguments and local programs").

/// The longest line of a CLI agent's `stream-json` output. One line is one
/// event; a tool result carrying a large file can take megabytes, so the
/// cap is generous, but an agent that writes without newlines fails the
/// turn here instead of growing memory without bound.
pub const MAX_CLI_LINE_BYTES: usize = 16 * 1024 * 1024;

/// All bytes a CLI agent may write in one turn. Every event of the turn is
/// kept until the turn is recorded (whole, or not at all), so an agent that
/// never stops writing short lines fails the turn here instead of growing
/// memory without bound; a long agentic turn that reads many large files
/// stays far below it.
pub const MAX_CLI_TURN_BYTES: usize = 256 * 1024 * 1024;

/// The longest a CLI agent may stay silent when the caller set no
/// `RunOptions::idle_timeout`: the reference's CLI idle window. An agent
/// that hangs without writing is killed here instead of being waited on
/// forever.
pub const CLI_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// The most messages one CLI agent turn may record. Each tool use costs a
/// request and a response (and the text before it a reply), and a message
/// takes far more memory than the few dozen bytes of output that make one,
/// so the byte cap alone would let an agent's turn grow to gigabytes. A
/// long agentic turn makes hundreds of tool calls; this is a hundred times
/// that.
pub const MAX_CLI_TURN_MESSAGES: usize = 65_536;

/// The most of an agent's own error text (an `error` event's message, a
/// failed `result`) kept in the turn's error: it is shown and logged, and
/// one line of output may hold megabytes.
pub const MAX_CLI_ERROR_BYTES: usize = 4096;
