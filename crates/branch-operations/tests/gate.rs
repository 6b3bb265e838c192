//! The governance gate in `act` (and so `operate` and `ReAct`), against
//! the reference's observed behaviour (lionagi 0.36.0 with a
//! `SessionObserver.gate`): a refused call is recorded, never dispatched,
//! and answered with `{"error": "denied by governance gate", "function":
//! f}`, which the model then sees; the calls it allows run as without a
//! gate. Real loopback model server throughout.

mod common;
#[path = "../../../tests/support/mod.rs"]
mod support;

use std::sync::{Arc, Mutex};

use branch_core::{Branch, Observer, Signal, gate_fn};
use branch_operations::{
    ActOptions, BranchOperations, OperateOptions, Parsed, ReActOptions, tool_call_from_value,
};
use serde_json::{Value, json};
use support::{Comparer, fixture};

use common::{answer_format, assert_requests, model, msg_summary, scripted};

/// Records the class of every signal and the calls the gate refused.
#[derive(Default)]
struct Signals(Mutex<Vec<Value>>);

impl Observer for Signals {
    fn observe(&self, s: Signal) {
        if let Signal::GateDenied { invocation, .. } = &s {
            self.0.lock().unwrap().push(json!(invocation));
        }
    }
}

fn participants(b: &Branch) -> Vec<(String, Value, Value)> {
    b.messages()
        .iter()
        .map(|m| {
            let v = m.to_value().unwrap();
            (
                m.kind().class_name().to_owned(),
                v["sender"].clone(),
                v["recipient"].clone(),
            )
        })
        .collect()
}

fn tool_id(b: &Branch, name: &str) -> Value {
    json!(
        b.tools()
            .find(|t| t.name() == name)
            .unwrap()
            .id()
            .to_string()
    )
}

/// A gate that allows every call changes nothing: the reference's own
/// fixture for `operate(actions=True)` still matches exactly.
#[tokio::test]
async fn an_allowing_gate_changes_nothing() {
    let name = "operations/operate_with_actions";
    let mut fx = fixture(name);
    common::normalise_all(&mut fx.output);
    let server = scripted(name).await;
    let mut b = Branch::builder()
        .system("Use tools when helpful.")
        .chat_model(model(&server, "gpt-4.1-mini"))
        .tools([common::multiply(), common::lookup_capital()])
        .build()
        .unwrap();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&asked);
    b.set_gate(Some(gate_fn(move |c| {
        seen.lock().unwrap().push(c.function.clone());
        true
    })));
    let r = b
        .operate(
            OperateOptions::new("Compute 6*7 and find the capital of France.")
                .actions(true)
                .response_format(answer_format()),
        )
        .await
        .unwrap();
    assert_eq!(
        r.parsed,
        Parsed::Value(fx.output["return_value"]["value"].clone())
    );
    assert_eq!(*asked.lock().unwrap(), ["multiply", "lookup_capital"]);
    assert_requests(&server, &fx.requests);
    let mut cmp = Comparer::new(&fx);
    cmp.check(&fx, "/messages", &msg_summary(&b));
    cmp.finish();
}

/// Per-call verdicts in one concurrent batch, as the reference records
/// them: the allowed call runs (request to the tool, response without
/// participants, a log entry); the refused one is stored from the branch
/// to itself with the denial as output, logs nothing, and is signalled.
#[tokio::test]
async fn per_call_verdicts_in_a_parallel_batch() {
    let server = scripted("operations/operate_with_actions").await;
    let mut b = Branch::builder()
        .system("Use tools when helpful.")
        .chat_model(model(&server, "gpt-4.1-mini"))
        .tools([common::multiply(), common::lookup_capital()])
        .build()
        .unwrap();
    let signals = Arc::new(Signals::default());
    b.set_observer(Some(signals.clone()));
    b.set_gate(Some(gate_fn(|c| c.function != "lookup_capital")));
    let r = b
        .operate(
            OperateOptions::new("Compute 6*7 and find the capital of France.")
                .actions(true)
                .response_format(answer_format()),
        )
        .await
        .unwrap();
    // The reference's return value, observed.
    assert_eq!(
        serde_json::to_value(&r.action_responses).unwrap(),
        json!([
            {"function": "multiply", "arguments": {"a": 6, "b": 7}, "output": 42},
            {"function": "lookup_capital", "arguments": {"country": "France"},
             "output": {"error": "denied by governance gate", "function": "lookup_capital"}}
        ])
    );
    assert_eq!(
        r.structured.as_ref().unwrap()["action_responses"][1]["output"],
        json!({"error": "denied by governance gate", "function": "lookup_capital"})
    );
    let me = json!(b.id().to_string());
    let p = participants(&b);
    assert_eq!(
        p[3..],
        [
            (
                "ActionRequest".to_owned(),
                me.clone(),
                tool_id(&b, "multiply")
            ),
            ("ActionRequest".to_owned(), me.clone(), me.clone()),
            ("ActionResponse".to_owned(), Value::Null, Value::Null),
            ("ActionResponse".to_owned(), me.clone(), me.clone()),
        ]
    );
    let denied = b.messages().iter().last().unwrap().to_value().unwrap();
    assert_eq!(
        denied["content"],
        json!({"function": "lookup_capital", "arguments": {"country": "France"},
            "output": {"error": "denied by governance gate", "function": "lookup_capital"},
            "action_request_id": b.messages().iter().nth(4).unwrap().id().to_string()})
    );
    // One model call and one tool call logged; the refusal logs nothing.
    assert_eq!(b.logs().len(), 2);
    assert_eq!(
        *signals.0.lock().unwrap(),
        [
            json!({"function": "lookup_capital", "arguments": {"country": "France"},
            "branch_id": b.id()})
        ]
    );
}

/// A refusal inside ReAct is a tool result, not an error: the next round's
/// request shows the model the denial exactly as the reference renders it.
#[tokio::test]
async fn react_shows_the_model_the_denial() {
    let server = scripted("operations/react_two_rounds").await;
    let ran = Arc::new(Mutex::new(0));
    let counter = Arc::clone(&ran);
    let counted = branch_actions::DynamicTool::new(
        "multiply",
        Some("Multiply two integers and return the product.".into()),
        json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
        move |_args: Value| {
            *counter.lock().unwrap() += 1;
            async { Ok::<_, String>(json!(42)) }
        },
    )
    .unwrap()
    .into_tool();
    let mut b = Branch::builder()
        .system("You reason step by step.")
        .chat_model(model(&server, "gpt-4.1-mini"))
        .tool(counted)
        .build()
        .unwrap();
    b.set_gate(Some(gate_fn(|_| false)));
    let r = b
        .ReAct(ReActOptions::new("What is 6 times 7?").max_extensions(2))
        .await
        .unwrap();
    assert_eq!(r.answer, json!("42"));
    assert_eq!(*ran.lock().unwrap(), 0, "a refused call never runs");
    let bodies = server.bodies();
    assert_eq!(bodies.len(), 3);
    let second = bodies[1]["messages"].as_array().unwrap();
    let last = second.last().unwrap()["content"].as_str().unwrap();
    // The reference's second request carries exactly this context block.
    assert!(
        last.contains(
            "Context:\n- function: multiply\n  arguments:\n    a: 6\n    b: 7\n  output:\n    error: denied by governance gate\n    function: multiply\nTools:"
        ),
        "{last}"
    );
}

/// `act` called directly consults the gate too; a failing gate denies.
#[tokio::test]
async fn act_consults_the_gate_and_a_failing_gate_denies() {
    struct Broken;
    impl branch_core::Gate for Broken {
        fn authorize<'a>(
            &'a self,
            _: &'a branch_core::ToolInvocation,
        ) -> branch_core::GateFuture<'a> {
            Box::pin(async { Err("policy service unreachable".to_owned()) })
        }
    }
    let server = branch_models::mock::MockServer::start().await;
    let mut b = Branch::builder()
        .chat_model(model(&server, "gpt-4.1-mini"))
        .tool(common::multiply())
        .build()
        .unwrap();
    b.set_gate(Some(Arc::new(Broken)));
    let call =
        tool_call_from_value(&json!({"function": "multiply", "arguments": {"a": 3, "b": 4}}))
            .unwrap();
    let opts = ActOptions::default().suppress_errors(false);
    let res = b.act(vec![call.clone()], opts).await.unwrap();
    assert_eq!(
        serde_json::to_value(&res).unwrap(),
        json!([{"function": "multiply", "arguments": {"a": 3, "b": 4},
            "output": {"error": "denied by governance gate", "function": "multiply"}}])
    );
    assert_eq!(b.messages().len(), 2);
    b.set_gate(None);
    let res = b.act(vec![call], ActOptions::default()).await.unwrap();
    assert_eq!(res[0].output, Some(json!(12)));
}
