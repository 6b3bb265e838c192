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

/// Runs `script` as the CLI agent of a fresh branch; the turn's error and
/// whether the branch is byte-identical to before.
async fn failed_turn(name: &str, script_text: &str, idle: Option<Duration>) -> (String, bool) {
    let dir = common::temp_dir(name);
    let script = dir.join("agent.sh");
    common::executable(&script, script_text);
    let server = MockServer::start().await;
    let mut b = Branch::builder()
        .system("S")
        .chat_model(common::model(&server, "gpt-4.1-mini"))
        .build()
        .unwrap();
    let before = b.to_json_vec(&ToDictOptions::default()).unwrap();
    let mut opts = RunOptions::new("hi").cli_command(&script);
    if let Some(d) = idle {
        opts = opts.idle_timeout(d);
    }
    let items: Vec<_> = b.run(opts).collect().await;
    let err = items
        .iter()
        .find_map(|i| i.as_ref().err())
        .expect("the turn fails")
        .to_string();
    let unchanged = b.to_json_vec(&ToDictOptions::default()).unwrap() == before;
    let _ = std::fs::remove_dir_all(&dir);
    (err, unchanged)
}

#[tokio::test]
async fn endless_short_lines_fail_the_turn_at_the_turn_cap() {
    // 1 MiB lines, each under the line cap, without end.
    let (err, unchanged) = failed_turn(
        "cli-endless-lines",
        "#!/bin/sh\ncat > /dev/null\nline=$(head -c 1048575 /dev/zero | tr '\\0' a)\nwhile :; do echo \"$line\" || exit 0; done\n",
        None,
    )
    .await;
    assert!(
        err.contains(&format!(
            "more than {} bytes in one turn",
            branch_operations::limits::MAX_CLI_TURN_BYTES
        )),
        "{err}"
    );
    assert!(unchanged, "the failed turn changed the branch");
}

#[tokio::test(start_paused = true)]
async fn a_silent_agent_fails_at_the_default_idle_window() {
    // No idle timeout set: the default window ends the wait (the paused
    // clock jumps to it as soon as nothing else can happen).
    let (err, unchanged) = failed_turn(
        "cli-silent",
        "#!/bin/sh\ncat > /dev/null\nexec sleep 3600\n",
        None,
    )
    .await;
    assert!(err.contains("no output within the idle window"), "{err}");
    assert!(unchanged);
}

#[tokio::test]
async fn an_agent_that_closes_its_output_but_never_exits_is_not_awaited_forever() {
    // Its output ends at once; the wait for its exit is bounded too.
    let (err, unchanged) = tokio::time::timeout(
        Duration::from_secs(60),
        failed_turn(
            "cli-no-exit",
            "#!/bin/sh\ncat > /dev/null\nexec 1>&-\nexec sleep 3600\n",
            Some(Duration::from_secs(2)),
        ),
    )
    .await
    .expect("the wait for the agent's exit has a deadline");
    assert!(err.contains("no output within the idle window"), "{err}");
    assert!(unchanged);
}
