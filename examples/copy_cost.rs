//! What a copy of a partition costs, per stage, on one warehouse of TPC-C's population, idle
//! (docs/design.md §10, "Copying without stopping"): the source's scan into chunks, the wire
//! codec's encoding and decoding of the chunks, and the receiver's install (rows, then the
//! digest check), in MiB/s of rows.
//!
//! `cargo run --release --example copy_cost`

use std::time::Instant;

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
}
