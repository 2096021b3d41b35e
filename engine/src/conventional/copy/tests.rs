//! The page image copy taken while transactions run (docs/design.md §10, "Copying without
//! stopping"): idle, it is the checkpoint snapshot byte for byte; under load — transactions
//! between the steps, or on other threads during them — the image installed and recovered
//! has exactly the state the database had when the copy began; abort, the bound on kept
//! before-images and a damaged image leave nothing behind.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::*;
use crate::conventional::{image_lsn, Session, Step};
use crate::digest::{digest, Digest};
use crate::lean::copy::tests::input;
use crate::loader::{load_database_scaled, Scale};
use crate::procedures::execute;
use crate::rng::Rng;

const SCALE: Scale = Scale::tiny();
const PAGE: usize = crate::conventional::PAGE_BYTES_SMALL;

fn config(workers: usize) -> Config {
    Config { log_prealloc_bytes: 1 << 20, ..Config::for_step(Step::FULL_STACK, workers) }
}

/// A fresh database on a new in-memory medium: one warehouse of the tiny population, loaded
/// and checkpointed.
fn loaded(config: Config) -> Arc<ConventionalDb> {
    let db = ConventionalDb::open_on(&Medium::Memory(MemoryMedium::new()), config).unwrap();
    load_database_scaled(&mut db.session().unwrap(), 1..=1, 42, SCALE, &mut |_| {}).unwrap();
    db.checkpoint().unwrap();
    db
}

/// The state digest, on a session of its own.
fn state(db: &Arc<ConventionalDb>) -> Digest {
    digest(&mut db.session().unwrap())
}

/// Runs one transaction to its end, re-executing a wait-die victim.
fn run(s: &mut Session, rng: &mut Rng, ts: u64) {
    let input = input(rng, ts);
    loop {
        match execute(s, ts, &input) {
            Err(e) if e.is_conflict() => std::thread::yield_now(),
            Ok(_) => return,
            Err(e) => {
                assert!(e.is_abort(), "transaction at {ts} failed: {e}");
                return;
            }
        }
    }
}

/// Steps the copy under way to its end in steps of `bytes_max`, calling `between` after each
/// step but the last; the image and its LSN.
fn copy_all(db: &ConventionalDb, bytes_max: usize, mut between: impl FnMut()) -> (Vec<u8>, u64) {
    let stores = db.image_stores().len();
    let total = db.image_copy_progress().expect("a copy is under way").bytes_total;
    let mut image = Vec::new();
    loop {
        let before = image.len();
        let step = db.image_copy_step(bytes_max, &mut image).unwrap();
        let overhead = 24 + 8 * stores + 8;
        assert!(image.len() - before <= bytes_max.max(PAGE).saturating_add(overhead), "a step appends about bytes_max");
        assert!(image.len() > before, "every step appends something");
        match step {
            ImageCopyStep::More => between(),
            ImageCopyStep::Done { lsn, bytes } => {
                assert_eq!(bytes, image.len() as u64);
                assert_eq!(bytes, total);
                assert_eq!(image_lsn(&image).unwrap(), lsn);
                return (image, lsn);
            }
        }
    }
}

/// Every store's hook is disarmed and holds nothing.
fn assert_idle(db: &ConventionalDb) {
    assert!(!db.image_copy_active());
    assert!(db.image_copy_progress().is_none());
    for s in db.image_stores() {
        assert!(s.copy().is_idle(), "store {} still holds copy state", s.id());
    }
}

fn pages_now(db: &ConventionalDb) -> u64 {
    db.image_stores().iter().map(|s| u64::from(s.pages())).sum()
}

#[test]
fn an_idle_copy_is_the_checkpoint_snapshot_byte_for_byte() {
    let db = loaded(config(2));
    let mut s = db.session().unwrap();
    let mut rng = Rng::new(1);
    for ts in 1..=40 {
        run(&mut s, &mut rng, ts);
    }
    for bytes_max in [1, PAGE, 5 * PAGE + 3, usize::MAX] {
        db.begin_image_copy().unwrap();
        let (image, lsn) = copy_all(&db, bytes_max, || {});
        assert_idle(&db);
        db.checkpoint().unwrap();
        let snapshot = db.checkpoint_image().unwrap();
        assert_eq!(image_lsn(&snapshot).unwrap(), lsn, "the checkpoint's LSN");
        assert!(image == snapshot, "the idle copy in steps of {bytes_max} bytes is the snapshot byte for byte");
        let copy = ConventionalDb::open_from_image(config(1), &image).unwrap();
        assert_eq!(state(&copy), state(&db));
        // Transactions between two copies: the next one is of the new state.
        run(&mut s, &mut rng, 100 + bytes_max.min(1000) as u64);
    }
}

/// Begins a copy after a warm-up, commits `txns_per_step` transactions (on this thread)
/// between every two steps of one page, and checks that the image is the state at the
/// beginning while the live database moved on.
fn copy_between_transactions(config: Config, txns_per_step: usize) -> Arc<ConventionalDb> {
    let db = loaded(config.clone());
    let mut s = db.session().unwrap();
    let mut rng = Rng::new(7);
    let mut ts = 1;
    for _ in 0..50 {
        run(&mut s, &mut rng, ts);
        ts += 1;
    }
    let before = digest(&mut s);
    db.begin_image_copy().unwrap();
    let pages_at_begin = db.image_copy_progress().unwrap().pages_total;
    assert_eq!(pages_at_begin, pages_now(&db));
    let mut kept = 0;
    let (image, lsn) = copy_all(&db, PAGE, || {
        for _ in 0..txns_per_step {
            run(&mut s, &mut rng, ts);
            ts += 1;
        }
        let p = db.image_copy_progress().unwrap();
        assert!(p.kept_bytes <= IMAGE_COPY_KEPT_BYTES_MAX as u64 && p.kept_bytes == p.kept_pages * PAGE as u64);
        kept = p.kept_pages_all;
    });
    assert_idle(&db);
    assert!(kept > 0, "transactions changed pages before the copy sent them");
    assert!(pages_now(&db) > pages_at_begin, "the transactions allocated pages during the copy");
    assert_ne!(digest(&mut s), before, "the transactions ran");

    let copy = ConventionalDb::open_from_image(config, &image).unwrap();
    assert_eq!(copy.recovery_report().snapshot_lsn, Some(lsn));
    assert_eq!(state(&copy), before, "the image is the state at the copy's beginning");
    db
}

#[test]
fn a_copy_under_transactions_between_its_steps_is_the_state_at_its_beginning() {
    copy_between_transactions(config(2), 1);
    copy_between_transactions(config(2), 4);
}

#[test]
fn a_copy_through_a_bounded_buffer_pool_is_the_state_at_its_beginning() {
    // The fewest frames one worker may have, fewer than the database's pages: pages are
    // evicted and read back under the copy, by the transactions and by the copy's steps.
    let frames = crate::conventional::BUFFER_POOL_FRAMES_PER_WORKER_MIN;
    let config = Config { buffer_pool_bytes: Some(frames * PAGE as u64), ..config(1) };
    let db = copy_between_transactions(config, 2);
    assert!(pages_now(&db) > frames);
    assert!(db.counters().page_evictions > 0, "the pool evicted pages");
}

#[test]
fn a_copy_stepped_while_other_threads_commit_is_the_state_at_its_beginning() {
    const THREADS: u64 = 2;
    const TXNS_PER_THREAD: u64 = 300;
    let config = config(THREADS as usize + 2);
    let db = loaded(config.clone());
    {
        let mut s = db.session().unwrap();
        let mut rng = Rng::new(3);
        for ts in 1..=30 {
            run(&mut s, &mut rng, ts);
        }
    }
    let before = state(&db);
    db.begin_image_copy().unwrap();
    let committed = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (db, committed) = (Arc::clone(&db), Arc::clone(&committed));
            std::thread::spawn(move || {
                let mut s = db.session().unwrap();
                let mut rng = Rng::new(100 + t);
                for i in 0..TXNS_PER_THREAD {
                    run(&mut s, &mut rng, (t + 1) * 1_000_000 + i);
                    committed.fetch_add(1, Ordering::Release);
                }
            })
        })
        .collect();
    let watcher = {
        let finished = Arc::clone(&finished);
        let committed = Arc::clone(&committed);
        move || finished.load(Ordering::Acquire) || committed.load(Ordering::Acquire) >= THREADS * TXNS_PER_THREAD
    };
    let mut kept = 0;
    let mut seen = 0;
    let (image, lsn) = copy_all(&db, PAGE, || {
        // Let the workers commit at least one transaction between two steps while they run.
        while committed.load(Ordering::Acquire) == seen && !watcher() {
            std::thread::yield_now();
        }
        seen = committed.load(Ordering::Acquire);
        kept = db.image_copy_progress().unwrap().kept_pages_all;
    });
    finished.store(true, Ordering::Release);
    workers.into_iter().for_each(|w| w.join().unwrap());
    assert_idle(&db);
    assert!(kept > 0, "the workers changed pages before the copy sent them");
    assert_ne!(state(&db), before, "the workers' transactions ran");
    let copy = ConventionalDb::open_from_image(config, &image).unwrap();
    assert_eq!(copy.recovery_report().snapshot_lsn, Some(lsn));
    assert_eq!(state(&copy), before, "the image is the state at the copy's beginning");
}

#[test]
fn abort_keeps_nothing_a_second_begin_is_refused_and_a_new_copy_begins() {
    let db = loaded(config(2));
    let mut s = db.session().unwrap();
    let mut rng = Rng::new(11);
    db.begin_image_copy().unwrap();
    assert!(db.image_copy_active());
    assert!(matches!(db.begin_image_copy(), Err(ConventionalError::ImageCopy { .. })), "one copy at a time");
    let mut out = Vec::new();
    assert_eq!(db.image_copy_step(PAGE, &mut out).unwrap(), ImageCopyStep::More);
    for ts in 1..=20 {
        run(&mut s, &mut rng, ts);
    }
    let p = db.image_copy_progress().unwrap();
    assert!(p.kept_pages > 0 && p.kept_bytes == p.kept_pages * PAGE as u64, "{p:?}");
    assert_eq!(p.pages_sent, 1);

    db.abort_image_copy();
    assert_idle(&db);
    assert!(matches!(db.image_copy_step(PAGE, &mut out), Err(ConventionalError::ImageCopy { .. })));
    db.abort_image_copy(); // nothing under way: nothing happens

    let before = state(&db);
    db.begin_image_copy().unwrap();
    let mut ts = 100;
    let (image, _) = copy_all(&db, 3 * PAGE, || {
        run(&mut s, &mut rng, ts);
        ts += 1;
    });
    assert_idle(&db);
    let copy = ConventionalDb::open_from_image(config(1), &image).unwrap();
    assert_eq!(state(&copy), before);
}

#[test]
fn a_copy_past_its_bound_on_kept_bytes_is_given_up_and_drops_what_it_kept() {
    let db = loaded(config(2));
    let mut s = db.session().unwrap();
    let mut rng = Rng::new(5);
    let bound = 4 * PAGE;
    db.begin_image_copy_bounded(bound).unwrap();
    let mut out = Vec::new();
    assert_eq!(db.image_copy_step(PAGE, &mut out).unwrap(), ImageCopyStep::More);
    for ts in 1..=30 {
        run(&mut s, &mut rng, ts);
    }
    let p = db.image_copy_progress().unwrap();
    assert!(p.given_up, "{p:?}");
    assert!(p.kept_bytes <= bound as u64, "never more than the bound: {p:?}");
    assert!(db.image_copy_active(), "until the next step reports it");
    match db.image_copy_step(PAGE, &mut out) {
        Err(ConventionalError::ImageCopyOverBudget { kept_bytes_max }) => assert_eq!(kept_bytes_max, bound),
        other => panic!("expected the copy given up, got {other:?}"),
    }
    assert_idle(&db);
    // A new copy begins, and the transactions go on untouched.
    db.begin_image_copy().unwrap();
    run(&mut s, &mut rng, 100);
    db.abort_image_copy();
    assert_idle(&db);
}

#[test]
fn a_damaged_image_is_refused() {
    let db = loaded(config(2));
    db.begin_image_copy().unwrap();
    let (image, _) = copy_all(&db, 16 * PAGE, || {});
    for at in [9, 20, 24 + 8 + 100, image.len() / 2, image.len() - 1] {
        let mut damaged = image.clone();
        damaged[at] ^= 0x10;
        let e = image_lsn(&damaged).unwrap_err();
        assert!(e.to_string().contains("checksum"), "byte {at}: {e}");
        let e = ConventionalDb::open_from_image(config(1), &damaged).unwrap_err();
        assert!(matches!(e, ConventionalError::BadSnapshot { what: "checksum mismatch", .. }), "byte {at}: {e}");
    }
    assert!(image_lsn(&image[..image.len() - 1]).is_err(), "a truncated image");
    let medium = Medium::Memory(MemoryMedium::new());
    let mut damaged = image.clone();
    damaged[image.len() / 3] ^= 1;
    assert!(install_image_on(&medium, &damaged).is_err());
    assert_eq!(install_image_on(&medium, &image).unwrap(), image_lsn(&image).unwrap());
}

#[test]
fn a_configuration_that_cannot_checkpoint_cannot_copy() {
    let no_flush = Config::for_step(Step::new(2).unwrap(), 1);
    let db = ConventionalDb::open_on(&Medium::Memory(MemoryMedium::new()), no_flush.clone()).unwrap();
    assert!(matches!(db.begin_image_copy(), Err(ConventionalError::CheckpointUnavailable { .. })));
    assert_idle(&db);
    assert!(matches!(
        ConventionalDb::open_from_image(no_flush, b"anything"),
        Err(ConventionalError::CheckpointUnavailable { .. })
    ));
}
