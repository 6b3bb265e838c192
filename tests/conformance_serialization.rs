//! Conformance with the reference's `serialization` fixtures: one test per
//! scenario. Where a test departs from a fixture, the departure is one of
//! the deliberate deviations of docs/compat.md and is named there.

mod support;

use std::sync::Arc;

use branch_core::message::{InstructionContent, MessageContent};
use branch_core::model::{ChatModel, ModelConfig};
use branch_core::{
    Branch, FromDictOptions, Log, Message, Participant, SerializationMode, SystemDatetime,
    ToDictOptions,
};
use serde_json::{Value, json};
use support::{Comparer, fixture, keys, mock_model};

fn py() -> ToDictOptions {
    ToDictOptions::default()
}

fn mode(m: SerializationMode) -> ToDictOptions {
    ToDictOptions::mode(m)
}

fn roundtrip(d: &Value) -> Value {
    Branch::from_dict(d)
        .expect("from_dict")
        .to_dict(&py())
        .expect("to_dict")
}

fn model(name: &str) -> Arc<dyn ChatModel> {
    Arc::new(mock_model(name))
}

/// compat.md §1: the restored branch keeps its system designation, so a
/// reference `roundtrip` value gains the `system` key it lost.
fn restore_system_key(expected: &Value) -> Value {
    let mut v = expected.clone();
    let first = v["messages"]["progression"]["order"][0].clone();
    let system = v["messages"]["collections"]
        .as_array()
        .and_then(|c| c.iter().find(|m| m["id"] == first))
        .filter(|m| m["role"] == "system")
        .cloned();
    if let Some(system) = system {
        let m = v.as_object_mut().unwrap();
        let mut out = serde_json::Map::new();
        for (k, val) in std::mem::take(m) {
            if k == "chat_model" {
                out.insert("system".into(), system.clone());
            }
            out.insert(k, val);
        }
        *m = out;
    }
    v
}

/// compat.md §2: an aliased chat/parse model stays aliased through
/// from_dict, so the reference's duplicated `parse_model` is not written.
fn drop_duplicated_parse_model(expected: &Value) -> Value {
    let mut v = expected.clone();
    if v.get("parse_model")
        .is_some_and(|p| p["id"] == v["chat_model"]["id"])
    {
        v.as_object_mut().unwrap().shift_remove("parse_model");
    }
    v
}

fn fixed_roundtrip(expected: &Value) -> Value {
    drop_duplicated_parse_model(&restore_system_key(expected))
}

/// A model restored from data never regains `allow_local_network`.
fn local_network_off(v: &Value) -> Value {
    let mut v = v.clone();
    for k in ["chat_model", "parse_model"] {
        if let Some(c) = v.get_mut(k).and_then(|m| m.pointer_mut("/endpoint/config")) {
            c["allow_local_network"] = json!(false);
        }
    }
    v
}

/// Our own round trip of a reference `to_dict` value gives it back
/// unchanged, ids and times included (save the local-network opt-in).
fn assert_comes_back_the_same(fx: &support::Fixture, pointer: &str) {
    let stored = fx.output.pointer(pointer).unwrap();
    for m in [SerializationMode::Python, SerializationMode::Json] {
        let back = Branch::from_dict(stored)
            .unwrap()
            .to_dict(&mode(m))
            .unwrap();
        assert_eq!(
            back,
            local_network_off(stored),
            "{}: {pointer} in {m:?} mode",
            fx.name
        );
    }
}

#[test]
fn all_message_kinds() {
    let fx = fixture("serialization/all_message_kinds");
    let mut b = Branch::builder()
        .user("alice")
        .system("You are a calculator.")
        .chat_model(model("gpt-4.1-mini"))
        .build()
        .unwrap();
    let id = b.id();
    let instruction = InstructionContent {
        instruction: Some(json!("Multiply the numbers.")),
        guidance: Some(json!("Answer with JSON.")),
        prompt_context: vec![json!({"a": 6, "b": 7}), json!("Use integer math.")],
        response_format: Some(json!({"product": "int", "explanation": "str"})),
        ..Default::default()
    };
    b.msgs_mut().add_message(
        Message::instruction(instruction)
            .with_sender(Participant::from("alice"))
            .with_recipient(Participant::Id(id)),
    );
    b.msgs_mut().add_message(
        Message::assistant("I will call the multiply tool.")
            .with_sender(Participant::Id(id))
            .with_recipient(Participant::from("alice")),
    );
    let mut args = serde_json::Map::new();
    args.insert("a".into(), json!(6));
    args.insert("b".into(), json!(7));
    let req = b.msgs_mut().add_message(
        Message::action_request("multiply", args)
            .with_sender(Participant::Id(id))
            .with_recipient(Participant::from("multiply")),
    );
    b.msgs_mut()
        .add_action_response(
            req,
            Some(json!(42)),
            Some("multiply".into()),
            Some(Participant::Id(id)),
        )
        .unwrap();
    let d = b.to_dict(&py()).unwrap();
    let mut c = Comparer::new(&fx);
    c.check(&fx, "/to_dict", &d);
    c.check(
        &fx,
        "/to_dict_json",
        &b.to_dict(&mode(SerializationMode::Json)).unwrap(),
    );
    let summary: Vec<Value> = b
        .messages()
        .iter()
        .map(|m| {
            json!({"class": m.kind().class_name(), "role": m.role().as_str(), "id": m.id().to_string(),
                   "sender": m.sender.as_ref().map(|s| s.to_string()),
                   "recipient": m.recipient.as_ref().map(|s| s.to_string())})
        })
        .collect();
    c.check(&fx, "/facts/messages", &Value::Array(summary));
    assert_eq!(
        b.system().unwrap().as_system().unwrap().rendered(),
        fx.output["facts"]["rendered"][0]
    );
    c.check_value(
        "/roundtrip",
        &fixed_roundtrip(&fx.output["roundtrip"]),
        &roundtrip(&d),
    );
    c.finish();
    assert_comes_back_the_same(&fx, "/to_dict");
}

#[test]
fn chat_model_setter_leaves_parse_model() {
    let fx = fixture("serialization/chat_model_setter_leaves_parse_model");
    let first = model("gpt-4.1-mini");
    let mut b = Branch::builder()
        .system("S")
        .chat_model(first.clone())
        .build()
        .unwrap();
    assert_eq!(
        keys(&b.to_dict(&py()).unwrap()),
        keys(&json!(
            fx.output["before_keys"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| (k.as_str().unwrap().to_owned(), Value::Null))
                .collect::<serde_json::Map<_, _>>()
        ))
    );
    b.set_chat_model(model("gpt-4o"));
    let d = b.to_dict(&py()).unwrap();
    let mut c = Comparer::new(&fx);
    c.check(&fx, "/after/chat_model", &d["chat_model"]);
    c.check(&fx, "/after/parse_model", &d["parse_model"]);
    c.finish();
    assert_eq!(json!(keys(&d)), fx.output["after"]["keys"]);
    assert!(branch_core::branch::same_model(b.parse_model(), &first));
    assert!(!b.mdls().parse_is_chat());
    // The reference's setter refuses a string at run time (TypeError); here
    // `set_chat_model` takes `Arc<dyn ChatModel>`, so that call cannot be
    // written at all.
}

#[test]
fn empty_branch_default_model() {
    let fx = fixture("serialization/empty_branch_default_model");
    let b = Branch::new().unwrap();
    let d = b.to_dict(&py()).unwrap();
    let mut c = Comparer::new(&fx);
    c.check(&fx, "/to_dict", &d);
    c.check(
        &fx,
        "/to_dict_json",
        &b.to_dict(&mode(SerializationMode::Json)).unwrap(),
    );
    c.check_value(
        "/roundtrip",
        &fixed_roundtrip(&fx.output["roundtrip"]),
        &roundtrip(&d),
    );
    c.finish();
    let f = &fx.output["facts"];
    assert_eq!(json!(keys(&d)), f["keys"]);
    assert_eq!(b.system().is_none(), f["system_is_none"]);
    assert_eq!(b.mdls().parse_is_chat(), f["parse_model_is_chat_model"]);
    assert_eq!(b.messages().len(), 0);
    assert_eq!(b.logs().len(), 0);
    assert_eq!(b.chat_model().config().provider(), f["chat_model_provider"]);
    assert_eq!(
        b.chat_model().config().model_name(),
        f["chat_model_name"].as_str()
    );
    assert!(
        b.on_message_added()
            .contains(&branch_core::branch::EMIT_CALLBACK)
    );
    assert_comes_back_the_same(&fx, "/to_dict");
}

#[test]
fn falsy_and_odd_system_values() {
    let fx = fixture("serialization/falsy_and_odd_system_values");
    let cases: Vec<Branch> = vec![
        Branch::builder().system("").build().unwrap(),
        Branch::builder().build().unwrap(),
        Branch::builder().system(json!(0)).build().unwrap(),
        Branch::builder().build().unwrap(),
        Branch::builder()
            .use_lion_system_message(false)
            .build()
            .unwrap(),
        Branch::builder()
            .system("")
            .use_lion_system_message(false)
            .build()
            .unwrap(),
        Branch::builder().system("   ").build().unwrap(),
        Branch::builder()
            .system(json!({"persona": "tester", "rules": ["a", "b"]}))
            .build()
            .unwrap(),
        Branch::builder()
            .system(json!(["first", "second"]))
            .build()
            .unwrap(),
    ];
    for (b, row) in cases.iter().zip(fx.output["cases"].as_array().unwrap()) {
        let label = row["call"].as_str().unwrap();
        assert_eq!(b.system().is_some(), row["has_system"], "{label}");
        assert_eq!(json!(b.messages().len()), row["message_count"], "{label}");
        let content = b
            .system()
            .map(|s| serde_json::to_value(&s.content).unwrap());
        assert_eq!(json!(content), row["system_content"], "{label}");
        if let Some(s) = b.system() {
            let rendered = s.as_system().unwrap().rendered();
            if row["system_rendered"]["ok"] == true {
                assert_eq!(rendered, row["system_rendered"]["value"], "{label}");
            } else {
                // compat.md §6: a non-string prompt renders as its JSON text
                // instead of failing.
                assert_eq!(
                    rendered,
                    row["system_content"]["system_message"].to_string(),
                    "{label}"
                );
            }
        }
    }
}

#[test]
fn from_dict_input_not_mutated() {
    let fx = fixture("serialization/from_dict_input_not_mutated");
    let data = fx.input.clone().unwrap();
    let snapshot = data.clone();
    let b = Branch::from_dict(&data).unwrap();
    assert_eq!(
        data, snapshot,
        "from_dict takes a reference and never changes it"
    );
    assert_eq!(json!(keys(&data)), fx.output["keys_after"]);
    assert_eq!(
        json!(b.messages().len()),
        fx.output["restored_message_count"]
    );
    assert_eq!(json!(b.logs().len()), fx.output["restored_log_count"]);
    // Built the same way here, the stored value has the reference's shape.
    let mut src = Branch::builder()
        .system("S")
        .chat_model(model("gpt-4.1-mini"))
        .parse_model(model("gpt-4.1-nano"))
        .logs([Log::from_json(json!({"x": 1}))])
        .build()
        .unwrap();
    let id = src.id();
    src.msgs_mut().add_message(
        Message::instruction(InstructionContent {
            instruction: Some(json!("hello")),
            ..Default::default()
        })
        .with_sender(Participant::from("user"))
        .with_recipient(Participant::Id(id)),
    );
    let ours = src
        .to_dict(&ToDictOptions {
            include_log_config: true,
            ..py()
        })
        .unwrap();
    assert_eq!(json!(keys(&ours)), fx.output["keys_before"]);
    assert_comes_back_the_same_value(&data);
}

fn assert_comes_back_the_same_value(stored: &Value) {
    let opts = ToDictOptions {
        include_log_config: stored.get("log_config").is_some(),
        ..py()
    };
    let back = Branch::from_dict(stored).unwrap().to_dict(&opts).unwrap();
    assert_eq!(back, local_network_off(stored));
}

#[test]
fn from_dict_model_override() {
    let fx = fixture("serialization/from_dict_model_override");
    let data = fx.input.clone().unwrap();
    let live_chat = model("gpt-4o");
    let live_parse = model("gpt-4o-mini");
    let b1 = Branch::from_dict_with(
        &data,
        FromDictOptions {
            chat_model: Some(live_chat.clone()),
            parse_model: Some(live_parse.clone()),
        },
    )
    .unwrap();
    let b2 = Branch::from_dict_with(
        &data,
        FromDictOptions {
            chat_model: Some(live_chat.clone()),
            ..Default::default()
        },
    )
    .unwrap();
    let d1 = b1.to_dict(&py()).unwrap();
    let mut c = Comparer::new(&fx);
    c.check(&fx, "/override_both/chat_model", &d1["chat_model"]);
    c.check(&fx, "/override_both/parse_model", &d1["parse_model"]);
    c.finish();
    // compat.md §1: the restored branch keeps its system, so `system` is
    // among the keys where the reference lost it.
    let mut expected_keys: Vec<String> =
        serde_json::from_value(fx.output["override_chat_only_no_stored_parse"]["keys"].clone())
            .unwrap();
    expected_keys.insert(6, "system".into());
    assert_eq!(keys(&b2.to_dict(&py()).unwrap()), expected_keys);
    assert!(branch_core::branch::same_model(b1.chat_model(), &live_chat));
    assert!(branch_core::branch::same_model(
        b1.parse_model(),
        &live_parse
    ));
    assert!(branch_core::branch::same_model(b2.chat_model(), &live_chat));
    assert!(b2.mdls().parse_is_chat());
}

#[test]
fn from_dict_system_suppression() {
    let fx = fixture("serialization/from_dict_system_suppression");
    let data = fx.input.clone().unwrap();
    let b = Branch::from_dict(&data).unwrap();
    let restored = b.to_dict(&py()).unwrap();
    let mut c = Comparer::new(&fx);
    c.check_value(
        "/restored",
        &fixed_roundtrip(&fx.output["restored"]),
        &restored,
    );
    c.finish();
    // The top-level `system` was not added a second time.
    assert_eq!(
        json!(b.messages().len()),
        fx.output["facts"]["message_count"]
    );
    assert_eq!(
        b.system().unwrap().id().to_string(),
        data["system"]["id"].as_str().unwrap()
    );
    // compat.md §3: with `system` alone, the stored System message is the
    // restored system message itself (same id, same text); the reference
    // turns the whole dict into a new prompt.
    let mut only_system = data.clone();
    only_system
        .as_object_mut()
        .unwrap()
        .shift_remove("messages");
    let b2 = Branch::from_dict(&only_system).unwrap();
    assert_eq!(
        b2.messages().len(),
        fx.output["system_only_facts"]["message_count"]
            .as_u64()
            .unwrap() as usize
    );
    let s = b2.to_dict(&py()).unwrap()["system"].clone();
    assert_eq!(s, data["system"]);
}

#[test]
fn include_log_config() {
    let fx = fixture("serialization/include_log_config");
    let with = ToDictOptions {
        include_log_config: true,
        ..py()
    };
    let b0 = Branch::new().unwrap();
    let b1 = Branch::builder()
        .log_config_value(&json!({"persist_dir": "./logs/custom", "capacity": 50, "extension": "jsonl", "auto_save_on_exit": false}))
        .unwrap()
        .build()
        .unwrap();
    let b2 = Branch::builder()
        .log_config_value(&json!({}))
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(
        b0.to_dict(&with).unwrap()["log_config"],
        fx.output["default"]
    );
    let d1 = b1.to_dict(&with).unwrap();
    assert_eq!(d1["log_config"], fx.output["custom_dict"]);
    assert_eq!(
        b2.to_dict(&with).unwrap()["log_config"],
        fx.output["empty_dict"]
    );
    assert_eq!(
        json!(keys(&b1.to_dict(&py()).unwrap())),
        fx.output["keys_without_flag"]
    );
    let rt = Branch::from_dict(&d1).unwrap();
    assert_eq!(
        rt.to_dict(&with).unwrap()["log_config"],
        fx.output["roundtrip_custom"]
    );
}

#[test]
fn include_request_options_and_processor_config() {
    let fx = fixture("serialization/include_request_options_and_processor_config");
    let b = Branch::builder()
        .chat_model(model("gpt-4.1-mini"))
        .parse_model(model("gpt-4.1-nano"))
        .build()
        .unwrap();
    let mut c = Comparer::new(&fx);
    c.check(
        &fx,
        "/default_chat_model",
        &b.to_dict(&py()).unwrap()["chat_model"],
    );
    let ro = b
        .to_dict(&ToDictOptions {
            include_request_options: true,
            ..py()
        })
        .unwrap();
    assert_eq!(
        json!(keys(&ro["chat_model"]["endpoint"]["config"])),
        fx.output["with_request_options_keys"]
    );
    assert_eq!(
        ro["chat_model"]["endpoint"]["config"]["request_options"],
        fx.output["request_options"]
    );
    let pc = b
        .to_dict(&ToDictOptions {
            include_processor_config: true,
            ..py()
        })
        .unwrap();
    c.check(&fx, "/with_processor_config_chat_model", &pc["chat_model"]);
    c.check(
        &fx,
        "/parse_model_with_processor_config",
        &pc["parse_model"],
    );
    let full = b
        .to_dict(&ToDictOptions {
            include_request_options: true,
            include_processor_config: true,
            ..py()
        })
        .unwrap();
    let rt = Branch::from_dict(&full).unwrap();
    let rtd = rt
        .to_dict(&ToDictOptions {
            include_processor_config: true,
            ..py()
        })
        .unwrap();
    c.check(
        &fx,
        "/roundtrip_full_then_processor_config/chat_model",
        &rtd["chat_model"],
    );
    c.check(
        &fx,
        "/roundtrip_full_then_processor_config/parse_model",
        &rtd["parse_model"],
    );
    c.finish();
}

#[test]
fn instruction_pydantic_response_format() {
    let fx = fixture("serialization/instruction_pydantic_response_format");
    let mut b = Branch::builder().system("S").build().unwrap();
    let id = b.id();
    let schema = json!({"properties": {"answer": {"description": "The final answer", "title": "Answer", "type": "string"},
        "confidence": {"description": "Confidence between 0 and 1", "title": "Confidence", "type": "number"}},
        "required": ["answer", "confidence"], "title": "Answer", "type": "object"});
    b.msgs_mut().add_message(
        Message::instruction(InstructionContent {
            instruction: Some(json!("Answer the question.")),
            tool_schemas: vec![json!({"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}})],
            response_format: Some(schema),
            ..Default::default()
        })
        .with_sender(Participant::from("user"))
        .with_recipient(Participant::Id(id)),
    );
    let d = b.to_dict(&py()).unwrap();
    let mut c = Comparer::new(&fx);
    c.check(&fx, "/to_dict", &d);
    c.finish();
    // The response format is held in memory only: never serialized.
    let rt = Branch::from_dict(&d).unwrap();
    let ins = rt
        .messages()
        .iter()
        .find_map(|m| m.as_instruction())
        .unwrap();
    assert!(ins.response_format.is_none());
    assert_eq!(
        serde_json::to_value(ins).unwrap(),
        fx.output["instruction_content_after_roundtrip"]
    );
    assert_comes_back_the_same(&fx, "/to_dict");
}

#[test]
fn lion_system_message() {
    let fx = fixture("serialization/lion_system_message");
    let b = Branch::builder()
        .use_lion_system_message(true)
        .build()
        .unwrap();
    let d = b.to_dict(&py()).unwrap();
    let mut c = Comparer::new(&fx);
    c.check(&fx, "/to_dict", &d);
    c.check_value(
        "/roundtrip",
        &fixed_roundtrip(&fx.output["roundtrip"]),
        &roundtrip(&d),
    );
    c.finish();
    assert_eq!(
        b.system().unwrap().as_system().unwrap().text(),
        fx.output["facts"]["system_message"].as_str()
    );
    assert_eq!(
        branch_core::branch::LION_SYSTEM_MESSAGE.chars().count(),
        3108
    );
    assert_comes_back_the_same(&fx, "/to_dict");
}

#[test]
fn lion_system_message_with_developer_prompt() {
    let fx = fixture("serialization/lion_system_message_with_developer_prompt");
    let b = Branch::builder()
        .system("Be brief.")
        .use_lion_system_message(true)
        .system_datetime(SystemDatetime::Now)
        .build()
        .unwrap();
    let d = b.to_dict(&py()).unwrap();
    let mut c = Comparer::new(&fx);
    c.check(&fx, "/to_dict", &d);
    c.check_value(
        "/roundtrip",
        &fixed_roundtrip(&fx.output["roundtrip"]),
        &roundtrip(&d),
    );
    c.finish();
    let content = b.system().unwrap().as_system().unwrap();
    assert_eq!(
        content.text(),
        fx.output["facts"]["system_content"]["system_message"].as_str()
    );
    let rendered = content.rendered();
    assert!(rendered.starts_with("System Time: "));
    assert!(rendered.ends_with(fx.output["facts"]["rendered_tail"].as_str().unwrap()));
    assert_comes_back_the_same(&fx, "/to_dict");
}

#[test]
fn logs_present_vs_empty() {
    let fx = fixture("serialization/logs_present_vs_empty");
    let b = Branch::builder()
        .system("S")
        .logs([
            Log::from_json(json!({"event": "tool_call", "n": 1})),
            Log::from_json(json!({"event": "note", "text": "hello"})),
        ])
        .build()
        .unwrap();
    let d = b.to_dict(&py()).unwrap();
    let mut c = Comparer::new(&fx);
    c.check(&fx, "/with_logs_default", &d);
    c.check(
        &fx,
        "/with_logs_include_false",
        &b.to_dict(&ToDictOptions {
            include_logs: false,
            ..py()
        })
        .unwrap(),
    );
    c.check_value(
        "/roundtrip",
        &fixed_roundtrip(&fx.output["roundtrip"]),
        &roundtrip(&d),
    );
    c.finish();
    let empty = Branch::builder().system("S").build().unwrap();
    assert_eq!(
        json!(keys(&empty.to_dict(&py()).unwrap())),
        fx.output["empty_logs_include_true_keys"]
    );
    assert_comes_back_the_same(&fx, "/with_logs_default");
}

#[test]
fn messages_as_list_of_dicts() {
    let fx = fixture("serialization/messages_as_list_of_dicts");
    let items: Vec<Message> = fx
        .input
        .as_ref()
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|v| Message::from_value(v).unwrap())
        .collect();
    let b = Branch::builder().messages(items).build().unwrap();
    let d = b.to_dict(&py()).unwrap();
    // compat.md §4: a leading System in the given messages is the system
    // message, so `system` is written.
    let mut c = Comparer::new(&fx);
    c.check_value("/to_dict", &restore_system_key(&fx.output["to_dict"]), &d);
    c.finish();
    let ids: Vec<String> = b.messages().iter().map(|m| m.id().to_string()).collect();
    let input_ids: Vec<String> = fx
        .input
        .as_ref()
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, input_ids, "ids preserved");
}

#[test]
fn parse_model_distinct_vs_aliased() {
    let fx = fixture("serialization/parse_model_distinct_vs_aliased");
    let chat = model("gpt-4.1-mini");
    let mut c = Comparer::new(&fx);
    let omitted = Branch::builder()
        .chat_model(chat.clone())
        .build()
        .unwrap()
        .to_dict(&py())
        .unwrap();
    c.check(&fx, "/omitted", &omitted);
    let same = Branch::builder()
        .chat_model(chat.clone())
        .parse_model(chat.clone())
        .build()
        .unwrap();
    c.check(&fx, "/same_object", &same.to_dict(&py()).unwrap());
    let distinct = Branch::builder()
        .chat_model(chat.clone())
        .parse_model(model("gpt-4.1-nano"))
        .build()
        .unwrap();
    let d = distinct.to_dict(&py()).unwrap();
    c.check(&fx, "/distinct", &d);
    let s = Branch::builder()
        .chat_model(chat.clone())
        .parse_model("gpt-4o-mini")
        .build()
        .unwrap();
    c.check(&fx, "/string", &s.to_dict(&py()).unwrap());
    let rt = Branch::from_dict(&d).unwrap();
    c.check(&fx, "/roundtrip_distinct", &rt.to_dict(&py()).unwrap());
    c.finish();
    assert_eq!(json!(keys(&omitted)), fx.output["facts"]["omitted_keys"]);
    assert_eq!(json!(keys(&d)), fx.output["facts"]["distinct_keys"]);
    assert_eq!(
        s.parse_model().config().provider(),
        fx.output["facts"]["string_parse_model_provider"]
    );
    assert_eq!(
        s.parse_model().config().model_name(),
        fx.output["facts"]["string_parse_model_name"].as_str()
    );
    assert_eq!(
        json!(rt.mdls().parse_is_chat()),
        fx.output["roundtrip_distinct_parse_is_chat"]
    );
    assert_comes_back_the_same(&fx, "/distinct");
}

#[test]
fn system_datetime_string() {
    let fx = fixture("serialization/system_datetime_string");
    let b = Branch::builder()
        .system("Scheduler.")
        .system_datetime(SystemDatetime::At("2024-05-01 09:30 (UTC)".into()))
        .build()
        .unwrap();
    let d = b.to_dict(&py()).unwrap();
    let mut c = Comparer::new(&fx);
    c.check(&fx, "/to_dict", &d);
    c.check_value(
        "/roundtrip",
        &fixed_roundtrip(&fx.output["roundtrip"]),
        &roundtrip(&d),
    );
    c.finish();
    let s = b.system().unwrap().as_system().unwrap();
    assert_eq!(
        serde_json::to_value(s).unwrap(),
        fx.output["facts"]["system_content"]
    );
    assert_eq!(s.rendered(), fx.output["facts"]["system_rendered"]);
    assert_comes_back_the_same(&fx, "/to_dict");
}

#[test]
fn system_datetime_true() {
    let fx = fixture("serialization/system_datetime_true");
    let b = Branch::builder()
        .system("Time-aware assistant.")
        .system_datetime(SystemDatetime::Now)
        .build()
        .unwrap();
    let d = b.to_dict(&py()).unwrap();
    let mut c = Comparer::new(&fx);
    c.check(&fx, "/to_dict", &d);
    c.check_value(
        "/roundtrip",
        &fixed_roundtrip(&fx.output["roundtrip"]),
        &roundtrip(&d),
    );
    c.finish();
    let dt = b
        .system()
        .unwrap()
        .as_system()
        .unwrap()
        .system_datetime
        .clone()
        .unwrap();
    // YYYY-MM-DDTHH:MM+00:00, minute precision.
    assert_eq!(dt.len(), 22);
    assert!(dt.ends_with("+00:00") && dt.as_bytes()[10] == b'T');
    assert_comes_back_the_same(&fx, "/to_dict");
}

#[test]
fn system_message() {
    let fx = fixture("serialization/system_message");
    let b = Branch::builder()
        .system("You are a careful assistant.")
        .chat_model(model("gpt-4.1-mini"))
        .build()
        .unwrap();
    let d = b.to_dict(&py()).unwrap();
    let mut c = Comparer::new(&fx);
    c.check(&fx, "/to_dict", &d);
    c.check(
        &fx,
        "/to_dict_json",
        &b.to_dict(&mode(SerializationMode::Json)).unwrap(),
    );
    let rt = Branch::from_dict(&d).unwrap();
    c.check_value(
        "/roundtrip",
        &fixed_roundtrip(&fx.output["roundtrip"]),
        &rt.to_dict(&py()).unwrap(),
    );
    c.finish();
    assert_eq!(json!(keys(&d)), fx.output["facts"]["keys"]);
    assert_eq!(b.messages().at(0).unwrap().id(), b.system().unwrap().id());
    // compat.md §1: the system survives the round trip.
    assert!(rt.system().is_some());
    assert_eq!(
        rt.messages().at(0).unwrap().kind().class_name(),
        fx.output["roundtrip_facts"]["first_message_class"]
    );
    assert_eq!(
        json!(rt.chat_model().config().allow_local_network()),
        fx.output["roundtrip_facts"]["chat_model_allow_local_network"]
    );
    assert!(rt.mdls().parse_is_chat(), "compat.md §2: aliasing survives");
    assert_comes_back_the_same(&fx, "/to_dict");
}

#[test]
fn system_sender_and_user() {
    let fx = fixture("serialization/system_sender_and_user");
    let uid = uuid::Uuid::parse_str("12345678-1234-5678-1234-567812345678").unwrap();
    let cases = [
        Branch::builder().system("S").build().unwrap(),
        Branch::builder().system("S").user("alice").build().unwrap(),
        Branch::builder()
            .system("S")
            .user("alice")
            .system_sender("ops-team")
            .build()
            .unwrap(),
        Branch::builder()
            .system("S")
            .user(Participant::Id(uid))
            .build()
            .unwrap(),
    ];
    for (b, row) in cases.iter().zip(fx.output["cases"].as_array().unwrap()) {
        let d = b.to_dict(&py()).unwrap();
        assert_eq!(d["user"], row["user"]);
        assert_eq!(d["system"]["sender"], row["system_sender_value"]);
        assert_eq!(b.system().unwrap().recipient, Some(Participant::Id(b.id())));
    }
    let d = cases[2].to_dict(&py()).unwrap();
    let mut c = Comparer::new(&fx);
    c.check(&fx, "/to_dict_with_user_and_sender", &d);
    c.check_value(
        "/roundtrip",
        &fixed_roundtrip(&fx.output["roundtrip_with_user_and_sender"]),
        &roundtrip(&d),
    );
    c.finish();
    assert_comes_back_the_same(&fx, "/to_dict_with_user_and_sender");
}

#[test]
fn system_template_deprecated() {
    let fx = fixture("serialization/system_template_deprecated");
    let builder = Branch::builder()
        .system("Hello {{name}}")
        .system_template(Some(json!("T: {{name}}")))
        .system_template_context(Some(json!({"name": "Ada"})));
    assert_eq!(
        builder.deprecations().len(),
        fx.output["warnings"].as_array().unwrap().len()
    );
    let b = builder.build().unwrap();
    let plain = Branch::builder().system("Hello {{name}}").build().unwrap();
    let content =
        |b: &Branch| serde_json::to_value(b.system().unwrap().as_system().unwrap()).unwrap();
    assert_eq!(content(&b), fx.output["system_with_template"]);
    assert_eq!(content(&plain), fx.output["system_without_template"]);
    let none = Branch::builder()
        .system("x")
        .system_template(None)
        .system_template_context(None);
    assert!(none.deprecations().is_empty());
    assert_eq!(
        json!(keys(&b.to_dict(&py()).unwrap())),
        fx.output["to_dict_keys"]
    );
}

#[test]
fn to_dict_modes() {
    let fx = fixture("serialization/to_dict_modes");
    let mut b = Branch::builder()
        .user("alice")
        .name("modes")
        .system("Mode test.")
        .chat_model(model("gpt-4.1-mini"))
        .build()
        .unwrap();
    let id = b.id();
    b.msgs_mut().add_message(
        Message::instruction(InstructionContent {
            instruction: Some(json!("hi")),
            ..Default::default()
        })
        .with_sender(Participant::from("alice"))
        .with_recipient(Participant::Id(id)),
    );
    b.metadata_mut().insert("custom".into(), json!({"k": 1}));
    let py_ = b.to_dict(&py()).unwrap();
    let js = b.to_dict(&mode(SerializationMode::Json)).unwrap();
    let db = b.to_dict(&mode(SerializationMode::Db)).unwrap();
    let dbk = b
        .to_dict(&ToDictOptions {
            mode: SerializationMode::Db,
            db_meta_key: Some("meta".into()),
            ..py()
        })
        .unwrap();
    let mut c = Comparer::new(&fx);
    c.check(&fx, "/python", &py_)
        .check(&fx, "/json", &js)
        .check(&fx, "/db", &db)
        .check(&fx, "/db_meta_key", &dbk);
    c.check_value(
        "/roundtrip_python",
        &fixed_roundtrip(&fx.output["roundtrip_python"]),
        &roundtrip(&py_),
    );
    c.check_value(
        "/roundtrip_json",
        &fixed_roundtrip(&fx.output["roundtrip_json"]),
        &roundtrip(&js),
    );
    c.finish();
    let f = &fx.output["facts"];
    assert_eq!(json!(keys(&db)), f["db_keys"]);
    assert_eq!(json!(keys(&dbk)), f["db_meta_key_keys"]);
    assert_eq!(json!(keys(&db["messages"])), f["db_messages_keys"]);
    assert_eq!(py_, js);
    // Unsupported modes are refused with a typed error.
    let err = "yaml".parse::<SerializationMode>().unwrap_err();
    assert!(err.to_string().contains("yaml"));
    // compat.md §9: db-mode output reads back, also with a custom meta key
    // (its metadata, `custom` included, comes back); an unknown key that
    // is not a metadata object is still refused.
    let back = Branch::from_dict(&db).unwrap();
    assert_eq!(back.to_dict(&py()).unwrap(), local_network_off(&py_));
    let back = Branch::from_dict(&dbk).unwrap();
    assert_eq!(back.to_dict(&py()).unwrap(), local_network_off(&py_));
    let mut odd = dbk.clone();
    odd["meta"] = json!({"k": 1});
    assert!(Branch::from_dict(&odd).is_err());
    assert_comes_back_the_same(&fx, "/python");
    assert_comes_back_the_same(&fx, "/json");
}

#[test]
fn every_serialization_message_round_trips_alone() {
    // serialization.md §5.9: each message kind round-trips losslessly.
    let fx = fixture("serialization/all_message_kinds");
    for m in fx.output["to_dict"]["messages"]["collections"]
        .as_array()
        .unwrap()
    {
        let msg = Message::from_value(m).unwrap();
        assert_eq!(&msg.to_value().unwrap(), m);
        assert!(matches!(
            msg.content,
            MessageContent::System(_)
                | MessageContent::Instruction(_)
                | MessageContent::AssistantResponse(_)
                | MessageContent::ActionRequest(_)
                | MessageContent::ActionResponse(_)
        ));
    }
    let _ = ModelConfig::new("openai", "gpt-4.1-mini").unwrap();
}
