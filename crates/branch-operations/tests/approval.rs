//! Approval policies on top of the gate: per tool, per argument rule, an
//! async approver, and turns paused on "ask" that survive `to_dict` /
//! `from_dict` and resume to exactly the conversation an in-process
//! approval gives. Real loopback model server throughout.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use branch_core::{Branch, ToDictOptions, gate_fn};
use branch_models::mock::{MockReply, MockServer, MockToolCall};
use branch_operations::{
    ActOptions, ApprovalPolicy, BranchApproval, BranchOperations, CallStatus, Decision,
    OperateOptions, OperationError, PENDING_KEY, RunOptions, ToolPolicy, tool_call_from_value,
};
use futures_util::StreamExt;
use serde_json::{Map, Value, json};

use common::{answer_format, model, scripted};

const SCENARIO: &str = "operations/operate_with_actions";

async fn branch_at(server: &MockServer) -> Branch {
    Branch::builder()
        .system("Use tools when helpful.")
        .chat_model(model(server, "gpt-4.1-mini"))
        .tools([common::multiply(), common::lookup_capital()])
        .build()
        .unwrap()
}

fn operate_opts() -> OperateOptions {
    OperateOptions::new("Compute 6*7 and find the capital of France.")
        .actions(true)
        .response_format(answer_format())
}

/// `to_dict` with every id replaced by its order of first appearance and
/// every timestamp and duration removed: two runs of the same
/// conversation compare equal.
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
    let logs = d
        .as_object_mut()
        .unwrap()
        .shift_remove("logs")
        .map(|l| l["collections"].as_array().map_or(0, Vec::len));
    d["log_count"] = json!(logs);
    d.as_object_mut().unwrap().shift_remove("chat_model");
    let mut ids = HashMap::new();
    walk(&mut d, &mut ids);
    d
}

fn approve_multiply_deny_capital() -> ApprovalPolicy {
    ApprovalPolicy::new()
        .default_policy(ToolPolicy::Ask)
        .approver_fn(|call| async move {
            if call.function == "multiply" {
                Decision::Approve
            } else {
                Decision::Deny(Some("not today".into()))
            }
        })
}

/// The acceptance test: a turn paused on "ask" is carried by `to_dict`
/// alone (no live state), decided in a fresh branch, resumed, and the
/// conversation equals the one an in-process approver produces.
#[tokio::test]
async fn paused_turn_resumed_from_to_dict_equals_in_process_approval() {
    // In process: the approver answers at once.
    let server = scripted(SCENARIO).await;
    let mut live = branch_at(&server).await;
    live.set_approval_policy(Some(approve_multiply_deny_capital()));
    let r = live.operate(operate_opts()).await.unwrap();
    let live_structured = r.structured.unwrap();

    // Paused: nobody to ask.
    let server = scripted(SCENARIO).await;
    let mut paused = branch_at(&server).await;
    paused.set_approval_policy(Some(ApprovalPolicy::new().default_policy(ToolPolicy::Ask)));
    let e = paused.operate(operate_opts()).await.unwrap_err();
    assert!(
        matches!(e, OperationError::ApprovalPending { calls: 2, committed } if committed.messages == 2),
        "{e:?}"
    );
    let pending = paused.pending_approval().unwrap().unwrap();
    assert_eq!(pending.verb, "operate");
    let refused = paused.operate(operate_opts()).await.unwrap_err();
    assert!(
        refused.to_string().contains("awaits approval"),
        "no new turn while paused: {refused}"
    );
    assert_eq!(server.request_count(), 1);
    assert_eq!(pending.waiting().count(), 2);
    assert_eq!(
        paused.messages().len(),
        3,
        "system, instruction and the reply are kept; no call ran"
    );
    let stored = paused.to_dict(&ToDictOptions::default()).unwrap();
    drop(paused);

    // Another process: the branch from its dict, tools set up again.
    let mut resumed = Branch::from_dict(&stored).unwrap();
    resumed
        .acts_mut()
        .register_all([common::multiply(), common::lookup_capital()], false)
        .unwrap();
    let p = resumed.pending_approval().unwrap().unwrap();
    let id_of = |f: &str| p.calls.iter().find(|c| c.function == f).unwrap().call_id;
    // One decision first: still paused, the decision kept.
    let e = resumed
        .resume(vec![(id_of("multiply"), Decision::Approve)])
        .await
        .unwrap_err();
    assert!(matches!(
        e,
        OperationError::ApprovalPending { calls: 1, .. }
    ));
    let still = resumed.pending_approval().unwrap().unwrap();
    assert_eq!(still.calls[0].status, CallStatus::Approved);
    let done = resumed
        .resume(vec![(
            id_of("lookup_capital"),
            Decision::Deny(Some("not today".into())),
        )])
        .await
        .unwrap();
    assert!(resumed.metadata().get(PENDING_KEY).is_none());
    assert_eq!(
        serde_json::to_value(&done.action_responses).unwrap(),
        json!([
            {"function": "multiply", "arguments": {"a": 6, "b": 7}, "output": 42},
            {"function": "lookup_capital", "arguments": {"country": "France"},
             "output": {"error": "denied by approval", "function": "lookup_capital", "reason": "not today"}}
        ])
    );
    assert_eq!(done.structured.unwrap(), live_structured);

    // The in-process branch went through no from_dict, so compare it after
    // the same round trip (which drops the `system` key, as the reference).
    let live = Branch::from_dict(&live.to_dict(&ToDictOptions::default()).unwrap()).unwrap();
    assert_eq!(masked(&resumed), masked(&live));
    let last = resumed
        .messages()
        .iter()
        .last()
        .unwrap()
        .to_value()
        .unwrap();
    assert_eq!(
        last["metadata"]["approval"],
        json!({"decision": "denied", "reason": "not today"})
    );
}

/// Per tool and per argument: `never` refuses, a rule on the arguments
/// wins over the tool's policy, an edited approval runs the new arguments
/// and records the proposed ones.
#[tokio::test]
async fn never_rules_and_edits_are_recorded_as_such() {
    let server = MockServer::start().await;
    let mut b = branch_at(&server).await;
    b.set_approval_policy(Some(
        ApprovalPolicy::new()
            .tool("lookup_capital", ToolPolicy::Never)
            .when(
                Some("multiply"),
                |args| {
                    args.get("a")
                        .and_then(Value::as_i64)
                        .is_some_and(|a| a > 100)
                },
                ToolPolicy::Ask,
            )
            .approver_fn(|call| async move {
                let mut args = call.arguments.clone();
                args.insert("a".into(), json!(2));
                Decision::Edit(args)
            }),
    ));
    let calls = [
        json!({"function": "multiply", "arguments": {"a": 3, "b": 4}}),
        json!({"function": "multiply", "arguments": {"a": 1000, "b": 4}}),
        json!({"function": "lookup_capital", "arguments": {"country": "France"}}),
    ]
    .iter()
    .map(|v| tool_call_from_value(v).unwrap())
    .collect();
    let res = b.act(calls, ActOptions::default()).await.unwrap();
    let outputs: Vec<_> = res.iter().map(|r| r.output.clone()).collect();
    assert_eq!(
        outputs,
        [
            Some(json!(12)),
            Some(json!(8)),
            Some(
                json!({"error": "denied by approval", "function": "lookup_capital",
                "reason": "the approval policy never runs this call"})
            )
        ]
    );
    let ms: Vec<Value> = b
        .messages()
        .iter()
        .skip(1)
        .map(|m| m.to_value().unwrap())
        .collect();
    // Concurrent: three requests, then three responses.
    assert!(ms[0]["metadata"].get("approval").is_none(), "{}", ms[0]);
    assert_eq!(ms[1]["content"]["arguments"], json!({"a": 2, "b": 4}));
    assert_eq!(
        ms[1]["metadata"]["approval"],
        json!({"decision": "edited", "proposed_arguments": {"a": 1000, "b": 4}})
    );
    assert_eq!(ms[2]["metadata"]["approval"]["decision"], "denied");
    assert_eq!(ms[5]["content"]["output"]["error"], "denied by approval");
    // A denial by approval runs nothing: one log per call that ran.
    assert_eq!(b.logs().len(), 2);
}

/// Undecided calls of a closed window are recorded as expired; the gate
/// still has the last word over an approved call.
#[tokio::test]
async fn expired_calls_and_the_gate_after_approval() {
    let server = MockServer::start().await;
    let mut b = branch_at(&server).await;
    b.set_approval_policy(Some(
        ApprovalPolicy::new()
            .default_policy(ToolPolicy::Ask)
            .expires_after(Duration::from_millis(1)),
    ));
    let call = |v: Value| tool_call_from_value(&v).unwrap();
    let e = b
        .act(
            vec![
                call(json!({"function": "multiply", "arguments": {"a": 3, "b": 4}})),
                call(json!({"function": "lookup_capital", "arguments": {"country": "France"}})),
            ],
            ActOptions::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(
        e,
        OperationError::ApprovalPending { calls: 2, .. }
    ));
    assert_eq!(b.messages().len(), 1, "act records nothing while paused");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let p = b.pending_approval().unwrap().unwrap();
    b.set_gate(Some(gate_fn(|c| c.function != "multiply")));
    let res = b
        .resume(vec![(p.calls[0].call_id, Decision::Approve)])
        .await
        .unwrap();
    assert_eq!(
        res.action_responses[0].output,
        Some(json!({"error": "approval expired", "function": "multiply"}))
    );
    assert_eq!(
        res.action_responses[1].output,
        Some(json!({"error": "approval expired", "function": "lookup_capital"}))
    );
    let marks: Vec<Value> = b
        .messages()
        .iter()
        .skip(1)
        .map(|m| m.element.metadata["approval"]["decision"].clone())
        .collect();
    assert_eq!(marks, vec![json!("expired"); 4]);

    // Approved, then refused by the gate at dispatch.
    b.set_approval_policy(Some(
        ApprovalPolicy::new()
            .default_policy(ToolPolicy::Ask)
            .approver_fn(|_| async { Decision::Approve }),
    ));
    let res = b
        .act(
            vec![call(
                json!({"function": "multiply", "arguments": {"a": 3, "b": 4}}),
            )],
            ActOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        res[0].output,
        Some(json!({"error": "denied by governance gate", "function": "multiply"}))
    );
}

/// A stored pause may name any concurrency bound: one past what a
/// semaphore holds (it panicked the resumed batch) runs the calls without
/// a bound, as it would any bound of at least the batch's size.
#[tokio::test]
async fn a_stored_pause_naming_a_huge_concurrency_bound_resumes() {
    let server = MockServer::start().await;
    let mut b = branch_at(&server).await;
    b.set_approval_policy(Some(ApprovalPolicy::new().default_policy(ToolPolicy::Ask)));
    let calls = [
        json!({"function": "multiply", "arguments": {"a": 3, "b": 4}}),
        json!({"function": "multiply", "arguments": {"a": 5, "b": 6}}),
    ]
    .iter()
    .map(|v| tool_call_from_value(v).unwrap())
    .collect();
    let e = b
        .act(calls, ActOptions::default().max_concurrency(2))
        .await
        .unwrap_err();
    assert!(matches!(
        e,
        OperationError::ApprovalPending { calls: 2, .. }
    ));
    b.metadata_mut().get_mut(PENDING_KEY).unwrap()["max_concurrency"] = json!(u64::MAX);
    let p = b.pending_approval().unwrap().unwrap();
    assert_eq!(p.max_concurrency, Some(usize::MAX));
    let decisions = p.calls.iter().map(|c| (c.call_id, Decision::Approve));
    let res = b.resume(decisions.collect::<Vec<_>>()).await.unwrap();
    let outputs: Vec<_> = res
        .action_responses
        .iter()
        .map(|r| r.output.clone())
        .collect();
    assert_eq!(outputs, [Some(json!(12)), Some(json!(30))]);
}

/// Stored data is hostile: a malformed pending state is an error, never a
/// silently dropped pause; a decision for an unknown call is refused.
#[tokio::test]
async fn malformed_pending_state_and_unknown_calls_are_errors() {
    let server = MockServer::start().await;
    let mut b = branch_at(&server).await;
    b.metadata_mut()
        .insert(PENDING_KEY.into(), json!({"version": 1, "calls": "nope"}));
    assert!(b.pending_approval().is_err());
    assert!(b.resume(Vec::new()).await.is_err());
    b.metadata_mut().remove(PENDING_KEY);
    let e = b.resume(Vec::new()).await.unwrap_err();
    assert!(e.to_string().contains("no turn awaiting approval"), "{e}");
    b.set_approval_policy(Some(ApprovalPolicy::new().default_policy(ToolPolicy::Ask)));
    let c = tool_call_from_value(&json!({"function": "multiply", "arguments": {"a": 1, "b": 2}}))
        .unwrap();
    let _ = b.act(vec![c], ActOptions::default()).await.unwrap_err();
    let e = b
        .resume(vec![(uuid::Uuid::new_v4(), Decision::Approve)])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no proposed call"), "{e}");
}

/// `run` (the chat's verb) pauses on native tool calls too: the streamed
/// reply is yielded and kept, then the pause; resuming records the calls.
#[tokio::test]
async fn run_pauses_on_native_tool_calls_and_resumes() {
    let server = MockServer::start().await;
    server.push(MockReply::tool_calls(vec![MockToolCall {
        id: "call_1".into(),
        name: "multiply".into(),
        arguments: json!("{\"a\": 6, \"b\": 7}"),
    }]));
    let mut b = branch_at(&server).await;
    b.set_approval_policy(Some(
        ApprovalPolicy::new().tool("multiply", ToolPolicy::Ask),
    ));
    let mut kinds = Vec::new();
    let mut paused = None;
    {
        let mut s = b.run(RunOptions::new("6 times 7?"));
        while let Some(item) = s.next().await {
            match item {
                Ok(m) => kinds.push(m.kind().class_name()),
                Err(e) => paused = Some(e),
            }
        }
    }
    assert_eq!(kinds, ["Instruction", "AssistantResponse"]);
    assert!(matches!(
        paused,
        Some(OperationError::ApprovalPending { calls: 1, .. })
    ));
    assert_eq!(b.messages().len(), 3, "system, instruction, reply");
    // The streamed call is logged as `chat` logs one: the request, and the
    // reply the message keeps.
    let d = b.to_dict(&ToDictOptions::default()).unwrap();
    let log = &d["logs"]["collections"][0]["content"];
    assert_eq!(
        log["metadata"]["lion_class"],
        "lionagi.service.connections.api_calling.APICalling"
    );
    assert_eq!(log["execution"]["status"], "completed");
    assert_eq!(
        log["execution"]["response"],
        d["messages"]["collections"][2]["metadata"]["model_response"]
    );
    assert!(log["execution"]["response"].is_object());
    assert!(log["payload"]["messages"].is_array(), "{log}");
    let p = b.pending_approval().unwrap().unwrap();
    assert_eq!(p.verb, "run");
    assert_eq!(p.calls[0].tool_call_id.as_deref(), Some("call_1"));
    let mut edited = Map::new();
    edited.insert("a".into(), json!(6));
    edited.insert("b".into(), json!(8));
    let r = b
        .resume(vec![(p.calls[0].call_id, Decision::Edit(edited))])
        .await
        .unwrap();
    assert_eq!(r.action_responses[0].output, Some(json!(48)));
    assert_eq!(b.messages().len(), 5);
    let req = b.messages().iter().nth(3).unwrap();
    assert_eq!(req.element.metadata["approval"]["decision"], "edited");
    // Recorded under the provider's id, which later requests answer.
    assert_eq!(req.element.metadata["tool_call_id"], "call_1");
}
