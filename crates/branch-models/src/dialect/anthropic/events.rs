//! Anthropic replies: a whole Messages reply, and the server-sent events
//! of a streamed one, in the deltas the verbs consume.
//!
//! Streaming events (<https://docs.claude.com/en/docs/build-with-claude/streaming>):
//! `message_start` (model, input usage), `content_block_start` (a text,
//! `tool_use`, `thinking` or `redacted_thinking` block at `index`),
//! `content_block_delta` (`text_delta`, `input_json_delta`,
//! `thinking_delta`, `signature_delta`), `content_block_stop`,
//! `message_delta` (`stop_reason`, cumulative usage), `message_stop` (the
//! end marker), `ping`, `error`. Tool-call deltas carry the content
//! block's `index`, which is what [`StreamAccumulator`] assembles calls
//! by; thinking deltas carry it as [`thinking_chunk::BLOCK_INDEX`].
//!
//! [`StreamAccumulator`]: branch_core::model::StreamAccumulator

use branch_core::model::{ChatChunk, ChatResponse, ChunkKind, ToolCall, thinking_chunk};
use serde_json::{Value, json};

use crate::sse::{Normalized, NotJson};

fn with_raw(kind: ChunkKind, raw: &Value) -> ChatChunk {
    let mut c = ChatChunk::new(kind);
    c.metadata.insert("raw".into(), raw.clone());
    c
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// Normalises one event of a Messages stream (`event_name` is `message`
/// when the event is unnamed; the data's `type` decides).
pub fn normalize_event(event_name: &str, data: &str) -> Result<Normalized, NotJson> {
    let raw = serde_json::from_str::<Value>(data).map_err(|_| NotJson)?;
    let ty = str_at(&raw, "/type").unwrap_or_default();
    let index = raw.get("index").and_then(Value::as_u64);
    let mut call_failed = false;
    let mut terminal = false;
    let chunk = match ty {
        "error" => error_chunk(&raw, &mut call_failed),
        _ if event_name == "error" => error_chunk(&raw, &mut call_failed),
        "message_stop" => {
            terminal = true;
            let mut c = with_raw(ChunkKind::Result, &raw);
            c.metadata.insert("done".into(), true.into());
            c
        }
        "content_block_start" => block_start(&raw, index),
        "content_block_delta" => block_delta(&raw, index),
        // message_start, message_delta (read from `raw` by the
        // accumulator: model, usage, stop_reason), content_block_stop,
        // ping, and any event type added later.
        _ => with_raw(ChunkKind::System, &raw),
    };
    Ok(Normalized {
        chunk,
        call_failed,
        terminal,
    })
}

fn error_chunk(raw: &Value, call_failed: &mut bool) -> ChatChunk {
    *call_failed = true;
    let mut c = with_raw(ChunkKind::Error, raw);
    c.is_error = true;
    c.content = str_at(raw, "/error/message")
        .or_else(|| str_at(raw, "/message"))
        .map(str::to_owned);
    c
}

fn thinking(raw: &Value, index: Option<u64>) -> ChatChunk {
    let mut c = with_raw(ChunkKind::Thinking, raw);
    c.is_delta = true;
    if let Some(i) = index {
        c.metadata
            .insert(thinking_chunk::BLOCK_INDEX.into(), i.into());
    }
    c
}

fn block_start(raw: &Value, index: Option<u64>) -> ChatChunk {
    match str_at(raw, "/content_block/type") {
        Some("tool_use") => {
            let mut c = with_raw(ChunkKind::ToolUse, raw);
            c.tool_name = str_at(raw, "/content_block/name").map(str::to_owned);
            c.tool_id = str_at(raw, "/content_block/id").map(str::to_owned);
            // The input arrives as `input_json_delta`s; a server that sends
            // it whole at the start (non-empty) is taken at its word.
            let start = match raw.pointer("/content_block/input") {
                Some(Value::Object(o)) if !o.is_empty() => Value::Object(o.clone()).to_string(),
                _ => String::new(),
            };
            c.tool_input = Some(json!({"arguments": start}));
            c.is_delta = true;
            c
        }
        Some("thinking") => {
            let mut c = thinking(raw, index);
            c.content = str_at(raw, "/content_block/thinking").map(str::to_owned);
            if let Some(sig) = str_at(raw, "/content_block/signature").filter(|s| !s.is_empty()) {
                c.metadata
                    .insert(thinking_chunk::SIGNATURE.into(), sig.into());
            }
            c
        }
        Some("redacted_thinking") => {
            let mut c = thinking(raw, index);
            c.is_delta = false;
            let data = str_at(raw, "/content_block/data").unwrap_or_default();
            c.metadata.insert(
                thinking_chunk::BLOCK.into(),
                json!({"type": "redacted_thinking", "data": data}),
            );
            c
        }
        Some("text") => match str_at(raw, "/content_block/text").filter(|t| !t.is_empty()) {
            Some(text) => {
                let mut c = with_raw(ChunkKind::Text, raw);
                c.content = Some(text.to_owned());
                c.is_delta = true;
                c
            }
            None => with_raw(ChunkKind::System, raw),
        },
        _ => with_raw(ChunkKind::System, raw),
    }
}

fn block_delta(raw: &Value, index: Option<u64>) -> ChatChunk {
    match str_at(raw, "/delta/type") {
        Some("text_delta") => {
            let mut c = with_raw(ChunkKind::Text, raw);
            c.content = str_at(raw, "/delta/text").map(str::to_owned);
            c.is_delta = true;
            c
        }
        Some("input_json_delta") => {
            let mut c = with_raw(ChunkKind::ToolUse, raw);
            c.tool_input =
                Some(json!({"arguments": str_at(raw, "/delta/partial_json").unwrap_or_default()}));
            c.is_delta = true;
            c
        }
        Some("thinking_delta") => {
            let mut c = thinking(raw, index);
            c.content = str_at(raw, "/delta/thinking").map(str::to_owned);
            c
        }
        Some("signature_delta") => {
            let mut c = thinking(raw, index);
            if let Some(sig) = str_at(raw, "/delta/signature") {
                c.metadata
                    .insert(thinking_chunk::SIGNATURE.into(), sig.into());
            }
            c
        }
        _ => with_raw(ChunkKind::System, raw),
    }
}

/// Maps a whole Messages reply: text blocks joined, `tool_use` blocks as
/// tool calls, thinking kept, `stop_reason`, usage with its cache counts.
/// A `tool_use` block whose `input` is not an object keeps that input's
/// JSON text (empty when absent), so the call fails as unreadable rather
/// than running with invented arguments.
pub fn decode_reply(raw: Value) -> ChatResponse {
    let mut r = ChatResponse::from_raw(raw);
    if let Some(Value::Array(blocks)) = r.raw.get("content") {
        r.tool_calls = blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
            .map(|b| {
                let s = |k: &str| b.get(k).and_then(Value::as_str).unwrap_or_default();
                ToolCall {
                    id: s("id").to_owned(),
                    name: s("name").to_owned(),
                    arguments: b.get("input").map(Value::to_string).unwrap_or_default(),
                }
            })
            .collect();
    }
    r
}
