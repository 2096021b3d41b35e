//! The coordinator's Prometheus metrics (docs/usage.md, "Metrics"), served by
//! [`wire::metrics::serve`] when the coordinator's `metrics` address is set.
//!
//! Owns the names, help texts and labels of the coordinator's figures, and what it takes to
//! count them from what the core already carries: answers by outcome, failures detected by
//! signal, elections, promotions and rejoins (from the machine's events), each replica's
//! results by how long after their batch was sent they came, and its lag in batches. The core
//! calls these on its own task; the partitions' state is published for scrapes at most every
//! [`PUBLISH_EVERY`], so a scrape never waits for the core and the core never waits for one.
//! The core always counts (each partition's result times are in its status report, for
//! `glass cluster status`'s p99); it publishes for scrapes only when an endpoint is configured.

use crate::leader::Event;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wire::channel::NodeToCoordinator;
use wire::messages::{ClientResult, ProcessStatus, Seq};
use wire::metrics::{Labels, Latencies, Samples};
use wire::{NodeId, PartitionId};

/// How often the partitions' state is published for scrapes.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(100);
/// Batches per partition whose send time is remembered (for the replicas' result times); a
/// result for an older batch is not timed.
pub const BATCHES_REMEMBERED: usize = 4_096;

type Counters = Family<Labels, Counter>;

/// What the core publishes for scrapes.
#[derive(Debug, Default)]
struct Published {
    status: Option<ProcessStatus>,
    /// The raft term (0 for a single coordinator).
    term: u64,
    /// Per (partition, node): batches sent that the replica has not reported (a passive
    /// backup: not applied, as of its last heartbeat).
    lag: Vec<(PartitionId, NodeId, u64)>,
    /// Per node: bytes queued for its link.
    queued: Vec<(NodeId, u64)>,
    clients: usize,
    /// Each replica's result times.
    results: Vec<((PartitionId, NodeId), Arc<Latencies>)>,
}

/// The coordinator's counters and what it keeps to fill them.
#[derive(Debug)]
pub struct CoordinatorMetrics {
    answers: Counters,
    /// `answers`' counter of each outcome of [`OUTCOMES`], looked up once: an answer costs one
    /// atomic add.
    answered: [Counter; OUTCOMES.len()],
    failures: Counters,
    elections: Counters,
    promotions: Counters,
    rejoins: Counters,
    catch_up_refused: Counters,
    /// Each replica's result times, and each partition's (all its replicas').
    result_seconds: BTreeMap<(PartitionId, NodeId), Arc<Latencies>>,
    partition_seconds: BTreeMap<PartitionId, Latencies>,
    published: Arc<Mutex<Published>>,
    /// Per partition, the recent batches sent, in order, with when.
    sent: BTreeMap<PartitionId, VecDeque<(Seq, Instant)>>,
    /// The last batch each replica reported.
    reported: BTreeMap<(PartitionId, NodeId), Seq>,
    last_publish: Option<Instant>,
}

/// The outcomes of an answer, as `glass_coordinator_answers_total` labels them.
const OUTCOMES: [&str; 6] = ["committed", "aborted", "failed", "busy", "rejected", "outcome-unknown"];

impl Default for CoordinatorMetrics {
    fn default() -> Self {
        let answers = Counters::default();
        let answered = OUTCOMES.map(|o| answers.get_or_create_owned(&labels(&[("outcome", o.to_string())])));
        CoordinatorMetrics {
            answers,
            answered,
            failures: Counters::default(),
            elections: Counters::default(),
            promotions: Counters::default(),
            rejoins: Counters::default(),
            catch_up_refused: Counters::default(),
            result_seconds: BTreeMap::new(),
            partition_seconds: BTreeMap::new(),
            published: Arc::default(),
            sent: BTreeMap::new(),
            reported: BTreeMap::new(),
            last_publish: None,
        }
    }
}

fn labels(pairs: &[(&'static str, String)]) -> Labels {
    pairs.to_vec()
}

impl CoordinatorMetrics {
    /// A registry of coordinator `id` with these metrics in it.
    pub fn registry(&self, id: u16) -> Registry {
        let mut r = wire::metrics::registry("coordinator", id, PublishedCollector(self.published.clone()));
        r.register(
            "glass_coordinator_answers",
            "Answers to clients' transactions, by outcome (committed, aborted, failed, busy, rejected, outcome-unknown).",
            self.answers.clone(),
        );
        r.register(
            "glass_coordinator_failures_detected",
            "Nodes this coordinator declared failed, by the signal that told (heartbeat-timeout, connection-lost, death-notice, not-reading, replaced, take-over-silence, lagging).",
            self.failures.clone(),
        );
        r.register(
            "glass_coordinator_elections",
            "Leaderships this coordinator took over (took-over) and lost (deposed).",
            self.elections.clone(),
        );
        r.register(
            "glass_coordinator_promotions",
            "Passive modes: backups promoted to primary.",
            self.promotions.clone(),
        );
        r.register(
            "glass_coordinator_rejoins",
            "Replicas rejoining, by stage (began, completed, given-up).",
            self.rejoins.clone(),
        );
        r.register(
            "glass_coordinator_catch_up_refused_transactions",
            "Transactions answered busy by the catch-up policy while a replica rejoined.",
            self.catch_up_refused.clone(),
        );
        r
    }

    /// A batch `seq` of `partition` was sent.
    pub fn on_batch_sent(&mut self, partition: PartitionId, seq: Seq) {
        let sent = self.sent.entry(partition).or_default();
        if sent.back().is_some_and(|&(last, _)| last >= seq) {
            return;
        }
        if sent.len() == BATCHES_REMEMBERED {
            sent.pop_front();
        }
        sent.push_back((seq, Instant::now()));
    }

    /// A message from node `node`: a replica's results for a batch (timed from the batch's
    /// send), or a passive backup's report of the batches it applied (its lag).
    pub fn on_node_message(&mut self, node: NodeId, msg: &NodeToCoordinator) {
        match msg {
            NodeToCoordinator::Results(r) => self.on_results(node, r.partition, r.seq),
            NodeToCoordinator::ResultsDigest(d) => self.on_results(node, d.partition, d.seq),
            NodeToCoordinator::BackupApplied { partition, seq } => self.reached(*partition, node, *seq),
            _ => {}
        }
    }

    /// Node `node`'s replica of `partition` is known to have reached batch `seq`.
    fn reached(&mut self, partition: PartitionId, node: NodeId, seq: Seq) {
        let last = self.reported.entry((partition, node)).or_default();
        *last = (*last).max(seq);
    }

    /// Node `node`'s replica of `partition` reported batch `seq`.
    pub fn on_results(&mut self, node: NodeId, partition: PartitionId, seq: Seq) {
        self.reached(partition, node, seq);
        let Some(sent) = self.sent.get(&partition) else { return };
        let Ok(i) = sent.binary_search_by_key(&seq, |&(s, _)| s) else { return };
        let took = sent[i].1.elapsed();
        self.result_seconds.entry((partition, node)).or_default().observe(took);
        self.partition_seconds.entry(partition).or_default().observe(took);
    }

    /// A client's answer.
    pub fn on_answer(&mut self, result: &ClientResult) {
        let i = match result {
            ClientResult::Committed { .. } => 0,
            ClientResult::Aborted { .. } => 1,
            ClientResult::Failed { .. } => 2,
            ClientResult::Busy { .. } => 3,
            ClientResult::Rejected(_) => 4,
            ClientResult::OutcomeUnknown { .. } => 5,
        };
        self.answered[i].inc();
    }

    /// One of the machine's events.
    pub fn on_event(&mut self, e: &Event) {
        let inc = |family: &Counters, pairs: &[(&'static str, String)]| {
            family.get_or_create(&labels(pairs)).inc();
        };
        match e {
            Event::NodeDown { node, detection, .. } => {
                inc(&self.failures, &[("node", node.to_string()), ("signal", detection.name().to_string())])
            }
            Event::TookOver { .. } => inc(&self.elections, &[("result", "took-over".into())]),
            Event::Deposed { .. } => inc(&self.elections, &[("result", "deposed".into())]),
            Event::Promoted { partition, primary, applied_seq, .. } => {
                inc(&self.promotions, &[("partition", partition.to_string())]);
                self.reached(*partition, *primary, *applied_seq);
            }
            Event::Rejoining { partition, .. } => {
                inc(&self.rejoins, &[("partition", partition.to_string()), ("stage", "began".into())])
            }
            Event::Rejoined { partition, node, snapshot_seq, replayed_batches } => {
                inc(&self.rejoins, &[("partition", partition.to_string()), ("stage", "completed".into())]);
                // Its copy and the batches replayed after it bring it this far.
                self.reached(*partition, *node, snapshot_seq + replayed_batches);
            }
            Event::RejoinGivenUp { partition, .. } => {
                inc(&self.rejoins, &[("partition", partition.to_string()), ("stage", "given-up".into())])
            }
            Event::CatchUpEnded { partition, refused_txns, .. } => {
                self.catch_up_refused
                    .get_or_create(&labels(&[("partition", partition.to_string())]))
                    .inc_by(*refused_txns);
            }
            _ => {}
        }
    }

    /// The partition's result times so far (buckets of [`wire::metrics::latency_bounds`]), for
    /// its status report; empty before any.
    pub fn latency_buckets(&self, partition: PartitionId) -> Vec<u64> {
        self.partition_seconds.get(&partition).map(Latencies::counts).unwrap_or_default()
    }

    /// Whether the state is due to be published again.
    pub fn publish_due(&self) -> bool {
        self.last_publish.is_none_or(|t| t.elapsed() >= PUBLISH_EVERY)
    }

    /// Publishes the core's state for scrapes: its `status`, the raft `term`, each node's
    /// queued bytes, and how many clients are connected.
    pub fn publish(&mut self, status: ProcessStatus, term: u64, queued: Vec<(NodeId, u64)>, clients: usize) {
        self.last_publish = Some(Instant::now());
        let mut lag = Vec::new();
        for p in &status.partitions {
            for &node in &p.replicas {
                let reported = self.reported.get(&(p.partition, node)).copied().unwrap_or(0);
                lag.push((p.partition, node, p.seq.saturating_sub(reported)));
            }
        }
        let mut published = self.published.lock().unwrap_or_else(|e| e.into_inner());
        let results = self.result_seconds.iter().map(|(k, l)| (*k, l.clone())).collect();
        *published = Published { status: Some(status), term, lag, queued, clients, results };
    }
}

/// The state the core last published, encoded at a scrape.
#[derive(Debug)]
struct PublishedCollector(Arc<Mutex<Published>>);

impl Collector for PublishedCollector {
    fn encode(&self, enc: DescriptorEncoder) -> std::fmt::Result {
        let p = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut s = Samples::new(enc);
        let Some(status) = &p.status else { return Ok(()) };
        let leader = status.leader.map_or(-1, i64::from);
        s.gauges(
            "glass_coordinator_leader",
            "The leading coordinator this one knows of (-1: none known).",
            &[(vec![], leader)],
        )?;
        s.gauges(
            "glass_coordinator_term",
            "The coordinator group's raft term (0: a single coordinator).",
            &[(vec![], p.term as i64)],
        )?;
        s.gauges("glass_coordinator_clients", "Clients connected.", &[(vec![], p.clients as i64)])?;
        let part = |id: PartitionId| -> Labels { vec![("partition", id.to_string())] };
        let ps = &status.partitions;
        let phase: Vec<(Labels, i64)> = ps
            .iter()
            .map(|r| {
                let mut l = part(r.partition);
                l.push(("phase", r.phase.name().to_string()));
                (l, 1)
            })
            .collect();
        s.gauges(
            "glass_coordinator_partition_state",
            "A partition as the leader sees it: its phase (serving, promoting, recovering, unavailable, stopped, loading); always 1.",
            &phase,
        )?;
        let of = |f: fn(&wire::messages::PartitionReport) -> i64| -> Vec<(Labels, i64)> {
            ps.iter().map(|r| (part(r.partition), f(r))).collect()
        };
        s.gauges(
            "glass_coordinator_live_replicas",
            "Live replicas of the partition.",
            &of(|r| r.replicas.len() as i64),
        )?;
        s.gauges(
            "glass_coordinator_inflight_transactions",
            "Transactions of the partition sent and not yet answered.",
            &of(|r| r.txns as i64),
        )?;
        let counted = |f: fn(&wire::messages::PartitionReport) -> u64| -> Vec<(Labels, u64)> {
            ps.iter().map(|r| (part(r.partition), f(r))).collect()
        };
        s.counters(
            "glass_coordinator_batches",
            "Batches sent to the partition (its last batch number).",
            &counted(|r| r.seq),
        )?;
        s.counters(
            "glass_coordinator_batch_bytes",
            "Bytes of batches sent to the partition's replicas (each replica counted).",
            &counted(|r| r.replication.shipped_bytes),
        )?;
        let lag: Vec<(Labels, i64)> = p
            .lag
            .iter()
            .map(|&(pid, node, behind)| {
                (vec![("partition", pid.to_string()), ("node", node.to_string())], behind as i64)
            })
            .collect();
        s.gauges(
            "glass_coordinator_replica_lag_batches",
            "Batches sent to the partition that a live replica has not reported results for (a passive backup: has not applied, as of its last heartbeat).",
            &lag,
        )?;
        let queued: Vec<(Labels, i64)> =
            p.queued.iter().map(|&(node, bytes)| (vec![("node", node.to_string())], bytes as i64)).collect();
        s.gauges("glass_coordinator_node_queue_bytes", "Bytes queued for a node's link and not yet sent.", &queued)?;
        let results: Vec<(Labels, &Latencies)> = p
            .results
            .iter()
            .map(|((pid, node), l)| (vec![("partition", pid.to_string()), ("node", node.to_string())], &**l))
            .collect();
        s.latencies(
            "glass_coordinator_replica_result_seconds",
            "Seconds from sending a batch to receiving one replica's results for it.",
            &results,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::messages::{PartitionPhase, PartitionReport, PeerKind};

    fn status(seq: Seq) -> ProcessStatus {
        ProcessStatus {
            role: PeerKind::Coordinator,
            id: 0,
            pid: 1,
            uptime_ms: 5,
            partitions: vec![PartitionReport {
                partition: 1,
                phase: PartitionPhase::Serving,
                load: None,
                replicas: vec![1, 2],
                seq,
                txns: 3,
                cpu_ms: 0,
                replication: Default::default(),
                latency_buckets: Vec::new(),
            }],
            leader: Some(0),
        }
    }

    /// Results are timed from their batch's send, lag counts what a replica has not
    /// reported, and events count by their label.
    #[test]
    fn results_lag_and_events_are_counted() {
        let mut m = CoordinatorMetrics::default();
        for seq in 1..=10 {
            m.on_batch_sent(1, seq);
        }
        m.on_results(1, 1, 10);
        m.on_results(2, 1, 7);
        m.on_results(2, 1, 0); // not remembered: counts nothing, lag unchanged
        m.on_answer(&ClientResult::Busy { partition: 1 });
        let lag_of_2 = |m: &mut CoordinatorMetrics| {
            m.publish(status(10), 3, vec![(1, 42)], 2);
            let text = wire::metrics::render(&m.registry(0));
            let line = text
                .lines()
                .find(|l| l.starts_with("glass_coordinator_replica_lag_batches{partition=\"1\",node=\"2\"}"));
            line.and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok()).unwrap()
        };
        assert_eq!(lag_of_2(&mut m), 3);
        // A passive backup's lag is what it applied, as its heartbeat says (it sends no results).
        m.on_node_message(2, &NodeToCoordinator::BackupApplied { partition: 1, seq: 8 });
        assert_eq!(lag_of_2(&mut m), 2);
        // A rejoined replica has reached its copy and the batches replayed after it.
        m.on_event(&Event::Rejoined { partition: 1, node: 2, snapshot_seq: 5, replayed_batches: 4 });
        assert_eq!(lag_of_2(&mut m), 1);
        m.last_publish = None;
        m.on_event(&Event::NodeDown { node: 2, silent_ms: 1, detection: crate::Detection::HeartbeatTimeout });
        assert!(m.publish_due());
        m.publish(status(10), 3, vec![(1, 42)], 2);
        assert!(!m.publish_due());
        assert_eq!(m.latency_buckets(1).iter().sum::<u64>(), 2, "the partition's two timed results");
        let text = wire::metrics::render(&m.registry(0));
        for line in [
            "glass_coordinator_replica_lag_batches{partition=\"1\",node=\"1\"} 0",
            "glass_coordinator_replica_lag_batches{partition=\"1\",node=\"2\"} 1",
            "glass_coordinator_replica_result_seconds_count{partition=\"1\",node=\"2\"} 1",
            "glass_coordinator_answers_total{outcome=\"busy\"} 1",
            "glass_coordinator_failures_detected_total{node=\"2\",signal=\"heartbeat-timeout\"} 1",
            "glass_coordinator_partition_state{partition=\"1\",phase=\"serving\"} 1",
            "glass_coordinator_batches_total{partition=\"1\"} 10",
            "glass_coordinator_term 3",
            "glass_coordinator_node_queue_bytes{node=\"1\"} 42",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }
}
