//! Fuzz target `redo_apply`: shipped log records applied to a passive backup (docs/design.md
//! §13, "Fuzzing"; the log-shipping alternative of the paper's Section 5.3). What crosses the
//! trust boundary is a [`Shipment`] from a primary that may be broken or hostile: a lean
//! [`RedoBatch`] rolled forward with [`LeanDb::apply_redo`], or the conventional stack's
//! write-ahead log records applied with [`ConventionalDb::apply_shipped_log`].
//!
//! Owns: decoding the input as the backup does, applying it to fresh backups built from a
//! small TPC-C database (1 warehouse, [`Scale::tiny`], seed [`LOAD_SEED`]), and judging:
//!
//! 1. nothing panics, and no input makes the process allocate beyond the target's limit;
//! 2. a refused batch is a typed error ([`StorageError::BadRedo`];
//!    [`ConventionalError::ShipCorrupt`], [`ConventionalError::ShipOutOfOrder`] or
//!    [`ConventionalError::ShipUnfit`]) and changes nothing: the backup's state digest
//!    (`engine::digest`) is the same before and after, and a conventional backup's position
//!    in the primary's log too. The one documented exception is
//!    [`ConventionalError::ShipDiverged`] (a record that fails against the backup's rows): the
//!    backup then refuses every later chunk, which is checked;
//! 3. a lean backup that accepted batches is a sound replica: every row is found by its
//!    primary key, every secondary-index entry leads to its row and back, counts agree
//!    (whatever the rows say: a hostile primary may ship any values, so TPC-C consistency is
//!    not asked of it);
//! 4. applying is deterministic: the same shipments applied to a second fresh backup give
//!    the same outcomes and the same digest;
//! 5. a run of real shipments in order (the seeds; and any input whose accepted shipments are
//!    exactly the primary's first `k`) leaves the backup with the primary's digest after
//!    batch `k`, and TPC-C's consistency conditions (clause 3.3.2) hold; a real shipment in
//!    its turn is never refused.
//!
//! The real shipments come from primaries that ran [`REAL_TXNS`] TPC-C transactions
//! ([`tpcc_inputs`], deterministic) in batches of [`PER_BATCH`], with redo capture on (lean)
//! or the shipping tap on (conventional, full stack on an in-memory medium); they are built
//! once per process in a `OnceLock`. `LeanDb` has no cheap clone, so each input loads its
//! lean backup afresh (a millisecond or so at this scale); a conventional backup, needed only
//! by inputs that carry WAL, is opened from the primary's checkpoint image on an in-memory
//! medium ([`install_image_on`]), page for page the state the primary's log continues from.
//!
//! Input format: byte 0 picks the mode, the rest is its body.
//! - `0` frames: a stream of `PeerRequest` frames exactly as the peer channel carries them
//!   (`wire::codec::decode`, [`FRAME_BYTES_MAX_DEFAULT`]); every `Ship` is applied in order
//!   (redo to the lean backup, WAL to the conventional one); the stream ends at the first
//!   frame that does not decode (the backup would close the connection).
//! - `1` lean edits and `2` WAL edits: 8-byte operations on the real shipments — apply one,
//!   apply one damaged (a flipped byte, with or without a fresh checksum), with a record's
//!   fields rewritten and resealed (a hostile primary), truncated, merged with the next ones,
//!   or a sealed batch of input-chosen records — so the fuzzer reaches what lies past the
//!   checksums.

use std::sync::OnceLock;

use engine::check;
use engine::conventional::{
    install_image_on, Config, ConventionalDb, ConventionalError, Medium, MemoryMedium, Session, Step,
};
use engine::digest::{digest, Digest};
use engine::loader::{load_database_scaled, Scale};
use engine::procedures::{
    execute, CustomerSelector, DeliveryInput, NewOrderInput, OrderLineInput, OrderStatusInput, PaymentInput,
    StockLevelInput, TxnInput, ORDER_LINES_MAX,
};
use engine::redo::{RedoBatch, RedoOp, RedoRecord};
use engine::rng::{last_name_field, Rng};
use engine::schema::{t, CustomerNameKey, Organisation, Table, TableId};
use engine::{LeanDb, ScanDir, Storage, StorageError};
use wire::channel::PeerRequest;
use wire::codec::FRAME_BYTES_MAX_DEFAULT;
use wire::messages::{Shipment, ShippedLog};

/// The seed every database of this target (and of `wal_recovery`) is loaded with.
pub const LOAD_SEED: u64 = 0x676c_6173_735f_7264;
/// The seed of the real transactions.
pub const TXN_SEED: u64 = 0x7265_646f_5f74_786e;
/// Transactions the primaries run to produce the real shipments.
pub const REAL_TXNS: usize = 40;
/// Transactions per shipment.
pub const PER_BATCH: usize = 5;
/// The warehouse loaded.
const W: u16 = 1;
/// Bytes the conventional stack's log is preallocated by here (the default, 64 MiB, would
/// dominate an in-memory run).
pub(crate) const LOG_PREALLOC_BYTES: u64 = 64 << 10;

/// `n` TPC-C transactions over warehouse 1 of a database of `scale`, deterministic in `seed`,
/// with their timestamps (from 1): the mix of clause 5.2.3 roughly (45% NewOrder, 1% of them
/// rolled back by an unused item number; 43% Payment, 60% of those by last name; 4% each of
/// the others). Not a benchmark generator: inputs for fuzz seeds.
pub fn tpcc_inputs(seed: u64, n: usize, scale: Scale) -> Vec<(u64, TxnInput)> {
    let mut rng = Rng::new(seed);
    let customers = scale.customers_per_district;
    (1..=n as u64)
        .map(|ts| {
            let d_id = rng.uniform(1, 10) as u8;
            let pick = rng.uniform(1, 100);
            let input = if pick <= 45 {
                let ol_cnt = rng.uniform(5, ORDER_LINES_MAX as u64) as u8;
                let mut lines = [OrderLineInput::default(); ORDER_LINES_MAX];
                for l in lines.iter_mut().take(ol_cnt as usize) {
                    *l = OrderLineInput {
                        i_id: rng.uniform_u32(1, scale.items),
                        supply_w_id: W,
                        quantity: rng.uniform(1, 10) as u8,
                    };
                }
                if rng.percent(1) || ts % 23 == 0 {
                    lines[ol_cnt as usize - 1].i_id = scale.items + 1;
                }
                TxnInput::NewOrder(NewOrderInput {
                    w_id: W,
                    d_id,
                    c_id: rng.uniform_u32(1, customers),
                    ol_cnt,
                    lines,
                    entry_d: ts as i64,
                })
            } else if pick <= 88 {
                let customer = if rng.percent(60) {
                    CustomerSelector::ByLastName(last_name_field(rng.uniform_u32(0, scale.last_name_max())))
                } else {
                    CustomerSelector::ById(rng.uniform_u32(1, customers))
                };
                TxnInput::Payment(PaymentInput {
                    w_id: W,
                    d_id,
                    c_w_id: W,
                    c_d_id: d_id,
                    customer,
                    h_amount: rng.uniform(100, 500_000) as i64,
                    date: ts as i64,
                })
            } else if pick <= 92 {
                TxnInput::Delivery(DeliveryInput { w_id: W, o_carrier_id: rng.uniform(1, 10) as u8, date: ts as i64 })
            } else if pick <= 96 {
                TxnInput::OrderStatus(OrderStatusInput {
                    w_id: W,
                    d_id,
                    customer: CustomerSelector::ById(rng.uniform_u32(1, customers)),
                })
            } else {
                TxnInput::StockLevel(StockLevelInput { w_id: W, d_id, threshold: rng.uniform(10, 20) as i32 })
            };
            (ts, input)
        })
        .collect()
}

/// Loads the target's database (warehouse 1 of [`Scale::tiny`], [`LOAD_SEED`]) into `db`.
pub fn load<S: Storage>(db: &mut S) {
    load_scaled(db, Scale::tiny());
}

/// Loads warehouse 1 of `scale` with [`LOAD_SEED`] into `db`.
pub fn load_scaled<S: Storage>(db: &mut S, scale: Scale) {
    load_database_scaled(db, W..=W, LOAD_SEED, scale, &mut |_| {}).expect("the load succeeds");
}

/// A fresh lean backup: the loaded database.
fn lean_backup() -> LeanDb {
    let mut db = LeanDb::new();
    load(&mut db);
    db
}

/// The full stack on an in-memory medium, as the target's conventional databases run.
pub(crate) fn conventional_config() -> Config {
    let mut config = Config::for_step(Step::FULL_STACK, 1);
    config.log_prealloc_bytes = LOG_PREALLOC_BYTES;
    config.checkpoint_on_open = false;
    config
}

/// The real shipments and the primaries' digests after each.
struct Library {
    lean: Vec<RedoBatch>,
    /// The lean primary's digest after each batch.
    lean_after: Vec<Digest>,
    /// The conventional primary's checkpoint image its shipped log continues from.
    image: Vec<u8>,
    wal: Vec<Vec<u8>>,
    /// The conventional primary's digest after each chunk.
    wal_after: Vec<Digest>,
}

fn library() -> &'static Library {
    static LIBRARY: OnceLock<Library> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        let txns = tpcc_inputs(TXN_SEED, REAL_TXNS, Scale::tiny());
        let mut primary = lean_backup();
        primary.set_redo_capture(true);
        let (mut lean, mut lean_after) = (Vec::new(), Vec::new());
        for chunk in txns.chunks(PER_BATCH) {
            for (ts, input) in chunk {
                let _ = execute(&mut primary, *ts, input);
            }
            lean.push(primary.take_redo());
            lean_after.push(digest(&mut primary));
        }

        let medium = Medium::Memory(MemoryMedium::new());
        let db = ConventionalDb::open_on(&medium, conventional_config()).expect("open the conventional primary");
        let mut session = db.session().expect("a session");
        load(&mut session);
        db.checkpoint().expect("checkpoint after the load");
        let image = db.checkpoint_image().expect("the checkpoint image");
        db.set_log_shipping(true).expect("shipping");
        let (mut wal, mut wal_after) = (Vec::new(), Vec::new());
        for chunk in txns.chunks(PER_BATCH) {
            for (ts, input) in chunk {
                let _ = execute(&mut session, *ts, input);
            }
            wal.push(db.take_shipped_log_durable().expect("take the shipped log"));
            wal_after.push(digest(&mut session));
        }
        assert_eq!(lean_after, wal_after, "the two engines ran the same transactions to the same state");
        Library { lean, lean_after, image, wal, wal_after }
    })
}

/// A fresh conventional backup: the primary's checkpoint image on an in-memory medium.
fn conventional_backup() -> (std::sync::Arc<ConventionalDb>, Session) {
    let medium = Medium::Memory(MemoryMedium::new());
    install_image_on(&medium, &library().image).expect("install the primary's image");
    let db = ConventionalDb::open_on(&medium, conventional_config()).expect("open the conventional backup");
    let session = db.session().expect("a session");
    (db, session)
}

/// What one shipment did, for the determinism comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Applied,
    Refused(String),
}

/// A lean backup and what it was given.
struct LeanRun {
    db: Option<LeanDb>,
    outcomes: Vec<Outcome>,
    /// `Some(k)`: the batches accepted so far are exactly the primary's first `k`.
    real: Option<usize>,
}

impl LeanRun {
    fn new() -> LeanRun {
        LeanRun { db: None, outcomes: Vec::new(), real: Some(0) }
    }

    fn apply(&mut self, batch: &RedoBatch) {
        let db = self.db.get_or_insert_with(lean_backup);
        let before = digest(db);
        let result = db.apply_redo(batch);
        let lib = library();
        let is_next_real = self.real.is_some_and(|k| lib.lean.get(k) == Some(batch));
        match result {
            Ok(()) => {
                self.outcomes.push(Outcome::Applied);
                self.real = if is_next_real { self.real.map(|k| k + 1) } else { None };
            }
            Err(e) => {
                assert!(matches!(e, StorageError::BadRedo(_)), "a refused redo batch is BadRedo, not {e:?}");
                assert!(!is_next_real, "the primary's next real batch was refused: {e}");
                assert_eq!(digest(db), before, "a refused redo batch ({e}) changed the backup");
                self.outcomes.push(Outcome::Refused(e.to_string()));
            }
        }
    }

    /// Properties 3–5 at the end of the input; `batches` are the ones given, in order.
    fn finish(mut self, batches: &[RedoBatch]) {
        let Some(mut db) = self.db.take() else { return };
        lean_integrity(&mut db);
        let end = digest(&mut db);
        if let Some(k) = self.real.filter(|&k| k > 0) {
            assert_eq!(end, library().lean_after[k - 1], "the backup differs from the primary after {k} real batches");
            let report = check::check(&mut db);
            assert!(report.all_passed(), "a backup of real batches is inconsistent:\n{report}");
        }
        let mut again = lean_backup();
        let outcomes: Vec<Outcome> = batches
            .iter()
            .map(|b| match again.apply_redo(b) {
                Ok(()) => Outcome::Applied,
                Err(e) => Outcome::Refused(e.to_string()),
            })
            .collect();
        assert_eq!(outcomes, self.outcomes, "the same batches had other outcomes on a second backup");
        assert_eq!(digest(&mut again), end, "the same batches left a second backup in another state");
    }
}

/// Every row of `T` is found by its key, and (with a secondary index) the index holds
/// exactly one entry per row, under the row's secondary key.
fn table_integrity<T: Table>(db: &mut LeanDb, sec_max: T::Sec) {
    let mut rows = Vec::new();
    db.for_each::<T>(|r| rows.push(*r));
    assert_eq!(rows.len(), db.count::<T>(), "{}: rows visited and counted differ", T::ID);
    if T::ORG == Organisation::Heap {
        return;
    }
    for row in &rows {
        let found = db.get::<T, _>(T::key(row), |r| *r).expect("get");
        assert_eq!(found.as_ref(), Some(row), "{}: a row is not found under its key {:#x}", T::ID, T::key(row));
    }
    if T::HAS_SECONDARY {
        let mut entries = 0usize;
        db.scan_secondary::<T>(T::Sec::default(), sec_max, ScanDir::Forward, |_| {
            entries += 1;
            true
        })
        .expect("secondary scan");
        assert_eq!(entries, rows.len(), "{}: secondary entries and rows differ", T::ID);
        for row in &rows {
            let sec = T::secondary(row);
            let mut pks = Vec::new();
            db.scan_secondary::<T>(sec, sec, ScanDir::Forward, |pk| {
                pks.push(pk);
                true
            })
            .expect("secondary scan");
            assert_eq!(pks, [T::key(row)], "{}: the secondary entry of {:#x} is stale", T::ID, T::key(row));
        }
    }
}

/// Property 3 over every table.
fn lean_integrity(db: &mut LeanDb) {
    let name_max =
        CustomerNameKey { w_id: u16::MAX, d_id: u8::MAX, last: [0xFF; 16], first: [0xFF; 16], c_id: u32::MAX };
    table_integrity::<t::Warehouses>(db, ());
    table_integrity::<t::Districts>(db, ());
    table_integrity::<t::Customers>(db, name_max);
    table_integrity::<t::Histories>(db, ());
    table_integrity::<t::Orders>(db, u128::MAX);
    table_integrity::<t::NewOrders>(db, ());
    table_integrity::<t::OrderLines>(db, ());
    table_integrity::<t::Items>(db, ());
    table_integrity::<t::Stocks>(db, ());
}

/// A conventional backup and what it was given.
struct WalRun {
    db: Option<(std::sync::Arc<ConventionalDb>, Session)>,
    outcomes: Vec<Outcome>,
    real: Option<usize>,
    /// The backup diverged (a documented partial application): it must refuse all else.
    diverged: bool,
}

impl WalRun {
    fn new() -> WalRun {
        WalRun { db: None, outcomes: Vec::new(), real: Some(0), diverged: false }
    }

    fn apply(&mut self, chunk: &[u8]) {
        let (db, session) = self.db.get_or_insert_with(conventional_backup);
        let before = digest(session);
        let position = db.shipped_log_position();
        let result = db.apply_shipped_log(chunk);
        let lib = library();
        let is_next_real = self.real.is_some_and(|k| lib.wal.get(k).map(Vec::as_slice) == Some(chunk));
        match result {
            Ok(_) => {
                assert!(!self.diverged, "a diverged backup accepted a chunk");
                self.outcomes.push(Outcome::Applied);
                // An empty chunk changes nothing and is no shipment of the primary's.
                if !chunk.is_empty() {
                    self.real = if is_next_real { self.real.map(|k| k + 1) } else { None };
                }
            }
            Err(ConventionalError::ShipDiverged { .. }) => {
                assert!(!is_next_real || self.diverged, "the primary's next real chunk diverged");
                self.diverged = true;
                self.real = None;
                self.outcomes.push(Outcome::Refused("diverged".into()));
            }
            Err(e) => {
                assert!(
                    matches!(
                        e,
                        ConventionalError::ShipCorrupt { .. }
                            | ConventionalError::ShipOutOfOrder { .. }
                            | ConventionalError::ShipUnfit { .. }
                    ),
                    "a refused chunk is ShipCorrupt, ShipOutOfOrder or ShipUnfit, not {e:?}"
                );
                assert!(!is_next_real, "the primary's next real chunk was refused: {e}");
                assert_eq!(digest(session), before, "a refused chunk ({e}) changed the backup");
                assert_eq!(db.shipped_log_position(), position, "a refused chunk ({e}) moved the backup's position");
                self.outcomes.push(Outcome::Refused(e.to_string()));
            }
        }
    }

    fn finish(mut self, chunks: &[Vec<u8>]) {
        let Some((_db, mut session)) = self.db.take() else { return };
        let end = digest(&mut session);
        if let Some(k) = self.real.filter(|&k| k > 0) {
            assert_eq!(end, library().wal_after[k - 1], "the backup differs from the primary after {k} real chunks");
            let report = check::check(&mut session);
            assert!(report.all_passed(), "a backup of real chunks is inconsistent:\n{report}");
        }
        if self.diverged {
            return;
        }
        let (again_db, mut again) = conventional_backup();
        let outcomes: Vec<Outcome> = chunks
            .iter()
            .map(|c| match again_db.apply_shipped_log(c) {
                Ok(_) => Outcome::Applied,
                Err(ConventionalError::ShipDiverged { .. }) => Outcome::Refused("diverged".into()),
                Err(e) => Outcome::Refused(e.to_string()),
            })
            .collect();
        assert_eq!(outcomes, self.outcomes, "the same chunks had other outcomes on a second backup");
        assert_eq!(digest(&mut again), end, "the same chunks left a second backup in another state");
    }
}

/// The target's `-max_len` (`fuzzing::TARGETS`).
const MAX_LEN: usize = 65_536;
/// Bytes of one edit operation (modes 1 and 2).
const OP_BYTES: usize = 8;
/// Shipments one input may apply (each costs a digest).
const SHIPMENTS_MAX: usize = 64;

/// The property check (see the module documentation).
pub fn check(data: &[u8]) {
    let Some((&mode, body)) = data.split_first() else { return };
    match mode % 3 {
        0 => frames(body),
        1 => lean_edits(body),
        _ => wal_edits(body),
    }
}

fn frames(mut body: &[u8]) {
    let (mut lean, mut wal) = (LeanRun::new(), WalRun::new());
    let (mut batches, mut chunks) = (Vec::new(), Vec::new());
    for _ in 0..SHIPMENTS_MAX {
        let Ok((msg, used)) = wire::codec::decode::<PeerRequest>(body, FRAME_BYTES_MAX_DEFAULT) else { break };
        body = &body[used..];
        let PeerRequest::Ship(Shipment { log, .. }) = msg else { continue };
        match log {
            ShippedLog::Redo(batch) => {
                lean.apply(&batch);
                batches.push(batch);
            }
            ShippedLog::Wal(records) => {
                wal.apply(&records);
                chunks.push(records);
            }
        }
    }
    lean.finish(&batches);
    wal.finish(&chunks);
}

fn u32_at(op: &[u8]) -> u32 {
    u32::from_le_bytes(op[4..8].try_into().expect("an 8-byte operation"))
}

/// A batch's records and bytes as one byte string (what a flip lands in).
fn flip_batch(batch: &mut RedoBatch, at: u32, mask: u8) {
    let mask = mask.max(1);
    let record_bytes = batch.records.len() * 22;
    let at = at as usize % (record_bytes + batch.bytes.len() + 8).max(1);
    if at < record_bytes {
        let r = &mut batch.records[at / 22];
        match at % 22 {
            0 => r.table ^= mask,
            1 => {
                r.op = match (r.op as u8 ^ mask) % 4 {
                    0 => RedoOp::Upsert,
                    1 => RedoOp::Patch,
                    2 => RedoOp::Delete,
                    _ => RedoOp::Append,
                }
            }
            i @ 2..=9 => r.key ^= u64::from(mask) << (8 * (i - 2)),
            i @ 10..=13 => r.at ^= u32::from(mask) << (8 * (i - 10)),
            i @ 14..=17 => r.len ^= u32::from(mask) << (8 * (i - 14)),
            _ => batch.txns ^= u64::from(mask),
        }
    } else if at < record_bytes + batch.bytes.len() {
        batch.bytes[at - record_bytes] ^= mask;
    } else {
        batch.checksum ^= u64::from(mask) << (8 * (at - record_bytes - batch.bytes.len()));
    }
}

/// A sealed batch of `records` (table, op, key, image) built by a hostile primary.
fn hostile(records: &[(u8, RedoOp, u64, &[u8])]) -> RedoBatch {
    let mut batch = RedoBatch { txns: 1, ..RedoBatch::default() };
    for &(table, op, key, image) in records {
        let at = batch.bytes.len() as u32;
        batch.bytes.extend_from_slice(image);
        batch.records.push(RedoRecord { table, op, key, at, len: image.len() as u32 });
    }
    batch.seal();
    batch
}

/// The batches merged into one, offsets shifted, sealed.
fn merge(batches: &[RedoBatch]) -> RedoBatch {
    let mut out = RedoBatch::default();
    for b in batches {
        let shift = out.bytes.len() as u32;
        out.txns += b.txns;
        out.bytes.extend_from_slice(&b.bytes);
        out.records.extend(b.records.iter().map(|r| RedoRecord { at: r.at + shift, ..*r }));
    }
    out.seal();
    out
}

fn lean_edits(body: &[u8]) {
    let lib = library();
    let n = lib.lean.len();
    let mut run = LeanRun::new();
    let mut given = Vec::new();
    for op in body.chunks_exact(OP_BYTES).take(SHIPMENTS_MAX) {
        let (kind, a, b, c, d) = (op[0], op[1] as usize % n, op[2], op[3], u32_at(op));
        let batch = match kind % 6 {
            0 => lib.lean[a].clone(),
            1 | 2 => {
                let mut batch = lib.lean[a].clone();
                flip_batch(&mut batch, d, b);
                if kind % 6 == 2 {
                    batch.seal();
                }
                batch
            }
            3 => {
                // One record of a real batch, its table, operation or key rewritten, sealed.
                let real = &lib.lean[a];
                let Some(r) = real.records.get(d as usize % real.records.len().max(1)) else { continue };
                let image = &real.bytes[r.at as usize..(r.at + r.len) as usize];
                let table = if b & 0x80 != 0 { b % 10 } else { r.table };
                let op_kind = [RedoOp::Upsert, RedoOp::Patch, RedoOp::Delete, RedoOp::Append][c as usize % 4];
                let key = if c & 0x80 != 0 { r.key ^ u64::from(d >> 8) } else { r.key };
                let image = &image[..image.len().min(if c & 0x40 != 0 { (d >> 16) as usize } else { usize::MAX })];
                hostile(&[(table, op_kind, key, image)])
            }
            4 => merge(&lib.lean[a..(a + 1 + b as usize % 4).min(n)]),
            _ => {
                // The input's own bytes as a record image, sealed.
                let table = b % 10;
                let op_kind = [RedoOp::Upsert, RedoOp::Patch, RedoOp::Delete, RedoOp::Append][c as usize % 4];
                let len = match TableId::from_u8(table) {
                    Some(TableId::Warehouse) => std::mem::size_of::<<t::Warehouses as Table>::Row>(),
                    Some(TableId::District) => std::mem::size_of::<<t::Districts as Table>::Row>(),
                    Some(TableId::NewOrder) => std::mem::size_of::<<t::NewOrders as Table>::Row>(),
                    Some(TableId::Orders) => std::mem::size_of::<<t::Orders as Table>::Row>(),
                    _ => (d % 64) as usize,
                };
                let image: Vec<u8> = (0..len).map(|i| op[i % OP_BYTES] ^ i as u8).collect();
                hostile(&[(table, op_kind, u64::from(d), &image)])
            }
        };
        run.apply(&batch);
        given.push(batch);
    }
    run.finish(&given);
}

/// Reseals every whole record of a WAL chunk: its checksum (the xxh3-64 of the bytes before
/// it) recomputed, as a hostile primary would ship them.
fn reseal_wal(chunk: &mut [u8]) {
    let mut at = 0;
    while at + 64 <= chunk.len() {
        let len = u32::from_le_bytes(chunk[at..at + 4].try_into().expect("4 bytes")) as usize;
        if len < 64 || len % 8 != 0 || at + len > chunk.len() {
            return;
        }
        let sum = xxhash_rust::xxh3::xxh3_64(&chunk[at..at + len - 8]);
        chunk[at + len - 8..at + len].copy_from_slice(&sum.to_le_bytes());
        at += len;
    }
}

fn wal_edits(body: &[u8]) {
    let lib = library();
    let n = lib.wal.len();
    let mut run = WalRun::new();
    let mut given = Vec::new();
    for op in body.chunks_exact(OP_BYTES).take(SHIPMENTS_MAX) {
        let (kind, a, b, c, d) = (op[0], op[1] as usize % n, op[2], op[3], u32_at(op));
        let real = &lib.wal[a];
        let chunk = match kind % 5 {
            0 => real.clone(),
            1 | 2 => {
                // A byte flipped (and in mode 2 every record resealed: the damage passes the
                // checksums and meets the record's fields and the backup's pages).
                let mut chunk = real.clone();
                if !chunk.is_empty() {
                    let at = d as usize % chunk.len();
                    chunk[at] ^= b.max(1);
                    if c & 1 == 1 {
                        let at2 = (d as usize >> 8) % chunk.len();
                        chunk[at2] ^= c;
                    }
                }
                if kind % 5 == 2 {
                    reseal_wal(&mut chunk);
                }
                chunk
            }
            3 => real[..d as usize % (real.len() + 1)].to_vec(),
            _ => lib.wal[a..(a + 1 + b as usize % 4).min(n)].concat(),
        };
        run.apply(&chunk);
        given.push(chunk);
    }
    run.finish(&given);
}

/// One `PeerRequest::Ship` frame.
fn ship_frame(seq: u64, log: ShippedLog) -> Vec<u8> {
    let shipment =
        Shipment { partition: 0, primary: 1, seq, last_ts: None, pieces: Vec::new(), log, answers: Vec::new() };
    wire::codec::encode(&PeerRequest::Ship(shipment), FRAME_BYTES_MAX_DEFAULT).expect("a shipment encodes")
}

/// The seed corpus: the real shipments in order as peer frames (lean, WAL, and both), and
/// edit programs that apply them, damage them, replay and reorder them.
pub fn seeds() -> Vec<Vec<u8>> {
    let lib = library();
    let mut seeds = Vec::new();
    let lean_frames: Vec<Vec<u8>> =
        lib.lean.iter().enumerate().map(|(i, b)| ship_frame(i as u64 + 1, ShippedLog::Redo(b.clone()))).collect();
    let wal_frames: Vec<Vec<u8>> =
        lib.wal.iter().enumerate().map(|(i, c)| ship_frame(i as u64 + 1, ShippedLog::Wal(c.clone()))).collect();
    // The longest run of real frames that fits the target's -max_len.
    let fit = |frames: &[Vec<u8>], room: usize| {
        let mut total = 0;
        frames.iter().take_while(|f| (total + f.len() <= room).then(|| total += f.len()).is_some()).count()
    };
    let room = MAX_LEN - 1;
    seeds.push([vec![0], lean_frames[..fit(&lean_frames, room)].concat()].concat());
    seeds.push([vec![0], wal_frames[..fit(&wal_frames, room)].concat()].concat());
    let lean_part = fit(&lean_frames, room / 3).min(3);
    seeds
        .push([vec![0], lean_frames[..lean_part].concat(), wal_frames[..fit(&wal_frames, room / 2)].concat()].concat());
    // Applied twice, out of order.
    seeds.push([vec![0], lean_frames[0].clone(), lean_frames[0].clone(), lean_frames[2].clone()].concat());
    let wal_small = fit(&wal_frames, room / 3).max(1);
    seeds.push([vec![0], wal_frames[0].clone(), wal_frames[0].clone()].concat());
    seeds.push([vec![0], wal_frames[..wal_small].concat(), wal_frames[..1].concat()].concat());
    let op = |kind: u8, a: u8, b: u8, c: u8, d: u32| {
        let mut v = vec![kind, a, b, c];
        v.extend_from_slice(&d.to_le_bytes());
        v
    };
    let n = lib.lean.len() as u8;
    let all: Vec<u8> = (0..n).flat_map(|i| op(0, i, 0, 0, 0)).collect();
    seeds.push([vec![1], all.clone()].concat());
    seeds.push([vec![2], all].concat());
    seeds.push([vec![1], op(0, 0, 0, 0, 0), op(1, 1, 0x10, 0, 77), op(2, 1, 0x01, 0, 5), op(0, 1, 0, 0, 0)].concat());
    seeds.push([vec![1], op(3, 0, 0x83, 0x81, 0x0102), op(4, 0, 3, 0, 0), op(5, 0, 2, 1, 9)].concat());
    seeds.push(
        [vec![2], op(0, 0, 0, 0, 0), op(1, 1, 0x10, 0, 300), op(2, 1, 0x01, 1, 700), op(3, 1, 0, 0, 999)].concat(),
    );
    seeds.push([vec![2], op(4, 0, 3, 0, 0), op(0, 4, 0, 0, 0), op(0, 3, 0, 0, 0)].concat());
    seeds
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(kind: u8, a: u8, b: u8, c: u8, d: u32) -> Vec<u8> {
        let mut v = vec![kind, a, b, c];
        v.extend_from_slice(&d.to_le_bytes());
        v
    }

    #[test]
    fn seeds_hold_and_are_small() {
        for s in seeds() {
            assert!(s.len() <= MAX_LEN, "{} bytes", s.len());
            check(&s);
        }
    }

    /// A patch of a row the backup does not have, after a record that did apply: refused and
    /// rolled back (it was applied in part before the fix).
    #[test]
    fn a_batch_failing_midway_changes_nothing() {
        let lib = library();
        let real = &lib.lean[0];
        let r = real.records[0];
        let image = real.bytes[r.at as usize..(r.at + r.len) as usize].to_vec();
        let prefix = [0u8; 8];
        let mut db = lean_backup();
        let before = digest(&mut db);
        let batch = hostile(&[(r.table, r.op, r.key, &image), (TableId::Warehouse as u8, RedoOp::Patch, 99, &prefix)]);
        assert!(db.apply_redo(&batch).is_err());
        assert_eq!(digest(&mut db), before);
    }

    #[test]
    fn adversarial_lean_batches() {
        // A real batch applied twice, out of order, a flipped byte, a resealed flip, a
        // rewritten record, merged batches, a record of no table.
        for ops in [
            [op(0, 0, 0, 0, 0), op(0, 0, 0, 0, 0)].concat(),
            [op(0, 1, 0, 0, 0), op(0, 0, 0, 0, 0)].concat(),
            (0..=255u8).flat_map(|i| op(2, i, 0xFF, 0, i as u32 * 7919)).collect(),
            (0..=63u8).flat_map(|i| op(3, i, i | 0x80, i, (i as u32) << 16 | 0x1234)).collect(),
            (0..=63u8).flat_map(|i| op(5, i, i, i, i as u32 * 31)).collect(),
            [op(4, 0, 7, 0, 0), op(4, 4, 7, 0, 0)].concat(),
        ] {
            check(&[vec![1], ops].concat());
        }
    }

    #[test]
    fn adversarial_wal_chunks() {
        for ops in [
            [op(0, 0, 0, 0, 0), op(0, 0, 0, 0, 0)].concat(),
            [op(0, 1, 0, 0, 0), op(0, 0, 0, 0, 0)].concat(),
            [op(3, 0, 0, 0, 1000), op(0, 0, 0, 0, 0), op(0, 1, 0, 0, 0)].concat(),
            (0..32u8).flat_map(|i| op(2, 0, 0x40, i, i as u32 * 104_729)).collect(),
            (0..32u8).flat_map(|i| op(1, 0, 0x40, i, i as u32 * 104_729)).collect(),
        ] {
            check(&[vec![2], ops].concat());
        }
    }

    /// The inputs kept in `fuzzing/regressions/redo_apply/` (written once by hand:
    /// `cargo test -p fuzzing --lib redo::tests::write_regressions -- --ignored`).
    fn regressions() -> Vec<(&'static str, Vec<u8>)> {
        let lib = library();
        let real = &lib.lean[0];
        let r = real.records[0];
        let image = real.bytes[r.at as usize..(r.at + r.len) as usize].to_vec();
        let frame = |b: RedoBatch| [vec![0], ship_frame(1, ShippedLog::Redo(b))].concat();
        // A customer row, its last name changed by a patch (the whole row is its prefix).
        let mut db = lean_backup();
        let key = engine::schema::keys::customer(W, 1, 1);
        let mut customer = db.get::<t::Customers, _>(key, |c| *c).unwrap().unwrap();
        customer.c_last = *b"FORGEDFORGEDNAME";
        let item = db.get::<t::Items, _>(2, |i| *i).unwrap().unwrap();
        let forged_item = engine::schema::Item { i_price: item.i_price + 1, ..item };
        vec![
            (
                "partial-apply-then-patch-of-missing-row",
                frame(hostile(&[
                    (r.table, r.op, r.key, &image),
                    (TableId::Warehouse as u8, RedoOp::Patch, 99, &[0; 8]),
                ])),
            ),
            (
                "patch-changes-customer-secondary-key",
                frame(hostile(&[(TableId::Customer as u8, RedoOp::Patch, key, bytemuck::bytes_of(&customer))])),
            ),
            (
                "upsert-image-of-another-key",
                frame(hostile(&[(TableId::Item as u8, RedoOp::Upsert, 1, bytemuck::bytes_of(&forged_item))])),
            ),
        ]
    }

    #[test]
    fn regressions_hold() {
        for (_, input) in regressions() {
            check(&input);
        }
    }

    #[test]
    #[ignore = "writes fuzzing/regressions/redo_apply/"]
    fn write_regressions() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions/redo_apply");
        std::fs::create_dir_all(&dir).unwrap();
        for (name, input) in regressions() {
            std::fs::write(dir.join(name), input).unwrap();
        }
    }
}
