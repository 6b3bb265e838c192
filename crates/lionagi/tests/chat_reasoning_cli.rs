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
