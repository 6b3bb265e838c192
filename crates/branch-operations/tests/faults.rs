//! The model-layer fault suite at the branch level (issue 3, "Real parts,
//! tested for real"): each fault the loopback mock can produce, met by
//! `communicate` (or `run` for streaming) on a branch that already holds a
//! conversation. Every test checks the typed error and its kind, the number
//! of HTTP attempts the server actually received, and the history: exactly
//! as before on failure, exactly one instruction and one reply more on
//! eventual success. The API key never shows in any error text.
//!
//! Retries use millisecond backoffs; nothing here measures time.

use std::sync::Arc;
use std::time::Duration;

use branch_core::message::{InstructionContent, Message, MessageKind};
use branch_core::model::{ChatModel, ModelConfig, ModelError, ModelErrorKind, RetryConfig};
use branch_core::{Branch, Observer, Participant, Signal, ToDictOptions};
use branch_models::IModel;
use branch_models::mock::{MockReply, MockServer};
use branch_operations::{
    BranchOperations, Committed, CommunicateOptions, OperationError, Reply, RunOptions,
};
use futures_util::StreamExt;
use serde_json::Value;

/// The key every model of this suite holds; it must never leak.
const KEY: &str = "sk-fault-secret";

/// Two retries after the first attempt, 1 ms apart (no jitter), and a cap
/// of 50 ms on any wait, `Retry-After` included.
fn fast_retry() -> RetryConfig {
    RetryConfig {
        max_retries: 2,
        base_delay: 0.001,
        max_delay: 0.05,
        backoff_factor: 2.0,
        jitter: false,
        ..RetryConfig::default()
    }
}

fn config(server: &MockServer) -> ModelConfig {
    let mut c = ModelConfig::builder()
        .provider("openai")
        .model("gpt-4.1-mini")
        .base_url(&server.base_url())
        .allow_local_network(true)
        .build()
        .expect("mock model config");
    c.set_retry_config(Some(fast_retry()));
    c
}

fn connected(config: ModelConfig) -> Arc<dyn ChatModel> {
    Arc::new(IModel::with_api_key(config, KEY).expect("model connects"))
}

/// A branch at the mock with a system prompt and two earlier exchanges.
fn branch_with_history(model: Arc<dyn ChatModel>) -> Branch {
    let mut b = Branch::builder()
        .system("You answer briefly.")
        .chat_model(model)
        .build()
        .expect("branch builds");
    let id = b.id();
    for (q, a) in [
        ("First question", "First answer"),
        ("Second", "Second answer"),
    ] {
        let ins = Message::instruction(InstructionContent {
            instruction: Some(q.into()),
            ..InstructionContent::default()
        })
        .with_sender(Participant::parse("user"))
        .with_recipient(Participant::Id(id));
        b.msgs_mut().add_message(ins);
        let res = Message::assistant(a)
            .with_sender(Participant::Id(id))
            .with_recipient(Participant::parse("user"));
        b.msgs_mut().add_message(res);
    }
    b
}

/// The serialized conversation (`to_dict()["messages"]`).
fn history(b: &Branch) -> Value {
    b.to_dict(&ToDictOptions::default()).expect("to_dict")["messages"].clone()
}

/// What the branch looked like before the faulty call.
struct Before {
    messages: Value,
    order: Vec<Value>,
    logs: usize,
}

impl Before {
    fn of(b: &Branch) -> Self {
        let messages = history(b);
        let order = messages["progression"]["order"]
            .as_array()
            .expect("progression order")
            .clone();
        Self {
            messages,
            order,
            logs: b.logs().len(),
        }
    }

    /// A failed call recorded nothing, but logged its API call.
    fn assert_unchanged(&self, b: &Branch) {
        assert_eq!(history(b), self.messages, "history changed on failure");
        assert_eq!(b.logs().len(), self.logs + 1, "the failed call is logged");
    }

    /// A successful call added exactly its instruction and its reply, after
    /// the untouched earlier messages.
    fn assert_one_turn_added(&self, b: &Branch, instruction: &str, reply: &str) {
        let now = history(b);
        let order = now["progression"]["order"].as_array().unwrap();
        assert_eq!(order.len(), self.order.len() + 2, "one turn added");
        assert_eq!(order[..self.order.len()], self.order[..]);
        let before = self.messages["collections"].as_array().unwrap();
        assert_eq!(
            now["collections"].as_array().unwrap()[..before.len()],
            before[..],
            "earlier messages untouched"
        );
        let added: Vec<&Message> = b.messages().iter().skip(self.order.len()).collect();
        assert_eq!(added[0].kind(), MessageKind::Instruction);
        assert_eq!(
            added[0].as_instruction().unwrap().instruction,
            Some(Value::from(instruction))
        );
        assert_eq!(added[1].kind(), MessageKind::AssistantResponse);
        assert_eq!(added[1].as_assistant_text(), Some(reply));
    }
}

/// The provider error inside a verb's error.
fn model_error(e: &OperationError) -> &ModelError {
    match e {
        OperationError::ApiCall { source, committed } => {
            assert_eq!(*committed, Committed::default(), "nothing was committed");
            source
        }
        other => panic!("expected an API-call error, got {other:?}"),
    }
}

/// No text derived from the error, nor the branch's logs, shows the key.
fn assert_key_hidden(e: &OperationError, b: &Branch) {
    let m = model_error(e);
    for text in [
        e.to_string(),
        format!("{e:?}"),
        m.to_string(),
        format!("{m:?}"),
        m.reference_message(),
        serde_json::to_string(&b.to_dict(&ToDictOptions::default()).unwrap()).unwrap(),
    ] {
        assert!(!text.contains(KEY), "the key leaked: {text}");
        assert!(
            !text.contains("fault-secret"),
            "part of the key leaked: {text}"
        );
    }
}

/// Runs `communicate` expecting failure; checks kind, attempts (as counted
/// by the server and by the error), history and key hygiene.
async fn communicate_fails(
    b: &mut Branch,
    server: &MockServer,
    kind: ModelErrorKind,
    attempts: u32,
) -> ModelError {
    let before = Before::of(b);
    let e = b
        .communicate(CommunicateOptions::new("Third question"))
        .await
        .expect_err("the fault surfaces");
    let m = model_error(&e).clone();
    assert_eq!(m.kind, kind, "{m}");
    assert_eq!(m.attempts, attempts, "attempts the error reports");
    assert_eq!(
        server.request_count(),
        attempts as usize,
        "attempts the server saw"
    );
    assert!(e.to_string().contains("nothing was recorded"), "{e}");
    assert!(std::error::Error::source(&e).is_some(), "the cause is kept");
    before.assert_unchanged(b);
    assert_key_hidden(&e, b);
    m
}

/// Runs `communicate` expecting eventual success after `attempts` tries.
async fn communicate_recovers(b: &mut Branch, server: &MockServer, attempts: usize, text: &str) {
    let before = Before::of(b);
    let r = b
        .communicate(CommunicateOptions::new("Third question"))
        .await
        .expect("the retry succeeds");
    assert_eq!(r, Reply::Text(text.into()));
    assert_eq!(server.request_count(), attempts);
    // Every attempt resent the same body, history included.
    let bodies = server.bodies();
    assert!(bodies.iter().all(|body| *body == bodies[0]), "{bodies:#?}");
    let sent = bodies[0]["messages"].as_array().unwrap();
    assert!(sent.len() > 1, "the earlier history is sent");
    assert!(
        sent.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .contains("Third question")
    );
    before.assert_one_turn_added(b, "Third question", text);
    assert_eq!(b.logs().len(), before.logs + 1, "one logged call per turn");
}

#[tokio::test]
async fn rate_limited_with_retry_after_then_success() {
    let server = MockServer::start().await;
    server.push(MockReply::error(429, "slow down").header("Retry-After", "0"));
    server.push(MockReply::text("Third answer"));
    let mut b = branch_with_history(connected(config(&server)));
    communicate_recovers(&mut b, &server, 2, "Third answer").await;
}

#[tokio::test]
async fn rate_limited_with_retry_after_until_the_budget_is_exhausted() {
    let server =
        MockServer::start_static(MockReply::error(429, "slow down").header("Retry-After", "0"))
            .await;
    let mut b = branch_with_history(connected(config(&server)));
    let m = communicate_fails(&mut b, &server, ModelErrorKind::RateLimited, 3).await;
    assert_eq!(m.status, Some(429));
    assert_eq!(m.retry_after, Some(Duration::ZERO));
    assert_eq!(m.message, "slow down");
}

#[tokio::test]
async fn rate_limited_with_a_retry_after_beyond_the_policy_is_not_retried() {
    // The server asks for 30 s, the policy waits at most 50 ms: the
    // header is honoured by giving up instead of retrying early.
    let server = MockServer::start().await;
    server.push(MockReply::error(429, "come back later").header("Retry-After", "30"));
    server.push(MockReply::text("too early"));
    let mut b = branch_with_history(connected(config(&server)));
    let m = communicate_fails(&mut b, &server, ModelErrorKind::RateLimited, 1).await;
    assert_eq!(m.retry_after, Some(Duration::from_secs(30)));
}

#[tokio::test]
async fn server_error_then_success() {
    let server = MockServer::start().await;
    server.push(MockReply::error(500, "boom"));
    server.push(MockReply::text("Recovered"));
    let mut b = branch_with_history(connected(config(&server)));
    communicate_recovers(&mut b, &server, 2, "Recovered").await;
}

#[tokio::test]
async fn server_errors_until_the_budget_is_exhausted() {
    let server = MockServer::start_static(MockReply::error(500, "boom")).await;
    let mut b = branch_with_history(connected(config(&server)));
    let m = communicate_fails(&mut b, &server, ModelErrorKind::Transient, 3).await;
    assert_eq!(m.status, Some(500));
    assert_eq!(m.message, "boom");
}

#[tokio::test]
async fn reply_slower_than_the_timeout() {
    let server =
        MockServer::start_static(MockReply::text("too late").delayed(Duration::from_millis(400)))
            .await;
    let mut c = config(&server);
    c.set_timeout(Duration::from_millis(50));
    let mut b = branch_with_history(connected(c));
    let m = communicate_fails(&mut b, &server, ModelErrorKind::Timeout, 3).await;
    assert_eq!(m.status, None, "no reply arrived");
}

#[tokio::test]
async fn connection_reset_until_the_budget_is_exhausted() {
    let server = MockServer::start_static(MockReply::reset()).await;
    let mut b = branch_with_history(connected(config(&server)));
    let m = communicate_fails(&mut b, &server, ModelErrorKind::Connect, 3).await;
    assert_eq!(m.status, None);
}

#[tokio::test]
async fn connection_reset_then_success() {
    let server = MockServer::start().await;
    server.script([MockReply::reset(), MockReply::text("After the reset")]);
    let mut b = branch_with_history(connected(config(&server)));
    communicate_recovers(&mut b, &server, 2, "After the reset").await;
}

#[tokio::test]
async fn malformed_json_in_a_200_reply_is_not_retried() {
    let server = MockServer::start().await;
    server.push(MockReply::raw(200, "{\"choices\": [truncated"));
    server.push(MockReply::text("never asked for"));
    let mut b = branch_with_history(connected(config(&server)));
    let m = communicate_fails(&mut b, &server, ModelErrorKind::MalformedResponse, 1).await;
    assert_eq!(m.status, Some(200));
}

#[tokio::test]
async fn unauthorized_is_not_retried_and_never_shows_the_key() {
    let server = MockServer::start().await;
    // Providers echo the key they refused; the error must not.
    server.push(MockReply::error(
        401,
        &format!("Incorrect API key provided: {KEY}."),
    ));
    server.push(MockReply::text("never asked for"));
    let mut b = branch_with_history(connected(config(&server)));
    let m = communicate_fails(&mut b, &server, ModelErrorKind::Auth, 1).await;
    assert_eq!(m.status, Some(401));
    assert!(m.message.starts_with("Incorrect API key provided: "), "{m}");
    // The key did reach the server, as a bearer token: only the outputs
    // are redacted.
    let auth = server.requests()[0]
        .header("authorization")
        .map(str::to_owned);
    assert_eq!(auth.as_deref(), Some(&*format!("Bearer {KEY}")));
}

/// Collects every signal.
#[derive(Default)]
struct Recorder(std::sync::Mutex<Vec<Signal>>);

impl Observer for Recorder {
    fn observe(&self, signal: Signal) {
        self.0.lock().unwrap().push(signal);
    }
}

#[tokio::test]
async fn a_failed_turn_is_signalled_without_the_key_and_adds_no_message() {
    let server = MockServer::start().await;
    server.push(MockReply::error(
        401,
        &format!("Incorrect API key provided: {KEY}."),
    ));
    let mut b = branch_with_history(connected(config(&server)));
    let rec = Arc::new(Recorder::default());
    b.set_observer(Some(rec.clone()));
    communicate_fails(&mut b, &server, ModelErrorKind::Auth, 1).await;
    let signals = rec.0.lock().unwrap().clone();
    let classes: Vec<&str> = signals.iter().map(Signal::class_name).collect();
    assert_eq!(classes, ["RunStart", "RunFailed"], "no MessageAdded");
    let Signal::RunFailed {
        error_kind, error, ..
    } = &signals[1]
    else {
        unreachable!()
    };
    assert_eq!(error_kind, "ExecutionError");
    assert!(error.contains("401"), "{error}");
    for s in &signals {
        assert!(!s.view().to_string().contains(KEY), "{s:?}");
    }
}

#[tokio::test]
async fn quota_exhaustion_is_not_retried() {
    let server = MockServer::start().await;
    server.push(MockReply::raw(
        429,
        r#"{"error": {"message": "You exceeded your current quota", "type": "insufficient_quota", "code": "insufficient_quota"}}"#,
    ));
    server.push(MockReply::text("never asked for"));
    let mut b = branch_with_history(connected(config(&server)));
    let m = communicate_fails(&mut b, &server, ModelErrorKind::Quota, 1).await;
    assert_eq!(m.status, Some(429));
}

/// Streaming is one attempt: an error status before the first event fails
/// `run` at once, whatever its kind, and records nothing.
#[tokio::test]
async fn error_statuses_before_a_stream_are_not_retried() {
    for (reply, kind) in [
        (MockReply::error(500, "boom"), ModelErrorKind::Transient),
        (
            MockReply::error(429, "slow down").header("Retry-After", "0"),
            ModelErrorKind::RateLimited,
        ),
        (
            MockReply::error(401, &format!("Incorrect API key provided: {KEY}.")),
            ModelErrorKind::Auth,
        ),
    ] {
        let server = MockServer::start().await;
        server.push(reply);
        server.push(MockReply::text("never asked for"));
        let mut b = branch_with_history(connected(config(&server)));
        let before = Before::of(&b);
        let items: Vec<_> = b.run(RunOptions::new("Third question")).collect().await;
        let e = items
            .iter()
            .find_map(|r| r.as_ref().err())
            .expect("run fails");
        let m = model_error(e);
        assert_eq!((m.kind, m.attempts), (kind, 1), "{m}");
        assert_eq!(server.request_count(), 1, "streams are not retried");
        before.assert_unchanged(&b);
        assert_key_hidden(e, &b);
    }
}

/// Streaming (`run` over SSE): a stream cut before its end marker fails the
/// turn, is not retried, and records nothing.
#[tokio::test]
async fn truncated_sse_stream_through_run() {
    let server = MockServer::start().await;
    server.push(
        MockReply::text("this reply will be cut short")
            .chunk_size(4)
            .truncated_after(3),
    );
    let mut b = branch_with_history(connected(config(&server)));
    let before = Before::of(&b);
    let items: Vec<_> = b.run(RunOptions::new("Third question")).collect().await;
    let errors: Vec<&OperationError> = items.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(errors.len(), 1, "one failure ends the stream: {items:?}");
    assert!(
        items.last().unwrap().is_err(),
        "nothing is yielded after the failure"
    );
    let e = errors[0];
    let m = model_error(e);
    assert_eq!(m.kind, ModelErrorKind::MalformedResponse, "{m}");
    assert_eq!(m.attempts, 1);
    assert_eq!(server.request_count(), 1, "streams are not retried");
    assert_eq!(server.bodies()[0]["stream"], true);
    before.assert_unchanged(&b);
    assert_key_hidden(e, &b);
}
