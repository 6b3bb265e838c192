//! Chat calls through `IModel` against a fixed-reply server in another
//! process (nginx, or our static responder), beside raw `reqwest` sending
//! the same body with the same concurrency, in the same run.
//!
//! `cargo xtask bench model [--calls N]` (default 1,000, all at once)
//!
//! Figures: wall time and the client's CPU time (`getrusage` of this
//! process; the server's is not counted), best of 15 alternating rounds.
//! `--side imodel|raw|none` runs one side once and exits, for
//! `cargo xtask bench model --callgrind`.
//!
//! Prints one JSON line per metric: bench, metric, ours, baseline, unit,
//! ratio (ours / baseline).

use std::sync::Arc;
use std::time::Instant;

use branch_models::bench_server::{self, StaticServer, Usage};
use branch_models::{ChatMessage, ChatModel, ChatRequest, IModel, ModelConfig};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Alternating rounds; each side's best is its figure. A round of 1,000
/// calls lasts about 25 ms, so a single stall on a shared machine moves it
/// by several per cent: five rounds left the ratio spread over 0.96–1.14×
/// from run to run on unchanged code, fifteen over 0.96–1.07×.
const ROUNDS: usize = 15;

async fn run_imodel(model: &Arc<IModel>, request: &ChatRequest, calls: usize) -> Result<(), Error> {
    let tasks: Vec<_> = (0..calls)
        .map(|_| {
            let m = Arc::clone(model);
            let r = request.clone();
            tokio::spawn(async move { m.chat(r).await.map(|resp| resp.text.len()) })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    Ok(())
}

async fn run_raw(
    client: &reqwest::Client,
    url: &str,
    body: &[u8],
    calls: usize,
) -> Result<(), Error> {
    let tasks: Vec<_> = (0..calls)
        .map(|_| {
            let c = client.clone();
            let (u, b) = (url.to_owned(), body.to_vec());
            tokio::spawn(async move {
                let resp = c
                    .post(u)
                    .header("content-type", "application/json")
                    .header("authorization", "Bearer bench-key")
                    .body(b)
                    .send()
                    .await?
                    .error_for_status()?;
                let v: serde_json::Value = resp.json().await?;
                Ok::<bool, reqwest::Error>(v.is_object())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let mut calls = 1000usize;
    let mut side: Option<String> = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--calls" => calls = it.next().ok_or("--calls needs a value")?.parse()?,
            "--side" => side = Some(it.next().ok_or("--side needs a value")?),
            // The old positional form: `bench_model N`.
            n => calls = n.parse()?,
        }
    }
    bench_server::raise_open_files_limit();
    let server = StaticServer::start(&bench_server::chat_completion_json("pong"))?;
    let config = ModelConfig::builder()
        .provider("openai")
        .model("gpt-4.1-mini")
        .base_url(&server.base_url())
        .allow_local_network(true)
        .build()?;
    let model = Arc::new(IModel::with_api_key(config, "bench-key")?);
    let request = ChatRequest::new(vec![ChatMessage::user("ping")]);
    // The raw client sends the body IModel builds, serialized once.
    let body = serde_json::to_vec(&model.request_payload(&request, false))?;
    let url = format!("{}/chat/completions", server.base_url());
    let raw = reqwest::Client::builder().no_proxy().build()?;

    if let Some(side) = side {
        match side.as_str() {
            "imodel" => run_imodel(&model, &request, calls).await?,
            "raw" => run_raw(&raw, &url, &body, calls).await?,
            "none" => {}
            s => return Err(format!("unknown side {s}").into()),
        }
        println!("{{\"side\": \"{side}\", \"requests\": {calls}}}");
        return Ok(());
    }
    eprintln!(
        "server: {:?} (pid {}), load average {:?}",
        server.kind(),
        server.pid(),
        bench_server::load_average()
    );

    // Warm both connection pools with a full pass each.
    run_imodel(&model, &request, calls).await?;
    run_raw(&raw, &url, &body, calls).await?;
    let mut best = [(f64::MAX, f64::MAX); 2];
    for round in 0..ROUNDS {
        // Each side goes first in every other round, so that neither
        // always runs on a machine the other has just warmed or loaded.
        for pass in 0..2 {
            let side = (round + pass) % 2;
            let u = Usage::now();
            let t = Instant::now();
            match side {
                0 => run_imodel(&model, &request, calls).await?,
                _ => run_raw(&raw, &url, &body, calls).await?,
            }
            let (w, c) = (t.elapsed().as_secs_f64(), Usage::now().cpu_since(&u));
            best[side] = (best[side].0.min(w), best[side].1.min(c));
        }
    }
    let print = |metric: &str, ours: f64, base: f64, unit: &str| {
        println!(
            "{{\"bench\": \"model\", \"metric\": \"{metric}\", \"ours\": {ours:.2}, \"baseline\": {base:.2}, \"unit\": \"{unit}\", \"ratio\": {:.3}}}",
            ours / base
        );
    };
    print(
        &format!("{calls}_concurrent_calls_wall"),
        best[0].0 * 1e3,
        best[1].0 * 1e3,
        "ms",
    );
    let n = calls as f64;
    print(
        "cpu_per_call",
        best[0].1 / n * 1e6,
        best[1].1 / n * 1e6,
        "us",
    );
    Ok(())
}
