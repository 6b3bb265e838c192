//! The README's main job: a short conversation with the embedded local
//! model, offline and without an API key, through the public API only.
//!
//! `cargo xtask demo` fetches the model when absent, builds this example as
//! the README's test command builds the workspace and runs it; directly:
//! `cargo run --release -p lionagi --features embedded --example demo [--
//! STORE.db]`.
//!
//! It asks a question (`communicate`), asks for a typed structure
//! (`operate` with a response format), saves the branch to a SQLite store,
//! loads it back, checks the copy is the same conversation, and continues
//! it with one more turn that is appended to the store.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use lionagi::core::model::ModelConfig;
use lionagi::models::local::{self, LocalModel};
use lionagi::operations::Parsed;
use lionagi::prelude::*;
use lionagi::session::{BranchStore, SqliteStore};
use schemars::JsonSchema;
use serde::Deserialize;

/// The structure `operate` asks for.
#[derive(Debug, Deserialize, JsonSchema)]
struct CountryFact {
    /// The country asked about.
    country: String,
    /// Its capital city.
    capital: String,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match demo().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    let model_path = local::default_model_path()?;
    if !model_path.is_file() {
        return Err(format!(
            "no model at {}: run `cargo xtask fetch-model` (or `cargo xtask demo`, which fetches it)",
            model_path.display()
        )
        .into());
    }
    let store_path = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("lionagi-demo.db"));

    // Greedy decoding keeps the demo's answers the same from run to run.
    let config = ModelConfig::builder()
        .provider(local::PROVIDER)
        .model(local::DEFAULT_MODEL)
        .kwarg("temperature", 0)
        .kwarg("max_tokens", 96)
        .build()?;
    let model = LocalModel::new(config)?;
    println!("model        {}", model_path.display());

    let mut branch = Branch::builder()
        .name("demo")
        .system("You are a helpful assistant.")
        .user("newcomer")
        .chat_model(std::sync::Arc::new(model) as std::sync::Arc<dyn ChatModel>)
        .build()?;

    // 1. A plain turn.
    let started = Instant::now();
    let reply = branch
        .communicate(CommunicateOptions::new("What is the capital of France?"))
        .await?;
    println!(
        "communicate  {}  ({})",
        one_line(reply.text().unwrap_or_default()),
        secs(started)
    );

    // 2. A structured turn: the reply is parsed into `CountryFact`.
    //    `native_format` also sends the schema as the provider's
    //    `response_format`, which the embedded model (like OpenAI or
    //    llama.cpp) follows, so even a 135M model answers in valid JSON.
    let started = Instant::now();
    let fact = branch
        .operate_as::<CountryFact>(
            OperateOptions::new("Name that country and its capital city.").native_format(true),
        )
        .await?;
    match fact.parsed {
        Parsed::Value(f) => println!(
            "operate      country={:?} capital={:?}  ({})",
            f.country,
            f.capital,
            secs(started)
        ),
        _ => return Err(format!("the structured reply did not parse: {}", fact.text).into()),
    }

    // 3. Save, reload, compare.
    let store = SqliteStore::open(&store_path).await?;
    store.save(&branch).await?;
    let mut restored = store.load(branch.id()).await?;
    let opts = ToDictOptions::default();
    if restored.to_dict(&opts)? != branch.to_dict(&opts)? {
        return Err("the reloaded branch differs from the saved one".into());
    }
    println!(
        "store        saved and reloaded {} messages ({})",
        restored.messages().len(),
        store_path.display()
    );

    // 4. Continue the reloaded conversation; its model reconnects from the
    //    stored configuration.
    let before = restored.messages().len();
    let started = Instant::now();
    let reply = restored
        .communicate(CommunicateOptions::new(
            "Thanks. In one sentence: what is the capital of Germany?",
        ))
        .await?;
    println!(
        "continued    {}  ({})",
        one_line(reply.text().unwrap_or_default()),
        secs(started)
    );
    let turn: Vec<Message> = restored.messages().iter().skip(before).cloned().collect();
    store.append_turn(restored.id(), &turn).await?;
    let stored = store.load(restored.id()).await?;
    println!(
        "store        {} messages after the appended turn; `lionagi branch show {} --store {}`",
        stored.messages().len(),
        stored.id(),
        store_path.display()
    );
    Ok(())
}

fn secs(since: Instant) -> String {
    format!("{:.1} s", since.elapsed().as_secs_f64())
}

fn one_line(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or_default();
    let mut out: String = line.chars().take(100).collect();
    if out.len() < line.len() {
        out.push('…');
    }
    out
}
