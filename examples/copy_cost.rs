//! What a copy of a partition costs, per stage, on one warehouse of TPC-C's population, idle
//! (docs/design.md §10, "Copying without stopping"): the source's scan into chunks, the wire
//! codec's encoding and decoding of the chunks, and the receiver's install (rows, then the
//! digest check), in MiB/s of rows. Then the same copy taken under load, on one thread as an
//! executor takes it: batches of `UNDER_LOAD_BATCH` transactions (the paper's mix) and copy
//! steps in turn, the steps' time per MiB and the transactions' time per transaction during
//! the copy against before it — what the survivor pays, without the other processes of a
//! cluster sharing the cores.
//!
//! `cargo run --release --example copy_cost [WAREHOUSES_UNDER_LOAD]` (default 2)

use std::time::{Duration, Instant};

use node::snapshot::{CopyNext, CopySender, SnapshotReceiver};
use wire::channel::{ChannelMessage, PeerReply};

fn main() {
    let mut db = engine::LeanDb::new();
    engine::loader::load_database(&mut db, 1..=1, 42, &mut |_| {}).expect("loads");
    let frame = 4 << 20;
    let t = Instant::now();
    let mut sender = CopySender::begin(&mut db, 1, 1, 1, 1, frame).expect("no copy under way");
    let mut chunks = Vec::new();
    loop {
        match sender.next(&mut db) {
            CopyNext::Chunk(c) => {
                let end = c.end.is_some();
                chunks.push(c);
                if end {
                    break;
                }
            }
            CopyNext::Over => unreachable!("over before its end"),
        }
    }
    let scan = t.elapsed().as_secs_f64();
    let mib = chunks.iter().map(|c| c.rows_bytes.len()).sum::<usize>() as f64 / (1 << 20) as f64;
    let t = Instant::now();
    let frames: Vec<Vec<u8>> =
        chunks.iter().map(|c| wire::codec::encode(&PeerReply::SnapshotChunk(c.clone()), frame).unwrap()).collect();
    let encode = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let decoded: Vec<PeerReply> = frames.iter().map(|f| wire::codec::decode_body(&f[4..]).unwrap()).collect();
    let decode = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut r = SnapshotReceiver::new(1, "node 1".into()).trusting_digest();
    let mut copy = engine::LeanDb::new();
    for m in decoded {
        let PeerReply::SnapshotChunk(c) = m else { unreachable!() };
        r.accept(c, &mut copy).unwrap();
    }
    let install = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let _ = engine::digest::digest(&mut copy);
    let digest = t.elapsed().as_secs_f64();
    println!(
        "{mib:.0} MiB of rows in {} chunks ({})",
        chunks.len(),
        PeerReply::SnapshotChunk(chunks[0].clone()).name()
    );
    for (stage, s) in [("scan", scan), ("encode", encode), ("decode", decode), ("install", install), ("digest", digest)]
    {
        println!("{stage:>8}  {:7.3} s  {:8.0} MiB/s", s, mib / s);
    }
    let warehouses = std::env::args().nth(1).map_or(2, |w| w.parse().expect("WAREHOUSES_UNDER_LOAD: a number"));
    under_load(warehouses);
}

/// Transactions between two copy steps under load.
const UNDER_LOAD_BATCH: usize = 200;

/// The copy of `warehouses` warehouses taken while transactions run (see the module
/// documentation).
fn under_load(warehouses: u16) {
    use workload::gen::{GenConfig, Generator, Profile};
    let mut db = engine::LeanDb::new();
    engine::loader::load_database(&mut db, 1..=warehouses, 42, &mut |_| {}).expect("loads");
    let cfg = GenConfig::for_profile(Profile::Paper, 1..=warehouses);
    let mut gen = Generator::new(cfg, 7, 42).expect("a valid generator");
    let mut ts = 1_000u64;
    let mut batch = |db: &mut engine::LeanDb| {
        let t = Instant::now();
        for _ in 0..UNDER_LOAD_BATCH {
            ts += 1;
            let input = gen.next(ts as i64);
            let _ = engine::procedures::execute(db, ts, &input);
        }
        t.elapsed()
    };
    let mut before = Duration::ZERO;
    for _ in 0..200 {
        before += batch(&mut db);
    }
    let mut sender = CopySender::begin(&mut db, 1, 1, 1, 1, 4 << 20).expect("no copy under way");
    let (mut steps, mut during, mut batches, mut bytes, mut step_max) =
        (Duration::ZERO, Duration::ZERO, 0u32, 0usize, Duration::ZERO);
    loop {
        during += batch(&mut db);
        batches += 1;
        let t = Instant::now();
        let next = sender.next(&mut db);
        let took = t.elapsed();
        steps += took;
        step_max = step_max.max(took);
        match next {
            CopyNext::Chunk(c) => {
                bytes += c.rows_bytes.len();
                if c.end.is_some() {
                    break;
                }
            }
            CopyNext::Over => unreachable!("over before its end"),
        }
    }
    let mib = bytes as f64 / (1 << 20) as f64;
    let per_txn = |d: Duration, n: u32| d.as_secs_f64() * 1e6 / (f64::from(n) * UNDER_LOAD_BATCH as f64);
    println!(
        "under load, {warehouses} warehouses: {mib:.0} MiB copied between {batches} batches of {UNDER_LOAD_BATCH}"
    );
    println!(
        "   steps  {:7.3} s  {:6.2} ms/MiB  longest step {:.1} ms",
        steps.as_secs_f64(),
        steps.as_secs_f64() * 1e3 / mib,
        step_max.as_secs_f64() * 1e3
    );
    println!(
        "    txns  {:7.2} µs/txn before the copy, {:.2} during it",
        per_txn(before, 200),
        per_txn(during, batches)
    );
}
