//! Stored metadata as read: the `lion_class` that names what carries it
//! taken out while the object is read, the other keys kept.
//!
//! Read as a whole `Metadata`, the class's text was copied into the map
//! (with room for it) only to be removed again; whatever carried metadata
//! of only its class (nearly every message, pile and log) then kept an
//! empty allocation for as long as it lived. Read here, the class goes to
//! its own reader where it lies, and such metadata allocates nothing.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use crate::metadata::Metadata;
use crate::str_or_value::str_or_value;

/// Metadata read with its class apart; `C` reads the class.
#[derive(Debug)]
pub(crate) struct ClassedMetadata<C> {
    pub(crate) class: Option<C>,
    pub(crate) rest: Metadata,
}

impl<C> Default for ClassedMetadata<C> {
    fn default() -> Self {
        Self {
            class: None,
            rest: Metadata::new(),
        }
    }
}

/// A class that is only read, as a `Value` reads it: a pile's, a
/// progression's or a log's class is written anew on output.
pub(crate) struct AnyClass;

impl<'de> Deserialize<'de> for AnyClass {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        str_or_value(d, |_| AnyClass, |_| AnyClass)
    }
}

const CLASS_KEY: &str = "lion_class";

impl<'de, C: Deserialize<'de>> Deserialize<'de> for ClassedMetadata<C> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(MetaVisitor(PhantomData))
    }
}

struct MetaVisitor<C>(PhantomData<C>);

impl<'de, C: Deserialize<'de>> Visitor<'de> for MetaVisitor<C> {
    type Value = ClassedMetadata<C>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
        // The hint comes from the input: it sizes at most a small start,
        // and only once a key other than the class arrives.
        let room = access.size_hint().unwrap_or(0).min(16);
        let mut out = ClassedMetadata::default();
        while let Some(key) = access.next_key::<MetaKey>()? {
            match key {
                // A repeated key keeps its last value, as in a map.
                MetaKey::Class => out.class = Some(access.next_value::<C>()?),
                MetaKey::Other(k) => {
                    let v: Value = access.next_value()?;
                    if out.rest.is_empty() {
                        out.rest = Metadata::with_capacity(room.saturating_sub(1).max(1));
                    }
                    out.rest.insert(k, v);
                }
            }
        }
        Ok(out)
    }
}

enum MetaKey {
    Class,
    Other(String),
}

impl<'de> Deserialize<'de> for MetaKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct K;
        impl Visitor<'_> for K {
            type Value = MetaKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<MetaKey, E> {
                Ok(match s {
                    CLASS_KEY => MetaKey::Class,
                    other => MetaKey::Other(other.to_owned()),
                })
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<MetaKey, E> {
                Ok(match s.as_str() {
                    CLASS_KEY => MetaKey::Class,
                    _ => MetaKey::Other(s),
                })
            }
        }
        d.deserialize_str(K)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(text: &str) -> ClassedMetadata<AnyClass> {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn any_class_is_taken_out_and_the_rest_kept_in_order() {
        for class in [r#""a.Pile""#, "null", "1", "[1]", r#"{"a": "b"}"#] {
            let m = read(&format!(
                r#"{{"b": 1, "lion_class": {class}, "a": {{"c": [2]}}}}"#
            ));
            assert!(m.class.is_some(), "{class}");
            assert_eq!(
                m.rest.keys().map(String::as_str).collect::<Vec<_>>(),
                ["b", "a"]
            );
            assert_eq!(
                serde_json::to_value(&m.rest).unwrap(),
                json!({"b": 1, "a": {"c": [2]}})
            );
        }
        let only = read(r#"{"lion_class": "a.Log"}"#);
        assert!(only.rest.is_empty());
        assert_eq!(only.rest.capacity(), 0);
        // A class a `Value` refuses is refused here too, and so is anything
        // but an object.
        assert!(
            serde_json::from_str::<ClassedMetadata<AnyClass>>(r#"{"lion_class": [1e999]}"#)
                .is_err()
        );
        for not_an_object in ["[]", r#"["lion_class", "x"]"#, "1", r#""x""#] {
            assert!(serde_json::from_str::<ClassedMetadata<AnyClass>>(not_an_object).is_err());
        }
    }
}
