//! Fuzz target `wal_recovery`: the conventional stack's restart recovery (ARIES: analysis,
//! redo, undo; Mohan et al., TODS 1992) over a write-ahead log and a checkpoint snapshot read
//! from disk (docs/design.md §13, "Fuzzing"; §10 for what recovery must rebuild). Whatever
//! the disk holds — a torn tail, a flipped byte, a duplicated, dropped or foreign record, a
//! snapshot from another point of the log, no snapshot at all — opening the database on it
//! ([`ConventionalDb::open_on`] over an in-memory [`MemoryMedium`]: no files) must:
//!
//! 1. never panic, nor allocate beyond the target's limit;
//! 2. refuse with a typed [`engine::conventional::ConventionalError`], or open a database
//!    that satisfies TPC-C's consistency conditions (clause 3.3.2, `engine::check`) — when
//!    the damage did not forge checksums: records and snapshots whose checksums the input
//!    recomputed ("resealed") are garbage no checksum can tell from data, so of those only
//!    property 1 and a readable database (digest and check run) are asked;
//! 3. where the log is an unmodified prefix of a real log (cut anywhere, mid-record
//!    included: a torn tail) beside its own checkpoint, open, and hold exactly the committed
//!    transactions of that prefix: the state digest equals the one recorded when the real
//!    log was written, after the last transaction whose records end inside the prefix
//!    (losers rolled back).
//!
//! The real logs come from a full-stack database ([`crate::redo::load`]: warehouse 1 of
//! [`engine::loader::Scale::tiny`]) that checkpointed after its load (snapshot A, log
//! generation A) and ran [`crate::redo::tpcc_inputs`] transactions, checkpointed again
//! midway (snapshot B, log generation B) and ran more; each transaction's end offset in its
//! log and the digest after it are recorded. Built once per process in a `OnceLock`; each
//! input gets a fresh in-memory medium ([`MemoryMedium::put_checkpoint`] writes any bytes as
//! its checkpoint) and the open is done without the checkpoint that normally follows
//! recovery (`checkpoint_on_open` off: it writes every page and checks nothing).
//!
//! Input format: byte 0 picks the mode.
//! - `0` raw: byte 1 flags (bit 0: reseal the log's records, bit 1: reseal the snapshot),
//!   then a `u32` (LE) length `n` and `n` bytes of checkpoint (`u32::MAX`: no checkpoint),
//!   zero-run encoded (tokens: `u16` literal count, the literals, `u16` count of zeros — a
//!   snapshot is mostly the free space of its pages, and a real one must fit `-max_len`),
//!   then the log's bytes, raw.
//! - `1` structured: byte 1 picks a (checkpoint, log) pair of the real ones (matched, or
//!   crossed: a checkpoint past the log's generation, a log newer than the checkpoint, either
//!   missing), byte 2 flags as above, then 8-byte edits of the log and checkpoint: cut at an
//!   offset, flip a byte, duplicate, drop or swap whole records, zero a range, flip a
//!   checkpoint byte, append a record of the other log.

use std::sync::OnceLock;

use engine::check;
use engine::conventional::{ConventionalDb, LogDevice, Medium, MemoryMedium};
use engine::digest::{digest, Digest};
use engine::loader::Scale;
use engine::procedures::execute;

use crate::redo::{conventional_config, load_scaled, tpcc_inputs};

/// The seed of the transactions the real logs hold.
pub const TXN_SEED: u64 = 0x7761_6c5f_7478_6e73;
/// Transactions before snapshot B, and after it.
pub const TXNS_BEFORE_B: usize = 24;
pub const TXNS_AFTER_B: usize = 16;
/// The target's `-max_len` (`fuzzing::TARGETS`).
const MAX_LEN: usize = 262_144;
/// Largest checkpoint a raw input may decode to.
const CHECKPOINT_BYTES_MAX: usize = 8 << 20;
/// Bytes of a log record's header and checksum (engine::conventional::log).
const RECORD_MIN: usize = 64;

/// One real log generation beside its checkpoint.
struct Generation {
    snapshot: Vec<u8>,
    /// The log's bytes up to its last record (the preallocated zeros left off).
    log: Vec<u8>,
    /// The digest of the snapshot's state.
    base: Digest,
    /// (end offset in `log` of a transaction's records, the digest after it), in order.
    txns: Vec<(usize, Digest)>,
}

impl Generation {
    /// The digest a prefix of `cut` bytes of the log must recover to.
    fn expected(&self, cut: usize) -> Digest {
        self.txns.iter().take_while(|(end, _)| *end <= cut).last().map_or(self.base, |(_, d)| *d)
    }
}

struct Library {
    a: Generation,
    b: Generation,
}

/// The population of the raw seeds: a tiny snapshot of [`Scale::tiny`] is about 0.9 MB, over
/// `-max_len`; this one's fits, zero-run encoded.
const SCALE_MINI: Scale = Scale { items: 20, customers_per_district: 2 };

fn library() -> &'static Library {
    static LIBRARY: OnceLock<Library> = OnceLock::new();
    LIBRARY.get_or_init(|| build(Scale::tiny()))
}

/// The logs of the raw seeds, at [`SCALE_MINI`].
fn mini() -> &'static Library {
    static LIBRARY: OnceLock<Library> = OnceLock::new();
    LIBRARY.get_or_init(|| build(SCALE_MINI))
}

fn build(scale: Scale) -> Library {
    {
        let memory = MemoryMedium::new();
        let medium = Medium::Memory(memory.clone());
        let db = ConventionalDb::open_on(&medium, conventional_config()).expect("open");
        let mut session = db.session().expect("a session");
        load_scaled(&mut session, scale);
        let txns = tpcc_inputs(TXN_SEED, TXNS_BEFORE_B + TXNS_AFTER_B, scale);
        let generation = |session: &mut engine::conventional::Session, txns: &[(u64, _)]| {
            db.checkpoint().expect("checkpoint");
            let snapshot = db.checkpoint_image().expect("the checkpoint image");
            let base = digest(session);
            db.set_log_shipping(true).expect("shipping");
            // The generation's first record is its checkpoint record.
            let start = checkpoint_record_len(&memory.log_device().durable_bytes());
            let mut end = start;
            let mut out = Vec::new();
            for (ts, input) in txns {
                let _ = execute(session, *ts, input);
                end += db.take_shipped_log_durable().expect("take the log").len();
                out.push((end, digest(session)));
            }
            db.set_log_shipping(false).expect("shipping off");
            let log = memory.log_device().durable_bytes()[..end].to_vec();
            Generation { snapshot, log, base, txns: out }
        };
        let a = generation(&mut session, &txns[..TXNS_BEFORE_B]);
        let b = generation(&mut session, &txns[TXNS_BEFORE_B..]);
        Library { a, b }
    }
}

/// The length of the record at the start of `log` (a checkpoint record).
fn checkpoint_record_len(log: &[u8]) -> usize {
    u32::from_le_bytes(log[..4].try_into().expect("a record")) as usize
}

/// The whole records at the start of `log`, as (offset, length), by their length fields.
fn records(log: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + RECORD_MIN <= log.len() {
        let len = u32::from_le_bytes(log[at..at + 4].try_into().expect("4 bytes")) as usize;
        if len < RECORD_MIN || len % 8 != 0 || at + len > log.len() {
            break;
        }
        out.push((at, len));
        at += len;
    }
    out
}

/// Recomputes the checksum of every whole record of `log` (a forger's log).
fn reseal_log(log: &mut [u8]) {
    for (at, len) in records(log) {
        let sum = xxhash_rust::xxh3::xxh3_64(&log[at..at + len - 8]);
        log[at + len - 8..at + len].copy_from_slice(&sum.to_le_bytes());
    }
}

/// Recomputes a snapshot's trailing checksum.
fn reseal_snapshot(snapshot: &mut [u8]) {
    if snapshot.len() >= 8 {
        let body = snapshot.len() - 8;
        let sum = xxhash_rust::xxh3::xxh3_64(&snapshot[..body]);
        snapshot[body..].copy_from_slice(&sum.to_le_bytes());
    }
}

/// What one input puts on the disk, and what recovery must make of it.
struct Disk {
    checkpoint: Option<Vec<u8>>,
    log: Vec<u8>,
    /// Checksums were recomputed over the damage (property 2 is not asked).
    forged: bool,
    /// The log is a prefix of a real one beside its checkpoint: the digest it must give.
    expected: Option<Digest>,
}

/// Runs restart recovery over `disk` and judges the outcome.
fn recover(disk: Disk) {
    let memory = MemoryMedium::new();
    let mut device = memory.log_device().clone();
    if !disk.log.is_empty() {
        device.write_at(0, &disk.log).expect("an in-memory write");
        device.sync_data().expect("an in-memory sync");
    }
    memory.put_checkpoint(disk.checkpoint);
    let opened = ConventionalDb::open_on(&Medium::Memory(memory), crate::redo::conventional_config());
    let db = match opened {
        Ok(db) => db,
        Err(e) => {
            assert!(disk.expected.is_none(), "recovery refused a prefix of a real log beside its checkpoint: {e}");
            return;
        }
    };
    let mut session = db.session().expect("a session on the recovered database");
    let found = digest(&mut session);
    let report = check::check(&mut session);
    if let Some(expected) = disk.expected {
        assert_eq!(found, expected, "recovery of a real log's prefix lost or invented committed transactions");
    }
    if !disk.forged {
        assert!(
            report.all_passed(),
            "recovery accepted the log and checkpoint but the database is inconsistent ({:?}):\n{report}",
            db.recovery_report()
        );
    }
}

/// The property check (see the module documentation).
pub fn check(data: &[u8]) {
    let Some((&mode, body)) = data.split_first() else { return };
    let disk = match mode % 2 {
        0 => raw(body),
        _ => structured(body),
    };
    if let Some(disk) = disk {
        recover(disk);
    }
}

/// Decodes a zero-run encoded checkpoint (see the module documentation), bounded.
fn unzero(mut enc: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let take_u16 = |enc: &mut &[u8]| -> Option<usize> {
        let (n, rest) = enc.split_first_chunk::<2>()?;
        *enc = rest;
        Some(u16::from_le_bytes(*n) as usize)
    };
    while let Some(literals) = take_u16(&mut enc) {
        let n = literals.min(enc.len());
        out.extend_from_slice(&enc[..n]);
        enc = &enc[n..];
        let zeros = take_u16(&mut enc).unwrap_or(0);
        if out.len() + zeros > CHECKPOINT_BYTES_MAX {
            break;
        }
        out.resize(out.len() + zeros, 0);
    }
    out
}

/// The zero-run encoding of `bytes` (runs of 8 or more zeros are counted).
fn zero_runs(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        // Literals up to the next run of at least 8 zeros (or 65,535 of them).
        let start = at;
        while at < bytes.len() && at - start < u16::MAX as usize {
            if bytes[at] == 0 && bytes[at..].iter().take(8).filter(|&&b| b == 0).count() == 8 {
                break;
            }
            at += 1;
        }
        out.extend_from_slice(&((at - start) as u16).to_le_bytes());
        out.extend_from_slice(&bytes[start..at]);
        let zeros = bytes[at..].iter().take(u16::MAX as usize).take_while(|&&b| b == 0).count();
        out.extend_from_slice(&(zeros as u16).to_le_bytes());
        at += zeros;
    }
    out
}

fn raw(body: &[u8]) -> Option<Disk> {
    let (&flags, rest) = body.split_first()?;
    let (n, rest) = rest.split_first_chunk::<4>()?;
    let n = u32::from_le_bytes(*n);
    let (checkpoint, log) = if n == u32::MAX {
        (None, rest)
    } else {
        let n = (n as usize).min(rest.len());
        (Some(unzero(&rest[..n])), &rest[n..])
    };
    let mut disk = Disk { checkpoint, log: log.to_vec(), forged: flags & 3 != 0, expected: None };
    if flags & 1 != 0 {
        reseal_log(&mut disk.log);
    }
    if let (true, Some(c)) = (flags & 2 != 0, disk.checkpoint.as_mut()) {
        reseal_snapshot(c);
    }
    Some(disk)
}

fn structured(body: &[u8]) -> Option<Disk> {
    let lib = library();
    let (&pair, rest) = body.split_first()?;
    let (&flags, ops) = rest.split_first().unwrap_or((&0, &[]));
    let (gen, checkpoint, other) = match pair % 6 {
        0 => (&lib.a, Some(&lib.a.snapshot), &lib.b),
        1 => (&lib.b, Some(&lib.b.snapshot), &lib.a),
        // No checkpoint beside a log that starts with a checkpoint record.
        2 => (&lib.a, None, &lib.b),
        // A checkpoint past the log's end.
        3 => (&lib.a, Some(&lib.b.snapshot), &lib.b),
        // A log generation newer than the checkpoint.
        4 => (&lib.b, Some(&lib.a.snapshot), &lib.a),
        // A checkpoint and no log.
        _ => (&lib.a, Some(&lib.a.snapshot), &lib.b),
    };
    let mut log = if pair % 6 == 5 { Vec::new() } else { gen.log.clone() };
    let mut checkpoint = checkpoint.cloned();
    // `Some(cut)` while the log is the real one cut at `cut` beside its own checkpoint.
    let mut prefix = (pair % 6 <= 1).then_some(log.len());
    for op in ops.chunks_exact(8).take(64) {
        let (kind, b, c) = (op[0], op[1], op[2]);
        let d = u32::from_le_bytes(op[4..8].try_into().expect("8 bytes")) as usize;
        let recs = records(&log);
        let rec = |i: usize| recs.get(i % recs.len().max(1)).copied();
        let before = log.clone();
        match kind % 8 {
            0 => {
                let cut = d % (log.len() + 1);
                log.truncate(cut);
                prefix = prefix.map(|p| p.min(cut));
            }
            1 if !log.is_empty() => {
                let at = d % log.len();
                log[at] ^= b.max(1);
            }
            2 => {
                if let (Some((at, len)), Some((to, _))) = (rec(d), rec(b as usize)) {
                    let copy = log[at..at + len].to_vec();
                    log.splice(to..to, copy);
                }
            }
            3 => {
                if let Some((at, len)) = rec(d) {
                    log.drain(at..at + len);
                }
            }
            4 => {
                if let (Some((x, xl)), Some((y, yl))) = (rec(d), rec(b as usize)) {
                    let (first, second) = if x <= y { ((x, xl), (y, yl)) } else { ((y, yl), (x, xl)) };
                    if first.0 + first.1 <= second.0 {
                        let (a, b2) =
                            (log[first.0..first.0 + first.1].to_vec(), log[second.0..second.0 + second.1].to_vec());
                        let mut out = log[..first.0].to_vec();
                        out.extend_from_slice(&b2);
                        out.extend_from_slice(&log[first.0 + first.1..second.0]);
                        out.extend_from_slice(&a);
                        out.extend_from_slice(&log[second.0 + second.1..]);
                        log = out;
                    }
                }
            }
            5 if !log.is_empty() => {
                let at = d % log.len();
                let end = (at + c as usize * 8).min(log.len());
                log[at..end].fill(0);
            }
            6 => {
                if let Some(cp) = checkpoint.as_mut().filter(|cp| !cp.is_empty()) {
                    let at = d % cp.len();
                    cp[at] ^= b.max(1);
                    prefix = None;
                }
            }
            7 => {
                let theirs = records(&other.log);
                if let Some(&(at, len)) = theirs.get(d % theirs.len().max(1)) {
                    log.extend_from_slice(&other.log[at..at + len]);
                }
            }
            _ => {}
        }
        if log != before && kind % 8 != 0 {
            prefix = None;
        }
    }
    let forged = flags & 3 != 0;
    if flags & 1 != 0 {
        reseal_log(&mut log);
        prefix = None;
    }
    if let (true, Some(c)) = (flags & 2 != 0, checkpoint.as_mut()) {
        reseal_snapshot(c);
    }
    let expected = prefix.map(|cut| gen.expected(cut));
    Some(Disk { checkpoint, log, forged, expected })
}

/// A raw input: mode 0, the flags, the zero-run encoded checkpoint, the log (cut to fit
/// `-max_len`: a cut log is a torn one).
fn raw_input(flags: u8, checkpoint: Option<&[u8]>, log: &[u8]) -> Vec<u8> {
    let mut out = vec![0, flags];
    match checkpoint {
        Some(c) => {
            let enc = zero_runs(c);
            out.extend_from_slice(&(enc.len() as u32).to_le_bytes());
            out.extend_from_slice(&enc);
        }
        None => out.extend_from_slice(&u32::MAX.to_le_bytes()),
    }
    let room = MAX_LEN.saturating_sub(out.len());
    out.extend_from_slice(&log[..log.len().min(room)]);
    out
}

/// The seed corpus: each real log beside its checkpoint, raw (whole, and cut mid-record), and
/// edit programs over them (cuts, flips, duplicated and dropped records, crossed pairs).
pub fn seeds() -> Vec<Vec<u8>> {
    let mini = mini();
    let mut seeds = vec![
        raw_input(0, Some(&mini.a.snapshot), &mini.a.log),
        raw_input(0, Some(&mini.b.snapshot), &mini.b.log),
        raw_input(0, Some(&mini.a.snapshot), &mini.a.log[..mini.a.log.len() / 2]),
        raw_input(0, None, &mini.a.log),
        raw_input(1, Some(&mini.a.snapshot), &mini.b.log),
    ];
    let lib = library();
    let op = |kind: u8, b: u8, c: u8, d: u32| {
        let mut v = vec![kind, b, c, 0];
        v.extend_from_slice(&d.to_le_bytes());
        v
    };
    for pair in 0..6u8 {
        seeds.push(vec![1, pair, 0]);
    }
    seeds.push([vec![1, 0, 0], op(0, 0, 0, 5000)].concat());
    seeds.push([vec![1, 0, 0], op(1, 0x20, 0, 3000)].concat());
    seeds.push([vec![1, 1, 0], op(1, 0x01, 0, (lib.b.log.len() - 3) as u32)].concat());
    seeds.push([vec![1, 0, 0], op(2, 3, 0, 7)].concat());
    seeds.push([vec![1, 0, 0], op(3, 0, 0, 9)].concat());
    seeds.push([vec![1, 0, 0], op(4, 2, 0, 11)].concat());
    seeds.push([vec![1, 1, 0], op(5, 0, 4, 700)].concat());
    seeds.push([vec![1, 0, 0], op(6, 0x10, 0, 100)].concat());
    seeds.push([vec![1, 0, 0], op(7, 0, 0, 3)].concat());
    seeds.push([vec![1, 0, 1], op(1, 0x04, 0, 2000)].concat());
    seeds.push([vec![1, 0, 2], op(6, 0x04, 0, 70_000)].concat());
    seeds.retain(|s| s.len() <= MAX_LEN);
    seeds
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(kind: u8, b: u8, c: u8, d: u32) -> Vec<u8> {
        let mut v = vec![kind, b, c, 0];
        v.extend_from_slice(&d.to_le_bytes());
        v
    }

    #[test]
    fn seeds_fit_and_hold() {
        let lib = mini();
        eprintln!(
            "mini snapshot {} bytes ({} encoded), logs {} and {} bytes",
            lib.a.snapshot.len(),
            zero_runs(&lib.a.snapshot).len(),
            lib.a.log.len(),
            lib.b.log.len()
        );
        assert_eq!(unzero(&zero_runs(&lib.a.snapshot)), lib.a.snapshot);
        let seeds = seeds();
        assert!(seeds.len() >= 20, "every seed fits -max_len");
        for s in seeds {
            check(&s);
        }
    }

    /// Every cut of a real log, mid-record included, recovers the committed prefix.
    #[test]
    fn every_cut_recovers_the_committed_prefix() {
        let lib = library();
        for gen in [0u8, 1] {
            let len = if gen == 0 { lib.a.log.len() } else { lib.b.log.len() };
            for cut in (0..=len).step_by(997).chain([len - 1, len - 8, len - 64]) {
                check(&[vec![1, gen, 0], op(0, 0, 0, cut as u32)].concat());
            }
        }
    }

    #[test]
    fn adversarial_logs() {
        let lib = library();
        let n = lib.a.log.len() as u32;
        for ops in [
            op(1, 0xFF, 0, n / 2),                         // a flipped byte mid-log
            op(1, 0xFF, 0, n - 5),                         // a torn last record
            op(2, 4, 0, 9),                                // a duplicated record
            op(3, 0, 0, 12),                               // a dropped record
            op(4, 30, 0, 12),                              // two records swapped
            op(5, 0, 200, n / 3),                          // a zeroed range
            [op(0, 0, 0, n / 2), op(7, 0, 0, 5)].concat(), // a foreign record appended
        ] {
            for pair in 0..6u8 {
                for flags in 0..4u8 {
                    check(&[vec![1, pair, flags], ops.clone()].concat());
                }
            }
        }
        // A record of a table that does not exist, and a huge length, resealed.
        let mut log = lib.a.log.clone();
        let (at, _) = records(&log)[3];
        log[at + 5] = 77;
        let huge = records(&log)[5].0;
        log[huge..huge + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        for flags in 0..4 {
            check(&raw_input(flags, Some(&lib.a.snapshot), &log));
        }
        // Garbage and nothing.
        check(&raw_input(3, Some(&[0xAB; 4000]), &[0x5A; 4000]));
        check(&raw_input(0, None, &[]));
    }
}
