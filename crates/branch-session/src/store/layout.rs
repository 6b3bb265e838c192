//! How a branch is laid out in the store: its `to_dict` projection without
//! the messages and logs (the *skeleton*), plus one row per message and
//! one per log.
//!
//! A row keeps the item's own `to_dict` JSON, its position in the pile's
//! `collections` (`seq`, insertion order) and its position in the
//! progression (`pos`, logical order): the two differ after a system
//! prompt is replaced, and both must come back for `to_dict` to be exact.
//! Logs have rows of their own because each carries the request it sent,
//! the whole history: inline in the skeleton they would grow it with the
//! square of the conversation, and a turn could not add one without
//! rewriting the others. The skeleton keeps the log pile's header (its
//! id, progression id, flags) with empty `collections` and `order`, and
//! an empty log pile is left out on load, as `to_dict` leaves it out.
//! Loading writes the full `to_dict` document back as bytes and hands it
//! to `Branch::from_json_slice`, so messages and logs are parsed once.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write;

use branch_core::{Branch, BranchError, ToDictOptions};
use indexmap::IndexMap;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::limits::{MAX_STORED_BRANCH_BYTES, MAX_STORED_ROW_BYTES};

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

/// The two tables of rows a branch has, in both stores.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Table {
    Messages,
    Logs,
}

impl Table {
    /// The table's name and its id column's.
    pub(crate) fn names(self) -> (&'static str, &'static str) {
        match self {
            Table::Messages => ("messages", "msg_id"),
            Table::Logs => ("logs", "log_id"),
        }
    }

    /// What one row holds, for errors.
    pub(crate) fn item(self) -> &'static str {
        match self {
            Table::Messages => "message",
            Table::Logs => "log",
        }
    }

    /// The body of the row at `seq` as a load reads it. The store leaves a
    /// body over [`MAX_STORED_ROW_BYTES`] unread (`None`, with its stored
    /// `len`), and `total`, the load's running sum over both tables, must
    /// stay within [`MAX_STORED_BRANCH_BYTES`]. The error is why the
    /// branch's rows are refused.
    pub(crate) fn loaded_body(
        self,
        seq: i64,
        body: Option<String>,
        len: i64,
        total: &mut usize,
    ) -> Result<String, String> {
        let what = self.item();
        let body = body
            .ok_or_else(|| too_big(&format!("{what} at seq {seq}"), len, MAX_STORED_ROW_BYTES))?;
        *total = total.saturating_add(body.len());
        if *total > MAX_STORED_BRANCH_BYTES {
            return Err(format!(
                "its messages and logs exceed the {MAX_STORED_BRANCH_BYTES}-byte cap on one load"
            ));
        }
        Ok(body)
    }
}

/// Why a stored row's body was left unread: `len` bytes over `cap`.
pub(crate) fn too_big(what: &str, len: i64, cap: usize) -> String {
    format!("{what} is {len} bytes, over the {cap}-byte cap on a stored row")
}

/// One stored message or log.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MessageRow {
    /// The item's id, hyphenated.
    pub id: String,
    /// Position in the progression.
    pub pos: i64,
    /// A digest of `body` ([`body_hash`]), so an unchanged message is
    /// not rewritten.
    pub hash: i64,
    /// The item's `to_dict` JSON.
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
    /// `to_dict` JSON with the `collections` and `progression.order` of
    /// `messages` and `logs` emptied and the redundant top-level `system`
    /// removed.
    pub skeleton: String,
    /// Whether the branch has a curated view (`metadata.current_progression`).
    pub has_view: bool,
    /// Messages in `collections` order.
    pub rows: Vec<MessageRow>,
    /// Logs in `collections` order.
    pub logs: Vec<MessageRow>,
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

/// The branch's `name` entry.
fn name_of(top: &RawMap<'_>) -> Result<Option<String>, String> {
    match top.get("name") {
        Some(v) => {
            serde_json::from_str::<Option<String>>(v.get()).map_err(|e| format!("`name`: {e}"))
        }
        None => Ok(None),
    }
}

/// Whether the branch has a curated view (`metadata.current_progression`).
fn has_view(top: &RawMap<'_>) -> Result<bool, String> {
    Ok(match top.get("metadata") {
        Some(m) => raw_map(m.get())
            .map_err(|e| format!("`metadata`: {e}"))?
            .get("current_progression")
            .is_some_and(|v| v.get() != "null"),
        None => false,
    })
}

/// Splits `to_dict` JSON text. `empty_pile` gives the pile's full JSON when
/// `to_dict` wrote the bare empty form (which carries no pile id), so the
/// pile keeps its identity once messages are appended.
pub(crate) fn split_json(
    bytes: &[u8],
    empty_pile: impl FnOnce() -> Option<String>,
) -> Result<SplitBranch, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
    let top = raw_map(text).map_err(|e| format!("a branch must be a JSON object: {e}"))?;
    let id = top
        .get("id")
        .and_then(|v| serde_json::from_str::<Cow<'_, str>>(v.get()).ok())
        .and_then(|s| Uuid::parse_str(&s).ok())
        .ok_or("`id` is missing or not a UUID")?;
    let name = name_of(&top)?;
    let has_view = has_view(&top)?;

    let filled;
    let mut pile_text = top.get("messages").ok_or("`messages` is missing")?.get();
    if !raw_map(pile_text)
        .map_err(|e| format!("`messages`: {e}"))?
        .contains_key("id")
    {
        if let Some(full) = empty_pile() {
            filled = full;
            pile_text = &filled;
        }
    }
    let (messages, rows) = split_pile(pile_text, "messages")?;
    let logs = match top.get("logs") {
        Some(v) if v.get() != "null" => Some(split_pile(v.get(), "logs")?),
        _ => None,
    };

    // The skeleton: every top-level entry as written, but the piles
    // without their items and order, and without the redundant top-level
    // `system`.
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
        match (k.as_ref(), &logs) {
            ("messages", _) => out.extend_from_slice(messages.as_bytes()),
            ("logs", Some((header, _))) => out.extend_from_slice(header.as_bytes()),
            _ => out.extend_from_slice(v.get().as_bytes()),
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
        logs: logs.map(|(_, rows)| rows).unwrap_or_default(),
    })
}

/// Cuts one pile's JSON text into its header (the pile with empty
/// `collections` and `progression.order`) and a row per item.
fn split_pile(pile_text: &str, what: &str) -> Result<(String, Vec<MessageRow>), String> {
    #[derive(serde::Deserialize)]
    struct IdOnly<'a> {
        #[serde(borrow)]
        id: Cow<'a, str>,
    }

    let pile = raw_map(pile_text).map_err(|e| format!("`{what}`: {e}"))?;
    let collections: Vec<&RawValue> = match pile.get("collections") {
        Some(v) => {
            serde_json::from_str(v.get()).map_err(|e| format!("`{what}.collections`: {e}"))?
        }
        None => Vec::new(),
    };
    let progression: RawMap<'_> = match pile.get("progression") {
        Some(v) if v.get().starts_with('{') => {
            raw_map(v.get()).map_err(|e| format!("`{what}.progression`: {e}"))?
        }
        _ => IndexMap::new(),
    };
    let order: Vec<Cow<'_, str>> = match progression.get("order") {
        Some(v) => {
            serde_json::from_str(v.get()).map_err(|e| format!("`{what}.progression.order`: {e}"))?
        }
        None => Vec::new(),
    };
    let positions: HashMap<&str, i64> = order
        .iter()
        .zip(0i64..)
        .map(|(id, i)| (id.as_ref(), i))
        .collect();

    let mut rows = Vec::with_capacity(collections.len());
    for (seq, item) in (0i64..).zip(&collections) {
        let body = item.get();
        let IdOnly { id: item_id } =
            serde_json::from_str(body).map_err(|e| format!("{what} {seq}: {e}"))?;
        let pos = positions.get(item_id.as_ref()).copied().unwrap_or(seq);
        rows.push(MessageRow {
            id: item_id.into_owned(),
            pos,
            hash: body_hash(body),
            body: body.to_owned(),
        });
    }
    let mut header = Vec::with_capacity(pile_text.len().min(1024));
    write_empty_pile(&mut header, &pile, &progression)?;
    Ok((String::from_utf8(header).map_err(|e| e.to_string())?, rows))
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

/// A stored row as loaded: its id, its progression position and its body,
/// in `collections` order.
pub(crate) type LoadedRow = (String, i64, String);

/// Writes the full `to_dict` document from a skeleton, its message rows
/// and its log rows. A log pile with no rows is left out, as `to_dict`
/// leaves out an empty one.
pub(crate) fn assemble(
    skeleton: &str,
    rows: &[LoadedRow],
    logs: &[LoadedRow],
) -> Result<Vec<u8>, String> {
    let skel: Map<String, Value> = serde_json::from_str(skeleton).map_err(|e| e.to_string())?;
    if !logs.is_empty() && !skel.get("logs").is_some_and(Value::is_object) {
        return Err(format!(
            "{} stored logs but no log pile in the skeleton",
            logs.len()
        ));
    }
    let body_len: usize = rows
        .iter()
        .chain(logs)
        .map(|r| r.2.len().saturating_add(40))
        .fold(0, usize::saturating_add);
    let mut out = Vec::with_capacity(skeleton.len().saturating_add(body_len).saturating_add(64));
    out.push(b'{');
    let mut first = true;
    for (k, v) in &skel {
        let items = match k.as_str() {
            "messages" => rows,
            "logs" if logs.is_empty() => continue,
            "logs" => logs,
            _ => &[],
        };
        if !first {
            out.push(b',');
        }
        first = false;
        write_json(&mut out, k)?;
        out.push(b':');
        if matches!(k.as_str(), "messages" | "logs") {
            write_pile(&mut out, v, items)?;
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

fn write_pile(out: &mut Vec<u8>, header: &Value, rows: &[LoadedRow]) -> Result<(), String> {
    let header = header.as_object().ok_or("a stored pile is not an object")?;
    let mut order: Vec<(i64, &str)> = rows
        .iter()
        .map(|(id, pos, _)| (*pos, id.as_str()))
        .collect();
    order.sort_by_key(|(pos, _)| *pos);
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

/// A stored skeleton brought up to a live branch's head, and the columns
/// kept beside it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Headed {
    pub skeleton: String,
    pub name: Option<String>,
    pub has_view: bool,
}

/// The skeleton with every entry but its piles (`messages`, `logs`) taken
/// from `head` (the branch's `Branch::head_json`), in the stored order;
/// an entry the head no longer has is dropped (a parse model that became
/// the chat model), and one the skeleton lacked goes at the end, where
/// `to_dict` writes the models.
pub(crate) fn with_head(skeleton: &str, head: &[u8]) -> Result<Headed, String> {
    let head = std::str::from_utf8(head).map_err(|e| e.to_string())?;
    let head = raw_map(head).map_err(|e| format!("the branch's head: {e}"))?;
    let stored = raw_map(skeleton)?;
    let mut out: RawMap<'_> = IndexMap::with_capacity(stored.len().max(head.len()));
    for (k, v) in &stored {
        let v = match k.as_ref() {
            "messages" | "logs" => Some(*v),
            _ => head.get(k).copied(),
        };
        if let Some(v) = v {
            out.insert(k.clone(), v);
        }
    }
    for (k, v) in &head {
        if !out.contains_key(k) {
            out.insert(k.clone(), v);
        }
    }
    Ok(Headed {
        skeleton: serde_json::to_string(&out).map_err(|e| e.to_string())?,
        name: name_of(&head)?,
        has_view: has_view(&head)?,
    })
}

/// The id of the log pile the skeleton holds the header of, if any.
pub(crate) fn stored_logs_pile(skeleton: &str) -> Result<Option<String>, String> {
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(borrow, default)]
        logs: Option<&'a RawValue>,
    }
    #[derive(serde::Deserialize)]
    struct PileId {
        #[serde(default)]
        id: Option<String>,
    }
    let head: Head<'_> = serde_json::from_str(skeleton).map_err(|e| e.to_string())?;
    match head.logs {
        Some(raw) if raw.get() != "null" => {
            let pile: PileId =
                serde_json::from_str(raw.get()).map_err(|e| format!("`logs`: {e}"))?;
            Ok(pile.id)
        }
        _ => Ok(None),
    }
}

/// What a turn writes of the branch's logs, worked out from what the
/// store holds and what the live logger holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LogsWrite {
    /// The live log pile's header, when the store's is another pile's (or
    /// missing): the stored log rows are then all replaced by `rows`.
    pub header: Option<String>,
    /// The logs to add, with their `seq` (0-based after a replacement,
    /// after the stored ones otherwise) and progression `pos`.
    pub rows: Vec<(i64, MessageRow)>,
}

/// What the store must write so its logs equal `live`: the logs past the
/// stored ones when the store holds the start of this very pile, and the
/// whole pile otherwise (the logger was cleared after a capacity dump, or
/// the store has never held its logs). `stored_pile` is the id of the
/// stored header, `stored` the stored logs' ids in `seq` order (one more
/// than the branch holds is enough). Only the logs to write are
/// serialized.
pub(crate) fn plan_logs(
    branch: &Branch,
    stored_pile: Option<&str>,
    stored: &[String],
) -> Result<LogsWrite, super::StoreError> {
    plan_pile(stored_pile, stored, branch.logs()).map_err(|reason| super::StoreError::Branch {
        id: branch.id(),
        source: BranchError::InvalidData {
            path: "logs".into(),
            reason,
        },
    })
}

fn plan_pile(
    stored_pile: Option<&str>,
    stored: &[String],
    live: &branch_core::Pile<branch_core::Log>,
) -> Result<LogsWrite, String> {
    let live_ids: Vec<Uuid> = live.iter_insertion_order().map(|l| l.id()).collect();
    let same_pile = stored_pile.and_then(|p| Uuid::parse_str(p).ok()) == Some(live.element.id);
    let continues = same_pile
        && stored.len() <= live_ids.len()
        && stored
            .iter()
            .zip(&live_ids)
            .all(|(s, l)| Uuid::parse_str(s).is_ok_and(|s| s == *l));
    if continues && stored.len() == live_ids.len() {
        return Ok(LogsWrite::default());
    }
    if !continues {
        // The whole pile is written, so it is serialized whole (with its
        // header) and cut like a saved one.
        let full = serde_json::to_string(live).map_err(|e| format!("`logs`: {e}"))?;
        let (header, rows) = split_pile(&full, "logs")?;
        return Ok(LogsWrite {
            header: Some(header),
            rows: (0i64..).zip(rows).collect(),
        });
    }
    let positions: HashMap<Uuid, i64> = live.progression().iter().copied().zip(0i64..).collect();
    let mut rows = Vec::with_capacity(live_ids.len().saturating_sub(stored.len()));
    for (seq, log) in (0i64..).zip(live.iter_insertion_order()).skip(stored.len()) {
        let body = serde_json::to_string(log).map_err(|e| format!("log {}: {e}", log.id()))?;
        let pos = positions.get(&log.id()).copied().unwrap_or(seq);
        rows.push((
            seq,
            MessageRow {
                id: log.id().to_string(),
                pos,
                hash: body_hash(&body),
                body,
            },
        ));
    }
    Ok(LogsWrite { header: None, rows })
}

/// The skeleton with its log pile header replaced by `header`, or added
/// after `messages` (where `to_dict` writes it) when it had none.
pub(crate) fn with_logs_header(skeleton: &str, header: &str) -> Result<String, String> {
    let header: &RawValue = serde_json::from_str(header).map_err(|e| e.to_string())?;
    let mut map = raw_map(skeleton)?;
    if let Some(slot) = map.get_mut("logs") {
        *slot = header;
    } else {
        let at = map.get_index_of("messages").map_or(map.len(), |i| i + 1);
        map.shift_insert(at, Cow::Borrowed("logs"), header);
    }
    serde_json::to_string(&map).map_err(|e| e.to_string())
}

/// A skeleton written before logs had rows of their own (store schema 3)
/// keeps them inline: the skeleton with them taken out, and their rows.
/// `None` when it holds none inline.
pub(crate) fn take_inline_logs(
    skeleton: &str,
) -> Result<Option<(String, Vec<MessageRow>)>, String> {
    let mut map = raw_map(skeleton)?;
    let Some(logs) = map.get("logs").filter(|v| v.get() != "null") else {
        return Ok(None);
    };
    let (header, rows) = split_pile(logs.get(), "logs")?;
    if rows.is_empty() {
        return Ok(None);
    }
    let header: &RawValue = serde_json::from_str(&header).map_err(|e| e.to_string())?;
    if let Some(slot) = map.get_mut("logs") {
        *slot = header;
    }
    let skeleton = serde_json::to_string(&map).map_err(|e| e.to_string())?;
    Ok(Some((skeleton, rows)))
}

/// The branch's skeleton entries but the piles as a recorded turn writes
/// them (`Branch::head_json` with the save's options).
pub(crate) fn head_of(branch: &Branch) -> Result<Vec<u8>, super::StoreError> {
    branch
        .head_json(&save_options())
        .map_err(|source| super::StoreError::Branch {
            id: branch.id(),
            source,
        })
}

/// Whether `stored` (the id and body digest of the stored pile's first
/// message) is the branch's first message as it is now: a system message
/// set, replaced, edited or removed since the last whole save is not.
pub(crate) fn head_is(
    branch: &Branch,
    stored: Option<&(String, i64)>,
) -> Result<bool, super::StoreError> {
    let pile = branch.messages();
    let first = pile.progression().iter().next().and_then(|id| pile.get(id));
    let (Some(first), Some((id, hash))) = (first, stored) else {
        return Ok(first.is_none() && stored.is_none());
    };
    if first.id().to_string() != *id {
        return Ok(false);
    }
    let body = first
        .to_value()
        .map_err(|source| super::StoreError::Branch {
            id: branch.id(),
            source,
        })?
        .to_string();
    Ok(body_hash(&body) == *hash)
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
    fn the_head_replaces_every_entry_but_the_piles_in_place() {
        let skeleton = concat!(
            r#"{"id":"b","metadata":{"a":1},"user":null,"name":"old","#,
            r#""messages":{"m":[1.50]},"logs":{"x":[1.50,2]},"chat_model":{"p":1},"#,
            r#""parse_model":{"p":2}}"#
        );
        // Renamed, a view set, a user, another chat model, the parse
        // model now the chat model, and a key the skeleton lacked.
        let head = concat!(
            r#"{"id":"b","metadata":{"a":2,"current_progression":{"order":[]}},"#,
            r#""user":"u","name":"new","log_config":{},"chat_model":{"p":3}}"#
        );
        let out = with_head(skeleton, head.as_bytes()).unwrap();
        assert_eq!(
            out.skeleton,
            concat!(
                r#"{"id":"b","metadata":{"a":2,"current_progression":{"order":[]}},"#,
                r#""user":"u","name":"new","messages":{"m":[1.50]},"logs":{"x":[1.50,2]},"#,
                r#""chat_model":{"p":3},"log_config":{}}"#
            )
        );
        assert_eq!(out.name.as_deref(), Some("new"));
        assert!(out.has_view);
        let plain = with_head(skeleton, br#"{"id":"b","metadata":{},"name":null}"#).unwrap();
        assert_eq!(plain.name, None);
        assert!(!plain.has_view);
        assert!(with_head(skeleton, b"[1]").is_err());
        assert!(with_head(skeleton, b"{").is_err());
        assert!(with_head(skeleton, br#"{"name":3}"#).is_err());
        assert!(with_head("not json", b"{}").is_err());
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
            "logs": {
                "id": "00000000-0000-4000-8000-000000000003",
                "collections": [{"id": "l1", "y": 1}, {"id": "l2", "y": 2}],
                "progression": {"id": "q", "order": ["l1", "l2"], "name": null},
                "strict_type": true
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
        assert_eq!(
            s.logs
                .iter()
                .map(|r| (r.id.as_str(), r.pos))
                .collect::<Vec<_>>(),
            [("l1", 0), ("l2", 1)]
        );
        assert!(!s.skeleton.contains("\"x\"") && !s.skeleton.contains("\"y\""));
        assert_eq!(
            stored_logs_pile(&s.skeleton).unwrap().as_deref(),
            Some("00000000-0000-4000-8000-000000000003")
        );
        let loaded = |rows: Vec<MessageRow>| -> Vec<LoadedRow> {
            rows.into_iter().map(|r| (r.id, r.pos, r.body)).collect()
        };
        let (rows, logs) = (loaded(s.rows), loaded(s.logs));
        let back: Value =
            serde_json::from_slice(&assemble(&s.skeleton, &rows, &logs).unwrap()).unwrap();
        let mut expected = dict;
        expected.as_object_mut().unwrap().shift_remove("system");
        assert_eq!(back, expected);
        // No log rows: the pile is left out, as `to_dict` leaves out an
        // empty one; log rows without a header are refused.
        let back: Value =
            serde_json::from_slice(&assemble(&s.skeleton, &rows, &[]).unwrap()).unwrap();
        expected.as_object_mut().unwrap().shift_remove("logs");
        assert_eq!(back, expected);
        let bare = r#"{"id":"x","messages":{"collections":[]}}"#;
        assert!(assemble(bare, &[], &logs).is_err());
    }

    #[test]
    fn a_log_header_goes_after_the_messages_and_inline_logs_move_out() {
        let skeleton = r#"{"id":"b","messages":{"collections":[]},"system":null}"#;
        let out = with_logs_header(skeleton, r#"{"id":"p","collections":[]}"#).unwrap();
        assert_eq!(
            out,
            r#"{"id":"b","messages":{"collections":[]},"logs":{"id":"p","collections":[]},"system":null}"#
        );
        let out = with_logs_header(&out, r#"{"id":"q"}"#).unwrap();
        assert_eq!(stored_logs_pile(&out).unwrap().as_deref(), Some("q"));
        let inline = r#"{"id":"b","logs":{"id":"p","collections":[{"id":"l","z":1}],"progression":{"order":["l"]}}}"#;
        let (skeleton, rows) = take_inline_logs(inline).unwrap().unwrap();
        assert_eq!(
            skeleton,
            r#"{"id":"b","logs":{"id":"p","collections":[],"progression":{"order":[]}}}"#
        );
        assert_eq!(rows.len(), 1);
        assert_eq!(take_inline_logs(&skeleton).unwrap(), None);
    }

    /// A saved branch's head row is the live branch's head as a recorded
    /// turn reads it (same id, same body digest), for every branch the
    /// reference's fixtures hold, so a turn after a save is appended, not
    /// saved whole again; a new or edited system message is not.
    #[test]
    fn the_saved_head_is_the_live_head_until_the_system_changes() {
        fn branches(v: &Value, out: &mut Vec<Branch>) {
            match v {
                Value::Object(m) => {
                    if m.get("metadata").and_then(|x| x.get("lion_class"))
                        == Some(&json!("lionagi.session.branch.Branch"))
                    {
                        out.extend(Branch::from_dict(v).ok());
                    }
                    m.values().for_each(|x| branches(x, out));
                }
                Value::Array(a) => a.iter().for_each(|x| branches(x, out)),
                _ => {}
            }
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/lionagi-0.36.0");
        let mut found = Vec::new();
        for case in std::fs::read_dir(&root).unwrap().flatten() {
            for scenario in std::fs::read_dir(case.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                for name in ["output.json", "input.json"] {
                    if let Ok(text) = std::fs::read_to_string(scenario.path().join(name)) {
                        branches(&serde_json::from_str(&text).unwrap(), &mut found);
                    }
                }
            }
        }
        let mut with_messages = 0;
        for mut b in found {
            let saved = split(&b).unwrap();
            let head = saved
                .rows
                .iter()
                .find(|r| r.pos == 0)
                .map(|r| (r.id.clone(), r.hash));
            assert!(head_is(&b, head.as_ref()).unwrap(), "{}", b.id());
            if let Some(head) = head {
                with_messages += 1;
                b.msgs_mut().set_system(branch_core::Message::system(
                    branch_core::message::SystemContent::new("another prompt"),
                ));
                assert!(!head_is(&b, Some(&head)).unwrap());
            }
        }
        assert!(
            with_messages >= 10,
            "only {with_messages} branches with messages"
        );
        let mut b = Branch::builder().system("a").build().unwrap();
        let saved = split(&b).unwrap();
        let head = (saved.rows[0].id.clone(), saved.rows[0].hash);
        assert!(head_is(&b, Some(&head)).unwrap());
        // The same system message edited in place.
        let id = b.system().unwrap().id();
        b.msgs_mut().get_mut(&id).unwrap().channel = Some("edited".into());
        assert!(!head_is(&b, Some(&head)).unwrap());
        assert!(!head_is(&b, None).unwrap());
        assert!(head_is(&Branch::builder().build().unwrap(), None).unwrap());
    }
}
