//! The passive replication modes on real replicas over TPC-C data (docs/design.md, "The three
//! modes"): in `active-passive` the primary runs the lean engine and ships redo records
//! (after-images) that its backup rolls forward; in `full-stack` the primary runs the
//! conventional stack and ships its write-ahead log. In both, "the backups apply redo in order
//! (roll forward) and never execute procedure logic": they refuse batches, apply shipments in
//! sequence order exactly once whatever order and duplication the network delivers them in,
//! refuse damaged shipments before changing anything, and end bit-identical to their primary
//! (equal state digests, TPC-C clause 3.3.2's consistency conditions holding).
//!
//! One warehouse per partition; inputs come from the paper's profile (NewOrder and Payment,
//! 50/50) with seeded randomness, so a failure replays.
//!
//! A test of `node`'s replicas, kept here because it draws its inputs from `workload`'s
//! generator and `node` does not depend on `workload` (not even for its tests).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use engine::procedures::{
    CustomerSelector, NewOrderInput, OrderLineInput, OrderStatusInput, StockLevelInput, TxnInput, ORDER_LINES_MAX,
};
use engine::rng::Rng;
use engine::LeanDb;
use node::replica::{Emit, ReplicaRole, Store};
use node::{Replica, ReplicaError};
use wire::channel::{CoordinatorToNode, NodeToCoordinator, PeerReply, ToolReply};
use wire::config::{ClusterConfig, Mode, PartitionConfig, WarehouseRange};
use wire::messages::*;
use workload::gen::{GenConfig, Generator, Profile};

/// Seed of the TPC-C population every replica loads.
const LOAD_SEED: u64 = 42;
/// Seed of the transaction inputs and of the delivery order.
const RUN_SEED: u64 = 0x9A55_1BE5;
/// Milliseconds of the first timestamp.
const START_MS: u64 = 1_700_000_000_000;
/// Batches a replica may hold ahead of a missing one.
const PENDING_BATCHES_MAX: usize = 64;
/// Transactions per generated batch.
const BATCH_TXNS: usize = 8;

/// The committed cluster.toml in `mode`, one warehouse per partition: partition 1 on nodes
/// [1, 2] (node 1 its primary), partition 2 on [2, 1].
fn config(mode: Mode) -> ClusterConfig {
    let mut c = ClusterConfig::parse(include_str!("../../cluster.toml")).unwrap();
    c = c.with_mode(mode, None);
    c.seed = LOAD_SEED;
    c.partitions[0].warehouses = WarehouseRange { first: 1, last: 1 };
    c.partitions[1].warehouses = WarehouseRange { first: 2, last: 2 };
    c.validate().unwrap();
    c
}

/// Partition 1 of [`config`].
fn partition(mode: Mode) -> PartitionConfig {
    config(mode).partitions[0].clone()
}

/// The lean replica of partition 1 on `node` under `mode` (active-active or active-passive).
fn lean(mode: Mode, node: NodeId) -> Replica {
    assert_ne!(mode, Mode::FullStack);
    // The lean kernel keeps everything in memory: the directory is never touched.
    let dir = Path::new("/nonexistent/glass-lean-replicas-need-no-directory");
    let mut r =
        Replica::load_for(mode, node, &partition(mode), LOAD_SEED, PENDING_BATCHES_MAX, dir, 1, &mut |_| {}).unwrap();
    assert!(matches!(r.store_mut(), Store::Lean(_)));
    r
}

/// The primary (node 1) and the backup (node 2) of partition 1 in `active-passive`.
fn lean_pair() -> (Replica, Replica) {
    let primary = lean(Mode::ActivePassive, 1);
    let backup = lean(Mode::ActivePassive, 2);
    assert_eq!((primary.role(), backup.role()), (ReplicaRole::Primary, ReplicaRole::Backup));
    (primary, backup)
}

/// Partition 1's batches: generated paper-profile inputs for warehouse 1 under strictly
/// increasing timestamps, numbered 1, 2, 3, …
struct Stream {
    gen: Generator,
    next_ms: u64,
    next_seq: Seq,
}

impl Stream {
    fn new() -> Stream {
        let gen = Generator::new(GenConfig::for_profile(Profile::Paper, 1..=1), RUN_SEED, LOAD_SEED).unwrap();
        Stream { gen, next_ms: START_MS, next_seq: 1 }
    }

    fn next(&mut self) -> Batch {
        let ms = self.next_ms;
        self.next_ms += 1;
        let txns = (0..BATCH_TXNS as u64)
            .map(|counter| BatchTxn::whole(Timestamp::new(ms, counter, 0), self.gen.next((ms / 1_000) as i64)))
            .collect();
        let seq = self.next_seq;
        self.next_seq += 1;
        Batch { partition: 1, seq, txns, digest_after: false, answerer: None }
    }
}

/// Runs `batch` on a primary through its message interface; returns its results and
/// shipment (a primary answers a batch with its shipment, then its results).
fn run_on_primary(primary: &mut Replica, batch: Batch) -> (Results, Shipment) {
    let seq = batch.seq;
    let out = primary.on_control(CoordinatorToNode::Batch(batch)).unwrap();
    let [Emit::Ship(shipment), Emit::ToCoordinator(NodeToCoordinator::Results(results))] = &out[..] else {
        panic!("batch {seq}: {out:?}")
    };
    assert_eq!((shipment.partition, shipment.seq, results.seq), (1, seq, seq));
    (results.clone(), shipment.clone())
}

/// Asserts every transaction of `results` committed (the paper's profile never rolls back).
fn assert_all_committed(results: &Results) {
    for r in &results.results {
        assert!(matches!(r.outcome, TxnOutcome::Committed(_)), "batch {} ts {}: {:?}", results.seq, r.ts, r.outcome);
    }
}

/// Delivers a shipment to a backup through its message interface; returns the acknowledged
/// sequence numbers.
fn ship(backup: &mut Replica, shipment: Shipment) -> Result<Vec<Seq>, ReplicaError> {
    let out = backup.on_ship(shipment)?;
    Ok(out
        .into_iter()
        .map(|m| match m {
            PeerReply::ShipAck { partition: 1, seq } => seq,
            other => panic!("a backup answers a shipment with ShipAcks only: {other:?}"),
        })
        .collect())
}

fn redo(s: &mut Shipment) -> &mut engine::redo::RedoBatch {
    match &mut s.log {
        ShippedLog::Redo(r) => r,
        ShippedLog::Wal(_) => panic!("a lean primary ships redo records"),
    }
}

/// TPC-C clause 3.3.2's consistency conditions on a replica's storage.
fn check_consistency(r: &mut Replica) {
    let report = match r.store_mut() {
        Store::Lean(db) => engine::check::check(db),
        Store::Full(f) => engine::check::check(f.session()),
    };
    assert!(report.all_passed(), "node {}:\n{report}", r.node());
}

/// docs/design.md "The three modes", active-passive: the primary executes and ships redo records
/// (after-images); the backup rolls them forward in sequence order — "the backups apply redo
/// in order (roll forward) and never execute procedure logic" — even when the network
/// reorders and duplicates shipments, acknowledging each sequence number once, in order. At
/// the end the backup's state is the primary's (equal digests) and satisfies TPC-C clause
/// 3.3.2.
#[test]
fn a_backup_rolls_forward_reordered_and_duplicated_shipments_to_the_primary_state() {
    const BATCHES: u64 = 20;
    let (mut primary, mut backup) = lean_pair();
    let loaded = primary.state_digest();
    assert_eq!(backup.state_digest(), loaded, "replicas loaded from one seed agree");

    let mut stream = Stream::new();
    let mut shipments = Vec::new();
    for _ in 0..BATCHES {
        let (results, shipment) = run_on_primary(&mut primary, stream.next());
        assert_all_committed(&results);
        shipments.push(shipment);
    }
    let committed = primary.stats().txns_committed;
    assert_eq!(committed, BATCHES * BATCH_TXNS as u64);
    assert_eq!(
        shipments
            .iter()
            .map(|s| match &s.log {
                ShippedLog::Redo(r) => r.txns,
                _ => 0,
            })
            .sum::<u64>(),
        committed
    );
    assert_ne!(primary.state_digest(), loaded);

    // Every shipment once, about a third of them twice, in a seeded random order.
    let mut rng = Rng::new(RUN_SEED);
    let mut deliveries: Vec<Shipment> = shipments.clone();
    deliveries.extend(shipments.iter().filter(|_| rng.below(3) == 0).cloned());
    let duplicates = deliveries.len() - shipments.len();
    for i in (1..deliveries.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        deliveries.swap(i, j);
    }
    assert!(duplicates > 0);
    assert_ne!(deliveries.iter().map(|s| s.seq).collect::<Vec<_>>(), (1..=BATCHES).collect::<Vec<_>>());

    let mut acked = Vec::new();
    for s in deliveries {
        let seq = s.seq;
        let before = backup.applied_seq();
        let acks = ship(&mut backup, s).unwrap();
        // What a delivery applies runs on from where the backup stood.
        assert_eq!(acks, (before + 1..=backup.applied_seq()).collect::<Vec<_>>(), "delivering {seq}");
        if seq <= before {
            assert!(acks.is_empty(), "a duplicate of an applied shipment applies nothing");
        }
        acked.extend(acks);
    }
    assert_eq!(acked, (1..=BATCHES).collect::<Vec<_>>(), "each shipment acknowledged once, in order");

    assert_eq!(backup.applied_seq(), primary.applied_seq());
    assert_eq!(backup.state_digest(), primary.state_digest());
    assert!(backup.stopped().is_none() && primary.stopped().is_none());
    let stats = backup.stats();
    assert_eq!(stats.batches_executed, BATCHES);
    assert!(stats.batches_waited > 0, "some shipments arrived ahead of a missing one");
    assert_eq!(stats.txns_committed, committed, "the backup covered every committed transaction");
    assert_eq!((stats.txns_aborted, stats.txns_failed), (0, 0));
    // It saw every timestamp its primary did (shipments carry the latest: docs/design.md §11).
    assert_eq!(backup.last_ts(), primary.last_ts());
    assert!(backup.applied_bytes() > 0);
    check_consistency(&mut backup);
    check_consistency(&mut primary);
}

/// docs/design.md "The three modes": a backup "never execute[s] procedure logic", so it refuses a
/// batch; a primary executes and refuses log records. A shipment that fails its checksum —
/// whether the checksum or a byte of the after-images was damaged — stops the backup before it
/// changes anything (engine/src/redo.rs: "a batch carries a checksum of its contents, checked
/// before anything is applied"), and a stopped backup refuses every later shipment.
#[test]
fn roles_refuse_the_wrong_stream_and_damaged_shipments_stop_the_backup() {
    let (mut primary, mut backup) = lean_pair();
    let mut other_backup = lean(Mode::ActivePassive, 2);
    let loaded = backup.state_digest();
    let mut stream = Stream::new();

    // A backup refuses a batch, without stopping or changing.
    let first = stream.next();
    assert!(matches!(backup.on_control(CoordinatorToNode::Batch(first.clone())), Err(ReplicaError::Unexpected { .. })));
    assert!(backup.stopped().is_none());
    assert_eq!((backup.state_digest(), backup.applied_seq()), (loaded, 0));

    let shipments: Vec<Shipment> = std::iter::once(first)
        .chain((0..2).map(|_| stream.next()))
        .map(|b| run_on_primary(&mut primary, b).1)
        .collect();

    // A primary refuses a shipment, without stopping or changing.
    let digest = primary.state_digest();
    assert!(matches!(primary.on_ship(shipments[0].clone()), Err(ReplicaError::Unexpected { .. })));
    assert!(primary.stopped().is_none());
    assert_eq!((primary.state_digest(), primary.applied_seq()), (digest, 3));

    // A damaged checksum: shipment 1 applies, shipment 2 stops the backup at shipment 1's state.
    assert_eq!(ship(&mut backup, shipments[0].clone()).unwrap(), vec![1]);
    let after_first = backup.state_digest();
    let mut damaged = shipments[1].clone();
    redo(&mut damaged).checksum ^= 1;
    assert!(matches!(ship(&mut backup, damaged), Err(ReplicaError::BadShipment { .. })));
    assert!(backup.stopped().is_some_and(|why| why.contains("checksum")), "{:?}", backup.stopped());
    assert_eq!((backup.state_digest(), backup.applied_seq()), (after_first, 1));
    for s in &shipments[1..] {
        assert!(matches!(ship(&mut backup, s.clone()), Err(ReplicaError::Stopped { .. })));
    }
    assert_eq!(backup.state_digest(), after_first);

    // A damaged after-image, applied when the gap before it fills: nothing of it lands.
    let mut damaged = shipments[0].clone();
    let bytes = &mut redo(&mut damaged).bytes;
    assert!(!bytes.is_empty(), "batch 1 changed rows");
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    assert_eq!(ship(&mut other_backup, shipments[1].clone()).unwrap(), Vec::<Seq>::new(), "2 waits for 1");
    assert!(matches!(ship(&mut other_backup, damaged), Err(ReplicaError::BadShipment { .. })));
    assert!(other_backup.stopped().is_some());
    assert_eq!((other_backup.state_digest(), other_backup.applied_seq()), (loaded, 0));
    assert!(matches!(ship(&mut other_backup, shipments[0].clone()), Err(ReplicaError::Stopped { .. })));
    assert_eq!(other_backup.state_digest(), loaded);

    // The conventional stack's log does not fit a lean backup: refused, and the backup stops.
    let mut empty = Replica::with_role(2, 1, ReplicaRole::Backup, Store::Lean(LeanDb::new()), 4);
    let wal = Shipment {
        partition: 1,
        primary: 1,
        seq: 1,
        last_ts: None,
        pieces: Vec::new(),
        log: ShippedLog::Wal(vec![1, 2, 3]),
        answers: Vec::new(),
    };
    assert!(matches!(ship(&mut empty, wal), Err(ReplicaError::BadShipment { .. })));
    assert!(empty.stopped().is_some());
}

/// A replica read (an OrderStatus or StockLevel outside the ordered path, ToolRequest::ReplicaRead)
/// on a backup is answered `possibly_stale` — the backup lags its primary by the shipments in
/// flight (docs/design.md "The three modes": `async` answers the client before backups hold the
/// records) — and on a primary or an active-active replica it is not. Once the backup caught
/// up its answers equal the primary's. Reads run read-only procedures only: a NewOrder sent as
/// a replica read fails without running (TPC-C clause 2.4's NewOrder writes; the state digest
/// is unchanged).
#[test]
fn replica_reads_on_a_backup_are_possibly_stale_and_agree_once_it_caught_up() {
    const BATCHES: usize = 10;
    const APPLIED_FIRST: usize = 5;
    let (mut primary, mut backup) = lean_pair();
    let mut active = lean(Mode::ActiveActive, 1);
    assert_eq!(active.role(), ReplicaRole::Replica);

    let mut stream = Stream::new();
    let batches: Vec<Batch> = (0..BATCHES).map(|_| stream.next()).collect();
    let mut shipments = Vec::new();
    for b in &batches {
        let (results, shipment) = run_on_primary(&mut primary, b.clone());
        let out = active.on_control(CoordinatorToNode::Batch(b.clone())).unwrap();
        let expected = vec![Emit::ToCoordinator(NodeToCoordinator::Results(results))];
        assert_eq!(out, expected, "an active replica ships nothing; same results");
        shipments.push(shipment);
    }
    for s in &shipments[..APPLIED_FIRST] {
        ship(&mut backup, s.clone()).unwrap();
    }

    // A customer whose row changed after the backup's point: the last Payment of the stream.
    let payment = batches[APPLIED_FIRST..]
        .iter()
        .flat_map(|b| &b.txns)
        .filter_map(|t| match t.input {
            TxnInput::Payment(p) => Some(p),
            _ => None,
        })
        .next_back()
        .expect("the paper's profile is half Payments");
    assert!(matches!(payment.customer, CustomerSelector::ById(_)) && payment.c_w_id == 1);
    let order_status =
        TxnInput::OrderStatus(OrderStatusInput { w_id: 1, d_id: payment.c_d_id, customer: payment.customer });
    let stock_level = TxnInput::StockLevel(StockLevelInput { w_id: 1, d_id: 1, threshold: 20 });

    let read = |r: &mut Replica, request_id: u64, input: TxnInput| -> (Seq, bool, TxnOutcome) {
        let out = r.replica_read(request_id, 1, &input).unwrap();
        let ToolReply::ReplicaReadReply { request_id: id, partition: 1, seq, possibly_stale, outcome } = out else {
            panic!("{out:?}")
        };
        assert_eq!(id, request_id);
        (seq, possibly_stale, outcome)
    };

    let (seq, stale, on_primary) = read(&mut primary, 1, order_status);
    assert_eq!((seq, stale), (BATCHES as Seq, false));
    assert!(matches!(on_primary, TxnOutcome::Committed(_)), "{on_primary:?}");
    assert_eq!(read(&mut active, 2, order_status), (BATCHES as Seq, false, on_primary.clone()));
    let (seq, stale, lagging) = read(&mut backup, 3, order_status);
    assert_eq!((seq, stale), (APPLIED_FIRST as Seq, true));
    assert!(matches!(lagging, TxnOutcome::Committed(_)), "{lagging:?}");
    assert_ne!(lagging, on_primary, "the backup has not seen the customer's last payment yet");

    for s in &shipments[APPLIED_FIRST..] {
        ship(&mut backup, s.clone()).unwrap();
    }
    assert_eq!(read(&mut backup, 4, order_status), (BATCHES as Seq, true, on_primary));
    let (_, _, level) = read(&mut primary, 5, stock_level);
    assert!(matches!(level, TxnOutcome::Committed(_)), "{level:?}");
    assert_eq!(read(&mut backup, 6, stock_level), (BATCHES as Seq, true, level));

    // A write sent as a replica read fails without running, anywhere.
    let mut lines = [OrderLineInput::default(); ORDER_LINES_MAX];
    for (n, l) in lines.iter_mut().take(5).enumerate() {
        *l = OrderLineInput { i_id: n as u32 + 1, supply_w_id: 1, quantity: 5 };
    }
    // In TPC-C's domains (clause 2.4.1): refused for being a write, not for its input.
    let entry_d = 1_213_056_000;
    let new_order = TxnInput::NewOrder(NewOrderInput { w_id: 1, d_id: 1, c_id: 1, ol_cnt: 5, lines, entry_d });
    for r in [&mut primary, &mut backup, &mut active] {
        let digest = r.state_digest();
        let (seq, _, outcome) = read(r, 7, new_order);
        assert_eq!(seq, BATCHES as Seq);
        assert!(matches!(outcome, TxnOutcome::Failed { .. }), "node {} {:?}: {outcome:?}", r.node(), r.role());
        assert_eq!(r.state_digest(), digest, "node {} {:?}", r.node(), r.role());
    }
    assert_eq!(primary.state_digest(), backup.state_digest());
    assert!(matches!(
        backup.replica_read(8, 2, &order_status),
        Err(ReplicaError::WrongPartition { expected: 1, got: 2 })
    ));
}

static DIRS: AtomicU64 = AtomicU64::new(0);

/// A fresh directory under the system temp dir, removed on drop (declared before the replicas
/// that use it, so it outlives them).
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let n = DIRS.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("glass-node-passive-{}-{name}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// docs/design.md "The three modes", full-stack: the conventional stack (buffer pool, B+trees,
/// strict 2PL, latches, WAL with group-commit fsync, several workers) runs on the primary and
/// ships its WAL to the passive backup, which replays it — redo only, "never execute[s]
/// procedure logic" — in sequence order. The backup ends in the primary's state (equal
/// digests) and satisfies TPC-C clause 3.3.2's consistency conditions.
#[test]
fn a_full_stack_backup_replays_the_primary_wal_to_the_same_state() {
    const BATCHES: u64 = 10;
    const WORKERS: usize = 2;
    let (primary_dir, backup_dir) = (TempDir::new("primary"), TempDir::new("backup"));
    let p = partition(Mode::FullStack);
    let load = |node, dir: &Path| {
        Replica::load_for(Mode::FullStack, node, &p, LOAD_SEED, PENDING_BATCHES_MAX, dir, WORKERS, &mut |_| {}).unwrap()
    };
    let mut primary = load(1, &primary_dir.0);
    let mut backup = load(2, &backup_dir.0);
    assert_eq!((primary.role(), backup.role()), (ReplicaRole::Primary, ReplicaRole::Backup));
    assert!(matches!(primary.store_mut(), Store::Full(_)) && matches!(backup.store_mut(), Store::Full(_)));
    let loaded = primary.state_digest();
    assert_eq!(backup.state_digest(), loaded);

    let mut stream = Stream::new();
    for seq in 1..=BATCHES {
        let (results, shipment) = run_on_primary(&mut primary, stream.next());
        assert_all_committed(&results);
        let ShippedLog::Wal(records) = &shipment.log else { panic!("a full-stack primary ships its WAL") };
        assert!(!records.is_empty(), "batch {seq} logged its commits");
        assert_eq!(ship(&mut backup, shipment).unwrap(), vec![seq]);
    }
    assert_ne!(primary.state_digest(), loaded);
    assert_eq!(backup.applied_seq(), BATCHES);
    assert_eq!(backup.state_digest(), primary.state_digest());
    // It saw every timestamp its primary did (shipments carry the latest: docs/design.md §11).
    assert_eq!(backup.last_ts(), primary.last_ts());
    assert!(backup.applied_bytes() > 0 && backup.stopped().is_none());
    check_consistency(&mut backup);
    check_consistency(&mut primary);
    drop((primary, backup));
    let dirs = [primary_dir.0.clone(), backup_dir.0.clone()];
    drop((primary_dir, backup_dir));
    assert!(dirs.iter().all(|d| !d.exists()), "{dirs:?} removed");
}

/// The acknowledgements among a partition machine's effects.
fn acks(effects: &[node::machine::Effect<NodeId>]) -> Vec<Seq> {
    effects
        .iter()
        .filter_map(|e| match e {
            node::machine::Effect::Reply { msg: PeerReply::ShipAck { seq, .. }, .. } => Some(*seq),
            _ => None,
        })
        .collect()
}

/// docs/design.md §11, a passive backup's fence: once it answered a new coordinator leader's
/// `TakeOver`, it holds its primary's shipments until that leader's first membership. One that
/// names the primary live releases them (applied, acknowledged, the backup level with its
/// primary); one that leaves the primary out drops them — and every later shipment from it —
/// so the backup is promoted exactly where it stood when it answered.
#[test]
fn a_fenced_backup_waits_for_the_new_leaders_membership() {
    use node::machine::PartitionMachine;
    for primary_stays in [true, false] {
        let (mut primary, backup) = lean_pair();
        let mut machine: PartitionMachine<NodeId> = PartitionMachine::serving(Mode::ActivePassive, backup, 64);
        let mut stream = Stream::new();
        for _ in 0..2 {
            let (_, shipment) = run_on_primary(&mut primary, stream.next());
            assert_eq!(shipment.primary, 1);
            assert_eq!(acks(&machine.on_shipment(shipment, 1)).len(), 1);
        }
        let out = machine.on_coordinator(CoordinatorToNode::TakeOver { epoch: 3 });
        assert!(
            out.iter().any(|e| matches!(e,
                node::machine::Effect::Emit(Emit::ToCoordinator(NodeToCoordinator::Standing { standing, .. }))
                    if standing.executed_seq == 2)),
            "{out:?}"
        );
        let held: Vec<Shipment> = (0..2).map(|_| run_on_primary(&mut primary, stream.next()).1).collect();
        for s in &held {
            assert!(acks(&machine.on_shipment(s.clone(), 1)).is_empty(), "held behind the fence");
        }
        // An older leader's membership does not lift the fence.
        let old = CoordinatorToNode::Membership { partition: 1, epoch: (2 << 32) + 9, live: vec![1, 2] };
        assert!(acks(&machine.on_coordinator(old)).is_empty());
        let live = if primary_stays { vec![1, 2] } else { vec![2] };
        let out = machine.on_coordinator(CoordinatorToNode::Membership { partition: 1, epoch: (3 << 32) + 1, live });
        let replica = machine.replica().expect("serving");
        if primary_stays {
            assert_eq!(acks(&out), vec![3, 4]);
            assert_eq!(replica.applied_seq(), 4);
            assert_eq!(machine.replica_mut().unwrap().state_digest(), primary.state_digest());
        } else {
            assert!(acks(&out).is_empty());
            assert_eq!(replica.applied_seq(), 2);
            // A later shipment of the left-out primary is dropped too.
            let (_, late) = run_on_primary(&mut primary, stream.next());
            assert!(acks(&machine.on_shipment(late, 1)).is_empty());
            let out = machine.on_coordinator(CoordinatorToNode::Promote { partition: 1, first_unanswered: 3 });
            assert!(
                out.iter().any(|e| matches!(
                    e,
                    node::machine::Effect::Emit(Emit::ToCoordinator(NodeToCoordinator::Promoted {
                        applied_seq: 2,
                        next_seq: 3,
                        ..
                    }))
                )),
                "{out:?}"
            );
            assert!(machine.replica().unwrap().stats().shipments_refused >= 3);
        }
    }
}
