//! Generation speed of the embedded local model, beside a llama.cpp server
//! serving the same GGUF (when `LIONAGI_LLAMACPP_BASE_URL` is set, e.g.
//! `http://127.0.0.1:8088/v1`), on the same prompt in the same run.
//!
//! `cargo run --release -p branch-models --features embedded --example bench_local [TOKENS]`
//!
//! Prints one JSON object per line: bench, metric, ours, baseline, unit,
//! ratio (ours / baseline; `null` without a baseline). Both sides generate
//! exactly TOKENS tokens (default 128; `ignore_eos`) greedily; the best of
//! three runs after a warm-up counts.
//! - `generation_tokens_per_s`: completion tokens / wall time of the whole
//!   call (prompt processing included; llama.cpp's over loopback HTTP via
//!   `IModel`);
//! - `decode_tokens_per_s`: tokens after the first / time after the first
//!   (ours from streaming; llama.cpp's from its reported `timings`).

use std::time::Instant;

use branch_core::model::{ChatMessage, ChatModel, ChatRequest, ChunkKind, ModelConfig};
use branch_models::IModel;
use branch_models::local::LocalModel;
use futures_util::StreamExt;
use serde_json::Value;

const PROMPT: &str =
    "Write a short story about a lighthouse keeper who finds a message in a bottle.";

fn request(tokens: u64) -> ChatRequest {
    ChatRequest::new(vec![ChatMessage::user(PROMPT)])
        .with_field("temperature", 0)
        .with_field("max_tokens", tokens)
        .with_field("ignore_eos", true)
}

/// (end-to-end tokens/s, decode tokens/s) of one streamed call.
async fn ours_once(model: &LocalModel, tokens: u64) -> (f64, f64) {
    let start = Instant::now();
    let mut stream = model.stream(request(tokens)).await.expect("stream");
    let mut first = None;
    let mut completion = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.expect("chunk");
        if chunk.kind == ChunkKind::Text && first.is_none() {
            first = Some(Instant::now());
        }
        if chunk.kind == ChunkKind::Result {
            completion = chunk.metadata["usage"]["completion_tokens"]
                .as_u64()
                .unwrap_or(0);
        }
    }
    let total = start.elapsed().as_secs_f64();
    let decode = first.map_or(0.0, |f| f.elapsed().as_secs_f64());
    (
        completion as f64 / total,
        completion.saturating_sub(1) as f64 / decode.max(1e-9),
    )
}

async fn baseline_once(model: &IModel, tokens: u64) -> (f64, Option<f64>) {
    let start = Instant::now();
    let reply = model.chat(request(tokens)).await.expect("llama.cpp call");
    let total = start.elapsed().as_secs_f64();
    let completion = reply.usage.map_or(0, |u| u.completion_tokens);
    let decode = reply
        .raw
        .pointer("/timings/predicted_per_second")
        .and_then(Value::as_f64);
    (completion as f64 / total, decode)
}

fn best(runs: &[f64]) -> f64 {
    runs.iter().copied().fold(0.0, f64::max)
}

fn line(metric: &str, ours: f64, baseline: Option<f64>) {
    let (b, r) = match baseline {
        Some(b) if b > 0.0 => (format!("{b:.1}"), format!("{:.3}", ours / b)),
        _ => ("null".into(), "null".into()),
    };
    println!(
        "{{\"bench\": \"local\", \"metric\": \"{metric}\", \"ours\": {ours:.1}, \"baseline\": {b}, \"unit\": \"tokens/s\", \"ratio\": {r}}}"
    );
}

#[tokio::main]
async fn main() {
    let tokens: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(128);
    let load = Instant::now();
    let model = tokio::task::spawn_blocking(LocalModel::load_default)
        .await
        .expect("join")
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "bench_local: model loaded in {:.2} s",
        load.elapsed().as_secs_f64()
    );
    ours_once(&model, 8).await;
    let mut ours = Vec::new();
    for _ in 0..3 {
        ours.push(ours_once(&model, tokens).await);
    }

    let base_url = std::env::var("LIONAGI_LLAMACPP_BASE_URL")
        .ok()
        .filter(|u| !u.is_empty());
    let mut baseline: Vec<(f64, Option<f64>)> = Vec::new();
    if let Some(url) = base_url {
        let config = ModelConfig::builder()
            .provider("llamacpp")
            .model("smollm2")
            .endpoint("chat/completions")
            .base_url(&url)
            .allow_local_network(true)
            .build()
            .expect("llama.cpp config");
        let server = IModel::with_api_key(config, "no-key").expect("llama.cpp model");
        baseline_once(&server, 8).await;
        for _ in 0..3 {
            baseline.push(baseline_once(&server, tokens).await);
        }
    }
    let ours_total = best(&ours.iter().map(|r| r.0).collect::<Vec<_>>());
    let ours_decode = best(&ours.iter().map(|r| r.1).collect::<Vec<_>>());
    let base_total =
        (!baseline.is_empty()).then(|| best(&baseline.iter().map(|r| r.0).collect::<Vec<_>>()));
    let base_decode: Vec<f64> = baseline.iter().filter_map(|r| r.1).collect();
    let base_decode = (!base_decode.is_empty()).then(|| best(&base_decode));
    line("generation_tokens_per_s", ours_total, base_total);
    line("decode_tokens_per_s", ours_decode, base_decode);
}
