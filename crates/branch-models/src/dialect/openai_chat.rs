//! OpenAI chat completions: the protocol of OpenAI and of every
//! compatible server (Ollama, vLLM, llama.cpp, OpenRouter, Groq ...).
//! Our compiled messages are already in its shape.

use branch_core::model::{ChatRequest, ModelConfig};
use serde_json::{Map, Value};

use super::INTERNAL_KEYS;

/// Models whose system messages are sent with role `developer`.
fn uses_developer_role(model: &str) -> bool {
    let name = model.rsplit('/').next().unwrap_or(model);
    let name = name.strip_prefix("ft:").unwrap_or(name);
    ["o1", "o3", "o4", "gpt-5"]
        .iter()
        .any(|p| name.starts_with(p))
}

/// The chat-completions body: `payload` (kwargs and call fields, merged)
/// with `messages` and `stream`, filtered to the endpoint's request model.
pub fn build_body(
    config: &ModelConfig,
    request: &ChatRequest,
    stream: bool,
    mut payload: Map<String, Value>,
) -> Value {
    let developer = config.model_name().is_some_and(uses_developer_role)
        || payload
            .get("model")
            .and_then(Value::as_str)
            .is_some_and(uses_developer_role);
    let messages = request
        .messages
        .iter()
        .map(|m| {
            let mut v = m.to_value();
            if developer && m.role == "system" {
                v["role"] = "developer".into();
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
