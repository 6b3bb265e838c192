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

#[test]
fn a_mapping_written_from_parts_renders_as_the_built_mapping() {
    let guidance = json!("You are terse.");
    let instruction =
        json!({"task": "sum", "keep": [null, " "], "n": 2, "text": "multi\nline\n\n"});
    let context = vec![
        json!(null),
        json!([[]]),
        json!("yes"),
        json!({"a": ""}),
        json!(1.5),
    ];
    let tools = vec![json!({"name": "f", "parameters": {}})];
    let empty = json!("  ");
    let parts = [
        ("Guidance", Entry::Value(&guidance)),
        ("Instruction", Entry::Value(&instruction)),
        ("Empty", Entry::Value(&empty)),
        ("Context", Entry::List(&context)),
        ("Tools", Entry::List(&tools)),
        ("None", Entry::List(&[])),
    ];
    let built = json!({
        "Guidance": guidance, "Instruction": instruction, "Empty": empty,
        "Context": context, "Tools": tools, "None": [],
    });
    assert_eq!(mapping_stripped(&parts), minimal_yaml_stripped(&built));
    // A keep-chomped literal last leaves the document open-ended.
    let kept = json!("multi\n\n");
    let open = [
        ("Guidance", Entry::Value(&guidance)),
        ("Instruction", Entry::Value(&kept)),
    ];
    let text = mapping_stripped(&open);
    assert_eq!(
        text,
        minimal_yaml_stripped(&json!({"Guidance": guidance, "Instruction": kept}))
    );
    assert!(text.ends_with("..."), "{text}");
    let nothing = [("A", Entry::Value(&empty)), ("B", Entry::List(&[]))];
    assert_eq!(mapping_stripped(&nothing), "");
}
