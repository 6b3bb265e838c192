//! How a branch is laid out in the store: its `to_dict` projection without
//! the messages (the *skeleton*), plus one row per message.
//!
//! A message row keeps the message's own `to_dict` JSON, its position in
//! the pile's `collections` (`seq`, insertion order) and its position in
//! the progression (`pos`, logical order): the two differ after a system
//! prompt is replaced, and both must come back for `to_dict` to be exact.
//! Loading writes the full `to_dict` document back as bytes and hands it
//! to `Branch::from_json_slice`, so messages are parsed once.

use std::collections::HashMap;
use std::io::Write;

use branch_core::{Branch, BranchError, ToDictOptions};
use serde_json::{Map, Value};
use uuid::Uuid;

/// What is written: everything `to_dict` would keep, with the configuration
/// `to_dict` leaves out by default (log and rate-limiter settings) kept so a
/// restored branch behaves the same.
pub(crate) fn save_options() -> ToDictOptions {
    ToDictOptions {
        include_log_config: true,
        include_processor_config: true,
        ..ToDictOptions::default()
    }
}

/// One stored message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MessageRow {
    /// The message id, hyphenated.
    pub id: String,
    /// Position in the progression.
    pub pos: i64,
    /// The message's `to_dict` JSON.
    pub body: String,
}

/// A branch ready to be written.
#[derive(Debug, Clone)]
pub(crate) struct SplitBranch {
    pub id: Uuid,
    pub name: Option<String>,
    /// `to_dict` JSON with `messages.collections`, `messages.progression.order`
    /// and the redundant top-level `system` removed.
    pub skeleton: String,
    /// Whether the branch has a curated view (`metadata.current_progression`).
    pub has_view: bool,
    /// Messages in `collections` order.
    pub rows: Vec<MessageRow>,
}

/// Splits a live branch.
pub(crate) fn split(branch: &Branch) -> Result<SplitBranch, BranchError> {
    let dict = branch.to_dict(&save_options())?;
    split_dict(dict, || {
        serde_json::to_value(branch.messages()).unwrap_or(Value::Null)
    })
    .map_err(|reason| BranchError::InvalidData {
        path: "messages".into(),
        reason,
    })
}

/// Splits a `to_dict` value. `empty_pile` gives the pile's full header when
/// `to_dict` wrote the bare empty form (which carries no pile id), so the
/// pile keeps its identity once messages are appended.
pub(crate) fn split_dict(
    mut dict: Value,
    empty_pile: impl FnOnce() -> Value,
) -> Result<SplitBranch, String> {
    let obj = dict
        .as_object_mut()
        .ok_or("a branch must be a JSON object")?;
    let id = obj
        .get("id")
        .and_then(Value::as_str)
        .and_then(|s| Uuid::parse_str(s).ok())
        .ok_or("`id` is missing or not a UUID")?;
    let name = obj.get("name").and_then(Value::as_str).map(str::to_owned);
    let has_view = obj
        .get("metadata")
        .and_then(|m| m.get("current_progression"))
        .is_some_and(|v| !v.is_null());
    // The pile's System is the system message; the copy is redundant.
    obj.shift_remove("system");

    let mut messages = match obj.shift_remove("messages") {
        Some(Value::Object(m)) => m,
        _ => return Err("`messages` is missing or not an object".into()),
    };
    if !messages.contains_key("id") {
        if let Value::Object(full) = empty_pile() {
            messages = full;
        }
    }
    let collections = match messages.get_mut("collections").map(Value::take) {
        Some(Value::Array(items)) => items,
        None | Some(Value::Null) => Vec::new(),
        Some(_) => return Err("`messages.collections` is not a list".into()),
    };
    let order = match messages
        .get_mut("progression")
        .and_then(|p| p.get_mut("order"))
        .map(Value::take)
    {
        Some(Value::Array(ids)) => ids,
        _ => Vec::new(),
    };
    let positions: HashMap<&str, i64> = order
        .iter()
        .enumerate()
        .filter_map(|(i, v)| Some((v.as_str()?, i as i64)))
        .collect();
    let mut rows = Vec::with_capacity(collections.len());
    for (seq, msg) in collections.iter().enumerate() {
        let mid = msg
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("message {seq} has no id"))?;
        let pos = positions.get(mid).copied().unwrap_or(seq as i64);
        let body = serde_json::to_string(msg).map_err(|e| e.to_string())?;
        rows.push(MessageRow {
            id: mid.to_owned(),
            pos,
            body,
        });
    }
    messages.insert("collections".into(), Value::Array(Vec::new()));
    if let Some(Value::Object(p)) = messages.get_mut("progression") {
        p.insert("order".into(), Value::Array(Vec::new()));
    }
    obj.insert("messages".into(), Value::Object(messages));
    let skeleton = serde_json::to_string(&dict).map_err(|e| e.to_string())?;
    Ok(SplitBranch {
        id,
        name,
        skeleton,
        has_view,
        rows,
    })
}

/// Writes the full `to_dict` document from a skeleton and its rows (in
/// `collections` order, each with its progression position).
pub(crate) fn assemble(skeleton: &str, rows: &[(String, i64, String)]) -> Result<Vec<u8>, String> {
    let skel: Map<String, Value> = serde_json::from_str(skeleton).map_err(|e| e.to_string())?;
    let body_len: usize = rows.iter().map(|r| r.2.len() + 40).sum();
    let mut out = Vec::with_capacity(skeleton.len() + body_len + 64);
    let mut order: Vec<(i64, &str)> = rows
        .iter()
        .map(|(id, pos, _)| (*pos, id.as_str()))
        .collect();
    order.sort_by_key(|(pos, _)| *pos);

    out.push(b'{');
    let mut first = true;
    for (k, v) in &skel {
        if !first {
            out.push(b',');
        }
        first = false;
        write_json(&mut out, k)?;
        out.push(b':');
        if k == "messages" {
            write_pile(&mut out, v, rows, &order)?;
        } else {
            write_json(&mut out, v)?;
        }
    }
    out.push(b'}');
    Ok(out)
}

fn write_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) -> Result<(), String> {
    serde_json::to_writer(&mut *out, v).map_err(|e| e.to_string())
}

fn write_pile(
    out: &mut Vec<u8>,
    header: &Value,
    rows: &[(String, i64, String)],
    order: &[(i64, &str)],
) -> Result<(), String> {
    let header = header
        .as_object()
        .ok_or("stored `messages` is not an object")?;
    out.extend_from_slice(b"{\"collections\":[");
    for (i, (_, _, body)) in rows.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(body.as_bytes());
    }
    out.extend_from_slice(b"],\"progression\":{\"order\":[");
    for (i, (_, id)) in order.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write!(out, "\"{id}\"").map_err(|e| e.to_string())?;
    }
    out.push(b']');
    if let Some(Value::Object(p)) = header.get("progression") {
        for (k, v) in p.iter().filter(|(k, _)| k.as_str() != "order") {
            out.push(b',');
            write_json(out, k)?;
            out.push(b':');
            write_json(out, v)?;
        }
    }
    out.push(b'}');
    for (k, v) in header
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "collections" | "progression"))
    {
        out.push(b',');
        write_json(out, k)?;
        out.push(b':');
        write_json(out, v)?;
    }
    out.push(b'}');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn split_then_assemble_keeps_both_orders() {
        let dict = json!({
            "id": "00000000-0000-4000-8000-000000000001",
            "name": "n",
            "messages": {
                "id": "00000000-0000-4000-8000-000000000002",
                "collections": [{"id": "a", "x": 1}, {"id": "b", "x": 2}],
                "progression": {"id": "p", "order": ["b", "a"], "name": null},
                "strict_type": false
            },
            "system": {"id": "b"},
            "chat_model": {}
        });
        let s = split_dict(dict.clone(), || Value::Null).unwrap();
        assert_eq!(
            s.rows
                .iter()
                .map(|r| (r.id.as_str(), r.pos))
                .collect::<Vec<_>>(),
            [("a", 1), ("b", 0)]
        );
        assert!(!s.skeleton.contains("\"x\""));
        let rows: Vec<_> = s.rows.into_iter().map(|r| (r.id, r.pos, r.body)).collect();
        let back: Value = serde_json::from_slice(&assemble(&s.skeleton, &rows).unwrap()).unwrap();
        let mut expected = dict;
        expected.as_object_mut().unwrap().shift_remove("system");
        assert_eq!(back, expected);
    }
}
