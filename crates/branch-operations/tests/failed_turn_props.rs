//! Property: a turn that fails (an error status, a reply that is not a
//! reply, a stream cut short) or is cancelled (its future dropped while
//! the server stalls) leaves any branch's conversation byte-identical
//! (`to_json_vec` without logs, before and after), for every verb that
//! talks to a model. The one addition allowed is the reference's: the
//! failed API call's record is appended to the branch's logs (operations.md
//! §1.6), after the earlier logs, unchanged. The servers are real loopback
//! servers.
//!
//! Known gap, left to the model layer: a streamed reply cut short still
//! records the model name the server reported (`provider_metadata.
//! served_model` of the chat model), so that one key is compared apart:
//! it may only appear, with the name the server sent.

#[path = "../../../tests/support/arbitrary_branch.rs"]
mod arbitrary_branch;
mod common;

use std::time::Duration;

use branch_core::message::InstructionContent;
use branch_core::{Branch, Message, ToDictOptions};
use branch_models::mock::{MockReply, MockServer};
use branch_operations::{
    BranchOperations, ChatOptions, CommunicateOptions, OperateOptions, ReActOptions, RunOptions,
};
use futures_util::StreamExt;
use proptest::prelude::*;
use serde_json::Value;

#[derive(Debug, Clone, Copy)]
enum Fault {
    /// A non-retryable error status.
    Status(u16),
    /// 200 with a body that is not a chat completion.
    NotAReply,
    /// A reply body cut in the middle (non-streaming verbs).
    CutBody,
    /// A streamed reply cut after its first event (`run`).
    CutStream,
    /// The server stalls; the caller drops the turn.
    Cancelled,
}

#[derive(Debug, Clone, Copy)]
enum Verb {
    Chat,
    Communicate,
    Operate,
    ReAct,
    Run,
}

fn any_fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        prop::sample::select(vec![400u16, 401, 403, 404, 422]).prop_map(Fault::Status),
        Just(Fault::NotAReply),
        Just(Fault::Cancelled),
    ]
}

/// A verb and a fault it can meet: a cut body for the verbs that read
/// one reply, a cut stream for `run`.
fn case() -> impl Strategy<Value = (Verb, Fault)> {
    let whole = prop::sample::select(vec![
        Verb::Chat,
        Verb::Communicate,
        Verb::Operate,
        Verb::ReAct,
    ]);
    prop_oneof![
        (whole, prop_oneof![any_fault(), Just(Fault::CutBody)]),
        prop_oneof![any_fault(), Just(Fault::CutStream)].prop_map(|f| (Verb::Run, f)),
    ]
}

fn reply(fault: Fault) -> MockReply {
    match fault {
        Fault::Status(s) => MockReply::error(s, "refused"),
        Fault::NotAReply => MockReply::raw(200, "this is not JSON"),
        Fault::CutBody => MockReply::raw(
            200,
            r#"{"id": "c", "choices": [{"index": 0, "message": {"role": "assistant", "content": "hal"#,
        ),
        Fault::CutStream => MockReply::text("a long answer that is cut short")
            .chunk_size(2)
            .truncated_after(1),
        Fault::Cancelled => MockReply::text("too late").delayed(Duration::from_secs(30)),
    }
}

/// Runs the verb; `true` when it returned (with an error, or with
/// anything), `false` when it was cancelled.
async fn turn(b: &mut Branch, verb: Verb, cancel: bool) -> Result<bool, String> {
    let fut = async {
        match verb {
            Verb::Chat => b.chat(ChatOptions::new("q")).await.map(drop),
            Verb::Communicate => b.communicate(CommunicateOptions::new("q")).await.map(drop),
            Verb::Operate => b.operate(OperateOptions::new("q")).await.map(drop),
            Verb::ReAct => b.ReAct(ReActOptions::new("q")).await.map(drop),
            Verb::Run => {
                let items: Vec<_> = b.run(RunOptions::new("q")).collect().await;
                items.into_iter().find_map(Result::err).map_or(Ok(()), Err)
            }
        }
    };
    if cancel {
        return match tokio::time::timeout(Duration::from_millis(150), fut).await {
            Ok(r) => Err(format!("a stalled turn returned: {r:?}")),
            Err(_) => Ok(false),
        };
    }
    match fut.await {
        Ok(()) => Err("a failing turn succeeded".into()),
        Err(_) => Ok(true),
    }
}

/// Everything but the logs.
fn conversation() -> ToDictOptions {
    ToDictOptions {
        include_logs: false,
        ..ToDictOptions::default()
    }
}

/// The conversation's bytes without the chat model's `served_model`, and
/// that value.
fn conversation_bytes(b: &Branch) -> (Vec<u8>, Option<String>) {
    let mut d = b.to_dict(&conversation()).unwrap();
    let served = d["chat_model"]["provider_metadata"]
        .as_object_mut()
        .and_then(|m| m.shift_remove("served_model"))
        .and_then(|v| v.as_str().map(str::to_owned));
    (serde_json::to_vec(&d).unwrap(), served)
}

fn logs(b: &Branch) -> Vec<serde_json::Value> {
    let d = b.to_dict(&ToDictOptions::default()).unwrap();
    d["logs"]["collections"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn a_failed_or_cancelled_turn_leaves_the_branch_byte_identical(
        b in arbitrary_branch::branch(0),
        history in prop::collection::vec((arbitrary_branch::text(), arbitrary_branch::text()), 0..3),
        (verb, fault) in case(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let server = MockServer::start().await;
            server.script([reply(fault), reply(fault)]);
            let mut b = b;
            // Earlier turns, as a conversation holds them.
            for (q, a) in history {
                b.msgs_mut().add_message(Message::instruction(InstructionContent {
                    instruction: Some(Value::String(q)),
                    ..InstructionContent::default()
                }));
                b.msgs_mut().add_message(Message::assistant(a));
            }
            b.set_chat_model(common::model(&server, "gpt-4.1-mini"));
            let (before, served_before) = conversation_bytes(&b);
            let logs_before = logs(&b);
            let outcome = turn(&mut b, verb, matches!(fault, Fault::Cancelled)).await;
            prop_assert!(outcome.is_ok(), "{:?} {:?}: {:?}", verb, fault, outcome);
            let (after, served_after) = conversation_bytes(&b);
            prop_assert!(
                served_after == served_before
                    || (served_before.is_none() && served_after.as_deref() == Some("gpt-4.1-mini")),
                "served_model {:?} -> {:?}",
                served_before,
                served_after
            );
            let logs_after = logs(&b);
            prop_assert!(logs_after.len() >= logs_before.len());
            prop_assert_eq!(&logs_after[..logs_before.len()], &logs_before[..]);
            for added in &logs_after[logs_before.len()..] {
                prop_assert_eq!(
                    added["content"]["metadata"]["lion_class"].as_str(),
                    Some("lionagi.service.connections.api_calling.APICalling")
                );
                prop_assert_eq!(added["content"]["execution"]["status"].as_str(), Some("failed"));
            }
            prop_assert!(
                before == after,
                "{:?} {:?} changed the branch:\n{}\n---\n{}",
                verb,
                fault,
                String::from_utf8_lossy(&before),
                String::from_utf8_lossy(&after)
            );
            Ok(())
        })?;
    }
}
