//! Reading a typed struct only from a JSON object.
//!
//! serde's derived structs also read from a JSON array, taking its items
//! as the fields in order: `[1, 2]` reads as `{"a": 1, "b": 2}`. A reader
//! that must take exactly what a `Value` lookup by key takes (a reply read
//! straight from its text) uses these instead.

use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

/// `T` read from a JSON object; anything else is an error.
pub fn object_only<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    d.deserialize_map(ObjectVisitor(PhantomData))
}

/// `T` read from a JSON object, `None` from `null`; anything else is an
/// error.
pub fn optional_object<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    Option::<Object<T>>::deserialize(d).map(|o| o.map(|Object(t)| t))
}

/// `T`, read only from a JSON object.
pub struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        object_only(d).map(Object)
    }
}

struct ObjectVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Deserialize)]
    struct Pair {
        a: u8,
        b: Option<u8>,
    }

    #[test]
    fn only_an_object_reads_as_a_struct() {
        // What derive alone accepts.
        assert!(serde_json::from_str::<Pair>("[1, 2]").is_ok());
        let read = |t: &str| serde_json::from_str::<Object<Pair>>(t).map(|Object(p)| p);
        assert_eq!(read(r#"{"a": 1}"#).unwrap(), Pair { a: 1, b: None });
        assert!(read("[1, 2]").is_err() && read("null").is_err() && read("1").is_err());
        let opt = |t: &str| optional_object::<_, Pair>(&mut serde_json::Deserializer::from_str(t));
        assert_eq!(opt("null").unwrap(), None);
        assert_eq!(
            opt(r#"{"a": 2, "b": 3}"#).unwrap(),
            Some(Pair { a: 2, b: Some(3) })
        );
        assert!(opt("[2, 3]").is_err());
    }
}
