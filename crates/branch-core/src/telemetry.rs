//! Telemetry: the OpenTelemetry GenAI semantic conventions as `tracing`
//! spans.
//!
//! The attribute names below are the contract. They follow the
//! **OpenTelemetry GenAI semantic conventions v0.1.0** (the first release of
//! `open-telemetry/semantic-conventions-genai`, which depends on the general
//! semantic conventions v1.45.0 for `error.type` and `server.*`): the
//! inference span `{gen_ai.operation.name} {gen_ai.request.model}` (here
//! always `chat`), the tool span `execute_tool {gen_ai.tool.name}` and the
//! in-process agent span `invoke_agent [{gen_ai.agent.name}]`, which every
//! verb opens (the verb itself is the [`LIONAGI_OPERATION`] attribute).
//!
//! The library crates emit these spans through `tracing` only; field names
//! are exactly the attribute names, and the span name is the `otel.name`
//! field, which `tracing-opentelemetry` turns into the OpenTelemetry span
//! name. An exporter lives only in the umbrella crate (`lionagi`, feature
//! `otel`).
//!
//! Two things never appear: API keys and headers (no span has a field that
//! could hold one), and, unless the user opts in, message contents, tool
//! arguments and tool results. The opt-in is the environment variable
//! [`CAPTURE_CONTENT_ENV`] (`true`), as in the Python GenAI
//! instrumentations, or [`set_capture_content`].
//!
//! Attribute values that the conventions type as arrays or structured
//! values (`gen_ai.response.finish_reasons`, `gen_ai.request.stop_sequences`,
//! `gen_ai.input.messages` ...) are recorded as JSON text: `tracing` fields
//! carry scalars only, and the conventions allow JSON strings on spans.

use std::future::Future;
use std::sync::atomic::{AtomicU8, Ordering};

use serde_json::{Map, Value, json};

use crate::model::{ChatMessage, ChatRequest, ChatResponse, ModelErrorKind, Usage};

/// The span name (`tracing-opentelemetry`'s special field).
pub const OTEL_NAME: &str = "otel.name";
/// The span kind (`client`, `internal`; `tracing-opentelemetry`).
pub const OTEL_KIND: &str = "otel.kind";
/// The span status (`error`; `tracing-opentelemetry`).
pub const OTEL_STATUS_CODE: &str = "otel.status_code";

/// `gen_ai.operation.name`: `chat`, `execute_tool`, `invoke_agent`.
pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
/// `gen_ai.provider.name` (see [`provider_name`]).
pub const GEN_AI_PROVIDER_NAME: &str = "gen_ai.provider.name";
/// `gen_ai.conversation.id`: the branch id.
pub const GEN_AI_CONVERSATION_ID: &str = "gen_ai.conversation.id";
/// `gen_ai.agent.name`: the branch's name, when it has one.
pub const GEN_AI_AGENT_NAME: &str = "gen_ai.agent.name";
/// `gen_ai.request.model`.
pub const GEN_AI_REQUEST_MODEL: &str = "gen_ai.request.model";
/// `gen_ai.request.stream` (set only on streaming calls).
pub const GEN_AI_REQUEST_STREAM: &str = "gen_ai.request.stream";
/// `gen_ai.request.temperature`.
pub const GEN_AI_REQUEST_TEMPERATURE: &str = "gen_ai.request.temperature";
/// `gen_ai.request.max_tokens` (also from `max_completion_tokens`).
pub const GEN_AI_REQUEST_MAX_TOKENS: &str = "gen_ai.request.max_tokens";
/// `gen_ai.request.top_p`.
pub const GEN_AI_REQUEST_TOP_P: &str = "gen_ai.request.top_p";
/// `gen_ai.request.top_k`.
pub const GEN_AI_REQUEST_TOP_K: &str = "gen_ai.request.top_k";
/// `gen_ai.request.frequency_penalty`.
pub const GEN_AI_REQUEST_FREQUENCY_PENALTY: &str = "gen_ai.request.frequency_penalty";
/// `gen_ai.request.presence_penalty`.
pub const GEN_AI_REQUEST_PRESENCE_PENALTY: &str = "gen_ai.request.presence_penalty";
/// `gen_ai.request.seed`.
pub const GEN_AI_REQUEST_SEED: &str = "gen_ai.request.seed";
/// `gen_ai.request.stop_sequences` (JSON array text).
pub const GEN_AI_REQUEST_STOP_SEQUENCES: &str = "gen_ai.request.stop_sequences";
/// `gen_ai.request.choice.count` (set only when not 1).
pub const GEN_AI_REQUEST_CHOICE_COUNT: &str = "gen_ai.request.choice.count";
/// `gen_ai.output.type`: `json` when a response format is requested.
pub const GEN_AI_OUTPUT_TYPE: &str = "gen_ai.output.type";
/// `gen_ai.response.model`: the model the provider says it served.
pub const GEN_AI_RESPONSE_MODEL: &str = "gen_ai.response.model";
/// `gen_ai.response.id`.
pub const GEN_AI_RESPONSE_ID: &str = "gen_ai.response.id";
/// `gen_ai.response.finish_reasons` (JSON array text).
pub const GEN_AI_RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
/// `gen_ai.usage.input_tokens` (cache reads and writes included).
pub const GEN_AI_USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// `gen_ai.usage.output_tokens`.
pub const GEN_AI_USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// `gen_ai.usage.cache_read.input_tokens` (set when non-zero).
pub const GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
/// `gen_ai.usage.cache_write.input_tokens` (set when non-zero).
pub const GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS: &str = "gen_ai.usage.cache_write.input_tokens";
/// `gen_ai.tool.name`.
pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
/// `gen_ai.tool.call.id`.
pub const GEN_AI_TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
/// `gen_ai.tool.type`: always `function` (tools run in this process).
pub const GEN_AI_TOOL_TYPE: &str = "gen_ai.tool.type";
/// `error.type`: see [`model_error_type`] and [`tool_error`].
pub const ERROR_TYPE: &str = "error.type";
/// `server.address`: the provider's host.
pub const SERVER_ADDRESS: &str = "server.address";
/// `server.port`: the provider's port.
pub const SERVER_PORT: &str = "server.port";

/// Opt-in: the messages sent to the model (JSON text).
pub const GEN_AI_INPUT_MESSAGES: &str = "gen_ai.input.messages";
/// Opt-in: the messages the model returned (JSON text).
pub const GEN_AI_OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
/// Opt-in: the tool call's arguments (JSON text).
pub const GEN_AI_TOOL_CALL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
/// Opt-in: the tool call's result (JSON text).
pub const GEN_AI_TOOL_CALL_RESULT: &str = "gen_ai.tool.call.result";

/// Ours: the verb a span covers (`chat`, `communicate`, `operate`, `parse`,
/// `interpret`, `ReAct`, `run`, `act`).
pub const LIONAGI_OPERATION: &str = "lionagi.operation";
/// Ours: HTTP attempts made by one model call (1 = no retry).
pub const LIONAGI_ATTEMPTS: &str = "lionagi.attempts";
/// Ours: the HTTP status of the last attempt.
pub const HTTP_RESPONSE_STATUS_CODE: &str = "http.response.status_code";

/// `gen_ai.operation.name` of a model call.
pub const OP_CHAT: &str = "chat";
/// `gen_ai.operation.name` of a tool call.
pub const OP_EXECUTE_TOOL: &str = "execute_tool";
/// `gen_ai.operation.name` of a verb.
pub const OP_INVOKE_AGENT: &str = "invoke_agent";

/// The environment variable that opts in to message contents in spans.
pub const CAPTURE_CONTENT_ENV: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

const CAPTURE_UNREAD: u8 = 0;
const CAPTURE_OFF: u8 = 1;
const CAPTURE_ON: u8 = 2;
static CAPTURE: AtomicU8 = AtomicU8::new(CAPTURE_UNREAD);

/// Whether spans carry message contents, tool arguments and tool results:
/// [`set_capture_content`] if called, else [`CAPTURE_CONTENT_ENV`] is
/// `true` (any case), read once.
pub fn capture_content() -> bool {
    match CAPTURE.load(Ordering::Relaxed) {
        CAPTURE_ON => true,
        CAPTURE_OFF => false,
        _ => {
            let on = std::env::var(CAPTURE_CONTENT_ENV)
                .is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
            let state = if on { CAPTURE_ON } else { CAPTURE_OFF };
            // A concurrent `set_capture_content` wins over the environment.
            let _ = CAPTURE.compare_exchange(
                CAPTURE_UNREAD,
                state,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            CAPTURE.load(Ordering::Relaxed) == CAPTURE_ON
        }
    }
}

/// Turns the capture of contents on or off for the whole process
/// (overrides [`CAPTURE_CONTENT_ENV`]).
pub fn set_capture_content(on: bool) {
    CAPTURE.store(if on { CAPTURE_ON } else { CAPTURE_OFF }, Ordering::Relaxed);
}

tokio::task_local! {
    static CONVERSATION: String;
}

/// Runs `fut` as work for the conversation `id`: model calls made inside
/// it carry `gen_ai.conversation.id`.
pub async fn in_conversation<F: Future>(id: String, fut: F) -> F::Output {
    CONVERSATION.scope(id, fut).await
}

/// The conversation the current task works for, if any.
pub fn conversation_id() -> Option<String> {
    CONVERSATION.try_with(Clone::clone).ok()
}

/// The `gen_ai.provider.name` of one of our provider names: the
/// conventions' well-known value where there is one, else our name.
pub fn provider_name(provider: &str) -> &str {
    match provider {
        "gemini" => "gcp.gemini",
        "mistral" => "mistral_ai",
        "xai" => "x_ai",
        other => other,
    }
}

/// The `error.type` of a failed model call: one low-cardinality value per
/// kind (listed in `docs/architecture.md`, "Telemetry").
pub fn model_error_type(kind: ModelErrorKind) -> &'static str {
    match kind {
        ModelErrorKind::Transient => "transient",
        ModelErrorKind::RateLimited => "rate_limited",
        ModelErrorKind::Quota => "quota",
        ModelErrorKind::ContextLength => "context_length",
        ModelErrorKind::Auth => "auth",
        ModelErrorKind::BadRequest => "bad_request",
        ModelErrorKind::InvalidPayload => "invalid_payload",
        ModelErrorKind::MalformedResponse => "malformed_response",
        ModelErrorKind::Timeout => "timeout",
        ModelErrorKind::Connect => "connect",
        ModelErrorKind::NotConnected => "not_connected",
        ModelErrorKind::NetworkGuard => "network_guard",
        ModelErrorKind::LocalRateLimit => "local_rate_limit",
        ModelErrorKind::InputTokenCap => "input_token_cap",
        ModelErrorKind::StreamFailed => "stream_failed",
        ModelErrorKind::Config => "config",
        ModelErrorKind::CircuitOpen => "circuit_open",
        ModelErrorKind::ReplyLimit => "reply_limit",
    }
}

/// `error.type` values of a tool call.
pub mod tool_error {
    /// The arguments did not match the tool's schema (or were not JSON).
    pub const INVALID_ARGUMENTS: &str = "invalid_arguments";
    /// The tool ran and reported an error.
    pub const FAILED: &str = "tool_error";
    /// The tool did not finish in time.
    pub const TIMEOUT: &str = "timeout";
    /// The tool panicked (contained).
    pub const PANICKED: &str = "panic";
    /// No tool of that name is registered.
    pub const NOT_FOUND: &str = "tool_not_found";
    /// The gate or an approval policy refused the call.
    pub const DENIED: &str = "denied";
}

/// An OTLP integer: `tracing-opentelemetry` exports `i64` fields as
/// integers but unsigned ones as text.
pub fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Records an integer attribute (see [`int`]).
pub fn record_int(span: &tracing::Span, field: &str, n: u64) {
    span.record(field, int(n));
}

/// Marks `span` as failed with `error_type`.
pub fn record_error(span: &tracing::Span, error_type: &str) {
    span.record(ERROR_TYPE, error_type);
    span.record(OTEL_STATUS_CODE, "error");
}

/// The span of one verb: `invoke_agent` (with the branch's name when it has
/// one), `lionagi.operation` = `verb`, the conversation id and the chat
/// model the verb will call.
pub fn agent_span(
    verb: &'static str,
    conversation_id: &str,
    agent_name: Option<&str>,
    provider: &str,
    model: Option<&str>,
) -> tracing::Span {
    // Field values are computed inside the macro, which evaluates them only
    // when a subscriber wants the span: a turn without telemetry formats
    // nothing.
    tracing::info_span!(
        "invoke_agent",
        { OTEL_NAME } = match agent_name {
            Some(n) => format!("{OP_INVOKE_AGENT} {n}"),
            None => OP_INVOKE_AGENT.to_owned(),
        },
        { OTEL_KIND } = "internal",
        { OTEL_STATUS_CODE } = tracing::field::Empty,
        { GEN_AI_OPERATION_NAME } = OP_INVOKE_AGENT,
        { LIONAGI_OPERATION } = verb,
        { GEN_AI_PROVIDER_NAME } = provider_name(provider),
        { GEN_AI_REQUEST_MODEL } = model,
        { GEN_AI_AGENT_NAME } = agent_name,
        { GEN_AI_CONVERSATION_ID } = conversation_id,
        { ERROR_TYPE } = tracing::field::Empty,
    )
}

/// Where a model call goes, for `server.address` / `server.port`.
#[derive(Debug, Clone, Copy)]
pub struct Server<'a> {
    /// Host name or address.
    pub address: &'a str,
    /// Port.
    pub port: u16,
}

/// The span of one model call, `chat {model}`: the request's attributes
/// are set now, the reply's ones by [`record_response`] (for a stream,
/// with what the whole stream reported). `request` gives the sampling parameters (and,
/// opted in, the input messages); the conversation id comes from
/// [`in_conversation`].
pub fn chat_span(
    provider: &str,
    model: Option<&str>,
    stream: bool,
    server: Option<Server<'_>>,
    kwargs: &Map<String, Value>,
    request: &ChatRequest,
) -> tracing::Span {
    let param = |k: &str| request.fields.get(k).or_else(|| kwargs.get(k));
    let f64_of = |k: &str| param(k).and_then(Value::as_f64);
    let u64_of = |k: &str| param(k).and_then(Value::as_u64).map(int);
    let model = || param("model").and_then(Value::as_str).or(model);
    let stop = || {
        param("stop").and_then(|s| match s {
            Value::String(one) => Some(json!([one]).to_string()),
            Value::Array(_) => Some(s.to_string()),
            _ => None,
        })
    };
    let output_type = || {
        param("response_format")
            .filter(|f| f.get("type").and_then(Value::as_str) != Some("text"))
            .map(|_| "json")
    };
    let seed = || param("seed").and_then(Value::as_i64);
    // As in `agent_span`: these closures run only if the span is wanted.
    tracing::info_span!(
        "chat",
        { OTEL_NAME } = match model() {
            Some(m) => format!("{OP_CHAT} {m}"),
            None => OP_CHAT.to_owned(),
        },
        { OTEL_KIND } = "client",
        { OTEL_STATUS_CODE } = tracing::field::Empty,
        { GEN_AI_OPERATION_NAME } = OP_CHAT,
        { GEN_AI_PROVIDER_NAME } = provider_name(provider),
        { GEN_AI_REQUEST_MODEL } = model(),
        { GEN_AI_REQUEST_STREAM } = stream.then_some(true),
        { GEN_AI_CONVERSATION_ID } = conversation_id(),
        { SERVER_ADDRESS } = server.map(|s| s.address),
        { SERVER_PORT } = server.map(|s| i64::from(s.port)),
        { GEN_AI_REQUEST_TEMPERATURE } = f64_of("temperature"),
        { GEN_AI_REQUEST_MAX_TOKENS } =
            u64_of("max_tokens").or_else(|| u64_of("max_completion_tokens")),
        { GEN_AI_REQUEST_TOP_P } = f64_of("top_p"),
        { GEN_AI_REQUEST_TOP_K } = u64_of("top_k"),
        { GEN_AI_REQUEST_FREQUENCY_PENALTY } = f64_of("frequency_penalty"),
        { GEN_AI_REQUEST_PRESENCE_PENALTY } = f64_of("presence_penalty"),
        { GEN_AI_REQUEST_SEED } = seed(),
        { GEN_AI_REQUEST_STOP_SEQUENCES } = stop(),
        { GEN_AI_REQUEST_CHOICE_COUNT } = u64_of("n").filter(|n| *n != 1),
        { GEN_AI_OUTPUT_TYPE } = output_type(),
        { GEN_AI_RESPONSE_MODEL } = tracing::field::Empty,
        { GEN_AI_RESPONSE_ID } = tracing::field::Empty,
        { GEN_AI_RESPONSE_FINISH_REASONS } = tracing::field::Empty,
        { GEN_AI_USAGE_INPUT_TOKENS } = tracing::field::Empty,
        { GEN_AI_USAGE_OUTPUT_TOKENS } = tracing::field::Empty,
        { GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS } = tracing::field::Empty,
        { GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS } = tracing::field::Empty,
        { ERROR_TYPE } = tracing::field::Empty,
        { HTTP_RESPONSE_STATUS_CODE } = tracing::field::Empty,
        { LIONAGI_ATTEMPTS } = tracing::field::Empty,
        { GEN_AI_INPUT_MESSAGES } = capture_content().then(|| input_messages(&request.messages)),
        { GEN_AI_OUTPUT_MESSAGES } = tracing::field::Empty,
    )
}

/// Records a usage report on a chat span.
pub fn record_usage(span: &tracing::Span, usage: &Usage) {
    record_int(span, GEN_AI_USAGE_INPUT_TOKENS, usage.input_tokens());
    record_int(span, GEN_AI_USAGE_OUTPUT_TOKENS, usage.completion_tokens);
    if usage.cache_read_input_tokens > 0 {
        record_int(
            span,
            GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
            usage.cache_read_input_tokens,
        );
    }
    if usage.cache_creation_input_tokens > 0 {
        record_int(
            span,
            GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS,
            usage.cache_creation_input_tokens,
        );
    }
}

/// Records a complete reply on a chat span: served model, id, finish
/// reason, usage and (opted in) the output message.
pub fn record_response(span: &tracing::Span, response: &ChatResponse) {
    if span.is_disabled() {
        return;
    }
    if let Some(m) = &response.served_model {
        span.record(GEN_AI_RESPONSE_MODEL, m.as_str());
    }
    if let Some(id) = response.raw.top_str("id") {
        span.record(GEN_AI_RESPONSE_ID, id.as_str());
    }
    if let Some(r) = &response.finish_reason {
        span.record(GEN_AI_RESPONSE_FINISH_REASONS, json!([r]).to_string());
    }
    if let Some(u) = &response.usage {
        record_usage(span, u);
    }
    if capture_content() {
        span.record(GEN_AI_OUTPUT_MESSAGES, output_messages(response));
    }
}

/// The span of one tool call, `execute_tool {name}`; `arguments` is
/// recorded only when contents are captured. Close it with
/// [`record_tool_result`] or [`record_error`].
pub fn tool_span(
    name: &str,
    call_id: Option<&str>,
    arguments: &Map<String, Value>,
) -> tracing::Span {
    // As in `agent_span`: nothing below runs unless the span is wanted.
    tracing::info_span!(
        "execute_tool",
        { OTEL_NAME } = format!("{OP_EXECUTE_TOOL} {name}"),
        { OTEL_KIND } = "internal",
        { OTEL_STATUS_CODE } = tracing::field::Empty,
        { GEN_AI_OPERATION_NAME } = OP_EXECUTE_TOOL,
        { GEN_AI_TOOL_NAME } = name,
        { GEN_AI_TOOL_CALL_ID } = call_id,
        { GEN_AI_TOOL_TYPE } = "function",
        { GEN_AI_CONVERSATION_ID } = conversation_id(),
        { ERROR_TYPE } = tracing::field::Empty,
        { GEN_AI_TOOL_CALL_ARGUMENTS } = capture_content()
            .then(|| serde_json::to_string(arguments).ok())
            .flatten(),
        { GEN_AI_TOOL_CALL_RESULT } = tracing::field::Empty,
    )
}

/// Records a tool's result on its span when contents are captured.
pub fn record_tool_result(span: &tracing::Span, result: &Value) {
    if capture_content() && !span.is_disabled() {
        span.record(GEN_AI_TOOL_CALL_RESULT, result.to_string());
    }
}

/// The input messages in the conventions' form: `[{role, parts: [...]}]`,
/// parts of type `text`, `tool_call` and `tool_call_response`.
pub fn input_messages<M: std::borrow::Borrow<ChatMessage>>(messages: &[M]) -> String {
    let out: Vec<Value> = messages.iter().map(|m| input_message(m.borrow())).collect();
    Value::Array(out).to_string()
}

fn input_message(m: &ChatMessage) -> Value {
    let mut parts = Vec::new();
    if m.role == "tool" {
        let id = m.extra.get("tool_call_id").cloned().unwrap_or(Value::Null);
        parts.push(json!({"type": "tool_call_response", "id": id, "response": m.content}));
    } else {
        match &m.content {
            Value::String(s) => parts.push(json!({"type": "text", "content": s})),
            Value::Array(items) => {
                for item in items {
                    match item.get("text").and_then(Value::as_str) {
                        Some(t) => parts.push(json!({"type": "text", "content": t})),
                        None => parts.push(item.clone()),
                    }
                }
            }
            Value::Null => {}
            other => parts.push(json!({"type": "text", "content": other.to_string()})),
        }
        if let Some(Value::Array(calls)) = m.extra.get("tool_calls") {
            for c in calls {
                let f = c.get("function");
                parts.push(json!({
                    "type": "tool_call",
                    "id": c.get("id"),
                    "name": f.and_then(|f| f.get("name")),
                    "arguments": f.and_then(|f| f.get("arguments")),
                }));
            }
        }
    }
    json!({"role": m.role, "parts": parts})
}

/// The reply in the conventions' form: one assistant message with its text
/// and tool calls, and its finish reason.
pub fn output_messages(response: &ChatResponse) -> String {
    let mut parts = Vec::new();
    if !response.text.is_empty() {
        parts.push(json!({"type": "text", "content": response.text}));
    }
    for c in &response.tool_calls {
        let args: Value =
            serde_json::from_str(&c.arguments).unwrap_or(Value::String(c.arguments.clone()));
        parts.push(json!({"type": "tool_call", "id": c.id, "name": c.name, "arguments": args}));
    }
    json!([{
        "role": "assistant",
        "parts": parts,
        "finish_reason": response.finish_reason,
    }])
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_names_follow_the_well_known_values() {
        assert_eq!(provider_name("openai"), "openai");
        assert_eq!(provider_name("gemini"), "gcp.gemini");
        assert_eq!(provider_name("my-vllm"), "my-vllm");
    }

    #[test]
    fn messages_take_the_conventions_shape() {
        let mut call = ChatMessage::assistant(Value::Null);
        call.extra.insert(
            "tool_calls".into(),
            json!([{"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1}"}}]),
        );
        let mut result = ChatMessage::new("tool", "2");
        result.extra.insert("tool_call_id".into(), "c1".into());
        let text = input_messages(&[ChatMessage::user("hi"), call, result]);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v[0],
            json!({"role": "user", "parts": [{"type": "text", "content": "hi"}]})
        );
        assert_eq!(v[1]["parts"][0]["type"], "tool_call");
        assert_eq!(v[1]["parts"][0]["name"], "add");
        assert_eq!(
            v[2]["parts"][0],
            json!({"type": "tool_call_response", "id": "c1", "response": "2"})
        );
    }

    #[tokio::test]
    async fn the_conversation_id_is_task_scoped() {
        assert_eq!(conversation_id(), None);
        let inside = in_conversation("b1".into(), async { conversation_id() }).await;
        assert_eq!(inside.as_deref(), Some("b1"));
        assert_eq!(conversation_id(), None);
    }
}
