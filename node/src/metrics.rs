//! The node's Prometheus metrics (docs/usage.md, "Metrics"), served by
//! [`wire::metrics::serve`] when the node's `metrics` address is set.
//!
//! Owns the names, help texts and labels of the node's figures and their encoding. The
//! figures are read when a scrape comes ([`NodeFigures`], filled by the node process from what
//! its executors already publish for `glass cluster status`), so a scrape costs the executors
//! nothing; only [`ReplicaFigures::batch_seconds`] is observed as each batch executes (two
//! atomic adds per batch; the same buckets are in the replica's status report).

use prometheus_client::encoding::DescriptorEncoder;
use std::sync::Arc;
use wire::messages::{PartitionReport, ReplicationRole};
use wire::metrics::{Labels, Latencies, Samples};

/// One replica's figures at a scrape.
#[derive(Debug)]
pub struct ReplicaFigures {
    /// What `glass cluster status` shows of it.
    pub report: PartitionReport,
    pub aborted: u64,
    pub failed: u64,
    /// Bytes of rows (or a full stack's page image) this replica sent as copies (to joiners
    /// and tools), and received as a joiner.
    pub copy_sent_bytes: u64,
    pub copy_received_bytes: u64,
    /// Pieces of work waiting in the executor's inbox.
    pub inbox_depth: usize,
    /// Seconds the executor spent on each batch.
    pub batch_seconds: Arc<Latencies>,
}

/// The node's figures at a scrape.
#[derive(Debug)]
pub struct NodeFigures {
    /// The leading coordinator the node follows.
    pub leader: Option<u16>,
    pub replicas: Vec<ReplicaFigures>,
}

/// Writes `figures` as the node's metric families.
pub fn encode(figures: &NodeFigures, enc: DescriptorEncoder) -> std::fmt::Result {
    let mut s = Samples::new(enc);
    let leader = figures.leader.map_or(-1, i64::from);
    s.gauges("glass_node_leader", "The leading coordinator the node follows (-1: none known).", &[(vec![], leader)])?;
    let rs = &figures.replicas;
    let part = |r: &ReplicaFigures| -> Labels { vec![("partition", r.report.partition.to_string())] };
    let with = |r: &ReplicaFigures, k: &'static str, v: &str| -> Labels {
        let mut l = part(r);
        l.push((k, v.to_string()));
        l
    };
    let state: Vec<(Labels, i64)> = rs
        .iter()
        .map(|r| {
            let role = r.report.replication.role.map_or("unknown", ReplicationRole::name);
            let mut l = with(r, "role", role);
            l.push(("phase", r.report.phase.name().to_string()));
            (l, 1)
        })
        .collect();
    s.gauges(
        "glass_replica_state",
        "A replica of the node: its replication role (replica, primary, backup) and phase (loading, ready, failed, stopped); always 1.",
        &state,
    )?;
    let applied: Vec<(Labels, i64)> = rs.iter().map(|r| (part(r), r.report.seq as i64)).collect();
    s.gauges("glass_replica_applied_seq", "The last batch the replica executed or applied.", &applied)?;
    let mut txns = Vec::new();
    for r in rs {
        txns.push((with(r, "outcome", "committed"), r.report.txns));
        txns.push((with(r, "outcome", "aborted"), r.aborted));
        txns.push((with(r, "outcome", "failed"), r.failed));
    }
    s.counters(
        "glass_replica_transactions",
        "Transactions the replica executed (a backup: applied), by outcome, since its state was last loaded or copied; every replica counts each transaction, so sum one replica per partition.",
        &txns,
    )?;
    let hist: Vec<(Labels, &Latencies)> = rs.iter().map(|r| (part(r), &*r.batch_seconds)).collect();
    s.latencies("glass_replica_batch_seconds", "Seconds the replica's executor spent on one batch.", &hist)?;
    let depth: Vec<(Labels, i64)> = rs.iter().map(|r| (part(r), r.inbox_depth as i64)).collect();
    s.gauges(
        "glass_replica_inbox_depth",
        "Pieces of work (batches, shipments, requests) waiting for the executor.",
        &depth,
    )?;
    let mut rows = Vec::new();
    for r in rs {
        if let Some(wire::messages::LoadState::Loading { rows_loaded, rows_total }) = &r.report.load {
            rows.push((with(r, "of", "loaded"), *rows_loaded as i64));
            rows.push((with(r, "of", "total"), *rows_total as i64));
        }
    }
    s.gauges("glass_replica_load_rows", "A replica loading: rows loaded so far and in all.", &rows)?;
    let mut copy = Vec::new();
    for r in rs {
        copy.push((with(r, "direction", "sent"), r.copy_sent_bytes));
        copy.push((with(r, "direction", "received"), r.copy_received_bytes));
    }
    s.counters(
        "glass_replica_copy_bytes",
        "Bytes of copies of the replica's state sent (to joining replicas and tools) and received (rejoining).",
        &copy,
    )?;
    let rep = |f: fn(&wire::messages::ReplicationReport) -> u64| -> Vec<(Labels, u64)> {
        rs.iter().map(|r| (part(r), f(&r.report.replication))).collect()
    };
    s.counters(
        "glass_replica_shipped_bytes",
        "A primary: bytes of log records shipped to backups (each backup counted).",
        &rep(|r| r.shipped_bytes),
    )?;
    s.counters(
        "glass_replica_applied_log_bytes",
        "A backup: bytes of the primary's log records applied.",
        &rep(|r| r.applied_bytes),
    )?;
    s.counters(
        "glass_replica_shipments_acked",
        "A primary: shipments its backups acknowledged (back to 0 when it stops shipping).",
        &rep(|r| r.acks),
    )?;
    let delay: Vec<(Labels, f64)> =
        rs.iter().map(|r| (part(r), r.report.replication.ack_delay_us_sum as f64 / 1e6)).collect();
    s.counters_f64(
        "glass_replica_backup_ack_delay_seconds",
        "A primary: seconds from each shipment to its acknowledgement, summed (how far the backups lag: its rate over the rate of glass_replica_shipments_acked_total is the mean delay now).",
        &delay,
    )?;
    s.counters("glass_replica_log_bytes", "Full stack: bytes written to the write-ahead log.", &rep(|r| r.log_bytes))?;
    s.counters("glass_replica_fsyncs", "Full stack: fsync calls on the write-ahead log.", &rep(|r| r.fsyncs))?;
    let cpu: Vec<(Labels, f64)> = rs.iter().map(|r| (part(r), r.report.cpu_ms as f64 / 1e3)).collect();
    s.counters_f64(
        "glass_replica_cpu_seconds",
        "CPU seconds of the replica's executor thread (and a full stack's workers) since it started.",
        &cpu,
    )
}
