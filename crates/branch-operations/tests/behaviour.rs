//! How turns end: cancellation, provider and tool failures, parse repair,
//! the extension limit, the CLI stream, native tool calls.

mod common;
#[path = "../../../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use branch_actions::{DynamicTool, ToolCall};
use branch_core::Branch;
use branch_core::message::MessageContent;
use branch_models::mock::{MockReply, MockServer, MockToolCall};
use branch_operations::{
    ActOptions, AnswerOptions, BranchOperations, CommunicateOptions, OnParseFailure,
    OperateOptions, Parsed, ReActOptions, RunOptions,
};
use futures_util::StreamExt;
use serde_json::{Map, Value, json};

use common::model;

fn branch(server: &MockServer) -> Branch {
    Branch::builder()
        .system("S")
        .chat_model(model(server, "gpt-4.1-mini"))
        .build()
        .unwrap()
}

fn counter(b: &mut Branch) -> Arc<AtomicUsize> {
    let n = Arc::new(AtomicUsize::new(0));
    let c = n.clone();
    b.msgs_mut().on_message_added(
        "count",
        Arc::new(move |_| {
            c.fetch_add(1, Ordering::SeqCst);
        }),
    );
    n
}

fn tool(name: &str, f: fn(Value) -> Value) -> Arc<dyn branch_core::Tool> {
    DynamicTool::new(
        name,
        None,
        json!({"type": "object", "properties": {}}),
        move |args: Value| async move { Ok::<_, String>(f(args)) },
    )
    .unwrap()
    .into_tool()
}

#[tokio::test]
async fn dropping_a_turn_mid_call_leaves_history_untouched() {
    let server = MockServer::start().await;
    server.push(MockReply::text("late").delayed(Duration::from_secs(30)));
    let mut b = branch(&server);
    let before = b.to_dict(&Default::default()).unwrap()["messages"].clone();
    let added = counter(&mut b);
    {
        let fut = b.communicate(CommunicateOptions::new("hello"));
        tokio::pin!(fut);
        // Drive the turn until the provider has the request, then drop it.
        loop {
            tokio::select! {
                _ = &mut fut => panic!("the delayed reply cannot have arrived"),
                _ = tokio::time::sleep(Duration::from_millis(5)) => {}
            }
            if server.request_count() == 1 {
                break;
            }
        }
    }
    assert_eq!(b.to_dict(&Default::default()).unwrap()["messages"], before);
    assert_eq!(added.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn every_appended_message_reaches_on_message_added() {
    let server = MockServer::start().await;
    server.push(MockReply::json(
        json!({"action_requests": [{"function": "echo", "arguments": {"x": 1}}]}),
    ));
    let mut b = branch(&server);
    b.acts_mut().register(tool("echo", |a| a), false).unwrap();
    let added = counter(&mut b);
    let r = b
        .operate(OperateOptions::new("go").actions(true))
        .await
        .unwrap();
    assert_eq!(r.action_responses.len(), 1);
    assert_eq!(r.action_responses[0].output, Some(json!({"x": 1})));
    assert_eq!(b.messages().len(), 5);
    assert_eq!(added.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn tool_timeout_panic_invalid_arguments_and_unknown_tool_become_error_responses() {
    let server = MockServer::start().await;
    let mut b = branch(&server);
    let slow = DynamicTool::new("slow", None, json!({"type": "object"}), |_v: Value| async {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok::<_, String>(json!("never"))
    })
    .unwrap()
    .into_tool();
    let boom = DynamicTool::new("boom", None, json!({"type": "object"}), |_v: Value| async {
        if true {
            panic!("tool exploded");
        }
        Ok::<_, String>(Value::Null)
    })
    .unwrap()
    .into_tool();
    b.acts_mut().register(slow, false).unwrap();
    b.acts_mut().register(boom, false).unwrap();
    b.acts_mut().register(common::multiply(), false).unwrap();
    let mut bad = Map::new();
    bad.insert("a".into(), json!("x"));
    let calls = vec![
        ToolCall::new("slow", Map::new()),
        ToolCall::new("boom", Map::new()),
        ToolCall::new("multiply", bad),
        ToolCall::new("nope", Map::new()),
    ];
    let res = b
        .act(
            calls,
            ActOptions::default().timeout(Duration::from_millis(20)),
        )
        .await
        .unwrap();
    assert_eq!(res[0].output, None, "timed out");
    assert_eq!(res[1].output, None, "panicked");
    let invalid = res[2].output.as_ref().unwrap();
    assert!(
        invalid["message"].as_str().unwrap().contains("multiply"),
        "{invalid}"
    );
    assert_eq!(
        res[3].output.as_ref().unwrap()["error"],
        "Function nope is not registered."
    );
    // Every call is recorded as a request/response pair with the error.
    assert_eq!(b.messages().len(), 1 + 8);
    let outputs: Vec<Value> = b
        .messages()
        .iter()
        .filter_map(|m| match &m.content {
            MessageContent::ActionResponse(r) => r.output.clone(),
            _ => None,
        })
        .collect();
    assert!(
        outputs[1]["error"]
            .as_str()
            .unwrap()
            .contains("tool exploded")
    );
    assert_eq!(b.logs().len(), 4);
    // Without suppression the error surfaces and says what was recorded.
    let err = b
        .act(
            vec![ToolCall::new("nope", Map::new())],
            ActOptions::default().suppress_errors(false),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("nothing was recorded"), "{err}");
    assert_eq!(b.messages().len(), 9);
    // A tool that ran and failed is recorded before the error surfaces; a
    // call refused before running is not.
    let err = b
        .act(
            vec![
                ToolCall::new("boom", Map::new()),
                ToolCall::new("nope", Map::new()),
            ],
            ActOptions::default().suppress_errors(false),
        )
        .await
        .unwrap_err();
    assert_eq!(err.committed().messages, 2, "{err}");
    assert_eq!(b.messages().len(), 11);
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema, PartialEq)]
struct Verdict {
    /// The verdict.
    verdict: String,
    /// Confidence between 0 and 1.
    score: f64,
}

#[tokio::test]
async fn malformed_structured_output_is_repaired_by_the_parse_model() {
    let server = MockServer::start().await;
    server.script([
        MockReply::text("I think it is fine, maybe 0.8"),
        MockReply::text("```json\n{\"verdict\": \"fine\", \"score\": \"0.8\"}\n```"),
    ]);
    let mut b = Branch::builder()
        .system("Judge.")
        .chat_model(model(&server, "gpt-4.1-mini"))
        .parse_model(model(&server, "gpt-4.1-nano"))
        .build()
        .unwrap();
    let r = b
        .communicate_as::<Verdict>(
            CommunicateOptions::new("Judge it").repair_backoff(Duration::ZERO, 1.0),
        )
        .await
        .unwrap();
    assert_eq!(
        r,
        Parsed::Value(Verdict {
            verdict: "fine".into(),
            score: 0.8
        })
    );
    let bodies = server.bodies();
    assert_eq!(bodies.len(), 2);
    assert_eq!(bodies[1]["model"], "gpt-4.1-nano");
    let last = bodies[1]["messages"].as_array().unwrap().last().unwrap();
    assert!(last["content"].as_str().unwrap().contains("text_to_format"));
    // The turn is recorded once, with both raw replies.
    assert_eq!(b.messages().len(), 3);
    let reply = &b.messages().iter().last().unwrap().element.metadata;
    assert!(reply.contains_key("original_model_response"));
}

#[tokio::test]
async fn unrepairable_output_follows_the_failure_policy() {
    let server = MockServer::start().await;
    server.script((0..5).map(|_| MockReply::text("no json here")));
    let mut b = branch(&server);
    let err = b
        .communicate_as::<Verdict>(
            CommunicateOptions::new("Judge it")
                .num_parse_retries(1)
                .repair_backoff(Duration::ZERO, 1.0),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("Failed to parse model response into Verdict"),
        "{err}"
    );
    assert_eq!(err.committed().messages, 2);
    assert_eq!(server.request_count(), 3, "1 call + 2 repairs");
    let r = b
        .communicate_as::<Verdict>(
            CommunicateOptions::new("again")
                .num_parse_retries(0)
                .on_parse_failure(OnParseFailure::ReturnValue)
                .repair_backoff(Duration::ZERO, 1.0),
        )
        .await
        .unwrap();
    assert!(matches!(r, Parsed::Unparsed(u) if u.text == "no json here"));
}

#[tokio::test]
async fn react_stops_at_the_extension_limit() {
    assert_eq!(
        ReActOptions::new("x").max_extensions(500).max_extensions,
        100
    );
    let server = MockServer::start().await;
    let always = json!({"analysis": "more", "extension_needed": true});
    server.script([
        MockReply::json(always.clone()),
        MockReply::json(always.clone()),
        MockReply::json(always),
        MockReply::json(json!({"answer": "done"})),
    ]);
    let mut b = branch(&server);
    let r = b
        .ReAct(ReActOptions::new("task").max_extensions(2))
        .await
        .unwrap();
    assert_eq!(r.answer, json!("done"));
    assert_eq!(r.rounds.len(), 4);
    let heads: Vec<String> = server
        .bodies()
        .iter()
        .map(|b| {
            b["messages"].as_array().unwrap().last().unwrap()["content"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(heads[1].starts_with("Instruction: This is a multi-step task"));
    assert!(heads[2].starts_with("Instruction: Keep going — about 1 rounds"));
    assert!(heads[3].contains("Given your reasoning and actions"));
    // Streamed, the same rounds arrive one by one.
    server.script([
        MockReply::json(json!({"analysis": "a", "extension_needed": false})),
        MockReply::json(json!({"answer": "x"})),
    ]);
    let rounds: Vec<_> = b.ReActStream(ReActOptions::new("t2")).collect().await;
    assert_eq!(rounds.len(), 2);
    assert!(rounds[1].as_ref().unwrap().is_final);
}

#[tokio::test]
async fn native_function_calling_runs_provider_tool_calls() {
    let server = MockServer::start().await;
    server.push(MockReply::tool_calls(vec![MockToolCall {
        id: "call_1".into(),
        name: "multiply".into(),
        arguments: json!({"a": 6, "b": 7}),
    }]));
    let mut b = branch(&server);
    b.acts_mut().register(common::multiply(), false).unwrap();
    let r = b
        .operate(OperateOptions::new("6*7?").actions(true).native_tools(true))
        .await
        .unwrap();
    assert_eq!(r.action_responses[0].output, Some(json!(42)));
    let body = &server.bodies()[0];
    assert_eq!(body["tools"][0]["function"]["name"], "multiply");
    assert!(
        !body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("Tools:")
    );
    assert_eq!(b.messages().len(), 5);
}

#[tokio::test]
async fn a_configuration_only_model_is_upgraded_on_first_use() {
    let server = MockServer::start().await;
    server.push(MockReply::text("hi"));
    let mut b = Branch::builder()
        .chat_model(Arc::new(common::config(&server, "gpt-4.1-mini"))
            as Arc<dyn branch_core::model::ChatModel>)
        .build()
        .unwrap();
    assert!(!b.chat_model().is_connected());
    // Connecting builds an IModel from the configuration; a custom base
    // URL never receives the environment key, so the upgrade fails with a
    // typed error before anything is sent or recorded.
    let err = b
        .communicate(CommunicateOptions::new("hello"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("API key"), "{err}");
    assert_eq!(server.request_count(), 0);
    assert_eq!(b.messages().len(), 0);
    assert!(branch_core::branch::same_model(
        b.chat_model(),
        b.parse_model()
    ));
}

/// `run` asks for a typed format as chat does: its schema titled
/// `<Title>Request` in the prompt the agent reads on stdin.
#[cfg(unix)]
#[tokio::test]
async fn run_titles_its_format_as_a_request() {
    let dir = common::temp_dir("run-format");
    let script = dir.join("fake-claude.sh");
    let prompt = dir.join("prompt.txt");
    common::executable(
        &script,
        &format!(
            r#"#!/bin/sh
cat > '{}'
echo '{{"type":"assistant","message":{{"content":[{{"type":"text","text":"ok"}}]}}}}'
echo '{{"type":"result","subtype":"success","result":"ok"}}'
"#,
            prompt.display()
        ),
    );
    let server = MockServer::start().await;
    let mut b = branch(&server);
    let answer = branch_operations::ResponseFormat::Schema(json!({
        "properties": {"answer": {"title": "Answer", "type": "string"}},
        "required": ["answer"], "title": "Answer", "type": "object"}));
    let msgs: Vec<_> = b
        .run(
            RunOptions::new("2+2?")
                .cli_command(&script)
                .response_format(answer),
        )
        .collect()
        .await;
    assert!(msgs.iter().all(Result::is_ok));
    let sent = std::fs::read_to_string(&prompt).unwrap();
    assert!(sent.contains("title: AnswerRequest"), "{sent}");
}

#[cfg(unix)]
#[tokio::test]
async fn run_drives_a_cli_agent_speaking_stream_json() {
    let dir = common::temp_dir("run");
    let script = dir.join("fake-claude.sh");
    common::executable(
        &script,
        r#"#!/bin/sh
cat > /dev/null
echo '{"type":"system","subtype":"init","session_id":"6f1c2e1a-3b4d-4e5f-8a9b-0c1d2e3f4a5b"}'
echo '{"type":"assistant","message":{"content":[{"type":"text","text":"Let me check."},{"type":"tool_use","id":"tu1","name":"Read","input":{"path":"a.txt"}}]}}'
echo '{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"tu1","content":"file body"}]}}'
echo '{"type":"assistant","message":{"content":[{"type":"text","text":"Hel"}]}}'
echo '{"type":"assistant","message":{"content":[{"type":"text","text":"lo!"}]}}'
echo '{"type":"result","subtype":"success","result":"Hello!","total_cost_usd":0.01,"num_turns":2}'
"#,
    );
    let server = MockServer::start().await;
    let mut b = branch(&server);
    let added = counter(&mut b);
    let msgs: Vec<_> = b
        .run(RunOptions::new("say hello").cli_command(&script))
        .collect()
        .await;
    let msgs: Vec<_> = msgs.into_iter().map(Result::unwrap).collect();
    let kinds: Vec<&str> = msgs.iter().map(|m| m.kind().class_name()).collect();
    assert_eq!(
        kinds,
        [
            "Instruction",
            "AssistantResponse",
            "ActionRequest",
            "ActionResponse",
            "AssistantResponse"
        ]
    );
    assert_eq!(msgs[4].as_assistant_text(), Some("Hello!"));
    assert_eq!(b.messages().len(), 6);
    assert_eq!(added.load(Ordering::SeqCst), 5);
    assert_eq!(
        b.metadata()["cli_session_id"],
        "6f1c2e1a-3b4d-4e5f-8a9b-0c1d2e3f4a5b"
    );
    assert_eq!(server.request_count(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn clear_messages_takes_effect_only_when_the_turn_succeeds() {
    let server = MockServer::start().await;
    server.script([
        MockReply::text("one"),
        MockReply::error(400, "refused"),
        MockReply::text("fresh"),
    ]);
    let mut b = branch(&server);
    b.communicate(CommunicateOptions::new("first"))
        .await
        .unwrap();
    assert_eq!(b.messages().len(), 3);
    let err = b
        .communicate(CommunicateOptions::new("second").clear_messages(true))
        .await;
    assert!(err.is_err());
    assert_eq!(b.messages().len(), 3, "a failed turn clears nothing");
    b.communicate(CommunicateOptions::new("third").clear_messages(true))
        .await
        .unwrap();
    assert_eq!(b.messages().len(), 3, "system + the new turn");
    let last = server.bodies().pop().unwrap();
    assert_eq!(last["messages"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn native_history_answers_every_tool_call_under_its_provider_id() {
    let server = MockServer::start().await;
    server.script([
        MockReply::tool_calls(vec![MockToolCall {
            id: "call_9".into(),
            name: "multiply".into(),
            arguments: json!({"a": 2, "b": 3}),
        }]),
        MockReply::text("It is 6."),
    ]);
    let mut b = branch(&server);
    b.acts_mut().register(common::multiply(), false).unwrap();
    b.operate(OperateOptions::new("2*3?").actions(true).native_tools(true))
        .await
        .unwrap();
    b.operate(OperateOptions::new("So?").actions(true).native_tools(true))
        .await
        .unwrap();
    let second = &server.bodies()[1];
    let msgs = second["messages"].as_array().unwrap();
    let call = msgs
        .iter()
        .position(|m| m.get("tool_calls").is_some())
        .expect("the recorded call is sent natively");
    assert_eq!(msgs[call]["tool_calls"][0]["id"], "call_9");
    assert_eq!(msgs[call + 1]["role"], "tool");
    assert_eq!(msgs[call + 1]["tool_call_id"], "call_9");
}

#[cfg(unix)]
#[tokio::test]
async fn a_silent_cli_agent_hits_the_idle_window_and_records_nothing() {
    let dir = common::temp_dir("idle");
    let script = dir.join("silent.sh");
    common::executable(&script, "#!/bin/sh\ncat > /dev/null\nexec sleep 60\n");
    let server = MockServer::start().await;
    let mut b = branch(&server);
    let items: Vec<_> = b
        .run(
            RunOptions::new("hello")
                .cli_command(&script)
                .idle_timeout(Duration::from_millis(100)),
        )
        .collect()
        .await;
    assert_eq!(items.len(), 2, "the instruction, then the error");
    let err = items[1].as_ref().unwrap_err();
    assert!(err.to_string().contains("idle window"), "{err}");
    assert_eq!(b.messages().len(), 1, "only the system message");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn between_rounds_text_replaces_the_extension_prompt() {
    let server = MockServer::start().await;
    let more = json!({"analysis": "more", "extension_needed": true});
    server.script([
        MockReply::json(more.clone()),
        MockReply::json(json!({"analysis": "ok", "extension_needed": false})),
        MockReply::json(json!({"answer": "A"})),
    ]);
    let mut b = branch(&server);
    let r = b
        .ReAct(
            ReActOptions::new("task")
                .include_token_usage_to_model(false)
                .between_rounds(|branch, done| {
                    Some(format!(
                        "Status after {done} round(s): {} messages",
                        branch.messages().len()
                    ))
                }),
        )
        .await
        .unwrap();
    assert_eq!(r.answer, json!("A"));
    let second = &server.bodies()[1];
    let last = second["messages"].as_array().unwrap().last().unwrap();
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .starts_with("Instruction: 'Status after 1 round(s): 3 messages'"),
        "{last}"
    );
}

/// An injected round is the callback's text as given: no effort prefix and
/// no effort field, which go to the extension rounds only; an empty text
/// is no text, so the extension prompt goes out in its place.
#[tokio::test]
async fn an_awaiting_callback_injects_a_round_without_the_effort() {
    let server = MockServer::start().await;
    let more = json!({"analysis": "more", "extension_needed": true});
    server.script([
        MockReply::json(more.clone()),
        MockReply::json(more),
        MockReply::json(json!({"analysis": "ok", "extension_needed": false})),
        MockReply::json(json!({"answer": "A"})),
    ]);
    let mut b = branch(&server);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    tx.send("Look again".into()).unwrap();
    tx.send(String::new()).unwrap();
    let r = b
        .ReAct(
            ReActOptions::new("task")
                .max_extensions(3)
                .reasoning_effort("high")
                .include_token_usage_to_model(false)
                .between_rounds_async(move |branch, done| {
                    let rx = rx.clone();
                    Box::pin(async move {
                        let text = rx.lock().await.recv().await?;
                        let seen = branch.messages().len();
                        Some(if text.is_empty() {
                            text
                        } else {
                            format!("{text} ({done}, {seen})")
                        })
                    })
                }),
        )
        .await
        .unwrap();
    assert_eq!(r.answer, json!("A"));
    let bodies = server.bodies();
    let last = |i: usize| -> String {
        let messages = bodies[i]["messages"].as_array().unwrap();
        messages.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(
        last(1).starts_with("Instruction: Look again (1, 3)\n"),
        "{}",
        last(1)
    );
    assert!(bodies[1].get("reasoning_effort").is_none(), "{}", bodies[1]);
    assert!(
        last(2).starts_with(
            "Guidance: |\n  Thorough, try as hard as you can in reasoning.\nInstruction: Keep going"
        ),
        "{}",
        last(2)
    );
    assert_eq!(bodies[2]["reasoning_effort"], json!("high"));
}

/// Every call of a run goes to its analysis model, the interpret rewrite
/// first among them (unless the rewrite names a model of its own).
#[tokio::test]
async fn the_analysis_model_also_interprets() {
    let server = MockServer::start().await;
    server.script([
        MockReply::text("Give the answer."),
        MockReply::json(json!({"analysis": "ok", "extension_needed": false})),
        MockReply::json(json!({"answer": "A"})),
        MockReply::text("Give the answer again."),
        MockReply::json(json!({"analysis": "ok", "extension_needed": false})),
        MockReply::json(json!({"answer": "B"})),
    ]);
    let mut b = branch(&server);
    let run = |interpret: branch_operations::InterpretOptions| {
        ReActOptions::new("gimme answer")
            .include_token_usage_to_model(false)
            .analysis_model(model(&server, "gpt-4.1-nano"))
            .interpret_with(interpret.domain("math"))
    };
    b.ReAct(run(Default::default())).await.unwrap();
    let own = branch_operations::InterpretOptions::default().model(model(&server, "gpt-4o"));
    b.ReAct(run(own)).await.unwrap();
    let models: Vec<Value> = server.bodies().iter().map(|b| b["model"].clone()).collect();
    assert_eq!(
        models,
        [
            "gpt-4.1-nano",
            "gpt-4.1-nano",
            "gpt-4.1-nano",
            "gpt-4o",
            "gpt-4.1-nano",
            "gpt-4.1-nano"
        ]
    );
    let rewrite = server.bodies()[0]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(rewrite.contains("math"), "{rewrite}");
}

const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

/// Image parts in a request body, over all its messages.
fn image_parts(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|p| p["type"] == "image_url")
        .count()
}

/// The task's images go with the first round, and every later request
/// holds them once, in the history.
#[tokio::test]
async fn react_sends_the_tasks_images_once() {
    let server = MockServer::start().await;
    server.script([
        MockReply::json(json!({"analysis": "more", "extension_needed": true})),
        MockReply::json(json!({"analysis": "ok", "extension_needed": false})),
        MockReply::json(json!({"answer": "A"})),
    ]);
    let mut b = branch(&server);
    b.ReAct(
        ReActOptions::new("What is it?")
            .images(vec![PNG.into()])
            .max_extensions(1)
            .include_token_usage_to_model(false),
    )
    .await
    .unwrap();
    let bodies = server.bodies();
    assert_eq!(
        bodies.iter().map(image_parts).collect::<Vec<_>>(),
        [1, 1, 1]
    );
    let last = |i: usize| {
        bodies[i]["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone()
    };
    assert!(last(0)["content"].is_array(), "{}", last(0));
    assert!(last(1)["content"].is_string(), "{}", last(1));
    assert!(last(2)["content"].is_string(), "{}", last(2));
    let with_images: Vec<usize> = b
        .messages()
        .iter()
        .filter_map(|m| m.as_instruction())
        .map(|c| c.images.len())
        .collect();
    assert_eq!(with_images, [1, 0, 0]);
}

/// `operate` leaves the image detail unset, as the reference does, except
/// where there are images: they carry `auto`, as in every other verb.
#[tokio::test]
async fn operate_gives_its_images_a_detail() {
    let server = MockServer::start().await;
    server.script([MockReply::text("a"), MockReply::text("b")]);
    let mut b = branch(&server);
    b.operate(OperateOptions::new("plain")).await.unwrap();
    b.operate(OperateOptions::new("look").images(vec![PNG.into()]))
        .await
        .unwrap();
    let details: Vec<_> = b
        .messages()
        .iter()
        .filter_map(|m| m.as_instruction())
        .map(|c| c.image_detail.map(|d| d.as_str()))
        .collect();
    assert_eq!(details, [None, Some("auto")]);
    assert_eq!(image_parts(&server.bodies()[1]), 1);
}

/// A similarity threshold outside 0..=1 is the program's mistake: refused
/// before any repair is sent (the reference spends every repair on it).
#[tokio::test]
async fn parse_refuses_a_threshold_past_one_before_any_call() {
    let server = MockServer::start().await;
    let mut b = branch(&server);
    let opts = branch_operations::ParseOptions::new(branch_operations::ResponseFormat::Fields(
        serde_json::from_value(json!({"answer": "str"})).unwrap(),
    ))
    .similarity_threshold(1.5);
    let err = b.parse("not json", opts).await.unwrap_err();
    assert!(err.to_string().contains("similarity_threshold"), "{err}");
    assert!(server.bodies().is_empty());
    assert!(b.logs().is_empty());
}

/// Dropping ReAct while its callback waits keeps what the finished rounds
/// wrote and nothing more.
#[tokio::test]
async fn dropping_react_while_the_callback_waits_keeps_the_rounds_done() {
    let server = MockServer::start().await;
    server.script([MockReply::json(
        json!({"analysis": "more", "extension_needed": true}),
    )]);
    let mut b = branch(&server);
    let (entered_tx, entered) = tokio::sync::oneshot::channel::<()>();
    let entered_tx = std::sync::Mutex::new(Some(entered_tx));
    let react = b.ReAct(
        ReActOptions::new("task")
            .max_extensions(2)
            .include_token_usage_to_model(false)
            .between_rounds_async(move |_, _| {
                if let Some(tx) = entered_tx.lock().unwrap().take() {
                    let _ = tx.send(());
                }
                Box::pin(std::future::pending())
            }),
    );
    tokio::select! {
        _ = react => panic!("the callback never returns"),
        _ = entered => {}
    }
    assert_eq!(
        b.messages().len(),
        3,
        "system, the first round's instruction and reply"
    );
    assert_eq!(server.bodies().len(), 1);
}

struct Recorder {
    seen: Arc<std::sync::Mutex<Vec<String>>>,
}

#[async_trait::async_trait]
impl branch_core::ContextProvider for Recorder {
    async fn provide(
        &self,
        _branch: &Branch,
        _instruction: &branch_core::Message,
    ) -> Result<Option<String>, branch_core::ProviderError> {
        Ok(Some("[notes]".into()))
    }

    fn has_writeback(&self) -> bool {
        true
    }

    async fn writeback(
        &self,
        _branch: &Branch,
        responses: &[branch_core::Message],
    ) -> Result<Option<u64>, branch_core::ProviderError> {
        let mut seen = self.seen.lock().unwrap();
        for r in responses {
            if let MessageContent::ActionResponse(c) = &r.content {
                seen.push(format!("{}={:?}", c.function, c.output));
            }
        }
        Ok(Some(responses.len() as u64))
    }
}

#[tokio::test]
async fn context_providers_fold_into_the_system_guidance_and_learn_from_actions() {
    use branch_providers::ProvidersExt;
    let server = MockServer::start().await;
    server.push(MockReply::json(
        json!({"action_requests": [{"function": "multiply", "arguments": {"a": 2, "b": 5}}]}),
    ));
    let mut b = branch(&server);
    b.acts_mut().register(common::multiply(), false).unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    b.providers().register(Recorder { seen: seen.clone() });
    b.operate(OperateOptions::new("2*5?").guidance("G").actions(true))
        .await
        .unwrap();
    let body = &server.bodies()[0];
    let content = body["messages"][0]["content"].as_str().unwrap();
    assert!(content.starts_with("Guidance: S[notes]G\n"), "{content}");
    assert_eq!(
        *seen.lock().unwrap(),
        vec!["multiply=Some(Number(10))".to_owned()]
    );
    // Nothing of the injection is stored.
    let stored =
        serde_json::to_string(&b.to_dict(&Default::default()).unwrap()["messages"]).unwrap();
    assert!(!stored.contains("[notes]"));
}

#[derive(Default)]
struct Collect(std::sync::Mutex<Vec<branch_core::Signal>>);

impl branch_core::Observer for Collect {
    fn observe(&self, signal: branch_core::Signal) {
        self.0.lock().unwrap().push(signal);
    }
}

fn names(c: &Collect) -> Vec<String> {
    c.0.lock()
        .unwrap()
        .iter()
        .map(|s| match s {
            branch_core::Signal::RunStarted { verb, .. } => format!("RunStarted({verb})"),
            branch_core::Signal::RunEnded { verb, .. } => format!("RunEnded({verb})"),
            branch_core::Signal::RunFailed { verb, .. } => format!("RunFailed({verb})"),
            branch_core::Signal::MessageAdded { message, .. } => {
                format!("MessageAdded({})", message.kind().class_name())
            }
            _ => "other".into(),
        })
        .collect()
}

#[tokio::test]
async fn verbs_emit_one_run_signal_pair_around_their_messages() {
    let server = MockServer::start().await;
    server.script([
        MockReply::text("hi"),
        MockReply::error(400, "no"),
        MockReply::json(json!({"analysis": "a", "extension_needed": false})),
        MockReply::json(json!({"answer": "x"})),
    ]);
    let mut b = branch(&server);
    let obs = Arc::new(Collect::default());
    b.set_observer(Some(obs.clone()));
    b.communicate(CommunicateOptions::new("one")).await.unwrap();
    assert_eq!(
        names(&obs),
        [
            "RunStarted(communicate)",
            "MessageAdded(Instruction)",
            "MessageAdded(AssistantResponse)",
            "RunEnded(communicate)"
        ]
    );
    obs.0.lock().unwrap().clear();
    assert!(b.communicate(CommunicateOptions::new("two")).await.is_err());
    assert_eq!(
        names(&obs),
        ["RunStarted(communicate)", "RunFailed(communicate)"]
    );
    obs.0.lock().unwrap().clear();
    b.ReAct(ReActOptions::new("t").include_token_usage_to_model(false))
        .await
        .unwrap();
    let n = names(&obs);
    assert_eq!(n.first().unwrap(), "RunStarted(ReAct)");
    assert_eq!(n.last().unwrap(), "RunEnded(ReAct)");
    assert_eq!(n.iter().filter(|s| s.starts_with("Run")).count(), 2);
    match obs.0.lock().unwrap().last().unwrap() {
        branch_core::Signal::RunEnded { usage, result, .. } => {
            assert_eq!(result, &json!("x"));
            // Summed over every reply of the branch (3 replies x 11).
            assert_eq!(usage.input_tokens, 33);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_failed_react_round_reports_the_rounds_already_recorded() {
    let server = MockServer::start().await;
    server.script([
        MockReply::json(json!({"analysis": "step", "extension_needed": true})),
        MockReply::error(400, "quota"),
    ]);
    let mut b = branch(&server);
    let err = b
        .ReAct(ReActOptions::new("task").include_token_usage_to_model(false))
        .await
        .unwrap_err();
    let c = err.committed();
    assert_eq!((c.messages, c.turns), (2, 1), "{err}");
    assert!(
        err.to_string()
            .contains("2 message(s) of 1 completed turn(s)"),
        "{err}"
    );
    assert_eq!(b.messages().len(), 3);
}

/// Collects the messages of info-level events on this thread.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<String>>>);

struct MessageOf<'a>(&'a mut String);

impl tracing::field::Visit for MessageOf<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0.push_str(&format!("{value:?}"));
        }
    }
}

impl tracing::Subscriber for Captured {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        if *e.metadata().level() == tracing::Level::INFO {
            let mut s = String::new();
            e.record(&mut MessageOf(&mut s));
            self.0.lock().unwrap().push(s);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[tokio::test]
async fn react_options_shape_rounds_and_return_every_analysis() {
    let server = MockServer::start().await;
    server.script([
        MockReply::json(json!({"analysis": "planned", "extension_needed": false,
            "intermediate_response_options": [{"plan": {"steps": ["a"]}}], "mood": "calm"})),
        MockReply::json(json!({"answer": "done"})),
    ]);
    let mut b = branch(&server);
    let plan = branch_operations::ResponseFormat::Schema(json!({
        "properties": {"steps": {"items": {"type": "string"}, "type": "array"}},
        "title": "Plan", "type": "object"}));
    let captured = Captured::default();
    let guard = tracing::subscriber::set_default(captured.clone());
    let r = b
        .ReAct(
            ReActOptions::new("task")
                .include_token_usage_to_model(false)
                .intermediate_response_option(plan)
                .intermediate_listable(true)
                .field_model("mood", json!({"type": "string"}))
                .return_analysis(true)
                .verbose(true, Some(40))
                .display_as(branch_operations::DisplayAs::Yaml),
        )
        .await
        .unwrap();
    drop(guard);
    assert_eq!(r.answer, json!("done"));
    let analyses = r.analyses.expect("return_analysis asks for them");
    assert_eq!(analyses.len(), 2);
    assert_eq!(
        analyses[0]["intermediate_response_options"][0]["plan"]["steps"],
        json!(["a"])
    );
    assert_eq!(analyses[0]["mood"], "calm");
    assert_eq!(analyses[1], json!({"answer": "done"}));
    // The first round's request offers both fields; the answer round does not.
    let bodies = server.bodies();
    let first = bodies[0]["messages"].to_string();
    assert!(first.contains("intermediate_response_options"), "{first}");
    assert!(first.contains("mood"), "{first}");
    let last = bodies[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .to_string();
    assert!(!last.contains("intermediate_response_options"), "{last}");
    // Each round is logged as YAML, cut to 40 characters.
    let logged = captured.0.lock().unwrap().clone();
    let rounds: Vec<_> = logged
        .iter()
        .filter(|m| m.starts_with("ReAct round"))
        .collect();
    assert_eq!(rounds.len(), 2, "{logged:?}");
    assert!(rounds[0].contains("analysis: planned"), "{}", rounds[0]);
    assert!(rounds[0].ends_with('…'), "{}", rounds[0]);
    assert!(rounds[1].contains("answer: done"), "{}", rounds[1]);
}

/// The reference's deliverables object is required in every analysis round
/// and each deliverable's field in it too (nullable): an analysis without
/// them is repaired, and a deliverable that comes back is dumped as its
/// model, defaults filled.
#[tokio::test]
async fn react_deliverables_are_required_and_read_as_their_model() {
    let server = MockServer::start().await;
    server.script([
        MockReply::json(json!({"analysis": "a", "extension_needed": false})),
        MockReply::json(json!({"analysis": "a", "extension_needed": false,
            "intermediate_response_options": {"plan": {"steps": ["x"]}}})),
        MockReply::json(json!({"answer": "done"})),
    ]);
    let mut b = branch(&server);
    let plan = branch_operations::ResponseFormat::Schema(json!({
        "properties": {
            "steps": {"items": {"type": "string"}, "type": "array"},
            "priority": {"default": 1, "type": "integer"}},
        "required": ["steps"], "title": "Plan", "type": "object"}));
    let r = b
        .ReAct(
            ReActOptions::new("task")
                .include_token_usage_to_model(false)
                .intermediate_response_option(plan)
                .return_analysis(true),
        )
        .await
        .unwrap();
    let analyses = r.analyses.expect("return_analysis asks for them");
    assert_eq!(
        analyses[0]["intermediate_response_options"],
        json!({"plan": {"steps": ["x"], "priority": 1}})
    );
    let bodies = server.bodies();
    assert_eq!(
        bodies.len(),
        3,
        "the analysis without deliverables is repaired"
    );
    let first = bodies[0]["messages"][0]["content"].as_str().unwrap();
    assert!(
        first.contains("$ref: '#/$defs/IntermediateResponseOptions'"),
        "{first}"
    );
    assert!(
        first.contains("\n  required:\n  - intermediate_response_options\n"),
        "{first}"
    );
}

/// `request_fields` read the first object a reply holds; a reply holding
/// none (a number, a list of numbers) fills none, and the turn is recorded
/// (compat.md §21 H16).
#[tokio::test]
async fn communicate_request_fields_fill_none_from_a_reply_without_objects() {
    use branch_operations::Reply;
    let server = MockServer::start().await;
    server.script([
        MockReply::text("[5, {\"title\": \"x\"}]"),
        MockReply::text("[1, 2, 3]"),
    ]);
    let mut b = branch(&server);
    let ask = |q: &str| CommunicateOptions::new(q).request_fields(["title", "year"]);
    let first = b.communicate(ask("q1")).await.unwrap();
    assert_eq!(first, Reply::Structured(json!({"title": "x"})));
    let before = b.messages().len();
    let second = b.communicate(ask("q2")).await.unwrap();
    assert_eq!(second, Reply::Structured(json!({})));
    assert_eq!(b.messages().len(), before + 2);
}

/// Two deliverables of one title would share a field: the run is refused
/// before any call, and the branch is left as it was.
#[tokio::test]
async fn react_refuses_two_deliverables_of_one_title() {
    let server = MockServer::start().await;
    let mut b = branch(&server);
    let plan = |title: &str| {
        branch_operations::ResponseFormat::Schema(json!({
            "properties": {"steps": {"items": {"type": "string"}, "type": "array"}},
            "required": ["steps"], "title": title, "type": "object"}))
    };
    let before = b.messages().len();
    let err = b
        .ReAct(
            ReActOptions::new("task")
                .interpret(true)
                .intermediate_response_option(plan("Plan"))
                .intermediate_response_option(plan("PLAN")),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            branch_operations::OperationError::InvalidArgument {
                what: "intermediate_response_options",
                ..
            }
        ),
        "{err}"
    );
    assert!(server.bodies().is_empty());
    assert_eq!(b.messages().len(), before);
}

/// A field model without a default is required, as pydantic makes it; one
/// with a default is not. (Without a response format operate forces every
/// field in, as the reference does, so a missing one is `null`, not its
/// default, and fails: `operate_field_models` in the refdiff matrix.)
#[tokio::test]
async fn operate_field_models_are_required_unless_they_have_a_default() {
    let server = MockServer::start().await;
    server.script([
        MockReply::json(json!({"count": 2})),
        MockReply::json(json!({"note": "n", "count": 2})),
    ]);
    let mut b = branch(&server);
    let r = b
        .operate(
            OperateOptions::new("task")
                .field_model("note", json!({"type": "string"}))
                .field_model("count", json!({"default": 3, "type": "integer"})),
        )
        .await
        .unwrap();
    assert_eq!(r.structured, Some(json!({"note": "n", "count": 2})));
    let bodies = server.bodies();
    assert_eq!(bodies.len(), 2, "the reply without `note` is repaired");
    let sent = bodies[0]["messages"].to_string();
    assert!(
        sent.contains("\\n  required:\\n  - note\\n  title"),
        "{sent}"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn run_persists_snapshots_and_a_message_buffer() {
    let dir = common::temp_dir("persist");
    let script = dir.join("fake-claude.sh");
    common::executable(
        &script,
        r#"#!/bin/sh
cat > /dev/null
echo '{"type":"assistant","message":{"content":[{"type":"text","text":"Working."},{"type":"tool_use","id":"tu1","name":"Read","input":{"path":"a"}}]}}'
echo '{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"tu1","content":"body"}]}}'
echo '{"type":"assistant","message":{"content":[{"type":"text","text":"Done."}]}}'
echo '{"type":"result","subtype":"success","result":"Done.","num_turns":1}'
"#,
    );
    let server = MockServer::start().await;
    let mut b = branch(&server);
    let id = b.id();
    let persist = dir.join("runs");
    let snaps = dir.join("snaps");
    let buffer = persist.join(format!("{id}.buffer.jsonl"));
    let snapshot = snaps.join(format!("{id}.json"));
    let read_json = |p: &std::path::Path| -> Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    {
        let mut s = b.run(
            RunOptions::new("go")
                .cli_command(&script)
                .stream_persist(true)
                .persist_dir(&persist)
                .snapshot_dir(&snaps),
        );
        let first = s.next().await.unwrap().unwrap();
        // Before the stream: the snapshot holds the history as it was.
        assert_eq!(
            read_json(&snapshot)["messages"]["collections"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        let lines = std::fs::read_to_string(&buffer).unwrap();
        assert_eq!(lines.lines().count(), 1);
        let line: Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
        assert_eq!(line["id"], first.id().to_string());
        let second = s.next().await.unwrap().unwrap();
        assert_eq!(second.as_assistant_text(), Some("Working."));
        assert_eq!(std::fs::read_to_string(&buffer).unwrap().lines().count(), 2);
        while let Some(m) = s.next().await {
            m.unwrap();
        }
    }
    // After: the snapshot holds the whole turn and the buffer is gone.
    assert_eq!(
        read_json(&snapshot)["messages"]["collections"]
            .as_array()
            .unwrap()
            .len(),
        6
    );
    assert!(!buffer.exists());
    assert!(!persist.join(format!("{id}.json")).exists());
    assert_eq!(b.messages().len(), 6);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_custom_middle_answers_the_compiled_request() {
    let server = MockServer::start().await;
    let mut b = branch(&server);
    let seen = Arc::new(std::sync::Mutex::new(String::new()));
    let s = seen.clone();
    let middle = branch_operations::OperateMiddle::custom(
        move |_model: Arc<dyn branch_core::model::ChatModel>,
              req: branch_core::model::ChatRequest| {
            *s.lock().unwrap() = req.messages.last().unwrap().content.to_string();
            async move {
                Ok(branch_core::model::ChatResponse::from_raw(json!({
                    "choices": [{"message": {"role": "assistant", "content": "{\"v\": 3}"}}]
                })))
            }
        },
    );
    let fmt = branch_operations::ResponseFormat::Schema(json!({
        "properties": {"v": {"type": "integer"}}, "required": ["v"], "title": "V", "type": "object"}));
    let r = b
        .operate(
            OperateOptions::new("give v")
                .response_format(fmt)
                .middle(middle),
        )
        .await
        .unwrap();
    assert_eq!(r.structured, Some(json!({"v": 3})));
    assert_eq!(server.request_count(), 0);
    assert!(seen.lock().unwrap().contains("give v"));
    assert_eq!(b.messages().len(), 3);
    assert_eq!(
        b.messages().iter().last().unwrap().as_assistant_text(),
        Some("{\"v\": 3}")
    );
}

#[cfg(unix)]
#[tokio::test]
async fn run_and_collect_joins_the_cli_replies_and_parses_them() {
    let dir = common::temp_dir("collect");
    let prompt = dir.join("prompt.txt");
    let script = dir.join("fake-claude.sh");
    common::executable(
        &script,
        &format!(
            r#"#!/bin/sh
cat > '{}'
echo '{{"type":"assistant","message":{{"content":[{{"type":"text","text":"Checking."}},{{"type":"tool_use","id":"tu1","name":"Read","input":{{}}}}]}}}}'
echo '{{"type":"user","message":{{"content":[{{"type":"tool_result","tool_use_id":"tu1","content":"ok"}}]}}}}'
echo '{{"type":"assistant","message":{{"content":[{{"type":"text","text":"{{\"v\": 5}}"}}]}}}}'
echo '{{"type":"result","subtype":"success","num_turns":1}}'
"#,
            prompt.display()
        ),
    );
    let server = MockServer::start().await;
    // Prose before the JSON defeats the local parse (as in the reference),
    // so one repair call goes to the parse model.
    server.push(MockReply::json(json!({"v": 5})));
    let mut b = branch(&server);
    let fmt = branch_operations::ResponseFormat::Schema(json!({
        "properties": {"v": {"type": "integer"}}, "required": ["v"], "title": "V", "type": "object"}));
    let r = b
        .operate(
            OperateOptions::new("give v")
                .response_format(fmt)
                .repair_backoff(Duration::ZERO, 1.0)
                .middle(branch_operations::OperateMiddle::RunAndCollect)
                .run_options(RunOptions::default().cli_command(&script)),
        )
        .await;
    let r = r.unwrap();
    assert_eq!(r.text, "Checking.\n\n{\"v\": 5}");
    assert_eq!(r.structured, Some(json!({"v": 5})));
    assert_eq!(server.request_count(), 1);
    let sent = std::fs::read_to_string(&prompt).unwrap();
    assert!(
        sent.contains("give v") && sent.contains("integer"),
        "{sent}"
    );
    // run recorded the turn: System, Instruction, AssistantResponse,
    // ActionRequest, ActionResponse, AssistantResponse.
    assert_eq!(b.messages().len(), 6);
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(unix)]
#[tokio::test]
async fn operate_on_a_cli_model_collects_a_run_by_default() {
    let dir = common::temp_dir("auto");
    let script = dir.join("fake-claude.sh");
    common::executable(
        &script,
        r#"#!/bin/sh
cat > /dev/null
echo '{"type":"assistant","message":{"content":[{"type":"text","text":"From the agent."}]}}'
echo '{"type":"result","subtype":"success","num_turns":1}'
"#,
    );
    let cli = branch_core::model::ModelConfig::builder()
        .provider("claude_code")
        .model("sonnet")
        .build()
        .unwrap();
    assert!(cli.is_cli());
    let mut b = Branch::builder()
        .system("S")
        .chat_model(Arc::new(cli) as Arc<dyn branch_core::model::ChatModel>)
        .build()
        .unwrap();
    let r = b
        .operate(OperateOptions::new("hi").run_options(RunOptions::default().cli_command(&script)))
        .await
        .unwrap();
    assert_eq!(r.text, "From the agent.");
    assert_eq!(b.messages().len(), 3);
    let _ = std::fs::remove_dir_all(&dir);
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct Capital {
    city: String,
}

#[tokio::test]
async fn native_format_sends_the_structure_as_response_format() {
    let server = MockServer::start().await;
    server.script([
        MockReply::text(r#"{"city": "Paris"}"#),
        MockReply::text(r#"{"city": "Rome"}"#),
        MockReply::text(r#"{"city": "Bern"}"#),
        MockReply::text(r#"{"city": "Oslo"}"#),
    ]);
    let mut b = branch(&server);
    let r = b
        .operate_as::<Capital>(OperateOptions::new("France?").native_format(true))
        .await
        .unwrap();
    assert_eq!(r.parsed.value().unwrap().city, "Paris");
    let body = &server.bodies()[0];
    let format = &body["response_format"];
    assert_eq!(format["type"], "json_schema");
    // The operative schema — what the prompt shows — goes natively too.
    let schema = &format["json_schema"]["schema"];
    assert_eq!(format["json_schema"]["name"], schema["title"]);
    assert_eq!(schema["properties"]["city"]["type"], "string");
    let prompt = body["messages"][0]["content"].as_str().unwrap();
    assert!(
        prompt.contains("city"),
        "the prompt still renders the format"
    );

    // communicate: the request model's schema, titled as the reference titles it.
    let reply = b
        .communicate(
            CommunicateOptions::new("Italy?")
                .response_type::<Capital>()
                .native_format(true),
        )
        .await
        .unwrap();
    assert_eq!(reply.structured().unwrap()["city"], "Rome");
    let body = &server.bodies()[1];
    assert_eq!(
        body["response_format"]["json_schema"]["name"],
        "CapitalRequest"
    );

    // A caller's own payload field wins; off by default (the reference's wire).
    let own = json!({"type": "json_object"});
    b.operate_as::<Capital>(
        OperateOptions::new("Switzerland?")
            .native_format(true)
            .field("response_format", own.clone()),
    )
    .await
    .unwrap();
    assert_eq!(server.bodies()[2]["response_format"], own);
    b.operate_as::<Capital>(OperateOptions::new("Norway?"))
        .await
        .unwrap();
    assert!(server.bodies()[3].get("response_format").is_none());
}

/// `connect`: the model becomes a tool whose parameters are the chat
/// request schema; calling it sends the arguments as one request (the
/// model's own name wins) and returns the provider's raw reply. A second
/// `connect` under the same name needs `update`; malformed arguments are
/// a failed call, never a request.
#[tokio::test]
async fn connect_registers_a_model_as_a_tool() {
    let server = MockServer::start().await;
    server.push(MockReply::text("from helper"));
    let mut b = Branch::builder()
        .chat_model(model(&server, "gpt-4.1-mini"))
        .build()
        .unwrap();
    let helper = model(&server, "gpt-4o-mini");
    b.connect(helper.clone(), "helper", Some("Ask another model"), false)
        .unwrap();
    assert!(b.connect(helper.clone(), "helper", None, false).is_err());
    b.connect(helper, "helper", Some("Ask another model"), true)
        .unwrap();
    let schema = b.acts().get("helper").unwrap().tool().schema().clone();
    assert_eq!(
        schema["function"]["parameters"],
        *branch_core::model::openai_chat_request_schema()
    );
    let call = ToolCall::new(
        "helper",
        json!({"model": "other", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.2})
            .as_object()
            .unwrap()
            .clone(),
    );
    let out = b.act(vec![call], ActOptions::default()).await.unwrap();
    assert_eq!(
        out[0].output.as_ref().unwrap()["choices"][0]["message"]["content"],
        "from helper"
    );
    let body = &server.bodies()[0];
    assert_eq!(body["model"], "gpt-4o-mini");
    assert_eq!(body["messages"], json!([{"role": "user", "content": "hi"}]));
    assert_eq!(body["temperature"], 0.2);
    let bad = ToolCall::new(
        "helper",
        json!({"messages": "hi"}).as_object().unwrap().clone(),
    );
    let out = b.act(vec![bad], ActOptions::default()).await.unwrap();
    // Refused by the request schema before any request is built.
    let err = out[0].output.as_ref().unwrap()["error"].as_str().unwrap();
    assert!(err.contains("`$.messages`"), "{err}");
    assert_eq!(server.request_count(), 1);
}

/// A connected model's call is an API call of the branch, as in the
/// reference: its log (payload sent, reply received, or the failure) goes
/// to the branch's logs right before the tool call's own. A Claude model's
/// tool offers the Messages request model; its failure at the provider
/// fails the tool call.
#[tokio::test]
async fn a_connected_models_call_is_logged_before_the_tool_call() {
    let server = MockServer::start().await;
    server.script([MockReply::text("Paris."), MockReply::error(400, "bad")]);
    let c = branch_core::model::ModelConfig::builder()
        .provider("anthropic")
        .model("claude-haiku-4-5")
        .base_url(&server.base_url())
        .allow_local_network(true)
        .build()
        .unwrap();
    let claude: Arc<dyn branch_core::model::ChatModel> =
        Arc::new(branch_models::IModel::with_api_key(c, "test").unwrap());
    let mut b = Branch::builder()
        .chat_model(model(&server, "gpt-4.1-mini"))
        .build()
        .unwrap();
    b.connect(claude, "helper", None, false).unwrap();
    let schema = b.acts().get("helper").unwrap().tool().schema().clone();
    assert_eq!(
        schema["function"]["parameters"],
        *branch_core::model::anthropic_messages_request_schema()
    );
    let ask = |text: &str| {
        ToolCall::new(
            "helper",
            json!({"model": "claude-haiku-4-5", "max_tokens": 50,
                   "messages": [{"role": "user", "content": text}]})
            .as_object()
            .unwrap()
            .clone(),
        )
    };
    let out = b
        .act(vec![ask("Capital?")], ActOptions::default())
        .await
        .unwrap();
    assert_eq!(
        out[0].output.as_ref().unwrap()["content"][0]["text"],
        "Paris."
    );
    let logs: Vec<_> = b.logs().iter().map(|l| l.content().clone()).collect();
    assert_eq!(logs.len(), 2);
    assert_eq!(logs[0]["payload"], server.bodies()[0]);
    assert_eq!(logs[0]["execution"]["status"], "completed");
    assert_eq!(
        logs[0]["execution"]["response"]["content"][0]["text"],
        "Paris."
    );
    assert_eq!(logs[0]["metadata"]["served_model"], "claude-haiku-4-5");
    assert_eq!(logs[1]["function"], "helper");
    let out = b
        .act(
            vec![ask("fail")],
            ActOptions::default().suppress_errors(true),
        )
        .await
        .unwrap();
    // Suppressed, the failure reads as no output (the log keeps why).
    assert_eq!(out[0].output, None);
    let logs: Vec<_> = b.logs().iter().map(|l| l.content().clone()).collect();
    assert_eq!(logs.len(), 4);
    assert_eq!(logs[2]["execution"]["status"], "failed");
    assert_eq!(logs[2]["payload"], server.bodies()[1]);
    assert_eq!(logs[3]["execution"]["status"], "failed");
    let why = logs[3]["execution"]["error"]["message"].as_str().unwrap();
    assert!(why.contains("status 400") && why.contains("bad"), "{why}");
}

/// Every span opened on this thread: its name, its parent's name and its
/// `lionagi.operation` / `gen_ai.conversation.id` fields.
#[derive(Clone, Default)]
struct SpanTree(Arc<std::sync::Mutex<Vec<OpenedSpan>>>);

#[derive(Debug, Clone, Default)]
struct OpenedSpan {
    name: String,
    parent: Option<String>,
    operation: Option<String>,
    conversation: Option<String>,
}

impl tracing::field::Visit for OpenedSpan {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let v = format!("{value:?}").trim_matches('"').to_owned();
        match field.name() {
            "lionagi.operation" => self.operation = Some(v),
            "gen_ai.conversation.id" => self.conversation = Some(v),
            _ => {}
        }
    }
}

impl<S> tracing_subscriber::Layer<S> for SpanTree
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut opened = OpenedSpan {
            name: attrs.metadata().name().to_owned(),
            parent: ctx
                .span(id)
                .and_then(|s| s.parent())
                .map(|p| p.name().to_owned()),
            ..OpenedSpan::default()
        };
        attrs.record(&mut opened);
        self.0.lock().unwrap().push(opened);
    }
}

#[tokio::test]
async fn react_stream_runs_under_its_own_agent_span() {
    use tracing_subscriber::layer::SubscriberExt;
    let server = MockServer::start().await;
    server.script([
        MockReply::json(json!({"analysis": "a", "extension_needed": false})),
        MockReply::json(json!({"answer": "x"})),
    ]);
    let mut b = branch(&server);
    let conversation = b.id().to_string();
    let tree = SpanTree::default();
    let subscriber = tracing_subscriber::registry().with(tree.clone());
    let _default = tracing::subscriber::set_default(subscriber);
    let rounds: Vec<_> = b.ReActStream(ReActOptions::new("t")).collect().await;
    assert_eq!(rounds.len(), 2);
    let spans = tree.0.lock().unwrap().clone();
    // One root: the verb's span; the rounds' own spans (each round's
    // `operate`, its model call) open inside it.
    let roots: Vec<_> = spans.iter().filter(|s| s.parent.is_none()).collect();
    assert_eq!(roots.len(), 1, "{spans:?}");
    assert_eq!(roots[0].name, "invoke_agent");
    assert_eq!(roots[0].operation.as_deref(), Some("ReActStream"));
    assert_eq!(
        roots[0].conversation.as_deref(),
        Some(conversation.as_str())
    );
    let chats: Vec<_> = spans.iter().filter(|s| s.name == "chat").collect();
    assert_eq!(chats.len(), 2, "{spans:?}");
    for chat in chats {
        assert_eq!(chat.conversation.as_deref(), Some(conversation.as_str()));
    }
}

/// How often `needle` occurs in the messages of a request body.
fn occurrences(body: &Value, needle: &str) -> usize {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            m["content"]
                .as_str()
                .unwrap_or_default()
                .matches(needle)
                .count()
        })
        .sum()
}

#[tokio::test]
async fn a_repair_inside_react_shows_the_callers_context_once() {
    let server = MockServer::start().await;
    server.script([
        MockReply::json(json!({"analysis": "a", "extension_needed": true})),
        MockReply::json(json!({"analysis": "b", "extension_needed": false})),
        MockReply::text("not a structure"),
        MockReply::json(json!({"answer": "done"})),
    ]);
    let mut b = branch(&server);
    let r = b
        .ReAct(
            ReActOptions::new("task")
                .context("the sky is teal")
                .max_extensions(1)
                .include_token_usage_to_model(false),
        )
        .await
        .unwrap();
    assert_eq!(r.answer, json!("done"));
    let bodies = server.bodies();
    assert_eq!(bodies.len(), 4);
    // The first round shows it; each later request (the extension, the
    // answer and the answer's repair) shows it once, in the first round's
    // instruction, though three stored instructions carry it.
    for (i, body) in bodies.iter().enumerate() {
        assert_eq!(occurrences(body, "the sky is teal"), 1, "request {i}");
    }
}

#[tokio::test]
async fn structures_of_our_own_read_what_the_reply_left_out_as_the_reference_does() {
    let server = MockServer::start().await;
    let mut b = branch(&server);
    b.acts_mut().register(tool("echo", |v| v), false).unwrap();
    // operate's own structure (actions, no response format): no action.
    server.script([MockReply::json(json!({"x": 1}))]);
    let o = b
        .operate(OperateOptions::new("go").actions(true))
        .await
        .unwrap();
    let Parsed::Value(v) = &o.parsed else {
        panic!("{:?}", o.parsed)
    };
    assert_eq!(v["action_required"], json!(false));
    assert_eq!(v["action_requests"], json!([]));
    assert_eq!(v["action_responses"], json!([]));
    // On the caller's format the same fields stay null (the reference's
    // model has no default for them there).
    let answer = json!({"type": "object", "title": "Answer",
        "properties": {"answer": {"type": "string"}}, "required": ["answer"]});
    server.script([MockReply::json(json!({"answer": "4"}))]);
    let o = b
        .operate(
            OperateOptions::new("2+2?")
                .actions(true)
                .response_format(branch_operations::ResponseFormat::Schema(answer)),
        )
        .await
        .unwrap();
    let Parsed::Value(v) = &o.parsed else {
        panic!("{:?}", o.parsed)
    };
    assert_eq!(v["action_required"], Value::Null);
    // A ReAct analysis without its text reads it as empty.
    server.script([
        MockReply::json(json!({"extension_needed": false})),
        MockReply::json(json!({"answer": "x"})),
    ]);
    let r = b.ReAct(ReActOptions::new("t")).await.unwrap();
    assert_eq!(r.rounds[0].result_value()["analysis"], json!(""));
}

#[tokio::test]
async fn react_extension_rounds_offer_actions_and_keep_a_guidance_that_is_not_text() {
    let server = MockServer::start().await;
    server.script([
        MockReply::json(json!({"analysis": "a", "extension_needed": true})),
        MockReply::json(json!({"analysis": "b", "extension_needed": false})),
        MockReply::json(json!({"answer": "x"})),
    ]);
    // A branch without tools.
    let mut b = branch(&server);
    let r = b
        .ReAct(
            ReActOptions::new("task")
                .guidance(json!({"tone": "dry"}))
                .reasoning_effort("high")
                .max_extensions(1)
                .include_token_usage_to_model(false),
        )
        .await
        .unwrap();
    let bodies = server.bodies();
    let last = |i: usize| {
        bodies[i]["messages"].as_array().unwrap().last().unwrap()["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    // The first round offers no actions; the extension round does.
    assert!(!last(0).contains("action_requests"), "{}", last(0));
    assert!(last(1).contains("action_requests"), "{}", last(1));
    assert_eq!(r.rounds[1].result_value()["action_required"], json!(false));
    assert_eq!(r.rounds[1].result_value()["action_requests"], json!([]));
    // The extension round keeps the map and sends the effort as a field.
    assert!(
        last(1).starts_with("Guidance:\n  tone: dry\n"),
        "{}",
        last(1)
    );
    assert_eq!(bodies[1]["reasoning_effort"], json!("high"));
}

/// The final answer takes its own guidance, payload fields and reason
/// (`response_kwargs`); the rounds keep the task's.
#[tokio::test]
async fn react_answer_options_change_the_final_turn_only() {
    let server = MockServer::start().await;
    server.script([
        MockReply::json(json!({"analysis": "a", "extension_needed": false})),
        MockReply::json(json!({"answer": "x",
            "reason": {"title": "t", "content": "c", "confidence_score": 0.5}})),
    ]);
    let mut b = branch(&server);
    let r = b
        .ReAct(
            ReActOptions::new("task")
                .guidance("Think.")
                .field("temperature", 0.2)
                .include_token_usage_to_model(false)
                .answer_with(
                    AnswerOptions::default()
                        .guidance("Answer briefly.")
                        .field("temperature", 0.9)
                        .reason(true),
                ),
        )
        .await
        .unwrap();
    assert_eq!(r.answer, json!("x"));
    let bodies = server.bodies();
    assert_eq!(bodies[0]["temperature"], json!(0.2));
    assert_eq!(bodies[1]["temperature"], json!(0.9));
    let round = bodies[0]["messages"].to_string();
    assert!(round.contains("Think.\\nInstruction"), "{round}");
    let last = bodies[1]["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(last.starts_with("Guidance: Answer briefly.\n"), "{last}");
    assert!(last.contains("    reason:\n"), "{last}");
    let Parsed::Value(v) = &r.rounds[1].result else {
        panic!("the answer parses: {:?}", r.rounds[1].result)
    };
    assert_eq!(v["reason"]["title"], "t");
}

/// An answer that never parses under `return_none` answers `null`, as the
/// reference's does, not the reply's text.
#[tokio::test]
async fn react_answer_given_up_as_none_is_null() {
    let server = MockServer::start().await;
    server.script(
        [MockReply::json(
            json!({"analysis": "a", "extension_needed": false}),
        )]
        .into_iter()
        .chain(std::iter::repeat_n(MockReply::text("bad"), 5)),
    );
    let mut b = branch(&server);
    let answer_format = branch_operations::ResponseFormat::Schema(json!({
        "properties": {"answer": {"type": "string"}}, "required": ["answer"],
        "title": "Answer", "type": "object"}));
    let r = b
        .ReAct(
            ReActOptions::new("task")
                .include_token_usage_to_model(false)
                .response_format(answer_format)
                .repair_backoff(Duration::ZERO, 1.0)
                .answer_with(AnswerOptions::default().on_parse_failure(OnParseFailure::ReturnNone)),
        )
        .await
        .unwrap();
    assert_eq!(r.answer, Value::Null);
}

/// A field map alone is asked for as its banner, without a schema, and
/// read with the reply's undeclared keys kept, as chat and communicate do.
#[tokio::test]
async fn operate_with_a_field_map_alone_asks_and_reads_as_communicate() {
    let server = MockServer::start().await;
    server.script([MockReply::json(
        json!({"title": "t", "year": 2, "extra": 1}),
    )]);
    let mut b = branch(&server);
    let mut fields = Map::new();
    fields.insert("title".into(), json!("the title"));
    fields.insert("year".into(), json!(0));
    let r = b
        .operate(
            OperateOptions::new("q")
                .include_token_usage_to_model(false)
                .response_format(branch_operations::ResponseFormat::Fields(fields)),
        )
        .await
        .unwrap();
    assert_eq!(
        r.parsed,
        Parsed::Value(json!({"title": "t", "year": 2, "extra": 1}))
    );
    let body = server.bodies()[0]["messages"].to_string();
    assert!(!body.contains("ResponseSchema"), "{body}");
    assert!(body.contains("ResponseFormat"), "{body}");
}

/// The caller's tool schemas are shown with operate's instruction unless
/// actions run, when the offered tools' own are shown instead.
#[tokio::test]
async fn operate_shows_the_callers_tool_schemas_unless_actions_run() {
    let server = MockServer::start().await;
    server.script([
        MockReply::text("1"),
        MockReply::json(json!({"action_required": false, "action_requests": []})),
    ]);
    let mut b = branch(&server);
    let weather = json!({"name": "weather"});
    b.operate(OperateOptions::new("one").tool_schemas(vec![weather.clone()]))
        .await
        .unwrap();
    b.operate(
        OperateOptions::new("two")
            .tool_schemas(vec![weather])
            .actions(true),
    )
    .await
    .unwrap();
    let bodies = server.bodies();
    let first = bodies[0]["messages"].to_string();
    assert!(first.contains("Tools:\\n- name: weather"), "{first}");
    let second = bodies[1]["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!second.contains("weather"), "{second}");
}

/// The answer's own sender and plain content (`response_kwargs`): the final
/// request's instruction is the text alone, stored from that sender.
#[tokio::test]
async fn react_answer_options_set_the_answers_instruction() {
    let server = MockServer::start().await;
    server.script([
        MockReply::json(json!({"analysis": "a", "extension_needed": false})),
        MockReply::json(json!({"answer": "x"})),
    ]);
    let mut b = branch(&server);
    b.ReAct(
        ReActOptions::new("task")
            .include_token_usage_to_model(false)
            .answer_with(
                AnswerOptions::default()
                    .plain_content("Just answer.")
                    .sender(branch_core::Participant::parse("alice").unwrap()),
            ),
    )
    .await
    .unwrap();
    let bodies = server.bodies();
    let last = bodies[1]["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["content"], "Just answer.");
    let alice = branch_core::Participant::parse("alice");
    let senders: Vec<_> = b.messages().iter().map(|m| m.sender.clone()).collect();
    assert!(senders.contains(&alice), "{senders:?}");
}

/// A dict format's reading is ReAct's answer whole, even with an `answer`
/// key in it, as the reference's (a dict has no `answer` attribute).
#[tokio::test]
async fn react_answers_a_dict_format_with_its_whole_reading() {
    let server = MockServer::start().await;
    server.script([
        MockReply::json(json!({"analysis": "a", "extension_needed": false})),
        MockReply::json(json!({"answer": "x", "why": "y", "extra": 1})),
    ]);
    let mut b = branch(&server);
    let mut fields = Map::new();
    fields.insert("answer".into(), json!("the answer"));
    fields.insert("why".into(), json!("a reason"));
    let r = b
        .ReAct(
            ReActOptions::new("task")
                .include_token_usage_to_model(false)
                .response_format(branch_operations::ResponseFormat::Fields(fields)),
        )
        .await
        .unwrap();
    assert_eq!(r.answer, json!({"answer": "x", "why": "y", "extra": 1}));
}

/// ReAct's tool schemas: on a branch without tools the first round still
/// offers actions, the answer's instruction shows the schemas, and the
/// answer's own (here none) replace them.
#[tokio::test]
async fn react_tool_schemas_go_with_the_answer_and_offer_actions() {
    let server = MockServer::start().await;
    server.script([
        MockReply::json(json!({"analysis": "a", "extension_needed": false})),
        MockReply::json(json!({"answer": "x"})),
        MockReply::json(json!({"analysis": "b", "extension_needed": false})),
        MockReply::json(json!({"answer": "y"})),
    ]);
    let mut b = branch(&server);
    let weather = json!({"name": "weather"});
    let last_content = |body: &Value| {
        body["messages"].as_array().unwrap().last().unwrap()["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let opts = || {
        ReActOptions::new("task")
            .include_token_usage_to_model(false)
            .tool_schemas(vec![weather.clone()])
    };
    b.ReAct(opts()).await.unwrap();
    b.ReAct(opts().answer_with(AnswerOptions::default().tool_schemas(Vec::new())))
        .await
        .unwrap();
    let bodies = server.bodies();
    let first = last_content(&bodies[0]);
    assert!(first.contains("action_requests"), "{first}");
    assert!(!first.contains("weather"), "{first}");
    let answer = last_content(&bodies[1]);
    assert!(answer.contains("Tools:\n- name: weather"), "{answer}");
    let own = last_content(&bodies[3]);
    assert!(!own.contains("Tools:"), "{own}");
}

/// As the reference's `operate` reads them (its `Instruct` model nulls
/// blank text): a guidance or context that is a text of white space only
/// is none there, and kept by the other verbs, as theirs keep it.
#[tokio::test]
async fn operate_reads_blank_guidance_and_context_as_none() {
    let server = MockServer::start().await;
    server.script([MockReply::text("one"), MockReply::text("two")]);
    let mut b = branch(&server);
    b.operate(
        OperateOptions::new("hi")
            .guidance("  ")
            .context(" \n\u{1f}"),
    )
    .await
    .unwrap();
    b.communicate(CommunicateOptions::new("hi").context(" \n").guidance("  "))
        .await
        .unwrap();
    let instructions: Vec<_> = b
        .messages()
        .iter()
        .filter_map(|m| match &m.content {
            MessageContent::Instruction(c) => Some(c.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(instructions[0].guidance, None);
    assert!(instructions[0].prompt_context.is_empty());
    assert_eq!(instructions[1].guidance, Some(json!("  ")));
    assert_eq!(instructions[1].prompt_context, vec![json!(" \n")]);
    // A list is kept whatever its items, by operate too.
    let kept = OperateOptions::new("hi").context(json!([" "]));
    assert_eq!(kept.turn.context, vec![json!(" ")]);
}

/// The failure policy is the caller's typed format's, as the reference's
/// operate applies `handle_validation` only when a model was asked for: a
/// structure of operate's own (here `reason`) or a field map that never
/// parses gives the text whatever the policy.
#[tokio::test]
async fn operate_applies_the_failure_policy_to_a_typed_format_only() {
    let server = MockServer::start().await;
    server.script((0..3).map(|_| MockReply::text("no json here")));
    let mut b = branch(&server);
    let quick = |o: OperateOptions| {
        o.num_parse_retries(0)
            .repair_backoff(Duration::ZERO, 1.0)
            .on_parse_failure(OnParseFailure::ReturnNone)
    };
    let own = b
        .operate(quick(OperateOptions::new("Why?").reason(true)))
        .await
        .unwrap();
    assert!(matches!(&own.parsed, Parsed::Unparsed(u) if u.text == "no json here"));
    let schema = json!({"type": "object", "properties": {"answer": {"type": "string"}},
                        "required": ["answer"], "title": "Answer"});
    server.script((0..3).map(|_| MockReply::text("no json here")));
    let typed = b
        .operate(quick(OperateOptions::new("What?").response_format(
            branch_operations::ResponseFormat::Schema(schema),
        )))
        .await
        .unwrap();
    assert!(matches!(typed.parsed, Parsed::Nothing));
}
