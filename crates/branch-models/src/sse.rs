//! Server-sent events to normalised chunks (providers.md §8).

use branch_core::model::{ChatChunk, ChunkKind};
use serde_json::{Map, Value};

/// One normalised event: the chunk, and whether it says the call failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Normalized {
    /// The chunk.
    pub chunk: ChatChunk,
    /// The event reports a failed call (the stream fails at its end).
    pub call_failed: bool,
    /// The event is the protocol's end marker (`[DONE]`, `message_stop`).
    pub terminal: bool,
}

pub(crate) fn with_raw(kind: ChunkKind, raw: &Value) -> ChatChunk {
    let mut c = ChatChunk::new(kind);
    c.metadata.insert("raw".into(), raw.clone());
    c
}

pub(crate) fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// Does the event say the call failed?
fn failed(event_name: &str, obj: &Map<String, Value>) -> bool {
    let ty = obj.get("type").and_then(Value::as_str).unwrap_or_default();
    event_name == "error"
        || matches!(
            ty,
            "error" | "response.error" | "response.failed" | "turn.failed" | "failed"
        )
        || ty.ends_with(".failed")
        || obj.get("error").is_some_and(|e| !e.is_null())
        || obj.get("is_error") == Some(&Value::Bool(true))
        || obj.get("status").and_then(Value::as_str) == Some("failed")
        || obj
            .get("choices")
            .and_then(|c| c.pointer("/0/finish_reason"))
            .and_then(Value::as_str)
            == Some("error")
}

/// An event whose data is neither JSON nor the `[DONE]` marker: the
/// providers' protocols carry only JSON, so such an event is a malformed
/// reply, never text of the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotJson;

impl std::fmt::Display for NotJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an event of the stream is not JSON")
    }
}

impl std::error::Error for NotJson {}

/// A protocol's own events: the chunk for an event object of that
/// protocol, `None` for an event it does not know (kept as `system`).
pub(crate) type ProtocolChunk = fn(&Value, &Map<String, Value>) -> Option<ChatChunk>;

/// Normalises one SSE event of any protocol (`event_name` is `message`
/// when unnamed): every protocol's events are tried in turn. A dialect
/// that knows its protocol reads its events with that protocol alone.
pub fn normalize(event_name: &str, data: &str) -> Result<Normalized, NotJson> {
    normalize_with(event_name, data, any_protocol)
}

/// Normalises one SSE event: the shared part (the `[DONE]` marker, JSON,
/// failure and error events, end markers), then `protocol`'s own events.
pub(crate) fn normalize_with(
    event_name: &str,
    data: &str,
    protocol: ProtocolChunk,
) -> Result<Normalized, NotJson> {
    if data.trim() == "[DONE]" {
        let mut c = ChatChunk::new(ChunkKind::Result);
        c.metadata.insert("done".into(), true.into());
        return Ok(Normalized {
            chunk: c,
            call_failed: false,
            terminal: true,
        });
    }
    let raw = serde_json::from_str::<Value>(data).map_err(|_| NotJson)?;
    let Some(obj) = raw.as_object() else {
        return Ok(Normalized {
            chunk: with_raw(ChunkKind::System, &raw),
            call_failed: false,
            terminal: false,
        });
    };
    let call_failed = failed(event_name, obj);
    let ty = obj.get("type").and_then(Value::as_str).unwrap_or_default();
    // The other protocols' end markers, for callers of the generic decoder.
    let terminal = matches!(ty, "message_stop" | "response.completed");
    let chunk = if matches!(ty, "error" | "response.error") || event_name == "error" {
        let mut c = with_raw(ChunkKind::Error, &raw);
        c.is_error = true;
        c.content = str_at(&raw, "/error/message")
            .or_else(|| str_at(&raw, "/message"))
            .map(str::to_owned);
        c
    } else if let Some(c) = protocol(&raw, obj) {
        c
    } else {
        with_raw(ChunkKind::System, &raw)
    };
    Ok(Normalized {
        chunk,
        call_failed,
        terminal,
    })
}

/// The protocol-specific events of the generic decoder: chat completions
/// (Anthropic Messages and OpenAI Responses events are decoded by their
/// own dialects, `dialect::anthropic` and `dialect::responses`).
fn any_protocol(raw: &Value, obj: &Map<String, Value>) -> Option<ChatChunk> {
    crate::dialect::openai_chat::chunk_of(raw, obj)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn n(name: &str, data: &str) -> Normalized {
        normalize(name, data).unwrap()
    }

    #[test]
    fn table() {
        let role = n(
            "message",
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
        );
        assert_eq!(role.chunk.kind, ChunkKind::System);
        let text = n("message", r#"{"choices":[{"delta":{"content":"Hi"}}]}"#);
        assert_eq!(
            (
                text.chunk.kind,
                text.chunk.content.as_deref(),
                text.chunk.is_delta
            ),
            (ChunkKind::Text, Some("Hi"), true)
        );
        let tool = n(
            "message",
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"f","arguments":"{\"a\""}}]}}]}"#,
        );
        assert_eq!(tool.chunk.kind, ChunkKind::ToolUse);
        assert_eq!(tool.chunk.tool_input, Some(json!({"arguments": "{\"a\""})));
        let usage = n("message", r#"{"choices":[],"usage":{"prompt_tokens":1}}"#);
        assert_eq!(usage.chunk.kind, ChunkKind::Result);
        let done = n("message", "[DONE]");
        assert!(done.terminal);
        assert_eq!(done.chunk.to_value()["metadata"], json!({"done": true}));
        let err = n(
            "error",
            r#"{"type":"error","error":{"message":"overloaded"}}"#,
        );
        assert!(err.call_failed && err.chunk.is_error);
        assert_eq!(normalize("message", "not json"), Err(NotJson));
        assert_eq!(normalize("message", ""), Err(NotJson));
        let fin = n(
            "message",
            r#"{"choices":[{"delta":{},"finish_reason":"error"}]}"#,
        );
        assert!(fin.call_failed);
    }
}
