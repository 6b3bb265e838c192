//! `RunOptions::on_text`: `run` hands each text delta of a streaming model
//! to the hook as it arrives, and the turn stays atomic (a failed or
//! dropped stream records nothing, whatever the hook saw).

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use branch_core::Branch;
use branch_core::model::{ChatModel, ModelConfig};
use branch_models::IModel;
use branch_models::mock::{MockReply, MockServer};
use branch_operations::{BranchOperations, RunOptions};
use futures_util::StreamExt;

fn model(server: &MockServer) -> Arc<dyn ChatModel> {
    let config = ModelConfig::builder()
        .provider("openai")
        .model("gpt-test")
        .base_url(&server.base_url())
        .allow_local_network(true)
        .max_retries(1)
        .build()
        .expect("config");
    Arc::new(IModel::with_api_key(config, "test").expect("model"))
}

fn branch(server: &MockServer) -> Branch {
    Branch::builder()
        .system("You are terse.")
        .chat_model(model(server))
        .build()
        .expect("branch")
}

/// A hook collecting every piece it is given.
fn collector() -> (Arc<Mutex<Vec<String>>>, RunOptions) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let opts = RunOptions::new("Count to five.").on_text(move |t| {
        sink.lock().unwrap().push(t.to_owned());
    });
    (seen, opts)
}

#[tokio::test]
async fn each_text_delta_reaches_the_hook_and_the_turn_is_recorded_whole() {
    let server = MockServer::start().await;
    let reply = "one, two, three, four, five";
    server.push(MockReply::text(reply).chunk_size(3));
    let mut b = branch(&server);
    let (seen, opts) = collector();
    let mut messages = Vec::new();
    {
        let mut stream = b.run(opts);
        while let Some(m) = stream.next().await {
            messages.push(m.expect("message"));
        }
    }
    let pieces = seen.lock().unwrap().clone();
    // 27 characters in deltas of 3.
    assert_eq!(pieces.len(), 9, "{pieces:?}");
    assert!(pieces.iter().all(|p| p.chars().count() <= 3));
    assert_eq!(pieces.concat(), reply);
    assert_eq!(messages.len(), 2);
    assert_eq!(b.messages().len(), 3, "system, instruction, reply");
    let body = &server.bodies()[0];
    assert_eq!(body["stream"], true);
}

#[tokio::test]
async fn a_stream_failing_midway_records_nothing_though_the_hook_saw_text() {
    let server = MockServer::start().await;
    server.push(
        MockReply::text("a long answer that never ends properly")
            .chunk_size(4)
            .truncated_after(3),
    );
    let mut b = branch(&server);
    let before = b.messages().len();
    let (seen, opts) = collector();
    let mut failed = false;
    {
        let mut stream = b.run(opts);
        while let Some(m) = stream.next().await {
            if m.is_err() {
                failed = true;
            }
        }
    }
    assert!(failed, "a truncated stream is an error");
    let pieces = seen.lock().unwrap().clone();
    assert!(!pieces.is_empty(), "the hook saw the deltas that arrived");
    assert!("a long answer that never ends properly".starts_with(&pieces.concat()));
    assert_eq!(b.messages().len(), before, "nothing recorded");
}

#[tokio::test]
async fn dropping_the_stream_while_the_reply_is_awaited_records_nothing() {
    let server = MockServer::start().await;
    // The first reply is slow: the stream is dropped while it waits.
    server.push(MockReply::text("never seen").delayed(Duration::from_secs(30)));
    let mut b = branch(&server);
    let before = b.messages().len();
    let (seen, opts) = collector();
    {
        let mut stream = b.run(opts);
        let waited = tokio::select! {
            m = stream.next() => Some(m),
            () = wait_for_request(&server) => None,
        };
        // The instruction may be yielded before the request is sent; either
        // way the reply has not arrived.
        if let Some(Some(m)) = waited {
            assert!(m.is_ok());
        }
    }
    assert!(seen.lock().unwrap().is_empty());
    assert_eq!(b.messages().len(), before, "nothing recorded");
    // The branch is usable again: the next turn goes through.
    server.push(MockReply::text("hello"));
    let (seen, opts) = collector();
    let mut stream = b.run(opts);
    while let Some(m) = stream.next().await {
        m.expect("message");
    }
    drop(stream);
    assert_eq!(seen.lock().unwrap().concat(), "hello");
    assert_eq!(b.messages().len(), before + 2);
}

/// Resolves once the server has received a request.
async fn wait_for_request(server: &MockServer) {
    while server.request_count() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(unix)]
#[tokio::test]
async fn a_cli_agent_text_blocks_reach_the_hook_as_they_are_read() {
    let dir = common::temp_dir("hook");
    let script = dir.join("fake-claude.sh");
    common::executable(
        &script,
        r#"#!/bin/sh
cat > /dev/null
echo '{"type":"system","subtype":"init","session_id":"s"}'
echo '{"type":"assistant","message":{"content":[{"type":"text","text":"Hel"}]}}'
echo '{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"hmm"},{"type":"text","text":"lo!"}]}}'
echo '{"type":"result","subtype":"success","result":"Hello!"}'
"#,
    );
    let server = MockServer::start().await;
    let mut b = branch(&server);
    let (seen, opts) = collector();
    let mut stream = b.run(opts.cli_command(&script));
    while let Some(m) = stream.next().await {
        m.expect("message");
    }
    drop(stream);
    assert_eq!(*seen.lock().unwrap(), ["Hel", "lo!"], "text only, in order");
    assert_eq!(server.request_count(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}
