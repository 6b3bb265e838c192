//! `lionagi mcp serve --store PATH --branch ID|NAME`: a stored conversation
//! offered to any MCP client over stdio, as a tool `ask` that runs one
//! recorded turn per call (with the model the flags or environment choose,
//! as `lionagi chat --resume` does, and the tools of `--mcp FILE`).
//!
//! Stdout carries the protocol and nothing else; errors go to stderr.

use std::future::Future;
use std::pin::Pin;

use branch_mcp::{Ask, BranchServer, Cancelled, McpServers};
use tokio::sync::Mutex;

use super::chat_args::ChatArgs;
use super::chat_error::{ChatError, ModelInfo};
use super::conversation::Conversation;
use super::turn::{self, Display};
use super::{mcp_tools, model_choice, tool_turn};

/// The help text of `lionagi mcp`.
pub(crate) const MCP_USAGE: &str = "usage:
  lionagi mcp serve --store PATH --branch ID|NAME [OPTIONS]

Serves the stored conversation over MCP (stdio) as a tool `ask`: each call is one turn,
appended to the store. Options: the model flags of `lionagi chat` (--provider, --model,
--base-url, --max-tokens, --temperature) and --mcp FILE / --mcp-path / --mcp-local for
the conversation's own tools.";

/// One conversation answering questions, one turn at a time.
struct Served {
    conv: Mutex<Conversation>,
    info: ModelInfo,
    servers: Option<McpServers>,
}

impl Ask for Served {
    fn ask(
        &self,
        question: String,
        cancelled: Cancelled,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send + '_>> {
        Box::pin(async move {
            let mut conv = self.conv.lock().await;
            let quiet = Display {
                stream: false,
                spinner: false,
                dim: false,
            };
            let answering = async {
                match &self.servers {
                    Some(s) => {
                        s.refresh(conv.branch_mut())
                            .await
                            .map_err(|e| e.to_string())?;
                        tool_turn::ask(conv.branch_mut(), &question, &self.info, quiet)
                            .await
                            .map_err(|e| e.to_string())
                    }
                    None => turn::ask(conv.branch_mut(), &question, &self.info, quiet)
                        .await
                        .map_err(|e| e.to_string()),
                }
            };
            // A cancelled call drops its turn (the turn's own code takes
            // back what it began); the store write after it is not raced,
            // so a turn once answered is recorded whole.
            let answer = tokio::select! {
                biased;
                () = cancelled => {
                    return Err("the call was cancelled; nothing of its turn was kept".into());
                }
                answer = answering => answer?,
            };
            conv.record_turn().await.map_err(|e| e.to_string())?;
            Ok(answer.text)
        })
    }
}

/// Runs `lionagi mcp` with the words after `mcp`; the exit status.
pub fn main(args: &[String]) -> i32 {
    match run(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("lionagi: {}", super::shown::printable(&e.to_string()));
            e.exit_code()
        }
    }
}

fn run(args: &[String]) -> Result<(), ChatError> {
    let Some((first, rest)) = args.split_first() else {
        return Err(ChatError::Usage(MCP_USAGE.into()));
    };
    if first != "serve" {
        return Err(ChatError::Usage(format!(
            "unknown `mcp` command `{first}`\n\n{MCP_USAGE}"
        )));
    }
    // The chat's own parser, with `--branch` as the conversation to resume.
    let mut words = Vec::new();
    let mut branch = None;
    let mut it = rest.iter();
    while let Some(w) = it.next() {
        match w.as_str() {
            "--branch" => branch = it.next().cloned(),
            s if s.starts_with("--branch=") => branch = Some(s["--branch=".len()..].to_owned()),
            "-h" | "--help" => {
                println!("{MCP_USAGE}");
                return Ok(());
            }
            "--json" | "--system" | "--name" | "--resume" => {
                return Err(ChatError::Usage(format!(
                    "`{w}` is not an option of `mcp serve`"
                )));
            }
            _ => words.push(w.clone()),
        }
    }
    let branch =
        branch.ok_or_else(|| ChatError::Usage(format!("`--branch` is required\n\n{MCP_USAGE}")))?;
    words.extend(["--resume".to_owned(), branch]);
    let parsed = ChatArgs::parse(&words)?;
    if parsed.store.is_none() || parsed.question.is_some() {
        return Err(ChatError::Usage(MCP_USAGE.into()));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| ChatError::Io {
            what: "the async runtime".into(),
            source,
        })?;
    let (model, info) = model_choice::choose(&parsed)?;
    rt.block_on(async {
        let mut conv = Conversation::open(&parsed, model).await?;
        let servers = mcp_tools::connect(&parsed.mcp, conv.branch_mut(), false).await?;
        let description = format!(
            "Ask the lionagi conversation {} a question; it answers with one recorded turn.",
            conv.resume_key()
        );
        let served = Served {
            conv: Mutex::new(conv),
            info,
            servers,
        };
        let server = BranchServer::new(served, description);
        let result = server.serve_stdio().await;
        result.map_err(|e| ChatError::Mcp(e.to_string()))
    })
}
