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
