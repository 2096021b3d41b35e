//! Integration tests of what restart recovery tells a partition that comes back alone from
//! its own log (docs/design.md §10, "A partition back alone from its log"): every commit
//! record carries its transaction's timestamp, recovery reports the committed ones, and a
//! database opened without the checkpoint on opening keeps them across a second failure —
//! the batches the failure lost are replayed to it, and it must not run again what took
//! effect, however many times it restarts before the replay is done.

mod common;
use common::{commit_stock, state};

use engine::conventional::{Config, ConventionalDb, Medium, MemoryMedium, Step};
use engine::loader::{load_database_scaled, Scale};
use engine::schema::{keys, t};
use engine::Storage;

fn config(checkpoint_on_open: bool) -> Config {
    Config { log_prealloc_bytes: 1 << 20, checkpoint_on_open, ..Config::for_step(Step::new(0).unwrap(), 2) }
}

/// Power lost, power back.
fn crash(m: &MemoryMedium) {
    m.crash(0);
    m.restart();
}

#[test]
fn recovery_reports_the_committed_timestamps_and_keeps_them_across_a_second_restart() {
    let m = MemoryMedium::new();
    let medium = Medium::Memory(m.clone());
    let db = ConventionalDb::open_on(&medium, config(true)).unwrap();
    load_database_scaled(&mut db.session().unwrap(), 1..=1, 7, Scale::tiny(), &mut |_| {}).unwrap();
    db.checkpoint().unwrap();
    let mut s = db.session().unwrap();
    commit_stock(&mut s, 700, 1);
    commit_stock(&mut s, 900, 2);
    // A transaction that writes and rolls back leaves no commit record.
    s.begin(950);
    s.update::<t::Stocks, _>(keys::stock(1, 3), |r| r.s_quantity = 1).unwrap();
    s.abort();
    drop(s);
    let before = state(&db);
    drop(db);
    crash(&m);

    // Back alone: no checkpoint on opening, so the log generation keeps the commits.
    let db = ConventionalDb::open_on(&medium, config(false)).unwrap();
    assert_eq!(db.recovery_report().committed_ts, vec![700, 900]);
    assert_eq!(state(&db), before);
    let mut s = db.session().unwrap();
    commit_stock(&mut s, 1000, 4);
    drop(s);
    let after = state(&db);
    drop(db);
    crash(&m);

    // A second failure before the replay was done: the first commits are still reported.
    let db = ConventionalDb::open_on(&medium, config(false)).unwrap();
    assert_eq!(db.recovery_report().committed_ts, vec![700, 900, 1000]);
    assert_eq!(state(&db), after);
    drop(db);
    crash(&m);

    // Opened the usual way, the database checkpoints: the next generation starts empty.
    let db = ConventionalDb::open_on(&medium, config(true)).unwrap();
    assert_eq!(db.recovery_report().committed_ts, vec![700, 900, 1000]);
    drop(db);
    crash(&m);
    let db = ConventionalDb::open_on(&medium, config(true)).unwrap();
    assert!(db.recovery_report().committed_ts.is_empty());
    assert_eq!(state(&db), after);
}
