//! Planning and running `glass compare`'s runs. For each replication factor, each mode
//! (active-active, active-passive, full-stack) and each forced multi-partition share, a
//! [`Plan`] derives a cluster description from `cluster.toml` ([`plans`]); [`run_one`] starts
//! that cluster, runs the shared TPC-C workload (same seed, clients, duration, warm-up),
//! checks it (replica digests, consistency, acknowledged NewOrders, replica reads), stops it,
//! and fills its [`CompareRow`]; [`run_failovers`] adds `--failover`'s runs to it. Owns the
//! refusal of flags that cannot run together ([`check_combination`]), each run's heading and
//! the checks a run made ([`run_check`], [`failover_check`]).
//!
//! Guarantees: every plan is made (and every impossible setting refused) before anything
//! runs; every run starts from a fresh run directory of its own (`<run_dir>/compare/<mode>-r<k>/`,
//! `…-r<k>-mp<share>/` with a share, which keeps its process logs and its derived
//! `cluster.toml`), and its cluster is stopped however the run ends; the figures of a row come
//! from that run only (CPU from `/proc` and the nodes' thread accounting, bytes from the
//! processes' own counters, disk from the files left in its run directory).

use std::path::{Path, PathBuf};
use std::time::Instant;

use wire::config::{AgreementRule, ClusterConfig, Mode, Shipping};
use workload::client::driver::{DriverConfig, RemoteShares};

use super::multi as curve;
use super::CompareRow;
use crate::cluster::{runtime, Cluster, Proc, Progress};
use crate::error::HarnessError;
use crate::failover::experiment::{self, Experiment, Kill};
use crate::failover::FailoverReport;
use crate::html::Check;
use crate::measure::{check_and_down, check_partitions, measure_with, up_guarded, Measurement, Sample};
use crate::record::Record;
use crate::Result;

/// One mode at one replication factor (and, with `--multi-partition`, one share).
#[derive(Debug, Clone)]
pub struct Plan {
    pub mode: Mode,
    /// The run's cluster: `run_dir` is [`Plan::dir`].
    pub config: ClusterConfig,
    pub dir: PathBuf,
    /// The share of NewOrders forced multi-partition (`--multi-partition`).
    pub multi_partition: Option<u32>,
}

/// The comparison's first line: `plans` runs (or sweeps, `sweep`) of `duration` seconds on
/// `base`, `rounds` times (`--repeat`), with `cfg`'s warm-up, load and seed.
pub fn heading(base: &Cluster, plans: usize, cfg: &DriverConfig, duration: f64, sweep: bool, rounds: u32) -> String {
    format!(
        "compare: {} {}{}{} of {:.0} s (+{:.0} s warm-up) on {} ({} warehouses, {} nodes), {}, seed {}",
        plans,
        if sweep { "sweep" } else { "run" },
        if plans == 1 { "" } else { "s" },
        if rounds > 1 { format!(" × {rounds} rounds") } else { String::new() },
        duration,
        cfg.warmup_s,
        base.path.display(),
        base.config.warehouses_total(),
        base.config.nodes.len(),
        cfg.rate.map_or("closed loop".to_string(), |r| format!("open loop at {r:.0} txn/s")),
        cfg.seed
    )
}

impl Plan {
    /// The heading of the plan's run, `i` of `n` (counted from 0).
    pub fn heading(&self, i: usize, n: usize) -> String {
        let k = self.config.replication_factor();
        format!(
            "[{}/{}] {} — {} replica{} per partition{}{}{}",
            i + 1,
            n,
            self.mode,
            k,
            if k == 1 { "" } else { "s" },
            self.config.shipping().map_or(String::new(), |s| format!(", {s} shipping")),
            if self.mode.every_replica_executes() && k >= 3 {
                format!(", agreement {}", self.config.agreement)
            } else {
                String::new()
            },
            self.multi_partition.map_or(String::new(), |p| format!(", {p}% multi-partition NewOrders"))
        )
    }

    /// The derived `cluster.toml` the plan ran, copied into the record as `cluster-<plan>.toml`.
    pub fn copy_config(&self, record: &Record) -> Result<()> {
        let name = self.dir.file_name().map_or("plan".into(), |n| n.to_string_lossy().into_owned());
        record.copy_config(&self.dir.join("cluster.toml"), &format!("cluster-{name}.toml"))
    }
}

/// What a comparison runs: the modes, replication factors (empty: the file's placement),
/// shipping override and multi-partition shares (empty: none forced).
#[derive(Debug, Clone)]
pub struct Runs<'a> {
    pub modes: &'a [Mode],
    pub replicas: &'a [usize],
    pub shipping: Option<Shipping>,
    /// Overrides the file's `agreement` (docs/cluster.md, "Agreement").
    pub agreement: Option<AgreementRule>,
    pub multi_partition: &'a [u32],
    /// The remote shares every run uses (`multi_partition_pct` is each plan's).
    pub shares: RemoteShares,
}

/// Refuses remote shares, or forced multi-partition shares, that `base` cannot run.
pub fn check_shares(base: &ClusterConfig, runs: &Runs<'_>) -> Result<()> {
    runs.shares.validate()?;
    for &pct in runs.multi_partition {
        let shares = RemoteShares { multi_partition_pct: pct, ..runs.shares };
        shares.validate()?;
        check_partitions(base, &shares)?;
    }
    Ok(())
}

/// Refuses the flags that cannot run together: `--repeat` (`repeat` rounds) repeats the plain
/// comparison only, `--failover` (`failover`) does not combine with `--multi-partition`, and
/// `--sweep` (`sweep`, its rates checked) runs alone.
pub fn check_combination(runs: &Runs<'_>, repeat: u32, failover: bool, sweep: Option<&[f64]>) -> Result<()> {
    let multi = !runs.multi_partition.is_empty();
    let invalid = |s: &str| Err(HarnessError::Invalid(s.into()));
    if repeat > 1 && (failover || multi || sweep.is_some()) {
        return invalid("--repeat repeats the plain comparison: leave out --failover, --multi-partition and --sweep");
    }
    if failover && multi {
        return invalid("--failover and --multi-partition cannot be combined: run them as two comparisons");
    }
    if let Some(rates) = sweep {
        super::sweep::check_rates(rates)?;
        if failover || multi {
            return invalid(
                "--sweep runs alone: leave out --failover and --multi-partition (run them as other comparisons)",
            );
        }
    }
    Ok(())
}

/// Every plan of the comparison of `base`, in the order they run: by replication factor, then
/// mode, then share. Refuses a placement or mode the cluster cannot take.
pub fn plans(base: &Cluster, runs: &Runs<'_>) -> Result<Vec<Plan>> {
    let shares_given: Vec<Option<u32>> = if runs.multi_partition.is_empty() {
        vec![None]
    } else {
        runs.multi_partition.iter().copied().map(Some).collect()
    };
    let factors: Vec<Option<usize>> =
        if runs.replicas.is_empty() { vec![None] } else { runs.replicas.iter().copied().map(Some).collect() };
    let compare_dir = base.config.run_dir.join("compare");
    let mut plans = Vec::new();
    for factor in &factors {
        let placed = match factor {
            Some(k) => {
                base.config.with_replication(*k).map_err(|e| HarnessError::config(format!("--replicas {k}"), e))?
            }
            None => base.config.clone(),
        };
        for &mode in runs.modes {
            let mut config = placed.with_mode(mode, runs.shipping);
            if let Some(a) = runs.agreement {
                config.agreement = a;
            }
            config.validate().map_err(|e| {
                HarnessError::config(format!("the {mode} cluster derived from {}", base.path.display()), e)
            })?;
            for &multi_partition in &shares_given {
                let mut config = config.clone();
                let mut name = format!("{}-r{}", mode.name(), config.replication_factor());
                if let Some(pct) = multi_partition {
                    name.push_str(&format!("-mp{pct}"));
                }
                let dir = compare_dir.join(name);
                config.run_dir = dir.clone();
                plans.push(Plan { mode, config, dir, multi_partition });
            }
        }
    }
    Ok(plans)
}

/// Where the multi-partition curve's files go: the directory of the first of `outputs`
/// given (`--json`, `--csv`, `--svg`), else `<run_dir>/compare/` of `base`; and the curve's
/// `.json`, `.csv` and `.svg` there. When the curve is drawn (`drawn`), refuses an output it
/// would overwrite, naming its flag.
pub fn curve_files(
    base: &ClusterConfig,
    outputs: [(&str, Option<&Path>); 3],
    drawn: bool,
) -> Result<(PathBuf, [PathBuf; 3])> {
    let curve_dir = outputs
        .iter()
        .find_map(|(_, p)| *p)
        .map(|p| p.parent().map(Path::to_path_buf).unwrap_or_default())
        .unwrap_or_else(|| base.run_dir.join("compare"));
    let files = ["json", "csv", "svg"].map(|x| {
        let dir = if curve_dir.as_os_str().is_empty() { Path::new(".") } else { curve_dir.as_path() };
        dir.join(format!("{}.{x}", curve::FILE_STEM))
    });
    for (flag, given) in outputs.into_iter().filter(|_| drawn) {
        if let Some(p) = given.filter(|p| files.iter().any(|c| same_file_name(c, p))) {
            return Err(HarnessError::Invalid(format!(
                "{flag} {} would be overwritten by the multi-partition curve, which is written as {}.{{json,csv,svg}} \
                 in the same directory: give the per-run file another name",
                p.display(),
                curve::FILE_STEM
            )));
        }
    }
    Ok((curve_dir, files))
}

/// Starts the plan's cluster from the `glass` executable `exe`, measures, checks, stops it;
/// returns its row.
pub fn run_one(
    plan: &Plan,
    exe: &Path,
    cfg: &DriverConfig,
    shares: &RemoteShares,
    echo: crate::measure::Echo,
    keep_logs: bool,
    progress: &mut dyn Progress,
) -> Result<CompareRow> {
    let note = format!(
        "Derived by `glass compare` from the cluster it was given: mode {}, {} replicas.",
        plan.mode,
        plan.config.replication_factor()
    );
    let cluster = Cluster::derived(&plan.config, &note, None)?;
    let t0 = Instant::now();
    let guard = up_guarded(&cluster, exe, progress)?;
    let load_seconds = t0.elapsed().as_secs_f64();
    let rt = runtime()?;
    let client = cluster.client();
    let Measurement { mut report, acks, payments, start, end, .. } =
        measure_with(&rt, &cluster, &client, cfg, shares, echo, None)?;
    report.load_seconds = load_seconds;
    let verdict = check_and_down(&rt, guard, &client, &acks, &payments, progress)?;
    let disk_bytes = remove_data(&plan.dir, &cluster, keep_logs)?;

    let (Some(s), Some(e)) = (start, end) else { return Err(HarnessError::NotSampled) };
    let committed = report.committed.max(1) as f64;
    let per_1000 = |cpu_s: f64| 1000.0 * cpu_s / committed;
    let config = &plan.config;
    let primary_of = |p: u16| config.partition(p).map(|c| c.replicas[0]);
    let delta = |pick: &dyn Fn(&wire::messages::PartitionReport) -> f64, primary: Option<bool>| -> f64 {
        let sum = |sample: &Sample| -> f64 {
            sample
                .replicas
                .iter()
                .filter(|(n, r)| primary.is_none_or(|want| (primary_of(r.partition) == Some(*n)) == want))
                .map(|(_, r)| pick(r))
                .sum()
        };
        sum(&e) - sum(&s)
    };
    let cpu = |r: &wire::messages::PartitionReport| r.cpu_ms as f64 / 1000.0;
    let primary_cpu = delta(&cpu, Some(true));
    let backup_cpu = delta(&cpu, Some(false));
    let shipped = delta(&|r| r.replication.shipped_bytes as f64, None);
    let log_bytes = delta(&|r| r.replication.log_bytes as f64, None);
    let fsyncs = delta(&|r| r.replication.fsyncs as f64, None);
    let acks_n = delta(&|r| r.replication.acks as f64, None);
    let ack_delay = delta(&|r| r.replication.ack_delay_us_sum as f64, None);
    let batch_bytes =
        |sample: &Sample| -> f64 { sample.coordinator.iter().map(|p| p.replication.shipped_bytes as f64).sum() };
    let node_cpu: f64 = e
        .process_cpu_s
        .iter()
        .filter(|(label, _, _)| label.starts_with("node"))
        .map(|(label, end, _)| end - s.process_cpu_s.iter().find(|(l, _, _)| l == label).map_or(*end, |x| x.1))
        .sum();
    let replicas = config.replication_factor();
    let reads_total: usize = verdict.partitions.iter().map(|p| p.reads).sum();
    let bench_json = serde_json::to_value(&report).expect("a bench report of plain fields serialises");
    let neworders =
        report.per_txn.iter().find(|k| k.txn == engine::procedures::TxnKind::NewOrder).map_or(0, |k| k.count);
    let (single, multi) =
        report.cluster.as_ref().map_or((0, 0), |c| (c.committed_single_partition, c.committed_multi_partition));
    Ok(CompareRow {
        mode: plan.mode,
        shipping: config.shipping(),
        replicas,
        nodes: config.nodes.len(),
        warehouses: report.warehouses,
        clients: cfg.clients,
        seconds: report.seconds,
        committed: report.committed,
        aborted: report.aborted,
        txn_per_sec: report.txn_per_sec,
        neworder_per_sec: neworders as f64 / report.seconds.max(1e-9),
        tpmc: report.tpmc,
        multi_partition_pct: plan.multi_partition,
        committed_single_partition: single,
        committed_multi_partition: multi,
        p50_us: report.p50_us,
        p95_us: report.p95_us,
        p99_us: report.p99_us,
        primary_cpu_s_per_1000: per_1000(primary_cpu),
        backup_cpu_s_per_1000: (replicas > 1).then(|| per_1000(backup_cpu)),
        node_cpu_s_per_1000: per_1000(node_cpu),
        cpu_us_per_txn: crate::measure::cpu_us_per_txn(&s, &e, &report),
        net_bytes_per_txn: shipped / committed,
        batch_bytes_per_txn: (batch_bytes(&e) - batch_bytes(&s)) / committed,
        log_bytes_per_txn: log_bytes / committed,
        fsyncs: fsyncs as u64,
        disk_bytes,
        backup_lag_ms: (!plan.mode.every_replica_executes() && acks_n > 0.0).then(|| ack_delay / acks_n / 1e3),
        replica_reads_consistent: (replicas > 1 && reads_total > 0)
            .then(|| verdict.partitions.iter().all(|p| p.reads_agree())),
        digests_equal: verdict.partitions.iter().all(|p| p.agreed && p.copy_ok),
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
        consistent: verdict.consistency.all_passed()
            && verdict.acks_missing.is_empty()
            && verdict.payments_missing.is_empty(),
        repeats: None,
        bench: bench_json,
    })
}

/// The check a plain run made (`round`: its round of `--repeat`, when there are several).
pub fn run_check(row: &CompareRow, round: Option<usize>) -> Check {
    let round = round.map_or(String::new(), |r| format!(" (round {r})"));
    Check {
        what: format!(
            "{}{round}: replica digests equal, TPC-C consistent (clause 3.3.2), every acknowledged NewOrder and \
             Payment present, replica reads agree",
            row.label()
        ),
        passed: row.checks_passed(),
    }
}

/// The check of a run's `--failover` runs.
pub fn failover_check(row: &CompareRow, passed: bool) -> Check {
    Check { what: format!("{}: the failover lost nothing acknowledged", row.label()), passed }
}

/// `--failover`: partition 1's first replica SIGKILLed `at` seconds into the measured phase,
/// on the plan's cluster, then — with a coordinator group — the leading coordinator
/// (docs/design.md §11); fills the row's failover fields, removes each run's data unless
/// `keep_logs`, and returns whether the runs passed. What each run is and its report,
/// indented, go to `say`.
#[allow(clippy::too_many_arguments)] // the plan, the workload, the row and the caller's two sinks
pub fn run_failovers(
    plan: &Plan,
    exe: &Path,
    cfg: &DriverConfig,
    shares: RemoteShares,
    (at, quiet, keep_logs): (f64, bool, bool),
    progress: &mut dyn Progress,
    say: &mut dyn FnMut(&str),
    row: &mut CompareRow,
) -> Result<bool> {
    let mut config = plan.config.clone();
    config.run_dir = plan.dir.join("failover");
    let x = Experiment {
        exe: exe.to_path_buf(),
        victim: Kill::Node(config.partitions[0].replicas[0]),
        signal: libc::SIGKILL,
        at,
        restart_after: None,
        then_kill: None,
        cfg: DriverConfig { outages: true, ..cfg.clone() },
        shares,
        quiet,
    };
    let mut run = |config: &ClusterConfig, x: &Experiment, what: String| -> Result<FailoverReport> {
        say(&format!("  failover: SIGKILL {} at {:.1} s\n", x.victim, x.at));
        let f =
            experiment::experiment(config, x, progress).map_err(|e| HarnessError::Run { what, source: Box::new(e) })?;
        say(&f.to_string().lines().map(|l| format!("  {l}\n")).collect::<String>());
        remove_derived_data(&config.run_dir, keep_logs)?;
        Ok(f)
    };
    let f = run(&config, &x, format!("the {} failover run", plan.mode))?;
    row.set_failover(&f);
    let mut passed = experiment::passed(&plan.config, &f);
    if config.coordinators.len() > 1 {
        // The group's leader killed too (docs/design.md §11): the coordinator row.
        config.run_dir = plan.dir.join("failover-coordinator");
        let x = Experiment { victim: Kill::Leader, ..x };
        let f = run(&config, &x, format!("the {} coordinator failover run", plan.mode))?;
        row.set_coordinator_failover(&f);
        passed &= experiment::passed(&plan.config, &f);
    }
    Ok(passed)
}

/// [`remove_data`] of the derived cluster whose `cluster.toml` lies in `run_dir` (a failover
/// run's).
pub fn remove_derived_data(run_dir: &Path, keep_logs: bool) -> Result<u64> {
    let derived = Cluster::open(&run_dir.join("cluster.toml"))?;
    remove_data(run_dir, &derived, keep_logs)
}

/// Whether two paths name the same file, judged without touching the disk (neither needs to
/// exist): equal once a bare file name is taken as relative to `.`.
fn same_file_name(a: &Path, b: &Path) -> bool {
    let norm = |p: &Path| -> PathBuf {
        if p.parent().is_none_or(|d| d.as_os_str().is_empty()) {
            Path::new(".").join(p)
        } else {
            p.to_path_buf()
        }
    };
    norm(a) == norm(b)
}

/// Measures what the stopped cluster left on disk ([`data_files`]), then — unless
/// `keep_logs` — removes it: a full-stack comparison leaves gigabytes of log and checkpoint.
/// Kept files are written back now, between runs, rather than during the next run's measured
/// phase. Returns the bytes measured.
pub fn remove_data(dir: &Path, cluster: &Cluster, keep_logs: bool) -> Result<u64> {
    let files = data_files(dir, cluster)?;
    // The nodes on other hosts left theirs there.
    let bytes = files.iter().map(|(_, n)| n).sum::<u64>() + cluster.remote_data_bytes(keep_logs)?;
    if keep_logs {
        if bytes > 0 {
            // SAFETY: sync(2) takes no arguments and cannot fail.
            unsafe { libc::sync() };
        }
    } else {
        for (f, _) in &files {
            std::fs::remove_file(f).map_err(|e| HarnessError::io(format!("remove {}", f.display()), e))?;
        }
    }
    Ok(bytes)
}

/// The files a run left in its directory besides what the launcher writes (process logs, pid
/// files, the derived cluster.toml, the host keys ssh learned) and the coordinators' raft
/// state (decisions about membership, not data): the nodes' databases, logs and checkpoints,
/// with their sizes.
fn data_files(dir: &Path, cluster: &Cluster) -> Result<Vec<(PathBuf, u64)>> {
    let run_dir = &cluster.config.run_dir;
    let launcher: Vec<PathBuf> = cluster
        .coordinator_procs()
        .into_iter()
        .chain(cluster.config.nodes.iter().map(|n| Proc::Node(n.id)))
        .map(|p| cluster.log_file(&p))
        .chain(cluster.config.coordinator_ids().into_iter().map(|c| wire::config::coordinator_state_file(run_dir, c)))
        .collect();
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let read = |e| HarnessError::io(format!("read {}", d.display()), e);
        for entry in std::fs::read_dir(&d).map_err(read)? {
            let entry = entry.map_err(read)?;
            let path = entry.path();
            let meta = entry.metadata().map_err(read)?;
            if meta.is_dir() {
                stack.push(path);
            } else if !(launcher.contains(&path)
                || path.extension().is_some_and(|x| x == "pid")
                || path == dir.join("cluster.toml")
                || path == run_dir.join("ssh").join("known_hosts"))
            {
                found.push((path, meta.len()));
            }
        }
    }
    Ok(found)
}
