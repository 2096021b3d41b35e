//! End-to-end test of `glass recover` on a real write-ahead log (issue #14, item 7): one
//! flipped byte in the middle of `wal.log` is corruption — recovery refuses, names the file,
//! the offset and what follows the damage, exits non-zero and leaves the directory
//! byte-identical (before the fix it truncated the log there, checkpointed, and exited 0
//! without `--ack-log`); garbage after the log's last record is a torn tail — truncated,
//! reported with its offset and size, every acknowledged commit kept; a deleted
//! `checkpoint.db` is reported as missing. One warehouse, one short bench run.

mod common;
use common::{glass, scratch, text};

use std::path::Path;

/// The log's records as (offset, length), walking the format of `docs/conventional.md`
/// (length at bytes 0..4, LSN = base + offset at bytes 8..16).
fn log_records(log: &[u8]) -> Vec<(usize, usize)> {
    let word = |at: usize, n: usize| log[at..at + n].iter().rev().fold(0u64, |v, &b| v << 8 | b as u64);
    let base = word(8, 8);
    let mut out = Vec::new();
    let mut at = 0;
    while at + 64 <= log.len() && word(at, 4) >= 64 && word(at + 8, 8) == base + at as u64 {
        let len = word(at, 4) as usize;
        out.push((at, len));
        at += len;
    }
    out
}

fn copy_db(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for f in ["checkpoint.db", "wal.log"] {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
}

/// The directory's files, byte for byte.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect();
    v.sort();
    v
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn recover_refuses_a_flipped_byte_mid_log_and_truncates_a_torn_tail() {
    let dir = scratch("wal-corruption");
    let (db, acks) = (dir.join("db"), dir.join("acks"));
    let o = glass(&[
        "bench",
        "--embedded",
        "--engine",
        "conventional",
        "--step",
        "0",
        "--warehouses",
        "1",
        "--txns",
        "300",
        "--warmup",
        "0",
        "--quiet",
        "--wal-dir",
        s(&db),
        "--ack-log",
        s(&acks),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let log = std::fs::read(db.join("wal.log")).unwrap();
    let records = log_records(&log);
    assert!(records.len() > 100, "the run logged its transactions: {} records", records.len());

    // One flipped byte in the middle record: refused, exit 2, nothing changed.
    let flipped = dir.join("flipped");
    copy_db(&db, &flipped);
    let (offset, len) = records[records.len() / 2];
    let mut bad = log.clone();
    bad[offset + len / 2] ^= 0x01;
    std::fs::write(flipped.join("wal.log"), &bad).unwrap();
    let found = files(&flipped);
    let o = glass(&["recover", "--wal-dir", s(&flipped), "--ack-log", s(&acks)]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let after = records.len() / 2 + 1;
    for needle in [
        format!("{}/wal.log is corrupt at byte offset {offset} ", flipped.display()),
        format!(
            "{} valid records of the same log generation follow from offset {}",
            records.len() - after,
            records[after].0
        ),
    ] {
        assert!(stderr.contains(&needle), "`{needle}` in:\n{}", text(&o));
    }
    assert!(files(&flipped) == found, "the refused directory is byte-identical");

    // Garbage after the last record: a torn tail, truncated and reported; nothing lost.
    let torn = dir.join("torn");
    copy_db(&db, &torn);
    let end = records.last().map(|&(at, len)| at + len).unwrap();
    let mut tail = log.clone();
    tail[end..end + 40].fill(0x5A);
    std::fs::write(torn.join("wal.log"), &tail).unwrap();
    let o = glass(&["recover", "--wal-dir", s(&torn), "--ack-log", s(&acks), "--check"]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", text(&o));
    let needle = format!("torn tail truncated       yes: 40 damaged bytes at wal.log offset {end} ");
    assert!(stdout.contains(&needle), "`{needle}` in:\n{stdout}");
    assert!(stdout.contains("missing: 0"), "every acknowledged commit survives:\n{stdout}");

    // A deleted checkpoint: reported as such, exit 2.
    let no_checkpoint = dir.join("no-checkpoint");
    copy_db(&db, &no_checkpoint);
    std::fs::remove_file(no_checkpoint.join("checkpoint.db")).unwrap();
    let o = glass(&["recover", "--wal-dir", s(&no_checkpoint)]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("checkpoint.db is missing"), "{}", text(&o));
    assert!(std::fs::read(no_checkpoint.join("wal.log")).unwrap() == log, "the log is unchanged");

    let _ = std::fs::remove_dir_all(&dir);
}
