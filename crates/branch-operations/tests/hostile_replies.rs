//! Replies the model layer refuses (issue 18): too many tool calls, too many
//! bytes, nothing in them, non-JSON stream events, no end in time. Each
//! fails the turn with the model layer's typed error and leaves the
//! conversation byte-identical; no tool of a refused reply runs.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use branch_actions::DynamicTool;
use branch_core::model::{ChatModel, ModelErrorKind};
use branch_core::{Branch, ToDictOptions};
use branch_models::mock::{MockReply, MockServer, MockToolCall};
use branch_models::{IModel, IModelBuilder};
use branch_operations::{
    BranchOperations, CommunicateOptions, OperateOptions, OperationError, RunOptions,
};
use futures_util::StreamExt;
use serde_json::{Value, json};

fn builder(server: &MockServer) -> IModelBuilder {
    IModel::builder(common::config(server, "gpt-4.1-mini")).api_key("test")
}

fn branch(model: IModel) -> Branch {
    let model: Arc<dyn ChatModel> = Arc::new(model);
    Branch::builder()
        .system("S")
        .chat_model(model)
        .build()
        .unwrap()
}

/// The whole conversation as written (messages and progression).
fn snapshot(b: &Branch) -> Value {
    b.to_dict(&ToDictOptions::default()).unwrap()["messages"].clone()
}

fn model_kind(e: &OperationError) -> ModelErrorKind {
    match e {
        OperationError::ApiCall { source, .. } => source.kind,
        other => panic!("expected an API-call error, got {other:?}"),
    }
}

async fn communicate_refused(b: &mut Branch, kind: ModelErrorKind) -> String {
    let before = snapshot(b);
    let e = b
        .communicate(CommunicateOptions::new("question"))
        .await
        .expect_err("the reply is refused");
    assert_eq!(model_kind(&e), kind, "{e}");
    assert_eq!(snapshot(b), before, "the conversation is unchanged");
    e.to_string()
}

async fn run_refused(b: &mut Branch, kind: ModelErrorKind) -> String {
    let before = snapshot(b);
    let items: Vec<_> = b.run(RunOptions::new("question")).collect().await;
    let errors: Vec<&OperationError> = items.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(errors.len(), 1, "{items:?}");
    assert!(
        items.last().is_some_and(Result::is_err),
        "the error ends it: {items:?}"
    );
    assert_eq!(model_kind(errors[0]), kind, "{}", errors[0]);
    assert_eq!(snapshot(b), before, "the conversation is unchanged");
    errors[0].to_string()
}

fn calls(n: usize) -> Vec<MockToolCall> {
    (0..n)
        .map(|i| MockToolCall {
            id: format!("call_{i}"),
            name: "count".into(),
            arguments: json!({}),
        })
        .collect()
}

/// 1,000 tool calls in one reply were all run; now the reply is refused
/// before any tool runs, and the conversation is unchanged.
#[tokio::test]
async fn a_tool_call_flood_runs_nothing() {
    let server = MockServer::start().await;
    server.push(MockReply::tool_calls(calls(1000)));
    let mut b = branch(builder(&server).build().unwrap());
    let ran = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&ran);
    let tool = DynamicTool::new(
        "count",
        None,
        json!({"type": "object", "properties": {}}),
        move |_args: Value| {
            let seen = Arc::clone(&seen);
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(json!(1))
            }
        },
    )
    .unwrap()
    .into_tool();
    b.acts_mut().register(tool, false).unwrap();
    let before = snapshot(&b);
    let e = b
        .operate(OperateOptions::new("go").actions(true).native_tools(true))
        .await
        .expect_err("refused");
    assert_eq!(model_kind(&e), ModelErrorKind::ReplyLimit, "{e}");
    assert!(e.to_string().contains("max_tool_calls"), "{e}");
    assert_eq!(ran.load(Ordering::SeqCst), 0, "no tool ran");
    assert_eq!(snapshot(&b), before);
}

#[tokio::test]
async fn oversized_replies_leave_the_conversation_unchanged() {
    let server = MockServer::start().await;
    server.script([
        MockReply::text(&"x".repeat(5000)),
        MockReply::text(&"x".repeat(5000)),
    ]);
    let mut b = branch(builder(&server).max_reply_bytes(2000).build().unwrap());
    let msg = communicate_refused(&mut b, ModelErrorKind::ReplyLimit).await;
    assert!(msg.contains("larger than 2000 bytes"), "{msg}");
    let msg = run_refused(&mut b, ModelErrorKind::ReplyLimit).await;
    assert!(msg.contains("larger than 2000 bytes"), "{msg}");
}

/// An empty reply was recorded as a successful, empty turn.
#[tokio::test]
async fn empty_replies_leave_the_conversation_unchanged() {
    let server = MockServer::start().await;
    server.script([MockReply::raw(200, ""), MockReply::text("")]);
    let mut b = branch(builder(&server).build().unwrap());
    communicate_refused(&mut b, ModelErrorKind::MalformedResponse).await;
    let msg = run_refused(&mut b, ModelErrorKind::MalformedResponse).await;
    assert!(msg.contains("no text and no tool calls"), "{msg}");
}

/// A non-JSON event was recorded as reply text.
#[tokio::test]
async fn non_json_events_leave_the_conversation_unchanged() {
    let server = MockServer::start().await;
    server.push(MockReply::raw(
        200,
        "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: Internal Server Error\n\ndata: [DONE]\n\n",
    ));
    let mut b = branch(builder(&server).build().unwrap());
    let msg = run_refused(&mut b, ModelErrorKind::MalformedResponse).await;
    assert!(msg.contains("not JSON"), "{msg}");
}

/// A reply that never completes ends at the call's deadline, streamed or
/// not.
#[tokio::test]
async fn the_deadline_ends_a_turn_and_records_nothing() {
    let server = MockServer::start().await;
    server.script([
        MockReply::text("late").delayed(Duration::from_secs(30)),
        MockReply::text("late").delayed(Duration::from_secs(30)),
    ]);
    let model = builder(&server)
        .call_deadline(Duration::from_millis(300))
        .build()
        .unwrap();
    let mut b = branch(model);
    let msg = communicate_refused(&mut b, ModelErrorKind::Timeout).await;
    assert!(msg.contains("overall deadline"), "{msg}");
    let msg = run_refused(&mut b, ModelErrorKind::Timeout).await;
    assert!(msg.contains("overall deadline"), "{msg}");
}
