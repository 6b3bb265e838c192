use serde_json::json;

use super::*;

#[test]
fn the_documented_sample_renders_byte_for_byte() {
    let doc = json!({
        "Guidance": "a: b",
        "Instruction": "plain text",
        "Context": [0, false, "yes", "null", "- dash", "multi\nline", "héllo", "#hash", "x'y", "123",
                    {"nested": {"deep": [1, 2]}}]
    });
    let expected = "Guidance: 'a: b'\nInstruction: plain text\nContext:\n- 0\n- false\n- 'yes'\n- 'null'\n- '- dash'\n- |-\n  multi\n  line\n- héllo\n- '#hash'\n- x'y\n- '123'\n- nested:\n    deep:\n    - 1\n    - 2\n";
    assert_eq!(minimal_yaml(&doc), expected);
}

#[test]
fn pruning_removes_empties_and_the_containers_they_leave() {
    let v =
        json!({"a": null, "b": " ", "c": [null, {"x": ""}], "d": 0, "e": false, "f": {"g": []}});
    assert_eq!(prune(&v), json!({"d": 0, "e": false}));
}

#[test]
fn an_all_empty_document_is_an_empty_flow_mapping() {
    assert_eq!(minimal_yaml(&json!({"a": null})), "{}\n");
}
