//! Provider request bodies and error classification (providers.md §4, §5.3).
//!
//! One file per wire protocol: [`openai_chat`] (every chat-completions
//! server), [`anthropic`] (Messages) and [`responses`] (OpenAI Responses). Each builds the request body from
//! the compiled [`ChatRequest`]; what is shared (the keys never sent, the
//! one-pass serialization with its token estimate, auth headers, error
//! classification) stays here.

pub mod anthropic;
pub mod openai_chat;
mod ranges;
pub mod responses;

use branch_core::model::registry::WireProtocol;
use branch_core::model::{
    AuthType, BodyWriter, ChatRequest, ChatResponse, ModelConfig, ModelError, ModelErrorKind,
    Punct, RequestBody, TokenCount,
};
use serde_json::{Map, Value};

pub use anthropic::ANTHROPIC_DEFAULT_MAX_TOKENS;

use crate::sse::{Normalized, NotJson};

/// Keys never sent when the endpoint has no request model (§4.1).
pub(crate) const INTERNAL_KEYS: &[&str] = &[
    "provider",
    "base_url",
    "endpoint",
    "endpoint_params",
    "api_key",
    "queue_capacity",
    "capacity_refresh_time",
    "invoke_with_endpoint",
    "extra_headers",
    "headers",
    "include_token_usage_to_model",
    "chat_model",
    "imodel",
    "branch",
    "aggregation_sources",
    "aggregation_count",
    "action_strategy",
    "parse_model",
    "actions",
    "return_operative",
    "request_model",
    "operative_model",
    "prompt_caching",
    "system_blocks",
];

/// The wire protocol of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI chat completions and every OpenAI-compatible server.
    OpenAiChat,
    /// Anthropic Messages (native).
    Anthropic,
    /// OpenAI Responses.
    Responses,
}

impl Dialect {
    /// The dialect of a configuration: the registry names its endpoint's
    /// wire protocol (chat completions for an unregistered provider).
    pub fn of(config: &ModelConfig) -> Self {
        match config.wire_protocol() {
            WireProtocol::AnthropicMessages => Self::Anthropic,
            WireProtocol::OpenAiResponses => Self::Responses,
            _ => Self::OpenAiChat,
        }
    }
}

impl Dialect {
    /// Maps a complete (non-streamed) 2xx reply of this protocol.
    pub fn decode_reply(self, raw: Value) -> ChatResponse {
        match self {
            Self::Responses => responses::decode_reply(raw),
            Self::Anthropic => anthropic::decode_reply(raw),
            Self::OpenAiChat => ChatResponse::from_raw(raw),
        }
    }

    /// For a 2xx reply of this protocol that reports a failure: the
    /// effective HTTP status to classify it by.
    pub fn reply_error_status(self, body: &Value, http_status: u16) -> Option<u16> {
        match self {
            Self::OpenAiChat => error_envelope_status(body, http_status),
            Self::Responses => responses::failed_reply_status(body, http_status),
            Self::Anthropic => None,
        }
    }

    /// Normalises one server-sent event of this protocol's stream
    /// (`event_name` is `message` when the event is unnamed).
    pub fn normalize_event(self, event_name: &str, data: &str) -> Result<Normalized, NotJson> {
        match self {
            Self::Responses => responses::normalize_event(event_name, data),
            Self::OpenAiChat => openai_chat::normalize_event(event_name, data),
            Self::Anthropic => anthropic::normalize_event(event_name, data),
        }
    }
}

/// Builds the JSON body sent for `request` (see [`try_build_body`]); a
/// request the dialect cannot translate has no body: `null`, and sending
/// it fails with the reason.
pub fn build_body(config: &ModelConfig, request: &ChatRequest, stream: bool) -> Value {
    try_build_body(config, request, stream).unwrap_or(Value::Null)
}

/// Builds the JSON body sent for `request`: the model's `kwargs`, updated
/// with the request's fields, then the dialect's own translation. Errors
/// when the request has no faithful form in the dialect (an Anthropic
/// image that is neither a data URL nor http(s), tool-call arguments that
/// are not a JSON object ...).
pub fn try_build_body(
    config: &ModelConfig,
    request: &ChatRequest,
    stream: bool,
) -> Result<Value, ModelError> {
    let payload = merged_payload(config, &request.fields, stream);
    let dialect = Dialect::of(config);
    let body = match dialect {
        Dialect::OpenAiChat => openai_chat::build_body(config, request, stream, payload),
        Dialect::Responses => responses::build_body(config, request, stream, payload),
        Dialect::Anthropic => {
            anthropic::build_body(config, request, stream, payload).map_err(|reason| {
                error(
                    config,
                    ModelErrorKind::BadRequest,
                    format!("the request has no Anthropic Messages form: {reason}"),
                )
            })?
        }
    };
    if let Value::Object(sent) = &body {
        let checked = match dialect {
            Dialect::OpenAiChat => openai_chat::check_ranges(config, sent),
            Dialect::Anthropic => anthropic::check_ranges(config, sent),
            Dialect::Responses => Ok(()),
        };
        checked.map_err(|reason| refused(config, &reason))?;
    }
    Ok(body)
}

/// A request its endpoint's request model refuses (see [`ranges`]).
pub(crate) fn refused(config: &ModelConfig, reason: &str) -> ModelError {
    error(
        config,
        ModelErrorKind::InvalidPayload,
        format!("the request is refused before it is sent: {reason}"),
    )
}

/// [`try_build_body`] serialized, with the token estimate of
/// [`serialize_counting`]; chat completions writes its messages straight
/// into the bytes (the same bytes) without building the body's `Value`.
pub fn try_build_body_bytes(
    config: &ModelConfig,
    request: &ChatRequest,
    stream: bool,
) -> Result<Result<RequestBody, serde_json::Error>, ModelError> {
    if Dialect::of(config) != Dialect::OpenAiChat {
        return try_build_body(config, request, stream).map(|b| serialize_counting(&b));
    }
    let payload = openai_chat::ChatPayload::new(
        config,
        merged_payload(config, &request.fields, stream),
        stream,
    );
    if let Some(reason) = payload.refusal() {
        return Err(refused(config, reason));
    }
    Ok(payload.write(request))
}

/// The chat-completions payload of a call with no fields of its own
/// (see [`openai_chat::ChatPayload`]).
pub fn chat_payload(config: &ModelConfig, stream: bool) -> openai_chat::ChatPayload {
    let merged = merged_payload(config, &Map::new(), stream);
    openai_chat::ChatPayload::new(config, merged, stream)
}

/// The model's `kwargs`, updated with a call's `fields` (`stream` only
/// for a streaming call).
fn merged_payload(
    config: &ModelConfig,
    fields: &Map<String, Value>,
    stream: bool,
) -> Map<String, Value> {
    let mut payload: Map<String, Value> = config.kwargs().clone();
    for (k, v) in fields {
        payload.insert(k.clone(), v.clone());
    }
    if !stream {
        payload.shift_remove("stream");
    }
    payload
}

/// OpenAI's reasoning models (the o-series and GPT-5): chat completions
/// sends their system messages with role `developer`; Responses asks for
/// their encrypted reasoning items.
pub(crate) fn openai_reasoning_model(model: &str) -> bool {
    let name = model.rsplit('/').next().unwrap_or(model);
    let name = name.strip_prefix("ft:").unwrap_or(name);
    ["o1", "o3", "o4", "gpt-5"]
        .iter()
        .any(|p| name.starts_with(p))
}

/// Payload parts counted by the input-token estimate (providers.md §9).
const COUNTED_PARTS: &[&str] = &[
    "system",
    "instructions",
    "messages",
    "input",
    "prompt",
    "tools",
    "response_format",
];

/// The JSON bytes of `body` (exactly `serde_json::to_vec`) and its rough
/// input-token estimate, unscaled: the characters of the counted parts
/// (a string part's own text, any other part's JSON text), 4 a token.
/// One pass: the estimate is read off the bytes as they are written.
pub fn serialize_counting(body: &Value) -> serde_json::Result<RequestBody> {
    let count = TokenCount::new();
    match body {
        Value::Object(map) => RequestBody::write_counting_sized(&count, 512, |w| {
            write_payload(w, map, None::<fn(&mut BodyWriter<'_>) -> _>)
        }),
        other => RequestBody::serialize_counting(other, &count),
    }
}

/// Writes a body's payload map as serde_json writes it, its counted parts
/// marked for the token estimate (see [`serialize_counting`]); `messages`,
/// when given, writes the value of the map's `messages` key (a
/// placeholder holding its place).
pub(crate) fn write_payload<F>(
    w: &mut BodyWriter<'_>,
    map: &Map<String, Value>,
    mut messages: Option<F>,
) -> serde_json::Result<()>
where
    F: FnOnce(&mut BodyWriter<'_>) -> serde_json::Result<()>,
{
    w.punct(Punct::BeginObject);
    for (i, (k, v)) in map.iter().enumerate() {
        if i > 0 {
            w.punct(Punct::Comma);
        }
        w.value(k)?;
        w.punct(Punct::Colon);
        let counted = COUNTED_PARTS.contains(&k.as_str());
        match v {
            _ if k == "messages" && messages.is_some() => {
                if let Some(write) = messages.take() {
                    if counted {
                        w.counted(write)?;
                    } else {
                        write(w)?;
                    }
                }
            }
            Value::String(text) if counted => {
                w.count().text(text);
                w.value(v)?;
            }
            _ if counted => w.counted(|w| w.value(v))?,
            _ => w.value(v)?,
        }
    }
    w.punct(Punct::EndObject);
    Ok(())
}

/// The auth header for `auth_type`, if any.
pub fn auth_header(auth_type: AuthType, key: &str) -> Option<(&'static str, String)> {
    match auth_type {
        AuthType::Bearer => Some(("authorization", format!("Bearer {key}"))),
        AuthType::XApiKey => Some(("x-api-key", key.to_owned())),
        AuthType::ApiKeyHeader => Some(("api-key", key.to_owned())),
        AuthType::None => None,
    }
}

/// The provider's error message and code/type from an error body.
fn error_details(body: &Value) -> (Option<String>, Option<String>, Option<String>) {
    let err = body.get("error").unwrap_or(body);
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| err.as_str())
        .map(str::to_owned);
    let code = err.get("code").and_then(|c| match c {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    });
    let kind = err.get("type").and_then(Value::as_str).map(str::to_owned);
    (message, code, kind)
}

fn mentions(hay: Option<&str>, needles: &[&str]) -> bool {
    hay.is_some_and(|h| {
        let h = h.to_ascii_lowercase();
        needles.iter().any(|n| h.contains(n))
    })
}

/// Classifies a failed HTTP reply.
pub fn classify(status: u16, body_text: &str) -> (ModelErrorKind, String) {
    let body: Value = serde_json::from_str(body_text).unwrap_or(Value::Null);
    let (message, code, kind) = error_details(&body);
    let message = message.unwrap_or_else(|| truncate(body_text, 500));
    let quota = [code.as_deref(), kind.as_deref()].iter().any(|c| {
        matches!(
            c,
            Some("insufficient_quota" | "quota_exceeded" | "billing_hard_limit_reached")
        )
    });
    let context = mentions(code.as_deref(), &["context_length"])
        || mentions(
            Some(&message),
            &[
                "context length",
                "context_length",
                "maximum context",
                "prompt is too long",
                "too many tokens",
            ],
        );
    let class = match status {
        429 if quota => ModelErrorKind::Quota,
        429 => ModelErrorKind::RateLimited,
        402 => ModelErrorKind::Quota,
        401 | 403 => ModelErrorKind::Auth,
        408 => ModelErrorKind::Transient,
        500..=599 => ModelErrorKind::Transient,
        400..=499 if context => ModelErrorKind::ContextLength,
        _ if quota => ModelErrorKind::Quota,
        _ => ModelErrorKind::BadRequest,
    };
    (class, message)
}

/// For a 200 reply to a chat request: a bare error envelope (`error` set,
/// no `choices`, no `object`) is a failure; returns its effective status.
pub fn error_envelope_status(body: &Value, http_status: u16) -> Option<u16> {
    let obj = body.as_object()?;
    let err = obj.get("error").filter(|e| !e.is_null())?;
    if obj.contains_key("choices") || obj.contains_key("object") {
        return None;
    }
    let code = err.get("code").and_then(|c| match c {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    });
    Some(match code {
        Some(c) if (400..=599).contains(&c) => u16::try_from(c).unwrap_or(http_status),
        _ => http_status,
    })
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// A `ModelError` for `config`.
pub fn error(config: &ModelConfig, kind: ModelErrorKind, message: impl Into<String>) -> ModelError {
    ModelError::new(kind, config.provider(), config.model_name(), message)
}

#[cfg(test)]
mod tests {
    use branch_core::model::ChatMessage;
    use serde_json::json;

    use super::*;

    #[test]
    fn one_pass_serialization_matches_to_vec_and_the_estimate() {
        let body = serde_json::json!({
            "model": "gpt-4.1-mini",
            "temperature": 0.5,
            "messages": [{"role": "user", "content": "héllo \"quoted\" ✓\n"}],
            "system": "ünïcode",
            "tools": [],
        });
        let written = serialize_counting(&body).unwrap();
        assert_eq!(written.bytes().as_ref(), serde_json::to_vec(&body).unwrap());
        let tokens = written.counted();
        let chars: usize = ["messages", "tools"]
            .iter()
            .map(|k| body[*k].to_string().chars().count())
            .sum::<usize>()
            + "ünïcode".chars().count();
        assert_eq!(tokens, (chars as u64).div_ceil(4));
        let written = serialize_counting(&serde_json::json!([1])).unwrap();
        assert_eq!(
            (written.bytes().as_ref(), written.counted()),
            (&b"[1]"[..], 0)
        );
    }

    #[test]
    fn anthropic_body_matches_reference() {
        let config = ModelConfig::builder()
            .provider("anthropic")
            .model("claude-sonnet-4-5")
            .kwarg("temperature", 0.5)
            .build()
            .unwrap();
        let req = ChatRequest::new(vec![ChatMessage::user("Guidance: SYS\nInstruction: hi")])
            .with_field("top_k", 5)
            .with_field("response_format", json!({"type": "json_object"}));
        let body = build_body(&config, &req, false);
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"model":"claude-sonnet-4-5","temperature":0.5,"top_k":5,"messages":[{"role":"user","content":"Guidance: SYS\nInstruction: hi"}],"max_tokens":8192}"#
        );
        let with_system = ChatRequest::new(vec![ChatMessage::system("S"), ChatMessage::user("u")]);
        let body = build_body(&config, &with_system, true);
        assert_eq!(body["system"], "S");
        assert_eq!(body["messages"].as_array().unwrap().len(), 1);
        assert_eq!(body["stream"], true);
    }

    #[test]
    fn openai_body_filters_and_developer_role() {
        let config = ModelConfig::new("openai", "o3-mini").unwrap();
        let req = ChatRequest::new(vec![ChatMessage::system("S"), ChatMessage::user("u")])
            .with_field("temperature", 0.1)
            .with_field("branch", "x")
            .with_field("unknown_kw", 1);
        let body = build_body(&config, &req, false);
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"model":"o3-mini","temperature":0.1,"messages":[{"role":"developer","content":"S"},{"role":"user","content":"u"}]}"#
        );
        let generic = ModelConfig::builder()
            .provider("acme")
            .model("m")
            .base_url("https://x.example/v1")
            .build()
            .unwrap();
        let body = build_body(&generic, &req, false);
        assert_eq!(body["unknown_kw"], 1);
        assert!(body.get("branch").is_none());
    }

    #[test]
    fn classification() {
        let q = r#"{"error": {"message": "You exceeded your current quota", "type": "insufficient_quota", "code": "insufficient_quota"}}"#;
        assert_eq!(classify(429, q).0, ModelErrorKind::Quota);
        assert_eq!(classify(429, "{}").0, ModelErrorKind::RateLimited);
        assert_eq!(classify(401, "nope"), (ModelErrorKind::Auth, "nope".into()));
        assert_eq!(classify(503, "").0, ModelErrorKind::Transient);
        assert_eq!(classify(408, "").0, ModelErrorKind::Transient);
        let ctx = r#"{"error": {"message": "This model's maximum context length is 128000 tokens", "code": "context_length_exceeded"}}"#;
        assert_eq!(classify(400, ctx).0, ModelErrorKind::ContextLength);
        let bad = r#"{"error": {"message": "invalid request: mock refused", "type": "mock"}}"#;
        assert_eq!(
            classify(400, bad),
            (
                ModelErrorKind::BadRequest,
                "invalid request: mock refused".into()
            )
        );
        assert_eq!(
            error_envelope_status(&json!({"error": {"code": 503}}), 200),
            Some(503)
        );
        assert_eq!(
            error_envelope_status(&json!({"error": {"code": "x"}}), 200),
            Some(200)
        );
        assert_eq!(
            error_envelope_status(&json!({"error": null, "choices": []}), 200),
            None
        );
    }
}
