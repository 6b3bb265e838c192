//! Many worker processes on one PostgreSQL (the `pg_workers` example, run
//! as child processes of this test binary): 4 workers × 100 turns on 20
//! shared conversations routed at random, then the faults: a worker
//! SIGKILLed mid-turn, the server restarted under the workers, and
//! connections cut in the middle of transactions. Afterwards every
//! committed turn is stored exactly once, in queue order, nothing
//! half-written is visible and the workers finished by themselves.
#![cfg(feature = "postgres")]

mod common;

#[allow(dead_code)]
#[path = "../examples/pg_workers.rs"]
mod pg_workers;

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::stores::{fresh_schema, pg_url, without_tls};

const ARGS_ENV: &str = "LIONAGI_PG_WORKER_ARGS";

/// The server restart disturbs every connection: it runs alone, the other
/// tests of this file share the server.
static SERVER: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// `url` with the connections named `name`, so a test cuts only its own.
fn named_url(url: &str, name: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}application_name={name}")
}

#[test]
#[ignore = "child process of the pg_workers tests"]
fn worker_child() {
    let Ok(args) = std::env::var(ARGS_ENV) else {
        eprintln!("worker_child only does something when a pg_workers test runs it");
        return;
    };
    let args: Vec<String> = args.split('\u{1f}').map(str::to_owned).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if let Err(e) = rt.block_on(pg_workers::run(&args)) {
        eprintln!("worker: {e}");
        std::process::exit(1);
    }
}

/// A worker process, its committed jobs collected from its output.
struct Worker {
    child: Child,
    committed: Arc<Mutex<Vec<i64>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    fn start(url: &str, schema: &str, name: &str, extra: &[&str]) -> Self {
        let mut args = vec![url, schema, "work", name, "--until-empty"];
        args.extend_from_slice(extra);
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "worker_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ARGS_ENV, args.join("\u{1f}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let committed = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let sink = Arc::clone(&committed);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("committed job ").nth(1) {
                    if let Some(Ok(job)) = rest.split_whitespace().next().map(str::parse) {
                        sink.lock().unwrap().push(job);
                    }
                }
            }
        });
        Self {
            child,
            committed,
            reader: Some(reader),
        }
    }

    fn committed(&self) -> usize {
        self.committed.lock().unwrap().len()
    }

    /// Waits for the worker to finish by itself (bounded).
    fn finish(mut self, within: Duration) -> Vec<i64> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "a worker failed: {status}");
                break;
            }
            if start.elapsed() > within {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("a worker did not finish within {within:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.collect()
    }

    fn kill(mut self) -> Vec<i64> {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        self.collect()
    }

    fn collect(&mut self) -> Vec<i64> {
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        self.committed.lock().unwrap().clone()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A queue of `turns` turns on `conversations` conversations.
async fn prepare(url: &str, tag: &str, conversations: usize, turns: usize) -> String {
    let schema = fresh_schema(tag);
    let store = pg_workers::connect(url, &schema).await.unwrap();
    pg_workers::setup(&store, conversations).await.unwrap();
    pg_workers::enqueue(&store, turns, 7).await.unwrap();
    schema
}

/// Every turn finished, stored once, in order; every acknowledged one
/// among them.
async fn verify(url: &str, schema: &str, turns: usize, acked: &[i64]) {
    let store = pg_workers::connect(url, schema).await.unwrap();
    let report = pg_workers::check(&store).await.unwrap();
    assert!(report.problems.is_empty(), "{:#?}", report.problems);
    assert_eq!(report.unfinished, 0);
    assert_eq!(report.turns, turns);
    let unique: HashSet<i64> = acked.iter().copied().collect();
    assert_eq!(
        unique.len(),
        turns,
        "every turn acknowledged by some worker"
    );
}

fn wait_for(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < within, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_workers_share_twenty_conversations_and_lose_nothing() {
    let Some(url) = pg_url() else { return };
    let _shared = SERVER.read().await;
    const TURNS: usize = 400;
    let schema = prepare(&url, "many", 20, TURNS).await;
    let (u, s) = (url.clone(), schema.clone());
    let acked = tokio::task::spawn_blocking(move || {
        let workers: Vec<Worker> = (0..4)
            .map(|i| Worker::start(&u, &s, &format!("w{i}"), &["--think-ms", "0"]))
            .collect();
        let mut acked = Vec::new();
        let mut per_worker = Vec::new();
        for w in workers {
            let done = w.finish(Duration::from_secs(50));
            per_worker.push(done.len());
            acked.extend(done);
        }
        assert!(
            per_worker.iter().filter(|&&n| n > 0).count() >= 2,
            "the turns were shared: {per_worker:?}"
        );
        acked
    })
    .await
    .unwrap();
    verify(&url, &schema, TURNS, &acked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_turn_loses_nothing_and_the_others_take_over() {
    let Some(url) = pg_url() else { return };
    let _shared = SERVER.read().await;
    const TURNS: usize = 120;
    let schema = prepare(&url, "sigkill", 8, TURNS).await;
    let (u, s) = (url.clone(), schema.clone());
    let acked = tokio::task::spawn_blocking(move || {
        let flags = ["--think-ms", "15", "--lease-ms", "1000"];
        let victim = Worker::start(&u, &s, "victim", &flags);
        let others: Vec<Worker> = (0..2)
            .map(|i| Worker::start(&u, &s, &format!("w{i}"), &flags))
            .collect();
        // Killed in the middle of its work: thinking or writing.
        wait_for("the victim's tenth turn", Duration::from_secs(30), || {
            victim.committed() >= 10
        });
        let mut acked = victim.kill();
        for w in others {
            acked.extend(w.finish(Duration::from_secs(50)));
        }
        acked
    })
    .await
    .unwrap();
    verify(&url, &schema, TURNS, &acked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_cut_mid_transaction_lose_nothing() {
    let Some(url) = pg_url() else { return };
    let _shared = SERVER.read().await;
    const TURNS: usize = 120;
    let schema = prepare(&url, "cut", 8, TURNS).await;
    let app = format!("w_{schema}").chars().take(60).collect::<String>();
    let worker_url = named_url(&url, &app);
    let (killer, conn) = tokio_postgres::connect(&without_tls(&url), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let (u, s) = (worker_url, schema.clone());
    let workers = tokio::task::spawn_blocking(move || {
        (0..3)
            .map(|i| Worker::start(&u, &s, &format!("w{i}"), &["--think-ms", "2"]))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    // Cut every worker connection that is inside a transaction, again and
    // again, while the turns run.
    let mut cut = 0i64;
    let start = Instant::now();
    while workers.iter().map(Worker::committed).sum::<usize>() < TURNS * 2 / 3
        && start.elapsed() < Duration::from_secs(30)
    {
        let row = killer
            .query_one(
                "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()
                   AND application_name = $1
                   AND state IN ('idle in transaction', 'active')",
                &[&app],
            )
            .await
            .unwrap();
        cut += row.get::<_, i64>(0);
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert!(cut > 0, "no connection was cut");
    let acked = tokio::task::spawn_blocking(move || {
        let mut acked = Vec::new();
        for w in workers {
            acked.extend(w.finish(Duration::from_secs(50)));
        }
        acked
    })
    .await
    .unwrap();
    verify(&url, &schema, TURNS, &acked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_under_the_workers_loses_nothing() {
    let Some(url) = pg_url() else { return };
    let Ok(pg_ctl) = std::env::var("LIONAGI_PG_CTL") else {
        let required = std::env::var("LIONAGI_PG_REQUIRED").is_ok_and(|v| v == "1")
            || std::env::var_os("CI").is_some();
        assert!(
            !required,
            "LIONAGI_PG_CTL is not set (.ci/services/postgres.sh sets it)"
        );
        eprintln!(
            "skipped: set LIONAGI_PG_CTL (a pg_ctl command for the test server) to restart it"
        );
        return;
    };
    let _alone = SERVER.write().await;
    const TURNS: usize = 120;
    let schema = prepare(&url, "restart", 8, TURNS).await;
    let (u, s) = (url.clone(), schema.clone());
    let acked = tokio::task::spawn_blocking(move || {
        let workers: Vec<Worker> = (0..3)
            .map(|i| Worker::start(&u, &s, &format!("w{i}"), &["--think-ms", "5"]))
            .collect();
        wait_for(
            "some turns before the restart",
            Duration::from_secs(30),
            || workers.iter().map(Worker::committed).sum::<usize>() >= 20,
        );
        let status = Command::new("sh")
            .arg("-c")
            .arg(format!("{pg_ctl} restart -m fast -w -t 60"))
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "pg_ctl restart failed");
        let mut acked = Vec::new();
        for w in workers {
            acked.extend(w.finish(Duration::from_secs(50)));
        }
        acked
    })
    .await
    .unwrap();
    verify(&url, &schema, TURNS, &acked).await;
}
