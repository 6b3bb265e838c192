//! `chat`: one call built from the history; nothing is recorded.
//! Run: `OPENAI_API_KEY=... cargo run -p branch-operations --example chat`

#[path = "common/mod.rs"]
mod common;

use branch_operations::{BranchOperations, ChatOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut branch = common::branch("You are terse.")?;
    let text = branch
        .chat(ChatOptions::new("Say hello").guidance("One sentence."))
        .await?;
    println!("{text}");
    println!("messages recorded: {}", branch.messages().len());
    Ok(())
}
