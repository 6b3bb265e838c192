//! Reading the arguments of a tool call that a model sent as JSON text
//! (native tool calls, or `arguments` given as a string in
//! `action_requests`).
//!
//! The text must be one JSON object. Nothing is repaired or defaulted: a
//! call whose arguments cannot be read is answered to the model as a failed
//! call carrying the reason, and the tool never runs with arguments the
//! model did not send.

use serde_json::{Map, Value};

use crate::limits::{MAX_ARGUMENTS_BYTES, QUOTED_ARGUMENTS_CHARS};

/// The arguments of a call from their JSON text. An empty (or blank) text
/// and JSON `null` are no arguments, as providers send for a function
/// without parameters. Anything else must be a JSON object, at most
/// [`MAX_ARGUMENTS_BYTES`] long; the error says what is wrong and quotes
/// the start of the text.
pub fn parse_arguments(text: &str) -> Result<Map<String, Value>, String> {
    if text.len() > MAX_ARGUMENTS_BYTES {
        return Err(format!(
            "the arguments are {} bytes, over the limit of {MAX_ARGUMENTS_BYTES} bytes",
            text.len()
        ));
    }
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(Value::Null) => Ok(Map::new()),
        Ok(other) => Err(format!(
            "the arguments must be a JSON object, not {} (received: {})",
            kind(&other),
            quoted(text)
        )),
        Err(e) => Err(format!(
            "the arguments are not valid JSON: {e} (received: {})",
            quoted(text)
        )),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The start of `text`, cut on a character boundary.
fn quoted(text: &str) -> String {
    let mut cut: String = text.chars().take(QUOTED_ARGUMENTS_CHARS).collect();
    if cut.len() < text.len() {
        cut.push_str(" …");
    }
    format!("`{cut}`")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_object_is_read_and_blank_or_null_is_no_arguments() {
        assert_eq!(
            parse_arguments(r#"{"a": 1}"#).unwrap(),
            json!({"a": 1}).as_object().unwrap().clone()
        );
        assert!(parse_arguments("").unwrap().is_empty());
        assert!(parse_arguments("  \n").unwrap().is_empty());
        assert!(parse_arguments("null").unwrap().is_empty());
    }

    #[test]
    fn truncated_or_broken_json_is_refused_with_the_parse_error() {
        let e = parse_arguments(r#"{"a": 1, "b": "x"#).unwrap_err();
        assert!(e.contains("not valid JSON"), "{e}");
        assert!(e.contains("EOF while parsing"), "{e}");
        assert!(e.contains(r#"`{"a": 1, "b": "x`"#), "{e}");
        let e = parse_arguments("a=1").unwrap_err();
        assert!(e.contains("not valid JSON"), "{e}");
        // Repairable-looking text is not repaired.
        assert!(parse_arguments("{'a': 1}").is_err());
        assert!(parse_arguments(r#"{"a": 1,}"#).is_err());
    }

    #[test]
    fn a_value_that_is_not_an_object_is_refused() {
        let e = parse_arguments("[1, 2]").unwrap_err();
        assert!(e.contains("not an array"), "{e}");
        let e = parse_arguments(r#""{\"a\": 1}""#).unwrap_err();
        assert!(e.contains("not a string"), "{e}");
    }

    #[test]
    fn oversized_text_is_refused_unparsed_and_the_quote_is_bounded() {
        let big = format!("{{\"a\": \"{}\"}}", "x".repeat(MAX_ARGUMENTS_BYTES));
        let e = parse_arguments(&big).unwrap_err();
        assert!(e.contains("over the limit"), "{e}");
        let long = format!("{{\"é\": \"{}", "é".repeat(1000));
        let e = parse_arguments(&long).unwrap_err();
        assert!(e.len() < 600, "{}", e.len());
        assert!(e.contains(" …`"), "{e}");
    }
}
