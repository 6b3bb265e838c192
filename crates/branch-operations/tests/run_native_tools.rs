//! `RunOptions::native_tools`: `run` offers the branch's tools through the
//! provider's own function calling, streams the reply, runs the calls it
//! makes and records each under the provider's id, so the next request
//! answers it there. What it cannot do (a CLI agent, an unknown tool) is
//! refused before anything is sent or recorded.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use branch_actions::DynamicTool;
use branch_core::{Branch, Message, MessageContent};
use branch_models::mock::{MockReply, MockServer, MockToolCall};
use branch_operations::{
    BranchOperations, OperateMiddle, OperateOptions, OperationError, RunOptions,
};
use futures_util::StreamExt;
use serde_json::{Value, json};

fn branch(server: &MockServer) -> Branch {
    Branch::builder()
        .system("S")
        .chat_model(common::model(server, "gpt-4.1-mini"))
        .tools([common::multiply(), common::lookup_capital()])
        .build()
        .unwrap()
}

/// Runs `opts` to its end: the messages yielded, then the error if any.
async fn run_all(b: &mut Branch, opts: RunOptions) -> (Vec<Message>, Option<OperationError>) {
    let mut messages = Vec::new();
    let mut error = None;
    let mut s = b.run(opts);
    while let Some(item) = s.next().await {
        match item {
            Ok(m) => messages.push(m),
            Err(e) => error = Some(e),
        }
    }
    (messages, error)
}

fn kinds(messages: &[Message]) -> Vec<&'static str> {
    messages.iter().map(|m| m.kind().class_name()).collect()
}

fn multiply_call(id: &str) -> MockToolCall {
    MockToolCall {
        id: id.into(),
        name: "multiply".into(),
        arguments: json!({"a": 6, "b": 7}),
    }
}

const MULTIPLY: &str = "Multiply two integers and return the product.";

fn multiply_tool() -> Value {
    json!({"type": "function", "function": {"name": "multiply", "description": MULTIPLY,
        "parameters": {"type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"]}, "strict": null}})
}

#[tokio::test]
async fn run_offers_the_tools_natively_and_answers_each_call_under_its_id() {
    let server = MockServer::start().await;
    server.script([
        MockReply::text_and_tool_calls("Let me multiply.", vec![multiply_call("call_7")]),
        MockReply::text("It is 42."),
    ]);
    let mut b = branch(&server);
    let (first, error) = run_all(
        &mut b,
        RunOptions::new("6*7?")
            .native_tools(true)
            .tools(["multiply"]),
    )
    .await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(
        kinds(&first),
        [
            "Instruction",
            "AssistantResponse",
            "ActionRequest",
            "ActionResponse"
        ]
    );
    assert_eq!(first[1].as_assistant_text(), Some("Let me multiply."));
    assert_eq!(first[2].element.metadata["tool_call_id"], "call_7");
    match &first[3].content {
        MessageContent::ActionResponse(r) => assert_eq!(r.output, Some(json!(42))),
        other => panic!("{other:?}"),
    }
    assert_eq!(b.messages().len(), 5, "system and the four, recorded");

    let (second, error) = run_all(&mut b, RunOptions::new("So?").native_tools(true)).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(kinds(&second), ["Instruction", "AssistantResponse"]);

    let bodies = server.bodies();
    // Only the named tool, in the request's own field; the instruction
    // does not describe it again.
    assert_eq!(
        bodies[0],
        json!({
            "messages": [{"role": "user", "content": "Guidance: S\nInstruction: 6*7?"}],
            "model": "gpt-4.1-mini",
            "stream": true,
            "tools": [multiply_tool()],
        })
    );
    // The call goes back as the reply's own `tool_calls` and is answered
    // under the provider's id; every registered tool is offered.
    let args = r#"{"a":6,"b":7}"#;
    assert_eq!(
        bodies[1]["messages"],
        json!([
            {"role": "user", "content": "Guidance: S\nInstruction: 6*7?"},
            {"role": "assistant", "content": "Let me multiply.", "tool_calls": [
                {"id": "call_7", "type": "function",
                 "function": {"name": "multiply", "arguments": args}}]},
            {"role": "tool", "tool_call_id": "call_7", "content": "42"},
            {"role": "user", "content": "Instruction: So?"},
        ])
    );
    let offered: Vec<&Value> = bodies[1]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["function"]["name"])
        .collect();
    assert_eq!(offered, [&json!("multiply"), &json!("lookup_capital")]);
}

#[tokio::test]
async fn what_run_cannot_offer_is_refused_before_anything_is_sent() {
    let server = MockServer::start().await;
    let mut b = branch(&server);
    let before = b.messages().len();

    let (yielded, error) = run_all(
        &mut b,
        RunOptions::new("6*7?").native_tools(true).tools(["divide"]),
    )
    .await;
    assert!(yielded.is_empty());
    match error {
        Some(OperationError::InvalidArgument {
            what: "tools",
            message,
        }) => {
            assert!(message.contains("divide"), "{message}");
        }
        other => panic!("{other:?}"),
    }

    // A CLI agent has tools of its own: it is never started.
    let dir = common::temp_dir("native-agent");
    let marker = dir.join("started");
    let script = dir.join("agent.sh");
    common::executable(
        &script,
        &format!("#!/bin/sh\ntouch '{}'\ncat > /dev/null\n", marker.display()),
    );
    let (yielded, error) = run_all(
        &mut b,
        RunOptions::new("6*7?")
            .native_tools(true)
            .cli_command(&script),
    )
    .await;
    assert!(yielded.is_empty());
    match error {
        Some(OperationError::InvalidArgument {
            what: "native_tools",
            message,
        }) => assert!(message.contains("CLI agent"), "{message}"),
        other => panic!("{other:?}"),
    }
    assert!(!marker.exists(), "the agent was started");

    assert_eq!(b.messages().len(), before, "nothing recorded");
    assert_eq!(server.request_count(), 0, "nothing sent");
}

/// `operate` through the run-and-collect middle offers the tools natively
/// too: `run` runs the calls once, and `operate` reports them.
#[tokio::test]
async fn operate_collecting_a_run_offers_and_reports_native_calls() {
    let server = MockServer::start().await;
    server.script([
        MockReply::tool_calls(vec![multiply_call("call_3")]),
        MockReply::text("unused"),
    ]);
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let tool = DynamicTool::new(
        "multiply",
        Some(MULTIPLY.into()),
        multiply_tool()["function"]["parameters"].clone(),
        move |args: Value| {
            let counted = Arc::clone(&counted);
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(json!(
                    args["a"].as_i64().unwrap() * args["b"].as_i64().unwrap()
                ))
            }
        },
    )
    .unwrap()
    .into_tool();
    let mut b = Branch::builder()
        .system("S")
        .chat_model(common::model(&server, "gpt-4.1-mini"))
        .tools([tool])
        .build()
        .unwrap();
    let done = b
        .operate(
            OperateOptions::new("6*7?")
                .actions(true)
                .native_tools(true)
                .middle(OperateMiddle::RunAndCollect),
        )
        .await
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "run once, by run");
    assert_eq!(done.action_responses.len(), 1);
    assert_eq!(done.action_responses[0].function, "multiply");
    assert_eq!(done.action_responses[0].output, Some(json!(42)));
    let bodies = server.bodies();
    assert_eq!(bodies.len(), 1);
    assert_eq!(bodies[0]["tools"], json!([multiply_tool()]));
    assert_eq!(bodies[0]["stream"], true);
    let recorded: Vec<&str> = b.messages().iter().map(|m| m.kind().class_name()).collect();
    assert_eq!(
        recorded,
        [
            "System",
            "Instruction",
            "AssistantResponse",
            "ActionRequest",
            "ActionResponse"
        ]
    );
}

/// A call the provider gave no id is recorded without one (none is made
/// up in the branch), and the next request still pairs it with its result,
/// under the request message's own id.
#[tokio::test]
async fn a_call_without_a_provider_id_is_paired_under_the_message_id() {
    let server = MockServer::start().await;
    server.script([
        MockReply::tool_calls(vec![multiply_call("")]),
        MockReply::text("It is 42."),
    ]);
    let mut b = branch(&server);
    let (first, error) = run_all(&mut b, RunOptions::new("6*7?").native_tools(true)).await;
    assert!(error.is_none(), "{error:?}");
    let request = &first[2];
    assert_eq!(request.kind().class_name(), "ActionRequest");
    assert!(request.element.metadata.get("tool_call_id").is_none());
    let (_, error) = run_all(&mut b, RunOptions::new("So?").native_tools(true)).await;
    assert!(error.is_none(), "{error:?}");
    let messages = server.bodies()[1]["messages"].clone();
    let id = request.id().to_string();
    assert_eq!(messages[1]["tool_calls"][0]["id"], id.as_str());
    assert_eq!(messages[2]["role"], "tool");
    assert_eq!(messages[2]["tool_call_id"], id.as_str());
}

/// One SSE body of OpenAI Responses events.
fn responses_sse(events: &[Value]) -> String {
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect()
}

/// Through OpenAI Responses, streamed: the reasoning item the call came
/// with (its encrypted content) and the call go back on the next run
/// before the call's output, under the provider's call id.
#[tokio::test]
async fn a_streamed_responses_call_goes_back_with_its_reasoning() {
    let server = MockServer::start().await;
    let reasoning = json!({"type": "reasoning", "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Multiply."}], "encrypted_content": "gAAAA-enc"});
    let call = json!({"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "multiply",
        "arguments": "{\"a\":6,\"b\":7}", "status": "completed"});
    let head = |n: u64| {
        json!({"type": "response.created", "sequence_number": n, "response": {"id": "resp_1",
            "object": "response", "status": "in_progress", "model": "gpt-5", "output": [], "usage": null}})
    };
    let first = responses_sse(&[
        head(0),
        json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
            "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
        json!({"type": "response.reasoning_summary_text.delta", "sequence_number": 2, "item_id": "rs_1",
            "output_index": 0, "summary_index": 0, "delta": "Multiply."}),
        json!({"type": "response.output_item.done", "sequence_number": 3, "output_index": 0,
            "item": reasoning}),
        json!({"type": "response.output_item.added", "sequence_number": 4, "output_index": 1,
            "item": {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "multiply",
                "arguments": "", "status": "in_progress"}}),
        json!({"type": "response.function_call_arguments.delta", "sequence_number": 5,
            "item_id": "fc_1", "output_index": 1, "delta": "{\"a\":6,\"b\":7}"}),
        json!({"type": "response.output_item.done", "sequence_number": 6, "output_index": 1,
            "item": call}),
        json!({"type": "response.completed", "sequence_number": 7, "response": {"id": "resp_1",
            "object": "response", "status": "completed", "model": "gpt-5",
            "output": [reasoning, call], "usage": {"input_tokens": 30, "output_tokens": 12,
            "total_tokens": 42}}}),
    ]);
    let message = json!({"type": "message", "id": "msg_2", "role": "assistant",
        "status": "completed", "content": [{"type": "output_text", "text": "It is 42."}]});
    let second = responses_sse(&[
        head(0),
        json!({"type": "response.output_text.delta", "sequence_number": 1, "item_id": "msg_2",
            "output_index": 0, "content_index": 0, "delta": "It is 42."}),
        json!({"type": "response.completed", "sequence_number": 2, "response": {"id": "resp_2",
            "object": "response", "status": "completed", "model": "gpt-5", "output": [message],
            "usage": {"input_tokens": 60, "output_tokens": 4, "total_tokens": 64}}}),
    ]);
    for body in [first, second] {
        server.push(MockReply::raw(200, &body).header("content-type", "text/event-stream"));
    }
    let mut b = Branch::builder()
        .system("S")
        .chat_model(common::responses_model(&server, "gpt-5"))
        .tools([common::multiply()])
        .build()
        .unwrap();
    let (first, error) = run_all(&mut b, RunOptions::new("6*7?").native_tools(true)).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(first[2].element.metadata["tool_call_id"], "call_9");
    let (second, error) = run_all(&mut b, RunOptions::new("So?").native_tools(true)).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(second[1].as_assistant_text(), Some("It is 42."));

    let bodies = server.bodies();
    assert!(server.requests().iter().all(|r| r.path == "/v1/responses"));
    assert_eq!(bodies[0]["stream"], true);
    assert_eq!(bodies[0]["tools"][0]["name"], "multiply");
    let input = bodies[1]["input"].as_array().unwrap();
    let at = input
        .iter()
        .position(|i| i["type"] == "reasoning")
        .expect("the reasoning item goes back");
    assert_eq!(input[at]["encrypted_content"], "gAAAA-enc");
    assert_eq!(input[at + 1]["type"], "function_call");
    assert_eq!(input[at + 1]["call_id"], "call_9");
    assert_eq!(
        input[at + 2],
        json!({"type": "function_call_output", "call_id": "call_9", "output": "42"})
    );
}

/// A tool that answers only once `gate` is opened.
fn gated_multiply(gate: Arc<tokio::sync::Notify>) -> Arc<dyn branch_core::Tool> {
    DynamicTool::new(
        "multiply",
        Some(MULTIPLY.into()),
        multiply_tool()["function"]["parameters"].clone(),
        move |args: Value| {
            let gate = Arc::clone(&gate);
            async move {
                gate.notified().await;
                Ok::<_, String>(json!(
                    args["a"].as_i64().unwrap_or(0) * args["b"].as_i64().unwrap_or(0)
                ))
            }
        },
    )
    .unwrap()
    .into_tool()
}

/// The reply is yielded as soon as it is in, before the tools it calls
/// have run; and the run's deadline covers those tools: past it they are
/// cancelled and nothing of the turn is recorded.
#[tokio::test]
async fn the_reply_is_yielded_before_its_tools_run_and_the_deadline_covers_them() {
    use std::time::Duration;
    let server = MockServer::start().await;
    server.script([
        MockReply::text_and_tool_calls("Multiplying.", vec![multiply_call("call_1")]),
        MockReply::tool_calls(vec![multiply_call("call_2")]),
    ]);
    let gate = Arc::new(tokio::sync::Notify::new());
    let mut b = Branch::builder()
        .system("S")
        .chat_model(common::model(&server, "gpt-4.1-mini"))
        .tools([gated_multiply(Arc::clone(&gate))])
        .build()
        .unwrap();
    {
        let mut s = b.run(RunOptions::new("6*7?").native_tools(true));
        let mut next = async || {
            tokio::time::timeout(Duration::from_secs(10), s.next())
                .await
                .expect("a message within 10 s")
                .expect("a message")
                .expect("no error")
        };
        assert_eq!(next().await.kind().class_name(), "Instruction");
        // The tool is still waiting on the gate.
        assert_eq!(next().await.as_assistant_text(), Some("Multiplying."));
        gate.notify_one();
        assert_eq!(next().await.kind().class_name(), "ActionRequest");
        assert_eq!(next().await.kind().class_name(), "ActionResponse");
    }
    assert_eq!(b.messages().len(), 5);

    // The gate never opens: the deadline ends the run within its time.
    let (yielded, error) = run_all(
        &mut b,
        RunOptions::new("Again?")
            .native_tools(true)
            .timeout(Duration::from_millis(300)),
    )
    .await;
    assert_eq!(kinds(&yielded), ["Instruction", "AssistantResponse"]);
    match error {
        Some(OperationError::Run { message, .. }) => {
            assert!(message.contains("deadline"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(b.messages().len(), 5, "nothing of the turn recorded");
}
