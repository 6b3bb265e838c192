//! The caps this crate puts on what a local CLI agent sends back (see
//! `docs/security.md`, "Tool arguments and local programs").

/// The longest line of a CLI agent's `stream-json` output. One line is one
/// event; a tool result carrying a large file can take megabytes, so the
/// cap is generous, but an agent that writes without newlines fails the
/// turn here instead of growing memory without bound.
pub const MAX_CLI_LINE_BYTES: usize = 16 * 1024 * 1024;
