//! The wire codec's cost per transaction on the hot path: encoding and decoding one 64-txn
//! `Batch` (coordinator → replicas) and one `Results` (replica → coordinator) of the paper
//! profile, in nanoseconds per transaction, and the bytes each takes. The figures behind the
//! codec's choices (fixed-width integers, packed order lines; `wire/src/codec.rs`).
//!
//! `cargo run --release --example codec_cost`

use engine::procedures::{NewOrderOutput, PaymentOutput, TxnInput, TxnOutput};
use std::time::Instant;
use wire::channel::{ChannelMessage, CoordinatorToNode, NodeToCoordinator};
use wire::messages::*;
use workload::gen::{GenConfig, Generator, Profile};

fn main() {
    let cfg = GenConfig::for_profile(Profile::Paper, 1..=2);
    let mut g = Generator::new(cfg, 1, 42).unwrap();
    let mut txns = Vec::new();
    let mut results = Vec::new();
    for i in 0..64u64 {
        let input = g.next_for(1, 1_700_000_000_000 + i as i64);
        let out = match input {
            TxnInput::NewOrder(_) => TxnOutput::NewOrder(NewOrderOutput {
                o_id: 3001 + i as u32,
                total: 123456,
                c_discount: 1234,
                w_tax: 1000,
                d_tax: 900,
                brand_lines: 1,
            }),
            _ => TxnOutput::Payment(PaymentOutput { c_id: 1234, c_balance: -1_000_000 - i as i64, bad_credit: false }),
        };
        let ts = Timestamp((1_700_000_000_000u64 << 20) + i);
        txns.push(BatchTxn::whole(ts, input));
        let outcome = TxnOutcome::Committed(out);
        results.push(TxnResult { ts, digest: outcome.digest(), outcome });
    }
    let batch = CoordinatorToNode::Batch(Batch { partition: 1, seq: 7, txns, digest_after: false, answerer: None });
    let res = NodeToCoordinator::Results(Results { partition: 1, seq: 7, results });
    measure("batch", &batch);
    measure("results", &res);
}

/// Encodes and decodes `m` (a message of its channel) many times; prints the cost per
/// transaction of its 64.
fn measure<M: ChannelMessage>(name: &str, m: &M) {
    let n = 20000;
    let mut buf = Vec::with_capacity(1 << 16);
    let t = Instant::now();
    for _ in 0..n {
        buf.clear();
        wire::codec::encode_into(m, &mut buf, 1 << 22).unwrap();
    }
    let enc = t.elapsed().as_nanos() as f64 / n as f64 / 64.0;
    let t = Instant::now();
    for _ in 0..n {
        let (x, _) = wire::codec::decode::<M>(&buf, 1 << 22).unwrap();
        std::hint::black_box(x);
    }
    let dec = t.elapsed().as_nanos() as f64 / n as f64 / 64.0;
    println!(
        "{name}: {} bytes/frame ({:.1}/txn), encode {enc:.1} ns/txn, decode {dec:.1} ns/txn",
        buf.len(),
        buf.len() as f64 / 64.0
    );
}
