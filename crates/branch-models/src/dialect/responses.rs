//! OpenAI Responses (`POST {base}/responses`), both ways.
//!
//! Requests: our compiled chat-completions messages become Responses
//! `input` items — the leading system message goes to `instructions` (the
//! API's documented place for the system/developer prompt; it keeps
//! `input` the conversation alone), user text and image parts become
//! `input_text` / `input_image` message parts, assistant text an
//! `output_text` message, native tool calls `function_call` items and tool
//! results `function_call_output` items (matched by `call_id`). The
//! reasoning items recorded with an assistant reply go back before that
//! reply's output, so a reasoning model continues its own reasoning.
//!
//! Conversation state: we always send the whole history and never
//! `previous_response_id`, so by default the request says `store: false`
//! (nothing kept on the provider's side for no use) and, for reasoning
//! models, asks for `include: ["reasoning.encrypted_content"]`: an item of
//! an unstored response can only be sent back with its encrypted content.
//! A caller's own `store: true` is kept; then items go back by id.
//!
//! Replies and streams (`response.*` events) are decoded here into the
//! same [`ChatResponse`] and chunks the verbs consume.

use std::sync::Arc;

use branch_core::model::{
    ChatChunk, ChatMessage, ChatRequest, ChatResponse, ChunkKind, ModelConfig, ReasoningBlock,
    RequestOptions, ToolCall, stream_chunk, thinking_chunk,
};
use serde_json::{Map, Value, json};

use super::openai_reasoning_model;
use crate::sse::{self, Normalized, NotJson};

/// Fields of the Responses request that we send (the API reference's
/// request body, `POST /v1/responses`). Left out on purpose, although the
/// API has them: `previous_response_id` and `conversation` (we send the
/// whole history; server-side state would repeat it), `background` (a
/// background response is polled for, which a call here never does),
/// `prompt` (a stored server-side template would add messages the branch
/// never records) and `context_management` (the server would rewrite the
/// history the branch keeps).
pub const RESPONSES_FIELDS: &[&str] = &[
    "model",
    "instructions",
    "input",
    "include",
    "max_output_tokens",
    "max_tool_calls",
    "metadata",
    "parallel_tool_calls",
    "prompt_cache_key",
    "prompt_cache_retention",
    "reasoning",
    "safety_identifier",
    "service_tier",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "truncation",
    "user",
];

/// The `include` value that makes reasoning items carry their encrypted
/// content, so they can be sent back when the provider stores nothing.
pub const ENCRYPTED_REASONING: &str = "reasoning.encrypted_content";

/// The Responses body: `payload` (kwargs and call fields, merged) with the
/// chat-completions keywords translated, `instructions` and `input` from
/// the messages, the state options, and `stream`.
pub fn build_body(
    config: &ModelConfig,
    request: &ChatRequest,
    stream: bool,
    mut payload: Map<String, Value>,
) -> Value {
    payload.shift_remove("messages");
    let store = payload.get("store").and_then(Value::as_bool);
    let reasons = config.model_name().is_some_and(openai_reasoning_model)
        || payload
            .get("model")
            .and_then(Value::as_str)
            .is_some_and(openai_reasoning_model)
        || payload.contains_key("reasoning")
        || payload.contains_key("reasoning_effort");
    translate_fields(&mut payload, stream);
    let (instructions, input) = input_items(&request.messages, store == Some(true));
    if let Some(instructions) = instructions {
        payload.insert("instructions".into(), instructions.into());
    }
    payload.insert("input".into(), Value::Array(input));
    if store.is_none() {
        payload.insert("store".into(), false.into());
    }
    if store != Some(true) && reasons {
        let include = payload
            .entry("include")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(list) = include {
            if !list.iter().any(|v| v == ENCRYPTED_REASONING) {
                list.push(ENCRYPTED_REASONING.into());
            }
        }
    }
    if stream {
        payload.insert("stream".into(), true.into());
    }
    match &config.endpoint().request_options {
        RequestOptions::Custom(_) => {
            let fields = config.endpoint().request_options.fields();
            payload.retain(|k, _| fields.is_some_and(|f| f.contains_key(k)));
        }
        _ => payload.retain(|k, _| RESPONSES_FIELDS.contains(&k.as_str())),
    }
    Value::Object(payload)
}

/// The chat-completions keywords in their Responses form: `max_tokens` /
/// `max_completion_tokens` → `max_output_tokens`, `reasoning_effort` →
/// `reasoning.effort`, `response_format` → `text.format`, `function`-wrapped
/// tools and tool choice → flat, `stream_options` kept only for a stream
/// and without chat's `include_usage` (Responses always reports usage).
fn translate_fields(payload: &mut Map<String, Value>, stream: bool) {
    let completion = payload
        .shift_remove("max_completion_tokens")
        .filter(|v| !v.is_null());
    let max = payload.shift_remove("max_tokens").filter(|v| !v.is_null());
    if let Some(max) = completion.or(max) {
        if payload.get("max_output_tokens").is_none_or(Value::is_null) {
            payload.insert("max_output_tokens".into(), max);
        }
    }
    if let Some(effort) = payload
        .shift_remove("reasoning_effort")
        .filter(|v| !v.is_null())
    {
        match payload.get_mut("reasoning") {
            Some(Value::Object(r)) => {
                r.entry("effort").or_insert(effort);
            }
            _ => {
                payload.insert("reasoning".into(), json!({ "effort": effort }));
            }
        }
    }
    if let Some(format) = payload
        .shift_remove("response_format")
        .filter(|v| !v.is_null())
    {
        let format = text_format(format);
        match payload.get_mut("text") {
            Some(Value::Object(t)) => {
                t.entry("format").or_insert(format);
            }
            _ => {
                payload.insert("text".into(), json!({ "format": format }));
            }
        }
    }
    if let Some(Value::Array(tools)) = payload.get_mut("tools") {
        for tool in tools.iter_mut() {
            *tool = flat_tool(std::mem::take(tool));
        }
    }
    if let Some(choice) = payload.get_mut("tool_choice") {
        if let Some(name) = choice.pointer("/function/name").cloned() {
            *choice = json!({"type": "function", "name": name});
        }
    }
    if !stream {
        payload.shift_remove("stream_options");
    } else if let Some(Value::Object(opts)) = payload.get_mut("stream_options") {
        opts.shift_remove("include_usage");
        if opts.is_empty() {
            payload.shift_remove("stream_options");
        }
    }
}

/// `{"type": "json_schema", "json_schema": {name, schema, strict?,
/// description?}}` → `{"type": "json_schema", name, schema, ...}`; other
/// formats (`json_object`, `text`) keep their shape.
fn text_format(format: Value) -> Value {
    let Value::Object(mut f) = format else {
        return format;
    };
    if let Some(Value::Object(inner)) = f.shift_remove("json_schema") {
        for (k, v) in inner {
            f.insert(k, v);
        }
    }
    Value::Object(f)
}

/// `{"type": "function", "function": {name, description, parameters,
/// strict?}}` → `{"type": "function", name, description, parameters,
/// strict}`. Responses makes a function tool strict unless told otherwise,
/// which refuses the schemas chat completions accepts (optional
/// properties, no `additionalProperties: false`), so an unset or null
/// `strict` is sent as `false`, chat completions' meaning. A tool already flat (or
/// a built-in tool) is sent as given.
fn flat_tool(tool: Value) -> Value {
    let Value::Object(mut t) = tool else {
        return tool;
    };
    let Some(Value::Object(function)) = t.shift_remove("function") else {
        return Value::Object(t);
    };
    let mut out = Map::new();
    out.insert("type".into(), "function".into());
    for (k, v) in function {
        out.insert(k, v);
    }
    if out.get("strict").is_none_or(Value::is_null) {
        out.insert("strict".into(), false.into());
    }
    Value::Object(out)
}

/// The `instructions` (a leading system message with text content) and
/// the `input` items of `messages`. `store` says whether the provider
/// keeps responses: without it, a reasoning item goes back only with its
/// encrypted content (an id alone names nothing the provider still has).
fn input_items(messages: &[Arc<ChatMessage>], store: bool) -> (Option<String>, Vec<Value>) {
    let mut messages = messages;
    let mut instructions = None;
    if let Some(first) = messages.first().filter(|m| is_system(&m.role)) {
        if let Value::String(s) = &first.content {
            instructions = Some(s.clone());
            messages = &messages[1..];
        }
    }
    let mut items = Vec::with_capacity(messages.len());
    for m in messages {
        match &*m.role {
            "assistant" => assistant_items(m, store, &mut items),
            "tool" => items.push(json!({
                "type": "function_call_output",
                "call_id": m.extra.get("tool_call_id").cloned().unwrap_or(Value::Null),
                "output": match &m.content {
                    Value::String(s) => Value::String(s.clone()),
                    Value::Array(parts) => Value::Array(parts.iter().map(input_part).collect()),
                    Value::Null => Value::String(String::new()),
                    other => Value::String(other.to_string()),
                },
            })),
            role => items.push(json!({
                "type": "message",
                "role": role,
                "content": input_parts(&m.content),
            })),
        }
    }
    (instructions, items)
}

fn is_system(role: &str) -> bool {
    matches!(role, "system" | "developer")
}

/// Message content as Responses input parts.
fn input_parts(content: &Value) -> Value {
    Value::Array(match content {
        Value::Null => Vec::new(),
        Value::Array(parts) => parts.iter().map(input_part).collect(),
        Value::String(s) => vec![json!({"type": "input_text", "text": s})],
        other => vec![json!({"type": "input_text", "text": other.to_string()})],
    })
}

/// One chat-completions content part as a Responses input part: `text` →
/// `input_text`, `image_url` → `input_image` (the URL as a string; the
/// `detail` the API requires, `auto` when unset). A part of another type
/// (already in Responses form, e.g. `input_file`) is sent as given.
fn input_part(part: &Value) -> Value {
    if let Value::String(s) = part {
        return json!({"type": "input_text", "text": s});
    }
    match part.get("type").and_then(Value::as_str) {
        Some("text") => {
            json!({"type": "input_text", "text": part.get("text").cloned().unwrap_or_default()})
        }
        Some("image_url") => {
            let image = part.get("image_url");
            let url = match image {
                Some(Value::Object(o)) => o.get("url").cloned().unwrap_or(Value::Null),
                Some(other) => other.clone(),
                None => Value::Null,
            };
            let detail = image
                .and_then(|i| i.get("detail"))
                .filter(|d| !d.is_null())
                .cloned()
                .unwrap_or_else(|| "auto".into());
            json!({"type": "input_image", "image_url": url, "detail": detail})
        }
        _ => part.clone(),
    }
}

/// An assistant message as items: its Responses reasoning items first,
/// then its text as an `output_text` message, then its tool calls as
/// `function_call` items.
fn assistant_items(m: &ChatMessage, store: bool, items: &mut Vec<Value>) {
    for block in &m.reasoning {
        if let ReasoningBlock::ResponsesItem {
            id,
            summary,
            encrypted_content,
        } = block
        {
            if !store && encrypted_content.is_none() {
                continue;
            }
            let mut item = Map::new();
            item.insert("type".into(), "reasoning".into());
            item.insert("id".into(), id.clone().into());
            item.insert(
                "summary".into(),
                summary
                    .iter()
                    .map(|t| json!({"type": "summary_text", "text": t}))
                    .collect(),
            );
            if let Some(e) = encrypted_content {
                item.insert("encrypted_content".into(), e.clone().into());
            }
            items.push(Value::Object(item));
        }
    }
    let parts: Vec<Value> = match &m.content {
        Value::Null => Vec::new(),
        Value::String(s) if s.is_empty() => Vec::new(),
        Value::String(s) => vec![json!({"type": "output_text", "text": s})],
        Value::Array(parts) => parts
            .iter()
            .map(|p| match (p, p.get("type").and_then(Value::as_str)) {
                (Value::String(s), _) => json!({"type": "output_text", "text": s}),
                (_, Some("text")) => {
                    json!({"type": "output_text", "text": p.get("text").cloned().unwrap_or_default()})
                }
                _ => p.clone(),
            })
            .collect(),
        other => vec![json!({"type": "output_text", "text": other.to_string()})],
    };
    if !parts.is_empty() {
        items.push(json!({"type": "message", "role": "assistant", "content": parts}));
    }
    if let Some(Value::Array(calls)) = m.extra.get("tool_calls") {
        for call in calls {
            let arguments = match call.pointer("/function/arguments") {
                Some(Value::String(a)) => Value::String(a.clone()),
                Some(Value::Null) | None => Value::String(String::new()),
                Some(other) => Value::String(other.to_string()),
            };
            items.push(json!({
                "type": "function_call",
                "call_id": call.get("id").cloned().unwrap_or(Value::Null),
                "name": call.pointer("/function/name").cloned().unwrap_or(Value::Null),
                "arguments": arguments,
            }));
        }
    }
}

/// What a response object's `output` holds: its text (`output_text` and
/// `refusal` parts of message items, in order), its function calls (id =
/// `call_id`), and whether it refused.
fn read_output(response: &Value) -> (String, Vec<ToolCall>, bool) {
    let mut text = String::new();
    let mut calls = Vec::new();
    let mut refused = false;
    let items = response.get("output").and_then(Value::as_array);
    let s = |v: &Value, k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    for item in items.into_iter().flatten() {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                let parts = item.get("content").and_then(Value::as_array);
                for part in parts.into_iter().flatten() {
                    match part.get("type").and_then(Value::as_str) {
                        Some("output_text") => text.push_str(&s(part, "text")),
                        Some("refusal") => {
                            refused = true;
                            text.push_str(&s(part, "refusal"));
                        }
                        _ => {}
                    }
                }
            }
            Some("function_call") => calls.push(ToolCall {
                id: s(item, "call_id"),
                name: s(item, "name"),
                arguments: match item.get("arguments") {
                    Some(Value::String(a)) => a.clone(),
                    Some(Value::Null) | None => String::new(),
                    Some(other) => other.to_string(),
                },
            }),
            _ => {}
        }
    }
    (text, calls, refused)
}

/// The finish reason of a response object, in the normalised spelling:
/// `completed` → `tool_calls` when it calls functions, `refusal` when it
/// refused, else `stop`; `incomplete` → `length` (`max_output_tokens`),
/// `content_filter`, or the reason given; any other status as is.
fn finish_reason(response: &Value, has_calls: bool, refused: bool) -> Option<String> {
    let status = response.get("status").and_then(Value::as_str);
    let word = match status {
        Some("completed") | None if has_calls => "tool_calls",
        Some("completed") if refused => "refusal",
        Some("completed") => "stop",
        Some("incomplete") => match response
            .pointer("/incomplete_details/reason")
            .and_then(Value::as_str)
        {
            Some("max_output_tokens") => "length",
            Some(reason) => reason,
            None => "incomplete",
        },
        Some(other) => other,
        None => return None,
    };
    Some(word.to_owned())
}

/// Maps a complete Responses reply (a response object). Usage, the served
/// model and the reasoning items are read as for every protocol
/// ([`ChatResponse::from_raw`]); text, tool calls and the finish reason
/// from `output` and `status`.
pub fn decode_reply(raw: Value) -> ChatResponse {
    let (text, tool_calls, refused) = read_output(&raw);
    let finish = finish_reason(&raw, !tool_calls.is_empty(), refused);
    let mut r = ChatResponse::from_raw(raw);
    r.text = text;
    r.tool_calls = tool_calls;
    r.finish_reason = finish;
    r
}

/// For a 2xx reply: the effective HTTP status of a failed response
/// (`status: failed` with its `error`, or a bare error envelope). The
/// error's `code` decides: `server_error` and `vector_store_timeout` are
/// the provider's trouble (500, retried), `rate_limit_exceeded` is 429,
/// anything else (`invalid_prompt`, `invalid_image` ...) the request's
/// fault (400).
pub fn failed_reply_status(body: &Value, http_status: u16) -> Option<u16> {
    let failed = body.get("status").and_then(Value::as_str) == Some("failed");
    if !failed {
        return super::error_envelope_status(body, http_status);
    }
    Some(match body.pointer("/error/code").and_then(Value::as_str) {
        Some("server_error" | "vector_store_timeout") => 500,
        Some("rate_limit_exceeded") => 429,
        _ => 400,
    })
}

fn chunk(kind: ChunkKind, raw: &Value) -> ChatChunk {
    let mut c = ChatChunk::new(kind);
    c.metadata.insert("raw".into(), raw.clone());
    c
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// Normalises one event of a Responses stream (`event_name` is `message`
/// when unnamed; the event's own `type` decides).
///
/// Reasoning arrives twice: summary (or reasoning-text) deltas, shown as
/// they stream, and at `response.output_item.done` the whole item with its
/// id and encrypted content, which replaces the text assembled from the
/// deltas under the same `output_index` (see
/// [`thinking_chunk::BLOCK`]). Tool calls are keyed by `output_index`
/// ([`stream_chunk::TOOL_INDEX`]); a server that omits it (llama.cpp) has
/// its calls assembled in order.
pub fn normalize_event(event_name: &str, data: &str) -> Result<Normalized, NotJson> {
    if data.trim() == "[DONE]" {
        return sse::normalize(event_name, data);
    }
    let raw = serde_json::from_str::<Value>(data).map_err(|_| NotJson)?;
    let ty = raw
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or(event_name);
    let index = raw.get("output_index").and_then(Value::as_u64);
    let item_type = str_at(&raw, "/item/type");
    let mut call_failed = false;
    let mut terminal = false;
    let c = match ty {
        "response.created" | "response.in_progress" | "response.queued" => {
            let mut c = chunk(ChunkKind::System, &raw);
            if let Some(m) = str_at(&raw, "/response/model") {
                c.metadata.insert(stream_chunk::MODEL.into(), m.into());
            }
            c
        }
        "response.output_text.delta" | "response.refusal.delta" => {
            let mut c = chunk(ChunkKind::Text, &raw);
            c.content = str_at(&raw, "/delta").map(str::to_owned);
            c.is_delta = true;
            c
        }
        "response.output_item.added" if item_type == Some("function_call") => {
            let mut c = chunk(ChunkKind::ToolUse, &raw);
            c.tool_id = str_at(&raw, "/item/call_id").map(str::to_owned);
            c.tool_name = str_at(&raw, "/item/name").map(str::to_owned);
            c.tool_input =
                Some(json!({"arguments": str_at(&raw, "/item/arguments").unwrap_or_default()}));
            c.is_delta = true;
            if let Some(i) = index {
                c.metadata.insert(stream_chunk::TOOL_INDEX.into(), i.into());
            }
            c
        }
        "response.function_call_arguments.delta" => {
            let mut c = chunk(ChunkKind::ToolUse, &raw);
            c.tool_input = Some(json!({"arguments": str_at(&raw, "/delta").unwrap_or_default()}));
            c.is_delta = true;
            if let Some(i) = index {
                c.metadata.insert(stream_chunk::TOOL_INDEX.into(), i.into());
            }
            c
        }
        "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
            let mut c = chunk(ChunkKind::Thinking, &raw);
            c.content = str_at(&raw, "/delta").map(str::to_owned);
            c.is_delta = true;
            if let Some(i) = index {
                c.metadata
                    .insert(thinking_chunk::BLOCK_INDEX.into(), i.into());
            }
            c
        }
        "response.output_item.done" if item_type == Some("reasoning") => {
            match reasoning_block(&raw["item"]) {
                Some(block) => {
                    let mut c = chunk(ChunkKind::Thinking, &raw);
                    c.metadata.insert(thinking_chunk::BLOCK.into(), block);
                    if let Some(i) = index {
                        c.metadata
                            .insert(thinking_chunk::BLOCK_INDEX.into(), i.into());
                    }
                    c
                }
                None => chunk(ChunkKind::System, &raw),
            }
        }
        "response.completed" | "response.incomplete" => {
            terminal = true;
            let response = raw.get("response").unwrap_or(&Value::Null);
            let mut c = chunk(ChunkKind::Result, &raw);
            c.metadata.insert("done".into(), true.into());
            if let Some(u) = response.get("usage").filter(|u| u.is_object()) {
                c.metadata.insert("usage".into(), u.clone());
            }
            if let Some(m) = response.get("model").and_then(Value::as_str) {
                c.metadata.insert(stream_chunk::MODEL.into(), m.into());
            }
            let (_, calls, refused) = read_output(response);
            if let Some(reason) = finish_reason(response, !calls.is_empty(), refused) {
                c.metadata
                    .insert(stream_chunk::FINISH_REASON.into(), reason.into());
            }
            c
        }
        "response.failed" | "error" => {
            terminal = ty == "response.failed";
            call_failed = true;
            let mut c = chunk(ChunkKind::Error, &raw);
            c.is_error = true;
            c.content = str_at(&raw, "/response/error/message")
                .or_else(|| str_at(&raw, "/error/message"))
                .or_else(|| str_at(&raw, "/message"))
                .map(str::to_owned);
            c
        }
        _ => chunk(ChunkKind::System, &raw),
    };
    Ok(Normalized {
        chunk: c,
        call_failed,
        terminal,
    })
}

/// A streamed `reasoning` item as the stored form of a
/// [`ReasoningBlock::ResponsesItem`]; `None` without an id (nothing to
/// send back).
fn reasoning_block(item: &Value) -> Option<Value> {
    let id = item.get("id").and_then(Value::as_str)?;
    let summary: Vec<Value> = item
        .get("summary")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .map(Value::from)
        .collect();
    let mut block = json!({"type": "responses_item", "id": id, "summary": summary});
    if let Some(e) = item.get("encrypted_content").and_then(Value::as_str) {
        block["encrypted_content"] = e.into();
    }
    Some(block)
}

#[cfg(test)]
mod tests;
