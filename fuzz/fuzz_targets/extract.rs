//! Fuzzes fenced-JSON extraction and classification: any UTF-8 input must
//! be handled without a panic, and the fast scanner must agree with the
//! obvious one.

#![no_main]

use branch_capabilities::{FieldSpec, Grant, extract_emissions, fenced_json_blocks, parse_lenient};
use libfuzzer_sys::fuzz_target;

fn naive_blocks(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("```json") {
        let after = &rest[i + 7..];
        match after.find("```") {
            Some(j) => {
                out.push(after[..j].trim());
                rest = &after[j + 3..];
            }
            None => break,
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let grant = Grant::builder()
        .name("Fuzz")
        .field(FieldSpec::string("note"))
        .field(FieldSpec::integer("score"))
        .field(FieldSpec::array(
            "todo",
            serde_json::json!({"type": "string"}),
        ))
        .build()
        .expect("static grant is valid");
    let fast: Vec<&str> = fenced_json_blocks(text).collect();
    assert_eq!(fast, naive_blocks(text));
    let _ = parse_lenient(text);
    let ex = extract_emissions(text, &grant, "fuzz");
    for b in &ex.bundles {
        assert!(b.keys().all(|k| k == "note" || k == "score" || k == "todo"));
    }
});
