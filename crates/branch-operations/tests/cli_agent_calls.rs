//! `chat` and `communicate` on a CLI model start the agent for the turn's
//! prompt and answer with its whole reply, as the reference's agent
//! endpoint does (compat.md §18 O5). The agent program comes from
//! `LIONAGI_CLAUDE_BIN`, which a test cannot set for itself without unsafe
//! code: each test runs again as a child process of its own binary with the
//! variable set, and the child does the work.
#![cfg(unix)]

mod common;

use std::path::Path;
use std::sync::Arc;

use branch_core::Branch;
use branch_core::model::{ChatModel, ModelConfig};
use branch_operations::{BranchOperations, ChatOptions, CommunicateOptions, Reply};
use serde_json::Value;

const FIRST: &str = "0b3c5d7e-9f10-4a2b-8c3d-4e5f60718293";
const SECOND: &str = "1c2d3e4f-5a6b-4c7d-8e9f-a0b1c2d3e4f5";

/// Runs the test `name` again as a child with `LIONAGI_CLAUDE_BIN` set to a
/// scripted agent in a fresh directory, and checks it passed; `None` in the
/// child itself, which gets the directory instead.
fn in_child(name: &str, agent: &str) -> Option<std::path::PathBuf> {
    if let Some(bin) = std::env::var_os("LIONAGI_CLAUDE_BIN") {
        return Path::new(&bin).parent().map(Path::to_path_buf);
    }
    let dir = common::temp_dir("cli-calls");
    common::executable(&dir.join("claude"), agent);
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture"])
        .env("LIONAGI_CLAUDE_BIN", dir.join("claude"))
        .status()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.success(), "{name} failed in its child process");
    None
}

/// An agent whose Nth start (from 0) records its arguments and prompt as
/// `call_N.args` / `call_N.stdin` and answers in session FIRST, then
/// SECOND: a thinking block and a tool use, two text blocks, a result
/// that is neither.
fn agent() -> String {
    format!(
        r#"#!/bin/sh
d=$(dirname "$0")
n=$(cat "$d/count" 2>/dev/null || echo 0)
echo $((n + 1)) > "$d/count"
printf '%s\n' "$@" > "$d/call_$n.args"
cat > "$d/call_$n.stdin"
if [ "$n" = 0 ]; then s={FIRST}; else s={SECOND}; fi
echo '{{"type":"system","subtype":"init","session_id":"'$s'"}}'
echo '{{"type":"assistant","message":{{"content":[{{"type":"thinking","thinking":"Let me look."}},{{"type":"tool_use","id":"t1","name":"Read","input":{{"path":"a"}}}}]}}}}'
echo '{{"type":"user","message":{{"content":[{{"type":"tool_result","tool_use_id":"t1","content":"body"}}]}}}}'
echo '{{"type":"assistant","message":{{"content":[{{"type":"text","text":"First."}}]}}}}'
echo '{{"type":"assistant","message":{{"content":[{{"type":"text","text":"Second."}}]}}}}'
echo '{{"type":"result","subtype":"success","result":"Done.","num_turns":2,"usage":{{"input_tokens":3}}}}'
"#
    )
}

fn branch() -> Branch {
    branch_with(ModelConfig::builder())
}

fn branch_with(config: branch_core::model::ModelConfigBuilder) -> Branch {
    let cli = config
        .provider("claude_code")
        .model("claude-sonnet-5-5")
        .build()
        .unwrap();
    Branch::builder()
        .system("S")
        .chat_model(Arc::new(cli) as Arc<dyn ChatModel>)
        .build()
        .unwrap()
}

fn stored_session(b: &Branch) -> Option<&str> {
    b.metadata().get("cli_session_id").and_then(Value::as_str)
}

#[tokio::test]
async fn communicate_records_the_agents_whole_answer_and_chat_leaves_the_session() {
    let Some(dir) = in_child(
        "communicate_records_the_agents_whole_answer_and_chat_leaves_the_session",
        &agent(),
    ) else {
        return;
    };
    let mut b = branch();
    let r = b.communicate(CommunicateOptions::new("hi")).await.unwrap();
    assert_eq!(r, Reply::Text("First.\nSecond.\nDone.".into()));
    // The instruction and the reply: the agent's tool use is its own.
    assert_eq!(b.messages().len(), 3);
    assert_eq!(stored_session(&b), Some(FIRST));
    let reply = b.messages().iter().last().unwrap();
    assert_eq!(
        reply.element.metadata["model_response"]["thinking"],
        "Let me look."
    );
    assert_eq!(
        reply.element.metadata["model_response"]["session_id"],
        FIRST
    );

    // chat resumes the stored session and records nothing, so the branch
    // keeps that session although the agent reported another.
    let text = b.chat(ChatOptions::new("aside")).await.unwrap();
    assert_eq!(text, "First.\nSecond.\nDone.");
    assert_eq!(b.messages().len(), 3);
    assert_eq!(stored_session(&b), Some(FIRST));

    let args = std::fs::read_to_string(dir.join("call_1.args")).unwrap();
    assert!(
        args.lines().any(|a| a == format!("--resume={FIRST}")),
        "{args}"
    );
    assert!(
        args.lines().any(|a| a == "--model=claude-sonnet-5-5"),
        "{args}"
    );
    let prompt = std::fs::read_to_string(dir.join("call_0.stdin")).unwrap();
    assert_eq!(prompt, "Guidance: S\nInstruction: hi");
}

/// A stored session id that is not one is refused before the agent starts.
#[tokio::test]
async fn a_stored_session_that_is_not_a_uuid_is_not_passed() {
    let Some(dir) = in_child(
        "a_stored_session_that_is_not_a_uuid_is_not_passed",
        &agent(),
    ) else {
        return;
    };
    let mut b = branch();
    b.metadata_mut()
        .insert("cli_session_id".into(), "--dangerously-skip".into());
    let err = b
        .communicate(CommunicateOptions::new("hi"))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("not a Claude Code session id"),
        "{err}"
    );
    assert!(!dir.join("call_0.args").exists());
    assert_eq!(b.messages().len(), 1);
}

/// An agent that keeps writing within the idle window is still stopped at
/// the model's timeout, and the branch is left as it was.
#[tokio::test]
async fn a_chatty_agent_is_stopped_at_the_models_timeout() {
    let chatty = "#!/bin/sh\ncat > /dev/null\nwhile true; do echo '{}'; sleep 0.05; done\n";
    let Some(_dir) = in_child("a_chatty_agent_is_stopped_at_the_models_timeout", chatty) else {
        return;
    };
    let mut b = branch_with(ModelConfig::builder().timeout(std::time::Duration::from_millis(500)));
    let err = b
        .communicate(CommunicateOptions::new("hi"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("the model's timeout"), "{err}");
    assert_eq!(b.messages().len(), 1);
}
