//! 1,000 concurrent chat calls to a static loopback server through `IModel`,
//! beside raw `reqwest` sending the same bodies, in the same run.
//!
//! `cargo run --release -p branch-models --features test-support --example bench_model [N]`
//!
//! Prints one JSON line: bench, metric, ours (IModel ms), baseline (raw reqwest ms),
//! unit, ratio.

use std::sync::Arc;
use std::time::Instant;

use branch_models::mock::{MockReply, MockServer};
use branch_models::{ChatMessage, ChatModel, ChatRequest, IModel, ModelConfig};

#[tokio::main]
async fn main() {
    let calls: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let server = MockServer::start_static(MockReply::text("pong")).await;
    let config = ModelConfig::builder()
        .provider("openai")
        .model("gpt-4.1-mini")
        .base_url(&server.base_url())
        .allow_local_network(true)
        .build()
        .expect("config");
    let model = Arc::new(IModel::with_api_key(config, "bench-key").expect("model"));
    let request = ChatRequest::new(vec![ChatMessage::user("ping")]);
    let body = serde_json::to_vec(&model.request_payload(&request, false)).expect("body");
    let url = format!("{}/chat/completions", server.base_url());
    let raw = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");

    // Warm both connection pools.
    model.chat(request.clone()).await.expect("warm-up");
    raw.post(&url)
        .body(body.clone())
        .send()
        .await
        .expect("warm-up");

    let mut results = Vec::new();
    for round in 0..3 {
        let start = Instant::now();
        let tasks: Vec<_> = (0..calls)
            .map(|_| {
                let m = Arc::clone(&model);
                let r = request.clone();
                tokio::spawn(async move { m.chat(r).await.map(|resp| resp.text.len()) })
            })
            .collect();
        for t in tasks {
            t.await.expect("join").expect("imodel call");
        }
        let imodel = start.elapsed();

        let start = Instant::now();
        let tasks: Vec<_> = (0..calls)
            .map(|_| {
                let c = raw.clone();
                let (u, b) = (url.clone(), body.clone());
                tokio::spawn(async move {
                    let resp = c
                        .post(u)
                        .header("content-type", "application/json")
                        .header("authorization", "Bearer bench-key")
                        .body(b)
                        .send()
                        .await?;
                    let v: serde_json::Value = resp.json().await?;
                    Ok::<usize, reqwest::Error>(v.to_string().len())
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("join").expect("raw call");
        }
        let raw_t = start.elapsed();
        results.push((round, imodel, raw_t));
    }
    let best_imodel = results.iter().map(|r| r.1).min().unwrap_or_default();
    let best_raw = results.iter().map(|r| r.2).min().unwrap_or_default();
    println!(
        "{{\"bench\": \"model\", \"metric\": \"{calls}_concurrent_calls\", \"ours\": {:.1}, \"baseline\": {:.1}, \"unit\": \"ms\", \"ratio\": {:.3}}}",
        best_imodel.as_secs_f64() * 1000.0,
        best_raw.as_secs_f64() * 1000.0,
        best_imodel.as_secs_f64() / best_raw.as_secs_f64()
    );
}
