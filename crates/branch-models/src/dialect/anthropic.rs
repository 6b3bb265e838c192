//! Anthropic Messages.
//!
//! Today this is the reference's request (its compat mode): the leading
//! system message hoisted to `system`, `max_tokens` defaulted, the payload
//! filtered to the Messages request model; the messages themselves go out
//! in chat-completions shape.

use branch_core::model::{ChatRequest, ModelConfig, RequestOptions};
use serde_json::{Map, Value};

/// Fields of the Anthropic Messages request model (§4.3).
const ANTHROPIC_FIELDS: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "system",
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
    "stream",
    "metadata",
    "tools",
    "tool_choice",
];

/// Anthropic's required `max_tokens` when none is configured.
pub const ANTHROPIC_DEFAULT_MAX_TOKENS: u64 = 8192;

/// The Messages body: `payload` (kwargs and call fields, merged) with the
/// system prompt, `messages`, `max_tokens` and `stream`.
pub fn build_body(
    config: &ModelConfig,
    request: &ChatRequest,
    stream: bool,
    mut payload: Map<String, Value>,
) -> Value {
    let mut messages = request.messages.as_slice();
    let mut system = None;
    if let Some(first) = messages.first().filter(|m| m.role == "system") {
        system = Some(first.content.clone());
        messages = &messages[1..];
    }
    payload.insert(
        "messages".into(),
        Value::Array(messages.iter().map(|m| m.to_value()).collect()),
    );
    if let Some(system) = system {
        payload.insert("system".into(), system);
    }
    if payload.get("max_tokens").is_none_or(Value::is_null) {
        payload.insert("max_tokens".into(), ANTHROPIC_DEFAULT_MAX_TOKENS.into());
    }
    if stream {
        payload.insert("stream".into(), true.into());
    }
    let fields: Vec<&str> = match &config.endpoint().request_options {
        RequestOptions::Custom(_) => config
            .endpoint()
            .request_options
            .field_names()
            .unwrap_or_default(),
        _ => ANTHROPIC_FIELDS.to_vec(),
    };
    payload.retain(|k, _| fields.contains(&k.as_str()));
    Value::Object(payload)
}
