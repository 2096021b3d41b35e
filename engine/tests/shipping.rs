//! Integration tests of WAL shipping on the conventional stack (`conventional::ship`): a
//! passive backup replaying a primary's ARIES log records (Mohan et al., TODS 1992: redo
//! repeats history, CLRs included) reaches the primary's state without executing procedure
//! logic (the log-shipping alternative of Harizopoulos et al., SIGMOD 2008, Section 5.3),
//! while the primary runs TPC-C with several workers, wait-die aborts (Gray & Reuter 7.11.3)
//! and NewOrder rollbacks (TPC-C clause 2.4.2.3); damaged, truncated, duplicate and gapped
//! chunks are refused with nothing applied; a promoted backup's checkpoint survives a
//! restart.
//!
//! The engine crate cannot reach the workload crate's generator, so this file carries a
//! seeded input generator following clause 2's shapes, and its own small TPC-C population,
//! 1 warehouse scaled down (fewer items, customers and orders), that satisfies the
//! consistency conditions of clause 3.3.2 (written before the loader moved into this crate,
//! `engine::loader`). The seed is printed first.

mod common;
use common::TempDir;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use engine::conventional::{cut_log, Config, ConventionalDb, ConventionalError, CutAt, ShipApplyReport, Step};
use engine::digest::{digest, Digest};
use engine::procedures::{
    execute, CustomerSelector, DeliveryInput, NewOrderInput, OrderLineInput, OrderStatusInput, PaymentInput,
    StockLevelInput, TxnInput, DISTRICTS_PER_WAREHOUSE, ORDER_LINES_MAX,
};
use engine::schema::{t, Address, Customer, District, History, Item, NewOrder, Order, OrderLine, Stock, Warehouse};
use engine::{Storage, StorageError, TxnError};

/// The run's seed (every random choice below derives from it).
const SEED: u64 = 0x5EED_0005_4199;
const W_ID: u16 = 1;
/// Wait-die retries of one transaction before the test gives up.
const RETRIES_PER_TXN_MAX: u32 = 10_000;

/// SplitMix64 (Steele, Lea, Flood 2014): seeded, one stream per worker.
struct Rng(u64);

impl Rng {
    fn stream(seed: u64, stream: u64) -> Rng {
        let mut r = Rng(seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03));
        r.next_u64();
        r
    }
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi` (modulo bias is irrelevant here).
    fn uniform(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
    fn percent(&mut self, p: u64) -> bool {
        self.uniform(1, 100) <= p
    }
    fn alnum(&mut self, dst: &mut [u8], min: usize) {
        let len = self.uniform(min as u64, dst.len() as u64) as usize;
        for b in &mut dst[..len] {
            *b = b'a' + self.uniform(0, 25) as u8;
        }
    }
}

/// The population's size: 1 warehouse, 10 districts, scaled down.
#[derive(Debug, Clone, Copy)]
struct Scale {
    items: u32,
    /// Customers per district, and orders per district (one per customer).
    customers: u32,
}

impl Scale {
    const TEST: Scale = Scale { items: 2_000, customers: 120 };
    const SMALL: Scale = Scale { items: 200, customers: 30 };

    /// Orders from this one on are undelivered (have a NEW_ORDER row), 30% as in clause 4.3.3.1.
    fn first_new_order(self) -> u32 {
        self.customers * 7 / 10 + 1
    }
}

const H_AMOUNT_LOAD: i64 = 1_000;

/// C_LAST from a number 0..=999 (clause 4.3.2.3's syllables).
fn last_name(num: u32) -> [u8; 16] {
    const SYLLABLES: [&[u8]; 10] =
        [b"BAR", b"OUGHT", b"ABLE", b"PRI", b"PRES", b"ESE", b"ANTI", b"CALLY", b"ATION", b"EING"];
    let mut out = [0u8; 16];
    let mut len = 0;
    for digit in [num / 100, (num / 10) % 10, num % 10] {
        let s = SYLLABLES[digit as usize];
        out[len..len + s.len()].copy_from_slice(s);
        len += s.len();
    }
    out
}

/// A customer's last name: 100 distinct names, so names repeat (Payment by name picks the
/// middle one, clause 2.5.2.2).
fn customer_last(c_id: u32) -> [u8; 16] {
    last_name((c_id - 1) % 100)
}

fn address(rng: &mut Rng) -> Address {
    let mut a = Address { street_1: [0; 20], street_2: [0; 20], city: [0; 20], state: [0; 2], zip: [0; 9] };
    rng.alnum(&mut a.street_1, 10);
    rng.alnum(&mut a.city, 10);
    a.zip = *b"123411111";
    a
}

/// Bulk-loads (outside any transaction) a population that satisfies clause 3.3.2: Y_TD sums
/// equal the HISTORY sums, the last 30% of each district's orders are undelivered with
/// NEW_ORDER rows, delivered lines carry a zero amount, C_BALANCE = −H_AMOUNT.
fn load<S: Storage>(db: &mut S, scale: Scale, seed: u64) {
    let mut rng = Rng::stream(seed, 0);
    for i_id in 1..=scale.items {
        let mut item =
            Item { i_price: rng.uniform(100, 10_000) as i64, i_id, i_im_id: i_id, ..bytemuck::Zeroable::zeroed() };
        rng.alnum(&mut item.i_name, 14);
        rng.alnum(&mut item.i_data, 26);
        if rng.percent(10) {
            item.i_data[..8].copy_from_slice(b"ORIGINAL");
        }
        db.insert::<t::Items>(&item).unwrap();
        let mut stock = Stock {
            s_i_id: i_id,
            s_quantity: rng.uniform(10, 100) as i32,
            s_w_id: W_ID,
            ..bytemuck::Zeroable::zeroed()
        };
        for dist in &mut stock.s_dist {
            rng.alnum(dist, 24);
        }
        rng.alnum(&mut stock.s_data, 26);
        db.insert::<t::Stocks>(&stock).unwrap();
    }
    let district_ytd = H_AMOUNT_LOAD * scale.customers as i64;
    let mut w = Warehouse {
        w_ytd: district_ytd * DISTRICTS_PER_WAREHOUSE as i64,
        w_tax: rng.uniform(0, 2_000) as u32,
        w_id: W_ID,
        w_name: [0; 10],
        w_address: address(&mut rng),
        _pad: [0; 1],
    };
    rng.alnum(&mut w.w_name, 6);
    db.insert::<t::Warehouses>(&w).unwrap();
    for d_id in 1..=DISTRICTS_PER_WAREHOUSE {
        let d = District {
            d_ytd: district_ytd,
            d_tax: rng.uniform(0, 2_000) as u32,
            d_next_o_id: scale.customers + 1,
            d_w_id: W_ID,
            d_id,
            d_name: *b"district\0\0",
            d_address: address(&mut rng),
            _pad: [0; 4],
        };
        db.insert::<t::Districts>(&d).unwrap();
        for c_id in 1..=scale.customers {
            let mut c = Customer {
                c_credit_lim: 5_000_000,
                c_balance: -H_AMOUNT_LOAD,
                c_ytd_payment: H_AMOUNT_LOAD,
                c_id,
                c_discount: rng.uniform(0, 5_000) as u32,
                c_payment_cnt: 1,
                c_w_id: W_ID,
                c_d_id: d_id,
                c_middle: *b"OE",
                c_last: customer_last(c_id),
                c_credit: if rng.percent(10) { *b"BC" } else { *b"GC" },
                ..bytemuck::Zeroable::zeroed()
            };
            rng.alnum(&mut c.c_first, 8);
            rng.alnum(&mut c.c_data, 300);
            db.insert::<t::Customers>(&c).unwrap();
            let h = History {
                h_amount: H_AMOUNT_LOAD,
                h_c_id: c_id,
                h_c_w_id: W_ID,
                h_w_id: W_ID,
                h_c_d_id: d_id,
                h_d_id: d_id,
                ..bytemuck::Zeroable::zeroed()
            };
            db.insert::<t::Histories>(&h).unwrap();
        }
        // One order per customer, in a random order of customers.
        let mut owners: Vec<u32> = (1..=scale.customers).collect();
        for i in (1..owners.len()).rev() {
            owners.swap(i, rng.uniform(0, i as u64) as usize);
        }
        for o_id in 1..=scale.customers {
            let delivered = o_id < scale.first_new_order();
            let o = Order {
                o_entry_d: 1,
                o_id,
                o_c_id: owners[o_id as usize - 1],
                o_w_id: W_ID,
                o_d_id: d_id,
                o_carrier_id: if delivered { rng.uniform(1, 10) as u8 } else { 0 },
                o_ol_cnt: rng.uniform(5, 15) as u8,
                o_all_local: 1,
                _pad: [0; 2],
            };
            db.insert::<t::Orders>(&o).unwrap();
            for ol_number in 1..=o.o_ol_cnt {
                let ol = OrderLine {
                    ol_delivery_d: if delivered { 1 } else { 0 },
                    ol_amount: if delivered { 0 } else { rng.uniform(1, 999_999) as i64 },
                    ol_o_id: o_id,
                    ol_i_id: rng.uniform(1, scale.items as u64) as u32,
                    ol_w_id: W_ID,
                    ol_supply_w_id: W_ID,
                    ol_d_id: d_id,
                    ol_number,
                    ol_quantity: 5,
                    ..bytemuck::Zeroable::zeroed()
                };
                db.insert::<t::OrderLines>(&ol).unwrap();
            }
            if !delivered {
                db.insert::<t::NewOrders>(&NewOrder { no_o_id: o_id, no_w_id: W_ID, no_d_id: d_id, _pad: 0 }).unwrap();
            }
        }
    }
}

/// Customer selection: 60% by last name (clause 2.5.1.2).
fn customer(rng: &mut Rng, scale: Scale) -> CustomerSelector {
    let c_id = rng.uniform(1, scale.customers as u64) as u32;
    if rng.percent(60) {
        CustomerSelector::ByLastName(customer_last(c_id))
    } else {
        CustomerSelector::ById(c_id)
    }
}

/// One transaction input in the standard mix (45/43/4/4/4); 1% of NewOrders name an unused
/// item and roll back (clause 2.4.1.4).
fn next_input(rng: &mut Rng, scale: Scale, ts: i64) -> TxnInput {
    let d_id = rng.uniform(1, DISTRICTS_PER_WAREHOUSE as u64) as u8;
    match rng.uniform(1, 100) {
        1..=45 => {
            let ol_cnt = rng.uniform(5, ORDER_LINES_MAX as u64) as u8;
            let mut lines = [OrderLineInput::default(); ORDER_LINES_MAX];
            for l in &mut lines[..ol_cnt as usize] {
                *l = OrderLineInput {
                    i_id: rng.uniform(1, scale.items as u64) as u32,
                    supply_w_id: W_ID,
                    quantity: rng.uniform(1, 10) as u8,
                };
            }
            if rng.percent(1) {
                lines[ol_cnt as usize - 1].i_id = scale.items + 1;
            }
            let c_id = rng.uniform(1, scale.customers as u64) as u32;
            TxnInput::NewOrder(NewOrderInput { w_id: W_ID, d_id, c_id, ol_cnt, lines, entry_d: ts })
        }
        46..=88 => TxnInput::Payment(PaymentInput {
            w_id: W_ID,
            d_id,
            c_w_id: W_ID,
            c_d_id: d_id,
            customer: customer(rng, scale),
            h_amount: rng.uniform(100, 500_000) as i64,
            date: ts,
        }),
        89..=92 => TxnInput::OrderStatus(OrderStatusInput { w_id: W_ID, d_id, customer: customer(rng, scale) }),
        93..=96 => TxnInput::Delivery(DeliveryInput { w_id: W_ID, o_carrier_id: rng.uniform(1, 10) as u8, date: ts }),
        _ => TxnInput::StockLevel(StockLevelInput { w_id: W_ID, d_id, threshold: rng.uniform(10, 20) as i32 }),
    }
}

/// What a worker's transactions came to.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    committed: u64,
    rolled_back: u64,
    conflicts: u64,
}

impl Tally {
    fn add(&mut self, o: Tally) {
        self.committed += o.committed;
        self.rolled_back += o.rolled_back;
        self.conflicts += o.conflicts;
    }
}

/// Runs `input` to completion: re-executes wait-die victims, counts TPC-C rollbacks.
fn run_one<S: Storage>(s: &mut S, ts: u64, input: &TxnInput, tally: &mut Tally) {
    for _ in 0..RETRIES_PER_TXN_MAX {
        match execute(s, ts, input) {
            Ok(_) => {
                tally.committed += 1;
                return;
            }
            Err(TxnError::Rollback(_)) => {
                tally.rolled_back += 1;
                return;
            }
            Err(TxnError::Storage(StorageError::Conflict(_))) => tally.conflicts += 1,
            Err(e) => panic!("transaction failed: {e}"),
        }
    }
    panic!("a transaction died {RETRIES_PER_TXN_MAX} times");
}

/// Step 0 (the full stack: buffer pool, 2PL, latches, WAL with group-commit fsync) with a
/// small log preallocation.
fn config(workers: usize) -> Config {
    Config { log_prealloc_bytes: 1 << 20, ..Config::for_step(Step::FULL_STACK, workers) }
}

/// Opens a database in `dir`, loads it and checkpoints (the load is not logged).
fn open_loaded(dir: &TempDir, workers: usize, scale: Scale) -> Arc<ConventionalDb> {
    let db = ConventionalDb::open(&dir.0, config(workers)).unwrap();
    load(&mut db.session().unwrap(), scale, SEED);
    db.checkpoint().unwrap();
    db
}

fn state(db: &Arc<ConventionalDb>) -> Digest {
    digest(&mut db.session().unwrap())
}

/// Sums reports of successive chunks.
fn add_report(total: &mut ShipApplyReport, r: &ShipApplyReport) {
    total.records += r.records;
    total.changes += r.changes;
    total.compensations += r.compensations;
    total.commits += r.commits;
    total.rollbacks += r.rollbacks;
    total.bytes += r.bytes;
    total.next_lsn = r.next_lsn;
}

/// A backup applying the shipped log of a primary running TPC-C with 4 workers reaches the
/// primary's exact state (equal digests) after every round, and passes the consistency
/// conditions of clause 3.3.2. Chunks are taken both while workers run (cut inside running
/// transactions: redo repeats history, so chunk after chunk equals their concatenation) and
/// after every worker finished. The stream holds wait-die deaths and NewOrder rollbacks
/// (clause 2.4.2.3), so CLRs and end-of-rollback records are replayed too; HISTORY rows are
/// placed by record id on pages beyond the backup's loaded heap.
#[test]
fn backup_replaying_shipped_log_reaches_the_primarys_state() {
    const WORKERS: usize = 4;
    const ROUNDS: u64 = 3;
    const TXNS_PER_WORKER_PER_ROUND: u64 = 300;
    println!("seed {SEED:#x}");
    let scale = Scale::TEST;
    let (pdir, bdir) = (TempDir::new("shipping", "primary"), TempDir::new("shipping", "backup"));
    let primary = open_loaded(&pdir, WORKERS, scale);
    let backup = open_loaded(&bdir, 1, scale);
    assert_eq!(state(&primary), state(&backup), "identical loads");
    let loaded = state(&backup);
    primary.set_log_shipping(true).unwrap();
    assert!(primary.log_shipping());

    let ts = AtomicU64::new(1);
    let mut tally = Tally::default();
    let mut total = ShipApplyReport::default();
    let mut chunks = 0u64;
    let mut shipped = 0u64;
    let mut apply = |bytes: Vec<u8>, total: &mut ShipApplyReport| {
        shipped += bytes.len() as u64;
        let r = backup.apply_shipped_log(&bytes).unwrap();
        assert_eq!(r.bytes, bytes.len());
        if let Some(expected) = total.next_lsn.filter(|_| r.records > 0) {
            assert_eq!(r.first_lsn, Some(expected), "chunks follow each other");
        }
        add_report(total, &r);
        chunks += 1;
    };
    for round in 0..ROUNDS {
        let done = AtomicBool::new(false);
        let round_tally = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..WORKERS as u64)
                .map(|w| {
                    let (primary, ts) = (&primary, &ts);
                    scope.spawn(move || {
                        let mut rng = Rng::stream(SEED, 1 + round * WORKERS as u64 + w);
                        let mut s = primary.session().unwrap();
                        let mut tally = Tally::default();
                        for _ in 0..TXNS_PER_WORKER_PER_ROUND {
                            let now = ts.fetch_add(1, Ordering::Relaxed);
                            let input = next_input(&mut rng, scale, now as i64);
                            run_one(&mut s, now, &input, &mut tally);
                        }
                        tally
                    })
                })
                .collect();
            // Ship while the workers run: chunks end wherever the log happens to be.
            let shipper = scope.spawn(|| {
                let mut mid = Vec::new();
                while !done.load(Ordering::Acquire) {
                    std::thread::sleep(std::time::Duration::from_millis(3));
                    mid.push(primary.take_shipped_log());
                }
                mid
            });
            let mut t = Tally::default();
            for w in workers {
                t.add(w.join().unwrap());
            }
            done.store(true, Ordering::Release);
            (t, shipper.join().unwrap())
        });
        let (t, mid_chunks) = round_tally;
        tally.add(t);
        for bytes in mid_chunks {
            apply(bytes, &mut total);
        }
        // Every transaction of the round has finished: the last chunk ends at a quiet point.
        apply(primary.take_shipped_log(), &mut total);
        assert_eq!(state(&backup), state(&primary), "round {round}: the backup has the primary's state");
        if round == 0 {
            // A checkpoint of the primary ships its checkpoint record: the stream stays
            // contiguous across the new log generation.
            primary.checkpoint().unwrap();
        }
    }
    assert_ne!(state(&backup), loaded);
    println!("{tally:?}; {chunks} chunks; {total:?}");

    let c = primary.counters();
    assert!(tally.rolled_back > 0, "NewOrder rollbacks in the stream: {tally:?}");
    assert!(tally.conflicts > 0 && c.lock_conflicts > 0, "wait-die deaths in the stream: {tally:?}");
    assert!(total.compensations > 0 && total.rollbacks > 0, "CLRs and end records replayed: {total:?}");
    assert!(total.commits as u64 <= tally.committed, "read-only commits write no record");
    assert!(total.commits as u64 * 2 >= tally.committed, "writers committed: {total:?} {tally:?}");
    assert_eq!(primary.log_bytes_shipped(), shipped);
    assert_eq!(total.bytes as u64, shipped);
    assert!(c.fsyncs > 0, "group commit stayed on while shipping");
    assert!(chunks > ROUNDS);
    let report = engine::check::check(&mut backup.session().unwrap());
    assert!(report.all_passed(), "backup fails clause 3.3.2:\n{report}");
    let report = engine::check::check(&mut primary.session().unwrap());
    assert!(report.all_passed(), "primary fails clause 3.3.2:\n{report}");
}

/// Runs `n` transactions on `db` with one session; returns the log shipped meanwhile.
fn run_and_take(db: &Arc<ConventionalDb>, rng: &mut Rng, n: u64, ts: &mut u64) -> Vec<u8> {
    let mut s = db.session().unwrap();
    let mut tally = Tally::default();
    for _ in 0..n {
        *ts += 1;
        let input = next_input(rng, Scale::SMALL, *ts as i64);
        run_one(&mut s, *ts, &input, &mut tally);
    }
    db.take_shipped_log()
}

/// Reseals a record (LSN kept) after editing it: the checksum is xxh3-64 of all bytes before
/// it (the layout in `conventional::log`).
fn reseal(rec: &mut [u8]) {
    let end = rec.len() - 8;
    let sum = xxhash_rust::xxh3::xxh3_64(&rec[..end]);
    rec[end..].copy_from_slice(&sum.to_le_bytes());
}

/// The start and length of each record of a chunk (the length is the first 4 bytes).
fn record_bounds(chunk: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < chunk.len() {
        let len = u32::from_le_bytes(chunk[at..at + 4].try_into().unwrap()) as usize;
        out.push((at, len));
        at += len;
    }
    out
}

/// The backup checks a whole chunk before applying any of it (redb's checksum-at-replay
/// habit): a flipped byte (in the middle, or in the last record only), a chunk cut inside a
/// record, a record that passes its checksum but does not fit the catalog, a duplicate chunk
/// and a chunk after a gap are refused with the right error and leave the backup's state
/// unchanged; the good chunks then apply in order.
#[test]
fn damaged_truncated_duplicate_and_gapped_chunks_change_nothing() {
    let scale = Scale::SMALL;
    let (pdir, bdir) = (TempDir::new("shipping", "primary"), TempDir::new("shipping", "backup"));
    let primary = open_loaded(&pdir, 1, scale);
    let backup = open_loaded(&bdir, 1, scale);
    primary.set_log_shipping(true).unwrap();
    let mut rng = Rng::stream(SEED, 100);
    let mut ts = 0;
    let c1 = run_and_take(&primary, &mut rng, 20, &mut ts);
    let c2 = run_and_take(&primary, &mut rng, 20, &mut ts);
    let c3 = run_and_take(&primary, &mut rng, 20, &mut ts);
    assert!(!c1.is_empty() && !c2.is_empty() && !c3.is_empty());

    let r1 = backup.apply_shipped_log(&c1).unwrap();
    assert_eq!(backup.shipped_log_position(), r1.next_lsn);
    let after_c1 = state(&backup);
    let refused = |bytes: &[u8]| -> ConventionalError {
        let e = backup.apply_shipped_log(bytes).expect_err("chunk must be refused");
        assert_eq!(state(&backup), after_c1, "a refused chunk changes nothing ({e})");
        assert_eq!(backup.shipped_log_position(), r1.next_lsn, "a refused chunk keeps the position");
        e
    };

    let bounds = record_bounds(&c2);
    assert!(bounds.len() > 3);
    let mut corrupt = c2.clone();
    corrupt[c2.len() / 2] ^= 0x40;
    assert!(matches!(refused(&corrupt), ConventionalError::ShipCorrupt { .. }));
    let mut corrupt_last = c2.clone();
    let (last_at, _) = *bounds.last().unwrap();
    corrupt_last[last_at + 20] ^= 0x01;
    assert!(
        matches!(refused(&corrupt_last), ConventionalError::ShipCorrupt { offset, .. } if offset == last_at),
        "earlier records are not applied when the last one is damaged"
    );
    let (second_at, second_len) = bounds[1];
    assert!(matches!(
        refused(&c2[..second_at + second_len / 2]),
        ConventionalError::ShipCorrupt { offset, .. } if offset == second_at
    ));
    assert!(matches!(refused(&c2[..c2.len() - 3]), ConventionalError::ShipCorrupt { .. }));
    assert!(matches!(refused(&c2[..20]), ConventionalError::ShipCorrupt { offset: 0, .. }));

    // A change record turned into an update of a HISTORY record, resealed: its checksum
    // passes, but its images have another table's row width. It sits after valid records.
    let (change_at, change_len) =
        bounds.iter().copied().skip(1).find(|&(at, _)| c2[at + 4] == 1 && c2[at + 5] != 3).expect("an update record");
    let mut unfit = c2.clone();
    unfit[change_at + 5] = 3; // table id 3: HISTORY
    reseal(&mut unfit[change_at..change_at + change_len]);
    assert!(matches!(refused(&unfit), ConventionalError::ShipUnfit { .. }));

    let r1_start = r1.first_lsn.unwrap();
    let expected = r1.next_lsn.unwrap();
    assert!(matches!(
        refused(&c1),
        ConventionalError::ShipOutOfOrder { expected: e, found } if e == expected && found == r1_start
    ));
    assert!(matches!(
        refused(&c3),
        ConventionalError::ShipOutOfOrder { expected: e, found } if e == expected && found > expected
    ));
    // The tail of c1 again (its last record alone) is a duplicate too.
    let (c1_last_at, _) = *record_bounds(&c1).last().unwrap();
    assert!(matches!(refused(&c1[c1_last_at..]), ConventionalError::ShipOutOfOrder { .. }));

    // Cut at a record boundary inside the chunk (inside a transaction, most likely), the two
    // pieces apply one after the other as the whole would.
    let (mid_at, _) = bounds[bounds.len() / 2];
    let first = backup.apply_shipped_log(&c2[..mid_at]).unwrap();
    let second = backup.apply_shipped_log(&c2[mid_at..]).unwrap();
    assert_eq!(second.first_lsn, first.next_lsn);
    assert_eq!(first.records + second.records, bounds.len());
    let r3 = backup.apply_shipped_log(&c3).unwrap();
    assert!(matches!(backup.apply_shipped_log(&c3), Err(ConventionalError::ShipOutOfOrder { .. })));
    assert_eq!(backup.shipped_log_position(), r3.next_lsn);
    assert_eq!(state(&backup), state(&primary));
    assert_eq!(backup.apply_shipped_log(&[]).unwrap().records, 0, "an empty chunk is a no-op");
}

/// A page image (kind 12: a split's or a page allocation's, issue #18) forged to name a page
/// four billion pages past its store's end, resealed so that its checksum passes, is refused
/// when it is reached — the records before it applied, as for any record that does not fit
/// the backup's pages — without allocating the pages up to it; every later chunk is refused.
#[test]
fn a_forged_page_image_far_past_its_store_is_refused_without_allocating() {
    let scale = Scale::SMALL;
    let (pdir, bdir) = (TempDir::new("shipping", "primary"), TempDir::new("shipping", "backup"));
    let primary = open_loaded(&pdir, 1, scale);
    let backup = open_loaded(&bdir, 1, scale);
    primary.set_log_shipping(true).unwrap();
    let mut rng = Rng::stream(SEED, 300);
    let mut ts = 0;
    let chunk = run_and_take(&primary, &mut rng, 200, &mut ts);
    let (image_at, image_len) = record_bounds(&chunk)
        .into_iter()
        .find(|&(at, _)| chunk[at + 4] == 12)
        .expect("a page image in 200 transactions");
    let mut forged = chunk.clone();
    forged[image_at + 40..image_at + 44].copy_from_slice(&(u32::MAX - 1).to_le_bytes());
    reseal(&mut forged[image_at..image_at + image_len]);
    let e = backup.apply_shipped_log(&forged).expect_err("a page image far past its store");
    assert!(matches!(e, ConventionalError::ShipDiverged { what, .. } if what.contains("far past")), "{e}");
    assert!(matches!(backup.apply_shipped_log(&[]), Err(ConventionalError::ShipDiverged { .. })));
}

/// A backup that did not start from the primary's state (here: never loaded) cannot apply a
/// chunk: the first record that misses its row stops it, and every later chunk is refused.
#[test]
fn a_backup_not_at_the_primarys_state_diverges_and_refuses_more() {
    let scale = Scale::SMALL;
    let (pdir, bdir) = (TempDir::new("shipping", "primary"), TempDir::new("shipping", "empty"));
    let primary = open_loaded(&pdir, 1, scale);
    let empty = ConventionalDb::open(&bdir.0, config(1)).unwrap();
    primary.set_log_shipping(true).unwrap();
    let mut rng = Rng::stream(SEED, 200);
    let mut ts = 0;
    let c1 = run_and_take(&primary, &mut rng, 10, &mut ts);
    let c2 = run_and_take(&primary, &mut rng, 10, &mut ts);
    assert!(matches!(empty.apply_shipped_log(&c1), Err(ConventionalError::ShipDiverged { .. })));
    assert!(matches!(empty.apply_shipped_log(&c2), Err(ConventionalError::ShipDiverged { .. })));
}

/// With shipping off (the default) nothing is copied: takes are empty, before, between and
/// after a period with shipping on; the period's records are all shipped. A configuration
/// without log records refuses to ship.
#[test]
fn shipping_off_ships_nothing() {
    let scale = Scale::SMALL;
    let dir = TempDir::new("shipping", "off");
    let db = open_loaded(&dir, 1, scale);
    let mut rng = Rng::stream(SEED, 300);
    let mut ts = 0;
    assert!(!db.log_shipping());
    assert!(run_and_take(&db, &mut rng, 10, &mut ts).is_empty());
    assert!(db.counters().log_records > 0, "records were written, not shipped");
    db.set_log_shipping(true).unwrap();
    let on = run_and_take(&db, &mut rng, 10, &mut ts);
    assert!(!on.is_empty());
    assert!(db.take_shipped_log().is_empty(), "a take clears the buffer");
    db.set_log_shipping(false).unwrap();
    assert!(run_and_take(&db, &mut rng, 10, &mut ts).is_empty());
    assert_eq!(db.log_bytes_shipped(), on.len() as u64);

    let lean_dir = TempDir::new("shipping", "no-records");
    let no_records = ConventionalDb::open(&lean_dir.0, Config::for_step(Step::new(3).unwrap(), 1)).unwrap();
    assert!(matches!(no_records.set_log_shipping(true), Err(ConventionalError::ShippingUnavailable { .. })));
    assert!(no_records.set_log_shipping(false).is_ok());
}

/// A backup promoted after applying shipped records: its checkpoint lies past every applied
/// LSN, so its own later transactions (with LSNs above the page LSNs the primary's records
/// left) are redone after a restart (ARIES's page-LSN test, Mohan et al. Section 6.2), and
/// the restarted database has exactly the pre-crash state.
#[test]
fn promoted_backup_checkpoint_keeps_its_own_later_transactions_across_a_restart() {
    let scale = Scale::SMALL;
    let (pdir, bdir) = (TempDir::new("shipping", "primary"), TempDir::new("shipping", "promoted"));
    let primary = open_loaded(&pdir, 1, scale);
    let backup = open_loaded(&bdir, 1, scale);
    primary.set_log_shipping(true).unwrap();
    let mut rng = Rng::stream(SEED, 400);
    let mut ts = 0;
    for _ in 0..3 {
        let chunk = run_and_take(&primary, &mut rng, 40, &mut ts);
        backup.apply_shipped_log(&chunk).unwrap();
    }
    assert_eq!(state(&backup), state(&primary));
    drop(primary);
    // Promotion: make the applied state durable, then run transactions of its own.
    backup.checkpoint().unwrap();
    run_and_take(&backup, &mut rng, 60, &mut ts);
    let before_crash = state(&backup);
    drop(backup); // no checkpoint: the restart recovers from the log
    let reopened = ConventionalDb::open(&bdir.0, config(1)).unwrap();
    assert!(reopened.recovery_report().redone > 0);
    assert_eq!(state(&reopened), before_crash, "the promoted backup's own transactions survive");
    let report = engine::check::check(&mut reopened.session().unwrap());
    assert!(report.all_passed(), "{report}");
}

/// Section 5.3's full-stack rejoin: a primary fails after committing transactions its backup
/// never received (their clients were answered "outcome unknown" or not at all); the backup
/// is promoted and runs transactions of its own. The old primary, restarted, cuts its log
/// where the promoted backup's copy of it ended (the fork point), and restart recovery
/// rebuilds exactly the state its successor started from; the successor's log since its
/// promotion checkpoint (the base) and its later shipments then bring it to the successor's
/// state. Cutting where no record ends, or a log with records after its checkpoint at
/// "checkpoint", is refused and changes nothing.
#[test]
fn a_failed_primary_cuts_its_log_at_the_fork_recovers_and_follows_its_successor() {
    let scale = Scale::SMALL;
    let (pdir, bdir) = (TempDir::new("shipping", "old-primary"), TempDir::new("shipping", "successor"));
    let primary = open_loaded(&pdir, 2, scale);
    let backup = open_loaded(&bdir, 1, scale);
    primary.set_log_shipping(true).unwrap();
    let mut rng = Rng::stream(SEED, 500);
    let mut ts = 0;
    for _ in 0..3 {
        let chunk = run_and_take(&primary, &mut rng, 40, &mut ts);
        backup.apply_shipped_log(&chunk).unwrap();
        assert!(primary.take_shipped_log_durable().unwrap().is_empty(), "run_and_take took everything");
    }
    let at_fork = state(&backup);
    let fork = backup.shipped_log_position().unwrap();
    // Committed on the primary, never shipped: then it fails.
    run_and_take(&primary, &mut rng, 30, &mut ts);
    assert_ne!(state(&primary), at_fork);
    drop(primary);

    // Promotion: a checkpoint (the successor's own log starts at its applied state), then
    // transactions of its own.
    backup.checkpoint().unwrap();
    run_and_take(&backup, &mut rng, 50, &mut ts);

    let refused = cut_log(&pdir.0, CutAt::Lsn(fork + 8)).unwrap_err();
    assert!(refused.to_string().contains("no record of the log ends"), "{refused}");
    let refused = cut_log(&pdir.0, CutAt::Checkpoint).unwrap_err();
    assert!(refused.to_string().contains("records after its checkpoint"), "{refused}");
    let cut = cut_log(&pdir.0, CutAt::Lsn(fork)).unwrap();
    assert!(cut.records_cut > 0 && cut.bytes_cut > 0, "{cut:?}");
    let old = ConventionalDb::open(&pdir.0, config(1)).unwrap();
    assert_eq!(old.recovery_report().losers, 0, "the fork is a transaction boundary");
    assert_eq!(state(&old), at_fork, "recovery rebuilt exactly the state the successor started from");

    let base = whole(backup.log_base_for_backup().unwrap());
    old.apply_shipped_log(&base).unwrap();
    assert_eq!(state(&old), state(&backup), "the base brings the successor's own transactions");
    for _ in 0..2 {
        let chunk = run_and_take(&backup, &mut rng, 40, &mut ts);
        assert!(!chunk.is_empty(), "the base switched the successor's shipping on");
        old.apply_shipped_log(&chunk).unwrap();
        assert_eq!(state(&old), state(&backup));
    }
    let report = engine::check::check(&mut old.session().unwrap());
    assert!(report.all_passed(), "{report}");
}

/// A log base's bytes, read whole right away (the node reads them later, off its executor).
fn whole(mut base: engine::conventional::log::GenerationRead) -> Vec<u8> {
    let n = base.len();
    base.read(n).unwrap()
}
