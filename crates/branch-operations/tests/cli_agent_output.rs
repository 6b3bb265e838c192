//! A CLI agent's output is read one bounded line at a time: an agent that
//! writes without end and without a newline fails the turn at the line
//! cap (`branch_operations::limits::MAX_CLI_LINE_BYTES`), is killed, and
//! the conversation is left as it was.
#![cfg(unix)]

mod common;

use std::time::Duration;

use branch_core::{Branch, ToDictOptions};
use branch_models::mock::MockServer;
use branch_operations::{BranchOperations, RunOptions};
use futures_util::StreamExt;

#[tokio::test]
async fn an_endless_line_fails_the_turn_at_the_cap() {
    let dir = common::temp_dir("cli-endless");
    let script = dir.join("agent.sh");
    common::executable(&script, "#!/bin/sh\ncat > /dev/null\nexec cat /dev/zero\n");
    let server = MockServer::start().await;
    let mut b = Branch::builder()
        .system("S")
        .chat_model(common::model(&server, "gpt-4.1-mini"))
        .build()
        .unwrap();
    let before = b.to_json_vec(&ToDictOptions::default()).unwrap();
    let items: Vec<_> = tokio::time::timeout(
        Duration::from_secs(60),
        b.run(RunOptions::new("hi").cli_command(&script)).collect(),
    )
    .await
    .expect("the turn ends at the cap, not never");
    let err = items
        .iter()
        .find_map(|i| i.as_ref().err())
        .expect("the turn fails");
    assert!(
        err.to_string().contains(&format!(
            "longer than {} bytes",
            branch_operations::limits::MAX_CLI_LINE_BYTES
        )),
        "{err}"
    );
    assert_eq!(b.to_json_vec(&ToDictOptions::default()).unwrap(), before);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_final_line_without_a_newline_is_read() {
    let dir = common::temp_dir("cli-last-line");
    let script = dir.join("agent.sh");
    common::executable(
        &script,
        "#!/bin/sh\ncat > /dev/null\nprintf '%s' '{\"type\":\"result\",\"subtype\":\"success\",\"result\":\"done\",\"num_turns\":1}'\n",
    );
    let server = MockServer::start().await;
    let mut b = Branch::builder()
        .system("S")
        .chat_model(common::model(&server, "gpt-4.1-mini"))
        .build()
        .unwrap();
    let items: Vec<_> = b
        .run(RunOptions::new("hi").cli_command(&script))
        .collect()
        .await;
    let last = items.last().unwrap().as_ref().unwrap();
    assert_eq!(last.as_assistant_text(), Some("done"));
    let _ = std::fs::remove_dir_all(&dir);
}
