//! Conformance with the reference's `clone` and `get_operation` fixtures.
//! Departures are the deliberate deviations of docs/compat.md (§5: one
//! System message in a clone, action links kept inside the clone).

mod support;

use std::sync::Arc;

use async_trait::async_trait;
use branch_core::message::InstructionContent;
use branch_core::model::ChatModel;
use branch_core::{
    Branch, Log, MemoryItem, MemoryQuery, Message, MessageContent, OperationError, OperationLookup,
    Participant, Progression, ToDictOptions, Tool, ToolError,
};
use serde_json::{Value, json};
use support::{Comparer, fixture, keys, mock_model};

struct FixedTool {
    name: &'static str,
    schema: Value,
}

#[async_trait]
impl Tool for FixedTool {
    fn name(&self) -> &str {
        self.name
    }
    fn schema(&self) -> &Value {
        &self.schema
    }
    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        Ok(arguments)
    }
}

fn tool(name: &'static str) -> Arc<dyn Tool> {
    Arc::new(FixedTool {
        name,
        schema: json!({"type": "function", "function": {"name": name}}),
    })
}

fn model(name: &str) -> Arc<dyn ChatModel> {
    Arc::new(mock_model(name))
}

/// `build_clone_source(ctx)` of the clone scenarios.
fn clone_source() -> Branch {
    let mut b = Branch::builder()
        .user("alice")
        .name("source")
        .system("You are a cloner.")
        .chat_model(model("gpt-4.1-mini"))
        .parse_model(model("gpt-4.1-nano"))
        .tools([tool("multiply"), tool("lookup_capital")])
        .logs([Log::from_json(json!({"event": "kept-on-source"}))])
        .build()
        .unwrap();
    let id = Participant::Id(b.id());
    let alice = Participant::from("alice");
    b.msgs_mut().add_message(
        Message::instruction(InstructionContent {
            instruction: Some(json!("What is 6*7?")),
            ..Default::default()
        })
        .with_sender(alice.clone())
        .with_recipient(id.clone()),
    );
    b.msgs_mut().add_message(
        Message::assistant("Calling multiply.")
            .with_sender(id.clone())
            .with_recipient(alice),
    );
    let mut args = serde_json::Map::new();
    args.insert("a".into(), json!(6));
    args.insert("b".into(), json!(7));
    let req = b.msgs_mut().add_message(
        Message::action_request("multiply", args)
            .with_sender(id.clone())
            .with_recipient(Participant::from("multiply")),
    );
    b.msgs_mut()
        .add_action_response(req, Some(json!(42)), Some("multiply".into()), Some(id))
        .unwrap();
    b
}

/// compat.md §5: the reference's clone carries the System twice (the
/// designated copy at position 0 plus the cloned pile entry) and leaves the
/// cloned action request/response pointing at the source's messages. Here
/// the duplicate is dropped from the expected value and the links point at
/// the clone's own messages.
fn single_system_clone(expected: &Value) -> Value {
    let mut v = expected.clone();
    let order: Vec<Value> = v["messages"]["progression"]["order"]
        .as_array()
        .unwrap()
        .clone();
    let colls = v["messages"]["collections"].as_array().unwrap().clone();
    let find = |id: &Value| colls.iter().find(|m| &m["id"] == id).cloned().unwrap();
    let first = find(&order[0]);
    let second = find(&order[1]);
    let mut kept_order = order.clone();
    if first["role"] == "system" && second["role"] == "system" {
        kept_order.remove(1);
    }
    // Remap action links: source id -> clone id via metadata.clone_from.
    let by_source: std::collections::HashMap<String, Value> = kept_order
        .iter()
        .map(|id| {
            let m = find(id);
            (
                m["metadata"]["clone_from"].as_str().unwrap().to_owned(),
                m["id"].clone(),
            )
        })
        .collect();
    let items: Vec<Value> = kept_order
        .iter()
        .map(|id| {
            let mut m = find(id);
            for link in ["action_response_id", "action_request_id"] {
                if let Some(src) = m["content"]
                    .get(link)
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                {
                    m["content"][link] = by_source[&src].clone();
                }
            }
            m
        })
        .collect();
    v["messages"]["collections"] = Value::Array(items);
    v["messages"]["progression"]["order"] = Value::Array(kept_order);
    v
}

#[test]
fn clone_with_messages_and_tools() {
    let fx = fixture("clone/clone_with_messages_and_tools");
    let src = clone_source();
    let c = src.clone_branch().unwrap();
    let py = ToDictOptions::default();
    let mut cmp = Comparer::new(&fx);
    cmp.check(&fx, "/source_to_dict", &src.to_dict(&py).unwrap());
    let expected = single_system_clone(&fx.output["clone_to_dict"]);
    cmp.check_value("/clone_to_dict", &expected, &c.to_dict(&py).unwrap());
    cmp.finish();
    let f = &fx.output["facts"];
    assert_eq!(json!(src.messages().len()), f["source_message_count"]);
    assert_eq!(
        c.messages().len(),
        src.messages().len(),
        "one System, not two"
    );
    let mut tools: Vec<&str> = c.tools().map(|t| t.name()).collect();
    tools.sort();
    assert_eq!(json!(tools), f["clone_tools"]);
    // Same tool objects (same element ids, so ActionRequest recipients agree).
    for t in c.tools() {
        assert_eq!(src.acts().get(t.name()).unwrap().id(), t.id());
    }
    assert!(branch_core::branch::same_model(
        c.chat_model(),
        src.chat_model()
    ));
    assert!(branch_core::branch::same_model(
        c.parse_model(),
        src.parse_model()
    ));
    assert!(!c.mdls().parse_is_chat());
    assert_eq!(json!(c.logs().len()), f["clone_log_count"]);
    assert_eq!(json!(c.user().map(ToString::to_string)), f["clone_user"]);
    assert_eq!(json!(c.name()), f["clone_name"]);
    let sources: Vec<String> = c
        .messages()
        .iter()
        .map(|m| {
            m.element.metadata["clone_from"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let src_ids: Vec<String> = src.messages().iter().map(|m| m.id().to_string()).collect();
    assert_eq!(sources, src_ids);
    assert_eq!(
        c.system().unwrap().element.metadata["clone_from"],
        json!(src.system().unwrap().id().to_string())
    );
    for m in c.messages().iter() {
        assert_eq!(m.sender, Some(Participant::Id(src.id())));
        assert_eq!(m.recipient, Some(Participant::Id(c.id())));
    }
    // Links stay inside the clone.
    for m in c.messages().iter() {
        if let MessageContent::ActionRequest(rc) = &m.content {
            assert!(c.messages().contains(&rc.action_response_id.unwrap()));
        }
    }
}

#[test]
fn clone_with_sender() {
    let src = clone_source();
    let sender = uuid::Uuid::new_v4();
    let c = src.clone_branch_with_sender(sender).unwrap();
    assert!(
        c.messages()
            .iter()
            .all(|m| m.sender == Some(Participant::Id(sender)))
    );
}

#[test]
fn clone_current_progression_and_no_system() {
    let fx = fixture("clone/clone_current_progression_and_no_system");
    let mut src = Branch::builder()
        .chat_model(model("gpt-4.1-mini"))
        .build()
        .unwrap();
    let id = Participant::Id(src.id());
    let ins = |t: &str| {
        Message::instruction(InstructionContent {
            instruction: Some(json!(t)),
            ..Default::default()
        })
    };
    let m1 = src.msgs_mut().add_message(
        ins("one")
            .with_sender(Participant::from("user"))
            .with_recipient(id.clone()),
    );
    src.msgs_mut().add_message(
        Message::assistant("two")
            .with_sender(id.clone())
            .with_recipient(Participant::from("user")),
    );
    let m3 = src.msgs_mut().add_message(
        ins("three")
            .with_sender(Participant::from("user"))
            .with_recipient(id),
    );
    src.msgs_mut()
        .set_view(Some(Progression::from_ids([m1, m3])));
    let c = src.clone_branch().unwrap();
    let view: Vec<String> = c
        .msgs()
        .view()
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    let mut cmp = Comparer::new(&fx);
    cmp.check(
        &fx,
        "/source_view",
        &json!([m1.to_string(), m3.to_string()]),
    );
    cmp.check(&fx, "/clone_view", &json!(view));
    let maps: Vec<Value> = c
        .msgs()
        .view()
        .unwrap()
        .iter()
        .map(|i| c.messages().get(i).unwrap().element.metadata["clone_from"].clone())
        .collect();
    cmp.check(&fx, "/clone_view_maps_to_sources", &json!(maps));
    cmp.check(
        &fx,
        "/clone_to_dict",
        &c.to_dict(&ToDictOptions::default()).unwrap(),
    );
    cmp.finish();
    // The curated view is the active progression and survives a round trip.
    assert_eq!(c.progression().len(), 2);
    let back = Branch::from_dict(&c.to_dict(&ToDictOptions::default()).unwrap()).unwrap();
    assert_eq!(
        back.msgs().view().unwrap().order,
        c.msgs().view().unwrap().order
    );
}

#[test]
fn clone_to_dict_from_dict_roundtrip() {
    let fx = fixture("clone/clone_to_dict_from_dict_roundtrip");
    let c = clone_source().clone_branch().unwrap();
    let d = c.to_dict(&ToDictOptions::default()).unwrap();
    let r = Branch::from_dict(&d).unwrap();
    let rd = r.to_dict(&ToDictOptions::default()).unwrap();
    let mut cmp = Comparer::new(&fx);
    cmp.check_value(
        "/clone_to_dict",
        &single_system_clone(&fx.output["clone_to_dict"]),
        &d,
    );
    // compat.md §1: the restored clone keeps its system designation.
    let mut expected_restored = single_system_clone(&fx.output["restored_to_dict"]);
    let sys = expected_restored["messages"]["collections"][0].clone();
    expected_restored
        .as_object_mut()
        .unwrap()
        .insert("system".into(), sys);
    cmp.check_value("/restored_to_dict", &expected_restored, &rd);
    cmp.finish();
    assert_eq!(rd["metadata"]["clone_from"], d["metadata"]["clone_from"]);
    assert!(r.metadata()["clone_from"].is_object());
    // A restored clone comes back the same again.
    assert_eq!(
        Branch::from_dict(&rd)
            .unwrap()
            .to_dict(&ToDictOptions::default())
            .unwrap(),
        rd
    );
}

#[tokio::test]
async fn clone_excludes_runtime_state() {
    let fx = fixture("clone/clone_excludes_runtime_state");
    let src = clone_source();
    src.register_operation(
        "summarize",
        |_args| async { Ok::<_, OperationError>(json!("summary")) },
        false,
    )
    .unwrap();
    src.memory()
        .store(MemoryItem::new("remember me"))
        .await
        .unwrap();
    let c = src.clone_branch().unwrap();
    let f = &fx.output["facts"];
    assert!(
        c.extensions().is_empty(),
        "no providers, no capability grant"
    );
    assert!(!c.has_memory(), "memory is not carried over");
    assert!(!Arc::ptr_eq(c.memory(), src.memory()));
    assert_eq!(
        json!(
            c.memory()
                .search(&MemoryQuery::default())
                .await
                .unwrap()
                .len()
        ),
        f["clone_memory_items"]
    );
    assert_eq!(
        json!(
            src.memory()
                .search(&MemoryQuery::default())
                .await
                .unwrap()
                .len()
        ),
        f["source_memory_items"]
    );
    assert_eq!(
        json!(c.get_operation("summarize").is_some()),
        f["clone_get_operation_summarize"]
    );
    assert_eq!(
        json!(src.get_operation("summarize").is_some()),
        f["source_get_operation_summarize"]
    );
    assert!(c.observer().is_none());
    assert!(c.owning_session().is_none());
    assert_eq!(json!(c.logs().len()), f["clone_log_count"]);
    assert_eq!(json!(src.logs().len()), f["source_log_count"]);
    // The reference's clone shows the session id as user because session
    // inclusion overwrote the source's user; lionagi-rs never does that
    // (compat.md §7), so the clone keeps the source's user.
    assert_eq!(c.user(), src.user());
    let d = c.to_dict(&ToDictOptions::default()).unwrap();
    assert_eq!(keys(&d), keys(&fx.output["clone_to_dict"]));
}

#[tokio::test]
async fn attribute_first_lookup() {
    let fx = fixture("get_operation/attribute_first_lookup");
    let b = Branch::builder()
        .system("S")
        .user("00000001-067a-4000-8000-000000000001")
        .build()
        .unwrap();
    for name in ["chat", "name", "summarize"] {
        b.register_operation(
            name,
            |args: Value| async move {
                Ok::<_, OperationError>(json!(format!(
                    "summary of {:?}",
                    args["text"].as_str().unwrap_or_default()
                )))
            },
            false,
        )
        .unwrap();
    }
    let l = &fx.output["lookups"];
    assert!(matches!(b.get_operation("chat"), Some(OperationLookup::Builtin(n)) if n == "chat"));
    assert_eq!(
        json!(b.get_operation("name").is_none()),
        l["name"]["is_none"]
    );
    let Some(OperationLookup::Registered(op)) = b.get_operation("summarize") else {
        panic!("registered")
    };
    assert_eq!(
        json!(op(json!({"text": "abc"})).await.unwrap()),
        json!("summary of \"abc\"")
    );
    match b.get_operation("user") {
        Some(OperationLookup::Attribute(v)) => {
            assert_eq!(v, l["user"]["repr_value_if_not_callable"])
        }
        other => panic!("user resolves to its value, got {other:?}"),
    }
    assert_eq!(
        json!(b.get_operation("does_not_exist").is_none()),
        l["does_not_exist"]["is_none"]
    );
}

#[test]
fn duplicate_register_fails() {
    let fx = fixture("get_operation/duplicate_register_fails");
    let mut om = branch_core::OperationManager::new();
    let summarize = |_a: Value| async { Ok::<_, OperationError>(json!("s")) };
    om.register("summarize", summarize, false).unwrap();
    let err = om
        .register(
            "summarize",
            |_a: Value| async { Ok::<_, OperationError>(json!("other")) },
            false,
        )
        .unwrap_err();
    assert!(
        err.to_string().contains("summarize") && err.to_string().contains("already registered")
    );
    assert!(
        fx.output["manager_duplicate"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already registered")
    );
    om.register(
        "summarize",
        |_a: Value| async { Ok::<_, OperationError>(json!("other")) },
        true,
    )
    .unwrap();
    assert_eq!(json!(om.names()), fx.output["manager_update"]["names"]);
}

#[tokio::test]
async fn non_async_rejected() {
    let fx = fixture("get_operation/non_async_rejected");
    // Synchronous functions cannot be registered at all: see the
    // `compile_fail` doc test in branch_core::operation. What remains
    // observable is that a refused update leaves the entry as it was.
    let mut om = branch_core::OperationManager::new();
    om.register(
        "summarize",
        |_a: Value| async { Ok::<_, OperationError>(json!("first")) },
        false,
    )
    .unwrap();
    assert!(
        om.register(
            "summarize",
            |_a: Value| async { Ok::<_, OperationError>(json!("second")) },
            false
        )
        .is_err()
    );
    let op = om.get("summarize").unwrap().clone();
    assert_eq!(op(json!({})).await.unwrap(), json!("first"));
    assert_eq!(fx.output["entry_after_refused_update"], json!(true));
    assert_eq!(json!(om.names()), fx.output["names"]);
}

/// A CLI agent model keeps per-conversation state: the clone gets its own
/// copy with its own id, as the reference's clone does; an API model is
/// shared (same object, same id). (refdiff scenario clone_cli_model.)
#[test]
fn clone_forks_cli_models_and_shares_api_models() {
    use branch_core::model::{ChatModel, ModelConfig};
    use std::sync::Arc;
    let cli: Arc<dyn ChatModel> = Arc::new(ModelConfig::new("claude_code", "sonnet").unwrap());
    let b = Branch::builder()
        .system("S")
        .chat_model(cli)
        .build()
        .unwrap();
    let c = b.clone_branch().unwrap();
    assert_ne!(c.chat_model().id(), b.chat_model().id());
    assert!(c.chat_model().is_cli());
    assert_eq!(
        c.chat_model().to_dict(false, false)["endpoint"],
        b.chat_model().to_dict(false, false)["endpoint"]
    );
    let api: Arc<dyn ChatModel> = Arc::new(ModelConfig::new("openai", "gpt-4.1-mini").unwrap());
    let b = Branch::builder().chat_model(api).build().unwrap();
    let c = b.clone_branch().unwrap();
    assert!(Arc::ptr_eq(c.chat_model(), b.chat_model()));
}
