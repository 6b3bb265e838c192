//! `SmallMap`: string keys to values in insertion order, kept as a plain
//! vector while small and as an [`IndexMap`] once large.
//!
//! An element's metadata holds a few keys, often none. An `IndexMap` is
//! 72 bytes inline, and its first key allocates a hash table beside the
//! entries and hashes the key. Every message, log and branch carries one:
//! in a thousand three-turn conversations they took about 0.9 MB of a
//! 17.6 MB heap. A vector is 24 bytes and one allocation; up to
//! [`SmallMap::SCANNED_LEN`] keys, comparing them costs less than hashing
//! one. Past that a key is hashed (SipHash, as metadata read from a file
//! is hostile: a file of many keys must not make every insertion a scan of
//! all the others).

use indexmap::IndexMap;

/// An insertion-ordered map from `String` (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct SmallMap<V>(Repr<V>);

#[derive(Debug, Clone)]
enum Repr<V> {
    /// At most `SCANNED_LEN` entries, distinct keys.
    Small(Vec<(String, V)>),
    Large(Box<IndexMap<String, V>>),
}

impl<V> Default for SmallMap<V> {
    fn default() -> Self {
        Self(Repr::Small(Vec::new()))
    }
}

impl<V> SmallMap<V> {
    /// Up to this many entries, a key is found by comparing.
    pub(crate) const SCANNED_LEN: usize = 8;

    /// An empty map with room for `n` entries.
    pub(crate) fn with_capacity(n: usize) -> Self {
        if n <= Self::SCANNED_LEN {
            Self(Repr::Small(Vec::with_capacity(n)))
        } else {
            Self(Repr::Large(Box::new(IndexMap::with_capacity(n))))
        }
    }

    pub(crate) fn len(&self) -> usize {
        match &self.0 {
            Repr::Small(v) => v.len(),
            Repr::Large(m) => m.len(),
        }
    }

    /// The entries there is room for without growing.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        match &self.0 {
            Repr::Small(v) => v.capacity(),
            Repr::Large(m) => m.capacity(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn get(&self, key: &str) -> Option<&V> {
        match &self.0 {
            Repr::Small(v) => v.iter().find_map(|(k, e)| (k == key).then_some(e)),
            Repr::Large(m) => m.get(key),
        }
    }

    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        match &mut self.0 {
            Repr::Small(v) => v.iter_mut().find_map(|(k, e)| (k == key).then_some(e)),
            Repr::Large(m) => m.get_mut(key),
        }
    }

    /// Sets `key`, keeping its place if it had one; the previous value.
    pub(crate) fn insert(&mut self, key: String, value: V) -> Option<V> {
        match &mut self.0 {
            Repr::Small(v) => {
                if let Some((_, e)) = v.iter_mut().find(|(k, _)| *k == key) {
                    return Some(std::mem::replace(e, value));
                }
                if v.len() < Self::SCANNED_LEN {
                    v.push((key, value));
                    return None;
                }
                let mut m = IndexMap::with_capacity(v.len() + 1);
                m.extend(v.drain(..));
                m.insert(key, value);
                self.0 = Repr::Large(Box::new(m));
                None
            }
            Repr::Large(m) => m.insert(key, value),
        }
    }

    /// Removes `key`, keeping the order of the others; its value.
    pub(crate) fn shift_remove(&mut self, key: &str) -> Option<V> {
        match &mut self.0 {
            Repr::Small(v) => {
                let at = v.iter().position(|(k, _)| k == key)?;
                Some(v.remove(at).1)
            }
            Repr::Large(m) => m.shift_remove(key),
        }
    }

    pub(crate) fn clear(&mut self) {
        self.0 = Repr::Small(Vec::new());
    }

    /// Keeps the entries `keep` accepts, in order.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&String, &mut V) -> bool) {
        match &mut self.0 {
            Repr::Small(v) => v.retain_mut(|(k, e)| keep(k, e)),
            Repr::Large(m) => m.retain(|k, e| keep(k, e)),
        }
    }

    pub(crate) fn iter(&self) -> Iter<'_, V> {
        match &self.0 {
            Repr::Small(v) => Iter::Small(v.iter()),
            Repr::Large(m) => Iter::Large(m.iter()),
        }
    }
}

impl<V> FromIterator<(String, V)> for SmallMap<V> {
    fn from_iter<I: IntoIterator<Item = (String, V)>>(iter: I) -> Self {
        let iter = iter.into_iter();
        let mut m = Self::with_capacity(iter.size_hint().0.min(Self::SCANNED_LEN));
        for (k, v) in iter {
            m.insert(k, v);
        }
        m
    }
}

/// The entries in order.
pub(crate) enum Iter<'a, V> {
    Small(std::slice::Iter<'a, (String, V)>),
    Large(indexmap::map::Iter<'a, String, V>),
}

impl<'a, V> Iterator for Iter<'a, V> {
    type Item = (&'a String, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Small(i) => i.next().map(|(k, v)| (k, v)),
            Iter::Large(i) => i.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Iter::Small(i) => i.size_hint(),
            Iter::Large(i) => i.size_hint(),
        }
    }
}

impl<V> ExactSizeIterator for Iter<'_, V> {}

impl<V> IntoIterator for SmallMap<V> {
    type Item = (String, V);
    type IntoIter = IntoIter<V>;

    fn into_iter(self) -> IntoIter<V> {
        match self.0 {
            Repr::Small(v) => IntoIter::Small(v.into_iter()),
            Repr::Large(m) => IntoIter::Large(m.into_iter()),
        }
    }
}

/// The entries taken, in order.
pub(crate) enum IntoIter<V> {
    Small(std::vec::IntoIter<(String, V)>),
    Large(indexmap::map::IntoIter<String, V>),
}

impl<V> Iterator for IntoIter<V> {
    type Item = (String, V);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            IntoIter::Small(i) => i.next(),
            IntoIter::Large(i) => i.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            IntoIter::Small(i) => i.size_hint(),
            IntoIter::Large(i) => i.size_hint(),
        }
    }
}

impl<V> ExactSizeIterator for IntoIter<V> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys<V>(m: &SmallMap<V>) -> Vec<&str> {
        m.iter().map(|(k, _)| k.as_str()).collect()
    }

    #[test]
    fn it_is_three_words() {
        assert_eq!(std::mem::size_of::<SmallMap<serde_json::Value>>(), 24);
    }

    /// The same operations on `SmallMap` and on `IndexMap` give the same
    /// entries in the same order, across the change to the large form and
    /// on both sides of it.
    #[test]
    fn it_behaves_as_an_index_map_small_and_large() {
        let mut ours = SmallMap::default();
        let mut theirs = IndexMap::new();
        let key = |i: usize| format!("k{}", i % 13);
        for i in 0..60 {
            let k = key(i * 7);
            match i % 5 {
                0..=2 => assert_eq!(ours.insert(k.clone(), i), theirs.insert(k, i)),
                3 => assert_eq!(ours.shift_remove(&k), theirs.shift_remove(&k)),
                _ => {
                    if let (Some(a), Some(b)) = (ours.get_mut(&k), theirs.get_mut(&k)) {
                        *a += 100;
                        *b += 100;
                    }
                }
            }
            assert_eq!(ours.len(), theirs.len());
            let pairs: Vec<_> = ours.iter().map(|(k, v)| (k.clone(), *v)).collect();
            let want: Vec<_> = theirs.iter().map(|(k, v)| (k.clone(), *v)).collect();
            assert_eq!(pairs, want, "after step {i}");
            for j in 0..13 {
                let k = format!("k{j}");
                assert_eq!(ours.get(&k), theirs.get(&k));
            }
        }
        assert!(
            matches!(ours.0, Repr::Large(_)),
            "the test reached the large form"
        );
        ours.retain(|_, v| *v % 2 == 0);
        theirs.retain(|_, v| *v % 2 == 0);
        let taken: Vec<_> = ours.into_iter().collect();
        assert_eq!(taken, theirs.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn it_stays_small_up_to_the_scanned_length() {
        let mut m: SmallMap<usize> = (0..SmallMap::<usize>::SCANNED_LEN)
            .map(|i| (format!("k{i}"), i))
            .collect();
        assert!(matches!(m.0, Repr::Small(_)));
        // Replacing a value does not grow it.
        m.insert("k0".into(), 9);
        assert!(matches!(m.0, Repr::Small(_)));
        m.insert("new".into(), 1);
        assert!(matches!(m.0, Repr::Large(_)));
        assert_eq!(keys(&m)[0], "k0");
        assert_eq!(keys(&m).last(), Some(&"new"));
        m.clear();
        assert!(m.is_empty() && matches!(m.0, Repr::Small(_)));
        assert!(matches!(
            SmallMap::<usize>::with_capacity(100).0,
            Repr::Large(_)
        ));
    }
}
