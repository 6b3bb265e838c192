//! `parse`: text into a structure, repaired by the parse model if needed.
//! Run: `OPENAI_API_KEY=... cargo run -p branch-operations --example parse`

#[path = "common/mod.rs"]
mod common;

use branch_operations::{BranchOperations, ParseOptions};

/// An answer with a confidence.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Answer {
    /// The final answer.
    answer: String,
    /// Confidence between 0 and 1.
    confidence: f64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut branch = common::branch("You format data.")?;
    // Broken JSON (single quotes, trailing comma, a near-miss key) is
    // repaired locally; prose is sent to the parse model to reformat.
    for text in [
        "{'Answer': '42', 'confidence': 0.8,}",
        "It is 42, I am quite sure (0.9).",
    ] {
        let parsed = branch
            .parse_as::<Answer>(text, ParseOptions::of::<Answer>())
            .await?;
        println!("{text:?} -> {parsed:?}");
    }
    Ok(())
}
