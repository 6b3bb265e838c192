//! HTTP servers that break, served by a few lines of raw HTTP on loopback:
//! each a clear error within the deadline.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use branch_mcp::{McpConfig, McpError, McpPolicy, McpServers};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Serves every connection with `reply` (after reading the request head),
/// or holds it open without a word when `reply` is `None`.
async fn serve(reply: Option<Vec<u8>>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let reply = reply.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let _ = sock.read(&mut buf).await;
                match reply {
                    Some(r) => {
                        let _ = sock.write_all(&r).await;
                    }
                    None => tokio::time::sleep(Duration::from_secs(60)).await,
                }
            });
        }
    });
    port
}

fn config(port: u16) -> McpConfig {
    McpConfig::from_value(&json!({"mcpServers": {"web": {
        "url": format!("http://127.0.0.1:{port}/mcp"),
        "headers": {"X-Api-Key": "sk-http-secret-987"}
    }}}))
    .unwrap()
}

fn policy() -> McpPolicy {
    McpPolicy::new()
        .allow_local_network(true)
        .init_timeout(Duration::from_secs(15))
}

fn response(status: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

#[tokio::test]
async fn a_server_that_never_answers_initialize() {
    let port = serve(None).await;
    let start = Instant::now();
    let err = McpServers::connect(
        &config(port),
        &policy().init_timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, McpError::Timeout { .. }), "{err:?}");
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn malformed_json_rpc_over_http() {
    let port = serve(Some(response("200 OK", "application/json", b"{not json"))).await;
    let start = Instant::now();
    let err = McpServers::connect(&config(port), &policy())
        .await
        .unwrap_err();
    let text = err.to_string();
    eprintln!("{text}");
    assert!(matches!(err, McpError::Start { .. }), "{err:?}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert!(text.contains("malformed JSON-RPC"), "{text}");
    assert!(!text.contains("sk-http-secret"), "{text}");
}

#[tokio::test]
async fn an_oversized_body_is_refused_before_it_is_read() {
    let head =
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 99999999\r\n\r\n{";
    let port = serve(Some(head.as_bytes().to_vec())).await;
    let err = McpServers::connect(&config(port), &policy())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("larger than the cap"), "{err}");
}

#[tokio::test]
async fn an_error_status_is_named_and_secrets_stay_out() {
    let body = b"upstream rejected key sk-http-secret-987";
    let port = serve(Some(response(
        "500 Internal Server Error",
        "text/plain",
        body,
    )))
    .await;
    let err = McpServers::connect(&config(port), &policy())
        .await
        .unwrap_err();
    let text = format!("{err} {err:?}");
    eprintln!("{text}");
    assert!(text.contains("500"), "{text}");
    assert!(
        text.contains("[redacted]") && !text.contains("sk-http-secret"),
        "{text}"
    );
}
