//! `Metadata`: an element's free-form JSON object, whose values may be kept
//! as the JSON text they were parsed from.
//!
//! It reads as a `serde_json::Map`: the same methods, the same order, the
//! same JSON. The difference is inside. A reply's `model_response` is kept
//! as the bytes received ([`ParsedJson`], shared with the API call's log)
//! and parsed when first read, instead of as a `Value` tree several times
//! its size for as long as the conversation lives. A conversation that
//! never reads its replies' raw JSON never builds those trees again.

// Nothing read from outside may panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::borrow::Cow;

use serde::de::{MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::lazy_json::LazyJson;
use crate::parsed_json::ParsedJson;
use crate::small_map::{self, SmallMap};

/// An element's metadata: string keys to JSON values, in insertion order.
#[derive(Clone, Default)]
pub struct Metadata {
    entries: SmallMap<LazyJson>,
}

static NULL: Value = Value::Null;

impl Metadata {
    /// Empty metadata.
    pub fn new() -> Self {
        Self::default()
    }

    /// Empty metadata with room for `n` entries.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            entries: SmallMap::with_capacity(n),
        }
    }

    /// The entries there is room for without growing.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.entries.capacity()
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The value at `key` (parsed now if it was kept as text).
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries.get(key).map(|e| &**e)
    }

    /// The value at `key` without keeping what it parses: a kept text not
    /// read yet is parsed for this call only (a look at a reply's usage
    /// leaves the reply as compact as it was).
    pub fn peek(&self, key: &str) -> Option<Cow<'_, Value>> {
        self.entries.get(key).map(LazyJson::peek)
    }

    /// The value at `key`, to change in place (a kept text is read, and
    /// no longer stands for the value).
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Value> {
        self.entries.get_mut(key).map(|e| &mut **e)
    }

    /// The text the value at `key` is kept as, if it is (read or not).
    pub fn kept_text(&self, key: &str) -> Option<&ParsedJson> {
        self.entries.get(key)?.text()
    }

    /// Whether `key` has a value.
    pub fn contains_key(&self, key: &str) -> bool {
        self.entries.get(key).is_some()
    }

    /// Sets `key` to `value`, keeping the key's place if it had one; the
    /// previous value.
    pub fn insert(&mut self, key: String, value: Value) -> Option<Value> {
        self.entries
            .insert(key, LazyJson::from(value))
            .map(LazyJson::into_value)
    }

    /// Sets `key` to the value `text` reads as, keeping the text until the
    /// value is read (a text longer than [`ParsedJson::MAX_KEPT_BYTES`]
    /// is read now). The previous value.
    pub fn insert_parsed(&mut self, key: String, text: ParsedJson) -> Option<Value> {
        let entry = if text.is_keepable() {
            LazyJson::from_text(text)
        } else {
            LazyJson::from(text.value())
        };
        self.entries.insert(key, entry).map(LazyJson::into_value)
    }

    /// Removes `key`, keeping the order of the others; its value.
    pub fn shift_remove(&mut self, key: &str) -> Option<Value> {
        self.entries.shift_remove(key).map(LazyJson::into_value)
    }

    /// Removes `key`, keeping the order of the others (as
    /// [`Self::shift_remove`]); its value.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        self.shift_remove(key)
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// The entries in order (kept texts are parsed as they are reached).
    pub fn iter(&self) -> Iter<'_> {
        Iter(self.entries.iter())
    }

    /// The keys in order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &String> {
        self.entries.iter().map(|(k, _)| k)
    }

    /// The values in order (kept texts are parsed as they are reached).
    pub fn values(&self) -> impl ExactSizeIterator<Item = &Value> {
        self.entries.iter().map(|(_, e)| &**e)
    }

    /// Keeps the entries `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&String, &Value) -> bool) {
        self.entries.retain(|k, e| keep(k, e));
    }

    /// The entries as a `serde_json::Map`, copied (kept texts are parsed
    /// for the copy and stay kept).
    pub fn to_map(&self) -> Map<String, Value> {
        self.entries
            .iter()
            .map(|(k, e)| (k.clone(), e.peek().into_owned()))
            .collect()
    }

    /// The entries as a `serde_json::Map`.
    pub fn into_map(self) -> Map<String, Value> {
        self.into()
    }

    /// Writes the entries but those at `skip` into a map of one of
    /// serde_json's serializers. A kept text is copied as it is when it is
    /// one line: serde_json's writer copies it, `serde_json::to_value`
    /// parses it. Not for other formats, to which a raw value reads as a
    /// struct: [`Serialize`] is for those.
    pub(crate) fn write_json_entries<M: SerializeMap>(
        &self,
        m: &mut M,
        skip: &[&str],
    ) -> Result<(), M::Error> {
        for (k, e) in self.entries.iter() {
            if skip.contains(&k.as_str()) {
                continue;
            }
            let raw = e
                .text()
                .filter(|t| !t.spans_lines())
                .and_then(|t| serde_json::from_str::<&RawValue>(t.as_str()).ok());
            match raw {
                Some(raw) => m.serialize_entry(k, raw)?,
                None => m.serialize_entry(k, &*e.peek())?,
            }
        }
        Ok(())
    }
}

/// The entries of a [`Metadata`], in order.
pub struct Iter<'a>(small_map::Iter<'a, LazyJson>);

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a String, &'a Value);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(k, e)| (k, &**e))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Metadata {
    type Item = (&'a String, &'a Value);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl IntoIterator for Metadata {
    type Item = (String, Value);
    type IntoIter = IntoIter;

    fn into_iter(self) -> IntoIter {
        IntoIter(self.entries.into_iter())
    }
}

/// The entries of a [`Metadata`] taken, in order.
pub struct IntoIter(small_map::IntoIter<LazyJson>);

impl Iterator for IntoIter {
    type Item = (String, Value);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(k, e)| (k, e.into_value()))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl ExactSizeIterator for IntoIter {}

impl std::ops::Index<&str> for Metadata {
    type Output = Value;

    /// The value at `key`, `null` when there is none (as `Value` indexes).
    fn index(&self, key: &str) -> &Value {
        self.get(key).unwrap_or(&NULL)
    }
}

impl FromIterator<(String, Value)> for Metadata {
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(iter: I) -> Self {
        Self {
            entries: iter
                .into_iter()
                .map(|(k, v)| (k, LazyJson::from(v)))
                .collect(),
        }
    }
}

impl Extend<(String, Value)> for Metadata {
    fn extend<I: IntoIterator<Item = (String, Value)>>(&mut self, iter: I) {
        for (k, v) in iter {
            self.insert(k, v);
        }
    }
}

impl From<Map<String, Value>> for Metadata {
    fn from(m: Map<String, Value>) -> Self {
        m.into_iter().collect()
    }
}

impl From<Metadata> for Map<String, Value> {
    fn from(m: Metadata) -> Self {
        m.into_iter().collect()
    }
}

impl From<Metadata> for Value {
    fn from(m: Metadata) -> Self {
        Value::Object(m.into())
    }
}

/// Equal when they hold the same keys with equal values, in any order (as
/// `serde_json::Map` compares). Two texts with the same bytes are equal
/// without being read; comparing keeps nothing it parsed.
impl PartialEq for Metadata {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self
                .entries
                .iter()
                .all(|(k, e)| other.entries.get(k).is_some_and(|o| e == o))
    }
}

impl PartialEq<Map<String, Value>> for Metadata {
    fn eq(&self, other: &Map<String, Value>) -> bool {
        self.len() == other.len()
            && self
                .entries
                .iter()
                .all(|(k, e)| other.get(k).is_some_and(|v| *e.peek() == *v))
    }
}

/// As the map of its values; keeps nothing it parsed.
impl std::fmt::Debug for Metadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.entries.iter()).finish()
    }
}

/// Written as a JSON object of its values, for any serializer. A kept text
/// is parsed for the write and not kept parsed.
impl Serialize for Metadata {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.len()))?;
        for (k, e) in self.entries.iter() {
            m.serialize_entry(k, &*e.peek())?;
        }
        m.end()
    }
}

/// Read from a JSON object (or what reads as one), every value parsed.
impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(MetadataVisitor)
    }
}

struct MetadataVisitor;

impl<'de> Visitor<'de> for MetadataVisitor {
    type Value = Metadata;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Metadata, A::Error> {
        // The hint comes from the input: it sizes at most a small start.
        let mut m = Metadata::with_capacity(access.size_hint().unwrap_or(0).min(16));
        while let Some((k, v)) = access.next_entry::<String, Value>()? {
            m.insert(k, v);
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use indexmap::IndexMap;
    use serde_json::json;

    /// A reply as a server spaces and escapes it.
    const TEXT: &str =
        r#"{"id": "r1",  "choices": [{"message": {"content": "caf\u00e9"}}], "n": 1.50}"#;

    fn kept() -> ParsedJson {
        ParsedJson::parse(TEXT.to_owned()).unwrap().1
    }

    fn unread(m: &Metadata, key: &str) -> bool {
        m.entries
            .get(key)
            .is_some_and(|e| e.text().is_some() && !e.is_read())
    }

    fn sample() -> Metadata {
        let mut m = Metadata::new();
        m.insert("a".into(), json!(1));
        m.insert_parsed("model_response".into(), kept());
        m.insert("z".into(), json!("last"));
        m
    }

    #[test]
    fn a_kept_text_reads_as_its_value_when_first_read() {
        let m = sample();
        assert!(unread(&m, "model_response"));
        assert!(m.contains_key("model_response") && m.kept_text("model_response").is_some());
        // Looking at other keys, or at the keys, reads nothing.
        assert_eq!(m.get("z"), Some(&json!("last")));
        assert_eq!(m.keys().collect::<Vec<_>>(), ["a", "model_response", "z"]);
        assert!(unread(&m, "model_response"));
        let (v, _) = ParsedJson::parse(TEXT.to_owned()).unwrap();
        // A peek parses for itself.
        assert_eq!(m.peek("model_response").as_deref(), Some(&v));
        assert_eq!(m.peek("a").as_deref(), Some(&json!(1)));
        assert!(m.peek("missing").is_none());
        assert!(unread(&m, "model_response"));
        assert_eq!(m["model_response"], v);
        assert_eq!(
            m["model_response"]["choices"][0]["message"]["content"],
            "café"
        );
        assert!(!unread(&m, "model_response"));
        assert_eq!(m["missing"], Value::Null);
    }

    #[test]
    fn it_reads_and_compares_as_the_map_of_its_values() {
        let m = sample();
        // Looking and comparing keep nothing parsed.
        let plain = Metadata::from(
            ParsedJson::parse(TEXT.to_owned())
                .unwrap()
                .0
                .as_object()
                .unwrap()
                .clone(),
        );
        assert!(format!("{m:?}").contains(r#""content": String("café")"#));
        assert_eq!(sample(), m);
        assert_ne!(plain, m);
        assert!(unread(&m, "model_response"));
        let map = m.to_map();
        assert_eq!(m, map);
        assert_eq!(Metadata::from(map.clone()), m);
        assert_eq!(m.clone().into_map(), map);
        assert_eq!(
            m.iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<Map<_, _>>(),
            map
        );
        assert_eq!(
            format!("{m:?}"),
            format!("{:?}", map.iter().collect::<IndexMap<_, _>>())
        );
        // Order does not make two maps different, as with `serde_json::Map`.
        let mut reordered = Metadata::new();
        reordered.insert("z".into(), json!("last"));
        reordered.insert_parsed("model_response".into(), kept());
        reordered.insert("a".into(), json!(1));
        assert_eq!(m, reordered);
        reordered.insert("a".into(), json!(2));
        assert_ne!(m, reordered);
    }

    #[test]
    fn changes_keep_the_order_and_read_the_text_once() {
        let mut m = sample();
        m.get_mut("model_response").unwrap()["id"] = json!("r2");
        assert!(
            m.kept_text("model_response").is_none(),
            "a changed value is no longer its text"
        );
        assert_eq!(m["model_response"]["id"], "r2");
        let old = m.insert("model_response".into(), json!(null)).unwrap();
        assert_eq!(old["id"], "r2");
        assert_eq!(m.keys().collect::<Vec<_>>(), ["a", "model_response", "z"]);
        let mut n = sample();
        let taken = n.shift_remove("model_response").unwrap();
        assert_eq!(taken["n"], json!(1.5));
        assert_eq!(n.keys().collect::<Vec<_>>(), ["a", "z"]);
        n.retain(|k, _| k != "a");
        assert_eq!(
            n.to_map(),
            json!({"z": "last"}).as_object().unwrap().clone()
        );
    }

    /// Written for serde_json: the text as received when it is one line,
    /// its value compactly when it spans lines; for any serializer: its
    /// value.
    #[test]
    fn it_writes_the_text_as_received_for_json_and_the_value_for_others() {
        struct Json<'a>(&'a Metadata);
        impl Serialize for Json<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut m = s.serialize_map(None)?;
                self.0.write_json_entries(&mut m, &["a"])?;
                m.end()
            }
        }
        let m = sample();
        let written = serde_json::to_string(&Json(&m)).unwrap();
        assert_eq!(
            written,
            format!(r#"{{"model_response":{TEXT},"z":"last"}}"#)
        );
        assert!(unread(&m, "model_response"), "writing reads nothing");
        let value = serde_json::to_value(Json(&m)).unwrap();
        assert_eq!(value["model_response"], m["model_response"]);
        // The generic form writes values (`1.50` as `1.5`), and keeps none.
        let m = sample();
        let plain = serde_json::to_string(&m).unwrap();
        assert!(unread(&m, "model_response"));
        assert_eq!(plain, serde_json::to_string(&m.to_map()).unwrap());
        assert!(unread(&m, "model_response"), "a copy keeps nothing parsed");
        // A text on several lines is written compactly.
        let mut spaced = Metadata::new();
        spaced.insert_parsed(
            "r".into(),
            ParsedJson::parse("{\n  \"a\": 1\n}".to_owned()).unwrap().1,
        );
        assert_eq!(
            serde_json::to_string(&Json(&spaced)).unwrap(),
            r#"{"r":{"a":1}}"#
        );
    }

    #[test]
    fn a_long_text_is_kept_as_its_value() {
        let padded = format!("{{{}\"a\": 1}}", " ".repeat(ParsedJson::MAX_KEPT_BYTES));
        let mut m = Metadata::new();
        m.insert_parsed("r".into(), ParsedJson::parse(padded).unwrap().1);
        assert!(m.kept_text("r").is_none());
        assert_eq!(m["r"], json!({"a": 1}));
    }

    #[test]
    fn it_reads_from_a_json_object_only() {
        let m: Metadata = serde_json::from_str(r#"{"b": [1], "a": {"x": null}}"#).unwrap();
        assert_eq!(m.keys().collect::<Vec<_>>(), ["b", "a"]);
        assert_eq!(m["a"], json!({"x": null}));
        assert!(serde_json::from_str::<Metadata>("[1]").is_err());
        assert!(serde_json::from_value::<Metadata>(json!("x")).is_err());
        assert_eq!(
            serde_json::from_value::<Metadata>(json!({"k": 1})).unwrap()["k"],
            1
        );
    }

    /// Most metadata is a few keys, found by comparing; a larger map by
    /// its index.
    #[test]
    fn keys_are_found_in_small_and_large_maps() {
        let m: Metadata = (0..20).map(|i| (format!("k{i}"), json!(i))).collect();
        assert_eq!(m.get("k17"), Some(&json!(17)));
        assert!(m.get("k20").is_none() && !m.contains_key("k20"));
        let small: Metadata = (0..3).map(|i| (format!("k{i}"), json!(i))).collect();
        assert_eq!(small.get("k2"), Some(&json!(2)));
        assert!(small.get("k3").is_none());
    }
}
