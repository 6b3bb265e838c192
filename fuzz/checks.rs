//! The properties the fuzz targets check, one function per parser of
//! untrusted bytes. Shared by the cargo-fuzz targets (nightly, libFuzzer)
//! and the stable smoke test `tests/fuzz_smoke.rs`, which replays the
//! seeds in `fuzz/seeds/` and mutations of them through the same
//! functions. Each function panics only when a property is broken.

#![allow(dead_code)]

use branch_core::json_repair::{parse_lenient, parse_truncated};
use branch_core::{Branch, ToDictOptions};
use branch_models::json_grammar::Grammar;
use serde_json::Value;

/// Conversation documents: neither entry point panics on any bytes, and a
/// document that loads is a fixed point after one normalisation:
/// `to_dict(from_dict(to_dict(b))) == to_dict(b)`.
pub fn branch_document(data: &[u8]) {
    let _ = Branch::from_json_slice(data);
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let Ok(branch) = Branch::from_dict(&value) else {
        return;
    };
    let opts = ToDictOptions::default();
    let first = branch.to_dict(&opts).expect("a loaded branch serializes");
    let again = Branch::from_dict(&first).expect("a written branch loads");
    let second = again.to_dict(&opts).expect("a reloaded branch serializes");
    assert_eq!(first, second, "to_dict / from_dict is not a fixed point");
    let bytes = branch
        .to_json_vec(&opts)
        .expect("a loaded branch writes bytes");
    let from_bytes = Branch::from_json_slice(&bytes).expect("written bytes load");
    assert_eq!(
        from_bytes.to_dict(&opts).expect("serializes"),
        first,
        "the bytes entry point disagrees with from_dict"
    );
}

/// The JSON repair: a result is always an object or an array, and text
/// that already is one is returned unchanged.
pub fn json_repair(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for parsed in [parse_lenient(text), parse_truncated(text)]
        .into_iter()
        .flatten()
    {
        assert!(parsed.is_object() || parsed.is_array(), "{parsed}");
    }
    if let Ok(strict @ (Value::Object(_) | Value::Array(_))) = serde_json::from_str::<Value>(text) {
        assert_eq!(parse_lenient(text).as_ref(), Some(&strict));
        assert_eq!(parse_truncated(text).as_ref(), Some(&strict));
    }
}

/// Tool-call arguments: accepted exactly when the text is a JSON object
/// (or blank, or `null`) within the cap, never repaired into something
/// the model did not send; a refusal is a bounded message; the verbs'
/// readers agree with it.
pub fn tool_arguments(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = branch_actions::parse_arguments(text);
    let strict = serde_json::from_str::<Value>(text);
    match &parsed {
        Ok(args) => {
            if !text.trim().is_empty() {
                match strict.as_ref().expect("accepted text is JSON") {
                    Value::Object(m) => assert_eq!(m, args),
                    Value::Null => assert!(args.is_empty()),
                    other => panic!("accepted a non-object: {other}"),
                }
            }
        }
        Err(reason) => {
            assert!(reason.len() < 2048, "an unbounded refusal");
            let oversized = text.len() > branch_actions::limits::MAX_ARGUMENTS_BYTES;
            assert!(
                oversized || !matches!(strict, Ok(Value::Object(_)) | Ok(Value::Null)),
                "refused a JSON object: {reason}"
            );
        }
    }
    let call = branch_actions::ToolCall::from_text("f", text);
    assert_eq!(call.malformed.is_some(), parsed.is_err());
    if call.malformed.is_some() {
        assert!(call.arguments.is_empty(), "invented arguments");
    }
    let request = serde_json::json!({"function": "f", "arguments": text});
    let from_request = branch_operations::tool_call_from_value(&request).expect("a string is read");
    assert_eq!(from_request, call);
    // Free text a model wrote (the structured path's extraction).
    let _ = branch_operations::fuzzy::extract_json(text);
}

/// The constrained-decoding grammar: the input is a schema, a zero byte,
/// then a document. Compiling never panics; feeding the document whole
/// or byte by byte gives the same state; `accepts` agrees with `feed`;
/// and a document the grammar says is complete is JSON. With no zero
/// byte the whole input is a document for the any-object grammar.
pub fn json_grammar(data: &[u8]) {
    let (grammar, doc) = match data.iter().position(|&b| b == 0) {
        Some(i) => {
            let Ok(schema) = serde_json::from_slice::<Value>(&data[..i]) else {
                return;
            };
            let Ok(g) = Grammar::compile(&schema) else {
                return;
            };
            (g, &data[i + 1..])
        }
        None => (Grammar::any_object(), data),
    };
    let start = grammar.start();
    let mut whole = start.clone();
    let whole_ok = whole.feed(&grammar, doc);
    assert_eq!(start.accepts(&grammar, doc), whole_ok);
    let mut stepwise = start.clone();
    let mut step_ok = true;
    for b in doc {
        if !stepwise.feed(&grammar, std::slice::from_ref(b)) {
            step_ok = false;
            break;
        }
    }
    assert_eq!(whole_ok, step_ok, "whole and byte-wise feeding disagree");
    if !whole_ok {
        assert!(whole.is_dead());
        return;
    }
    assert_eq!(whole, stepwise);
    assert!(!whole.is_dead());
    if whole.is_complete() {
        assert!(whole.can_end());
    }
    if whole.can_end() {
        if let Err(e) = serde_json::from_slice::<Value>(doc) {
            // serde_json refuses numbers beyond f64 and lone surrogate
            // escapes; the JSON grammar (RFC 8259) allows both.
            let why = e.to_string();
            assert!(
                why.contains("number out of range") || why.contains("surrogate"),
                "the grammar accepted text that is not JSON: {e}: {:?}",
                String::from_utf8_lossy(doc)
            );
        }
    }
}
