//! Speed of the embedded local model, beside a llama.cpp server serving the
//! same GGUF (when `LIONAGI_LLAMACPP_BASE_URL` is set, e.g.
//! `http://127.0.0.1:8088/v1`), in the same run.
//!
//! `cargo run --release -p branch-models --features embedded --example bench_local [TOKENS]`
//!
//! Prints one JSON object per line: bench, metric, ours, baseline, unit,
//! ratio (ours / baseline; `null` without a baseline).
//!
//! Ours and llama.cpp run alternately (one call, or one conversation, each
//! in turn), so a change in the shared machine's load touches both alike.
//!
//! Generation: both sides generate exactly TOKENS tokens (default 128;
//! `ignore_eos`) greedily; the best of three runs after a warm-up counts.
//! - `generation_tokens_per_s`: completion tokens / wall time of the whole
//!   call (prompt processing included; llama.cpp's over loopback HTTP via
//!   `IModel`);
//! - `decode_tokens_per_s`: tokens after the first / time after the first
//!   (ours from streaming; llama.cpp's from its reported `timings`);
//! - the same two with the other weight format (`WeightFormat`: the GGUF's
//!   own Q4_1, or its conversion to Q8_0), ours only.
//!
//! Conversation: 20 turns of a conversation (each reply 32 tokens, greedy),
//! streamed; the time to the first text chunk of each turn, the median over
//! three conversations that differ from their first message on (so turn 1
//! is never served from an earlier run's cache). llama.cpp gets
//! `cache_prompt: true`; ours uses its prompt cache (the default).
//! - `ttft_turn1_ms`, `ttft_turn20_ms`;
//! - `ttft_turn20_over_turn1`: the growth of each side (unit ×), the
//!   target being ≤ 1.2 for ours;
//! - `decode_tokens_per_s_turn20`: turn 20's reply, its tokens after the
//!   first over the time from its first text chunk to the stream's end
//!   (both sides streamed, so llama.cpp's includes its HTTP chunks), the
//!   decode speed after about 1,200 positions of context.
//!
//! Tokenizing (ours only, the model's own tokenizer): 64 KiB of text that
//! is one word to the pre-tokenizer (pseudo-random letters), against 64
//! KiB of prose in the same run, best of 5 each.
//! - `encode_one_word_64k_ms`: the baseline is the prose; the ratio says
//!   what a byte of one long word costs against a byte of prose.

use std::time::Instant;

use branch_core::model::{ChatMessage, ChatModel, ChatRequest, ChunkKind, ModelConfig};
use branch_models::IModel;
use branch_models::local::{LocalModel, WeightFormat};
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

/// Milliseconds to encode 64 KiB of one unbroken word and of prose, best
/// of 5 each, alternating.
fn encode_times() -> (f64, f64) {
    const BYTES: usize = 64 * 1024;
    let path = branch_models::local::default_model_path().unwrap_or_else(|e| panic!("{e}"));
    let tok = branch_models::local::tokenizer_from_file(&path).unwrap_or_else(|e| panic!("{e}"));
    let mut x: u32 = 0x9e37_79b9;
    let word: String = (0..BYTES)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            char::from(b'a' + u8::try_from(x % 26).unwrap_or(0))
        })
        .collect();
    let sentence = "The keeper climbed the stairs at dusk, 127 of them, and lit the lamp. ";
    let prose: String = sentence.chars().cycle().take(BYTES).collect();
    let time = |text: &str| {
        let t = Instant::now();
        let ids = tok.encode(text);
        assert!(!ids.is_empty());
        t.elapsed().as_secs_f64() * 1000.0
    };
    let (mut w, mut p) = (f64::MAX, f64::MAX);
    for _ in 0..5 {
        w = w.min(time(&word));
        p = p.min(time(&prose));
    }
    (w, p)
}

fn best(runs: &[f64]) -> f64 {
    runs.iter().copied().fold(0.0, f64::max)
}

fn line(metric: &str, ours: f64, baseline: Option<f64>) {
    line_in(metric, ours, baseline, "tokens/s");
}

fn line_in(metric: &str, ours: f64, baseline: Option<f64>, unit: &str) {
    let (b, r) = match baseline {
        Some(b) if b > 0.0 => (format!("{b:.3}"), format!("{:.3}", ours / b)),
        _ => ("null".into(), "null".into()),
    };
    println!(
        "{{\"bench\": \"local\", \"metric\": \"{metric}\", \"ours\": {ours:.3}, \"baseline\": {b}, \"unit\": \"{unit}\", \"ratio\": {r}}}"
    );
}

const TURNS: usize = 20;
const REPLY_TOKENS: u64 = 32;
const CONVERSATIONS: usize = 3;

/// One turn of a conversation, as the caller sees its stream.
struct Turn {
    /// Milliseconds to the first text chunk.
    ttft_ms: f64,
    /// The reply's tokens after the first over the time from the first
    /// text chunk to the stream's end.
    decode_per_s: f64,
}

/// Each turn of one conversation. `model` gives the client of each turn
/// (see [`llamacpp`] for why).
async fn conversation<M: ChatModel>(
    model: impl Fn() -> M,
    run: usize,
    cache_field: bool,
) -> Vec<Turn> {
    let mut history = vec![ChatMessage::system(format!(
        "Conversation {run}. You answer in a few sentences."
    ))];
    let mut turns = Vec::with_capacity(TURNS);
    for turn in 1..=TURNS {
        history.push(ChatMessage::user(format!(
            "Question {turn} of conversation {run}: tell me one fact about the number {}.",
            turn * 7 + run
        )));
        let mut request = ChatRequest::new(history.clone())
            .with_field("temperature", 0)
            .with_field("max_tokens", REPLY_TOKENS)
            .with_field("ignore_eos", true);
        if cache_field {
            request = request.with_field("cache_prompt", true);
        }
        let model = model();
        let start = Instant::now();
        let mut stream = model.stream(request).await.expect("stream");
        let mut first = None;
        let mut text = String::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.expect("chunk");
            if chunk.kind == ChunkKind::Text {
                first.get_or_insert_with(Instant::now);
                text.push_str(chunk.content.as_deref().unwrap_or(""));
            }
        }
        let first = first.expect("a text chunk");
        turns.push(Turn {
            ttft_ms: (first - start).as_secs_f64() * 1e3,
            decode_per_s: (REPLY_TOKENS - 1) as f64 / first.elapsed().as_secs_f64().max(1e-9),
        });
        history.push(ChatMessage::assistant(text));
    }
    turns
}

/// Per-turn medians of `what` over several conversations.
fn medians(runs: &[Vec<Turn>], what: fn(&Turn) -> f64, name: &str) -> Vec<f64> {
    let medians: Vec<f64> = (0..TURNS)
        .map(|t| {
            let mut v: Vec<f64> = runs.iter().map(|r| what(&r[t])).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect();
    let shown: Vec<String> = medians.iter().map(|m| format!("{m:.1}")).collect();
    eprintln!("bench_local: {name} per turn: {}", shown.join(" "));
    medians
}

fn best_of(runs: &[(f64, f64)]) -> (f64, f64) {
    (
        best(&runs.iter().map(|r| r.0).collect::<Vec<_>>()),
        best(&runs.iter().map(|r| r.1).collect::<Vec<_>>()),
    )
}

/// The llama.cpp server at `LIONAGI_LLAMACPP_BASE_URL`, if set.
fn llamacpp_url() -> Option<String> {
    std::env::var("LIONAGI_LLAMACPP_BASE_URL")
        .ok()
        .filter(|u| !u.is_empty())
}

/// A client of the llama.cpp server with a connection pool of its own,
/// made afresh for every call: this llama.cpp server closes the connection
/// after each streamed reply without saying so (no `Connection: close`), and
/// closes idle keep-alive connections after 5 s. A pooled connection was
/// then reused as the server closed it ("connection closed before message
/// completed" on sending, which stopped the previous run at the first
/// streamed turn after the first). A fresh client's TTFT includes a
/// loopback TCP connect (~0.1 ms); building the client is outside the
/// timing.
fn llamacpp(url: &str) -> IModel {
    let config = ModelConfig::builder()
        .provider("llamacpp")
        .model("smollm2")
        .endpoint("chat/completions")
        .base_url(url)
        .allow_local_network(true)
        .build()
        .expect("llama.cpp config");
    IModel::with_api_key(config, "no-key").expect("llama.cpp model")
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
    let server = llamacpp_url();
    let default = WeightFormat::default();
    let (other, suffix) = match default {
        WeightFormat::Q8_0 => (WeightFormat::AsStored, "as_stored"),
        WeightFormat::AsStored => (WeightFormat::Q8_0, "q8_0"),
    };
    let other_model = model.clone().with_weight_format(other);
    // Warm-ups (the other format's includes loading it), then ours in both
    // formats and llama.cpp in turn, so that a change in the machine's load
    // touches every side alike.
    ours_once(&model, 8).await;
    ours_once(&other_model, 8).await;
    if let Some(url) = &server {
        baseline_once(&llamacpp(url), 8).await;
    }
    let mut ours = Vec::new();
    let mut stored = Vec::new();
    let mut baseline: Vec<(f64, Option<f64>)> = Vec::new();
    for round in 1..=3 {
        ours.push(ours_once(&model, tokens).await);
        stored.push(ours_once(&other_model, tokens).await);
        if let Some(url) = &server {
            baseline.push(baseline_once(&llamacpp(url), tokens).await);
        }
        let decode = |r: &[(f64, f64)]| r.last().map_or(0.0, |r| r.1);
        let base = baseline.last().and_then(|b| b.1).unwrap_or(0.0);
        eprintln!(
            "bench_local: round {round} decode tokens/s: {default:?} {:.1}, {other:?} {:.1}, llama.cpp {base:.1}",
            decode(&ours),
            decode(&stored),
        );
    }
    drop(other_model);
    let (ours_total, ours_decode) = best_of(&ours);
    eprintln!("bench_local: {default:?} {ours_total:.1} tokens/s, decode {ours_decode:.1}");
    let (stored_total, stored_decode) = best_of(&stored);
    eprintln!("bench_local: {other:?} {stored_total:.1} tokens/s, decode {stored_decode:.1}");

    let mut ours_runs = Vec::new();
    let mut base_runs = Vec::new();
    for run in 0..CONVERSATIONS {
        ours_runs.push(conversation(|| model.clone(), run, false).await);
        if let Some(url) = &server {
            base_runs.push(conversation(|| llamacpp(url), run, true).await);
        }
    }
    let ttft = |t: &Turn| t.ttft_ms;
    let decode = |t: &Turn| t.decode_per_s;
    let ours_ttft = medians(&ours_runs, ttft, "ours TTFT (ms)");
    let base_ttft =
        (!base_runs.is_empty()).then(|| medians(&base_runs, ttft, "llama.cpp TTFT (ms)"));
    let ours_decode_turns = medians(&ours_runs, decode, "ours decode tokens/s");
    let base_decode_turns =
        (!base_runs.is_empty()).then(|| medians(&base_runs, decode, "llama.cpp decode tokens/s"));

    let base_total =
        (!baseline.is_empty()).then(|| best(&baseline.iter().map(|r| r.0).collect::<Vec<_>>()));
    let base_decode: Vec<f64> = baseline.iter().filter_map(|r| r.1).collect();
    let base_decode = (!base_decode.is_empty()).then(|| best(&base_decode));
    if let (Some(b), Some(d)) = (base_total, base_decode) {
        eprintln!("bench_local: llama.cpp {b:.1} tokens/s, decode {d:.1}");
    }
    line("generation_tokens_per_s", ours_total, base_total);
    line("decode_tokens_per_s", ours_decode, base_decode);
    line(
        &format!("generation_tokens_per_s_{suffix}"),
        stored_total,
        base_total,
    );
    line(
        &format!("decode_tokens_per_s_{suffix}"),
        stored_decode,
        base_decode,
    );
    let first = |v: &Vec<f64>| v[0];
    let last = |v: &Vec<f64>| v[TURNS - 1];
    line_in(
        "ttft_turn1_ms",
        first(&ours_ttft),
        base_ttft.as_ref().map(first),
        "ms",
    );
    line_in(
        "ttft_turn20_ms",
        last(&ours_ttft),
        base_ttft.as_ref().map(last),
        "ms",
    );
    line_in(
        "ttft_turn20_over_turn1",
        last(&ours_ttft) / first(&ours_ttft),
        base_ttft.as_ref().map(|b| last(b) / first(b)),
        "x",
    );
    line(
        "decode_tokens_per_s_turn20",
        last(&ours_decode_turns),
        base_decode_turns.as_ref().map(last),
    );
    let (word_ms, prose_ms) = encode_times();
    line_in("encode_one_word_64k_ms", word_ms, Some(prose_ms), "ms");
}
