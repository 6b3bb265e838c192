//! `lionagi chat` with a model that reasons: the built binary against a
//! loopback server streaming `reasoning_content` (as DeepSeek, vLLM and
//! llama.cpp do). Piped, the reasoning is plain text before the answer;
//! `--json` carries it in its own field with the normalised finish reason;
//! the stored conversation keeps it, and `branch show` sums the reasoning
//! and cached tokens.

use std::path::PathBuf;
use std::process::{Output, Stdio};

use branch_models::mock::{MockReply, MockServer};
use serde_json::{Value, json};
use tokio::process::Command;

struct Sandbox {
    dir: PathBuf,
}

impl Sandbox {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("lionagi-reason-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("models")).unwrap();
        Self { dir }
    }

    async fn run(&self, args: &[&str]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_lionagi"));
        c.args(args)
            .current_dir(&self.dir)
            .env("HOME", &self.dir)
            .env("LIONAGI_HOME", self.dir.join("home"))
            .env("LIONAGI_MODEL_DIR", self.dir.join("models"))
            .env("RUST_BACKTRACE", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for var in [
            "OPENAI_API_KEY",
            "LIONAGI_CHAT_PROVIDER",
            "LIONAGI_CHAT_MODEL",
            "LIONAGI_CHAT_ENDPOINT",
            "NO_COLOR",
        ] {
            c.env_remove(var);
        }
        c.output().await.expect("run lionagi")
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A recorded-shape stream: reasoning deltas (one carrying an escape
/// sequence a hostile model might send), then the answer, then usage with
/// cached and reasoning tokens.
fn reasoning_stream() -> MockReply {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "c", "object": "chat.completion.chunk", "model": "r1",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let events = [
        chunk(
            json!({"role": "assistant", "content": null, "reasoning_content": ""}),
            Value::Null,
        ),
        chunk(
            json!({"content": null, "reasoning_content": "Two plus"}),
            Value::Null,
        ),
        chunk(
            json!({"content": null, "reasoning_content": " two\u{1b}[31m is four."}),
            Value::Null,
        ),
        chunk(
            json!({"content": "Four", "reasoning_content": null}),
            Value::Null,
        ),
        chunk(json!({"content": "."}), json!("stop")),
        json!({"id": "c", "object": "chat.completion.chunk", "choices": [],
            "usage": {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49,
                "prompt_tokens_details": {"cached_tokens": 32},
                "completion_tokens_details": {"reasoning_tokens": 6}}}),
    ];
    let mut body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    body.push_str("data: [DONE]\n\n");
    MockReply::raw(200, &body)
        .header("content-type", "text/event-stream")
        .chunk_size(5)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn piped_chat_prints_reasoning_plain_before_the_answer() {
    let server = MockServer::start().await;
    server.push(reasoning_stream());
    let sb = Sandbox::new();
    let url = server.base_url();
    let out = sb
        .run(&["chat", "--base-url", &url, "--model", "r1", "2+2?"])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Not a terminal: no escape codes at all, the model's own dropped.
    assert_eq!(text(&out.stdout), "Two plus two[31m is four.\n\nFour.\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_carries_reasoning_and_finish_apart_and_the_store_keeps_them() {
    let server = MockServer::start().await;
    server.push(reasoning_stream());
    let sb = Sandbox::new();
    let db = sb.dir.join("chat.db").display().to_string();
    let url = server.base_url();
    let out = sb
        .run(&[
            "chat",
            "--json",
            "--base-url",
            &url,
            "--model",
            "r1",
            "--store",
            &db,
            "2+2?",
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout:?}");
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["reply"], "Four.");
    assert_eq!(v["reasoning"], "Two plus two\u{1b}[31m is four.");
    assert_eq!(v["finish_reason"], "stop");
    assert_eq!(
        v["usage"]["completion_tokens_details"]["reasoning_tokens"],
        6
    );

    let id = v["branch_id"].as_str().unwrap();
    let show = sb.run(&["branch", "show", id, "--store", &db]).await;
    assert!(show.status.success(), "{}", text(&show.stderr));
    let shown = text(&show.stdout);
    assert!(
        shown.contains("8 in / 9 out / 32 cached / 6 reasoning"),
        "{shown}"
    );

    let export = sb.run(&["branch", "export", id, "--store", &db]).await;
    assert!(export.status.success(), "{}", text(&export.stderr));
    let saved: Value = serde_json::from_slice(&export.stdout).unwrap();
    let reply = saved["messages"]["collections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| {
            m["metadata"]["lion_class"]
                .as_str()
                .unwrap_or_default()
                .ends_with("AssistantResponse")
        })
        .expect("the reply is stored");
    assert_eq!(
        reply["metadata"]["reasoning"],
        json!([{"type": "thinking", "text": "Two plus two\u{1b}[31m is four."}])
    );
}

/// One SSE body of OpenAI Responses events.
fn responses_sse(events: &[Value]) -> MockReply {
    let body: String = events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect();
    MockReply::raw(200, &body)
        .header("content-type", "text/event-stream")
        .chunk_size(7)
}

/// A reply of the Responses API streaming a reasoning summary, then `text`.
fn responses_reply(id: &str, text: &str) -> MockReply {
    let reasoning = json!({"type": "reasoning", "id": format!("rs_{id}"),
        "summary": [{"type": "summary_text", "text": "Add them."}], "encrypted_content": "enc"});
    let message = json!({"type": "message", "id": format!("msg_{id}"), "role": "assistant",
        "status": "completed", "content": [{"type": "output_text", "text": text}]});
    let response = |status: &str, output: Value| {
        json!({"id": format!("resp_{id}"), "object": "response", "status": status,
            "model": "gpt-5-2025-08-07", "output": output,
            "usage": {"input_tokens": 20, "output_tokens": 9, "total_tokens": 29,
                "output_tokens_details": {"reasoning_tokens": 5}}})
    };
    responses_sse(&[
        json!({"type": "response.created", "sequence_number": 0,
            "response": response("in_progress", json!([]))}),
        json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
            "item": {"type": "reasoning", "id": format!("rs_{id}"), "summary": []}}),
        json!({"type": "response.reasoning_summary_text.delta", "sequence_number": 2,
            "item_id": format!("rs_{id}"), "output_index": 0, "summary_index": 0,
            "delta": "Add them."}),
        json!({"type": "response.output_item.done", "sequence_number": 3, "output_index": 0,
            "item": reasoning}),
        json!({"type": "response.output_text.delta", "sequence_number": 4,
            "item_id": format!("msg_{id}"), "output_index": 1, "content_index": 0, "delta": text}),
        json!({"type": "response.completed", "sequence_number": 5,
            "response": response("completed", json!([reasoning, message]))}),
    ])
}

/// `--endpoint responses`: OpenAI's Responses API, streamed; the reasoning
/// summary shows before the answer, the encrypted reasoning goes back on
/// the next turn of the stored conversation, which resumes on the same
/// endpoint without the flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_responses_endpoint_streams_reasoning_and_resumes_on_it() {
    let server = MockServer::start().await;
    server.script([responses_reply("1", "Four."), responses_reply("2", "Six.")]);
    let sb = Sandbox::new();
    let db = sb.dir.join("chat.db").display().to_string();
    let url = server.base_url();
    let out = sb
        .run(&[
            "chat",
            "--base-url",
            &url,
            "--model",
            "gpt-5",
            "--endpoint",
            "responses",
            "--store",
            &db,
            "--name",
            "r",
            "2+2?",
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "Add them.\n\nFour.\n");
    assert!(
        text(&out.stderr).contains("--resume r --model gpt-5 --base-url"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("--endpoint responses"),
        "{}",
        text(&out.stderr)
    );
    let out = sb
        .run(&[
            "chat",
            "--store",
            &db,
            "--resume",
            "r",
            "--allow-local-network",
            "3+3?",
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "Add them.\n\nSix.\n");

    let requests = server.requests();
    assert!(requests.iter().all(|r| r.path == "/v1/responses"));
    let question = |q: &str| {
        json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": format!("Instruction: {q}")}]})
    };
    assert_eq!(
        requests[0].body,
        json!({"model": "gpt-5", "input": [question("2+2?")], "stream": true,
            "store": false, "include": ["reasoning.encrypted_content"]})
    );
    let second = &requests[1].body;
    let input = second["input"].as_array().unwrap();
    assert_eq!(input[0], question("2+2?"));
    assert_eq!(input[1]["type"], "reasoning");
    assert_eq!(input[1]["encrypted_content"], "enc");
    assert_eq!(input.last().unwrap(), &question("3+3?"));
}

/// `--resume` with `--endpoint` alone moves the stored model to another
/// endpoint of its provider: the same model, server and request fields
/// (chat's `max_tokens` read as the Responses API's `max_output_tokens`),
/// where it used to pick the default model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_alone_on_resume_keeps_the_stored_model() {
    let server = MockServer::start().await;
    server.push(MockReply::text("Four."));
    server.push(responses_reply("1", "Six."));
    let sb = Sandbox::new();
    let db = sb.dir.join("chat.db").display().to_string();
    let url = server.base_url();
    let out = sb
        .run(&[
            "chat",
            "--base-url",
            &url,
            "--model",
            "gpt-5",
            "--max-tokens",
            "50",
            "--store",
            &db,
            "--name",
            "r",
            "2+2?",
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = sb
        .run(&[
            "chat",
            "--store",
            &db,
            "--resume",
            "r",
            "--allow-local-network",
            "--endpoint",
            "responses",
            "3+3?",
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "Add them.\n\nSix.\n");
    let requests = server.requests();
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(requests[0].body["max_tokens"], 50);
    assert_eq!(requests[1].path, "/v1/responses");
    let body = &requests[1].body;
    assert_eq!(body["model"], "gpt-5");
    assert_eq!(body["max_output_tokens"], 50);
    assert!(body.get("stream_options").is_none(), "{body}");
    // The first turn, from the store, then the question.
    let input = body["input"].as_array().unwrap();
    assert_eq!(input.len(), 3, "{body}");
}
