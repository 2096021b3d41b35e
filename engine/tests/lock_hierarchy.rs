//! The conventional stack's hierarchical locking (issue 18) seen through `Storage`: Shore's
//! lock hierarchy volume → store → page → record with key locks on indexes, intention modes
//! taken top-down and cached per transaction (Gray & Reuter, ch. 7, §7.8 "granular locks"),
//! key locks on secondary indexes that make a writer of a secondary key and a scan over it
//! conflict while different keys do not, and wait-die deciding every conflict (a younger
//! requester dies, an older one waits and is granted at the holder's commit). The paper's
//! locking switch removes all of it (Harizopoulos et al., SIGMOD 2008, Section 4).
//!
//! The lock manager's own tests (the compatibility matrix with SIX, conversions, wait-die on
//! table locks against a session's row and intention locks) are unit tests in
//! `engine/src/conventional/lock.rs`: its items are crate-private.

use std::sync::Arc;

use bytemuck::Zeroable;
use engine::check::check;
use engine::conventional::{Config, ConventionalDb, Counters, Medium, MemoryMedium, Session, Step};
use engine::loader::{load_database_scaled, Scale};
use engine::procedures::{
    execute, CustomerSelector, DeliveryInput, NewOrderInput, OrderLineInput, OrderStatusInput, PaymentInput, TxnInput,
    ORDER_LINES_MAX,
};
use engine::rng::last_name_field;
use engine::schema::{fixed, keys, t, Customer, CustomerNameKey, History, Order, OrderLine, Stock};
use engine::{ScanDir, Storage, StorageError, TxnError};

/// A fresh in-memory database at `step` for `workers` sessions.
fn open(step: u8, workers: usize) -> Arc<ConventionalDb> {
    let config = Config { log_prealloc_bytes: 1 << 20, ..Config::for_step(Step::new(step).unwrap(), workers) };
    ConventionalDb::open_on(&Medium::Memory(MemoryMedium::new()), config).unwrap()
}

fn customer(d: u8, c: u32, last: &[u8]) -> Customer {
    Customer { c_w_id: 1, c_d_id: d, c_id: c, c_last: fixed(last), c_first: fixed(b"first"), ..Customer::zeroed() }
}

fn order(o: u32, c: u32) -> Order {
    Order { o_w_id: 1, o_d_id: 1, o_id: o, o_c_id: c, o_ol_cnt: 1, ..Order::zeroed() }
}

/// District 1's customers 1–4, named ABLE, BAR, OUGHT, PRES; orders 1–4 of customers 1–4.
fn loaded(workers: usize) -> Arc<ConventionalDb> {
    let db = open(0, workers);
    let mut s = db.session().unwrap();
    for (c, last) in [b"ABLE".as_slice(), b"BAR", b"OUGHT", b"PRES"].into_iter().enumerate() {
        let c = c as u32 + 1;
        s.insert::<t::Customers>(&customer(1, c, last)).unwrap();
        s.insert::<t::Orders>(&order(c, c)).unwrap();
    }
    db
}

/// The primary keys of district 1's customers named `last`, by the name index.
fn by_name(s: &mut Session, last: &[u8]) -> Result<Vec<u64>, StorageError> {
    let key = |first: u8, c_id: u32| CustomerNameKey { w_id: 1, d_id: 1, last: fixed(last), first: [first; 16], c_id };
    let mut found = Vec::new();
    s.scan_secondary::<t::Customers>(key(0, 0), key(0xFF, u32::MAX), ScanDir::Forward, |pk| {
        found.push(pk);
        true
    })?;
    Ok(found)
}

/// The primary keys of customer `c`'s orders (district 1), by the customer index.
fn orders_of(s: &mut Session, c: u32) -> Result<Vec<u64>, StorageError> {
    let mut found = Vec::new();
    let (lo, hi) = (keys::order_by_customer(1, 1, c, 0), keys::order_by_customer(1, 1, c, u32::MAX));
    s.scan_secondary::<t::Orders>(lo, hi, ScanDir::Forward, |pk| {
        found.push(pk);
        true
    })?;
    Ok(found)
}

fn conflict<T: std::fmt::Debug>(r: Result<T, StorageError>) -> bool {
    matches!(r, Err(StorageError::Conflict(_)))
}

/// Key locks on secondary indexes (Gray & Reuter ch. 7: index keys are locked like records)
/// under wait-die: an insert X-locks the secondary keys it adds, so a younger transaction's
/// scan over such a key dies — on CUSTOMER's name index and on ORDERS' customer index — and
/// once the writer has committed, its retry sees the new entries.
#[test]
fn an_inserted_secondary_key_kills_a_younger_scan_over_it() {
    let db = loaded(3);
    let (mut a, mut b, mut c) = (db.session().unwrap(), db.session().unwrap(), db.session().unwrap());
    a.begin(1);
    a.insert::<t::Customers>(&customer(1, 50, b"ZED")).unwrap();
    a.insert::<t::Orders>(&order(50, 3)).unwrap();
    b.begin(2); // younger than a
    c.begin(3); // younger than a
    assert!(conflict(by_name(&mut b, b"ZED")), "the name a inserted is X-locked");
    assert!(conflict(orders_of(&mut c, 3)), "customer 3's new order key is X-locked");
    a.commit().unwrap();
    // The aborts' restart delay finds the keys free: a has committed.
    b.abort();
    c.abort();
    b.begin(2);
    assert_eq!(by_name(&mut b, b"ZED").unwrap(), vec![keys::customer(1, 1, 50)]);
    b.commit().unwrap();
    c.begin(3);
    assert_eq!(orders_of(&mut c, 3).unwrap(), vec![keys::order(1, 1, 3), keys::order(1, 1, 50)]);
    c.commit().unwrap();
    for s in [&mut b, &mut c] {
        let n = s.counters();
        assert_eq!((n.lock_conflicts, n.aborted, n.lock_waits, n.committed), (1, 1, 0, 1), "{n:?}");
    }
}

/// Wait-die's other half on a key lock: an older transaction's scan over a key a younger one
/// inserted waits (blocked, not refused) and, granted at the inserter's commit, sees it.
#[test]
fn an_older_scan_waits_for_the_key_lock_and_sees_the_committed_insert() {
    let db = loaded(2);
    let (mut a, mut b) = (db.session().unwrap(), db.session().unwrap());
    b.begin(1); // older than a
    a.begin(2);
    a.insert::<t::Customers>(&customer(1, 60, b"ZED")).unwrap();
    std::thread::scope(|scope| {
        let scan = scope.spawn(move || {
            let found = by_name(&mut b, b"ZED");
            b.commit().unwrap();
            (found, b.counters())
        });
        // The one sleep: long enough that a scan that was not blocked would have finished.
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!scan.is_finished(), "the older scan waits for the key lock");
        a.commit().unwrap();
        let (found, c) = scan.join().unwrap();
        assert_eq!(found.unwrap(), vec![keys::customer(1, 1, 60)]);
        assert_eq!((c.lock_waits, c.lock_conflicts), (1, 0), "{c:?}");
    });
}

/// Key locks are per key: a scan over other names and other customers' orders, and an insert
/// of other keys, go on beside an uncommitted insert without waiting or dying.
#[test]
fn different_secondary_keys_do_not_conflict() {
    let db = loaded(2);
    let (mut a, mut b) = (db.session().unwrap(), db.session().unwrap());
    a.begin(1);
    a.insert::<t::Customers>(&customer(1, 70, b"ZED")).unwrap();
    a.insert::<t::Orders>(&order(70, 1)).unwrap();
    b.begin(2); // younger: any conflict with a would kill it
    assert_eq!(by_name(&mut b, b"ABLE").unwrap(), vec![keys::customer(1, 1, 1)]);
    assert_eq!(by_name(&mut b, b"PRES").unwrap(), vec![keys::customer(1, 1, 4)]);
    assert_eq!(orders_of(&mut b, 2).unwrap(), vec![keys::order(1, 1, 2)]);
    b.insert::<t::Customers>(&customer(1, 71, b"YAK")).unwrap();
    b.insert::<t::Orders>(&order(71, 2)).unwrap();
    b.commit().unwrap();
    a.commit().unwrap();
    for c in [a.counters(), b.counters()] {
        assert_eq!((c.lock_waits, c.lock_conflicts, c.aborted), (0, 0, 0), "{c:?}");
    }
}

/// A scan by secondary key S-locks the row's primary key too: a younger scan by name dies on
/// an older transaction's update of that customer (whose name key nobody holds).
#[test]
fn a_scan_by_name_locks_the_row_it_returns() {
    let db = loaded(2);
    let (mut a, mut b) = (db.session().unwrap(), db.session().unwrap());
    a.begin(1);
    a.update::<t::Customers, _>(keys::customer(1, 1, 2), |c| c.c_balance -= 10).unwrap().unwrap();
    b.begin(2);
    assert_eq!(by_name(&mut b, b"ABLE").unwrap(), vec![keys::customer(1, 1, 1)], "another row: no conflict");
    assert!(conflict(by_name(&mut b, b"BAR")), "customer 2's row is X-locked");
    a.commit().unwrap();
    b.abort();
}

/// A delete X-locks the row and the secondary key it removes: a younger delete of a customer
/// or an order an older transaction found through an index dies (the reader's S locks keep
/// its reads repeatable); once the reader has committed, the retried delete goes through and
/// the keys are gone from the indexes. (A scan that starts after an uncommitted delete does
/// not see the removed key, so it has nothing to conflict on: there is no key-range locking.)
#[test]
fn a_delete_conflicts_with_an_older_reader_of_its_secondary_key() {
    let db = loaded(3);
    let (mut a, mut b, mut c) = (db.session().unwrap(), db.session().unwrap(), db.session().unwrap());
    b.begin(1); // older than a and c
    assert_eq!(by_name(&mut b, b"OUGHT").unwrap(), vec![keys::customer(1, 1, 3)]);
    assert_eq!(orders_of(&mut b, 4).unwrap(), vec![keys::order(1, 1, 4)]);
    a.begin(2);
    c.begin(3);
    assert!(conflict(a.delete::<t::Customers>(keys::customer(1, 1, 3))));
    assert!(conflict(c.delete::<t::Orders>(keys::order(1, 1, 4))));
    b.commit().unwrap();
    a.abort();
    c.abort();
    a.begin(2);
    assert!(a.delete::<t::Customers>(keys::customer(1, 1, 3)).unwrap().is_some());
    assert!(a.delete::<t::Orders>(keys::order(1, 1, 4)).unwrap().is_some());
    a.commit().unwrap();
    b.begin(4);
    assert_eq!(by_name(&mut b, b"OUGHT").unwrap(), Vec::<u64>::new());
    assert_eq!(orders_of(&mut b, 4).unwrap(), Vec::<u64>::new());
    b.commit().unwrap();
}

/// Grants counted over one step of a transaction.
fn granted(s: &mut Session, step: impl FnOnce(&mut Session)) -> u64 {
    let before = s.counters();
    step(s);
    s.counters().since(&before).lock_requests_granted
}

/// What each access requests, as Shore does (Gray & Reuter §7.8): intention locks top-down,
/// on the volume and the store, only when the transaction does not already hold a mode that
/// covers them (IS then IX converts); page and record (or key) locks on every access. With
/// the locking switch off (Harizopoulos et al., Section 4) nothing is requested at all.
#[test]
fn intentions_are_cached_per_transaction_and_row_and_page_locks_requested_every_time() {
    for step in [0u8, 5] {
        let db = open(step, 1);
        let mut s = db.session().unwrap();
        s.insert::<t::Stocks>(&Stock { s_w_id: 1, s_i_id: 9, ..Stock::zeroed() }).unwrap();
        s.insert::<t::Customers>(&customer(1, 1, b"ABLE")).unwrap();
        for n in 1..=3 {
            let line = OrderLine { ol_w_id: 1, ol_d_id: 1, ol_o_id: 1, ol_number: n, ..OrderLine::zeroed() };
            s.insert::<t::OrderLines>(&line).unwrap();
        }
        let stock = keys::stock(1, 9);
        let mut seen = Vec::new();
        for _ in 0..2 {
            s.begin(1);
            // IS volume, IS store (the primary index), S record (its key), IS heap file, IS
            // heap page.
            seen.push(granted(&mut s, |s| assert!(s.get::<t::Stocks, _>(stock, |_| ()).unwrap().is_some())));
            // S record, IS heap page: the intentions are cached.
            seen.push(granted(&mut s, |s| assert!(s.get::<t::Stocks, _>(stock, |_| ()).unwrap().is_some())));
            // IX volume, IX store (converted), X record (converted), IX heap file (converted),
            // IX heap page.
            seen.push(granted(&mut s, |s| {
                assert!(s.update::<t::Stocks, _>(stock, |r| r.s_ytd += 1).unwrap().is_some())
            }));
            // IX store, X record, IX index store, X name key, IX heap file, X record id, IX
            // heap page, IX primary-index leaf, IX secondary-index leaf.
            seen.push(granted(&mut s, |s| s.insert::<t::Customers>(&customer(1, 2, b"BAR")).unwrap()));
            // IX store, IX page, X record id.
            seen.push(granted(&mut s, |s| s.insert::<t::Histories>(&History::zeroed()).unwrap()));
            // IS store, IS heap file, IS on the leaf, then S on each of the three rows and IS
            // on the heap page holding each (requested every time).
            seen.push(granted(&mut s, |s| {
                let (lo, hi) = (keys::order_line(1, 1, 1, 0), keys::order_line(1, 1, 1, u8::MAX));
                s.scan::<t::OrderLines>(lo, hi, ScanDir::Forward, |_| true).unwrap();
            }));
            // IS index leaf, S name key, S row (the stores' IX cover IS).
            seen.push(granted(&mut s, |s| assert_eq!(by_name(s, b"ABLE").unwrap().len(), 1)));
            // X record, X name key (read under the row's lock), X record id, IX primary-index
            // leaf, IX heap page, IX secondary-index leaf.
            seen.push(granted(&mut s, |s| {
                assert!(s.delete::<t::Customers>(keys::customer(1, 1, 1)).unwrap().is_some())
            }));
            s.abort();
        }
        let want: &[u64] = if step == 0 { &[5, 2, 5, 9, 3, 9, 3, 6] } else { &[0; 8] };
        assert_eq!(&seen[..8], want, "step {step}: the first transaction");
        assert_eq!(&seen[8..], want, "step {step}: the cache starts empty in each transaction");
        let c: Counters = s.counters();
        assert_eq!((c.lock_waits, c.lock_conflicts), (0, 0));
    }
}

/// TPC-C under three workers (Payment and OrderStatus by last name scan the name index and
/// the customer-order index; NewOrder inserts into both; Delivery deletes NEW_ORDER rows): with
/// every lock of the hierarchy taken, wait-die lets every transaction finish (retried after a
/// death) and the database keeps TPC-C's consistency conditions (clause 3.3.2).
#[test]
fn tpcc_under_three_workers_finishes_and_stays_consistent() {
    const WORKERS: u64 = 3;
    const TXNS: u64 = 300;
    let db = open(0, WORKERS as usize + 1);
    load_database_scaled(&mut db.session().unwrap(), 1..=1, 11, Scale::tiny(), &mut |_| {}).unwrap();
    let start = std::sync::Barrier::new(WORKERS as usize);
    let totals: Vec<Counters> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..WORKERS)
            .map(|w| {
                let (db, start) = (Arc::clone(&db), &start);
                scope.spawn(move || {
                    let mut s = db.session().unwrap();
                    start.wait();
                    let mut rng = 0x2545_F491_4F6C_DD1Du64.wrapping_mul(w + 1);
                    let mut next = |m: u64| {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        rng % m
                    };
                    for k in 0..TXNS {
                        let ts = w * 1_000 + k;
                        let d_id = 1 + next(3) as u8; // three hot districts
                        let name = CustomerSelector::ByLastName(last_name_field(next(30) as u32));
                        let input = match next(10) {
                            0..=3 => {
                                let mut lines = [OrderLineInput::default(); ORDER_LINES_MAX];
                                for l in lines.iter_mut().take(5) {
                                    *l = OrderLineInput { i_id: 1 + next(500) as u32, supply_w_id: 1, quantity: 2 };
                                }
                                let c_id = 1 + next(30) as u32;
                                TxnInput::NewOrder(NewOrderInput { w_id: 1, d_id, c_id, ol_cnt: 5, lines, entry_d: 9 })
                            }
                            4..=6 => TxnInput::Payment(PaymentInput {
                                w_id: 1,
                                d_id,
                                c_w_id: 1,
                                c_d_id: d_id,
                                customer: name,
                                h_amount: 100 + next(5_000) as i64,
                                date: 9,
                            }),
                            7..=8 => TxnInput::OrderStatus(OrderStatusInput { w_id: 1, d_id, customer: name }),
                            _ => TxnInput::Delivery(DeliveryInput { w_id: 1, o_carrier_id: 1, date: 9 }),
                        };
                        loop {
                            match execute(&mut s, ts, &input) {
                                Ok(_) => break,
                                Err(TxnError::Storage(StorageError::Conflict(_))) => continue,
                                Err(e) => panic!("{input:?}: {e}"),
                            }
                        }
                    }
                    s.counters()
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let committed: u64 = totals.iter().map(|c| c.committed).sum();
    let conflicts: u64 = totals.iter().map(|c| c.lock_conflicts).sum();
    let aborted: u64 = totals.iter().map(|c| c.aborted).sum();
    let waits: u64 = totals.iter().map(|c| c.lock_waits).sum();
    eprintln!("{committed} committed, {conflicts} wait-die deaths, {waits} lock waits");
    assert_eq!(committed, WORKERS * TXNS, "{totals:?}");
    assert_eq!(aborted, conflicts, "every wait-die death aborts once: {totals:?}");
    let report = check(&mut db.session().unwrap());
    assert!(report.all_passed(), "{report:?}");
}
