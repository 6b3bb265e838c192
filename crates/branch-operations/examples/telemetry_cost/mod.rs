//! The cost of telemetry in the turns benchmark: the same `communicate`
//! turns with no `tracing` subscriber ("off": the GenAI spans are disabled
//! callsites) and with a subscriber whose layer reads every field of every
//! span as it is created and recorded ("on": what an exporter such as
//! `tracing-opentelemetry` has to do at least), alternating in one run.
//! Message contents are not captured (the default).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use branch_core::Branch;
use branch_core::model::ChatModel;
use branch_operations::{BranchOperations, CommunicateOptions};
use futures_util::StreamExt;
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt;

const TURNS: usize = 3;

/// Measures off and on (best of three alternating passes each, after a
/// warm-up) and prints `telemetry_wall_time` and `telemetry_per_turn`
/// lines: `ours` = on, `baseline` = off.
pub async fn measure(
    model: &Arc<dyn ChatModel>,
    branches: usize,
    concurrency: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let _ = turns(model, branches, concurrency).await?;
    let (mut off, mut on) = (f64::MAX, f64::MAX);
    let mut fields = 0;
    for _ in 0..3 {
        off = off.min(turns(model, branches, concurrency).await?);
        let counter = FieldCounter::default();
        let subscriber = tracing_subscriber::registry().with(counter.clone());
        // The turns run on this thread (the benchmark's main task), so a
        // thread-scoped subscriber sees every span they open.
        let guard = tracing::subscriber::set_default(subscriber);
        on = on.min(turns(model, branches, concurrency).await?);
        drop(guard);
        fields = counter.0.load(std::sync::atomic::Ordering::Relaxed);
    }
    if fields == 0 {
        return Err("telemetry on: no span field was seen".into());
    }
    let n = (branches * TURNS) as f64;
    println!(
        "{}",
        json!({"bench": "turns", "metric": "telemetry_wall_time", "ours": on,
            "baseline": off, "unit": "s", "ratio": on / off})
    );
    println!(
        "{}",
        json!({"bench": "turns", "metric": "telemetry_per_turn", "ours": on / n * 1e6,
            "baseline": off / n * 1e6, "unit": "µs", "ratio": on / off})
    );
    Ok(())
}

async fn turns(
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
    if let Some(Err(e)) = results.iter().find(|r| r.is_err()) {
        return Err(format!("a turn failed: {e}").into());
    }
    Ok(secs)
}

/// Formats every field of every span into a scratch buffer (as an
/// exporter converting them to attributes would) and counts them.
#[derive(Clone, Default)]
struct FieldCounter(Arc<std::sync::atomic::AtomicU64>);

struct Scratch<'a>(&'a mut String, u64);

impl tracing::field::Visit for Scratch<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={:?};", field.name(), value);
        self.1 += 1;
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        let _ = write!(self.0, "{}={};", field.name(), value);
        self.1 += 1;
    }
}

impl FieldCounter {
    fn visit(&self, record: impl FnOnce(&mut Scratch<'_>)) {
        let mut buf = String::new();
        let mut scratch = Scratch(&mut buf, 0);
        record(&mut scratch);
        let n = scratch.1;
        std::hint::black_box(&buf);
        self.0.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
}

impl<S> tracing_subscriber::Layer<S> for FieldCounter
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _id: &tracing::span::Id,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        self.visit(|s| attrs.record(s));
    }

    fn on_record(
        &self,
        _id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        self.visit(|s| values.record(s));
    }
}
