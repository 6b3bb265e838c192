//! Caps and deadlines of the model layer: everything a server sends is
//! bounded in size and time. Each constant is the default; the ones a caller
//! may change have a setter on [`crate::IModelBuilder`] (and are listed with
//! their defaults in `docs/security.md`).

use std::time::Duration;

/// Default overall deadline of one model call, retries and the whole
/// stream included. The per-phase `timeout` of the endpoint only bounds
/// silence; a server that trickles keep-alive comments would otherwise hold
/// a turn forever. Ten minutes covers long reasoning replies of today's
/// models with room to spare. Change it with
/// [`crate::IModelBuilder::call_deadline`] (`lionagi chat --timeout SECS`).
pub const DEFAULT_CALL_DEADLINE: Duration = Duration::from_secs(600);

/// Default cap on the bytes of one reply (the body of an unstreamed reply,
/// or all bytes of a stream). The largest legitimate replies (a full
/// 128k-token completion with its JSON envelope, or a stream of per-token
/// events of it) stay well below 16 MiB; a hostile server is stopped long
/// before it can exhaust memory. Change it with
/// [`crate::IModelBuilder::max_reply_bytes`].
pub const DEFAULT_MAX_REPLY_BYTES: usize = 16 * 1024 * 1024;

/// Default cap on the tool calls of one reply. Providers issue a handful of
/// parallel calls per reply (dozens at most); every call is run, so a reply
/// asking for thousands is refused rather than executed. Change it with
/// [`crate::IModelBuilder::max_tool_calls`].
pub const DEFAULT_MAX_TOOL_CALLS: usize = 128;

/// Longest line of an event stream. One SSE line carries one JSON event;
/// the largest (a final `response.completed` repeating the whole reply) is
/// bounded by the reply cap, so a line may be as large as half of it before
/// it is refused.
pub const MAX_SSE_LINE_BYTES: usize = 8 * 1024 * 1024;

/// Largest event of an event stream (its `data:` lines joined). Same bound
/// as a line: an event is one JSON document.
pub const MAX_SSE_EVENT_BYTES: usize = 8 * 1024 * 1024;

/// Longest wait a `Retry-After`-style header may ask for, whatever the
/// retry policy says: a day. Larger waits saturate here (and are then
/// reported, not slept); negative, NaN and unreadable values are treated
/// as absent.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 60 * 60);

/// Longest delay, timeout or recovery time the model layer will ever
/// wait, whatever a configuration says (stored configurations above it are
/// refused on load by `branch-core`; programmatic ones are saturated here).
/// Thirty days: far beyond any sensible setting, far below what would
/// overflow a clock.
pub const MAX_CONFIG_WAIT: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// Redirects followed within one origin before the call fails.
pub const MAX_REDIRECTS: usize = 10;

/// Cap on the body of an error reply or an Ollama model listing kept for
/// the error message: enough for any provider's error document.
pub const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// The caps and deadline of one model's calls (defaults above; set with
/// [`crate::IModelBuilder`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    /// Overall deadline of one call, retries and the whole stream included.
    pub deadline: Duration,
    /// Bytes of one reply (unstreamed body, or all bytes of a stream).
    pub max_reply_bytes: usize,
    /// Tool calls in one reply.
    pub max_tool_calls: usize,
}

impl Default for CallLimits {
    fn default() -> Self {
        Self {
            deadline: DEFAULT_CALL_DEADLINE,
            max_reply_bytes: DEFAULT_MAX_REPLY_BYTES,
            max_tool_calls: DEFAULT_MAX_TOOL_CALLS,
        }
    }
}

/// Cap on an Ollama model listing (`GET /api/tags`) read before a call:
/// a few hundred bytes per installed model, so a megabyte is thousands of
/// models; a larger listing is ignored (the call itself then reports any
/// missing model).
pub const MAX_LISTING_BYTES: usize = 1024 * 1024;

/// A seconds value as a duration: `None` when not a positive finite number;
/// saturated at [`MAX_CONFIG_WAIT`]. Never panics (unlike
/// `Duration::from_secs_f64`).
pub fn seconds(secs: f64) -> Option<Duration> {
    if !(secs.is_finite() && secs > 0.0) {
        return None;
    }
    Some(Duration::try_from_secs_f64(secs).map_or(MAX_CONFIG_WAIT, |d| d.min(MAX_CONFIG_WAIT)))
}

/// A computed wait in seconds as a duration: zero for NaN, zero and
/// negative values; [`MAX_CONFIG_WAIT`] for infinite or larger ones.
pub fn saturating_wait(secs: f64) -> Duration {
    if secs.is_nan() || secs <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(secs).map_or(MAX_CONFIG_WAIT, |d| d.min(MAX_CONFIG_WAIT))
}

/// Token sequences the embedded model keeps evaluated between calls, per
/// loaded model (its prompt cache, llama.cpp's `cache_prompt`). Each holds
/// the keys and values of at most the context window: for
/// SmolLM2-135M, 45 KiB per token, so 90 MiB at the default 2,048 tokens.
/// Two cover a conversation plus one side call (a parse or a summary)
/// interleaved with it; more would trade memory for rarer reuse.
pub const LOCAL_PROMPT_CACHES: usize = 2;

/// Largest GGUF header (metadata and tensor directory) read. The largest
/// vocabularies in use (256k tokens with their scores and types, or 128k
/// tokens with 280k merges) take under 8 MiB; a header claiming more than
/// 64 MiB is not a model's, and its bytes are held in memory while read.
pub const MAX_GGUF_HEADER_BYTES: usize = 64 * 1024 * 1024;

/// Most metadata values in one GGUF header, array items included. The
/// largest vocabularies hold under a million (tokens, their types and
/// scores or merges); each value takes 32 bytes in memory, so the cap
/// bounds the parsed metadata at 128 MiB beside the header's bytes.
pub const MAX_GGUF_VALUES: u64 = 1 << 22;

/// Deepest nesting of GGUF metadata arrays. Models use flat arrays; the
/// cap bounds the reader's recursion.
pub const MAX_GGUF_ARRAY_DEPTH: u64 = 8;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_never_panics_and_saturates() {
        assert_eq!(seconds(1.5), Some(Duration::from_millis(1500)));
        assert_eq!(seconds(1e300), Some(MAX_CONFIG_WAIT));
        assert_eq!(seconds(f64::MAX), Some(MAX_CONFIG_WAIT));
        assert_eq!(seconds(f64::INFINITY), None);
        assert_eq!(seconds(f64::NAN), None);
        assert_eq!(seconds(-1.0), None);
        assert_eq!(seconds(0.0), None);
        assert_eq!(saturating_wait(f64::INFINITY), MAX_CONFIG_WAIT);
        assert_eq!(saturating_wait(1e300), MAX_CONFIG_WAIT);
        assert_eq!(saturating_wait(f64::NAN), Duration::ZERO);
        assert_eq!(saturating_wait(-1.0), Duration::ZERO);
        assert_eq!(saturating_wait(0.25), Duration::from_millis(250));
    }
}
