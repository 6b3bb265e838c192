//! Against a small server written with the Python `mcp` SDK, over stdio,
//! streamable HTTP and the older HTTP+SSE transport.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use branch_core::observer::{Observer, Signal};
use branch_core::{Branch, ContextProvider, Message, ToolError};
use branch_mcp::limits::MAX_REMOTE_ERROR_BYTES;
use branch_mcp::{CallEvent, McpConfig, McpError, McpPolicy, McpServers, Progress};
use serde_json::{Value, json};

/// Keeps every signal it observes.
struct Recorder(Arc<Mutex<Vec<Signal>>>);

impl Observer for Recorder {
    fn observe(&self, signal: Signal) {
        self.0.lock().unwrap().push(signal);
    }
}

fn stdio_config(python: &std::path::Path, tag: &str) -> McpConfig {
    McpConfig::from_value(&json!({"mcpServers": {"py": {
        "command": python.display().to_string(),
        "args": [support::script("py_server.py"), "stdio", tag],
        "env": {"LIONAGI_TEST_ONLY": "1"}
    }}}))
    .unwrap()
}

async fn call(branch: &Branch, tool: &str, args: Value) -> Result<Value, ToolError> {
    branch.acts().get(tool).expect(tool).tool().call(args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_tools_results_resources_and_list_changed() {
    let Some(python) = support::python() else {
        return;
    };
    let tag = support::tag("py-stdio");
    let policy = McpPolicy::new()
        .allow_command(&python)
        .max_result_bytes(10_000);
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&events);
    let servers = McpServers::connect_with(
        &stdio_config(&python, &tag),
        &policy,
        None,
        Some(Arc::new(move |e: &CallEvent| {
            seen.lock().unwrap().push(e.clone())
        })),
    )
    .await
    .unwrap();
    let server = &servers.servers()[0];
    assert_eq!(server.transport(), "stdio");
    assert!(server.protocol_version().is_some());
    assert_eq!(server.server_info().unwrap().0, "py-test");
    server.ping().await.unwrap();

    let mut branch = Branch::builder().build().unwrap();
    let infos = servers.register(&mut branch).await.unwrap();
    let names: Vec<&str> = infos.iter().map(|i| i.name.as_str()).collect();
    for n in [
        "echo", "add", "fail", "pixel", "huge", "slow", "die", "grow",
    ] {
        assert!(names.contains(&n), "{names:?}");
    }
    // The schema the model sees is the server's inputSchema.
    let schema = branch.acts().get("echo").unwrap().tool().schema().clone();
    assert_eq!(
        schema["function"]["parameters"]["required"],
        json!(["text"])
    );

    let echoed = call(&branch, "echo", json!({"text": "hi"})).await.unwrap();
    // FastMCP wraps a plain return value as structured content.
    assert_eq!(echoed, json!({"result": "hi"}));
    // Validated before the call: nothing reaches the server.
    let before = events.lock().unwrap().len();
    let bad = call(&branch, "echo", json!({"text": 3})).await.unwrap_err();
    assert!(matches!(bad, ToolError::InvalidArguments { .. }), "{bad:?}");
    assert_eq!(events.lock().unwrap().len(), before);

    let sum = call(&branch, "add", json!({"a": 2, "b": 3})).await.unwrap();
    assert_eq!(sum, json!({"total": 5}));

    let failed = call(&branch, "fail", json!({"message": "no such file"}))
        .await
        .unwrap_err();
    assert!(failed.to_string().contains("no such file"), "{failed}");

    let image = call(&branch, "pixel", json!({})).await.unwrap();
    assert_eq!(image["content"][0]["type"], "image");
    assert_eq!(image["content"][0]["mimeType"], "image/png");

    let capped = call(&branch, "huge", json!({"size": 20_000}))
        .await
        .unwrap_err();
    assert!(
        capped
            .to_string()
            .contains("exceeds the cap of 10000 bytes"),
        "{capped}"
    );

    // A server's JSON-RPC error message is kept only up to its cap.
    match server.read_resource("memo://fail/20000").await {
        Err(McpError::Remote { message, .. }) => {
            assert!(message.contains("xxxx"), "{message}");
            assert!(
                message.len() <= MAX_REMOTE_ERROR_BYTES + " [cut at the result cap]".len(),
                "{} bytes",
                message.len()
            );
        }
        other => panic!("{other:?}"),
    }

    // Resources as context, not history.
    let provider = servers.resources("py", None).unwrap();
    let text = provider
        .provide(&branch, &Message::assistant("q"))
        .await
        .unwrap()
        .unwrap();
    assert!(
        text.contains("memo://notes") && text.contains("Thursday"),
        "{text}"
    );
    assert!(branch.msgs().is_empty());

    // notifications/tools/list_changed, then a refresh registers the new tool.
    assert!(!servers.tools_changed());
    assert_eq!(
        call(&branch, "grow", json!({})).await.unwrap(),
        json!({"result": "grown"})
    );
    let start = std::time::Instant::now();
    while !servers.tools_changed() {
        assert!(start.elapsed() < Duration::from_secs(5), "no list_changed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(servers.refresh(&mut branch).await.unwrap());
    assert_eq!(
        call(&branch, "later", json!({})).await.unwrap(),
        json!({"result": "later"})
    );

    let events = events.lock().unwrap().clone();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, CallEvent::Started { tool, .. } if tool == "echo"))
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, CallEvent::Finished { tool, result: Err(_) } if tool == "fail"))
    );

    let pid = server.pid().await.unwrap();
    servers.shutdown().await;
    assert!(!support::alive(pid), "the server was not reaped");
    support::assert_gone(&tag).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_call_is_cancelled_and_progress_is_heard() {
    let Some(python) = support::python() else {
        return;
    };
    let tag = support::tag("py-cancel");
    let marker = std::env::temp_dir().join(format!("{tag}.cancelled"));
    let _ = std::fs::remove_file(&marker);
    let progress = Arc::new(Mutex::new(Vec::<Progress>::new()));
    let heard = Arc::clone(&progress);
    let servers = McpServers::connect_with(
        &stdio_config(&python, &tag),
        &McpPolicy::new().allow_command(&python),
        Some(Arc::new(move |p: &Progress| {
            heard.lock().unwrap().push(p.clone())
        })),
        None,
    )
    .await
    .unwrap();
    let mut branch = Branch::builder().build().unwrap();
    // The calling branch's observer hears the same progress as a signal;
    // another branch with the same server's tools hears nothing of it.
    let signals = Arc::new(Mutex::new(Vec::<Signal>::new()));
    branch.set_observer(Some(Arc::new(Recorder(Arc::clone(&signals)))));
    servers.register(&mut branch).await.unwrap();
    let mut other = Branch::builder().build().unwrap();
    let others = Arc::new(Mutex::new(Vec::<Signal>::new()));
    other.set_observer(Some(Arc::new(Recorder(Arc::clone(&others)))));
    servers.register(&mut other).await.unwrap();
    let args = json!({"seconds": 30, "marker": marker.display().to_string()});
    // A verb runs its tool calls as work for its branch's conversation.
    let in_branch = branch_core::telemetry::in_conversation(
        branch.id().to_string(),
        call(&branch, "slow", args),
    );
    // The call runs until its first progress reached the branch (the
    // server reports it at once; how soon it arrives depends on the
    // machine's load), then is dropped mid-call.
    let mut in_branch = Box::pin(in_branch);
    let start = std::time::Instant::now();
    let heard_progress = || {
        signals
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.class_name() == "ToolProgress")
    };
    while !heard_progress() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no progress reached the branch"
        );
        let polled = tokio::time::timeout(Duration::from_millis(50), &mut in_branch).await;
        assert!(polled.is_err(), "the call should still run: {polled:?}");
    }
    drop(in_branch);
    let start = std::time::Instant::now();
    while !marker.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no notifications/cancelled"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let progress = progress.lock().unwrap().clone();
    assert!(!progress.is_empty(), "no progress notification");
    assert_eq!(progress[0].server, "py");
    assert_eq!(progress[0].total, Some(4.0));
    let observed = signals.lock().unwrap().clone();
    let first = observed
        .iter()
        .find(|s| s.class_name() == "ToolProgress")
        .expect("no ToolProgress signal");
    assert_eq!(first.branch_id(), branch.id());
    assert!(
        !others
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.class_name() == "ToolProgress"),
        "another branch heard the call's progress"
    );
    assert!(
        matches!(first, Signal::ToolProgress { source, total: Some(t), .. } if source == "py" && *t == 4.0),
        "{first:?}"
    );
    // The server is still usable after a cancellation.
    assert_eq!(
        call(&branch, "echo", json!({"text": "ok"})).await.unwrap()["result"],
        "ok"
    );
    servers.shutdown().await;
    support::assert_gone(&tag).await;
    let _ = std::fs::remove_file(&marker);
}

async fn start_http(
    python: &std::path::Path,
    mode: &str,
    tag: &str,
) -> (tokio::process::Child, u16) {
    let port = support::free_port();
    let child = tokio::process::Command::new(python)
        .args([
            &support::script("py_server.py"),
            mode,
            &port.to_string(),
            tag,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    support::wait_for_port(port).await;
    (child, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_through_the_guard() {
    let Some(python) = support::python() else {
        return;
    };
    let tag = support::tag("py-http");
    let (mut child, port) = start_http(&python, "http", &tag).await;
    let config = McpConfig::from_value(&json!({"mcpServers": {"web": {
        "url": format!("http://127.0.0.1:{port}/mcp"),
        "headers": {"Authorization": "Bearer sk-test-secret-123"}
    }}}))
    .unwrap();
    // Loopback is refused unless the program allows the local network.
    let refused = McpServers::connect(&config, &McpPolicy::new())
        .await
        .unwrap_err();
    assert!(matches!(refused, McpError::Refused { .. }), "{refused}");
    assert!(!format!("{refused} {refused:?}").contains("sk-test-secret"));

    let servers = McpServers::connect(&config, &McpPolicy::new().allow_local_network(true))
        .await
        .unwrap();
    assert_eq!(servers.servers()[0].transport(), "streamable-http");
    servers.servers()[0].ping().await.unwrap();
    let mut branch = Branch::builder().build().unwrap();
    servers.register(&mut branch).await.unwrap();
    assert_eq!(
        call(&branch, "echo", json!({"text": "over http"}))
            .await
            .unwrap(),
        json!({"result": "over http"})
    );
    let sum = call(&branch, "add", json!({"a": 1, "b": 1})).await.unwrap();
    assert_eq!(sum["total"], 2);
    servers.shutdown().await;
    child.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_older_sse_transport_is_the_fallback() {
    let Some(python) = support::python() else {
        return;
    };
    let tag = support::tag("py-sse");
    let (mut child, port) = start_http(&python, "sse", &tag).await;
    // No "type": the streamable-HTTP POST is refused, the SSE GET works.
    let config = McpConfig::from_value(&json!({"mcpServers": {"old": {
        "url": format!("http://127.0.0.1:{port}/sse")
    }}}))
    .unwrap();
    let servers = McpServers::connect(&config, &McpPolicy::new().allow_local_network(true))
        .await
        .unwrap();
    assert_eq!(servers.servers()[0].transport(), "sse");
    let mut branch = Branch::builder().build().unwrap();
    servers.register(&mut branch).await.unwrap();
    assert_eq!(
        call(&branch, "echo", json!({"text": "old"})).await.unwrap(),
        json!({"result": "old"})
    );
    servers.shutdown().await;
    child.kill().await.unwrap();
}

/// A server's question during its call (MCP elicitation) reaches the hook
/// as a form read from its schema, in its order; the hook's answer goes
/// back when it fits the form, and one that does not is sent as a
/// cancellation, never as data the form refuses. A question sent while no
/// request of ours is in flight is declined unasked. Without a hook our
/// client declares no elicitation and a question is declined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_question_reaches_the_hook_and_only_fitting_answers_go_back() {
    use branch_mcp::{Asks, ElicitAnswer, ElicitHook, Elicitation, FieldKind};
    let Some(python) = support::python() else {
        return;
    };
    let tag = support::tag("py-elicit");
    let policy = McpPolicy::new().allow_command(&python);
    let asked: Arc<Mutex<Vec<Elicitation>>> = Arc::default();
    let answers: Arc<Mutex<Vec<ElicitAnswer>>> = Arc::new(Mutex::new(vec![
        // Popped from the end: a fitting answer, then one with a guest
        // count that is not a number.
        ElicitAnswer::Accept(
            json!({"name": "Ada", "guests": "many"})
                .as_object()
                .unwrap()
                .clone(),
        ),
        ElicitAnswer::Accept(
            json!({"name": "Ada", "guests": 3})
                .as_object()
                .unwrap()
                .clone(),
        ),
    ]));
    let (seen, queue) = (Arc::clone(&asked), Arc::clone(&answers));
    let hook: ElicitHook = Arc::new(move |q| {
        seen.lock().unwrap().push(q);
        let a = queue.lock().unwrap().pop().unwrap();
        Box::pin(async move { a })
    });
    let config = stdio_config(&python, &tag);
    let servers = McpServers::connect_asking(&config, &policy, None, None, Some(hook))
        .await
        .unwrap();
    let mut branch = Branch::builder().build().unwrap();
    servers.register(&mut branch).await.unwrap();
    let booked = call(&branch, "book", json!({})).await.unwrap();
    assert_eq!(booked, json!({"result": "booked Ada for 3, terrace False"}));
    let refused = call(&branch, "book", json!({})).await.unwrap();
    assert_eq!(refused, json!({"result": "not booked: cancel"}));
    {
        let asked = asked.lock().unwrap();
        assert_eq!(asked.len(), 2);
        assert_eq!(asked[0].server, "py");
        assert_eq!(asked[0].message, "Which table?");
        let Asks::Form { form, .. } = &asked[0].asks else {
            panic!("{:?}", asked[0]);
        };
        let fields: Vec<(&str, bool)> = form
            .fields
            .iter()
            .map(|f| (f.name.as_str(), f.required))
            .collect();
        assert_eq!(
            fields,
            [("name", true), ("guests", true), ("terrace", false)]
        );
        assert_eq!(
            form.fields[1].kind,
            FieldKind::Number {
                integer: true,
                min: Some(1.0),
                max: Some(12.0)
            }
        );
        assert_eq!(form.fields[2].default, Some(json!(false)));
    }

    // A question sent while no request of ours is in flight (here 0.3 s
    // after the call that started it ended) is declined without asking
    // anyone.
    let asked_before = asked.lock().unwrap().len();
    let later = call(&branch, "ask_later", json!({})).await.unwrap();
    assert_eq!(later, json!({"result": "asked later"}));
    let start = std::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let heard = call(&branch, "asked_later", json!({})).await.unwrap();
        if heard != json!({"result": "not yet"}) {
            assert_eq!(heard, json!({"result": "decline"}));
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "never asked");
    }
    assert_eq!(asked.lock().unwrap().len(), asked_before);
    servers.shutdown().await;

    let servers = McpServers::connect(&config, &policy).await.unwrap();
    let mut branch = Branch::builder().build().unwrap();
    servers.register(&mut branch).await.unwrap();
    let declined = call(&branch, "book", json!({})).await.unwrap();
    assert_eq!(declined, json!({"result": "not booked: decline"}));
    servers.shutdown().await;
}

/// A server may send the person to an address (URL mode) only when the
/// policy offers addresses: the address reaches the hook checked, the
/// person's consent goes back with no content, an address that could
/// mislead is declined unasked, and a call refused until an address is
/// opened (`URLElicitationRequired`, -32042) shows it to the person and
/// tells the model what they said.
#[tokio::test]
async fn a_server_asks_the_person_to_open_an_address() {
    use branch_mcp::{Asks, ElicitAnswer};
    let Some(python) = support::python() else {
        return;
    };
    let tag = support::tag("py-elicit-url");
    let (hook, asked) = support::asking_hook(ElicitAnswer::Accept(serde_json::Map::new()));
    let config = stdio_config(&python, &tag);
    let policy = McpPolicy::new().allow_command(&python);
    let offered = policy.clone().allow_url_elicitation(true);
    let servers = McpServers::connect_asking(&config, &offered, None, None, Some(hook.clone()))
        .await
        .unwrap();
    let mut branch = Branch::builder().build().unwrap();
    servers.register(&mut branch).await.unwrap();
    let url = "https://auth.example.com/sign-in?state=s1";
    let signed = call(&branch, "sign_in", json!({"url": url})).await.unwrap();
    assert_eq!(signed, json!({"result": "sign-in: accept"}));
    for bad in ["javascript:alert(1)", "https://shop.example@evil.example/"] {
        let refused = call(&branch, "sign_in", json!({"url": bad})).await.unwrap();
        assert_eq!(refused, json!({"result": "sign-in: decline"}), "{bad}");
    }
    let paid = call(&branch, "pay", json!({}))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        paid.contains("needs the person to open an address first")
            && paid
                .contains("Pay for the table (at pay.example.com): the person agreed to open it"),
        "{paid}"
    );
    // An address that could mislead is not shown, and the model is told.
    let unsafe_pay = call(&branch, "pay", json!({"url": "javascript:alert(1)"}))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        unsafe_pay.contains("no address it gave could be offered safely"),
        "{unsafe_pay}"
    );
    {
        let asked = asked.lock().unwrap();
        assert_eq!(asked.len(), 2, "{asked:?}");
        let hosts: Vec<(&str, &str, &str)> = asked
            .iter()
            .map(|q| match &q.asks {
                Asks::Url(a) => (q.message.as_str(), a.url.as_str(), a.id.as_str()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            hosts,
            [
                ("Sign in to the shop", url, "sign-in-1"),
                (
                    "Pay for the table",
                    "https://pay.example.com/t/7?session=abc",
                    "pay-7"
                )
            ]
        );
    }
    servers.shutdown().await;

    // Not offered: the same server hears a decline, and the person is
    // asked nothing.
    asked.lock().unwrap().clear();
    let servers = McpServers::connect_asking(&config, &policy, None, None, Some(hook))
        .await
        .unwrap();
    let mut branch = Branch::builder().build().unwrap();
    servers.register(&mut branch).await.unwrap();
    let signed = call(&branch, "sign_in", json!({"url": url})).await.unwrap();
    assert_eq!(signed, json!({"result": "sign-in: decline"}));
    let paid = call(&branch, "pay", json!({}))
        .await
        .unwrap_err()
        .to_string();
    assert!(paid.contains("none was shown"), "{paid}");
    assert!(asked.lock().unwrap().is_empty());
    servers.shutdown().await;
}

/// The person's time is not the server's: a call whose server waits on a
/// question longer than the call's deadline still ends with its result.
#[tokio::test]
async fn a_calls_deadline_stands_still_while_the_person_answers() {
    use branch_mcp::{ElicitAnswer, ElicitHook};
    let Some(python) = support::python() else {
        return;
    };
    let tag = support::tag("py-elicit-slow");
    let policy = McpPolicy::new()
        .allow_command(&python)
        .call_timeout(Duration::from_secs(2));
    let hook: ElicitHook = Arc::new(|_| {
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            let answer = json!({"name": "Ada", "guests": 2});
            ElicitAnswer::Accept(answer.as_object().unwrap().clone())
        })
    });
    let servers = McpServers::connect_asking(
        &stdio_config(&python, &tag),
        &policy,
        None,
        None,
        Some(hook),
    )
    .await
    .unwrap();
    let mut branch = Branch::builder().build().unwrap();
    servers.register(&mut branch).await.unwrap();
    let booked = call(&branch, "book", json!({})).await.unwrap();
    assert_eq!(booked, json!({"result": "booked Ada for 2, terrace False"}));
    // The server's own time still counts: a call that hangs times out.
    let marker = std::env::temp_dir().join(format!("{tag}.cancelled"));
    let args = json!({"seconds": 30, "marker": marker.display().to_string()});
    let slow = call(&branch, "slow", args).await;
    assert!(
        matches!(&slow, Err(e) if e.to_string().contains("did not finish within")),
        "{slow:?}"
    );
    servers.shutdown().await;
    let _ = std::fs::remove_file(&marker);
}

/// A server's question has a span naming the server, the form's size and
/// how it ended, and never what the person answered.
#[tokio::test]
async fn a_question_has_a_span_with_its_outcome_and_never_the_answer() {
    use branch_mcp::{ElicitAnswer, ElicitHook};
    let Some(python) = support::python() else {
        return;
    };
    // One thread: the client's handler runs where the span is heard.
    let spans = support::spans::Spans::named("mcp.elicitation");
    let _guard = spans.listen();
    let tag = support::tag("py-elicit-span");
    let policy = McpPolicy::new().allow_command(&python);
    let hook: ElicitHook = Arc::new(|_| {
        let answer = json!({"name": "Secret Ada", "guests": 3});
        Box::pin(async move { ElicitAnswer::Accept(answer.as_object().unwrap().clone()) })
    });
    let servers = McpServers::connect_asking(
        &stdio_config(&python, &tag),
        &policy,
        None,
        None,
        Some(hook),
    )
    .await
    .unwrap();
    let mut branch = Branch::builder().build().unwrap();
    servers.register(&mut branch).await.unwrap();
    let booked = call(&branch, "book", json!({})).await.unwrap();
    assert_eq!(
        booked,
        json!({"result": "booked Secret Ada for 3, terrace False"})
    );
    servers.shutdown().await;
    let heard = spans.heard();
    let field = |name: &str| {
        heard
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(field("server").as_deref(), Some("py"), "{heard:?}");
    assert_eq!(field("fields").as_deref(), Some("3"), "{heard:?}");
    assert_eq!(field("mode").as_deref(), Some("\"form\""), "{heard:?}");
    assert_eq!(field("action").as_deref(), Some("\"accept\""), "{heard:?}");
    assert!(!format!("{heard:?}").contains("Secret"), "{heard:?}");
}
