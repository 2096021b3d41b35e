//! Running the simulated cluster: a run's random steps — submit, deliver, let time pass — with
//! faults at the configured rates and the invariants checked after every step; time passing
//! (the nodes' and coordinators' clocks tick, fetches, catch-ups and digest copies move on);
//! calming and draining; and state digests asked for during traffic or on demand
//! (docs/design.md §10, "Checks during traffic").
//!
//! Guarantees: every choice is drawn from the run's seeded random source; a drain either ends
//! with nothing deliverable in flight, nothing in flight at the leader and no digest copy
//! under way, or reports the cluster stuck ([`SimError::NotDrained`]) after
//! [`DRAIN_DELIVERIES_MAX`] deliveries.

use std::collections::BTreeMap;

use coordinator::carrier::Carrier;
use coordinator::ClientId;
use node::machine::NodeEffect;
use wire::messages::{CoordinatorId, DigestOutcome, NodeId, PartitionId, Seq};

use super::{Faults, Sim, CLIENTS, DRAIN_DELIVERIES_MAX, DRAIN_STEP_US, STEP_US_MAX};
use crate::error::SimError;
use crate::net::NetFaults;

/// The client id digest requests come from.
const DIGEST_CLIENT: ClientId = 9_999;
/// A submitting step asks for a partition's state digests instead, one in this many (docs/
/// design.md §10, "Checks during traffic": the digest copies then race the batches).
const DIGEST_REQUEST_ONE_IN: u64 = 200;

impl Sim {
    /// Advances time by `us`: nodes' machines tick (heartbeats, redials), the coordinator
    /// ticks, fetches that waited complete.
    pub fn advance(&mut self, us: u64) {
        self.now_us += us;
        let now = self.now_us;
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in ids {
            let n = &self.nodes[&id];
            if !n.up || n.machine.next_deadline_us() > now {
                continue;
            }
            let applied: BTreeMap<PartitionId, Seq> =
                n.partitions.iter().filter_map(|(&p, m)| m.replica().map(|r| (p, r.applied_seq()))).collect();
            let muted = now < n.mute_until_us;
            let mut effects = self.node_mut(id).machine.tick(now, |p| applied.get(&p).copied());
            if muted {
                effects.retain(|e| !matches!(e, NodeEffect::ToCoordinator { .. }));
            }
            self.perform(id, effects);
        }
        self.tick_partitions();
        let due: Vec<CoordinatorId> = self
            .coordinators
            .iter()
            .filter(|(_, sc)| sc.carrier.as_ref().and_then(Carrier::next_deadline_us).is_some_and(|d| d <= now))
            .map(|(&c, _)| c)
            .collect();
        for c in due {
            self.tick_coordinator(c);
        }
        // A drawn coordinator fault ends by itself; one a test made lasts until it ends it.
        if self.coordinator_fault_until_us != 0 && now >= self.coordinator_fault_until_us {
            self.coordinator_fault_until_us = 0;
            self.end_coordinator_fault();
        }
        self.progress_fetches();
        self.progress_catch_ups();
        self.progress_digest_copies();
    }

    /// Every partition machine of a node that runs whose deadline came ticks (a fetch's
    /// patience: `PartitionMachine::tick`), as its executor's clock does.
    fn tick_partitions(&mut self) {
        let now = self.now_us;
        let due: Vec<(NodeId, PartitionId)> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.up)
            .flat_map(|(&id, n)| {
                n.partitions
                    .iter()
                    .filter(|(_, m)| m.next_deadline_us().is_some_and(|d| d <= now))
                    .map(move |(&p, _)| (id, p))
            })
            .collect();
        for (node, partition) in due {
            let Some(m) = self.node_mut(node).partitions.get_mut(&partition) else { continue };
            let effects = m.tick(now);
            let expired = effects.iter().filter(|e| matches!(e, node::machine::Effect::AbandonFetch { .. })).count();
            self.stats.fetches_out_of_patience += expired as u64;
            self.perform_partition(node, partition, effects);
        }
    }

    // ----- running -----

    /// `steps` random actions — submit, deliver, let time pass — and, at the configured
    /// rates, node faults.
    pub fn run(&mut self, steps: usize) {
        for _ in 0..steps {
            self.step += 1;
            self.net.release(self.step);
            match self.rng.below(10) {
                0..=2 => {
                    if !self.retry_queue.is_empty() && self.rng.below(2) == 0 {
                        self.ask_again();
                    } else if self.submitting && self.rng.below(DIGEST_REQUEST_ONE_IN) == 0 {
                        self.ask_digests();
                    } else if self.submitting {
                        let client = self.rng.below(CLIENTS);
                        self.submit(client);
                    }
                }
                3..=7 => {
                    self.deliver_one();
                    self.progress_fetches();
                    self.progress_digest_copies();
                }
                _ => {
                    let us = self.rng.below(STEP_US_MAX);
                    self.advance(us);
                }
            }
            self.maybe_fault();
            self.check_step();
        }
    }

    /// Stops drawing faults (of the network too) from here on.
    pub fn calm(&mut self) {
        self.faults = Faults::NONE;
        self.end_coordinator_fault();
        self.net.release_all();
        for n in self.nodes.values_mut() {
            n.mute_until_us = 0;
        }
    }

    /// Delivers everything (no faults), letting batches close, until nothing moves: nothing
    /// deliverable in flight and nothing in flight at the coordinator.
    pub fn drain(&mut self) -> Result<(), SimError> {
        let faults = self.faults;
        self.faults.net = NetFaults::CALM;
        self.net.release_all();
        let mut drained = false;
        for _ in 0..DRAIN_DELIVERIES_MAX {
            if !self.retry_queue.is_empty() {
                self.ask_again();
            }
            let settled = self.leader().is_some_and(|(_, c)| c.status().iter().all(|p| p.inflight_txns == 0));
            let asked = self.retry_queue.is_empty();
            if self.net.all(|e| !self.deliverable(e)) && settled && asked && self.digest_copies.is_empty() {
                self.net.clear();
                drained = true;
                break;
            }
            self.deliver_one();
            self.progress_fetches();
            self.progress_digest_copies();
            self.advance(DRAIN_STEP_US);
            self.check_step();
        }
        self.faults = faults;
        if drained {
            return Ok(());
        }
        let in_flight = std::cell::Cell::new(0);
        let _ = self.net.all(|e| {
            in_flight.set(in_flight.get() + usize::from(self.deliverable(e)));
            true
        });
        let in_flight = in_flight.get();
        Err(SimError::NotDrained {
            deliveries: DRAIN_DELIVERIES_MAX,
            in_flight,
            nodes: self.node_reports(),
            coordinator: self.leader().map(|(_, c)| c.status()).unwrap_or_default(),
        })
    }

    /// A tool asks the leading coordinator, if any, for a random partition's state digests
    /// while the clients submit: the replicas' digest copies race the batches after it. The
    /// answer is kept with the others; digests that differ stop the partition (an alarm).
    fn ask_digests(&mut self) {
        let partitions: Vec<PartitionId> = self.config.partitions.iter().map(|p| p.id).collect();
        let partition = partitions[self.rng.below(partitions.len() as u64) as usize];
        let request_id = self.next_digest_request;
        self.next_digest_request += 1;
        let Some((c, _)) = self.leader() else { return };
        let msg = wire::channel::ClientToCoordinator::DigestRequest { request_id, partition };
        self.stats.digest_requests += 1;
        self.with_carrier(c, |k, now, links| k.on_client_message(DIGEST_CLIENT, msg, now, links));
    }

    /// Asks the coordinator for `partition`'s digests through the ordered path and drains.
    pub fn digests(&mut self, partition: PartitionId) -> Result<DigestOutcome, SimError> {
        let request_id = self.next_digest_request;
        self.next_digest_request += 1;
        // Asked of the coordinator that leads once the cluster settled.
        self.drain()?;
        let Some((c, _)) = self.leader() else { return Err(SimError::NoDigestReply { partition }) };
        let msg = wire::channel::ClientToCoordinator::DigestRequest { request_id, partition };
        self.with_carrier(c, |k, now, links| k.on_client_message(DIGEST_CLIENT, msg, now, links));
        self.drain()?;
        self.digest_replies.remove(&request_id).ok_or(SimError::NoDigestReply { partition })
    }
}
