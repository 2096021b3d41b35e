//! The embedded benchmark (`glass bench --embedded`): one thread drives one partition holding
//! every warehouse, loading it from the seed, warming up, then running the generator's stream
//! through the procedures and measuring each transaction.
//!
//! Guarantees: the stream of inputs depends only on the seed and the configuration (the
//! commit timestamp and every "current date" are a logical clock, not the wall clock); the
//! warm-up's transactions change the data but are not counted; only the execution of a
//! transaction is inside its latency measurement (generation is not).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use engine::procedures::{execute, TxnKind};
use engine::Storage;
use serde::Serialize;

use crate::gen::{GenConfig, Generator, Mix, Profile};
use crate::metrics::{rss_bytes, thread_cpu_seconds, KindSummary, Stats};
use engine::loader::{self, LoadProgress};

/// Why a bench could not run or finish.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A setting is impossible; the message names the flag.
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Load(#[from] engine::LoadError),
    #[error(transparent)]
    Gen(#[from] crate::error::GenError),
    /// A transaction failed in a way that is not an abort: the database is not TPC-C's.
    #[error("transaction failed: {0}")]
    Txn(engine::TxnError),
    /// An output file cannot be written.
    #[error("cannot write {path}: {why}")]
    Output { path: PathBuf, why: String },
}

/// When the measured phase ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StopAfter {
    Seconds(f64),
    Transactions(u64),
}

/// Everything an embedded run depends on.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub profile: Profile,
    pub mix: Option<Mix>,
    pub warehouses: u16,
    pub stop: StopAfter,
    /// Seconds of unmeasured warm-up (ignored when `warmup_txns` is given).
    pub warmup_s: f64,
    /// A warm-up of exactly this many transactions instead of `warmup_s` seconds: with a
    /// transaction limit (`--txns`) the run is then a pure function of the seed, and the same
    /// seed gives byte-identical dumps (the guarantee above).
    pub warmup_txns: Option<u64>,
    pub seed: u64,
    /// The pages the tables grow into once loaded (`engine::arena::GrowthPages`).
    pub growth_pages: engine::arena::GrowthPages,
}

impl BenchConfig {
    /// The generator configuration this bench runs.
    pub fn gen_config(&self) -> GenConfig {
        let mut cfg = GenConfig::for_profile(self.profile, 1..=self.warehouses);
        cfg.mix = self.mix;
        cfg
    }

    /// Rejects impossible settings with an error naming the setting.
    pub fn validate(&self) -> Result<(), BenchError> {
        if self.warehouses == 0 {
            return Err(BenchError::Invalid("--warehouses must be at least 1".into()));
        }
        match self.stop {
            StopAfter::Seconds(s) if !(s > 0.0 && s.is_finite()) => {
                return Err(BenchError::Invalid(format!("--duration must be a positive number of seconds, not {s}")))
            }
            StopAfter::Transactions(0) => return Err(BenchError::Invalid("--txns must be at least 1".into())),
            _ => {}
        }
        if self.warmup_txns.is_some() && !matches!(self.stop, StopAfter::Transactions(_)) {
            return Err(BenchError::Invalid(
                "--warmup-txns counts the warm-up of a run that stops after --txns; a timed run warms up for \
                 --warmup seconds"
                    .into(),
            ));
        }
        if !(self.warmup_s >= 0.0 && self.warmup_s.is_finite()) {
            return Err(BenchError::Invalid(format!("--warmup must be zero or more seconds, not {}", self.warmup_s)));
        }
        Ok(())
    }
}

/// What the caller is told while the bench runs (progress bars, per-second lines).
pub trait Observer {
    /// Loading progress: rows loaded of rows expected.
    fn loading(&mut self, _done: u64, _total: u64) {}
    /// A phase starts: "warmup" or "run", with its length if known.
    fn phase(&mut self, _name: &str, _stop: StopAfter) {}
    /// Progress within the phase: seconds elapsed and transactions done.
    fn progress(&mut self, _elapsed_s: f64, _txns: u64) {}
    /// One per-second line of the measured phase.
    fn interval(&mut self, _line: &IntervalLine) {}
    /// The run is over.
    fn finished(&mut self) {}
}

/// An observer that says nothing.
#[derive(Debug, Default)]
pub struct Quiet;
impl Observer for Quiet {}

/// The figures of one second of the measured phase.
#[derive(Debug, Clone, Serialize)]
pub struct IntervalLine {
    pub elapsed_s: f64,
    pub txn_per_sec: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub aborts: u64,
    /// The same second per transaction type that ran in it (`--per-type` prints them).
    pub per_txn: Vec<IntervalKind>,
}

/// One transaction type's figures within one interval: what `--per-type` prints each second,
/// as cockroach `workload` and go-tpc do.
#[derive(Debug, Clone, Serialize)]
pub struct IntervalKind {
    #[serde(serialize_with = "crate::metrics::kind_name")]
    pub txn: TxnKind,
    /// Committed per second.
    pub per_sec: f64,
    pub p50_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

impl IntervalLine {
    /// The line of an interval ending `elapsed_s` into the measured phase and lasting `span_s`,
    /// from the figures gathered in it. The one place every driver builds its lines.
    pub fn of(elapsed_s: f64, span_s: f64, interval: &Stats) -> IntervalLine {
        let span = span_s.max(1e-9);
        let h = interval.all_latencies();
        let us = |h: &hdrhistogram::Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        let per_txn = TxnKind::ALL
            .iter()
            .zip(&interval.per_kind)
            .filter(|(_, k)| k.committed + k.aborted > 0)
            .map(|(txn, k)| IntervalKind {
                txn: *txn,
                per_sec: k.committed as f64 / span,
                p50_us: us(&k.latency_ns, 0.50),
                p95_us: us(&k.latency_ns, 0.95),
                p99_us: us(&k.latency_ns, 0.99),
                max_us: k.latency_ns.max() as f64 / 1000.0,
            })
            .collect();
        IntervalLine {
            elapsed_s,
            txn_per_sec: interval.committed() as f64 / span,
            p50_us: us(&h, 0.5),
            p99_us: us(&h, 0.99),
            aborts: interval.aborted(),
            per_txn,
        }
    }
}

/// Where a bench ran: on a database in this process, or on a cluster in one of its modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    Embedded,
    Cluster(wire::config::Mode),
}

impl RunKind {
    /// The report's name for it: `embedded`, or the cluster's mode.
    pub fn name(self) -> &'static str {
        match self {
            RunKind::Embedded => "embedded",
            RunKind::Cluster(mode) => mode.name(),
        }
    }
}

impl std::fmt::Display for RunKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

impl Serialize for RunKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// The result of an embedded run, as printed and as written by `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// Written as `embedded` or the cluster's mode.
    pub mode: RunKind,
    pub profile: String,
    pub mix: [u32; 5],
    pub warehouses: u16,
    pub seed: u64,
    pub load_seconds: f64,
    pub warmup_seconds: f64,
    pub seconds: f64,
    pub committed: u64,
    pub aborted: u64,
    pub txn_per_sec: f64,
    /// tpmC: committed NewOrders per minute of the measured phase (TPC-C clause 5.4.1; glass
    /// runs without keying and think times, so this is not a conforming TPC-C result).
    pub tpmc: f64,
    /// CPU seconds the executor thread(s) used during the measured phase (less than
    /// `seconds` × threads when the machine's other work descheduled them); `None` when it
    /// could not be measured ([`BenchReport::cpu_not_measured`] says why).
    pub executor_cpu_seconds: Option<f64>,
    /// Committed transactions per executor CPU second: throughput net of descheduling.
    pub txn_per_cpu_sec: Option<f64>,
    /// Why the executors' CPU time is not reported (a node restarted during the run, a
    /// node's counters could not be read), if it is not.
    pub cpu_not_measured: Option<String>,
    pub p50_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub per_txn: Vec<KindSummary>,
    /// Resident bytes of the database's processes once the load is done, before the warm-up
    /// (a cluster: every node's, summed).
    pub rss_after_load_bytes: u64,
    pub rss_bytes: u64,
    /// Resident growth per NewOrder committed, per copy of the database: embedded,
    /// (rss_bytes − rss_after_load_bytes) / NewOrders, warm-up included; a cluster, the
    /// nodes' growth over the measured phase / (NewOrders measured × replicas).
    pub rss_growth_per_neworder_bytes: f64,
    /// Copies of a warehouse that `rss_after_load_bytes` holds: the warehouses, each times the
    /// replicas of its partition (embedded: the warehouses).
    pub warehouse_copies: u64,
    /// The pages the tables grew into once loaded (a cluster: its nodes', `growth_pages`).
    pub growth_pages: engine::arena::GrowthPages,
    pub timeline: Vec<IntervalLine>,
    /// Engine that ran: "lean" or "conventional" (absent when the caller did not say).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// The conventional stack's switch step (0 = full stack … 11 = lean kernel).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<u8>,
    /// Worker threads (the multi-threaded runner, [`crate::workers`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<usize>,
    /// Re-executions of transactions the concurrency control aborted (measured phase).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retries: Option<u64>,
    /// Bytes written to the log device during the run (warm-up included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_bytes: Option<u64>,
    /// `fdatasync` calls on the log device during the run (warm-up included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fsyncs: Option<u64>,
    /// A cluster bench's figures (`replicas`, `nodes`, …), flattened into the JSON object.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<crate::client::driver::ClusterInfo>,
}

/// What a driver measured; [`BenchReport::assemble`] turns it into a report in one place.
#[derive(Debug)]
pub struct Measured<'a> {
    pub mode: RunKind,
    pub profile: &'static str,
    pub mix: [u32; 5],
    pub warehouses: u16,
    pub seed: u64,
    pub load_seconds: f64,
    pub warmup_seconds: f64,
    pub seconds: f64,
    /// CPU seconds of the executing thread(s), where the driver can tell.
    pub cpu_seconds: Option<f64>,
    pub stats: &'a Stats,
    /// (resident bytes after load, resident bytes at the end, NewOrders committed), where
    /// the database lives in this process.
    pub memory: Option<(u64, u64, u64)>,
    pub timeline: Vec<IntervalLine>,
}

impl BenchReport {
    /// The report of a run; the optional, driver-specific fields start empty.
    pub fn assemble(m: Measured<'_>) -> BenchReport {
        let all = m.stats.all_latencies();
        let us = |q: f64| all.value_at_quantile(q) as f64 / 1000.0;
        let committed = m.stats.committed();
        let (rss_after_load, rss, neworders) = m.memory.unwrap_or((0, 0, 0));
        let cpu = m.cpu_seconds.filter(|c| *c > 0.0);
        BenchReport {
            mode: m.mode,
            profile: m.profile.to_string(),
            mix: m.mix,
            warehouses: m.warehouses,
            seed: m.seed,
            load_seconds: m.load_seconds,
            warmup_seconds: m.warmup_seconds,
            seconds: m.seconds,
            committed,
            aborted: m.stats.aborted(),
            txn_per_sec: committed as f64 / m.seconds.max(1e-9),
            tpmc: 60.0 * m.stats.per_kind[TxnKind::NewOrder as usize].committed as f64 / m.seconds.max(1e-9),
            executor_cpu_seconds: cpu,
            txn_per_cpu_sec: cpu.map(|c| committed as f64 / c),
            cpu_not_measured: cpu.is_none().then(|| "the executor thread's CPU time could not be read".to_string()),
            p50_us: us(0.50),
            p95_us: us(0.95),
            p99_us: us(0.99),
            per_txn: m.stats.summary(),
            rss_after_load_bytes: rss_after_load,
            rss_bytes: rss,
            warehouse_copies: u64::from(m.warehouses),
            growth_pages: engine::arena::growth_pages(),
            rss_growth_per_neworder_bytes: if neworders == 0 {
                0.0
            } else {
                rss.saturating_sub(rss_after_load) as f64 / neworders as f64
            },
            timeline: m.timeline,
            engine: None,
            step: None,
            workers: None,
            retries: None,
            log_bytes: None,
            fsyncs: None,
            cluster: None,
        }
    }
}

/// Loads a fresh database of `warehouses` warehouses into `db`.
pub fn load<S: Storage>(db: &mut S, warehouses: u16, seed: u64, obs: &mut dyn Observer) -> Result<(), BenchError> {
    loader::load_database(db, 1..=warehouses, seed, &mut |p: LoadProgress| obs.loading(p.rows_loaded, p.rows_total))?;
    Ok(())
}

/// The run seed derived from the load seed (one `--seed` drives both, independently).
pub fn run_seed(seed: u64) -> u64 {
    seed ^ 0x5EED_0FC0_FFEE_0000
}

/// Runs the warm-up and the measured phase on an already-loaded database.
pub fn run<S: Storage>(
    db: &mut S,
    cfg: &BenchConfig,
    mode: RunKind,
    load_seconds: f64,
    obs: &mut dyn Observer,
) -> Result<BenchReport, BenchError> {
    cfg.validate()?;
    let rss_after_load = rss_bytes().unwrap_or(0);
    // From here on tables grow, into the pages the run names: keep their next pages faulted in
    // off the executor thread.
    engine::arena::set_growth_pages(cfg.growth_pages);
    engine::arena::set_prefault(true);
    let mut gen = Generator::new(cfg.gen_config(), run_seed(cfg.seed), cfg.seed)?;
    let mut ts: u64 = 0;
    let mut neworders: u64 = 0;

    // Warm-up: same stream, not measured; a number of transactions or of seconds.
    let warmup = Duration::from_secs_f64(cfg.warmup_s);
    let warmup_start = Instant::now();
    let warmup_txns = cfg.warmup_txns.unwrap_or(u64::MAX);
    if cfg.warmup_txns.map_or(!warmup.is_zero(), |n| n > 0) {
        obs.phase("warmup", cfg.warmup_txns.map_or(StopAfter::Seconds(cfg.warmup_s), StopAfter::Transactions));
        let mut n = 0u64;
        loop {
            ts += 1;
            let input = gen.next(loader::LOAD_TIMESTAMP + ts as i64);
            let r = execute(db, ts, &input);
            neworders += (r.is_ok() && input.kind() == TxnKind::NewOrder) as u64;
            check_outcome(&r)?;
            n += 1;
            if n >= warmup_txns {
                break;
            }
            if n % 1024 == 0 {
                let e = warmup_start.elapsed();
                obs.progress(e.as_secs_f64(), n);
                if cfg.warmup_txns.is_none() && e >= warmup {
                    break;
                }
            }
        }
    }
    let warmup_seconds = if cfg.warmup_txns.is_some() { warmup_start.elapsed().as_secs_f64() } else { cfg.warmup_s };

    obs.phase("run", cfg.stop);
    let cpu_start = thread_cpu_seconds();
    let mut stats = Stats::default();
    let mut interval = Stats::default();
    let mut timeline = Vec::new();
    let start = Instant::now();
    let mut next_tick = Duration::from_secs(1);
    let mut last_tick = Duration::ZERO;
    let mut done = 0u64;
    let limit_txns = match cfg.stop {
        StopAfter::Transactions(n) => n,
        StopAfter::Seconds(_) => u64::MAX,
    };
    let limit_time = match cfg.stop {
        StopAfter::Seconds(s) => Duration::from_secs_f64(s),
        StopAfter::Transactions(_) => Duration::MAX,
    };
    let elapsed = loop {
        ts += 1;
        let input = gen.next(loader::LOAD_TIMESTAMP + ts as i64);
        let kind = input.kind();
        let a = Instant::now();
        let r = execute(db, ts, &input);
        let b = Instant::now();
        check_outcome(&r)?;
        let ns = (b - a).as_nanos() as u64;
        stats.record(kind, ns, r.is_ok());
        interval.record(kind, ns, r.is_ok());
        neworders += (r.is_ok() && kind == TxnKind::NewOrder) as u64;
        done += 1;
        let e = b - start;
        if e >= next_tick || done >= limit_txns || e >= limit_time {
            let line = IntervalLine::of(e.as_secs_f64(), (e - last_tick).as_secs_f64(), &interval);
            obs.interval(&line);
            obs.progress(e.as_secs_f64(), done);
            timeline.push(line);
            interval = Stats::default();
            last_tick = e;
            while next_tick <= e {
                next_tick += Duration::from_secs(1);
            }
            if done >= limit_txns || e >= limit_time {
                break e;
            }
        }
    };
    let cpu_seconds = thread_cpu_seconds() - cpu_start;
    obs.finished();
    let rss = rss_bytes().unwrap_or(0);
    Ok(BenchReport::assemble(Measured {
        mode,
        profile: cfg.profile.name(),
        mix: gen.mix().weights,
        warehouses: cfg.warehouses,
        seed: cfg.seed,
        load_seconds,
        warmup_seconds,
        seconds: elapsed.as_secs_f64(),
        cpu_seconds: Some(cpu_seconds),
        stats: &stats,
        memory: Some((rss_after_load, rss, neworders)),
        timeline,
    }))
}

/// Aborts (TPC-C rollbacks, concurrency-control victims) are outcomes; anything else means
/// the database is broken and the run stops.
fn check_outcome<T>(r: &Result<T, engine::TxnError>) -> Result<(), BenchError> {
    match r {
        Err(e) if !e.is_abort() => Err(BenchError::Txn(e.clone())),
        _ => Ok(()),
    }
}

/// Output paths are checked before any work so a bad path fails fast and writes nothing.
pub fn check_writable_file(path: &Path) -> Result<(), BenchError> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        return Err(BenchError::Output { path: path.to_path_buf(), why: "its directory does not exist".into() });
    }
    let probe = parent.join(format!(".glass-probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| BenchError::Output { path: path.to_path_buf(), why: e.to_string() })?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

/// Writes `bytes` to `path` atomically (temporary file, then rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), BenchError> {
    let tmp = path.with_extension("tmp-glass");
    std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| BenchError::Output { path: path.to_path_buf(), why: e.to_string() })
}
