//! Integration tests of the conventional stack on a medium (`conventional::medium`): the
//! in-memory medium the simulator crashes behaves as the directory does where it should —
//! cutting a failed primary's log at the fork point (docs/design.md §10, full-stack; the
//! Section 5.3 rejoin of Harizopoulos et al., SIGMOD 2008) gives the same cut and the same
//! recovered state on both — and a crash of the in-memory medium is a real power loss: the
//! database opened before it is fenced off for good, and restart recovery (ARIES, Mohan et
//! al., TODS 1992, Section 6) keeps exactly the synced commits.

mod common;
use common::{commit_stock, state, TempDir};

use std::sync::Arc;

use engine::conventional::{
    cut_log, cut_log_on, Config, ConventionalDb, CutAt, LogCut, Medium, MemoryMedium, Session, Step,
};
use engine::digest::Digest;
use engine::loader::{load_database_scaled, Scale};
use engine::schema::{keys, t};
use engine::{Storage, StorageError};

const LOAD_SEED: u64 = 7;

fn config() -> Config {
    Config { log_prealloc_bytes: 1 << 20, ..Config::for_step(Step::new(0).unwrap(), 2) }
}

/// Opens a fresh database on `medium`, loads the tiny population and checkpoints it.
fn open_loaded(medium: &Medium) -> Arc<ConventionalDb> {
    let db = ConventionalDb::open_on(medium, config()).unwrap();
    load_database_scaled(&mut db.session().unwrap(), 1..=1, LOAD_SEED, Scale::tiny(), &mut |_| {}).unwrap();
    db.checkpoint().unwrap();
    db
}

/// Transaction `i` (at timestamp `i`): [`commit_stock`].
fn commit(s: &mut Session, i: u32) {
    commit_stock(s, u64::from(i), i);
}

/// What the fork-point scenario found on one pair of media.
#[derive(Debug, PartialEq)]
struct Forked {
    refusals: [String; 2],
    cut: LogCut,
    at_fork: Digest,
    recovered: Digest,
}

/// The scenario of `shipping.rs`'s `a_failed_primary_cuts_its_log_at_the_fork_...`, with the
/// primary's log and checkpoint on `primary`: the primary ships five committed transactions
/// to a backup, commits three more it never ships and fails (`fail`); its log is then cut
/// where the backup's copy ended (after two refused cuts) and restart recovery runs.
fn forked(
    primary: &Medium,
    backup: &Medium,
    fail: impl FnOnce(),
    cut: impl Fn(CutAt) -> Result<LogCut, String>,
) -> Forked {
    let p = open_loaded(primary);
    let b = open_loaded(backup);
    p.set_log_shipping(true).unwrap();
    let mut s = p.session().unwrap();
    for i in 1..=5 {
        commit(&mut s, i);
        b.apply_shipped_log(&p.take_shipped_log_durable().unwrap()).unwrap();
    }
    let at_fork = state(&b);
    let fork = b.shipped_log_position().unwrap();
    for i in 6..=8 {
        commit(&mut s, i);
    }
    drop(s);
    assert_ne!(state(&p), at_fork);
    drop(p);
    fail();

    let refusals = [cut(CutAt::Lsn(fork + 8)).unwrap_err(), cut(CutAt::Checkpoint).unwrap_err()];
    assert!(refusals[0].contains("no record of the log ends"), "{refusals:?}");
    assert!(refusals[1].contains("records after its checkpoint"), "{refusals:?}");
    let cut = cut(CutAt::Lsn(fork)).unwrap();
    assert!(cut.records_cut > 0 && cut.bytes_cut > 0, "{cut:?}");
    let old = ConventionalDb::open_on(primary, config()).unwrap();
    assert_eq!(old.recovery_report().losers, 0, "the fork is a transaction boundary");
    Forked { refusals, cut, at_fork, recovered: state(&old) }
}

/// docs/design.md §10 (full-stack): a restarted primary cuts its log where its promoted
/// successor's copy ended, and restart recovery rebuilds exactly the state the successor
/// started from. `cut_log_on` an in-memory medium (after a power loss) does what `cut_log`
/// does to a directory: the same refusals, the same cut, the same recovered state.
#[test]
fn cut_log_on_a_memory_medium_behaves_as_cut_log_on_a_directory() {
    let (pdir, bdir) = (TempDir::new("medium", "primary"), TempDir::new("medium", "backup"));
    let on_dir = forked(
        &Medium::Dir(pdir.0.clone()),
        &Medium::Dir(bdir.0.clone()),
        || {},
        |at| cut_log(&pdir.0, at).map_err(|e| e.to_string()),
    );
    assert_eq!(on_dir.recovered, on_dir.at_fork, "recovery rebuilt the successor's starting state");

    let (pm, bm) = (MemoryMedium::new(), MemoryMedium::new());
    let primary = Medium::Memory(pm.clone());
    let on_memory = forked(
        &primary,
        &Medium::Memory(bm),
        || {
            pm.crash(0);
            pm.restart();
        },
        |at| cut_log_on(&primary, at).map_err(|e| e.to_string()),
    );
    assert_eq!(on_memory.recovered, on_memory.at_fork, "recovery rebuilt the successor's starting state");
    assert_eq!(on_memory, on_dir, "the same refusals, cut and states");
}

/// ARIES restart (Mohan et al., Section 6) over an in-memory medium: a crash fences off the
/// database opened before it — its commits fail, also once power returned — and restart
/// recovery keeps exactly the commits that were synced before the crash.
#[test]
fn a_crash_fences_the_old_database_and_recovery_keeps_the_synced_commits() {
    let m = MemoryMedium::new();
    let medium = Medium::Memory(m.clone());
    let db = open_loaded(&medium);
    let mut s = db.session().unwrap();
    for i in 1..=3 {
        commit(&mut s, i);
    }
    let synced = state(&db);
    m.crash(0);
    assert!(ConventionalDb::open_on(&medium, config()).is_err(), "no restart before power returns");
    m.restart();
    // Nothing of the old database failed before the crash: only the fence stops it now.
    assert!(db.checkpoint().is_err(), "the database opened before the crash is fenced off");
    s.begin(4);
    s.update::<t::Stocks, _>(keys::stock(1, 4), |r| r.s_quantity = 4).unwrap();
    assert!(matches!(s.commit(), Err(StorageError::Io(_))), "a fenced database acknowledges nothing");
    drop(s);
    drop(db);

    let db = ConventionalDb::open_on(&medium, config()).unwrap();
    let report = db.recovery_report().clone();
    assert!(report.winners >= 3 && report.losers == 0 && report.torn_tail.is_none(), "{report:?}");
    assert_eq!(state(&db), synced);
}
