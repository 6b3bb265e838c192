//! Many workers, one PostgreSQL: worker processes take turns from a shared
//! queue table and run each on whatever conversation it names; any worker
//! serves any conversation, and a worker may die at any moment.
//!
//! ```text
//! cargo run -p branch-session --features postgres --example pg_workers -- URL SCHEMA setup CONVERSATIONS
//! cargo run ... -- URL SCHEMA enqueue TURNS SEED
//! cargo run ... -- URL SCHEMA work NAME [--think-ms N] [--lease-ms N] [--until-empty]
//! cargo run ... -- URL SCHEMA check
//! ```
//!
//! How nothing is lost or doubled:
//! * A worker claims the oldest queued turn whose conversation has no
//!   earlier unfinished turn (`FOR UPDATE SKIP LOCKED`, so workers never
//!   wait on each other) and holds it under a lease; a dead worker's
//!   lease runs out and another worker takes the turn over.
//! * The turn is appended on the branch version the worker loaded
//!   (`append_turn_at`): the version is the fencing token, so a worker
//!   whose lease ran out during a slow model call cannot write over its
//!   successor; it gets `Conflict` and starts again.
//! * The turn's message ids are derived from the queue row, so a turn
//!   that committed just before its worker died is recognised and not
//!   written twice.
//!
//! `check` verifies the result: every finished turn stored exactly once,
//! in queue order, each conversation's version one more than its turns
//! (the first version is the conversation's creation).

use std::time::Duration;

use branch_core::message::InstructionContent;
use branch_core::{Branch, Message, MessageContent, Participant};
use branch_session::{BranchStore, PgOptions, PgStore, StoreError};
use uuid::Uuid;

/// The queue: one row per turn to run.
const QUEUE: &str = "
CREATE TABLE IF NOT EXISTS turn_queue (
    id          bigserial PRIMARY KEY,
    branch_id   uuid NOT NULL,
    prompt      text NOT NULL,
    state       text NOT NULL DEFAULT 'queued' CHECK (state IN ('queued', 'done')),
    lease_owner text,
    lease_until timestamptz,
    attempts    integer NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS turn_queue_by_branch ON turn_queue (branch_id, id);";

/// Claims the oldest claimable turn: queued, not leased (or the lease ran
/// out), and the first unfinished turn of its conversation.
const CLAIM: &str = "
UPDATE turn_queue q
   SET lease_owner = $1,
       lease_until = clock_timestamp() + make_interval(secs => $2),
       attempts = attempts + 1
 WHERE q.id = (
     SELECT c.id FROM turn_queue c
      WHERE c.state = 'queued'
        AND (c.lease_until IS NULL OR c.lease_until < clock_timestamp())
        AND NOT EXISTS (SELECT 1 FROM turn_queue e
                         WHERE e.branch_id = c.branch_id AND e.id < c.id AND e.state <> 'done')
      ORDER BY c.id
      FOR UPDATE SKIP LOCKED
      LIMIT 1)
RETURNING q.id, q.branch_id, q.prompt";

/// One claimed turn.
struct Job {
    id: i64,
    branch: Uuid,
    prompt: String,
}

/// Settings of one worker.
pub struct WorkerOptions {
    /// Its name, recorded as the lease owner.
    pub name: String,
    /// How long the pretend model call takes.
    pub think: Duration,
    /// How long a claim holds before another worker may take it over.
    pub lease: Duration,
    /// Stop when every queued turn is done (otherwise wait for more).
    pub until_empty: bool,
}

/// The id of message `k` of the turn for queue row `job`: the same every
/// time the turn is run, so a second run recognises the first.
fn turn_message_id(job: i64, k: u8) -> Uuid {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&job.to_be_bytes());
    bytes[8] = k;
    bytes[9..16].copy_from_slice(b"lionagi");
    uuid::Builder::from_random_bytes(bytes).into_uuid()
}

fn turn(job: &Job) -> Vec<Message> {
    let content = InstructionContent {
        instruction: Some(job.prompt.clone().into()),
        ..Default::default()
    };
    let mut ask = Message::instruction(content)
        .with_sender(Participant::from("user"))
        .with_recipient(Participant::Id(job.branch));
    ask.element.id = turn_message_id(job.id, 0);
    let mut reply = Message::assistant(format!("reply to job {}", job.id));
    reply.element.id = turn_message_id(job.id, 1);
    vec![ask, reply]
}

fn db_err(op: &str, e: impl std::fmt::Display) -> String {
    format!("{op}: {e}")
}

/// Connects the store in `schema`.
pub async fn connect(url: &str, schema: &str) -> Result<PgStore, String> {
    let opts = PgOptions {
        schema: Some(schema.to_owned()),
        max_connections: 2,
        ..PgOptions::default()
    };
    PgStore::connect_with(url, opts)
        .await
        .map_err(|e| db_err("connect", e))
}

/// [`connect`], retried for a while: a worker started while the server
/// restarts, or whose first connection is cut, comes up by itself.
pub async fn connect_patiently(url: &str, schema: &str) -> Result<PgStore, String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut pause = Duration::from_millis(50);
    loop {
        match connect(url, schema).await {
            Ok(store) => return Ok(store),
            Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
            Err(e) => {
                eprintln!("{e}; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// Creates the queue and `n` conversations.
pub async fn setup(store: &PgStore, n: usize) -> Result<Vec<Uuid>, String> {
    let c = store.connection().await.map_err(|e| db_err("connect", e))?;
    c.batch_execute(QUEUE)
        .await
        .map_err(|e| db_err("create the queue", e))?;
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let b = Branch::builder()
            .system("You answer queued questions.")
            .name(format!("conversation-{i}"))
            .build()
            .map_err(|e| db_err("build a conversation", e))?;
        store.save(&b).await.map_err(|e| db_err("save", e))?;
        ids.push(b.id());
    }
    Ok(ids)
}

/// Queues `turns` turns, each on a conversation picked at random.
pub async fn enqueue(store: &PgStore, turns: usize, seed: u64) -> Result<(), String> {
    let branches: Vec<Uuid> = store
        .list()
        .await
        .map_err(|e| db_err("list", e))?
        .iter()
        .map(|s| s.id)
        .collect();
    if branches.is_empty() {
        return Err("no conversations: run setup first".into());
    }
    let mut rng = fastrand::Rng::with_seed(seed);
    let (targets, prompts): (Vec<Uuid>, Vec<String>) = (0..turns)
        .map(|i| {
            (
                branches[rng.usize(..branches.len())],
                format!("question {i}"),
            )
        })
        .unzip();
    let c = store.connection().await.map_err(|e| db_err("connect", e))?;
    c.execute(
        "INSERT INTO turn_queue (branch_id, prompt) SELECT * FROM UNNEST($1::uuid[], $2::text[])",
        &[&targets, &prompts],
    )
    .await
    .map_err(|e| db_err("enqueue", e))?;
    Ok(())
}

async fn claim(store: &PgStore, opts: &WorkerOptions) -> Result<Option<Job>, String> {
    let c = store.connection().await.map_err(|e| db_err("connect", e))?;
    let row = c
        .query_opt(CLAIM, &[&opts.name, &opts.lease.as_secs_f64()])
        .await
        .map_err(|e| db_err("claim", e))?;
    Ok(row.map(|r| Job {
        id: r.get(0),
        branch: r.get(1),
        prompt: r.get(2),
    }))
}

async fn unfinished(store: &PgStore) -> Result<i64, String> {
    let c = store.connection().await.map_err(|e| db_err("connect", e))?;
    let row = c
        .query_one("SELECT COUNT(*) FROM turn_queue WHERE state <> 'done'", &[])
        .await
        .map_err(|e| db_err("count", e))?;
    Ok(row.get(0))
}

async fn finish(store: &PgStore, job: &Job) -> Result<(), String> {
    let c = store.connection().await.map_err(|e| db_err("connect", e))?;
    c.execute(
        "UPDATE turn_queue SET state = 'done', lease_owner = NULL, lease_until = NULL WHERE id = $1",
        &[&job.id],
    )
    .await
    .map_err(|e| db_err("finish", e))?;
    Ok(())
}

/// Runs one claimed turn; the branch version it committed at.
async fn serve(store: &PgStore, job: &Job, opts: &WorkerOptions) -> Result<u64, String> {
    let messages = turn(job);
    for _ in 0..10 {
        let (branch, version) = store
            .load_versioned(job.branch)
            .await
            .map_err(|e| db_err("load", e))?;
        if branch.messages().contains(&messages[0].id()) {
            // Committed by an earlier run that died before finishing.
            return Ok(version);
        }
        tokio::time::sleep(opts.think).await;
        match store.append_turn_at(job.branch, version, &messages).await {
            Ok(v) => return Ok(v),
            // Someone wrote first (our lease ran out): look again.
            Err(StoreError::Conflict { .. }) => continue,
            Err(e) => return Err(db_err("append", e)),
        }
    }
    Err(format!(
        "job {}: conflicts every time; left for later",
        job.id
    ))
}

/// Takes turns until the queue is empty (with `until_empty`) or forever.
/// Every failure (a lost connection, a restarting server) is retried after
/// a pause; a turn that committed is printed as `committed job N`.
pub async fn work(store: &PgStore, opts: &WorkerOptions) -> Result<(), String> {
    let mut pause = Duration::from_millis(20);
    loop {
        let job = match claim(store, opts).await {
            Ok(Some(job)) => job,
            Ok(None) => {
                if opts.until_empty && unfinished(store).await.ok() == Some(0) {
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            Err(e) => {
                eprintln!("{}: {e}; retrying", opts.name);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        match serve(store, &job, opts).await {
            Ok(version) => {
                println!(
                    "committed job {} branch {} version {version}",
                    job.id, job.branch
                );
                // If this fails the lease runs out, the turn is found
                // stored and finished by whoever takes it next.
                if let Err(e) = finish(store, &job).await {
                    eprintln!("{}: {e}", opts.name);
                }
                pause = Duration::from_millis(20);
            }
            Err(e) => {
                eprintln!("{}: job {}: {e}; its lease will run out", opts.name, job.id);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
}

fn text_of(m: &Message) -> String {
    match &m.content {
        MessageContent::Instruction(c) => c
            .instruction
            .as_ref()
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_owned(),
        MessageContent::AssistantResponse(c) => c.assistant_response.clone(),
        _ => String::new(),
    }
}

/// What `check` found.
#[derive(Debug, Default)]
pub struct Report {
    /// Turns stored, over all conversations.
    pub turns: usize,
    /// Queue rows not finished.
    pub unfinished: i64,
    /// Everything wrong, one line each (empty when all is well).
    pub problems: Vec<String>,
}

/// Verifies every conversation against the queue.
pub async fn check(store: &PgStore) -> Result<Report, String> {
    let c = store.connection().await.map_err(|e| db_err("connect", e))?;
    let rows = c
        .query(
            "SELECT id, branch_id, prompt, state FROM turn_queue ORDER BY id",
            &[],
        )
        .await
        .map_err(|e| db_err("read the queue", e))?;
    let mut report = Report::default();
    let mut expected: std::collections::HashMap<Uuid, Vec<(i64, String)>> = Default::default();
    for r in &rows {
        let state: String = r.get(3);
        if state == "done" {
            expected
                .entry(r.get(1))
                .or_default()
                .push((r.get(0), r.get(2)));
        } else {
            report.unfinished += 1;
        }
    }
    for summary in store.list().await.map_err(|e| db_err("list", e))? {
        let (branch, version) = store
            .load_versioned(summary.id)
            .await
            .map_err(|e| db_err("load", e))?;
        let msgs: Vec<&Message> = branch.messages().iter().skip(1).collect();
        let want = expected.remove(&summary.id).unwrap_or_default();
        if msgs.len() != want.len() * 2 {
            report.problems.push(format!(
                "{}: {} messages stored for {} finished turns",
                summary.id,
                msgs.len(),
                want.len()
            ));
        }
        for (i, (job, prompt)) in want.iter().enumerate() {
            let (Some(ask), Some(reply)) = (msgs.get(2 * i), msgs.get(2 * i + 1)) else {
                break;
            };
            if text_of(ask) != *prompt || text_of(reply) != format!("reply to job {job}") {
                report.problems.push(format!(
                    "{}: turn {i} is `{}` / `{}`, expected job {job} `{prompt}`",
                    summary.id,
                    text_of(ask),
                    text_of(reply)
                ));
            }
        }
        if version != 1 + want.len() as u64 {
            report.problems.push(format!(
                "{}: version {version} after {} turns",
                summary.id,
                want.len()
            ));
        }
        report.turns += want.len();
    }
    for (branch, jobs) in expected {
        report.problems.push(format!(
            "{branch}: {} turns for a missing conversation",
            jobs.len()
        ));
    }
    let problems = store
        .check_consistency()
        .await
        .map_err(|e| db_err("check", e))?;
    report.problems.extend(problems);
    Ok(report)
}

/// The command line (without the program name).
pub async fn run(args: &[String]) -> Result<(), String> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let [url, schema, command, rest @ ..] = words.as_slice() else {
        return Err("usage: URL SCHEMA setup N | enqueue TURNS SEED | work NAME [--think-ms N] [--lease-ms N] [--until-empty] | check".into());
    };
    let store = connect_patiently(url, schema).await?;
    let num = |s: &str| s.parse::<u64>().map_err(|e| format!("`{s}`: {e}"));
    match (*command, rest) {
        ("setup", [n]) => {
            let n = usize::try_from(num(n)?).map_err(|e| e.to_string())?;
            setup(&store, n).await.map(|_| ())
        }
        ("enqueue", [turns, seed]) => {
            let turns = usize::try_from(num(turns)?).map_err(|e| e.to_string())?;
            enqueue(&store, turns, num(seed)?).await
        }
        ("work", [name, flags @ ..]) => {
            let mut opts = WorkerOptions {
                name: (*name).to_owned(),
                think: Duration::from_millis(5),
                lease: Duration::from_secs(3),
                until_empty: false,
            };
            let mut it = flags.iter();
            while let Some(flag) = it.next() {
                let mut value = || it.next().ok_or(format!("{flag} needs a value"));
                match *flag {
                    "--think-ms" => opts.think = Duration::from_millis(num(value()?)?),
                    "--lease-ms" => opts.lease = Duration::from_millis(num(value()?)?),
                    "--until-empty" => opts.until_empty = true,
                    other => return Err(format!("unknown flag `{other}`")),
                }
            }
            work(&store, &opts).await
        }
        ("check", []) => {
            let report = check(&store).await?;
            println!(
                "{} turns stored, {} unfinished, {} problems",
                report.turns,
                report.unfinished,
                report.problems.len()
            );
            for p in &report.problems {
                println!("problem: {p}");
            }
            if report.problems.is_empty() {
                Ok(())
            } else {
                Err("the check failed".into())
            }
        }
        _ => Err(format!("unknown or incomplete command `{command}`")),
    }
}

#[allow(dead_code)]
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("pg_workers: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = rt.block_on(run(&args)) {
        eprintln!("pg_workers: {e}");
        std::process::exit(1);
    }
}
