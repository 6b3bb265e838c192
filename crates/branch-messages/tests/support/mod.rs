// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

//! Shared helpers for the fixture tests: locating the reference fixtures,
//! reading a scenario's requests, and the documented compat transforms.

use std::path::{Path, PathBuf};

use branch_messages::render::banner_with_example;
use branch_messages::yaml::minimal_yaml_stripped;
use branch_messages::{ResponseFormat, token_usage_note};
use serde_json::{Value, json};

/// The reference fixtures vendored in the repository (`$LIONAGI_FIXTURES`
/// overrides).
pub fn fixtures_dir() -> PathBuf {
    match std::env::var_os("LIONAGI_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/lionagi-0.36.0"),
    }
}

/// The request bodies of `operations/<scenario>`, in arrival order. Fails
/// when the scenario lists masks for its requests: every compiled
/// `messages` list in these fixtures is deterministic.
pub fn requests(scenario: &str) -> Vec<Value> {
    let dir = fixtures_dir().join("operations").join(scenario);
    let masks: Value = read_json(&dir.join("nondeterministic.json"));
    assert_eq!(
        masks["requests.jsonl"],
        json!([]),
        "{scenario}: request masks are not handled"
    );
    std::fs::read_to_string(dir.join("requests.jsonl"))
        .unwrap_or_else(|e| panic!("{scenario}/requests.jsonl unreadable: {e}"))
        .lines()
        .map(|l| serde_json::from_str(l).expect("a request line is JSON"))
        .collect()
}

/// Any JSON fixture file.
pub fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{} unreadable: {e}", path.display()));
    serde_json::from_str(&text).expect("fixture is JSON")
}

/// Schemas and tool lists recorded from the fixtures' rendered prompts.
pub fn reference_schema(name: &str) -> Value {
    let all: Value = serde_json::from_str(include_str!("../data/reference_schemas.json"))
        .expect("schema data is JSON");
    all.get(name)
        .cloned()
        .unwrap_or_else(|| panic!("no schema {name}"))
}

/// The reference's function-tool schemas as the reference builds them
/// (undocumented parameters carry `"description": null`, and `"strict":
/// null`), which rendering prunes.
pub fn reference_tools(name: &str) -> Vec<Value> {
    let mut tools = reference_schema(name)
        .as_array()
        .cloned()
        .expect("a tool list");
    for t in &mut tools {
        let f = &mut t["function"];
        for p in f["parameters"]["properties"]
            .as_object_mut()
            .expect("properties")
            .values_mut()
        {
            p["description"] = Value::Null;
        }
        f["strict"] = Value::Null;
    }
    tools
}

/// The one documented deviation in a rendered prompt: the banner example
/// of a typed response format. Checks that the reference's line is exactly
/// our banner around its Python-repr example, then puts our example in.
pub fn with_our_example(expected: &str, ours: &ResponseFormat) -> String {
    let start = expected
        .find("ResponseFormat: \"")
        .expect("a ResponseFormat line");
    let end = expected[start..]
        .find('\n')
        .map_or(expected.len(), |e| start + e);
    let line = &expected[start..end];
    let head = "\\n```json\\n";
    let a = line.find(head).expect("banner example start") + head.len();
    let b = line.find("\\n```No triple").expect("banner example end");
    let python_example = &line[a..b];
    assert_eq!(
        line,
        minimal_yaml_stripped(&json!({"ResponseFormat": banner_with_example(python_example)})),
        "the reference banner differs from ours beyond its example"
    );
    let ours_line = minimal_yaml_stripped(&json!({"ResponseFormat": ours.banner()}));
    format!("{}{}{}", &expected[..start], ours_line, &expected[end..])
}

/// Splits ReAct's token-usage note off a message text and checks that our
/// formatter writes it identically for the same numbers.
pub fn split_token_note(text: &str) -> (&str, String) {
    let at = text
        .find("\n\nEstimated Current Token Usage: ")
        .expect("a token usage note");
    let note = &text[at..];
    let numbers = note
        .trim_start()
        .trim_start_matches("Estimated Current Token Usage: ");
    let (n, w) = numbers.split_once('/').expect("tokens/window");
    let n: u64 = n.parse().expect("token count");
    let w: u64 = w.replace(',', "").parse().expect("window");
    assert_eq!(token_usage_note(n, Some(w)), note);
    (&text[..at], note.to_owned())
}
