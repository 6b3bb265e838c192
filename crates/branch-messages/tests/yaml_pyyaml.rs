//! The minimal-YAML emitter against PyYAML 6.0.3 output recorded for 600+
//! values (strings that probe every quoting rule, nested containers,
//! numbers, pruning). The recorder is the reference's own dumper settings.

use branch_messages::yaml::minimal_yaml;
use serde_json::Value;

/// Inputs where lionagi-rs knowingly writes different (equally valid)
/// YAML: single-line strings holding U+0085/U+2028/U+2029 (PyYAML
/// single-quotes them across lines; lionagi-rs double-quotes).
fn known_deviation(v: &Value) -> bool {
    match v {
        Value::String(s) => {
            !s.contains('\n')
                && s.chars()
                    .any(|c| matches!(c, '\u{85}' | '\u{2028}' | '\u{2029}'))
        }
        Value::Array(a) => a.iter().any(known_deviation),
        Value::Object(o) => o
            .iter()
            .any(|(k, v)| known_deviation(&Value::String(k.clone())) || known_deviation(v)),
        _ => false,
    }
}

#[test]
fn matches_pyyaml_byte_for_byte() {
    let cases: Vec<Value> =
        serde_json::from_str(include_str!("data/yaml_cases.json")).expect("test data parses");
    let mut checked = 0;
    let mut failures = Vec::new();
    for case in &cases {
        let value = &case["value"];
        if known_deviation(value) {
            continue;
        }
        let expected = case["yaml"].as_str().expect("yaml is text");
        let got = minimal_yaml(value);
        if got != expected {
            failures.push(format!(
                "{value}\n  expected {expected:?}\n  got      {got:?}"
            ));
        }
        checked += 1;
    }
    assert!(checked > 550, "only {checked} cases checked");
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
