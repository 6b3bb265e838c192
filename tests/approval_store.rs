//! A turn paused on "ask", written to the store, the process state
//! dropped; a fresh branch loaded from the store approves one call and
//! denies the other and resumes: the stored conversation equals the one an
//! in-process approval produces (ids and timestamps masked). Real SQLite
//! file and real PostgreSQL database (`LIONAGI_PG_URL`, started by
//! `.ci/services/postgres.sh`), real loopback model server.

use std::collections::HashMap;
use std::sync::Arc;

use lionagi::actions::DynamicTool;
use lionagi::core::model::{ChatModel, ModelConfig};
use lionagi::core::{Branch, ToDictOptions, Tool};
use lionagi::models::IModel;
use lionagi::models::mock::{MockReply, MockServer};
use lionagi::operations::{
    ApprovalPolicy, BranchApproval, BranchOperations, Decision, OperateOptions, OperationError,
    ResponseFormat, ToolPolicy,
};
use lionagi::session::store::{BranchStore, SqliteStore};
use lionagi::session::{PgOptions, PgStore};
use serde_json::{Value, json};

fn tool(name: &str, f: fn(&Value) -> Value) -> Arc<dyn Tool> {
    DynamicTool::new(
        name,
        Some(format!("The {name} tool.")),
        json!({"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}),
        move |args: Value| async move { Ok::<_, String>(f(&args)) },
    )
    .unwrap()
    .into_tool()
}

fn tools() -> Vec<Arc<dyn Tool>> {
    vec![
        tool("double", |a| json!(a["x"].as_i64().unwrap_or(0) * 2)),
        tool("erase", |_| json!("erased")),
    ]
}

async fn scripted() -> MockServer {
    let server = MockServer::start().await;
    server.push(MockReply::json(json!({
        "answer": "working", "action_required": true,
        "action_requests": [
            {"function": "double", "arguments": {"x": 21}},
            {"function": "erase", "arguments": {"x": 1}}
        ]
    })));
    server
}

fn model(server: &MockServer) -> Arc<dyn ChatModel> {
    let config = ModelConfig::builder()
        .provider("openai")
        .model("gpt-4.1-mini")
        .base_url(&server.base_url())
        .allow_local_network(true)
        .build()
        .unwrap();
    Arc::new(IModel::with_api_key(config, "test").unwrap())
}

fn branch(server: &MockServer) -> Branch {
    Branch::builder()
        .system("Use tools.")
        .chat_model(model(server))
        .tools(tools())
        .build()
        .unwrap()
}

fn opts() -> OperateOptions {
    OperateOptions::new("Double 21, then erase.")
        .actions(true)
        .response_format(ResponseFormat::Schema(json!({
            "type": "object", "title": "Answer",
            "properties": {"answer": {"type": "string"}}, "required": ["answer"]
        })))
}

fn masked(b: &Branch) -> Value {
    fn walk(v: &mut Value, ids: &mut HashMap<String, usize>) {
        match v {
            Value::String(s) if uuid::Uuid::parse_str(s).is_ok() => {
                let n = ids.len();
                let k = *ids.entry(s.clone()).or_insert(n);
                *s = format!("<id {k}>");
            }
            Value::Array(a) => a.iter_mut().for_each(|x| walk(x, ids)),
            Value::Object(o) => {
                for k in ["created_at", "duration", "updated_at", "response_obj"] {
                    o.shift_remove(k);
                }
                o.values_mut().for_each(|x| walk(x, ids));
            }
            _ => {}
        }
    }
    let mut d = b.to_dict(&ToDictOptions::default()).unwrap();
    let o = d.as_object_mut().unwrap();
    let logs = o
        .shift_remove("logs")
        .map(|l| l["collections"].as_array().map_or(0, Vec::len));
    o.shift_remove("chat_model");
    o.insert("log_count".into(), json!(logs));
    walk(&mut d, &mut HashMap::new());
    d
}

#[tokio::test]
async fn paused_in_one_process_resumed_from_sqlite_in_another() {
    let dir = std::env::temp_dir().join(format!("lionagi-approval-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("store.db");
    // Each "process" opens the file afresh.
    paused_and_resumed_across_processes(|| {
        let path = path.clone();
        async move { SqliteStore::open(&path).await.unwrap() }
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn paused_in_one_process_resumed_from_postgres_in_another() {
    let Some(url) = pg_url() else { return };
    // A schema of its own: tests run in parallel against one database.
    let schema: String = format!("t_approval_{}", uuid::Uuid::new_v4().simple())
        .chars()
        .take(63)
        .collect();
    // Each "process" connects afresh (its own pool, nothing shared).
    paused_and_resumed_across_processes(|| {
        let (url, schema) = (url.clone(), schema.clone());
        async move {
            let opts = PgOptions {
                schema: Some(schema),
                max_connections: 2,
                ..PgOptions::default()
            };
            PgStore::connect_with(&url, opts).await.unwrap()
        }
    })
    .await;
}

/// The PostgreSQL database's URL, or `None` (with a message) locally when
/// none is configured; in CI, or with `LIONAGI_PG_REQUIRED=1`, a missing
/// database fails the test.
fn pg_url() -> Option<String> {
    match std::env::var("LIONAGI_PG_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let required = std::env::var("LIONAGI_PG_REQUIRED").is_ok_and(|v| v == "1")
                || std::env::var_os("CI").is_some();
            assert!(
                !required,
                "LIONAGI_PG_URL is not set but PostgreSQL is required (CI or LIONAGI_PG_REQUIRED=1); .ci/services/postgres.sh starts one"
            );
            eprintln!("skipped: set LIONAGI_PG_URL to run the approval scenario on PostgreSQL");
            None
        }
    }
}

/// The scenario against any store: `open` gives a fresh handle on the same
/// storage, as a new process would get.
async fn paused_and_resumed_across_processes<S, F, Fut>(open: F)
where
    S: BranchStore,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = S>,
{
    // The reference run: an approver in process.
    let server = scripted().await;
    let mut live = branch(&server);
    live.set_approval_policy(Some(
        ApprovalPolicy::new()
            .tool("erase", ToolPolicy::Ask)
            .tool("double", ToolPolicy::Ask)
            .approver_fn(|c| async move {
                if c.function == "double" {
                    Decision::Approve
                } else {
                    Decision::Deny(None)
                }
            }),
    ));
    live.operate(opts()).await.unwrap();

    // Process one: pauses, writes the branch, is gone.
    let server = scripted().await;
    let id = {
        let store = open().await;
        let mut b = branch(&server);
        b.set_approval_policy(Some(ApprovalPolicy::new().default_policy(ToolPolicy::Ask)));
        let e = b.operate(opts()).await.unwrap_err();
        assert!(matches!(
            e,
            OperationError::ApprovalPending { calls: 2, .. }
        ));
        store.save(&b).await.unwrap();
        b.id()
    };

    // Process two: a fresh store handle, a branch from its rows.
    let store = open().await;
    let mut b = store.load(id).await.unwrap();
    b.acts_mut().register_all(tools(), false).unwrap();
    let pending = b.pending_approval().unwrap().expect("the pause is stored");
    let decisions = pending
        .calls
        .iter()
        .map(|c| {
            let d = if c.function == "double" {
                Decision::Approve
            } else {
                Decision::Deny(None)
            };
            (c.call_id, d)
        })
        .collect();
    let done = b.resume(decisions).await.unwrap();
    assert_eq!(done.action_responses[0].output, Some(json!(42)));
    store.save(&b).await.unwrap();
    drop(b);

    let stored = open().await.load(id).await.unwrap();
    assert!(stored.pending_approval().unwrap().is_none());
    let live = Branch::from_dict(&live.to_dict(&ToDictOptions::default()).unwrap()).unwrap();
    assert_eq!(masked(&stored), masked(&live));
}
