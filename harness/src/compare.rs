//! The results of `glass compare`: one [`CompareRow`] per run (a replication mode at a
//! replication factor, all runs under the same TPC-C workload) and its four renderings — a
//! terminal table ([`render_table`]), CSV ([`to_csv`]), JSON ([`to_json`]) and an SVG picture
//! ([`write_svg`], plotters' SVG backend, no font files) — and the files of the run record
//! they go to ([`write_files`]). [`plan`] plans the runs, starts each one's cluster and fills
//! its row. [`multi`] renders `glass compare --multi-partition`'s curve: NewOrder throughput
//! against the share of multi-partition NewOrders, per mode.
//!
//! Guarantees:
//! - every rendering shows every scalar field of every row, in the order the rows were given
//!   (the table groups them by replication factor, ascending, keeping that order within a
//!   group); a missing value is "—" in the table, an empty field in CSV and `null` in JSON;
//! - the CSV header names are the row's serde field names, so CSV and JSON columns agree;
//! - each JSON object carries the run's bench object flattened to the top level, the row's own
//!   fields winning on a name clash;
//! - the comparison lines under the table are computed from the rows ([`comparisons`]), and a
//!   comparison is only made between runs of the same workload (same warehouses and clients).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::{Deserialize, Serialize};
use wire::config::{Mode, Shipping};

use crate::failover::FailoverReport;
use crate::record::Record;
use crate::verdict;

pub mod multi;
pub mod plan;
pub mod repeat;
pub mod sweep;

/// Shown for a value the run does not have (`None`).
const MISSING: &str = "—";
/// At most this many runs side by side in one block of the terminal table.
const TABLE_COLUMNS_PER_BLOCK_MAX: usize = 4;

/// One run of `glass compare`: a mode at a replication factor under the shared workload.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompareRow {
    /// The replication mode (its `cluster.toml` name in JSON and CSV: `active-active`, …).
    pub mode: Mode,
    /// "sync" or "async" for the passive modes, `None` for active-active.
    pub shipping: Option<Shipping>,
    /// Replication factor.
    pub replicas: usize,
    pub nodes: usize,
    pub warehouses: u16,
    pub clients: usize,
    /// Measured seconds (warm-up excluded).
    pub seconds: f64,
    pub committed: u64,
    pub aborted: u64,
    pub txn_per_sec: f64,
    /// Committed NewOrders per second (measured phase).
    pub neworder_per_sec: f64,
    /// tpmC: committed NewOrders per minute (measured phase).
    #[serde(default)]
    pub tpmc: f64,
    pub p50_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    /// `--multi-partition`: the percent of NewOrders forced multi-partition in this run
    /// (`None` without the flag).
    pub multi_partition_pct: Option<u32>,
    /// Committed transactions (measured phase) whose warehouses lie in one partition, and
    /// in more than one.
    pub committed_single_partition: u64,
    pub committed_multi_partition: u64,
    /// CPU seconds per 1,000 committed transactions of the executing (primary) replicas'
    /// threads, summed.
    pub primary_cpu_s_per_1000: f64,
    /// The same for the backups / other replicas (`None` when `replicas == 1`).
    pub backup_cpu_s_per_1000: Option<f64>,
    /// The same for the whole node processes (all threads), from /proc.
    pub node_cpu_s_per_1000: f64,
    /// CPU microseconds per committed transaction summed over every process of the run —
    /// coordinators, nodes and the client (`None` in records made before it was kept).
    #[serde(default)]
    pub cpu_us_per_txn: Option<f64>,
    /// Bytes sent between nodes (replication traffic: shipments to backups) per committed
    /// transaction.
    pub net_bytes_per_txn: f64,
    /// Bytes of batches the coordinator sent to the replicas (each replica counted) per
    /// committed transaction: active-active's replication traffic.
    pub batch_bytes_per_txn: f64,
    /// Log bytes written to disk per committed transaction.
    pub log_bytes_per_txn: f64,
    pub fsyncs: u64,
    /// Bytes of files the nodes left in the run directory besides process logs (databases,
    /// logs, checkpoints): zero for the logless modes.
    pub disk_bytes: u64,
    /// Async shipping: the backups' lag measured at the end of the run.
    pub backup_lag_ms: Option<f64>,
    /// Whether reads on backups / other replicas matched (`None`: not applicable).
    pub replica_reads_consistent: Option<bool>,
    pub digests_equal: bool,
    /// The TPC-C consistency conditions (clause 3.3.2) held.
    pub consistent: bool,
    /// `--failover`: a node killed mid-run (partition 1's first replica: its primary in the
    /// passive modes): detection, the longest partition unavailability, promotion time,
    /// acknowledged transactions lost and outcomes unknown. `None` without `--failover`.
    pub failover_detection_ms: Option<f64>,
    /// What told the coordinator (docs/cluster.md, "Failure detection"), its short name:
    /// `connection-lost`, `heartbeat-timeout`, ….
    pub failover_detected_by: Option<String>,
    pub failover_unavailability_ms: Option<f64>,
    pub failover_recovery_ms: Option<f64>,
    pub failover_lost: Option<u64>,
    pub failover_outcome_unknown: Option<u64>,
    /// `--failover` with a coordinator group (docs/design.md §11): the leading coordinator
    /// killed mid-run: detection, election, the longest partition unavailability,
    /// acknowledged transactions lost and outcomes unknown. `None` otherwise.
    pub coordinator_failover_detection_ms: Option<f64>,
    pub coordinator_failover_election_ms: Option<f64>,
    pub coordinator_failover_unavailability_ms: Option<f64>,
    pub coordinator_failover_lost: Option<u64>,
    pub coordinator_failover_outcome_unknown: Option<u64>,
    /// `--repeat N`: the spread of the runs this row combines (its throughput, latencies and
    /// CPU are their medians; [`repeat::combine`]). `None` for a single run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeats: Option<repeat::Repeats>,
    /// The run's full bench JSON object (the field names of `glass bench --json`).
    pub bench: serde_json::Value,
}

impl CompareRow {
    /// The run's name in every rendering: mode, shipping if any, replication factor, e.g.
    /// "active-passive (sync) ×2", and the forced multi-partition share if any, e.g.
    /// "active-active ×2, 10% multi-partition".
    pub fn label(&self) -> String {
        match self.multi_partition_pct {
            Some(pct) => format!("{}, {pct}% multi-partition", self.series()),
            None => self.series(),
        }
    }

    /// The label without the multi-partition share: one line of the multi-partition curve.
    pub fn series(&self) -> String {
        CompareRow::series_of(self.mode, self.shipping, self.replicas)
    }

    /// The name of a mode with its shipping and replication factor, e.g.
    /// "active-passive (sync) ×2": a line of a curve.
    pub fn series_of(mode: Mode, shipping: Option<Shipping>, replicas: usize) -> String {
        match shipping {
            Some(s) => format!("{mode} ({s}) ×{replicas}"),
            None => format!("{mode} ×{replicas}"),
        }
    }

    /// Whether the run passed its checks ([`verdict::run_passed`]).
    pub fn checks_passed(&self) -> bool {
        verdict::run_passed(self.digests_equal, self.consistent, self.replica_reads_consistent)
    }

    /// Fills the `failover_*` fields from the failover run of the same mode (`--failover`).
    pub fn set_failover(&mut self, f: &FailoverReport) {
        self.failover_detection_ms = f.detection_ms;
        self.failover_detected_by = f.detected_by.as_deref().map(detection_name);
        self.failover_unavailability_ms =
            f.unavailability_ms.or(f.partitions.iter().filter_map(|p| p.unavailability_at_most_ms).reduce(f64::max));
        self.failover_recovery_ms = f.recovery_ms;
        self.failover_lost = Some(f.checks.lost_acknowledged);
        self.failover_outcome_unknown = Some(f.checks.outcome_unknown);
    }

    /// Fills the `coordinator_failover_*` fields from the coordinator failover run of the
    /// same mode (`--failover` with a coordinator group).
    pub fn set_coordinator_failover(&mut self, f: &FailoverReport) {
        self.coordinator_failover_detection_ms = f.detection_ms;
        self.coordinator_failover_election_ms = f.election_ms;
        self.coordinator_failover_unavailability_ms =
            f.unavailability_ms.or(f.partitions.iter().filter_map(|p| p.unavailability_at_most_ms).reduce(f64::max));
        self.coordinator_failover_lost = Some(f.checks.lost_acknowledged);
        self.coordinator_failover_outcome_unknown = Some(f.checks.outcome_unknown);
    }

    /// The run's one line, printed under its heading.
    pub fn line(&self) -> String {
        format!(
            "  {:.0} committed txn/s ({:.0} NewOrders/s), p50 {:.2} ms, p99 {:.2} ms; {} single-, {} \
             multi-partition commits; digests {}, consistency {}",
            self.txn_per_sec,
            self.neworder_per_sec,
            self.p50_us / 1e3,
            self.p99_us / 1e3,
            self.committed_single_partition,
            self.committed_multi_partition,
            if self.digests_equal { "equal" } else { "DIFFER" },
            if self.consistent { "holds" } else { "VIOLATED" }
        )
    }

    /// Runs of the same workload, so that their figures compare.
    fn same_workload(&self, other: &CompareRow) -> bool {
        self.warehouses == other.warehouses
            && self.clients == other.clients
            && self.multi_partition_pct == other.multi_partition_pct
    }
}

/// The table printed after a comparison's runs: the side-by-side table ([`render_table`]), or
/// with `--multi-partition` (`curve`) the curve's ([`multi::render_table`]).
pub fn render_summary(rows: &[CompareRow], curve: bool) -> String {
    if curve {
        multi::render_table(&rows.iter().filter_map(multi::CurvePoint::of).collect::<Vec<_>>())
    } else {
        render_table(rows)
    }
}

/// Writes the comparison's files: into the record `compare.json` (headed by the run),
/// `compare.csv` and, for the plain comparison, `compare.svg`; with `--multi-partition`
/// (`curve`: the directory and files of its copies, [`plan::curve_files`]) the curve's files
/// into the record, and beside the first of `--json`, `--csv`, `--svg` given; then copies of
/// the table's files where `outputs` (`--json`, `--csv`, `--svg`) point. Each file but the
/// record's `compare.*` is announced to `wrote` once written.
pub fn write_files(
    record: &Record,
    rows: &[CompareRow],
    curve: Option<(&Path, &[PathBuf; 3])>,
    outputs: [Option<&Path>; 3],
    wrote: &mut dyn FnMut(&Path),
) -> crate::Result<()> {
    if let Some((dir, files)) = curve {
        multi::write_files(rows, &record.dir, &multi::FILE_STEM_FILES.map(|x| record.path(x)), wrote)?;
        if outputs.iter().any(Option::is_some) {
            multi::write_files(rows, dir, files, wrote)?;
        }
    }
    record.write_headed(&record.path("compare.json"), "runs", &to_json(rows))?;
    crate::record::write(&record.path("compare.csv"), to_csv(rows).as_bytes())?;
    if curve.is_none() {
        write_svg(rows, &record.path("compare.svg"))?;
    }
    let [json, csv, svg] = outputs;
    if let Some(p) = json {
        record.write_headed(p, "runs", &to_json(rows))?;
        wrote(p);
    }
    if let Some(p) = csv {
        crate::record::write(p, to_csv(rows).as_bytes())?;
        wrote(p);
    }
    if let Some(p) = svg {
        write_svg(rows, p)?;
        wrote(p);
    }
    Ok(())
}

/// Why [`write_svg`] drew nothing.
#[derive(Debug, thiserror::Error)]
pub enum SvgError {
    #[error("nothing to draw: the comparison has no runs")]
    NoRows,
    #[error("cannot draw {}: {source}", path.display())]
    Draw { path: PathBuf, source: DrawingAreaErrorKind<std::io::Error> },
}

// ---------------------------------------------------------------------------------------------
// Comparisons
// ---------------------------------------------------------------------------------------------

/// One computed comparison between runs; `row` and `baseline` index the rows given to
/// [`comparisons`].
#[derive(Debug, Clone, PartialEq)]
pub enum Comparison {
    /// txn/s of `row` ÷ txn/s of `baseline`, the first active-active run at the same
    /// replication factor.
    VsActiveActive { row: usize, baseline: usize, ratio: f64 },
    /// txn/s of `row` (replication factor above 1) ÷ txn/s of `baseline`, the same mode at
    /// replication factor 1 (the same shipping if such a run exists, else the first).
    VsOneReplica { row: usize, baseline: usize, ratio: f64 },
    /// Backup CPU per committed transaction as a percentage of primary CPU, within `row`.
    BackupCpu { row: usize, pct: f64 },
}

/// The comparisons the rows allow, grouped by kind (vs active-active, vs one replica, backup
/// CPU), each group in row order. A ratio is made only against a baseline of the same
/// workload whose denominator is positive and finite.
pub fn comparisons(rows: &[CompareRow]) -> Vec<Comparison> {
    let ratio = |num: f64, den: f64| (den.is_finite() && den > 0.0).then(|| num / den);
    let mut out = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        if r.mode.every_replica_executes() {
            continue;
        }
        let base =
            rows.iter().position(|b| b.mode.every_replica_executes() && b.replicas == r.replicas && b.same_workload(r));
        if let Some(b) = base {
            if let Some(x) = ratio(r.txn_per_sec, rows[b].txn_per_sec) {
                out.push(Comparison::VsActiveActive { row: i, baseline: b, ratio: x });
            }
        }
    }
    for (i, r) in rows.iter().enumerate() {
        if r.replicas <= 1 {
            continue;
        }
        let single = |b: &&CompareRow| b.mode == r.mode && b.replicas == 1 && b.same_workload(r);
        let base = rows
            .iter()
            .position(|b| single(&b) && b.shipping == r.shipping)
            .or_else(|| rows.iter().position(|b| single(&b)));
        if let Some(b) = base {
            if let Some(x) = ratio(r.txn_per_sec, rows[b].txn_per_sec) {
                out.push(Comparison::VsOneReplica { row: i, baseline: b, ratio: x });
            }
        }
    }
    for (i, r) in rows.iter().enumerate() {
        if let Some(backup) = r.backup_cpu_s_per_1000 {
            if let Some(x) = ratio(backup, r.primary_cpu_s_per_1000) {
                out.push(Comparison::BackupCpu { row: i, pct: 100.0 * x });
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Terminal table
// ---------------------------------------------------------------------------------------------

fn opt(v: Option<String>) -> String {
    v.unwrap_or_else(|| MISSING.to_string())
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_string()
}

/// Milliseconds from microseconds, with precision that suits the magnitude.
pub(crate) fn ms(us: f64) -> String {
    let v = us / 1000.0;
    if v.abs() < 10.0 {
        format!("{v:.3}")
    } else if v.abs() < 100.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.1}")
    }
}

/// The table's lines: (metric with its unit, the cell of a run).
type Metric = (&'static str, fn(&CompareRow) -> String);

const METRICS: [Metric; 42] = [
    ("nodes", |r| r.nodes.to_string()),
    ("warehouses", |r| r.warehouses.to_string()),
    ("clients", |r| r.clients.to_string()),
    ("measured (s)", |r| format!("{:.1}", r.seconds)),
    ("committed (txns)", |r| r.committed.to_string()),
    ("aborted (txns)", |r| r.aborted.to_string()),
    ("throughput (txn/s)", |r| format!("{:.0}", r.txn_per_sec)),
    ("repeated: runs", |r| opt(r.repeats.as_ref().map(|s| s.runs.to_string()))),
    ("repeated: throughput min–max", |r| {
        opt(r.repeats.as_ref().map(|s| {
            format!("{:.0}–{:.0} (±{:.0}%)", s.txn_per_sec.min, s.txn_per_sec.max, s.txn_per_sec.half_range_pct())
        }))
    }),
    ("NewOrder throughput (commits/s)", |r| format!("{:.0}", r.neworder_per_sec)),
    ("tpmC (NewOrders/min)", |r| format!("{:.0}", r.tpmc)),
    ("forced multi-partition (%)", |r| opt(r.multi_partition_pct.map(|v| v.to_string()))),
    ("single-partition commits", |r| r.committed_single_partition.to_string()),
    ("multi-partition commits", |r| r.committed_multi_partition.to_string()),
    ("latency p50 (ms)", |r| ms(r.p50_us)),
    ("latency p95 (ms)", |r| ms(r.p95_us)),
    ("latency p99 (ms)", |r| ms(r.p99_us)),
    ("repeated: p99 min–max (ms)", |r| {
        opt(r.repeats.as_ref().map(|s| format!("{}–{}", ms(s.p99_us.min), ms(s.p99_us.max))))
    }),
    ("primary CPU (s/1k txn)", |r| format!("{:.4}", r.primary_cpu_s_per_1000)),
    ("backup CPU (s/1k txn)", |r| opt(r.backup_cpu_s_per_1000.map(|v| format!("{v:.4}")))),
    ("node CPU (s/1k txn)", |r| format!("{:.4}", r.node_cpu_s_per_1000)),
    ("all processes' CPU (µs/txn)", |r| opt(r.cpu_us_per_txn.map(|v| format!("{v:.2}")))),
    ("node→node bytes (B/txn)", |r| format!("{:.0}", r.net_bytes_per_txn)),
    ("coord→replica bytes (B/txn)", |r| format!("{:.0}", r.batch_bytes_per_txn)),
    ("log (B/txn)", |r| format!("{:.0}", r.log_bytes_per_txn)),
    ("fsyncs", |r| r.fsyncs.to_string()),
    ("files on disk (MiB)", |r| format!("{:.1}", r.disk_bytes as f64 / (1 << 20) as f64)),
    ("backup lag (ms)", |r| opt(r.backup_lag_ms.map(|v| format!("{v:.1}")))),
    ("replica reads consistent", |r| opt(r.replica_reads_consistent.map(yes_no))),
    ("replica digests equal", |r| yes_no(r.digests_equal)),
    ("TPC-C consistent", |r| yes_no(r.consistent)),
    ("failover: detection (ms)", |r| opt(r.failover_detection_ms.map(|v| format!("{v:.0}")))),
    ("failover: detected by", |r| opt(r.failover_detected_by.clone())),
    ("failover: unavailable (ms)", |r| opt(r.failover_unavailability_ms.map(|v| format!("{v:.0}")))),
    ("failover: promotion (ms)", |r| opt(r.failover_recovery_ms.map(|v| format!("{v:.0}")))),
    ("failover: acknowledged lost", |r| opt(r.failover_lost.map(|v| v.to_string()))),
    ("failover: outcome unknown", |r| opt(r.failover_outcome_unknown.map(|v| v.to_string()))),
    ("failover: coordinator detection (ms)", |r| opt(r.coordinator_failover_detection_ms.map(|v| format!("{v:.0}")))),
    ("failover: coordinator election (ms)", |r| opt(r.coordinator_failover_election_ms.map(|v| format!("{v:.0}")))),
    ("failover: coordinator unavailable (ms)", |r| {
        opt(r.coordinator_failover_unavailability_ms.map(|v| format!("{v:.0}")))
    }),
    ("failover: coordinator ack. lost", |r| opt(r.coordinator_failover_lost.map(|v| v.to_string()))),
    ("failover: coordinator outcome unknown", |r| opt(r.coordinator_failover_outcome_unknown.map(|v| v.to_string()))),
];

/// The table lines of `--repeat`.
const REPEAT_PREFIX: &str = "repeated:";
/// The table lines of `--failover`.
const FAILOVER_PREFIX: &str = "failover:";
/// The table lines of `--failover` with a coordinator group.
const COORDINATOR_FAILOVER_PREFIX: &str = "failover: coordinator";

/// Gap between columns of the table.
const GAP: &str = "   ";

/// The comparison as a fixed-width table: one column per run, one block per replication
/// factor (ascending; at most four runs side by side), then one computed line per comparison
/// and one line per failed check.
pub fn render_table(rows: &[CompareRow]) -> String {
    let mut out = String::new();
    if rows.is_empty() {
        out.push_str("no runs to compare\n");
        return out;
    }
    let labels: Vec<String> = rows.iter().map(CompareRow::label).collect();
    let factors: BTreeSet<usize> = rows.iter().map(|r| r.replicas).collect();
    // The failover lines only when some run had a failover run (`--failover`).
    let with_failover = rows.iter().any(|r| r.failover_lost.is_some());
    let with_coordinator = rows.iter().any(|r| r.coordinator_failover_lost.is_some());
    let with_repeats = rows.iter().any(|r| r.repeats.is_some());
    let metrics: Vec<&Metric> = METRICS
        .iter()
        .filter(|(name, _)| with_failover || !name.starts_with(FAILOVER_PREFIX))
        .filter(|(name, _)| with_coordinator || !name.starts_with(COORDINATOR_FAILOVER_PREFIX))
        .filter(|(name, _)| with_repeats || !name.starts_with(REPEAT_PREFIX))
        .collect();
    let name_width = metrics.iter().map(|(n, _)| n.chars().count()).max().unwrap_or(0);
    let mut first_block = true;
    for factor in &factors {
        let group: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].replicas == *factor).collect();
        for block in group.chunks(TABLE_COLUMNS_PER_BLOCK_MAX) {
            if !first_block {
                out.push('\n');
            }
            first_block = false;
            let cells: Vec<Vec<String>> =
                block.iter().map(|&i| metrics.iter().map(|(_, cell)| cell(&rows[i])).collect()).collect();
            let widths: Vec<usize> = block
                .iter()
                .zip(&cells)
                .map(|(&i, col)| col.iter().chain([&labels[i]]).map(|c| c.chars().count()).max().unwrap_or(0))
                .collect();
            let _ = write!(out, "{:<name_width$}", "");
            for (&i, w) in block.iter().zip(&widths) {
                let _ = write!(out, "{GAP}{:>w$}", labels[i]);
            }
            out.push('\n');
            for (m, (name, _)) in metrics.iter().enumerate() {
                let _ = write!(out, "{name:<name_width$}");
                for (col, w) in cells.iter().zip(&widths) {
                    let _ = write!(out, "{GAP}{:>w$}", col[m]);
                }
                out.push('\n');
            }
        }
    }
    let found = comparisons(rows);
    let label_width = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let mut heading = "";
    for c in &found {
        let (title, row, text) = match *c {
            Comparison::VsActiveActive { row, baseline, ratio } => (
                "throughput against active-active at the same replication factor:",
                row,
                format!(
                    "{ratio:.2}× ({:.0} vs {:.0} txn/s of {})",
                    rows[row].txn_per_sec, rows[baseline].txn_per_sec, labels[baseline]
                ),
            ),
            Comparison::VsOneReplica { row, baseline, ratio } => (
                "throughput against the same mode with one replica:",
                row,
                format!(
                    "{ratio:.2}× ({:.0} vs {:.0} txn/s of {})",
                    rows[row].txn_per_sec, rows[baseline].txn_per_sec, labels[baseline]
                ),
            ),
            Comparison::BackupCpu { row, pct } => (
                "backup CPU as a share of primary CPU (per committed txn):",
                row,
                format!(
                    "{pct:.0}% ({:.4} vs {:.4} s/1k txn)",
                    rows[row].backup_cpu_s_per_1000.unwrap_or(f64::NAN),
                    rows[row].primary_cpu_s_per_1000
                ),
            ),
        };
        if title != heading {
            let _ = write!(out, "\n{title}\n");
            heading = title;
        }
        let _ = writeln!(out, "  {:<label_width$}  {text}", labels[row]);
    }
    let mut failed = Vec::new();
    for (r, label) in rows.iter().zip(&labels) {
        if !r.consistent {
            failed.push(format!("  {label:<label_width$}  TPC-C consistency conditions do not hold"));
        }
        if !r.digests_equal {
            failed.push(format!("  {label:<label_width$}  replica digests differ"));
        }
        if r.replica_reads_consistent == Some(false) {
            failed.push(format!("  {label:<label_width$}  reads on replicas did not match"));
        }
    }
    if failed.is_empty() {
        out.push_str("\nchecks: every run consistent, replica digests equal\n");
    } else {
        out.push_str("\nCHECKS FAILED:\n");
        for f in failed {
            out.push_str(&f);
            out.push('\n');
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// CSV and JSON
// ---------------------------------------------------------------------------------------------

/// CSV columns: the row's serde field name and the field's text (empty for `None`).
/// A CSV or table column: its name, and the field of an item it shows.
pub(crate) type CsvColumn<T> = (&'static str, fn(&T) -> String);
type Column = CsvColumn<CompareRow>;

fn csv_opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map(T::to_string).unwrap_or_default()
}

const CSV_COLUMNS: [Column; 47] = [
    ("mode", |r| r.mode.name().to_string()),
    ("shipping", |r| csv_opt(&r.shipping)),
    ("replicas", |r| r.replicas.to_string()),
    ("nodes", |r| r.nodes.to_string()),
    ("warehouses", |r| r.warehouses.to_string()),
    ("clients", |r| r.clients.to_string()),
    ("seconds", |r| r.seconds.to_string()),
    ("committed", |r| r.committed.to_string()),
    ("aborted", |r| r.aborted.to_string()),
    ("txn_per_sec", |r| r.txn_per_sec.to_string()),
    ("neworder_per_sec", |r| r.neworder_per_sec.to_string()),
    ("tpmc", |r| r.tpmc.to_string()),
    ("p50_us", |r| r.p50_us.to_string()),
    ("p95_us", |r| r.p95_us.to_string()),
    ("p99_us", |r| r.p99_us.to_string()),
    ("multi_partition_pct", |r| csv_opt(&r.multi_partition_pct)),
    ("committed_single_partition", |r| r.committed_single_partition.to_string()),
    ("committed_multi_partition", |r| r.committed_multi_partition.to_string()),
    ("primary_cpu_s_per_1000", |r| r.primary_cpu_s_per_1000.to_string()),
    ("backup_cpu_s_per_1000", |r| csv_opt(&r.backup_cpu_s_per_1000)),
    ("node_cpu_s_per_1000", |r| r.node_cpu_s_per_1000.to_string()),
    ("cpu_us_per_txn", |r| csv_opt(&r.cpu_us_per_txn)),
    ("net_bytes_per_txn", |r| r.net_bytes_per_txn.to_string()),
    ("batch_bytes_per_txn", |r| r.batch_bytes_per_txn.to_string()),
    ("log_bytes_per_txn", |r| r.log_bytes_per_txn.to_string()),
    ("fsyncs", |r| r.fsyncs.to_string()),
    ("disk_bytes", |r| r.disk_bytes.to_string()),
    ("backup_lag_ms", |r| csv_opt(&r.backup_lag_ms)),
    ("replica_reads_consistent", |r| csv_opt(&r.replica_reads_consistent)),
    ("digests_equal", |r| r.digests_equal.to_string()),
    ("consistent", |r| r.consistent.to_string()),
    ("failover_detection_ms", |r| csv_opt(&r.failover_detection_ms)),
    ("failover_detected_by", |r| csv_opt(&r.failover_detected_by)),
    ("failover_unavailability_ms", |r| csv_opt(&r.failover_unavailability_ms)),
    ("failover_recovery_ms", |r| csv_opt(&r.failover_recovery_ms)),
    ("failover_lost", |r| csv_opt(&r.failover_lost)),
    ("failover_outcome_unknown", |r| csv_opt(&r.failover_outcome_unknown)),
    ("coordinator_failover_detection_ms", |r| csv_opt(&r.coordinator_failover_detection_ms)),
    ("coordinator_failover_election_ms", |r| csv_opt(&r.coordinator_failover_election_ms)),
    ("coordinator_failover_unavailability_ms", |r| csv_opt(&r.coordinator_failover_unavailability_ms)),
    ("coordinator_failover_lost", |r| csv_opt(&r.coordinator_failover_lost)),
    ("coordinator_failover_outcome_unknown", |r| csv_opt(&r.coordinator_failover_outcome_unknown)),
    // `--repeat N` (the row's `repeats`): empty for a single run.
    ("repeats_runs", |r| csv_opt(&r.repeats.as_ref().map(|s| s.runs))),
    ("repeats_txn_per_sec_min", |r| csv_opt(&r.repeats.as_ref().map(|s| s.txn_per_sec.min))),
    ("repeats_txn_per_sec_max", |r| csv_opt(&r.repeats.as_ref().map(|s| s.txn_per_sec.max))),
    ("repeats_p99_us_min", |r| csv_opt(&r.repeats.as_ref().map(|s| s.p99_us.min))),
    ("repeats_p99_us_max", |r| csv_opt(&r.repeats.as_ref().map(|s| s.p99_us.max))),
];

/// The short name of a detection as the coordinator's alarm words it ("connection lost: …"
/// → `connection-lost`).
pub fn detection_name(by: &str) -> String {
    let head = by.split(':').next().unwrap_or(by).trim();
    match head {
        "heartbeat timeout" => "heartbeat-timeout".into(),
        "its death notice" => "death-notice".into(),
        "connection lost" => "connection-lost".into(),
        "not reading what it is sent" => "not-reading".into(),
        "a newer connection" => "replaced".into(),
        "no answer to the take-over" => "take-over-silence".into(),
        "lag" => "lagging".into(),
        other => other.replace(' ', "-"),
    }
}

/// A CSV field, quoted (RFC 4180, section 2) when it holds a comma, a quote or a line break.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The scalar fields (not `bench`) as CSV: a header of the serde field names, then one line
/// per row; `None` is an empty field, numbers at full precision, lines end with `\n`.
pub fn to_csv(rows: &[CompareRow]) -> String {
    csv_table(&CSV_COLUMNS, rows)
}

/// `items` as CSV through `columns` (name, field of an item): a header of the names, then one
/// line per item, fields quoted by [`csv_field`], lines ending with `\n`.
pub(crate) fn csv_table<T>(columns: &[CsvColumn<T>], items: &[T]) -> String {
    let mut out = String::new();
    let header: Vec<&str> = columns.iter().map(|(name, _)| *name).collect();
    out.push_str(&header.join(","));
    out.push('\n');
    for item in items {
        let line: Vec<String> = columns.iter().map(|(_, cell)| csv_field(&cell(item))).collect();
        out.push_str(&line.join(","));
        out.push('\n');
    }
    out
}

/// One JSON object per row: the bench object's fields at top level, overwritten by the row's
/// own fields (`None` as `null`). A `null` bench adds nothing; a bench that is not an object
/// is kept under `bench`.
pub fn to_json(rows: &[CompareRow]) -> serde_json::Value {
    use serde_json::{Map, Value};
    let objects = rows
        .iter()
        .map(|r| {
            let mut obj = match &r.bench {
                Value::Object(m) => m.clone(),
                Value::Null => Map::new(),
                other => Map::from_iter([("bench".to_string(), other.clone())]),
            };
            let own = match serde_json::to_value(r) {
                Ok(Value::Object(m)) => m,
                // A struct of plain fields and a `Value` always serialises to an object.
                _ => unreachable!("CompareRow serialises to a JSON object"),
            };
            for (k, v) in own {
                if k != "bench" {
                    obj.insert(k, v);
                }
            }
            Value::Object(obj)
        })
        .collect();
    Value::Array(objects)
}

// ---------------------------------------------------------------------------------------------
// SVG
// ---------------------------------------------------------------------------------------------

const SVG_WIDTH_PX: u32 = 1200;
/// Height of the picture outside the bar slots (title, captions, axes).
const SVG_FRAME_PX: u32 = 150;
/// Height of one run's slot in a panel.
const SVG_ROW_PX: u32 = 56;
const SVG_HEIGHT_MIN_PX: u32 = 320;
/// Room right of the longest bar for its value label, as a fraction of its length.
const SVG_HEADROOM: f64 = 0.35;

/// One colour per mode (in [`Mode::ALL`] order), then for anything else.
const MODE_COLORS: [RGBColor; 4] =
    [RGBColor(0x4e, 0x79, 0xa7), RGBColor(0xf2, 0x8e, 0x2b), RGBColor(0xe1, 0x57, 0x59), RGBColor(0x9d, 0x9d, 0x9d)];

pub(crate) fn mode_color(mode: Mode) -> RGBColor {
    Mode::ALL.iter().position(|m| *m == mode).map_or(MODE_COLORS[3], |i| MODE_COLORS[i])
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// Draws the comparison into `path` (an SVG file): committed txn/s per run on the left,
/// p50 and p99 latency (ms) per run on the right, one horizontal bar slot per run in row order
/// (the first at the top), bars coloured by mode and labelled with their values.
pub fn write_svg(rows: &[CompareRow], path: &Path) -> Result<(), SvgError> {
    if rows.is_empty() {
        return Err(SvgError::NoRows);
    }
    draw(rows, path).map_err(|source| SvgError::Draw { path: path.to_path_buf(), source })
}

fn draw(rows: &[CompareRow], path: &Path) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    let n = u32::try_from(rows.len()).unwrap_or(u32::MAX);
    let height = SVG_FRAME_PX.saturating_add(SVG_ROW_PX.saturating_mul(n)).max(SVG_HEIGHT_MIN_PX);
    let root = SVGBackend::new(path, (SVG_WIDTH_PX, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let first = &rows[0];
    let workload = if rows.iter().all(|r| r.same_workload(first)) {
        format!("{} warehouses, {} clients", first.warehouses, first.clients)
    } else {
        "workloads differ between runs".to_string()
    };
    let root =
        root.titled(&format!("glass compare: replication modes under TPC-C ({workload})"), ("sans-serif", 20))?;
    let panels = root.split_evenly((1, 2));
    let labels: Vec<String> = rows.iter().map(CompareRow::label).collect();
    draw_throughput(&panels[0], rows, &labels)?;
    draw_latency(&panels[1], rows, &labels)?;
    root.present()
}

/// The largest finite value, or 1 when there is none above 0 (an empty axis still draws).
fn axis_max(values: impl Iterator<Item = f64>) -> f64 {
    let max = values.filter(|v| v.is_finite()).fold(0.0, f64::max);
    if max > 0.0 {
        max * (1.0 + SVG_HEADROOM)
    } else {
        1.0
    }
}

/// Slot of row `i` on the y axis (0 at the bottom): the first row at the top.
fn slot(n: usize, i: usize) -> f64 {
    (n - 1 - i) as f64
}

fn draw_throughput(
    area: &Area<'_>,
    rows: &[CompareRow],
    labels: &[String],
) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    let n = rows.len();
    let x_max = axis_max(rows.iter().map(|r| r.txn_per_sec));
    let mut chart = ChartBuilder::on(area)
        .caption("Throughput", ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(10)
        .build_cartesian_2d(0.0..x_max, 0.0..n as f64)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .light_line_style(TRANSPARENT)
        .x_desc("committed txn/s")
        .x_label_formatter(&|v| format!("{v:.0}"))
        .draw()?;
    let name_style = ("sans-serif", 13).into_font().color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
    let value_style = ("sans-serif", 12).into_font().color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
    for (i, r) in rows.iter().enumerate() {
        let y = slot(n, i);
        let v = r.txn_per_sec;
        let len = if v.is_finite() { v.max(0.0) } else { 0.0 };
        chart.draw_series(std::iter::once(Rectangle::new(
            [(0.0, y + 0.12), (len, y + 0.58)],
            mode_color(r.mode).filled(),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            format!("{v:.0}"),
            (len + x_max * 0.01, y + 0.35),
            value_style.clone(),
        )))?;
        chart.draw_series(std::iter::once(Text::new(labels[i].clone(), (0.0, y + 0.8), name_style.clone())))?;
    }
    Ok(())
}

fn draw_latency(
    area: &Area<'_>,
    rows: &[CompareRow],
    labels: &[String],
) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    let n = rows.len();
    let x_max = axis_max(rows.iter().flat_map(|r| [r.p50_us / 1000.0, r.p99_us / 1000.0]));
    let decimals = if x_max >= 20.0 {
        0
    } else if x_max >= 2.0 {
        1
    } else {
        2
    };
    // Half a slot above the runs holds the legend.
    let mut chart = ChartBuilder::on(area)
        .caption("Latency", ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(10)
        .build_cartesian_2d(0.0..x_max, 0.0..n as f64 + 0.5)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .light_line_style(TRANSPARENT)
        .x_desc("latency (ms)")
        .x_label_formatter(&|v| format!("{v:.decimals$}"))
        .draw()?;
    let name_style = ("sans-serif", 13).into_font().color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
    let value_style = ("sans-serif", 11).into_font().color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
    const P50_ALPHA: f64 = 0.45;
    for (i, r) in rows.iter().enumerate() {
        let y = slot(n, i);
        let color = mode_color(r.mode);
        // p99 below, p50 above it, as the legend reads top to bottom: p50, p99.
        let bars = [
            (r.p50_us, y + 0.36, y + 0.6, color.mix(P50_ALPHA).filled(), "p50"),
            (r.p99_us, y + 0.1, y + 0.34, color.filled(), "p99"),
        ];
        for (us, lo, hi, style, name) in bars {
            let v = us / 1000.0;
            let len = if v.is_finite() { v.max(0.0) } else { 0.0 };
            chart.draw_series(std::iter::once(Rectangle::new([(0.0, lo), (len, hi)], style)))?;
            chart.draw_series(std::iter::once(Text::new(
                format!("{name} {}", ms(us)),
                (len + x_max * 0.01, (lo + hi) / 2.0),
                value_style.clone(),
            )))?;
        }
        chart.draw_series(std::iter::once(Text::new(labels[i].clone(), (0.0, y + 0.8), name_style.clone())))?;
    }
    // Legend in the top half slot: light = p50, solid = p99 (in each run's mode colour).
    let legend_y = n as f64 + 0.25;
    let sw = x_max * 0.025;
    let grey = MODE_COLORS[3];
    let legend = [(0.0, grey.mix(P50_ALPHA).filled(), "p50 (light)"), (x_max * 0.3, grey.filled(), "p99 (solid)")];
    for (x, style, text) in legend {
        chart.draw_series(std::iter::once(Rectangle::new([(x, legend_y - 0.12), (x + sw, legend_y + 0.12)], style)))?;
        chart.draw_series(std::iter::once(Text::new(text, (x + sw * 1.5, legend_y), name_style.clone())))?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn row(mode: Mode, shipping: Option<&str>, replicas: usize, txn_per_sec: f64) -> CompareRow {
        CompareRow {
            mode,
            shipping: shipping.map(|s| s.parse().expect("a shipping name")),
            replicas,
            nodes: 3,
            warehouses: 4,
            clients: 16,
            seconds: 10.0,
            committed: (txn_per_sec * 10.0) as u64,
            aborted: 7,
            txn_per_sec,
            neworder_per_sec: txn_per_sec * 0.45,
            tpmc: txn_per_sec * 0.45 * 60.0,
            multi_partition_pct: None,
            committed_single_partition: (txn_per_sec * 10.0) as u64,
            committed_multi_partition: 0,
            p50_us: 850.0,
            p95_us: 2_400.0,
            p99_us: 5_100.0,
            primary_cpu_s_per_1000: 0.4,
            backup_cpu_s_per_1000: (replicas > 1).then_some(0.1),
            node_cpu_s_per_1000: 0.9,
            cpu_us_per_txn: Some(5.5),
            net_bytes_per_txn: 512.0,
            batch_bytes_per_txn: 300.0,
            disk_bytes: 0,
            failover_detection_ms: None,
            failover_detected_by: None,
            failover_unavailability_ms: None,
            failover_recovery_ms: None,
            failover_lost: None,
            failover_outcome_unknown: None,
            coordinator_failover_detection_ms: None,
            coordinator_failover_election_ms: None,
            coordinator_failover_unavailability_ms: None,
            coordinator_failover_lost: None,
            coordinator_failover_outcome_unknown: None,
            log_bytes_per_txn: 300.0,
            fsyncs: 42,
            backup_lag_ms: (shipping == Some("async")).then_some(3.5),
            replica_reads_consistent: (replicas > 1).then_some(true),
            digests_equal: true,
            consistent: true,
            repeats: None,
            bench: serde_json::json!({
                "mode": "cluster",
                "profile": "paper",
                "seed": 7,
                "txn_per_sec": 1.0,
                "executor_cpu_seconds": 2.5,
            }),
        }
    }

    /// 3 modes × replication factors 1 and 2.
    pub(super) fn example() -> Vec<CompareRow> {
        vec![
            row(Mode::ActiveActive, None, 1, 10_000.0),
            row(Mode::ActivePassive, Some("sync"), 1, 8_000.0),
            row(Mode::FullStack, Some("sync"), 1, 2_000.0),
            row(Mode::ActiveActive, None, 2, 5_000.0),
            row(Mode::ActivePassive, Some("async"), 2, 7_500.0),
            row(Mode::FullStack, Some("sync"), 2, 1_000.0),
        ]
    }

    #[test]
    fn csv_has_a_header_and_one_line_per_row_and_quotes_commas() {
        let rows = example();
        let csv = to_csv(&rows);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 1 + rows.len());
        assert!(lines[0].starts_with("mode,shipping,replicas,"));
        assert_eq!(lines[0].split(',').count(), CSV_COLUMNS.len());
        assert!(lines[1].starts_with("active-active,,1,"), "{}", lines[1]);
        assert!(lines[2].starts_with("active-passive,sync,1,"), "{}", lines[2]);
        assert!(!csv.contains("profile"), "bench is not a CSV column");
        // Every row field is typed now (modes and shipping are enums); a text cell with a
        // comma or a quote is still quoted, the quote doubled (RFC 4180).
        let quoted = csv_table::<&str>(&[("text", |t| t.to_string())], &["sync, patched", "say \"sync\""]);
        assert_eq!(quoted, "text\n\"sync, patched\"\n\"say \"\"sync\"\"\"\n");
    }

    #[test]
    fn csv_header_names_are_the_rows_serde_fields() {
        let runs = [row(Mode::ActiveActive, None, 1, 1.0), row(Mode::ActiveActive, None, 1, 2.0)];
        let json = serde_json::to_value(repeat::combine(&runs).unwrap()).unwrap();
        let mut fields: Vec<String> = json.as_object().unwrap().keys().filter(|k| *k != "bench").cloned().collect();
        // `repeats` is an object: its figures are flattened into `repeats_*` columns.
        let mut header: Vec<String> = CSV_COLUMNS
            .iter()
            .map(|(n, _)| if n.starts_with("repeats_") { "repeats".to_string() } else { n.to_string() })
            .collect();
        header.dedup();
        fields.sort();
        header.sort();
        assert_eq!(fields, header);
    }

    #[test]
    fn json_flattens_bench_and_the_rows_fields_win() {
        let rows = example();
        let json = to_json(&rows);
        let objects = json.as_array().unwrap();
        assert_eq!(objects.len(), rows.len());
        for (o, r) in objects.iter().zip(&rows) {
            assert_eq!(o["mode"], r.mode.name(), "the row's mode beats bench's \"cluster\"");
            assert_eq!(o["txn_per_sec"], r.txn_per_sec);
            assert_eq!(o["profile"], "paper");
            assert_eq!(o["seed"], 7);
            assert_eq!(o["executor_cpu_seconds"], 2.5);
            assert!(o.get("bench").is_none(), "bench is flattened, not nested");
        }
        assert!(objects[0]["backup_cpu_s_per_1000"].is_null());
        assert_eq!(objects[3]["backup_cpu_s_per_1000"], 0.1);
    }

    #[test]
    fn json_of_a_null_bench_holds_the_rows_fields_only() {
        let mut r = row(Mode::ActiveActive, None, 1, 1.0);
        r.bench = serde_json::Value::Null;
        let json = to_json(&[r]);
        let o = json[0].as_object().unwrap();
        let repeats = CSV_COLUMNS.iter().filter(|(n, _)| n.starts_with("repeats_")).count();
        assert_eq!(o.len(), CSV_COLUMNS.len() - repeats, "a single run has no `repeats`");
    }

    #[test]
    fn table_names_every_run_and_shows_missing_values() {
        let rows = example();
        let table = render_table(&rows);
        for r in &rows {
            assert!(table.contains(&r.label()), "{} missing from\n{table}", r.label());
        }
        assert!(table.contains("active-passive (async) ×2"));
        assert!(table.contains(MISSING), "None shows as {MISSING}:\n{table}");
        for (name, _) in METRICS {
            assert_eq!(
                table.contains(name),
                !name.starts_with(FAILOVER_PREFIX) && !name.starts_with(REPEAT_PREFIX),
                "{name}: failover and repeat lines only with data"
            );
        }
        let mut with = rows.clone();
        with[0].failover_lost = Some(0);
        let table_with = render_table(&with);
        assert!(
            METRICS.iter().all(|(name, _)| table_with.contains(name)
                != (name.starts_with(COORDINATOR_FAILOVER_PREFIX) || name.starts_with(REPEAT_PREFIX))),
            "coordinator lines only with a group's data:\n{table_with}"
        );
        with[0].coordinator_failover_lost = Some(0);
        let table_with = render_table(&with);
        assert!(
            METRICS.iter().all(|(name, _)| table_with.contains(name) != name.starts_with(REPEAT_PREFIX)),
            "{table_with}"
        );
        with[1] = repeat::combine(&[with[1].clone(), with[1].clone()]).unwrap();
        let table_with = render_table(&with);
        assert!(METRICS.iter().all(|(name, _)| table_with.contains(name)), "{table_with}");
        assert!(table.contains("0.850"), "p50 in ms:\n{table}");
        assert!(table.contains("checks: every run consistent"));
    }

    #[test]
    fn table_lines_of_a_block_have_equal_width() {
        let table = render_table(&example());
        let shown = METRICS
            .iter()
            .filter(|(name, _)| !name.starts_with(FAILOVER_PREFIX) && !name.starts_with(REPEAT_PREFIX))
            .count();
        let block: Vec<usize> = table.lines().take(1 + shown).map(|l| l.chars().count()).collect();
        assert!(block.iter().all(|w| *w == block[0]), "{block:?}\n{table}");
    }

    #[test]
    fn table_names_failed_checks() {
        let mut rows = example();
        rows[4].digests_equal = false;
        let table = render_table(&rows);
        assert!(table.contains("CHECKS FAILED"));
        assert!(table.contains("replica digests differ"));
    }

    #[test]
    fn ratios_are_computed_from_the_rows() {
        let rows = example();
        let found = comparisons(&rows);
        let vs_aa: Vec<_> = found.iter().filter(|c| matches!(c, Comparison::VsActiveActive { .. })).collect();
        assert_eq!(vs_aa.len(), 4);
        assert!(found.contains(&Comparison::VsActiveActive { row: 1, baseline: 0, ratio: 0.8 }));
        assert!(found.contains(&Comparison::VsActiveActive { row: 2, baseline: 0, ratio: 0.2 }));
        assert!(found.contains(&Comparison::VsActiveActive { row: 4, baseline: 3, ratio: 1.5 }));
        assert!(found.contains(&Comparison::VsActiveActive { row: 5, baseline: 3, ratio: 0.2 }));
        // active-passive async ×2 has no async ×1 run: the sync ×1 run is its baseline.
        assert!(found.contains(&Comparison::VsOneReplica { row: 4, baseline: 1, ratio: 7_500.0 / 8_000.0 }));
        assert!(found.contains(&Comparison::VsOneReplica { row: 3, baseline: 0, ratio: 0.5 }));
        assert!(found.contains(&Comparison::VsOneReplica { row: 5, baseline: 2, ratio: 0.5 }));
        let backup: Vec<_> = found.iter().filter(|c| matches!(c, Comparison::BackupCpu { .. })).collect();
        assert_eq!(backup.len(), 3, "only the ×2 runs have backups");
        assert!(found.contains(&Comparison::BackupCpu { row: 3, pct: 25.0 }));
        let table = render_table(&rows);
        assert!(table.contains("0.80× (8000 vs 10000 txn/s of active-active ×1)"), "{table}");
        assert!(table.contains("25% (0.1000 vs 0.4000 s/1k txn)"), "{table}");
    }

    #[test]
    fn no_ratio_against_a_different_workload_or_a_zero_baseline() {
        let mut rows = example();
        rows[0].txn_per_sec = 0.0;
        rows[3].clients = 99;
        let found = comparisons(&rows);
        assert!(!found.iter().any(|c| matches!(c, Comparison::VsActiveActive { baseline: 0 | 3, .. })), "{found:?}");
    }

    fn temp_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("glass-compare-{}-{name}", std::process::id()))
    }

    #[test]
    fn svg_is_written() {
        for rows in [example(), example()[..1].to_vec()] {
            let path = temp_path(&format!("{}.svg", rows.len()));
            write_svg(&rows, &path).unwrap();
            let svg = std::fs::read_to_string(&path).unwrap();
            std::fs::remove_file(&path).unwrap();
            assert!(!svg.is_empty());
            assert!(svg.contains("<svg"));
            assert!(svg.contains("committed txn/s") && svg.contains("latency (ms)"));
            for r in &rows {
                assert!(svg.contains(&r.label()), "{} missing", r.label());
            }
        }
    }

    #[test]
    fn svg_refuses_no_rows_and_reports_an_unwritable_path() {
        assert!(matches!(write_svg(&[], &temp_path("none.svg")), Err(SvgError::NoRows)));
        let path = temp_path("no-such-dir").join("x.svg");
        assert!(matches!(write_svg(&example(), &path), Err(SvgError::Draw { .. })));
    }
}
