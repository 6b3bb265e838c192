//! `BranchServer::serve_http` on loopback: our own client asks over it,
//! and raw requests meet each of its guards (token, host, origin, body cap,
//! session cap, slow clients, connection cap, shutdown).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use branch_mcp::{
    Ask, BranchServer, Cancelled, Confirmer, HttpAccess, HttpLimits, HttpServing, McpConfig,
    McpPolicy, McpServers, Progress, ProgressReporter, Secret,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const TOKEN: &str = "test-token-0123456789abcdef";

/// Answers "you asked: QUESTION" after `delay`, telling its client it
/// thinks; notes a cancellation.
struct Echo {
    delay: Duration,
    cancelled: Arc<AtomicBool>,
}

impl Ask for Echo {
    fn ask(
        &self,
        question: String,
        cancelled: Cancelled,
        progress: ProgressReporter,
        _confirm: Confirmer,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send + '_>> {
        Box::pin(async move {
            progress.report("thinking");
            tokio::select! {
                () = cancelled => {
                    self.cancelled.store(true, Ordering::SeqCst);
                    Err("cancelled".into())
                }
                () = tokio::time::sleep(self.delay) => Ok(format!("you asked: {question}")),
            }
        })
    }
}

struct Running {
    url: String,
    port: u16,
    stop: Option<oneshot::Sender<()>>,
    serving: JoinHandle<Result<(), branch_mcp::McpError>>,
    cancelled: Arc<AtomicBool>,
}

impl Running {
    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(10), self.serving)
            .await
            .expect("the server stops within its grace")
            .unwrap()
            .unwrap();
    }
}

async fn start(access: HttpAccess, delay: Duration) -> Running {
    let serving = HttpServing::bind("127.0.0.1:0".parse().unwrap(), access)
        .await
        .unwrap();
    let url = serving.url();
    let port = serving.local_addr().port();
    assert_eq!(url, format!("http://127.0.0.1:{port}/mcp"));
    let cancelled = Arc::new(AtomicBool::new(false));
    let server = BranchServer::new(
        Echo {
            delay,
            cancelled: Arc::clone(&cancelled),
        },
        "Ask the test conversation.",
    );
    let (stop, stopped) = oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve_http(serving, async {
        let _ = stopped.await;
    }));
    Running {
        url,
        port,
        stop: Some(stop),
        serving,
        cancelled,
    }
}

fn with_token() -> HttpAccess {
    HttpAccess::new().token(Secret::new(TOKEN))
}

fn client_config(url: &str, token: &str) -> McpConfig {
    McpConfig::from_value(&json!({"mcpServers": {"conv": {
        "url": url,
        "headers": {"Authorization": format!("Bearer {token}")}
    }}}))
    .unwrap()
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}
    }})
}

/// POSTs `body` to the server with `headers`; status and headers.
async fn post(url: &str, headers: &[(&str, &str)], body: Vec<u8>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .timeout(Duration::from_secs(10))
        .body(body);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    request.send().await.unwrap()
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_client_asks_over_http_and_hears_progress() {
    let running = start(with_token(), Duration::from_millis(10)).await;
    let heard = Arc::new(Mutex::new(Vec::new()));
    let hear = Arc::clone(&heard);
    let servers = McpServers::connect_with(
        &client_config(&running.url, TOKEN),
        &McpPolicy::new().allow_local_network(true),
        Some(Arc::new(move |p: &Progress| {
            hear.lock().unwrap().push(p.message.clone());
        })),
        None,
    )
    .await
    .unwrap();
    let conv = servers.server("conv").unwrap();
    assert_eq!(conv.transport(), "streamable-http");
    let tools = conv.list_tools().await.unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0].name, "ask");
    let result = conv
        .call_tool("ask", json!({"question": "what is served?"}))
        .await
        .unwrap();
    let result = serde_json::to_value(&result).unwrap();
    assert_eq!(
        result["content"],
        json!([{"type": "text", "text": "you asked: what is served?"}])
    );
    assert_eq!(result["isError"], json!(false));
    // The server sends the progress before the answer, but the client
    // hands notifications to its callback on a task of their own, which
    // may run after the answer is returned.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while heard.lock().unwrap().is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(*heard.lock().unwrap(), [Some("thinking".to_owned())]);
    servers.shutdown().await;
    running.stop().await;
}

#[tokio::test]
async fn a_wrong_or_missing_token_is_refused_before_mcp() {
    let running = start(with_token(), Duration::ZERO).await;
    let init = serde_json::to_vec(&initialize()).unwrap();
    for auth in [None, Some("Bearer wrong-token-0123456789ab"), Some(TOKEN)] {
        let headers: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
        let reply = post(&running.url, &headers, init.clone()).await;
        assert_eq!(reply.status(), 401, "{auth:?}");
        assert_eq!(reply.headers()["www-authenticate"], "Bearer");
        let text = reply.text().await.unwrap();
        assert!(!text.contains(TOKEN), "{text}");
    }
    // Our own client says what went wrong, without the token it sent.
    let err = McpServers::connect(
        &client_config(&running.url, "not-the-token-0123456789"),
        &McpPolicy::new().allow_local_network(true),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("401"), "{err}");
    assert!(!err.contains("not-the-token"), "{err}");
    let good = post(&running.url, &[("authorization", &bearer())], init).await;
    assert_eq!(good.status(), 200);
    running.stop().await;
}

#[tokio::test]
async fn a_foreign_host_origin_or_path_is_refused() {
    let running = start(with_token(), Duration::ZERO).await;
    let init = serde_json::to_vec(&initialize()).unwrap();
    let auth = bearer();
    // DNS rebinding: a page of evil.example whose name now resolves to
    // loopback reaches us with its own name as Host.
    let host = post(
        &running.url,
        &[("authorization", &auth), ("host", "evil.example")],
        init.clone(),
    )
    .await;
    assert_eq!(host.status(), 403);
    let origin = post(
        &running.url,
        &[("authorization", &auth), ("origin", "http://evil.example")],
        init.clone(),
    )
    .await;
    assert_eq!(origin.status(), 403);
    let elsewhere = post(
        &running.url.replace("/mcp", "/other"),
        &[("authorization", &auth)],
        init.clone(),
    )
    .await;
    assert_eq!(elsewhere.status(), 404);
    running.stop().await;

    // A host and an origin let in by name.
    let access = with_token()
        .allow_host("conv.test")
        .allow_origin("http://app.test:8080");
    let running = start(access, Duration::ZERO).await;
    let let_in = post(
        &running.url,
        &[
            ("authorization", &auth),
            ("host", "conv.test"),
            ("origin", "http://app.test:8080"),
        ],
        init,
    )
    .await;
    assert_eq!(let_in.status(), 200);
    running.stop().await;
}

#[tokio::test]
async fn a_body_over_the_cap_is_refused_413() {
    let running = start(with_token(), Duration::ZERO).await;
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "pad": "x".repeat(branch_mcp::limits::MAX_MESSAGE_BYTES)
    }});
    let reply = post(
        &running.url,
        &[("authorization", &bearer())],
        serde_json::to_vec(&big).unwrap(),
    )
    .await;
    assert_eq!(reply.status(), 413);
    running.stop().await;
}

#[tokio::test]
async fn sessions_beyond_the_cap_wait_for_one_to_close() {
    let mut limits = HttpLimits::default();
    limits.sessions = 2;
    let running = start(with_token().limits(limits), Duration::ZERO).await;
    let init = serde_json::to_vec(&initialize()).unwrap();
    let auth = bearer();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let reply = post(&running.url, &[("authorization", &auth)], init.clone()).await;
        assert_eq!(reply.status(), 200);
        ids.push(
            reply.headers()["mcp-session-id"]
                .to_str()
                .unwrap()
                .to_owned(),
        );
    }
    let third = post(&running.url, &[("authorization", &auth)], init.clone()).await;
    assert_eq!(third.status(), 503);
    assert_eq!(third.headers()["retry-after"], "5");
    assert!(third.text().await.unwrap().contains("the cap is 2"));
    // A request inside a session is still served at the cap.
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    let inside = post(
        &running.url,
        &[
            ("authorization", &auth),
            ("mcp-session-id", &ids[0]),
            ("mcp-protocol-version", "2025-06-18"),
        ],
        serde_json::to_vec(&ping).unwrap(),
    )
    .await;
    assert_ne!(inside.status(), 503);
    // A request of the stateless protocol opens no session: it is served
    // at the cap.
    let list = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    }}});
    let stateless = post(
        &running.url,
        &[
            ("authorization", &auth),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/list"),
        ],
        serde_json::to_vec(&list).unwrap(),
    )
    .await;
    assert_eq!(stateless.status(), 200);
    let listed = stateless.text().await.unwrap();
    assert!(listed.contains("\"ask\""), "{listed}");
    // A session closed by its client makes room.
    let closed = reqwest::Client::new()
        .delete(&running.url)
        .header("authorization", &auth)
        .header("mcp-session-id", &ids[1])
        .send()
        .await
        .unwrap();
    assert!(closed.status().is_success(), "{}", closed.status());
    let again = post(&running.url, &[("authorization", &auth)], init).await;
    assert_eq!(again.status(), 200);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initializes_racing_on_many_connections_open_no_more_than_the_cap() {
    let mut limits = HttpLimits::default();
    limits.sessions = 1;
    let running = start(with_token().limits(limits), Duration::ZERO).await;
    let init = serde_json::to_vec(&initialize()).unwrap();
    // Every head first, each on a connection of its own, then every body
    // at once: all six are read before any session exists.
    let mut racers = Vec::new();
    for _ in 0..6 {
        let mut sock = TcpStream::connect(("127.0.0.1", running.port))
            .await
            .unwrap();
        let head = format!(
            "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: {}\r\n\
             content-type: application/json\r\naccept: application/json, text/event-stream\r\n\
             connection: close\r\ncontent-length: {}\r\n\r\n",
            bearer(),
            init.len()
        );
        sock.write_all(head.as_bytes()).await.unwrap();
        racers.push(sock);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for sock in &mut racers {
        sock.write_all(&init).await.unwrap();
    }
    let mut statuses = Vec::new();
    for mut sock in racers {
        let got = read_until_closed(&mut sock, Duration::from_secs(5))
            .await
            .expect("every request is answered");
        statuses.push(got.get(..12).unwrap_or(&got).to_owned());
    }
    statuses.sort();
    let mut expected = vec!["HTTP/1.1 503".to_owned(); 5];
    expected.insert(0, "HTTP/1.1 200".to_owned());
    assert_eq!(statuses, expected);
    running.stop().await;
}

/// Reads until the server closes the connection or `limit` passes; what
/// was read, or `None` if it stayed open.
async fn read_until_closed(sock: &mut TcpStream, limit: Duration) -> Option<String> {
    let mut got = Vec::new();
    let closed = tokio::time::timeout(limit, sock.read_to_end(&mut got)).await;
    closed
        .ok()
        .map(|_| String::from_utf8_lossy(&got).into_owned())
}

#[tokio::test]
async fn a_client_that_sends_its_request_too_slowly_is_cut_off() {
    let mut limits = HttpLimits::default();
    limits.head_timeout = Duration::from_millis(300);
    limits.body_timeout = Duration::from_millis(300);
    let running = start(with_token().limits(limits), Duration::ZERO).await;
    // Half a head, then nothing.
    let mut slow_head = TcpStream::connect(("127.0.0.1", running.port))
        .await
        .unwrap();
    slow_head
        .write_all(b"POST /mcp HTTP/1.1\r\n")
        .await
        .unwrap();
    let got = read_until_closed(&mut slow_head, Duration::from_secs(5)).await;
    assert!(got.is_some(), "a half-sent head held its connection");
    // A whole head, then part of the body it announced.
    let mut slow_body = TcpStream::connect(("127.0.0.1", running.port))
        .await
        .unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: {}\r\n\
         content-type: application/json\r\naccept: application/json, text/event-stream\r\n\
         content-length: 1000\r\n\r\n{{\"jsonrpc\"",
        bearer()
    );
    slow_body.write_all(head.as_bytes()).await.unwrap();
    let got = read_until_closed(&mut slow_body, Duration::from_secs(5))
        .await
        .expect("a half-sent body held its request");
    // rmcp answers a body it could not read 500, with the reason.
    assert!(got.starts_with("HTTP/1.1 500"), "{got}");
    assert!(got.contains("did not arrive within 300ms"), "{got}");
    running.stop().await;
}

#[tokio::test]
async fn connections_beyond_the_cap_wait_for_one_to_close() {
    let mut limits = HttpLimits::default();
    limits.connections = 1;
    let running = start(with_token().limits(limits), Duration::ZERO).await;
    let holder = TcpStream::connect(("127.0.0.1", running.port))
        .await
        .unwrap();
    // Let the server take the first connection before the second.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let init = serde_json::to_vec(&initialize()).unwrap();
    let request = reqwest::Client::new()
        .post(&running.url)
        .header("authorization", bearer())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(init);
    let waiting = tokio::spawn(request.send());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "a second connection was served");
    drop(holder);
    let reply = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("served once the first connection closed")
        .unwrap()
        .unwrap();
    assert_eq!(reply.status(), 200);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_cancels_the_call_being_answered() {
    let running = start(with_token(), Duration::from_secs(60)).await;
    let servers = McpServers::connect(
        &client_config(&running.url, TOKEN),
        &McpPolicy::new().allow_local_network(true),
    )
    .await
    .unwrap();
    let conv = Arc::clone(servers.server("conv").unwrap());
    let call =
        tokio::spawn(async move { conv.call_tool("ask", json!({"question": "long?"})).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cancelled = Arc::clone(&running.cancelled);
    running.stop().await;
    assert!(
        cancelled.load(Ordering::SeqCst),
        "the call was not cancelled"
    );
    // The client hears the cancelled call's answer before its session
    // closes, not a broken stream.
    let answered = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the client hears the end")
        .unwrap()
        .unwrap();
    let answered = serde_json::to_value(&answered).unwrap();
    assert_eq!(answered["isError"], json!(true));
    assert_eq!(answered["content"][0]["text"], json!("cancelled"));
}

/// In the stateless protocol (2026-07-28) a client cancels a call by
/// closing its stream: the question being answered is told so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_call_whose_client_hangs_up_is_cancelled() {
    let running = start(with_token(), Duration::from_secs(60)).await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "ask",
        "arguments": {"question": "long?"},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}
        }
    }});
    let body = serde_json::to_vec(&call).unwrap();
    let mut sock = TcpStream::connect(("127.0.0.1", running.port))
        .await
        .unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: {}\r\n\
         content-type: application/json\r\naccept: application/json, text/event-stream\r\n\
         mcp-protocol-version: 2026-07-28\r\nmcp-method: tools/call\r\nmcp-name: ask\r\n\
         content-length: {}\r\n\r\n",
        bearer(),
        body.len()
    );
    sock.write_all(head.as_bytes()).await.unwrap();
    sock.write_all(&body).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!running.cancelled.load(Ordering::SeqCst));
    drop(sock);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !running.cancelled.load(Ordering::SeqCst) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the call outlived its client"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    running.stop().await;
}

#[tokio::test]
async fn beyond_loopback_without_a_token_nothing_is_bound() {
    // Refused before binding: no socket is opened on other interfaces.
    let err = HttpServing::bind("0.0.0.0:0".parse().unwrap(), HttpAccess::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("needs a bearer token"), "{err}");
}

#[tokio::test]
async fn a_head_over_the_cap_is_refused_431() {
    let running = start(with_token(), Duration::ZERO).await;
    let mut sock = TcpStream::connect(("127.0.0.1", running.port))
        .await
        .unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nx-pad: {}\r\n\r\n",
        "x".repeat(branch_mcp::limits::MAX_HTTP_HEAD_BYTES)
    );
    // The server may stop reading part-way; what it answers is the point.
    let _ = sock.write_all(head.as_bytes()).await;
    let got = read_until_closed(&mut sock, Duration::from_secs(5))
        .await
        .expect("the connection is closed");
    assert!(got.starts_with("HTTP/1.1 431"), "{got}");
    running.stop().await;
}

#[tokio::test]
/// Each request's span: its method and the status answered, never a
/// header (the token) or the path.
async fn each_request_has_a_span_with_its_status_and_no_secret() {
    let spans = support::spans::Spans::named("mcp.serve.http");
    let _guard = spans.listen();
    let running = start(with_token(), Duration::ZERO).await;
    let init = serde_json::to_vec(&initialize()).unwrap();
    let refused = post(
        &running.url,
        &[("authorization", "Bearer not-the-token-at-all")],
        init.clone(),
    )
    .await;
    assert_eq!(refused.status(), 401);
    let ok = post(&running.url, &[("authorization", &bearer())], init).await;
    assert_eq!(ok.status(), 200);
    running.stop().await;
    let got = spans.heard();
    let statuses: Vec<&str> = got
        .iter()
        .filter(|(k, _)| k == "status")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(statuses, ["401", "200"], "{got:?}");
    assert!(
        got.iter().any(|(k, v)| k == "method" && v == "\"POST\""),
        "{got:?}"
    );
    let all = format!("{got:?}");
    assert!(
        !all.contains(TOKEN) && !all.contains("not-the-token"),
        "{all}"
    );
}
