//! `ParsedJson`: JSON text serde_json has parsed once, kept in place of the
//! value it read as.
//!
//! A reply's `Value` tree takes several times the bytes of its text (about
//! 2.8 kB for a 300-byte chat completion: an index map per object, a string
//! per key). Kept as the text, the same reply takes its length, and is
//! shared with the log that keeps it too. The type is the proof that
//! reading the text again cannot fail: it is made only by parsing.

// Nothing read from outside may panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use bytes::Bytes;
use serde_json::Value;

/// JSON text that serde_json parsed into a value; reading it again gives an
/// equal value.
#[derive(Clone, PartialEq, Eq)]
pub struct ParsedJson(Bytes);

impl ParsedJson {
    /// The longest text kept in place of its value. A server chooses its
    /// spacing: a reply padded up to the reply cap (16 MiB by default)
    /// would stay that large wherever it is kept, where its value may take
    /// a few hundred bytes. Longer texts are kept as their values; typical
    /// replies are a few kilobytes.
    pub const MAX_KEPT_BYTES: usize = 64 * 1024;

    /// Parses `text`: the value it reads as, and the text kept (in an
    /// allocation of its own length: it may be kept long).
    pub fn parse(mut text: String) -> serde_json::Result<(Value, Self)> {
        let value = serde_json::from_str(&text)?;
        text.shrink_to_fit();
        Ok((value, Self(Bytes::from(text))))
    }

    /// The text, as parsed.
    pub fn as_str(&self) -> &str {
        // Made only from a `String`, so always UTF-8; the check is a word
        // at a time.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    /// The text's bytes, shared (a clone is a reference count).
    pub fn bytes(&self) -> &Bytes {
        &self.0
    }

    /// The length of the text in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the text is empty (never, for parsed JSON).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether it is short enough to be kept in place of its value
    /// ([`Self::MAX_KEPT_BYTES`]).
    pub fn is_keepable(&self) -> bool {
        self.0.len() <= Self::MAX_KEPT_BYTES
    }

    /// Whether the text spans lines (spacing a server chose). A writer of
    /// one-line JSON (a dump, a line of a log file) writes such a text
    /// compactly from its value instead of copying it.
    pub fn spans_lines(&self) -> bool {
        self.0.iter().any(|b| matches!(b, b'\n' | b'\r'))
    }

    /// The value the text reads as, parsed again.
    pub fn value(&self) -> Value {
        // Parsed once already by the same parser: it cannot fail. Were it
        // ever to, the text is still there, as a string.
        serde_json::from_slice(&self.0).unwrap_or_else(|_| Value::String(self.as_str().to_owned()))
    }
}

impl std::fmt::Debug for ParsedJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ParsedJson").field(&self.as_str()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parsing_keeps_the_text_and_reads_as_its_value() {
        let (v, kept) = ParsedJson::parse("{\"a\": [1, \"\\u00e9\"]}".to_owned()).unwrap();
        assert_eq!(v, json!({"a": [1, "é"]}));
        assert_eq!(kept.as_str(), "{\"a\": [1, \"\\u00e9\"]}");
        assert_eq!(kept.value(), v);
        assert!(!kept.spans_lines());
        assert!(
            ParsedJson::parse("{\n}".to_owned())
                .unwrap()
                .1
                .spans_lines()
        );
        assert!(ParsedJson::parse("{\"a\":".to_owned()).is_err());
    }

    #[test]
    fn only_short_texts_are_kept() {
        let padded = format!("{{{}}}", " ".repeat(ParsedJson::MAX_KEPT_BYTES));
        assert!(!ParsedJson::parse(padded).unwrap().1.is_keepable());
        assert!(ParsedJson::parse("{}".to_owned()).unwrap().1.is_keepable());
    }
}
