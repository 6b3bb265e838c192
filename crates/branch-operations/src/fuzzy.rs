//! Fuzzy JSON: finding a JSON object in model text (with repair of the
//! usual breakage) and matching its keys to the expected field names
//! (operations.md §4.1).

use serde_json::{Map, Value};

/// Texts over this size are refused rather than scanned.
const MAX_INPUT: usize = 10 * 1024 * 1024;

/// The first JSON object in `text`: the whole text parsed (with repairs),
/// else the first parseable ```` ```json ```` fenced block. A top-level
/// array yields its first object. `None` when nothing is found.
pub fn extract_json(text: &str) -> Option<Map<String, Value>> {
    if text.len() > MAX_INPUT {
        return None;
    }
    if let Some(v) = parse_repaired(text) {
        return first_object(v);
    }
    for block in fenced_json_blocks(text) {
        if let Some(v) = parse_repaired(block) {
            if let Some(o) = first_object(v) {
                return Some(o);
            }
        }
    }
    None
}

fn first_object(v: Value) -> Option<Map<String, Value>> {
    match v {
        Value::Object(o) => Some(o),
        Value::Array(items) => items.into_iter().find_map(|i| match i {
            Value::Object(o) => Some(o),
            _ => None,
        }),
        _ => None,
    }
}

/// The contents of ```` ```json ... ``` ```` blocks (lower-case tag only),
/// trimmed.
fn fenced_json_blocks(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("```json") {
        let after = &rest[start + 7..];
        let Some(end) = after.find("```") else { break };
        out.push(after[..end].trim());
        rest = &after[end + 3..];
    }
    out
}

/// Parses an object or array leniently (`branch_core::json_repair`),
/// closing a string the reply left open; text that does not open with a
/// bracket is not JSON here.
fn parse_repaired(text: &str) -> Option<Value> {
    let t = text.trim();
    if !(t.starts_with('{') || t.starts_with('[')) {
        return None;
    }
    branch_core::json_repair::parse_truncated(t)
}

pub use crate::similarity::{Similarity, jaro_winkler};

/// What to do with keys that match no expected field, and with fields
/// nothing matched (the reference's `handle_unmatched`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unmatched {
    /// Keep unmatched input keys as they are.
    #[default]
    Ignore,
    /// Fail on an unmatched input key.
    Raise,
    /// Drop unmatched input keys.
    Remove,
    /// Fill missing fields with the fill value, keep unmatched keys.
    Fill,
    /// Fill missing fields with the fill value, drop unmatched keys.
    Force,
}

/// Renames the keys of `input` to the expected names: exact matches first,
/// then each remaining key to the most similar remaining expected name
/// when the similarity reaches `threshold`. Returns the error text for
/// [`Unmatched::Raise`].
pub fn match_keys(
    input: Map<String, Value>,
    expected: &[String],
    threshold: f64,
    unmatched: Unmatched,
    fill: &Value,
) -> Result<Map<String, Value>, String> {
    let similar = Similar {
        measure: Similarity::JaroWinkler,
        threshold,
    };
    match_keys_filling(input, expected, similar, unmatched, |_| fill.clone())
}

/// When a key is similar enough to an expected name: its `measure`, case
/// aside, reaches `threshold`. A threshold above 1 matches exact keys only.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Similar {
    /// How keys are compared.
    pub measure: Similarity,
    /// The least score that matches.
    pub threshold: f64,
}

/// [`match_keys`] with any measure, where each field nothing matched gets
/// `fill(name)` under [`Unmatched::Fill`] and [`Unmatched::Force`]. A key
/// goes to the most similar remaining name, the first declared among
/// equals; the policy applies whatever the threshold. With no expected
/// field, the input is kept as it is.
pub fn match_keys_filling(
    input: Map<String, Value>,
    expected: &[String],
    similar: Similar,
    unmatched: Unmatched,
    fill: impl Fn(&str) -> Value,
) -> Result<Map<String, Value>, String> {
    if expected.is_empty() {
        return Ok(input);
    }
    let mut remaining: Vec<&String> = expected
        .iter()
        .filter(|e| !input.contains_key(e.as_str()))
        .collect();
    let mut out = Map::new();
    let mut leftovers = Vec::new();
    for (k, v) in input {
        if expected.contains(&k) {
            out.insert(k, v);
            continue;
        }
        let key = k.to_lowercase();
        let mut best: Option<(usize, f64)> = None;
        for (i, e) in remaining.iter().enumerate() {
            let score = similar.measure.score(&key, &e.to_lowercase());
            if score >= similar.threshold && best.is_none_or(|(_, b)| score > b) {
                best = Some((i, score));
            }
        }
        match best {
            Some((i, _)) => {
                let name = remaining.remove(i);
                out.insert(name.clone(), v);
            }
            None => leftovers.push((k, v)),
        }
    }
    match unmatched {
        Unmatched::Raise if !leftovers.is_empty() => {
            let names: Vec<_> = leftovers.iter().map(|(k, _)| k.as_str()).collect();
            return Err(format!("unmatched keys: {}", names.join(", ")));
        }
        Unmatched::Ignore | Unmatched::Fill | Unmatched::Raise => out.extend(leftovers),
        Unmatched::Remove | Unmatched::Force => {}
    }
    if matches!(unmatched, Unmatched::Fill | Unmatched::Force) {
        for e in expected {
            if !out.contains_key(e) {
                out.insert(e.clone(), fill(e));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn v(t: &str) -> Option<Value> {
        extract_json(t).map(Value::Object)
    }

    #[test]
    fn extraction_matches_the_reference_table() {
        assert_eq!(v(r#"{"v": "12"}"#), Some(json!({"v": "12"})));
        assert_eq!(v("{'v': 3,}"), Some(json!({"v": 3})));
        assert_eq!(v("{v: 4}"), Some(json!({"v": 4})));
        assert_eq!(
            v("```json\n{\"v\": 5}\n``` trailing"),
            Some(json!({"v": 5}))
        );
        assert_eq!(
            v("```json\n{\"v\": 6}\n```\n```json\n{\"v\": 7}\n```"),
            Some(json!({"v": 6}))
        );
        assert_eq!(v(r#"[{"v": 9}]"#), Some(json!({"v": 9})));
        assert_eq!(v(r#"{"v": 10"#), Some(json!({"v": 10})));
        assert_eq!(v(r#"The answer is {"v": 11} ok"#), None);
        assert_eq!(v("```\n{\"v\": 12}\n```"), None);
        assert_eq!(v("{'a': 'it\\'s'}"), Some(json!({"a": "it's"})));
        assert_eq!(v("{\"a\": 1]}"), None);
    }

    #[test]
    fn fuzzy_keys() {
        assert!(jaro_winkler("Answer", "answer") >= 0.85);
        assert!((jaro_winkler("MARTHA", "MARHTA") - 0.9611).abs() < 1e-3);
        let exp = vec!["a".to_owned(), "b".to_owned()];
        let got = match_keys(
            json!({"a": 1, "bb": "x"}).as_object().unwrap().clone(),
            &exp,
            0.85,
            Unmatched::Force,
            &Value::Null,
        )
        .unwrap();
        assert_eq!(Value::Object(got), json!({"a": 1, "b": "x"}));
        let exp = vec!["title".to_owned(), "year".to_owned(), "author".to_owned()];
        let got = match_keys(
            json!({"title": "Dune", "Year": 1965})
                .as_object()
                .unwrap()
                .clone(),
            &exp,
            0.85,
            Unmatched::Force,
            &Value::Null,
        )
        .unwrap();
        assert_eq!(
            Value::Object(got),
            json!({"title": "Dune", "year": 1965, "author": null})
        );
        assert!(
            match_keys(
                json!({"zzz": 1}).as_object().unwrap().clone(),
                &exp,
                0.85,
                Unmatched::Raise,
                &Value::Null
            )
            .is_err()
        );
    }
}
