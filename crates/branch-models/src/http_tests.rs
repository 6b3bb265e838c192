//! End-to-end tests against the real scripted server on 127.0.0.1.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use branch_core::model::{
    ChatMessage, ChatModel, ChatRequest, ChunkKind, ModelConfig, ModelErrorKind, RetryConfig,
    StreamAccumulator,
};
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::mock::{MockReply, MockServer};
use crate::{ApiKey, IModel};

/// The vendored reference fixtures (`tests/fixtures/lionagi-0.36.0` at the
/// repository root), or `$LIONAGI_FIXTURES`.
fn fixtures_dir() -> PathBuf {
    match std::env::var_os("LIONAGI_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/lionagi-0.36.0"),
    }
}

/// Millisecond backoffs so the fault suite stays fast.
fn fast_retry() -> RetryConfig {
    RetryConfig {
        max_retries: 2,
        base_delay: 0.001,
        max_delay: 0.2,
        jitter: false,
        ..RetryConfig::default()
    }
}

/// `ctx.model(name)` of the fixtures, pointed at `server`.
fn mock_config(server: &MockServer, model: &str) -> ModelConfig {
    ModelConfig::builder()
        .provider("openai")
        .model(model)
        .base_url(&server.base_url())
        .allow_local_network(true)
        .build()
        .unwrap()
}

fn mock_model(server: &MockServer, model: &str) -> IModel {
    let mut c = mock_config(server, model);
    c.set_retry_config(Some(fast_retry()));
    IModel::with_api_key(c, "test").unwrap()
}

fn user(text: &str) -> ChatRequest {
    ChatRequest::new(vec![ChatMessage::user(text)])
}

/// The compiled request the reference sent, as a `ChatRequest`.
fn request_from_body(body: &Value) -> ChatRequest {
    let messages = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(ChatMessage::from_value);
    let mut req = ChatRequest::new(messages);
    for (k, v) in body.as_object().unwrap() {
        if !matches!(k.as_str(), "model" | "messages" | "stream") {
            req.fields.insert(k.clone(), v.clone());
        }
    }
    req
}

fn mock_script(scenario: &Path) -> Vec<MockReply> {
    let md = std::fs::read_to_string(scenario.join("scenario.md")).unwrap();
    let Some(start) = md.find("## Mock replies") else {
        return Vec::new();
    };
    let block = &md[start..];
    let open = block.find("```json").unwrap() + "```json".len();
    let close = block[open..].find("\n```").unwrap() + open;
    let replies: Value = serde_json::from_str(&block[open..close]).unwrap();
    replies
        .as_array()
        .unwrap()
        .iter()
        .filter_map(MockReply::from_script)
        .collect()
}

fn collect_values(v: &Value, key: &str, out: &mut Vec<Value>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == key {
                    out.push(x.clone());
                }
                collect_values(x, key, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|x| collect_values(x, key, out)),
        _ => {}
    }
}

/// For every operations scenario that talked to the mock: sending the
/// reference's compiled request through `IModel` produces the same request
/// bodies, byte for byte in key order; replies map to the reference's
/// `model_response` objects.
#[tokio::test]
async fn request_bodies_match_operations_fixtures() {
    let ops = fixtures_dir().join("operations");
    let mut checked = 0;
    let mut scenarios: Vec<_> = std::fs::read_dir(&ops)
        .unwrap()
        .filter_map(Result::ok)
        .collect();
    scenarios.sort_by_key(|e| e.path());
    for sc in scenarios {
        let path = sc.path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name == "run_scripted_cli_stream" {
            continue; // in-process CLI provider, not HTTP
        }
        let Ok(lines) = std::fs::read_to_string(path.join("requests.jsonl")) else {
            continue;
        };
        let bodies: Vec<Value> = lines
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if bodies.is_empty() {
            continue;
        }
        let server = MockServer::start().await;
        server.script(mock_script(&path));
        let mut raws = Vec::new();
        for body in &bodies {
            let model = mock_model(&server, body["model"].as_str().unwrap());
            let req = request_from_body(body);
            let streaming = body.get("stream") == Some(&Value::Bool(true));
            assert_eq!(
                &model.request_payload(&req, streaming),
                body,
                "{name}: payload"
            );
            if body.get("stream") == Some(&Value::Bool(true)) {
                let mut s = model.stream(req).await.unwrap();
                while let Some(c) = s.next().await {
                    c.unwrap();
                }
            } else if let Ok(resp) = model.chat(req).await {
                raws.push(resp.raw.into_value());
            }
        }
        let sent = server.bodies();
        assert_eq!(sent.len(), bodies.len(), "{name}: request count");
        for (i, (got, want)) in sent.iter().zip(&bodies).enumerate() {
            assert_eq!(
                serde_json::to_string(got).unwrap(),
                serde_json::to_string(want).unwrap(),
                "{name}: request {i}"
            );
        }
        let output: Value =
            serde_json::from_str(&std::fs::read_to_string(path.join("output.json")).unwrap())
                .unwrap();
        let mut expected_raw = Vec::new();
        collect_values(&output, "model_response", &mut expected_raw);
        for expected in expected_raw.iter().filter(|r| r.get("object").is_some()) {
            assert!(
                raws.contains(expected),
                "{name}: the fixture's model_response {expected} was not reproduced"
            );
        }
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} scenarios checked");
}

#[tokio::test]
async fn stream_sse_imodel_matches_fixture() {
    let dir = fixtures_dir().join("operations/stream_sse_imodel");
    let output: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("output.json")).unwrap()).unwrap();
    let expected_body: Value = serde_json::from_str(
        std::fs::read_to_string(dir.join("requests.jsonl"))
            .unwrap()
            .trim(),
    )
    .unwrap();
    let server = MockServer::start().await;
    server.push(MockReply::text("Streaming works fine.").chunk_size(6));
    let model = mock_model(&server, "gpt-4.1-mini");
    let mut stream = model.stream(user("stream please")).await.unwrap();
    let mut chunks = Vec::new();
    let mut acc = StreamAccumulator::new();
    while let Some(c) = stream.next().await {
        let c = c.unwrap();
        acc.push(&c);
        chunks.push(c.to_value());
    }
    let expected: Vec<Value> = output["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["value"].clone())
        .collect();
    assert_eq!(chunks, expected);
    assert_eq!(server.bodies(), vec![expected_body]);
    let req = &server.requests()[0];
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(req.header("authorization"), Some("Bearer test"));
    assert_eq!(req.header("content-type"), Some("application/json"));
    assert!(acc.is_done());
    let resp = acc.finish();
    assert_eq!(resp.text, "Streaming works fine.");
    assert_eq!(resp.finish_reason.as_deref(), Some("stop"));
    assert_eq!(
        model.snapshot().provider_metadata()["served_model"],
        "gpt-4.1-mini"
    );
}

#[tokio::test]
async fn stream_usage_chunk_and_tool_call_deltas() {
    let server = MockServer::start().await;
    server.push(
        MockReply::from_script(&json!({
            "tool_calls": [{"id": "call_1", "name": "multiply", "arguments": {"a": 6, "b": 7}}],
            "text": null
        }))
        .unwrap(),
    );
    let model = mock_model(&server, "gpt-4.1-mini");
    let req = user("x").with_field("stream_options", json!({"include_usage": true}));
    let mut stream = model.stream(req).await.unwrap();
    let mut acc = StreamAccumulator::new();
    let mut kinds = Vec::new();
    while let Some(c) = stream.next().await {
        let c = c.unwrap();
        kinds.push(c.kind);
        acc.push(&c);
    }
    assert!(kinds.contains(&ChunkKind::ToolUse));
    let resp = acc.finish();
    assert_eq!(resp.tool_calls.len(), 1);
    assert_eq!(resp.tool_calls[0].name, "multiply");
    assert_eq!(resp.tool_calls[0].arguments, r#"{"a": 6, "b": 7}"#);
    assert_eq!(resp.usage.unwrap().total_tokens, 18);
    assert_eq!(
        server.bodies()[0]["stream_options"],
        json!({"include_usage": true})
    );
}

#[tokio::test]
async fn chat_maps_reply_usage_and_tool_calls() {
    let server = MockServer::start().await;
    server.push(MockReply::json(json!({"answer": "4", "confidence": 0.99})));
    server.push(MockReply::from_script(&json!({
        "tool_calls": [{"id": "c1", "name": "lookup_capital", "arguments": {"country": "France"}}],
        "text": null
    })).unwrap());
    let model = mock_model(&server, "gpt-4.1-mini");
    let r = model.chat(user("q")).await.unwrap();
    assert_eq!(r.text, r#"{"answer": "4", "confidence": 0.99}"#);
    assert_eq!(r.attempts, 1);
    assert_eq!(r.usage.as_ref().unwrap().prompt_tokens, 11);
    assert_eq!(r.served_model.as_deref(), Some("gpt-4.1-mini"));
    let r = model.chat(user("q")).await.unwrap();
    assert_eq!(r.text, "");
    assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(r.tool_calls[0].arguments, r#"{"country": "France"}"#);
}

/// The model sets the `accept` header reqwest would add (so that its
/// per-call copy of the headers needs no room for it): sent once, as
/// reqwest sent it, and a configured default still wins.
#[tokio::test]
async fn accept_is_sent_once_and_a_configured_one_wins() {
    let server = MockServer::start().await;
    server.push(MockReply::text("a"));
    server.push(MockReply::text("b"));
    mock_model(&server, "gpt-4.1-mini")
        .chat(user("q"))
        .await
        .unwrap();
    let mut c = mock_config(&server, "gpt-4.1-mini");
    c.set_default_header("Accept", "application/json").unwrap();
    IModel::with_api_key(c, "test")
        .unwrap()
        .chat(user("q"))
        .await
        .unwrap();
    let requests = server.requests();
    let accepts: Vec<Vec<&str>> = requests
        .iter()
        .map(|r| {
            r.headers
                .iter()
                .filter(|(n, _)| n == "accept")
                .map(|(_, v)| v.as_str())
                .collect()
        })
        .collect();
    assert_eq!(accepts, [vec!["*/*"], vec!["application/json"]]);
}

// ---------------------------------------------------------------- faults

#[tokio::test]
async fn fault_429_with_retry_after_then_success() {
    let server = MockServer::start().await;
    server.push(MockReply::error(429, "slow down").header("retry-after-ms", "60"));
    server.push(MockReply::text("ok"));
    let model = mock_model(&server, "gpt-4.1-mini");
    let start = Instant::now();
    let r = model.chat(user("q")).await.unwrap();
    assert!(
        start.elapsed() >= Duration::from_millis(60),
        "Retry-After honoured"
    );
    assert_eq!(
        (r.text.as_str(), r.attempts, server.request_count()),
        ("ok", 2, 2)
    );
}

#[tokio::test]
async fn fault_429_retry_after_beyond_policy_gives_up() {
    let server = MockServer::start().await;
    server.push(MockReply::error(429, "come back later").header("Retry-After", "30"));
    let model = mock_model(&server, "gpt-4.1-mini");
    let e = model.chat(user("q")).await.unwrap_err();
    assert_eq!(e.kind, ModelErrorKind::RateLimited);
    assert_eq!((e.status, e.attempts), (Some(429), 1));
    assert_eq!(e.retry_after, Some(Duration::from_secs(30)));
    assert_eq!(e.message, "come back later");
}

/// An HTTP-date `Retry-After` is read against the reply's own `Date`,
/// whatever this machine's clock says (both name 2030 here): a date 30 s
/// after it is beyond this policy and reported as 30 s; one 1 s after it,
/// within a policy that allows 2 s, is waited for, then retried.
#[tokio::test]
async fn fault_429_retry_after_as_a_date() {
    let server = MockServer::start().await;
    server.push(
        MockReply::error(429, "come back later")
            .header("Date", "Tue, 01 Jan 2030 00:00:00 GMT")
            .header("Retry-After", "Tue, 01 Jan 2030 00:00:30 GMT"),
    );
    let model = mock_model(&server, "gpt-4.1-mini");
    let e = model.chat(user("q")).await.unwrap_err();
    assert_eq!((e.kind, e.attempts), (ModelErrorKind::RateLimited, 1));
    assert_eq!(e.retry_after, Some(Duration::from_secs(30)));

    let server = MockServer::start().await;
    server.push(
        MockReply::error(429, "slow down")
            .header("Date", "Tue, 01 Jan 2030 00:00:00 GMT")
            .header("Retry-After", "Tue, 01 Jan 2030 00:00:01 GMT"),
    );
    server.push(MockReply::text("ok"));
    let mut c = mock_config(&server, "gpt-4.1-mini");
    c.set_retry_config(Some(RetryConfig {
        max_delay: 2.0,
        ..fast_retry()
    }));
    let start = Instant::now();
    let r = IModel::with_api_key(c, "test")
        .unwrap()
        .chat(user("q"))
        .await
        .unwrap();
    assert!(
        start.elapsed() >= Duration::from_secs(1),
        "the date honoured"
    );
    assert_eq!((r.text.as_str(), r.attempts), ("ok", 2));

    // Without a `Date`, against the clock: a date already past asks for no
    // wait (the policy's backoff is not added to it).
    let server = MockServer::start().await;
    server.push(
        MockReply::error(429, "slow down").header("Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT"),
    );
    server.push(MockReply::text("ok"));
    let r = mock_model(&server, "gpt-4.1-mini")
        .chat(user("q"))
        .await
        .unwrap();
    assert_eq!((r.text.as_str(), r.attempts), ("ok", 2));
}

#[tokio::test]
async fn fault_insufficient_quota_is_not_retried() {
    let server = MockServer::start().await;
    server.push(MockReply::raw(
        429,
        r#"{"error": {"message": "You exceeded your current quota", "type": "insufficient_quota", "code": "insufficient_quota"}}"#,
    ));
    let model = mock_model(&server, "gpt-4.1-mini");
    let e = model.chat(user("q")).await.unwrap_err();
    assert_eq!(
        (e.kind, e.attempts, server.request_count()),
        (ModelErrorKind::Quota, 1, 1)
    );
}

#[tokio::test]
async fn fault_500_then_success() {
    let server = MockServer::start().await;
    server.push(MockReply::error(500, "boom"));
    server.push(MockReply::text("recovered"));
    let model = mock_model(&server, "gpt-4.1-mini");
    let r = model.chat(user("q")).await.unwrap();
    assert_eq!((r.text.as_str(), r.attempts), ("recovered", 2));
}

#[tokio::test]
async fn fault_500_exhausts_one_retry_budget() {
    let server = MockServer::start().await;
    server.script((0..5).map(|_| MockReply::error(503, "unavailable")));
    let model = mock_model(&server, "gpt-4.1-mini");
    let e = model.chat(user("q")).await.unwrap_err();
    assert_eq!(
        (e.kind, e.status, e.attempts),
        (ModelErrorKind::Transient, Some(503), 3)
    );
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn fault_reply_slower_than_timeout() {
    let server = MockServer::start().await;
    server.script((0..3).map(|_| MockReply::text("late").delayed(Duration::from_millis(500))));
    let mut c = mock_config(&server, "gpt-4.1-mini");
    c.set_retry_config(Some(fast_retry()));
    c.set_timeout(Duration::from_millis(100));
    let model = IModel::with_api_key(c, "test").unwrap();
    let start = Instant::now();
    let e = model.chat(user("q")).await.unwrap_err();
    assert_eq!((e.kind, e.attempts), (ModelErrorKind::Timeout, 3));
    assert!(start.elapsed() < Duration::from_millis(1400));
}

#[tokio::test]
async fn fault_connection_reset() {
    let server = MockServer::start().await;
    server.script([MockReply::reset(), MockReply::text("after reset")]);
    let model = mock_model(&server, "gpt-4.1-mini");
    let r = model.chat(user("q")).await.unwrap();
    assert_eq!((r.text.as_str(), r.attempts), ("after reset", 2));
    server.script((0..3).map(|_| MockReply::reset()));
    let e = model.chat(user("q")).await.unwrap_err();
    assert_eq!(
        (e.kind, e.attempts, e.status),
        (ModelErrorKind::Connect, 3, None)
    );
}

#[tokio::test]
async fn fault_malformed_json() {
    let server = MockServer::start().await;
    server.push(MockReply::raw(200, "{\"choices\": [truncated"));
    let model = mock_model(&server, "gpt-4.1-mini");
    let e = model.chat(user("q")).await.unwrap_err();
    assert_eq!(
        (e.kind, e.status, e.attempts),
        (ModelErrorKind::MalformedResponse, Some(200), 1)
    );
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn fault_error_envelope_in_200() {
    let server = MockServer::start().await;
    server.push(MockReply::raw(
        200,
        r#"{"error": {"message": "overloaded", "code": 503}}"#,
    ));
    server.push(MockReply::text("fine"));
    let model = mock_model(&server, "gpt-4.1-mini");
    let r = model.chat(user("q")).await.unwrap();
    assert_eq!((r.text.as_str(), r.attempts), ("fine", 2));
}

#[tokio::test]
async fn fault_truncated_sse() {
    let server = MockServer::start().await;
    server.push(
        MockReply::text("this will be cut short")
            .chunk_size(4)
            .truncated_after(3),
    );
    let model = mock_model(&server, "gpt-4.1-mini");
    let mut stream = model.stream(user("q")).await.unwrap();
    let mut ok = 0;
    let mut err = None;
    while let Some(item) = stream.next().await {
        match item {
            Ok(_) => ok += 1,
            Err(e) => err = Some(e),
        }
    }
    assert_eq!(ok, 3);
    let e = err.expect("a truncated stream fails");
    assert_eq!((e.kind, e.attempts), (ModelErrorKind::MalformedResponse, 1));
    assert_eq!(server.request_count(), 1, "streams are not retried");
    // The cut-short reply named its model; the model does not report it.
    assert!(
        model
            .snapshot()
            .provider_metadata()
            .get("served_model")
            .is_none()
    );
}

#[tokio::test]
async fn fault_401_is_auth_and_never_shows_the_key() {
    let server = MockServer::start().await;
    server.push(MockReply::error(
        401,
        "Incorrect API key provided: sk-live-SECRET-42",
    ));
    let mut c = mock_config(&server, "gpt-4.1-mini");
    c.set_retry_config(Some(fast_retry()));
    let model = IModel::with_api_key(c, ApiKey::new("sk-live-SECRET-42")).unwrap();
    let e = model.chat(user("q")).await.unwrap_err();
    assert_eq!(
        (e.kind, e.status, e.attempts),
        (ModelErrorKind::Auth, Some(401), 1)
    );
    assert!(!e.to_string().contains("SECRET"), "{e}");
    assert!(!e.reference_message().contains("SECRET"));
    assert!(!format!("{e:?}").contains("SECRET"));
    assert!(!format!("{model:?}").contains("SECRET"));
    assert!(
        !serde_json::to_string(&model.to_dict(true, true))
            .unwrap()
            .contains("SECRET")
    );
}

#[tokio::test]
async fn fault_400_bad_request_and_stream_error_status() {
    let server = MockServer::start().await;
    server.push(MockReply::error(400, "invalid request: mock refused"));
    server.push(MockReply::error(400, "no streaming for you"));
    let model = mock_model(&server, "gpt-4.1-mini");
    let e = model.chat(user("q")).await.unwrap_err();
    assert_eq!((e.kind, e.attempts), (ModelErrorKind::BadRequest, 1));
    assert_eq!(e.message, "invalid request: mock refused");
    // The reference's log text (operations/communicate_provider_error).
    assert_eq!(
        e.reference_message(),
        "Request failed with status 400: {'error': {'message': 'invalid request: mock refused', 'type': 'mock'}}"
    );
    let e = model.stream(user("q")).await.err().unwrap();
    assert_eq!((e.kind, e.status), (ModelErrorKind::BadRequest, Some(400)));
}

// ------------------------------------------------------ guard, keys, limits

#[tokio::test]
async fn network_guard_blocks_loopback_without_opt_in() {
    let server = MockServer::start().await;
    server.push(MockReply::text("should not be reached"));
    let mut c = mock_config(&server, "gpt-4.1-mini");
    c.set_allow_local_network(false);
    let model = IModel::with_api_key(c, "test").unwrap();
    let e = model.chat(user("q")).await.unwrap_err();
    assert_eq!((e.kind, e.attempts), (ModelErrorKind::NetworkGuard, 0));
    // A restored model never regains the permission.
    let restored =
        IModel::from_dict(&mock_model(&server, "gpt-4.1-mini").to_dict(false, false)).unwrap();
    let e = restored.chat(user("q")).await.unwrap_err();
    assert!(
        matches!(e.kind, ModelErrorKind::NetworkGuard | ModelErrorKind::Auth),
        "{e}"
    );
    // localhost by name goes through the guarded resolver.
    let mut c = mock_config(&server, "gpt-4.1-mini");
    c.set_base_url(&format!("http://localhost:{}/v1", server.addr().port()))
        .unwrap();
    c.set_allow_local_network(false);
    let e = IModel::with_api_key(c, "test")
        .unwrap()
        .chat(user("q"))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ModelErrorKind::NetworkGuard);
    assert_eq!(server.request_count(), 0);
}

#[tokio::test]
async fn missing_key_fails_before_sending() {
    let server = MockServer::start().await;
    let model = IModel::new(mock_config(&server, "gpt-4.1-mini")).unwrap();
    assert!(
        !model.has_api_key(),
        "custom base_url never receives the environment key"
    );
    let e = model.chat(user("q")).await.unwrap_err();
    assert_eq!((e.kind, e.attempts), (ModelErrorKind::Auth, 0));
    assert_eq!(server.request_count(), 0);
}

#[tokio::test]
async fn generic_openai_compatible_endpoint_authenticates() {
    let server = MockServer::start().await;
    server.push(MockReply::text("compat"));
    let c = ModelConfig::builder()
        .provider("my-vllm")
        .model("qwen")
        .base_url(&server.base_url())
        .endpoint("chat/completions")
        .allow_local_network(true)
        .kwarg("temperature", 0.3)
        .build()
        .unwrap();
    let model = IModel::with_api_key(c, ApiKey::new("vllm-key")).unwrap();
    let r = model
        .chat(user("hi").with_field("custom_flag", true))
        .await
        .unwrap();
    assert_eq!(r.text, "compat");
    let req = &server.requests()[0];
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(req.header("authorization"), Some("Bearer vllm-key"));
    assert_eq!(
        serde_json::to_string(&req.body).unwrap(),
        r#"{"model":"qwen","temperature":0.3,"custom_flag":true,"messages":[{"role":"user","content":"hi"}]}"#
    );
}

#[tokio::test]
async fn anthropic_native_request_headers_and_body() {
    let server = MockServer::start().await;
    server.push(MockReply::raw(
        200,
        r#"{"id":"msg_1","type":"message","model":"claude-sonnet-4-5","content":[{"type":"thinking","thinking":"..."},{"type":"text","text":"T1"},{"type":"tool_use","id":"tu","name":"f","input":{"x":1}},{"type":"text","text":"T2"}],"stop_reason":"end_turn","usage":{"input_tokens":9,"output_tokens":3}}"#,
    ));
    let c = ModelConfig::builder()
        .provider("anthropic")
        .model("claude-sonnet-4-5")
        .kwarg("temperature", 0.5)
        .base_url(&server.base_url())
        .allow_local_network(true)
        .build()
        .unwrap();
    let model = IModel::with_api_key(c, ApiKey::new("dummy-key-anth")).unwrap();
    let r = model
        .chat(user("Guidance: SYS\nInstruction: hi").with_field("top_k", 5))
        .await
        .unwrap();
    assert_eq!(r.text, "T1T2");
    assert_eq!(r.tool_calls[0].name, "f");
    assert_eq!(r.usage.unwrap().prompt_tokens, 9);
    let req = &server.requests()[0];
    assert_eq!(req.path, "/v1/messages");
    assert_eq!(req.header("x-api-key"), Some("dummy-key-anth"));
    assert_eq!(req.header("anthropic-version"), Some("2023-06-01"));
    assert!(req.header("authorization").is_none());
    assert_eq!(
        serde_json::to_string(&req.body).unwrap(),
        r#"{"model":"claude-sonnet-4-5","temperature":0.5,"top_k":5,"messages":[{"role":"user","content":"Guidance: SYS\nInstruction: hi"}],"max_tokens":8192}"#
    );
}

#[tokio::test]
async fn rate_limit_is_a_typed_error_not_an_empty_reply() {
    let server = MockServer::start().await;
    server.script([MockReply::text("one"), MockReply::text("two")]);
    let mut c = mock_config(&server, "gpt-4.1-mini");
    let mut p = c.processor_config().clone();
    p.limit_requests = Some(1);
    c.set_processor_config(p).unwrap();
    let model = IModel::builder(c)
        .api_key("test")
        .max_rate_limit_wait(Duration::ZERO)
        .build()
        .unwrap();
    assert_eq!(model.chat(user("1")).await.unwrap().text, "one");
    let e = model.chat(user("2")).await.unwrap_err();
    assert_eq!((e.kind, e.attempts), (ModelErrorKind::LocalRateLimit, 0));
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn dropping_a_stream_releases_its_slot() {
    let server = MockServer::start().await;
    server.script([
        MockReply::text("first stream text").chunk_size(2),
        MockReply::text("second"),
    ]);
    let mut c = mock_config(&server, "gpt-4.1-mini");
    let mut p = c.processor_config().clone();
    p.concurrency_limit = Some(1);
    c.set_processor_config(p).unwrap();
    let model = IModel::builder(c)
        .api_key("test")
        .max_rate_limit_wait(Duration::from_millis(500))
        .build()
        .unwrap();
    let mut s = model.stream(user("a")).await.unwrap();
    let _ = s.next().await.unwrap().unwrap();
    drop(s);
    let mut s2 = model.stream(user("b")).await.unwrap();
    let mut acc = StreamAccumulator::new();
    while let Some(c) = s2.next().await {
        acc.push(&c.unwrap());
    }
    assert_eq!(acc.finish().text, "second");
}

#[tokio::test]
async fn input_token_cap_refuses_before_sending_and_remembers() {
    let server = MockServer::start().await;
    server.push(MockReply::text("never"));
    let mut c = mock_config(&server, "gpt-4.1-mini");
    c.set_max_input_tokens(Some(5)).unwrap();
    let model = IModel::with_api_key(c, "test").unwrap();
    let e = model.chat(user(&"long ".repeat(50))).await.unwrap_err();
    assert_eq!(e.kind, ModelErrorKind::InputTokenCap);
    let again = model.chat(user("x")).await.unwrap_err();
    assert_eq!(again.kind, ModelErrorKind::InputTokenCap);
    model.clear_input_token_cap_refusal();
    assert_eq!(server.request_count(), 0);
}

#[tokio::test]
async fn configuration_round_trip_through_imodel() {
    let server = MockServer::start().await;
    server.push(MockReply::text("hi"));
    let model = mock_model(&server, "gpt-4.1-mini");
    let before = model.to_dict(false, false);
    assert!(before["provider_metadata"].as_object().unwrap().is_empty());
    model.chat(user("q")).await.unwrap();
    let after = model.to_dict(false, true);
    assert_eq!(
        after["provider_metadata"],
        json!({"served_model": "gpt-4.1-mini"})
    );
    assert_eq!(after["id"], before["id"]);
    let dup = model.duplicate();
    assert_eq!(dup.to_dict(false, true), after);
}

const ANTHROPIC_SSE: &str = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"usage":{"input_tokens":25,"output_tokens":1}}}

event: ping
data: {"type": "ping"}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\": "}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"Paris\"}"}}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":15}}

event: message_stop
data: {"type":"message_stop"}

"#;

#[tokio::test]
async fn anthropic_stream_assembles_text_tool_calls_and_usage() {
    let server = MockServer::start().await;
    server.push(MockReply::raw(200, ANTHROPIC_SSE).header("content-type", "text/event-stream"));
    let c = ModelConfig::builder()
        .provider("anthropic")
        .model("claude-sonnet-4-5")
        .base_url(&server.base_url())
        .allow_local_network(true)
        .build()
        .unwrap();
    let model = IModel::with_api_key(c, ApiKey::new("dummy-key-anth")).unwrap();
    let mut stream = model.stream(user("weather?")).await.unwrap();
    let mut acc = StreamAccumulator::new();
    while let Some(chunk) = stream.next().await {
        acc.push(&chunk.unwrap());
    }
    let r = acc.finish();
    assert_eq!(r.text, "Hello");
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].id, "toolu_1");
    assert_eq!(r.tool_calls[0].name, "get_weather");
    assert_eq!(r.tool_calls[0].arguments, r#"{"city": "Paris"}"#);
    let u = r.usage.unwrap();
    assert_eq!(
        (u.prompt_tokens, u.completion_tokens, u.total_tokens),
        (25, 15, 40)
    );
    assert_eq!(r.finish_reason.as_deref(), Some("tool_use"));
    assert_eq!(r.served_model.as_deref(), Some("claude-sonnet-4-5"));
    assert_eq!(server.bodies()[0]["stream"], json!(true));
    assert_eq!(server.bodies()[0]["max_tokens"], json!(8192));
}

#[tokio::test]
async fn openai_compatible_family_bodies_and_auth() {
    let server = MockServer::start().await;
    for (provider, model, auth) in [
        ("ollama", "llama3", None),
        ("gemini", "gemini-2.5-flash", Some("Bearer g-key")),
        (
            "openrouter",
            "anthropic/claude-3.5-sonnet",
            Some("Bearer g-key"),
        ),
        ("groq", "llama-3.3-70b", Some("Bearer g-key")),
    ] {
        let c = ModelConfig::builder()
            .provider(provider)
            .model(model)
            .base_url(&server.base_url())
            .allow_local_network(true)
            .build()
            .unwrap();
        let m = IModel::with_api_key(c, ApiKey::new("g-key")).unwrap();
        if provider == "ollama" {
            // the local model list the Ollama check reads first
            server.push(MockReply::raw(
                200,
                r#"{"models": [{"name": "llama3:latest"}]}"#,
            ));
        }
        server.push(MockReply::text("ok"));
        let req = user("hi")
            .with_field("reasoning_effort", "low")
            .with_field("not_a_field", 1);
        assert_eq!(m.chat(req).await.unwrap().text, "ok", "{provider}");
        let sent = server.requests().pop().unwrap();
        assert_eq!(sent.header("authorization"), auth, "{provider}");
        assert_eq!(sent.path, "/v1/chat/completions");
        assert_eq!(sent.body["model"], model);
        assert!(
            sent.body.get("not_a_field").is_none(),
            "{provider}: request model filters"
        );
        assert_eq!(
            sent.body.get("reasoning_effort").is_some(),
            provider != "ollama",
            "{provider}"
        );
    }
}

#[tokio::test]
async fn input_token_scale_calibrates_on_large_calls() {
    let server = MockServer::start().await;
    // The provider reports far more input tokens than the estimate counted.
    server.push(MockReply::raw(
        200,
        r#"{"object":"chat.completion","model":"m","choices":[{"message":{"content":"k"}}],"usage":{"prompt_tokens":40000,"completion_tokens":1,"total_tokens":40001}}"#,
    ));
    let model = mock_model(&server, "m");
    model.chat(user(&"word ".repeat(4000))).await.unwrap();
    let scale = model.snapshot().input_token_scale();
    assert!(scale > 1.5, "{scale}");
    assert!(
        model.to_dict(false, false)["input_token_scale"]
            .as_f64()
            .unwrap()
            > 1.5
    );
}

#[tokio::test]
async fn circuit_breaker_opens_after_failures() {
    let server = MockServer::start().await;
    server.script((0..4).map(|_| MockReply::error(500, "down")));
    server.push(MockReply::text("back"));
    let mut c = mock_config(&server, "gpt-4.1-mini");
    c.set_retry_config(Some(RetryConfig {
        max_retries: 0,
        ..fast_retry()
    }));
    c.set_circuit_breaker(Some(branch_core::model::CircuitBreakerConfig {
        failure_threshold: 2,
        recovery_time: 0.05,
        half_open_max_calls: 1,
        name: None,
    }));
    let model = IModel::with_api_key(c, "test").unwrap();
    for _ in 0..2 {
        assert_eq!(
            model.chat(user("q")).await.unwrap_err().kind,
            ModelErrorKind::Transient
        );
    }
    let e = model.chat(user("q")).await.unwrap_err();
    assert_eq!((e.kind, e.attempts), (ModelErrorKind::CircuitOpen, 0));
    assert_eq!(server.request_count(), 2);
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(
        model.chat(user("q")).await.unwrap_err().kind,
        ModelErrorKind::Transient,
        "half-open trial fails"
    );
    assert_eq!(
        model.chat(user("q")).await.unwrap_err().kind,
        ModelErrorKind::CircuitOpen
    );
}

#[tokio::test]
async fn connect_upgrades_configuration_only_models() {
    let server = MockServer::start().await;
    let config: std::sync::Arc<dyn ChatModel> = std::sync::Arc::new(mock_config(&server, "m"));
    assert!(!config.is_connected());
    let live = crate::connect(&config).unwrap();
    assert!(live.is_connected());
    assert_eq!(live.snapshot().id(), config.snapshot().id());
    let again = crate::connect(&live).unwrap();
    assert!(std::sync::Arc::ptr_eq(&again, &live));
}

#[tokio::test]
async fn redirects_stay_on_the_original_origin() {
    let server = MockServer::start().await;
    let port = server.addr().port();
    // Same origin: followed (307 keeps the POST and its body).
    server.push(MockReply::raw(307, "").header(
        "location",
        &format!("http://127.0.0.1:{port}/v1/moved/chat/completions"),
    ));
    server.push(MockReply::text("moved ok"));
    let model = mock_model(&server, "gpt-4.1-mini");
    assert_eq!(model.chat(user("q")).await.unwrap().text, "moved ok");
    assert_eq!(server.requests()[1].path, "/v1/moved/chat/completions");
    // Another origin (localhost is another host name): refused, key not forwarded.
    server.push(MockReply::raw(307, "").header(
        "location",
        &format!("http://localhost:{port}/v1/chat/completions"),
    ));
    let e = model.chat(user("q")).await.unwrap_err();
    assert_eq!(e.kind, ModelErrorKind::NetworkGuard, "{e}");
    assert_eq!(server.request_count(), 3);
}

/// Collects the fields recorded on the GenAI `chat` spans.
#[derive(Clone, Default)]
struct SpanFields(std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>);

struct Visit<'a>(&'a mut Vec<(String, String)>);

impl tracing::field::Visit for Visit<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for SpanFields {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _id: &tracing::span::Id,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if attrs.metadata().name() == "chat" {
            attrs.record(&mut Visit(&mut self.0.lock().unwrap()));
        }
    }

    fn on_record(
        &self,
        _id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        values.record(&mut Visit(&mut self.0.lock().unwrap()));
    }
}

#[tokio::test]
async fn a_genai_chat_span_per_call_with_status_attempts_and_tokens() {
    use tracing_subscriber::layer::SubscriberExt;
    let fields = SpanFields::default();
    let subscriber = tracing_subscriber::registry().with(fields.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let server = MockServer::start().await;
    server.script([MockReply::error(500, "x"), MockReply::text("ok")]);
    let model = mock_model(&server, "gpt-4.1-mini");
    model.chat(user("q")).await.unwrap();
    let got = fields.0.lock().unwrap().clone();
    let get = |k: &str| {
        got.iter()
            .rev()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(get("otel.name").as_deref(), Some("\"chat gpt-4.1-mini\""));
    assert_eq!(get("gen_ai.operation.name").as_deref(), Some("\"chat\""));
    assert_eq!(get("gen_ai.provider.name").as_deref(), Some("\"openai\""));
    assert_eq!(
        get("gen_ai.request.model").as_deref(),
        Some("\"gpt-4.1-mini\"")
    );
    assert_eq!(get("server.address").as_deref(), Some("\"127.0.0.1\""));
    assert_eq!(get("http.response.status_code").as_deref(), Some("200"));
    assert_eq!(get("lionagi.attempts").as_deref(), Some("2"));
    assert_eq!(get("gen_ai.usage.input_tokens").as_deref(), Some("11"));
    assert_eq!(get("gen_ai.usage.output_tokens").as_deref(), Some("7"));
    assert_eq!(
        get("gen_ai.response.finish_reasons").as_deref(),
        Some("\"[\\\"stop\\\"]\"")
    );
    // No content unless opted in.
    assert_eq!(get("gen_ai.input.messages"), None);
    assert_eq!(get("gen_ai.output.messages"), None);
}

#[tokio::test]
async fn a_streamed_call_records_its_usage_on_the_chat_span_at_the_end() {
    use tracing_subscriber::layer::SubscriberExt;
    let fields = SpanFields::default();
    let subscriber = tracing_subscriber::registry().with(fields.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let server = MockServer::start().await;
    server.push(MockReply::text("Streamed.").chunk_size(3));
    let model = mock_model(&server, "gpt-4.1-mini");
    let req = user("x").with_field("stream_options", json!({"include_usage": true}));
    let mut stream = model.stream(req).await.unwrap();
    let get = |k: &str| {
        let got = fields.0.lock().unwrap().clone();
        got.iter()
            .rev()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
    };
    // Opened, not yet answered.
    assert_eq!(get("gen_ai.request.stream").as_deref(), Some("true"));
    assert_eq!(get("gen_ai.usage.input_tokens"), None);
    while let Some(c) = stream.next().await {
        c.unwrap();
    }
    assert_eq!(get("gen_ai.usage.input_tokens").as_deref(), Some("11"));
    assert_eq!(get("gen_ai.usage.output_tokens").as_deref(), Some("7"));
    assert_eq!(
        get("gen_ai.response.finish_reasons").as_deref(),
        Some("\"[\\\"stop\\\"]\"")
    );
    assert_eq!(
        get("gen_ai.response.model").as_deref(),
        Some("\"gpt-4.1-mini\"")
    );
}

#[tokio::test]
async fn a_failed_call_marks_its_chat_span_with_the_error_type() {
    use tracing_subscriber::layer::SubscriberExt;
    let fields = SpanFields::default();
    let subscriber = tracing_subscriber::registry().with(fields.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let server = MockServer::start().await;
    server.script([MockReply::error(400, "no such parameter")]);
    let model = mock_model(&server, "gpt-4.1-mini");
    model.chat(user("q")).await.unwrap_err();
    let got = fields.0.lock().unwrap().clone();
    let get = |k: &str| {
        got.iter()
            .rev()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(get("error.type").as_deref(), Some("\"bad_request\""));
    assert_eq!(get("otel.status_code").as_deref(), Some("\"error\""));
    assert_eq!(get("http.response.status_code").as_deref(), Some("400"));
}

#[tokio::test]
async fn ollama_pulls_a_missing_model_once() {
    let server = MockServer::start().await;
    server.script([
        MockReply::raw(200, r#"{"models": [{"name": "other:latest"}]}"#),
        MockReply::raw(200, r#"{"status": "success"}"#),
        MockReply::text("from ollama"),
        MockReply::text("again"),
    ]);
    let c = ModelConfig::builder()
        .provider("ollama")
        .model("llama3")
        .base_url(&format!("http://localhost:{}/v1", server.addr().port()))
        .build()
        .unwrap();
    assert!(c.allow_local_network());
    let model = IModel::new(c).unwrap();
    assert_eq!(
        model
            .chat(user("hi").with_field("reasoning_effort", "low"))
            .await
            .unwrap()
            .text,
        "from ollama"
    );
    assert_eq!(model.chat(user("hi")).await.unwrap().text, "again");
    let reqs = server.requests();
    let paths: Vec<_> = reqs
        .iter()
        .map(|r| (r.method.as_str(), r.path.as_str()))
        .collect();
    assert_eq!(
        paths,
        [
            ("GET", "/api/tags"),
            ("POST", "/api/pull"),
            ("POST", "/v1/chat/completions"),
            ("POST", "/v1/chat/completions")
        ]
    );
    assert_eq!(reqs[1].body, json!({"model": "llama3", "stream": false}));
    assert!(reqs[2].header("authorization").is_none());
    assert!(reqs[2].body.get("reasoning_effort").is_none());
}
