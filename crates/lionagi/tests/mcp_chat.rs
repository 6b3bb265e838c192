//! MCP in the command: `lionagi chat --mcp FILE` against a scripted
//! loopback model and real MCP servers, and `lionagi mcp serve` used by our
//! own client and by the Python `mcp` SDK's client.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use branch_core::MessageContent;
use branch_models::mock::{MockReply, MockServer, MockToolCall};
use lionagi::mcp::{McpConfig, McpPolicy, McpServers};
use lionagi::session::store::{BranchStore, SqliteStore};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::process::Command;

fn required() -> bool {
    std::env::var_os("CI").is_some() || std::env::var("LIONAGI_MCP_REQUIRED").as_deref() == Ok("1")
}

fn python_sdk() -> Option<PathBuf> {
    match std::env::var_os("LIONAGI_MCP_PYTHON").map(PathBuf::from) {
        Some(p) if p.exists() => Some(p),
        _ => {
            assert!(
                !required(),
                "LIONAGI_MCP_PYTHON is required: run .ci/services/mcp.sh"
            );
            eprintln!("skipped: LIONAGI_MCP_PYTHON is not set (source .ci/services/mcp.sh)");
            None
        }
    }
}

fn which(name: &str) -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap()
}

fn server_script(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../branch-mcp/tests/servers")
        .join(name)
        .display()
        .to_string()
}

/// Runs the Python SDK's client (`py_client.py`) with `args` (a question,
/// then the server: a command line, or `--url URL`) and `env`, for at most
/// 60 s.
async fn py_client(python: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(python);
    c.arg(server_script("py_client.py"))
        .args(args)
        .envs(env.iter().copied())
        .kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(60), c.output())
        .await
        .expect("the Python client ends")
        .expect("the Python client runs")
}

struct Sandbox {
    dir: PathBuf,
}

impl Sandbox {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("lionagi-mcp-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        Self { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// Writes an MCP configuration file; its path.
    fn config(&self, name: &str, servers: Value) -> String {
        let path = self.path(name);
        std::fs::write(&path, json!({ "mcpServers": servers }).to_string()).unwrap();
        path
    }

    /// The configuration of the Python SDK's test server `py`, started by
    /// `python` with `args` after its script; its path.
    fn py_server(&self, python: &Path, args: &[&str]) -> String {
        let mut all = vec![server_script("py_server.py")];
        all.extend(args.iter().map(|a| (*a).to_owned()));
        self.config(
            "mcp.json",
            json!({"py": {"command": python.display().to_string(), "args": all}}),
        )
    }

    fn command(&self, args: &[&str]) -> Command {
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
        ] {
            c.env_remove(var);
        }
        c
    }

    /// Runs `lionagi ARGS` with `input` on its stdin (then closed), for at
    /// most 60 s.
    async fn run_with_stdin(&self, args: &[&str], input: &[u8]) -> Output {
        self.run_with_stdin_env(args, input, &[]).await
    }

    /// [`Sandbox::run_with_stdin`] with `env` added.
    async fn run_with_stdin_env(
        &self,
        args: &[&str],
        input: &[u8],
        env: &[(&str, &str)],
    ) -> Output {
        let mut child = self
            .command(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input).await.unwrap();
        drop(stdin);
        tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .unwrap()
            .unwrap()
    }

    async fn chat(&self, args: &[&str]) -> Output {
        let mut all = vec!["chat"];
        all.extend_from_slice(args);
        self.command(&all).output().await.unwrap()
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

/// Live processes whose command line contains `needle`.
/// The content of the last tool message a request `body` carries.
fn last_tool_result(body: &Value) -> String {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .unwrap()
}

fn running_with(needle: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|e| {
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            String::from_utf8_lossy(&cmd).contains(needle)
                && !stat
                    .rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

async fn kinds(db: &str) -> Vec<Vec<&'static str>> {
    let store = SqliteStore::open(db).await.unwrap();
    let mut out = Vec::new();
    for b in store.list().await.unwrap() {
        let branch = store.load(b.id).await.unwrap();
        out.push(
            branch
                .progression()
                .iter()
                .filter_map(|id| branch.messages().get(id))
                .map(|m| match &m.content {
                    MessageContent::System(_) => "system",
                    MessageContent::Instruction(_) => "instruction",
                    MessageContent::AssistantResponse(_) => "assistant",
                    MessageContent::ActionRequest(_) => "action_request",
                    MessageContent::ActionResponse(_) => "action_response",
                })
                .collect(),
        );
    }
    out
}

/// A stored conversation of one turn whose model called a tool once.
const ONE_TOOL_TURN: [&str; 6] = [
    "instruction",
    "assistant",
    "action_request",
    "action_response",
    "instruction",
    "assistant",
];

/// A stored conversation of two plain turns.
const TWO_TURNS: [&str; 4] = ["instruction", "assistant", "instruction", "assistant"];

/// The echo turn's rounds are one stored turn (the tool's request and
/// answer between the question and the reply), and the MCP server it
/// started is gone.
async fn recorded_whole_and_reaped(db: &str, tag: &str) {
    assert_eq!(kinds(db).await, vec![ONE_TOOL_TURN.to_vec()]);
    assert!(
        running_with(tag).is_empty(),
        "the MCP server outlived the chat"
    );
}

/// One `lionagi chat --mcp` turn (`--json`, stored as `t`) in which the
/// model, chosen by `model_flags`, calls the Python server's `echo` once
/// (call `id`, text `said`) and then answers "The server echoed it.";
/// checks the JSON line the turn printed: the reply and the call with the
/// server's answer. Returns the model's server, the sandbox (kept alive by
/// the caller) and the store's path.
async fn echo_turn(
    python: &Path,
    tag: &str,
    id: &str,
    said: &str,
    model_flags: &[&str],
) -> (MockServer, Sandbox, String, Value) {
    let model = MockServer::start().await;
    model.script([
        MockReply::tool_calls(vec![MockToolCall {
            id: id.into(),
            name: "echo".into(),
            arguments: json!({ "text": said }),
        }]),
        MockReply::text("The server echoed it."),
    ]);
    let sb = Sandbox::new();
    let cfg = sb.py_server(python, &["stdio", tag]);
    let db = sb.path("chat.db");
    let url = model.base_url();
    let mut args = model_flags.to_vec();
    args.extend([
        "--base-url",
        &url,
        "--mcp",
        &cfg,
        "--store",
        &db,
        "--name",
        "t",
        "--json",
        "Echo something.",
    ]);
    let out = sb.chat(&args).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let line: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(line["reply"], "The server echoed it.");
    assert_eq!(line["tool_calls"][0]["name"], "echo");
    assert_eq!(line["tool_calls"][0]["arguments"], json!({ "text": said }));
    assert_eq!(line["tool_calls"][0]["output"], json!({ "result": said }));
    assert_eq!(line["replies"], 2);
    (model, sb, db, line)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_calls_an_mcp_tool_and_is_recorded_whole() {
    let Some(python) = python_sdk() else { return };
    let tag = format!("mcp-chat-turn-{}", std::process::id());
    let (model, _sb, db, line) = echo_turn(
        &python,
        &tag,
        "call_1",
        "ping from the model",
        &["--model", "m"],
    )
    .await;
    // Both model calls' usage (the mock reports 11 + 7 for each), summed
    // in the provider's shape.
    assert_eq!(
        line["usage"],
        json!({"prompt_tokens": 22, "completion_tokens": 14, "total_tokens": 36})
    );
    let bodies = model.bodies();
    assert_eq!(bodies.len(), 2);
    // Offered natively, with the server's inputSchema.
    let tools = bodies[0]["tools"].as_array().unwrap();
    let echo = tools
        .iter()
        .find(|t| t["function"]["name"] == "echo")
        .unwrap();
    assert_eq!(echo["function"]["parameters"]["required"], json!(["text"]));
    // The tool ran in the MCP server; its result is in the next request.
    let second = bodies[1]["messages"].to_string();
    assert!(second.contains("ping from the model"), "{second}");
    assert!(
        bodies[1]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "tool")
    );

    recorded_whole_and_reaped(&db, &tag).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_turn_calls_an_mcp_tool_in_messages_own_shapes() {
    let Some(python) = python_sdk() else { return };
    let tag = format!("mcp-chat-anthropic-{}", std::process::id());
    let claude = [
        "--provider",
        "anthropic",
        "--model",
        "claude-sonnet-4-5",
        "--max-tokens",
        "64",
    ];
    let (model, _sb, db, line) =
        echo_turn(&python, &tag, "toolu_1", "ping from Claude", &claude).await;
    // The streamed Messages replies are recorded in the chat shape; their
    // usage is summed in it.
    assert_eq!(
        line["usage"],
        json!({"prompt_tokens": 22, "completion_tokens": 14, "total_tokens": 36})
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|r| r.path == "/v1/messages"));
    // Each round streams: the tool use arrives as Messages' stream events.
    assert!(requests.iter().all(|r| r.body["stream"] == true));
    // Offered in Anthropic's shape, with the server's inputSchema.
    let tools = requests[0].body["tools"].as_array().unwrap();
    let echo = tools.iter().find(|t| t["name"] == "echo").unwrap();
    assert_eq!(echo["input_schema"]["required"], json!(["text"]));
    // The tool use goes back as the assistant's block, and the
    // MCP server's answer as the user's tool_result for the same id.
    let messages = requests[1].body["messages"].as_array().unwrap();
    let block = |kind: &str| {
        messages
            .iter()
            .flat_map(|m| m["content"].as_array().into_iter().flatten())
            .find(|b| b["type"] == kind)
            .cloned()
    };
    let used = block("tool_use").expect("the tool use is sent back");
    assert_eq!(used["id"], "toolu_1");
    assert_eq!(used["input"], json!({"text": "ping from Claude"}));
    let result = block("tool_result").expect("the tool's result is sent");
    assert_eq!(result["tool_use_id"], "toolu_1");
    assert!(result.to_string().contains("ping from Claude"), "{result}");

    recorded_whole_and_reaped(&db, &tag).await;
}

/// Without `--json` each round of a tool turn streams as a plain turn does:
/// the text the model says before calling the tool is shown as it arrives,
/// then the answer; the requests stream and carry the tools natively. The
/// tool's lines on stderr show no control character of the call or of the
/// server's answer, which reach the model as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_round_of_a_tool_turn_streams() {
    let Some(python) = python_sdk() else { return };
    let tag = format!("mcp-chat-stream-{}", std::process::id());
    let model = MockServer::start().await;
    model.script([
        MockReply::text_and_tool_calls(
            "Let me check.",
            vec![MockToolCall {
                id: "call_5".into(),
                name: "echo".into(),
                arguments: json!({"text": "hi\u{9b}31m"}),
            }],
        )
        .chunk_size(4),
        MockReply::text("The server said hi.").chunk_size(4),
    ]);
    let sb = Sandbox::new();
    let cfg = sb.py_server(&python, &["stdio", &tag]);
    let db = sb.path("chat.db");
    let url = model.base_url();
    let out = sb
        .chat(&[
            "--base-url",
            &url,
            "--model",
            "m",
            "--mcp",
            &cfg,
            "--store",
            &db,
            "--name",
            "t",
            "Say hi through the server.",
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "Let me check.\nThe server said hi.\n");
    let err = text(&out.stderr);
    // JSON escapes C0 controls; a C1 one is dropped from the line.
    assert!(
        err.contains(r#"[tool] echo -> {"result":"hi31m"}"#),
        "{err}"
    );
    assert!(!err.chars().any(|c| c.is_control() && c != '\n'), "{err:?}");
    let mut bodies = model.bodies();
    assert_eq!(bodies.len(), 2);
    let tools: Vec<Value> = bodies
        .iter_mut()
        .map(|b| b.as_object_mut().unwrap().remove("tools").unwrap())
        .collect();
    assert_eq!(tools[0], tools[1]);
    let names: Vec<&str> = tools[0]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(
        names.contains(&"echo") && names.contains(&"slow"),
        "{names:?}"
    );
    let question = json!({"role": "user", "content": "Instruction: Say hi through the server."});
    assert_eq!(
        bodies[0],
        json!({"model": "m", "messages": [question], "stream": true,
               "stream_options": {"include_usage": true}})
    );
    assert_eq!(
        bodies[1],
        json!({"model": "m", "stream": true, "stream_options": {"include_usage": true},
               "messages": [
            question,
            {"role": "assistant", "content": "Let me check.", "tool_calls": [
                {"id": "call_5", "type": "function",
                 "function": {"name": "echo", "arguments": "{\"text\":\"hi\u{9b}31m\"}"}}]},
            {"role": "tool", "tool_call_id": "call_5",
             "content": "{\"result\":\"hi\u{9b}31m\"}"},
            {"role": "user", "content":
                "Instruction: Continue with my request using the tool results above."},
        ]})
    );
    recorded_whole_and_reaped(&db, &tag).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_failures_reach_the_model_and_broken_servers_change_nothing() {
    let python3 = which("python3");
    let tag = format!("mcp-chat-fail-{}", std::process::id());
    let model = MockServer::start().await;
    model.push(MockReply::text("Noted."));
    let sb = Sandbox::new();
    let db = sb.path("chat.db");
    let url = model.base_url();
    let first = sb
        .chat(&[
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

    // A server that exits at start: a clear error, no request, nothing stored.
    let exits = sb.config(
        "exit.json",
        json!({"raw": {"command": python3.display().to_string(),
                       "args": [server_script("raw_server.py"), "exit", tag]}}),
    );
    let out = sb
        .chat(&[
            "--base-url",
            &url,
            "--store",
            &db,
            "--resume",
            "c",
            "--mcp",
            &exits,
            "Hi?",
        ])
        .await;
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("`raw` could not start") && err.contains("fatal: no configuration"),
        "{err}"
    );
    assert_eq!(model.request_count(), 1);
    assert_eq!(kinds(&db).await, vec![vec!["instruction", "assistant"]]);

    // A server that dies mid-call: the model sees the failed call.
    let dies = sb.config(
        "die.json",
        json!({"raw": {"command": python3.display().to_string(),
                       "args": [server_script("raw_server.py"), "die", tag]}}),
    );
    model.script([
        MockReply::tool_calls(vec![MockToolCall {
            id: "c1".into(),
            name: "boom".into(),
            arguments: json!({}),
        }]),
        MockReply::text("The tool failed."),
    ]);
    let out = sb
        .chat(&[
            "--base-url",
            &url,
            "--store",
            &db,
            "--resume",
            "c",
            "--mcp",
            &dies,
            "Go.",
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("[tool] boom failed"),
        "{}",
        text(&out.stderr)
    );
    let bodies = model.bodies();
    let last = bodies.last().unwrap()["messages"].to_string();
    assert!(last.contains("exited"), "{last}");
    assert!(running_with(&tag).is_empty(), "orphaned MCP server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slash_tools_lists_what_is_registered() {
    let Some(python) = python_sdk() else { return };
    let model = MockServer::start().await;
    let sb = Sandbox::new();
    let cfg = sb.py_server(&python, &["stdio"]);
    let url = model.base_url();
    let out = sb
        .run_with_stdin(&["chat", "--base-url", &url, "--mcp", &cfg], b"/tools\n")
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("echo  (py)  Returns the text it was given."),
        "{err}"
    );
    assert_eq!(model.request_count(), 0);
}

/// A stored conversation named `agent` whose first turn went to `model`.
async fn stored_agent(sb: &Sandbox, model: &MockServer) -> String {
    model.push(MockReply::text("Ready."));
    let db = sb.path("agent.db");
    let url = model.base_url();
    let out = sb
        .chat(&[
            "--base-url",
            &url,
            "--store",
            &db,
            "--name",
            "agent",
            "Be ready.",
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    db
}

fn serve_args(db: &str, url: &str) -> Vec<String> {
    [
        "mcp",
        "serve",
        "--store",
        db,
        "--branch",
        "agent",
        "--base-url",
        url,
        "--model",
        "m",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// `lionagi mcp serve` of the conversation in `db` (with `extra` flags),
/// connected by our own client; its `ask` tool.
async fn served_ask(
    sb: &Sandbox,
    db: &str,
    model: &MockServer,
    extra: &[String],
) -> (McpServers, std::sync::Arc<dyn branch_core::Tool>) {
    served_ask_heard(sb, db, model, extra, None).await
}

/// As [`served_ask`], with `progress` hearing the server's progress
/// notifications.
async fn served_ask_heard(
    sb: &Sandbox,
    db: &str,
    model: &MockServer,
    extra: &[String],
    progress: Option<lionagi::mcp::ProgressHook>,
) -> (McpServers, std::sync::Arc<dyn branch_core::Tool>) {
    let bin = env!("CARGO_BIN_EXE_lionagi");
    let mut args = serve_args(db, &model.base_url());
    args.extend_from_slice(extra);
    let config = McpConfig::from_value(&json!({"mcpServers": {"agent": {
        "command": bin,
        "args": args,
        "env": {"HOME": sb.dir.display().to_string()}
    }}}))
    .unwrap();
    let servers = McpServers::connect_with(
        &config,
        &McpPolicy::new().allow_command(bin),
        progress,
        None,
    )
    .await
    .unwrap();
    let mut branch = branch_core::Branch::builder().build().unwrap();
    let tools = servers.register(&mut branch).await.unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0].name, "ask");
    let ask = branch.acts().get("ask").unwrap().tool().clone();
    (servers, ask)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_serve_answers_our_own_client_with_one_recorded_turn() {
    let model = MockServer::start().await;
    let sb = Sandbox::new();
    let db = stored_agent(&sb, &model).await;
    model.push(MockReply::text("Paris."));
    let (servers, ask) = served_ask(&sb, &db, &model, &[]).await;
    let answer = ask
        .call(json!({"question": "Capital of France?"}))
        .await
        .unwrap();
    assert_eq!(answer, json!("Paris."));
    servers.shutdown().await;
    assert_eq!(kinds(&db).await, vec![TWO_TURNS.to_vec()]);
    // The served turn carried the stored history.
    let last = model.bodies().last().unwrap()["messages"].to_string();
    assert!(
        last.contains("Be ready.") && last.contains("Capital of France?"),
        "{last}"
    );
}

/// Calls `ask` with `question` and abandons the call (our client then
/// sends `notifications/cancelled`) once the model has had `requests`
/// requests in all.
async fn abandon_once_asked(
    ask: &std::sync::Arc<dyn branch_core::Tool>,
    model: &MockServer,
    question: &str,
    requests: usize,
) {
    let call = ask.call(json!({ "question": question }));
    let asked = async {
        while model.request_count() < requests {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        r = call => panic!("the call ended before it was abandoned: {r:?}"),
        () = asked => {}
    }
}

/// After a cancelled call: the next call is answered ("Paris.") at once,
/// though the cancelled turn's reply would still be on its way, and the
/// store holds the stored agent's turn and this one alone. The last
/// request's messages, as text.
async fn answers_the_next_alone(
    servers: McpServers,
    ask: &std::sync::Arc<dyn branch_core::Tool>,
    db: &str,
    model: &MockServer,
) -> String {
    let answer = tokio::time::timeout(
        Duration::from_secs(20),
        ask.call(json!({"question": "Capital of France?"})),
    )
    .await
    .expect("answered while the cancelled turn's reply was still delayed")
    .unwrap();
    assert_eq!(answer, json!("Paris."));
    servers.shutdown().await;
    assert_eq!(kinds(db).await, vec![TWO_TURNS.to_vec()]);
    model.bodies().last().unwrap()["messages"].to_string()
}

/// A client that cancels `ask` while the model is answering: the served
/// turn is dropped, nothing of it reaches the store or the next turn, and
/// the server answers the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_serve_drops_a_cancelled_turn_and_answers_the_next() {
    let model = MockServer::start().await;
    let sb = Sandbox::new();
    let db = stored_agent(&sb, &model).await;
    model.script([
        MockReply::text("Too late.").delayed(Duration::from_secs(30)),
        MockReply::text("Paris."),
    ]);
    let (servers, ask) = served_ask(&sb, &db, &model, &[]).await;
    abandon_once_asked(&ask, &model, "Count to a million.", 2).await;
    let last = answers_the_next_alone(servers, &ask, &db, &model).await;
    assert!(!last.contains("Count to a million."), "{last}");
}

/// The same with a tool turn: its first round (a tool call and its
/// result) is committed on the branch when the client cancels the second;
/// the whole turn is taken back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_serve_takes_back_every_round_of_a_cancelled_tool_turn() {
    let Some(python) = python_sdk() else { return };
    let model = MockServer::start().await;
    let sb = Sandbox::new();
    let db = stored_agent(&sb, &model).await;
    model.script([
        MockReply::tool_calls(vec![MockToolCall {
            id: "call_1".into(),
            name: "echo".into(),
            arguments: json!({"text": "first round"}),
        }]),
        MockReply::text("Too late.").delayed(Duration::from_secs(30)),
        MockReply::text("Paris."),
    ]);
    let cfg = sb.py_server(&python, &["stdio"]);
    let (servers, ask) = served_ask(&sb, &db, &model, &["--mcp".into(), cfg]).await;
    abandon_once_asked(&ask, &model, "Echo, then wait.", 3).await;
    let last = answers_the_next_alone(servers, &ask, &db, &model).await;
    assert!(
        !last.contains("Echo, then wait.") && !last.contains("first round"),
        "{last}"
    );
}

/// What a client's progress hook hears, and the hook.
type Heard = std::sync::Arc<std::sync::Mutex<Vec<lionagi::mcp::Progress>>>;

fn progress_heard() -> (Heard, lionagi::mcp::ProgressHook) {
    let heard = Heard::default();
    let hook = {
        let heard = std::sync::Arc::clone(&heard);
        std::sync::Arc::new(move |p: &lionagi::mcp::Progress| {
            heard.lock().unwrap().push(p.clone());
        }) as lionagi::mcp::ProgressHook
    };
    (heard, hook)
}

/// A client that asks for progress hears each step of a served tool turn,
/// in order: the model awaited, the tool called and its own progress, the
/// answer's characters as they stream. It is told which tool runs, never
/// the call's arguments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_serve_tells_a_listening_client_each_step_of_a_turn() {
    let Some(python) = python_sdk() else { return };
    let model = MockServer::start().await;
    let sb = Sandbox::new();
    let db = stored_agent(&sb, &model).await;
    let marker = sb.path("never-cancelled");
    let answer = "The slow tool is done, and so am I.";
    // The delays leave the sender idle when each step begins, so no step
    // is replaced by the next before it goes out.
    model.script([
        MockReply::tool_calls(vec![MockToolCall {
            id: "call_1".into(),
            name: "slow".into(),
            arguments: json!({"seconds": 1.2, "marker": marker}),
        }])
        .delayed(Duration::from_secs(1)),
        MockReply::text(answer)
            .chunk_size(4)
            .paced(Duration::from_millis(150))
            .delayed(Duration::from_secs(1)),
    ]);
    let (heard, hook) = progress_heard();
    let cfg = sb.py_server(&python, &["stdio"]);
    let (servers, ask) =
        served_ask_heard(&sb, &db, &model, &["--mcp".into(), cfg], Some(hook)).await;
    let got = ask
        .call(json!({"question": "Run the slow tool."}))
        .await
        .unwrap();
    assert_eq!(got, json!(answer));
    servers.shutdown().await;
    let heard = heard.lock().unwrap().clone();
    let steps: Vec<&str> = heard.iter().filter_map(|p| p.message.as_deref()).collect();
    assert_eq!(steps.len(), heard.len(), "every notification has a message");
    // Progress increases with every notification.
    assert!(
        heard.windows(2).all(|w| w[0].progress < w[1].progress),
        "{heard:?}"
    );
    let mut expected = [
        "waiting for the model",
        "calling tool `slow`",
        "tool server py: progress ",
        "waiting for the model",
        "answering: ",
    ]
    .into_iter()
    .peekable();
    for step in &steps {
        if expected.peek().is_some_and(|e| step.starts_with(e)) {
            expected.next();
        }
    }
    assert_eq!(expected.next(), None, "{steps:?}");
    // The answer's count only grows, up to its length.
    let counts: Vec<usize> = steps
        .iter()
        .filter_map(|s| s.strip_prefix("answering: ")?.strip_suffix(" characters"))
        .map(|n| n.parse().unwrap())
        .collect();
    assert!(counts.windows(2).all(|w| w[0] < w[1]), "{counts:?}");
    assert!(counts.iter().all(|n| *n <= answer.len()), "{counts:?}");
    assert!(
        steps.iter().all(|s| !s.contains("never-cancelled")),
        "{steps:?}"
    );
    let stored = [["instruction", "assistant"].as_slice(), &ONE_TOOL_TURN].concat();
    assert_eq!(kinds(&db).await, vec![stored]);
}

/// Two calls at once: the second is told it waits for the first's turn,
/// and each is answered with its own turn, one after the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_serve_tells_a_waiting_call_why_it_waits() {
    let model = MockServer::start().await;
    let sb = Sandbox::new();
    let db = stored_agent(&sb, &model).await;
    model.script([
        MockReply::text("First.").delayed(Duration::from_secs(1)),
        MockReply::text("Second."),
    ]);
    let (heard, hook) = progress_heard();
    let (servers, ask) = served_ask_heard(&sb, &db, &model, &[], Some(hook)).await;
    let first = ask.call(json!({"question": "One?"}));
    let second = async {
        while model.request_count() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        ask.call(json!({"question": "Two?"})).await
    };
    let (first, second) = tokio::join!(first, second);
    assert_eq!(
        (first.unwrap(), second.unwrap()),
        (json!("First."), json!("Second."))
    );
    servers.shutdown().await;
    let heard = heard.lock().unwrap().clone();
    assert!(
        heard
            .iter()
            .any(|p| p.message.as_deref() == Some("waiting for the turn before it")),
        "{heard:?}"
    );
    let turns = [TWO_TURNS.as_slice(), &["instruction", "assistant"]].concat();
    assert_eq!(kinds(&db).await, vec![turns]);
}

/// A client's message over the cap (8 MiB, where rmcp's own default is
/// 16 MiB) is dropped unread; the connection stays and the next request is
/// answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_serve_drops_an_oversized_message_and_answers_the_next() {
    use tokio::io::AsyncBufReadExt;
    let model = MockServer::start().await;
    let sb = Sandbox::new();
    let db = stored_agent(&sb, &model).await;
    let args = serve_args(&db, &model.base_url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = sb.command(&args).stdin(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut replies = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = async |message: String| {
        stdin.write_all(message.as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
        stdin.flush().await.unwrap();
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "by-hand", "version": "0"}}})
        .to_string(),
    )
    .await;
    let mut next = async || -> Value {
        let line = tokio::time::timeout(Duration::from_secs(30), replies.next_line())
            .await
            .expect("a reply within 30 s")
            .unwrap()
            .expect("the server is still there");
        serde_json::from_str(&line).unwrap()
    };
    assert_eq!(next().await["id"], 1);
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string()).await;
    let pad = "x".repeat(9 * 1024 * 1024);
    send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list",
        "params": {"_meta": {"pad": pad}}})
        .to_string(),
    )
    .await;
    send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).to_string()).await;
    let listed = next().await;
    assert_eq!(listed["id"], 3, "{listed}");
    assert_eq!(listed["result"]["tools"][0]["name"], "ask");
    // A turn appended, nothing changed; the model and tools reached.
    assert_eq!(
        listed["result"]["tools"][0]["annotations"],
        json!({"title": "Ask the conversation", "readOnlyHint": false,
            "destructiveHint": false, "idempotentHint": false, "openWorldHint": true})
    );
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
}

/// Another writer's turn between two calls (a person continuing the same
/// conversation in a terminal) is taken in: the next served turn follows
/// it, in its request and in the store, where it used to fail to record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_serve_takes_in_a_turn_stored_elsewhere_between_calls() {
    let model = MockServer::start().await;
    let sb = Sandbox::new();
    let db = stored_agent(&sb, &model).await;
    model.script([
        MockReply::text("Paris."),
        MockReply::text("Noted."),
        MockReply::text("Rome."),
    ]);
    let (servers, ask) = served_ask(&sb, &db, &model, &[]).await;
    let first = ask.call(json!({"question": "Capital of France?"})).await;
    assert_eq!(first.unwrap(), json!("Paris."));
    let url = model.base_url();
    let elsewhere = sb
        .chat(&[
            "--base-url",
            &url,
            "--store",
            &db,
            "--resume",
            "agent",
            "Remember: I live in Italy.",
        ])
        .await;
    assert!(elsewhere.status.success(), "{}", text(&elsewhere.stderr));
    let second = ask
        .call(json!({"question": "Capital of my country?"}))
        .await;
    assert_eq!(second.unwrap(), json!("Rome."));
    servers.shutdown().await;
    let four_turns = [TWO_TURNS, TWO_TURNS].concat();
    assert_eq!(kinds(&db).await, vec![four_turns]);
    let last = model.bodies().last().unwrap()["messages"].to_string();
    assert!(
        last.contains("I live in Italy") && last.contains("Paris."),
        "{last}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_serve_answers_the_python_sdk_client() {
    let Some(python) = python_sdk() else { return };
    let model = MockServer::start().await;
    let sb = Sandbox::new();
    let db = stored_agent(&sb, &model).await;
    model.push(MockReply::text("Forty-two."));
    let serve = serve_args(&db, &model.base_url());
    let mut args = vec!["What is the answer?", env!("CARGO_BIN_EXE_lionagi")];
    args.extend(serve.iter().map(String::as_str));
    let out = py_client(&python, &args, &[]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut got: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    // The SDK's client asked for progress and took each notification: the
    // first step is always told (the sender is idle when it comes); the
    // later ones within its interval only when the turn outlasts it.
    let progress = got["progress"].take();
    let progress = progress.as_array().unwrap();
    assert_eq!(
        progress[0],
        json!([1.0, "waiting for the model"]),
        "{progress:?}"
    );
    assert!(
        progress
            .windows(2)
            .all(|w| w[0][0].as_f64() < w[1][0].as_f64()),
        "{progress:?}"
    );
    assert_eq!(
        got,
        json!({"tools": ["ask"], "is_error": false, "result": ["Forty-two."], "progress": null})
    );
    assert_eq!(kinds(&db).await, vec![TWO_TURNS.to_vec()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_during_a_tool_call_cancels_it_and_keeps_the_conversation() {
    let Some(python) = python_sdk() else { return };
    let tag = format!("mcp-chat-cancel-{}", std::process::id());
    let model = MockServer::start().await;
    model.push(MockReply::text("Noted."));
    let sb = Sandbox::new();
    let db = sb.path("chat.db");
    let url = model.base_url();
    let first = sb
        .chat(&["--base-url", &url, "--store", &db, "--name", "c", "Hello."])
        .await;
    assert!(first.status.success(), "{}", text(&first.stderr));

    let marker = sb.path("cancelled");
    model.push(MockReply::tool_calls(vec![MockToolCall {
        id: "c1".into(),
        name: "slow".into(),
        arguments: json!({"seconds": 60, "marker": marker}),
    }]));
    let cfg = sb.py_server(&python, &["stdio", &tag]);
    let child = sb
        .command(&[
            "chat",
            "--base-url",
            &url,
            "--store",
            &db,
            "--resume",
            "c",
            "--mcp",
            &cfg,
            "Wait.",
        ])
        .spawn()
        .unwrap();
    // The tool is running in the server (it reports progress at once).
    interrupt_the_slow_tool(child, &model, 2, Duration::from_millis(1500)).await;
    assert_eq!(kinds(&db).await, vec![vec!["instruction", "assistant"]]);
    the_slow_tool_ended(&marker, &tag).await;
}

/// Once the model has had `requests` requests and `running` more has
/// passed (the slow tool runs), interrupts `child` (SIGINT): it exits with
/// 130, having shown the tool's line.
async fn interrupt_the_slow_tool(
    child: tokio::process::Child,
    model: &MockServer,
    requests: usize,
    running: Duration,
) {
    while model.request_count() < requests {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(running).await;
    let status = Command::new("kill")
        .args(["-INT", &child.id().unwrap().to_string()])
        .status()
        .await
        .unwrap();
    assert!(status.success());
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("[tool] slow"), "{err}");
}

/// The slow tool was ended (cancelled or shut down: its `marker` is
/// written) and its MCP server, tagged `tag`, is gone.
async fn the_slow_tool_ended(marker: &str, tag: &str) {
    let start = std::time::Instant::now();
    while !std::path::Path::new(marker).exists() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the running tool was never ended (cancelled or shut down)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(running_with(tag).is_empty(), "orphaned MCP server");
}

/// `--approve`: Ctrl-C while an approved call runs drops the call, and the
/// conversation stays paused in the store, to be answered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_while_an_approved_call_runs_leaves_the_turn_paused() {
    let Some(python) = python_sdk() else { return };
    let tag = format!("mcp-chat-approve-{}", std::process::id());
    let model = MockServer::start().await;
    let sb = Sandbox::new();
    let marker = sb.path("cancelled");
    model.push(MockReply::tool_calls(vec![MockToolCall {
        id: "c1".into(),
        name: "slow".into(),
        arguments: json!({"seconds": 60, "marker": marker}),
    }]));
    let cfg = sb.py_server(&python, &["stdio", &tag]);
    let db = sb.path("chat.db");
    let url = model.base_url();
    let mut child = sb
        .command(&[
            "chat",
            "--base-url",
            &url,
            "--store",
            &db,
            "--name",
            "c",
            "--approve",
            "--mcp",
            &cfg,
            "Wait.",
        ])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"y\n").await.unwrap();
    // Approved at once (the answer is waiting on stdin); the tool runs.
    interrupt_the_slow_tool(child, &model, 1, Duration::from_millis(2000)).await;
    drop(stdin);
    let pending = sb
        .command(&["branch", "pending", "--store", &db])
        .output()
        .await
        .unwrap();
    let listed = text(&pending.stdout);
    assert!(
        listed.contains("1 call(s) awaiting approval") && listed.contains("slow"),
        "{listed}"
    );
    the_slow_tool_ended(&marker, &tag).await;

    // Continued: the call is asked about again (denied now), then the new
    // question goes out with the denial answering the call.
    model.push(MockReply::text("Done."));
    let out = sb
        .run_with_stdin(
            &[
                "chat",
                "--base-url",
                &url,
                "--store",
                &db,
                "--resume",
                "c",
                "--approve",
                "--mcp",
                &cfg,
                "Go on.",
            ],
            b"n\n",
        )
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "Done.\n");
    assert_eq!(kinds(&db).await, vec![ONE_TOOL_TURN.to_vec()]);
    let last = model.bodies().last().unwrap()["messages"].to_string();
    assert!(last.contains("denied by approval"), "{last}");
}

/// The bearer token of the HTTP tests' `mcp serve`.
const HTTP_TOKEN: &str = "serve-token-0123456789abcdef";

/// `lionagi mcp serve --http 127.0.0.1:0` of the conversation in `db`,
/// with [`HTTP_TOKEN`]; the running server and the URL it printed.
async fn served_over_http(
    sb: &Sandbox,
    db: &str,
    model: &MockServer,
) -> (tokio::process::Child, String) {
    served_over_http_with(sb, db, model, &[]).await
}

/// [`served_over_http`] with `extra` flags.
async fn served_over_http_with(
    sb: &Sandbox,
    db: &str,
    model: &MockServer,
    extra: &[String],
) -> (tokio::process::Child, String) {
    let mut args = serve_args(db, &model.base_url());
    args.extend(["--http".to_owned(), "127.0.0.1:0".to_owned()]);
    args.extend_from_slice(extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = sb
        .command(&args)
        .env("LIONAGI_MCP_TOKEN", HTTP_TOKEN)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the URL is printed")
        .unwrap()
        .expect("a line on stdout");
    (child, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_serve_over_http_answers_the_python_sdk_and_another_chat() {
    let Some(python) = python_sdk() else { return };
    let model = MockServer::start().await;
    let sb = Sandbox::new();
    let db = stored_agent(&sb, &model).await;
    let (mut serving, url) = served_over_http(&sb, &db, &model).await;
    let port = url
        .strip_prefix("http://127.0.0.1:")
        .and_then(|rest| rest.strip_suffix("/mcp"))
        .unwrap_or_else(|| panic!("{url}"));
    assert!(port.parse::<u16>().unwrap() > 0, "{url}");

    // The Python SDK's Streamable HTTP client, with the token.
    model.push(MockReply::text("Forty-two."));
    let out = py_client(
        &python,
        &["What is the answer?", "--url", &url],
        &[("MCP_TOKEN", HTTP_TOKEN)],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut got: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    let progress = got["progress"].take();
    assert_eq!(
        progress[0],
        json!([1.0, "waiting for the model"]),
        "{progress:?}"
    );
    assert_eq!(
        got,
        json!({"tools": ["ask"], "is_error": false, "result": ["Forty-two."], "progress": null})
    );
    // Without it, nothing is asked.
    let refused = py_client(&python, &["Anyone?", "--url", &url], &[]).await;
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("401"),
        "{}",
        text(&refused.stderr)
    );

    // Another conversation's chat calls this one's `ask` as a tool over
    // HTTP, with the token in its MCP configuration.
    let chat_model = MockServer::start().await;
    chat_model.script([
        MockReply::tool_calls(vec![MockToolCall {
            id: "c1".into(),
            name: "ask".into(),
            arguments: json!({"question": "And what was the question?"}),
        }]),
        MockReply::text("It does not know the question."),
    ]);
    model.push(MockReply::text("Nobody knows."));
    let cfg = sb.config(
        "remote.json",
        json!({"agent": {"url": url, "headers": {"Authorization": format!("Bearer {HTTP_TOKEN}")}}}),
    );
    let chat_url = chat_model.base_url();
    let out = sb
        .chat(&[
            "--base-url",
            &chat_url,
            "--model",
            "m",
            "--mcp",
            &cfg,
            "--mcp-local",
            "--json",
            "Ask the other conversation.",
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let line: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(line["reply"], "It does not know the question.");
    assert_eq!(line["tool_calls"][0]["output"], json!("Nobody knows."));

    // SIGTERM stops it cleanly, with both turns recorded.
    let pid = serving.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(20), serving.wait())
        .await
        .expect("it stops on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(
        kinds(&db).await,
        vec![[TWO_TURNS.as_slice(), &["instruction", "assistant"]].concat()]
    );
}

#[tokio::test]
async fn mcp_serve_refuses_an_address_beyond_loopback_without_a_token() {
    let model = MockServer::start().await;
    let sb = Sandbox::new();
    let db = stored_agent(&sb, &model).await;
    let mut args = serve_args(&db, &model.base_url());
    // Checked before anything is bound: no socket opens on other
    // interfaces.
    args.extend(["--http".to_owned(), "0.0.0.0:0".to_owned()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = sb.command(&args).output().await.unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("needs a bearer token"),
        "{}",
        text(&out.stderr)
    );
    // A token too short to guard anything.
    let out = sb
        .command(&args)
        .env("LIONAGI_MCP_TOKEN", "short")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("shorter than 16"),
        "{}",
        text(&out.stderr)
    );
    // A port already taken is named, before anything else is started.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let mut busy = serve_args(&db, &model.base_url());
    busy.extend(["--http".to_owned(), format!("127.0.0.1:{port}")]);
    let busy: Vec<&str> = busy.iter().map(String::as_str).collect();
    let out = sb.command(&busy).output().await.unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with(&format!("lionagi: cannot listen on 127.0.0.1:{port}: ")),
        "{}",
        text(&out.stderr)
    );
    // `--allow-host` without `--http` is a mistake, not ignored.
    let mut stdio = serve_args(&db, &model.base_url());
    stdio.extend(["--allow-host".to_owned(), "conv.test".to_owned()]);
    let stdio: Vec<&str> = stdio.iter().map(String::as_str).collect();
    let out = sb.command(&stdio).output().await.unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("go with `--http`"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_serve_without_model_flags_answers_with_the_conversations_own_model() {
    let Some(python) = python_sdk() else { return };
    let model = MockServer::start().await;
    let sb = Sandbox::new();
    // Stored with the mock's address and the default model name.
    let db = stored_agent(&sb, &model).await;
    model.push(MockReply::text("From the stored model."));
    let home = sb.path("home");
    let out = py_client(
        &python,
        &[
            "Which model answers?",
            env!("CARGO_BIN_EXE_lionagi"),
            "mcp",
            "serve",
            "--store",
            &db,
            "--branch",
            "agent",
            // The stored server is on this machine: allowed by the flag,
            // never by the store.
            "--allow-local-network",
        ],
        &[("HOME", &home)],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let got: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(got["result"], json!(["From the stored model."]), "{got}");
    assert_eq!(got["is_error"], json!(false));
    // The same model as the stored turn's request, at the stored address.
    let bodies = model.bodies();
    assert_eq!(bodies.len(), 2);
    assert_eq!(bodies[1]["model"], bodies[0]["model"]);
    assert_eq!(kinds(&db).await, vec![TWO_TURNS.to_vec()]);
}

/// `mcp serve --approve`: a served turn whose model calls a tool is kept
/// paused for a person, and the client is told so and how; no question is
/// asked on top of the unanswered call; once a person approves it in a
/// terminal, the next served call goes on from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_serve_leaves_a_tool_call_for_a_person_to_approve() {
    let Some(python) = python_sdk() else { return };
    let tag = format!("mcp-serve-approve-{}", std::process::id());
    let model = MockServer::start().await;
    let sb = Sandbox::new();
    let db = stored_agent(&sb, &model).await;
    let cfg = sb.py_server(&python, &["stdio", &tag]);
    model.push(MockReply::text_and_tool_calls(
        "Let me echo it.",
        vec![MockToolCall {
            id: "c1".into(),
            name: "echo".into(),
            arguments: json!({"text": "hi"}),
        }],
    ));
    let extra = ["--approve".to_owned(), "--mcp".to_owned(), cfg.clone()];
    let (servers, ask) = served_ask(&sb, &db, &model, &extra).await;
    let first = ask.call(json!({"question": "Echo hi."})).await.unwrap();
    let first = first.as_str().unwrap();
    assert!(first.starts_with("Let me echo it.\n\n["), "{first}");
    assert!(
        first.contains(&format!(
            "approve its tool call(s) `echo`: lionagi chat --store {db} --resume agent --approve]"
        )),
        "{first}"
    );
    // Refused before the model is asked: it would see a call without its
    // answer.
    let requests = model.request_count();
    let second = ask.call(json!({"question": "Anything else?"})).await;
    let refused = format!("{second:?}");
    assert!(second.is_err(), "{refused}");
    assert!(
        refused.contains("waits for a person to approve"),
        "{refused}"
    );
    assert_eq!(model.request_count(), requests);

    // A person approves it in a terminal: the call runs, then their own
    // question goes out with its result.
    model.push(MockReply::text("It echoed hi."));
    let url = model.base_url();
    let out = sb
        .run_with_stdin(
            &[
                "chat",
                "--base-url",
                &url,
                "--model",
                "m",
                "--store",
                &db,
                "--resume",
                "agent",
                "--approve",
                "--mcp",
                &cfg,
                "Done?",
            ],
            b"y\n",
        )
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "It echoed hi.\n");
    // The served conversation takes that in and answers again.
    model.push(MockReply::text("Ready again."));
    let third = ask.call(json!({"question": "Now?"})).await.unwrap();
    assert_eq!(third, json!("Ready again."));
    servers.shutdown().await;
    let stored = kinds(&db).await;
    assert_eq!(
        stored,
        [[
            "instruction",
            "assistant",
            "instruction",
            "assistant",
            "action_request",
            "action_response",
            "instruction",
            "assistant",
            "instruction",
            "assistant"
        ]]
    );
}

/// `mcp serve --approve` with a client that shows forms (MCP elicitation):
/// the person behind it is asked about each tool call in the served call
/// itself. Dismissing the question leaves the turn paused, as without
/// elicitation; the next call asks again before its own question, and a
/// denial reaches the model; "always" is not asked again for that tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_serve_asks_the_clients_person_to_approve_tool_calls() {
    let Some(python) = python_sdk() else { return };
    let tag = format!("mcp-serve-elicit-{}", std::process::id());
    let model = MockServer::start().await;
    let sb = Sandbox::new();
    let db = stored_agent(&sb, &model).await;
    let cfg = sb.py_server(&python, &["stdio", &tag]);
    let echo = |id: &str, said: &str| MockToolCall {
        id: id.into(),
        name: "echo".into(),
        arguments: json!({ "text": said }),
    };
    let mut serve = serve_args(&db, &model.base_url());
    serve.extend(["--approve".to_owned(), "--mcp".to_owned(), cfg.clone()]);
    let ask = |question: &'static str, answers: &'static str| {
        let serve = serve.clone();
        let python = python.clone();
        async move {
            let mut args = vec![question, env!("CARGO_BIN_EXE_lionagi")];
            args.extend(serve.iter().map(String::as_str));
            let out = py_client(&python, &args, &[("MCP_ELICIT", answers)]).await;
            assert!(out.status.success(), "{}", text(&out.stderr));
            let got: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
            assert_eq!(got["is_error"], json!(false), "{got}");
            got
        }
    };
    let choices = json!(["run", "deny", "always"]);

    // Dismissed: the turn waits, as it would for a client without forms.
    model.push(MockReply::text_and_tool_calls(
        "Let me echo it.",
        vec![echo("c1", "hi")],
    ));
    let got = ask("Echo hi.", "cancel").await;
    let question = got["elicited"][0][0].as_str().unwrap();
    assert!(
        question.starts_with("tool call: echo {\"text\":\"hi\"}"),
        "{question}"
    );
    assert!(question.ends_with("Run this tool call?"), "{question}");
    assert_eq!(got["elicited"][0][1], choices);
    let reply = got["result"][0].as_str().unwrap();
    assert!(
        reply.starts_with("Let me echo it.\n\n[the conversation waits"),
        "{reply}"
    );
    assert!(
        reply.ends_with("(the person dismissed the question)]"),
        "{reply}"
    );

    // Denied at the start of the next call: the model hears it, then the
    // call's own question is answered.
    model.script([
        MockReply::text("It was denied."),
        MockReply::text("Going on."),
    ]);
    let got = ask("Go on.", "deny").await;
    assert_eq!(got["elicited"].as_array().unwrap().len(), 1, "{got}");
    assert_eq!(got["result"], json!(["Going on."]));
    let bodies = model.bodies();
    let follow_up = bodies[bodies.len() - 2].to_string();
    assert!(follow_up.contains("denied by approval"), "{follow_up}");

    // "Always": asked once, the second call of the tool runs unasked.
    model.script([
        MockReply::text_and_tool_calls("Echoing.", vec![echo("c2", "one")]),
        MockReply::tool_calls(vec![echo("c3", "two")]),
        MockReply::text("Both echoed."),
    ]);
    let got = ask("Echo twice.", "always").await;
    assert_eq!(got["elicited"].as_array().unwrap().len(), 1, "{got}");
    assert_eq!(got["result"], json!(["Echoing.\n\nBoth echoed."]));
    let last = model.bodies().last().unwrap().to_string();
    assert!(last.contains("one") && last.contains("two"), "{last}");

    let stored = kinds(&db).await;
    assert_eq!(
        stored,
        [[
            "instruction",
            "assistant",
            // Dismissed, then denied: the model was told.
            "instruction",
            "assistant",
            "action_request",
            "action_response",
            "instruction",
            "assistant",
            "instruction",
            "assistant",
            // Approved for always: two calls, one question.
            "instruction",
            "assistant",
            "action_request",
            "action_response",
            "instruction",
            "assistant",
            "action_request",
            "action_response",
            "instruction",
            "assistant",
        ]]
    );
    assert!(
        running_with(&tag).is_empty(),
        "the MCP server outlived the serve"
    );
}

/// The same question over Streamable HTTP: the server's request to the
/// client goes out on the call's own stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_serve_over_http_asks_the_clients_person_to_approve() {
    let Some(python) = python_sdk() else { return };
    let tag = format!("mcp-serve-http-elicit-{}", std::process::id());
    let model = MockServer::start().await;
    let sb = Sandbox::new();
    let db = stored_agent(&sb, &model).await;
    let cfg = sb.py_server(&python, &["stdio", &tag]);
    let extra = ["--approve".to_owned(), "--mcp".to_owned(), cfg];
    let (mut serving, url) = served_over_http_with(&sb, &db, &model, &extra).await;
    model.script([
        MockReply::text_and_tool_calls(
            "Let me echo it.",
            vec![MockToolCall {
                id: "c1".into(),
                name: "echo".into(),
                arguments: json!({"text": "hi"}),
            }],
        ),
        MockReply::text("It echoed hi."),
    ]);
    let out = py_client(
        &python,
        &["Echo hi.", "--url", &url],
        &[("MCP_TOKEN", HTTP_TOKEN), ("MCP_ELICIT", "run")],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let got: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(got["elicited"].as_array().unwrap().len(), 1, "{got}");
    assert_eq!(got["result"], json!(["Let me echo it.\n\nIt echoed hi."]));
    let pid = serving.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(20), serving.wait())
        .await
        .expect("it stops on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(
        kinds(&db).await,
        vec![[&TWO_TURNS[..2], ONE_TOOL_TURN.as_slice()].concat()]
    );
}

/// A tool server that asks the person during its call (MCP elicitation):
/// in a piped conversation, the question and each field are asked on
/// stdin, an unclear answer is asked again, and the server's call goes on
/// with the answer, which the model reads in the tool's result. A declined
/// question reaches the server as declined. With `--json` the servers are
/// not told that we can ask, and theirs decline at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_server_asks_the_person_during_its_call() {
    let Some(python) = python_sdk() else { return };
    let model = MockServer::start().await;
    let book = |id: &str| {
        MockReply::tool_calls(vec![MockToolCall {
            id: id.into(),
            name: "book".into(),
            arguments: json!({}),
        }])
    };
    model.script([
        book("call_1"),
        MockReply::text("Booked."),
        book("call_2"),
        MockReply::text("Not booked."),
    ]);
    let sb = Sandbox::new();
    let tag = format!("mcp-chat-elicit-{}", std::process::id());
    let cfg = sb.py_server(&python, &["stdio", &tag]);
    let url = model.base_url();
    let args = ["chat", "--base-url", &url, "--model", "m", "--mcp", &cfg];
    // Fields in the order of the form: name, guests, terrace; a name too
    // short and a number that is not one are asked again.
    let lines = "Book a table.\ny\nA\nAda\nmany\n3\ny\nBook another.\nn\n/exit\n";
    let out = sb.run_with_stdin(&args, lines.as_bytes()).await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("[py] asks: Which table?"), "{stderr}");
    assert!(stderr.contains("Who the table is for"), "{stderr}");
    assert!(stderr.contains("a whole number, please"), "{stderr}");
    assert!(
        stderr.contains("that must be at least 2 characters"),
        "{stderr}"
    );
    assert!(stderr.contains("(a whole number from 1 to 12)"), "{stderr}");
    let bodies = model.bodies();
    assert_eq!(bodies.len(), 4, "{stderr}");
    let result = |i: usize| last_tool_result(&bodies[i]);
    assert!(
        result(1).contains("booked Ada for 3, terrace True"),
        "{}",
        result(1)
    );
    assert!(result(3).contains("not booked: decline"), "{}", result(3));

    // An answer over the line cap dismisses the question (the server hears
    // a cancellation), and the conversation then ends with that error
    // instead of taking it for the end of its input.
    model.script([book("call_4"), MockReply::text("Not booked.")]);
    let long = format!("Book a table.\ny\n{}\nBook another.\n", "x".repeat(2000));
    let out = sb
        .run_with_stdin_env(
            &args,
            long.as_bytes(),
            &[("LIONAGI_MAX_LINE_BYTES", "1000")],
        )
        .await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("longer than 1000 bytes"), "{stderr}");
    let bodies = model.bodies();
    let last = bodies.last().unwrap()["messages"].to_string();
    assert!(last.contains("not booked: cancel"), "{last}");
    // The same in a one-shot question with `--approve`, which reads no
    // later prompt: the turn ends, its reply is printed, and the command
    // fails with the error.
    model.script([book("call_5"), MockReply::text("Not booked, one shot.")]);
    let mut once = args.to_vec();
    once.extend(["--approve", "Book a table."]);
    let out = sb
        .run_with_stdin_env(
            &once,
            format!("y\ny\n{}\n", "x".repeat(2000)).as_bytes(),
            &[("LIONAGI_MAX_LINE_BYTES", "1000")],
        )
        .await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("longer than 1000 bytes"), "{stderr}");
    assert!(
        text(&out.stdout).contains("Not booked, one shot."),
        "{stderr}"
    );
    let bodies = model.bodies();
    let last = bodies.last().unwrap()["messages"].to_string();
    assert!(last.contains("not booked: cancel"), "{last}");

    // Not asked with `--json`: the server hears a decline at once.
    model.script([book("call_3"), MockReply::text("Not booked.")]);
    let json_args = [
        "chat",
        "--base-url",
        &url,
        "--model",
        "m",
        "--mcp",
        &cfg,
        "--json",
    ];
    let out = sb
        .run_with_stdin(&json_args, b"Book a table.\n/exit\n")
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let bodies = model.bodies();
    let last = bodies.last().unwrap()["messages"].to_string();
    assert!(last.contains("not booked: decline"), "{last}");
    assert!(running_with(&tag).is_empty());
}

/// A tool server sends the person to an address (MCP elicitation, URL
/// mode): the address is shown whole with its host apart and a warning
/// where one is due, and opened only by the person; a call refused until
/// an address is opened shows it the same way and tells the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_server_sends_the_person_to_an_address() {
    let Some(python) = python_sdk() else { return };
    let model = MockServer::start().await;
    let call = |id: &str, name: &str, arguments: Value| {
        MockReply::tool_calls(vec![MockToolCall {
            id: id.into(),
            name: name.into(),
            arguments,
        }])
    };
    model.script([
        call(
            "c1",
            "sign_in",
            json!({"url": "http://xn--shp-qla.example/in"}),
        ),
        MockReply::text("Signed in."),
        call("c2", "pay", json!({})),
        MockReply::text("Pay first."),
    ]);
    let sb = Sandbox::new();
    let tag = format!("mcp-chat-url-{}", std::process::id());
    let cfg = sb.py_server(&python, &["stdio", &tag]);
    let url = model.base_url();
    let args = ["chat", "--base-url", &url, "--model", "m", "--mcp", &cfg];
    let lines = "Sign in.\nmaybe\ny\nPay.\nn\n/exit\n";
    let out = sb.run_with_stdin(&args, lines.as_bytes()).await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("[py] asks you to open an address: Sign in to the shop"),
        "{stderr}"
    );
    assert!(stderr.contains("host: xn--shp-qla.example"), "{stderr}");
    assert!(
        stderr.contains("address: http://xn--shp-qla.example/in"),
        "{stderr}"
    );
    assert!(stderr.contains("warning: not encrypted"), "{stderr}");
    assert!(
        stderr.contains("warning: its name is written in punycode"),
        "{stderr}"
    );
    assert!(
        stderr.contains("address: https://pay.example.com/t/7?session=abc"),
        "{stderr}"
    );
    let bodies = model.bodies();
    assert_eq!(bodies.len(), 4, "{stderr}");
    let tool_text = |i: usize| last_tool_result(&bodies[i]);
    assert!(tool_text(1).contains("sign-in: accept"), "{}", tool_text(1));
    let refused = tool_text(3);
    assert!(
        refused.contains("needs the person to open an address first")
            && refused.contains("the person declined to open it"),
        "{refused}"
    );
    assert!(running_with(&tag).is_empty());
}

/// A served turn whose tool server asks a question (MCP elicitation):
/// the question is passed on to the person behind the served call's
/// client, its form as the server wrote it and its message naming the
/// server, and the answer goes back to the tool server; a client that
/// declines is heard as declining, and one without forms is not asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_serve_passes_a_tool_servers_question_to_the_clients_person() {
    let Some(python) = python_sdk() else { return };
    let tag = format!("mcp-serve-relay-{}", std::process::id());
    let model = MockServer::start().await;
    let sb = Sandbox::new();
    let db = stored_agent(&sb, &model).await;
    let cfg = sb.py_server(&python, &["stdio", &tag]);
    let mut serve = serve_args(&db, &model.base_url());
    serve.extend(["--mcp".to_owned(), cfg]);
    let book = || {
        MockReply::tool_calls(vec![MockToolCall {
            id: "b1".into(),
            name: "book".into(),
            arguments: json!({}),
        }])
    };
    let ask = |env: Vec<(&'static str, &'static str)>| {
        let serve = serve.clone();
        let python = python.clone();
        async move {
            let mut args = vec!["Book a table.", env!("CARGO_BIN_EXE_lionagi")];
            args.extend(serve.iter().map(String::as_str));
            let out = py_client(&python, &args, &env).await;
            assert!(out.status.success(), "{}", text(&out.stderr));
            let got: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
            assert_eq!(got["is_error"], json!(false), "{got}");
            got
        }
    };
    let tool_result = |model: &MockServer| last_tool_result(model.bodies().last().unwrap());

    model.script([book(), MockReply::text("Booked.")]);
    let got = ask(vec![
        ("MCP_ELICIT", ""),
        ("MCP_FORM", r#"{"name": "Ada", "guests": 3}"#),
    ])
    .await;
    assert_eq!(
        got["elicited"],
        json!([["[py] asks: Which table?", ["name", "guests", "terrace"]]])
    );
    let result = tool_result(&model);
    assert!(
        result.contains("booked Ada for 3, terrace False"),
        "{result}"
    );

    model.script([book(), MockReply::text("Not booked.")]);
    ask(vec![("MCP_ELICIT", ""), ("MCP_FORM", "decline")]).await;
    let result = tool_result(&model);
    assert!(result.contains("not booked: decline"), "{result}");

    // A client without forms is not asked: the tool server hears a decline.
    model.script([book(), MockReply::text("Not booked.")]);
    let got = ask(vec![]).await;
    assert!(got.get("elicited").is_none(), "{got}");
    let result = tool_result(&model);
    assert!(result.contains("not booked: decline"), "{result}");

    // An address to open goes on to a client that opens addresses, checked
    // and written back as parsed, with the server's id.
    let sign_in = MockReply::tool_calls(vec![MockToolCall {
        id: "s1".into(),
        name: "sign_in".into(),
        arguments: json!({"url": "https://Auth.Example.com/in?s=1"}),
    }]);
    model.script([sign_in, MockReply::text("Signed in.")]);
    let got = ask(vec![("MCP_ELICIT", ""), ("MCP_URL", "accept")]).await;
    assert_eq!(
        got["elicited"],
        json!([[
            "[py] asks: Sign in to the shop",
            "https://auth.example.com/in?s=1",
            "sign-in-1"
        ]])
    );
    let result = tool_result(&model);
    assert!(result.contains("sign-in: accept"), "{result}");
}
