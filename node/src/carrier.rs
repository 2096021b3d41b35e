//! The node's carrier (docs/design.md §14, "One carrier"): the one place where a node's
//! machines meet their world. The node process (tokio and QUIC, [`crate::process`]) and the
//! simulator (`sim`, its seeded network and disks) both hand their machines' effects to
//! [`carry`] (the [`NodeMachine`]'s) and [`carry_partition`] (a [`PartitionMachine`]'s),
//! and differ only in the [`NodeLinks`] / [`PartitionLinks`] they pass — how a message
//! reaches a coordinator, an executor or a backup, how a dial or a restart recovery is run.
//! What a node does with its machines' effects is decided here, once:
//!
//! - effects are carried in the order the machine returned them, and the effects a carried
//!   effect's outcome produces (a backup lost, a backup's queue filling, a recovered
//!   database) are carried after those already queued, in the same pass;
//! - a shipment is queued for each backup the machine names; a backup whose link is gone or
//!   whose queue already holds [`PEER_QUEUE_MAX`] shipments is reported lost
//!   ([`NodeMachine::on_backup_lost`]: no longer shipped to nor waited for), and each other
//!   backup's queue length goes back to the machine ([`NodeMachine::on_peer_queue`], which
//!   tells the leader of a backup falling behind), then the gates' figures are published;
//! - a partition's pending state digest copy is taken before any of its effects and again
//!   after them (the batches a call executed may have begun one: it is taken before any
//!   further batch runs);
//! - a restart recovery's outcome goes back to the partition's machine at once
//!   ([`PartitionMachine::on_recovered`]), unless the partition was dropped meanwhile (it
//!   rejoined from scratch).
//!
//! The carrier never waits and keeps no clock: the world says what time it is. A world whose
//! sends may wait for room (the process's bounded queues) collects them and waits after the
//! pass, in order: a machine is never held across a wait.

use std::collections::VecDeque;

use wire::channel::{CoordinatorToNode, NodeToCoordinator, PeerReply};
use wire::messages::{CoordinatorId, NodeId, PartitionId, Shipment, StateDigest};

use crate::error::{RejoinError, ReplicaError};
use crate::fullstack::{FullStack, Restart};
use crate::machine::{Began, Effect, FetchOrder, NodeEffect, NodeMachine, PartitionMachine};
use crate::replica::Emit;

/// Shipments a primary queues for one backup's link before it drops that backup from
/// shipping rather than wait for it (docs/design.md §10, "Catching up under load"): past a
/// quarter of it, the leader hears that the backup falls behind.
pub const PEER_QUEUE_MAX: usize = 4_096;

/// What became of a shipment queued for one backup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queued {
    /// On the backup's link, whose queue now holds this many shipments (this one included).
    Holds(usize),
    /// The link is gone, or its queue was full ([`PEER_QUEUE_MAX`]): the backup is lost.
    Lost,
}

/// What a node's world does for [`carry`]. Implemented by the node process and by the
/// simulator. No method may wait on a peer.
pub trait NodeLinks {
    /// The node's machine.
    fn machine(&mut self) -> &mut NodeMachine;
    /// Microseconds on the node machine's clock.
    fn now_us(&self) -> u64;
    /// Sends `msg` on coordinator `coordinator`'s link (lost with the link if it is down).
    fn to_coordinator(&mut self, coordinator: CoordinatorId, msg: NodeToCoordinator);
    /// Hands `msg` to the partition's machine (its executor).
    fn to_partition(&mut self, partition: PartitionId, msg: CoordinatorToNode);
    /// Queues `shipment` on the link to each of `backups`, pushing onto `queued` what became
    /// of it for each, in the order of `backups`.
    fn ship(&mut self, backups: &[NodeId], shipment: Shipment, queued: &mut Vec<(NodeId, Queued)>);
    /// Opens a new link to backup `backup`'s node, replacing any older one, and dials it;
    /// shipments queued on it meanwhile wait for the dial. The outcome goes to
    /// [`NodeMachine::on_peer_dial`] with `generation`.
    fn open_peer(&mut self, backup: NodeId, generation: u64);
    /// Dials the link to backup `backup` again, if it is still the link of `generation`.
    fn dial_peer(&mut self, backup: NodeId, generation: u64);
    /// Closes the link to backup `backup`; what is queued on it is dropped.
    fn close_peer(&mut self, backup: NodeId);
    /// Dials coordinator `coordinator`; the outcome goes to [`NodeMachine::on_link_up`] or
    /// [`NodeMachine::on_dial_failed`].
    fn dial(&mut self, coordinator: CoordinatorId);
    /// Every partition drops its state and rejoins (its messages sent before are lost with
    /// the link that broke).
    fn rejoin_all(&mut self);
    /// The partition's replica drops its state and rejoins if it serves
    /// ([`PartitionMachine::rejoins_when_left_out`]).
    fn rejoin(&mut self, partition: PartitionId);
    /// The coordinator shuts the cluster down.
    fn shutdown(&mut self, reason: String);
    /// A coordinator message for a partition this node does not hold.
    fn not_held(&mut self, partition: PartitionId, name: &'static str);
    /// The ship gates' figures changed (published for status requests).
    fn gates_changed(&mut self) {}
}

/// Carries out the node machine's `effects` in `links`' world (see the module header).
pub fn carry<L: NodeLinks + ?Sized>(links: &mut L, effects: Vec<NodeEffect>) {
    let mut queue: VecDeque<NodeEffect> = effects.into();
    let mut queued = Vec::new();
    while let Some(effect) = queue.pop_front() {
        match effect {
            NodeEffect::ToCoordinator { coordinator, msg } => links.to_coordinator(coordinator, msg),
            NodeEffect::ToPartition { partition, msg } => links.to_partition(partition, msg),
            NodeEffect::Ship { backups, shipment } => {
                let partition = shipment.partition;
                queued.clear();
                links.ship(&backups, shipment, &mut queued);
                let now = links.now_us();
                for &(backup, q) in &queued {
                    let more = match q {
                        Queued::Holds(n) if n <= PEER_QUEUE_MAX => {
                            links.machine().on_peer_queue(backup, partition, n, PEER_QUEUE_MAX, now)
                        }
                        Queued::Holds(_) | Queued::Lost => links.machine().on_backup_lost(backup),
                    };
                    queue.extend(more);
                }
                links.gates_changed();
            }
            NodeEffect::OpenPeer { backup, generation } => links.open_peer(backup, generation),
            NodeEffect::DialPeer { backup, generation } => links.dial_peer(backup, generation),
            NodeEffect::ClosePeer { backup } => links.close_peer(backup),
            NodeEffect::Dial { coordinator } => links.dial(coordinator),
            NodeEffect::RejoinAll => links.rejoin_all(),
            NodeEffect::Rejoin { partition } => links.rejoin(partition),
            NodeEffect::Shutdown { reason } => links.shutdown(reason),
            NodeEffect::NotHeld { partition, name } => links.not_held(partition, name),
        }
    }
}

/// What a partition's world does for [`carry_partition`]: the node process's executor
/// thread, or the simulator. `R` is where a peer's reply goes. No method may wait on a peer.
pub trait PartitionLinks<R> {
    /// The partition's machine; `None` if the partition was dropped (it rejoins from scratch).
    fn machine(&mut self) -> Option<&mut PartitionMachine<R>>;
    /// Takes the state digest copy the partition's machine has pending, if any, and starts
    /// computing the digest from it, off the partition's thread.
    fn take_digest_copy(&mut self);
    /// A message for the coordinator or a shipment for the backups: to the node machine
    /// ([`NodeMachine::on_emit`]).
    fn emit(&mut self, emitted: Emit);
    /// A reply to the peer `to` that sent a shipment.
    fn reply(&mut self, to: R, msg: PeerReply);
    /// Starts fetching the partition's starting state as `order` says; what arrives so far
    /// goes to [`PartitionMachine::on_fetch_progress`], the outcome to
    /// [`PartitionMachine::on_fetched`], both under the order's id.
    fn fetch(&mut self, order: FetchOrder);
    /// Stops fetch `id` (the machine no longer waits for it).
    fn abandon_fetch(&mut self, id: u64);
    /// Restarts the partition's full-stack database as `restart` says.
    fn recover(&mut self, restart: &Restart) -> Result<FullStack, RejoinError>;
    /// The replica serves, from `start`, with starting state `digest`.
    fn ready(&mut self, digest: StateDigest, start: Began);
    /// The partition cannot rejoin: why.
    fn failed(&mut self, reason: String);
    /// The replica stopped: why.
    fn stopped(&mut self, reason: String);
    /// The replica refused a message (`rejoining`: while it rejoined).
    fn refused(&mut self, error: ReplicaError, rejoining: bool);
}

/// Carries out a partition machine's `effects` in `links`' world (see the module header).
pub fn carry_partition<R: Clone, L: PartitionLinks<R> + ?Sized>(links: &mut L, effects: Vec<Effect<R>>) {
    links.take_digest_copy();
    let mut queue: VecDeque<Effect<R>> = effects.into();
    while let Some(effect) = queue.pop_front() {
        match effect {
            Effect::Emit(emitted) => links.emit(emitted),
            Effect::Reply { to, msg } => links.reply(to, msg),
            Effect::Fetch(order) => links.fetch(order),
            Effect::AbandonFetch { id } => links.abandon_fetch(id),
            Effect::Recover { restart } => {
                let recovered = links.recover(&restart);
                let Some(m) = links.machine() else { return };
                queue.extend(m.on_recovered(recovered));
            }
            Effect::Ready { digest, start } => links.ready(digest, start),
            Effect::Failed { reason } => links.failed(reason),
            Effect::Stopped { reason } => links.stopped(reason),
            Effect::Refused { error, rejoining } => links.refused(error, rejoining),
        }
    }
    links.take_digest_copy();
}

#[cfg(test)]
mod tests {
    //! The carrier's own decisions (docs/design.md §14), with a world that records what it
    //! is asked and answers a shipment as the test says; the machine is the real one.

    use wire::config::{ClusterConfig, Mode, Shipping};
    use wire::messages::{Results, Seq, ShippedLog};

    use super::*;
    use crate::replica::ReplicaRole;

    const ME: NodeId = 1;
    const BACKUP: NodeId = 2;
    const P: PartitionId = 1;

    /// A world that records what it is asked; each shipment finds the backup's queue as
    /// `queue` says.
    struct Recorder {
        machine: NodeMachine,
        queue: Queued,
        sent: Vec<NodeToCoordinator>,
        gates_changed: usize,
    }

    impl NodeLinks for Recorder {
        fn machine(&mut self) -> &mut NodeMachine {
            &mut self.machine
        }
        fn now_us(&self) -> u64 {
            1_000
        }
        fn to_coordinator(&mut self, _: CoordinatorId, msg: NodeToCoordinator) {
            self.sent.push(msg);
        }
        fn to_partition(&mut self, _: PartitionId, _: CoordinatorToNode) {}
        fn ship(&mut self, backups: &[NodeId], _: Shipment, queued: &mut Vec<(NodeId, Queued)>) {
            queued.extend(backups.iter().map(|&b| (b, self.queue)));
        }
        fn open_peer(&mut self, _: NodeId, _: u64) {}
        fn dial_peer(&mut self, _: NodeId, _: u64) {}
        fn close_peer(&mut self, _: NodeId) {}
        fn dial(&mut self, _: CoordinatorId) {}
        fn rejoin_all(&mut self) {}
        fn rejoin(&mut self, _: PartitionId) {}
        fn shutdown(&mut self, _: String) {}
        fn not_held(&mut self, _: PartitionId, _: &'static str) {}
        fn gates_changed(&mut self) {
            self.gates_changed += 1;
        }
    }

    /// Node 1 of the default cluster in active-passive with synchronous shipping: primary of
    /// partition 1, whose backup is node 2; coordinator 0 leads.
    fn primary(queue: Queued) -> Recorder {
        let file = ClusterConfig::parse(include_str!("../../cluster.toml")).unwrap();
        let config = file.with_mode(Mode::ActivePassive, Some(Shipping::Sync));
        let roles: Vec<(PartitionId, ReplicaRole)> =
            config.partitions_on_node(ME).map(|p| (p.id, ReplicaRole::of(config.mode(), p, ME))).collect();
        assert_eq!(roles[0], (P, ReplicaRole::Primary), "node 1 is partition 1's primary");
        let mut machine = NodeMachine::new(&config, ME, &roles, 0);
        for c in config.coordinator_ids() {
            machine.on_link_up(c, 0);
        }
        machine.on_coordinator(0, 1, CoordinatorToNode::TakeOver { epoch: 1 });
        Recorder { machine, queue, sent: Vec::new(), gates_changed: 0 }
    }

    fn shipment(seq: Seq) -> Emit {
        Emit::Ship(Shipment {
            partition: P,
            primary: ME,
            seq,
            last_ts: None,
            pieces: Vec::new(),
            log: ShippedLog::Wal(Vec::new()),
            answers: Vec::new(),
        })
    }

    /// Batch `seq`'s shipment goes out, and its results are held by the gate for the backup.
    fn ship_and_hold(w: &mut Recorder, seq: Seq) -> Vec<NodeEffect> {
        let ship = w.machine.on_emit(shipment(seq), 1_000);
        assert!(matches!(&ship[..], [NodeEffect::Ship { backups, .. }] if backups == &[BACKUP]), "{ship:?}");
        let results = Emit::ToCoordinator(NodeToCoordinator::Results(Results { partition: P, seq, results: vec![] }));
        assert!(w.machine.on_emit(results, 1_000).is_empty(), "sync shipping holds the results for the backup");
        ship
    }

    /// docs/design.md §10: a backup whose link is gone is dropped from shipping, and the
    /// results its gate held for it go to the leader in the same pass.
    #[test]
    fn a_lost_backup_releases_what_was_held_for_it() {
        let mut w = primary(Queued::Lost);
        let ship = ship_and_hold(&mut w, 1);
        carry(&mut w, ship);
        assert!(
            matches!(&w.sent[..], [NodeToCoordinator::Results(r)] if r.seq == 1),
            "the held results are released: {:?}",
            w.sent
        );
        assert_eq!(w.gates_changed, 1);
        assert!(w.machine.backups().get(&P).is_none_or(|b| b.is_empty()), "no longer shipped to");
    }

    /// A queue already past `PEER_QUEUE_MAX` counts as full: the backup is lost, as a full
    /// link queue would make it.
    #[test]
    fn a_queue_past_its_bound_loses_the_backup() {
        let mut w = primary(Queued::Holds(PEER_QUEUE_MAX + 1));
        let ship = ship_and_hold(&mut w, 1);
        carry(&mut w, ship);
        assert!(matches!(&w.sent[..], [NodeToCoordinator::Results(_)]), "{:?}", w.sent);
    }

    /// docs/design.md §10, "Catching up under load": a backup's queue past a quarter of its
    /// bound is reported to the leader, and the backup is still shipped to and waited for.
    #[test]
    fn a_backup_falling_behind_is_reported_and_kept() {
        let mut w = primary(Queued::Holds(PEER_QUEUE_MAX / 4 + 1));
        let ship = ship_and_hold(&mut w, 1);
        carry(&mut w, ship);
        assert!(
            matches!(&w.sent[..], [NodeToCoordinator::ShippingBehind { partition: P, backup: BACKUP, .. }]),
            "{:?}",
            w.sent
        );
        assert_eq!(w.machine.backups().get(&P), Some(&vec![BACKUP]), "still shipped to");
        // Within a quarter: nothing to report.
        let mut w = primary(Queued::Holds(PEER_QUEUE_MAX / 4));
        let ship = ship_and_hold(&mut w, 1);
        carry(&mut w, ship);
        assert!(w.sent.is_empty(), "{:?}", w.sent);
    }

    /// The link to a backup's node is the node machine's (docs/design.md §14): opened at
    /// start, dialled again `CONNECT_RETRY_MS` after a failed dial (never before), an
    /// outcome for a link replaced since ignored, and closed once no gate ships to it.
    #[test]
    fn a_backup_link_is_redialled_when_the_machine_says_and_closed_when_unneeded() {
        use crate::machine::{PeerDial, PeerState, CONNECT_RETRY_MS};
        let mut w = primary(Queued::Holds(1));
        let m = &mut w.machine;
        let opened = m.start();
        let generation = match &opened[..] {
            [NodeEffect::OpenPeer { backup: BACKUP, generation }] => *generation,
            other => panic!("one link, to the backup: {other:?}"),
        };
        assert_eq!(m.peer(BACKUP), Some(PeerState::Dialing));
        assert!(m.on_peer_dial(BACKUP, generation, PeerDial::Unreachable, 1_000).is_empty());
        let due = 1_000 + CONNECT_RETRY_MS * 1_000;
        assert_eq!(m.peer(BACKUP), Some(PeerState::Down { redial_at_us: due }));
        assert!(m.next_deadline_us() <= due);
        let dials = |effects: &[NodeEffect]| {
            effects.iter().filter(|e| matches!(e, NodeEffect::DialPeer { backup: BACKUP, .. })).count()
        };
        assert_eq!(dials(&m.tick(due - 1, |_| None)), 0, "not before the retry is due");
        let again = m.tick(due, |_| None);
        assert!(again.contains(&NodeEffect::DialPeer { backup: BACKUP, generation }), "{again:?}");
        assert_eq!(dials(&m.tick(due + 1, |_| None)), 0, "one dial at a time");
        // A stale link's outcome changes nothing.
        assert!(m.on_peer_dial(BACKUP, generation + 7, PeerDial::Up, due).is_empty());
        assert_eq!(m.peer(BACKUP), Some(PeerState::Dialing));
        m.on_peer_dial(BACKUP, generation, PeerDial::Up, due);
        assert_eq!(m.peer(BACKUP), Some(PeerState::Up));
        // A membership without the backup: no gate ships to it, so its link closes.
        let membership = CoordinatorToNode::Membership { partition: P, epoch: 5, live: vec![ME] };
        let effects = m.on_coordinator(0, 1, membership);
        assert!(effects.contains(&NodeEffect::ClosePeer { backup: BACKUP }), "{effects:?}");
        assert_eq!(m.peer(BACKUP), None);
        assert_eq!(dials(&m.tick(due * 10, |_| None)), 0, "a closed link is not dialled");
    }

    /// A backup's node that refuses this one (not who the configuration says) is lost: no
    /// longer shipped to nor waited for, and its link closed.
    #[test]
    fn a_refused_backup_link_loses_the_backup() {
        use crate::machine::PeerDial;
        let mut w = primary(Queued::Holds(1));
        let [NodeEffect::OpenPeer { generation, .. }] = w.machine.start()[..] else { panic!("one link") };
        ship_and_hold(&mut w, 1);
        let effects = w.machine.on_peer_dial(BACKUP, generation, PeerDial::Refused, 1_000);
        assert!(effects.contains(&NodeEffect::ClosePeer { backup: BACKUP }), "{effects:?}");
        carry(&mut w, effects);
        assert!(matches!(&w.sent[..], [NodeToCoordinator::Results(r)] if r.seq == 1), "{:?}", w.sent);
        assert!(w.machine.backups().get(&P).is_none_or(|b| b.is_empty()));
    }
}
