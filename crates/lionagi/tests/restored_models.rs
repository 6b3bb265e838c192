//! Models restored from data never regain local-network access (issue 18):
//! a conversation whose chat and parse models are Ollama and lattice
//! (providers registered at local addresses) with `allow_local_network:
//! true` stored and no `base_url` is refused by the guard on every path
//! that builds a model from data: `from_dict`, a clone, a store load, a
//! session include, and `lionagi chat --resume` (which runs the command
//! line's own model). Plus `lionagi chat --timeout`.
//!
//! The stored models point at this machine's own addresses, so a guard
//! failure would reach loopback only.

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use branch_core::model::{ChatModel, ModelConfig, ModelErrorKind};
use branch_core::{Branch, ToDictOptions};
use branch_models::mock::{MockReply, MockServer};
use branch_operations::{BranchOperations, CommunicateOptions, OperationError};
use lionagi::session::store::{BranchStore, SqliteStore};
use lionagi::session::{Session, share};
use serde_json::Value;

/// A branch whose models a program granted local access to (Ollama and
/// lattice are local by registration), as any program would save it.
fn granted_branch() -> Branch {
    let chat: Arc<dyn ChatModel> = Arc::new(ModelConfig::new("ollama", "llama3").unwrap());
    let parse: Arc<dyn ChatModel> = Arc::new(ModelConfig::new("lattice", "m").unwrap());
    assert!(chat.config().allow_local_network());
    let mut b = Branch::builder()
        .system("S")
        .chat_model(chat)
        .build()
        .unwrap();
    b.set_parse_model(parse);
    b
}

/// The saved document with `allow_local_network: true` and no `base_url`
/// in both models (what a hostile file would say).
fn hostile_document() -> Value {
    let mut doc = granted_branch().to_dict(&ToDictOptions::default()).unwrap();
    for key in ["chat_model", "parse_model"] {
        let cfg = doc[key]["endpoint"]["config"].as_object_mut().unwrap();
        assert_eq!(cfg["allow_local_network"], Value::Bool(true), "{key}");
        cfg.remove("base_url");
    }
    doc
}

fn snapshot(b: &Branch) -> Value {
    b.to_dict(&ToDictOptions::default()).unwrap()["messages"].clone()
}

/// A turn on `b` is refused by the guard and records nothing.
async fn refused(b: &mut Branch, path: &str) {
    for model in [b.chat_model(), b.parse_model()] {
        assert!(!model.config().allow_local_network(), "{path}");
    }
    let before = snapshot(b);
    let e = b
        .communicate(CommunicateOptions::new("hi"))
        .await
        .expect_err("refused");
    match &e {
        OperationError::ApiCall { source, .. } => {
            assert_eq!(source.kind, ModelErrorKind::NetworkGuard, "{path}: {e}");
        }
        other => panic!("{path}: expected the guard's refusal, got {other:?}"),
    }
    assert_eq!(snapshot(b), before, "{path}");
}

#[tokio::test]
async fn from_dict_and_clone() {
    let mut b = Branch::from_dict(&hostile_document()).unwrap();
    refused(&mut b, "from_dict").await;
    let mut copy = b.clone_branch().unwrap();
    refused(&mut copy, "clone").await;
}

fn temp_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lionagi-restored-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[tokio::test]
async fn store_load() {
    let db = temp_path("store.db");
    let store = SqliteStore::open(&db).await.unwrap();
    let b = granted_branch();
    store.save(&b).await.unwrap();
    let mut loaded = store.load(b.id()).await.unwrap();
    refused(&mut loaded, "store load").await;
    let _ = std::fs::remove_dir_all(db.parent().unwrap());
}

#[tokio::test]
async fn session_include() {
    let b = share(Branch::from_dict(&hostile_document()).unwrap());
    let _session = Session::builder()
        .branch(Arc::clone(&b))
        .build()
        .await
        .unwrap();
    let mut guard = b.lock().await;
    refused(&mut guard, "session include").await;
}

fn lionagi(dir: &std::path::Path, args: &[&str]) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_lionagi"));
    c.arg("chat")
        .args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .env("LIONAGI_HOME", dir.join("home"))
        .env("LIONAGI_MODEL_DIR", dir.join("models"))
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for var in [
        "OPENAI_API_KEY",
        "LIONAGI_CHAT_PROVIDER",
        "LIONAGI_CHAT_MODEL",
        "LIONAGI_CHAT_ENDPOINT",
    ] {
        c.env_remove(var);
    }
    c
}

async fn output(c: &mut tokio::process::Command) -> Output {
    tokio::time::timeout(Duration::from_secs(60), c.output())
        .await
        .expect("lionagi ends")
        .expect("lionagi runs")
}

/// `--resume` answers with the command line's model: the stored Ollama
/// and lattice models are never called (the one request is the mock's).
#[tokio::test]
async fn cli_resume_uses_the_command_lines_model() {
    let db = temp_path("chat.db");
    let dir = db.parent().unwrap().to_path_buf();
    let store = SqliteStore::open(&db).await.unwrap();
    let b = Branch::from_dict(&hostile_document()).unwrap();
    store.save(&granted_branch()).await.unwrap();
    store.save(&b).await.unwrap();
    drop(store);
    let server = MockServer::start().await;
    server.push(MockReply::text("resumed"));
    let url = server.base_url();
    let id = b.id().to_string();
    let out = output(&mut lionagi(
        &dir,
        &[
            "--base-url",
            &url,
            "--store",
            &db.display().to_string(),
            "--resume",
            &id,
            "hi",
        ],
    ))
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("resumed"));
    assert_eq!(server.request_count(), 1);
    assert!(!stderr.contains("guard"), "{stderr}");
    let _ = std::fs::remove_dir_all(dir);
}

/// `--timeout SECS` ends a call whose reply never comes, with a message
/// naming the flag.
#[tokio::test]
async fn cli_timeout_ends_a_call_that_never_answers() {
    let dir = temp_path("x").parent().unwrap().to_path_buf();
    let server = MockServer::start().await;
    server.push(MockReply::text("too late").delayed(Duration::from_secs(60)));
    let url = server.base_url();
    let out = output(&mut lionagi(
        &dir,
        &["--base-url", &url, "--timeout", "0.5", "hi"],
    ))
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--timeout"), "{stderr}");
    let bad = output(&mut lionagi(&dir, &["--timeout", "1e300", "hi"])).await;
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("`--timeout` needs"));
    let _ = std::fs::remove_dir_all(dir);
}

/// `--timeout SECS` also bounds a resumed conversation's own model (no
/// model flags), which it used to leave at the default deadline.
#[tokio::test]
async fn cli_timeout_bounds_a_resumed_conversations_own_model() {
    let db = temp_path("chat.db");
    let dir = db.parent().unwrap().to_path_buf();
    let server = MockServer::start().await;
    server.push(MockReply::text("first"));
    server.push(MockReply::text("too late").delayed(Duration::from_secs(60)));
    let url = server.base_url();
    let db = db.display().to_string();
    let first = output(&mut lionagi(
        &dir,
        &["--base-url", &url, "--store", &db, "--name", "t", "hi"],
    ))
    .await;
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let out = output(&mut lionagi(
        &dir,
        &[
            "--store",
            &db,
            "--resume",
            "t",
            "--allow-local-network",
            "--timeout",
            "0.5",
            "again",
        ],
    ))
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--timeout"), "{stderr}");
    assert_eq!(server.request_count(), 2);
    let _ = std::fs::remove_dir_all(dir);
}
