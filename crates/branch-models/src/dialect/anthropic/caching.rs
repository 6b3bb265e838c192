//! Prompt caching: `cache_control` breakpoints on the stable prefix of a
//! Messages request.
//!
//! One option turns it on: the endpoint's `prompt_caching` flag, or a
//! `prompt_caching` keyword (model kwargs or call field) that is `true` or
//! a `cache_control` object (`{"type": "ephemeral", "ttl": "1h"}`); the
//! reference's `cache_control` call keyword is read the same way. The
//! breakpoints go on the last tool, on the system prompt (sent as text
//! blocks) and on the last message before the current turn, the order the
//! API renders the prefix in, never more than the API's four in all
//! (breakpoints the caller placed count).
//! (<https://docs.claude.com/en/docs/build-with-claude/prompt-caching>)

use branch_core::model::ModelConfig;
use serde_json::{Map, Value, json};

use super::TranslateError;

/// The API's limit on `cache_control` breakpoints in one request.
pub const MAX_BREAKPOINTS: usize = 4;

/// The breakpoint marker the request asks for, if caching is on. Takes the
/// option's keys out of `payload` (they are never sent as such).
pub fn marker(
    config: &ModelConfig,
    payload: &mut Map<String, Value>,
) -> Result<Option<Value>, TranslateError> {
    let mut marker = config
        .endpoint()
        .prompt_caching
        .then(|| json!({"type": "ephemeral"}));
    for key in ["prompt_caching", "cache_control"] {
        match payload.shift_remove(key) {
            None | Some(Value::Null) => {}
            Some(Value::Bool(false)) => marker = None,
            Some(Value::Bool(true)) => marker = Some(json!({"type": "ephemeral"})),
            Some(v @ Value::Object(_)) => marker = Some(checked(v, key)?),
            Some(_) => return Err(format!("`{key}` is neither a boolean nor an object")),
        }
    }
    Ok(marker)
}

/// A caller's `cache_control` object, checked against what the API takes.
fn checked(v: Value, key: &str) -> Result<Value, TranslateError> {
    if v.get("type").and_then(Value::as_str) != Some("ephemeral") {
        return Err(format!("`{key}` must be of type `ephemeral`"));
    }
    match v.get("ttl") {
        None => {}
        Some(Value::String(t)) if t == "5m" || t == "1h" => {}
        Some(_) => return Err(format!("`{key}.ttl` must be \"5m\" or \"1h\"")),
    }
    if let Some(k) = v
        .as_object()
        .and_then(|o| o.keys().find(|k| !matches!(k.as_str(), "type" | "ttl")))
    {
        return Err(format!("`{key}` has an unknown key `{k}`"));
    }
    Ok(v)
}

/// Places `marker` on the last tool, the system prompt and the last
/// history message, while the request holds fewer than
/// [`MAX_BREAKPOINTS`].
pub fn place_breakpoints(payload: &mut Map<String, Value>, marker: &Value) {
    let mut room = MAX_BREAKPOINTS.saturating_sub(count(payload));
    let tools = payload.get_mut("tools").and_then(Value::as_array_mut);
    place(tools.and_then(|t| t.last_mut()), marker, &mut room);
    if room > 0 {
        place(
            payload.get_mut("system").and_then(last_block),
            marker,
            &mut room,
        );
    }
    if room > 0 {
        let history = payload
            .get_mut("messages")
            .and_then(Value::as_array_mut)
            .and_then(|m| {
                let n = m.len();
                (n >= 2).then(|| &mut m[n - 2])
            });
        let block = history
            .and_then(|m| m.get_mut("content"))
            .and_then(last_block);
        place(block, marker, &mut room);
    }
}

/// Marks `target` unless it is marked already or there is no room left.
fn place(target: Option<&mut Value>, marker: &Value, room: &mut usize) {
    let Some(t) = target.filter(|t| t.is_object() && t.get("cache_control").is_none()) else {
        return;
    };
    if *room > 0 {
        t["cache_control"] = marker.clone();
        *room -= 1;
    }
}

/// The block of `content` a breakpoint goes on: its last block that may
/// carry one (thinking blocks may not), a non-empty string made a text
/// block for the purpose.
fn last_block(content: &mut Value) -> Option<&mut Value> {
    if let Value::String(s) = content {
        if s.is_empty() {
            return None;
        }
        *content = json!([{"type": "text", "text": std::mem::take(s)}]);
    }
    content.as_array_mut()?.iter_mut().rev().find(|b| {
        !matches!(
            b.get("type").and_then(Value::as_str),
            Some("thinking" | "redacted_thinking")
        )
    })
}

/// The `cache_control` markers already on the request's tools, system
/// blocks and message blocks (tool results' inner blocks included).
fn count(payload: &Map<String, Value>) -> usize {
    fn marked(blocks: Option<&Value>) -> usize {
        blocks.and_then(Value::as_array).map_or(0, |bs| {
            bs.iter()
                .map(|b| usize::from(b.get("cache_control").is_some()) + marked(b.get("content")))
                .sum()
        })
    }
    marked(payload.get("tools"))
        + marked(payload.get("system"))
        + payload
            .get("messages")
            .and_then(Value::as_array)
            .map_or(0, |ms| ms.iter().map(|m| marked(m.get("content"))).sum())
}
