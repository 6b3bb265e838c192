//! `communicate`: a recorded turn, parsed into a Rust type.
//! Run: `OPENAI_API_KEY=... cargo run -p branch-operations --example communicate`

#[path = "common/mod.rs"]
mod common;

use branch_operations::{BranchOperations, CommunicateOptions, Parsed};

/// A capital city.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Capital {
    /// The city.
    city: String,
    /// The country.
    country: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut branch = common::branch("You answer geography questions.")?;
    let reply = branch
        .communicate(CommunicateOptions::new("What is the capital of France?"))
        .await?;
    println!("text: {reply:?}");
    match branch
        .communicate_as::<Capital>(CommunicateOptions::new("And of Japan?"))
        .await?
    {
        Parsed::Value(c) => println!("typed: {c:?}"),
        other => println!("did not parse: {other:?}"),
    }
    println!("messages recorded: {}", branch.messages().len());
    Ok(())
}
