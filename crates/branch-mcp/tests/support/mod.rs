//! Locating the real MCP servers the tests start (installed by
//! `.ci/services/mcp.sh`), free loopback ports, and process checks.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub mod spans;

/// Whether a missing server fails the test instead of skipping it.
pub fn required() -> bool {
    std::env::var_os("CI").is_some() || std::env::var("LIONAGI_MCP_REQUIRED").as_deref() == Ok("1")
}

/// The path in `var`, or `None` after saying why the test is skipped
/// (panics instead when the servers are required).
pub fn located(var: &str) -> Option<PathBuf> {
    match std::env::var_os(var).map(PathBuf::from) {
        Some(p) if p.exists() => Some(p),
        _ => {
            assert!(
                !required(),
                "{var} is not set to an existing file, and the MCP servers are required \
                 (CI or LIONAGI_MCP_REQUIRED=1): run .ci/services/mcp.sh"
            );
            eprintln!("skipped: {var} is not set (source .ci/services/mcp.sh to run this test)");
            None
        }
    }
}

/// The Python interpreter that has the `mcp` SDK.
pub fn python() -> Option<PathBuf> {
    located("LIONAGI_MCP_PYTHON")
}

/// `node` and server-everything's entry script.
pub fn everything() -> Option<(PathBuf, PathBuf)> {
    let script = located("LIONAGI_MCP_EVERYTHING")?;
    let node = std::env::var_os("LIONAGI_MCP_NODE")
        .map(PathBuf::from)
        .or_else(|| which("node"))?;
    Some((node, script))
}

/// An absolute path of `name` on this process's PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// A test server script of this crate.
pub fn script(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/servers")
        .join(name)
        .display()
        .to_string()
}

/// A free loopback port (the kernel picks it).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until something listens on 127.0.0.1:`port` (at most 30 s).
pub async fn wait_for_port(port: u16) {
    let start = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no server on port {port}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether a live (not zombie) process has `needle` in its command line.
pub fn running_with(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains(needle) && alive(pid) {
            out.push(pid);
        }
    }
    out
}

/// Whether `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// A unique word to find a test's processes by.
pub fn tag(name: &str) -> String {
    format!("mcp-test-{name}-{}", std::process::id())
}

/// Waits up to 5 s for the processes tagged `needle` to be gone.
pub async fn assert_gone(needle: &str) {
    let start = Instant::now();
    loop {
        let left = running_with(needle);
        if left.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "orphans left: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The questions a hook was asked, in order.
pub type Asked = std::sync::Arc<std::sync::Mutex<Vec<branch_mcp::Elicitation>>>;

/// A hook that keeps every question it is asked and gives each the same
/// answer.
pub fn asking_hook(answer: branch_mcp::ElicitAnswer) -> (branch_mcp::ElicitHook, Asked) {
    let asked = Asked::default();
    let seen = std::sync::Arc::clone(&asked);
    let hook: branch_mcp::ElicitHook = std::sync::Arc::new(move |q| {
        seen.lock().unwrap().push(q);
        let answer = answer.clone();
        Box::pin(async move { answer })
    });
    (hook, asked)
}
