//! The coordinators' side of the simulated network: each coordinator's real [`Carrier`] called
//! with the time and the simulator's [`Links`], and what it asked of them carried out in order
//! — messages to nodes, clients and the other coordinators through the seeded [`Network`],
//! links closed, the group state stored, events recorded — as the coordinator process's links
//! do (docs/design.md §14); the clients' requests; and the delivery of one message in flight.
//!
//! Guarantees: a message reaches a node only on the link it was sent on, while that link is
//! connected and both ends' processes run; a raft message only between running coordinators
//! not cut apart; the group state is stored before anything after it leaves; every reply a
//! coordinator sends a client is checked as it comes ([`invariants`](super::invariants)) and
//! recorded.
//!
//! [`Network`]: crate::net::Network

use coordinator::carrier::{Carrier, CarrierStop, ConnId, Links};
use coordinator::group::GroupState;
use coordinator::{ClientId, Event};
use engine::procedures::TxnInput;
use wire::channel::{CoordinatorToClient, CoordinatorToNode, NodeToCoordinator};
use wire::messages::{ClientResult, CoordinatorId, Epoch, NodeId};

use super::{PeerAddr, Sim, SimCoord, START_US};

/// Times a simulated client asks again about one request before it gives up: its outcome is
/// then unknown to it.
const RETRIES_PER_REQUEST_MAX: u32 = 1_000;
use crate::error::Violation;
use crate::net::{Carried, Envelope, PeerMsg, RAFT_NODE};

/// What a simulated coordinator's [`Carrier`] asked of its links during one call, carried out
/// in order after it ([`Sim::carry`]).
#[derive(Debug)]
enum LinkAction {
    ToNodes { to: Vec<(NodeId, ConnId)>, epoch: Epoch, msg: CoordinatorToNode },
    Close { node: NodeId, conn: ConnId },
    Raft { to: CoordinatorId, bytes: Vec<u8> },
    ToClient { client: ClientId, msg: CoordinatorToClient },
    Persist(GroupState),
    Event(Event),
}

/// The simulator's [`Links`]: each call recorded, to be carried by the seeded network. A
/// simulated link has no bounded queue — the network holds what is in flight — so no node
/// is ever "not reading" here (docs/design.md §14 says what the simulator does not model).
#[derive(Debug, Default)]
pub(super) struct SimLinks {
    out: Vec<LinkAction>,
}

impl Links for SimLinks {
    fn to_nodes(&mut self, to: &[(NodeId, ConnId)], epoch: Epoch, msg: CoordinatorToNode, _full: &mut Vec<NodeId>) {
        self.out.push(LinkAction::ToNodes { to: to.to_vec(), epoch, msg });
    }
    fn close_node(&mut self, node: NodeId, conn: ConnId, _reason: &str) {
        self.out.push(LinkAction::Close { node, conn });
    }
    fn to_coordinator(&mut self, to: CoordinatorId, bytes: Vec<u8>) {
        self.out.push(LinkAction::Raft { to, bytes });
    }
    fn to_client(&mut self, client: ClientId, msg: CoordinatorToClient) {
        self.out.push(LinkAction::ToClient { client, msg });
    }
    fn persist(&mut self, state: &GroupState) -> Result<(), String> {
        self.out.push(LinkAction::Persist(state.clone()));
        Ok(())
    }
    fn event(&mut self, e: &Event) {
        self.out.push(LinkAction::Event(e.clone()));
    }
}

impl Sim {
    // ----- the network and the processes -----

    /// Calls coordinator `c`'s carrier (if its process runs) with the time and the simulated
    /// links, then carries out what it asked, in order, and the replies it grouped.
    pub(super) fn with_carrier(
        &mut self,
        c: CoordinatorId,
        call: impl FnOnce(&mut Carrier, u64, &mut SimLinks) -> Result<(), CarrierStop>,
    ) {
        let now = self.now_us;
        let Some(carrier) = self.coordinators.get_mut(&c).and_then(|sc| sc.carrier.as_mut()) else { return };
        let mut links = SimLinks::default();
        let stopped = call(carrier, now, &mut links);
        carrier.flush_replies(&mut links);
        self.carry(c, links.out);
        self.note_decided(c);
        if let Err(e) = stopped {
            self.violations.push(Violation::CoordinatorStopped { coordinator: c, reason: e.to_string() });
        }
    }

    /// Ends `node`'s live link to coordinator `c`, if its process runs: what was in flight on
    /// it is lost and the node's machine learns it (it dials again). Whether it did.
    pub(super) fn end_link(&mut self, node: NodeId, c: CoordinatorId) -> bool {
        let now = self.now_us;
        let n = self.node_mut(node);
        let Some(l) = n.links.get_mut(&c).filter(|l| l.alive) else { return false };
        if !n.up {
            return false;
        }
        l.alive = false;
        let link = l.id;
        n.machine.on_link_lost(c, now);
        self.net.cut(node, link, None);
        true
    }

    /// Carries out what coordinator `c`'s carrier asked of its links, as the process's
    /// [`Links`] do: the simulated network in place of QUIC, the kept state in place of the
    /// file.
    fn carry(&mut self, c: CoordinatorId, out: Vec<LinkAction>) {
        for o in out {
            match o {
                LinkAction::Persist(state) => {
                    // Stored (fsync'd) before anything after it leaves.
                    if let Some(sc) = self.coordinators.get_mut(&c) {
                        sc.stored = Some(state);
                    }
                }
                LinkAction::ToNodes { to, epoch, msg } => {
                    if let CoordinatorToNode::Batch(b) = &msg {
                        self.checker.sent(epoch, b);
                        for t in &b.txns {
                            let (_, sent_in) = *self.batch_of.entry((b.partition, t.ts)).or_insert((b.seq, epoch));
                            if sent_in < epoch {
                                self.resent.insert((b.partition, t.ts));
                            }
                        }
                    }
                    if matches!(msg, CoordinatorToNode::Membership { .. } | CoordinatorToNode::TakeOver { .. }) {
                        self.trace_line(|| format!("coordinator {c} (epoch {epoch}) sends {to:?} {msg:?}"));
                    }
                    for (n, conn) in to {
                        self.send_to_node(n, conn, c, epoch, msg.clone());
                    }
                }
                LinkAction::Close { node, conn } => {
                    // Its process ends the QUIC connection: the node sees it close.
                    if self.nodes[&node].links.get(&c).is_some_and(|l| l.id == conn) {
                        self.end_link(node, c);
                    }
                }
                LinkAction::ToClient { msg: CoordinatorToClient::ClientReplies(replies), client } => {
                    for reply in replies {
                        self.check_answer(c, client, reply.request_id, &reply.result);
                        self.answer(c, client, reply);
                    }
                }
                LinkAction::ToClient { msg: CoordinatorToClient::DigestReply { request_id, outcome, .. }, .. } => {
                    self.digest_replies.insert(request_id, outcome);
                }
                LinkAction::ToClient { msg, .. } => self.violations.push(Violation::UnexpectedToClient { msg }),
                LinkAction::Raft { to, bytes } => {
                    let (Some(from), Some(dest)) = (self.coordinators.get(&c), self.coordinators.get(&to)) else {
                        continue;
                    };
                    if dest.carrier.is_some() {
                        let msg = Carried::Raft { from: c, from_process: from.process, to, bytes };
                        self.net.send(Envelope { node: RAFT_NODE, link: dest.process, msg });
                    }
                }
                LinkAction::Event(e) => {
                    if self.trace {
                        eprintln!("{:>10} µs step {:>6}: coordinator {c}: {e}", self.now_us - START_US, self.step);
                    }
                    if let Event::Promoted { partition, applied_seq, next_seq, .. } = &e {
                        let epoch = self.coordinators.get(&c).and_then(SimCoord::member).map_or(0, |m| m.term());
                        self.promotions.push((epoch, *partition, *applied_seq, *next_seq));
                        self.checker.failed_over.insert(*partition);
                    }
                    match &e {
                        Event::NodeDown { node, detection, .. } => {
                            self.stats.nodes_down += 1;
                            if let Some(l) = self.nodes.get_mut(node).and_then(|n| n.links.get_mut(&c)) {
                                l.declared_failed = l.alive;
                            }
                            if matches!(detection, coordinator::Detection::Lagging { .. }) {
                                self.stats.lagging += 1;
                            }
                        }
                        Event::Rejoined { .. } => self.stats.rejoins += 1,
                        Event::Promoting { partition, .. } => {
                            self.stats.promotions += 1;
                            self.checker.failed_over.insert(*partition);
                        }
                        Event::TookOver { .. } => self.stats.take_overs += 1,
                        Event::Deposed { .. } => self.stats.deposed += 1,
                        _ => {}
                    }
                    self.events.push(e);
                }
            }
        }
    }

    /// A client's reply (from coordinator `c`, or "outcome unknown" from the client library
    /// when `c`'s connection went).
    pub(super) fn answer(&mut self, c: CoordinatorId, client: ClientId, reply: wire::messages::ClientReply) {
        use wire::messages::Rejection;
        if let Some(sc) = self.coordinators.get_mut(&c) {
            sc.open.remove(&(client, reply.request_id));
        }
        // What a failure took the answer of — an "outcome unknown", or a retry this
        // coordinator could not answer now — is asked again, as the load driver does
        // (docs/design.md §11, "Exactly-once answers"), up to RETRIES_PER_REQUEST_MAX times.
        let retried = self.retried.get(&reply.request_id).copied().unwrap_or(0);
        let ask_again = match &reply.result {
            ClientResult::OutcomeUnknown { .. } => true,
            ClientResult::Rejected(
                Rejection::NotLeader { .. } | Rejection::NotReady { .. } | Rejection::NoLiveReplica { .. },
            ) => retried > 0,
            _ => false,
        };
        if ask_again && retried < RETRIES_PER_REQUEST_MAX {
            self.retried.insert(reply.request_id, retried + 1);
            self.retry_queue.insert((client, reply.request_id));
            return;
        }
        let mut reply = reply;
        if ask_again {
            // Given up: what became of it is unknown to the client.
            let reason = format!("asked again {retried} times without an answer");
            reply.result = ClientResult::OutcomeUnknown { ts: wire::messages::Timestamp(0), reason };
        }
        if let ClientResult::Committed { ts, .. } | ClientResult::Aborted { ts, .. } | ClientResult::Failed { ts, .. } =
            &reply.result
        {
            self.seen_ts = self.seen_ts.max(*ts);
            if retried > 0 {
                self.stats.answers_from_retries += 1;
            }
        }
        let line = format!("{client} {} {:?}\n", reply.request_id, reply.result);
        self.answer_log.update(line.as_bytes());
        let entry = self.answers.entry((client, reply.request_id)).or_insert((reply.result, 0));
        entry.1 += 1;
        if let Some(a) = self.answered.get_mut(reply.request_id as usize) {
            *a = true;
        }
        while self.answered.get(self.answered_below as usize) == Some(&true) {
            self.answered_below += 1;
        }
    }

    /// Coordinator `c` sends `msg` to `node` on connection `conn`: lost unless the node's
    /// process runs and that link is its connected one.
    fn send_to_node(&mut self, node: NodeId, conn: ConnId, c: CoordinatorId, epoch: Epoch, msg: CoordinatorToNode) {
        let Some(n) = self.nodes.get(&node) else { return };
        match n.links.get(&c) {
            Some(l) if n.up && l.alive && l.id == conn => {
                self.net.send(Envelope { node, link: l.id, msg: Carried::ToNode { from: c, epoch, msg } })
            }
            _ => self.net.lost += 1,
        }
    }
    pub(super) fn send_from_node(&mut self, node: NodeId, c: CoordinatorId, msg: NodeToCoordinator) {
        let n = &self.nodes[&node];
        if let Some(l) = n.links.get(&c).filter(|l| n.up && l.alive) {
            self.net.send(Envelope { node, link: l.id, msg: Carried::ToCoordinator { to: c, msg } });
        }
    }
    /// Whether `e` can still be delivered: a control message on `node`'s current, connected
    /// link of a running process; a peer message between two processes that both still run.
    pub(super) fn deliverable(&self, e: &Envelope) -> bool {
        let coordinator_up = |c: &CoordinatorId| self.is_coordinator_up(*c);
        if let Carried::Raft { from, from_process, to, .. } = &e.msg {
            let (f, t) = (&self.coordinators[from], &self.coordinators[to]);
            return f.carrier.is_some()
                && f.process == *from_process
                && t.carrier.is_some()
                && t.process == e.link
                && !self.coordinator_cuts.contains(&(*from, *to));
        }
        let n = &self.nodes[&e.node];
        match &e.msg {
            Carried::Peer { from, from_process, .. } => {
                let f = &self.nodes[from];
                n.up && n.process == e.link && f.up && f.process == *from_process
            }
            Carried::ToNode { from: c, .. } | Carried::ToCoordinator { to: c, .. } => {
                n.up && coordinator_up(c) && n.links.get(c).is_some_and(|l| l.alive && l.id == e.link)
            }
            Carried::Raft { .. } => unreachable!("handled above"),
        }
    }
    /// Delivers one message in flight, chosen at random (possibly leaving a duplicate, or
    /// holding it back instead).
    pub fn deliver_one(&mut self) {
        let faults = self.faults.net;
        let Some(e) = self.net.deliver(&mut self.rng, &faults, self.step) else { return };
        if !self.deliverable(&e) {
            return;
        }
        match e.msg {
            Carried::ToCoordinator { to, msg } => {
                let (node, conn) = (e.node, e.link);
                self.with_carrier(to, |k, now, links| k.on_node_message(node, conn, msg, now, links));
            }
            Carried::ToNode { from, epoch, msg } => {
                if matches!(
                    msg,
                    CoordinatorToNode::Membership { .. }
                        | CoordinatorToNode::ShipTo { .. }
                        | CoordinatorToNode::TakeOver { .. }
                        | CoordinatorToNode::Promote { .. }
                ) {
                    self.trace_line(|| format!("node {} gets {msg:?} from coordinator {from}", e.node));
                }
                if let CoordinatorToNode::Membership { partition, live, .. } = &msg {
                    if live.iter().collect::<std::collections::BTreeSet<_>>().len() != live.len() {
                        let (node, partition, live) = (e.node, *partition, live.clone());
                        self.violations.push(Violation::MembershipRepeats { node, partition, live });
                    }
                }
                let effects = self.node_mut(e.node).machine.on_coordinator(from, epoch, msg);
                self.perform(e.node, effects);
            }
            Carried::Raft { from, to, bytes, .. } => {
                self.with_carrier(to, |k, now, links| k.on_coordinator_message(from, &bytes, now, links));
            }
            Carried::Peer { from, from_process, msg: PeerMsg::Ship(shipment) } => {
                let partition = shipment.partition;
                self.trace_line(|| {
                    format!("node {} gets node {from}'s shipment {} of p{partition}", e.node, shipment.seq)
                });
                let reply = PeerAddr { node: from, process: from_process };
                let Some(m) = self.node_mut(e.node).partitions.get_mut(&partition) else {
                    self.violations.push(Violation::UnheldPartition { node: e.node, partition });
                    return;
                };
                let effects = m.on_shipment(shipment, reply);
                self.perform_partition(e.node, partition, effects);
            }
            Carried::Peer { from, msg: PeerMsg::Ack { partition, seq }, .. } => {
                self.trace_line(|| {
                    format!(
                        "node {} gets node {from}'s acknowledgement of p{partition} shipments through {seq}",
                        e.node
                    )
                });
                let now = self.now_us;
                let effects = self.node_mut(e.node).machine.on_ack(from, partition, seq, now);
                self.perform(e.node, effects);
            }
        }
    }

    /// Coordinator `c`'s clock ticks (it runs).
    pub(super) fn tick_coordinator(&mut self, c: CoordinatorId) {
        self.with_carrier(c, |k, now, links| k.tick(now, links));
    }

    /// A client submits the generator's next transaction, to the coordinator that leads (a
    /// client knows every coordinator and finds the leader), or, with none leading, to one
    /// that runs (which answers "not the leader").
    pub fn submit(&mut self, client: ClientId) {
        let input: TxnInput = self.generator.next((self.now_us / 1_000_000) as i64);
        let request_id = self.inputs.len() as u64;
        self.inputs.push(input);
        self.not_befores.push(self.seen_ts);
        self.answered.push(false);
        let up: Vec<CoordinatorId> =
            self.coordinators.iter().filter(|(_, sc)| sc.carrier.is_some()).map(|(&c, _)| c).collect();
        let target = match self.leader() {
            Some((c, _)) => c,
            None if up.is_empty() => {
                // No coordinator runs: the client cannot connect, and knows of no leader.
                let reply = wire::messages::ClientReply {
                    request_id,
                    result: ClientResult::Rejected(wire::messages::Rejection::NotLeader { leader: None }),
                };
                return self.answer(CoordinatorId::MAX, client, reply);
            }
            None => up[self.rng.below(up.len() as u64) as usize],
        };
        let sc = self.coordinators.get_mut(&target).expect("chosen among them");
        sc.open.insert((client, request_id));
        let request = wire::messages::ClientRequest::new(client + 1, request_id, self.seen_ts, input);
        let msg = wire::channel::ClientToCoordinator::ClientRequests(vec![request]);
        self.with_carrier(target, |k, now, links| k.on_client_message(client, msg, now, links));
    }

    /// The clients ask the leading coordinator again about every request a failure took the
    /// answer of (nothing while none leads).
    pub(super) fn ask_again(&mut self) {
        let Some((target, _)) = self.leader() else { return };
        let queued: Vec<(ClientId, u64)> = std::mem::take(&mut self.retry_queue).into_iter().collect();
        let mut by_client: std::collections::BTreeMap<ClientId, Vec<wire::messages::ClientRequest>> =
            Default::default();
        for (client, request_id) in queued {
            let input = self.inputs[request_id as usize];
            let not_before = self.not_befores[request_id as usize];
            let first = wire::messages::ClientRequest::new(client + 1, request_id, not_before, input);
            by_client.entry(client).or_default().push(wire::messages::ClientRequest { retry: true, ..first });
            self.coordinators.get_mut(&target).expect("leads").open.insert((client, request_id));
            self.stats.retries += 1;
        }
        for (client, requests) in by_client {
            let msg = wire::channel::ClientToCoordinator::ClientRequests(requests);
            self.with_carrier(target, |k, now, links| k.on_client_message(client, msg, now, links));
        }
    }
}
