//! Integration tests of where a rejoining full-stack backup starts from
//! (`conventional::base`, docs/design.md §10 "A full-stack backup that rejoins"): its own log
//! follows its primary's log generation only when, cut at the fork point, it leaves exactly
//! the state the generation starts from; otherwise the primary's checkpoint image is
//! installed in its place (a base backup), and the generation applied on top gives the
//! primary's state. The seeded simulator found the case the own-log path got wrong: a primary
//! that recovered alone from its own log (and so checkpointed) handed a backup still at its
//! load checkpoint a log generation starting at the newer checkpoint (`glass sim --mode
//! full-stack --seed 85`, among others).

mod common;
use common::{commit_stock, state};

use std::sync::Arc;

use engine::conventional::{
    follows_generation_on, generation_start, image_lsn, install_image_on, Config, ConventionalDb, CutAt, Medium,
    MemoryMedium, Step,
};
use engine::loader::{load_database_scaled, Scale};

const LOAD_SEED: u64 = 7;

fn config() -> Config {
    Config { log_prealloc_bytes: 1 << 20, ..Config::for_step(Step::new(0).unwrap(), 2) }
}

/// A fresh database on a new in-memory medium: the tiny population, loaded and checkpointed.
fn loaded() -> (Medium, Arc<ConventionalDb>) {
    let medium = Medium::Memory(MemoryMedium::new());
    let db = ConventionalDb::open_on(&medium, config()).unwrap();
    load_database_scaled(&mut db.session().unwrap(), 1..=1, LOAD_SEED, Scale::tiny(), &mut |_| {}).unwrap();
    db.checkpoint().unwrap();
    (medium, db)
}

/// A backup still at its load checkpoint follows a primary whose generation starts at that
/// same load checkpoint: the own-log path, as before.
#[test]
fn a_backup_at_the_load_checkpoint_follows_a_generation_starting_there() {
    let (primary, p) = loaded();
    let (backup, b) = loaded();
    drop(b);
    let mut s = p.session().unwrap();
    commit_stock(&mut s, 1, 1);
    let generation = whole(p.log_base_for_backup().unwrap());
    let start = generation_start(&generation).unwrap();
    assert!(follows_generation_on(&backup, CutAt::Checkpoint, start).unwrap());
    drop((s, p));
    assert!(follows_generation_on(&primary, CutAt::Checkpoint, start).is_ok_and(|f| !f), "records after it");
}

/// TPC-C aside, the scenario the simulator found: the primary restarts alone and recovers from
/// its own log, which checkpoints; its generation then starts past the backup's checkpoint.
/// The backup's own log cannot follow; the primary's checkpoint image, installed, plus the
/// generation applied on top, gives exactly the primary's state.
#[test]
fn a_generation_after_a_newer_checkpoint_needs_the_image_and_the_image_gives_the_primarys_state() {
    let (primary, p) = loaded();
    let (backup, b) = loaded();
    drop(b);
    let mut s = p.session().unwrap();
    for i in 1..=4 {
        commit_stock(&mut s, u64::from(i), i);
    }
    drop((s, p));
    // Restart recovery alone (the partition's only live replica): it checkpoints on opening.
    let p = ConventionalDb::open_on(&primary, config()).unwrap();
    let mut s = p.session().unwrap();
    commit_stock(&mut s, 5, 5);
    drop(s);
    let generation = whole(p.log_base_for_backup().unwrap());
    let start = generation_start(&generation).unwrap();
    assert!(!follows_generation_on(&backup, CutAt::Checkpoint, start).unwrap());

    let image = p.checkpoint_image().unwrap();
    assert_eq!(image_lsn(&image).unwrap(), start, "the image is the snapshot the generation starts from");
    // A damaged image is refused before the backup's medium is touched.
    let mut damaged = image.clone();
    damaged[100] ^= 1;
    assert!(install_image_on(&backup, &damaged).unwrap_err().to_string().contains("checksum"));
    assert!(follows_generation_on(&backup, CutAt::Checkpoint, start).is_ok_and(|f| !f), "medium as it was");

    assert_eq!(install_image_on(&backup, &image).unwrap(), start);
    assert!(follows_generation_on(&backup, CutAt::Checkpoint, start).unwrap(), "the medium now starts there");
    let b = ConventionalDb::open_on(&backup, config()).unwrap();
    b.apply_shipped_log(&generation).unwrap();
    assert_eq!(state(&b), state(&p), "image + generation = the primary's state");

    // Shipping goes on from where the generation ended.
    let mut s = p.session().unwrap();
    commit_stock(&mut s, 6, 6);
    b.apply_shipped_log(&p.take_shipped_log_durable().unwrap()).unwrap();
    assert_eq!(state(&b), state(&p));
}

/// A promoted backup's generation starts at its promotion checkpoint, exactly at the fork
/// point: the failed primary's log cut there follows it; a log that lags the fork point (a
/// third replica that missed records) or a cut anywhere else does not.
#[test]
fn a_failed_primary_cut_at_the_fork_follows_its_successor_and_a_lagging_log_does_not() {
    let (primary, p) = loaded();
    let (_backup, b) = loaded();
    let (lagging, l) = loaded();
    drop(l);
    p.set_log_shipping(true).unwrap();
    let mut s = p.session().unwrap();
    for i in 1..=3 {
        commit_stock(&mut s, u64::from(i), i);
        b.apply_shipped_log(&p.take_shipped_log_durable().unwrap()).unwrap();
    }
    let fork = b.shipped_log_position().unwrap();
    commit_stock(&mut s, 4, 4);
    drop((s, p));
    // The backup is promoted: its checkpoint lies at the fork point.
    b.checkpoint().unwrap();
    let generation = whole(b.log_base_for_backup().unwrap());
    let start = generation_start(&generation).unwrap();
    assert_eq!(start, fork);
    assert!(follows_generation_on(&primary, CutAt::Lsn(fork), start).unwrap());
    assert!(!follows_generation_on(&primary, CutAt::Checkpoint, start).unwrap());
    assert!(!follows_generation_on(&primary, CutAt::Lsn(fork + 8), start).unwrap());
    assert!(!follows_generation_on(&lagging, CutAt::Lsn(fork), start).unwrap(), "its log ends before the fork");
    assert!(generation_start(&generation[8..]).is_err(), "a damaged generation has no start");
}

/// A log base's bytes, read whole right away (the node reads them later, off its executor).
fn whole(mut base: engine::conventional::log::GenerationRead) -> Vec<u8> {
    let n = base.len();
    base.read(n).unwrap()
}

/// docs/design.md §10, "Copying without stopping": a log base is taken between two batches
/// and read later, off the executor; transactions committed in between are shipped, not
/// part of it, and the bytes read are those of the generation when it was taken.
#[test]
fn a_log_base_read_later_holds_the_generation_as_it_was_taken() {
    let (_primary, p) = loaded();
    let mut s = p.session().unwrap();
    commit_stock(&mut s, 1, 1);
    let mut later = p.log_base_for_backup().unwrap();
    let taken = later.len();
    let now = later.read(taken).unwrap();
    for i in 2..=6 {
        commit_stock(&mut s, u64::from(i), i);
    }
    let shipped = p.take_shipped_log();
    assert!(!shipped.is_empty(), "the base switched shipping on");
    assert_eq!(later.len(), taken);
    assert_eq!(later.read(taken).unwrap(), now, "read later, the same bytes");
    assert_eq!(generation_start(&now).unwrap(), later.base());
    // The base and what was shipped after it are contiguous.
    let (_backup, b) = loaded();
    b.apply_shipped_log(&now).unwrap();
    b.apply_shipped_log(&shipped).unwrap();
    drop(s);
    assert_eq!(state(&b), state(&p));
}
