//! A CLI agent's output is hostile input: it is read one bounded line at a
//! time (`branch_operations::limits::MAX_CLI_LINE_BYTES`, and
//! `MAX_CLI_TURN_BYTES` for the turn), its events are checked
//! (`branch_operations::cli_stream`), its messages are yielded as they are
//! read and recorded together at the end, and an agent that fails, hangs or
//! misbehaves is killed, with the conversation left as it was.
#![cfg(unix)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use branch_core::{Branch, Message, ToDictOptions};
use branch_models::mock::MockServer;
use branch_operations::{BranchOperations, OperationError, RunOptions};
use futures_util::StreamExt;
use serde_json::Value;

/// A fresh branch whose CLI agent is a shell script, in a directory of its
/// own (removed on drop).
struct Agent {
    dir: PathBuf,
    branch: Branch,
    _server: MockServer,
}

impl Agent {
    /// The script is `script(dir)`: the directory is where the test and the
    /// agent can share a file.
    async fn new(name: &str, script: impl FnOnce(&Path) -> String) -> Self {
        let dir = common::temp_dir(name);
        common::executable(&dir.join("agent.sh"), &script(&dir));
        let server = MockServer::start().await;
        let branch = Branch::builder()
            .system("S")
            .chat_model(common::model(&server, "gpt-4.1-mini"))
            .build()
            .unwrap();
        Self {
            dir,
            branch,
            _server: server,
        }
    }

    /// A turn of `prompt` through the agent.
    fn turn(&self, prompt: impl Into<Value>) -> RunOptions {
        RunOptions::new(prompt).cli_command(self.dir.join("agent.sh"))
    }

    /// Every item the turn's stream yields.
    async fn run(&mut self, opts: RunOptions) -> Vec<Result<Message, OperationError>> {
        self.branch.run(opts).collect().await
    }

    /// The branch's messages after its system message, in stored form.
    fn recorded(&self) -> Vec<Value> {
        let messages = self.branch.messages().iter().skip(1);
        messages.map(|m| m.to_value().unwrap()).collect()
    }

    /// The branch as stored.
    fn stored(&self) -> Vec<u8> {
        self.branch.to_json_vec(&ToDictOptions::default()).unwrap()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The first error of `items`.
fn error_of(items: &[Result<Message, OperationError>]) -> String {
    items
        .iter()
        .find_map(|i| i.as_ref().err())
        .expect("the turn fails")
        .to_string()
}

/// Runs `script` as the agent of a fresh branch: the turn's error and
/// whether the branch is byte-identical to before.
async fn failed_turn(name: &str, script: &str, idle: Option<Duration>) -> (String, bool) {
    let mut agent = Agent::new(name, |_| script.to_owned()).await;
    let before = agent.stored();
    let mut opts = agent.turn("hi");
    if let Some(d) = idle {
        opts = opts.idle_timeout(d);
    }
    let items = agent.run(opts).await;
    (error_of(&items), agent.stored() == before)
}

/// Runs `script` as the agent of a fresh branch: the agent (its branch
/// holds the turn) and the turn's yielded messages.
async fn completed_turn(name: &str, script: &str) -> (Agent, Vec<Message>) {
    let mut agent = Agent::new(name, |_| script.to_owned()).await;
    let opts = agent.turn("hi");
    let items = agent.run(opts).await;
    let messages = items.into_iter().map(Result::unwrap).collect();
    (agent, messages)
}

#[tokio::test]
async fn an_endless_line_fails_the_turn_at_the_cap() {
    let (err, unchanged) = tokio::time::timeout(
        Duration::from_secs(60),
        failed_turn(
            "cli-endless",
            "#!/bin/sh\ncat > /dev/null\nexec cat /dev/zero\n",
            None,
        ),
    )
    .await
    .expect("the turn ends at the cap, not never");
    assert!(
        err.contains(&format!(
            "longer than {} bytes",
            branch_operations::limits::MAX_CLI_LINE_BYTES
        )),
        "{err}"
    );
    assert!(unchanged);
}

#[tokio::test]
async fn a_final_line_without_a_newline_is_read() {
    let (_agent, yielded) = completed_turn(
        "cli-last-line",
        "#!/bin/sh\ncat > /dev/null\nprintf '%s' '{\"type\":\"result\",\"subtype\":\"success\",\"result\":\"done\",\"num_turns\":1}'\n",
    )
    .await;
    assert_eq!(yielded.last().unwrap().as_assistant_text(), Some("done"));
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

#[tokio::test]
async fn tool_results_answer_their_own_requests_once() {
    // Two tool uses answered out of order, one answered twice, and a
    // result for a tool use the turn never made.
    let (agent, yielded) = completed_turn(
        "cli-pairing",
        r#"#!/bin/sh
cat > /dev/null
echo '{"type":"assistant","message":{"content":[{"type":"tool_use","id":"a","name":"Read","input":{"path":"a"}},{"type":"tool_use","id":"b","name":"Grep","input":{"q":"b"}}]}}'
echo '{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"b","content":"for b"}]}}'
echo '{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"a","content":"for a","is_error":true}]}}'
echo '{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"a","content":"again"},{"type":"tool_result","tool_use_id":"zz","content":"stray"}]}}'
echo '{"type":"result","subtype":"success","result":"done"}'
"#,
    )
    .await;
    let recorded: Vec<_> = agent.branch.messages().iter().skip(1).collect();
    let kinds: Vec<_> = recorded.iter().map(|m| m.kind().class_name()).collect();
    assert_eq!(
        kinds,
        [
            "Instruction",
            "ActionRequest",
            "ActionRequest",
            "ActionResponse",
            "ActionResponse",
            "AssistantResponse"
        ]
    );
    assert_eq!(yielded.len(), recorded.len());
    let v = agent.recorded();
    let (req_a, req_b, res_b, res_a) = (&v[1], &v[2], &v[3], &v[4]);
    assert_eq!(res_b["content"]["action_request_id"], req_b["id"]);
    assert_eq!(req_b["content"]["action_response_id"], res_b["id"]);
    assert_eq!(res_a["content"]["action_request_id"], req_a["id"]);
    assert_eq!(req_a["content"]["action_response_id"], res_a["id"]);
    assert_eq!(
        res_a["content"]["output"], "for a",
        "the first result is kept"
    );
    assert_eq!(res_a["metadata"]["is_error"], true);
    assert_eq!(res_b["content"]["function"], "Grep");
    assert_eq!(recorded[5].as_assistant_text(), Some("done"));
}

#[tokio::test]
async fn usage_of_several_results_is_summed_and_integers_stay_integers() {
    let (agent, _) = completed_turn(
        "cli-usage",
        r#"#!/bin/sh
cat > /dev/null
echo '{"type":"assistant","message":{"content":[{"type":"text","text":"Hi"}]}}'
echo '{"type":"result","subtype":"success","num_turns":1,"total_cost_usd":0.5,"usage":{"input_tokens":3,"output_tokens":4}}'
echo '{"type":"result","subtype":"success","num_turns":2,"total_cost_usd":0.25,"usage":{"input_tokens":5,"cache_read_input_tokens":7}}'
"#,
    )
    .await;
    let reply = agent.recorded().pop().unwrap();
    let usage = &reply["metadata"]["model_response"];
    assert_eq!(
        serde_json::to_string(usage).unwrap(),
        r#"{"usage":{"input_tokens":8,"output_tokens":4,"cache_read_input_tokens":7},"total_cost_usd":0.75,"num_turns":3}"#
    );
}

#[tokio::test]
async fn malformed_events_fail_the_turn_and_leave_the_branch_as_it_was() {
    let line = |block: &str| {
        format!(
            "#!/bin/sh\ncat > /dev/null\necho '{{\"type\":\"system\",\"session_id\":\"6f1c2e1a-3b4d-4e5f-8a9b-0c1d2e3f4a5b\"}}'\necho '{{\"type\":\"assistant\",\"message\":{{\"content\":[{block}]}}}}'\necho '{{\"type\":\"result\",\"result\":\"ok\"}}'\n"
        )
    };
    let cases = [
        (
            r#"{"type":"tool_use","name":"Read","input":{}}"#,
            "a tool use without an id",
        ),
        (
            r#"{"type":"tool_use","id":"t","input":{}}"#,
            r#"tool use "t" without a name"#,
        ),
        (
            r#"{"type":"tool_use","id":"t","name":"Read","input":"a.txt"}"#,
            r#"tool use "t" without an input object"#,
        ),
        (
            r#"{"type":"tool_use","id":"t","name":"Read","input":{}},{"type":"tool_use","id":"t","name":"Read","input":{}}"#,
            r#"tool use id "t" twice"#,
        ),
        (
            r#"{"type":"text","text":3}"#,
            "a text block without its text string",
        ),
        ("7", "a content block that is not an object"),
    ];
    for (i, (block, why)) in cases.into_iter().enumerate() {
        let (err, unchanged) = failed_turn(&format!("cli-malformed-{i}"), &line(block), None).await;
        assert!(err.contains(why), "{block}: {err}");
        // Nor is the session id the failed turn reported kept.
        assert!(unchanged, "{block}: the failed turn changed the branch");
    }
}

#[tokio::test]
async fn a_turn_past_the_message_cap_fails() {
    let cap = branch_operations::limits::MAX_CLI_TURN_MESSAGES;
    // One line of cap + 1 tool uses, each a request.
    let script = format!(
        "#!/bin/sh\ncat > /dev/null\nawk 'BEGIN {{ printf \"{{\\\"type\\\":\\\"assistant\\\",\\\"message\\\":{{\\\"content\\\":[\"; for (i = 0; i <= {cap}; i++) {{ if (i) printf \",\"; printf \"{{\\\"type\\\":\\\"tool_use\\\",\\\"id\\\":\\\"t%d\\\",\\\"name\\\":\\\"n\\\",\\\"input\\\":{{}}}}\", i }}; print \"]}}}}\" }}'\n"
    );
    let (err, unchanged) = failed_turn("cli-message-cap", &script, None).await;
    assert!(err.contains(&format!("more than {cap} messages")), "{err}");
    assert!(unchanged);
}

#[tokio::test]
async fn messages_are_yielded_as_the_agent_writes_them() {
    // The agent waits, after its tool use, for the caller to have seen
    // the request; its reply says whether it did.
    let mut agent = Agent::new("cli-yield", |dir| {
        let seen = dir.join("seen");
        format!(
            r#"#!/bin/sh
cat > /dev/null
echo '{{"type":"assistant","message":{{"content":[{{"type":"tool_use","id":"t","name":"Read","input":{{}}}}]}}}}'
i=0
while [ ! -e '{seen}' ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done
if [ -e '{seen}' ]; then r=seen; else r=unseen; fi
echo "{{\"type\":\"result\",\"result\":\"$r\"}}"
"#,
            seen = seen.display()
        )
    })
    .await;
    let seen = agent.dir.join("seen");
    let opts = agent.turn("hi");
    let mut last = None;
    let mut stream = std::pin::pin!(agent.branch.run(opts));
    while let Some(m) = stream.next().await {
        let m = m.unwrap();
        if m.kind().class_name() == "ActionRequest" {
            std::fs::write(&seen, b"").unwrap();
        }
        last = Some(m);
    }
    assert_eq!(last.unwrap().as_assistant_text(), Some("seen"));
}

#[tokio::test]
async fn a_large_prompt_reaches_an_agent_that_writes_before_it_reads() {
    // The agent fills its output pipe before reading the prompt: writing
    // the whole prompt first would wait on the agent while it waits on us.
    let mut agent = Agent::new("cli-large-prompt", |_| {
        "#!/bin/sh\nhead -c 400000 /dev/zero | tr '\\0' ' '\necho\nn=$(wc -c | tr -d ' ')\necho \"{\\\"type\\\":\\\"result\\\",\\\"result\\\":\\\"$n\\\"}\"\n".to_owned()
    })
    .await;
    let opts = agent.turn("p".repeat(1 << 20));
    let items = tokio::time::timeout(Duration::from_secs(60), agent.run(opts))
        .await
        .expect("the agent and the caller do not wait on each other");
    let reply = items.last().unwrap().as_ref().unwrap();
    let read: usize = reply.as_assistant_text().unwrap().parse().unwrap();
    assert!(read >= 1 << 20, "the agent read {read} bytes of the prompt");
}

#[tokio::test]
async fn an_agent_that_never_reads_its_prompt_is_not_waited_on_forever() {
    let mut agent = Agent::new("cli-unread-prompt", |_| {
        "#!/bin/sh\nexec sleep 3600\n".to_owned()
    })
    .await;
    let before = agent.stored();
    let opts = agent
        .turn("p".repeat(1 << 20))
        .idle_timeout(Duration::from_secs(2));
    let items = tokio::time::timeout(Duration::from_secs(60), agent.run(opts))
        .await
        .expect("the prompt's write has a deadline");
    let err = error_of(&items);
    assert!(err.contains("idle window"), "{err}");
    assert_eq!(agent.stored(), before);
}

#[tokio::test]
async fn the_agents_own_error_text_is_cut_at_its_cap() {
    let cap = branch_operations::limits::MAX_CLI_ERROR_BYTES;
    // 100,000 two-byte characters: the cap falls inside one.
    let (err, unchanged) = failed_turn(
        "cli-long-error",
        "#!/bin/sh\ncat > /dev/null\nawk 'BEGIN { printf \"{\\\"type\\\":\\\"error\\\",\\\"message\\\":\\\"x\"; for (i = 0; i < 100000; i++) printf \"\\303\\251\"; print \"\\\"}\" }'\n",
        None,
    )
    .await;
    assert!(
        err.contains("the CLI agent failed: xé"),
        "{}",
        err.chars().take(100).collect::<String>()
    );
    assert!(err.len() <= cap + 100, "an error of {} bytes", err.len());
    assert!(unchanged);
}

#[tokio::test]
async fn thinking_and_usage_go_to_the_reply_they_precede() {
    let (agent, _) = completed_turn(
        "cli-thinking",
        r#"#!/bin/sh
cat > /dev/null
echo '{"type":"assistant","message":{"content":[{"type":"thinking","thinking":" First. "},{"type":"text","text":"Let me look."}]}}'
echo '{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"Read","input":{}}]}}'
echo '{"type":"assistant","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"body"}]}}'
echo '{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"Second."},{"type":"thinking","thinking":"Third."},{"type":"text","text":"Done."}]}}'
echo '{"type":"result","subtype":"success","num_turns":2}'
"#,
    )
    .await;
    // The turn after its instruction.
    let v = agent.recorded().split_off(1);
    let kinds: Vec<_> = v
        .iter()
        .map(|m| m["metadata"]["lion_class"].clone())
        .collect();
    assert_eq!(v.len(), 4, "{kinds:?}");
    let (first, request, response, last) = (&v[0], &v[1], &v[2], &v[3]);
    assert_eq!(first["metadata"]["thinking"], "First.");
    assert!(first["metadata"].get("model_response").is_none());
    // A result inside an assistant event answers its call too.
    assert_eq!(response["content"]["action_request_id"], request["id"]);
    assert_eq!(request["content"]["action_response_id"], response["id"]);
    assert_eq!(last["metadata"]["thinking"], "Second.\nThird.");
    assert_eq!(last["metadata"]["model_response"]["num_turns"], 2);
}

#[tokio::test]
async fn an_error_result_names_its_errors() {
    let (err, unchanged) = failed_turn(
        "cli-errors",
        r#"#!/bin/sh
cat > /dev/null
echo '{"type":"result","is_error":true,"result":"half a reply","errors":[{"message":"quota exceeded"},"quota exceeded"," network down ",3]}'
"#,
        None,
    )
    .await;
    assert_eq!(
        err,
        "run failed: quota exceeded; network down (nothing was recorded)"
    );
    assert!(unchanged);
}
