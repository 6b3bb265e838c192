//! `operate`: a structured turn with tool calls.
//! Run: `OPENAI_API_KEY=... cargo run -p branch-operations --example operate`

#[path = "common/mod.rs"]
mod common;

use branch_actions::FunctionTool;
use branch_operations::{BranchOperations, OperateOptions};

/// Two integers.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Pair {
    /// First factor.
    a: i64,
    /// Second factor.
    b: i64,
}

/// The answer.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Answer {
    /// The final answer.
    answer: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut branch = common::branch("Use tools when helpful.")?;
    let multiply = FunctionTool::infallible("multiply", |p: Pair| async move { p.a * p.b })?
        .with_description("Multiply two integers and return the product.");
    branch.acts_mut().register(multiply.into_tool(), false)?;
    let out = branch
        .operate_as::<Answer>(OperateOptions::new("Compute 6*7 with the tool.").actions(true))
        .await?;
    println!("parsed: {:?}", out.parsed);
    println!("tool calls: {:?}", out.action_responses);
    Ok(())
}
