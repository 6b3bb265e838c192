//! Against the reference server `@modelcontextprotocol/server-everything`
//! (npm), over stdio and streamable HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use branch_core::Branch;
use branch_mcp::{McpConfig, McpPolicy, McpServers};
use serde_json::{Value, json};

async fn exercise(servers: &McpServers) {
    let mut branch = Branch::builder().build().unwrap();
    let infos = servers.register(&mut branch).await.unwrap();
    let names: Vec<&str> = infos.iter().map(|i| i.name.as_str()).collect();
    for n in [
        "echo",
        "get-sum",
        "get-tiny-image",
        "get-structured-content",
    ] {
        assert!(names.contains(&n), "{names:?}");
    }
    let tool = |n: &str| branch.acts().get(n).unwrap().tool().clone();
    assert_eq!(
        tool("echo")
            .call(json!({"message": "hello"}))
            .await
            .unwrap(),
        json!("Echo: hello")
    );
    let sum = tool("get-sum")
        .call(json!({"a": 2, "b": 40}))
        .await
        .unwrap();
    assert!(sum.as_str().unwrap().contains("42"), "{sum}");
    let image = tool("get-tiny-image").call(json!({})).await.unwrap();
    let types: Vec<&str> = image["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["type"].as_str())
        .collect();
    assert!(types.contains(&"image"), "{types:?}");
    // structuredContent checked against the tool's outputSchema.
    let weather = tool("get-structured-content")
        .call(json!({"location": "Chicago"}))
        .await
        .unwrap();
    assert!(weather["temperature"].is_number(), "{weather}");
    // inputSchema validation happens here, before the server.
    let bad = tool("get-structured-content")
        .call(json!({"location": "Paris"}))
        .await
        .unwrap_err();
    assert!(bad.to_string().contains("location"), "{bad}");
    servers.servers()[0].ping().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_over_stdio_with_only_the_listed_environment() {
    let Some((node, script)) = support::everything() else {
        return;
    };
    let tag = support::tag("everything-stdio");
    let config = McpConfig::from_value(&json!({"mcpServers": {"everything": {
        "command": node.display().to_string(),
        "args": [script.display().to_string(), "stdio", tag],
        "env": {"ONLY_THIS": "visible-value"}
    }}}))
    .unwrap();
    let servers = McpServers::connect(&config, &McpPolicy::new().allow_command(&node))
        .await
        .unwrap();
    exercise(&servers).await;
    let mut branch = Branch::builder().build().unwrap();
    servers.register(&mut branch).await.unwrap();
    let env = branch
        .acts()
        .get("get-env")
        .unwrap()
        .tool()
        .call(json!({}))
        .await
        .unwrap();
    let env: Value = serde_json::from_str(env.as_str().unwrap()).unwrap();
    assert_eq!(env["ONLY_THIS"], "visible-value");
    assert!(
        env.get("PATH").is_none() && env.get("HOME").is_none(),
        "{env}"
    );
    assert!(env.get("CARGO_MANIFEST_DIR").is_none(), "{env}");
    let pid = servers.servers()[0].pid().await.unwrap();
    servers.shutdown().await;
    assert!(!support::alive(pid));
    support::assert_gone(&tag).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_over_streamable_http() {
    let Some((node, script)) = support::everything() else {
        return;
    };
    let tag = support::tag("everything-http");
    let port = support::free_port();
    let mut child = tokio::process::Command::new(&node)
        .args([
            script.display().to_string(),
            "streamableHttp".into(),
            tag.clone(),
        ])
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    support::wait_for_port(port).await;
    let config = McpConfig::from_value(&json!({"mcpServers": {"everything": {
        "url": format!("http://127.0.0.1:{port}/mcp")
    }}}))
    .unwrap();
    let servers = McpServers::connect(&config, &McpPolicy::new().allow_local_network(true))
        .await
        .unwrap();
    assert_eq!(servers.servers()[0].transport(), "streamable-http");
    exercise(&servers).await;
    servers.shutdown().await;
    child.kill().await.unwrap();
}

/// The reference server's own question (`trigger-elicitation-request`,
/// offered only to a client that declares elicitation): its form of every
/// kind the specification allows (text with and without formats, a yes/no,
/// bounded numbers, single and multiple choices, titled, untitled and
/// legacy) is read whole, its defaults kept, and an answer of the required
/// name and the defaults reaches the server as accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_asks_its_own_form_and_hears_the_answer() {
    use branch_mcp::{ElicitAnswer, ElicitHook, Elicitation, FieldKind, TextFormat};
    use std::sync::{Arc, Mutex};
    let Some((node, script)) = support::everything() else {
        return;
    };
    let tag = support::tag("everything-elicit");
    let config = McpConfig::from_value(&json!({"mcpServers": {"everything": {
        "command": node.display().to_string(),
        "args": [script.display().to_string(), "stdio", tag],
    }}}))
    .unwrap();
    let asked: Arc<Mutex<Vec<Elicitation>>> = Arc::default();
    let seen = Arc::clone(&asked);
    let hook: ElicitHook = Arc::new(move |q: Elicitation| {
        let mut answer: serde_json::Map<String, Value> = q
            .form()
            .expect("a form")
            .fields
            .iter()
            .filter_map(|f| Some((f.name.clone(), f.default.clone()?)))
            .collect();
        answer.insert("name".into(), json!("Ada Lovelace"));
        seen.lock().unwrap().push(q);
        Box::pin(async move { ElicitAnswer::Accept(answer) })
    });
    let policy = McpPolicy::new().allow_command(&node);
    let servers = McpServers::connect_asking(&config, &policy, None, None, Some(hook))
        .await
        .unwrap();
    let mut branch = Branch::builder().build().unwrap();
    servers.register(&mut branch).await.unwrap();
    let tool = branch
        .acts()
        .get("trigger-elicitation-request")
        .expect("offered to a client that declares elicitation")
        .tool()
        .clone();
    let said = tool.call(json!({})).await.unwrap().to_string();
    assert!(said.contains("Name: Ada Lovelace"), "{said}");
    assert!(said.contains("Favorite Integer: 42"), "{said}");
    assert!(said.contains("\\\"action\\\": \\\"accept\\\""), "{said}");
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    let form = asked[0].form().expect("a form");
    let field = |n: &str| form.fields.iter().find(|f| f.name == n).unwrap();
    assert!(field("name").required);
    assert_eq!(form.fields.len(), 13, "{:?}", form.fields);
    assert!(matches!(
        field("email").kind,
        FieldKind::Text {
            format: Some(TextFormat::Email),
            ..
        }
    ));
    assert_eq!(
        field("integer").kind,
        FieldKind::Number {
            integer: true,
            min: Some(1.0),
            max: Some(100.0)
        }
    );
    assert!(matches!(&field("titledMultipleSelectEnum").kind,
        FieldKind::Choices { options, min: Some(1), max: Some(3) } if options[1].title == "Salmon"));
    assert!(matches!(&field("legacyTitledEnum").kind,
        FieldKind::Choice(options) if options[0].title == "Cats"));
    assert_eq!(
        field("untitledMultipleSelectEnum").default,
        Some(json!(["Guitar"]))
    );
    servers.shutdown().await;
    support::assert_gone(&tag).await;
}
