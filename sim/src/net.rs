//! The simulated network: one link per node and coordinator, carrying the control channel's
//! messages both ways ([`Carried`]: `wire::channel::CoordinatorToNode` down with its sender's
//! epoch, `wire::channel::NodeToCoordinator` up), the raft messages between coordinators
//! ([`Carried::Raft`]), and the peer links a primary opens to its backups (shipments one
//! way, acknowledgements the other: [`PeerMsg`]). It owns the messages in flight and the held
//! ones, and the faults a network can do to them.
//!
//! What the real transport does, and what is modelled:
//! - a link is a QUIC connection: reliable and ordered while it lives. The simulator is
//!   harsher than that on purpose: it delivers in-flight messages in random order within and
//!   across links, holds some back for a while (a delay), and duplicates some of the kinds
//!   whose receivers promise to drop duplicates (batches at a replica, results and heartbeats
//!   at the coordinator) — QUIC itself never duplicates;
//! - a *drop* is honest about QUIC: messages are not lost one by one, a connection breaks.
//!   [`Network::cut`] loses everything in flight and held on that link, both ways; what the
//!   processes do about a broken link is the cluster's business ([`crate::cluster`]);
//! - every message carries the id of the link (connection) it was sent on; a restarted node
//!   gets a new link, and nothing sent on an older one is ever delivered. A peer message
//!   carries the receiving process's id instead (and the sender's, in [`Carried::Peer`]):
//!   when either process is gone, the connection is, and the message with it.
//!
//! - some messages mean something only in their place in the stream — `ShipTo` ("ship from the
//!   next batch on"), `Promote` ("execute from here on") and `Membership` ("wait for these
//!   backups from the next batch on") — and the real link, one ordered QUIC stream, keeps
//!   that place. So does a peer link, in full: shipments and acknowledgements travel in
//!   order (a backup tolerates reordered shipments, but a shipment held back behind a
//!   thousand later ones is not something a QUIC stream does, and a sync primary's promise is
//!   about what its backups hold by the time it answers). Such a message is a *barrier*: nothing sent before it on
//!   its link is delivered after it, and nothing sent after it before it
//!   ([`Envelope::is_barrier`]); between barriers the reordering above is free. (Found when
//!   the simulator first ran active-passive: a `ShipTo` overtaken by the batches after it left
//!   the rejoining backup a gap it could never fill.)
//!
//! Guarantees: the order of everything is a function of the [`Rng`] passed in; nothing is
//! delivered twice unless [`Network::deliver`] was asked to leave a duplicate; no message
//! crosses a barrier of its link.

use engine::rng::Rng;
use wire::channel::{CoordinatorToNode, NodeToCoordinator};
use wire::messages::{CoordinatorId, Epoch, NodeId, PartitionId, Seq, Shipment};

/// Which end of a node's link a message goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    ToCoordinator,
    ToNode,
}

/// A message of the control channel, in the direction it travels, or of a peer link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Carried {
    /// From coordinator `from`, leading (or taking over) `epoch`.
    ToNode {
        from: CoordinatorId,
        epoch: Epoch,
        msg: CoordinatorToNode,
    },
    ToCoordinator {
        to: CoordinatorId,
        msg: NodeToCoordinator,
    },
    /// A raft message from coordinator `from`'s process `from_process` to coordinator `to`'s
    /// process, the envelope's link (the envelope's node is [`RAFT_NODE`]).
    Raft {
        from: CoordinatorId,
        from_process: u64,
        to: CoordinatorId,
        bytes: Vec<u8>,
    },
    /// From node `from`'s process `from_process` to the envelope's node and process.
    Peer {
        from: NodeId,
        from_process: u64,
        msg: PeerMsg,
    },
}

/// What a peer link carries (the peer channel's shipping half).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerMsg {
    /// A primary's shipment to a backup.
    Ship(Shipment),
    /// A backup applied the partition's shipments up to `seq`.
    Ack { partition: PartitionId, seq: Seq },
}

/// The node id a raft message's envelope carries (no node has it: ids start at 1).
pub const RAFT_NODE: NodeId = 0;

/// A message in flight on node `node`'s link number `link` (a peer message: to node `node`'s
/// process number `link`; a raft message: to the coordinator process number `link`).
#[derive(Debug, Clone)]
pub struct Envelope {
    pub node: NodeId,
    pub link: u64,
    pub msg: Carried,
}

/// A peer link as its shipments name it: to node `to`'s process `link`, from node `from`'s
/// process `from_process`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ShipLink {
    pub to: NodeId,
    pub link: u64,
    pub from: NodeId,
    pub from_process: u64,
}

impl Envelope {
    /// The peer link this envelope is a shipment on, if it is one.
    fn ship_link(&self) -> Option<ShipLink> {
        match &self.msg {
            Carried::Peer { from, from_process, msg: PeerMsg::Ship(_) } => {
                Some(ShipLink { to: self.node, link: self.link, from: *from, from_process: *from_process })
            }
            _ => None,
        }
    }

    /// Which end of the link the message goes to.
    pub fn direction(&self) -> Direction {
        match self.msg {
            Carried::ToNode { .. } | Carried::Peer { .. } => Direction::ToNode,
            Carried::ToCoordinator { .. } | Carried::Raft { .. } => Direction::ToCoordinator,
        }
    }

    /// Whether this message keeps its place in its link's stream (see the module comment).
    pub fn is_barrier(&self) -> bool {
        matches!(
            &self.msg,
            Carried::ToNode {
                msg: CoordinatorToNode::ShipTo { .. }
                    | CoordinatorToNode::Promote { .. }
                    | CoordinatorToNode::Membership { .. }
                    | CoordinatorToNode::TakeOver { .. },
                ..
            } | Carried::Peer { .. }
        )
    }

    /// Whether `other` travels the same ordered stream as this one.
    fn same_stream(&self, other: &Envelope) -> bool {
        self.node == other.node
            && self.link == other.link
            && self.direction() == other.direction()
            && matches!(self.msg, Carried::Peer { .. }) == matches!(other.msg, Carried::Peer { .. })
    }

    /// Whether a duplicate of this message is something its receiver must tolerate.
    fn may_duplicate(&self) -> bool {
        match &self.msg {
            Carried::ToNode { msg, .. } => matches!(msg, CoordinatorToNode::Batch(_)),
            Carried::ToCoordinator { msg, .. } => {
                matches!(
                    msg,
                    NodeToCoordinator::Results(_)
                        | NodeToCoordinator::ResultsDigest(_)
                        | NodeToCoordinator::Heartbeat { .. }
                )
            }
            // Raft tolerates duplicated messages.
            Carried::Raft { .. } => true,
            // A peer link is a QUIC stream: a duplicate would be a transport bug.
            Carried::Peer { .. } => false,
        }
    }
}

/// How adversarial the network is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetFaults {
    /// Percent of deliveries that leave a copy behind (a duplicate), for the kinds that may
    /// be duplicated.
    pub duplicate_pct: u64,
    /// Percent of deliveries held back for `hold_steps` steps instead.
    pub hold_pct: u64,
    /// Steps a held message waits.
    pub hold_steps: u64,
    /// Percent of deliveries that take the newest message in flight (so older ones wait
    /// longer); the others take one at random.
    pub newest_pct: u64,
}

impl NetFaults {
    /// Everything delivered once, in random order.
    pub const CALM: NetFaults = NetFaults { duplicate_pct: 0, hold_pct: 0, hold_steps: 0, newest_pct: 40 };
    /// Reordering, duplication and delays, as the first simulator had them.
    pub const ADVERSARIAL: NetFaults = NetFaults { duplicate_pct: 10, hold_pct: 5, hold_steps: 300, newest_pct: 40 };
}

/// A message in flight, numbered in the order it was sent.
#[derive(Debug, Clone)]
struct Sent {
    n: u64,
    e: Envelope,
}

/// The messages in flight and held back.
#[derive(Debug, Default)]
pub struct Network {
    in_flight: Vec<Sent>,
    /// Held messages and the step at which they come back in flight.
    held: Vec<(u64, Sent)>,
    /// Messages sent so far (each one's number).
    sent: u64,
    /// Messages lost to broken links so far.
    pub lost: u64,
    /// Shipments in flight or held, per peer link (a primary's queue to a backup, without a
    /// scan of the network per shipment).
    shipments: std::collections::BTreeMap<ShipLink, usize>,
}

impl Network {
    pub fn send(&mut self, envelope: Envelope) {
        self.sent += 1;
        self.counted(&envelope, true);
        self.in_flight.push(Sent { n: self.sent, e: envelope });
    }

    /// Counts `e` in (or out of) its peer link's shipments.
    fn counted(&mut self, e: &Envelope, added: bool) {
        let Some(link) = e.ship_link() else { return };
        if added {
            *self.shipments.entry(link).or_insert(0) += 1;
            return;
        }
        self.uncount(link);
    }

    fn uncount(&mut self, link: ShipLink) {
        let n = self.shipments.get_mut(&link).expect("counted when sent");
        *n -= 1;
        if *n == 0 {
            self.shipments.remove(&link);
        }
    }

    /// Shipments in flight or held on peer link `link`.
    pub fn shipments_on(&self, link: ShipLink) -> usize {
        self.shipments.get(&link).copied().unwrap_or(0)
    }

    /// Whether in-flight message `i` may be delivered now: no barrier sent before it on its
    /// stream is still undelivered, and, a barrier itself, nothing sent before it is.
    fn may_deliver(&self, i: usize) -> bool {
        let me = &self.in_flight[i];
        let barrier = me.e.is_barrier();
        let blocks = |o: &Sent| o.n < me.n && o.e.same_stream(&me.e) && (barrier || o.e.is_barrier());
        !self.in_flight.iter().any(blocks) && !self.held.iter().any(|(_, o)| blocks(o))
    }

    /// Takes one message in flight to deliver, chosen from `rng`, or `None` when none is in
    /// flight or the chosen one was held back instead (until step `step + hold_steps`).
    pub fn deliver(&mut self, rng: &mut Rng, faults: &NetFaults, step: u64) -> Option<Envelope> {
        if self.in_flight.is_empty() {
            return None;
        }
        let mut i = if rng.below(100) < faults.newest_pct {
            self.in_flight.len() - 1
        } else {
            rng.below(self.in_flight.len() as u64) as usize
        };
        if !self.may_deliver(i) {
            // The oldest message of its stream in flight goes instead, if a barrier allows.
            let stream = self.in_flight[i].e.clone();
            let oldest = (0..self.in_flight.len())
                .filter(|&j| self.in_flight[j].e.same_stream(&stream))
                .min_by_key(|&j| self.in_flight[j].n)
                .expect("i itself is of its stream");
            if !self.may_deliver(oldest) {
                return None;
            }
            i = oldest;
        }
        let duplicated = rng.below(100) < faults.duplicate_pct && self.in_flight[i].e.may_duplicate();
        let sent = if duplicated { self.in_flight[i].clone() } else { self.in_flight.swap_remove(i) };
        if rng.below(100) < faults.hold_pct {
            if duplicated {
                // The copy left in flight and the one held back.
                self.counted(&sent.e, true);
            }
            self.held.push((step + faults.hold_steps, sent));
            return None;
        }
        if !duplicated {
            self.counted(&sent.e, false);
        }
        Some(sent.e)
    }

    /// Puts the held messages due by `step` back in flight.
    pub fn release(&mut self, step: u64) {
        if self.held.iter().any(|(at, _)| *at <= step) {
            let (due, kept): (Vec<_>, Vec<_>) =
                std::mem::take(&mut self.held).into_iter().partition(|(at, _)| *at <= step);
            self.held = kept;
            self.in_flight.extend(due.into_iter().map(|(_, e)| e));
        }
    }

    /// Puts every held message back in flight.
    pub fn release_all(&mut self) {
        self.in_flight.extend(self.held.drain(..).map(|(_, e)| e));
    }

    /// Loses every message in flight or held on node `node`'s link `link` going `direction`
    /// (both ways when `None`); returns how many.
    pub fn cut(&mut self, node: NodeId, link: u64, direction: Option<Direction>) -> usize {
        let on_link = |s: &Sent| s.e.node == node && s.e.link == link && direction.is_none_or(|d| d == s.e.direction());
        let before = self.in_flight.len() + self.held.len();
        let cut: Vec<ShipLink> = self
            .in_flight
            .iter()
            .chain(self.held.iter().map(|(_, s)| s))
            .filter(|s| on_link(s))
            .filter_map(|s| s.e.ship_link())
            .collect();
        for link in cut {
            self.uncount(link);
        }
        self.in_flight.retain(|s| !on_link(s));
        self.held.retain(|(_, s)| !on_link(s));
        let lost = before - self.in_flight.len() - self.held.len();
        self.lost += lost as u64;
        lost
    }

    /// Messages in flight or held.
    pub fn len(&self) -> usize {
        self.in_flight.len() + self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether every message in flight or held satisfies `f`.
    pub fn all(&self, f: impl Fn(&Envelope) -> bool) -> bool {
        self.in_flight.iter().all(|s| f(&s.e)) && self.held.iter().all(|(_, s)| f(&s.e))
    }

    /// Forgets every message (the caller established none can be delivered).
    pub fn clear(&mut self) {
        self.in_flight.clear();
        self.held.clear();
        self.shipments.clear();
    }

    /// How many messages in flight or held satisfy `f`.
    #[cfg(test)]
    fn count(&self, f: impl Fn(&Envelope) -> bool) -> usize {
        self.in_flight.iter().filter(|s| f(&s.e)).count() + self.held.iter().filter(|(_, s)| f(&s.e)).count()
    }

    /// Whether a message satisfying `f` is in flight or held.
    pub fn any(&self, f: impl Fn(&Envelope) -> bool) -> bool {
        !self.all(|e| !f(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipment(seq: Seq) -> Shipment {
        Shipment {
            partition: 1,
            primary: 1,
            seq,
            last_ts: None,
            pieces: Vec::new(),
            log: wire::messages::ShippedLog::Wal(Vec::new()),
            answers: Vec::new(),
        }
    }

    /// The per-link count of shipments a primary's queue length is read from agrees with a
    /// scan of the network after every send, delivery (held back or not), release and cut.
    #[test]
    fn the_shipments_counted_per_link_are_those_in_flight_or_held() {
        let mut rng = Rng::new(7);
        let mut net = Network::default();
        let faults = NetFaults { hold_pct: 20, hold_steps: 5, ..NetFaults::ADVERSARIAL };
        let links = [
            ShipLink { to: 2, link: 1, from: 1, from_process: 1 },
            ShipLink { to: 3, link: 4, from: 1, from_process: 2 },
        ];
        for step in 0..5_000u64 {
            match rng.below(10) {
                0..=3 => {
                    let l = links[rng.below(2) as usize];
                    let msg = Carried::Peer {
                        from: l.from,
                        from_process: l.from_process,
                        msg: PeerMsg::Ship(shipment(step)),
                    };
                    net.send(Envelope { node: l.to, link: l.link, msg });
                }
                4 => {
                    let msg = Carried::ToCoordinator { to: 0, msg: NodeToCoordinator::Heartbeat { now_ms: step } };
                    net.send(Envelope { node: 2, link: 1, msg });
                }
                5..=7 => {
                    net.deliver(&mut rng, &faults, step);
                }
                8 => net.release(step),
                _ if rng.below(20) == 0 => {
                    net.cut(2, 1, None);
                }
                _ => {}
            }
            for l in links {
                let scanned = net.count(|e| e.ship_link() == Some(l));
                assert_eq!(net.shipments_on(l), scanned, "step {step}, {l:?}");
            }
        }
    }
}
