//! Anthropic Messages, native.
//!
//! Our compiled request is in chat-completions shape; this file translates
//! it into a Messages request (the system prompt at the top, alternating
//! `user` / `assistant` turns of content blocks, `tool_use` /
//! `tool_result` blocks with ids, `image` blocks, tools with
//! `input_schema`, Anthropic's `tool_choice`, structured output through
//! `output_config.format`, signed thinking replayed first in its assistant
//! turn) and adds the prompt-caching breakpoints ([`caching`]). For a
//! text-only conversation the body is byte for byte the reference's (its
//! compat mode); see `docs/compat.md` "Anthropic Messages, native".
//!
//! Replies and streams are decoded in [`events`].
//!
//! Pages of the API reference this follows: Messages
//! (<https://docs.claude.com/en/api/messages>), tool use
//! (<https://platform.claude.com/docs/en/agents-and-tools/tool-use/handle-tool-calls>),
//! vision (<https://docs.claude.com/en/docs/build-with-claude/vision>),
//! extended thinking
//! (<https://docs.claude.com/en/docs/build-with-claude/extended-thinking>),
//! structured outputs
//! (<https://platform.claude.com/docs/en/build-with-claude/structured-outputs>).

pub mod caching;
pub mod events;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use branch_core::model::{ChatMessage, ChatRequest, ModelConfig, ReasoningBlock, RequestOptions};
use serde_json::{Map, Value, json};

pub use events::{decode_reply, normalize_event};

/// Fields of the Anthropic Messages request model (§4.3), plus the
/// extended-thinking option and the structured-output field this dialect
/// sends.
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
    "thinking",
    "output_config",
];

/// Anthropic's required `max_tokens` when none is configured.
pub const ANTHROPIC_DEFAULT_MAX_TOKENS: u64 = 8192;

/// Why a request cannot be sent as a Messages request.
pub type TranslateError = String;

/// The Messages body: `payload` (kwargs and call fields, merged) with the
/// system prompt, `messages`, `max_tokens`, `stream`, the tools and
/// options translated and the caching breakpoints placed.
pub fn build_body(
    config: &ModelConfig,
    request: &ChatRequest,
    stream: bool,
    mut payload: Map<String, Value>,
) -> Result<Value, TranslateError> {
    let mut messages = request.messages.as_slice();
    let mut system = None;
    if let Some(first) = messages
        .first()
        .filter(|m| matches!(&*m.role, "system" | "developer"))
    {
        system = Some(system_prompt(&first.content)?);
        messages = &messages[1..];
    }
    payload.insert("messages".into(), Value::Array(translate(messages)?));
    if let Some(system) = system {
        payload.insert("system".into(), system);
    }
    if payload.get("max_tokens").is_none_or(Value::is_null) {
        payload.insert("max_tokens".into(), ANTHROPIC_DEFAULT_MAX_TOKENS.into());
    }
    if stream {
        payload.insert("stream".into(), true.into());
    }
    translate_options(&mut payload)?;
    let marker = caching::marker(config, &mut payload)?;
    if let Some(marker) = marker {
        caching::place_breakpoints(&mut payload, &marker);
    }
    match &config.endpoint().request_options {
        RequestOptions::Custom(_) => {
            let fields = config.endpoint().request_options.fields();
            payload.retain(|k, _| fields.is_some_and(|f| f.contains_key(k)));
        }
        _ => payload.retain(|k, _| ANTHROPIC_FIELDS.contains(&k.as_str())),
    }
    Ok(Value::Object(payload))
}

/// The ranges of the reference's Messages request model, unless the
/// endpoint has a restored schema of its own.
pub(crate) fn check_ranges(config: &ModelConfig, body: &Map<String, Value>) -> Result<(), String> {
    match config.endpoint().request_options {
        RequestOptions::Custom(_) => Ok(()),
        _ => super::ranges::Ranges::AnthropicMessages.check(body),
    }
}

/// The `system` field: a string stays a string; a list of text parts
/// becomes text blocks.
fn system_prompt(content: &Value) -> Result<Value, TranslateError> {
    match content {
        Value::String(_) => Ok(content.clone()),
        Value::Array(parts) => parts
            .iter()
            .map(|p| match part_type(p) {
                Some("text") => text_block(p),
                other => Err(format!(
                    "the system prompt holds a {} part; Anthropic takes only text there",
                    other.unwrap_or("untyped")
                )),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        other => Err(format!(
            "the system prompt is {}, not text",
            json_kind(other)
        )),
    }
}

/// A turn being built: its role and its content (a plain string while it
/// is one message of text, blocks otherwise).
struct Turn {
    role: &'static str,
    content: Value,
}

impl Turn {
    fn into_value(self) -> Value {
        json!({"role": self.role, "content": self.content})
    }
}

/// The messages after the system prompt, as alternating Messages turns:
/// tool results become `tool_result` blocks of a user turn, and
/// consecutive messages of one role (tool results and the user text after
/// them, say) merge into one turn.
fn translate(messages: &[Arc<ChatMessage>]) -> Result<Vec<Value>, TranslateError> {
    let mut turns: Vec<Turn> = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let turn = message_turn(m).map_err(|e| format!("message {i} ({}): {e}", m.role))?;
        match turns.last_mut() {
            Some(last) if last.role == turn.role => merge(last, turn.content),
            _ => turns.push(turn),
        }
    }
    Ok(turns.into_iter().map(Turn::into_value).collect())
}

/// Appends `content` to `turn`, keeping every `tool_result` block ahead of
/// the other blocks of a user turn (the API refuses text before them).
fn merge(turn: &mut Turn, content: Value) {
    let mut blocks = as_blocks(std::mem::take(&mut turn.content));
    blocks.extend(as_blocks(content));
    let (mut results, rest): (Vec<Value>, Vec<Value>) = blocks
        .into_iter()
        .partition(|b| part_type(b) == Some("tool_result"));
    results.extend(rest);
    turn.content = Value::Array(results);
}

/// Content as a list of blocks (a non-empty string is one text block).
fn as_blocks(content: Value) -> Vec<Value> {
    match content {
        Value::Array(blocks) => blocks,
        Value::String(s) if s.is_empty() => Vec::new(),
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        _ => Vec::new(),
    }
}

/// Refuses keys of a message this dialect would otherwise drop.
fn check_keys(m: &ChatMessage, allowed: &[&str]) -> Result<(), TranslateError> {
    match m.extra.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(format!("the key `{k}` has no Anthropic equivalent")),
        None => Ok(()),
    }
}

fn message_turn(m: &ChatMessage) -> Result<Turn, TranslateError> {
    match &*m.role {
        "user" => {
            check_keys(m, &[])?;
            let content = match &m.content {
                Value::String(_) => m.content.clone(),
                Value::Array(parts) => Value::Array(user_blocks(parts)?),
                other => return Err(format!("the content is {}", json_kind(other))),
            };
            Ok(Turn {
                role: "user",
                content,
            })
        }
        "assistant" => {
            check_keys(m, &["tool_calls"])?;
            Ok(Turn {
                role: "assistant",
                content: assistant_content(m)?,
            })
        }
        "tool" => {
            check_keys(m, &["tool_call_id", "name"])?;
            let id = m
                .extra
                .get("tool_call_id")
                .and_then(Value::as_str)
                .filter(|id| !id.is_empty())
                .ok_or("a tool result without `tool_call_id`")?;
            let mut block = Map::new();
            block.insert("type".into(), "tool_result".into());
            block.insert("tool_use_id".into(), id.into());
            match &m.content {
                Value::String(s) if s.is_empty() => {}
                Value::String(_) => {
                    block.insert("content".into(), m.content.clone());
                }
                Value::Array(parts) => {
                    block.insert("content".into(), Value::Array(user_blocks(parts)?));
                }
                Value::Null => {}
                other => return Err(format!("the content is {}", json_kind(other))),
            }
            Ok(Turn {
                role: "user",
                content: json!([Value::Object(block)]),
            })
        }
        "system" | "developer" => Err(
            "a system message after the first; Anthropic takes the system prompt only at the top"
                .into(),
        ),
        other => Err(format!("the role `{other}` has no Anthropic equivalent")),
    }
}

/// An assistant message: its replayable reasoning first, then its text,
/// then its tool calls as `tool_use` blocks. Without reasoning or calls a
/// string stays a string (the reference's body).
fn assistant_content(m: &ChatMessage) -> Result<Value, TranslateError> {
    let calls = match m.extra.get("tool_calls") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(calls)) => calls.as_slice(),
        Some(other) => return Err(format!("`tool_calls` is {}", json_kind(other))),
    };
    let thinking: Vec<Value> = m.reasoning.iter().filter_map(replayed).collect();
    if calls.is_empty() && thinking.is_empty() && m.content.is_string() {
        return Ok(m.content.clone());
    }
    let mut blocks = thinking;
    match &m.content {
        Value::String(_) | Value::Null => blocks.extend(as_blocks(m.content.clone())),
        Value::Array(parts) => {
            for p in parts {
                match part_type(p) {
                    Some("text") if p.get("text").and_then(Value::as_str) == Some("") => {}
                    Some("text") => blocks.push(text_block(p)?),
                    other => {
                        return Err(format!(
                            "an assistant {} part has no Anthropic equivalent",
                            other.unwrap_or("untyped")
                        ));
                    }
                }
            }
        }
        other => return Err(format!("the content is {}", json_kind(other))),
    }
    for (i, call) in calls.iter().enumerate() {
        blocks.push(tool_use(call).map_err(|e| format!("tool call {i}: {e}"))?);
    }
    if blocks.is_empty() {
        return Err("an assistant message with neither text nor tool calls".into());
    }
    Ok(Value::Array(blocks))
}

/// The block a reasoning block is replayed as: signed thinking and
/// redacted thinking; unsigned thinking (a compatible server's
/// `reasoning_content`) and Responses items are not Anthropic's to send.
fn replayed(block: &ReasoningBlock) -> Option<Value> {
    match block {
        ReasoningBlock::Thinking {
            text,
            signature: Some(signature),
        } => Some(json!({"type": "thinking", "thinking": text, "signature": signature})),
        ReasoningBlock::RedactedThinking { data } => {
            Some(json!({"type": "redacted_thinking", "data": data}))
        }
        _ => None,
    }
}

/// `{"id", "type": "function", "function": {"name", "arguments"}}` →
/// `{"type": "tool_use", "id", "name", "input"}`; the arguments must be a
/// JSON object (text, or already an object).
fn tool_use(call: &Value) -> Result<Value, TranslateError> {
    let id = call
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or("no id")?;
    let function = call.get("function").ok_or("no `function`")?;
    let name = function
        .get("name")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or("no function name")?;
    let input = match function.get("arguments") {
        Some(Value::String(text)) => serde_json::from_str::<Value>(text)
            .map_err(|e| format!("the arguments of `{name}` are not valid JSON: {e}"))?,
        Some(v @ Value::Object(_)) => v.clone(),
        Some(other) => {
            return Err(format!(
                "the arguments of `{name}` are {}",
                json_kind(other)
            ));
        }
        None => return Err(format!("`{name}` has no arguments")),
    };
    if !input.is_object() {
        return Err(format!(
            "the arguments of `{name}` are {}, not an object",
            json_kind(&input)
        ));
    }
    Ok(json!({"type": "tool_use", "id": id, "name": name, "input": input}))
}

/// The blocks of a user message's (or tool result's) parts: text, images
/// (OpenAI `image_url` parts converted), and blocks already in Anthropic's
/// shape (`image`, `document`) as they are.
fn user_blocks(parts: &[Value]) -> Result<Vec<Value>, TranslateError> {
    parts
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            !(part_type(p) == Some("text") && p.get("text").and_then(Value::as_str) == Some(""))
        })
        .map(|(i, p)| match part_type(p) {
            Some("text") => text_block(p),
            Some("image_url") => image_block(p),
            Some("image" | "document") if p.get("source").is_some() => Ok(p.clone()),
            other => Err(format!(
                "part {i}: a {} part has no Anthropic equivalent",
                other.unwrap_or("untyped")
            )),
        })
        .collect()
}

fn text_block(part: &Value) -> Result<Value, TranslateError> {
    let text = part
        .get("text")
        .and_then(Value::as_str)
        .ok_or("a text part without text")?;
    let mut block = json!({"type": "text", "text": text});
    if let Some(cc) = part.get("cache_control") {
        block["cache_control"] = cc.clone();
    }
    Ok(block)
}

/// The media types the Messages API takes for images.
const IMAGE_MEDIA_TYPES: &[&str] = &["image/jpeg", "image/png", "image/gif", "image/webp"];

/// An OpenAI `image_url` part as an Anthropic `image` block: a base64
/// data URL becomes a `base64` source, an http(s) URL a `url` source;
/// anything else is refused. (`detail` has no Anthropic equivalent.)
fn image_block(part: &Value) -> Result<Value, TranslateError> {
    let url = match part.get("image_url") {
        Some(Value::String(u)) => u.as_str(),
        Some(obj) => obj
            .get("url")
            .and_then(Value::as_str)
            .ok_or("an image part without a url")?,
        None => return Err("an image part without a url".into()),
    };
    if let Some(rest) = url.strip_prefix("data:") {
        let (meta, data) = rest
            .split_once(',')
            .ok_or("an image data URL without data")?;
        let media_type = meta
            .strip_suffix(";base64")
            .ok_or("an image data URL that is not base64")?;
        if !IMAGE_MEDIA_TYPES.contains(&media_type) {
            return Err(format!(
                "an image of type `{media_type}`; Anthropic takes {}",
                IMAGE_MEDIA_TYPES.join(", ")
            ));
        }
        return Ok(json!({"type": "image", "source": {
            "type": "base64", "media_type": media_type, "data": data}}));
    }
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    if lower.starts_with("https://") || lower.starts_with("http://") {
        return Ok(json!({"type": "image", "source": {"type": "url", "url": url}}));
    }
    let shown: String = url.chars().take(32).collect();
    Err(format!(
        "an image URL `{shown}` that is neither a base64 data URL nor http(s)"
    ))
}

fn part_type(part: &Value) -> Option<&str> {
    part.get("type").and_then(Value::as_str)
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The call options in Anthropic's terms: `tools` with `input_schema`,
/// `tool_choice` (with `parallel_tool_calls: false` as
/// `disable_parallel_tool_use`), and a `json_schema` `response_format` as
/// `output_config.format`.
fn translate_options(payload: &mut Map<String, Value>) -> Result<(), TranslateError> {
    if let Some(tools) = payload.get_mut("tools") {
        let Value::Array(list) = tools else {
            return Err(format!("`tools` is {}, not a list", json_kind(tools)));
        };
        for (i, t) in list.iter_mut().enumerate() {
            *t = tool(t).map_err(|e| format!("tool {i}: {e}"))?;
        }
    }
    let parallel = payload.shift_remove("parallel_tool_calls");
    if let Some(choice) = payload.get_mut("tool_choice") {
        *choice = tool_choice(choice)?;
    }
    if parallel == Some(Value::Bool(false)) {
        let choice = payload
            .entry("tool_choice")
            .or_insert_with(|| json!({"type": "auto"}));
        if choice.get("type").and_then(Value::as_str) != Some("none") {
            choice["disable_parallel_tool_use"] = true.into();
        }
    }
    if let Some(format) = payload.shift_remove("response_format") {
        if let Some(schema) = json_schema_format(&format)? {
            let config = payload
                .entry("output_config")
                .or_insert_with(|| Value::Object(Map::new()));
            let Value::Object(config) = config else {
                return Err("`output_config` is not an object".into());
            };
            config.insert(
                "format".into(),
                json!({"type": "json_schema", "schema": schema}),
            );
        }
    }
    Ok(())
}

/// An OpenAI function tool as an Anthropic tool; a tool already in
/// Anthropic's shape (`input_schema`, or a server tool's own `type`) as it
/// is.
fn tool(t: &Value) -> Result<Value, TranslateError> {
    let obj = t.as_object().ok_or("not an object")?;
    match obj.get("type").and_then(Value::as_str) {
        Some("function") => {
            let f = obj
                .get("function")
                .and_then(Value::as_object)
                .ok_or("a function tool without `function`")?;
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or("a function without a name")?;
            let mut out = Map::new();
            out.insert("name".into(), name.into());
            if let Some(d) = f.get("description").filter(|d| !d.is_null()) {
                out.insert("description".into(), d.clone());
            }
            // A function declared without parameters takes none.
            let schema = match f.get("parameters") {
                None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
                Some(p @ Value::Object(_)) => p.clone(),
                Some(other) => {
                    return Err(format!(
                        "the parameters of `{name}` are {}",
                        json_kind(other)
                    ));
                }
            };
            out.insert("input_schema".into(), schema);
            if let Some(strict) = f.get("strict").filter(|s| s.is_boolean()) {
                out.insert("strict".into(), strict.clone());
            }
            if let Some(cc) = obj.get("cache_control") {
                out.insert("cache_control".into(), cc.clone());
            }
            Ok(Value::Object(out))
        }
        None if obj.contains_key("input_schema") && obj.contains_key("name") => Ok(t.clone()),
        Some(other) if other != "function" && obj.contains_key("name") => Ok(t.clone()),
        _ => Err("neither an OpenAI function tool nor an Anthropic tool".into()),
    }
}

/// OpenAI's `tool_choice` in Anthropic's terms.
fn tool_choice(choice: &Value) -> Result<Value, TranslateError> {
    match choice {
        Value::String(s) => match s.as_str() {
            "auto" => Ok(json!({"type": "auto"})),
            "none" => Ok(json!({"type": "none"})),
            "required" | "any" => Ok(json!({"type": "any"})),
            other => Err(format!(
                "`tool_choice` `{other}` has no Anthropic equivalent"
            )),
        },
        Value::Object(o) => match o.get("type").and_then(Value::as_str) {
            Some("function") => {
                let name = o
                    .get("function")
                    .and_then(|f| f.get("name"))
                    .and_then(Value::as_str)
                    .ok_or("`tool_choice` names no function")?;
                Ok(json!({"type": "tool", "name": name}))
            }
            Some("auto" | "any" | "none") => Ok(choice.clone()),
            Some("tool") if o.get("name").is_some_and(Value::is_string) => Ok(choice.clone()),
            _ => Err("`tool_choice` has no Anthropic equivalent".into()),
        },
        other => Err(format!("`tool_choice` is {}", json_kind(other))),
    }
}

/// The schema of a `json_schema` `response_format`; `None` for `text` and
/// `json_object` (no Anthropic equivalent; the reference drops them too).
fn json_schema_format(format: &Value) -> Result<Option<Value>, TranslateError> {
    match format.get("type").and_then(Value::as_str) {
        Some("json_schema") => format
            .pointer("/json_schema/schema")
            .filter(|s| s.is_object())
            .cloned()
            .map(Some)
            .ok_or_else(|| "a `json_schema` response_format without a schema object".into()),
        Some("text" | "json_object") => Ok(None),
        Some(other) => Err(format!(
            "a response_format of type `{other}` has no Anthropic equivalent"
        )),
        None => Err("a response_format without a type".into()),
    }
}
