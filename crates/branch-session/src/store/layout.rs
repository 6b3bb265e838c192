//! How a branch is laid out in the store: its `to_dict` projection without
//! the messages (the *skeleton*), plus one row per message.
//!
//! A message row keeps the message's own `to_dict` JSON, its position in
//! the pile's `collections` (`seq`, insertion order) and its position in
//! the progression (`pos`, logical order): the two differ after a system
//! prompt is replaced, and both must come back for `to_dict` to be exact.
//! Loading writes the full `to_dict` document back as bytes and hands it
//! to `Branch::from_json_slice`, so messages are parsed once.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write;

use branch_core::{Branch, BranchError, ToDictOptions};
use indexmap::IndexMap;
use serde_json::value::RawValue;
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
    /// A digest of `body` ([`body_hash`]), so an unchanged message is
    /// not rewritten.
    pub hash: i64,
    /// The message's `to_dict` JSON.
    pub body: String,
}

/// The digest stored beside a message body: the first 8 bytes of its
/// SHA-256, little-endian. A save skips a row whose digest (and place)
/// match, so an edit must not be able to match the stored body's digest.
/// std's `DefaultHasher::new()` was SipHash under a key fixed at zero,
/// whose rounds anyone can run backwards: an edit could be written to hash
/// like the body it replaces and be silently left unsaved. Finding a body
/// for a given 64-bit SHA-256 prefix takes about 2^64 tries. SHA-256 is
/// also the same in every build, where `DefaultHasher` may change between
/// Rust releases (rows whose digest no longer matches are rewritten once).
pub(crate) fn body_hash(body: &str) -> i64 {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(body.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_le_bytes(first)
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

/// Splits a live branch. The branch is written once with
/// `Branch::to_json_vec` and cut into pieces without building a JSON tree:
/// each message body is the exact text `to_dict` produces for it.
pub(crate) fn split(branch: &Branch) -> Result<SplitBranch, BranchError> {
    let bytes = branch.to_json_vec(&save_options())?;
    split_json(&bytes, || serde_json::to_string(branch.messages()).ok()).map_err(|reason| {
        BranchError::InvalidData {
            path: "messages".into(),
            reason,
        }
    })
}

type RawMap<'a> = IndexMap<Cow<'a, str>, &'a RawValue>;

fn raw_map(text: &str) -> Result<RawMap<'_>, String> {
    serde_json::from_str(text).map_err(|e| e.to_string())
}

/// Splits `to_dict` JSON text. `empty_pile` gives the pile's full JSON when
/// `to_dict` wrote the bare empty form (which carries no pile id), so the
/// pile keeps its identity once messages are appended.
pub(crate) fn split_json(
    bytes: &[u8],
    empty_pile: impl FnOnce() -> Option<String>,
) -> Result<SplitBranch, String> {
    #[derive(serde::Deserialize)]
    struct IdOnly<'a> {
        #[serde(borrow)]
        id: Cow<'a, str>,
    }

    let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
    let top = raw_map(text).map_err(|e| format!("a branch must be a JSON object: {e}"))?;
    let id = top
        .get("id")
        .and_then(|v| serde_json::from_str::<Cow<'_, str>>(v.get()).ok())
        .and_then(|s| Uuid::parse_str(&s).ok())
        .ok_or("`id` is missing or not a UUID")?;
    let name = match top.get("name") {
        Some(v) => {
            serde_json::from_str::<Option<String>>(v.get()).map_err(|e| format!("`name`: {e}"))?
        }
        None => None,
    };
    let has_view = match top.get("metadata") {
        Some(m) => raw_map(m.get())
            .map_err(|e| format!("`metadata`: {e}"))?
            .get("current_progression")
            .is_some_and(|v| v.get() != "null"),
        None => false,
    };

    let filled;
    let mut pile_text = top.get("messages").ok_or("`messages` is missing")?.get();
    let mut pile = raw_map(pile_text).map_err(|e| format!("`messages`: {e}"))?;
    if !pile.contains_key("id") {
        if let Some(full) = empty_pile() {
            filled = full;
            pile_text = &filled;
            pile = raw_map(pile_text).map_err(|e| format!("`messages`: {e}"))?;
        }
    }
    let collections: Vec<&RawValue> = match pile.get("collections") {
        Some(v) => {
            serde_json::from_str(v.get()).map_err(|e| format!("`messages.collections`: {e}"))?
        }
        None => Vec::new(),
    };
    let progression: RawMap<'_> = match pile.get("progression") {
        Some(v) if v.get().starts_with('{') => {
            raw_map(v.get()).map_err(|e| format!("`messages.progression`: {e}"))?
        }
        _ => IndexMap::new(),
    };
    let order: Vec<Cow<'_, str>> = match progression.get("order") {
        Some(v) => serde_json::from_str(v.get())
            .map_err(|e| format!("`messages.progression.order`: {e}"))?,
        None => Vec::new(),
    };
    let positions: HashMap<&str, i64> = order
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_ref(), i as i64))
        .collect();

    let mut rows = Vec::with_capacity(collections.len());
    for (seq, msg) in collections.iter().enumerate() {
        let body = msg.get();
        let IdOnly { id: mid } =
            serde_json::from_str(body).map_err(|e| format!("message {seq}: {e}"))?;
        let pos = positions.get(mid.as_ref()).copied().unwrap_or(seq as i64);
        rows.push(MessageRow {
            id: mid.into_owned(),
            pos,
            hash: body_hash(body),
            body: body.to_owned(),
        });
    }

    // The skeleton: every top-level entry as written, but the pile without
    // its items and order, and without the redundant top-level `system`.
    let mut out = Vec::with_capacity(text.len().min(4096));
    out.push(b'{');
    let mut first = true;
    for (k, v) in &top {
        if k == "system" {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        write_json(&mut out, k.as_ref())?;
        out.push(b':');
        if k == "messages" {
            write_empty_pile(&mut out, &pile, &progression)?;
        } else {
            out.extend_from_slice(v.get().as_bytes());
        }
    }
    out.push(b'}');
    let skeleton = String::from_utf8(out).map_err(|e| e.to_string())?;
    Ok(SplitBranch {
        id,
        name,
        skeleton,
        has_view,
        rows,
    })
}

fn write_empty_pile(
    out: &mut Vec<u8>,
    pile: &RawMap<'_>,
    progression: &RawMap<'_>,
) -> Result<(), String> {
    out.push(b'{');
    let mut first = true;
    for (k, v) in pile {
        if !first {
            out.push(b',');
        }
        first = false;
        write_json(out, k.as_ref())?;
        out.push(b':');
        match k.as_ref() {
            "collections" => out.extend_from_slice(b"[]"),
            "progression" if !progression.is_empty() => {
                out.push(b'{');
                for (i, (pk, pv)) in progression.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write_json(out, pk.as_ref())?;
                    out.push(b':');
                    if pk == "order" {
                        out.extend_from_slice(b"[]");
                    } else {
                        out.extend_from_slice(pv.get().as_bytes());
                    }
                }
                out.push(b'}');
            }
            _ => out.extend_from_slice(v.get().as_bytes()),
        }
    }
    out.push(b'}');
    Ok(())
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

/// Appends new message ids to the stored curated view, as the live branch
/// does when a message is added.
pub(crate) fn extend_view(skeleton: &str, added: &[String]) -> Result<String, String> {
    let mut v: Value = serde_json::from_str(skeleton).map_err(|e| e.to_string())?;
    let view = v
        .get_mut("metadata")
        .and_then(|m| m.get_mut("current_progression"))
        .ok_or("the stored view is missing")?;
    let order = match view {
        Value::Array(a) => a,
        Value::Object(o) => match o.get_mut("order") {
            Some(Value::Array(a)) => a,
            _ => return Err("the stored view has no order".into()),
        },
        _ => return Err("the stored view is not a progression".into()),
    };
    order.extend(added.iter().cloned().map(Value::String));
    serde_json::to_string(&v).map_err(|e| e.to_string())
}

/// Refuses metadata that is not one JSON object before anything is
/// written: the caller's mistake, not damage in the store.
pub(crate) fn check_metadata(branch_id: Uuid, metadata: &str) -> Result<(), super::StoreError> {
    match serde_json::from_str::<&RawValue>(metadata) {
        Ok(raw) if raw.get().trim_start().starts_with('{') => Ok(()),
        _ => Err(super::StoreError::Branch {
            id: branch_id,
            source: BranchError::InvalidData {
                path: "metadata".into(),
                reason: "the metadata to store is not a JSON object".into(),
            },
        }),
    }
}

/// The skeleton with its `metadata` replaced by `metadata` (the branch's
/// `Branch::metadata_json`, a JSON object), every other entry kept as
/// stored, in its place.
pub(crate) fn with_metadata(skeleton: &str, metadata: &str) -> Result<String, String> {
    let metadata: &RawValue = serde_json::from_str(metadata).map_err(|e| e.to_string())?;
    if !metadata.get().trim_start().starts_with('{') {
        return Err("the branch's metadata is not a JSON object".into());
    }
    let mut map = raw_map(skeleton)?;
    match map.get_mut("metadata") {
        Some(slot) => *slot = metadata,
        None => {
            map.insert(Cow::Borrowed("metadata"), metadata);
        }
    }
    serde_json::to_string(&map).map_err(|e| e.to_string())
}

/// A turn's messages as `(id, body)` rows; a System message is refused
/// (a new system prompt moves to the front, which only `save` writes).
pub(crate) fn turn_rows(
    branch_id: Uuid,
    messages: &[branch_core::Message],
) -> Result<Vec<(String, String)>, super::StoreError> {
    let mut rows = Vec::with_capacity(messages.len());
    for m in messages {
        if m.kind() == branch_core::MessageKind::System {
            return Err(super::StoreError::SystemInTurn {
                branch_id,
                message_id: m.id(),
            });
        }
        let body = m
            .to_value()
            .map_err(|source| super::StoreError::Branch {
                id: branch_id,
                source,
            })?
            .to_string();
        rows.push((m.id().to_string(), body));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The digest is SHA-256's (the standard's "abc" vector begins
    /// `ba7816bf8f01cfea`), so every build and every process stores the
    /// same one for the same body.
    #[test]
    fn the_body_digest_is_the_first_eight_bytes_of_sha256() {
        assert_eq!(
            body_hash("abc"),
            i64::from_le_bytes([0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea])
        );
        assert_eq!(body_hash("abc"), -1_527_000_031_757_436_742);
        assert_ne!(body_hash(r#"{"id":"x"}"#), body_hash(r#"{"id":"y"}"#));
    }

    #[test]
    fn metadata_is_replaced_in_place_and_the_rest_kept_byte_for_byte() {
        let skeleton = r#"{"id":"b","metadata":{"a":1},"logs":{"x":[1.50,2]},"user":null}"#;
        let out = with_metadata(skeleton, r#"{"a":2,"cli_session_id":"s"}"#).unwrap();
        assert_eq!(
            out,
            r#"{"id":"b","metadata":{"a":2,"cli_session_id":"s"},"logs":{"x":[1.50,2]},"user":null}"#
        );
        assert!(with_metadata(skeleton, "[1]").is_err());
        assert!(with_metadata(skeleton, "{").is_err());
        assert!(with_metadata("not json", "{}").is_err());
    }

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
        let s = split_json(dict.to_string().as_bytes(), || None).unwrap();
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
