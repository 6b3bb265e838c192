//! `interpret`: rewriting a raw request into a clearer prompt.
//! Run: `OPENAI_API_KEY=... cargo run -p branch-operations --example interpret`

#[path = "common/mod.rs"]
mod common;

use branch_operations::{BranchOperations, InterpretOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut branch = common::branch("You help users.")?;
    let prompt = branch
        .interpret(
            "gimme some primes >10",
            InterpretOptions::default().domain("math").style("precise"),
        )
        .await?;
    println!("{prompt}");
    Ok(())
}
