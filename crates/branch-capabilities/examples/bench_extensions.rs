//! Extension benchmarks: prints one JSON object per line.
//!
//! * `fenced_scan`: finding the `` ```json `` blocks of a 10 MB assistant
//!   message (MB/s, MB = 10^6 bytes);
//! * `fenced_scan_dense`: the same on 10 MB of nothing but short blocks
//!   and stray backticks (the scanner's worst case);
//! * `extract`: the whole extraction (scan, parse, classify, validate) of
//!   the same message under a two-field grant;
//! * `gather_pass`: one context-provider pass with 10 providers, and the
//!   same call on a branch without providers (what every turn pays).
//!
//! Run with `cargo run --release -p branch-capabilities --example
//! bench_extensions` (`cargo xtask bench extensions` wraps it). Optional
//! argument: iterations scale (default 1).

use std::hint::black_box;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use branch_capabilities::{FieldSpec, Grant, extract_emissions, fenced_json_blocks};
use branch_core::message::InstructionContent;
use branch_core::{Branch, ContextProvider, Message, ProviderError};
use branch_providers::{ProviderOptions, ProvidersExt, gather};
use serde_json::json;

const TEN_MB: usize = 10_000_000;

fn assistant_message() -> (String, usize) {
    let para = "The reviewer walked through the module, noting the control flow, the error \
                paths and the naming; nothing here is JSON, only narration. "
        .repeat(30);
    let mut text = String::with_capacity(TEN_MB + 8_192);
    let mut blocks = 0;
    while text.len() < TEN_MB {
        text.push_str(&para);
        text.push_str("\n```json\n{\"note\": \"looks fine\", \"score\": 8}\n```\n");
        blocks += 1;
    }
    (text, blocks)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn mb_per_s(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

struct Static(String);

#[async_trait]
impl ContextProvider for Static {
    async fn provide(&self, _: &Branch, _: &Message) -> Result<Option<String>, ProviderError> {
        Ok(Some(self.0.clone()))
    }
}

async fn time_gather(branch: &mut Branch, instruction: &Message, iterations: usize) -> Duration {
    // Warm-up: loads the tokenizer and fills caches.
    for _ in 0..10 {
        black_box(gather(branch, instruction).await);
    }
    let start = Instant::now();
    for _ in 0..iterations {
        black_box(gather(branch, instruction).await);
    }
    start.elapsed() / iterations as u32
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let scale: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1)
        .max(1);

    let (text, blocks) = assistant_message();
    let runs = 7 * scale;
    let scan: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            let n = black_box(fenced_json_blocks(black_box(&text)).count());
            assert_eq!(n, blocks);
            t.elapsed()
        })
        .collect();
    let scan = median(scan);
    println!(
        "{}",
        json!({"bench": "extensions", "metric": "fenced_scan", "bytes": text.len(),
               "blocks": blocks, "median_ms": scan.as_secs_f64() * 1e3,
               "mb_per_s": mb_per_s(text.len(), scan), "target_mb_per_s": 200})
    );

    // Worst case for the scanner: nothing but short fenced blocks and
    // stray backticks, so every few bytes start or end a block.
    let dense_unit = "`a` ``b`` ```json {\"n\": 1}``` ";
    let dense = dense_unit.repeat(TEN_MB / dense_unit.len() + 1);
    let dense_blocks = fenced_json_blocks(&dense).count();
    let dense_scan = median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                black_box(fenced_json_blocks(black_box(&dense)).count());
                t.elapsed()
            })
            .collect(),
    );
    println!(
        "{}",
        json!({"bench": "extensions", "metric": "fenced_scan_dense", "bytes": dense.len(),
               "blocks": dense_blocks, "median_ms": dense_scan.as_secs_f64() * 1e3,
               "mb_per_s": mb_per_s(dense.len(), dense_scan), "target_mb_per_s": 200})
    );

    let grant = Grant::builder()
        .name("Reviewer")
        .field(FieldSpec::string("note"))
        .field(FieldSpec::integer("score"))
        .build()?;
    let extract: Vec<Duration> = (0..runs.min(5))
        .map(|_| {
            let t = Instant::now();
            let ex = black_box(extract_emissions(black_box(&text), &grant, ""));
            assert_eq!(ex.bundles.len(), blocks);
            t.elapsed()
        })
        .collect();
    let extract = median(extract);
    println!(
        "{}",
        json!({"bench": "extensions", "metric": "extract", "bytes": text.len(),
               "blocks": blocks, "median_ms": extract.as_secs_f64() * 1e3,
               "mb_per_s": mb_per_s(text.len(), extract)})
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let instruction = Message::instruction(InstructionContent {
            instruction: Some(json!("How tall is the tower?")),
            ..InstructionContent::default()
        });
        let iterations = 2_000 * scale;

        let mut bare = Branch::builder().system("Base system.").build()?;
        let none = time_gather(&mut bare, &instruction, iterations).await;

        let mut with = Branch::builder().system("Base system.").build()?;
        for i in 0..10 {
            with.providers().register_with(
                Static(format!(
                    "Provider {i}: the user prefers metric units and short answers."
                )),
                ProviderOptions::default()
                    .priority(i % 3)
                    .name(format!("p{i}")),
            );
        }
        let ten = time_gather(&mut with, &instruction, iterations).await;
        let fired = with.last_context_report().map_or(0, |r| r.fired.len());
        assert_eq!(fired, 10);

        for (providers, d) in [(0, none), (10, ten)] {
            println!(
                "{}",
                json!({"bench": "extensions", "metric": "gather_pass", "providers": providers,
                       "iterations": iterations, "mean_us": d.as_secs_f64() * 1e6})
            );
        }
        println!(
            "{}",
            json!({"bench": "extensions", "metric": "gather_overhead", "providers": 10,
                   "overhead_us": (ten.as_secs_f64() - none.as_secs_f64()) * 1e6})
        );
        Ok::<(), Box<dyn std::error::Error>>(())
    })?;
    Ok(())
}
