//! OpenAI chat completions: the protocol of OpenAI and of every
//! compatible server (Ollama, vLLM, llama.cpp, OpenRouter, Groq ...).
//! Our compiled messages are already in its shape.

use branch_core::model::{
    ChatChunk, ChatMessage, ChatRequest, ChunkKind, ModelConfig, ReasoningBlock,
};
use serde_json::{Map, Value, json};

use super::{INTERNAL_KEYS, openai_reasoning_model};
use crate::sse::{self, Normalized, NotJson};

/// Does the provider require an assistant turn's `reasoning_content` back
/// when that turn called tools? DeepSeek does: "if the model performed a
/// tool call, the intermediate assistant's reasoning_content must ...
/// be passed back", or the next request fails with 400
/// (api-docs.deepseek.com/guides/thinking_mode, "Tool Calls"); without
/// a tool call it is ignored, so it is sent only then. Every other
/// chat-completions server gets no reasoning back: OpenAI's request
/// schema has no such field, and the compatible servers that stream it
/// (vLLM, llama.cpp) do not ask for it.
fn replays_reasoning_with_tool_calls(config: &ModelConfig) -> bool {
    config.provider_spec().is_some_and(|s| s.name == "deepseek")
}

/// The text of a message's unsigned thinking blocks (what a compatible
/// server sent as `reasoning_content`), in order.
fn unsigned_thinking(m: &ChatMessage) -> String {
    m.reasoning
        .iter()
        .filter_map(|b| match b {
            ReasoningBlock::Thinking {
                text,
                signature: None,
            } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The chat-completions body: `payload` (kwargs and call fields, merged)
/// with `messages` and `stream`, filtered to the endpoint's request model.
pub fn build_body(
    config: &ModelConfig,
    request: &ChatRequest,
    stream: bool,
    mut payload: Map<String, Value>,
) -> Value {
    let developer = config.model_name().is_some_and(openai_reasoning_model)
        || payload
            .get("model")
            .and_then(Value::as_str)
            .is_some_and(openai_reasoning_model);
    let replay = replays_reasoning_with_tool_calls(config);
    let messages = request
        .messages
        .iter()
        .map(|m| {
            let mut v = m.to_value();
            if developer && m.role == "system" {
                v["role"] = "developer".into();
            }
            if replay && m.role == "assistant" && m.extra.contains_key("tool_calls") {
                if let Value::Object(obj) = &mut v {
                    obj.insert("reasoning_content".into(), unsigned_thinking(m).into());
                }
            }
            v
        })
        .collect();
    payload.insert("messages".into(), Value::Array(messages));
    if stream {
        payload.insert("stream".into(), true.into());
    }
    if config.provider_spec().is_some_and(|s| s.name == "ollama") {
        payload.shift_remove("reasoning_effort");
    }
    match config.endpoint().request_options.field_names() {
        Some(fields) => payload.retain(|k, _| fields.contains(&k.as_str())),
        None => payload.retain(|k, _| !INTERNAL_KEYS.contains(&k.as_str())),
    }
    Value::Object(payload)
}

/// The reasoning text of a streamed delta or a whole message: DeepSeek,
/// vLLM and llama.cpp name it `reasoning_content`, OpenRouter and newer
/// vLLM `reasoning`. Empty text is no reasoning.
pub(crate) fn reasoning_text(delta_or_message: &Value) -> Option<&str> {
    ["reasoning_content", "reasoning"]
        .iter()
        .find_map(|k| delta_or_message.get(*k).and_then(Value::as_str))
        .filter(|t| !t.is_empty())
}

/// Normalises one server-sent event of a chat-completions stream.
pub fn normalize_event(event_name: &str, data: &str) -> Result<Normalized, NotJson> {
    sse::normalize_with(event_name, data, chunk_of)
}

/// The chunk of one chat-completions event object: a text delta, a
/// reasoning delta ([`ChunkKind::Thinking`], no block index: the deltas
/// build one unsigned thinking block), a tool-call delta, or the final
/// usage-only event. `None` for anything else (kept as `system`).
pub(crate) fn chunk_of(raw: &Value, obj: &Map<String, Value>) -> Option<ChatChunk> {
    let delta = raw.pointer("/choices/0/delta");
    if let Some(text) = delta
        .and_then(|d| d.get("content"))
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
    {
        let mut c = sse::with_raw(ChunkKind::Text, raw);
        c.content = Some(text.to_owned());
        c.is_delta = true;
        return Some(c);
    }
    if let Some(text) = delta.and_then(reasoning_text) {
        let mut c = sse::with_raw(ChunkKind::Thinking, raw);
        c.content = Some(text.to_owned());
        c.is_delta = true;
        return Some(c);
    }
    if let Some(tc) = delta.and_then(|d| d.pointer("/tool_calls/0")) {
        let mut c = sse::with_raw(ChunkKind::ToolUse, raw);
        c.tool_name = sse::str_at(tc, "/function/name").map(str::to_owned);
        c.tool_id = sse::str_at(tc, "/id").map(str::to_owned);
        c.tool_input =
            Some(json!({"arguments": sse::str_at(tc, "/function/arguments").unwrap_or_default()}));
        c.is_delta = true;
        return Some(c);
    }
    let no_choices = obj
        .get("choices")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty);
    let usage = obj.get("usage").filter(|u| !u.is_null())?;
    if !no_choices {
        return None;
    }
    let mut c = sse::with_raw(ChunkKind::Result, raw);
    c.metadata.insert("usage".into(), usage.clone());
    Some(c)
}
