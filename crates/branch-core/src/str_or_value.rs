//! Reading a value that is usually a string without copying the string.
//!
//! A stored message names its class, its participants and its order's ids
//! as strings, read once to be parsed. Read as a `String` or a `Value`
//! first, each was a copy made only to be parsed. [`str_or_value`] hands
//! a string to its reader where it lies and anything else whole, as a
//! `Value` reads it, so the rare other shapes are judged as they were.

use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Number, Value};

/// Reads one value: a string is given to `on_str`, anything else (null
/// included) to `on_other` as the `Value` it reads as.
pub(crate) fn str_or_value<'de, D, T>(
    d: D,
    on_str: impl FnOnce(&str) -> T,
    on_other: impl FnOnce(Value) -> T,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    d.deserialize_any(StrOrValue {
        on_str,
        on_other,
        out: PhantomData,
    })
}

struct StrOrValue<S, O, T> {
    on_str: S,
    on_other: O,
    out: PhantomData<T>,
}

impl<'de, S, O, T> Visitor<'de> for StrOrValue<S, O, T>
where
    S: FnOnce(&str) -> T,
    O: FnOnce(Value) -> T,
{
    type Value = T;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<T, E> {
        Ok((self.on_str)(s))
    }

    fn visit_unit<E: de::Error>(self) -> Result<T, E> {
        Ok((self.on_other)(Value::Null))
    }

    fn visit_none<E: de::Error>(self) -> Result<T, E> {
        Ok((self.on_other)(Value::Null))
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<T, E> {
        Ok((self.on_other)(Value::Bool(b)))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<T, E> {
        Ok((self.on_other)(n.into()))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<T, E> {
        Ok((self.on_other)(n.into()))
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<T, E> {
        // A non-finite number is no JSON value, but it is still a number:
        // it must not read as `null`, as `Value::from` would make it.
        let n = Number::from_f64(n).unwrap_or_else(|| 0.into());
        Ok((self.on_other)(Value::Number(n)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
        let v = Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok((self.on_other)(v))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        let v = Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok((self.on_other)(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What each shape reads as, from text and from a parsed value.
    fn read(text: &str) -> Result<String, String> {
        let name = |v: Value| format!("other {v}");
        let mut de = serde_json::Deserializer::from_str(text);
        let from_text =
            str_or_value(&mut de, |s| format!("str {s}"), name).map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let from_value = str_or_value(&v, |s| format!("str {s}"), name).unwrap();
        assert_eq!(from_text, from_value, "{text}");
        Ok(from_text)
    }

    #[test]
    fn a_string_is_read_where_it_lies_and_anything_else_whole() {
        assert_eq!(read(r#""a\nb""#).unwrap(), "str a\nb");
        assert_eq!(read("null").unwrap(), "other null");
        assert_eq!(read("true").unwrap(), "other true");
        assert_eq!(read("-3").unwrap(), "other -3");
        assert_eq!(read("3").unwrap(), "other 3");
        assert_eq!(read("1.5").unwrap(), "other 1.5");
        assert_eq!(
            read(r#"[1, {"a": "b"}]"#).unwrap(),
            r#"other [1,{"a":"b"}]"#
        );
        assert_eq!(read(r#"{"a": [null]}"#).unwrap(), r#"other {"a":[null]}"#);
        // What a `Value` refuses is refused.
        assert!(read(r#"[1e999]"#).is_err());
        assert!(read(r#"{"a": "\udc00"}"#).is_err());
    }

    #[test]
    fn a_number_that_is_no_json_number_still_reads_as_a_number() {
        let read = |n: f64| {
            str_or_value(
                de::value::F64Deserializer::<serde_json::Error>::new(n),
                |s| Value::String(s.into()),
                |v| v,
            )
            .unwrap()
        };
        assert!(read(f64::NAN).is_number());
        assert!(read(f64::INFINITY).is_number());
        assert_eq!(read(2.5), json!(2.5));
    }
}
