//! Benchmark metrics: per-transaction-type latency histograms (HDR, nanoseconds), commit and
//! abort counts, per-interval figures for the once-a-second progress lines, and the resident
//! memory of the process.
//!
//! Guarantees: recording is allocation-free; histograms auto-resize only past their
//! configured bound (1 minute), which a single transaction never reaches in practice.

use engine::procedures::TxnKind;
use hdrhistogram::Histogram;
use serde::Serialize;

/// Highest latency a histogram tracks without resizing.
const LATENCY_NS_MAX: u64 = 60_000_000_000;

fn histogram() -> Histogram<u64> {
    let mut h = Histogram::new_with_bounds(1, LATENCY_NS_MAX, 3).expect("valid histogram bounds");
    h.auto(true);
    h
}

/// Counts and latencies of one transaction type.
#[derive(Debug, Clone)]
pub struct KindStats {
    pub committed: u64,
    pub aborted: u64,
    pub latency_ns: Histogram<u64>,
}

impl Default for KindStats {
    fn default() -> Self {
        KindStats { committed: 0, aborted: 0, latency_ns: histogram() }
    }
}

/// Counts and latencies of every transaction type.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub per_kind: [KindStats; 5],
}

impl Stats {
    #[inline]
    pub fn record(&mut self, kind: TxnKind, latency_ns: u64, committed: bool) {
        let k = &mut self.per_kind[kind as usize];
        if committed {
            k.committed += 1;
        } else {
            k.aborted += 1;
        }
        let _ = k.latency_ns.record(latency_ns.max(1));
    }

    pub fn committed(&self) -> u64 {
        self.per_kind.iter().map(|k| k.committed).sum()
    }

    pub fn aborted(&self) -> u64 {
        self.per_kind.iter().map(|k| k.aborted).sum()
    }

    /// All types' latencies in one histogram.
    pub fn all_latencies(&self) -> Histogram<u64> {
        let mut h = histogram();
        for k in &self.per_kind {
            h.add(&k.latency_ns).expect("same bounds");
        }
        h
    }

    pub fn merge(&mut self, other: &Stats) {
        for (a, b) in self.per_kind.iter_mut().zip(&other.per_kind) {
            a.committed += b.committed;
            a.aborted += b.aborted;
            a.latency_ns.add(&b.latency_ns).expect("same bounds");
        }
    }

    /// The per-type summary rows reports print and serialise.
    pub fn summary(&self) -> Vec<KindSummary> {
        TxnKind::ALL
            .iter()
            .zip(&self.per_kind)
            .filter(|(_, k)| k.committed + k.aborted > 0)
            .map(|(kind, k)| KindSummary::new(*kind, k.committed, k.aborted, &k.latency_ns))
            .collect()
    }
}

/// One transaction type's figures, as printed and as written to JSON (`per_txn`).
#[derive(Debug, Clone, Serialize)]
pub struct KindSummary {
    /// Written by its report name (`neworder`, `payment`, …).
    #[serde(serialize_with = "kind_name")]
    pub txn: TxnKind,
    pub count: u64,
    pub aborts: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

/// A transaction type as reports name it.
pub(crate) fn kind_name<S: serde::Serializer>(kind: &TxnKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(kind.name())
}

impl KindSummary {
    pub fn new(txn: TxnKind, count: u64, aborts: u64, h: &Histogram<u64>) -> Self {
        let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        KindSummary {
            txn,
            count,
            aborts,
            mean_us: h.mean() / 1000.0,
            p50_us: us(0.50),
            p95_us: us(0.95),
            p99_us: us(0.99),
            max_us: h.max() as f64 / 1000.0,
        }
    }
}

/// Resident set size of this process in bytes (from /proc/self/statm), if readable.
pub fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let resident_pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(resident_pages * u64::try_from(page).ok()?)
}

/// CPU seconds (user + system) this process has used, from getrusage.
pub fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage struct.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU time the calling thread has used, in seconds (CLOCK_THREAD_CPUTIME_ID). Compared with
/// wall time it shows whether the executor thread was descheduled (a shared machine).
pub fn thread_cpu_seconds() -> f64 {
    // SAFETY: clock_gettime writes into the zeroed struct we pass.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer; the clock id is supported on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}
