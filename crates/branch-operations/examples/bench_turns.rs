//! Benchmark: 1,000 branches × 3 `communicate` turns against a static
//! loopback server, and raw reqwest sending the same request bodies to the
//! same server with the same concurrency, in the same run.
//!
//! `cargo run --release -p branch-operations --example bench_turns [BRANCHES] [CONCURRENCY]`
//!
//! Prints one JSON object per line: `bench`, `metric`, `ours`,
//! `baseline`, `unit`, `ratio` (ours / baseline for times, baseline /
//! ours for rates, so above 1 means slower than raw HTTP either way).

use std::sync::Arc;
use std::time::Instant;

use branch_core::Branch;
use branch_core::model::{ChatModel, ModelConfig};
use branch_models::IModel;
use branch_models::mock::{MockReply, MockServer};
use branch_operations::{BranchOperations, CommunicateOptions};
use futures_util::StreamExt;
use serde_json::{Value, json};

mod telemetry_cost;

const TURNS: usize = 3;

fn line(metric: &str, ours: f64, baseline: f64, unit: &str, ratio: f64) {
    println!(
        "{}",
        json!({"bench": "turns", "metric": metric, "ours": ours, "baseline": baseline,
            "unit": unit, "ratio": ratio})
    );
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let branches: usize = args.next().map_or(Ok(1000), |a| a.parse())?;
    let concurrency: usize = args.next().map_or(Ok(64), |a| a.parse())?;

    let server = MockServer::start_static(MockReply::text("Benchmark reply.")).await;
    let config = ModelConfig::builder()
        .provider("openai")
        .model("gpt-4.1-mini")
        .base_url(&server.base_url())
        .allow_local_network(true)
        .build()?;
    let model: Arc<dyn ChatModel> = Arc::new(IModel::with_api_key(config, "bench")?);

    // A warm-up pass of each side, then three alternating measured passes;
    // the best of each side is reported (both sides see the same warm
    // server and connection pools).
    let _ = run_ours(&model, branches, concurrency).await?;
    let bodies: Vec<Value> = server.bodies();
    let url = format!("{}/chat/completions", server.base_url());
    let client = reqwest::Client::new();
    let _ = run_raw(&client, &url, &bodies, concurrency).await?;
    let (mut ours, mut baseline, mut model_only) = (f64::MAX, f64::MAX, f64::MAX);
    for _ in 0..3 {
        ours = ours.min(run_ours(&model, branches, concurrency).await?);
        baseline = baseline.min(run_raw(&client, &url, &bodies, concurrency).await?);
        model_only = model_only.min(run_model(&model, &bodies, concurrency).await?);
    }

    let turns = (branches * TURNS) as f64;
    line("wall_time", ours, baseline, "s", ours / baseline);
    // Where the time goes: the model layer alone (IModel::chat with the same
    // messages, no branch) against raw HTTP.
    line(
        "model_layer_wall_time",
        model_only,
        baseline,
        "s",
        model_only / baseline,
    );
    line(
        "throughput",
        turns / ours,
        turns / baseline,
        "turns/s",
        (turns / baseline) / (turns / ours),
    );
    // Telemetry on versus off, same run (examples/telemetry_cost).
    telemetry_cost::measure(&model, branches, concurrency).await?;
    Ok(())
}

async fn run_ours(
    model: &Arc<dyn ChatModel>,
    branches: usize,
    concurrency: usize,
) -> Result<f64, Box<dyn std::error::Error>> {
    let mut all = Vec::with_capacity(branches);
    for _ in 0..branches {
        all.push(
            Branch::builder()
                .system("You are a benchmark.")
                .chat_model(model.clone())
                .build()?,
        );
    }
    let t0 = Instant::now();
    let results: Vec<Result<Branch, String>> = futures_util::stream::iter(all)
        .map(|mut b| async move {
            for t in 0..TURNS {
                b.communicate(CommunicateOptions::new(format!("Question {t}")))
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok(b)
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let secs = t0.elapsed().as_secs_f64();
    // The branches are dropped after the clock stops: the benchmark times
    // turns, not teardown.
    if let Some(Err(e)) = results.iter().find(|r| r.is_err()) {
        return Err(format!("a turn failed: {e}").into());
    }
    Ok(secs)
}

async fn run_raw(
    client: &reqwest::Client,
    url: &str,
    bodies: &[Value],
    concurrency: usize,
) -> Result<f64, Box<dyn std::error::Error>> {
    let t0 = Instant::now();
    let raw: Vec<Result<(), String>> = futures_util::stream::iter(bodies.iter().cloned())
        .map(|body| {
            let client = client.clone();
            async move {
                let resp = client
                    .post(url)
                    .bearer_auth("bench")
                    .json(&body)
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                let _: Value = resp.json().await.map_err(|e| e.to_string())?;
                Ok(())
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let secs = t0.elapsed().as_secs_f64();
    if let Some(Err(e)) = raw.iter().find(|r| r.is_err()) {
        return Err(format!("a raw request failed: {e}").into());
    }
    Ok(secs)
}

async fn run_model(
    model: &Arc<dyn ChatModel>,
    bodies: &[Value],
    concurrency: usize,
) -> Result<f64, Box<dyn std::error::Error>> {
    use branch_core::model::{ChatMessage, ChatRequest};
    let requests: Vec<ChatRequest> = bodies
        .iter()
        .map(|b| {
            ChatRequest::new(
                b["messages"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(ChatMessage::from_value)
                    .collect(),
            )
        })
        .collect();
    let t0 = Instant::now();
    let results: Vec<bool> = futures_util::stream::iter(requests)
        .map(|r| async move { model.chat(r).await.is_ok() })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let secs = t0.elapsed().as_secs_f64();
    if results.iter().any(|ok| !ok) {
        return Err("a model call failed".into());
    }
    Ok(secs)
}
