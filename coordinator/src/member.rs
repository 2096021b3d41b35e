//! One coordinator of the group (docs/design.md §11), sans I/O: its raft member
//! ([`crate::group`]) and, while it leads, the [`Coordinator`] state machine — with the take-over
//! between the two. It takes client and node messages, raft messages from the other
//! coordinators and clock ticks, and returns [`MemberOutput`]s for the carrier.
//!
//! Guarantees:
//! - a standby answers every client request "not the leader" (naming the leader it knows)
//!   and sends nodes nothing;
//! - a new leader acts only after the take-over: every node was sent `TakeOver`, every live
//!   replica of the committed membership answered (or was silent for
//!   `timeouts.failure_timeout_ms` and counts as failed), the batches the executors hold
//!   beyond the lowest executed one were fetched, and the [`Coordinator`] was resumed from
//!   all that ([`Coordinator::resume`]); node messages arriving meanwhile are kept (bounded)
//!   and handled after;
//! - decide, then act: once the coordinator's partition views differ from those last
//!   proposed, the new views are proposed and every output from then on is held until that
//!   entry is committed — in order; if leadership is lost first, they are dropped;
//! - every message to a node carries the leading epoch; a node's `Fenced` (a newer epoch
//!   exists) deposes this leader at once;
//! - the group's state to store comes out as [`MemberOutput::Persist`] before any output that
//!   follows it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use wire::channel::{ClientToCoordinator, CoordinatorToClient, CoordinatorToNode, NodeToCoordinator};
use wire::config::{ClusterConfig, Mode};
use wire::messages::{
    Batch, ClientReply, ClientResult, CoordinatorId, DigestOutcome, Epoch, NodeId, PartitionId, PieceReads, Rejection,
    ReplicaStanding, ReplicationRole, Seq,
};

use crate::error::CoordinatorError;
use crate::group::{
    Decision, Group, GroupReady, GroupState, GroupTiming, Leadership, Membership, PartitionView, ViewState,
};
use crate::leader::{ClientId, Coordinator, Detection, Event, Output, PartitionResume, Resumed, NOBODY};

/// Node messages a coordinator keeps while it takes over, at most; past it the oldest go.
pub const TAKE_OVER_KEPT_MAX: usize = 1 << 16;

/// What the carrier does for a [`Member`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberOutput {
    /// Send `msg` to each of `nodes`, in epoch `epoch`.
    ToNodes {
        nodes: Vec<NodeId>,
        epoch: Epoch,
        msg: CoordinatorToNode,
    },
    /// Answer a client's transaction request.
    Reply {
        client: ClientId,
        reply: ClientReply,
    },
    /// Send `msg` to a client.
    ToClient {
        client: ClientId,
        msg: CoordinatorToClient,
    },
    /// Send a raft message to coordinator `to`.
    ToCoordinator {
        to: CoordinatorId,
        bytes: Vec<u8>,
    },
    /// Store the group's state (replacing what was stored) before carrying out anything after
    /// this.
    Persist(GroupState),
    Event(Event),
}

/// The initial membership of `config`: every partition loading on all its replicas.
pub fn initial_membership(config: &ClusterConfig) -> Membership {
    Membership::initial(config.partitions.iter().map(|p| PartitionView {
        partition: p.id,
        replicas: p.replicas.clone(),
        state: ViewState::Loading,
    }))
}

/// One coordinator of the group.
#[derive(Debug)]
pub struct Member {
    config: ClusterConfig,
    me: CoordinatorId,
    group: Group,
    duty: Duty,
    failure_timeout_us: u64,
    /// `timeouts.load_timeout_s`: how long a take-over waits for replicas still loading.
    load_timeout_us: u64,
    /// Client requests handed to the coordinator and not yet answered: answered "outcome
    /// unknown" if this member stops leading first. An insert and a remove per request:
    /// foldhash, keyed per process, not SipHash.
    open: foldhash::HashSet<(ClientId, u64)>,
    /// Each node's connection, counted: a message held back goes only to the connection it
    /// was meant for (a node that connected again since is another process).
    connections: BTreeMap<NodeId, u64>,
}

/// What this member does for the cluster: stands by (another member leads, or none yet), takes
/// the cluster over after the group elected it (docs/design.md §11), or leads it.
#[derive(Debug)]
enum Duty {
    Standby,
    TakingOver(Box<TakingOver>),
    Leading(Box<Leading>),
}

#[derive(Debug)]
struct TakingOver {
    epoch: Epoch,
    started_us: u64,
    /// When silent replicas stop being waited for (standings, then batches).
    deadline_us: u64,
    /// The committed membership when the take-over began.
    views: BTreeMap<PartitionId, PartitionView>,
    standings: BTreeMap<PartitionId, BTreeMap<NodeId, ReplicaStanding>>,
    answered: BTreeSet<NodeId>,
    /// When each node was last heard from during the take-over (any message).
    heard_us: BTreeMap<NodeId, u64>,
    /// Nodes that reported a replica loading during the take-over (a restarted cluster whose
    /// committed membership says "serving" while its new processes load).
    loading: BTreeSet<NodeId>,
    /// Once every standing is in: the batches being fetched, per partition.
    fetching: Option<BTreeMap<PartitionId, Fetching>>,
    /// Node messages to handle once resumed.
    kept: VecDeque<(NodeId, NodeToCoordinator)>,
    /// How long after the start every standing was in.
    standings_us: u64,
}

#[derive(Debug, Default)]
struct Fetching {
    /// Batches through this one are executed by every replica that counts.
    lo: Seq,
    /// Per executor: the batch it was asked for from, and the last it holds.
    asked: BTreeMap<NodeId, (Seq, Seq)>,
    batches: BTreeMap<Seq, Batch>,
    reads: Vec<PieceReads>,
    /// Replicas too far behind to be brought level by batches.
    too_far: Vec<NodeId>,
}

#[derive(Debug)]
struct Leading {
    epoch: Epoch,
    coordinator: Coordinator,
    /// The views last proposed (or committed).
    proposed: Vec<PartitionView>,
    /// Outputs held until the entry at the index is committed, with the node connections
    /// they were meant for.
    held: VecDeque<(u64, Vec<Output>, BTreeMap<NodeId, u64>)>,
}

impl Member {
    /// Coordinator `me` of `config`, with the group state it stored (`None`: a first start).
    pub fn new(
        config: &ClusterConfig,
        me: CoordinatorId,
        election_offset_ticks: usize,
        stored: Option<GroupState>,
        now_us: u64,
    ) -> Result<Member, CoordinatorError> {
        config.validate()?;
        let t = &config.timeouts;
        let timing = GroupTiming {
            tick_us: t.heartbeat_ms.max(1) * 1_000,
            election_ticks: usize::try_from((t.failure_timeout_ms / t.heartbeat_ms.max(1)).max(3)).unwrap_or(3),
            election_offset_ticks,
        };
        let members = config.coordinator_ids();
        let group =
            Group::restore(me, &members, initial_membership(config), timing, stored.unwrap_or_default(), now_us)
                .map_err(CoordinatorError::Group)?;
        Ok(Member {
            config: config.clone(),
            me,
            group,
            duty: Duty::Standby,
            failure_timeout_us: t.failure_timeout_ms * 1_000,
            load_timeout_us: t.load_timeout_s * 1_000_000,
            open: foldhash::HashSet::default(),
            connections: BTreeMap::new(),
        })
    }

    pub fn me(&self) -> CoordinatorId {
        self.me
    }

    /// The epoch this member leads and acts in (taken over), if it does.
    pub fn leading(&self) -> Option<Epoch> {
        match &self.duty {
            Duty::Leading(l) => Some(l.epoch),
            Duty::Standby | Duty::TakingOver(_) => None,
        }
    }

    /// Whether this member is taking over.
    pub fn taking_over(&self) -> bool {
        matches!(self.duty, Duty::TakingOver(_))
    }

    /// The leader this member knows of.
    pub fn leader(&self) -> Option<CoordinatorId> {
        self.group.leader()
    }

    /// The leading coordinator's state machine, while this member leads.
    pub fn coordinator(&self) -> Option<&Coordinator> {
        match &self.duty {
            Duty::Leading(l) => Some(&l.coordinator),
            Duty::Standby | Duty::TakingOver(_) => None,
        }
    }

    /// The committed membership.
    pub fn membership(&self) -> &Membership {
        self.group.membership()
    }

    /// The raft term.
    pub fn term(&self) -> Epoch {
        self.group.term()
    }

    /// A message from client `client`.
    pub fn on_client_message(&mut self, client: ClientId, msg: ClientToCoordinator, now_us: u64) -> Vec<MemberOutput> {
        let mut out = Vec::new();
        match &mut self.duty {
            Duty::Leading(l) => {
                if let ClientToCoordinator::ClientRequests(requests) = &msg {
                    self.open.extend(requests.iter().map(|r| (client, r.request_id)));
                }
                let o = l.coordinator.on_client_message(client, msg, now_us);
                self.gate(o, &mut out);
            }
            Duty::Standby | Duty::TakingOver(_) => {
                let leader = if self.taking_over() { Some(self.me) } else { self.group.leader() };
                let rejection = Rejection::NotLeader { leader };
                match msg {
                    ClientToCoordinator::ClientRequests(requests) => {
                        for r in requests {
                            let reply = ClientReply {
                                request_id: r.request_id,
                                result: ClientResult::Rejected(rejection.clone()),
                            };
                            out.push(MemberOutput::Reply { client, reply });
                        }
                    }
                    ClientToCoordinator::DigestRequest { request_id, partition } => {
                        let outcome = DigestOutcome::Rejected(rejection);
                        let msg = CoordinatorToClient::DigestReply { request_id, partition, outcome };
                        out.push(MemberOutput::ToClient { client, msg });
                    }
                    ClientToCoordinator::StatusRequest { .. } | ClientToCoordinator::Shutdown { .. } => {}
                }
            }
        }
        self.after(&mut out, now_us);
        out
    }

    /// A message from node `from` (the network code authenticated it).
    pub fn on_node_message(&mut self, from: NodeId, msg: NodeToCoordinator, now_us: u64) -> Vec<MemberOutput> {
        let mut out = Vec::new();
        if let NodeToCoordinator::Fenced { epoch } = msg {
            if let Some(mine) = self.acting_epoch().filter(|&mine| epoch > mine) {
                self.depose(mine, format!("node {from} heard of epoch {epoch}"), &mut out);
            }
            self.after(&mut out, now_us);
            return out;
        }
        if let Duty::TakingOver(t) = &mut self.duty {
            t.heard_us.insert(from, now_us);
            if let NodeToCoordinator::LoadStatus { state: wire::messages::LoadState::Loading { .. }, .. } = &msg {
                t.loading.insert(from);
            }
        }
        match &mut self.duty {
            Duty::Leading(l) => {
                let o = l.coordinator.on_node_message(from, msg, now_us);
                self.gate(o, &mut out);
            }
            Duty::TakingOver(t) => match msg {
                NodeToCoordinator::Standing { epoch, partition, standing } if epoch == t.epoch => {
                    // The first standing counts (a node that connected again is sent the
                    // take-over again; what it executed since comes in its results), and none
                    // once the batches are being fetched.
                    t.answered.insert(from);
                    if t.fetching.is_none() {
                        t.standings.entry(partition).or_default().entry(from).or_insert(standing);
                    }
                }
                NodeToCoordinator::HeldBatches { partition, batches, reads } => {
                    let next = t.fetching.as_mut().and_then(|f| f.get_mut(&partition)).and_then(|f| {
                        f.reads.extend(reads);
                        let (after, last) = f.asked.get(&from).copied()?;
                        let whole_after = f.lo;
                        let mut got = after;
                        for b in batches {
                            if b.seq != got + 1 {
                                break;
                            }
                            got = b.seq;
                            f.batches.entry(b.seq).or_insert(b);
                        }
                        let more = got > after && got < last;
                        if more {
                            f.asked.insert(from, (got, last));
                        } else {
                            f.asked.remove(&from);
                        }
                        more.then_some((got, whole_after))
                    });
                    if let Some((after, whole_after)) = next {
                        let msg = CoordinatorToNode::SendBatches { partition, after, whole_after };
                        out.push(MemberOutput::ToNodes { nodes: vec![from], epoch: t.epoch, msg });
                    }
                }
                NodeToCoordinator::Standing { .. } | NodeToCoordinator::Heartbeat { .. } => {}
                msg => {
                    if t.kept.len() == TAKE_OVER_KEPT_MAX {
                        t.kept.pop_front();
                    }
                    t.kept.push_back((from, msg));
                }
            },
            Duty::Standby => {}
        }
        self.after(&mut out, now_us);
        out
    }

    /// Node `node` is gone before its silence timed out (`detection` says how the network
    /// code knows).
    pub fn on_node_lost(&mut self, node: NodeId, detection: Detection, now_us: u64) -> Vec<MemberOutput> {
        *self.connections.entry(node).or_default() += 1;
        let mut out = Vec::new();
        if let Duty::Leading(l) = &mut self.duty {
            let o = l.coordinator.on_node_lost(node, detection, now_us);
            self.gate(o, &mut out);
        }
        self.after(&mut out, now_us);
        out
    }

    /// A raft message from coordinator `from` (the network code authenticated it).
    pub fn on_coordinator_message(&mut self, from: CoordinatorId, bytes: &[u8], now_us: u64) -> Vec<MemberOutput> {
        let mut out = Vec::new();
        if let Err(e) = self.group.on_message(from, bytes) {
            out.push(MemberOutput::Event(Event::GroupRefused { problem: e.to_string() }));
        }
        self.after(&mut out, now_us);
        out
    }

    /// Coordinator `peer`'s process ended, as its liveness tether told: if it led, this member
    /// stands for election now, or after the surviving members of lower ids had their turn
    /// ([`Group::on_peer_died`]).
    pub fn on_coordinator_died(&mut self, peer: CoordinatorId, now_us: u64) -> Vec<MemberOutput> {
        let mut out = Vec::new();
        self.group.on_peer_died(peer, now_us);
        self.after(&mut out, now_us);
        out
    }

    /// Time passes to `now_us`.
    pub fn tick(&mut self, now_us: u64) -> Vec<MemberOutput> {
        let mut out = Vec::new();
        self.group.on_tick(now_us);
        if let Duty::Leading(l) = &mut self.duty {
            if l.coordinator.next_deadline_us().is_some_and(|d| d <= now_us) {
                let o = l.coordinator.tick(now_us);
                self.gate(o, &mut out);
            }
        }
        self.after(&mut out, now_us);
        out
    }

    /// When [`Member::tick`] must next be called.
    pub fn next_deadline_us(&self) -> u64 {
        let own = match &self.duty {
            Duty::Leading(l) => l.coordinator.next_deadline_us().unwrap_or(u64::MAX),
            Duty::TakingOver(t) => t.deadline_us,
            Duty::Standby => u64::MAX,
        };
        own.min(self.group.next_tick_us())
    }

    /// Node `node` connected (first, or again): a leader tells it the epoch — a heartbeat,
    /// or the take-over it may have missed — so the node knows where to send.
    pub fn on_node_connected(&mut self, node: NodeId, now_us: u64) -> Vec<MemberOutput> {
        *self.connections.entry(node).or_default() += 1;
        let mut out = Vec::new();
        match &self.duty {
            Duty::Leading(l) => {
                let msg = CoordinatorToNode::Heartbeat { now_ms: now_us / 1_000 };
                out.push(MemberOutput::ToNodes { nodes: vec![node], epoch: l.epoch, msg });
                // Its partitions' membership: one without it tells it to rejoin.
                for msg in l.coordinator.memberships_for(node) {
                    out.push(MemberOutput::ToNodes { nodes: vec![node], epoch: l.epoch, msg });
                }
            }
            Duty::TakingOver(t) => {
                let msg = CoordinatorToNode::TakeOver { epoch: t.epoch };
                out.push(MemberOutput::ToNodes { nodes: vec![node], epoch: t.epoch, msg });
                // The batches asked of it went with its old connection: asked again, from
                // where its answers stopped (those that arrived are kept).
                for (&partition, f) in t.fetching.iter().flatten() {
                    if let Some(&(after, _)) = f.asked.get(&node) {
                        let msg = CoordinatorToNode::SendBatches { partition, after, whole_after: f.lo };
                        out.push(MemberOutput::ToNodes { nodes: vec![node], epoch: t.epoch, msg });
                    }
                }
            }
            Duty::Standby => {}
        }
        self.after(&mut out, now_us);
        out
    }

    /// The epoch this member acts in, leading or taking over.
    fn acting_epoch(&self) -> Option<Epoch> {
        match &self.duty {
            Duty::Leading(l) => Some(l.epoch),
            Duty::TakingOver(t) => Some(t.epoch),
            Duty::Standby => None,
        }
    }

    /// Stops acting as leader: what was held back is dropped, and every client request
    /// handed to the coordinator and not answered is answered "outcome unknown" (the next
    /// leader may have adopted it, or not).
    fn depose(&mut self, epoch: Epoch, why: String, out: &mut Vec<MemberOutput>) {
        self.duty = Duty::Standby;
        let mut open: Vec<(ClientId, u64)> = self.open.drain().collect();
        open.sort_unstable();
        for (client, request_id) in open {
            let result = ClientResult::OutcomeUnknown {
                ts: wire::messages::Timestamp(0),
                reason: format!("coordinator {} stopped leading before answering: {why}", self.me),
            };
            out.push(MemberOutput::Reply { client, reply: ClientReply { request_id, result } });
        }
        out.push(MemberOutput::Event(Event::Deposed { epoch, why }));
    }

    /// Decide, then act: the coordinator's outputs go out now, or wait for the entry that
    /// records the views they follow (module comment).
    fn gate(&mut self, o: Vec<Output>, out: &mut Vec<MemberOutput>) {
        let Duty::Leading(l) = &mut self.duty else { return };
        let views = l.coordinator.views();
        if views != l.proposed {
            let changed: Vec<PartitionView> = views.iter().filter(|v| !l.proposed.contains(v)).cloned().collect();
            match self.group.propose(&Decision::Views(changed)) {
                Ok(index) => {
                    l.proposed = views;
                    l.held.push_back((index, o, self.connections.clone()));
                }
                Err(e) => {
                    let epoch = l.epoch;
                    self.depose(epoch, e.to_string(), out);
                }
            }
        } else if let Some(&(index, _, _)) = l.held.back() {
            l.held.push_back((index, o, self.connections.clone()));
        } else {
            emit(l.epoch, o, out);
        }
    }

    /// After every call: the group's ready (stored first, then sent), leadership changes,
    /// the outputs whose entry committed, and the take-over's progress.
    fn after(&mut self, out: &mut Vec<MemberOutput>, now_us: u64) {
        for _ in 0..8 {
            let ready = self.group.ready();
            if ready.is_empty() && !self.progress(out, now_us) {
                break;
            }
            self.handle_ready(ready, out, now_us);
        }
        for o in out.iter() {
            if let MemberOutput::Reply { client, reply } = o {
                self.open.remove(&(*client, reply.request_id));
            }
        }
    }

    fn handle_ready(&mut self, ready: GroupReady, out: &mut Vec<MemberOutput>, now_us: u64) {
        let GroupReady { persist, messages, decided: _, leadership } = ready;
        // Outputs must not overtake the state that allows them.
        if let Some(state) = persist {
            out.insert(0, MemberOutput::Persist(state));
        }
        out.extend(messages.into_iter().map(|(to, bytes)| MemberOutput::ToCoordinator { to, bytes }));
        match leadership {
            Some(Leadership::Leading { epoch }) if self.acting_epoch() != Some(epoch) => {
                self.begin_take_over(epoch, out, now_us)
            }
            Some(Leadership::Following { epoch, leader }) => {
                if let Some(mine) = self.acting_epoch() {
                    let why = match leader {
                        Some(c) => format!("coordinator {c} leads epoch {epoch}"),
                        None => format!("lost the majority (epoch {epoch})"),
                    };
                    self.depose(mine, why, out);
                }
            }
            Some(Leadership::Leading { .. }) | None => {}
        }
        // Release what the committed entries allow.
        let applied = self.group.membership().applied();
        if let Duty::Leading(l) = &mut self.duty {
            while l.held.front().is_some_and(|(index, _, _)| *index <= applied) {
                let (_, mut o, meant) = l.held.pop_front().expect("checked");
                // What was held back was for the connections of then: a node connected again
                // since is another process, and must not get it.
                for x in &mut o {
                    if let Output::ToNodes { nodes, .. } = x {
                        nodes.retain(|n| meant.get(n) == self.connections.get(n));
                    }
                }
                emit(l.epoch, o, out);
            }
        }
    }

    fn begin_take_over(&mut self, epoch: Epoch, out: &mut Vec<MemberOutput>, now_us: u64) {
        out.push(MemberOutput::Event(Event::TakingOver { epoch }));
        let views = self.group.membership().views().map(|v| (v.partition, v.clone())).collect();
        self.duty = Duty::TakingOver(Box::new(TakingOver {
            epoch,
            started_us: now_us,
            deadline_us: now_us + self.failure_timeout_us,
            views,
            standings: BTreeMap::new(),
            answered: BTreeSet::new(),
            fetching: None,
            heard_us: BTreeMap::new(),
            loading: BTreeSet::new(),
            kept: VecDeque::new(),
            standings_us: 0,
        }));
        let nodes: Vec<NodeId> = self.config.nodes.iter().map(|n| n.id).collect();
        out.push(MemberOutput::ToNodes { nodes, epoch, msg: CoordinatorToNode::TakeOver { epoch } });
    }

    /// Moves a take-over on if it can; returns whether anything changed.
    fn progress(&mut self, out: &mut Vec<MemberOutput>, now_us: u64) -> bool {
        let Duty::TakingOver(t) = &mut self.duty else { return false };
        let expected = |t: &TakingOver| -> Vec<(PartitionId, NodeId)> {
            t.views
                .values()
                .filter(|v| matches!(v.state, ViewState::Serving | ViewState::Loading))
                .flat_map(|v| v.replicas.iter().map(move |n| (v.partition, *n)))
                .collect()
        };
        if t.fetching.is_none() {
            let all_in = expected(t).iter().all(|(p, n)| t.standings.get(p).is_some_and(|s| s.contains_key(n)));
            // Past the deadline the silent count as failed — but a partition none of whose
            // replicas answered yet is waited for: counting them all failed would lose it
            // for good (its replicas may be only slow to dial this coordinator).
            let each_heard =
                t.views.values().filter(|v| matches!(v.state, ViewState::Serving | ViewState::Loading)).all(|v| {
                    t.standings.get(&v.partition).is_some_and(|s| v.replicas.iter().any(|n| s.contains_key(n)))
                });
            // A node that answered for some of its replicas is alive: the rest of its answers
            // are on their way, and are waited for (up to four failure timeouts) rather than
            // count it failed.
            let partial = expected(t)
                .iter()
                .any(|(p, n)| t.answered.contains(n) && !t.standings.get(p).is_some_and(|s| s.contains_key(n)));
            let patience_over = now_us >= t.started_us + 4 * self.failure_timeout_us;
            // A node heard from (its heartbeats) whose answers have not come is alive, its
            // executors busy: while a partition loads — a fresh cluster's first take-over,
            // whose replicas answer once loaded — it is waited for up to the load timeout.
            // (Found on real processes: a node still loading under a debug build was counted
            // failed at the first take-over, and copied its partitions.)
            // So is a node that says it loads though the membership says its partitions serve:
            // a cluster brought down and up again keeps the group's decisions, and its new
            // processes load while the first leader takes over (found at 20 warehouses, whose
            // load outlasts the failure timeout: both nodes were counted failed).
            let loading_alive = (t.views.values().any(|v| v.state == ViewState::Loading) || !t.loading.is_empty())
                && now_us < t.started_us + self.load_timeout_us
                && expected(t).iter().any(|(p, n)| {
                    !t.standings.get(p).is_some_and(|s| s.contains_key(n))
                        && t.heard_us.get(n).is_some_and(|&h| now_us < h + self.failure_timeout_us)
                });
            if !all_in && (now_us < t.deadline_us || !each_heard || (partial && !patience_over) || loading_alive) {
                if now_us >= t.deadline_us {
                    // Look again a little later (a deadline in the past would spin).
                    t.deadline_us = now_us + self.failure_timeout_us / 8 + 1;
                }
                return false;
            }
            t.fetching = Some(plan_fetch(t, self.config.mode(), out));
            t.deadline_us = now_us + self.failure_timeout_us;
            t.standings_us = now_us.saturating_sub(t.started_us);
            return true;
        }
        let fetching = t.fetching.as_ref().expect("planned");
        if fetching.values().any(|f| !f.asked.is_empty()) {
            // An executor still sending its batches is waited for while it is heard from
            // (its heartbeats: it is alive, only slow), up to eight failure timeouts: a
            // passive partition's primary is the only one holding its batches' inputs, and
            // counting it failed loses the halves of multi-partition transactions whose other
            // pieces ran. (Found by `glass sim --mode active-passive --coordinator-faults
            // --seed 616`: both primaries, slow, were left out, and a NewOrder lost its home
            // piece.)
            let alive = fetching
                .values()
                .flat_map(|f| f.asked.keys())
                .any(|n| t.heard_us.get(n).is_some_and(|&h| now_us < h + self.failure_timeout_us));
            let patience_over = now_us >= t.started_us + 8 * self.failure_timeout_us;
            if now_us < t.deadline_us || (alive && !patience_over) {
                if now_us >= t.deadline_us {
                    t.deadline_us = now_us + self.failure_timeout_us / 8 + 1;
                }
                return false;
            }
        }
        let TakingOver { epoch, started_us, views, mut standings, answered, fetching, kept, standings_us, .. } =
            *match std::mem::replace(&mut self.duty, Duty::Standby) {
                Duty::TakingOver(t) => t,
                _ => unreachable!("matched above"),
            };
        let mut fetching = fetching.expect("planned");
        // A replica too far behind to be brought level by batches, or whose batches did not
        // all arrive in time, does not count: it is told to rejoin (it copies the partition).
        let mut excluded: BTreeSet<NodeId> =
            fetching.values().flat_map(|f| f.too_far.iter().chain(f.asked.keys()).copied()).collect();
        // So is a node that did not report every replica of it the membership names.
        for v in views.values().filter(|v| matches!(v.state, ViewState::Serving | ViewState::Loading)) {
            for n in &v.replicas {
                if !standings.get(&v.partition).is_some_and(|s| s.contains_key(n)) {
                    excluded.insert(*n);
                }
            }
        }
        let mut partitions = BTreeMap::new();
        let mut adopted_total = 0;
        for (pid, view) in &views {
            let f = fetching.remove(pid).unwrap_or_default();
            let mut s = standings.remove(pid).unwrap_or_default();
            s.retain(|n, st| view.replicas.contains(n) && !st.stopped && !excluded.contains(n));
            let mut adopted = Vec::new();
            let mut next = f.lo + 1;
            while let Some(b) = f.batches.get(&next) {
                adopted.push(b.clone());
                next += 1;
            }
            adopted_total += adopted.len();
            // The outcomes the replicas ran home pieces with, then those they hold.
            let mut reads = f.reads;
            reads.extend(s.values().flat_map(|st| st.held_reads.iter().cloned()));
            // Where multi-partition pieces took effect: the executors' batches, and the pieces
            // of the shipments the backups applied (a failed primary's batches live on there
            // only as their effects, and these inputs).
            let mut known: Vec<Batch> = f.batches.into_values().collect();
            known.extend(s.values().flat_map(|st| st.pieces.iter().cloned()));
            let resume =
                PartitionResume { view: view.clone(), standings: s, adopted_after: f.lo, adopted, known, reads };
            partitions.insert(*pid, resume);
        }
        let reachable = answered;
        let live_nodes: BTreeSet<NodeId> = reachable.difference(&excluded).copied().collect();
        let silent: Vec<NodeId> = views
            .values()
            .flat_map(|v| v.replicas.iter().copied())
            .filter(|n| !live_nodes.contains(n))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let resumed = Resumed { epoch, partitions, live_nodes, reachable };
        let (coordinator, o) = match Coordinator::resume(&self.config, self.me, resumed, now_us) {
            Ok(r) => r,
            Err(e) => {
                out.push(MemberOutput::Event(Event::Deposed { epoch, why: format!("cannot resume: {e}") }));
                return true;
            }
        };
        out.push(MemberOutput::Event(Event::TookOver {
            epoch,
            adopted: adopted_total,
            silent,
            took_us: now_us.saturating_sub(started_us),
            standings_us,
        }));
        let proposed: Vec<PartitionView> = views.into_values().collect();
        self.duty = Duty::Leading(Box::new(Leading { epoch, coordinator, proposed, held: VecDeque::new() }));
        self.gate(o, out);
        for (from, msg) in kept {
            let Duty::Leading(l) = &mut self.duty else { break };
            let o = l.coordinator.on_node_message(from, msg, now_us);
            self.gate(o, out);
        }
        true
    }
}

/// Plans the fetch of the batches the executors hold beyond the lowest executed one, and
/// asks for them (docs/design.md §11, take-over step 2).
fn plan_fetch(t: &TakingOver, mode: Mode, out: &mut Vec<MemberOutput>) -> BTreeMap<PartitionId, Fetching> {
    let mut plans = BTreeMap::new();
    for (pid, view) in &t.views {
        if view.state != ViewState::Serving {
            continue;
        }
        let Some(standings) = t.standings.get(pid) else { continue };
        let standings: BTreeMap<NodeId, &ReplicaStanding> =
            standings.iter().filter(|(n, s)| view.replicas.contains(n) && !s.stopped).map(|(n, s)| (*n, s)).collect();
        let executes = |s: &ReplicaStanding| s.role != ReplicationRole::Backup;
        // The furthest executor, and what it still keeps.
        let Some((_, furthest)) = standings.iter().filter(|(_, s)| executes(s)).max_by_key(|(_, s)| s.held_seq) else {
            // No executor answered (a passive partition's primary is silent): nothing to
            // fetch; batches are numbered after the furthest backup, which is promoted.
            let lo = standings.values().map(|s| s.executed_seq).max().unwrap_or(0);
            plans.insert(*pid, Fetching { lo, ..Fetching::default() });
            continue;
        };
        let mut f = Fetching::default();
        // Active-active: a replica the furthest cannot bring level by batches copies the
        // partition instead (it counts as failed here, and rejoins). Passive modes: backups
        // follow their primary's shipments; what the primary no longer keeps is not adopted.
        let kept_from = furthest.kept_from;
        if mode.every_replica_executes() {
            for (n, s) in &standings {
                if s.executed_seq + 1 < kept_from {
                    f.too_far.push(*n);
                }
            }
            f.lo = standings
                .iter()
                .filter(|(n, _)| !f.too_far.contains(n))
                .map(|(_, s)| s.executed_seq)
                .min()
                .unwrap_or(0);
        } else {
            let lowest = standings.values().map(|s| s.executed_seq).min().unwrap_or(0);
            f.lo = lowest.max(kept_from.saturating_sub(1)).min(furthest.executed_seq);
        }
        // Every batch each executor keeps or holds: those after `lo` are adopted, and all of
        // them show where the multi-partition transactions' pieces are.
        for (n, s) in standings.iter().filter(|(n, s)| executes(s) && !f.too_far.contains(n)) {
            let after = f.lo.min(s.kept_from.saturating_sub(1));
            if s.held_seq > after {
                f.asked.insert(*n, (after, s.held_seq));
                let msg = CoordinatorToNode::SendBatches { partition: *pid, after, whole_after: f.lo };
                out.push(MemberOutput::ToNodes { nodes: vec![*n], epoch: t.epoch, msg });
            }
        }
        plans.insert(*pid, f);
    }
    plans
}

/// The coordinator's outputs as the member's, in epoch `epoch`; nothing for [`NOBODY`].
fn emit(epoch: Epoch, o: Vec<Output>, out: &mut Vec<MemberOutput>) {
    for x in o {
        out.push(match x {
            Output::ToNodes { nodes, msg } => MemberOutput::ToNodes { nodes, epoch, msg },
            Output::Reply { client, .. } | Output::ToClient { client, .. } if client == NOBODY => continue,
            Output::Reply { client, reply } => MemberOutput::Reply { client, reply },
            Output::ToClient { client, msg } => MemberOutput::ToClient { client, msg },
            Output::Event(e) => MemberOutput::Event(e),
        });
    }
}
