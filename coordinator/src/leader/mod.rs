//! The coordinator's state machine, which the leader of the coordinator group runs
//! (docs/design.md §11, "Decide, then act"): it takes client requests, replica messages and
//! clock ticks, and returns what to send. It owns timestamp ordering ([`TimestampClock`]),
//! routing ([`Router`]), per-partition batching and backpressure ([`Sequencer`]), result
//! agreement ([`Agreement`]), the partitions' lifecycle (loading → serving → stopped or
//! unavailable) and failure detection by heartbeats. It performs no I/O and reads no clock:
//! every call takes `now_us`, microseconds on a clock the caller keeps monotonic and aligned
//! with the Unix epoch (its milliseconds become timestamps).
//!
//! This file holds the [`Coordinator`] and each partition's state, the constructors, the
//! dispatch of a node's messages and the small accessors. `impl Coordinator` is split by
//! concern (those docs/design.md §4 lists: ordering, replication, agreement, failure
//! detection, promotion, rejoin, recovery), each file stating the guarantees it keeps:
//! - `types`: what the machine returns and reports ([`Output`], [`Event`], [`Detection`]),
//!   a partition's [`Phase`] and [`PartitionStatus`];
//! - `admission`: client and digest requests admitted into batches, the results agreed and
//!   answered — every request gets exactly one reply;
//! - `multi_partition`: a transaction spanning partitions admitted on all of them or on
//!   none, its pieces' outcomes forwarded, and one answer joined from every partition's;
//! - `lifecycle`: a partition loading, serving, stopped or unavailable;
//! - `promotion`: a passive partition's backup promoted, and a full-stack partition back
//!   from its last primary's log with the lost batches replayed;
//! - `detection`: failure and lag detection, and what a node's failure does;
//! - `rejoin`: rejoin plans, and the catch-up throttle while a replica rejoins;
//! - `status`: the memberships the coordinator group records, and status for displays;
//! - `resume`: a new leader's take-over (docs/design.md §11).

use std::collections::BTreeMap;

use foldhash::{HashMap, HashMapExt};
use wire::channel::{ChannelMessage, NodeToCoordinator};
use wire::config::{AgreementRule, ClusterConfig, Mode};
use wire::messages::{ClientResult, CoordinatorId, NodeId, PartitionId, PieceOutcome, Seq, StateDigest, Timestamp};

mod admission;
mod detection;
mod lifecycle;
mod multi_partition;
mod promotion;
mod rejoin;
mod resume;
mod retries;
mod status;
mod types;

pub use resume::{PartitionResume, Resumed};
pub use retries::{RetryStats, RETRIED_KEPT, RETRIES_WAITING_MAX};
pub use types::{
    ClientId, ClientRef, Detection, Event, Output, PartitionStatus, Phase, DIGEST_REQUESTS_INFLIGHT_MAX,
    JOINER_PATIENCE_TIMEOUTS, NOBODY,
};

use crate::agreement::{Agreement, Ignored, Quorum};
use crate::catch_up::{CatchUp, CatchUpPolicy};
use crate::error::CoordinatorError;
use crate::router::Router;
use crate::sequencer::{Sequencer, SequencerLimits};
use crate::timestamp::TimestampClock;

#[derive(Debug)]
struct Partition {
    id: PartitionId,
    phase: Phase,
    sequencer: Sequencer,
    /// Tags of the open batch's transactions, in its order.
    open_tags: Vec<ClientRef>,
    agreement: Agreement<ClientRef>,
    /// How many agreeing replicas answer a batch (`agreement` in cluster.toml).
    quorum: Quorum,
    /// Answered batches a replica may leave unreported before it is failed.
    lag_batches_max: usize,
    /// Replicas lagging past `replica_lag_batches_max` behind a majority's answers, since
    /// when (docs/cluster.md, "Agreement").
    lagging_since: BTreeMap<NodeId, u64>,
    /// The cluster's replication mode: what the partition's decisions ask of it.
    mode: Mode,
    /// The state only the mode's way of replicating needs.
    replication: ModeState,
    /// Nodes rejoining, from the batch `Seq` on: they count once they report `Rejoined`.
    /// In active-active they receive every batch from the `Seq` on; in the passive modes the
    /// primary ships to them instead.
    joining: Vec<(NodeId, Seq)>,
    /// Nodes that asked to rejoin while a promotion or a restart recovery was under way:
    /// answered once it ends, with a plan from the partition as it then is. (Refused, a
    /// restarted node gave its partition up for good, and with every other partition's only
    /// replica elsewhere nothing could heal it: found by `glass sim --mode full-stack --seed
    /// 5639`.)
    deferred_rejoins: Vec<NodeId>,
    /// Its admitted rate, and the throttle while a replica of it catches up.
    catch_up: CatchUp,
    /// Load digests of replicas that reported `Ready`.
    loaded: BTreeMap<NodeId, StateDigest>,
    /// Digest requests waiting for batch `seq`.
    digest_waiters: BTreeMap<Seq, Vec<ClientRef>>,
    /// Multi-partition transactions whose home piece runs here, by timestamp: the batch it
    /// rides in and the remote pieces' outcomes received, kept for executors that start
    /// later (a promoted backup, a rejoining replica).
    piece_reads: BTreeMap<Timestamp, HeldReads>,
    /// Remote pieces decided here since the coordinator last joined them (see
    /// [`Coordinator::settle`]).
    pieces_done: Vec<(ClientRef, Timestamp)>,
}

/// The state only a partition's way of replicating needs, built from its mode
/// ([`ModeState::of`]).
#[derive(Debug)]
enum ModeState {
    /// Every live replica executes every batch.
    ActiveActive {
        /// Replicas rejoining or just rejoined — they execute batches sent before they
        /// counted, which may be decided without them — with the last batch they executed
        /// (or copied) and the last batch sent before they counted (`Seq::MAX` while
        /// rejoining): piece outcomes they may still need are kept until they reach it.
        catching_up: BTreeMap<NodeId, (Seq, Seq)>,
    },
    /// Active-passive or full stack: the primary (the only replica in the agreement)
    /// executes and ships its log to the backups.
    Passive(Passive),
}

impl ModeState {
    /// The state of a partition placed on `replicas` (the first is a passive mode's primary)
    /// under `mode`: the one place a partition's state depends on the mode.
    fn of(mode: Mode, replicas: &[NodeId]) -> ModeState {
        match mode.every_replica_executes() {
            true => ModeState::ActiveActive { catching_up: BTreeMap::new() },
            false => ModeState::Passive(Passive {
                mode,
                backups: replicas[1..].to_vec(),
                confirming: Vec::new(),
                unanswered: Default::default(),
                backup_applied: BTreeMap::new(),
                last_primary: None,
                lost: Default::default(),
            }),
        }
    }
}

/// A passive partition's replication state.
#[derive(Debug)]
struct Passive {
    /// The mode (active-passive or full stack): whether a replica keeps a log of its own.
    mode: Mode,
    /// The live backups (they receive log records from the primary, not batches from here).
    backups: Vec<NodeId>,
    /// Backups that rejoined, each with the first batch sent after the membership naming it:
    /// the primary waits for them (sync shipping) once that membership reached it, which the
    /// primary's answer to that batch proves — only then may one be promoted. Promoting one
    /// before would lose what the primary acknowledged without waiting for it. (Found by
    /// `glass sim --mode active-passive --shipping sync --seed 121`.)
    confirming: Vec<(NodeId, Seq)>,
    /// The batches sent to the primary and not yet answered, kept so a promoted backup can
    /// execute those it never received.
    unanswered: std::collections::VecDeque<wire::messages::Batch>,
    /// The last batch each backup reported applied ([`NodeToCoordinator::BackupApplied`]).
    backup_applied: BTreeMap<NodeId, Seq>,
    /// The last executing replica, once none is left (the partition is unavailable): in
    /// full-stack mode its write-ahead log holds every acknowledged transaction, so it alone
    /// may bring the partition back by restart recovery.
    last_primary: Option<NodeId>,
    /// Full stack: the batches sent to the last executing replica that it never answered
    /// (their clients were told "outcome unknown"), kept until a replica that came back from
    /// its log reports executing them. Restart recovery keeps what of them took effect; the
    /// rest — a multi-partition transaction's home piece parked for its remote reads, a batch
    /// lost on a broken link — would be half of a transaction whose other partitions
    /// committed theirs. They are replayed to the recovered replica, which skips what its log
    /// shows committed (docs/design.md §10). (Found by `glass sim --mode full-stack --seed
    /// 85`: a Payment's customer updated, its HISTORY row never written.)
    lost: std::collections::VecDeque<wire::messages::Batch>,
}

impl Passive {
    /// The last executing replica failed: its unanswered batches are lost to it — kept for a
    /// replay in full-stack mode, dropped in active-passive (no replica can come back from a
    /// log there).
    fn lose_unanswered(&mut self) {
        match self.mode.replica_keeps_own_log() {
            true => self.lost.extend(self.unanswered.drain(..)),
            false => self.unanswered.clear(),
        }
    }

    /// Whether the partition, unavailable, may come back from its last primary's log (and
    /// with it the pieces its failure left in doubt).
    fn may_resume(&self) -> bool {
        self.mode.replica_keeps_own_log() && self.last_primary.is_some()
    }
}

/// The remote pieces' outcomes of one multi-partition transaction, kept at its home partition.
#[derive(Debug)]
struct HeldReads {
    /// The home partition's batch the home piece rides in.
    seq: Seq,
    /// Who asked, the transaction, and the batch each remote piece rides in.
    tag: ClientRef,
    input: engine::procedures::TxnInput,
    remotes: Vec<(PartitionId, Seq)>,
    outcomes: Vec<(PartitionId, PieceOutcome)>,
}

impl HeldReads {
    /// Whether partition `q`'s piece's outcome arrived.
    fn has(&self, q: PartitionId) -> bool {
        self.outcomes.iter().any(|(from, _)| *from == q)
    }
}

/// A multi-partition transaction admitted and not yet answered.
#[derive(Debug)]
struct MultiTxn {
    ts: Timestamp,
    home: PartitionId,
    remotes: Vec<PartitionId>,
    /// Each partition's answer for its piece, as they come (`None`: a remote piece done).
    answers: Vec<Option<ClientResult>>,
    /// Remote partitions lost for good before their piece's outcome reached the home
    /// partition (whose piece was then told to abort).
    lost: Vec<PartitionId>,
}

#[derive(Debug)]
struct NodeLiveness {
    last_heard_us: u64,
    live: bool,
}

/// The coordinator.
#[derive(Debug)]
pub struct Coordinator {
    /// The cluster's replication mode (each partition holds it too).
    mode: Mode,
    clock: TimestampClock,
    router: Router,
    partitions: BTreeMap<PartitionId, Partition>,
    nodes: BTreeMap<NodeId, NodeLiveness>,
    heartbeat_us: u64,
    failure_timeout_us: u64,
    load_deadline_us: u64,
    next_heartbeat_us: u64,
    membership_epoch: u64,
    last_ts: Option<Timestamp>,
    /// Multi-partition transactions admitted and not yet answered.
    multi: HashMap<ClientRef, MultiTxn>,
    /// The nodes each partition's replicas are placed on in `cluster.toml`.
    placement: BTreeMap<PartitionId, Vec<NodeId>>,
    /// Retried requests being answered (`retries`).
    retries: retries::Retries,
}

impl Coordinator {
    /// A coordinator for `config` (validated here for this build), started at `now_us`; every
    /// partition starts loading, and every node counts as heard from at `now_us`.
    pub fn new(config: &ClusterConfig, now_us: u64) -> Result<Coordinator, CoordinatorError> {
        Coordinator::new_as(config, config.coordinator().id, now_us)
    }

    /// [`Coordinator::new`] for coordinator `me` of the configuration (its id goes into every
    /// timestamp it issues).
    pub fn new_as(config: &ClusterConfig, me: CoordinatorId, now_us: u64) -> Result<Coordinator, CoordinatorError> {
        config.validate()?;
        let limits = SequencerLimits::from_config(&config.limits);
        let catch_up = CatchUpPolicy::from_config(&config.limits);
        let mode = config.mode();
        let partitions = config
            .partitions
            .iter()
            .map(|p| {
                let executing = if mode.every_replica_executes() { &p.replicas[..] } else { &p.replicas[..1] };
                let quorum = match config.agreement {
                    AgreementRule::All => Quorum::All,
                    AgreementRule::Majority => Quorum::Majority { replicas: p.replicas.len() },
                };
                let lag_batches_max = config.limits.replica_lag_batches_max as usize;
                let partition = Partition {
                    id: p.id,
                    phase: Phase::Loading,
                    sequencer: Sequencer::new(p.id, limits),
                    open_tags: Vec::with_capacity(limits.batch_txns_max),
                    agreement: Agreement::new(p.id, executing.iter().copied()).with_quorum(quorum, lag_batches_max),
                    quorum,
                    lag_batches_max,
                    lagging_since: BTreeMap::new(),
                    mode,
                    replication: ModeState::of(mode, &p.replicas),
                    joining: Vec::new(),
                    deferred_rejoins: Vec::new(),
                    catch_up: CatchUp::new(catch_up),
                    loaded: BTreeMap::new(),
                    digest_waiters: BTreeMap::new(),
                    piece_reads: BTreeMap::new(),
                    pieces_done: Vec::new(),
                };
                (p.id, partition)
            })
            .collect();
        // A spare node (placed nowhere) counts once it asks to join a partition.
        let nodes = config
            .nodes
            .iter()
            .map(|n| {
                let placed = config.partitions_on_node(n.id).next().is_some();
                (n.id, NodeLiveness { last_heard_us: now_us, live: placed })
            })
            .collect();
        let t = &config.timeouts;
        Ok(Coordinator {
            mode,
            clock: TimestampClock::new(me),
            router: Router::new(config),
            partitions,
            nodes,
            heartbeat_us: t.heartbeat_ms * 1_000,
            failure_timeout_us: t.failure_timeout_ms * 1_000,
            load_deadline_us: now_us.saturating_add(t.load_timeout_s * 1_000_000),
            next_heartbeat_us: now_us,
            membership_epoch: 0,
            last_ts: None,
            multi: HashMap::new(),
            placement: config.partitions.iter().map(|p| (p.id, p.replicas.clone())).collect(),
            retries: retries::Retries::default(),
        })
    }

    /// A message from node `from` (the network code authenticated it): results, load status,
    /// heartbeats, rejoin and promotion progress, piece outcomes.
    pub fn on_node_message(&mut self, from: NodeId, msg: NodeToCoordinator, now_us: u64) -> Vec<Output> {
        let out = self.on_node_message_unsettled(from, msg, now_us);
        self.settle_watching(out, now_us)
    }

    fn on_node_message_unsettled(&mut self, from: NodeId, msg: NodeToCoordinator, now_us: u64) -> Vec<Output> {
        let mut out = Vec::new();
        let Some(node) = self.nodes.get_mut(&from) else {
            out.push(Output::Event(Event::Ignored { node: from, what: "a node not in cluster.toml".into() }));
            return out;
        };
        if !node.live {
            if let NodeToCoordinator::RejoinRequest { partition } = msg {
                // A restarted node: it counts as alive again, and may rejoin.
                node.live = true;
                node.last_heard_us = now_us;
                self.on_rejoin_request(from, partition, &mut out);
                return out;
            }
            out.push(Output::Event(Event::Ignored { node: from, what: "a message from a failed node".into() }));
            if let NodeToCoordinator::Rejoined { partition, .. } = msg {
                self.tell_left_out(from, partition, &mut out);
            }
            return out;
        }
        node.last_heard_us = node.last_heard_us.max(now_us);
        match msg {
            NodeToCoordinator::RejoinRequest { partition } => self.on_rejoin_request(from, partition, &mut out),
            NodeToCoordinator::Rejoined { partition, snapshot_seq } => {
                self.on_rejoined(from, partition, snapshot_seq, &mut out)
            }
            NodeToCoordinator::Promoted { partition, applied_seq, next_seq } => {
                if let Some(p) = self.partitions.get_mut(&partition) {
                    p.on_promoted(from, applied_seq, next_seq, &mut self.membership_epoch, &mut out);
                    if p.phase == Phase::Serving {
                        self.after_promotion(partition, applied_seq, next_seq, &mut out);
                    }
                }
            }
            NodeToCoordinator::Results(results) => {
                self.on_results(from, admission::BatchReport::Outputs(results), &mut out)
            }
            NodeToCoordinator::ResultsDigest(digest) => {
                self.on_results(from, admission::BatchReport::Digest(digest), &mut out)
            }
            NodeToCoordinator::ResultsForgotten { partition, seq } => {
                self.on_results_forgotten(from, partition, seq, &mut out)
            }
            NodeToCoordinator::StateDigest { partition, seq, digest } => {
                if let Some(p) = self.partitions.get_mut(&partition) {
                    match p.agreement.on_state_digest(from, seq, digest) {
                        Ok(verdicts) => {
                            for v in verdicts {
                                p.apply(v, &mut out);
                            }
                        }
                        // Nobody waits for it (a joiner's, or a request a new leader never saw).
                        Err(Ignored::Stopped | Ignored::NotExpected { .. }) => {}
                        Err(e) => out.push(Output::Event(Event::Ignored { node: from, what: e.to_string() })),
                    }
                }
            }
            NodeToCoordinator::PieceReads(reads) => {
                self.deliver_reads(reads, &mut out);
            }
            NodeToCoordinator::Recalled { partition: _, recall, executed_seq, remembered_after, found } => {
                let answer = retries::RecallAnswer { recall, executed_seq, remembered_after, found };
                self.on_recalled(from, answer, now_us, &mut out)
            }
            NodeToCoordinator::LoadStatus { partition, state } => self.on_load_status(from, partition, state, &mut out),
            NodeToCoordinator::Heartbeat { .. } => {}
            // Take-over reports and fencing concern the coordinator group (docs/design.md
            // §11), which handles them before this machine sees anything.
            m @ (NodeToCoordinator::Standing { .. }
            | NodeToCoordinator::HeldBatches { .. }
            | NodeToCoordinator::Fenced { .. }) => out.push(Output::Event(Event::Ignored {
                node: from,
                what: format!("a {} outside a take-over", m.name()),
            })),
            NodeToCoordinator::ShippingBehind { partition, backup, queued } => {
                // Only the partition's primary (in a passive mode, its first live replica) ships.
                let p = self
                    .partitions
                    .get_mut(&partition)
                    .filter(|p| !p.mode.every_replica_executes() && p.agreement.live().first() == Some(&from));
                if let Some(event) = p.and_then(|p| p.catch_up.slow_down(partition, backup, queued, now_us)) {
                    out.push(Output::Event(event));
                }
            }
            NodeToCoordinator::BackupApplied { partition, seq } => {
                let passive = self.partitions.get_mut(&partition).and_then(Partition::passive_mut);
                if let Some(s) =
                    passive.filter(|s| s.backups.contains(&from) || s.confirming.iter().any(|c| c.0 == from))
                {
                    let applied = s.backup_applied.entry(from).or_default();
                    *applied = (*applied).max(seq);
                }
            }
        }
        out
    }

    /// The last timestamp issued (for a restart to resume after).
    pub fn last_timestamp(&self) -> Option<Timestamp> {
        self.last_ts
    }

    /// What retried requests met so far (docs/design.md §11, "Exactly-once answers").
    pub fn retry_stats(&self) -> RetryStats {
        self.retries.stats()
    }

    /// Whether node `node` counts as alive.
    pub fn is_node_live(&self, node: NodeId) -> bool {
        self.nodes.get(&node).is_some_and(|n| n.live)
    }

    fn live_nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes.iter().filter(|(_, n)| n.live).map(|(&id, _)| id)
    }
}

impl Partition {
    /// The passive modes' replication state (`None` in active-active).
    fn passive(&self) -> Option<&Passive> {
        match &self.replication {
            ModeState::Passive(s) => Some(s),
            ModeState::ActiveActive { .. } => None,
        }
    }

    /// Whether the partition, unavailable, may come back from its last primary's log.
    fn may_resume(&self) -> bool {
        self.phase == Phase::Unavailable && self.passive().is_some_and(Passive::may_resume)
    }

    fn passive_mut(&mut self) -> Option<&mut Passive> {
        match &mut self.replication {
            ModeState::Passive(s) => Some(s),
            ModeState::ActiveActive { .. } => None,
        }
    }

    /// Active-active: the replicas catching up (`None` in the passive modes).
    fn catching_up_mut(&mut self) -> Option<&mut BTreeMap<NodeId, (Seq, Seq)>> {
        match &mut self.replication {
            ModeState::ActiveActive { catching_up } => Some(catching_up),
            ModeState::Passive(_) => None,
        }
    }

    /// The live backups (none in active-active).
    fn backups(&self) -> &[NodeId] {
        self.passive().map_or(&[], |s| &s.backups)
    }

    /// The rejoining replicas that receive batches: active-active ones (a passive mode's
    /// get their primary's shipments).
    fn batch_joiners(&self) -> impl Iterator<Item = NodeId> + '_ {
        let active = self.mode.every_replica_executes();
        self.joining.iter().map(|(n, _)| *n).filter(move |_| active)
    }

    /// The live replicas, each once: the executing ones (the primary, in the passive modes),
    /// then the backups (a backup being promoted is named where it is first found: a new
    /// leader that re-issues a take-over's promotion holds it both as executing and as
    /// confirming).
    fn members(&self) -> impl Iterator<Item = NodeId> + '_ {
        let confirming = self.passive().into_iter().flat_map(|s| s.confirming.iter().map(|c| c.0));
        let mut named = std::collections::BTreeSet::new();
        self.agreement.live().iter().chain(self.backups()).copied().chain(confirming).filter(move |&n| named.insert(n))
    }
}
