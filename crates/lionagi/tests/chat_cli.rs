//! `lionagi chat` end to end: the built binary against the loopback mock
//! server (one-shot, streaming, `--json`, store and resume, piped
//! conversations, error messages, Ctrl-C), on OpenAI chat completions
//! and on Anthropic Messages.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use branch_models::mock::{MockReply, MockServer};
use lionagi::session::store::{BranchStore, SqliteStore};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin, Command};

/// A private directory: home, working directory and model directory of
/// the command, so no local setting or history leaks in.
struct Sandbox {
    dir: PathBuf,
}

impl Sandbox {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("lionagi-chat-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("models")).unwrap();
        Self { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_lionagi"));
        c.arg("chat")
            .args(args)
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
            "ANTHROPIC_API_KEY",
            "LIONAGI_CHAT_PROVIDER",
            "LIONAGI_CHAT_MODEL",
            "LIONAGI_CHAT_ENDPOINT",
        ] {
            c.env_remove(var);
        }
        c
    }

    async fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().await.expect("run lionagi")
    }

    /// `lionagi chat ARGS` started with `line` written to its stdin, which
    /// stays open for more.
    async fn start_with_line(&self, args: &[&str], line: &str) -> (Child, ChildStdin) {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .spawn()
            .expect("spawn lionagi");
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(line.as_bytes()).await.unwrap();
        pipe.flush().await.unwrap();
        (child, pipe)
    }

    async fn run_with_stdin(&self, args: &[&str], stdin: &str) -> Output {
        let (child, pipe) = self.start_with_line(args, stdin).await;
        drop(pipe);
        child.wait_with_output().await.unwrap()
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

/// The role/content pairs of a request.
fn conversation(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(r, c)| ((*r).to_owned(), (*c).to_owned()))
        .collect()
}

async fn stored_messages(db: &str) -> Vec<usize> {
    let store = SqliteStore::open(db).await.expect("open store");
    let mut counts = Vec::new();
    for b in store.list().await.unwrap() {
        counts.push(store.load(b.id).await.unwrap().messages().len());
    }
    counts
}

/// The stored logs of the store's one conversation: the text of each.
async fn stored_logs(db: &str) -> Vec<String> {
    let store = SqliteStore::open(db).await.expect("open store");
    let list = store.list().await.unwrap();
    assert_eq!(list.len(), 1);
    let branch = store.load(list[0].id).await.unwrap();
    branch
        .logs()
        .iter()
        .map(|l| serde_json::to_string(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shot_prints_the_reply_and_sends_system_and_question() {
    let server = MockServer::start().await;
    server.push(MockReply::text("Four.").chunk_size(2));
    let sb = Sandbox::new();
    let url = server.base_url();
    let out = sb
        .run(&[
            "--base-url",
            &url,
            "--model",
            "test-model",
            "--system",
            "Be brief.",
            "--max-tokens",
            "20",
            "What is 2+2?",
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "Four.\n");
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(
        requests[0].header("authorization"),
        None,
        "no key is set, so none is sent"
    );
    assert_eq!(
        requests[0].body,
        json!({
            // The system prompt folds into the first instruction, as
            // the reference sends it.
            "messages": [
                {"role": "user", "content": "Guidance: Be brief.\nInstruction: What is 2+2?"}
            ],
            "model": "test-model",
            "max_tokens": 20,
            "stream_options": {"include_usage": true},
            "stream": true
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_is_printed_as_it_arrives_even_when_the_stream_then_fails() {
    let server = MockServer::start().await;
    // Four events of three characters, then the connection closes.
    server.push(
        MockReply::text("The answer is forty-two.")
            .chunk_size(3)
            .truncated_after(5),
    );
    let sb = Sandbox::new();
    let db = sb.path("chat.db");
    let url = server.base_url();
    let out = sb
        .run(&["--base-url", &url, "--store", &db, "Tell me."])
        .await;
    assert_eq!(out.status.code(), Some(1));
    let shown = text(&out.stdout);
    assert!(
        !shown.trim().is_empty() && "The answer is forty-two.".starts_with(shown.trim_end()),
        "the deltas that arrived were printed: {shown:?}"
    );
    assert_ne!(shown.trim_end(), "The answer is forty-two.");
    assert!(
        text(&out.stderr).starts_with("lionagi: "),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        stored_messages(&db).await,
        Vec::<usize>::new(),
        "nothing stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_mode_prints_one_object_per_turn_and_no_streamed_text() {
    let server = MockServer::start().await;
    server.push(MockReply::text("Paris.").chunk_size(2));
    let sb = Sandbox::new();
    let url = server.base_url();
    let out = sb
        .run(&[
            "--json",
            "--base-url",
            &url,
            "--model",
            "m1",
            "Capital of France?",
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout:?}");
    let v: Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(v["reply"], "Paris.");
    assert_eq!(v["model"], "openai/m1");
    assert!(uuid::Uuid::parse_str(v["branch_id"].as_str().unwrap()).is_ok());
    // One model call: its usage as the provider reported it.
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18})
    );
    assert_eq!(v["replies"], 1);
    assert_eq!(text(&out.stderr), "");

    // Errors are JSON too, on stderr.
    let out = sb.run(&["--json", "--temperature", "warm", "x"]).await;
    assert_eq!(out.status.code(), Some(2));
    let e: Value = serde_json::from_str(text(&out.stderr).trim()).expect("JSON error");
    assert_eq!(e["error"]["kind"], "usage");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--temperature")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_conversation_resumes_with_its_history() {
    let server = MockServer::start().await;
    server.script([MockReply::text("Hello, Ada."), MockReply::text("Ada.")]);
    let sb = Sandbox::new();
    let db = sb.path("chat.db");
    let url = server.base_url();
    let first = sb
        .run(&[
            "--base-url",
            &url,
            "--store",
            &db,
            "--name",
            "intro",
            "--system",
            "Be kind.",
            "I am Ada.",
        ])
        .await;
    assert!(first.status.success(), "{}", text(&first.stderr));
    let hint = text(&first.stderr);
    assert!(hint.contains("--resume intro"), "{hint}");
    assert!(hint.contains(&format!("--base-url {url}")), "{hint}");
    assert_eq!(stored_messages(&db).await, vec![3]);

    let second = sb
        .run(&[
            "--base-url",
            &url,
            "--store",
            &db,
            "--resume",
            "intro",
            "Who am I?",
        ])
        .await;
    assert!(second.status.success(), "{}", text(&second.stderr));
    assert_eq!(text(&second.stdout), "Ada.\n");
    assert_eq!(
        conversation(&server.bodies()[1]),
        pairs(&[
            ("user", "Guidance: Be kind.\nInstruction: I am Ada."),
            ("assistant", "Hello, Ada."),
            ("user", "Instruction: Who am I?"),
        ])
    );
    assert_eq!(stored_messages(&db).await, vec![5], "the turn was appended");
    // Each turn's log is stored with it: the second holds the request
    // that carried the history.
    let logs = stored_logs(&db).await;
    assert_eq!(logs.len(), 2, "{logs:?}");
    assert!(logs[0].contains("I am Ada.") && !logs[0].contains("Who am I?"));
    assert!(logs[1].contains("Who am I?") && logs[1].contains("Hello, Ada."));

    // A name names one conversation.
    let again = sb
        .run(&["--base-url", &url, "--store", &db, "--name", "intro", "Hi"])
        .await;
    assert_eq!(again.status.code(), Some(2));
    assert!(
        text(&again.stderr).contains("continue it with --resume intro"),
        "{}",
        text(&again.stderr)
    );
    assert_eq!(server.request_count(), 2);
}

/// A hostile server's escape sequences never reach the terminal: the
/// reply is shown without control characters (but its line breaks and
/// tabs), and so is an error's message; the stored conversation and
/// `--json` keep the reply as it came.
#[tokio::test]
async fn a_reply_s_control_characters_are_not_shown() {
    const HOSTILE: &str = "Fine.\x1b]52;c;cHduZWQ=\x07\n\tNext\x1b[2J\u{9b}0m line\rdone";
    let server = MockServer::start().await;
    server.script([
        MockReply::text(HOSTILE).chunk_size(3),
        MockReply::text(HOSTILE),
        MockReply::error(400, "bad\x1b]0;pwned\x07 request"),
    ]);
    let sb = Sandbox::new();
    let url = server.base_url();
    let db = sb.path("c.db");
    let out = sb
        .run(&["--base-url", &url, "--store", &db, "--name", "h", "Hi?"])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "Fine.]52;c;cHduZWQ=\n\tNext[2J0m linedone\n"
    );
    let out = sb
        .run(&[
            "--json",
            "--base-url",
            &url,
            "--store",
            &db,
            "--resume",
            "h",
            "Again?",
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(v["reply"], HOSTILE);
    let store = SqliteStore::open(&db).await.unwrap();
    let id = store.list().await.unwrap()[0].id;
    let stored = store.load(id).await.unwrap();
    let replies: Vec<&str> = stored
        .messages()
        .iter()
        .filter_map(|m| m.as_assistant_text())
        .collect();
    assert_eq!(replies, [HOSTILE, HOSTILE]);
    let out = sb.run(&["--base-url", &url, "Once more?"]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("bad]0;pwned request"), "{err}");
    assert!(!err.chars().any(|c| c.is_control() && c != '\n'), "{err:?}");
}

/// Two sessions on one stored conversation: a turn the other stored
/// between two of this session's is taken in (said on stderr), and this
/// session's next turn follows it, where it used to fail to record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_stored_by_another_session_is_taken_in() {
    let server = MockServer::start().await;
    server.script([
        MockReply::text("One."),
        MockReply::text("Noted."),
        MockReply::text("Two."),
    ]);
    let sb = Sandbox::new();
    let url = server.base_url();
    let db = sb.path("chat.db");
    let (here, mut input) = sb
        .start_with_line(
            &["--base-url", &url, "--store", &db, "--name", "c"],
            "First?\n",
        )
        .await;
    // Its first turn is stored.
    let start = std::time::Instant::now();
    while stored_messages(&db).await != [2] {
        assert!(start.elapsed() < Duration::from_secs(30), "not stored");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let there = sb
        .run(&[
            "--base-url",
            &url,
            "--store",
            &db,
            "--resume",
            "c",
            "Meanwhile.",
        ])
        .await;
    assert!(there.status.success(), "{}", text(&there.stderr));
    input.write_all(b"Second?\n").await.unwrap();
    drop(input);
    let out = here.wait_with_output().await.unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "One.\nTwo.\n");
    assert!(
        text(&out.stderr).contains("changed elsewhere; continuing from it (2 messages more)"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(stored_messages(&db).await, [6]);
    assert_eq!(
        conversation(server.bodies().last().unwrap()),
        pairs(&[
            ("user", "Instruction: First?"),
            ("assistant", "One."),
            ("user", "Instruction: Meanwhile."),
            ("assistant", "Noted."),
            ("user", "Instruction: Second?"),
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn piped_lines_are_turns_of_one_conversation() {
    let server = MockServer::start().await;
    server.script([MockReply::text("One."), MockReply::text("Two.")]);
    let sb = Sandbox::new();
    let url = server.base_url();
    let out = sb
        .run_with_stdin(&["--base-url", &url], "First?\n\n/id\nSecond?\n")
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "One.\nTwo.\n");
    assert!(text(&out.stderr).contains("(not stored)"), "/id answered");
    // Stored, the same two turns keep both logs (the first turn is a
    // whole save, the second an append).
    server.script([MockReply::text("One."), MockReply::text("Two.")]);
    let db = sb.path("piped.db");
    let stored = sb
        .run_with_stdin(&["--base-url", &url, "--store", &db], "First?\nSecond?\n")
        .await;
    assert!(stored.status.success(), "{}", text(&stored.stderr));
    let logs = stored_logs(&db).await;
    assert_eq!(logs.len(), 2, "{logs:?}");
    assert!(logs[1].contains("Second?"));
    let bodies = server.bodies();
    assert_eq!(bodies.len(), 4);
    assert_eq!(
        conversation(&bodies[1]),
        pairs(&[
            ("user", "Instruction: First?"),
            ("assistant", "One."),
            ("user", "Instruction: Second?"),
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_names_its_variable_and_no_key_is_ever_printed() {
    let sb = Sandbox::new();
    let secret = "sk-ant-do-not-print-0123456789";
    let out = sb
        .command(&["--provider", "openai", "--model", "gpt-x", "hi"])
        .env("ANTHROPIC_API_KEY", secret)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("no API key for openai: set OPENAI_API_KEY"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!err.contains(secret) && !text(&out.stdout).contains(secret));

    // A key the server refuses (and echoes) is sent, and not printed.
    let server = MockServer::start().await;
    let key = "sk-test-refused-0123456789";
    server.push(MockReply::error(
        401,
        &format!("Incorrect API key provided: {key}"),
    ));
    let url = server.base_url();
    let out = sb
        .command(&["--base-url", &url, "hi"])
        .env("OPENAI_API_KEY", key)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("refused the API key from OPENAI_API_KEY"),
        "{err}"
    );
    assert!(!err.contains(key), "{err}");
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some(format!("Bearer {key}").as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_named() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/v1");
    let sb = Sandbox::new();
    let out = sb.run(&["--base-url", &url, "hi"]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.starts_with(&format!("lionagi: cannot reach {url}")),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_stores_unknown_conversations_and_no_model_are_explained() {
    let sb = Sandbox::new();
    let server = MockServer::start().await;
    let url = server.base_url();
    let bad = sb.path("no/such/dir/chat.db");
    let out = sb.run(&["--base-url", &url, "--store", &bad, "hi"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains(&bad), "{}", text(&out.stderr));

    let db = sb.path("chat.db");
    let out = sb
        .run(&["--base-url", &url, "--store", &db, "--resume", "nope", "hi"])
        .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("--resume: no branch `nope`"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(server.request_count(), 0);

    let out = sb.run(&["hi"]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("cargo xtask fetch-model") && err.contains("--features embedded"),
        "{err}"
    );
    assert!(err.contains("--base-url"), "{err}");
}

/// The log settings come from the working directory's dotenv files too,
/// and a malformed one stops the command before any request, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_log_setting_in_a_dotenv_file_is_named() {
    let sb = Sandbox::new();
    let server = MockServer::start().await;
    let url = server.base_url();
    std::fs::write(sb.dir.join(".env"), "LOG_CAPACITY=fifty\n").unwrap();
    let out = sb.run(&["--base-url", &url, "hi"]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("field `LOG_CAPACITY` must be a whole number, not `fifty`"),
        "{err}"
    );
    assert_eq!(server.request_count(), 0);
    // The environment's name in another case is the same setting, as in
    // the reference, and wins over the dotenv file.
    let out = sb
        .command(&["--base-url", &url, "hi"])
        .env("log_capacity", "-2")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("field `LOG_CAPACITY` must not be negative, not `-2`"),
        "{err}"
    );
    assert_eq!(server.request_count(), 0);
}

/// The log settings of the working directory's dotenv files apply: logs
/// past the capacity are dumped where they say, and every dump is on disk
/// when the command has exited; the store keeps the logs not dumped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_dumps_follow_the_dotenv_settings_and_are_written_before_exit() {
    let server = MockServer::start().await;
    server.script((1..=5).map(|n| MockReply::text(&format!("A{n}."))));
    let sb = Sandbox::new();
    std::fs::write(
        sb.dir.join(".env"),
        "LOG_CAPACITY=2\nLOG_PERSIST_DIR=dumps\nLOG_EXTENSION=jsonl\n",
    )
    .unwrap();
    let url = server.base_url();
    let db = sb.path("dumps.db");
    let out = sb
        .run_with_stdin(
            &["--base-url", &url, "--store", &db],
            "Q1?\nQ2?\nQ3?\nQ4?\nQ5?\n",
        )
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut dumped = Vec::new();
    for file in std::fs::read_dir(sb.dir.join("dumps")).unwrap() {
        let path = file.unwrap().path();
        assert_eq!(path.extension().unwrap(), "jsonl");
        let lines = std::fs::read_to_string(&path).unwrap();
        assert_eq!(lines.lines().count(), 2, "{lines}");
        dumped.extend(lines.lines().map(str::to_owned));
    }
    // Two dumps of two logs: the first four turns, each once (a turn's
    // log holds its request, whose history names the earlier questions).
    assert_eq!(dumped.len(), 4);
    for n in 1..=4 {
        let (this, next) = (format!("Q{n}?"), format!("Q{}?", n + 1));
        let turn_n = |l: &&String| l.contains(&this) && !l.contains(&next);
        assert_eq!(dumped.iter().filter(turn_n).count(), 1, "{this}");
    }
    let stored = stored_logs(&db).await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert!(stored[0].contains("Q5?"));
}

/// Waits (without a deadline: the test harness has one) until the server
/// has received `n` requests.
async fn requests_reach(server: &MockServer, n: usize) {
    while server.request_count() < n {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn interrupt(pid: u32) {
    let status = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .await
        .expect("kill");
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_mid_turn_keeps_the_conversation_as_it_was() {
    let server = MockServer::start().await;
    server.script([
        MockReply::text("Noted."),
        MockReply::text("too late").delayed(Duration::from_secs(120)),
    ]);
    let sb = Sandbox::new();
    let db = sb.path("chat.db");
    let url = server.base_url();
    let first = sb
        .run(&[
            "--base-url",
            &url,
            "--store",
            &db,
            "--name",
            "c",
            "Remember 7.",
        ])
        .await;
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert_eq!(stored_messages(&db).await, vec![2]);

    let child = sb
        .command(&[
            "--base-url",
            &url,
            "--store",
            &db,
            "--resume",
            "c",
            "And now?",
        ])
        .spawn()
        .unwrap();
    requests_reach(&server, 2).await;
    interrupt(child.id().unwrap()).await;
    let out = child.wait_with_output().await.unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("cancelled"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout), "");
    assert_eq!(
        stored_messages(&db).await,
        vec![2],
        "no partial turn stored"
    );

    // Piped conversation: Ctrl-C mid-turn also ends it with 130, nothing kept.
    server.push(MockReply::text("slow").delayed(Duration::from_secs(120)));
    let (child, pipe) = sb
        .start_with_line(
            &["--base-url", &url, "--store", &db, "--resume", "c"],
            "Still there?\n",
        )
        .await;
    requests_reach(&server, 3).await;
    interrupt(child.id().unwrap()).await;
    let out = child.wait_with_output().await.unwrap();
    drop(pipe);
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    assert_eq!(stored_messages(&db).await, vec![2]);
    assert!(Path::new(&db).is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_starts_a_new_conversation_and_json_lines_say_which() {
    let server = MockServer::start().await;
    server.script([MockReply::text("A."), MockReply::text("B.")]);
    let sb = Sandbox::new();
    let url = server.base_url();
    let out = sb
        .run_with_stdin(&["--json", "--base-url", &url], "One?\n/clear\nTwo?\n")
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        (lines[0]["reply"].clone(), lines[1]["reply"].clone()),
        (json!("A."), json!("B."))
    );
    assert_ne!(lines[0]["branch_id"], lines[1]["branch_id"]);
    assert_eq!(
        conversation(&server.bodies()[1]),
        pairs(&[("user", "Instruction: Two?")]),
        "no history after /clear"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_conversation_streams_and_resumes_in_its_own_protocol() {
    let server = MockServer::start().await;
    server.script([
        MockReply::text("Four.").chunk_size(2),
        MockReply::text("Six.").chunk_size(3),
    ]);
    let sb = Sandbox::new();
    let db = sb.path("chat.db");
    let url = server.base_url();
    let first = sb
        .command(&[
            "--provider",
            "anthropic",
            "--model",
            "claude-sonnet-4-5",
            "--base-url",
            &url,
            "--store",
            &db,
            "--name",
            "sums",
            "--system",
            "Be brief.",
            "--max-tokens",
            "20",
            "What is 2+2?",
        ])
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .output()
        .await
        .expect("run lionagi");
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert_eq!(text(&first.stdout), "Four.\n");
    let requests = server.requests();
    assert_eq!(requests[0].path, "/v1/messages");
    // The user pointed the provider at this server: its key goes there.
    assert_eq!(requests[0].header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(requests[0].header("authorization"), None);
    assert!(requests[0].header("anthropic-version").is_some());
    assert_eq!(
        requests[0].body,
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 20,
            "messages": [
                {"role": "user", "content": "Guidance: Be brief.\nInstruction: What is 2+2?"}
            ],
            "stream": true
        })
    );

    // Resumed without the flag: the stored server on this machine is not
    // reached, and the error says what lets it be.
    let refused = sb
        .run(&["--store", &db, "--resume", "sums", "And 3+3?"])
        .await;
    assert_eq!(refused.status.code(), Some(1));
    let why = text(&refused.stderr);
    assert!(why.contains("cannot reach"), "{why}");
    assert!(
        why.contains("--allow-local-network lets the model reach"),
        "{why}"
    );
    assert_eq!(server.request_count(), 1);

    // Resumed from the store: the stored model and server, no key (a
    // stored address is not the provider's registered one).
    let second = sb
        .command(&[
            "--store",
            &db,
            "--resume",
            "sums",
            "--allow-local-network",
            "And 3+3?",
        ])
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .output()
        .await
        .expect("run lionagi");
    assert!(second.status.success(), "{}", text(&second.stderr));
    assert_eq!(text(&second.stdout), "Six.\n");
    // The command it suggests is one that works.
    let hint = text(&second.stderr);
    assert!(
        hint.ends_with(&format!(
            "continue it with: lionagi chat --store {db} --resume sums --allow-local-network\n"
        )),
        "{hint}"
    );
    let requests = server.requests();
    assert_eq!(requests[1].path, "/v1/messages");
    assert_eq!(requests[1].header("x-api-key"), None);
    assert_eq!(
        requests[1].body,
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 20,
            "messages": [
                {"role": "user", "content": "Guidance: Be brief.\nInstruction: What is 2+2?"},
                {"role": "assistant", "content": "Four."},
                {"role": "user", "content": "Instruction: And 3+3?"}
            ],
            "stream": true
        })
    );
    assert_eq!(stored_messages(&db).await, vec![5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_agent_turn_under_json_reports_every_reply_and_its_whole_usage() {
    let sb = Sandbox::new();
    // A stand-in for `claude -p --output-format stream-json`: it notes the
    // session it was asked to resume, reads the prompt, starts a session of
    // its own (a new id on every run, as Claude Code gives a resumed
    // session), answers, uses a tool, answers again, and reports usage
    // after each of its two results.
    let agent = sb.path("agent.sh");
    let runs = sb.path("runs");
    std::fs::write(
        &agent,
        format!(
            r#"#!/bin/sh
cat > /dev/null
n=$(($(cat {runs} 2>/dev/null || echo 0) + 1))
echo $n > {runs}
for a in "$@"; do case "$a" in --resume=*) echo "$n ${{a#--resume=}}" >> {runs}.resumed;; esac; done
echo '{{"type":"system","subtype":"init","session_id":"00000000-0000-4000-8000-00000000000'$n'"}}'
echo '{{"type":"assistant","message":{{"content":[{{"type":"text","text":"Let me look."}}]}}}}'
echo '{{"type":"result","subtype":"success","num_turns":1,"usage":{{"input_tokens":3,"output_tokens":4}}}}'
echo '{{"type":"assistant","message":{{"content":[{{"type":"tool_use","id":"t1","name":"Read","input":{{"path":"a"}}}}]}}}}'
echo '{{"type":"assistant","message":{{"content":[{{"type":"tool_result","tool_use_id":"t1","content":"body"}}]}}}}'
echo '{{"type":"assistant","message":{{"content":[{{"type":"text","text":"It says body."}}]}}}}'
echo '{{"type":"result","subtype":"success","num_turns":2,"usage":{{"input_tokens":5,"output_tokens":6,"cache_read_input_tokens":7}}}}'
"#
        ),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // A `lionagi chat` whose `claude` is the stand-in.
    let with_agent = |args: &[&str]| {
        let mut c = sb.command(args);
        c.env("LIONAGI_CLAUDE_BIN", &agent);
        async move { c.output().await.unwrap() }
    };
    let db = sb.path("agent.db");
    let out = with_agent(&[
        "--json",
        "--provider",
        "claude_code",
        "--model",
        "sonnet",
        "--store",
        &db,
        "--name",
        "a",
        "What does a say?",
    ])
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout:?}");
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["reply"], "It says body.");
    assert_eq!(v["replies"], 2);
    // Both results' usage, key by key, in the agent's own shape.
    assert_eq!(
        v["usage"],
        json!({"input_tokens": 8, "output_tokens": 10, "cache_read_input_tokens": 7})
    );
    assert_eq!(text(&out.stderr), "");
    // Stored whole: the instruction, two replies and the tool's call and
    // result between them.
    assert_eq!(stored_messages(&db).await, vec![5]);
    // Resumed without model flags: the stored agent again, no key asked.
    let out = with_agent(&["--json", "--store", &db, "--resume", "a", "And b?"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(v["model"], "claude_code/sonnet");
    assert_eq!(v["replies"], 2);
    assert_eq!(stored_messages(&db).await, vec![10]);
    // A third turn resumes the agent's session of the second, which the
    // store kept with that turn, not the first's.
    let out = with_agent(&["--json", "--store", &db, "--resume", "a", "And c?"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(format!("{runs}.resumed")).unwrap(),
        "2 00000000-0000-4000-8000-000000000001\n3 00000000-0000-4000-8000-000000000002\n"
    );
    // Another agent's name does not run Claude Code in its place.
    let out = with_agent(&["--provider", "codex", "--model", "gpt-5-codex", "Hi."]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("provider codex is a CLI agent lionagi does not run"),
        "{}",
        text(&out.stderr)
    );
}
