//! Every cap and deadline of the MCP client and server, with the reason
//! beside it. Documented in `docs/security.md` ("MCP servers"); the
//! per-server ones can be changed through [`crate::McpPolicy`].

use std::time::Duration;

/// Longest wait for a server to answer `initialize` (and for an HTTP
/// server's first reply): a server that hangs at start must not hold a
/// conversation hostage.
pub const INIT_TIMEOUT: Duration = Duration::from_secs(20);

/// Default deadline of one `tools/call`; the call is cancelled
/// (`notifications/cancelled`) when it passes. Long enough for a tool that
/// searches or builds, short enough that a stuck server is noticed.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// Longest per-call deadline a policy may set: a day-long call is a bug.
pub const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(3600);

/// Deadline of `ping`, `tools/list` pages and `resources/*` requests.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a stdio server gets to exit after its stdin is closed before it
/// is sent SIGTERM, and again before SIGKILL (the MCP shutdown sequence).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Longest a served call waits for its client's person to answer a
/// question put to them (MCP elicitation, [`crate::Confirmer`]): a person
/// reads and decides in minutes, and a client that never answers must not
/// hold the conversation. Past it the question counts as unanswered.
pub const CONFIRM_DEADLINE: Duration = Duration::from_secs(600);

/// Most a tool call's deadline is extended by the time its server's
/// questions wait on the person (see `answer_clock.rs`): three questions
/// left open to their [`CONFIRM_DEADLINE`]. A server that asks again and
/// again cannot hold a call past its deadline plus this.
pub const MAX_ANSWER_PAUSE: Duration = Duration::from_secs(1800);

/// Largest single JSON-RPC message read from a server (one stdio line, one
/// HTTP body, one SSE event): larger is refused and ends the connection,
/// so a hostile server cannot exhaust memory. The server half drops a
/// client's larger line unread (rmcp's transport does, and goes on).
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;

/// Default cap on one tool result as it enters the conversation (its JSON
/// form): every byte is sent to the model again on each later request.
pub const MAX_RESULT_BYTES: usize = 1024 * 1024;

/// Default cap on the tools one server may register: each schema is sent
/// with every request, and providers refuse long tool lists.
pub const MAX_TOOLS_PER_SERVER: usize = 128;

/// Cap on the tools all servers of one configuration register together.
pub const MAX_TOOLS_TOTAL: usize = 256;

/// Most `tools/list` / `resources/list` pages followed: a server that
/// always returns a next cursor must not loop us forever.
pub const MAX_LIST_PAGES: usize = 64;

/// Largest configuration file read (`{"mcpServers": ...}`).
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// Most servers one configuration may name.
pub const MAX_SERVERS: usize = 64;

/// Bytes of a stdio server's stderr kept for error messages (the tail);
/// the rest is logged at debug level and dropped.
pub const STDERR_TAIL_BYTES: usize = 4096;

/// Bytes of an HTTP error body kept for the error message.
pub const MAX_ERROR_BODY_BYTES: usize = 4096;

/// Bytes of a server's JSON-RPC error message kept (its head, secrets
/// redacted first): the message becomes a failed call's text, which the
/// conversation keeps and sends again with every later request.
pub const MAX_REMOTE_ERROR_BYTES: usize = 4096;

/// Default cap on the text one resource provider injects per request,
/// before the provider registry's own token budget applies.
pub const MAX_RESOURCE_TEXT_BYTES: usize = 256 * 1024;

/// Least time between two progress notifications of one served call: a
/// streamed answer reports on every token, and a client's display cannot
/// show more than a few a second. A report within it replaces the unsent
/// one before it.
pub const SERVED_PROGRESS_INTERVAL: Duration = Duration::from_millis(200);

/// Longest progress message of a served call, in bytes (cut at a
/// character boundary): a message names a tool and a count, and a tool's
/// own progress note is not the client's to receive whole.
pub const MAX_SERVED_PROGRESS_BYTES: usize = 512;

/// Connections `serve_http` holds open at once; the next waits in the
/// listen queue until one closes. Each holds a task and buffers, and a
/// client that opens thousands must not take the process's descriptors.
pub const MAX_HTTP_CONNECTIONS: usize = 64;

/// MCP sessions `serve_http` keeps at once; an `initialize` beyond it is
/// answered 503. Each session holds a task and its queues until it is
/// closed or idles out.
pub const MAX_HTTP_SESSIONS: usize = 32;

/// Longest wait for a request's head over HTTP, an idle keep-alive
/// connection's wait for its next request included: a client that opens
/// connections and sends nothing must not hold them.
pub const HTTP_HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest wait for a request's whole body once its head is in: a
/// question of [`MAX_MESSAGE_BYTES`] arrives in seconds, and one sent a
/// byte at a time must not hold a session's request open.
pub const HTTP_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// A session no request has touched for this long is closed (rmcp's
/// default): a client that went away without `DELETE` leaves nothing
/// behind for long.
pub const HTTP_SESSION_IDLE: Duration = Duration::from_secs(300);

/// Largest request head (request line and headers) read over HTTP: an MCP
/// request's headers are a few hundred bytes.
pub const MAX_HTTP_HEAD_BYTES: usize = 64 * 1024;

/// How long open connections get to finish when `serve_http` is told to
/// stop, after every session is closed.
pub const HTTP_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
