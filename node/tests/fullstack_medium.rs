//! The full stack on an in-memory medium with inline workers — what the seeded simulator
//! drives (issue #16; docs/design.md §4, §5): restart recovery after a power loss keeps
//! exactly the transactions whose commit was synced (docs/design.md §10, full-stack; ARIES,
//! Mohan et al., TODS 1992, Section 6), a torn log tail is truncated and reported, a
//! checkpoint is replaced atomically, inline execution is deterministic, and a directory and
//! an in-memory medium give the same results.

use engine::conventional::{CheckpointCrash, Medium, MemoryMedium};
use engine::digest::{digest, Digest};
use engine::loader::Scale;
use engine::procedures::{
    CustomerSelector, DeliveryInput, NewOrderInput, OrderLineInput, PaymentInput, TxnInput, ORDER_LINES_MAX,
};
use node::fullstack::FullStack;
use wire::messages::{BatchTxn, Timestamp, TxnOutcome};

const LOAD_SEED: u64 = 16;
/// The run's seed: every input below derives from it.
const SEED: u64 = 0x5EED_0016;
/// A date in TPC-C's domain (2008-06-10).
const DATE: i64 = 1_213_056_000;

/// SplitMix64 (Steele, Lea, Flood 2014).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn uniform(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// A NewOrder on the tiny population (items 1–500, customers 1–30); `rollback`: its last
/// line names an unused item (TPC-C clause 2.4.1.4: the transaction rolls back).
fn new_order(rng: &mut Rng, rollback: bool) -> TxnInput {
    let ol_cnt = rng.uniform(5, 15) as u8;
    let mut lines = [OrderLineInput::default(); ORDER_LINES_MAX];
    for l in lines.iter_mut().take(ol_cnt as usize) {
        *l = OrderLineInput { i_id: rng.uniform(1, 500) as u32, supply_w_id: 1, quantity: rng.uniform(1, 10) as u8 };
    }
    if rollback {
        lines[ol_cnt as usize - 1].i_id = 100_001;
    }
    let (d_id, c_id) = (rng.uniform(1, 10) as u8, rng.uniform(1, 30) as u32);
    TxnInput::NewOrder(NewOrderInput { w_id: 1, d_id, c_id, ol_cnt, lines, entry_d: DATE })
}

fn payment(rng: &mut Rng) -> TxnInput {
    let (d_id, c_id) = (rng.uniform(1, 10) as u8, rng.uniform(1, 30) as u32);
    TxnInput::Payment(PaymentInput {
        w_id: 1,
        d_id,
        c_w_id: 1,
        c_d_id: d_id,
        customer: CustomerSelector::ById(c_id),
        h_amount: rng.uniform(100, 500_000) as i64,
        date: DATE,
    })
}

/// `n` transactions from `ts` on: NewOrders (one in ten rolling back), Payments, a Delivery.
fn batch(rng: &mut Rng, n: usize, ts: &mut u64) -> Vec<BatchTxn> {
    (0..n)
        .map(|_| {
            *ts += 1;
            let input = match rng.uniform(0, 19) {
                0 => TxnInput::Delivery(DeliveryInput { w_id: 1, o_carrier_id: 3, date: DATE }),
                1 => new_order(rng, true),
                k if k < 11 => new_order(rng, false),
                _ => payment(rng),
            };
            BatchTxn::whole(Timestamp(*ts), input)
        })
        .collect()
}

/// A fresh full stack on `medium` (tiny population), transactions run inline.
fn loaded(medium: &MemoryMedium) -> FullStack {
    FullStack::load_scaled_on(Medium::Memory(medium.clone()), 1..=1, LOAD_SEED, Scale::tiny(), 0, false, &mut |_| {})
        .unwrap()
}

fn state(f: &mut FullStack) -> Digest {
    digest(f.session())
}

fn committed(outcomes: &[TxnOutcome]) -> usize {
    outcomes.iter().filter(|o| matches!(o, TxnOutcome::Committed(_))).count()
}

/// Runs three batches (every commit synced before `execute` returns), then a batch of one
/// NewOrder whose commit's log sync the power failure strikes: not acknowledged, its log
/// writes unsynced on the medium. Returns the stack and the state of the synced commits.
fn synced_then_struck(m: &MemoryMedium, rng: &mut Rng) -> (FullStack, Digest) {
    let mut f = loaded(m);
    let mut ts = 0;
    for _ in 0..3 {
        let txns = batch(rng, 30, &mut ts);
        let outcomes = f.execute(&txns);
        assert!(committed(&outcomes) > 20, "{outcomes:?}");
    }
    let synced = state(&mut f);
    m.crash_after_syncs(0);
    let struck = f.execute(&[BatchTxn::whole(Timestamp(ts + 1), new_order(rng, false))]);
    assert!(matches!(struck[..], [TxnOutcome::Failed { .. }]), "{struck:?}");
    assert!(m.is_crashed());
    (f, synced)
}

/// docs/design.md §10 (full-stack), ARIES restart: after a power loss that loses the
/// unsynced log tail cleanly, restart recovery on the medium gives exactly the state of the
/// synced commits (the unacknowledged NewOrder leaves no trace), with no torn tail to report.
#[test]
fn a_crash_losing_the_unsynced_tail_recovers_exactly_the_synced_commits() {
    let m = MemoryMedium::new();
    let (f, synced) = synced_then_struck(&m, &mut Rng(SEED));
    m.crash(0);
    drop(f);
    m.restart();
    let (mut f, cut) = FullStack::recover_on(Medium::Memory(m.clone()), 0, None).unwrap();
    assert!(cut.is_none());
    let report = f.recovery_report().clone();
    assert!(report.torn_tail.is_none() && !report.truncated_tail, "{report:?}");
    assert!(report.winners > 60, "{report:?}");
    assert_eq!(state(&mut f), synced, "exactly the synced commits survive");

    // The recovered stack goes on, and a second restart recovers its new commits.
    let mut ts = 10_000;
    let outcomes = f.execute(&batch(&mut Rng(SEED + 1), 20, &mut ts));
    assert!(committed(&outcomes) > 10, "{outcomes:?}");
    let after = state(&mut f);
    m.crash(0);
    drop(f);
    m.restart();
    let (mut f, _) = FullStack::recover_on(Medium::Memory(m), 0, None).unwrap();
    assert_eq!(state(&mut f), after);
}

/// `docs/conventional.md` § Restart recovery, step 2: the write a crash cut short — a prefix
/// of the struck commit's log records reached the medium — is a torn tail: truncated,
/// reported, never replayed; the struck NewOrder's whole records that did reach the medium
/// make it a loser, undone; the state is that of the synced commits.
#[test]
fn a_torn_log_tail_is_truncated_and_reported_and_the_synced_commits_survive() {
    // Not multiples of 8, and short of the struck NewOrder's commit record (its five or more
    // STOCK updates alone log several kilobytes before it): 57 bytes tear its first record
    // (the DISTRICT update), 1,001 keep whole records of it.
    for (torn_bytes, losers) in [(57usize, 0), (1001, 1)] {
        let m = MemoryMedium::new();
        let (f, synced) = synced_then_struck(&m, &mut Rng(SEED));
        m.crash(torn_bytes);
        drop(f);
        m.restart();
        let (mut f, _) = FullStack::recover_on(Medium::Memory(m), 0, None).unwrap();
        let report = f.recovery_report().clone();
        let torn = report.torn_tail.unwrap_or_else(|| panic!("{torn_bytes}: no torn tail reported: {report:?}"));
        assert!(report.truncated_tail && torn.bytes > 0 && torn.bytes <= torn_bytes as u64, "{report:?}");
        assert_eq!(report.losers, losers, "{torn_bytes}: {report:?}");
        assert_eq!(state(&mut f), synced, "{torn_bytes} torn bytes: exactly the synced commits survive");
    }
}

/// The other side of "synced": when every byte of the struck commit reached the medium
/// before power failed (its sync never returned, so it was not acknowledged), the commit
/// record is there and restart recovery keeps the transaction — an outcome the client was
/// never told, as docs/design.md §10 allows ("outcome unknown"), never a lost acknowledged one.
#[test]
fn a_commit_that_reached_the_medium_unacknowledged_survives() {
    let m = MemoryMedium::new();
    let (f, synced) = synced_then_struck(&m, &mut Rng(SEED));
    m.crash(usize::MAX);
    drop(f);
    m.restart();
    let (mut f, _) = FullStack::recover_on(Medium::Memory(m), 0, None).unwrap();
    let report = f.recovery_report().clone();
    assert!(report.torn_tail.is_none() && report.losers == 0, "{report:?}");
    assert_ne!(state(&mut f), synced, "the struck NewOrder's commit record reached the medium");
}

/// `docs/conventional.md` § Checkpoints: a checkpoint replaces the last one atomically. A
/// power loss while the new checkpoint is written leaves the old one (with its log); one
/// right after it replaced the old one, before its new log generation, leaves the new one
/// beside the old generation. Either way restart recovery gives the synced commits.
#[test]
fn a_crash_during_a_checkpoint_leaves_either_checkpoint_usable() {
    let mut snapshot_lsns = Vec::new();
    for at in [CheckpointCrash::WhileWriting, CheckpointCrash::AfterReplacing] {
        let m = MemoryMedium::new();
        let mut f = loaded(&m);
        let mut ts = 0;
        for _ in 0..2 {
            f.execute(&batch(&mut Rng(SEED), 30, &mut ts));
        }
        let synced = state(&mut f);
        let written = m.checkpoints_written();
        m.crash_at_next_checkpoint(at);
        assert!(f.checkpoint().is_err(), "{at:?}: the checkpoint the power loss struck fails");
        assert!(m.is_crashed());
        let replaced = u64::from(at == CheckpointCrash::AfterReplacing);
        assert_eq!(m.checkpoints_written(), written + replaced, "{at:?}");
        drop(f);
        m.restart();
        let (mut f, _) = FullStack::recover_on(Medium::Memory(m), 0, None).unwrap();
        assert_eq!(state(&mut f), synced, "{at:?}: the synced commits, from either checkpoint");
        snapshot_lsns.push(f.recovery_report().snapshot_lsn.unwrap());
    }
    assert!(snapshot_lsns[0] < snapshot_lsns[1], "the old checkpoint, then the new one: {snapshot_lsns:?}");
}

/// docs/design.md §5 (the determinism contract), for the full stack the simulator drives:
/// the same load and batches, executed inline on two fresh in-memory media, give identical
/// outcomes, state digests and log bytes; there are no worker threads.
#[test]
fn inline_workers_are_deterministic() {
    let run = || {
        let m = MemoryMedium::new();
        let mut f = loaded(&m);
        assert!(f.worker_schedstats().is_empty(), "no worker threads");
        let (mut rng, mut ts) = (Rng(SEED), 0);
        let mut outcomes = Vec::new();
        let mut digests = Vec::new();
        for _ in 0..4 {
            outcomes.extend(f.execute(&batch(&mut rng, 25, &mut ts)));
            digests.push(state(&mut f));
        }
        assert!(committed(&outcomes) > 70 && outcomes.iter().any(|o| matches!(o, TxnOutcome::Aborted { .. })));
        (outcomes, digests, m.log_device().durable_bytes(), f.retries())
    };
    let (first, second) = (run(), run());
    assert_eq!(first.0, second.0, "outcomes");
    assert_eq!(first.1, second.1, "state digests after each batch");
    assert!(first.2 == second.2, "log bytes on the medium");
    assert_eq!((first.3, second.3), (0, 0), "one session never conflicts with itself");
}

/// The medium holds the state; it does not decide it: the same load and batches, inline, on
/// a directory (today's files) and on an in-memory medium give the same outcomes and state,
/// and restart recovery from either (docs/design.md §10) gives that state back.
#[test]
fn a_directory_and_a_memory_medium_give_the_same_results() {
    let dir = std::env::temp_dir().join(format!("glass-fullstack-medium-{}", std::process::id()));
    let run = |medium: Medium| {
        let mut f =
            FullStack::load_scaled_on(medium.clone(), 1..=1, LOAD_SEED, Scale::tiny(), 0, false, &mut |_| {}).unwrap();
        let (mut rng, mut ts) = (Rng(SEED), 0);
        let outcomes: Vec<_> = (0..2).flat_map(|_| f.execute(&batch(&mut rng, 25, &mut ts))).collect();
        let digest = state(&mut f);
        drop(f);
        if let Medium::Memory(m) = &medium {
            m.crash(0);
            m.restart();
        }
        let (mut f, _) = FullStack::recover_on(medium, 0, None).unwrap();
        assert_eq!(state(&mut f), digest, "recovery gives the state back");
        (outcomes, digest)
    };
    let on_dir = run(Medium::Dir(dir.clone()));
    assert!(
        dir.join(engine::conventional::LOG_FILE).exists() && dir.join(engine::conventional::SNAPSHOT_FILE).exists()
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(run(Medium::Memory(MemoryMedium::new())), on_dir);
}

/// The results a replica emitted for a batch.
fn outcomes_of(emitted: Vec<node::replica::Emit>) -> Vec<TxnOutcome> {
    emitted
        .into_iter()
        .flat_map(|e| match e {
            node::replica::Emit::ToCoordinator(wire::channel::NodeToCoordinator::Results(r)) => {
                r.results.into_iter().map(|t| t.outcome).collect()
            }
            _ => Vec::new(),
        })
        .collect()
}

fn run(r: &mut node::Replica, seq: u64, txns: &[BatchTxn]) -> Vec<TxnOutcome> {
    let batch = wire::messages::Batch { partition: 1, seq, txns: txns.to_vec(), digest_after: false, answerer: None };
    outcomes_of(r.on_control(wire::channel::CoordinatorToNode::Batch(batch)).unwrap())
}

/// docs/design.md §10, "A partition back alone from its log": the partition's last replica
/// loses power in the middle of batch 2 (ten of its commits synced). Restart recovery keeps
/// batch 1 and those ten; the coordinator replays batches 1 and 2 to the recovered replica,
/// which runs only what had not taken effect. The state is exactly that of a replica that
/// ran both batches without failing — nothing applied twice, nothing lost.
#[test]
fn a_partition_back_alone_from_its_log_skips_on_replay_what_it_committed() {
    use node::fullstack::Restart;
    use node::replica::{ReplicaRole, Store};
    let replica = |f: FullStack| node::Replica::with_role(1, 1, ReplicaRole::Replica, Store::Full(Box::new(f)), 64);
    let mut rng = Rng(SEED ^ 10);
    let mut ts = 0;
    let (b1, b2) = (batch(&mut rng, 30, &mut ts), batch(&mut rng, 30, &mut ts));

    let reference_medium = MemoryMedium::new();
    let mut reference = replica(loaded(&reference_medium));
    run(&mut reference, 1, &b1);
    run(&mut reference, 2, &b2);

    let m = MemoryMedium::new();
    let mut r = replica(loaded(&m));
    let first = committed(&run(&mut r, 1, &b1));
    m.crash_after_syncs(10);
    let struck = run(&mut r, 2, &b2);
    assert!(m.is_crashed());
    assert_eq!(committed(&struck), 10, "{struck:?}");
    drop(r);
    m.restart();

    let (f, _) = FullStack::restart_on(Medium::Memory(m.clone()), 0, &Restart::OwnLog).unwrap();
    assert_eq!(f.recovery_report().committed_ts.len(), first + 10);
    let mut r = node::Replica::recovered(1, 1, f, 64);
    r.resume_at(1).unwrap();
    let skipped = |o: &[TxnOutcome]| {
        o.iter()
            .filter(|o| matches!(o, TxnOutcome::Failed { reason } if reason.contains("committed before the restart")))
            .count()
    };
    let replayed = [run(&mut r, 1, &b1), run(&mut r, 2, &b2)];
    assert_eq!(skipped(&replayed[0]) + skipped(&replayed[1]), first + 10);
    assert_eq!(r.state_digest(), reference.state_digest(), "as if it had never failed");
}
