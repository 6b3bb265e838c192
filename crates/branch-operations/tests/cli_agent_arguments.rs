//! `run` on a CLI provider starts a local agent program. The program and
//! its flags come from the caller; the conversation's data (a loaded
//! file's model name and stored agent session id) reaches the program only
//! as the value of its own `--flag=VALUE` word, and a session id must be a
//! UUID, the agent's own format.
#![cfg(unix)]

mod common;

use std::path::Path;
use std::sync::Arc;

use branch_core::model::{ChatModel, ModelConfig};
use branch_core::{Branch, ToDictOptions};
use branch_operations::{BranchOperations, RunOptions};
use futures_util::StreamExt;
use serde_json::{Value, json};

const SESSION: &str = "0b3c5d7e-9f10-4a2b-8c3d-4e5f60718293";

/// A scripted agent that writes each argument on its own line to
/// `args.txt` beside it, then answers.
fn agent(dir: &Path) -> std::path::PathBuf {
    let script = dir.join("agent.sh");
    let log = dir.join("args.txt");
    common::executable(
        &script,
        &format!(
            r#"#!/bin/sh
for a in "$@"; do printf '%s\n' "$a" >> '{}'; done
cat > /dev/null
echo '{{"type":"system","subtype":"init","session_id":"{SESSION}"}}'
echo '{{"type":"assistant","message":{{"content":[{{"type":"text","text":"ok"}}]}}}}'
echo '{{"type":"result","subtype":"success","num_turns":1}}'
"#,
            log.display()
        ),
    );
    script
}

fn args_seen(dir: &Path) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(dir.join("args.txt")).ok()?;
    Some(text.lines().map(str::to_owned).collect())
}

/// A conversation as a file would hold it: a CLI model named `model`,
/// with `session` as the stored agent session id.
fn loaded(model: &str, session: Option<Value>) -> Branch {
    let cli = ModelConfig::builder()
        .provider("claude_code")
        .model("sonnet")
        .build()
        .unwrap();
    let b = Branch::builder()
        .system("S")
        .chat_model(Arc::new(cli) as Arc<dyn ChatModel>)
        .build()
        .unwrap();
    let mut doc = b.to_dict(&ToDictOptions::default()).unwrap();
    replace_strings(&mut doc, "sonnet", model);
    if let Some(s) = session {
        doc["metadata"]["cli_session_id"] = s;
    }
    Branch::from_dict(&doc).unwrap()
}

fn replace_strings(v: &mut Value, from: &str, to: &str) {
    match v {
        Value::String(s) if s == from => *s = to.to_owned(),
        Value::Array(a) => a.iter_mut().for_each(|x| replace_strings(x, from, to)),
        Value::Object(m) => m.values_mut().for_each(|x| replace_strings(x, from, to)),
        _ => {}
    }
}

#[tokio::test]
async fn a_flag_shaped_model_name_and_session_id_stay_values() {
    let dir = common::temp_dir("cli-args");
    let script = agent(&dir);
    let mut b = loaded(
        "--dangerously-skip-permissions",
        Some(json!(SESSION.to_uppercase())),
    );
    let items: Vec<_> = b
        .run(RunOptions::new("hi").cli_command(&script))
        .collect()
        .await;
    assert!(items.iter().all(Result::is_ok), "{items:?}");
    let seen = args_seen(&dir).expect("the agent ran");
    assert_eq!(
        seen,
        [
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--model=--dangerously-skip-permissions",
            &format!("--resume={}", SESSION.to_uppercase()),
        ]
    );
    assert!(!seen.iter().any(|a| a == "--dangerously-skip-permissions"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_stored_session_id_that_is_not_a_uuid_is_refused_before_the_agent_starts() {
    for bad in [
        json!("--permission-mode=bypassPermissions"),
        json!("sess-1"),
        json!("../../etc/passwd"),
        json!(format!("{{{SESSION}}}")),
        json!(format!("urn:uuid:{SESSION}")),
        json!(SESSION.replace('-', "")),
        json!(42),
    ] {
        let dir = common::temp_dir("cli-session");
        let script = agent(&dir);
        let mut b = loaded("sonnet", Some(bad.clone()));
        let before = b.to_dict(&ToDictOptions::default()).unwrap();
        let items: Vec<_> = b
            .run(RunOptions::new("hi").cli_command(&script))
            .collect()
            .await;
        let err = items
            .iter()
            .find_map(|i| i.as_ref().err())
            .unwrap_or_else(|| panic!("{bad} was accepted"));
        assert!(
            err.to_string().contains("not a Claude Code session id"),
            "{err}"
        );
        assert_eq!(args_seen(&dir), None, "{bad}: the agent must not start");
        assert_eq!(
            b.to_dict(&ToDictOptions::default()).unwrap(),
            before,
            "{bad}: the conversation is unchanged"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[tokio::test]
async fn a_session_id_the_agent_reports_is_kept_only_when_it_is_a_uuid() {
    let dir = common::temp_dir("cli-report");
    let script = dir.join("agent.sh");
    common::executable(
        &script,
        r#"#!/bin/sh
cat > /dev/null
echo '{"type":"system","subtype":"init","session_id":"--fork-session"}'
echo '{"type":"result","subtype":"success","result":"ok","num_turns":1}'
"#,
    );
    let mut b = loaded("sonnet", None);
    let items: Vec<_> = b
        .run(RunOptions::new("hi").cli_command(&script))
        .collect()
        .await;
    assert!(items.iter().all(Result::is_ok), "{items:?}");
    assert!(b.metadata().get("cli_session_id").is_none());
    // A UUID the agent reports is kept and resumed next time.
    let script = agent(&dir);
    let _: Vec<_> = b
        .run(RunOptions::new("again").cli_command(&script))
        .collect()
        .await;
    assert_eq!(b.metadata()["cli_session_id"], SESSION);
    let _: Vec<_> = b
        .run(RunOptions::new("third").cli_command(&script))
        .collect()
        .await;
    let seen = args_seen(&dir).unwrap();
    assert_eq!(seen.last().unwrap(), &format!("--resume={SESSION}"));
    let _ = std::fs::remove_dir_all(&dir);
}
