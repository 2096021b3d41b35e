//! The primary's side of log shipping (passive modes), sans I/O: which results may go to the
//! coordinator, and how far the backups lag.
//!
//! A primary's executor produces, per batch, the results for the coordinator and the log
//! records for the backups. With `shipping = "sync"` the results of batch `n` are held here
//! until every live backup acknowledged applying shipment `n` (acknowledgements are
//! cumulative: a backup applies shipments in order); with `"async"` they pass at once. A
//! backup the coordinator declares failed (a membership without it) is no longer waited for.
//!
//! Guarantees: results leave in the order they arrived (sequence order); in sync mode no
//! result of batch `n` leaves before every live backup acknowledged `n`; every shipment's
//! ship-to-acknowledgement delay is measured once per backup (the lag figures of
//! [`GateStats`]); what is held is bounded by the batches the coordinator has in flight.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use wire::config::Replication;
use wire::messages::{NodeId, PartitionId, Results, Seq};

/// How far the backups lag, as measured at the primary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GateStats {
    /// Shipment acknowledgements (one per shipment per backup).
    pub acks: u64,
    /// Sum and largest ship-to-acknowledgement delay, microseconds.
    pub ack_delay_us_sum: u64,
    pub ack_delay_us_max: u64,
}

/// One partition's gate at its primary.
#[derive(Debug)]
pub struct ShipGate {
    partition: PartitionId,
    /// The cluster's replication: whether results wait for the backups
    /// ([`Replication::answers_wait_for_backups`]).
    replication: Replication,
    /// Live backups → the last shipment each acknowledged.
    acked: BTreeMap<NodeId, Seq>,
    /// Backups rejoining: shipped to, not waited for until a membership names them; the
    /// last shipment each holds — acknowledged, or shipped before it began to rejoin (its
    /// copy of this primary's state holds every batch shipped before then).
    catching_up: BTreeMap<NodeId, Seq>,
    /// The last shipment that left.
    last_shipped: Seq,
    /// Results waiting for acknowledgements (sync), in sequence order.
    held: VecDeque<Results>,
    /// When each unacknowledged shipment left, microseconds.
    shipped_at: BTreeMap<Seq, u64>,
    stats: GateStats,
}

impl ShipGate {
    /// The gate of `partition` whose live backups are `backups`, shipping as `replication` says.
    pub fn new(partition: PartitionId, backups: &[NodeId], replication: Replication) -> ShipGate {
        ShipGate {
            partition,
            replication,
            acked: backups.iter().map(|&b| (b, 0)).collect(),
            catching_up: BTreeMap::new(),
            last_shipped: 0,
            held: VecDeque::new(),
            shipped_at: BTreeMap::new(),
            stats: GateStats::default(),
        }
    }

    pub fn partition(&self) -> PartitionId {
        self.partition
    }

    /// The backups to ship to: the live ones and those rejoining.
    pub fn backups(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.acked.keys().chain(self.catching_up.keys()).copied().collect::<BTreeSet<_>>().into_iter()
    }

    /// A backup rejoining: ship to it from now on, without waiting for it until a membership
    /// names it. A backup still counted live here rejoins as a new process (it restarted
    /// before the coordinator's membership without it arrived): what its old process
    /// acknowledged no longer counts, and the results waiting for it are released, as a
    /// membership without it would release them. Returns those results.
    ///
    /// The backup's copy of the partition is taken after this (the coordinator planned the
    /// rejoin from the batch after its `ShipTo`), so it holds every shipment that left before:
    /// it counts as acknowledged through them. Without that, a sync primary idle after the
    /// rejoin would hold those batches' results for acknowledgements of shipments the backup
    /// never received (`glass sim --mode active-passive --shipping sync --seed 15`).
    pub fn add_catching_up(&mut self, backup: NodeId) -> Vec<Results> {
        self.acked.remove(&backup);
        self.catching_up.insert(backup, self.last_shipped);
        if self.acked.is_empty() {
            self.shipped_at.clear();
        }
        self.forget_acked();
        self.release()
    }

    /// Shipment `seq` left for the backups at `now_us`.
    pub fn on_shipped(&mut self, seq: Seq, now_us: u64) {
        self.last_shipped = self.last_shipped.max(seq);
        if !self.acked.is_empty() {
            self.shipped_at.insert(seq, now_us);
        }
    }

    /// The executor's results for a batch; returns those that may go to the coordinator now.
    pub fn on_results(&mut self, results: Results) -> Vec<Results> {
        self.held.push_back(results);
        self.release()
    }

    /// Backup `from` applied every shipment up to `seq`.
    pub fn on_ack(&mut self, from: NodeId, seq: Seq, now_us: u64) -> Vec<Results> {
        if let Some(acked) = self.catching_up.get_mut(&from) {
            *acked = (*acked).max(seq);
            return Vec::new();
        }
        let Some(prev) = self.acked.get(&from).copied() else { return Vec::new() };
        if seq <= prev {
            return Vec::new();
        }
        self.acked.insert(from, seq);
        for (_, at) in self.shipped_at.range(prev + 1..=seq) {
            let delay = now_us.saturating_sub(*at);
            self.stats.acks += 1;
            self.stats.ack_delay_us_sum += delay;
            self.stats.ack_delay_us_max = self.stats.ack_delay_us_max.max(delay);
        }
        self.forget_acked();
        self.release()
    }

    /// The coordinator's membership of the partition: backups not in `live` are no longer
    /// waited for; a rejoining backup it names is waited for from now on.
    pub fn on_membership(&mut self, live: &[NodeId]) -> Vec<Results> {
        self.acked.retain(|b, _| live.contains(b));
        // A rejoined backup the membership names is waited for from now on.
        let joined: Vec<NodeId> = self.catching_up.keys().copied().filter(|b| live.contains(b)).collect();
        for b in joined {
            let seq = self.catching_up.remove(&b).unwrap_or(0);
            self.acked.insert(b, seq);
        }
        if self.acked.is_empty() {
            self.shipped_at.clear();
        }
        self.forget_acked();
        self.release()
    }

    /// Stops shipping to `backup` and waiting for it (its link failed or it fell too far
    /// behind); returns the results this releases.
    pub fn drop_backup(&mut self, backup: NodeId) -> Vec<Results> {
        self.acked.remove(&backup);
        self.catching_up.remove(&backup);
        self.forget_acked();
        self.release()
    }

    pub fn stats(&self) -> GateStats {
        self.stats
    }

    /// Results held for acknowledgements.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    fn min_acked(&self) -> Option<Seq> {
        self.acked.values().copied().min()
    }

    fn forget_acked(&mut self) {
        match self.min_acked() {
            Some(min) => self.shipped_at = self.shipped_at.split_off(&(min + 1)),
            None => self.shipped_at.clear(),
        }
    }

    fn release(&mut self) -> Vec<Results> {
        let limit = if self.replication.answers_wait_for_backups() { self.min_acked() } else { None };
        let mut out = Vec::new();
        while let Some(front) = self.held.front() {
            if limit.is_some_and(|min| front.seq > min) {
                break;
            }
            out.extend(self.held.pop_front());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::config::Shipping;

    const SYNC: Replication = Replication::ActivePassive { shipping: Shipping::Sync };
    const ASYNC: Replication = Replication::ActivePassive { shipping: Shipping::Async };

    fn results(seq: Seq) -> Results {
        Results { partition: 1, seq, results: Vec::new() }
    }

    fn seqs(r: &[Results]) -> Vec<Seq> {
        r.iter().map(|r| r.seq).collect()
    }

    #[test]
    fn sync_holds_results_until_every_backup_acknowledged() {
        let mut g = ShipGate::new(1, &[2, 3], SYNC);
        for s in 1..=3 {
            g.on_shipped(s, 100 * s);
            assert!(g.on_results(results(s)).is_empty());
        }
        assert!(g.on_ack(2, 2, 500).is_empty(), "backup 3 has not acknowledged");
        assert_eq!(seqs(&g.on_ack(3, 1, 600)), vec![1]);
        assert_eq!(seqs(&g.on_ack(3, 3, 700)), vec![2]);
        assert!(g.on_ack(2, 2, 800).is_empty(), "a stale acknowledgement changes nothing");
        assert_eq!(seqs(&g.on_ack(2, 3, 900)), vec![3]);
        assert_eq!(g.held(), 0);
        // Each shipment measured once per backup: 2×3 acknowledgements.
        let st = g.stats();
        assert_eq!(st.acks, 6);
        assert_eq!(st.ack_delay_us_max, 900 - 300);
    }

    #[test]
    fn async_releases_at_once_and_still_measures_lag() {
        let mut g = ShipGate::new(1, &[2], ASYNC);
        g.on_shipped(1, 1_000);
        assert_eq!(seqs(&g.on_results(results(1))), vec![1]);
        g.on_ack(2, 1, 3_500);
        assert_eq!(g.stats(), GateStats { acks: 1, ack_delay_us_sum: 2_500, ack_delay_us_max: 2_500 });
    }

    #[test]
    fn a_failed_backup_is_no_longer_waited_for() {
        let mut g = ShipGate::new(1, &[2, 3], SYNC);
        g.on_shipped(1, 0);
        assert!(g.on_results(results(1)).is_empty());
        assert!(g.on_ack(2, 1, 10).is_empty());
        assert_eq!(seqs(&g.on_membership(&[1, 2])), vec![1], "node 3 failed");
        assert_eq!(g.backups().collect::<Vec<_>>(), vec![2]);
        g.on_membership(&[1]);
        assert_eq!(seqs(&g.on_results(results(2))), vec![2], "no backup left: nothing to wait for");
    }

    /// Found by `glass sim --mode active-passive --shipping sync --seed 11`: a backup that
    /// restarted before the membership without it reached its primary rejoined while still
    /// counted live at the gate; the gate kept waiting for acknowledgements its old process
    /// would never send, and the partition's last results never left.
    #[test]
    fn a_backup_rejoining_while_counted_live_is_not_waited_for_until_named_again() {
        let mut g = ShipGate::new(1, &[2], SYNC);
        g.on_shipped(1, 0);
        assert!(g.on_results(results(1)).is_empty(), "waiting for node 2");
        assert_eq!(seqs(&g.add_catching_up(2)), vec![1], "its old process's acknowledgement will never come");
        g.on_shipped(2, 10);
        assert_eq!(seqs(&g.on_results(results(2))), vec![2], "catching up: not waited for");
        g.on_membership(&[1, 2]);
        g.on_shipped(3, 20);
        assert!(g.on_results(results(3)).is_empty(), "live again: waited for");
        assert_eq!(seqs(&g.on_ack(2, 3, 30)), vec![3]);
    }

    /// Found by `glass sim --mode active-passive --shipping sync --seed 15`: a backup that
    /// rejoins holds, in its copy, every shipment that left before its `ShipTo`.
    #[test]
    fn a_rejoined_backup_counts_as_holding_what_was_shipped_before_it_rejoined() {
        let mut g = ShipGate::new(1, &[2], SYNC);
        g.on_shipped(1, 0);
        assert!(g.on_results(results(1)).is_empty(), "waiting for node 2");
        g.on_membership(&[1]);
        g.add_catching_up(3);
        g.on_membership(&[1, 3]);
        g.on_shipped(2, 10);
        assert!(g.on_results(results(2)).is_empty(), "node 3 is waited for from batch 2 on");
        assert_eq!(seqs(&g.on_ack(3, 2, 20)), vec![2]);
    }

    #[test]
    fn a_rejoining_backup_is_shipped_to_and_waited_for_once_live() {
        let mut g = ShipGate::new(1, &[], SYNC);
        g.add_catching_up(3);
        assert_eq!(g.backups().collect::<Vec<_>>(), vec![3]);
        g.on_shipped(1, 0);
        assert_eq!(seqs(&g.on_results(results(1))), vec![1], "not waited for while catching up");
        g.on_ack(3, 1, 5);
        g.on_membership(&[1, 3]);
        g.on_shipped(2, 10);
        assert!(g.on_results(results(2)).is_empty(), "live now: waited for");
        assert_eq!(seqs(&g.on_ack(3, 2, 20)), vec![2]);
    }

    #[test]
    fn acknowledgements_from_strangers_are_ignored() {
        let mut g = ShipGate::new(1, &[2], SYNC);
        g.on_results(results(1));
        assert!(g.on_ack(9, 1, 0).is_empty());
        assert_eq!(g.held(), 1);
    }
}
