//! `Pile<T>`: an id-keyed collection plus the progression that orders it.

// Parsing of stored data: nothing read from outside may panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use indexmap::IndexMap;
use serde::de::{self, Deserializer};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::element::{self, Element, Finite, MetadataOut, de_metadata, lion_class};
use crate::metadata::Metadata;
use crate::progression::{OrderRead, OrderVisitor, Progression, de_opt_created_at};

/// The hasher of a pile's id map. Ids come from files and peers, so the
/// hash must be keyed with random keys, or colliding ids could be chosen
/// (std's SipHash and aHash both are; foldhash's authors call theirs
/// minimally resistant, so it is not used). aHash costs a fraction of
/// SipHash on a 16-byte id: a restore, which hashes every message's id,
/// takes 8.7% fewer instructions with it (`bench_serialize`, callgrind).
/// Each map draws its own keys, 16 bytes more than std's a pile; one
/// process-wide key read through a `OnceLock` gave back half the saving.
pub(crate) type IdHasher = ahash::RandomState;

/// A pile's items by id, in insertion order.
pub(crate) type ItemMap<T> = IndexMap<Uuid, T, IdHasher>;

/// Anything a pile can hold: it has an id.
pub trait Stored {
    /// The element id.
    fn id(&self) -> Uuid;
}

/// Where the metadata key goes when an object is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetaPlacement<'a> {
    /// `metadata` right after `created_at` (python and json modes).
    Head,
    /// Renamed and moved after the object's own keys (db mode).
    Tail(&'a str),
}

/// An id → item map in insertion order, with a [`Progression`] that gives
/// the logical order. The progression is authoritative: iteration follows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Pile<T> {
    /// Identity of the pile.
    pub element: Element,
    items: ItemMap<T>,
    progression: Progression,
    strict_type: bool,
}

impl<T: Stored> Default for Pile<T> {
    fn default() -> Self {
        Self::new(false)
    }
}

impl<T: Stored> Pile<T> {
    /// An empty pile. `strict_type` is written as is (`false` for messages,
    /// `true` for logs).
    pub fn new(strict_type: bool) -> Self {
        Self {
            element: Element::new(),
            items: ItemMap::default(),
            progression: Progression::new(),
            strict_type,
        }
    }

    /// Number of items.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the pile is empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Whether an item with this id is present.
    pub fn contains(&self, id: &Uuid) -> bool {
        self.items.contains_key(id)
    }

    /// The item with this id.
    pub fn get(&self, id: &Uuid) -> Option<&T> {
        self.items.get(id)
    }

    /// The item with this id, mutably.
    pub fn get_mut(&mut self, id: &Uuid) -> Option<&mut T> {
        self.items.get_mut(id)
    }

    /// The item at logical position `index`.
    pub fn at(&self, index: usize) -> Option<&T> {
        self.progression
            .order
            .get(index)
            .and_then(|id| self.items.get(id))
    }

    /// Appends an item; an item whose id is present replaces it in place.
    pub fn push(&mut self, item: T) {
        self.push_full(item);
    }

    /// [`Pile::push`], returning the item's storage index and whether it is
    /// new (one hash lookup on the hot path of every added message).
    pub(crate) fn push_full(&mut self, item: T) -> (usize, bool) {
        let id = item.id();
        self.reserve_first();
        let (index, old) = self.items.insert_full(id, item);
        if old.is_none() {
            self.progression.order.push(id);
        }
        (index, old.is_none())
    }

    /// The item at a storage index returned by `push_full`.
    /// The item with this id and its insertion index (for walking the
    /// progression in step with [`Pile::get_index`], which needs no hash
    /// while the two agree).
    pub fn get_indexed(&self, id: &Uuid) -> Option<(usize, &T)> {
        self.items.get_full(id).map(|(i, _, v)| (i, v))
    }

    /// The item at this insertion index.
    pub fn get_index(&self, index: usize) -> Option<&T> {
        self.items.get_index(index).map(|(_, v)| v)
    }

    /// Inserts an item at logical position 0 (it is appended to the map, so
    /// `collections` order and `progression` order then differ, as in the
    /// reference after a system replacement).
    pub fn push_front(&mut self, item: T) {
        let id = item.id();
        self.reserve_first();
        if self.items.insert(id, item).is_none() {
            self.progression.order.insert(0, id);
        }
    }

    /// Most branches hold few messages until a conversation starts: the
    /// first item gets room for itself only, instead of the default four.
    fn reserve_first(&mut self) {
        if self.items.capacity() == 0 {
            self.items.reserve_exact(1);
            self.progression.order.reserve_exact(1);
        }
    }

    /// Removes an item by id.
    pub fn remove(&mut self, id: &Uuid) -> Option<T> {
        let item = self.items.shift_remove(id)?;
        self.progression.order.retain(|x| x != id);
        Some(item)
    }

    /// Removes every item.
    pub fn clear(&mut self) {
        self.items.clear();
        self.progression.order.clear();
    }

    /// Drops every item after the first `len` in logical order.
    pub fn truncate(&mut self, len: usize) {
        while self.progression.order.len() > len {
            if let Some(id) = self.progression.order.pop() {
                self.items.shift_remove(&id);
            }
        }
    }

    /// Iterates items in logical order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + ExactSizeIterator {
        self.progression.order.iter().map(|id| &self.items[id])
    }

    /// Iterates items in insertion (`collections`) order.
    pub fn iter_insertion_order(&self) -> impl Iterator<Item = &T> {
        self.items.values()
    }

    /// The logical order.
    pub fn progression(&self) -> &Progression {
        &self.progression
    }

    /// The `strict_type` flag written with the pile.
    pub fn strict_type(&self) -> bool {
        self.strict_type
    }

    pub(crate) fn from_parts(
        element: Element,
        items: ItemMap<T>,
        progression: Progression,
        strict_type: bool,
    ) -> Self {
        Self {
            element,
            items,
            progression,
            strict_type,
        }
    }

    /// Checks the pile invariant: the progression names every item exactly
    /// once. Holds for every pile built through this API; used by loaders.
    pub(crate) fn validate_order(items: &ItemMap<T>, order: &[Uuid]) -> Result<(), String> {
        // An order that is the items' own (as every writer writes a pile)
        // is checked by comparing, without a lookup: the map's ids are
        // distinct, so the same ids at the same places name each once.
        if order.len() == items.len() && items.keys().eq(order.iter()) {
            return Ok(());
        }
        // Each id found in the pile marks its item: one lookup an id, and a
        // mark seen twice is a duplicate (no set of ids is built).
        let mut seen = vec![false; items.len()];
        let mut missing = None;
        for id in order {
            match items.get_index_of(id).and_then(|i| seen.get_mut(i)) {
                Some(mark) if *mark => {
                    return Err("there are duplicate elements in the order".into());
                }
                Some(mark) => *mark = true,
                None => {
                    // An id twice, both missing, is still a duplicate.
                    if missing.is_none() {
                        missing = Some(*id);
                    }
                }
            }
        }
        if missing.is_some()
            && order.iter().collect::<std::collections::HashSet<_>>().len() != order.len()
        {
            return Err("there are duplicate elements in the order".into());
        }
        if order.len() != items.len() {
            return Err(format!(
                "the length of the order ({}) does not match the length of the pile ({})",
                order.len(),
                items.len()
            ));
        }
        if let Some(missing) = missing {
            return Err(format!(
                "the order does not match the pile: {missing} not found"
            ));
        }
        Ok(())
    }
}

/// Writes a pile with the metadata placement of the mode.
pub(crate) struct PileOut<'a, T> {
    pub(crate) pile: &'a Pile<T>,
    pub(crate) meta: MetaPlacement<'a>,
}

impl<T: Serialize> Serialize for PileOut<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Collections<'a, T>(&'a ItemMap<T>);
        impl<T: Serialize> Serialize for Collections<'_, T> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_seq(self.0.values())
            }
        }
        let p = self.pile;
        let meta = MetadataOut {
            metadata: &p.element.metadata,
            lion_class: lion_class::PILE,
        };
        let mut m = s.serialize_map(Some(6))?;
        m.serialize_entry("id", &p.element.id)?;
        m.serialize_entry("created_at", &Finite(p.element.created_at))?;
        if self.meta == MetaPlacement::Head {
            m.serialize_entry("metadata", &meta)?;
        }
        m.serialize_entry("collections", &Collections(&p.items))?;
        m.serialize_entry("progression", &p.progression)?;
        m.serialize_entry("strict_type", &p.strict_type)?;
        if let MetaPlacement::Tail(key) = self.meta {
            m.serialize_entry(key, &meta)?;
        }
        m.end()
    }
}

impl<T: Serialize> Serialize for Pile<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        PileOut {
            pile: self,
            meta: MetaPlacement::Head,
        }
        .serialize(s)
    }
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    bound(deserialize = "T: Stored + Deserialize<'de>")
)]
struct PileWire<T> {
    #[serde(default, deserialize_with = "element::de_opt_uuid")]
    id: Option<Uuid>,
    #[serde(default, deserialize_with = "de_opt_created_at")]
    created_at: Option<f64>,
    #[serde(default, deserialize_with = "de_metadata")]
    metadata: Metadata,
    #[serde(default, deserialize_with = "de_metadata")]
    node_metadata: Metadata,
    #[serde(default = "Items::new")]
    collections: Items<T>,
    #[serde(default)]
    progression: Option<ProgressionField>,
    #[serde(default)]
    order: Option<Value>,
    #[serde(default)]
    strict_type: Option<bool>,
    #[serde(default)]
    #[allow(dead_code)]
    item_type: Option<Value>,
}

/// A pile's `progression` as read. A Progression object's `order` is read
/// where it lies and its other fields (a few small values) kept to be read
/// as a Progression once the order is in: read whole as a `Value` first,
/// a long history's every id was copied, then the list cloned. Any other
/// value is an order of its own (the reference's bare list).
enum ProgressionField {
    Object {
        order: Option<OrderRead>,
        rest: Map<String, Value>,
    },
    Bare(OrderRead),
}

impl<'de> Deserialize<'de> for ProgressionField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> de::Visitor<'de> for V {
            type Value = ProgressionField;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a Progression object or a list of ids")
            }
            fn visit_map<A: de::MapAccess<'de>>(
                self,
                mut access: A,
            ) -> Result<ProgressionField, A::Error> {
                let mut order = None;
                let mut rest = Map::new();
                while let Some(k) = access.next_key::<String>()? {
                    if k == "order" {
                        order = Some(access.next_value::<OrderRead>()?);
                    } else {
                        rest.insert(k, access.next_value::<Value>()?);
                    }
                }
                Ok(ProgressionField::Object { order, rest })
            }
            // Anything else is read as an order.
            fn visit_seq<A: de::SeqAccess<'de>>(self, s: A) -> Result<ProgressionField, A::Error> {
                OrderVisitor.visit_seq(s).map(ProgressionField::Bare)
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<ProgressionField, E> {
                OrderVisitor.visit_str(s).map(ProgressionField::Bare)
            }
            fn visit_unit<E: de::Error>(self) -> Result<ProgressionField, E> {
                OrderVisitor.visit_unit().map(ProgressionField::Bare)
            }
            fn visit_none<E: de::Error>(self) -> Result<ProgressionField, E> {
                OrderVisitor.visit_none().map(ProgressionField::Bare)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<ProgressionField, D::Error> {
                d.deserialize_any(self)
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<ProgressionField, E> {
                OrderVisitor.visit_bool(b).map(ProgressionField::Bare)
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<ProgressionField, E> {
                OrderVisitor.visit_i64(n).map(ProgressionField::Bare)
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<ProgressionField, E> {
                OrderVisitor.visit_u64(n).map(ProgressionField::Bare)
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<ProgressionField, E> {
                OrderVisitor.visit_f64(n).map(ProgressionField::Bare)
            }
        }
        d.deserialize_any(V)
    }
}

/// A pile's `collections`, read straight into its map: a history of many
/// messages is neither collected into a vector first nor moved again.
struct Items<T>(ItemMap<T>);

impl<T> Items<T> {
    fn new() -> Self {
        Self(ItemMap::default())
    }
}

/// The most room a `collections` list's announced length reserves up
/// front. A JSON value announces its true length, but a binary format
/// reads it from the input, where it could claim any number; past this
/// the map grows as items arrive. A false claim costs address space more
/// than memory (an allocation this large is mapped, and its pages are
/// touched only as items are written). Sized for histories of a few
/// hundred thousand messages: at 16 MiB a history of 100,000 (about 19 MB
/// of entries) was reserved short and moved whole once.
const MAX_RESERVED_ITEMS_BYTES: usize = 64 << 20;

impl<'de, T: Stored + Deserialize<'de>> Deserialize<'de> for Items<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Stored + Deserialize<'de>> de::Visitor<'de> for V<T> {
            type Value = Items<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of items")
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Items<T>, A::Error> {
                let most = MAX_RESERVED_ITEMS_BYTES / std::mem::size_of::<(Uuid, T)>().max(1);
                let mut items = ItemMap::with_capacity_and_hasher(
                    seq.size_hint().unwrap_or(0).min(most),
                    IdHasher::new(),
                );
                while let Some(item) = seq.next_element::<T>()? {
                    let id = item.id();
                    if items.insert(id, item).is_some() {
                        return Err(de::Error::custom(format!(
                            "item {id} appears twice in collections"
                        )));
                    }
                }
                Ok(Items(items))
            }
        }
        d.deserialize_seq(V(std::marker::PhantomData))
    }
}

impl<'de, T: Stored + Deserialize<'de>> Deserialize<'de> for Pile<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Only from an object: serde's derive would also read a list, its
        // items taken as the fields in order.
        let w: PileWire<T> = crate::object_only::object_only(d)?;
        let items = w.collections.0;
        // The order comes from `order` when present, else from `progression`
        // (a Progression object, or a bare list).
        // A Progression object is kept when it reads as one; else only its
        // order counts.
        let mut progression = match (&w.order, w.progression) {
            (Some(o), _) => Progression::from_ids(
                crate::progression::flatten_order(o).map_err(de::Error::custom)?,
            ),
            (None, Some(ProgressionField::Object { order, rest })) => {
                let order = match order {
                    Some(OrderRead(read)) => read.map_err(de::Error::custom)?,
                    None => Vec::new(),
                };
                match Progression::deserialize(Value::Object(rest)) {
                    Ok(mut kept) => {
                        kept.order = order;
                        kept
                    }
                    Err(_) => Progression::from_ids(order),
                }
            }
            (None, Some(ProgressionField::Bare(OrderRead(read)))) => {
                Progression::from_ids(read.map_err(de::Error::custom)?)
            }
            (None, None) => Progression::default(),
        };
        if progression.order.is_empty() {
            progression.order = items.keys().copied().collect();
        } else {
            Pile::validate_order(&items, &progression.order).map_err(de::Error::custom)?;
        }
        let mut metadata = w.metadata;
        metadata.extend(w.node_metadata);
        let element = Element {
            id: w.id.unwrap_or_else(Uuid::new_v4),
            created_at: w.created_at.unwrap_or_else(element::now),
            metadata,
        };
        Ok(Pile::from_parts(
            element,
            items,
            progression,
            w.strict_type.unwrap_or(false),
        ))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize)]
    struct Item {
        id: Uuid,
    }

    impl Stored for Item {
        fn id(&self) -> Uuid {
            self.id
        }
    }

    fn pile(items: &[Uuid], order: Option<&[Uuid]>) -> Result<Pile<Item>, String> {
        let mut v =
            json!({"collections": items.iter().map(|id| json!({"id": id})).collect::<Vec<_>>()});
        if let Some(order) = order {
            v["order"] = json!(order);
        }
        Pile::<Item>::deserialize(&v).map_err(|e| e.to_string())
    }

    /// A pile's order comes from `order`, else from `progression`: a
    /// Progression object (kept when it reads as one, else only its order
    /// counts), or a bare order of its own. Read alike from text and from
    /// a parsed value.
    #[test]
    fn the_order_is_read_from_a_progression_in_every_written_form() {
        let [a, b] = [Uuid::new_v4(), Uuid::new_v4()];
        let pid = Uuid::new_v4();
        let read = |progression: Value, order: Option<Value>| {
            let mut v = json!({"collections": [{"id": a}, {"id": b}], "progression": progression});
            if let Some(o) = order {
                v["order"] = o;
            }
            let from_value = Pile::<Item>::deserialize(&v).map_err(|e| e.to_string());
            let from_text = serde_json::from_str::<Pile<Item>>(&v.to_string());
            match (from_value, from_text) {
                (Ok(p), Ok(q)) => {
                    let p = (
                        p.progression().clone(),
                        p.iter().map(|i| i.id).collect::<Vec<_>>(),
                    );
                    assert_eq!(p.1, q.iter().map(|i| i.id).collect::<Vec<_>>(), "{v}");
                    assert_eq!(p.0.order, q.progression().order, "{v}");
                    Ok(p)
                }
                (Err(e), Err(_)) => Err(e),
                (p, q) => panic!(
                    "the readings disagree on {v}: {:?} / {:?}",
                    p.is_ok(),
                    q.is_ok()
                ),
            }
        };
        // A whole Progression is kept: its id, its name and its order.
        let (p, ids) = read(
            json!({"id": pid, "created_at": 1.0, "name": "n", "order": [b, a]}),
            None,
        )
        .unwrap();
        assert_eq!(
            (p.element.id, p.name.as_deref(), ids),
            (pid, Some("n"), vec![b, a])
        );
        // One that does not read as a Progression gives only its order.
        let (p, ids) = read(json!({"id": pid, "zz": 1, "order": [b, a]}), None).unwrap();
        assert_ne!(p.element.id, pid);
        assert_eq!(ids, [b, a]);
        let (p, ids) = read(json!({"id": "not an id", "order": [b, a]}), None).unwrap();
        assert_ne!(p.element.id, pid);
        assert_eq!(ids, [b, a]);
        // Without an order, the items' own.
        let (p, ids) = read(json!({"id": pid, "name": "n"}), None).unwrap();
        assert_eq!((p.element.id, ids), (pid, vec![a, b]));
        // Nested lists and element objects are flattened.
        let (_, ids) = read(json!({"order": [[b], {"id": a}]}), None).unwrap();
        assert_eq!(ids, [b, a]);
        // A bare order.
        assert_eq!(read(json!([b, a]), None).unwrap().1, [b, a]);
        assert_eq!(read(json!([[b, {"id": a}]]), None).unwrap().1, [b, a]);
        // `order` wins, however broken the progression.
        let (_, ids) = read(json!({"order": ["nope", 5]}), Some(json!([b, a]))).unwrap();
        assert_eq!(ids, [b, a]);
        assert_eq!(read(json!(7), Some(json!([b, a]))).unwrap().1, [b, a]);
        // An order that is not one is refused, with the first reason.
        for (progression, reason) in [
            (
                json!({"order": [b, "nope", 5]}),
                "`nope` is not a valid UUID",
            ),
            (
                json!({"id": "bad", "order": [b, 5, "nope"]}),
                "an order item must be an id",
            ),
            (json!([a, "nope"]), "`nope` is not a valid UUID"),
            (
                json!({"order": true}),
                "an order item must be an id, not a boolean",
            ),
            (json!(3), "an order item must be an id, not a number"),
        ] {
            let e = read(progression.clone(), None).unwrap_err();
            assert!(e.contains(reason), "{progression}: {e}");
        }
        // An order that misses an item is refused.
        assert!(read(json!({"order": [a]}), None).is_err());
    }

    /// The items are read straight into the map, each id once; the order
    /// must name every item exactly once, and each failure says which way
    /// it does not.
    #[test]
    fn collections_and_order_are_checked_as_they_are_read() {
        let [a, b, c] = [Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4()];
        let p = pile(&[a, b], Some(&[b, a])).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p.iter().map(|i| i.id).collect::<Vec<_>>(), [b, a]);
        assert_eq!(pile(&[a, b], None).unwrap().len(), 2);
        // The items' own order, as every writer writes it.
        let p = pile(&[a, b, c], Some(&[a, b, c])).unwrap();
        assert_eq!(p.iter().map(|i| i.id).collect::<Vec<_>>(), [a, b, c]);

        let twice = pile(&[a, b, a], None).unwrap_err();
        assert!(
            twice.contains(&format!("item {a} appears twice")),
            "{twice}"
        );
        let duplicate = "duplicate elements in the order";
        for order in [&[a, a][..], &[c, a, c], &[a, c, b, c]] {
            let e = pile(&[a, b], Some(order)).unwrap_err();
            assert!(e.contains(duplicate), "{order:?}: {e}");
        }
        let short = pile(&[a, b], Some(&[a])).unwrap_err();
        assert!(short.contains("length of the order (1)"), "{short}");
        let foreign = pile(&[a, b], Some(&[a, c])).unwrap_err();
        assert!(foreign.contains(&format!("{c} not found")), "{foreign}");
    }

    /// A list that announces more items than it has (as a binary format
    /// could) reserves a bounded room, and reads the items it has.
    #[test]
    fn an_announced_length_reserves_a_bounded_room() {
        struct Lying(Vec<Value>);
        impl<'de> de::SeqAccess<'de> for Lying {
            type Error = serde_json::Error;
            fn next_element_seed<S: de::DeserializeSeed<'de>>(
                &mut self,
                seed: S,
            ) -> Result<Option<S::Value>, Self::Error> {
                self.0.pop().map(|v| seed.deserialize(v)).transpose()
            }
            fn size_hint(&self) -> Option<usize> {
                Some(usize::MAX)
            }
        }
        struct LyingList(Vec<Value>);
        impl<'de> Deserializer<'de> for LyingList {
            type Error = serde_json::Error;
            fn deserialize_any<V: de::Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
                v.visit_seq(Lying(self.0))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
                bytes byte_buf option unit unit_struct newtype_struct seq tuple
                tuple_struct map struct enum identifier ignored_any
            }
        }
        let id = Uuid::new_v4();
        let items = Items::<Item>::deserialize(LyingList(vec![json!({"id": id})])).unwrap();
        assert_eq!(items.0.len(), 1);
        // Within the cap (the hash table may round its room up).
        let reserved = items.0.capacity() * std::mem::size_of::<(Uuid, Item)>();
        assert!(reserved <= 2 * MAX_RESERVED_ITEMS_BYTES, "{reserved}");
    }
}
