//! MCP servers for the command line: `--mcp FILE` (repeatable) connected
//! under the policy the flags give, tool calls shown as they happen, and
//! the `/tools` listing.

use std::path::Path;
use std::sync::Arc;

use branch_core::{Branch, Message, MessageContent};
use branch_mcp::{CallEvent, McpConfig, McpPolicy, McpServers, McpToolInfo};
use serde_json::{Value, json};

use super::chat_error::ChatError;
use super::shown::one_line;

/// Characters of a tool result shown in the conversation display.
const SHOWN_RESULT_CHARS: usize = 200;

/// What the MCP flags ask for.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct McpArgs {
    /// `--mcp FILE`, in order.
    pub files: Vec<String>,
    /// `--mcp-path`: bare command names are looked up on the PATH.
    pub search_path: bool,
    /// `--mcp-local`: HTTP servers may be on this machine or the local network.
    pub local: bool,
}

/// The policy of servers from files the person handed over themselves:
/// their commands are trusted (it is their configuration), the rest stays
/// closed unless a flag opens it.
fn policy(args: &McpArgs) -> McpPolicy {
    // Addresses to open are offered only where questions are asked at
    // all: a person at the conversation, or `mcp serve`'s client.
    let mut p = McpPolicy::new()
        .allow_configured_commands()
        .allow_local_network(args.local)
        .allow_url_elicitation(true);
    if args.search_path {
        if let Some(path) = std::env::var_os("PATH") {
            p = p.search_path(path);
        }
    }
    p
}

/// Reads every `--mcp` file into one configuration; a server name given
/// twice is an error.
fn config(args: &McpArgs) -> Result<McpConfig, ChatError> {
    let mut servers = Vec::new();
    for f in &args.files {
        let c = McpConfig::from_file(Path::new(f)).map_err(|e| ChatError::Mcp(e.to_string()))?;
        for s in c.servers {
            if servers
                .iter()
                .any(|x: &branch_mcp::ServerSpec| x.name == s.name)
            {
                return Err(ChatError::Mcp(format!(
                    "{f}: the server name `{}` is used twice",
                    s.name
                )));
            }
            servers.push(s);
        }
    }
    Ok(McpConfig { servers })
}

/// What hears the servers' tool calls and their progress as they happen.
#[derive(Default)]
pub(crate) struct ToolHooks {
    /// Each call's start and end.
    pub calls: Option<branch_mcp::CallHook>,
    /// Each progress notification of a call.
    pub progress: Option<branch_mcp::ProgressHook>,
    /// Puts a server's question to the person (MCP elicitation); without
    /// it, the servers are not told that we can ask.
    pub elicit: Option<branch_mcp::ElicitHook>,
}

impl ToolHooks {
    /// Each call and its short result, and each progress note, printed on
    /// stderr (above the spinner).
    pub(crate) fn on_stderr() -> Self {
        let calls = Arc::new(|e: &CallEvent| {
            let line = match e {
                CallEvent::Started { tool, arguments } => {
                    format!("[tool] {tool} {}", short(arguments))
                }
                CallEvent::Finished { tool, result } => match result {
                    Ok(v) => format!("[tool] {tool} -> {}", short(v)),
                    Err(why) => format!(
                        "[tool] {tool} failed: {}",
                        short(&Value::String(why.clone()))
                    ),
                },
            };
            super::spinner::eprint_line(&line);
        }) as branch_mcp::CallHook;
        let progress = Arc::new(|p: &branch_mcp::Progress| {
            super::spinner::eprint_line(&format!("[tool] {}", progress_line(p)));
        }) as branch_mcp::ProgressHook;
        Self {
            calls: Some(calls),
            progress: Some(progress),
            elicit: None,
        }
    }
}

/// A tool server's progress notification as one line: "NAME: progress
/// 3/10 note".
pub(crate) fn progress_line(p: &branch_mcp::Progress) -> String {
    let of = p.total.map(|t| format!("/{t}")).unwrap_or_default();
    let note = p
        .message
        .as_deref()
        .map(|m| format!(" {}", one_line(m)))
        .unwrap_or_default();
    format!("{}: progress {}{of}{note}", one_line(&p.server), p.progress)
}

/// Connects the servers and registers their tools on `branch`; `hooks`
/// hear their calls.
pub(crate) async fn connect(
    args: &McpArgs,
    branch: &mut Branch,
    hooks: ToolHooks,
) -> Result<Option<McpServers>, ChatError> {
    if args.files.is_empty() {
        return Ok(None);
    }
    let config = config(args)?;
    let servers = McpServers::connect_asking(
        &config,
        &policy(args),
        hooks.progress,
        hooks.calls,
        hooks.elicit,
    )
    .await
    .map_err(|e| ChatError::Mcp(e.to_string()))?;
    if let Err(e) = servers.register(branch).await {
        servers.shutdown().await;
        return Err(ChatError::Mcp(e.to_string()));
    }
    Ok(Some(servers))
}

/// A value cut to a line for the display.
fn short(v: &Value) -> String {
    let s = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let line = one_line(&s);
    if line.chars().count() > SHOWN_RESULT_CHARS {
        let cut: String = line.chars().take(SHOWN_RESULT_CHARS).collect();
        format!("{cut}...")
    } else {
        line.into_owned()
    }
}

/// The `/tools` listing.
pub(crate) fn listing(tools: &[McpToolInfo]) -> String {
    if tools.is_empty() {
        return "no tools (add MCP servers with --mcp FILE)".into();
    }
    tools
        .iter()
        .map(|t| {
            let about = one_line(
                t.description
                    .as_deref()
                    .and_then(|d| d.lines().next())
                    .unwrap_or(""),
            );
            let origin = if t.name == t.original {
                t.server.clone()
            } else {
                format!("{}: {}", t.server, one_line(&t.original))
            };
            format!("{}  ({origin})  {about}", t.name)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The tool calls among `messages` (a turn's), for `--json`.
pub(crate) fn calls_of<'a>(messages: impl IntoIterator<Item = &'a Message>) -> Vec<Value> {
    messages
        .into_iter()
        .filter_map(|m| match &m.content {
            MessageContent::ActionResponse(r) => Some(json!({
                "name": r.function,
                "arguments": r.arguments,
                "output": r.output,
                "error": r.error,
            })),
            _ => None,
        })
        .collect()
}
