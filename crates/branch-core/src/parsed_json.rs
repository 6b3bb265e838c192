//! `ParsedJson`: JSON text serde_json has parsed once, kept in place of the
//! value it read as.
//!
//! A reply's `Value` tree takes several times the bytes of its text (about
//! 2.8 kB for a 300-byte chat completion: an index map per object, a string
//! per key). Kept as the text, the same reply takes its length, and is
//! shared with the log that keeps it too. The type is the proof that
//! reading the text again cannot fail: it is made only by parsing the
//! text, or by checking it as the parse would.

// Nothing read from outside may panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use bytes::Bytes;
use serde_json::Value;

use crate::checked_read::Checking;

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

    /// Checks that `text` reads as a `Value`, without building it: the
    /// same grammar, recursion limit and number range as the parse, and no
    /// allocation but for keys and strings with escapes. For a caller
    /// that reads what it needs from the text in its own way and keeps
    /// the text for whoever wants the value. A text refused is given back
    /// (a parse then tells why).
    pub fn check(mut text: String) -> Result<Self, String> {
        match serde_json::from_str::<Checked>(&text) {
            Ok(Checked) => {
                text.shrink_to_fit();
                Ok(Self(Bytes::from(text)))
            }
            Err(_) => Err(text),
        }
    }

    /// Reads what `read` reads from `text`, and keeps the text, when the
    /// whole text reads as a `Value`: in one pass, where reading and then
    /// [`Self::check`] take two. `read` gets a deserializer whose skipped
    /// values (fields its type has no place for) are walked as the check
    /// walks them (see [`crate::checked_read`]); it returns owned results,
    /// as the text moves into the kept `ParsedJson` afterwards. A text
    /// either refuses is given back.
    pub fn read_with<R>(
        text: String,
        read: impl for<'a, 'b> FnOnce(
            Checking<&'b mut serde_json::Deserializer<serde_json::de::StrRead<'a>>>,
        ) -> serde_json::Result<R>,
    ) -> Result<(R, Self), String> {
        let read = {
            let mut de = serde_json::Deserializer::from_str(&text);
            read(Checking::new(&mut de)).and_then(|r| de.end().map(|()| r))
        };
        match read {
            Ok(r) => {
                let mut text = text;
                text.shrink_to_fit();
                Ok((r, Self(Bytes::from(text))))
            }
            Err(_) => Err(text),
        }
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
        has_line_break(&self.0)
    }

    /// The value the text reads as, parsed again (it parsed, or was
    /// checked as the parse would, once already).
    pub fn value(&self) -> Value {
        json_text_value(&self.0)
    }
}

/// JSON text known to parse (serde_json wrote it, or parsed or checked
/// it), parsed. Were it ever not JSON, the text itself is kept (as a
/// string) rather than dropped.
pub(crate) fn json_text_value(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

/// Whether JSON text spans lines: a line (of a dump, of a JSON-lines
/// file) ends at either byte.
pub(crate) fn has_line_break(text: &[u8]) -> bool {
    text.iter().any(|&b| b == b'\n' || b == b'\r')
}

/// A JSON value walked the way `Value`'s reader walks it (through
/// `deserialize_any`, which applies the recursion limit and reads numbers
/// into range), keeping nothing.
pub(crate) struct Checked;

impl<'de> serde::Deserialize<'de> for Checked {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CheckedVisitor)
    }
}

struct CheckedVisitor;

impl<'de> serde::de::Visitor<'de> for CheckedVisitor {
    type Value = Checked;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_unit<E>(self) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while map.next_key::<CheckedKey>()?.is_some() {
            map.next_value::<Checked>()?;
        }
        Ok(Checked)
    }
}

/// A key, refused when it is serde_json's raw-value marker: `Value`'s
/// reader takes a map keyed so for a raw value and reads it differently.
pub(crate) struct CheckedKey;

impl<'de> serde::Deserialize<'de> for CheckedKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl serde::de::Visitor<'_> for KeyVisitor {
            type Value = CheckedKey;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: serde::de::Error>(self, k: &str) -> Result<CheckedKey, E> {
                if k == RAW_VALUE_TOKEN {
                    Err(E::custom("a key reserved by serde_json"))
                } else {
                    Ok(CheckedKey)
                }
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// The key serde_json's `Value` reader treats as a raw value's.
pub(crate) const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

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

    /// `check` accepts exactly what the parse accepts.
    #[test]
    fn checking_agrees_with_parsing() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let cases = [
            r#"{"a": [1, -2, 3.5e10, "x\u00e9", null, true], "b": {}}"#.to_owned(),
            r#"{"a": 1, "a": 2}"#.to_owned(),
            "1e400".to_owned(),
            "[1e400]".to_owned(),
            "18446744073709551616".to_owned(),
            "-1e-400".to_owned(),
            r#""\ud800""#.to_owned(),
            r#""\ud83d\ude00""#.to_owned(),
            r#""\x""#.to_owned(),
            "\"tab\there\"".to_owned(),
            r#"{"$serde_json::private::RawValue": "[1,2"}"#.to_owned(),
            r#"{"$serde_json::private::RawValue": "[1,2]"}"#.to_owned(),
            deep(127),
            deep(128),
            deep(129),
            "[1,]".to_owned(),
            "{} x".to_owned(),
            " {} ".to_owned(),
            "".to_owned(),
            "nul".to_owned(),
        ];
        for case in cases {
            let parsed = ParsedJson::parse(case.clone()).is_ok();
            let checked = ParsedJson::check(case.clone());
            // A check may refuse what parses (the raw-value key); never
            // the other way round.
            if let Ok(c) = &checked {
                assert!(parsed, "{case:?} is checked but does not parse");
                assert_eq!(c.value(), serde_json::from_str::<Value>(&case).unwrap());
            } else if parsed {
                assert!(
                    case.contains(RAW_VALUE_TOKEN),
                    "{case:?} parses but is refused"
                );
            }
        }
    }

    #[test]
    fn only_short_texts_are_kept() {
        let padded = format!("{{{}}}", " ".repeat(ParsedJson::MAX_KEPT_BYTES));
        assert!(!ParsedJson::parse(padded).unwrap().1.is_keepable());
        assert!(ParsedJson::parse("{}".to_owned()).unwrap().1.is_keepable());
    }
}
