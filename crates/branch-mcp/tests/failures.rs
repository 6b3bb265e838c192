//! Servers that break: each a clear error within its deadline and no
//! process left behind. The broken servers are hand-written (no SDK would
//! misbehave on purpose) and run with the system's python3.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use branch_core::Branch;
use branch_mcp::{McpConfig, McpError, McpPolicy, McpServers};
use serde_json::json;

fn python3() -> PathBuf {
    support::which("python3").expect("python3 on the PATH")
}

fn raw(mode: &str, tag: &str) -> McpConfig {
    McpConfig::from_value(&json!({"mcpServers": {"raw": {
        "command": python3().display().to_string(),
        "args": [support::script("raw_server.py"), mode, tag],
    }}}))
    .unwrap()
}

fn policy() -> McpPolicy {
    McpPolicy::new()
        .allow_command(python3())
        // Generous: a loaded CI machine starts python slowly.
        .init_timeout(Duration::from_secs(15))
        .call_timeout(Duration::from_secs(15))
}

#[tokio::test]
async fn a_server_that_exits_at_start() {
    let tag = support::tag("exit");
    let err = McpServers::connect(&raw("exit", &tag), &policy())
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, McpError::Start { .. }), "{err:?}");
    assert!(
        text.contains("exited") && text.contains("fatal: no configuration"),
        "{text}"
    );
    support::assert_gone(&tag).await;
}

#[tokio::test]
async fn a_server_that_hangs_at_initialize() {
    let tag = support::tag("hang");
    let start = Instant::now();
    let short = policy().init_timeout(Duration::from_secs(3));
    let err = McpServers::connect(&raw("hang", &tag), &short)
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::Timeout { .. }), "{err:?}");
    assert!(err.to_string().contains("initialize"), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(6),
        "{:?}",
        start.elapsed()
    );
    support::assert_gone(&tag).await;
}

#[tokio::test]
async fn a_server_that_sends_malformed_json_rpc() {
    let tag = support::tag("garbage");
    let start = Instant::now();
    let err = McpServers::connect(&raw("garbage", &tag), &policy())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("malformed JSON-RPC"), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "not at once: {:?}",
        start.elapsed()
    );
    support::assert_gone(&tag).await;
}

async fn connected(mode: &str, tag: &str) -> (McpServers, Branch) {
    let servers = McpServers::connect(&raw(mode, tag), &policy())
        .await
        .unwrap();
    let mut branch = Branch::builder().build().unwrap();
    servers.register(&mut branch).await.unwrap();
    (servers, branch)
}

/// A server that abuses questions to open addresses: a too long address
/// and one carrying a user name are declined unasked, a completion notice
/// with a huge id is taken in stride, and a refusal (-32042) listing
/// 10,000 addresses asks the person about the first few only.
#[tokio::test]
async fn a_servers_addresses_are_checked_and_bounded() {
    use branch_mcp::{Asks, ElicitAnswer, MAX_URLS_PER_ERROR};
    let tag = support::tag("asker");
    let (hook, asked) = support::asking_hook(ElicitAnswer::Accept(serde_json::Map::new()));
    let offered = policy().allow_url_elicitation(true);
    let servers = McpServers::connect_asking(&raw("asker", &tag), &offered, None, None, Some(hook))
        .await
        .unwrap();
    let mut branch = Branch::builder().build().unwrap();
    servers.register(&mut branch).await.unwrap();
    let err = branch
        .acts()
        .get("boom")
        .unwrap()
        .tool()
        .call(json!({}))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("seen: decline,decline,accept"), "{err}");
    assert!(
        err.contains("m0 (at e0.example): the person agreed"),
        "{err}"
    );
    let hosts: Vec<String> = asked
        .lock()
        .unwrap()
        .iter()
        .map(|q| match &q.asks {
            Asks::Url(a) => a.host.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    let mut expected = vec!["ok.example".to_owned()];
    expected.extend((0..MAX_URLS_PER_ERROR).map(|i| format!("e{i}.example")));
    assert_eq!(hosts, expected);
    servers.shutdown().await;
    support::assert_gone(&tag).await;
}

#[tokio::test]
async fn a_huge_result_is_refused() {
    let tag = support::tag("huge");
    let (servers, branch) = connected("huge", &tag).await;
    let start = Instant::now();
    let err = branch
        .acts()
        .get("boom")
        .unwrap()
        .tool()
        .call(json!({}))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("larger than the cap"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(!err.to_string().contains("did not finish"), "{err}");
    servers.shutdown().await;
    support::assert_gone(&tag).await;
}

#[tokio::test]
async fn a_server_that_dies_mid_call() {
    let tag = support::tag("die");
    let (servers, branch) = connected("die", &tag).await;
    let start = Instant::now();
    let err = branch
        .acts()
        .get("boom")
        .unwrap()
        .tool()
        .call(json!({}))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("exited") || text.contains("gone"), "{text}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    servers.shutdown().await;
    support::assert_gone(&tag).await;
}

#[tokio::test]
async fn tools_list_follows_every_page() {
    let tag = support::tag("paged");
    let (servers, branch) = connected("paged", &tag).await;
    // Negotiated down to the version the server speaks.
    assert_eq!(
        servers.servers()[0].protocol_version().as_deref(),
        Some("2024-11-05")
    );
    let names: Vec<String> = servers.registered().into_iter().map(|t| t.name).collect();
    assert_eq!(names, ["t1", "t2", "t3", "t4", "t5"]);
    let out = branch
        .acts()
        .get("t4")
        .unwrap()
        .tool()
        .call(json!({}))
        .await
        .unwrap();
    assert_eq!(out, json!("t4"));
    // A tool cap below the count is an error, not a silent cut.
    let err = McpServers::connect(&raw("paged", &tag), &policy().max_tools_per_server(3))
        .await
        .unwrap();
    let mut b = Branch::builder().build().unwrap();
    let refused = err.register(&mut b).await.unwrap_err();
    assert!(matches!(refused, McpError::Cap { .. }), "{refused}");
    err.shutdown().await;
    servers.shutdown().await;
    support::assert_gone(&tag).await;
}

/// A refresh whose listing fails, or is abandoned, registered nothing: the
/// announced change is still to be read, and the next refresh reads it.
#[tokio::test]
async fn a_failed_or_abandoned_refresh_keeps_the_change_to_read() {
    let tag = support::tag("flaky");
    let (servers, mut branch) = connected("flaky", &tag).await;
    let names =
        |s: &McpServers| -> Vec<String> { s.registered().into_iter().map(|t| t.name).collect() };
    assert_eq!(names(&servers), ["change"]);
    let tool = branch.acts().get("change").unwrap().tool().clone();
    assert_eq!(tool.call(json!({})).await.unwrap(), json!("changed"));
    let start = Instant::now();
    while !servers.tools_changed() {
        assert!(start.elapsed() < Duration::from_secs(5), "no list_changed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let err = servers.refresh(&mut branch).await.unwrap_err();
    assert!(
        err.to_string().contains("the list is being rebuilt"),
        "{err}"
    );
    assert!(
        servers.tools_changed(),
        "a failed listing forgot the change"
    );
    let abandoned =
        tokio::time::timeout(Duration::from_millis(500), servers.refresh(&mut branch)).await;
    assert!(abandoned.is_err(), "the third listing is never answered");
    assert!(
        servers.tools_changed(),
        "an abandoned listing forgot the change"
    );
    assert_eq!(names(&servers), ["change"]);
    assert!(servers.refresh(&mut branch).await.unwrap());
    assert_eq!(names(&servers), ["change", "new"]);
    assert!(branch.acts().get("new").is_some());
    assert!(!servers.tools_changed());
    servers.shutdown().await;
    support::assert_gone(&tag).await;
}

#[tokio::test]
async fn shutdown_ends_the_whole_process_group() {
    let tag = support::tag("group");
    let pidfile = std::env::temp_dir().join(format!("{tag}.pid"));
    let config = McpConfig::from_value(&json!({"mcpServers": {"raw": {
        "command": python3().display().to_string(),
        "args": [support::script("raw_server.py"), "group", pidfile.display().to_string(), tag],
        "env": {"PATH": std::env::var("PATH").unwrap()}
    }}}))
    .unwrap();
    let servers = McpServers::connect(&config, &policy()).await.unwrap();
    let grandchild: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(support::alive(grandchild));
    servers.shutdown().await;
    let start = Instant::now();
    while support::alive(grandchild) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the grandchild outlived the server"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    support::assert_gone(&tag).await;
    let _ = std::fs::remove_file(&pidfile);
}

#[tokio::test]
async fn a_command_outside_the_policy_never_starts() {
    let tag = support::tag("refused");
    let err = McpServers::connect(&raw("paged", &tag), &McpPolicy::new())
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::Refused { .. }), "{err}");
    let bare =
        McpConfig::from_value(&json!({"mcpServers": {"b": {"command": "python3"}}})).unwrap();
    let err = McpServers::connect(&bare, &McpPolicy::new().allow_configured_commands())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("PATH search is off"), "{err}");
}

#[tokio::test]
async fn secrets_in_env_never_reach_an_error() {
    let tag = support::tag("leak");
    let config = McpConfig::from_value(&json!({"mcpServers": {"raw": {
        "command": python3().display().to_string(),
        "args": [support::script("raw_server.py"), "leak", tag],
        "env": {"API_TOKEN": "sk-live-abcdef123456"}
    }}}))
    .unwrap();
    assert!(!format!("{config:?}").contains("sk-live"));
    let err = McpServers::connect(&config, &policy()).await.unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(shown.contains("refusing token [redacted]"), "{shown}");
    assert!(!shown.contains("sk-live"), "{shown}");
}
