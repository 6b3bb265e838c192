//! Benchmark: `communicate` turns against a fixed-reply server in another
//! process (nginx, or our static responder), beside raw reqwest sending the
//! same request bodies with the same concurrency, in the same run.
//!
//! `cargo xtask bench turns [--branches N] [--concurrency C] [--seq-turns N]
//! [--passes N]`
//!
//! Workloads: N branches × 3 turns at concurrency C (default 1,000 × 3 at
//! 64); the same all at once; one conversation of `--seq-turns` sequential
//! turns (default 1,000) with the per-turn cost at its start and its end.
//! Figures: wall time, the client's CPU time (`getrusage`, every thread of
//! this process; the server's is not counted) with its user part, the
//! minor page faults and the context switches of the same pass, and the
//! peak memory of the 1,000 × 3 run against the bytes its branches hold.
//! Each 1,000 × 3 workload runs `--passes` passes of each side (default
//! 15), alternating, and reports each side's best: with three, the ratio of
//! unchanged code moved between 1.04× and 1.55× from run to run at
//! concurrency 64.
//!
//! `--side ours|raw|none --workload c64|all|seq` runs one side of one
//! workload once and exits: `cargo xtask bench turns --callgrind` runs those
//! under callgrind and subtracts the `none` (setup only) run.
//! `--side ours --workload held` runs only the peak-memory phase (the first
//! 1,000 × 3 run, which captures no bodies), for a heap profiler.
//!
//! Prints one JSON object per line: `bench`, `metric`, `ours`,
//! `baseline`, `unit`, `ratio` (ours / baseline, so above 1 means costlier
//! than raw HTTP).

use std::sync::Arc;
use std::time::Instant;

use branch_core::Branch;
use branch_core::branch::ToDictOptions;
use branch_core::model::{ChatModel, ModelConfig};
use branch_models::IModel;
use branch_models::bench_server::{self, StaticServer, Usage};
use branch_models::mock::{MockReply, MockServer};
use branch_operations::{BranchOperations, CommunicateOptions};
use futures_util::StreamExt;
use serde_json::{Value, json};

mod telemetry_cost;

type Error = Box<dyn std::error::Error>;

const TURNS: usize = 3;
const REPLY: &str = "Benchmark reply.";
/// Turns averaged for the per-turn cost at each end of the long conversation.
const WINDOW: usize = 100;
/// Measured passes of each side for the 1,000 × 3 workloads, alternating
/// (`--passes`); the best of each side is reported.
const PASSES: usize = 15;

fn line(metric: &str, ours: f64, baseline: f64, unit: &str) {
    println!(
        "{}",
        json!({"bench": "turns", "metric": metric, "ours": ours, "baseline": baseline,
            "unit": unit, "ratio": ours / baseline})
    );
}

/// Command-line settings.
struct Args {
    branches: usize,
    concurrency: usize,
    seq_turns: usize,
    passes: usize,
    side: Option<String>,
    workload: String,
}

fn args() -> Result<Args, Error> {
    let mut a = Args {
        branches: 1000,
        concurrency: 64,
        seq_turns: 1000,
        passes: PASSES,
        side: None,
        workload: "c64".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--branches" => a.branches = value()?.parse()?,
            "--concurrency" => a.concurrency = value()?.parse()?,
            "--seq-turns" => a.seq_turns = value()?.parse()?,
            "--passes" => a.passes = value()?.parse::<usize>()?.max(1),
            "--side" => a.side = Some(value()?),
            "--workload" => a.workload = value()?,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    Ok(a)
}

fn model_for(base_url: &str) -> Result<Arc<dyn ChatModel>, Error> {
    let config = ModelConfig::builder()
        .provider("openai")
        .model("gpt-4.1-mini")
        .base_url(base_url)
        .allow_local_network(true)
        .build()?;
    Ok(Arc::new(IModel::with_api_key(config, "bench")?))
}

fn branches(model: &Arc<dyn ChatModel>, n: usize) -> Result<Vec<Branch>, Error> {
    (0..n)
        .map(|_| {
            Ok(Branch::builder()
                .system("You are a benchmark.")
                .chat_model(model.clone())
                .build()?)
        })
        .collect()
}

/// The request bodies our client sends for a workload, recorded once by
/// the in-process mock server (outside any measured phase), so the raw
/// client sends exactly the same bytes' worth of JSON.
async fn capture(workload: &str, a: &Args) -> Result<Vec<Value>, Error> {
    let server = MockServer::start_static(MockReply::text(REPLY)).await;
    let model = model_for(&server.base_url())?;
    if workload == "seq" {
        conversation(&model, a.seq_turns, &mut |_| {}).await?;
    } else {
        let mut all = branches(&model, a.branches)?;
        run_ours(&mut all, questions(a.branches), a.concurrency).await?;
    }
    Ok(server.take_bodies())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let a = args()?;
    bench_server::raise_open_files_limit();
    // A branch dumps its logs at capacity (the reference's default) into
    // `./data/logs`: that cost is part of a turn, but the files belong in a
    // directory of the benchmark's own, removed at the end.
    let scratch = std::env::temp_dir().join(format!("lionagi-bench-turns-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    std::env::set_current_dir(&scratch)?;
    let result = run(a).await;
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

async fn run(a: Args) -> Result<(), Error> {
    let server = StaticServer::start(&bench_server::chat_completion_json(REPLY))?;
    let model = model_for(&server.base_url())?;
    let url = format!("{}/chat/completions", server.base_url());
    let client = reqwest::Client::builder().no_proxy().build()?;

    if let Some(side) = a.side.as_deref() {
        return one_side(side, &a, &model, &client, &url).await;
    }
    eprintln!(
        "server: {:?} (pid {}), load average {:?}",
        server.kind(),
        server.pid(),
        bench_server::load_average()
    );

    // Peak memory first, while the process is fresh: the peak resident size
    // during the 1,000 × 3 run less the resident size at its start (the peak
    // is reset first; see `Resident` for why not `getrusage`), against the
    // JSON bytes of the messages and logs its branches hold at the end.
    // This run also warms our connection pool.
    let mut all = branches(&model, a.branches)?;
    let asked = questions(a.branches);
    let before = bench_server::reset_peak_resident().and_then(|()| bench_server::resident());
    run_ours(&mut all, asked, a.concurrency).await?;
    let held = bytes_held(&all)?;
    drop(all);
    match before.and_then(|b| Ok((b, bench_server::resident()?))) {
        Ok((before, after)) => line(
            "peak_memory_growth_vs_bytes_held",
            after.peak_bytes.saturating_sub(before.now_bytes) as f64 / 1e6,
            held as f64 / 1e6,
            "MB",
        ),
        // Not Linux, or no /proc: the other figures still stand.
        Err(e) => eprintln!("peak memory not measured: {e}"),
    }

    let bodies = capture("c64", &a).await?;
    run_raw(&client, &url, &bodies, a.concurrency).await?;
    let turns = (a.branches * TURNS) as f64;
    for (name, concurrency) in [("c64", a.concurrency), ("all_at_once", a.branches)] {
        // `--passes` alternating measured passes; the best of each side,
        // and where the CPU of its least costly pass went: user time, the
        // kernel's (the rest: loopback TCP, and the pages a heap maps
        // again as it grows back), its minor page faults and its context
        // switches.
        let mut best = [Pass::NONE; 2];
        for _ in 0..a.passes {
            let mut all = branches(&model, a.branches)?;
            let asked = questions(a.branches);
            let start = Pass::start();
            run_ours(&mut all, asked, concurrency).await?;
            // Built before the clock starts, the branches are dropped
            // before it stops: what they keep is freed inside the pass.
            // The CPU up to their drop is reported too.
            let cpu_before_drop = start.cpu_so_far();
            drop(all);
            best[0].keep_best(Pass {
                cpu_before_drop,
                ..start.finish()
            });
            let start = Pass::start();
            run_raw(&client, &url, &bodies, concurrency).await?;
            best[1].keep_best(start.finish());
        }
        let [ours, raw] = best;
        let per_turn = |x: f64| x / turns * 1e6;
        line(&format!("{name}_wall_time"), ours.wall, raw.wall, "s");
        line(
            &format!("{name}_cpu_per_turn"),
            per_turn(ours.cpu),
            per_turn(raw.cpu),
            "us",
        );
        line(
            &format!("{name}_cpu_per_turn_before_drop"),
            per_turn(ours.cpu_before_drop),
            per_turn(raw.cpu),
            "us",
        );
        line(
            &format!("{name}_user_cpu_per_turn"),
            per_turn(ours.user),
            per_turn(raw.user),
            "us",
        );
        line(
            &format!("{name}_minor_faults_per_turn"),
            ours.faults as f64 / turns,
            raw.faults as f64 / turns,
            "faults",
        );
        line(
            &format!("{name}_context_switches_per_turn"),
            ours.switches as f64 / turns,
            raw.switches as f64 / turns,
            "switches",
        );
    }

    // One long conversation: per-turn wall and CPU over the first and the
    // last WINDOW turns, ours and raw resending the same history; three
    // alternating rounds, the best of each window and side (a single pass
    // swung by ±50 % on a shared machine).
    let seq = capture("seq", &a).await?;
    let n = a.seq_turns;
    let window = WINDOW.min(n / 2).max(1);
    let per_turn = |m: &[(Instant, Usage)], from: usize| {
        let (t0, u0) = &m[from];
        let (t1, u1) = &m[from + window];
        (
            t1.duration_since(*t0).as_secs_f64() / window as f64 * 1e6,
            u1.cpu_since(u0) / window as f64 * 1e6,
        )
    };
    let windows = [("start", 0), ("end", n - window)];
    // [window][side] = (wall, cpu), the best so far.
    let mut best = [[(f64::MAX, f64::MAX); 2]; 2];
    for _ in 0..3 {
        let mut ours_marks = Vec::with_capacity(n + 1);
        conversation(&model, n, &mut |_| {
            ours_marks.push((Instant::now(), Usage::now()))
        })
        .await?;
        let mut raw_marks = Vec::with_capacity(n + 1);
        raw_marks.push((Instant::now(), Usage::now()));
        for body in &seq {
            post(&client, &url, body).await?;
            raw_marks.push((Instant::now(), Usage::now()));
        }
        for (w, (_, from)) in windows.iter().enumerate() {
            for (side, marks) in [&ours_marks, &raw_marks].into_iter().enumerate() {
                let (wall, cpu) = per_turn(marks, *from);
                let b = &mut best[w][side];
                *b = (b.0.min(wall), b.1.min(cpu));
            }
        }
    }
    for (w, (label, _)) in windows.iter().enumerate() {
        let [(ow, oc), (rw, rc)] = best[w];
        line(
            &format!("seq_{n}_turns_{label}_wall_per_turn"),
            ow,
            rw,
            "us",
        );
        line(&format!("seq_{n}_turns_{label}_cpu_per_turn"), oc, rc, "us");
    }
    // Telemetry on versus off, same run (examples/telemetry_cost).
    telemetry_cost::measure(&model, a.branches, a.concurrency).await?;
    Ok(())
}

/// One measured pass: wall and CPU seconds, the CPU before the branches'
/// drop (all of it when nothing is dropped), the user part of the CPU, the
/// minor page faults and the context switches.
#[derive(Clone, Copy)]
struct Pass {
    wall: f64,
    cpu: f64,
    cpu_before_drop: f64,
    user: f64,
    faults: i64,
    switches: i64,
}

/// A pass being measured.
struct Started(Instant, Usage);

impl Pass {
    const NONE: Pass = Pass {
        wall: f64::MAX,
        cpu: f64::MAX,
        cpu_before_drop: f64::MAX,
        user: f64::MAX,
        faults: 0,
        switches: 0,
    };

    fn start() -> Started {
        Started(Instant::now(), Usage::now())
    }

    /// Keeps the least wall time, and the rest of the pass with the least
    /// CPU time.
    fn keep_best(&mut self, p: Pass) {
        self.wall = self.wall.min(p.wall);
        if p.cpu < self.cpu {
            *self = Pass {
                wall: self.wall,
                ..p
            };
        }
    }
}

impl Started {
    fn cpu_so_far(&self) -> f64 {
        Usage::now().cpu_since(&self.1)
    }

    fn finish(self) -> Pass {
        let wall = self.0.elapsed().as_secs_f64();
        let now = Usage::now();
        let cpu = now.cpu_since(&self.1);
        Pass {
            wall,
            cpu,
            cpu_before_drop: cpu,
            user: now.user_since(&self.1),
            faults: now.minor_faults_since(&self.1),
            switches: now.context_switches_since(&self.1),
        }
    }
}

/// One side of one workload, once, for callgrind (`none`: the setup only).
async fn one_side(
    side: &str,
    a: &Args,
    model: &Arc<dyn ChatModel>,
    client: &reqwest::Client,
    url: &str,
) -> Result<(), Error> {
    if (side, a.workload.as_str()) == ("ours", "held") {
        let mut all = branches(model, a.branches)?;
        run_ours(&mut all, questions(a.branches), a.concurrency).await?;
        let held = bytes_held(&all)?;
        println!(
            "{}",
            json!({"side": side, "workload": "held", "bytes_held": held})
        );
        return Ok(());
    }
    let concurrency = match a.workload.as_str() {
        "c64" => a.concurrency,
        "all" => a.branches,
        "seq" => 1,
        w => return Err(format!("unknown workload {w}").into()),
    };
    let bodies = capture(&a.workload, a).await?;
    // Built by every side, as the timed runs build them before the clock
    // starts: the subtraction leaves ours the turns, not the building.
    let (mut built, asked) = match a.workload.as_str() {
        "seq" => (Vec::new(), Vec::new()),
        _ => (branches(model, a.branches)?, questions(a.branches)),
    };
    match (side, a.workload.as_str()) {
        ("none", _) => {}
        ("ours", "seq") => conversation(model, a.seq_turns, &mut |_| {}).await?,
        ("ours", _) => {
            run_ours(&mut built, asked, concurrency).await?;
        }
        ("raw", _) => run_raw(client, url, &bodies, concurrency).await?,
        (s, _) => return Err(format!("unknown side {s}").into()),
    }
    println!(
        "{}",
        json!({"side": side, "workload": a.workload, "requests": bodies.len()})
    );
    Ok(())
}

/// Each branch's questions, one a turn: made before a pass, as raw's
/// bodies are.
fn questions(branches: usize) -> Vec<[String; TURNS]> {
    (0..branches)
        .map(|_| std::array::from_fn(|t| format!("Question {t}")))
        .collect()
}

/// The branches × TURNS turns at `concurrency`, branch `i` asking
/// `asked[i]`. Each branch is borrowed where it was built and its
/// questions made beforehand, as raw borrows bodies made beforehand:
/// moving the branches into their futures and collecting them into a
/// vector of results (920 bytes each, grown by doubling) was work of the
/// harness inside ours' pass.
async fn run_ours(
    all: &mut [Branch],
    asked: Vec<[String; TURNS]>,
    concurrency: usize,
) -> Result<(), Error> {
    let results: Vec<Result<(), String>> = futures_util::stream::iter(all.iter_mut().zip(asked))
        .map(|(b, questions)| async move {
            for q in questions {
                b.communicate(CommunicateOptions::new(q))
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    if let Some(Err(e)) = results.iter().find(|r| r.is_err()) {
        return Err(format!("a turn failed: {e}").into());
    }
    Ok(())
}

/// The JSON bytes of the branches' messages and logs.
fn bytes_held(all: &[Branch]) -> Result<usize, Error> {
    all.iter().try_fold(0, |held, b| {
        Ok(held + b.to_json_vec(&ToDictOptions::default())?.len())
    })
}

/// One branch, `turns` sequential turns; `mark` is called before the
/// first turn and after each. Returns once the log dumps the branch made at
/// capacity (written on the blocking pool) are on disk, so that they are
/// not charged to whatever is measured next.
async fn conversation(
    model: &Arc<dyn ChatModel>,
    turns: usize,
    mark: &mut dyn FnMut(usize),
) -> Result<(), Error> {
    let mut b = branches(model, 1)?.remove(0);
    mark(0);
    for t in 0..turns {
        b.communicate(CommunicateOptions::new(format!("Question {t}")))
            .await?;
        mark(t + 1);
    }
    b.logger().dumps_written().await;
    Ok(())
}

async fn post(client: &reqwest::Client, url: &str, body: &Value) -> Result<(), Error> {
    let resp = client
        .post(url)
        .bearer_auth("bench")
        .json(body)
        .send()
        .await?
        .error_for_status()?;
    let _: Value = resp.json().await?;
    Ok(())
}

async fn run_raw(
    client: &reqwest::Client,
    url: &str,
    bodies: &[Value],
    concurrency: usize,
) -> Result<(), Error> {
    let raw: Vec<Result<(), String>> = futures_util::stream::iter(bodies)
        .map(|body| async move { post(client, url, body).await.map_err(|e| e.to_string()) })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    if let Some(Err(e)) = raw.iter().find(|r| r.is_err()) {
        return Err(format!("a raw request failed: {e}").into());
    }
    Ok(())
}
