//! Hostile servers on 127.0.0.1: nonsense headers, endless streams, huge
//! lines and replies, thousands of tool calls, non-JSON events, empty
//! replies; and the guard's loopback disguises. Each case ends within its
//! deadline with a typed error, never a panic.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use branch_core::model::{
    ChatMessage, ChatModel, ChatRequest, ModelConfig, ModelError, ModelErrorKind, RetryConfig,
};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::mock::{MockReply, MockServer, MockToolCall};
use crate::{IModel, IModelBuilder, limits};

/// A raw server: every connection's request is read, then `handler` writes
/// whatever it likes. Counts accepted connections.
struct Hostile {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Hostile {
    async fn start<F, Fut>(handler: F) -> Self
    where
        F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        let handler = Arc::new(handler);
        let task = tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let h = Arc::clone(&handler);
                tokio::spawn(async move {
                    if read_request(&mut sock).await.is_some() {
                        h(sock).await;
                    }
                });
            }
        });
        Self {
            addr,
            accepted,
            task,
        }
    }

    fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

/// Reads one request (head and `content-length` body).
async fn read_request(sock: &mut TcpStream) -> Option<()> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    loop {
        let n = sock.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < end + 4 + len {
            let n = sock.read(&mut tmp).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&tmp[..n]);
        }
        return Some(());
    }
}

const SSE_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";

fn config(base_url: &str) -> ModelConfig {
    let mut c = ModelConfig::builder()
        .provider("openai")
        .model("gpt-4.1-mini")
        .base_url(base_url)
        .allow_local_network(true)
        .build()
        .unwrap();
    c.set_retry_config(Some(RetryConfig {
        max_retries: 1,
        base_delay: 0.001,
        max_delay: 0.05,
        jitter: false,
        ..RetryConfig::default()
    }));
    c
}

fn builder(base_url: &str) -> IModelBuilder {
    IModel::builder(config(base_url)).api_key("test")
}

fn user() -> ChatRequest {
    ChatRequest::new(vec![ChatMessage::user("hi")])
}

/// Drains a stream: the error item that ended it (or `None` if it ended
/// cleanly), and the text chunks seen.
async fn drain(model: &IModel) -> (Option<ModelError>, String) {
    let mut stream = match model.invoke_stream(user()).await {
        Ok(s) => s,
        Err(e) => return (Some(e), String::new()),
    };
    let mut text = String::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(c) => text.push_str(c.content.as_deref().unwrap_or_default()),
            Err(e) => {
                assert!(stream.next().await.is_none(), "an error ends the stream");
                return (Some(e), text);
            }
        }
    }
    (None, text)
}

/// `Retry-After: 1e300` (and other nonsense) panicked in
/// `Duration::from_secs_f64`, ending `lionagi chat` with status 101.
#[tokio::test]
async fn nonsense_retry_after_headers_never_panic() {
    for (name, value) in [
        ("retry-after", "1e300"),
        ("retry-after", "99999999999999999999999"),
        ("retry-after-ms", "1e300"),
        ("retry-after", "-5"),
        ("retry-after", "NaN"),
        ("retry-after", "inf"),
        ("retry-after-ms", "-inf"),
        ("retry-after", "Wed, 21 Oct 2015 07:28:00 PST"),
        ("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT"),
        ("retry-after", "soon"),
    ] {
        let server = MockServer::start().await;
        server.script([
            MockReply::error(429, "slow down").header(name, value),
            MockReply::error(429, "slow down").header(name, value),
        ]);
        let model = builder(&server.base_url()).build().unwrap();
        let e = model.invoke(user()).await.unwrap_err();
        assert_eq!(e.kind, ModelErrorKind::RateLimited, "{name}: {value}");
        let huge = value.starts_with("1e300") || value.starts_with("9999");
        if value.ends_with(" GMT") {
            // A date already past: no wait, and a retry at once.
            assert_eq!(e.attempts, 2, "{name}: {value}");
            assert_eq!(e.retry_after, Some(Duration::ZERO));
        } else if huge {
            // Saturated, longer than the policy's 50 ms: not slept, reported.
            assert_eq!(e.attempts, 1, "{name}: {value}");
            assert_eq!(e.retry_after, Some(limits::MAX_RETRY_AFTER));
        } else {
            // Treated as absent: the policy's own backoff, then a retry.
            assert_eq!(e.attempts, 2, "{name}: {value}");
            assert_eq!(e.retry_after, None, "{name}: {value}");
        }
    }
}

/// A retry policy or breaker of 1e300 s given in code saturates instead of
/// panicking; the overall deadline still ends the call.
#[tokio::test]
async fn absurd_programmatic_waits_end_at_the_deadline() {
    let server = MockServer::start().await;
    server.script([MockReply::error(500, "down"), MockReply::error(500, "down")]);
    let mut c = config(&server.base_url());
    c.set_retry_config(Some(RetryConfig {
        max_retries: 3,
        base_delay: 1e300,
        max_delay: 1e300,
        backoff_factor: 1e300,
        jitter: true,
        jitter_factor: f64::MAX,
    }));
    let model = IModel::builder(c)
        .api_key("test")
        .call_deadline(Duration::from_millis(300))
        .build()
        .unwrap();
    let e = model.invoke(user()).await.unwrap_err();
    assert_eq!(e.kind, ModelErrorKind::Timeout, "{e}");
    assert!(e.message.contains("overall deadline"), "{e}");
    assert_eq!(e.attempts, 1);
}

/// A server sending a keep-alive comment every 20 ms held a streamed turn
/// forever (only silence was timed); the overall deadline ends it.
#[tokio::test]
async fn endless_keep_alives_end_at_the_deadline() {
    let server = Hostile::start(|mut sock| async move {
        let _ = sock.write_all(SSE_HEAD).await;
        loop {
            if sock.write_all(b": keep-alive\n\n").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let model = builder(&server.base_url())
        .call_deadline(Duration::from_millis(400))
        .build()
        .unwrap();
    let (err, _) = drain(&model).await;
    let e = err.unwrap();
    assert_eq!(e.kind, ModelErrorKind::Timeout, "{e}");
    assert!(e.message.contains("overall deadline of 0.4 s"), "{e}");
}

/// The same for an unstreamed reply that trickles its body.
#[tokio::test]
async fn a_trickled_body_ends_at_the_deadline() {
    let server = Hostile::start(|mut sock| async move {
        let _ = sock
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n{")
            .await;
        loop {
            if sock.write_all(b" ").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let model = builder(&server.base_url())
        .call_deadline(Duration::from_millis(400))
        .build()
        .unwrap();
    let e = model.invoke(user()).await.unwrap_err();
    assert_eq!(e.kind, ModelErrorKind::Timeout, "{e}");
    assert!(e.message.contains("overall deadline"), "{e}");
}

/// An unterminated multi-megabyte SSE line was parsed in quadratic time
/// and buffered without bound; now it stops at the line cap.
#[tokio::test]
async fn an_unterminated_huge_sse_line_is_refused_at_the_line_cap() {
    let server = Hostile::start(|mut sock| async move {
        let _ = sock.write_all(SSE_HEAD).await;
        let _ = sock.write_all(b"data: ").await;
        let block = vec![b'a'; 64 * 1024];
        for _ in 0..(limits::MAX_SSE_LINE_BYTES / block.len() + 2) {
            if sock.write_all(&block).await.is_err() {
                return;
            }
        }
    })
    .await;
    let model = builder(&server.base_url()).build().unwrap();
    let (err, _) = drain(&model).await;
    let e = err.unwrap();
    assert_eq!(e.kind, ModelErrorKind::ReplyLimit, "{e}");
    assert!(
        e.message
            .contains(&format!("longer than {} bytes", limits::MAX_SSE_LINE_BYTES)),
        "{e}"
    );
}

/// Replies larger than the cap are refused, streamed or not, announced by
/// `content-length` or not.
#[tokio::test]
async fn oversized_replies_are_refused() {
    // Announced: refused before the body is read.
    let server = Hostile::start(|mut sock| async move {
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            limits::DEFAULT_MAX_REPLY_BYTES + 1
        );
        let _ = sock.write_all(head.as_bytes()).await;
        let _ = sock.write_all(b"{\"choices\": [").await;
        tokio::time::sleep(Duration::from_secs(5)).await;
    })
    .await;
    let model = builder(&server.base_url()).build().unwrap();
    let e = model.invoke(user()).await.unwrap_err();
    assert_eq!(e.kind, ModelErrorKind::ReplyLimit, "{e}");
    assert!(e.message.contains("max_reply_bytes"), "{e}");

    // Unannounced (closed-delimited), with a small configured cap.
    let server = Hostile::start(|mut sock| async move {
        let _ = sock
            .write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n",
            )
            .await;
        let text = "x".repeat(200_000);
        let body = json!({"choices": [{"message": {"role": "assistant", "content": text}}]});
        let _ = sock.write_all(body.to_string().as_bytes()).await;
    })
    .await;
    let model = builder(&server.base_url())
        .max_reply_bytes(100_000)
        .build()
        .unwrap();
    let e = model.invoke(user()).await.unwrap_err();
    assert_eq!(e.kind, ModelErrorKind::ReplyLimit, "{e}");
    assert!(e.message.contains("larger than 100000 bytes"), "{e}");

    // Streamed: counted over all events.
    let server = MockServer::start().await;
    server.push(MockReply::text(&"y".repeat(50_000)).chunk_size(100));
    let model = IModel::builder(config(&server.base_url()))
        .api_key("test")
        .max_reply_bytes(20_000)
        .build()
        .unwrap();
    let (err, text) = drain(&model).await;
    let e = err.unwrap();
    assert_eq!(e.kind, ModelErrorKind::ReplyLimit, "{e}");
    assert!(
        e.message.contains("streamed reply is larger than 20000"),
        "{e}"
    );
    assert!(text.len() < 20_000);
}

fn many_calls(n: usize) -> Vec<MockToolCall> {
    (0..n)
        .map(|i| MockToolCall {
            id: format!("call_{i}"),
            name: "f".into(),
            arguments: json!({"i": i}),
        })
        .collect()
}

/// A reply asking for 1,000 tool calls ran them all; now it is refused
/// (streamed or not), and a reply at the cap passes.
#[tokio::test]
async fn too_many_tool_calls_are_refused() {
    let server = MockServer::start().await;
    server.script([
        MockReply::tool_calls(many_calls(1000)),
        MockReply::tool_calls(many_calls(limits::DEFAULT_MAX_TOOL_CALLS)),
    ]);
    let model = builder(&server.base_url()).build().unwrap();
    let e = model.invoke(user()).await.unwrap_err();
    assert_eq!(e.kind, ModelErrorKind::ReplyLimit, "{e}");
    assert!(e.message.contains("1000 tool calls; at most 128"), "{e}");
    let ok = model.invoke(user()).await.unwrap();
    assert_eq!(ok.tool_calls.len(), limits::DEFAULT_MAX_TOOL_CALLS);

    let server = MockServer::start().await;
    server.script([
        MockReply::tool_calls(many_calls(6)),
        MockReply::tool_calls(many_calls(5)),
    ]);
    let model = builder(&server.base_url())
        .max_tool_calls(5)
        .build()
        .unwrap();
    let (err, _) = drain(&model).await;
    let e = err.unwrap();
    assert_eq!(e.kind, ModelErrorKind::ReplyLimit, "{e}");
    assert!(e.message.contains("more than 5 tool calls"), "{e}");
    let (err, _) = drain(&model).await;
    assert!(err.is_none(), "{err:?}");
}

/// A non-JSON event was recorded as reply text; now it ends the stream
/// with `MalformedResponse`.
#[tokio::test]
async fn non_json_events_are_errors() {
    let server = Hostile::start(|mut sock| async move {
        let _ = sock.write_all(SSE_HEAD).await;
        let _ = sock
            .write_all(b"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: <html>oops</html>\n\ndata: [DONE]\n\n")
            .await;
    })
    .await;
    let model = builder(&server.base_url()).build().unwrap();
    let (err, text) = drain(&model).await;
    let e = err.unwrap();
    assert_eq!(e.kind, ModelErrorKind::MalformedResponse, "{e}");
    assert!(e.message.contains("not JSON (event 2)"), "{e}");
    assert!(!text.contains("oops"), "{text}");
}

/// An empty reply was a successful turn with no text; now it is an error,
/// streamed or not, with the finish reason when there is one.
#[tokio::test]
async fn empty_replies_are_errors() {
    let server = MockServer::start().await;
    server.script([
        MockReply::raw(200, ""),
        MockReply::raw(
            200,
            r#"{"choices":[{"message":{"role":"assistant","content":""},"finish_reason":"length"}]}"#,
        ),
        MockReply::text(""),
    ]);
    let model = builder(&server.base_url()).build().unwrap();
    let e = model.invoke(user()).await.unwrap_err();
    assert_eq!(
        (e.kind, e.message.as_str()),
        (ModelErrorKind::MalformedResponse, "the reply is empty")
    );
    let e = model.invoke(user()).await.unwrap_err();
    assert_eq!(e.kind, ModelErrorKind::MalformedResponse);
    assert!(
        e.message
            .contains("no text and no tool calls (finish_reason: length)"),
        "{e}"
    );
    let (err, _) = drain(&model).await;
    let e = err.unwrap();
    assert_eq!(e.kind, ModelErrorKind::MalformedResponse);
    assert!(e.message.contains("finish_reason: stop"), "{e}");
}

/// A reply keeps the bytes it was parsed from (the log holds them instead of
/// serializing the reply again): as sent when they are UTF-8, spacing and
/// line breaks included; as read when they are not (each invalid sequence
/// U+FFFD, as `Response::text` gives), so that they always parse to `raw`.
#[tokio::test]
async fn a_reply_keeps_the_bytes_it_was_parsed_from() {
    const PRETTY: &[u8] = b"{\n  \"choices\": [{\"message\": {\"role\": \"assistant\",\r\n  \"content\": \"caf\\u00e9 \xc3\xa9\"}}]\n}\n";
    const BROKEN: &[u8] =
        b"{\"choices\": [{\"message\": {\"role\": \"assistant\", \"content\": \"a\xffb\"}}]}";
    for (body, text, kept) in [
        (PRETTY, "café é", PRETTY.to_vec()),
        (
            BROKEN,
            "a\u{fffd}b",
            String::from_utf8_lossy(BROKEN).into_owned().into_bytes(),
        ),
    ] {
        let server = Hostile::start(move |mut sock| async move {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            let _ = sock.write_all(head.as_bytes()).await;
            let _ = sock.write_all(body).await;
        })
        .await;
        let model = builder(&server.base_url()).build().unwrap();
        let r = model.invoke(user()).await.unwrap();
        assert_eq!(r.text, text);
        let raw_text = r.raw_text.as_ref().unwrap().bytes().as_ref();
        assert_eq!(raw_text, &kept[..]);
        assert_eq!(serde_json::from_slice::<Value>(raw_text).unwrap(), r.raw);
    }
}

/// Loopback in disguise: every URL below reaches this machine if the guard
/// lets it through. Without the opt-in each is refused before a connection
/// is made (the listener behind them never sees one).
#[tokio::test]
async fn loopback_disguises_are_refused_by_the_wired_client() {
    let server = Hostile::start(|_sock| async move {}).await;
    let port = server.addr.port();
    let v6 = TcpListener::bind("[::1]:0").await.ok();
    let v6_port = v6
        .as_ref()
        .and_then(|l| l.local_addr().ok())
        .map(|a| a.port());
    let mut urls: Vec<String> = [
        "127.0.0.1",
        "127.1",
        "127.0.0.2",
        "2130706433",
        "0x7f000001",
        "0177.0.0.1",
        "0.0.0.0",
        "0",
        "localhost",
        "LOCALHOST",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]",
        "[::]",
    ]
    .iter()
    .map(|h| format!("http://{h}:{port}/v1"))
    .collect();
    if let Some(p) = v6_port {
        urls.push(format!("http://[::1]:{p}/v1"));
    }
    for url in &urls {
        let mut c = config(url);
        c.set_allow_local_network(false);
        let model = IModel::with_api_key(c, "test").unwrap();
        let e = model.invoke(user()).await.unwrap_err();
        assert_eq!(e.kind, ModelErrorKind::NetworkGuard, "{url}: {e}");
        assert!(e.message.contains("local-network guard"), "{url}: {e}");
        let (err, _) = drain(&model).await;
        assert_eq!(err.unwrap().kind, ModelErrorKind::NetworkGuard, "{url}");
    }
    assert_eq!(server.accepted.load(Ordering::SeqCst), 0);
    if let Some(l) = v6 {
        let accepted = tokio::time::timeout(Duration::from_millis(50), l.accept()).await;
        assert!(accepted.is_err(), "no connection to [::1]");
    }
}

/// A name that does not resolve is reported as such, not as a guard
/// refusal. (A 70-character label is refused by the resolver library
/// itself, so no query leaves the machine.)
#[tokio::test]
async fn dns_failures_say_what_happened() {
    let host = format!("{}.invalid", "a".repeat(70));
    let mut c = config(&format!("http://{host}/v1"));
    c.set_allow_local_network(false);
    let model = IModel::with_api_key(c, "test").unwrap();
    let e = model.invoke(user()).await.unwrap_err();
    assert_eq!(e.kind, ModelErrorKind::Connect, "{e}");
    assert!(
        e.message.contains(&format!("could not resolve '{host}'")),
        "{e}"
    );
    assert!(!e.message.contains("guard"), "{e}");
}

/// Models restored from data never regain local access: a stored Ollama or
/// lattice model (registered at a local address) with no `base_url` and a
/// stored `allow_local_network: true` is refused by the guard, through
/// `IModel::from_dict`, `connect` of a restored `ModelConfig`, and a
/// duplicate of it.
#[tokio::test]
async fn restored_local_providers_are_refused_by_the_guard() {
    for provider in ["ollama", "lattice"] {
        let mut stored = ModelConfig::new(provider, "llama3")
            .unwrap()
            .to_dict(false, false);
        stored["endpoint"]["config"]["allow_local_network"] = json!(true);
        if let Some(cfg) = stored["endpoint"]["config"].as_object_mut() {
            cfg.remove("base_url");
        }
        let direct = IModel::from_dict(&stored).unwrap();
        let restored: Arc<dyn ChatModel> = Arc::new(ModelConfig::from_dict(&stored).unwrap());
        let connected = crate::connect(&restored).unwrap();
        let copy = connected.duplicate();
        for model in [Arc::new(direct) as Arc<dyn ChatModel>, connected, copy] {
            let e = model.chat(user()).await.unwrap_err();
            assert_eq!(e.kind, ModelErrorKind::NetworkGuard, "{provider}: {e}");
        }
    }
}
