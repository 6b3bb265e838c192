//! Reading a typed value from JSON text while checking, in the same pass,
//! that the whole text reads as a `Value` ([`crate::ParsedJson::read_with`]).
//!
//! A typed reader skips what it has no field for through
//! `deserialize_ignored_any`, and serde_json skips such a value more
//! loosely than `Value`'s reader reads it: a lone surrogate escape, a
//! number out of range or nesting past the recursion limit pass. What the
//! typed reader does read is held to `Value`'s rules already (strings are
//! unescaped and checked, numbers parsed, depth counted). So wrapping the
//! deserializer, every map, every sequence and every value in them, and
//! walking each skipped value as `ParsedJson::check` walks a text, makes
//! the typed read accept exactly the texts it can read that `Value`'s
//! reader accepts too: one pass instead of a typed read and a check.
//!
//! Map keys are checked as the check checks them (serde_json's raw-value
//! marker is refused). An enum and a `RawValue` are refused: an enum's
//! content would reach its reader unwrapped, and serde_json skips a raw
//! value's text loosely; no reader here needs either.

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::parsed_json::{Checked, CheckedKey, RAW_VALUE_TOKEN};

/// A deserializer whose skipped values are checked as `Value`'s reader
/// would read them. `key`: it reads a map key.
pub struct Checking<D> {
    de: D,
    key: bool,
}

impl<D> Checking<D> {
    /// `de`, checking.
    pub fn new(de: D) -> Self {
        Self { de, key: false }
    }
}

/// A visitor whose maps, sequences and options are read checking.
struct Wrap<V> {
    inner: V,
    key: bool,
}

/// A seed that reads through a checking deserializer.
struct Seed<S> {
    inner: S,
    key: bool,
}

/// Map access whose keys and values are read checking.
struct Map<A>(A);

/// Sequence access whose elements are read checking.
struct Seq<A>(A);

macro_rules! forward {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {$(
        fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, D::Error> {
            self.de.$method($($arg,)* Wrap { inner: visitor, key: self.key })
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Checking<D> {
    type Error = D::Error;

    forward! {
        deserialize_any();
        deserialize_bool();
        deserialize_i8();
        deserialize_i16();
        deserialize_i32();
        deserialize_i64();
        deserialize_i128();
        deserialize_u8();
        deserialize_u16();
        deserialize_u32();
        deserialize_u64();
        deserialize_u128();
        deserialize_f32();
        deserialize_f64();
        deserialize_char();
        deserialize_str();
        deserialize_string();
        deserialize_bytes();
        deserialize_byte_buf();
        deserialize_option();
        deserialize_unit();
        deserialize_unit_struct(name: &'static str);
        deserialize_seq();
        deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_struct(name: &'static str, fields: &'static [&'static str]);
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        deserialize_identifier();
    }

    /// serde_json reads a `RawValue` through a newtype of this name, and
    /// skips its text as loosely as any skip: refused, as an enum is.
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        if name == RAW_VALUE_TOKEN {
            return Err(de::Error::custom(
                "a raw value is not read by a checked read",
            ));
        }
        self.de.deserialize_newtype_struct(
            name,
            Wrap {
                inner: visitor,
                key: self.key,
            },
        )
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        if self.key {
            CheckedKey::deserialize(self.de)?;
        } else {
            Checked::deserialize(self.de)?;
        }
        visitor.visit_unit()
    }

    fn is_human_readable(&self) -> bool {
        self.de.is_human_readable()
    }
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<S::Value, D::Error> {
        self.inner.deserialize(Checking { de, key: self.key })
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Map<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.0.next_key_seed(Seed {
            inner: seed,
            key: true,
        })
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.0.next_value_seed(Seed {
            inner: seed,
            key: false,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Seq<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.0.next_element_seed(Seed {
            inner: seed,
            key: false,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<V> Wrap<V> {
    /// A key string is refused when it is serde_json's raw-value marker.
    fn check_key<E: de::Error>(&self, s: &str) -> Result<(), E> {
        if self.key && s == RAW_VALUE_TOKEN {
            Err(E::custom("a key reserved by serde_json"))
        } else {
            Ok(())
        }
    }
}

macro_rules! pass {
    ($($method:ident($ty:ty);)*) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
            self.inner.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.expecting(f)
    }

    pass! {
        visit_bool(bool);
        visit_i8(i8);
        visit_i16(i16);
        visit_i32(i32);
        visit_i64(i64);
        visit_i128(i128);
        visit_u8(u8);
        visit_u16(u16);
        visit_u32(u32);
        visit_u64(u64);
        visit_u128(u128);
        visit_f32(f32);
        visit_f64(f64);
        visit_char(char);
        visit_bytes(&[u8]);
        visit_borrowed_bytes(&'de [u8]);
        visit_byte_buf(Vec<u8>);
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<V::Value, E> {
        self.check_key(v)?;
        self.inner.visit_str(v)
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<V::Value, E> {
        self.check_key(v)?;
        self.inner.visit_borrowed_str(v)
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<V::Value, E> {
        self.check_key(&v)?;
        self.inner.visit_string(v)
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<V::Value, D::Error> {
        self.inner.visit_some(Checking { de, key: false })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, de: D) -> Result<V::Value, D::Error> {
        self.inner
            .visit_newtype_struct(Checking { de, key: self.key })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.inner.visit_seq(Seq(seq))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(Map(map))
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, _: A) -> Result<V::Value, A::Error> {
        Err(de::Error::custom("an enum is not read by a checked read"))
    }
}

#[cfg(test)]
mod tests {
    use crate::ParsedJson;
    use serde::Deserialize;
    use std::borrow::Cow;

    #[derive(Debug, Deserialize)]
    struct Named<'a> {
        #[serde(borrow)]
        name: Cow<'a, str>,
        #[serde(default)]
        inner: Option<Box<Named<'a>>>,
        #[serde(default)]
        list: Vec<Option<u8>>,
    }

    fn read(text: &str) -> Result<String, String> {
        ParsedJson::read_with(text.to_owned(), |d| {
            Named::deserialize(d).map(|n| {
                let inner = n.inner.map(|i| i.name.into_owned()).unwrap_or_default();
                format!("{} {inner} {:?}", n.name, n.list)
            })
        })
        .map(|(r, kept)| {
            assert_eq!(kept.as_str(), text);
            r
        })
    }

    #[test]
    fn what_a_typed_read_skips_is_held_to_the_rules_of_a_value() {
        let deep = format!("[{}]", "[".repeat(200) + &"]".repeat(200));
        let skipped = [
            r#""\ud800""#,
            r#""\udc00 and more""#,
            "1e400",
            "-1e400",
            &deep,
            r#"[{"a": {"b": ["\ud800"]}}]"#,
            // Read by `Value`'s reader, as the raw JSON `1`: refused by
            // the check, which keeps only texts that read back as written.
            r#"{"$serde_json::private::RawValue": "1"}"#,
        ];
        for bad in skipped {
            // At the top, in a nested map, and in a sequence's map.
            let texts = [
                format!(r#"{{"name": "a", "other": {bad}}}"#),
                format!(r#"{{"name": "a", "inner": {{"name": "b", "other": {bad}}}}}"#),
                format!(r#"{{"name": "a", "list": [1, null], "x": [{{"y": {bad}}}]}}"#),
            ];
            for t in &texts {
                assert!(ParsedJson::check(t.clone()).is_err(), "{t}");
                assert!(serde_json::from_str::<Named<'_>>(t).is_ok(), "{t}");
                assert_eq!(read(t), Err(t.clone()), "{t}");
            }
        }
        // The marker as a key of the struct read itself.
        let t = r#"{"name": "a", "$serde_json::private::RawValue": 1}"#;
        assert_eq!(read(t), Err(t.to_owned()));
        // Trailing text is refused, as by a parse.
        assert!(read(r#"{"name": "a"} x"#).is_err());
        // A raw value is refused: serde_json would skip its text loosely.
        let raw = |t: &str| {
            ParsedJson::read_with(t.to_owned(), |d| {
                Box::<serde_json::value::RawValue>::deserialize(d).map(|r| r.get().len())
            })
            .map(|(n, _)| n)
        };
        assert!(serde_json::from_str::<Box<serde_json::value::RawValue>>("[1]").is_ok());
        assert_eq!(raw("[1]"), Err("[1]".to_owned()));
    }

    #[test]
    fn a_text_a_value_reads_is_read_typed_in_one_pass() {
        let t = r#"{"id": "\ud83d\ude00", "name": "a\u00e9", "n": [1e300, {"k": null}],
            "inner": {"name": "b", "z": true}, "list": [3, null]}"#;
        assert_eq!(read(t).unwrap(), "aé b [Some(3), None]");
        // The typed reader's own refusals stay refusals.
        for t in [
            r#"{"list": []}"#,
            r#"{"name": 1}"#,
            r#"{"name": "a", "list": [256]}"#,
        ] {
            assert!(read(t).is_err(), "{t}");
        }
    }
}
