//! [`NoPrefetch`]: a [`Storage`] that drops the prefetch hints of the one it wraps.
//!
//! Owns nothing but the forwarding. Guarantees: every method of the wrapped storage is called
//! exactly as it would be without the wrapper, except [`Storage::prefetch`], which is the
//! trait's default (nothing). Prefetch hints never change results (docs/design.md, the
//! storage trait), so a run through the wrapper computes the same state as one without it.
//!
//! Why: only the lean kernel prefetches; no step of the conventional stack does (the trait's
//! default is a no-op). The staircase (the paper's Section 4.3) times every configuration
//! alike, so `glass breakdown` times and counts the lean kernel (step 11) through this
//! wrapper, and times it once more with its prefetching as an extra line.

use engine::schema::Table;
use engine::{ScanDir, Storage, StorageError};

/// `S` without its prefetch hints; everything else forwarded unchanged.
#[derive(Debug, Default)]
pub struct NoPrefetch<S>(pub S);

impl<S: Storage> Storage for NoPrefetch<S> {
    #[inline]
    fn begin(&mut self, ts: u64) {
        self.0.begin(ts)
    }

    #[inline]
    fn commit(&mut self) -> Result<(), StorageError> {
        self.0.commit()
    }

    #[inline]
    fn abort(&mut self) {
        self.0.abort()
    }

    #[inline]
    fn get<T: Table, R>(&mut self, key: u64, f: impl FnOnce(&T::Row) -> R) -> Result<Option<R>, StorageError> {
        self.0.get::<T, R>(key, f)
    }

    #[inline]
    fn update<T: Table, R>(&mut self, key: u64, f: impl FnOnce(&mut T::Row) -> R) -> Result<Option<R>, StorageError> {
        self.0.update::<T, R>(key, f)
    }

    #[inline]
    fn insert<T: Table>(&mut self, row: &T::Row) -> Result<(), StorageError> {
        self.0.insert::<T>(row)
    }

    #[inline]
    fn delete<T: Table>(&mut self, key: u64) -> Result<Option<T::Row>, StorageError> {
        self.0.delete::<T>(key)
    }

    #[inline]
    fn scan<T: Table>(
        &mut self,
        lo: u64,
        hi: u64,
        dir: ScanDir,
        f: impl FnMut(&T::Row) -> bool,
    ) -> Result<(), StorageError> {
        self.0.scan::<T>(lo, hi, dir, f)
    }

    #[inline]
    fn scan_secondary<T: Table>(
        &mut self,
        lo: T::Sec,
        hi: T::Sec,
        dir: ScanDir,
        f: impl FnMut(u64) -> bool,
    ) -> Result<(), StorageError> {
        self.0.scan_secondary::<T>(lo, hi, dir, f)
    }

    // `prefetch`: the trait's default, which does nothing.

    #[inline]
    fn reserve<T: Table>(&mut self, additional: usize) {
        self.0.reserve::<T>(additional)
    }

    #[inline]
    fn for_each<T: Table>(&mut self, f: impl FnMut(&T::Row)) {
        self.0.for_each::<T>(f)
    }

    #[inline]
    fn count<T: Table>(&mut self) -> usize {
        self.0.count::<T>()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use engine::schema::t;
    use engine::Prefetch;

    use super::*;

    /// Records which calls reach it.
    #[derive(Default)]
    struct Probe {
        prefetches: Cell<u32>,
        begun: Option<u64>,
        reserved: usize,
        committed: bool,
    }

    impl Storage for Probe {
        fn begin(&mut self, ts: u64) {
            self.begun = Some(ts);
        }
        fn commit(&mut self) -> Result<(), StorageError> {
            self.committed = true;
            Ok(())
        }
        fn abort(&mut self) {}
        fn get<T: Table, R>(&mut self, _: u64, _: impl FnOnce(&T::Row) -> R) -> Result<Option<R>, StorageError> {
            Ok(None)
        }
        fn update<T: Table, R>(&mut self, _: u64, _: impl FnOnce(&mut T::Row) -> R) -> Result<Option<R>, StorageError> {
            Ok(None)
        }
        fn insert<T: Table>(&mut self, _: &T::Row) -> Result<(), StorageError> {
            Ok(())
        }
        fn delete<T: Table>(&mut self, _: u64) -> Result<Option<T::Row>, StorageError> {
            Ok(None)
        }
        fn scan<T: Table>(
            &mut self,
            _: u64,
            _: u64,
            _: ScanDir,
            _: impl FnMut(&T::Row) -> bool,
        ) -> Result<(), StorageError> {
            Ok(())
        }
        fn scan_secondary<T: Table>(
            &mut self,
            _: T::Sec,
            _: T::Sec,
            _: ScanDir,
            _: impl FnMut(u64) -> bool,
        ) -> Result<(), StorageError> {
            Ok(())
        }
        fn prefetch<T: Table>(&self, keys: &[u64], _: Prefetch) {
            self.prefetches.set(self.prefetches.get() + keys.len() as u32);
        }
        fn reserve<T: Table>(&mut self, additional: usize) {
            self.reserved += additional;
        }
        fn for_each<T: Table>(&mut self, _: impl FnMut(&T::Row)) {}
        fn count<T: Table>(&mut self) -> usize {
            7
        }
    }

    #[test]
    fn prefetch_hints_are_dropped_and_everything_else_is_forwarded() {
        let plain = Probe::default();
        plain.prefetch::<t::Stocks>(&[1, 2, 3], Prefetch::Index);
        assert_eq!(plain.prefetches.get(), 3, "the probe sees hints given to it directly");

        let mut db = NoPrefetch(Probe::default());
        db.prefetch::<t::Stocks>(&[1, 2, 3], Prefetch::Index);
        db.prefetch::<t::Items>(&[4], Prefetch::Rows);
        db.begin(42);
        db.reserve::<t::Items>(5);
        db.commit().unwrap();
        assert_eq!(db.count::<t::Items>(), 7);
        assert_eq!(db.0.prefetches.get(), 0, "no hint reaches the wrapped storage");
        assert_eq!((db.0.begun, db.0.reserved, db.0.committed), (Some(42), 5, true));
    }
}
