//! Invoking tools: validation paths, errors, timeouts, panics, unknown
//! names, ordering and the records the verbs keep.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use branch_actions::{
    ActionManagerExt, CallError, CallStatus, DynamicTool, FunctionTool, InvokeOptions, ToolCall,
    ToolSelection,
};
use branch_core::{ActionManager, Participant, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

#[derive(Deserialize, JsonSchema)]
struct Multiply {
    a: i64,
    b: i64,
}

#[derive(Deserialize, JsonSchema)]
struct Order {
    items: Vec<Item>,
}

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct Item {
    name: String,
    qty: u32,
}

#[derive(Deserialize, JsonSchema)]
struct Wait {
    ms: u64,
    tag: String,
}

#[derive(Deserialize, JsonSchema)]
struct Nothing {}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().expect("an object")
}

fn manager() -> ActionManager {
    let mut acts = ActionManager::new();
    let multiply =
        FunctionTool::infallible("multiply", |m: Multiply| async move { m.a * m.b }).unwrap();
    let order = FunctionTool::infallible("order", |o: Order| async move { o.items.len() }).unwrap();
    let wait = FunctionTool::infallible("wait", |w: Wait| async move {
        tokio::time::sleep(Duration::from_millis(w.ms)).await;
        w.tag
    })
    .unwrap();
    let boom = FunctionTool::infallible("boom", |_: Nothing| async move {
        if true {
            panic!("boom went the tool");
        }
        0
    })
    .unwrap();
    let fails = FunctionTool::new(
        "fails",
        |_: Nothing| async move { Err::<i32, _>("disk full") },
    )
    .unwrap();
    for t in [multiply, order, wait, boom, fails] {
        acts.register(t.into_tool(), false).unwrap();
    }
    acts
}

#[tokio::test]
async fn a_successful_call_and_its_function_calling_record() {
    let acts = manager();
    let out = acts
        .invoke(
            ToolCall::new("multiply", args(json!({"a": 3, "b": 4}))),
            None,
        )
        .await;
    assert_eq!(out.result, Ok(json!(12)));
    assert_eq!(out.tool_id, Some(acts.get("multiply").unwrap().id()));
    assert_eq!(out.response_output(), Some(json!(12)));
    assert_eq!(out.returned_output(), Some(json!(12)));
    // The act_direct fixture's log entry, ids/times/duration aside.
    let mut snap = out.log_content(uuid::Uuid::new_v4());
    assert!(snap["execution"]["duration"].is_f64());
    for k in ["id", "created_at"] {
        snap[k] = Value::Null;
    }
    snap["execution"]["duration"] = json!(1.0);
    assert_eq!(
        snap,
        json!({"id": null, "created_at": null,
               "metadata": {"lion_class": "lionagi.protocols.action.function_calling.FunctionCalling"},
               "execution": {"status": "completed", "duration": 1.0, "response": 12, "error": null, "retryable": null},
               "arguments": {"a": 3, "b": 4}, "function": "multiply"})
    );
    assert_eq!(out.calling.to_log().content()["function"], "multiply");
    // act_direct: the request goes from the branch to the tool; the
    // response carries no participants.
    let branch = uuid::Uuid::new_v4();
    let p = out.participants(branch);
    assert_eq!(p.request_sender, Some(Participant::Id(branch)));
    assert_eq!(
        p.request_recipient,
        Some(Participant::Id(out.tool_id.unwrap()))
    );
    assert_eq!((p.response_sender, p.response_recipient), (None, None));
}

#[tokio::test]
async fn invalid_arguments_name_the_field() {
    let acts = manager();
    let missing = acts
        .invoke(ToolCall::new("multiply", args(json!({"a": 3}))), None)
        .await;
    assert!(
        matches!(&missing.result, Err(CallError::Tool(ToolError::InvalidArguments { path, .. })) if path == "$.b")
    );
    let wrong = acts
        .invoke(
            ToolCall::new("multiply", args(json!({"a": "x", "b": 1}))),
            None,
        )
        .await;
    assert!(
        matches!(&wrong.result, Err(CallError::Tool(ToolError::InvalidArguments { path, .. })) if path == "$.a")
    );
    let nested = acts
        .invoke(
            ToolCall::new(
                "order",
                args(json!({"items": [{"name": "a", "qty": 1}, {"qty": 2}]})),
            ),
            None,
        )
        .await;
    assert!(
        matches!(&nested.result, Err(CallError::Tool(ToolError::InvalidArguments { path, .. })) if path == "$.items[1].name"),
        "{:?}",
        nested.result
    );
    assert!(!nested.reached_tool());
    let negative = acts
        .invoke(
            ToolCall::new("order", args(json!({"items": [{"name": "a", "qty": -1}]}))),
            None,
        )
        .await;
    assert!(
        matches!(&negative.result, Err(CallError::Tool(ToolError::InvalidArguments { path, .. })) if path == "$.items[0].qty")
    );
}

/// pydantic writes an optional field as `anyOf: [T, null]` (so MCP servers'
/// and connected models' schemas do): a value no alternative accepts is
/// explained by the alternative that got furthest, not by "not valid under
/// any of the schemas".
#[tokio::test]
async fn a_value_no_alternative_accepts_is_explained_by_the_closest_one() {
    let schema = json!({"type": "object", "properties": {
        "temperature": {"anyOf": [{"type": "number", "minimum": 0, "maximum": 1},
                                  {"type": "null"}]},
        "messages": {"type": "array", "items": {"anyOf": [
            {"type": "object", "properties": {"role": {"type": "string"}}, "required": ["role"]},
            {"type": "string"}]}},
        "nested": {"anyOf": [{"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]},
                             {"type": "string"}]},
        "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}});
    let tool = DynamicTool::new("sample", None, schema, |v: Value| async move {
        Ok::<_, String>(v)
    })
    .unwrap();
    let mut acts = ActionManager::new();
    acts.register(tool.into_tool(), false).unwrap();
    let refused = |arguments: Value| {
        let acts = &acts;
        async move {
            match acts
                .invoke(ToolCall::new("sample", args(arguments)), None)
                .await
                .result
            {
                Err(CallError::Tool(ToolError::InvalidArguments { path, reason })) => {
                    (path, reason)
                }
                other => panic!("expected invalid arguments, got {other:?}"),
            }
        }
    };
    let (path, reason) = refused(json!({"temperature": 3})).await;
    assert_eq!(path, "$.temperature");
    assert_eq!(reason, "3 is greater than the maximum of 1");
    let (path, reason) = refused(json!({"messages": [{"role": "user"}, {"content": "x"}]})).await;
    assert_eq!(path, "$.messages[1].role");
    assert_eq!(reason, "\"role\" is a required property");
    let (path, reason) = refused(json!({"nested": -1})).await;
    assert_eq!(path, "$.nested");
    assert_eq!(reason, "-1 is less than the minimum of 0");
    // Every alternative refuses the type alone: the combinator says so.
    let (path, reason) = refused(json!({"temperature": "warm"})).await;
    assert_eq!(path, "$.temperature");
    assert!(reason.contains("anyOf"), "{reason}");
    let (path, reason) = refused(json!({"either": true})).await;
    assert_eq!(path, "$.either");
    assert!(reason.contains("oneOf"), "{reason}");
    // A long value is not quoted back to the model: its path names it.
    let (path, reason) = refused(json!({"temperature": "warm ".repeat(100)})).await;
    assert_eq!(path, "$.temperature");
    assert!(reason.starts_with("the value is not valid"), "{reason}");
    let (path, reason) = refused(json!({"nested": -(10_i64.pow(15))})).await;
    assert_eq!(path, "$.nested");
    assert_eq!(reason, "-1000000000000000 is less than the minimum of 0");
    assert!(
        acts.invoke(
            ToolCall::new("sample", args(json!({"temperature": null, "nested": 2}))),
            None
        )
        .await
        .result
        .is_ok()
    );
}

/// act_direct: `does_not_exist` → the reference's ActionResponse output,
/// return value and log record.
#[tokio::test]
async fn an_unknown_tool_is_an_error_result() {
    let acts = manager();
    let out = acts
        .invoke(ToolCall::new("does_not_exist", Map::new()), None)
        .await;
    assert_eq!(
        out.result,
        Err(CallError::UnknownTool("does_not_exist".into()))
    );
    assert_eq!(out.tool_id, None);
    assert_eq!(
        out.response_output(),
        Some(
            json!({"error": "Function does_not_exist is not registered.", "function": "does_not_exist", "arguments": {}})
        )
    );
    assert_eq!(
        out.returned_output(),
        Some(
            json!({"error": "Function does_not_exist is not registered.",
                    "message": "Error invoking action 'does_not_exist': Function does_not_exist is not registered."})
        )
    );
    let branch = uuid::Uuid::new_v4();
    assert_eq!(
        out.log_content(branch),
        json!({"error": "Function does_not_exist is not registered.", "function": "does_not_exist",
               "arguments": {}, "branch": branch.to_string()})
    );
    // act_direct: a failed call's messages go from the branch to itself.
    let p = out.participants(branch);
    let b = Some(Participant::Id(branch));
    assert_eq!(
        [
            p.request_sender,
            p.request_recipient,
            p.response_sender,
            p.response_recipient
        ],
        [b.clone(), b.clone(), b.clone(), b]
    );
}

#[tokio::test]
async fn a_tool_error_is_captured() {
    let acts = manager();
    let out = acts.invoke(ToolCall::new("fails", Map::new()), None).await;
    assert_eq!(
        out.result,
        Err(CallError::Tool(ToolError::Failed("disk full".into())))
    );
    assert!(out.reached_tool());
    assert_eq!(out.returned_output(), None);
    assert_eq!(out.response_output().unwrap()["error"], "disk full");
    assert_eq!(out.calling.status, CallStatus::Failed);
    assert_eq!(
        out.calling.error,
        Some(json!({"error": "ToolError", "message": "disk full"}))
    );
}

#[tokio::test]
async fn a_panic_is_contained() {
    let acts = manager();
    let out = acts.invoke(ToolCall::new("boom", Map::new()), None).await;
    assert!(
        matches!(&out.result, Err(CallError::Tool(ToolError::Panicked(m))) if m == "boom went the tool")
    );
    // The registry still works afterwards.
    let ok = acts
        .invoke(
            ToolCall::new("multiply", args(json!({"a": 2, "b": 2}))),
            None,
        )
        .await;
    assert_eq!(ok.result, Ok(json!(4)));
}

#[tokio::test(start_paused = true)]
async fn a_timeout_fails_the_call() {
    let acts = manager();
    let out = acts
        .invoke(
            ToolCall::new("wait", args(json!({"ms": 60_000, "tag": "slow"}))),
            Some(Duration::from_secs(1)),
        )
        .await;
    assert_eq!(
        out.result,
        Err(CallError::Tool(ToolError::Timeout(Duration::from_secs(1))))
    );
    assert_eq!(out.calling.error.as_ref().unwrap()["error"], "TimeoutError");
}

#[tokio::test(start_paused = true)]
async fn concurrent_results_keep_call_order() {
    let acts = manager();
    let calls = vec![
        ToolCall::new("wait", args(json!({"ms": 300, "tag": "first"}))),
        ToolCall::new("nope", Map::new()),
        ToolCall::new("wait", args(json!({"ms": 10, "tag": "third"}))),
        ToolCall::new("boom", Map::new()),
        ToolCall::new("wait", args(json!({"ms": 100, "tag": "fifth"}))),
    ];
    let outs = acts.invoke_all(calls, InvokeOptions::default()).await;
    let names: Vec<_> = outs.iter().map(|o| o.call.function.as_str()).collect();
    assert_eq!(names, ["wait", "nope", "wait", "boom", "wait"]);
    assert_eq!(outs[0].result, Ok(json!("first")));
    assert_eq!(outs[2].result, Ok(json!("third")));
    assert_eq!(outs[4].result, Ok(json!("fifth")));
    assert!(outs[1].result.is_err() && outs[3].result.is_err());
}

#[tokio::test(start_paused = true)]
async fn a_bounded_batch_never_exceeds_its_limit() {
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (r, p) = (running.clone(), peak.clone());
    let tracked = DynamicTool::new(
        "tracked",
        None,
        json!({"type": "object"}),
        move |v: Value| {
            let (r, p) = (r.clone(), p.clone());
            async move {
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                r.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, String>(v)
            }
        },
    )
    .unwrap();
    let mut acts = ActionManager::new();
    acts.register(tracked.into_tool(), false).unwrap();
    let calls: Vec<_> = (0..6)
        .map(|i| ToolCall::new("tracked", args(json!({"i": i}))))
        .collect();
    let outs = acts
        .invoke_all(
            calls.clone(),
            InvokeOptions {
                max_concurrency: Some(2),
                ..Default::default()
            },
        )
        .await;
    assert_eq!(peak.load(Ordering::SeqCst), 2);
    let order: Vec<_> = outs
        .iter()
        .map(|o| o.result.clone().unwrap()["i"].clone())
        .collect();
    assert_eq!(order, (0..6).map(|i| json!(i)).collect::<Vec<_>>());
    peak.store(0, Ordering::SeqCst);
    acts.invoke_all(calls.clone(), InvokeOptions::default())
        .await;
    assert_eq!(peak.load(Ordering::SeqCst), 6);
    // A limit past what a semaphore holds (a stored paused turn can name
    // any number) is no limit, not a panic; 0 is none either.
    for limit in [usize::MAX, usize::MAX >> 3, 0] {
        peak.store(0, Ordering::SeqCst);
        let outs = acts
            .invoke_all(
                calls.clone(),
                InvokeOptions {
                    max_concurrency: Some(limit),
                    ..Default::default()
                },
            )
            .await;
        assert!(outs.iter().all(|o| o.result.is_ok()), "limit {limit}");
        assert_eq!(peak.load(Ordering::SeqCst), 6, "limit {limit}");
    }
}

#[tokio::test(start_paused = true)]
async fn dropping_the_call_cancels_the_tool() {
    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let dropped = Arc::new(AtomicBool::new(false));
    let d = dropped.clone();
    let tool = DynamicTool::new(
        "forever",
        None,
        json!({"type": "object"}),
        move |_v: Value| {
            let flag = Flag(d.clone());
            async move {
                let _flag = flag;
                std::future::pending::<()>().await;
                Ok::<Value, String>(Value::Null)
            }
        },
    )
    .unwrap();
    let mut acts = ActionManager::new();
    acts.register(tool.into_tool(), false).unwrap();
    let call = acts.invoke(ToolCall::new("forever", Map::new()), None);
    assert!(
        tokio::time::timeout(Duration::from_secs(5), call)
            .await
            .is_err()
    );
    tokio::task::yield_now().await;
    assert!(dropped.load(Ordering::SeqCst));
}

#[tokio::test]
async fn dynamic_tools_validate_against_their_raw_schema() {
    let schema =
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    let tool = DynamicTool::new(
        "weather",
        Some("Weather by city.".into()),
        schema.clone(),
        |v: Value| async move {
            match v["city"].as_str() {
                Some("Atlantis") => Err("no such city".to_owned()),
                Some(c) => Ok(json!(format!("sunny in {c}"))),
                None => Ok(Value::Null),
            }
        },
    )
    .unwrap();
    let mut acts = ActionManager::new();
    acts.register(tool.into_tool(), false).unwrap();
    assert_eq!(
        acts.tool_schemas(&ToolSelection::All).unwrap(),
        vec![
            json!({"type": "function", "function": {"name": "weather", "description": "Weather by city.",
                    "parameters": schema, "strict": null}})
        ]
    );
    let ok = acts
        .invoke(
            ToolCall::new("weather", args(json!({"city": "Oslo"}))),
            None,
        )
        .await;
    assert_eq!(ok.result, Ok(json!("sunny in Oslo")));
    let bad = acts
        .invoke(ToolCall::new("weather", args(json!({"city": 3}))), None)
        .await;
    assert!(
        matches!(&bad.result, Err(CallError::Tool(ToolError::InvalidArguments { path, .. })) if path == "$.city")
    );
    let failed = acts
        .invoke(
            ToolCall::new("weather", args(json!({"city": "Atlantis"}))),
            None,
        )
        .await;
    assert_eq!(
        failed.result,
        Err(CallError::Tool(ToolError::Failed("no such city".into())))
    );
}

#[test]
fn schemas_are_offered_in_registration_order_or_by_name() {
    let acts = manager();
    let names = |v: Vec<Value>| {
        v.iter()
            .map(|s| s["function"]["name"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(acts.tool_schemas(&ToolSelection::All).unwrap()),
        ["multiply", "order", "wait", "boom", "fails"]
    );
    let some = ToolSelection::Named(vec!["wait".into(), "multiply".into()]);
    assert_eq!(
        names(acts.tool_schemas(&some).unwrap()),
        ["wait", "multiply"]
    );
    let unknown = ToolSelection::Named(vec!["ghost".into()]);
    assert_eq!(
        acts.tool_schemas(&unknown),
        Err(CallError::UnknownTool("ghost".into()))
    );
}

#[test]
fn outside_a_runtime_a_call_fails_instead_of_panicking() {
    let acts = manager();
    let fut = acts.invoke(
        ToolCall::new("multiply", args(json!({"a": 1, "b": 2}))),
        None,
    );
    // Drive the future without a Tokio runtime.
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let mut fut = Box::pin(fut);
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(out) => assert!(matches!(
            out.result,
            Err(CallError::Tool(ToolError::Failed(_)))
        )),
        std::task::Poll::Pending => panic!("expected an immediate failure"),
    }
}

#[test]
fn requests_are_read_as_models_write_them() {
    let call = ToolCall::from_request_value(
        &json!({"function": "multiply", "arguments": "{\"a\": 6, \"b\": 7}"}),
    )
    .unwrap();
    assert_eq!(
        call,
        ToolCall::new("multiply", args(json!({"a": 6, "b": 7})))
    );
    let bare = ToolCall::from_request_value(&json!({"function": "f", "arguments": null})).unwrap();
    assert!(bare.arguments.is_empty());
    assert!(ToolCall::from_request_value(&json!({"arguments": {}})).is_err());
    assert!(ToolCall::from_request_value(&json!({"function": "f", "arguments": "[1]"})).is_err());
    assert!(ToolCall::from_request_value(&json!("multiply")).is_err());
    let content = branch_core::message::ActionRequestContent {
        function: "f".into(),
        arguments: args(json!({"x": 1})),
        action_response_id: None,
    };
    assert_eq!(
        ToolCall::from(&content),
        ToolCall::new("f", args(json!({"x": 1})))
    );
}

#[tokio::test]
async fn a_tool_works_for_the_conversation_of_the_verb_that_calls_it() {
    // The tool runs in a task of its own; the verb's conversation (which
    // routes MCP progress and labels model calls) must reach it.
    let mut acts = ActionManager::new();
    let whose = FunctionTool::infallible("whose", |_: Nothing| async move {
        branch_core::telemetry::conversation_id().unwrap_or_default()
    })
    .unwrap();
    acts.register(whose.into_tool(), false).unwrap();
    let call = || ToolCall::new("whose", Map::new());
    let inside =
        branch_core::telemetry::in_conversation("b-42".into(), acts.invoke(call(), None)).await;
    assert_eq!(inside.result, Ok(json!("b-42")));
    let outside = acts.invoke(call(), None).await;
    assert_eq!(outside.result, Ok(json!("")));
}
