//! Tool-call arguments a model sends that are not a JSON object (not JSON,
//! truncated JSON, another JSON type) are never replaced by `{}` and run:
//! the call is recorded as failed with the parse error, and that failure
//! is what the model sees on the next request.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use branch_actions::DynamicTool;
use branch_core::Branch;
use branch_core::message::MessageContent;
use branch_models::mock::{MockReply, MockServer, MockToolCall};
use branch_operations::{
    ActOptions, BranchOperations, OperateOptions, RunOptions, tool_call_from_value,
};
use futures_util::StreamExt;
use serde_json::{Value, json};

fn branch(server: &MockServer) -> (Branch, Arc<AtomicUsize>) {
    let mut b = Branch::builder()
        .system("S")
        .chat_model(common::model(server, "gpt-4.1-mini"))
        .build()
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let seen = runs.clone();
    let tool = DynamicTool::new(
        "add",
        Some("Adds.".into()),
        json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}),
        move |args: Value| {
            let seen = seen.clone();
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(json!(
                    args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)
                ))
            }
        },
    )
    .unwrap()
    .into_tool();
    b.acts_mut().register(tool, false).unwrap();
    (b, runs)
}

fn call(id: &str, arguments: &str) -> MockToolCall {
    MockToolCall {
        id: id.into(),
        name: "add".into(),
        arguments: Value::String(arguments.into()),
    }
}

/// The `error` of each recorded ActionResponse, in order (`None` for a
/// success).
fn response_errors(b: &Branch) -> Vec<Option<String>> {
    b.progression()
        .iter()
        .filter_map(|id| b.messages().get(id))
        .filter_map(|m| match &m.content {
            MessageContent::ActionResponse(r) => Some(
                r.output
                    .as_ref()
                    .and_then(|o| o.get("error"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            ),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn native_calls_with_unreadable_arguments_fail_and_are_reported_to_the_model() {
    let server = MockServer::start().await;
    server.script([
        MockReply::tool_calls(vec![
            call("c1", r#"{"a": 2, "b""#),
            call("c2", "a=2, b=3"),
            call("c3", "[2, 3]"),
            call("c4", r#"{"a": 2, "b": 3}"#),
        ]),
        MockReply::text("done"),
    ]);
    let (mut b, runs) = branch(&server);
    let r = b
        .operate(OperateOptions::new("2+3?").actions(true).native_tools(true))
        .await
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1, "only the readable call ran");
    assert_eq!(r.action_responses.len(), 4);
    assert_eq!(r.action_responses[3].output, Some(json!(5)));
    let errors = response_errors(&b);
    assert_eq!(errors.len(), 4);
    let e1 = errors[0].as_deref().unwrap();
    assert!(e1.contains("was not run"), "{e1}");
    assert!(e1.contains("not valid JSON"), "{e1}");
    assert!(e1.contains("EOF while parsing"), "{e1}");
    assert!(errors[1].as_deref().unwrap().contains("not valid JSON"));
    assert!(errors[2].as_deref().unwrap().contains("not an array"));
    assert_eq!(errors[3], None);
    // The failed calls are recorded with no invented arguments.
    for resp in &r.action_responses[..3] {
        assert!(resp.arguments.is_empty());
    }
    // The next request answers each call under its id, the failure text
    // included.
    b.operate(OperateOptions::new("So?").actions(true).native_tools(true))
        .await
        .unwrap();
    let second = &server.bodies()[1];
    let tool_messages: Vec<&Value> = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(tool_messages.len(), 4);
    assert_eq!(tool_messages[0]["tool_call_id"], "c1");
    let content = tool_messages[0]["content"].to_string();
    assert!(content.contains("EOF while parsing"), "{content}");
}

#[tokio::test]
async fn a_streamed_run_does_not_run_a_call_with_truncated_arguments() {
    let server = MockServer::start().await;
    server.push(MockReply::tool_calls(vec![call(
        "c1",
        r#"{"a": 1, "b": 2"#,
    )]));
    let (mut b, runs) = branch(&server);
    let items: Vec<_> = b.run(RunOptions::new("1+2?")).collect().await;
    assert!(items.iter().all(Result::is_ok), "{items:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let errors = response_errors(&b);
    assert_eq!(errors.len(), 1);
    let e = errors[0].as_deref().unwrap();
    assert!(e.contains("not valid JSON"), "{e}");
}

#[tokio::test]
async fn act_on_a_request_with_unreadable_text_arguments_records_a_failed_call() {
    let server = MockServer::start().await;
    let (mut b, runs) = branch(&server);
    let calls = [
        json!({"function": "add", "arguments": "{\"a\": 1, \"b\": "}),
        json!({"function": "add", "arguments": "{\"a\": 1, \"b\": 1}"}),
    ]
    .iter()
    .map(|v| tool_call_from_value(v).unwrap())
    .collect();
    let out = b
        .act(calls, ActOptions::default().suppress_errors(true))
        .await
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let refused = out[0].output.as_ref().unwrap()["error"].as_str().unwrap();
    assert!(refused.contains("not valid JSON"), "{refused}");
    assert_eq!(out[1].output, Some(json!(2)));
    // Without suppression the failure is the verb's error, and nothing was
    // run with invented arguments.
    let call = tool_call_from_value(&json!({"function": "add", "arguments": "nope"})).unwrap();
    let err = b
        .act(vec![call], ActOptions::default().suppress_errors(false))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not valid JSON"), "{err}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(server.request_count(), 0);
}
