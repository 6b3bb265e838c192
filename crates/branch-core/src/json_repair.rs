//! Lenient JSON parsing for text written by a model, shared by the verbs'
//! parse-repair loop and the capability extraction: strict JSON first, then
//! a string-aware clean-up (single-quoted strings, trailing commas, bare
//! keys, Python's `True` / `False` / `None`), then closing brackets left
//! open. Every step is one linear pass; nesting deeper than `serde_json`'s
//! recursion limit (128) is an error, never a stack overflow.

// Parsing of stored data: nothing read from outside may panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use serde_json::Value;

fn container(v: Value) -> Option<Value> {
    matches!(v, Value::Object(_) | Value::Array(_)).then_some(v)
}

fn strict(s: &str) -> Option<Value> {
    serde_json::from_str(s).ok().and_then(container)
}

/// Parses `s` as an object or array, leniently; `None` when even the
/// lenient forms fail. An unterminated string is a failure: a block that
/// was cut inside a string is not trusted.
pub fn parse_lenient(s: &str) -> Option<Value> {
    parse(s, false)
}

/// [`parse_lenient`] for a reply that may have been cut off: a string left
/// open at the end is closed too, before the brackets.
pub fn parse_truncated(s: &str) -> Option<Value> {
    parse(s, true)
}

fn parse(s: &str, close_strings: bool) -> Option<Value> {
    if let Some(v) = strict(s) {
        return Some(v);
    }
    let cleaned = clean(s);
    if let Some(v) = strict(&cleaned) {
        return Some(v);
    }
    complete_brackets(&cleaned, close_strings).and_then(|c| strict(&c))
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Single-quoted strings become double-quoted, a comma before `]` or `}`
/// is dropped, a bare identifier key (after `{` or `,`, before `:`) is
/// quoted, and Python's `True` / `False` / `None` become JSON literals.
/// Text inside strings is kept.
fn clean(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len() + 8);
    let mut last_sig: Option<char> = None;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' => {
                let quote = c;
                out.push('"');
                i += 1;
                while i < chars.len() {
                    let d = chars[i];
                    if d == '\\' && i + 1 < chars.len() {
                        let e = chars[i + 1];
                        if quote == '\'' && e == '\'' {
                            out.push('\'');
                        } else {
                            out.push('\\');
                            out.push(e);
                        }
                        i += 2;
                        continue;
                    }
                    if d == quote {
                        out.push('"');
                        break;
                    }
                    if quote == '\'' && d == '"' {
                        out.push_str("\\\"");
                    } else {
                        out.push(d);
                    }
                    i += 1;
                }
                // Past the closing quote; an unterminated string stays
                // unterminated, so it still fails to parse.
                i += 1;
                last_sig = Some('"');
            }
            ',' => {
                let mut j = i + 1;
                while j < chars.len() && chars[j].is_whitespace() {
                    j += 1;
                }
                if !matches!(chars.get(j), Some(']') | Some('}')) {
                    out.push(',');
                    last_sig = Some(',');
                }
                i += 1;
            }
            c if is_ident_start(c) => {
                let start = i;
                while i < chars.len() && is_ident(chars[i]) {
                    i += 1;
                }
                let mut j = i;
                while j < chars.len() && chars[j].is_whitespace() {
                    j += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let key_position = matches!(last_sig, Some('{') | Some(','));
                match word.as_str() {
                    _ if key_position && chars.get(j) == Some(&':') => {
                        out.push('"');
                        out.push_str(&word);
                        out.push('"');
                    }
                    "True" => out.push_str("true"),
                    "False" => out.push_str("false"),
                    "None" => out.push_str("null"),
                    _ => out.push_str(&word),
                }
                last_sig = Some('a');
            }
            c => {
                out.push(c);
                if !c.is_whitespace() {
                    last_sig = Some(c);
                }
                i += 1;
            }
        }
    }
    out
}

/// Appends the closers of brackets left open (and of a string left open,
/// when `close_strings`). A closer that does not match the innermost open
/// bracket, a surplus closer, or otherwise an unterminated string is an
/// error.
fn complete_brackets(s: &str, close_strings: bool) -> Option<String> {
    let mut stack = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    for c in s.chars() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => stack.push('}'),
            '[' => stack.push(']'),
            // The guard pops: a matching closer falls through to `_`.
            '}' | ']' if stack.pop() != Some(c) => return None,
            _ => {}
        }
    }
    if (in_string && !close_strings) || (stack.is_empty() && !in_string) {
        return None;
    }
    let mut out = String::with_capacity(s.len() + stack.len() + 1);
    out.push_str(s);
    if in_string {
        out.push('"');
    }
    out.extend(stack.into_iter().rev());
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lenient_forms_of_the_reference() {
        assert_eq!(parse_lenient(r#"{"v": "12"}"#), Some(json!({"v": "12"})));
        assert_eq!(parse_lenient("{'v': 3,}"), Some(json!({"v": 3})));
        assert_eq!(parse_lenient("{v: 4}"), Some(json!({"v": 4})));
        assert_eq!(parse_lenient(r#"{"v": 10"#), Some(json!({"v": 10})));
        assert_eq!(parse_lenient(r#"[{"v": 9}]"#), Some(json!([{"v": 9}])));
        assert_eq!(
            parse_lenient("{'s': 'it\\'s \"q\"'}"),
            Some(json!({"s": "it's \"q\""}))
        );
        assert_eq!(
            parse_lenient("[true, false, null,]"),
            Some(json!([true, false, null]))
        );
        assert_eq!(
            parse_lenient("{a: {b: [1, 2"),
            Some(json!({"a": {"b": [1, 2]}}))
        );
    }

    #[test]
    fn python_literals_and_cut_off_replies() {
        assert_eq!(
            parse_lenient("{'ok': True, 'v': None, 'w': False}"),
            Some(json!({"ok": true, "v": null, "w": false}))
        );
        assert_eq!(parse_lenient(r#"{"answer": "Par"#), None);
        assert_eq!(
            parse_truncated(r#"{"answer": "Par"#),
            Some(json!({"answer": "Par"}))
        );
        assert_eq!(parse_truncated("{'a': [1, 2"), Some(json!({"a": [1, 2]})));
        // Words inside strings are text, not literals.
        assert_eq!(parse_lenient("{'s': 'True'}"), Some(json!({"s": "True"})));
    }

    #[test]
    fn failures() {
        assert_eq!(parse_lenient("The answer is {\"v\": 11} ok"), None);
        assert_eq!(parse_lenient("12"), None);
        assert_eq!(parse_lenient("{\"a\": 1}}"), None);
        assert_eq!(parse_lenient("{\"a\": \"unterminated"), None);
        assert_eq!(parse_lenient(&"[".repeat(100_000)), None);
    }
}
