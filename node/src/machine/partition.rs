//! The node's decisions about one partition, sans I/O: the [`PartitionMachine`] an executor
//! thread drives (and the simulator drives the same way). It owns, for one partition held by
//! one node:
//!
//! - what a coordinator message or a primary's shipment does (to the [`Replica`] once it
//!   serves, or to the rejoin under way);
//! - the rejoin protocol (docs/design.md §10): ask the coordinator, take its plan, hold the
//!   batches (or, passive modes, the shipments) it sends meanwhile, fetch the starting state
//!   from the live replica the plan names, verify it is recent enough, retry a failed fetch
//!   [`REJOIN_FETCH_ATTEMPTS`] times [`CONNECT_RETRY_MS`] apart, give up past that or past
//!   [`REJOIN_HELD_BATCHES_MAX`] held batches, install it, execute or apply what it held, and
//!   report `Rejoined`; and abandon a fetch that brings nothing for the transfer's patience
//!   ([`PartitionMachine::tick`], [`TRANSFER_PATIENCE_MS`]) and fetch again;
//! - full stack: when restart recovery from the node's own log runs, and where its log is cut
//!   first (the fork point of a promoted successor's copy of it), then what is applied on top;
//!   and, when its own log cannot reach the point its primary's log base starts from, the
//!   fall-back to the primary's checkpoint image (a base backup);
//! - whether a tool's or a peer's request can be answered now, or why it is refused.
//!
//! It takes messages and completions (a fetched copy, a recovered database) and returns
//! [`Effect`]s: messages to send, a fetch to start, a recovery to run, status to publish. The
//! carrier — the node process's executor thread, or `sim` — performs them and hands their
//! outcomes back; it decides nothing. Guarantees: a partition serves only a starting state it
//! verified (a copy as of the plan's batch or later, or the state recovery rebuilt); every
//! batch and shipment held during a rejoin is executed or applied, in arrival order, before
//! `Rejoined` is reported; a rejoin that cannot finish ends in [`Effect::Failed`], never in a
//! partition that serves a guess.

use wire::channel::{CoordinatorToNode, NodeToCoordinator, PeerReply};
use wire::config::Mode;
use wire::messages::{LoadState, NodeId, PartitionId, Seq, Shipment, StateDigest};

use crate::error::{RejoinError, ReplicaError};
use crate::fullstack::{FullStack, Restart};
use crate::replica::{Emit, Replica, ReplicaRole};
use crate::snapshot::LogBaseReceived;

/// Batches a rejoining replica holds while its copy arrives; past it the rejoin fails.
pub const REJOIN_HELD_BATCHES_MAX: usize = 65_536;
/// Attempts to fetch a rejoining replica's starting state before giving up.
pub const REJOIN_FETCH_ATTEMPTS: u32 = 10;
/// Milliseconds between two attempts to reach a peer (a dial, a fetch).
pub const CONNECT_RETRY_MS: u64 = 200;

mod fetch;
use fetch::FetchWatch;
pub use fetch::{base_restart, FetchKind, FetchOrder, Fetched, TRANSFER_PATIENCE_MS};
/// What the carrier does for a [`PartitionMachine`]. `R` is where a peer's reply goes (the
/// node process: the peer connection's reply queue; the simulator: the peer's node id).
#[derive(Debug)]
pub enum Effect<R> {
    /// A message for the coordinator, or a shipment for the backups (through the node's ship
    /// gates).
    Emit(Emit),
    /// A reply to the peer that sent a shipment (its acknowledgement).
    Reply { to: R, msg: PeerReply },
    /// Fetch the starting state as `FetchOrder` says; report what arrives so far to
    /// [`PartitionMachine::on_fetch_progress`] and hand the outcome to
    /// [`PartitionMachine::on_fetched`], both under the order's id.
    Fetch(FetchOrder),
    /// Stop fetch `id` (it brought nothing for the transfer's patience, or a new plan or
    /// leader replaced it); its outcome, should one still come, is ignored.
    AbandonFetch { id: u64 },
    /// Restart this node's full-stack database as `restart` says (recovery from its own log,
    /// cut first to follow a primary's log base, or over the primary's checkpoint image:
    /// [`FullStack::restart_on`]); hand the outcome to [`PartitionMachine::on_recovered`].
    Recover { restart: Restart },
    /// The replica serves (a rejoin finished, from `start`); `digest` is its starting
    /// state's, as of `start`'s batch (no scan of the caught-up state, which would hold the
    /// replica up just as it starts to count).
    Ready { digest: StateDigest, start: Began },
    /// The partition cannot rejoin: why. Tools and peers are refused from now on.
    Failed { reason: String },
    /// The replica stopped (the coordinator stopped the partition, or the replica refused a
    /// message that breaks its order): why.
    Stopped { reason: String },
    /// The replica refused a message (logged by the node process; a violation in the
    /// simulator unless it is [`ReplicaError::Stopped`]).
    Refused { error: ReplicaError, rejoining: bool },
}

/// What a finished rejoin started from (for the node's log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Began {
    /// A copy of a live replica as of batch `seq`; `held` batches and shipments executed or
    /// applied on top while it caught up.
    Copy { seq: Seq, held: usize },
    /// This node's own log, recovered (or, `image_bytes > 0`, the primary's checkpoint image
    /// installed instead), with its primary's log base (`bytes`) as of batch `seq` applied on
    /// top, then `held` shipments.
    LogBase { seq: Seq, bytes: usize, image_bytes: usize, held: usize },
    /// This node's own log alone, serving from batch `from_seq`.
    OwnLog { from_seq: Seq },
}

/// A request a tool or a peer makes of a partition's replica, as far as answering it now is
/// concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// A copy of the replica after batch `after_seq`.
    Snapshot { after_seq: Seq },
    /// The replica's state digest.
    Digest,
    /// A full-stack primary's log base as of batch `after_seq`.
    LogBase { after_seq: Seq },
    /// Anything answered at once (a replica read, a shipment).
    Other,
}

/// What a rejoining replica holds until its starting state is installed.
#[derive(Debug)]
struct Held<R> {
    /// Batches and remote pieces' outcomes, in arrival order.
    stream: Vec<CoordinatorToNode>,
    /// How many of `stream` are batches.
    batches: usize,
    /// Passive modes: the primary's shipments, with where to acknowledge them.
    shipments: Vec<(Shipment, R)>,
}

impl<R> Default for Held<R> {
    fn default() -> Self {
        Held { stream: Vec::new(), batches: 0, shipments: Vec::new() }
    }
}

/// Full stack: what restart recovery is run for.
#[derive(Debug)]
enum Recovering {
    /// Apply the primary's log base on top, then serve as its backup.
    Backup(LogBaseReceived),
    /// Serve the recovered partition alone, executing from batch `from_seq`.
    Resume { from_seq: Seq },
}

/// A rejoin under way.
#[derive(Debug)]
struct Rejoin<R> {
    /// The coordinator's plan: the source, and the first batch sent to this replica.
    plan: Option<(NodeId, Seq)>,
    /// Fetches started for the current plan.
    attempts: u32,
    /// The fetch under way, if any.
    fetch: Option<FetchWatch>,
    /// What the fetches of the current plan ask for.
    kind: FetchKind,
    held: Held<R>,
    /// Full stack: a recovery asked for and not yet done.
    recovering: Option<Recovering>,
}

impl<R> Default for Rejoin<R> {
    fn default() -> Self {
        Rejoin { plan: None, attempts: 0, fetch: None, kind: FetchKind::Copy, held: Held::default(), recovering: None }
    }
}

/// Batches and shipments a catching-up replica executes or applies in one
/// [`PartitionMachine::catch_up`] call while its inbox is empty: between two looks at the
/// inbox, a few milliseconds of work.
pub const CATCH_UP_SLICE_IDLE: usize = 32;
/// What a replica catches up on at once when its starting state is installed (the rest, a
/// slice at a time while its inbox is empty).
pub const CATCH_UP_SLICE_BUSY: usize = 4;

/// A rejoin whose starting state is installed, executing (or applying) what it held and what
/// keeps arriving, a slice at a time ([`PartitionMachine::catch_up`]), until nothing waits
/// (docs/design.md §10, "Catching up under load").
#[derive(Debug)]
struct CatchingUp<R> {
    replica: Box<Replica>,
    /// Coordinator messages not yet served, in arrival order.
    stream: std::collections::VecDeque<CoordinatorToNode>,
    /// Batches in `stream`.
    batches: usize,
    /// Shipments not yet applied, in arrival order.
    shipments: std::collections::VecDeque<(Shipment, R)>,
    /// The last acknowledgement of the shipments applied, sent at the end (they are
    /// cumulative).
    last_ack: Option<Effect<R>>,
    snapshot_seq: Seq,
    start: Began,
    /// The starting state's digest.
    start_digest: StateDigest,
    /// Batches and shipments executed or applied so far.
    replayed: usize,
}

#[derive(Debug)]
enum State<R> {
    Serving(Box<Replica>),
    Rejoining(Rejoin<R>),
    CatchingUp(Box<CatchingUp<R>>),
    /// A rejoin that failed: refuses everything until the node restarts.
    Failed(String),
}

/// Where a partition's machine stands, for reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    Serving,
    Rejoining { plan: Option<(NodeId, Seq)>, held: usize, recovering: bool },
    Failed { reason: String },
}

/// One partition on one node: its replica once it serves, or the rejoin that brings it
/// back.
#[derive(Debug)]
pub struct PartitionMachine<R> {
    node: NodeId,
    partition: PartitionId,
    mode: Mode,
    pending_batches_max: usize,
    state: State<R>,
    /// A serving backup between a new coordinator leader's `TakeOver` and its first
    /// membership (docs/design.md §11): shipments are held, not applied.
    fence: Option<Fence<R>>,
    /// Whether the replicas this machine installs take a state digest by a copy the carrier
    /// steps ([`Replica::set_digest_by_copy`], [`PartitionMachine::take_digest_copy`]).
    digest_by_copy: bool,
    /// How long a fetch may bring nothing before it is abandoned, in microseconds.
    transfer_patience_us: u64,
    /// The id of the next fetch ordered.
    next_fetch_id: u64,
}

/// A passive backup's fence during a coordinator take-over. The new leader builds on where
/// each replica stood when it answered `TakeOver`; a backup that went on applying its
/// primary's shipments meanwhile could be promoted past that point, over batches the leader
/// never saw — and the leader's own batches for those numbers would be lost. So the backup
/// holds every shipment until the leader's membership (of epoch `membership_from` or later)
/// says whether its primary is still live: then it applies them, or drops them and waits to
/// be promoted or left out. (Found by `glass sim --mode active-passive --coordinator-faults
/// --seed 290`.)
#[derive(Debug)]
struct Fence<R> {
    membership_from: u64,
    held: Vec<(Shipment, R)>,
}

/// Shipments a backup holds during a take-over; past it the fence drops what it held (the
/// backup then falls behind, and the primary's sync gate never hears from it: it is left out
/// and rejoins).
pub const FENCE_HELD_SHIPMENTS_MAX: usize = 65_536;

impl<R> PartitionMachine<R> {
    /// The machine of a replica that loaded (or was otherwise given) its state and serves.
    pub fn serving(mode: Mode, replica: Replica, pending_batches_max: usize) -> PartitionMachine<R> {
        assert!(pending_batches_max >= 1);
        PartitionMachine {
            node: replica.node(),
            partition: replica.partition(),
            mode,
            pending_batches_max,
            state: State::Serving(Box::new(replica)),
            fence: None,
            digest_by_copy: false,
            transfer_patience_us: TRANSFER_PATIENCE_MS * 1_000,
            next_fetch_id: 1,
        }
    }

    /// Has this machine's replicas, now and once installed, take the state digest a batch
    /// asks for by a copy that the carrier takes ([`PartitionMachine::take_digest_copy`])
    /// and steps while the partition executes on (docs/design.md §10, "Checks during
    /// traffic"). The carrier must then take the copy after every call that can execute a
    /// batch.
    pub fn digesting_by_copy(mut self) -> PartitionMachine<R> {
        self.digest_by_copy = true;
        match &mut self.state {
            State::Serving(r) => r.set_digest_by_copy(true),
            State::CatchingUp(c) => c.replica.set_digest_by_copy(true),
            State::Rejoining(_) | State::Failed(_) => {}
        }
        self
    }

    /// The digest copy a batch that asked for the state digest began, with the replica it
    /// copies (serving, or catching up after a rejoin).
    pub fn take_digest_copy(&mut self) -> Option<(crate::replica::DigestCopy, &mut Replica)> {
        let replica = self.executing_replica_mut()?;
        let copy = replica.take_digest_copy()?;
        Some((copy, replica))
    }

    /// The replica that executes batches: serving, or catching up after a rejoin (a digest
    /// copy it began is stepped against it: docs/design.md §10, "Checks during traffic").
    pub fn executing_replica_mut(&mut self) -> Option<&mut Replica> {
        match &mut self.state {
            State::Serving(r) => Some(r),
            State::CatchingUp(c) => Some(&mut c.replica),
            State::Rejoining(_) | State::Failed(_) => None,
        }
    }

    /// The machine of a replica that rejoins a running cluster (`glass node --rejoin` or
    /// `--join`, or a node whose coordinator link broke), with its first effect: the request
    /// to the coordinator.
    pub fn rejoining(
        mode: Mode,
        node: NodeId,
        partition: PartitionId,
        pending_batches_max: usize,
    ) -> (PartitionMachine<R>, Vec<Effect<R>>) {
        let m = PartitionMachine {
            node,
            partition,
            mode,
            pending_batches_max,
            state: State::Rejoining(Rejoin::default()),
            fence: None,
            digest_by_copy: false,
            transfer_patience_us: TRANSFER_PATIENCE_MS * 1_000,
            next_fetch_id: 1,
        };
        let ask = Effect::Emit(Emit::ToCoordinator(NodeToCoordinator::RejoinRequest { partition }));
        (m, vec![ask])
    }

    /// The machine of a partition that could not load: it refuses everything until the node
    /// restarts.
    pub fn failed(
        mode: Mode,
        node: NodeId,
        partition: PartitionId,
        pending_batches_max: usize,
        reason: String,
    ) -> PartitionMachine<R> {
        PartitionMachine {
            node,
            partition,
            mode,
            pending_batches_max,
            state: State::Failed(reason),
            fence: None,
            digest_by_copy: false,
            transfer_patience_us: TRANSFER_PATIENCE_MS * 1_000,
            next_fetch_id: 1,
        }
    }

    pub fn partition(&self) -> PartitionId {
        self.partition
    }

    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The replica, once it serves.
    pub fn replica(&self) -> Option<&Replica> {
        match &self.state {
            State::Serving(r) => Some(r),
            State::Rejoining(_) | State::CatchingUp(_) | State::Failed(_) => None,
        }
    }

    /// The replica, once it serves.
    pub fn replica_mut(&mut self) -> Option<&mut Replica> {
        match &mut self.state {
            State::Serving(r) => Some(r),
            State::Rejoining(_) | State::CatchingUp(_) | State::Failed(_) => None,
        }
    }

    /// Holds batches rather than executing them while a new leader's take-over or fetch waits
    /// behind them in the carrier's inbox (`true`), or lets the held ones run (`false`):
    /// [`Replica::set_holding`]. Only a serving replica holds.
    pub fn set_holding(&mut self, on: bool) {
        if let State::Serving(r) = &mut self.state {
            r.set_holding(on);
        }
    }

    /// Whether a held batch can run now: the carrier calls [`PartitionMachine::run_held`]
    /// before it takes anything else from its inbox (it came after the held batches).
    pub fn has_held_to_run(&self) -> bool {
        self.replica().is_some_and(Replica::has_held_to_run)
    }

    /// Runs the next held batch.
    pub fn run_held(&mut self) -> Vec<Effect<R>> {
        let State::Serving(replica) = &mut self.state else { return Vec::new() };
        emitted(replica, |r| {
            let mut out = Vec::new();
            r.run_held(&mut out).map(|()| out)
        })
    }

    /// Whether the rejoin's starting state is installed and the replica is catching up: the
    /// carrier calls [`PartitionMachine::catch_up`] until it is not.
    pub fn catching_up(&self) -> bool {
        matches!(self.state, State::CatchingUp(_))
    }

    /// Takes the replica out (the node drops its state to rejoin afresh); the machine is
    /// left failed.
    pub fn take_replica(&mut self) -> Option<Replica> {
        match std::mem::replace(&mut self.state, State::Failed("taken".into())) {
            State::Serving(r) => Some(*r),
            other => {
                self.state = other;
                None
            }
        }
    }

    /// Whether this replica drops its state and rejoins when the leader's membership leaves
    /// it out (`NodeEffect::Rejoin`): only if it serves — one already rejoining or catching
    /// up goes on with the rejoin it began. The node process and the simulator both ask here
    /// (docs/design.md §14).
    pub fn rejoins_when_left_out(&self) -> bool {
        matches!(self.state, State::Serving(_))
    }

    pub fn standing(&self) -> Standing {
        match &self.state {
            State::Serving(_) => Standing::Serving,
            State::Rejoining(j) => Standing::Rejoining {
                plan: j.plan,
                held: j.held.stream.len() + j.held.shipments.len(),
                recovering: j.recovering.is_some(),
            },
            State::CatchingUp(c) => {
                Standing::Rejoining { plan: None, held: c.stream.len() + c.shipments.len(), recovering: false }
            }
            State::Failed(reason) => Standing::Failed { reason: reason.clone() },
        }
    }

    /// The rejoin's plan (source, first batch), while one is under way.
    pub fn plan(&self) -> Option<(NodeId, Seq)> {
        match &self.state {
            State::Rejoining(j) => j.plan,
            State::Serving(_) | State::CatchingUp(_) | State::Failed(_) => None,
        }
    }

    /// Why a tool's or a peer's request cannot be served by this partition at all (`None`
    /// when it serves).
    pub fn refusal(&self) -> Option<String> {
        match &self.state {
            State::Serving(_) => None,
            State::Rejoining(_) | State::CatchingUp(_) => Some("rejoining".to_string()),
            State::Failed(reason) => Some(format!("partition {}: {reason}", self.partition)),
        }
    }

    /// Whether a request can be answered now (a serving replica): a snapshot once the replica
    /// executed its batch, a log base once the primary took one that far (a backup or a
    /// stopped replica refuses at once), a copy or a digest not in the middle of a parked
    /// batch. Requests to a partition that does not serve are answered (refused) at once.
    pub fn can_answer(&self, asked: Asked) -> bool {
        let State::Serving(replica) = &self.state else { return true };
        // A batch parked at a home piece is half run: copies and digests wait for its end.
        let parked = replica.parked_at().is_some();
        match asked {
            Asked::Snapshot { after_seq } => !parked && after_seq <= replica.applied_seq(),
            Asked::Digest => !parked,
            // Served or refused now; asked again once the base is recent enough.
            Asked::LogBase { after_seq } => !matches!(replica.log_base_for(after_seq), Ok(None)),
            Asked::Other => true,
        }
    }

    /// A message of the coordinator's stream for this partition.
    pub fn on_coordinator(&mut self, msg: CoordinatorToNode) -> Vec<Effect<R>>
    where
        R: Clone,
    {
        // Boundary assertions (docs/design.md §4): the node machine routes by partition, and a
        // carrier performs an `Effect::Recover` before it hands the machine anything else.
        assert!(msg.partition().is_none_or(|p| p == self.partition), "routed to its partition");
        assert!(
            !matches!(&self.state, State::Rejoining(j) if j.recovering.is_some()),
            "a recovery asked for is carried out before the next message"
        );
        match &mut self.state {
            State::Serving(replica) => {
                if let CoordinatorToNode::RejoinPlan { from_seq, .. } = &msg {
                    if replica.role() == ReplicaRole::Backup && replica.applied_seq() + 1 < *from_seq {
                        // A plan newer than the copy this backup installed: a promotion
                        // replaced the primary it copied while its copy was on its way. The
                        // coordinator does not count that copy; start over from the new one.
                        self.state = State::Rejoining(Rejoin::default());
                        self.fence = None;
                        return self.rejoin_step(msg);
                    }
                }
                match &msg {
                    CoordinatorToNode::TakeOver { epoch } if replica.role() == ReplicaRole::Backup => {
                        let membership_from = epoch << 32;
                        let held = self.fence.take().map(|f| f.held).unwrap_or_default();
                        self.fence = Some(Fence { membership_from, held });
                    }
                    CoordinatorToNode::Membership { epoch, .. }
                        if self.fence.as_ref().is_some_and(|f| *epoch >= f.membership_from) =>
                    {
                        // The membership first, so that the replica ships from whom it names.
                        let mut out = serve(replica, msg);
                        let fence = self.fence.take().expect("checked above");
                        for (shipment, reply) in fence.held {
                            out.extend(self.on_shipment(shipment, reply));
                        }
                        return out;
                    }
                    // A promotion drops what the fence held: the leader promotes this
                    // backup as it stood when it answered (the shipments came from a primary
                    // it left out).
                    CoordinatorToNode::Promote { .. } => {
                        if let Some(f) = self.fence.take() {
                            replica.count_refused_shipments(f.held.len());
                        }
                    }
                    _ => {}
                }
                serve(replica, msg)
            }
            State::Rejoining(_) => self.rejoin_step(msg),
            State::CatchingUp(c) => match msg {
                // A new leader knows nothing of the plan this replica rejoined under; a new
                // plan replaces it: the rejoin starts over (docs/design.md §11).
                CoordinatorToNode::TakeOver { .. } | CoordinatorToNode::RejoinPlan { .. } => {
                    self.state = State::Rejoining(Rejoin::default());
                    match msg {
                        CoordinatorToNode::TakeOver { .. } => {
                            let partition = self.partition;
                            vec![Effect::Emit(Emit::ToCoordinator(NodeToCoordinator::RejoinRequest { partition }))]
                        }
                        plan => self.rejoin_step(plan),
                    }
                }
                CoordinatorToNode::RejoinRefused { reason, .. } => {
                    self.give_up(format!("the coordinator refused the rejoin: {reason}"))
                }
                msg => {
                    let batch = matches!(msg, CoordinatorToNode::Batch(_));
                    if batch && c.batches >= REJOIN_HELD_BATCHES_MAX {
                        return self
                            .give_up(format!("more than {REJOIN_HELD_BATCHES_MAX} batches waiting while catching up"));
                    }
                    c.batches += batch as usize;
                    c.stream.push_back(msg);
                    Vec::new()
                }
            },
            State::Failed(_) => Vec::new(),
        }
    }

    /// A primary's shipment (passive modes), to acknowledge to `reply`: applied by a serving
    /// backup, held by a rejoining one, dropped unacknowledged by a failed one and by one that
    /// executes (promoted: the shipment is a deposed primary's).
    pub fn on_shipment(&mut self, shipment: Shipment, reply: R) -> Vec<Effect<R>>
    where
        R: Clone,
    {
        match &mut self.state {
            // A replica that executes was promoted (or rejoined as a primary's successor): a
            // shipment now comes from a deposed primary that has not learned it yet (its link
            // broke, or it went silent), whose batches the coordinator no longer counts.
            State::Serving(replica) if replica.role() != ReplicaRole::Backup => Vec::new(),
            State::Serving(replica) => match &mut self.fence {
                Some(f) if f.held.len() < FENCE_HELD_SHIPMENTS_MAX => {
                    f.held.push((shipment, reply));
                    Vec::new()
                }
                Some(_) => {
                    replica.count_refused_shipments(1);
                    Vec::new()
                }
                None => ship(replica, shipment, &reply),
            },
            State::Rejoining(j) => {
                j.held.shipments.push((shipment, reply));
                Vec::new()
            }
            State::CatchingUp(c) => {
                c.shipments.push_back((shipment, reply));
                Vec::new()
            }
            State::Failed(_) => Vec::new(),
        }
    }

    /// One coordinator message while rejoining: the plan, a resumption from this node's own
    /// log, a refusal, or a batch or piece outcome to hold (anything else is for a replica
    /// that executes: dropped — the installed state carries the partition's membership, and
    /// the coordinator counts this replica only once it reports `Rejoined`).
    fn rejoin_step(&mut self, msg: CoordinatorToNode) -> Vec<Effect<R>> {
        // A replica keeping a log of its own (full stack) starts from its primary's log base,
        // or comes back from its own log; any other copies its source's rows.
        let own_log = self.mode.replica_keeps_own_log();
        let State::Rejoining(j) = &mut self.state else { unreachable!("called while rejoining") };
        match msg {
            CoordinatorToNode::RejoinPlan { source, from_seq, .. } => {
                // A plan replacing one under way: its fetch may bring a state the new plan's
                // source never had (docs/design.md §11).
                let mut out: Vec<Effect<R>> =
                    j.fetch.take().map(|w| Effect::AbandonFetch { id: w.id }).into_iter().collect();
                j.plan = Some((source, from_seq));
                j.attempts = 1;
                j.kind = if own_log { FetchKind::LogBase } else { FetchKind::Copy };
                out.extend(self.order_fetch(0, None));
                out
            }
            CoordinatorToNode::ResumeFromLog { from_seq, .. } if own_log => {
                j.recovering = Some(Recovering::Resume { from_seq });
                vec![Effect::Recover { restart: Restart::OwnLog }]
            }
            CoordinatorToNode::RejoinRefused { reason, .. } => {
                self.give_up(format!("the coordinator refused the rejoin: {reason}"))
            }
            // A new leader knows nothing of the old one's plan, nor streams the batches it
            // promised: the rejoin starts over, asked of the new leader (docs/design.md §11).
            CoordinatorToNode::TakeOver { .. } => {
                let old = std::mem::take(j);
                let mut out: Vec<Effect<R>> =
                    old.fetch.map(|w| Effect::AbandonFetch { id: w.id }).into_iter().collect();
                let partition = self.partition;
                out.push(Effect::Emit(Emit::ToCoordinator(NodeToCoordinator::RejoinRequest { partition })));
                out
            }
            msg @ CoordinatorToNode::Batch(_) => {
                j.held.batches += 1;
                if j.held.batches > REJOIN_HELD_BATCHES_MAX {
                    return self.give_up(format!("more than {REJOIN_HELD_BATCHES_MAX} batches held while rejoining"));
                }
                j.held.stream.push(msg);
                Vec::new()
            }
            msg @ (CoordinatorToNode::PieceReads(_) | CoordinatorToNode::RederivePiece { .. }) => {
                if j.held.stream.len() - j.held.batches >= crate::replica::PIECE_READS_HELD_MAX {
                    return self.give_up("too many multi-partition piece outcomes held while rejoining".into());
                }
                j.held.stream.push(msg);
                Vec::new()
            }
            CoordinatorToNode::ResumeFromLog { .. }
            | CoordinatorToNode::Heartbeat { .. }
            | CoordinatorToNode::Membership { .. }
            | CoordinatorToNode::PartitionStopped { .. }
            | CoordinatorToNode::Shutdown { .. }
            | CoordinatorToNode::Promote { .. }
            | CoordinatorToNode::SendBatches { .. }
            | CoordinatorToNode::ShipTo { .. } => Vec::new(),
            // Executed nothing the coordinator counts: nothing kept.
            CoordinatorToNode::SendResults { partition, seqs } => seqs
                .into_iter()
                .take(wire::channel::control::SEND_RESULTS_MAX)
                .map(|seq| Effect::Emit(Emit::ToCoordinator(NodeToCoordinator::ResultsForgotten { partition, seq })))
                .collect(),
            // Remembers nothing yet: "not found", and trusted by no leader.
            CoordinatorToNode::RecallOutcomes { partition, recall, .. } => {
                vec![Effect::Emit(Emit::ToCoordinator(NodeToCoordinator::Recalled {
                    partition,
                    recall,
                    executed_seq: 0,
                    remembered_after: wire::messages::Timestamp(u64::MAX),
                    found: Vec::new(),
                }))]
            }
        }
    }

    /// The outcome of an [`Effect::Recover`] (full stack): the primary's log base applied on
    /// top and the replica a backup, or the recovered partition served alone from the
    /// coordinator's batch; a failed recovery ends the rejoin.
    pub fn on_recovered(&mut self, recovered: Result<FullStack, RejoinError>) -> Vec<Effect<R>>
    where
        R: Clone,
    {
        let (node, partition, pending) = (self.node, self.partition, self.pending_batches_max);
        let State::Rejoining(j) = &mut self.state else { return Vec::new() };
        let Some(why) = j.recovering.take() else { return Vec::new() };
        let f = match (recovered, &why) {
            (Ok(f), _) => f,
            // A backup needs none of its own log: when it cannot follow the primary's log base
            // (it lags the fork point, holds records its primary never applied, or the base
            // starts at a checkpoint it never had), or its recovery fails, it starts from the
            // primary's checkpoint image instead (docs/design.md §10).
            (Err(e), Recovering::Backup(base)) => {
                let why = match base.checkpoint {
                    None => format!("{e}; fetching the primary's checkpoint image"),
                    Some(_) => format!("the primary's checkpoint image did not install: {e}"),
                };
                j.kind = FetchKind::BaseBackup;
                return self.fetch_again(why, 0);
            }
            (Err(e), Recovering::Resume { .. }) => return self.give_up(e.to_string()),
        };
        match why {
            Recovering::Backup(base) => {
                if let Err(e) = f.apply_log(&base.records) {
                    if base.checkpoint.is_none() {
                        // The medium was cut and recovered: only the image can help now.
                        j.kind = FetchKind::BaseBackup;
                        return self.fetch_again(format!("the primary's log base does not apply: {e}"), 0);
                    }
                    return self.give_up(format!("the primary's log base does not apply: {e}"));
                }
                let replica = Replica::recovered_backup(node, partition, f, base.seq, pending);
                // A backup applies shipments; the batches held were for an executing replica.
                let held = Held { shipments: std::mem::take(&mut j.held.shipments), ..Held::default() };
                let image_bytes = base.checkpoint.as_ref().map_or(0, Vec::len);
                let bytes = base.records.len();
                let start = Began::LogBase { seq: base.seq, bytes, image_bytes, held: held.shipments.len() };
                self.finish(replica, held, base.seq, start, None)
            }
            Recovering::Resume { from_seq } => {
                let mut replica = Replica::recovered(node, partition, f, pending);
                if let Err(e) = replica.resume_at(from_seq) {
                    return self.give_up(format!("cannot resume: {e}"));
                }
                let held = std::mem::take(&mut j.held);
                self.finish(replica, held, from_seq.saturating_sub(1), Began::OwnLog { from_seq }, None)
            }
        }
    }

    /// The starting state installed as of batch `snapshot_seq`: the replica catches up on the
    /// batches and shipments held meanwhile (and those still arriving), a slice at a time
    /// ([`PartitionMachine::catch_up`]), and then tells the coordinator it counts from the
    /// next batch on.
    /// `digest`: the starting state's, when the fetch verified one (else computed here).
    fn finish(
        &mut self,
        replica: Replica,
        held: Held<R>,
        snapshot_seq: Seq,
        start: Began,
        digest: Option<StateDigest>,
    ) -> Vec<Effect<R>>
    where
        R: Clone,
    {
        // Boundary assertions (docs/design.md §4): the installed replica is this partition's,
        // on this node, as of the starting state's batch.
        assert_eq!((replica.node(), replica.partition()), (self.node, self.partition), "the partition's own replica");
        assert_eq!(replica.applied_seq(), snapshot_seq, "installed as of the starting state's batch");
        let mut replica = Box::new(replica);
        replica.set_digest_by_copy(self.digest_by_copy);
        let start_digest = digest.unwrap_or_else(|| replica.state_digest());
        // A passive backup takes shipments only from the primary it copied (a held shipment of
        // a deposed primary is dropped: docs/design.md §11).
        if let State::Rejoining(Rejoin { plan: Some((source, _)), .. }) = &self.state {
            if replica.role() == ReplicaRole::Backup {
                replica.copied_from(*source);
            }
        }
        // A fence of the replica this rejoin replaced holds nothing for this one.
        self.fence = None;
        self.state = State::CatchingUp(Box::new(CatchingUp {
            replica,
            batches: held.batches,
            stream: held.stream.into(),
            shipments: held.shipments.into(),
            last_ack: None,
            snapshot_seq,
            start,
            start_digest,
            replayed: 0,
        }));
        self.catch_up(CATCH_UP_SLICE_BUSY, false)
    }

    /// Executes or applies at most `max` of what a catching-up replica holds, in arrival
    /// order (the coordinator's messages, then the shipments); once nothing is left and
    /// `caught_up` — the carrier has nothing more for it either (its inbox is empty: batches
    /// still queued there would make the coordinator wait for this replica the moment it
    /// counts) — the replica serves and `Rejoined` goes to the coordinator. Nothing to do when
    /// not catching up.
    pub fn catch_up(&mut self, max: usize, caught_up: bool) -> Vec<Effect<R>>
    where
        R: Clone,
    {
        let State::CatchingUp(c) = &mut self.state else { return Vec::new() };
        let mut out = Vec::new();
        for _ in 0..max {
            if let Some(msg) = c.stream.pop_front() {
                if matches!(msg, CoordinatorToNode::Batch(_)) {
                    c.batches -= 1;
                    c.replayed += 1;
                }
                out.extend(serve(&mut c.replica, msg).into_iter().map(|e| match e {
                    Effect::Refused { error, .. } => Effect::Refused { error, rejoining: true },
                    other => other,
                }));
            } else if let Some((shipment, reply)) = c.shipments.pop_front() {
                // Acknowledgements are cumulative: only the last is sent. One each made a
                // rejoin that held thousands of shipments wait on the peer link's reply queue
                // for seconds.
                c.replayed += 1;
                for e in ship(&mut c.replica, shipment, &reply) {
                    match e {
                        ack @ Effect::Reply { .. } => c.last_ack = Some(ack),
                        other => out.push(other),
                    }
                }
            } else {
                break;
            }
        }
        if !c.stream.is_empty() || !c.shipments.is_empty() || !caught_up {
            return out;
        }
        let State::CatchingUp(c) = std::mem::replace(&mut self.state, State::Failed("caught up".into())) else {
            unreachable!("matched above")
        };
        let CatchingUp { replica, last_ack, snapshot_seq, start, start_digest, replayed, .. } = *c;
        out.extend(last_ack);
        assert!(replica.applied_seq() >= snapshot_seq, "what was held only moves the replica on");
        let start = match start {
            Began::Copy { seq, .. } => Began::Copy { seq, held: replayed },
            Began::LogBase { seq, bytes, image_bytes, .. } => {
                Began::LogBase { seq, bytes, image_bytes, held: replayed }
            }
            own @ Began::OwnLog { .. } => own,
        };
        out.push(Effect::Ready { digest: start_digest, start });
        let partition = self.partition;
        out.push(Effect::Emit(Emit::ToCoordinator(NodeToCoordinator::Rejoined { partition, snapshot_seq })));
        if !self.mode.every_replica_executes() {
            // A rejoined backup replayed the shipments it held past its copy: said at once, the
            // coordinator does not count it thousands of batches behind (and report it
            // lagging) until its next heartbeat's report.
            let seq = replica.applied_seq();
            out.push(Effect::Emit(Emit::ToCoordinator(NodeToCoordinator::BackupApplied { partition, seq })));
        }
        self.state = State::Serving(replica);
        out
    }

    /// A rejoin that cannot go on.
    /// The rejoin cannot go on: the replica fails, and the coordinator is told (a load that
    /// failed), so it stops counting this replica as rejoining — and stops holding the
    /// partition's admission back for it — while the node stays connected.
    fn give_up(&mut self, reason: String) -> Vec<Effect<R>> {
        let abandon = self.fetch_under_way().map(|id| Effect::AbandonFetch { id });
        self.state = State::Failed(reason.clone());
        let state = LoadState::Failed { reason: wire::messages::bounded_reason(reason.clone()) };
        let told = NodeToCoordinator::LoadStatus { partition: self.partition, state };
        abandon.into_iter().chain([Effect::Failed { reason }, Effect::Emit(Emit::ToCoordinator(told))]).collect()
    }
}

/// A coordinator message for a serving replica.
fn serve<R>(replica: &mut Replica, msg: CoordinatorToNode) -> Vec<Effect<R>> {
    emitted(replica, |r| r.on_control(msg))
}

/// What `step` made the replica emit, as effects: a refusal if it failed, and the replica's
/// stop if it stopped now.
fn emitted<R>(
    replica: &mut Replica,
    step: impl FnOnce(&mut Replica) -> Result<Vec<Emit>, ReplicaError>,
) -> Vec<Effect<R>> {
    let was_stopped = replica.stopped().is_some();
    let mut out: Vec<Effect<R>> = match step(replica) {
        Ok(emitted) => emitted.into_iter().map(Effect::Emit).collect(),
        Err(error) => vec![Effect::Refused { error, rejoining: false }],
    };
    if !was_stopped {
        if let Some(reason) = replica.stopped() {
            out.push(Effect::Stopped { reason: reason.to_string() });
        }
    }
    out
}

/// A shipment for a serving backup: an acknowledgement for every shipment it applied.
fn ship<R: Clone>(replica: &mut Replica, shipment: Shipment, reply: &R) -> Vec<Effect<R>> {
    let was_stopped = replica.stopped().is_some();
    let mut out: Vec<Effect<R>> = match replica.on_ship(shipment) {
        Ok(acks) => acks.into_iter().map(|msg| Effect::Reply { to: reply.clone(), msg }).collect(),
        Err(error) => vec![Effect::Refused { error, rejoining: false }],
    };
    if !was_stopped {
        if let Some(reason) = replica.stopped() {
            out.push(Effect::Stopped { reason: reason.to_string() });
        }
    }
    out
}
