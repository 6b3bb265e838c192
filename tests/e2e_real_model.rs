//! End-to-end tests of the public API against a real model server:
//! llama.cpp's OpenAI-compatible server (`scripts/llama_server.py`) with
//! SmolLM2-135M-Instruct.
//!
//! Skipped, saying why, unless `LIONAGI_E2E_BASE_URL` is set (for example
//! `http://127.0.0.1:8089/v1`); `LIONAGI_E2E_MODEL` names the served model
//! (default `smollm2`). With `LIONAGI_E2E_REQUIRED=1` (as in CI) a missing
//! server is a failure instead of a skip.
//!
//! What is asserted is protocol and shape: requests accepted, replies
//! recorded as whole turns, structures of the requested schema, tool
//! results carried into the next request, conversations that survive the
//! store. Content is asserted only weakly ("Paris"), and never that a 135M
//! model chooses to call a tool: the tool round is scripted.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use lionagi::actions::FunctionTool;
use lionagi::core::model::{ChatRequest, ChatResponse, ChatStream, ModelError};
use lionagi::operations::{Parsed, Reply};
use lionagi::prelude::*;
use lionagi::session::{BranchStore, Session, SqliteStore, share};
use serde_json::{Value, json};

/// The server's base URL and model name, or `None` (with the reason
/// printed) when the suite is not configured.
fn server() -> Option<(String, String)> {
    lionagi::models::mock::e2e_server()
}

/// A connected model of `provider` at the test server: greedy, short
/// replies, plus any extra default request fields.
fn model_with(
    provider: &str,
    url: &str,
    name: &str,
    max_tokens: u32,
    extra: &[(&str, Value)],
) -> Arc<dyn ChatModel> {
    let mut builder = ModelConfig::builder()
        .provider(provider)
        .model(name)
        .base_url(url)
        .allow_local_network(true)
        // A loaded 2-core machine serves a few tokens a second at worst.
        .timeout(Duration::from_secs(300))
        .kwarg("temperature", 0)
        .kwarg("max_tokens", max_tokens);
    for (k, v) in extra {
        builder = builder.kwarg(k, v.clone());
    }
    let config = builder.build().expect("model configuration");
    Arc::new(IModel::with_api_key(config, "e2e-dummy-key").expect("model"))
}

fn model(url: &str, name: &str) -> Arc<dyn ChatModel> {
    model_with("openai", url, name, 48, &[])
}

/// llama.cpp's grammar-constrained output for `schema`.
fn json_schema_format(name: &str, schema: &Value) -> Value {
    json!({"type": "json_schema", "json_schema": {"name": name, "schema": schema}})
}

/// The system prompt under which this small model answers plainly (with
/// its template's default one it drifts into French).
const SYSTEM: &str = "You are a helpful assistant.";

fn branch_with(model: Arc<dyn ChatModel>) -> Branch {
    Branch::builder()
        .system(SYSTEM)
        .chat_model(model)
        .build()
        .expect("branch")
}

fn kinds(branch: &Branch) -> Vec<&'static str> {
    branch
        .messages()
        .iter()
        .map(|m| m.kind().class_name())
        .collect()
}

/// The payloads of the API calls logged on `branch`, in order.
fn logged_payloads(branch: &Branch) -> Vec<Value> {
    branch
        .logger()
        .logs()
        .iter()
        .filter_map(|l| l.content().get("payload").cloned())
        .collect()
}

fn last_reply(branch: &Branch) -> String {
    branch
        .messages()
        .iter()
        .rev()
        .find_map(|m| m.as_assistant_text())
        .expect("a recorded reply")
        .to_owned()
}

#[tokio::test]
async fn communicate_answers_and_records_one_turn() {
    let Some((url, name)) = server() else { return };
    let mut branch = branch_with(model(&url, &name));
    let reply = branch
        .communicate(CommunicateOptions::new("What is the capital of France?"))
        .await
        .expect("communicate");
    let Reply::Text(text) = reply else {
        panic!("a plain turn gives text, got {reply:?}")
    };
    assert!(text.to_lowercase().contains("paris"), "reply: {text:?}");
    assert_eq!(
        kinds(&branch),
        ["System", "Instruction", "AssistantResponse"]
    );
    assert_eq!(last_reply(&branch), text);
    let response = branch.messages().iter().last().unwrap();
    let raw = &response.element.metadata["model_response"];
    assert!(raw["choices"].is_array(), "raw provider reply kept: {raw}");
    assert!(raw["usage"]["completion_tokens"].as_u64() > Some(0));
    // The logged request is what the server received: as the reference
    // does, the system prompt is rendered into the first instruction.
    let payloads = logged_payloads(&branch);
    assert_eq!(payloads.len(), 1);
    let sent = &payloads[0];
    assert_eq!(sent["model"], json!(name));
    assert_eq!(sent["max_tokens"], 48);
    assert_eq!(sent["messages"].as_array().map(Vec::len), Some(1), "{sent}");
    assert_eq!(sent["messages"][0]["role"], "user");
    let content = sent["messages"][0]["content"].as_str().unwrap();
    assert!(content.contains(SYSTEM) && content.contains("capital of France"));
}

#[tokio::test]
async fn run_streams_a_turn_over_sse_and_commits_it() {
    let Some((url, name)) = server() else { return };
    let mut branch = branch_with(model(&url, &name));
    let mut streamed = Vec::new();
    {
        let mut stream = branch.run(RunOptions::new("Name three colours."));
        while let Some(message) = stream.next().await {
            streamed.push(message.expect("streamed message"));
        }
    }
    let streamed_kinds: Vec<&str> = streamed.iter().map(|m| m.kind().class_name()).collect();
    assert_eq!(streamed_kinds, ["Instruction", "AssistantResponse"]);
    let text = streamed[1].as_assistant_text().unwrap();
    assert!(!text.trim().is_empty());
    // The turn was committed whole, with the messages that were streamed.
    assert_eq!(
        kinds(&branch),
        ["System", "Instruction", "AssistantResponse"]
    );
    let ids: Vec<_> = branch.messages().iter().skip(1).map(|m| m.id()).collect();
    assert_eq!(ids, [streamed[0].id(), streamed[1].id()]);
    assert_eq!(last_reply(&branch), text);
}

/// The schema both `operate` and the server's grammar use (bounded
/// strings keep the reply whole within the token budget).
fn capital_schema() -> Value {
    json!({
        "title": "Capital",
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "country": {"type": "string", "maxLength": 40},
            "city": {"type": "string", "maxLength": 40}
        },
        "required": ["country", "city"]
    })
}

#[tokio::test]
async fn operate_with_a_json_schema_gives_that_structure() {
    let Some((url, name)) = server() else { return };
    let mut branch = branch_with(model_with("openai", &url, &name, 64, &[]));
    let schema = capital_schema();
    let out = branch
        .operate(
            OperateOptions::new("What is the capital of France?")
                .response_format(ResponseFormat::Schema(schema.clone()))
                .field("response_format", json_schema_format("Capital", &schema)),
        )
        .await
        .expect("operate");
    let structured = out.structured.expect("a structured reply");
    let obj = structured.as_object().expect("an object");
    let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["city", "country"], "{structured}");
    assert!(obj.values().all(Value::is_string), "{structured}");
    assert!(matches!(&out.parsed, Parsed::Value(v) if *v == structured));
    // The schema went to the server as its response format, and the
    // recorded reply is the JSON the grammar produced.
    let payloads = logged_payloads(&branch);
    assert_eq!(
        payloads[0]["response_format"]["json_schema"]["schema"],
        schema
    );
    let recorded: Value = serde_json::from_str(&last_reply(&branch)).expect("JSON reply");
    assert_eq!(recorded, structured);
}

#[tokio::test]
async fn parse_turns_prose_into_the_structure_through_the_model() {
    let Some((url, name)) = server() else { return };
    let schema = capital_schema();
    // The parse model is held to the schema by the server's grammar.
    let parser = model_with(
        "openai",
        &url,
        &name,
        64,
        &[("response_format", json_schema_format("Capital", &schema))],
    );
    let mut branch = Branch::builder()
        .system(SYSTEM)
        .chat_model(model(&url, &name))
        .parse_model(parser)
        .build()
        .unwrap();
    let parsed = branch
        .parse(
            "Paris is the capital city of France.",
            ParseOptions::new(ResponseFormat::Schema(schema)).max_retries(1),
        )
        .await
        .expect("parse");
    let Parsed::Value(value) = parsed else {
        panic!("prose should parse through the model, got {parsed:?}")
    };
    assert!(
        value["city"].is_string() && value["country"].is_string(),
        "{value}"
    );
    // The prose could not parse locally: the model was asked, and parse
    // recorded nothing in the conversation.
    let payloads = logged_payloads(&branch);
    assert_eq!(payloads.len(), 1, "one repair call");
    assert!(
        payloads[0]
            .to_string()
            .contains("Paris is the capital city of France."),
        "the text to format was sent"
    );
    assert_eq!(kinds(&branch), ["System"]);
}

/// Two integers.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Pair {
    /// First factor.
    a: i64,
    /// Second factor.
    b: i64,
}

fn multiply_tool() -> Arc<dyn Tool> {
    FunctionTool::infallible("multiply", |p: Pair| async move { p.a * p.b })
        .expect("tool")
        .with_description("Multiply two integers and return the product.")
        .into_tool()
}

/// A model whose first reply is scripted (a ReAct round that calls
/// `multiply`) and whose later calls go to the real server, each request
/// recorded as its exact payload.
#[derive(Debug)]
struct ScriptedFirstRound {
    real: Arc<dyn ChatModel>,
    calls: Mutex<Vec<Value>>,
}

const SCRIPTED_ROUND: &str = r#"{"analysis": "Multiply 6 by 7 with the tool.",
 "extension_needed": false,
 "reason": {"title": "Use the tool", "content": "multiply computes it", "confidence_score": 0.9},
 "action_required": true,
 "action_requests": [{"function": "multiply", "arguments": {"a": 6, "b": 7}}]}"#;

#[async_trait]
impl ChatModel for ScriptedFirstRound {
    fn config(&self) -> &ModelConfig {
        self.real.config()
    }

    fn duplicate(&self) -> Arc<dyn ChatModel> {
        self.real.duplicate()
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        let first = {
            let mut calls = self.calls.lock().unwrap();
            calls.push(self.real.request_payload(&request, false));
            calls.len() == 1
        };
        if first {
            return Ok(ChatResponse::from_raw(json!({
                "model": "scripted",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": SCRIPTED_ROUND}}]
            })));
        }
        self.real.chat(request).await
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        self.real.stream(request).await
    }
}

#[tokio::test]
async fn react_feeds_a_tool_result_back_to_the_real_model() {
    let Some((url, name)) = server() else { return };
    // A bounded answer keeps the reply short and whole; it is valid under
    // ReAct's default answer schema (`{answer: string | null}`), which the
    // final round parses with.
    let answer_grammar = json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {"answer": {"type": "string", "maxLength": 40}},
        "required": ["answer"]
    });
    let real = model_with("openai", &url, &name, 64, &[]);
    let scripted = Arc::new(ScriptedFirstRound {
        real,
        calls: Mutex::new(Vec::new()),
    });
    let mut branch = branch_with(scripted.clone());
    branch
        .acts_mut()
        .register(multiply_tool(), false)
        .expect("register");
    let outcome = branch
        .ReAct(
            ReActOptions::new("What is 6 times 7?")
                .extension_allowed(false)
                // Held to the final answer's schema by the server's grammar.
                .field(
                    "response_format",
                    json_schema_format("Analysis", &answer_grammar),
                ),
        )
        .await
        .expect("ReAct");

    // Round one (scripted) asked for the tool, and it ran.
    assert_eq!(outcome.rounds.len(), 2);
    assert!(outcome.rounds[1].is_final);
    let responses: Vec<&Message> = branch
        .messages()
        .iter()
        .filter(|m| m.kind() == MessageKind::ActionResponse)
        .collect();
    assert_eq!(responses.len(), 1);
    let response = responses[0].to_value().unwrap();
    assert_eq!(response["content"]["function"], "multiply");
    assert_eq!(response["content"]["output"], 42);

    // The next request, to the real server, carried the tool's result and
    // got an answer of the requested shape back.
    let calls = scripted.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 2, "the scripted round, then the final answer");
    let final_request = calls[1].to_string();
    assert!(
        final_request.contains("multiply") && final_request.contains("42"),
        "the tool result went to the model: {final_request}"
    );
    let answered: Value = serde_json::from_str(&outcome.rounds[1].text)
        .unwrap_or_else(|e| panic!("a JSON answer ({e}): {:?}", outcome.rounds[1].text));
    assert!(answered["answer"].is_string(), "{answered}");
    assert_eq!(
        outcome.answer, answered["answer"],
        "ReAct's answer is the parsed one"
    );
    assert_eq!(
        branch.messages().iter().last().unwrap().kind(),
        MessageKind::AssistantResponse
    );
}

#[tokio::test]
async fn anthropic_provider_talks_to_the_messages_endpoint() {
    let Some((url, name)) = server() else { return };
    let mut branch = branch_with(model_with("anthropic", &url, &name, 48, &[]));
    let reply = branch
        .communicate(CommunicateOptions::new("What is the capital of France?"))
        .await
        .expect("communicate over /v1/messages");
    let text = reply.text().expect("text").to_owned();
    assert!(!text.trim().is_empty());
    let response = branch.messages().iter().last().unwrap();
    let raw = &response.element.metadata["model_response"];
    assert_eq!(raw["type"], "message", "a native Messages reply: {raw}");
    assert_eq!(last_reply(&branch), text);
    assert!(raw["content"].is_array());
    // The Anthropic dialect: no system role among the messages, and the
    // required `max_tokens` sent.
    let sent = &logged_payloads(&branch)[0];
    assert_eq!(sent["max_tokens"], 48, "{sent}");
    let messages = sent["messages"].as_array().unwrap();
    assert!(messages.iter().all(|m| m["role"] != "system"), "{sent}");
    assert!(
        messages[0]["content"].to_string().contains(SYSTEM),
        "{sent}"
    );

    // And a streamed turn over the same dialect.
    let mut streamed = 0;
    {
        let mut stream = branch.run(RunOptions::new("Say hello."));
        while let Some(message) = stream.next().await {
            message.expect("streamed message");
            streamed += 1;
        }
    }
    assert_eq!(streamed, 2);
    assert_eq!(branch.messages().len(), 5);
    assert!(!last_reply(&branch).trim().is_empty());
}

#[tokio::test]
async fn a_session_saved_reloaded_and_continued() {
    let Some((url, name)) = server() else { return };
    let dir = std::env::temp_dir().join(format!("lionagi-e2e-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("conversations.db");

    let mut handles = Vec::new();
    let mut questions = std::collections::HashMap::new();
    for (label, question) in [
        ("geography", "What is the capital of France?"),
        ("colours", "Name a colour."),
    ] {
        let branch = Branch::builder()
            .system(SYSTEM)
            .name(label)
            .chat_model(model(&url, &name))
            .build()
            .unwrap();
        questions.insert(branch.id(), question);
        handles.push(share(branch));
    }
    let mut builder = Session::builder();
    for h in &handles {
        builder = builder.branch(h.clone());
    }
    let session = builder.build().await.expect("session");
    assert_eq!(session.len(), 2);
    // One turn on each branch, run concurrently by the session.
    let ids = session.branch_ids();
    let runs = session
        .run_each(&ids, 2, |id, h| {
            let question = questions[&id];
            async move {
                h.lock()
                    .await
                    .communicate(CommunicateOptions::new(question))
                    .await
            }
        })
        .await
        .expect("run_each");
    assert_eq!(runs.len(), 2);
    for run in runs {
        let reply = run.result.expect("task").expect("turn");
        assert!(reply.text().is_some_and(|t| !t.trim().is_empty()));
    }

    let store = SqliteStore::open(&db).await.expect("store");
    let mut saved = Vec::new();
    for h in &handles {
        let b = h.lock().await;
        assert_eq!(kinds(&b), ["System", "Instruction", "AssistantResponse"]);
        assert_eq!(b.owning_session(), Some(session.id()));
        store.save(&b).await.expect("save");
        saved.push((b.id(), b.to_dict(&ToDictOptions::default()).unwrap()));
    }
    drop(store);

    // A fresh handle on the file sees both conversations as they were.
    let store = SqliteStore::open(&db).await.expect("reopen");
    let listed = store.list().await.expect("list");
    assert_eq!(listed.len(), 2);
    let mut reloaded = Vec::new();
    for (id, dict) in &saved {
        let b = store.load(*id).await.expect("load");
        let mut back = b.to_dict(&ToDictOptions::default()).unwrap();
        // A stored model never regains the loopback permission (by design,
        // docs/compat.md); everything else comes back as it was saved.
        let permission = "/chat_model/endpoint/config/allow_local_network";
        assert_eq!(back.pointer(permission), Some(&json!(false)));
        *back.pointer_mut(permission).unwrap() = json!(true);
        assert_eq!(&back, dict);
        reloaded.push(b);
    }

    // Continue the first one: keys and the loopback permission are never
    // stored, so the live model is attached again.
    let mut b = reloaded.remove(0);
    let before = b.messages().len();
    let last_reply_before = last_reply(&b);
    b.set_chat_model(model(&url, &name));
    let reply = b
        .communicate(CommunicateOptions::new("And the capital of Italy?"))
        .await
        .expect("continued turn");
    assert!(reply.text().is_some_and(|t| !t.trim().is_empty()));
    assert_eq!(b.messages().len(), before + 2);
    // The continued request carried the earlier turn as history.
    let payloads = logged_payloads(&b);
    assert_eq!(payloads.len(), 2, "the stored call's log, then the new one");
    let sent = &payloads[1];
    let history = sent["messages"].as_array().unwrap();
    assert_eq!(history.len(), 3, "first Q, first A, new Q: {sent}");
    assert!(
        history[1]["content"].as_str() == Some(&*last_reply_before),
        "{sent}"
    );
    let new: Vec<Message> = b.messages().iter().skip(before).cloned().collect();
    store.append_turn(b.id(), &new).await.expect("append turn");
    let again = store.load(b.id()).await.expect("load again");
    assert_eq!(
        again.to_dict(&ToDictOptions::default()).unwrap()["messages"],
        b.to_dict(&ToDictOptions::default()).unwrap()["messages"]
    );

    drop(store);
    drop(session);
    std::fs::remove_dir_all(&dir).ok();
}
