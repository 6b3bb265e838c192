//! Finding the JSON blocks of an assistant message: the whole text when it
//! is JSON, else every `` ```json `` fenced block (lower-case `json` only;
//! bare fences and `` ```JSON `` are not recognised, as in the reference).
//!
//! Linear time: the fences are found with a SIMD substring search, each
//! byte is visited a bounded number of times, and each block is parsed
//! once strictly and at most twice leniently. Memory is proportional to
//! the input; input over [`MAX_INPUT`] is refused.

use memchr::memmem;
use serde_json::Value;

use branch_core::json_repair::parse_lenient;

/// The largest message scanned (10 MiB), as in the reference.
pub const MAX_INPUT: usize = 10 * 1024 * 1024;

const OPEN: &[u8] = b"```json";
const FENCE: &[u8] = b"```";

/// Iterates over the raw contents of the `` ```json `` fenced blocks of
/// `text`: from after the opening fence (and its whitespace) to the next
/// `` ``` ``, trailing whitespace removed. An unterminated fence ends the
/// scan.
pub fn fenced_json_blocks(text: &str) -> FencedBlocks<'_> {
    FencedBlocks {
        text,
        pos: 0,
        open: memmem::Finder::new(OPEN),
        fence: memmem::Finder::new(FENCE),
    }
}

/// The iterator of [`fenced_json_blocks`].
#[derive(Debug)]
pub struct FencedBlocks<'a> {
    text: &'a str,
    pos: usize,
    open: memmem::Finder<'static>,
    fence: memmem::Finder<'static>,
}

impl<'a> Iterator for FencedBlocks<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let bytes = self.text.as_bytes();
        let start = self.pos + self.open.find(&bytes[self.pos..])? + OPEN.len();
        let Some(close) = self.fence.find(&bytes[start..]).map(|i| start + i) else {
            // No closing fence anywhere after: no later block can close.
            self.pos = bytes.len();
            return None;
        };
        self.pos = close + FENCE.len();
        // Fences and whitespace are ASCII, so these are char boundaries.
        Some(self.text[start..close].trim())
    }
}

fn push_blocks(v: Value, out: &mut Vec<Value>) {
    match v {
        Value::Array(items) => out.extend(items),
        other => out.push(other),
    }
}

/// The JSON values an assistant message carries: the whole text if it
/// parses (leniently) as an object or array, else every fenced block that
/// does; a top-level array contributes its elements. Empty for input over
/// [`MAX_INPUT`].
pub fn json_blocks(text: &str) -> Vec<Value> {
    let mut out = Vec::new();
    if text.len() > MAX_INPUT {
        tracing::debug!(
            len = text.len(),
            "assistant message over 10 MiB; not scanned"
        );
        return out;
    }
    let trimmed = text.trim_start();
    // Only text opening an object or array can parse as one; skipping the
    // attempt otherwise keeps prose at one pass.
    if trimmed.starts_with(['{', '[']) {
        if let Some(v) = parse_lenient(text.trim()) {
            push_blocks(v, &mut out);
            return out;
        }
    }
    for block in fenced_json_blocks(text) {
        if let Some(v) = parse_lenient(block) {
            push_blocks(v, &mut out);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fences_like_the_reference_regex() {
        let t = "hi ```json {\"a\": 1} ``` and ```json\n{\"b\": 2}\n``` ``` ```JSON {\"c\": 3}```";
        let blocks: Vec<&str> = fenced_json_blocks(t).collect();
        assert_eq!(blocks, ["{\"a\": 1}", "{\"b\": 2}"]);
        // A second opening fence closes the first block.
        let nested: Vec<&str> = fenced_json_blocks("```json A ```json B").collect();
        assert_eq!(nested, ["A"]);
        assert_eq!(fenced_json_blocks("```json {\"x\": 1}").count(), 0);
        assert_eq!(
            fenced_json_blocks("```json   ```").collect::<Vec<_>>(),
            [""]
        );
    }

    #[test]
    fn whole_text_first_then_blocks() {
        assert_eq!(json_blocks("{\"a\": 1}"), [json!({"a": 1})]);
        assert_eq!(
            json_blocks("[{\"a\": 1}, {\"b\": 2}]"),
            [json!({"a": 1}), json!({"b": 2})]
        );
        assert_eq!(
            json_blocks("x ```json [{\"a\": 1}, 2] ``` ```json nope ``` ```json {'b': 2,} ```"),
            [json!({"a": 1}), json!(2), json!({"b": 2})]
        );
        assert!(json_blocks("No JSON here.").is_empty());
        assert!(json_blocks("The answer is {\"v\": 11} ok").is_empty());
    }

    #[test]
    fn multibyte_text_around_fences() {
        let t = "é ```json\u{3000}{\"a\": \"ü\"}\u{3000}``` ñ";
        assert_eq!(json_blocks(t), [json!({"a": "ü"})]);
    }
}
