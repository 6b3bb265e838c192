//! `cargo xtask bench serialize`: building, serializing and restoring a
//! 100k-message branch, each figure beside raw serde_json on the same bytes
//! in the same run, plus the cost of an idle branch.
//!
//! Prints one JSON object per line: `{"bench", "metric", "ours", "baseline",
//! "unit", "ratio"}`.

// A counting global allocator is the one place the workspace allows
// `unsafe`: it forwards to the system allocator unchanged.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use lionagi::prelude::*;
use serde_json::{Value, json};

/// Counts live heap bytes, to measure what an idle branch holds.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn report(metric: &str, ours: f64, baseline: Option<f64>, unit: &str) {
    let ratio = baseline.map(|b| ours / b);
    println!(
        "{}",
        json!({"bench": "serialize", "metric": metric, "ours": ours, "baseline": baseline, "unit": unit, "ratio": ratio})
    );
}

/// Best of `runs` wall times, in seconds.
fn best<T>(runs: usize, mut f: impl FnMut() -> T) -> f64 {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            black_box(f());
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let model: Arc<dyn ChatModel> = Arc::new(ModelConfig::new("openai", "gpt-4.1-mini").unwrap());

    // Append: n messages built and added one by one (alternating kinds).
    let texts: Vec<String> = (0..n)
        .map(|i| format!("message number {i}: the quick brown fox"))
        .collect();
    // Built branches are kept until after timing, so no drop is measured.
    let mut built = Vec::new();
    let append = best(3, || {
        let mut b = Branch::builder()
            .system("You are terse.")
            .chat_model(model.clone())
            .build()
            .unwrap();
        let id = Participant::Id(b.id());
        for (i, t) in texts.iter().enumerate() {
            let m = if i % 2 == 0 {
                Message::instruction(InstructionContent {
                    instruction: Some(Value::String(t.clone())),
                    ..Default::default()
                })
                .with_sender(Participant::Role(Role::User))
                .with_recipient(id.clone())
            } else {
                Message::assistant(t.clone())
                    .with_sender(id.clone())
                    .with_recipient(Participant::Role(Role::User))
            };
            b.msgs_mut().add_message(m);
        }
        built.push(b);
    });
    let branch = built.pop().unwrap();
    drop(built);
    report("append_per_message", append / n as f64 * 1e9, None, "ns");

    // Serialize: to_dict + to_vec, beside serde_json writing the same value.
    let opts = ToDictOptions::default();
    let value = branch.to_dict(&opts).unwrap();
    let raw_ser = best(5, || serde_json::to_vec(&value).unwrap());
    let ours_ser = best(5, || {
        serde_json::to_vec(&branch.to_dict(&opts).unwrap()).unwrap()
    });
    report(
        "to_dict_and_serialize",
        ours_ser * 1e3,
        Some(raw_ser * 1e3),
        "ms",
    );
    // to_dict alone (into a `Value`) beside serde_json::to_value building
    // the same tree from a value (issue 15: within 2×).
    let raw_tree = best(5, || serde_json::to_value(&value).unwrap());
    let ours_tree = best(5, || branch.to_dict(&opts).unwrap());
    report(
        "to_dict_vs_to_value",
        ours_tree * 1e3,
        Some(raw_tree * 1e3),
        "ms",
    );
    let direct = best(5, || branch.to_json_vec(&opts).unwrap());
    report(
        "to_json_vec_direct",
        direct * 1e3,
        Some(raw_ser * 1e3),
        "ms",
    );

    // Parse + from_dict, beside serde_json parsing the same bytes to a Value.
    let bytes = serde_json::to_vec(&value).unwrap();
    let raw_parse = best(5, || serde_json::from_slice::<Value>(&bytes).unwrap());
    let ours_parse = best(5, || Branch::from_json_slice(&bytes).unwrap());
    report(
        "parse_and_from_dict",
        ours_parse * 1e3,
        Some(raw_parse * 1e3),
        "ms",
    );
    let via_value = best(5, || {
        Branch::from_dict(&serde_json::from_slice::<Value>(&bytes).unwrap()).unwrap()
    });
    report(
        "parse_value_then_from_dict",
        via_value * 1e3,
        Some(raw_parse * 1e3),
        "ms",
    );
    // from_dict alone, on an already parsed value, beside the parse of the
    // same bytes (issue 15: within 1.2×).
    let parsed: Value = serde_json::from_slice(&bytes).unwrap();
    let from_dict = best(5, || Branch::from_dict(&parsed).unwrap());
    report(
        "from_dict_vs_parse",
        from_dict * 1e3,
        Some(raw_parse * 1e3),
        "ms",
    );
    drop(parsed);
    report("document_size", bytes.len() as f64 / 1e6, None, "MB");

    // Idle branch: a system message and a shared model.
    let k = 10_000;
    let before = LIVE.load(Ordering::Relaxed);
    let t = Instant::now();
    let idle: Vec<Branch> = (0..k)
        .map(|_| {
            Branch::builder()
                .system("You are terse.")
                .chat_model(model.clone())
                .build()
                .unwrap()
        })
        .collect();
    let build = t.elapsed().as_secs_f64();
    let bytes_per = (LIVE.load(Ordering::Relaxed) - before) as f64 / k as f64;
    black_box(&idle);
    report("idle_branch_memory", bytes_per, None, "bytes");
    report("idle_branch_build", build / k as f64 * 1e6, None, "us");
}
