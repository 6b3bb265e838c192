//! `run`: a streamed turn. Over an HTTP provider it streams through SSE;
//! with `CLAUDE_BIN` set it drives that Claude Code executable
//! (stream-json protocol).
//! Run: `OPENAI_API_KEY=... cargo run -p branch-operations --example run`

#[path = "common/mod.rs"]
mod common;

use branch_operations::{BranchOperations, RunOptions};
use futures_util::StreamExt;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut branch = common::branch("You are a streamer.")?;
    let mut opts = RunOptions::new("Write a haiku about Rust.");
    if let Ok(bin) = std::env::var("CLAUDE_BIN") {
        opts = opts.cli_command(bin);
    }
    let mut stream = branch.run(opts);
    while let Some(message) = stream.next().await {
        let m = message?;
        println!("{}: {}", m.kind().class_name(), m.to_value()?["content"]);
    }
    Ok(())
}
