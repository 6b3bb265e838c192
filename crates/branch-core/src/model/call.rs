//! Seam types of a model call: request, response, streaming chunks, usage.

use std::borrow::Cow;
use std::pin::Pin;
use std::sync::Arc;

use futures_core::Stream;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::reasoning::{FinishReason, ReasoningBlock};
use super::{LazyJson, ModelError, SettledJson, WireForm};
use crate::object_only::optional_object;

/// One message of a provider request (`{"role", "content", ...}`).
#[derive(Debug, Clone, PartialEq)]
pub struct ChatMessage {
    /// `system`, `developer`, `user`, `assistant` or `tool` (these five
    /// are never allocated: a conversation keeps a compiled message for
    /// each of its messages).
    pub role: Cow<'static, str>,
    /// A string, or a list of content parts.
    pub content: Value,
    /// Further keys (`tool_calls`, `tool_call_id`, `name` ...), written after
    /// `role` and `content` in this order.
    pub extra: Map<String, Value>,
    /// The reasoning an assistant message was produced with, for the
    /// dialects whose protocol sends it back (Anthropic thinking with tool
    /// use, Responses reasoning items). Never part of [`Self::to_value`],
    /// the chat-completions form.
    pub reasoning: Vec<ReasoningBlock>,
}

impl ChatMessage {
    /// A message with `role` and `content`.
    pub fn new(role: &str, content: impl Into<Value>) -> Self {
        Self {
            role: known_role(role),
            content: content.into(),
            extra: Map::new(),
            reasoning: Vec::new(),
        }
    }

    /// A user message.
    pub fn user(content: impl Into<Value>) -> Self {
        Self::new("user", content)
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<Value>) -> Self {
        Self::new("assistant", content)
    }

    /// A system message.
    pub fn system(content: impl Into<Value>) -> Self {
        Self::new("system", content)
    }

    /// The JSON object sent to the provider.
    pub fn to_value(&self) -> Value {
        let mut m = Map::with_capacity(2 + self.extra.len());
        m.insert("role".into(), self.role.clone().into());
        m.insert("content".into(), self.content.clone());
        for (k, v) in &self.extra {
            m.insert(k.clone(), v.clone());
        }
        Value::Object(m)
    }

    /// From a `{"role", "content", ...}` object.
    pub fn from_value(value: &Value) -> Option<Self> {
        let obj = value.as_object()?;
        let role = known_role(obj.get("role")?.as_str()?);
        let content = obj.get("content").cloned().unwrap_or(Value::Null);
        let extra = obj
            .iter()
            .filter(|(k, _)| k.as_str() != "role" && k.as_str() != "content")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Some(Self {
            role,
            content,
            extra,
            reasoning: Vec::new(),
        })
    }
}

/// `role` as a message's role: one of the roles the dialects know is
/// borrowed, any other copied.
fn known_role(role: &str) -> Cow<'static, str> {
    const KNOWN: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];
    match KNOWN.into_iter().find(|k| *k == role) {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(role.to_owned()),
    }
}

/// A compiled provider request.
///
/// The body is built as: the model's default `kwargs`, updated with
/// `fields` (in order), then `messages`, then (for streaming) `stream: true`
/// — the reference's key order.
#[derive(Debug, Clone, Default)]
pub struct ChatRequest {
    /// Conversation messages. Shared: a branch keeps its history's
    /// compiled messages between turns and hands the same ones to every
    /// request, so a turn does not copy (or free) the conversation before
    /// it. Change one with [`Arc::make_mut`] (it copies only a shared one).
    pub messages: Vec<Arc<ChatMessage>>,
    /// Call keywords (`temperature`, `tools`, `response_format` ...).
    pub fields: Map<String, Value>,
    /// Per-call extra headers (applied after the default headers).
    pub extra_headers: Vec<(String, String)>,
    /// The kept JSON of `messages[i]`, where there is one: a dialect whose
    /// protocol sends the message as it is copies it instead of writing
    /// the message again. Used only for the very message it was made from
    /// ([`WireForm::json_for`]), so editing or replacing `messages` never
    /// sends a stale one. Not part of the request's equality.
    pub wire: Vec<Option<Arc<WireForm>>>,
    /// The kept JSON of the conversation's settled history, in one buffer
    /// shared by the turns that send it: a dialect whose protocol sends
    /// those messages as they are copies the JSON of as many of the first
    /// `messages` as are its very messages ([`SettledJson::prefix_of`]) in
    /// one piece. Not part of the request's equality.
    pub settled: Option<Arc<SettledJson>>,
}

impl PartialEq for ChatRequest {
    fn eq(&self, other: &Self) -> bool {
        self.messages == other.messages
            && self.fields == other.fields
            && self.extra_headers == other.extra_headers
    }
}

impl ChatRequest {
    /// A request with these messages (owned [`ChatMessage`]s or shared
    /// ones).
    pub fn new<M: Into<Arc<ChatMessage>>>(messages: impl IntoIterator<Item = M>) -> Self {
        Self {
            messages: messages.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// The kept JSON the request carries for `messages[i]` on its own,
    /// if any (`wire[i]`); check it with [`WireForm::json_for`] before
    /// use.
    pub fn wire_form(&self, i: usize) -> Option<&Arc<WireForm>> {
        self.wire.get(i).and_then(Option::as_ref)
    }

    /// The settled history's kept JSON and how many of the first messages
    /// it holds the JSON of (the very messages; see
    /// [`SettledJson::prefix_of`]); `None` when it holds none of them.
    pub fn settled_prefix(&self) -> Option<(&SettledJson, usize)> {
        let settled = self.settled.as_deref()?;
        let n = settled.prefix_of(&self.messages);
        (n > 0).then_some((settled, n))
    }

    /// Adds a call keyword.
    pub fn with_field(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.fields.insert(key.to_owned(), value.into());
        self
    }

    /// The messages as JSON.
    pub fn messages_value(&self) -> Value {
        Value::Array(self.messages.iter().map(|m| m.to_value()).collect())
    }

    /// The provider-independent payload: `kwargs`, updated with `fields`,
    /// then `messages` (and `stream: true`). Providers refine it (field
    /// filters, Anthropic system hoisting) in `branch-models`.
    pub fn generic_payload(&self, kwargs: &Map<String, Value>, stream: bool) -> Value {
        let mut payload = kwargs.clone();
        for (k, v) in &self.fields {
            payload.insert(k.clone(), v.clone());
        }
        if !stream {
            payload.shift_remove("stream");
        }
        payload.insert("messages".into(), self.messages_value());
        if stream {
            payload.insert("stream".into(), true.into());
        }
        Value::Object(payload)
    }
}

/// A tool call requested by the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// Provider's call id.
    pub id: String,
    /// Function name.
    pub name: String,
    /// Arguments as the JSON text the provider sent.
    pub arguments: String,
}

/// Token usage reported by the provider.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    /// Input tokens (`prompt_tokens` / `input_tokens`).
    pub prompt_tokens: u64,
    /// Output tokens (`completion_tokens` / `output_tokens`).
    pub completion_tokens: u64,
    /// Total (reported, or the sum).
    pub total_tokens: u64,
    /// Anthropic cache reads.
    pub cache_read_input_tokens: u64,
    /// Anthropic cache writes.
    pub cache_creation_input_tokens: u64,
    /// Output tokens spent on reasoning (OpenAI
    /// `completion_tokens_details.reasoning_tokens`, Responses
    /// `output_tokens_details.reasoning_tokens`); part of
    /// `completion_tokens`, not added to it.
    pub reasoning_tokens: u64,
}

/// The counts a provider's usage object reports, under every protocol's
/// names, as read; [`Usage::from_report`] gives them one meaning. Read
/// strictly (a count that is not a whole non-negative number, or details
/// that are not an object, is an error), where [`Usage::from_provider`]
/// passes over such a count. Read it through
/// [`crate::object_only::object_only`]: a derived struct also reads from
/// an array.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[allow(missing_docs)]
pub struct UsageReport {
    pub prompt_tokens: Option<u64>,
    pub input_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub total_tokens: Option<u64>,
    pub cache_read_input_tokens: Option<u64>,
    pub cache_creation_input_tokens: Option<u64>,
    #[serde(default, deserialize_with = "optional_object")]
    pub prompt_tokens_details: Option<TokenDetails>,
    #[serde(default, deserialize_with = "optional_object")]
    pub input_tokens_details: Option<TokenDetails>,
    #[serde(default, deserialize_with = "optional_object")]
    pub completion_tokens_details: Option<TokenDetails>,
    #[serde(default, deserialize_with = "optional_object")]
    pub output_tokens_details: Option<TokenDetails>,
}

/// The detail counts of a usage report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[allow(missing_docs)]
pub struct TokenDetails {
    pub cached_tokens: Option<u64>,
    pub reasoning_tokens: Option<u64>,
}

/// A token count as a provider writes it: a whole number of at least
/// zero, as an integer or as a float without a fraction (`12.0`, which
/// some servers write). Anything else (`3.7`, `1e30`, `-1`, text) is no
/// count: rounding it would invent one.
pub(crate) fn token_count(v: &Value) -> Option<u64> {
    /// 2^64: the first float past `u64::MAX`.
    const PAST_U64: f64 = 18_446_744_073_709_551_616.0;
    v.as_u64().or_else(|| {
        let f = v
            .as_f64()
            .filter(|f| (0.0..PAST_U64).contains(f) && f.fract() == 0.0)?;
        // Exact: whole and inside u64's range.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let n = f as u64;
        Some(n)
    })
}

impl Usage {
    /// Reads an OpenAI chat (`prompt_tokens` ...), OpenAI Responses or
    /// Anthropic (`input_tokens` ...) usage object, normalised to one
    /// meaning: `prompt_tokens` are the input tokens *not* read from a
    /// cache (Anthropic's meaning; OpenAI's cached tokens, which its
    /// `prompt_tokens` include, are moved to `cache_read_input_tokens`),
    /// so [`Self::input_tokens`] is the whole input for every protocol.
    ///
    /// A count is a whole number of at least zero, written as an integer
    /// or as a float without a fraction (`12.0`); anything else is passed
    /// over, as if absent.
    pub fn from_provider(value: &Value) -> Option<Self> {
        let obj = value.as_object()?;
        let n = |k: &str| obj.field(k).and_then(token_count);
        let details = |k: &str| {
            obj.field(k).map(|d| TokenDetails {
                cached_tokens: d.field("cached_tokens").and_then(token_count),
                reasoning_tokens: d.field("reasoning_tokens").and_then(token_count),
            })
        };
        Self::from_report(&UsageReport {
            prompt_tokens: n("prompt_tokens"),
            input_tokens: n("input_tokens"),
            completion_tokens: n("completion_tokens"),
            output_tokens: n("output_tokens"),
            total_tokens: n("total_tokens"),
            cache_read_input_tokens: n("cache_read_input_tokens"),
            cache_creation_input_tokens: n("cache_creation_input_tokens"),
            prompt_tokens_details: details("prompt_tokens_details"),
            input_tokens_details: details("input_tokens_details"),
            completion_tokens_details: details("completion_tokens_details"),
            output_tokens_details: details("output_tokens_details"),
        })
    }

    /// The usage a report gives ([`Self::from_provider`]'s meaning);
    /// `None` when it reports no token count.
    pub fn from_report(r: &UsageReport) -> Option<Self> {
        let detail =
            |d: &Option<TokenDetails>, f: fn(&TokenDetails) -> Option<u64>| d.as_ref().and_then(f);
        let prompt = r.prompt_tokens.or(r.input_tokens);
        let completion = r.completion_tokens.or(r.output_tokens);
        if prompt.is_none() && completion.is_none() && r.total_tokens.is_none() {
            return None;
        }
        let prompt = prompt.unwrap_or(0);
        let completion = completion.unwrap_or(0);
        let cached = |d: &TokenDetails| d.cached_tokens;
        let reasoning = |d: &TokenDetails| d.reasoning_tokens;
        let openai_cached = detail(&r.prompt_tokens_details, cached)
            .or_else(|| detail(&r.input_tokens_details, cached))
            .unwrap_or(0)
            .min(prompt);
        Some(Self {
            prompt_tokens: prompt - openai_cached,
            completion_tokens: completion,
            total_tokens: r.total_tokens.unwrap_or(prompt.saturating_add(completion)),
            cache_read_input_tokens: r
                .cache_read_input_tokens
                .unwrap_or(0)
                .saturating_add(openai_cached),
            cache_creation_input_tokens: r.cache_creation_input_tokens.unwrap_or(0),
            reasoning_tokens: detail(&r.completion_tokens_details, reasoning)
                .or_else(|| detail(&r.output_tokens_details, reasoning))
                .unwrap_or(0),
        })
    }

    /// Provider-side input size used for input-scale calibration:
    /// prompt tokens plus cache reads and writes.
    pub fn input_tokens(&self) -> u64 {
        self.prompt_tokens
            .saturating_add(self.cache_read_input_tokens)
            .saturating_add(self.cache_creation_input_tokens)
    }

    /// Keeps the larger of each count (streams that report cumulative
    /// counts several times).
    pub fn merge_max(&mut self, other: &Usage) {
        self.prompt_tokens = self.prompt_tokens.max(other.prompt_tokens);
        self.completion_tokens = self.completion_tokens.max(other.completion_tokens);
        self.cache_read_input_tokens = self
            .cache_read_input_tokens
            .max(other.cache_read_input_tokens);
        self.cache_creation_input_tokens = self
            .cache_creation_input_tokens
            .max(other.cache_creation_input_tokens);
        self.reasoning_tokens = self.reasoning_tokens.max(other.reasoning_tokens);
        self.total_tokens = self
            .total_tokens
            .max(other.total_tokens)
            .max(self.prompt_tokens.saturating_add(self.completion_tokens));
    }

    /// Adds another report.
    pub fn add(&mut self, other: &Usage) {
        let add = |a: &mut u64, b: u64| *a = a.saturating_add(b);
        add(&mut self.prompt_tokens, other.prompt_tokens);
        add(&mut self.completion_tokens, other.completion_tokens);
        add(&mut self.total_tokens, other.total_tokens);
        add(
            &mut self.cache_read_input_tokens,
            other.cache_read_input_tokens,
        );
        add(
            &mut self.cache_creation_input_tokens,
            other.cache_creation_input_tokens,
        );
        add(&mut self.reasoning_tokens, other.reasoning_tokens);
    }
}

/// A completed model call.
#[derive(Debug, Clone)]
pub struct ChatResponse {
    /// Text extracted as the reference does (providers.md §10).
    pub text: String,
    /// Native tool calls (OpenAI `tool_calls`, Anthropic `tool_use`).
    pub tool_calls: Vec<ToolCall>,
    /// The raw provider JSON (kept whole, as `metadata.model_response`);
    /// kept as its text until read when the model read the reply from it.
    pub raw: LazyJson,
    /// Reported usage.
    pub usage: Option<Usage>,
    /// The model the provider reports having served.
    pub served_model: Option<String>,
    /// First choice's finish reason / Anthropic `stop_reason`, as sent
    /// (see [`Self::finish`] for the normalised reason).
    pub finish_reason: Option<String>,
    /// HTTP attempts made (1 = no retry).
    pub attempts: u32,
    /// The reasoning that came with the reply, in order.
    pub reasoning: Vec<ReasoningBlock>,
    /// The bytes `raw` was parsed from, as received, when the model keeps
    /// them. The API call's log holds them instead of serializing `raw`
    /// again only for a model that vouches for them
    /// ([`super::ChatModel::keeps_reply_bytes`]).
    pub raw_text: Option<crate::parsed_json::ParsedJson>,
}

/// Two responses are equal when what they say is: `raw_text` is one
/// spelling of `raw`.
impl PartialEq for ChatResponse {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
            && self.tool_calls == other.tool_calls
            && self.raw == other.raw
            && self.usage == other.usage
            && self.served_model == other.served_model
            && self.finish_reason == other.finish_reason
            && self.attempts == other.attempts
            && self.reasoning == other.reasoning
    }
}

impl ChatResponse {
    /// Maps a raw provider reply (providers.md §10).
    pub fn from_raw(raw: Value) -> Self {
        let text = extract_text(&raw);
        let tool_calls = extract_tool_calls(&raw);
        let reasoning = extract_reasoning(&raw);
        let usage = raw.field("usage").and_then(Usage::from_provider);
        let served_model = raw
            .field("model")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let finish_reason = first_choice(&raw)
            .and_then(|c| c.field("finish_reason"))
            .or_else(|| raw.field("stop_reason"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        Self {
            text,
            tool_calls,
            raw: raw.into(),
            usage,
            served_model,
            finish_reason,
            attempts: 1,
            reasoning,
            raw_text: None,
        }
    }

    /// The normalised reason the model stopped.
    pub fn finish(&self) -> Option<FinishReason> {
        self.finish_reason
            .as_deref()
            .map(FinishReason::from_provider)
    }
}

/// The `execution` object of the reference's API-call log record
/// (serialization.md §6.1): `{"status", "duration", "response", "error",
/// "retryable"}`.
pub fn api_call_execution(result: Result<&ChatResponse, &ModelError>, duration_secs: f64) -> Value {
    let response = result.map_or(Value::Null, |r| r.raw.peek().into_owned());
    let error = result.err().map(execution_error);
    Value::Object(execution_record(duration_secs, error, response))
}

/// [`api_call_execution`] with `response` left `null`, for a log that
/// keeps the reply apart (`Log::with_kept` at `["execution", "response"]`).
pub fn api_call_execution_head(
    result: Result<&ChatResponse, &ModelError>,
    duration_secs: f64,
) -> Value {
    let error = result.err().map(execution_error);
    Value::Object(execution_record(duration_secs, error, Value::Null))
}

/// The `execution` object of a call that took `duration_secs`: failed
/// when it has an `error` object, else completed with `response`.
pub(crate) fn execution_record(
    duration_secs: f64,
    error: Option<Value>,
    response: Value,
) -> Map<String, Value> {
    let mut m = Map::with_capacity(5);
    let status = if error.is_some() {
        "failed"
    } else {
        "completed"
    };
    m.insert("status".into(), status.into());
    m.insert("duration".into(), duration_secs.into());
    m.insert("response".into(), response);
    m.insert("error".into(), error.unwrap_or(Value::Null));
    m.insert("retryable".into(), Value::Null);
    m
}

/// The `execution.error` object of a failed call's log record.
pub(crate) fn execution_error(e: &ModelError) -> Value {
    serde_json::json!({"error": e.reference_type(), "message": e.reference_message()})
}

/// A key's value in a reply object, found without hashing the key when
/// the object is small (a reply's objects hold a handful of keys; SipHash
/// of each looked-up key cost more than comparing them).
trait Field {
    fn field(&self, key: &str) -> Option<&Value>;
}

impl Field for Map<String, Value> {
    fn field(&self, key: &str) -> Option<&Value> {
        if self.len() <= 16 {
            self.iter().find(|(k, _)| k.as_str() == key).map(|(_, v)| v)
        } else {
            self.get(key)
        }
    }
}

impl Field for Value {
    fn field(&self, key: &str) -> Option<&Value> {
        self.as_object().and_then(|o| o.field(key))
    }
}

/// `choices[0]` of a reply (looked up directly: a JSON pointer would parse
/// and allocate on every reply).
fn first_choice(raw: &Value) -> Option<&Value> {
    match raw.field("choices")? {
        Value::Array(a) => a.first(),
        // What the pointer `/choices/0` also reaches.
        Value::Object(o) => o.field("0"),
        _ => None,
    }
}

/// The text of a provider reply (or list of replies, concatenated without
/// separator), as the reference extracts it.
pub fn extract_text(raw: &Value) -> String {
    match raw {
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(extract_one).collect(),
        other => extract_one(other),
    }
}

fn extract_one(raw: &Value) -> String {
    let Some(obj) = raw.as_object() else {
        return raw.as_str().map(str::to_owned).unwrap_or_default();
    };
    if let Some(content) = obj.field("content") {
        return match content {
            Value::Array(blocks) => blocks
                .iter()
                .filter_map(|b| match b {
                    Value::String(s) => Some(s.as_str()),
                    Value::Object(o) if o.field("type").and_then(Value::as_str) == Some("text") => {
                        o.field("text").and_then(Value::as_str)
                    }
                    _ => None,
                })
                .collect(),
            Value::String(s) => s.clone(),
            _ => String::new(),
        };
    }
    if let Some(Value::Array(choices)) = obj.field("choices") {
        return choices
            .iter()
            .map(|c| {
                c.field("message")
                    .and_then(|m| m.field("content"))
                    .or_else(|| c.field("delta").and_then(|d| d.field("content")))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            })
            .collect();
    }
    if let Some(Value::Array(output)) = obj.field("output") {
        return output
            .iter()
            .filter(|item| item.field("type").and_then(Value::as_str) == Some("message"))
            .filter_map(|item| item.field("content").and_then(Value::as_array))
            .flatten()
            .filter(|part| part.field("type").and_then(Value::as_str) == Some("output_text"))
            .filter_map(|part| part.field("text").and_then(Value::as_str))
            .collect();
    }
    if let Some(result) = obj.field("result") {
        return result
            .as_str()
            .map_or_else(|| result.to_string(), str::to_owned);
    }
    String::new()
}

/// The reasoning of a reply: a compatible server's
/// `choices[0].message.reasoning_content` (DeepSeek, vLLM, llama.cpp) or
/// `reasoning` (OpenRouter, newer vLLM), Anthropic `thinking` /
/// `redacted_thinking` blocks, Responses `reasoning` items.
fn extract_reasoning(raw: &Value) -> Vec<ReasoningBlock> {
    let s = |v: &Value, k: &str| v.field(k).and_then(Value::as_str).map(str::to_owned);
    let mut out = Vec::new();
    if let Some(text) = first_choice(raw)
        .and_then(|c| c.field("message"))
        .and_then(|m| {
            ["reasoning_content", "reasoning"]
                .iter()
                .find_map(|k| s(m, k).filter(|t| !t.is_empty()))
        })
    {
        out.push(ReasoningBlock::Thinking {
            text,
            signature: None,
        });
    }
    if let Some(Value::Array(blocks)) = raw.field("content") {
        for b in blocks {
            match b.field("type").and_then(Value::as_str) {
                Some("thinking") => out.push(ReasoningBlock::Thinking {
                    text: s(b, "thinking").unwrap_or_default(),
                    signature: s(b, "signature"),
                }),
                Some("redacted_thinking") => out.push(ReasoningBlock::RedactedThinking {
                    data: s(b, "data").unwrap_or_default(),
                }),
                _ => {}
            }
        }
    }
    if let Some(Value::Array(items)) = raw.field("output") {
        for item in items {
            if item.field("type").and_then(Value::as_str) != Some("reasoning") {
                continue;
            }
            let summary = item
                .field("summary")
                .and_then(Value::as_array)
                .map(|parts| {
                    parts
                        .iter()
                        .filter_map(|p| s(p, "text"))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            out.push(ReasoningBlock::ResponsesItem {
                id: s(item, "id").unwrap_or_default(),
                summary,
                encrypted_content: s(item, "encrypted_content"),
            });
        }
    }
    out
}

fn extract_tool_calls(raw: &Value) -> Vec<ToolCall> {
    let mut calls = Vec::new();
    let tcs = first_choice(raw)
        .and_then(|c| c.field("message"))
        .and_then(|m| m.field("tool_calls"));
    if let Some(Value::Array(tcs)) = tcs {
        for tc in tcs {
            let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
            let function = tc.field("function");
            calls.push(ToolCall {
                id: text(tc.field("id")),
                name: text(function.and_then(|f| f.field("name"))),
                arguments: match function.and_then(|f| f.field("arguments")) {
                    Some(Value::String(a)) => a.clone(),
                    Some(other) => other.to_string(),
                    None => String::new(),
                },
            });
        }
    }
    if let Some(Value::Array(blocks)) = raw.field("content") {
        for b in blocks {
            if b.field("type").and_then(Value::as_str) == Some("tool_use") {
                let s = |k: &str| {
                    b.field(k)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                calls.push(ToolCall {
                    id: s("id"),
                    name: s("name"),
                    arguments: b
                        .field("input")
                        .map(Value::to_string)
                        .unwrap_or_else(|| "{}".into()),
                });
            }
        }
    }
    calls
}

/// Kind of a streaming chunk (the reference's `StreamChunk.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChunkKind {
    /// Any other event.
    System,
    /// Reasoning delta.
    Thinking,
    /// Text delta.
    Text,
    /// Tool-call delta.
    ToolUse,
    /// Tool result (CLI providers).
    ToolResult,
    /// End of stream / final result (usage in metadata).
    Result,
    /// Error event.
    Error,
}

impl ChunkKind {
    /// The serialized name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::Thinking => "thinking",
            Self::Text => "text",
            Self::ToolUse => "tool_use",
            Self::ToolResult => "tool_result",
            Self::Result => "result",
            Self::Error => "error",
        }
    }
}

/// One normalised streaming chunk (the reference's `StreamChunk`).
#[derive(Debug, Clone, PartialEq)]
pub struct ChatChunk {
    /// What the chunk carries.
    pub kind: ChunkKind,
    /// Text content.
    pub content: Option<String>,
    /// Tool name (tool_use).
    pub tool_name: Option<String>,
    /// Tool call id (tool_use).
    pub tool_id: Option<String>,
    /// `{"arguments": <string delta>}` (tool_use).
    pub tool_input: Option<Value>,
    /// Tool output (CLI providers).
    pub tool_output: Option<Value>,
    /// Error chunk.
    pub is_error: bool,
    /// Whether `content` is a delta.
    pub is_delta: bool,
    /// `raw` (the event), `done`, `usage` ...
    pub metadata: Map<String, Value>,
}

impl ChatChunk {
    /// An empty chunk of `kind`.
    pub fn new(kind: ChunkKind) -> Self {
        Self {
            kind,
            content: None,
            tool_name: None,
            tool_id: None,
            tool_input: None,
            tool_output: None,
            is_error: false,
            is_delta: false,
            metadata: Map::new(),
        }
    }

    /// The reference's `StreamChunk` JSON shape.
    pub fn to_value(&self) -> Value {
        let opt = |s: &Option<String>| s.clone().map_or(Value::Null, Value::String);
        let mut m = Map::new();
        m.insert("type".into(), self.kind.as_str().into());
        m.insert("content".into(), opt(&self.content));
        m.insert("tool_name".into(), opt(&self.tool_name));
        m.insert("tool_id".into(), opt(&self.tool_id));
        m.insert(
            "tool_input".into(),
            self.tool_input.clone().unwrap_or(Value::Null),
        );
        m.insert(
            "tool_output".into(),
            self.tool_output.clone().unwrap_or(Value::Null),
        );
        m.insert("is_error".into(), self.is_error.into());
        m.insert("is_delta".into(), self.is_delta.into());
        m.insert("metadata".into(), Value::Object(self.metadata.clone()));
        Value::Object(m)
    }

    /// The raw provider event, if kept.
    pub fn raw(&self) -> Option<&Value> {
        self.metadata.get("raw")
    }
}

/// A stream of chunks; dropping it cancels the HTTP request.
pub type ChatStream = Pin<Box<dyn Stream<Item = Result<ChatChunk, ModelError>> + Send>>;

/// Keys of a [`ChunkKind::Thinking`] chunk's metadata that the stream
/// decoders set and [`StreamAccumulator`] reads to assemble reasoning
/// blocks.
pub mod thinking_chunk {
    /// The protocol's block index (a `u64`): deltas with the same index
    /// build one block; absent, a delta continues the last open thinking
    /// block.
    pub const BLOCK_INDEX: &str = "reasoning_index";
    /// A signature (a string) for the block at `BLOCK_INDEX`.
    pub const SIGNATURE: &str = "signature";
    /// A whole block (the serde form of a `ReasoningBlock`), taken as is:
    /// redacted thinking, a Responses reasoning item. A Responses item
    /// replaces the thinking assembled from its summary deltas under the
    /// same `BLOCK_INDEX` (the deltas are for display while it streams).
    pub const BLOCK: &str = "reasoning_block";
}

/// Keys of a chunk's metadata that a dialect's stream decoder sets when its
/// protocol keeps these facts where the chat-completions and Anthropic
/// readers do not look (OpenAI Responses: `output_index`, the response
/// object's `model` and `status`); [`StreamAccumulator`] reads them first.
pub mod stream_chunk {
    /// The tool call's index (a `u64`) among the reply's tool calls.
    pub const TOOL_INDEX: &str = "tool_index";
    /// The finish reason (a string) the decoder derived for the reply.
    pub const FINISH_REASON: &str = "finish_reason";
    /// The served model (a string).
    pub const MODEL: &str = "model";
}

/// `usage` in chat-completions shape and meaning (its `prompt_tokens`
/// include cached reads, told apart in `prompt_tokens_details`), so that
/// reading it back ([`Usage::from_provider`], the branch's usage sums)
/// gives `usage` again: cached reads, cache writes and reasoning tokens
/// are written when there are any, never folded away.
fn openai_usage(u: &Usage) -> Value {
    let mut m = Map::new();
    m.insert(
        "prompt_tokens".into(),
        u.prompt_tokens
            .saturating_add(u.cache_read_input_tokens)
            .into(),
    );
    m.insert("completion_tokens".into(), u.completion_tokens.into());
    m.insert("total_tokens".into(), u.total_tokens.into());
    if u.cache_read_input_tokens > 0 {
        m.insert(
            "prompt_tokens_details".into(),
            serde_json::json!({"cached_tokens": u.cache_read_input_tokens}),
        );
    }
    if u.reasoning_tokens > 0 {
        m.insert(
            "completion_tokens_details".into(),
            serde_json::json!({"reasoning_tokens": u.reasoning_tokens}),
        );
    }
    if u.cache_creation_input_tokens > 0 {
        m.insert(
            "cache_creation_input_tokens".into(),
            u.cache_creation_input_tokens.into(),
        );
    }
    Value::Object(m)
}

/// Folds streaming chunks into the [`ChatResponse`] of the whole call:
/// text and tool-call deltas assembled (by tool index), reasoning blocks
/// assembled (see [`thinking_chunk`]), usage captured.
#[derive(Debug, Default, Clone)]
pub struct StreamAccumulator {
    text: String,
    tools: Vec<(u64, ToolCall)>,
    /// Reasoning blocks with the block index they were built under.
    reasoning: Vec<(Option<u64>, ReasoningBlock)>,
    usage: Option<Usage>,
    served_model: Option<String>,
    finish_reason: Option<String>,
    done: bool,
}

impl StreamAccumulator {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one chunk into account.
    pub fn push(&mut self, chunk: &ChatChunk) {
        let raw = chunk.raw();
        let model = chunk
            .metadata
            .get(stream_chunk::MODEL)
            .or_else(|| raw.and_then(|r| r.get("model").or_else(|| r.pointer("/message/model"))));
        if let Some(model) = model.and_then(Value::as_str) {
            self.served_model = Some(model.to_owned());
        }
        let reason = chunk.metadata.get(stream_chunk::FINISH_REASON).or_else(|| {
            raw.and_then(|r| {
                r.pointer("/choices/0/finish_reason")
                    .or_else(|| r.pointer("/delta/stop_reason"))
            })
        });
        if let Some(reason) = reason.and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        // Usage: OpenAI's final usage chunk; Anthropic's message_start /
        // message_delta (cumulative counts, so merged by maximum).
        let usage = match chunk.kind {
            ChunkKind::Result => chunk.metadata.get("usage"),
            _ => raw.and_then(|r| r.pointer("/message/usage").or_else(|| r.get("usage"))),
        };
        if let Some(u) = usage.and_then(Usage::from_provider) {
            self.usage.get_or_insert_with(Usage::default).merge_max(&u);
        }
        match chunk.kind {
            ChunkKind::Text => self
                .text
                .push_str(chunk.content.as_deref().unwrap_or_default()),
            ChunkKind::ToolUse => self.push_tool(chunk, raw),
            ChunkKind::Thinking => self.push_thinking(chunk),
            ChunkKind::Result if chunk.metadata.get("done") == Some(&Value::Bool(true)) => {
                self.done = true;
            }
            _ => {}
        }
    }

    fn push_thinking(&mut self, chunk: &ChatChunk) {
        if let Some(block) = chunk.metadata.get(thinking_chunk::BLOCK) {
            // A malformed whole block is the decoder's bug or a hostile
            // event; its text (if any) still arrives as `content`.
            let index = chunk
                .metadata
                .get(thinking_chunk::BLOCK_INDEX)
                .and_then(Value::as_u64);
            if let Ok(block) = crate::object_only::object_only::<_, ReasoningBlock>(block) {
                let assembled = match (&block, self.reasoning.last_mut()) {
                    (
                        ReasoningBlock::ResponsesItem { .. },
                        Some((i, last @ ReasoningBlock::Thinking { .. })),
                    ) if *i == index => Some(last),
                    _ => None,
                };
                match assembled {
                    Some(last) => *last = block,
                    None => self.reasoning.push((index, block)),
                }
            }
            return;
        }
        let index = chunk
            .metadata
            .get(thinking_chunk::BLOCK_INDEX)
            .and_then(Value::as_u64);
        let open = match self.reasoning.last_mut() {
            Some((i, ReasoningBlock::Thinking { text, signature }))
                if *i == index && (index.is_some() || signature.is_none()) =>
            {
                Some((text, signature))
            }
            _ => None,
        };
        let (text, signature) = match open {
            Some(open) => open,
            None => {
                self.reasoning.push((
                    index,
                    ReasoningBlock::Thinking {
                        text: String::new(),
                        signature: None,
                    },
                ));
                match self.reasoning.last_mut() {
                    Some((_, ReasoningBlock::Thinking { text, signature })) => (text, signature),
                    _ => return,
                }
            }
        };
        if let Some(delta) = &chunk.content {
            text.push_str(delta);
        }
        if let Some(sig) = chunk
            .metadata
            .get(thinking_chunk::SIGNATURE)
            .and_then(Value::as_str)
        {
            signature.get_or_insert_with(String::new).push_str(sig);
        }
    }

    fn push_tool(&mut self, chunk: &ChatChunk, raw: Option<&Value>) {
        let index = chunk
            .metadata
            .get(stream_chunk::TOOL_INDEX)
            .or_else(|| {
                raw.and_then(|r| {
                    r.pointer("/choices/0/delta/tool_calls/0/index")
                        .or_else(|| r.get("index"))
                })
            })
            .and_then(Value::as_u64)
            .unwrap_or(self.tools.last().map_or(0, |(i, _)| *i));
        let args = chunk
            .tool_input
            .as_ref()
            .and_then(|v| v.get("arguments"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let existing = self.tools.iter().rposition(|(i, c)| {
            *i == index
                && (chunk.tool_id.is_none()
                    || c.id.is_empty()
                    || chunk.tool_id.as_deref() == Some(c.id.as_str()))
        });
        let pos = existing.unwrap_or_else(|| {
            let empty = ToolCall {
                id: String::new(),
                name: String::new(),
                arguments: String::new(),
            };
            self.tools.push((index, empty));
            self.tools.len() - 1
        });
        let call = &mut self.tools[pos].1;
        if let Some(id) = &chunk.tool_id {
            call.id.clone_from(id);
        }
        if let Some(name) = &chunk.tool_name {
            call.name.clone_from(name);
        }
        call.arguments.push_str(args);
    }

    /// Whether the end-of-stream marker was seen.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The assembled response (`raw` is an OpenAI-shaped completion).
    pub fn finish(self) -> ChatResponse {
        let tool_calls: Vec<ToolCall> = self.tools.into_iter().map(|(_, c)| c).collect();
        let raw_calls: Vec<Value> = tool_calls
            .iter()
            .map(|c| {
                serde_json::json!({"id": c.id, "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
        let mut message = Map::new();
        message.insert("role".into(), "assistant".into());
        message.insert("content".into(), self.text.clone().into());
        if !raw_calls.is_empty() {
            message.insert("tool_calls".into(), Value::Array(raw_calls));
        }
        let mut raw = Map::new();
        raw.insert("object".into(), "chat.completion".into());
        if let Some(m) = &self.served_model {
            raw.insert("model".into(), m.clone().into());
        }
        raw.insert(
            "choices".into(),
            serde_json::json!([{"index": 0, "message": message, "finish_reason": self.finish_reason}]),
        );
        if let Some(u) = &self.usage {
            raw.insert("usage".into(), openai_usage(u));
        }
        ChatResponse {
            text: self.text,
            tool_calls,
            raw: Value::Object(raw).into(),
            usage: self.usage,
            served_model: self.served_model,
            finish_reason: self.finish_reason,
            attempts: 1,
            reasoning: self.reasoning.into_iter().map(|(_, b)| b).collect(),
            raw_text: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The roles the dialects know are never allocated; any other role is
    /// kept as given, and a message reads back with the role it was made
    /// with.
    #[test]
    fn known_roles_are_borrowed_and_others_kept_as_given() {
        for r in ["system", "developer", "user", "assistant", "tool"] {
            let m = ChatMessage::new(r, "x");
            assert!(matches!(m.role, Cow::Borrowed(_)), "{r}");
            assert_eq!(m.role, r);
        }
        for r in ["User", "function", "", "assistant "] {
            let m = ChatMessage::new(r, "x");
            assert!(matches!(m.role, Cow::Owned(_)), "{r:?}");
            assert_eq!(m.role, r);
        }
        let v = serde_json::json!({"role": "tool", "content": "out", "tool_call_id": "c"});
        let m = ChatMessage::from_value(&v).unwrap();
        assert!(matches!(m.role, Cow::Borrowed("tool")));
        assert_eq!(m.to_value(), v);
    }

    #[test]
    fn text_extraction_matches_reference() {
        let two =
            json!({"choices": [{"message": {"content": "A"}}, {"message": {"content": "B"}}]});
        assert_eq!(extract_text(&two), "AB");
        let anth = json!({"content": [{"type": "thinking", "thinking": "x"}, {"type": "text", "text": "T1"},
            {"type": "tool_use", "id": "t", "name": "f", "input": {"a": 1}}, {"type": "text", "text": "T2"}]});
        assert_eq!(extract_text(&anth), "T1T2");
        let r = ChatResponse::from_raw(anth);
        assert_eq!(
            r.tool_calls,
            vec![ToolCall {
                id: "t".into(),
                name: "f".into(),
                arguments: "{\"a\":1}".into()
            }]
        );
        assert_eq!(
            extract_text(&json!({"choices": [{"message": {"content": null}}]})),
            ""
        );
        assert_eq!(extract_text(&json!("plain")), "plain");
        assert_eq!(extract_text(&Value::Null), "");
        assert_eq!(extract_text(&json!({"result": "cli"})), "cli");
        let responses = json!({"output": [{"type": "message", "content": [{"type": "output_text", "text": "R"}]}]});
        assert_eq!(extract_text(&responses), "R");
        assert_eq!(
            extract_text(&json!([{"content": "x"}, {"content": "y"}])),
            "xy"
        );
    }

    #[test]
    fn api_call_execution_matches_reference() {
        let err = ModelError::new(
            super::super::ModelErrorKind::BadRequest,
            "openai",
            Some("m"),
            "x",
        )
        .with_status(400)
        .with_body(json!({"error": {"message": "invalid request: mock refused", "type": "mock"}}));
        assert_eq!(
            api_call_execution(Err(&err), 1.0),
            json!({"status": "failed", "duration": 1.0, "response": null,
                   "error": {"error": "APIClientError", "message": "Request failed with status 400: {'error': {'message': 'invalid request: mock refused', 'type': 'mock'}}"},
                   "retryable": null})
        );
        let ok = ChatResponse::from_raw(json!({"choices": []}));
        assert_eq!(api_call_execution(Ok(&ok), 0.5)["status"], "completed");
    }

    #[test]
    fn usage_shapes() {
        let u = Usage::from_provider(
            &json!({"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}),
        )
        .unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.total_tokens),
            (11, 7, 18)
        );
        let a = Usage::from_provider(
            &json!({"input_tokens": 5, "output_tokens": 2, "cache_read_input_tokens": 3}),
        )
        .unwrap();
        assert_eq!((a.input_tokens(), a.total_tokens), (8, 7));
        assert!(Usage::from_provider(&json!({})).is_none());
        // A whole float is a count; a fraction, a negative or a float past
        // u64 is none, and the report falls back as if it were absent.
        let f = Usage::from_provider(
            &json!({"prompt_tokens": 12.0, "completion_tokens": 3.7, "total_tokens": 1e30,
                    "prompt_tokens_details": {"cached_tokens": 2.0},
                    "completion_tokens_details": {"reasoning_tokens": -1.0}}),
        )
        .unwrap();
        assert_eq!(
            (
                f.prompt_tokens,
                f.cache_read_input_tokens,
                f.completion_tokens,
                f.total_tokens,
                f.reasoning_tokens
            ),
            (10, 2, 0, 12, 0)
        );
    }

    #[test]
    fn streamed_usage_is_written_so_it_reads_back_whole() {
        // OpenAI chat (platform.openai.com/docs/api-reference/chat/object):
        // prompt_tokens include the cached ones.
        let openai = json!({"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
            "prompt_tokens_details": {"cached_tokens": 1920},
            "completion_tokens_details": {"reasoning_tokens": 256}});
        // Anthropic (docs.anthropic.com prompt caching): apart.
        let anthropic = json!({"input_tokens": 21, "output_tokens": 393,
            "cache_read_input_tokens": 188086, "cache_creation_input_tokens": 50});
        // Responses (platform.openai.com/docs/api-reference/responses/object).
        let responses = json!({"input_tokens": 328, "output_tokens": 52, "total_tokens": 380,
            "input_tokens_details": {"cached_tokens": 128},
            "output_tokens_details": {"reasoning_tokens": 40}});
        for usage in [openai, anthropic, responses] {
            let read = Usage::from_provider(&usage).unwrap();
            let mut chunk = ChatChunk::new(ChunkKind::Result);
            chunk.metadata.insert("usage".into(), usage.clone());
            let mut acc = StreamAccumulator::new();
            acc.push(&chunk);
            let resp = acc.finish();
            assert_eq!(resp.usage.as_ref(), Some(&read), "{usage}");
            let stored = &resp.raw["usage"];
            assert_eq!(
                Usage::from_provider(stored).as_ref(),
                Some(&read),
                "{stored}"
            );
        }
        let plain = json!({"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18});
        let mut chunk = ChatChunk::new(ChunkKind::Result);
        chunk.metadata.insert("usage".into(), plain.clone());
        let mut acc = StreamAccumulator::new();
        acc.push(&chunk);
        assert_eq!(
            acc.finish().raw["usage"],
            plain,
            "the reference's shape when nothing more"
        );
    }

    #[test]
    fn message_order() {
        let mut m = ChatMessage::assistant(Value::Null);
        m.extra.insert("tool_calls".into(), json!([]));
        assert_eq!(
            serde_json::to_string(&m.to_value()).unwrap(),
            r#"{"role":"assistant","content":null,"tool_calls":[]}"#
        );
        assert_eq!(ChatMessage::from_value(&m.to_value()).unwrap(), m);
    }
}
