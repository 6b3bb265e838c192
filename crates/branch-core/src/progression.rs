//! `Progression`: an ordered list of ids with an optional name.

// Parsing of stored data: nothing read from outside may panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use serde::de::{self, Deserializer};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use uuid::Uuid;

use crate::element::{self, Element, Finite, MetadataOut, de_created_at, de_metadata, lion_class};
use crate::metadata::Metadata;
use crate::participant::json_type;

/// An ordered list of element ids. Duplicates are allowed in a bare
/// progression; a [`crate::Pile`] forbids them in its own.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Progression {
    /// Identity of the progression itself.
    pub element: Element,
    /// The ids, in order.
    pub order: Vec<Uuid>,
    /// Optional name, always written (`null` when absent).
    pub name: Option<String>,
}

impl Progression {
    /// An empty, unnamed progression.
    pub fn new() -> Self {
        Self::default()
    }

    /// A progression over the given ids.
    pub fn from_ids(order: impl IntoIterator<Item = Uuid>) -> Self {
        Self {
            order: order.into_iter().collect(),
            ..Self::default()
        }
    }

    /// Number of ids.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether there are no ids.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Whether `id` occurs.
    pub fn contains(&self, id: &Uuid) -> bool {
        self.order.contains(id)
    }

    /// Iterates the ids in order.
    pub fn iter(&self) -> impl Iterator<Item = &Uuid> {
        self.order.iter()
    }

    /// Builds a progression from stored data: a Progression object, or a
    /// bare `order` value (flattened as the reference does).
    pub fn from_value(v: &Value) -> Result<Self, String> {
        match v {
            Value::Object(_) => Self::deserialize(v).map_err(|e| e.to_string()),
            other => Ok(Self::from_ids(flatten_order(other)?)),
        }
    }
}

/// Flattens an `order` value: UUID strings, objects with an `id`, nested
/// lists (depth first), or a mapping (its keys).
pub fn flatten_order(v: &Value) -> Result<Vec<Uuid>, String> {
    fn walk(v: &Value, out: &mut Vec<Uuid>, depth: usize) -> Result<(), String> {
        if depth > 64 {
            return Err("order nests deeper than 64 levels".into());
        }
        match v {
            Value::String(s) => out
                .push(element::parse_uuid(s).ok_or_else(|| format!("`{s}` is not a valid UUID"))?),
            Value::Array(items) => {
                for i in items {
                    walk(i, out, depth + 1)?;
                }
            }
            Value::Object(m) => {
                if let Some(id) = m.get("id") {
                    walk(id, out, depth + 1)?;
                } else {
                    for k in m.keys() {
                        walk(&Value::String(k.clone()), out, depth + 1)?;
                    }
                }
            }
            Value::Null => {}
            other => {
                return Err(format!(
                    "an order item must be an id, not {}",
                    json_type(other)
                ));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(v, &mut out, 0)?;
    Ok(out)
}

fn de_order<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Uuid>, D::Error> {
    OrderRead::deserialize(d)?.0.map_err(de::Error::custom)
}

/// An `order` as read, flattened as [`flatten_order`] flattens it, or the
/// first reason it is not one. The whole value is read either way (each
/// part as a `Value` reads it), so a caller that ignores a bad order can
/// read on.
///
/// The common shape, a flat list of id strings, is parsed where it lies:
/// read as a `Value` first, every id was a copy made only to be parsed.
pub(crate) struct OrderRead(pub(crate) Result<Vec<Uuid>, String>);

/// The most ids an order's announced length reserves up front: a binary
/// format could announce any length; past this the list grows as ids
/// arrive.
const MAX_RESERVED_IDS: usize = 1 << 20;

impl OrderRead {
    fn flattened(v: &Value) -> Self {
        OrderRead(flatten_order(v))
    }
}

impl<'de> Deserialize<'de> for OrderRead {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(OrderVisitor)
    }
}

pub(crate) struct OrderVisitor;

impl<'de> de::Visitor<'de> for OrderVisitor {
    type Value = OrderRead;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of ids")
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<OrderRead, A::Error> {
        let room = seq.size_hint().unwrap_or(0).min(MAX_RESERVED_IDS);
        let mut out = Ok(Vec::with_capacity(room));
        while let Some(item) = seq.next_element::<OrderItem>()? {
            // After the first bad item the rest is read, not kept.
            let Ok(ids) = &mut out else { continue };
            match item {
                OrderItem::Id(id) => ids.push(id),
                OrderItem::Bad(why) => out = Err(why),
                OrderItem::Other(v) => match flatten_order(&v) {
                    Ok(more) => ids.extend(more),
                    Err(why) => out = Err(why),
                },
            }
        }
        Ok(OrderRead(out))
    }
    // Any other shape is read whole and flattened.
    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<OrderRead, A::Error> {
        let v = Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(OrderRead::flattened(&v))
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<OrderRead, E> {
        Ok(OrderRead::flattened(&Value::String(s.to_owned())))
    }
    fn visit_unit<E: de::Error>(self) -> Result<OrderRead, E> {
        Ok(OrderRead(Ok(Vec::new())))
    }
    fn visit_none<E: de::Error>(self) -> Result<OrderRead, E> {
        Ok(OrderRead(Ok(Vec::new())))
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<OrderRead, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_bool<E: de::Error>(self, b: bool) -> Result<OrderRead, E> {
        Ok(OrderRead::flattened(&Value::Bool(b)))
    }
    fn visit_i64<E: de::Error>(self, n: i64) -> Result<OrderRead, E> {
        Ok(OrderRead::flattened(&n.into()))
    }
    fn visit_u64<E: de::Error>(self, n: u64) -> Result<OrderRead, E> {
        Ok(OrderRead::flattened(&n.into()))
    }
    fn visit_f64<E: de::Error>(self, n: f64) -> Result<OrderRead, E> {
        // Refused as a number, whatever its value.
        let n = serde_json::Number::from_f64(n).unwrap_or_else(|| 0.into());
        Ok(OrderRead::flattened(&Value::Number(n)))
    }
}

/// One item of a list order: an id string, parsed; a string that is no
/// id, with the reason; or any other value, to be flattened.
enum OrderItem {
    Id(Uuid),
    Bad(String),
    Other(Value),
}

impl<'de> Deserialize<'de> for OrderItem {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::str_or_value::str_or_value(
            d,
            |s| match element::parse_uuid(s) {
                Some(id) => OrderItem::Id(id),
                None => OrderItem::Bad(format!("`{s}` is not a valid UUID")),
            },
            OrderItem::Other,
        )
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProgressionWire {
    #[serde(default, deserialize_with = "element::de_opt_uuid")]
    id: Option<Uuid>,
    #[serde(default, deserialize_with = "de_opt_created_at")]
    created_at: Option<f64>,
    #[serde(default, deserialize_with = "de_metadata")]
    metadata: Metadata,
    #[serde(default, deserialize_with = "de_order")]
    order: Vec<Uuid>,
    #[serde(default)]
    name: Option<String>,
}

pub(crate) fn de_opt_created_at<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    de_created_at(d).map(Some)
}

impl<'de> Deserialize<'de> for Progression {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Only from an object: serde's derive would also read a list, its
        // items taken as the fields in order.
        let w: ProgressionWire = crate::object_only::object_only(d)?;
        Ok(Progression {
            element: Element {
                id: w.id.unwrap_or_else(Uuid::new_v4),
                created_at: w.created_at.unwrap_or_else(element::now),
                metadata: w.metadata,
            },
            order: w.order,
            name: w.name,
        })
    }
}

impl Serialize for Progression {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(5))?;
        m.serialize_entry("id", &self.element.id)?;
        m.serialize_entry("created_at", &Finite(self.element.created_at))?;
        m.serialize_entry(
            "metadata",
            &MetadataOut {
                metadata: &self.element.metadata,
                lion_class: lion_class::PROGRESSION,
            },
        )?;
        m.serialize_entry("order", &self.order)?;
        m.serialize_entry("name", &self.name)?;
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn order_is_flattened() {
        let a = "6e215c90-0fc7-4af0-8fc0-c5dc415c1108";
        let b = "4b233fd6-ff53-425f-8a3f-a39453db87d6";
        let p = Progression::from_value(&json!({"order": [[a], {"id": b}]})).unwrap();
        assert_eq!(p.order.len(), 2);
        assert_eq!(p.order[1].to_string(), b);
        assert!(Progression::from_value(&json!({"order": [1]})).is_err());
    }

    #[test]
    fn shape() {
        let p = Progression::from_ids([Uuid::nil()]);
        let v = serde_json::to_value(&p).unwrap();
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["id", "created_at", "metadata", "order", "name"]);
        assert_eq!(v["metadata"]["lion_class"], lion_class::PROGRESSION);
    }
}
