//! A message's `content` object as read, before its kind applies its rules.
//!
//! A message's kind travels in its metadata, which may come before or after
//! its content, so the content is read first into this neutral form and the
//! kind then takes the keys it knows. Read into a `serde_json::Map`, every
//! message cost a hash table, an entry list and a copy of each key, then
//! the removal of each key from the table: about a quarter of restoring a
//! branch. Here a key that some kind's content takes costs no copy, and the
//! entries are one short list searched in order (the one key most contents
//! have is held without an allocation).
//!
//! It behaves as the map did where a kind can tell: the keys keep their
//! first position, a repeated key keeps its last value, and a kind refuses
//! the first key it does not take, in order. Only the first key that no
//! kind takes is kept (every later one is refused after it, whichever the
//! kind), so the entries are at most the known keys and one more however
//! many keys a hostile file writes, and every search stays short.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::borrow::Cow;
use std::fmt;

use super::content::KEYS_BY_KIND;
use crate::participant::json_type;

/// The content's keys in their first order, each with its last value.
#[derive(Debug, Default)]
pub(crate) struct ContentFields {
    entries: Entries,
}

type Entry = (Cow<'static, str>, Value);

/// Most contents hold one key: it is held without an allocation.
#[derive(Debug, Default)]
enum Entries {
    #[default]
    Empty,
    One(Entry),
    Many(Vec<Entry>),
}

impl Entries {
    fn as_slice(&self) -> &[Entry] {
        match self {
            Entries::Empty => &[],
            Entries::One(e) => std::slice::from_ref(e),
            Entries::Many(v) => v,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [Entry] {
        match self {
            Entries::Empty => &mut [],
            Entries::One(e) => std::slice::from_mut(e),
            Entries::Many(v) => v,
        }
    }

    fn push(&mut self, e: Entry) {
        match self {
            Entries::Empty => *self = Entries::One(e),
            Entries::Many(list) => list.push(e),
            Entries::One(_) => {
                if let Entries::One(first) = std::mem::take(self) {
                    *self = Entries::Many(vec![first, e]);
                }
            }
        }
    }
}

impl ContentFields {
    /// The fields of a JSON object, or of `null` (no fields), as a message
    /// reads them from its text.
    #[cfg(test)]
    pub(crate) fn from_value(v: Value) -> Result<Self, String> {
        match v {
            Value::Null => Ok(Self::default()),
            Value::Object(m) => Ok(Self::from_map(m)),
            other => Err(not_an_object(json_type(&other))),
        }
    }

    #[cfg(test)]
    fn from_map(m: serde_json::Map<String, Value>) -> Self {
        let mut fields = Self::default();
        for (k, v) in m {
            fields.insert(k, v);
        }
        fields
    }

    fn position(&self, key: &str) -> Option<usize> {
        self.entries.as_slice().iter().position(|(k, _)| k == key)
    }

    /// Removes `key`, keeping the others' order.
    #[inline]
    pub(crate) fn take(&mut self, key: &str) -> Option<Value> {
        // A kind asks for each key it takes, most of them absent: once the
        // content's one key is taken, the rest cost a test each.
        match &self.entries {
            Entries::Empty => None,
            // The one key most contents hold: compared, and taken whole.
            Entries::One((k, _)) if k.as_ref() != key => None,
            Entries::One(_) => match std::mem::take(&mut self.entries) {
                Entries::One((_, v)) => Some(v),
                Entries::Empty | Entries::Many(_) => None,
            },
            Entries::Many(_) => self.take_held(key),
        }
    }

    fn take_held(&mut self, key: &str) -> Option<Value> {
        let at = self.position(key)?;
        match std::mem::take(&mut self.entries) {
            Entries::Empty => None,
            Entries::One((_, v)) => Some(v),
            Entries::Many(mut list) => {
                let taken = (at < list.len()).then(|| list.remove(at).1);
                if !list.is_empty() {
                    self.entries = Entries::Many(list);
                }
                taken
            }
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.as_slice().is_empty()
    }

    pub(crate) fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_some()
    }

    /// Sets `key`: a present key keeps its place, a new one goes last.
    pub(crate) fn insert(&mut self, key: String, v: Value) {
        self.put(Key::of(key), v, true);
    }

    /// Sets `key` unless it is present.
    pub(crate) fn insert_if_absent(&mut self, key: String, v: Value) {
        self.put(Key::of(key), v, false);
    }

    fn put(&mut self, key: Key, v: Value, replace: bool) {
        // A content's first key (most have no other) is set in place:
        // there is nothing to search, and nothing held to keep or drop.
        if let Entries::Empty = self.entries {
            self.entries = Entries::One((key.into_name(), v));
            return;
        }
        match self.position(key.as_str()) {
            Some(at) => {
                if let Some(slot) = self.entries.as_mut_slice().get_mut(at).filter(|_| replace) {
                    slot.1 = v;
                }
            }
            None => match key {
                Key::Known(name) => self.entries.push((Cow::Borrowed(name), v)),
                // Refused whatever the kind: a later unknown key would be
                // refused after the one kept, so it need not be kept.
                Key::Unknown(_) if self.holds_unknown() => {}
                Key::Unknown(name) => self.entries.push((Cow::Owned(name), v)),
            },
        }
    }

    /// Whether an unknown key is kept: the only keys held as owned text.
    fn holds_unknown(&self) -> bool {
        self.entries
            .as_slice()
            .iter()
            .any(|(k, _)| matches!(k, Cow::Owned(_)))
    }

    /// Refuses the first key, in order, that `allowed` does not list.
    pub(crate) fn check_keys(&self, allowed: &[&str]) -> Result<(), String> {
        match self
            .entries
            .as_slice()
            .iter()
            .find(|(k, _)| !allowed.contains(&k.as_ref()))
        {
            Some((k, _)) => Err(format!("unknown content key `{k}`")),
            None => Ok(()),
        }
    }
}

/// The static name of `key` if some kind's content takes it.
fn known(key: &str) -> Option<&'static str> {
    KEYS_BY_KIND
        .iter()
        .flat_map(|keys| keys.iter())
        .copied()
        .find(|k| *k == key)
}

fn not_an_object(found: &str) -> String {
    format!("`content` must be an object, not {found}")
}

/// `content` as a message holds it on the wire: fields, or a value of
/// another type, refused once the kind is known (as the kind's own errors
/// come after the metadata's).
#[derive(Debug)]
pub(crate) enum ContentWire {
    Fields(ContentFields),
    NotAnObject(&'static str),
}

impl Default for ContentWire {
    fn default() -> Self {
        ContentWire::Fields(ContentFields::default())
    }
}

impl ContentWire {
    pub(crate) fn into_fields(self) -> Result<ContentFields, String> {
        match self {
            ContentWire::Fields(f) => Ok(f),
            ContentWire::NotAnObject(found) => Err(not_an_object(found)),
        }
    }
}

/// A content key: a known one by its static name, any other as read.
enum Key {
    Known(&'static str),
    Unknown(String),
}

impl Key {
    fn of(s: String) -> Key {
        match known(&s) {
            Some(name) => Key::Known(name),
            None => Key::Unknown(s),
        }
    }

    fn as_str(&self) -> &str {
        match self {
            Key::Known(name) => name,
            Key::Unknown(name) => name,
        }
    }

    fn into_name(self) -> Cow<'static, str> {
        match self {
            Key::Known(name) => Cow::Borrowed(name),
            Key::Unknown(name) => Cow::Owned(name),
        }
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct K;
        impl Visitor<'_> for K {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key, E> {
                Ok(match known(s) {
                    Some(name) => Key::Known(name),
                    None => Key::Unknown(s.to_owned()),
                })
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Key, E> {
                Ok(Key::of(s))
            }
        }
        d.deserialize_str(K)
    }
}

impl<'de> Deserialize<'de> for ContentWire {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct W;
        impl W {
            fn other(v: &Value) -> ContentWire {
                ContentWire::NotAnObject(json_type(v))
            }
        }
        impl<'de> Visitor<'de> for W {
            type Value = ContentWire;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<ContentWire, A::Error> {
                let mut fields = ContentFields::default();
                // Every value is read as a `Value` reads it, whether or not
                // it is kept: a looser skip would let through a text that
                // the map would have refused.
                while let Some(k) = access.next_key::<Key>()? {
                    let v: Value = access.next_value()?;
                    fields.put(k, v, true);
                }
                Ok(ContentWire::Fields(fields))
            }
            fn visit_unit<E: de::Error>(self) -> Result<ContentWire, E> {
                Ok(ContentWire::default())
            }
            fn visit_none<E: de::Error>(self) -> Result<ContentWire, E> {
                Ok(ContentWire::default())
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<ContentWire, D::Error> {
                d.deserialize_any(self)
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<ContentWire, E> {
                Ok(Self::other(&Value::Bool(b)))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<ContentWire, E> {
                Ok(ContentWire::NotAnObject("a number"))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<ContentWire, E> {
                Ok(ContentWire::NotAnObject("a number"))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<ContentWire, E> {
                Ok(ContentWire::NotAnObject("a number"))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<ContentWire, E> {
                Ok(ContentWire::NotAnObject("a string"))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<ContentWire, A::Error> {
                let v = Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
                Ok(Self::other(&v))
            }
        }
        d.deserialize_any(W)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, json};

    fn read(text: &str) -> Result<ContentFields, String> {
        serde_json::from_str::<ContentWire>(text)
            .map_err(|e| e.to_string())?
            .into_fields()
    }

    fn keys(f: &ContentFields) -> Vec<&str> {
        f.entries
            .as_slice()
            .iter()
            .map(|(k, _)| k.as_ref())
            .collect()
    }

    #[test]
    fn keys_keep_their_first_place_and_their_last_value() {
        let f = read(r#"{"guidance": 1, "instruction": "a", "guidance": 2}"#).unwrap();
        assert_eq!(keys(&f), ["guidance", "instruction"]);
        assert_eq!(f.entries.as_slice()[0].1, json!(2));
        // As a `Map` reads the same text.
        let m: Map<String, Value> =
            serde_json::from_str(r#"{"guidance": 1, "instruction": "a", "guidance": 2}"#).unwrap();
        assert_eq!(
            m.into_iter().collect::<Vec<_>>(),
            f.entries
                .as_slice()
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn the_first_key_no_kind_takes_is_the_one_refused() {
        let f = read(r#"{"function": "f", "zz": 1, "instruction": "a", "yy": 2}"#).unwrap();
        assert_eq!(keys(&f), ["function", "zz", "instruction"]);
        assert_eq!(
            f.check_keys(&["instruction"]).unwrap_err(),
            "unknown content key `function`"
        );
        assert_eq!(
            f.check_keys(&["function", "instruction"]).unwrap_err(),
            "unknown content key `zz`"
        );
        // An inserted unknown key after a kept one is refused after it too.
        let mut f = f;
        f.insert("xx".to_owned(), json!(3));
        assert_eq!(keys(&f), ["function", "zz", "instruction"]);
    }

    /// A file may write any number of keys; the entries stay bounded.
    /// Entries leave and arrive in order whether one or many are held.
    #[test]
    fn taking_and_setting_keep_the_order() {
        let mut f = ContentFields::default();
        assert_eq!(f.take("instruction"), None);
        f.insert("instruction".into(), json!(1));
        assert!(f.contains_key("instruction"));
        assert_eq!(f.take("guidance"), None);
        assert_eq!(f.take("instruction"), Some(json!(1)));
        assert!(keys(&f).is_empty());
        for (k, v) in [("guidance", 1), ("instruction", 2), ("context", 3)] {
            f.insert(k.into(), json!(v));
        }
        f.insert_if_absent("guidance".into(), json!(9));
        f.insert("context".into(), json!(4));
        assert_eq!(keys(&f), ["guidance", "instruction", "context"]);
        assert_eq!(f.take("instruction"), Some(json!(2)));
        assert_eq!(keys(&f), ["guidance", "context"]);
        assert_eq!(f.take("guidance"), Some(json!(1)));
        assert_eq!(f.take("context"), Some(json!(4)));
        assert_eq!(f.take("context"), None);
    }

    #[test]
    fn many_keys_keep_at_most_the_known_ones_and_one_more() {
        let mut text = String::from("{");
        for i in 0..10_000 {
            text.push_str(&format!("\"k{i}\": {i},"));
        }
        let known: std::collections::BTreeSet<&str> = KEYS_BY_KIND
            .iter()
            .flat_map(|keys| keys.iter())
            .copied()
            .collect();
        for k in &known {
            text.push_str(&format!("\"{k}\": null,"));
        }
        text.push_str("\"last\": 0}");
        let f = read(&text).unwrap();
        // Every key some kind takes, and the first of the others.
        assert_eq!(f.entries.as_slice().len(), known.len() + 1);
        assert_eq!(keys(&f)[0], "k0");
    }

    #[test]
    fn content_that_is_no_object_is_refused_by_its_type() {
        for (text, found) in [
            ("[1, 2]", "an array"),
            ("\"text\"", "a string"),
            ("3", "a number"),
            ("-3", "a number"),
            ("1.5", "a number"),
            ("true", "a boolean"),
        ] {
            assert_eq!(
                read(text).unwrap_err(),
                format!("`content` must be an object, not {found}"),
                "{text}"
            );
            assert_eq!(
                ContentFields::from_value(serde_json::from_str(text).unwrap()).unwrap_err(),
                format!("`content` must be an object, not {found}"),
            );
        }
        assert!(read("null").unwrap().entries.as_slice().is_empty());
    }

    /// A value the content does not keep is still read as a `Value` reads
    /// it: what a `Value` refuses is refused.
    #[test]
    fn every_value_is_read_as_a_value_reads_it() {
        for text in [
            r#"{"zz": "\udc00", "yy": 1}"#,
            r#"{"zz": 1, "yy": 1e999}"#,
            r#"{"instruction": "a", "zz": 1, "yy": [1e999]}"#,
        ] {
            assert!(read(text).is_err(), "{text}");
            assert!(serde_json::from_str::<Value>(text).is_err(), "{text}");
        }
    }

    /// serde_json's marker for a raw value is no content key: a `Value`
    /// would have read its string as JSON text.
    #[test]
    fn the_raw_value_marker_is_an_unknown_key() {
        let f = read(r#"{"$serde_json::private::RawValue": "{\"instruction\": \"a\"}"}"#).unwrap();
        assert_eq!(
            f.check_keys(&["instruction"]).unwrap_err(),
            "unknown content key `$serde_json::private::RawValue`"
        );
    }
}
