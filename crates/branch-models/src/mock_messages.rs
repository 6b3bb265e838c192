//! A stand-in for the Anthropic Messages API on 127.0.0.1 that checks
//! every request the way the API does before it answers: alternating
//! `user` / `assistant` turns opening with `user`, known content blocks,
//! `tool_result` blocks first in their user turn and each answering a
//! `tool_use` id of the assistant turn just before (and every `tool_use`
//! answered), tools with `input_schema`, Anthropic's `tool_choice`, no
//! request fields outside the Messages request model, at most four
//! `cache_control` breakpoints, and with extended thinking the last
//! assistant turn with tool use opening with its thinking. A request that
//! breaks a rule is answered 400 with an `invalid_request_error`, as the
//! API answers; a valid one gets the next scripted reply, as a whole
//! message or (with `stream: true`) as the Messages event stream.
//!
//! Rules from <https://docs.claude.com/en/api/messages> and
//! <https://platform.claude.com/docs/en/agents-and-tools/tool-use/handle-tool-calls>.

// Test support only: failing to bind 127.0.0.1 is a broken test machine,
// reported by a panic naming it.
#![allow(clippy::expect_used)]

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Top-level fields of a Messages request.
const REQUEST_FIELDS: &[&str] = &[
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
    "service_tier",
];

#[derive(Debug, Default)]
struct Shared {
    replies: VecDeque<Value>,
    requests: Vec<Value>,
    rejections: Vec<String>,
}

/// The running stand-in; stops when dropped.
#[derive(Debug)]
pub struct MockMessagesServer {
    addr: std::net::SocketAddr,
    shared: Arc<Mutex<Shared>>,
    task: JoinHandle<()>,
}

impl Drop for MockMessagesServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MockMessagesServer {
    /// Binds 127.0.0.1 on a free port and starts serving.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(Mutex::new(Shared::default()));
        let s = Arc::clone(&shared);
        let task = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let s = Arc::clone(&s);
                tokio::spawn(async move {
                    let _ = serve(sock, s).await;
                });
            }
        });
        Self { addr, shared, task }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Queues a reply: a Messages `message` object (`content` blocks,
    /// `stop_reason`, `usage`; `id`, `type`, `role` and `model` filled in).
    pub fn push(&self, message: Value) {
        self.lock().replies.push_back(message);
    }

    /// Every request body received, valid or not.
    pub fn requests(&self) -> Vec<Value> {
        self.lock().requests.clone()
    }

    /// Why each refused request was refused.
    pub fn rejections(&self) -> Vec<String> {
        self.lock().rejections.clone()
    }
}

async fn serve(mut sock: TcpStream, shared: Arc<Mutex<Shared>>) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(8192);
    loop {
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            let mut tmp = [0u8; 8192];
            let n = sock.read(&mut tmp).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&tmp[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let start = head_end + 4;
        while buf.len() < start + len {
            let mut tmp = [0u8; 8192];
            let n = sock.read(&mut tmp).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&tmp[..n]);
        }
        let body: Value = serde_json::from_slice(&buf[start..start + len]).unwrap_or(Value::Null);
        buf.drain(..start + len);
        let outcome = {
            let mut s = shared
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            s.requests.push(body.clone());
            match validate(&body) {
                Err(reason) => {
                    s.rejections.push(reason.clone());
                    Err(reason)
                }
                Ok(()) => Ok(s.replies.pop_front()),
            }
        };
        let stream = body.get("stream") == Some(&Value::Bool(true));
        let model = body.get("model").cloned().unwrap_or(Value::Null);
        match outcome {
            Err(reason) => {
                let b = json!({"type": "error", "error": {"type": "invalid_request_error", "message": reason}});
                respond(&mut sock, 400, "application/json", &b.to_string()).await?;
            }
            Ok(None) => {
                let b = json!({"type": "error", "error": {"type": "api_error", "message": "stand-in: no scripted reply left"}});
                respond(&mut sock, 500, "application/json", &b.to_string()).await?;
            }
            Ok(Some(mut message)) => {
                message["id"] = "msg_stand_in".into();
                message["type"] = "message".into();
                message["role"] = "assistant".into();
                message["model"] = model;
                if stream {
                    respond(&mut sock, 200, "text/event-stream", &events(&message)).await?;
                } else {
                    respond(&mut sock, 200, "application/json", &message.to_string()).await?;
                }
            }
        }
    }
}

async fn respond(
    sock: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &str,
) -> std::io::Result<()> {
    let reason = if status == 200 { "OK" } else { "Error" };
    let out = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    sock.write_all(out.as_bytes()).await?;
    sock.flush().await
}

/// `text` in pieces of at most `n` characters.
fn pieces(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}

/// The Messages event stream of a whole `message`.
fn events(message: &Value) -> String {
    let mut out = String::new();
    let mut emit = |v: Value| {
        let ty = v["type"].as_str().unwrap_or_default().to_owned();
        out.push_str(&format!("event: {ty}\ndata: {v}\n\n"));
    };
    let mut start = message.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    emit(json!({"type": "message_start", "message": start}));
    let blocks = message["content"].as_array().cloned().unwrap_or_default();
    for (i, b) in blocks.iter().enumerate() {
        let delta = |d: Value| json!({"type": "content_block_delta", "index": i, "delta": d});
        match b["type"].as_str() {
            Some("text") => {
                emit(
                    json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}),
                );
                for p in pieces(b["text"].as_str().unwrap_or_default(), 5) {
                    emit(delta(json!({"type": "text_delta", "text": p})));
                }
            }
            Some("tool_use") => {
                emit(
                    json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}}),
                );
                for p in pieces(&b["input"].to_string(), 3) {
                    emit(delta(
                        json!({"type": "input_json_delta", "partial_json": p}),
                    ));
                }
            }
            Some("thinking") => {
                emit(
                    json!({"type": "content_block_start", "index": i, "content_block": {"type": "thinking", "thinking": ""}}),
                );
                for p in pieces(b["thinking"].as_str().unwrap_or_default(), 6) {
                    emit(delta(json!({"type": "thinking_delta", "thinking": p})));
                }
                emit(delta(
                    json!({"type": "signature_delta", "signature": b["signature"]}),
                ));
            }
            _ => emit(json!({"type": "content_block_start", "index": i, "content_block": b})),
        }
        emit(json!({"type": "content_block_stop", "index": i}));
    }
    emit(
        json!({"type": "message_delta", "delta": {"stop_reason": message["stop_reason"], "stop_sequence": null},
        "usage": {"output_tokens": message.pointer("/usage/output_tokens").cloned().unwrap_or(json!(0))}}),
    );
    emit(json!({"type": "message_stop"}));
    out
}

/// Checks a request body as the Messages API does; `Err` names the rule.
pub fn validate(body: &Value) -> Result<(), String> {
    let obj = body.as_object().ok_or("the body is not a JSON object")?;
    if let Some(k) = obj.keys().find(|k| !REQUEST_FIELDS.contains(&k.as_str())) {
        return Err(format!("{k}: Extra inputs are not permitted"));
    }
    obj.get("model")
        .and_then(Value::as_str)
        .ok_or("model: Field required")?;
    obj.get("max_tokens")
        .and_then(Value::as_u64)
        .filter(|n| *n > 0)
        .ok_or("max_tokens: Field required")?;
    match obj.get("system") {
        None | Some(Value::String(_)) => {}
        Some(Value::Array(blocks)) => {
            for (i, b) in blocks.iter().enumerate() {
                if b["type"] != "text" || !b["text"].is_string() {
                    return Err(format!("system.{i}: only text blocks are allowed"));
                }
            }
        }
        Some(_) => return Err("system: Input should be a valid string or list".into()),
    }
    let tools = validate_tools(obj.get("tools"))?;
    validate_tool_choice(obj.get("tool_choice"), &tools)?;
    let messages = obj
        .get("messages")
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
        .ok_or("messages: at least one message is required")?;
    let thinking = body.pointer("/thinking/type").and_then(Value::as_str) == Some("enabled");
    validate_messages(messages, thinking)?;
    let marks = count_marks(body);
    if marks > 4 {
        return Err(format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {marks}."
        ));
    }
    Ok(())
}

fn count_marks(v: &Value) -> usize {
    match v {
        Value::Object(o) => {
            usize::from(o.get("cache_control").is_some_and(Value::is_object))
                + o.iter()
                    .filter(|(k, _)| !matches!(k.as_str(), "cache_control" | "input_schema"))
                    .map(|(_, x)| count_marks(x))
                    .sum::<usize>()
        }
        Value::Array(a) => a.iter().map(count_marks).sum(),
        _ => 0,
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn validate_tools(tools: Option<&Value>) -> Result<HashSet<String>, String> {
    let mut names = HashSet::new();
    let Some(tools) = tools else {
        return Ok(names);
    };
    let list = tools
        .as_array()
        .ok_or("tools: Input should be a valid list")?;
    for (i, t) in list.iter().enumerate() {
        let o = t.as_object().ok_or(format!("tools.{i}: not an object"))?;
        if let Some(k) = o.keys().find(|k| {
            !matches!(
                k.as_str(),
                "name" | "description" | "input_schema" | "cache_control" | "strict" | "type"
            )
        }) {
            return Err(format!(
                "tools.{i}.custom.{k}: Extra inputs are not permitted"
            ));
        }
        let name = o
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| valid_name(n))
            .ok_or(format!("tools.{i}.custom.name: Field required"))?;
        if o.get("input_schema").and_then(|s| s.get("type")) != Some(&json!("object")) {
            return Err(format!("tools.{i}.custom.input_schema: Field required"));
        }
        if !names.insert(name.to_owned()) {
            return Err(format!("tools: Tool names must be unique ({name})"));
        }
    }
    Ok(names)
}

fn validate_tool_choice(choice: Option<&Value>, tools: &HashSet<String>) -> Result<(), String> {
    let Some(choice) = choice else {
        return Ok(());
    };
    match choice.get("type").and_then(Value::as_str) {
        Some("auto" | "any" | "none") => Ok(()),
        Some("tool") => {
            let name = choice.get("name").and_then(Value::as_str).unwrap_or("");
            if tools.contains(name) {
                Ok(())
            } else {
                Err(format!("tool_choice: no tool named `{name}`"))
            }
        }
        _ => Err("tool_choice: Input tag does not match any of the expected tags".into()),
    }
}

fn validate_messages(messages: &[Value], thinking: bool) -> Result<(), String> {
    let mut open_calls: Vec<String> = Vec::new();
    let mut last_assistant_with_tools = None;
    for (i, m) in messages.iter().enumerate() {
        let o = m
            .as_object()
            .ok_or(format!("messages.{i}: not an object"))?;
        if let Some(k) = o.keys().find(|k| !matches!(k.as_str(), "role" | "content")) {
            return Err(format!("messages.{i}.{k}: Extra inputs are not permitted"));
        }
        let role = o.get("role").and_then(Value::as_str).unwrap_or("");
        let want = if i % 2 == 0 { "user" } else { "assistant" };
        if role != want {
            return Err(format!(
                "messages.{i}: roles must alternate between \"user\" and \"assistant\", starting with \"user\" (found `{role}`)"
            ));
        }
        let blocks: Vec<Value> = match o.get("content") {
            Some(Value::String(s)) => vec![json!({"type": "text", "text": s})],
            Some(Value::Array(b)) => b.clone(),
            _ => return Err(format!("messages.{i}.content: Field required")),
        };
        let mut seen_other = false;
        let mut answered = Vec::new();
        let mut calls = Vec::new();
        for (j, b) in blocks.iter().enumerate() {
            let at = format!("messages.{i}.content.{j}");
            match (role, b.get("type").and_then(Value::as_str)) {
                (_, Some("text")) => {
                    if b["text"].as_str().is_none_or(str::is_empty) {
                        return Err(format!("{at}: text content blocks must be non-empty"));
                    }
                    seen_other = true;
                }
                ("user", Some("image")) => {
                    let src = &b["source"];
                    let ok = match src["type"].as_str() {
                        Some("base64") => {
                            matches!(
                                src["media_type"].as_str(),
                                Some("image/jpeg" | "image/png" | "image/gif" | "image/webp")
                            ) && src["data"].is_string()
                        }
                        Some("url") => src["url"].as_str().is_some_and(|u| u.starts_with("http")),
                        _ => false,
                    };
                    if !ok {
                        return Err(format!("{at}.source: invalid image source"));
                    }
                    seen_other = true;
                }
                ("user", Some("tool_result")) => {
                    if seen_other {
                        return Err(format!(
                            "{at}: tool_result blocks must come before any other content in the user message"
                        ));
                    }
                    let id = b["tool_use_id"].as_str().unwrap_or("").to_owned();
                    if !open_calls.contains(&id) {
                        return Err(format!(
                            "{at}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                        ));
                    }
                    answered.push(id);
                }
                ("assistant", Some("tool_use")) => {
                    let id = b["id"].as_str().unwrap_or("");
                    if !valid_name(id) || !b["name"].is_string() || !b["input"].is_object() {
                        return Err(format!("{at}: invalid tool_use block"));
                    }
                    calls.push(id.to_owned());
                }
                ("assistant", Some("thinking")) => {
                    if !b["thinking"].is_string() || !b["signature"].is_string() {
                        return Err(format!("{at}.signature: Field required"));
                    }
                }
                ("assistant", Some("redacted_thinking")) => {
                    if !b["data"].is_string() {
                        return Err(format!("{at}.data: Field required"));
                    }
                }
                (_, other) => {
                    return Err(format!(
                        "{at}: a `{}` block is not allowed in a {role} message",
                        other.unwrap_or("untyped")
                    ));
                }
            }
        }
        if role == "user" {
            if let Some(missing) = open_calls.iter().find(|c| !answered.contains(c)) {
                return Err(format!(
                    "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {missing}"
                ));
            }
            open_calls.clear();
        } else {
            if !calls.is_empty() {
                last_assistant_with_tools = Some((i, blocks[0]["type"].clone()));
            }
            open_calls = calls;
        }
    }
    if !open_calls.is_empty() {
        return Err("the last message has `tool_use` blocks without results".into());
    }
    if thinking {
        if let Some((i, first)) = last_assistant_with_tools {
            if first != "thinking" && first != "redacted_thinking" {
                return Err(format!(
                    "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found {first}. When `thinking` is enabled, a final `assistant` message must start with a thinking block."
                ));
            }
        }
    }
    Ok(())
}
