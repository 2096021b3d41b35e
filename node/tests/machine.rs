//! The partition machine's sequences driven message by message (docs/design.md §4 and §10):
//! a rejoin from plan to `Rejoined`, with the batches held meanwhile executed; a source that
//! dies mid-copy (retried, then given up); a damaged copy (rejected by the snapshot receiver
//! and fetched again); a stale copy; a copy from a source a newer plan replaced; a refusal;
//! a passive backup's promotion and shipping; and a full-stack backup whose own log cannot
//! follow its primary's log base falling back to the checkpoint image. No thread, socket or
//! clock: each test feeds the machine what the node process would and reads the effects it
//! returns.

use engine::loader::{load_database_scaled, Scale};
use engine::LeanDb;
use node::error::RejoinError;
use node::machine::{
    Began, Effect, FetchKind, FetchOrder, Fetched, PartitionMachine, Standing, CONNECT_RETRY_MS, REJOIN_FETCH_ATTEMPTS,
};
use node::replica::{Emit, ReplicaRole, Store};
use node::snapshot::{SnapshotInfo, SnapshotReceiver};
use node::{Replica, TransferError};
use wire::channel::{CoordinatorToNode, NodeToCoordinator, PeerReply};
use wire::config::Mode;
use wire::endpoint::RecvError;
use wire::messages::{Batch, NodeId, PartitionId, Seq};

const P: PartitionId = 1;
const ME: NodeId = 3;
const PENDING: usize = 64;

/// Where a shipment's acknowledgement goes, in these tests: the primary's node id.
type Machine = PartitionMachine<NodeId>;

fn population() -> LeanDb {
    let mut db = LeanDb::new();
    load_database_scaled(&mut db, 1..=1, 7, Scale::tiny(), &mut |_| {}).unwrap();
    db
}

/// An empty batch (the replica executes it: the sequence advances).
fn batch(seq: Seq) -> CoordinatorToNode {
    CoordinatorToNode::Batch(Batch { partition: P, seq, txns: Vec::new(), digest_after: false, answerer: None })
}

/// A live replica that executed batches 1..=`through`.
fn source(through: Seq) -> Replica {
    let mut r = Replica::new(2, P, population(), PENDING);
    for seq in 1..=through {
        let CoordinatorToNode::Batch(b) = batch(seq) else { unreachable!() };
        r.on_batch(b).unwrap();
    }
    r
}

/// A copy of `r` as a rejoin receives it (streamed and checked chunk by chunk); `damage`
/// flips a byte of the first chunk's rows after its checksum, as a broken transfer would.
fn copy_of(r: &mut Replica, damage: bool) -> Result<(LeanDb, SnapshotInfo), TransferError> {
    let (seq, digest) = (r.applied_seq(), r.state_digest());
    let Store::Lean(db) = r.store_mut() else { unreachable!("lean") };
    let mut chunks = Vec::new();
    node::snapshot::stream(db, 1, P, seq, digest, 1 << 20, &mut |c| {
        chunks.push(c);
        true
    });
    if damage {
        let first = chunks.iter_mut().find(|c| !c.rows_bytes.is_empty()).unwrap();
        first.rows_bytes[0] ^= 0x5A;
    }
    let mut copy = LeanDb::new();
    let mut receiver = SnapshotReceiver::new(P, "node 2".into());
    for c in chunks {
        if let Some(info) = receiver.accept(c, &mut copy)? {
            return Ok((copy, info));
        }
    }
    unreachable!("the stream ends with its last chunk")
}

fn fetched(r: &mut Replica) -> Result<Fetched, RejoinError> {
    let (db, info) = copy_of(r, false).unwrap();
    Ok(Fetched::Copy { db: Box::new(db), info })
}

/// The id of the fetch `m` has under way.
fn fetching(m: &Machine) -> u64 {
    m.fetch_under_way().expect("a fetch under way")
}

fn emitted(effects: &[Effect<NodeId>]) -> Vec<&NodeToCoordinator> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Emit(Emit::ToCoordinator(m)) => Some(m),
            _ => None,
        })
        .collect()
}

/// Issue 16, the rejoin protocol: ask, take the plan, hold the batches sent meanwhile, fetch
/// from the plan's source, install, execute what was held in order, report `Rejoined` as of
/// the copy's batch.
#[test]
fn a_rejoin_holds_batches_installs_the_copy_and_executes_them() {
    let (mut m, first) = Machine::rejoining(Mode::ActiveActive, ME, P, PENDING);
    assert!(matches!(emitted(&first)[..], [NodeToCoordinator::RejoinRequest { partition: P }]));
    assert!(m.on_coordinator(batch(5)).is_empty(), "held while the copy is on its way");
    assert!(m.on_coordinator(batch(6)).is_empty());
    let plan = m.on_coordinator(CoordinatorToNode::RejoinPlan { partition: P, source: 2, from_seq: 5 });
    assert!(
        matches!(
            plan[..],
            [Effect::Fetch(FetchOrder {
                source: 2,
                after_seq: 4,
                kind: FetchKind::Copy,
                delay_ms: 0,
                retrying: None,
                ..
            })]
        ),
        "{plan:?}"
    );
    assert_eq!(m.refusal().as_deref(), Some("rejoining"), "tools are refused meanwhile");

    let mut src = source(4);
    let mut done = m.on_fetched(fetching(&m), fetched(&mut src));
    done.extend(m.catch_up(usize::MAX, true));
    let msgs = emitted(&done);
    let results = result_seqs(&msgs);
    assert_eq!(results, vec![5, 6], "the held batches ran, in order");
    assert!(matches!(msgs.last(), Some(NodeToCoordinator::Rejoined { partition: P, snapshot_seq: 4 })));
    assert!(done.iter().any(|e| matches!(e, Effect::Ready { .. })));
    let r = m.replica().unwrap();
    assert_eq!(r.applied_seq(), 6);
    assert_eq!(m.standing(), Standing::Serving);
}

/// Issue 16, "a source that dies mid-copy": each failed fetch is retried after
/// `CONNECT_RETRY_MS`, saying why; after `REJOIN_FETCH_ATTEMPTS` the rejoin gives up and the
/// partition refuses tools with the reason.
#[test]
fn a_source_that_dies_mid_copy_is_retried_then_given_up() {
    let (mut m, _) = Machine::rejoining(Mode::ActiveActive, ME, P, PENDING);
    m.on_coordinator(CoordinatorToNode::RejoinPlan { partition: P, source: 2, from_seq: 5 });
    let died = || {
        Err(RejoinError::Transfer(TransferError::Recv(RecvError::Closed {
            peer: "node 2".into(),
            what: "a snapshot chunk",
        })))
    };
    for attempt in 2..=REJOIN_FETCH_ATTEMPTS {
        let retry = m.on_fetched(fetching(&m), died());
        match &retry[..] {
            [Effect::Fetch(FetchOrder { source: 2, after_seq: 4, delay_ms, retrying: Some(why), .. })] => {
                assert_eq!(*delay_ms, CONNECT_RETRY_MS, "attempt {attempt}");
                assert!(why.contains("closed") || why.contains("node 2"), "{why}");
            }
            other => panic!("attempt {attempt}: {other:?}"),
        }
    }
    let gave_up = m.on_fetched(fetching(&m), died());
    let told = |out: &[Effect<_>]| {
        matches!(
            out,
            [
                _,
                Effect::Emit(Emit::ToCoordinator(NodeToCoordinator::LoadStatus {
                    partition: P,
                    state: wire::messages::LoadState::Failed { .. },
                }))
            ]
        )
    };
    assert!(
        matches!(&gave_up[..], [Effect::Failed { reason }, _] if reason.contains("after 10 attempts")),
        "{gave_up:?}"
    );
    assert!(told(&gave_up), "the coordinator is told the rejoin was given up: {gave_up:?}");
    assert!(matches!(m.standing(), Standing::Failed { .. }));
    assert!(m.refusal().unwrap().contains("no usable starting state"));
    assert!(m.on_coordinator(batch(5)).is_empty(), "a failed partition takes nothing more");
}

/// Issue 36, "every protocol timeout is a named timeout in the machine's tick": a fetch that
/// brings nothing for the transfer's patience — counted from its order's delay, restarted by
/// each piece that arrives — is abandoned and ordered again; the abandoned fetch's late
/// outcome and progress change nothing; and the last attempt's silence gives the rejoin up,
/// its fetch abandoned with it.
#[test]
fn a_fetch_that_brings_nothing_for_its_patience_is_abandoned_and_fetched_again() {
    let patience_us = 1_000_000;
    let (m, _) = Machine::rejoining(Mode::ActiveActive, ME, P, PENDING);
    let mut m = m.with_transfer_patience(patience_us / 1_000);
    assert_eq!(m.next_deadline_us(), None, "nothing is timed before a plan");
    m.on_coordinator(CoordinatorToNode::RejoinPlan { partition: P, source: 2, from_seq: 5 });
    let first = fetching(&m);
    assert_eq!(m.next_deadline_us(), Some(0), "the patience starts at the next tick");
    let t0 = 5_000_000;
    assert!(m.tick(t0).is_empty());
    assert_eq!(m.next_deadline_us(), Some(t0 + patience_us));
    // A piece arrives: the patience starts again from it. A report that does not grow, or of
    // another fetch, does not.
    m.on_fetch_progress(first, 64 * 1024, t0 + 900_000);
    m.on_fetch_progress(first, 64 * 1024, t0 + 1_500_000);
    m.on_fetch_progress(first + 7, 1 << 20, t0 + 1_600_000);
    assert_eq!(m.next_deadline_us(), Some(t0 + 900_000 + patience_us));
    assert!(m.tick(t0 + 900_000 + patience_us - 1).is_empty(), "not a microsecond early");
    let again = m.tick(t0 + 900_000 + patience_us);
    let second = match &again[..] {
        [Effect::AbandonFetch { id }, Effect::Fetch(FetchOrder { id: second, source: 2, after_seq: 4, delay_ms, retrying: Some(why), .. })]
            if *id == first =>
        {
            assert_eq!(*delay_ms, CONNECT_RETRY_MS);
            assert!(why.contains("nothing of the transfer arrived for 1000 ms"), "{why}");
            *second
        }
        other => panic!("{other:?}"),
    };
    assert_ne!(second, first);
    let mut src = source(4);
    assert!(m.on_fetched(first, fetched(&mut src)).is_empty(), "the abandoned fetch's late outcome is ignored");
    assert!(matches!(m.standing(), Standing::Rejoining { .. }));
    // The retry's patience counts from after its delay.
    let t1 = t0 + 3_000_000;
    assert!(m.tick(t1).is_empty());
    assert_eq!(m.next_deadline_us(), Some(t1 + CONNECT_RETRY_MS * 1_000 + patience_us));
    // Every attempt silent: the last one's patience gives the rejoin up.
    let mut now = t1;
    let mut gave_up = Vec::new();
    for _ in 0..REJOIN_FETCH_ATTEMPTS {
        now = m.next_deadline_us().expect("a fetch is watched");
        gave_up = m.tick(now);
        // The next tick starts the new fetch's patience.
        m.tick(now);
        if matches!(m.standing(), Standing::Failed { .. }) {
            break;
        }
    }
    assert!(
        matches!(&gave_up[..], [Effect::AbandonFetch { .. }, Effect::Failed { reason }, Effect::Emit(_)]
            if reason.contains("after 10 attempts") && reason.contains("nothing of the transfer arrived")),
        "at {now}: {gave_up:?}"
    );
    assert_eq!(m.next_deadline_us(), None);
}

/// A machine that replaces another (its node drops the partition's state and rejoins)
/// numbers its fetches after the replaced one's: the replaced machine's fetch, answering
/// late, cannot pass for the new machine's first.
#[test]
fn a_replacing_machine_ignores_the_replaced_ones_late_fetch() {
    let (mut old, _) = Machine::rejoining(Mode::ActiveActive, ME, P, PENDING);
    old.on_coordinator(CoordinatorToNode::RejoinPlan { partition: P, source: 1, from_seq: 5 });
    let stale = fetching(&old);
    let (fresh, _) = Machine::rejoining(Mode::ActiveActive, ME, P, PENDING);
    let mut m = fresh.numbering_fetches_after(&old);
    m.on_coordinator(CoordinatorToNode::RejoinPlan { partition: P, source: 2, from_seq: 5 });
    assert_ne!(fetching(&m), stale);
    let mut deposed = source(4);
    assert!(m.on_fetched(stale, fetched(&mut deposed)).is_empty(), "the replaced machine's copy is not installed");
    assert!(matches!(m.standing(), Standing::Rejoining { .. }));
}

/// Issue 16, "a corrupt copy": the receiver rejects a chunk whose rows do not match its
/// checksum; the machine fetches again, and the good copy is installed.
#[test]
fn a_damaged_copy_is_rejected_and_fetched_again() {
    let (mut m, _) = Machine::rejoining(Mode::ActiveActive, ME, P, PENDING);
    m.on_coordinator(CoordinatorToNode::RejoinPlan { partition: P, source: 2, from_seq: 3 });
    let mut src = source(2);
    let damaged = copy_of(&mut src, true).map(|_| unreachable!("a damaged chunk is refused")).unwrap_err();
    assert!(damaged.to_string().contains("checksum"), "{damaged}");
    let retry = m.on_fetched(fetching(&m), Err(RejoinError::Transfer(damaged)));
    assert!(
        matches!(&retry[..], [Effect::Fetch(FetchOrder { retrying: Some(why), .. })] if why.contains("checksum")),
        "{retry:?}"
    );
    let mut done = m.on_fetched(fetching(&m), fetched(&mut src));
    done.extend(m.catch_up(usize::MAX, true));
    assert!(emitted(&done).iter().any(|m| matches!(m, NodeToCoordinator::Rejoined { snapshot_seq: 2, .. })));
    assert_eq!(m.replica_mut().unwrap().state_digest(), src.state_digest(), "the copy is the source's state");
}

/// docs/design.md §10, "Catching up under load": a replica whose copy is installed catches
/// up a slice at a time, holding what keeps arriving, and reports `Rejoined` only once nothing
/// is held and its carrier has nothing more for it.
#[test]
fn a_joiner_catches_up_in_slices_and_rejoins_only_when_nothing_waits() {
    let (mut m, _) = Machine::rejoining(Mode::ActiveActive, ME, P, PENDING);
    m.on_coordinator(CoordinatorToNode::RejoinPlan { partition: P, source: 2, from_seq: 5 });
    for seq in 5..=12 {
        m.on_coordinator(batch(seq));
    }
    let mut src = source(4);
    let mut out = m.on_fetched(fetching(&m), fetched(&mut src));
    assert!(m.catching_up(), "eight batches held: more than the first slice");
    assert_eq!(m.refusal().as_deref(), Some("rejoining"), "not serving while it catches up");
    assert!(m.on_coordinator(batch(13)).is_empty(), "a batch arriving meanwhile is held");
    out.extend(m.catch_up(3, true));
    assert!(m.catching_up());
    out.extend(m.catch_up(usize::MAX, false));
    assert!(m.catching_up(), "the carrier still has messages for it");
    assert!(!emitted(&out).iter().any(|m| matches!(m, NodeToCoordinator::Rejoined { .. })));
    out.extend(m.catch_up(usize::MAX, true));
    assert!(!m.catching_up());
    let msgs = emitted(&out);
    let results = result_seqs(&msgs);
    assert_eq!(results, (5..=13).collect::<Vec<_>>(), "every batch once, in order");
    assert!(matches!(msgs.last(), Some(NodeToCoordinator::Rejoined { partition: P, snapshot_seq: 4 })));
    let ready = out.iter().find_map(|e| match e {
        Effect::Ready { start: Began::Copy { held, .. }, .. } => Some(*held),
        _ => None,
    });
    assert_eq!(ready, Some(9), "nine batches replayed");
    assert_eq!(m.standing(), Standing::Serving);
}

/// The batches whose results `msgs` carry, in order.
fn result_seqs(msgs: &[&NodeToCoordinator]) -> Vec<Seq> {
    msgs.iter()
        .filter_map(|m| match m {
            NodeToCoordinator::Results(r) => Some(r.seq),
            _ => None,
        })
        .collect()
}

/// A copy older than the plan's batch is not installed (it would miss batches sent to no one
/// else): fetched again.
#[test]
fn a_stale_copy_is_refused_and_fetched_again() {
    let (mut m, _) = Machine::rejoining(Mode::ActiveActive, ME, P, PENDING);
    m.on_coordinator(CoordinatorToNode::RejoinPlan { partition: P, source: 2, from_seq: 9 });
    let mut old = source(3);
    let retry = m.on_fetched(fetching(&m), fetched(&mut old));
    assert!(
        matches!(&retry[..], [Effect::Fetch(FetchOrder { retrying: Some(why), .. })] if why.contains("batch 3, before batch 8")),
        "{retry:?}"
    );
    assert!(m.replica().is_none());
}

/// Found by `glass sim --mode active-passive --seed 16`: a copy from the source a newer plan
/// replaced (a promotion happened while it was on its way) is dropped; only the named source's
/// copy is installed.
#[test]
fn a_copy_from_a_replaced_source_is_dropped() {
    let (mut m, _) = Machine::rejoining(Mode::ActivePassive, ME, P, PENDING);
    m.on_coordinator(CoordinatorToNode::RejoinPlan { partition: P, source: 1, from_seq: 3 });
    let first = fetching(&m);
    let replan = m.on_coordinator(CoordinatorToNode::RejoinPlan { partition: P, source: 2, from_seq: 5 });
    assert!(
        matches!(replan[..], [Effect::AbandonFetch { id }, Effect::Fetch(FetchOrder { source: 2, after_seq: 4, .. })] if id == first),
        "the old plan's fetch is abandoned: {replan:?}"
    );
    let mut deposed = source(4);
    assert!(m.on_fetched(first, fetched(&mut deposed)).is_empty(), "the old source's copy is not used");
    assert!(m.replica().is_none());
    let mut new_primary = source(4);
    let mut done = m.on_fetched(fetching(&m), fetched(&mut new_primary));
    done.extend(m.catch_up(usize::MAX, true));
    assert!(emitted(&done).iter().any(|m| matches!(m, NodeToCoordinator::Rejoined { snapshot_seq: 4, .. })));
    assert_eq!(m.replica().unwrap().role(), ReplicaRole::Backup, "a passive mode's rejoiner is a backup");
}

/// A refused rejoin ends the rejoin with the coordinator's reason.
#[test]
fn a_refused_rejoin_gives_up_with_the_reason() {
    let (mut m, _) = Machine::rejoining(Mode::ActiveActive, ME, P, PENDING);
    let out = m.on_coordinator(CoordinatorToNode::RejoinRefused { partition: P, reason: "not serving".into() });
    assert!(matches!(&out[..], [Effect::Failed { reason }, Effect::Emit(_)] if reason.contains("not serving")));
}

/// The passive modes' promotion, message by message: a backup applies shipments and
/// acknowledges them (and what it already holds), is promoted at the first unanswered batch,
/// drops a deposed primary's late shipment, and ships from the batch after `ShipTo`.
#[test]
fn a_backup_is_promoted_then_ships_after_ship_to() {
    let mut primary = Replica::with_role(1, P, ReplicaRole::Primary, Store::Lean(population()), PENDING);
    let backup = Replica::with_role(ME, P, ReplicaRole::Backup, Store::Lean(population()), PENDING);
    let mut m = Machine::serving(Mode::ActivePassive, backup, PENDING);
    let mut shipments = Vec::new();
    for seq in 1..=3 {
        let CoordinatorToNode::Batch(b) = batch(seq) else { unreachable!() };
        let mut out = Vec::new();
        primary.take_batch(b, &mut out).unwrap();
        shipments.extend(out.into_iter().filter_map(|e| match e {
            Emit::Ship(s) => Some(s),
            Emit::ToCoordinator(_) => None,
        }));
    }
    let acks = m.on_shipment(shipments[0].clone(), 1);
    assert!(matches!(acks[..], [Effect::Reply { to: 1, msg: PeerReply::ShipAck { seq: 1, .. } }]));
    let again = m.on_shipment(shipments[0].clone(), 1);
    assert!(
        matches!(again[..], [Effect::Reply { msg: PeerReply::ShipAck { seq: 1, .. }, .. }]),
        "what it holds is acknowledged again: {again:?}"
    );
    let promoted = m.on_coordinator(CoordinatorToNode::Promote { partition: P, first_unanswered: 2 });
    assert!(
        matches!(emitted(&promoted)[..], [NodeToCoordinator::Promoted { applied_seq: 1, next_seq: 2, .. }]),
        "{promoted:?}"
    );
    assert!(m.on_shipment(shipments[1].clone(), 1).is_empty(), "a deposed primary's shipment is dropped");
    assert!(m.on_coordinator(CoordinatorToNode::ShipTo { partition: P, backup: 2 }).is_empty());
    let ran = m.on_coordinator(batch(2));
    assert!(ran.iter().any(|e| matches!(e, Effect::Emit(Emit::Ship(s)) if s.seq == 2)), "{ran:?}");
    assert_eq!(m.replica().unwrap().role(), ReplicaRole::Primary);
}

/// Found by `glass sim --mode active-passive --seed 29`: a backup whose copy predates a newer
/// plan (a promotion replaced its source while the copy was on its way) starts the rejoin
/// over when that plan arrives.
#[test]
fn a_newer_plan_than_the_installed_copy_starts_the_rejoin_over() {
    let (mut m, _) = Machine::rejoining(Mode::ActivePassive, ME, P, PENDING);
    m.on_coordinator(CoordinatorToNode::RejoinPlan { partition: P, source: 1, from_seq: 3 });
    let mut old = source(2);
    m.on_fetched(fetching(&m), fetched(&mut old));
    m.catch_up(usize::MAX, true);
    assert_eq!(m.standing(), Standing::Serving);
    let over = m.on_coordinator(CoordinatorToNode::RejoinPlan { partition: P, source: 2, from_seq: 9 });
    assert!(matches!(over[..], [Effect::Fetch(FetchOrder { source: 2, after_seq: 8, .. })]), "{over:?}");
    assert!(matches!(m.standing(), Standing::Rejoining { .. }));
    let late = m.on_coordinator(CoordinatorToNode::RejoinPlan { partition: P, source: 2, from_seq: 9 });
    assert!(
        matches!(late[..], [Effect::AbandonFetch { .. }, Effect::Fetch(FetchOrder { .. })]),
        "a duplicate plan restarts the fetch: {late:?}"
    );
}

/// docs/design.md §10, "A full-stack backup that rejoins": the backup's own log follows its
/// primary's log base only when, cut, it leaves the state the base starts from. Here the
/// primary checkpointed after the backup's load (restart recovery checkpoints on opening), so
/// its base starts past the backup's load checkpoint — the case `glass sim --mode full-stack
/// --seed 85` found diverging, when a partition back alone from its log still checkpointed.
/// The machine asks for the own-log restart, which refuses with nothing changed, then fetches
/// the primary's checkpoint image with the base (a base backup), installs it, applies the
/// base and serves with the primary's state.
#[test]
fn a_full_stack_backup_whose_log_cannot_follow_installs_the_primarys_checkpoint_image() {
    use engine::conventional::{Medium, MemoryMedium};
    use engine::schema::{keys, t};
    use engine::Storage;
    use node::fullstack::{FullStack, Restart};
    use node::snapshot::{log_base_pieces, LogBaseReceiver};

    let load = |m: &MemoryMedium, ship| {
        FullStack::load_scaled_on(Medium::Memory(m.clone()), 1..=1, 7, Scale::tiny(), 0, ship, &mut |_| {}).unwrap()
    };
    let (primary_medium, backup_medium) = (MemoryMedium::new(), MemoryMedium::new());
    drop(load(&backup_medium, false));
    let mut f = load(&primary_medium, true);
    // A committed transaction the backup never received: the recovery below then ends past
    // the load checkpoint.
    let s = f.session();
    s.begin(1);
    s.update::<t::Stocks, _>(keys::stock(1, 1), |r| r.s_quantity = 1001).unwrap();
    s.commit().unwrap();
    drop(f);
    // The primary restarts and recovers from its own log, checkpointing on opening (as a
    // node recovered the usual way does: `FullStack::recover`).
    let (f, _) = FullStack::recover_on(Medium::Memory(primary_medium.clone()), 0, None).unwrap();
    let mut primary = Replica::recovered(2, P, f, PENDING);
    primary.resume_at(1).unwrap();
    primary.ship_from_now_on().unwrap();
    // Taken between batches; its bytes read later, as the sending thread does.
    let (base, _) = primary.log_base().unwrap().read(false).unwrap();
    let receive = |image: Option<&[u8]>| {
        let mut r = LogBaseReceiver::new(P, "node 2".into(), 0, image.is_some());
        let pieces = log_base_pieces(&base, image, 1, P, 4096);
        pieces.into_iter().find_map(|p| r.accept(p).unwrap()).unwrap()
    };

    let (mut m, _) = Machine::rejoining(Mode::FullStack, ME, P, PENDING);
    let plan = m.on_coordinator(CoordinatorToNode::RejoinPlan { partition: P, source: 2, from_seq: 1 });
    assert!(matches!(plan[..], [Effect::Fetch(FetchOrder { kind: FetchKind::LogBase, .. })]), "{plan:?}");
    let restart = match &m.on_fetched(fetching(&m), Ok(Fetched::LogBase(receive(None))))[..] {
        [Effect::Recover { restart: restart @ Restart::FollowBase { cut, .. } }] => {
            assert_eq!(*cut, engine::conventional::CutAt::Checkpoint, "the primary never was a backup");
            restart.clone()
        }
        other => panic!("{other:?}"),
    };
    let Err(refused) = FullStack::restart_on(Medium::Memory(backup_medium.clone()), 0, &restart) else {
        panic!("the backup's own log cannot follow a base starting past its checkpoint")
    };
    assert!(refused.to_string().contains("does not reach the point"), "{refused}");
    let again = m.on_recovered(Err(RejoinError::Recovery(refused)));
    assert!(
        matches!(&again[..], [Effect::Fetch(FetchOrder { kind: FetchKind::BaseBackup, delay_ms: 0, retrying: Some(why), .. })]
            if why.contains("checkpoint image")),
        "{again:?}"
    );

    // A base whose image is damaged does not hold together: fetched again.
    let image = primary.log_base().unwrap().read(true).unwrap().1.expect("the checkpoint image");
    let mut damaged = image.clone();
    damaged[64] ^= 1;
    let retry = m.on_fetched(fetching(&m), Ok(Fetched::LogBase(receive(Some(&damaged)))));
    assert!(
        matches!(&retry[..], [Effect::Fetch(FetchOrder { kind: FetchKind::BaseBackup, retrying: Some(why), .. })]
            if why.contains("checksum")),
        "{retry:?}"
    );

    let restart = match &m.on_fetched(fetching(&m), Ok(Fetched::LogBase(receive(Some(&image)))))[..] {
        [Effect::Recover { restart: restart @ Restart::Image(_) }] => restart.clone(),
        other => panic!("{other:?}"),
    };
    let (f, _) = FullStack::restart_on(Medium::Memory(backup_medium.clone()), 0, &restart).unwrap();
    let mut done = m.on_recovered(Ok(f));
    done.extend(m.catch_up(usize::MAX, true));
    assert!(emitted(&done).iter().any(|m| matches!(m, NodeToCoordinator::Rejoined { snapshot_seq: 0, .. })));
    assert!(done.iter().any(|e| matches!(e, Effect::Ready { .. })));
    let backup = m.replica_mut().unwrap();
    assert_eq!(backup.role(), ReplicaRole::Backup);
    assert_eq!(backup.state_digest(), primary.state_digest(), "image + base = the primary's state");
}
