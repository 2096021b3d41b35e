//! The partition state digest: a 128-bit value that depends only on the logical contents of
//! the tables — the multiset of rows in each table — never on insertion history, memory
//! layout or iteration order. Replicas compare digests to prove they hold the same state.
//!
//! Construction: each row's canonical bytes (its Pod encoding, prefixed by the table id) are
//! hashed with XXH3-128; a table's value is the wrapping sum of its rows' hashes (commutative,
//! so order-independent) together with its row count; the digest hashes the nine table values.

use crate::schema::{t, Table, TableId};
use crate::storage::Storage;
use std::fmt;

/// A partition's state digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest(pub u128);

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// Per-table accumulators of the digest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableDigest {
    pub rows: u64,
    pub sum: u128,
}

/// One row's share of its table's sum: XXH3-128 of the table id and the row's Pod bytes.
pub fn row_hash<T: Table>(row: &T::Row) -> u128 {
    const STACK_BYTES: usize = 1024;
    let bytes = bytemuck::bytes_of(row);
    if bytes.len() < STACK_BYTES {
        let mut buf = [0u8; STACK_BYTES];
        buf[0] = T::ID as u8;
        buf[1..=bytes.len()].copy_from_slice(bytes);
        xxhash_rust::xxh3::xxh3_128(&buf[..=bytes.len()])
    } else {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        h.update(&[T::ID as u8]);
        h.update(bytes);
        h.digest128()
    }
}

impl TableDigest {
    /// Counts `row` in.
    pub fn add<T: Table>(&mut self, row: &T::Row) {
        self.sum = self.sum.wrapping_add(row_hash::<T>(row));
        self.rows = self.rows.wrapping_add(1);
    }

    /// Counts `row` out (it was counted in before).
    pub fn remove<T: Table>(&mut self, row: &T::Row) {
        self.sum = self.sum.wrapping_sub(row_hash::<T>(row));
        self.rows = self.rows.wrapping_sub(1);
    }
}

fn table_digest<S: Storage, T: Table>(db: &mut S) -> TableDigest {
    let mut acc = TableDigest::default();
    db.for_each::<T>(|row| acc.add::<T>(row));
    acc
}

/// The nine tables' accumulators, in [`TableId::ALL`] order.
pub fn table_digests<S: Storage>(db: &mut S) -> [TableDigest; 9] {
    let mut out = [TableDigest::default(); 9];
    for id in TableId::ALL {
        out[id as usize] = match id {
            TableId::Warehouse => table_digest::<S, t::Warehouses>(db),
            TableId::District => table_digest::<S, t::Districts>(db),
            TableId::Customer => table_digest::<S, t::Customers>(db),
            TableId::History => table_digest::<S, t::Histories>(db),
            TableId::Orders => table_digest::<S, t::Orders>(db),
            TableId::NewOrder => table_digest::<S, t::NewOrders>(db),
            TableId::OrderLine => table_digest::<S, t::OrderLines>(db),
            TableId::Item => table_digest::<S, t::Items>(db),
            TableId::Stock => table_digest::<S, t::Stocks>(db),
        };
    }
    out
}

/// The digest of a whole storage.
pub fn digest<S: Storage>(db: &mut S) -> Digest {
    digest_of(&table_digests(db))
}

/// The digest of the nine tables' accumulators (in [`TableId::ALL`] order), however they
/// were summed: a scan, or a copy's scan corrected by the changes made during it
/// (docs/design.md §10, "Copying without stopping").
pub fn digest_of(tables: &[TableDigest; 9]) -> Digest {
    let mut bytes = Vec::with_capacity(9 * 24);
    for td in tables {
        bytes.extend_from_slice(&td.rows.to_le_bytes());
        bytes.extend_from_slice(&td.sum.to_le_bytes());
    }
    Digest(xxhash_rust::xxh3::xxh3_128(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lean::LeanDb;
    use crate::schema::Item;
    use bytemuck::Zeroable;

    fn item(i: u32, p: i64) -> Item {
        Item { i_id: i, i_price: p, ..Item::zeroed() }
    }

    #[test]
    fn digest_ignores_insertion_order_and_history() {
        let mut a = LeanDb::new();
        let mut b = LeanDb::new();
        for i in 1..200 {
            a.insert::<t::Items>(&item(i, 5)).unwrap();
        }
        for i in (1..400).rev() {
            b.insert::<t::Items>(&item(i, 5)).unwrap();
        }
        for i in 200..400 {
            b.delete::<t::Items>(i as u64).unwrap();
        }
        assert_eq!(digest(&mut a), digest(&mut b));
        a.update::<t::Items, _>(3, |r| r.i_price = 6).unwrap();
        assert_ne!(digest(&mut a), digest(&mut b));
    }
}
