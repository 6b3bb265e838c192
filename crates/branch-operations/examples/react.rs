//! `ReAct` and `ReActStream`: reason-act rounds with a tool, then an answer.
//! Run: `OPENAI_API_KEY=... cargo run -p branch-operations --example react`

#[path = "common/mod.rs"]
mod common;

use branch_actions::FunctionTool;
use branch_operations::{BranchOperations, ReActOptions};
use futures_util::StreamExt;

/// Two integers.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Pair {
    /// First factor.
    a: i64,
    /// Second factor.
    b: i64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut branch = common::branch("You reason step by step.")?;
    let multiply = FunctionTool::infallible("multiply", |p: Pair| async move { p.a * p.b })?
        .with_description("Multiply two integers and return the product.");
    branch.acts_mut().register(multiply.into_tool(), false)?;
    let outcome = branch
        .ReAct(ReActOptions::new("What is 123 times 456?").max_extensions(2))
        .await?;
    println!("answer: {}", outcome.answer);
    let mut rounds = branch.ReActStream(ReActOptions::new("And 7 times 8?"));
    while let Some(round) = rounds.next().await {
        let round = round?;
        println!(
            "round {} (final: {}): {:?}",
            round.round, round.is_final, round.result
        );
    }
    Ok(())
}
