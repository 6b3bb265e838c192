//! `act`: running tool calls directly (no model call).
//! Run: `cargo run -p branch-operations --example act`

use branch_actions::{FunctionTool, ToolCall};
use branch_core::Branch;
use branch_operations::{ActOptions, BranchOperations};
use serde_json::json;

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
    // No model is called, so a configuration-only branch is enough.
    let mut branch = Branch::new()?;
    let multiply = FunctionTool::infallible("multiply", |p: Pair| async move { p.a * p.b })?;
    branch.acts_mut().register(multiply.into_tool(), false)?;
    let args = |v: serde_json::Value| v.as_object().cloned().unwrap_or_default();
    let results = branch
        .act(
            vec![
                ToolCall::new("multiply", args(json!({"a": 6, "b": 7}))),
                ToolCall::new("multiply", args(json!({"a": "six"}))),
                ToolCall::new("divide", args(json!({}))),
            ],
            ActOptions::default(),
        )
        .await?;
    for r in results {
        println!("{} -> {:?}", r.function, r.output);
    }
    println!("messages recorded: {}", branch.messages().len());
    Ok(())
}
