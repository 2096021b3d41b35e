//! The simulator's TPC-C population: [`SCALE`] (500 items, 30 customers per district — a
//! population for simulation only, **not TPC-C compliant**) over one warehouse per
//! partition.
//!
//! Guarantees: [`partition_db`] returns exactly the rows `engine::loader` loads for the
//! partition at [`SCALE`] (its state digest is checked equal on every copy under
//! `debug_assertions`); each distinct (seed, warehouses) is loaded once per process and later
//! calls copy the loaded rows, table by table, through the same row-bytes path a rejoining
//! replica's snapshot takes (`node::snapshot::insert_table`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use engine::loader::{load_database_scaled, Scale};
use engine::schema::{t, Table, TableId};
use engine::{LeanDb, Storage};
use wire::config::PartitionConfig;
use wire::messages::StateDigest;

/// The population every simulated replica loads.
pub const SCALE: Scale = Scale::tiny();

/// A loaded partition: its rows per table, as fixed-width row bytes, and its digest.
struct Loaded {
    tables: Vec<(TableId, Vec<u8>)>,
    digest: StateDigest,
}

type Cache = Mutex<BTreeMap<(u64, u16, u16), Arc<Loaded>>>;

static CACHE: Cache = Mutex::new(BTreeMap::new());

/// Loads `partition`'s warehouses (and ITEM) at [`SCALE`] from `seed`, without the cache.
pub fn load_fresh(partition: &PartitionConfig, seed: u64) -> LeanDb {
    let mut db = LeanDb::new();
    load_database_scaled(&mut db, partition.warehouses.range(), seed, SCALE, &mut |_| {})
        .expect("the simulator's warehouse ranges are valid");
    db
}

/// `partition`'s database at [`SCALE`] from `seed`, and its state digest: loaded on the
/// first call for these warehouses and seed, copied from the loaded rows afterwards (the
/// digest is the one computed at the load; a copy is checked to have it under
/// `debug_assertions`).
pub fn partition_db(partition: &PartitionConfig, seed: u64) -> (LeanDb, StateDigest) {
    let key = (seed, partition.warehouses.first, partition.warehouses.last);
    let loaded = {
        let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .entry(key)
            .or_insert_with(|| {
                let mut db = load_fresh(partition, seed);
                let digest = StateDigest::from(engine::digest::digest(&mut db));
                Arc::new(Loaded { tables: rows_of(&mut db), digest })
            })
            .clone()
    };
    let mut db = LeanDb::new();
    for (table, bytes) in &loaded.tables {
        node::snapshot::insert_table(&mut db, *table, bytes).expect("rows of the same schema");
    }
    debug_assert_eq!(StateDigest::from(engine::digest::digest(&mut db)), loaded.digest, "a faithful copy");
    (db, loaded.digest)
}

/// Every row of `db`, per table, as the row bytes snapshots carry.
fn rows_of(db: &mut LeanDb) -> Vec<(TableId, Vec<u8>)> {
    fn table<T: Table>(db: &mut LeanDb, id: TableId, out: &mut Vec<(TableId, Vec<u8>)>) {
        let mut bytes = Vec::new();
        db.for_each::<T>(|r| bytes.extend_from_slice(bytemuck::bytes_of(r)));
        out.push((id, bytes));
    }
    let mut out = Vec::new();
    table::<t::Warehouses>(db, TableId::Warehouse, &mut out);
    table::<t::Districts>(db, TableId::District, &mut out);
    table::<t::Customers>(db, TableId::Customer, &mut out);
    table::<t::Histories>(db, TableId::History, &mut out);
    table::<t::Orders>(db, TableId::Orders, &mut out);
    table::<t::NewOrders>(db, TableId::NewOrder, &mut out);
    table::<t::OrderLines>(db, TableId::OrderLine, &mut out);
    table::<t::Items>(db, TableId::Item, &mut out);
    table::<t::Stocks>(db, TableId::Stock, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cached copy is the partition a node process would load (`Replica::load_scaled`),
    /// row for row: equal state digests, first call and later ones alike.
    #[test]
    fn a_copy_is_what_a_replica_loads() {
        let config = crate::cluster::config(2, 5);
        for p in &config.partitions {
            let mut loaded = node::Replica::load_scaled(1, p, 5, SCALE, 8, &mut |_| {}).unwrap();
            for _ in 0..2 {
                let (mut db, digest) = partition_db(p, 5);
                assert_eq!(digest, loaded.state_digest());
                assert_eq!(StateDigest::from(engine::digest::digest(&mut db)), digest);
            }
        }
    }
}
