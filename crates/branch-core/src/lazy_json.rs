//! `LazyJson`: a JSON value, held as a `Value` or as the text it reads as
//! until it is first read.
//!
//! A reply's `Value` tree takes several times the bytes of its text. A
//! model that reads what a reply says straight from its text (the chat
//! completions dialect does for a plain reply) never builds that tree, and
//! a message's metadata keeps the reply as its text: nobody may ever read
//! it again. `ChatResponse::raw` and every value of a [`crate::Metadata`]
//! are one.

// Nothing read from outside may panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::borrow::Cow;
use std::ops::{Deref, DerefMut};
use std::sync::OnceLock;

use serde_json::Value;

use crate::parsed_json::ParsedJson;

/// A JSON value. Reads (and derefs) as its `Value`; made from text, it
/// parses the text when first read.
#[derive(Clone)]
pub struct LazyJson(Repr);

#[derive(Clone)]
enum Repr {
    /// A value given, or one changed since it was read from a text.
    Value(Value),
    /// The text it reads as, and its value once read. Boxed: a value read
    /// from its text is the rare case, and unboxed it would make every
    /// metadata entry 40 bytes larger (past the size glibc frees fastest).
    Text {
        text: ParsedJson,
        read: OnceLock<Box<Value>>,
    },
}

impl Default for LazyJson {
    /// `null`.
    fn default() -> Self {
        Self(Repr::Value(Value::Null))
    }
}

impl LazyJson {
    /// The value `text` reads as, kept as the text until first read.
    pub fn from_text(text: ParsedJson) -> Self {
        Self(Repr::Text {
            text,
            read: OnceLock::new(),
        })
    }

    /// The text the value reads as, unless the value was changed since
    /// (read or not).
    pub fn text(&self) -> Option<&ParsedJson> {
        match &self.0 {
            Repr::Text { text, .. } => Some(text),
            Repr::Value(_) => None,
        }
    }

    /// The value, parsed for this call only when it was never read (a
    /// look that leaves the value as compact as it is).
    pub fn peek(&self) -> Cow<'_, Value> {
        match &self.0 {
            Repr::Value(v) => Cow::Borrowed(v),
            Repr::Text { text, read } => match read.get() {
                Some(v) => Cow::Borrowed(v),
                None => Cow::Owned(text.value()),
            },
        }
    }

    /// Whether the value was built (given, or read from the text).
    #[cfg(test)]
    pub(crate) fn is_read(&self) -> bool {
        match &self.0 {
            Repr::Value(_) => true,
            Repr::Text { read, .. } => read.get().is_some(),
        }
    }

    /// The string at `key` of the value's top object, read from the text
    /// when the value was never built (one pass over it, building
    /// nothing): what telemetry reads off every reply.
    pub fn top_str(&self, key: &str) -> Option<String> {
        match &self.0 {
            Repr::Text { text, read } if read.get().is_none() => {
                let seed = TopStr { key };
                let mut de = serde_json::Deserializer::from_str(text.as_str());
                serde::de::DeserializeSeed::deserialize(seed, &mut de)
                    .ok()
                    .flatten()
            }
            _ => self.get(key).and_then(Value::as_str).map(str::to_owned),
        }
    }

    /// The value, taken.
    pub fn into_value(self) -> Value {
        match self.0 {
            Repr::Value(v) => v,
            Repr::Text { text, read } => match read.into_inner() {
                Some(v) => *v,
                None => text.value(),
            },
        }
    }
}

impl From<Value> for LazyJson {
    fn from(v: Value) -> Self {
        Self(Repr::Value(v))
    }
}

impl Deref for LazyJson {
    type Target = Value;

    fn deref(&self) -> &Value {
        match &self.0 {
            Repr::Value(v) => v,
            Repr::Text { text, read } => read.get_or_init(|| Box::new(text.value())),
        }
    }
}

/// A change makes the value the reply: the text no longer reads as it.
impl DerefMut for LazyJson {
    fn deref_mut(&mut self) -> &mut Value {
        if let Repr::Text { text, read } = &mut self.0 {
            let v = match read.take() {
                Some(v) => *v,
                None => text.value(),
            };
            self.0 = Repr::Value(v);
        }
        match &mut self.0 {
            Repr::Value(v) => v,
            Repr::Text { .. } => unreachable!("made a value just above"),
        }
    }
}

/// Reads the string at `key` of a top-level object (the last one, as a
/// `Value` keeps the last of repeated keys), skipping everything else.
struct TopStr<'k> {
    key: &'k str,
}

impl<'de> serde::de::DeserializeSeed<'de> for TopStr<'_> {
    type Value = Option<String>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<String>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for TopStr<'_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(k) = map.next_key::<Cow<'de, str>>()? {
            if k == self.key {
                found = match map.next_value::<Value>()? {
                    Value::String(s) => Some(s),
                    _ => None,
                };
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

impl PartialEq for LazyJson {
    fn eq(&self, other: &Self) -> bool {
        match (self.text(), other.text()) {
            (Some(a), Some(b)) if a == b => true,
            _ => *self.peek() == *other.peek(),
        }
    }
}

impl PartialEq<Value> for LazyJson {
    fn eq(&self, other: &Value) -> bool {
        *self.peek() == *other
    }
}

impl PartialEq<LazyJson> for Value {
    fn eq(&self, other: &LazyJson) -> bool {
        other == self
    }
}

/// As its value (compact JSON).
impl std::fmt::Display for LazyJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.peek().fmt(f)
    }
}

/// As its value.
impl std::fmt::Debug for LazyJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.peek().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_reply_kept_as_text_reads_as_its_value() {
        let text = ParsedJson::check(r#"{"a": [1, "x"]}"#.to_owned()).unwrap();
        let r = LazyJson::from_text(text.clone());
        assert_eq!(*r.peek(), json!({"a": [1, "x"]}));
        assert!(!r.is_read(), "a peek keeps nothing");
        assert_eq!(r["a"][1], "x");
        assert_eq!(r.text(), Some(&text));
        let ids = ParsedJson::check(r#"{"id": "a", "n": {"id": "x"}, "id": "b"}"#.to_owned());
        let ids = LazyJson::from_text(ids.unwrap());
        assert_eq!(ids.top_str("id").as_deref(), Some("b"));
        assert!(!ids.is_read());
        assert_eq!(ids.top_str("n"), None);
        assert_eq!(
            LazyJson::from(json!({"id": "c"})).top_str("id").as_deref(),
            Some("c")
        );
        assert_eq!(r, LazyJson::from(json!({"a": [1, "x"]})));
        assert_eq!(r.clone().into_value(), json!({"a": [1, "x"]}));
    }

    #[test]
    fn a_change_makes_the_value_the_reply() {
        let mut r = LazyJson::from_text(ParsedJson::check(r#"{"a": 1}"#.to_owned()).unwrap());
        r["a"] = json!(2);
        assert!(r.text().is_none());
        assert_eq!(r.clone().into_value(), json!({"a": 2}));
        let mut d = LazyJson::default();
        assert_eq!(*d, Value::Null);
        *d = json!(3);
        assert_eq!(d, json!(3));
        assert_eq!(format!("{d:?}"), "Number(3)");
    }
}
