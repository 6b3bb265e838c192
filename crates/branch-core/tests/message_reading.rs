//! A message reads alike from its JSON text and from its parsed value (the
//! two ways a stored branch is restored), and a malformed one is refused
//! with the reason of its first fault: the kind's (`metadata.lion_class`)
//! before the content's.

use branch_core::message::Message;
use serde_json::{Value, json};

const ID: &str = "6e215c90-0fc7-4af0-8fc0-c5dc415c1108";
const INSTRUCTION: &str = "lionagi.protocols.messages.instruction.Instruction";

/// Reads `doc` both ways; they must agree, and the result is returned.
fn read(doc: &Value) -> Result<Message, String> {
    let from_value = Message::from_value(doc).map_err(|e| e.to_string());
    let text = serde_json::to_string(doc).unwrap();
    let from_text = serde_json::from_str::<Message>(&text).map_err(|e| e.to_string());
    match (&from_value, &from_text) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "{doc}"),
        (Err(_), Err(_)) => {}
        _ => panic!("the two readings disagree on {doc}: {from_value:?} / {from_text:?}"),
    }
    from_value
}

fn refused(doc: Value, reason: &str) {
    let e = read(&doc).unwrap_err();
    assert!(e.contains(reason), "{doc}: {e}");
}

fn message(metadata: Value, content: Value) -> Value {
    json!({"id": ID, "created_at": 1.5, "metadata": metadata, "content": content,
        "sender": "user", "recipient": ID, "role": "user"})
}

#[test]
fn a_message_keeps_its_other_metadata_and_reads_its_kind_from_the_class() {
    let m = read(&message(
        json!({"a": 1, "lion_class": INSTRUCTION, "b": [true]}),
        json!({"instruction": "hi", "guidance": "g"}),
    ))
    .unwrap();
    assert_eq!(m.kind().class_name(), "Instruction");
    let out = m.to_value().unwrap();
    assert_eq!(
        out["metadata"],
        json!({"a": 1, "b": [true], "lion_class": INSTRUCTION})
    );
    assert_eq!(
        out["content"],
        json!({"instruction": "hi", "guidance": "g"})
    );
    assert_eq!(out["sender"], json!("user"));
    assert_eq!(out["recipient"], json!(ID));
    // The short class name of older files, and `node_metadata` in place of
    // `metadata`.
    let mut doc = message(json!({}), json!({"assistant_response": "ok"}));
    doc.as_object_mut().unwrap().shift_remove("metadata");
    doc["node_metadata"] = json!({"lion_class": "AssistantResponse"});
    let m = read(&doc).unwrap();
    assert_eq!(m.kind().class_name(), "AssistantResponse");
    assert!(m.element.metadata.is_empty());
}

#[test]
fn contents_read_as_the_reference_wrote_them() {
    // Null content is an empty one.
    let m = read(&message(
        json!({"lion_class": "x.AssistantResponse"}),
        Value::Null,
    ))
    .unwrap();
    assert_eq!(
        m.to_value().unwrap()["content"],
        json!({"assistant_response": ""})
    );
    // A legacy wrapper: its keys count unless the content has them.
    let m = read(&message(
        json!({"lion_class": "x.ActionRequest"}),
        json!({"action_request": {"function": "inner", "arguments": {"a": 1}}, "function": "outer"}),
    ))
    .unwrap();
    assert_eq!(
        m.to_value().unwrap()["content"],
        json!({"function": "outer", "arguments": {"a": 1}})
    );
    let m = read(&message(
        json!({"lion_class": "x.ActionResponse"}),
        json!({"action_response": {"function": "inner", "output": 3, "action_request_id": "no"},
            "function": "outer", "action_request_id": ID}),
    ))
    .unwrap();
    assert_eq!(
        m.to_value().unwrap()["content"],
        json!({"function": "inner", "arguments": {}, "output": 3, "action_request_id": ID})
    );
    // A repeated key keeps its last value, as a parsed object does.
    let text = format!(
        r#"{{"id": "{ID}", "created_at": 1.5, "metadata": {{"lion_class": "{INSTRUCTION}"}},
            "content": {{"instruction": "first", "instruction": "last"}}}}"#
    );
    let m: Message = serde_json::from_str(&text).unwrap();
    assert_eq!(
        m.to_value().unwrap()["content"],
        json!({"instruction": "last"})
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(read(&v).unwrap(), m);
}

#[test]
fn participants_and_the_role_read_in_every_written_form() {
    for (given, written) in [
        (json!("user"), json!("user")),
        (json!(ID), json!(ID)),
        (json!({"id": ID, "name": "a branch"}), json!(ID)),
        (json!("a name"), json!("a name")),
        (Value::Null, Value::Null),
        (json!(""), Value::Null),
    ] {
        let mut doc = message(json!({"lion_class": INSTRUCTION}), json!({}));
        doc["sender"] = given.clone();
        // The role is derived from the kind: whatever is written is ignored.
        doc["role"] = json!({"any": [1, "value"]});
        let m = read(&doc).unwrap();
        assert_eq!(m.to_value().unwrap()["sender"], written, "{given}");
        assert_eq!(m.to_value().unwrap()["role"], json!("user"));
    }
}

/// serde_json's raw-value marker is no key of ours: a `Value`'s reader
/// would take its string for JSON text.
#[test]
fn the_raw_value_marker_is_refused_in_the_content_and_the_role() {
    let marker = "$serde_json::private::RawValue";
    let mut content = serde_json::Map::new();
    content.insert(marker.into(), json!("{\"instruction\": \"a\"}"));
    refused(
        message(
            json!({"lion_class": INSTRUCTION}),
            Value::Object(content.clone()),
        ),
        &format!("unknown content key `{marker}`"),
    );
    let mut doc = message(json!({"lion_class": INSTRUCTION}), json!({}));
    doc["role"] = Value::Object(content);
    refused(doc, "a key reserved by serde_json");
}

#[test]
fn the_kind_is_judged_before_the_content() {
    let no_class = "a message needs `metadata.lion_class` to tell its kind";
    refused(message(json!({}), json!({})), no_class);
    refused(message(json!({"a": 1}), json!([1])), no_class);
    refused(
        message(json!({"lion_class": 7}), json!("text")),
        "`metadata.lion_class` must be a string",
    );
    refused(
        message(json!({"lion_class": null}), json!({})),
        "`metadata.lion_class` must be a string",
    );
    refused(
        message(json!({"lion_class": ["x.System"]}), json!({})),
        "must be a string",
    );
    refused(
        message(json!({"lion_class": "x.Node"}), json!({"zz": 1})),
        "`x.Node` is not a message class",
    );
    // `metadata` wins over `node_metadata`, even without a class.
    let mut doc = message(json!({"a": 1}), json!({}));
    doc["node_metadata"] = json!({"lion_class": INSTRUCTION});
    refused(doc, no_class);
}

#[test]
fn content_faults_are_named() {
    let class = || json!({"lion_class": INSTRUCTION});
    for (content, reason) in [
        (json!([1]), "`content` must be an object, not an array"),
        (json!("text"), "`content` must be an object, not a string"),
        (json!(2), "`content` must be an object, not a number"),
        (json!(false), "`content` must be an object, not a boolean"),
        // The first key the kind does not take, in order.
        (
            json!({"instruction": "a", "function": "f", "zz": 1}),
            "unknown content key `function`",
        ),
        (
            json!({"zz": 1, "function": "f", "yy": 2}),
            "unknown content key `zz`",
        ),
        (
            json!({"handle_context": "merge"}),
            "`handle_context` must be",
        ),
    ] {
        refused(message(class(), content), reason);
    }
    refused(
        message(
            json!({"lion_class": "x.AssistantResponse"}),
            json!({"assistant_response": 3}),
        ),
        "`assistant_response` must be a string, not a number",
    );
    // A wrapper's unknown key is refused after the content's own.
    refused(
        message(
            json!({"lion_class": "x.ActionRequest"}),
            json!({"action_request": {"zz": 1}, "function": "f", "yy": 2}),
        ),
        "unknown content key `yy`",
    );
    refused(
        message(
            json!({"lion_class": "x.ActionRequest"}),
            json!({"action_request": {"zz": 1}, "function": "f"}),
        ),
        "unknown content key `zz`",
    );
}

/// serde's derive reads a struct from a list too, by position: a message
/// is read only from an object.
#[test]
fn a_message_is_read_only_from_an_object() {
    let doc = json!([ID, 1.5, {"lion_class": INSTRUCTION}, null, {"instruction": "x"}]);
    refused(doc, "expected a JSON object");
    refused(json!("text"), "expected a JSON object");
    refused(Value::Null, "expected a JSON object");
}

#[test]
fn ids_and_participants_are_checked() {
    let class = || json!({"lion_class": INSTRUCTION});
    let mut doc = message(class(), json!({}));
    doc["id"] = json!("nope");
    refused(doc, "`nope` is not a valid UUID");
    let mut doc = message(class(), json!({}));
    doc["id"] = json!(5);
    refused(doc, "invalid type");
    for (sender, reason) in [
        (
            json!(5),
            "a participant must be a string or null, not a number",
        ),
        (
            json!(1.5),
            "a participant must be a string or null, not a number",
        ),
        (
            json!(true),
            "a participant must be a string or null, not a boolean",
        ),
        (
            json!([ID]),
            "a participant must be a string or null, not an array",
        ),
        (json!({"name": "x"}), "must carry a valid `id`"),
    ] {
        let mut doc = message(class(), json!({}));
        doc["sender"] = sender;
        refused(doc, reason);
    }
}

/// A key a message does not have, or one written twice, fails as it is
/// read, in serde's words; fields not written take their defaults.
#[test]
fn unknown_and_repeated_keys_are_refused_and_missing_ones_defaulted() {
    let class = || json!({"lion_class": INSTRUCTION});
    let mut doc = message(class(), json!({}));
    doc["colour"] = json!("red");
    refused(
        doc,
        "unknown field `colour`, expected one of `id`, `created_at`, `metadata`, \
         `node_metadata`, `content`, `embedding`, `sender`, `recipient`, `channel`, `role`",
    );
    for key in [
        "id",
        "created_at",
        "metadata",
        "node_metadata",
        "content",
        "embedding",
        "sender",
        "recipient",
        "channel",
        "role",
    ] {
        // Refused as repeated before the second value is read, as the
        // derive refuses it: so also when that value is malformed too.
        for second in ["null", "[[]]"] {
            let text = format!(
                r#"{{"metadata": {{"lion_class": "{INSTRUCTION}"}}, "{key}": null, "{key}": {second}}}"#
            );
            let e = serde_json::from_str::<Message>(&text)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("duplicate field `{key}`")),
                "{text}: {e}"
            );
        }
    }
    let m = read(&json!({"id": ID, "created_at": 1.5, "metadata": class()})).unwrap();
    assert_eq!(m.kind().class_name(), "Instruction");
    let out = m.to_value().unwrap();
    assert_eq!(out["sender"], json!("unset"));
    assert_eq!(out["recipient"], json!("unset"));
    assert_eq!(out["channel"], json!(null));
    assert_eq!(out["embedding"], json!(null));
}
