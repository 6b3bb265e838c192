//! Benchmark of durable storage: saving and loading a long conversation
//! through the SQLite store, beside writing `to_dict` with serde_json to a
//! file, in the same run; then SQLite and PostgreSQL side by side (with
//! `--pg-url URL` or `LIONAGI_PG_URL`, feature `postgres`): the latency of
//! appending a turn, and of recording a live branch's turn with its log
//! (`record_turn_at`), at message 10 and at message N, turns per second with
//! 1, 4 and 16 concurrent writers, loading the N-message conversation, and
//! `load_since` after 10 new turns. Prints one JSON object per line.
//!
//! ```text
//! cargo run --release -p branch-session --features postgres --example bench_store -- \
//!     [--messages N] [--runs N] [--dir PATH] [--pg-url URL]
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use branch_core::message::InstructionContent;
use branch_core::{Branch, Message, Participant, ToDictOptions};
use branch_session::{BranchStore, Durability, SqliteOptions, SqliteStore};
use serde_json::json;

struct Args {
    messages: usize,
    runs: usize,
    dir: Option<PathBuf>,
    pg_url: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        messages: 10_000,
        runs: 5,
        dir: None,
        pg_url: std::env::var("LIONAGI_PG_URL")
            .ok()
            .filter(|u| !u.is_empty()),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--messages" => {
                a.messages = value()?.parse().map_err(|e| format!("--messages: {e}"))?
            }
            "--runs" => a.runs = value()?.parse().map_err(|e| format!("--runs: {e}"))?,
            "--dir" => a.dir = Some(PathBuf::from(value()?)),
            "--pg-url" => a.pg_url = Some(value()?),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if a.messages == 0 || a.runs == 0 {
        return Err("--messages and --runs must be at least 1".into());
    }
    Ok(a)
}

/// A branch with a system prompt and `n - 1` alternating user/model turns.
fn conversation(n: usize) -> Branch {
    let mut b = Branch::builder()
        .system("You are a careful assistant.")
        .build()
        .expect("default branch");
    let id = b.id();
    for i in 1..n {
        let m = if i % 2 == 1 {
            let content = InstructionContent {
                instruction: Some(
                    format!("Question {i}: what changed in the report since last week?").into(),
                ),
                ..Default::default()
            };
            Message::instruction(content)
                .with_sender(Participant::from("user"))
                .with_recipient(Participant::Id(id))
        } else {
            Message::assistant(format!(
                "Answer {i}: revenue rose 4%, churn fell, two incidents were closed and one opened."
            ))
        };
        b.msgs_mut().add_message(m);
    }
    b
}

struct Timing {
    ms: Vec<f64>,
}

impl Timing {
    fn line(&mut self, case: &str, messages: usize, bytes: Option<u64>) {
        self.ms.sort_by(f64::total_cmp);
        let median = self.ms[self.ms.len() / 2];
        let mut out = json!({
            "bench": "store",
            "case": case,
            "messages": messages,
            "runs": self.ms.len(),
            "min_ms": round(self.ms[0]),
            "median_ms": round(median),
        });
        if let Some(b) = bytes {
            out["bytes"] = b.into();
        }
        println!("{out}");
    }
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

async fn time<F, Fut, T>(runs: usize, mut f: F) -> Result<(Timing, T), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let mut ms = Vec::with_capacity(runs);
    let mut last = None;
    for _ in 0..runs {
        let start = Instant::now();
        let out = f().await?;
        ms.push(start.elapsed().as_secs_f64() * 1000.0);
        last = Some(out);
    }
    Ok((Timing { ms }, last.ok_or("no run")?))
}

fn file_size(p: &Path) -> Option<u64> {
    std::fs::metadata(p).ok().map(|m| m.len())
}

async fn run(args: Args) -> Result<(), String> {
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("bench-store-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let n = args.messages;
    let branch = conversation(n);
    let opts = ToDictOptions::default();
    let expected = branch.to_dict(&opts).map_err(|e| e.to_string())?;

    // Reference: to_dict + serde_json to a file, and back.
    let file = dir.join("branch.json");
    let (mut t, ()) = time(args.runs, || async {
        let bytes = branch.to_json_vec(&opts).map_err(|e| e.to_string())?;
        std::fs::write(&file, bytes).map_err(|e| e.to_string())
    })
    .await?;
    t.line("file_write", n, file_size(&file));
    let (mut t, ()) = time(args.runs, || async {
        let bytes = branch.to_json_vec(&opts).map_err(|e| e.to_string())?;
        let mut f = std::fs::File::create(&file).map_err(|e| e.to_string())?;
        std::io::Write::write_all(&mut f, &bytes).map_err(|e| e.to_string())?;
        f.sync_all().map_err(|e| e.to_string())
    })
    .await?;
    t.line("file_write_fsync", n, file_size(&file));
    let (mut t, loaded) = time(args.runs, || async {
        let bytes = std::fs::read(&file).map_err(|e| e.to_string())?;
        Branch::from_json_slice(&bytes).map_err(|e| e.to_string())
    })
    .await?;
    t.line("file_read", n, None);
    if loaded.to_dict(&opts).map_err(|e| e.to_string())? != expected {
        return Err("the file round trip changed the branch".into());
    }

    for (label, durability) in [("full", Durability::Full), ("normal", Durability::Normal)] {
        let db = dir.join(format!("store-{label}.db"));
        let _ = std::fs::remove_file(&db);
        let store = SqliteStore::open_with(
            &db,
            SqliteOptions {
                durability,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| e.to_string())?;
        // A first save: the branch is deleted before each run.
        let mut t = Timing {
            ms: Vec::with_capacity(args.runs),
        };
        for _ in 0..args.runs {
            store.delete(branch.id()).await.map_err(|e| e.to_string())?;
            let start = Instant::now();
            store.save(&branch).await.map_err(|e| e.to_string())?;
            t.ms.push(start.elapsed().as_secs_f64() * 1000.0);
        }
        t.line(&format!("sqlite_save_{label}"), n, file_size(&db));
        // Saving again with nothing changed: rows are compared, not rewritten.
        let (mut t, ()) = time(args.runs, || async {
            store.save(&branch).await.map_err(|e| e.to_string())
        })
        .await?;
        t.line(&format!("sqlite_resave_unchanged_{label}"), n, None);
        let (mut t, loaded) = time(args.runs, || async {
            store.load(branch.id()).await.map_err(|e| e.to_string())
        })
        .await?;
        t.line(&format!("sqlite_load_{label}"), n, None);
        if loaded.to_dict(&opts).map_err(|e| e.to_string())? != expected {
            return Err("the store round trip changed the branch".into());
        }
        // One more turn on the long conversation: a file must be rewritten
        // whole, the store appends three rows.
        let (mut t, ()) = time(args.runs, || async {
            let turn = [
                Message::instruction(InstructionContent {
                    instruction: Some("One more question?".into()),
                    ..Default::default()
                }),
                Message::assistant("One more answer."),
                Message::assistant("And a follow-up."),
            ];
            store
                .append_turn(branch.id(), &turn)
                .await
                .map_err(|e| e.to_string())
        })
        .await?;
        t.line(&format!("sqlite_append_turn_{label}"), n, None);
    }
    // SQLite and PostgreSQL side by side, both durable at commit.
    let sqlite = SqliteStore::open(dir.join("side-by-side.db"))
        .await
        .map_err(|e| e.to_string())?;
    side_by_side("sqlite", Arc::new(sqlite), &branch, args.runs).await?;
    match &args.pg_url {
        #[cfg(feature = "postgres")]
        Some(url) => {
            let opts = branch_session::PgOptions {
                schema: Some(format!("bench_{}", std::process::id())),
                max_connections: 16,
                ..Default::default()
            };
            let pg = branch_session::PgStore::connect_with(url, opts)
                .await
                .map_err(|e| e.to_string())?;
            side_by_side("postgres", Arc::new(pg), &branch, args.runs).await?;
        }
        #[cfg(not(feature = "postgres"))]
        Some(_) => return Err("--pg-url needs the `postgres` feature".into()),
        None => eprintln!("bench_store: no --pg-url or LIONAGI_PG_URL; PostgreSQL skipped"),
    }
    if args.dir.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}

fn one_turn(i: usize) -> [Message; 2] {
    [
        Message::instruction(InstructionContent {
            instruction: Some(format!("Follow-up {i}?").into()),
            ..Default::default()
        }),
        Message::assistant(format!("Follow-up answer {i}.")),
    ]
}

/// A model call's log of about 1 KiB.
fn call_log(i: usize) -> branch_core::Log {
    let mut content = serde_json::Map::new();
    content.insert("turn".into(), json!(i));
    content.insert("response".into(), json!("x".repeat(1024)));
    branch_core::Log::new(content)
}

fn line(store: &str, case: &str, fields: serde_json::Value) {
    let mut out = json!({"bench": "store", "store": store, "case": case});
    if let (Some(o), Some(f)) = (out.as_object_mut(), fields.as_object()) {
        o.extend(f.clone());
    }
    println!("{out}");
}

/// The same measurements on one store.
async fn side_by_side(
    name: &str,
    store: Arc<dyn BranchStore>,
    long: &Branch,
    runs: usize,
) -> Result<(), String> {
    let err = |e: branch_session::StoreError| e.to_string();
    let n = long.msgs().len();
    store.save(long).await.map_err(err)?;
    let short = conversation(10);
    store.save(&short).await.map_err(err)?;
    // Appending a turn: the cost must not grow with the conversation. The
    // two are interleaved, so a busy machine slows both alike.
    let turns = runs.max(100);
    let (_, mut v_short) = store.load_versioned(short.id()).await.map_err(err)?;
    let (_, mut v_long) = store.load_versioned(long.id()).await.map_err(err)?;
    let mut t_short = Timing {
        ms: Vec::with_capacity(turns),
    };
    let mut t_long = Timing {
        ms: Vec::with_capacity(turns),
    };
    for i in 0..turns {
        let start = Instant::now();
        v_short = store
            .append_turn_at(short.id(), v_short, &one_turn(i))
            .await
            .map_err(err)?;
        t_short.ms.push(start.elapsed().as_secs_f64() * 1000.0);
        let start = Instant::now();
        v_long = store
            .append_turn_at(long.id(), v_long, &one_turn(i))
            .await
            .map_err(err)?;
        t_long.ms.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    // Recording a live branch's turn: its two messages, its metadata and
    // its call's log (a fixed 1 KiB, so what is measured is the store's
    // own work, which must not grow with the conversation either).
    let (mut live_short, mut v_short) = store.load_versioned(short.id()).await.map_err(err)?;
    let (mut live_long, mut v_long) = store.load_versioned(long.id()).await.map_err(err)?;
    let mut r_short = Timing {
        ms: Vec::with_capacity(turns),
    };
    let mut r_long = Timing {
        ms: Vec::with_capacity(turns),
    };
    // No capacity dump (a file in the working directory) mid-run.
    for live in [&mut live_short, &mut live_long] {
        let mut config = live.logger().config().clone();
        config.capacity = None;
        let logs = live.logs().clone();
        *live.logger_mut() = branch_core::DataLogger::with_logs(config, logs);
    }
    for i in 0..turns {
        for (live, version, t) in [
            (&mut live_short, &mut v_short, &mut r_short),
            (&mut live_long, &mut v_long, &mut r_long),
        ] {
            let turn = one_turn(i);
            for m in &turn {
                live.msgs_mut().add_message(m.clone());
            }
            live.logger_mut().log(call_log(i));
            let start = Instant::now();
            *version = store
                .record_turn_at(live, *version, &turn)
                .await
                .map_err(err)?;
            t.ms.push(start.elapsed().as_secs_f64() * 1000.0);
        }
    }
    for (case, messages, t) in [
        ("append_turn_at_10", 10, &mut t_short),
        ("append_turn_at_n", n, &mut t_long),
        ("record_turn_at_10", 10, &mut r_short),
        ("record_turn_at_n", n, &mut r_long),
    ] {
        t.ms.sort_by(f64::total_cmp);
        line(
            name,
            case,
            json!({"messages": messages, "runs": turns,
                   "median_ms": round(t.ms[t.ms.len() / 2]), "min_ms": round(t.ms[0])}),
        );
    }
    // Throughput: W writers, each on a conversation of its own.
    for writers in [1usize, 4, 16] {
        let per_writer = 640 / writers;
        let mut ids = Vec::new();
        for _ in 0..writers {
            let b = conversation(10);
            store.save(&b).await.map_err(err)?;
            ids.push(b.id());
        }
        let start = Instant::now();
        let mut tasks = Vec::new();
        for id in ids {
            let store = Arc::clone(&store);
            tasks.push(tokio::spawn(async move {
                for i in 0..per_writer {
                    store
                        .append_turn(id, &one_turn(i))
                        .await
                        .map_err(|e| e.to_string())?;
                }
                Ok::<_, String>(())
            }));
        }
        for t in tasks {
            t.await.map_err(|e| e.to_string())??;
        }
        let secs = start.elapsed().as_secs_f64();
        let total = writers * per_writer;
        line(
            name,
            "turns_per_second",
            json!({"writers": writers, "turns": total, "turns_per_s": round(total as f64 / secs)}),
        );
    }
    // Loading the long conversation.
    let (mut t, loaded) = time(runs, || async { store.load(long.id()).await.map_err(err) }).await?;
    t.ms.sort_by(f64::total_cmp);
    line(
        name,
        "load",
        json!({"messages": loaded.msgs().len(), "runs": runs,
               "median_ms": round(t.ms[t.ms.len() / 2]), "min_ms": round(t.ms[0])}),
    );
    // Catching up after 10 turns by someone else.
    let since = store.load_since(long.id(), u64::MAX).await.map_err(err)?;
    let cached = since.message_count;
    for i in 0..10 {
        store
            .append_turn(long.id(), &one_turn(i))
            .await
            .map_err(err)?;
    }
    let (mut t, caught) = time(runs, || async {
        store.load_since(long.id(), cached).await.map_err(err)
    })
    .await?;
    t.ms.sort_by(f64::total_cmp);
    if caught.messages.len() != 20 {
        return Err(format!(
            "load_since returned {} messages",
            caught.messages.len()
        ));
    }
    line(
        name,
        "load_since_10_turns",
        json!({"messages": cached, "runs": runs,
               "median_ms": round(t.ms[t.ms.len() / 2]), "min_ms": round(t.ms[0])}),
    );
    Ok(())
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("bench_store: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(args).await {
        eprintln!("bench_store: {e}");
        std::process::exit(1);
    }
}
