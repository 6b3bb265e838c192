//! The capability block of the system prompt: its markers, its exact text,
//! and how one block is replaced or removed.

use serde_json::{Map, Value};

use crate::grant::{Grant, field_title};

/// Opens the capability block in the system prompt.
pub const CAP_BEGIN: &str = "<!-- lionagi:capabilities -->";
/// Closes the capability block.
pub const CAP_END: &str = "<!-- /lionagi:capabilities -->";

const INTRO: &str = "## Structured capabilities\n\n\
As you work, you may emit structured signals by including a fenced ```json code block in your reply. \
Each top-level key is a capability; include only those relevant to the current step \u{2014} you may emit \
several at once, or none. Keep your normal narration as usual; the JSON block is in addition to it, \
not a replacement.\n\n";

/// Sorts object keys recursively, except the children of `properties`
/// (field order is meaningful there), as Pydantic orders its schemas.
fn pydantic_sorted(value: &Value, parent_key: Option<&str>) -> Value {
    match value {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            if !matches!(parent_key, Some("properties") | Some("default")) {
                keys.sort();
            }
            let mut out = Map::new();
            for k in keys {
                out.insert(k.clone(), pydantic_sorted(&m[k], Some(k)));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(|v| pydantic_sorted(v, parent_key)).collect()),
        other => other.clone(),
    }
}

/// The schema shown to the model: `{"properties": ...}` plus `"$defs"`
/// when the grant has definitions. Each property carries its `name`, a
/// `title` (unless it is a `$ref`) and its description.
pub fn capabilities_schema(grant: &Grant) -> Value {
    let mut props = Map::new();
    for f in grant.fields() {
        let mut p = match f.schema() {
            Value::Object(m) => m.clone(),
            _ => Map::new(),
        };
        if let Some(d) = &f.description {
            p.insert("description".into(), Value::String(d.clone()));
        }
        p.insert("name".into(), Value::String(f.name().to_owned()));
        if !p.contains_key("$ref") {
            p.entry("title")
                .or_insert_with(|| Value::String(field_title(f.name())));
        }
        props.insert(
            f.name().to_owned(),
            pydantic_sorted(&Value::Object(p), None),
        );
    }
    let mut schema = Map::new();
    schema.insert("properties".into(), Value::Object(props));
    if !grant.defs().is_empty() {
        schema.insert(
            "$defs".into(),
            pydantic_sorted(&Value::Object(grant.defs().clone()), None),
        );
    }
    Value::Object(schema)
}

/// The block text for a grant (without the markers), exactly as the
/// reference renders it.
pub fn render_capabilities_prompt(grant: &Grant) -> String {
    let schema = serde_json::to_string_pretty(&capabilities_schema(grant))
        .unwrap_or_else(|_| "{}".to_owned());
    format!(
        "{INTRO}Allowed capability keys (emitting any other key is rejected): {}.\n\n\
         Each key's value must conform to this schema:\n\n```json\n{schema}\n```",
        grant.allowed().join(", ")
    )
}

/// The first balanced block: a `CAP_BEGIN` followed by a `CAP_END` with no
/// other marker between them. Byte range of the whole block.
fn balanced_block(text: &str) -> Option<(usize, usize)> {
    let first = text.find(CAP_BEGIN)?;
    let after = first + CAP_BEGIN.len();
    // The first END after a BEGIN closes a block; if there is none, no
    // later BEGIN can have one either.
    let end = text[after..].find(CAP_END).map(|i| i + after)?;
    // A later BEGIN before that END is the one it pairs with.
    let begin = text[after..end]
        .rfind(CAP_BEGIN)
        .map_or(first, |i| after + i);
    Some((begin, end + CAP_END.len()))
}

/// The text with one balanced capability block removed, or `None` when it
/// has none (a lone or unbalanced marker is left alone). Only the block
/// and the whitespace around it go: the text before and after are joined
/// by a blank line when both remain.
pub fn strip_capability_block(text: &str) -> Option<String> {
    let (start, end) = balanced_block(text)?;
    let before = text[..start].trim_end();
    let after = text[end..].trim_start();
    Some(match (before.is_empty(), after.is_empty()) {
        (true, _) => after.to_owned(),
        (false, true) => before.to_owned(),
        (false, false) => format!("{before}\n\n{after}"),
    })
}

/// The system text after a grant: `text` without its balanced block (if
/// any), then a blank line and the new marked block.
pub fn with_capability_block(text: &str, grant: &Grant) -> String {
    let block = format!(
        "{CAP_BEGIN}\n{}\n{CAP_END}",
        render_capabilities_prompt(grant)
    );
    let base = strip_capability_block(text).unwrap_or_else(|| text.to_owned());
    let base = base.trim_end();
    if base.trim().is_empty() {
        block
    } else {
        format!("{base}\n\n{block}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_innermost_balanced_pair() {
        let t = format!("A {CAP_BEGIN} B\n\n{CAP_BEGIN}\nblk\n{CAP_END}");
        assert_eq!(
            strip_capability_block(&t).unwrap(),
            format!("A {CAP_BEGIN} B")
        );
        let lone_end = format!("{CAP_END} keep {CAP_BEGIN}x{CAP_END} tail");
        assert_eq!(
            strip_capability_block(&lone_end).unwrap(),
            format!("{CAP_END} keep\n\ntail")
        );
        assert_eq!(strip_capability_block(&format!("x {CAP_BEGIN} y")), None);
        assert_eq!(
            strip_capability_block(&format!("x {CAP_END} y {CAP_BEGIN}")),
            None
        );
        assert_eq!(strip_capability_block("plain"), None);
    }
}
