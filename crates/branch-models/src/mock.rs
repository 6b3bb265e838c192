//! A real scripted OpenAI-compatible chat-completions server on 127.0.0.1,
//! answering like the fixtures' mock (fixtures README "How values were
//! produced") and capturing every request. On an Anthropic Messages path
//! it answers the same script in that protocol's shapes
//! ([`crate::mock_anthropic`]).
//!
//! ```no_run
//! # async fn demo() {
//! use branch_models::mock::{MockReply, MockServer};
//! let server = MockServer::start().await;
//! server.push(MockReply::text("Hello"));
//! let base_url = server.base_url(); // "http://127.0.0.1:PORT/v1"
//! # }
//! ```

// Test support only: failing to bind 127.0.0.1 is a broken test machine,
// reported by a panic naming it.
#![allow(clippy::expect_used)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A tool call in a scripted reply.
#[derive(Debug, Clone, PartialEq)]
pub struct MockToolCall {
    /// Call id.
    pub id: String,
    /// Function name.
    pub name: String,
    /// Arguments (a JSON string is sent as is; other values are dumped).
    pub arguments: Value,
}

/// What a scripted reply contains.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplyBody {
    /// `choices[0].message.content = T`.
    Text(String),
    /// Content is `json.dumps(V)` (Python separators).
    Json(Value),
    /// An OpenAI tool-calls message (content `null` unless text given).
    ToolCalls(Vec<MockToolCall>, Option<String>),
    /// HTTP `status` with `{"error": {"message": M, "type": "mock"}}`.
    Error {
        /// Status code.
        status: u16,
        /// Error message.
        message: String,
    },
    /// A raw reply: status, extra headers, body bytes.
    Raw {
        /// Status code.
        status: u16,
        /// Extra headers.
        headers: Vec<(String, String)>,
        /// Body.
        body: String,
    },
    /// Close the connection without replying.
    Reset,
}

/// One scripted reply.
#[derive(Debug, Clone, PartialEq)]
pub struct MockReply {
    /// The content.
    pub body: ReplyBody,
    /// Characters per SSE content delta (default 8).
    pub chunk_size: usize,
    /// Wait before answering.
    pub delay: Option<Duration>,
    /// For streaming: wait between two SSE events.
    pub pace: Option<Duration>,
    /// Extra response headers (e.g. `Retry-After`).
    pub headers: Vec<(String, String)>,
    /// For streaming: stop after this many SSE events and close the
    /// connection (a truncated stream).
    pub truncate_after_events: Option<usize>,
}

impl MockReply {
    fn of(body: ReplyBody) -> Self {
        Self {
            body,
            chunk_size: 8,
            delay: None,
            pace: None,
            headers: Vec::new(),
            truncate_after_events: None,
        }
    }

    /// `{"text": T}`.
    pub fn text(t: &str) -> Self {
        Self::of(ReplyBody::Text(t.to_owned()))
    }

    /// `{"json": V}`.
    pub fn json(v: Value) -> Self {
        Self::of(ReplyBody::Json(v))
    }

    /// `{"tool_calls": [...], "text": null}`.
    pub fn tool_calls(calls: Vec<MockToolCall>) -> Self {
        Self::of(ReplyBody::ToolCalls(calls, None))
    }

    /// A reply with text before its tool calls ("Let me check.").
    pub fn text_and_tool_calls(text: &str, calls: Vec<MockToolCall>) -> Self {
        Self::of(ReplyBody::ToolCalls(calls, Some(text.to_owned())))
    }

    /// `{"status": N, "error": M}`.
    pub fn error(status: u16, message: &str) -> Self {
        Self::of(ReplyBody::Error {
            status,
            message: message.to_owned(),
        })
    }

    /// A raw HTTP reply.
    pub fn raw(status: u16, body: &str) -> Self {
        Self::of(ReplyBody::Raw {
            status,
            headers: Vec::new(),
            body: body.to_owned(),
        })
    }

    /// Drop the connection.
    pub fn reset() -> Self {
        Self::of(ReplyBody::Reset)
    }

    /// Reads a fixture-style script entry (`{"text"}`, `{"json"}`,
    /// `{"tool_calls", "text"}`, `{"status", "error"}`, optional
    /// `chunk_size`).
    pub fn from_script(entry: &Value) -> Option<Self> {
        let mut r = if let (Some(status), Some(err)) = (entry.get("status"), entry.get("error")) {
            Self::error(
                u16::try_from(status.as_u64()?).ok()?,
                err.as_str().unwrap_or_default(),
            )
        } else if let Some(calls) = entry.get("tool_calls").and_then(Value::as_array) {
            let calls = calls
                .iter()
                .map(|c| MockToolCall {
                    id: c
                        .get("id")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    name: c
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    arguments: c.get("arguments").cloned().unwrap_or(json!({})),
                })
                .collect();
            let text = entry.get("text").and_then(Value::as_str).map(str::to_owned);
            Self::of(ReplyBody::ToolCalls(calls, text))
        } else if let Some(v) = entry.get("json") {
            Self::json(v.clone())
        } else {
            Self::text(entry.get("text")?.as_str()?)
        };
        if let Some(n) = entry.get("chunk_size").and_then(Value::as_u64) {
            r.chunk_size = usize::try_from(n).unwrap_or(8).max(1);
        }
        Some(r)
    }

    /// Characters per SSE delta.
    pub fn chunk_size(mut self, n: usize) -> Self {
        self.chunk_size = n.max(1);
        self
    }

    /// Answer after `d`.
    pub fn delayed(mut self, d: Duration) -> Self {
        self.delay = Some(d);
        self
    }

    /// Streams its events `d` apart (a model writing as it thinks).
    pub fn paced(mut self, d: Duration) -> Self {
        self.pace = Some(d);
        self
    }

    /// Adds a response header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Truncates a streamed reply after `n` events.
    pub fn truncated_after(mut self, n: usize) -> Self {
        self.truncate_after_events = Some(n);
        self
    }
}

/// A request the server received.
#[derive(Debug, Clone, PartialEq)]
pub struct CapturedRequest {
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// Headers (names lower-cased).
    pub headers: Vec<(String, String)>,
    /// The JSON body (`Null` if not JSON).
    pub body: Value,
}

impl CapturedRequest {
    /// A header value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Default)]
struct Shared {
    queue: VecDeque<MockReply>,
    fallback: Option<MockReply>,
    requests: Vec<CapturedRequest>,
    served: u64,
}

/// The running server; stops when dropped.
#[derive(Debug)]
pub struct MockServer {
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    task: JoinHandle<()>,
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MockServer {
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
                    let _ = serve_connection(sock, s).await;
                });
            }
        });
        Self { addr, shared, task }
    }

    /// A server that answers every request with `reply` (after the queue).
    pub async fn start_static(reply: MockReply) -> Self {
        let s = Self::start().await;
        s.lock().fallback = Some(reply);
        s
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

    /// The socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues a reply.
    pub fn push(&self, reply: MockReply) {
        self.lock().queue.push_back(reply);
    }

    /// Queues several replies.
    pub fn script(&self, replies: impl IntoIterator<Item = MockReply>) {
        self.lock().queue.extend(replies);
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<CapturedRequest> {
        self.lock().requests.clone()
    }

    /// The JSON bodies received so far, moved out (the server forgets
    /// them): a benchmark recording many bodies neither copies them nor
    /// leaves them to be freed by the server's tasks while it measures.
    pub fn take_bodies(&self) -> Vec<Value> {
        self.lock().requests.drain(..).map(|r| r.body).collect()
    }

    /// The JSON bodies received so far.
    pub fn bodies(&self) -> Vec<Value> {
        self.lock()
            .requests
            .iter()
            .map(|r| r.body.clone())
            .collect()
    }

    /// Number of requests received.
    pub fn request_count(&self) -> usize {
        self.lock().requests.len()
    }
}

async fn serve_connection(mut sock: TcpStream, shared: Arc<Mutex<Shared>>) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(4096);
    loop {
        // Read one request head.
        let head_end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i;
            }
            let mut tmp = [0u8; 8192];
            let n = sock.read(&mut tmp).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&tmp[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let mut lines = head.split("\r\n");
        let request_line = lines.next().unwrap_or_default();
        let mut parts = request_line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_owned();
        let path = parts.next().unwrap_or_default().to_owned();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let len: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        let body_start = head_end + 4;
        while buf.len() < body_start + len {
            let mut tmp = [0u8; 8192];
            let n = sock.read(&mut tmp).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&tmp[..n]);
        }
        let body_bytes = buf[body_start..body_start + len].to_vec();
        buf.drain(..body_start + len);
        let body: Value = serde_json::from_slice(&body_bytes).unwrap_or(Value::Null);
        let anthropic = is_messages_path(&path);
        let (reply, n) = {
            let mut s = shared
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            s.requests.push(CapturedRequest {
                method,
                path,
                headers,
                body: body.clone(),
            });
            s.served += 1;
            let reply = s.queue.pop_front().or_else(|| s.fallback.clone());
            (reply, s.served)
        };
        let reply = reply.unwrap_or_else(|| MockReply::error(500, "mock: no scripted reply left"));
        if let Some(d) = reply.delay {
            tokio::time::sleep(d).await;
        }
        let streaming = body.get("stream") == Some(&Value::Bool(true));
        match &reply.body {
            ReplyBody::Reset => {
                drop(sock);
                return Ok(());
            }
            ReplyBody::Error { status, message } => {
                let b = if anthropic {
                    crate::mock_anthropic::error(message).to_string()
                } else {
                    json!({"error": {"message": message, "type": "mock"}}).to_string()
                };
                write_response(&mut sock, *status, &reply.headers, "application/json", &b).await?;
            }
            ReplyBody::Raw {
                status,
                headers,
                body,
            } => {
                let mut h = headers.clone();
                h.extend(reply.headers.iter().cloned());
                write_response(&mut sock, *status, &h, "application/json", body).await?;
            }
            _ if streaming => {
                let events: Vec<String> = if anthropic {
                    crate::mock_anthropic::events(&reply, n, &body)
                        .into_iter()
                        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
                        .collect()
                } else {
                    sse_events(&reply, n, &body)
                        .into_iter()
                        .map(|data| format!("data: {data}\n\n"))
                        .collect()
                };
                write_sse(&mut sock, &reply, &events).await?;
                return Ok(());
            }
            _ => {
                let b = if anthropic {
                    crate::mock_anthropic::message(&reply, n, &body).to_string()
                } else {
                    completion(&reply, n, &body).to_string()
                };
                write_response(&mut sock, 200, &reply.headers, "application/json", &b).await?;
            }
        }
    }
}

/// An Anthropic Messages request: its path, before any query, ends in
/// `/messages`.
fn is_messages_path(path: &str) -> bool {
    path.split('?')
        .next()
        .unwrap_or_default()
        .ends_with("/messages")
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

async fn write_response(
    sock: &mut TcpStream,
    status: u16,
    headers: &[(String, String)],
    content_type: &str,
    body: &str,
) -> std::io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n",
        reason(status),
        body.len()
    );
    for (n, v) in headers {
        out.push_str(&format!("{n}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(body);
    sock.write_all(out.as_bytes()).await?;
    sock.flush().await
}

/// The message content a reply carries.
pub(crate) fn content_of(reply: &MockReply) -> Option<String> {
    match &reply.body {
        ReplyBody::Text(t) => Some(t.clone()),
        ReplyBody::Json(v) => Some(python_dumps(v)),
        ReplyBody::ToolCalls(_, t) => t.clone(),
        _ => None,
    }
}

fn tool_calls_value(calls: &[MockToolCall]) -> Value {
    Value::Array(
        calls
            .iter()
            .map(|c| {
                let args = match &c.arguments {
                    Value::String(s) => s.clone(),
                    other => python_dumps(other),
                };
                json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": args}})
            })
            .collect(),
    )
}

pub(crate) fn model_of(request: &Value) -> Value {
    request.get("model").cloned().unwrap_or(Value::Null)
}

const USAGE: (u64, u64, u64) = (11, 7, 18);

fn usage_value() -> Value {
    json!({"prompt_tokens": USAGE.0, "completion_tokens": USAGE.1, "total_tokens": USAGE.2})
}

/// The non-streaming completion the fixtures' mock sends.
pub fn completion(reply: &MockReply, n: u64, request: &Value) -> Value {
    let mut message = Map::new();
    message.insert("role".into(), "assistant".into());
    message.insert(
        "content".into(),
        content_of(reply).map_or(Value::Null, Value::String),
    );
    message.insert("refusal".into(), Value::Null);
    let finish = match &reply.body {
        ReplyBody::ToolCalls(calls, _) => {
            message.insert("tool_calls".into(), tool_calls_value(calls));
            "tool_calls"
        }
        _ => "stop",
    };
    json!({
        "id": format!("chatcmpl-mock-{n}"),
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model_of(request),
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        "usage": usage_value(),
        "system_fingerprint": null,
    })
}

/// The SSE events (JSON objects, then `[DONE]`) the fixtures' mock streams.
pub fn sse_events(reply: &MockReply, n: u64, request: &Value) -> Vec<String> {
    let id = format!("chatcmpl-mock-{n}");
    let model = model_of(request);
    let chunk = |delta: Value, finish: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": 1_700_000_000,
               "model": model, "system_fingerprint": null,
               "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
        .to_string()
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    let content = content_of(reply).unwrap_or_default();
    let chars: Vec<char> = content.chars().collect();
    for piece in chars.chunks(reply.chunk_size.max(1)) {
        events.push(chunk(
            json!({"content": piece.iter().collect::<String>()}),
            Value::Null,
        ));
    }
    let finish = if let ReplyBody::ToolCalls(calls, _) = &reply.body {
        for (i, call) in tool_calls_value(calls)
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let mut tc = call.clone();
            tc["index"] = json!(i);
            events.push(chunk(json!({"tool_calls": [tc]}), Value::Null));
        }
        "tool_calls"
    } else {
        "stop"
    };
    events.push(chunk(json!({}), json!(finish)));
    if request.pointer("/stream_options/include_usage") == Some(&Value::Bool(true)) {
        events.push(
            json!({"id": id, "object": "chat.completion.chunk", "created": 1_700_000_000,
                   "model": model, "system_fingerprint": null, "choices": [], "usage": usage_value()})
            .to_string(),
        );
    }
    events.push("[DONE]".into());
    events
}

async fn write_sse(
    sock: &mut TcpStream,
    reply: &MockReply,
    events: &[String],
) -> std::io::Result<()> {
    let mut head = String::from(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n",
    );
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    sock.write_all(head.as_bytes()).await?;
    for (i, ev) in events.iter().enumerate() {
        if reply.truncate_after_events.is_some_and(|t| i >= t) {
            break;
        }
        if let Some(d) = reply.pace.filter(|_| i > 0) {
            tokio::time::sleep(d).await;
        }
        sock.write_all(ev.as_bytes()).await?;
        sock.flush().await?;
    }
    sock.shutdown().await
}

/// `json.dumps(v)` with Python's default separators and `ensure_ascii`.
pub fn python_dumps(v: &Value) -> String {
    let mut out = String::new();
    dump(v, &mut out);
    out
}

fn dump(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => dump_str(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                dump(x, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                dump_str(k, out);
                out.push_str(": ");
                dump(x, out);
            }
            out.push('}');
        }
    }
}

fn dump_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The real model server of the end-to-end suites: `(base_url, model)`
/// from `LIONAGI_E2E_BASE_URL` and `LIONAGI_E2E_MODEL` (default
/// `smollm2`), or `None`, printed as a skip, when the URL is unset.
///
/// # Panics
///
/// When `LIONAGI_E2E_REQUIRED=1` and the URL is unset: CI sets it so that
/// a missing server fails the suites instead of skipping them.
pub fn e2e_server() -> Option<(String, String)> {
    let url = std::env::var("LIONAGI_E2E_BASE_URL")
        .ok()
        .filter(|u| !u.is_empty());
    let Some(url) = url else {
        let required = std::env::var("LIONAGI_E2E_REQUIRED").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "LIONAGI_E2E_REQUIRED=1 but LIONAGI_E2E_BASE_URL is unset"
        );
        eprintln!("skipped: set LIONAGI_E2E_BASE_URL (e.g. http://127.0.0.1:8089/v1) to run");
        return None;
    };
    let model = std::env::var("LIONAGI_E2E_MODEL")
        .ok()
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| "smollm2".into());
    Some((url, model))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_dumps_matches_python() {
        let v = json!({"answer": "4", "confidence": 0.99, "l": [1, true, null], "u": "é\n"});
        assert_eq!(
            python_dumps(&v),
            r#"{"answer": "4", "confidence": 0.99, "l": [1, true, null], "u": "\u00e9\n"}"#
        );
    }
}
