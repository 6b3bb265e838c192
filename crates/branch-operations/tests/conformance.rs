//! Conformance with every scenario of the reference's operations fixtures,
//! against the real loopback mock server: request bodies (normalised only
//! for the documented deviations), return values and `to_dict`.

mod common;
#[path = "../../../tests/support/mod.rs"]
mod support;

use branch_core::Branch;
use branch_models::mock::MockServer;
use branch_operations::{
    ActOptions, BranchOperations, ChatOptions, CommunicateOptions, InterpretOptions,
    OperateOptions, ParseOptions, Parsed, ReActOptions, Reply, RunOptions, tool_call_from_value,
};
use futures_util::StreamExt;
use serde_json::{Value, json};
use support::{Comparer, Fixture, fixture};

use common::{answer_format, assert_requests, model, msg_summary, scripted, to_dict};

/// Scenario `name`: its fixture (output normalised), its scripted mock
/// server, and a branch with this system message talking to `model_name`
/// there.
async fn scenario(name: &str, system: &str, model_name: &str) -> (Fixture, MockServer, Branch) {
    let mut fx = fixture(name);
    common::normalise_all(&mut fx.output);
    let server = scripted(name).await;
    let b = Branch::builder()
        .system(system)
        .chat_model(model(&server, model_name))
        .build()
        .unwrap();
    (fx, server, b)
}

#[tokio::test]
async fn chat_not_recorded() {
    let name = "operations/chat_not_recorded";
    let (fx, server, mut b) = scenario(name, "You are terse.", "gpt-4.1-mini").await;
    let r = b
        .chat(
            ChatOptions::new("Say hello")
                .guidance("One sentence.")
                .context(json!({"mood": "cheerful"})),
        )
        .await
        .unwrap();
    assert_eq!(r, fx.output["return_value"]["value"]);
    let (ins, res) = b.chat_messages(ChatOptions::new("Again")).await.unwrap();
    assert_requests(&server, &fx.requests);
    assert_eq!(b.messages().len(), 1);
    assert_eq!(b.logs().len(), 2);
    let mut cmp = Comparer::new(&fx);
    cmp.check(&fx, "/to_dict", &to_dict(&b, &server));
    cmp.check(&fx, "/tuple_return/instruction", &ins.to_value().unwrap());
    cmp.check(
        &fx,
        "/tuple_return/assistant_response",
        &res.to_value().unwrap(),
    );
    cmp.finish();
}

#[tokio::test]
async fn chat_and_record() {
    let name = "operations/chat_and_record";
    let (fx, server, mut b) = scenario(name, "S", "gpt-4.1-mini").await;
    let r = b
        .chat_and_record(ChatOptions::new("Please record this").guidance("short"))
        .await
        .unwrap();
    assert_eq!(r, fx.output["return_value"]["value"]);
    assert_requests(&server, &fx.requests);
    let mut cmp = Comparer::new(&fx);
    cmp.check(&fx, "/messages", &msg_summary(&b));
    cmp.check(&fx, "/to_dict", &to_dict(&b, &server));
    cmp.finish();
}

#[tokio::test]
async fn chat_with_history() {
    use branch_core::message::{InstructionContent, Message};
    let name = "operations/chat_with_history";
    let (fx, server, mut b) = scenario(name, "History test.", "gpt-4.1-mini").await;
    let id = b.id();
    let ins = |text: &str, guidance: Option<&str>, ctx: Vec<Value>, rf: Option<Value>| {
        Message::instruction(InstructionContent {
            instruction: Some(text.into()),
            guidance: guidance.map(Into::into),
            prompt_context: ctx,
            response_format: rf,
            ..InstructionContent::default()
        })
        .with_sender(branch_core::Participant::parse("user"))
        .with_recipient(branch_core::Participant::Id(id))
    };
    let res = |text: &str| {
        Message::assistant(text)
            .with_sender(branch_core::Participant::Id(id))
            .with_recipient(branch_core::Participant::parse("user"))
    };
    b.msgs_mut()
        .add_message(ins("First question", Some("g1"), vec![], None));
    b.msgs_mut().add_message(res("First answer"));
    b.msgs_mut().add_message(ins(
        "Second question",
        None,
        vec![json!("ctx-2")],
        Some(json!({"x": "int"})),
    ));
    b.msgs_mut().add_message(res("Second answer"));
    let r = b.chat(ChatOptions::new("Third question")).await.unwrap();
    assert_eq!(r, fx.output["return_value"]["value"]);
    assert_eq!(b.messages().len(), 5);
    assert_requests(&server, &fx.requests);
}

#[tokio::test]
async fn communicate_recorded() {
    let name = "operations/communicate_recorded";
    let mut fx = fixture(name);
    common::normalise_all(&mut fx.output);
    let server = scripted(name).await;
    let mut b = Branch::builder()
        .user("alice")
        .system("You answer geography questions.")
        .chat_model(model(&server, "gpt-4.1-mini"))
        .build()
        .unwrap();
    let r = b
        .communicate(
            CommunicateOptions::new("What is the capital of France?")
                .guidance("Answer in one sentence.")
                .context(json!(["Europe"])),
        )
        .await
        .unwrap();
    assert_eq!(
        r,
        Reply::Text(fx.output["return_value"]["value"].as_str().unwrap().into())
    );
    assert_requests(&server, &fx.requests);
    let mut cmp = Comparer::new(&fx);
    cmp.check(&fx, "/messages", &msg_summary(&b));
    cmp.check(&fx, "/to_dict", &to_dict(&b, &server));
    cmp.finish();
}

#[tokio::test]
async fn communicate_provider_error() {
    let name = "operations/communicate_provider_error";
    let (fx, server, mut b) = scenario(name, "S", "gpt-4.1-mini").await;
    let err = b
        .communicate(CommunicateOptions::new("Hello?"))
        .await
        .unwrap_err();
    let msg = err.to_string();
    let expected = fx.output["error"]["error"]["message"].as_str().unwrap();
    assert!(msg.starts_with(expected), "{msg}");
    assert!(msg.contains("nothing was recorded"), "{msg}");
    assert_eq!(b.messages().len(), 1);
    assert_eq!(b.logs().len(), 1);
    assert_requests(&server, &fx.requests);
    let mut cmp = Comparer::new(&fx);
    cmp.check(&fx, "/to_dict", &to_dict(&b, &server));
    cmp.finish();
}

#[tokio::test]
async fn communicate_request_fields() {
    let name = "operations/communicate_request_fields";
    let (fx, server, mut b) = scenario(name, "Librarian.", "gpt-4.1-mini").await;
    let r = b
        .communicate(
            CommunicateOptions::new("Name a classic novel")
                .request_fields(["title", "year", "author"]),
        )
        .await
        .unwrap();
    assert_eq!(
        r,
        Reply::Structured(fx.output["return_value"]["value"].clone())
    );
    assert_requests(&server, &fx.requests);
    let mut cmp = Comparer::new(&fx);
    cmp.check(&fx, "/to_dict", &to_dict(&b, &server));
    cmp.finish();
}

#[tokio::test]
async fn communicate_response_format_with_repair() {
    let name = "operations/communicate_response_format";
    let mut fx = fixture(name);
    common::normalise_all(&mut fx.output);
    let server = scripted(name).await;
    let mut b = Branch::builder()
        .system("Math helper.")
        .chat_model(model(&server, "gpt-4.1-mini"))
        .parse_model(model(&server, "gpt-4.1-nano"))
        .build()
        .unwrap();
    let r1 = b
        .communicate(CommunicateOptions::new("What is 2+2?").response_format(answer_format()))
        .await
        .unwrap();
    assert_eq!(r1, Reply::Structured(fx.output["first"]["value"].clone()));
    let r2 = b
        .communicate(CommunicateOptions::new("And in words?").response_format(answer_format()))
        .await
        .unwrap();
    assert_eq!(r2, Reply::Structured(fx.output["second"]["value"].clone()));
    assert_requests(&server, &fx.requests);
    let mut cmp = Comparer::new(&fx);
    cmp.check(&fx, "/messages", &msg_summary(&b));
    cmp.check(&fx, "/to_dict", &to_dict(&b, &server));
    cmp.finish();
}

#[tokio::test]
async fn interpret() {
    let name = "operations/interpret";
    let (fx, server, mut b) = scenario(name, "S", "gpt-4.1-mini").await;
    let r = b
        .interpret(
            "gimme some primes >10",
            InterpretOptions::default().domain("math").style("precise"),
        )
        .await
        .unwrap();
    assert_eq!(r, fx.output["return_value"]["value"]);
    assert_eq!(b.messages().len(), 1);
    assert_requests(&server, &fx.requests);
}

#[tokio::test]
async fn operate_pydantic_response_format() {
    let name = "operations/operate_pydantic_response_format";
    let (fx, server, mut b) = scenario(name, "You are precise.", "gpt-4.1-mini").await;
    let r = b
        .operate(OperateOptions::new("What is 2+2?").response_format(answer_format()))
        .await
        .unwrap();
    assert_eq!(
        r.parsed,
        Parsed::Value(fx.output["return_value"]["value"].clone())
    );
    assert_requests(&server, &fx.requests);
    let mut cmp = Comparer::new(&fx);
    cmp.check(&fx, "/messages", &msg_summary(&b));
    cmp.check(&fx, "/to_dict", &to_dict(&b, &server));
    cmp.finish();
}

#[tokio::test]
async fn operate_invoke_actions_false() {
    let name = "operations/operate_invoke_actions_false";
    let mut fx = fixture(name);
    common::normalise_all(&mut fx.output);
    let server = scripted(name).await;
    let mut b = Branch::builder()
        .system("S")
        .chat_model(model(&server, "gpt-4.1-mini"))
        .tool(common::multiply())
        .build()
        .unwrap();
    let r = b
        .operate(
            OperateOptions::new("Do not call tools.")
                .actions(true)
                .invoke_actions(false)
                .response_format(answer_format()),
        )
        .await
        .unwrap();
    assert_eq!(
        r.parsed,
        Parsed::Value(fx.output["return_value"]["value"].clone())
    );
    assert!(r.action_responses.is_empty());
    assert_requests(&server, &fx.requests);
    let mut cmp = Comparer::new(&fx);
    cmp.check(&fx, "/messages", &msg_summary(&b));
    cmp.finish();
}

#[tokio::test]
async fn operate_with_actions() {
    let name = "operations/operate_with_actions";
    let mut fx = fixture(name);
    common::normalise_all(&mut fx.output);
    let server = scripted(name).await;
    let mut b = Branch::builder()
        .system("Use tools when helpful.")
        .chat_model(model(&server, "gpt-4.1-mini"))
        .tools([common::multiply(), common::lookup_capital()])
        .build()
        .unwrap();
    let r = b
        .operate(
            OperateOptions::new("Compute 6*7 and find the capital of France.")
                .actions(true)
                .response_format(answer_format()),
        )
        .await
        .unwrap();
    assert_eq!(
        r.parsed,
        Parsed::Value(fx.output["return_value"]["value"].clone())
    );
    assert_requests(&server, &fx.requests);
    let mut cmp = Comparer::new(&fx);
    cmp.check(&fx, "/messages", &msg_summary(&b));
    cmp.check(&fx, "/to_dict", &to_dict(&b, &server));
    cmp.finish();
}

#[tokio::test]
async fn parse_direct() {
    let name = "operations/parse_direct";
    let mut fx = fixture(name);
    common::normalise_all(&mut fx.output);
    let server = scripted(name).await;
    let mut b = Branch::builder()
        .chat_model(model(&server, "gpt-4.1-mini"))
        .build()
        .unwrap();
    let text = "Here you go:\n```json\n{\"Answer\": \"42\", \"confidence\": 0.8}\n```";
    let r = b
        .parse(text, ParseOptions::new(answer_format()))
        .await
        .unwrap();
    assert_eq!(r, Parsed::Value(fx.output["return_value"]["value"].clone()));
    assert_eq!(b.messages().len(), 0);
    assert_eq!(server.request_count(), 0);
}

#[tokio::test]
async fn act_direct() {
    let name = "operations/act_direct";
    let mut fx = fixture(name);
    common::normalise_all(&mut fx.output);
    let server = MockServer::start().await;
    let mut b = Branch::builder()
        .chat_model(model(&server, "gpt-4.1-mini"))
        .tool(common::multiply())
        .build()
        .unwrap();
    let call =
        tool_call_from_value(&json!({"function": "multiply", "arguments": {"a": 3, "b": 4}}))
            .unwrap();
    let res = b.act(vec![call], ActOptions::default()).await.unwrap();
    let unknown =
        tool_call_from_value(&json!({"function": "does_not_exist", "arguments": {}})).unwrap();
    let unk = b.act(vec![unknown], ActOptions::default()).await.unwrap();
    let mut cmp = Comparer::new(&fx);
    cmp.check(
        &fx,
        "/responses/0/value",
        &serde_json::to_value(&res[0]).unwrap(),
    );
    cmp.check(
        &fx,
        "/unknown_tool/value/0/value",
        &serde_json::to_value(&unk[0]).unwrap(),
    );
    cmp.check(&fx, "/messages", &msg_summary(&b));
    cmp.check(&fx, "/to_dict", &to_dict(&b, &server));
    cmp.finish();
    assert_eq!(server.request_count(), 0);
}

#[tokio::test]
async fn react_two_rounds() {
    let name = "operations/react_two_rounds";
    let mut fx = fixture(name);
    common::normalise_all(&mut fx.output);
    let server = scripted(name).await;
    let mut b = Branch::builder()
        .system("You reason step by step.")
        .chat_model(model(&server, "gpt-4.1-mini"))
        .tool(common::multiply())
        .build()
        .unwrap();
    let r = b
        .ReAct(ReActOptions::new("What is 6 times 7?").max_extensions(2))
        .await
        .unwrap();
    assert_eq!(r.answer, fx.output["return_value"]["value"]);
    assert_eq!(r.rounds.len(), 3);
    assert_requests(&server, &fx.requests);
    let mut cmp = Comparer::new(&fx);
    cmp.check(&fx, "/messages", &msg_summary(&b));
    cmp.check(&fx, "/to_dict", &to_dict(&b, &server));
    cmp.finish();
}

/// Deviation (docs/compat.md): `run` streams HTTP models over SSE instead
/// of refusing them. What the reference does keep is checked: a
/// `chat_model` given to `run` replaces the branch's chat model.
#[tokio::test]
async fn run_with_api_model_streams_and_installs_chat_model() {
    let server = MockServer::start().await;
    server.push(branch_models::mock::MockReply::text("streamed hi"));
    let mut b = Branch::builder()
        .system("S")
        .chat_model(model(&server, "gpt-4.1-mini"))
        .build()
        .unwrap();
    let other = model(&server, "gpt-4o");
    let msgs: Vec<_> = b
        .run(RunOptions::new("hi").chat_model(other.clone()))
        .collect()
        .await;
    let msgs: Vec<_> = msgs.into_iter().map(Result::unwrap).collect();
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[1].as_assistant_text(), Some("streamed hi"));
    assert!(branch_core::branch::same_model(b.chat_model(), &other));
    assert_eq!(b.messages().len(), 3);
    let body = &server.bodies()[0];
    assert_eq!(body["stream"], true);
    assert_eq!(body["model"], "gpt-4o");
}

/// The reference's in-process `scripted` CLI provider, as a CLI agent
/// script speaking Claude Code's stream-json: two text deltas and a result.
/// Deviation (docs/compat.md): messages are appended when the stream
/// completes, so `in_branch` is checked after the stream, not at yield.
#[cfg(unix)]
#[tokio::test]
async fn run_scripted_cli_stream() {
    let name = "operations/run_scripted_cli_stream";
    let fx = fixture(name);
    let dir = common::temp_dir("run-fx");
    let script = dir.join("scripted.sh");
    common::executable(
        &script,
        "#!/bin/sh\ncat > /dev/null\n\
         echo '{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"Hel\"}]}}'\n\
         echo '{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"lo!\"}]}}'\n\
         echo '{\"type\":\"result\",\"result\":\"Hello!\"}'\n",
    );
    let server = MockServer::start().await;
    let mut b = Branch::builder()
        .system("Streamer.")
        .chat_model(model(&server, "scripted-1"))
        .build()
        .unwrap();
    let yielded: Vec<_> = b
        .run(RunOptions::new("say hello").cli_command(&script))
        .collect()
        .await;
    let yielded: Vec<_> = yielded.into_iter().map(Result::unwrap).collect();
    let mut cmp = Comparer::new(&fx);
    assert_eq!(yielded.len(), 2);
    for (i, m) in yielded.iter().enumerate() {
        assert_eq!(m.kind().class_name(), fx.output["yielded"][i]["class"]);
        assert!(b.messages().get(&m.id()).is_some());
        cmp.check(
            &fx,
            &format!("/yielded/{i}/message"),
            &m.to_value().unwrap(),
        );
    }
    cmp.check(&fx, "/messages", &msg_summary(&b));
    cmp.check(&fx, "/to_dict/messages", &to_dict(&b, &server)["messages"]);
    cmp.finish();
    assert_eq!(
        yielded[1].element.metadata["api_call_meta"]["payload"],
        fx.requests[0]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Service-level streaming over SSE (no branch involved): the chunks the
/// model yields for the mock's SSE answer.
#[tokio::test]
async fn stream_sse_imodel() {
    use branch_core::model::{ChatMessage, ChatRequest};
    let name = "operations/stream_sse_imodel";
    let fx = fixture(name);
    let server = scripted(name).await;
    let m = model(&server, "gpt-4.1-mini");
    let stream = m
        .stream(ChatRequest::new(vec![ChatMessage::user("stream please")]))
        .await
        .unwrap();
    let chunks: Vec<Value> = stream.map(|c| c.unwrap().to_value()).collect().await;
    let mut cmp = Comparer::new(&fx);
    let expected: Vec<Value> = fx.output["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["value"].clone())
        .collect();
    cmp.check_value("/chunks", &Value::Array(expected), &Value::Array(chunks));
    cmp.finish();
    assert_requests(&server, &fx.requests);
}

/// ReAct's token-usage note: counted on the reference's own request texts,
/// our estimate gives the reference's numbers exactly.
#[tokio::test]
async fn react_token_note_counts_like_the_reference() {
    let fx = fixture("operations/react_two_rounds");
    for req in &fx.requests {
        let msgs = req["messages"].as_array().unwrap();
        let mut contents: Vec<Value> = msgs.iter().map(|m| m["content"].clone()).collect();
        let last = contents.last_mut().unwrap();
        let text = last.as_str().unwrap().to_owned();
        let Some(at) = text.find("\n\nEstimated Current Token Usage: ") else {
            continue;
        };
        let note = &text[at..];
        *last = Value::String(text[..at].to_owned());
        let refs: Vec<&Value> = contents.iter().collect();
        let n = branch_operations::request_token_estimate(&refs).await;
        assert_eq!(
            branch_messages::token_usage_note(n, Some(1_000_000)),
            note,
            "token estimate"
        );
    }
}

/// A provider with fixed text and, optionally, a writeback that records
/// what it was given or fails (the reference's synchronous and
/// non-callable writebacks fail, contained, at await).
struct StaticProvider {
    text: &'static str,
    writeback: Writeback,
    seen: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
}

#[derive(PartialEq)]
enum Writeback {
    None,
    Records,
    Fails,
}

#[async_trait::async_trait]
impl branch_core::ContextProvider for StaticProvider {
    async fn provide(
        &self,
        _branch: &Branch,
        _instruction: &branch_core::Message,
    ) -> Result<Option<String>, branch_core::ProviderError> {
        Ok(Some(self.text.into()))
    }

    fn has_writeback(&self) -> bool {
        self.writeback != Writeback::None
    }

    async fn writeback(
        &self,
        _branch: &Branch,
        responses: &[branch_core::Message],
    ) -> Result<Option<u64>, branch_core::ProviderError> {
        if self.writeback == Writeback::Fails {
            return Err(branch_core::ProviderError(
                "writeback is not awaitable".into(),
            ));
        }
        let batch: Vec<Value> = responses
            .iter()
            .filter_map(|m| match &m.content {
                branch_core::message::MessageContent::ActionResponse(r) => Some(json!({
                    "class": "ActionResponseModel",
                    "value": {"function": r.function, "arguments": r.arguments, "output": r.output}
                })),
                _ => None,
            })
            .collect();
        let n = batch.len() as u64;
        self.seen.lock().unwrap().push(Value::Array(batch));
        Ok(Some(n))
    }
}

#[tokio::test]
async fn context_providers_gather_writeback_after_operate() {
    use branch_providers::{ProviderOptions, ProvidersExt};
    let name = "context_providers/gather_writeback_after_operate";
    let mut fx = fixture(name);
    common::normalise_all(&mut fx.output);
    let server = scripted(name).await;
    let mut b = Branch::builder()
        .system("S")
        .chat_model(model(&server, "gpt-4.1-mini"))
        .tool(common::multiply())
        .build()
        .unwrap();
    let wb1 = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let wb2 = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let none = || std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let providers = [
        ("plain", "plain", Writeback::None, none()),
        ("none_wb", "none-wb", Writeback::None, none()),
        ("sync_wb", "sync-wb", Writeback::Fails, none()),
        ("noncallable", "noncallable", Writeback::Fails, none()),
        ("wb1", "wb1 text", Writeback::Records, wb1.clone()),
        ("wb2", "wb2 text", Writeback::Records, wb2.clone()),
    ];
    for (n, text, writeback, seen) in providers {
        b.providers().register_with(
            StaticProvider {
                text,
                writeback,
                seen,
            },
            ProviderOptions {
                name: Some(n.into()),
                ..ProviderOptions::default()
            },
        );
    }
    let r = b
        .operate(
            OperateOptions::new("Compute both products.")
                .actions(true)
                .response_format(answer_format()),
        )
        .await
        .unwrap();
    assert_eq!(
        r.parsed,
        Parsed::Value(fx.output["return_value"]["value"].clone())
    );
    assert_requests(&server, &fx.requests);
    let mut cmp = Comparer::new(&fx);
    cmp.check(&fx, "/writebacks/wb1", &json!(*wb1.lock().unwrap()));
    cmp.check(&fx, "/writebacks/wb2", &json!(*wb2.lock().unwrap()));
    cmp.check(
        &fx,
        "/registry_stats",
        &serde_json::to_value(b.providers().stats()).unwrap(),
    );
    cmp.check(
        &fx,
        "/report",
        &serde_json::to_value(&*b.last_context_report().unwrap()).unwrap(),
    );
    cmp.check(&fx, "/messages", &msg_summary(&b));
    cmp.finish();
}
