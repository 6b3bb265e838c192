//! A typed map of branch-scoped live extensions (a context-provider
//! registry, a capability grant, ...) that the aggregate holds without
//! knowing them. Never serialized, never cloned.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Type-keyed storage, one value per type.
#[derive(Default)]
pub struct Extensions {
    map: HashMap<TypeId, Box<dyn Any + Send + Sync>, BuildHasherDefault<TypeIdHasher>>,
}

/// A `TypeId` is a hash already, and no input chooses one: it is used as
/// it is instead of being hashed again (a turn looks up a few types).
#[derive(Default)]
struct TypeIdHasher(u64);

impl Hasher for TypeIdHasher {
    fn write(&mut self, bytes: &[u8]) {
        // `TypeId` writes one `u64`; anything else is folded in.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl std::fmt::Debug for Extensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extensions")
            .field("len", &self.map.len())
            .finish()
    }
}

impl Extensions {
    /// The value of type `T`, if set.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.map
            .get(&TypeId::of::<T>())
            .and_then(|b| b.downcast_ref())
    }

    /// The value of type `T`, mutably.
    pub fn get_mut<T: Send + Sync + 'static>(&mut self) -> Option<&mut T> {
        self.map
            .get_mut(&TypeId::of::<T>())
            .and_then(|b| b.downcast_mut())
    }

    /// The value of type `T`, created with `init` on first use.
    #[allow(
        clippy::expect_used,
        reason = "the map is keyed by each value's own TypeId"
    )]
    pub fn get_or_insert_with<T: Send + Sync + 'static>(
        &mut self,
        init: impl FnOnce() -> T,
    ) -> &mut T {
        self.map
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Box::new(init()))
            .downcast_mut()
            .expect("extension stored under its own TypeId")
    }

    /// Sets the value of type `T`, returning the previous one.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) -> Option<T> {
        self.map
            .insert(TypeId::of::<T>(), Box::new(value))
            .and_then(|b| b.downcast().ok().map(|b| *b))
    }

    /// Removes the value of type `T`.
    pub fn remove<T: Send + Sync + 'static>(&mut self) -> Option<T> {
        self.map
            .remove(&TypeId::of::<T>())
            .and_then(|b| b.downcast().ok().map(|b| *b))
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tagged<const N: usize>(usize);

    /// Types that differ only in a parameter keep their own values under
    /// the unhashed keys.
    #[test]
    fn each_type_keeps_its_own_value() {
        fn put<const N: usize>(e: &mut Extensions) {
            assert!(e.insert(Tagged::<N>(N)).is_none());
        }
        fn read<const N: usize>(e: &Extensions) -> usize {
            e.get::<Tagged<N>>().map_or(usize::MAX, |t| t.0)
        }
        let mut e = Extensions::default();
        put::<0>(&mut e);
        put::<1>(&mut e);
        put::<2>(&mut e);
        put::<3>(&mut e);
        e.insert(String::from("s"));
        e.insert(7_u64);
        assert_eq!(
            [read::<0>(&e), read::<1>(&e), read::<2>(&e), read::<3>(&e)],
            [0, 1, 2, 3]
        );
        assert_eq!(e.remove::<Tagged<2>>().map(|t| t.0), Some(2));
        assert!(e.get::<Tagged<2>>().is_none());
        assert_eq!(read::<3>(&e), 3);
        assert_eq!(e.get::<String>().map(String::as_str), Some("s"));
        assert_eq!(e.get::<u64>(), Some(&7));
        *e.get_or_insert_with(|| 0_u64) += 1;
        assert_eq!(e.get::<u64>(), Some(&8));
    }
}
