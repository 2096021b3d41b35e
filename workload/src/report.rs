//! What a run shows on screen: progress bars while loading and running (indicatif, hidden when
//! the output is not a terminal), the once-a-second lines, and the final per-transaction
//! table.

use std::fmt::Write as _;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::bench::{BenchReport, IntervalLine, Observer, StopAfter};

/// Console progress: bars on a terminal, plain lines otherwise.
pub struct ConsoleObserver {
    bar: Option<ProgressBar>,
    quiet: bool,
    /// `--per-type`: under each per-second line, one line per transaction type.
    per_type: bool,
    header_done: bool,
    bar_unit_is_ms: bool,
}

impl ConsoleObserver {
    /// `quiet` suppresses the per-second lines (bars still show on a terminal).
    pub fn new(quiet: bool) -> Self {
        ConsoleObserver { bar: None, quiet, per_type: false, header_done: false, bar_unit_is_ms: false }
    }

    /// `--per-type`: each per-second line is followed by one line per transaction type
    /// (committed per second, p50, p95, p99, max), as cockroach `workload` and go-tpc print.
    pub fn per_type(mut self, on: bool) -> Self {
        self.per_type = on;
        self
    }

    fn new_bar(&mut self, len: u64, template: &str) -> ProgressBar {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
        bar.set_style(ProgressStyle::with_template(template).expect("valid progress template").progress_chars("=> "));
        self.bar = Some(bar.clone());
        bar
    }

    fn say(&self, line: &str) {
        match &self.bar {
            Some(b) if !b.is_hidden() => b.println(line),
            _ => println!("{line}"),
        }
    }
}

impl Observer for ConsoleObserver {
    fn loading(&mut self, done: u64, total: u64) {
        if self.bar.as_ref().map(|b| b.length() != Some(total)).unwrap_or(true) {
            self.new_bar(total, "loading  [{bar:40}] {pos}/{len} rows ({eta} left)");
        }
        if let Some(b) = &self.bar {
            b.set_position(done);
        }
    }

    fn phase(&mut self, name: &str, stop: StopAfter) {
        let (len, unit) = match stop {
            StopAfter::Seconds(s) => ((s * 1000.0) as u64, "ms"),
            StopAfter::Transactions(n) => (n, "txns"),
        };
        let template = format!("{name:<8} [{{bar:40}}] {{pos}}/{{len}} {unit}");
        self.new_bar(len, &template);
        if name == "run" && !self.quiet && !self.header_done {
            self.header_done = true;
            self.say(&format!("{:>8} {:>12} {:>10} {:>10} {:>8}", "elapsed", "txn/s", "p50_us", "p99_us", "aborts"));
        }
        self.bar_unit_is_ms = matches!(stop, StopAfter::Seconds(_));
    }

    fn progress(&mut self, elapsed_s: f64, txns: u64) {
        if let Some(b) = &self.bar {
            b.set_position(if self.bar_unit_is_ms { (elapsed_s * 1000.0) as u64 } else { txns });
        }
    }

    fn interval(&mut self, l: &IntervalLine) {
        if !self.quiet {
            self.say(&format!(
                "{:>7.1}s {:>12.0} {:>10.1} {:>10.1} {:>8}",
                l.elapsed_s, l.txn_per_sec, l.p50_us, l.p99_us, l.aborts
            ));
            if self.per_type {
                for k in &l.per_txn {
                    self.say(&format!(
                        "{:>8} {:>12} {:>10.0} ops/s  p50 {:>9.1}  p95 {:>9.1}  p99 {:>9.1}  max {:>9.1} us",
                        "",
                        k.txn.name(),
                        k.per_sec,
                        k.p50_us,
                        k.p95_us,
                        k.p99_us,
                        k.max_us
                    ));
                }
            }
        }
    }

    fn finished(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

/// The final table of a run.
pub fn render(r: &BenchReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nmode {}  profile {}  warehouses {}  seed {}  measured {:.2}s (load {:.1}s, warm-up {:.1}s)",
        r.mode, r.profile, r.warehouses, r.seed, r.seconds, r.load_seconds, r.warmup_seconds
    );
    let _ = writeln!(
        s,
        "{:<12} {:>10} {:>10} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "txn", "count", "ops/s", "aborts", "mean_us", "p50_us", "p95_us", "p99_us", "max_us"
    );
    for k in &r.per_txn {
        let _ = writeln!(
            s,
            "{:<12} {:>10} {:>10.0} {:>8} {:>10.2} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
            k.txn.name(),
            k.count,
            k.count as f64 / r.seconds.max(1e-9),
            k.aborts,
            k.mean_us,
            k.p50_us,
            k.p95_us,
            k.p99_us,
            k.max_us
        );
    }
    let _ = writeln!(
        s,
        "{:<12} {:>10} {:>10.0} {:>8} {:>10} {:>10.1} {:>10.1} {:>10.1}",
        "all", r.committed, r.txn_per_sec, r.aborted, "", r.p50_us, r.p95_us, r.p99_us
    );
    let _ = match (r.txn_per_cpu_sec, r.executor_cpu_seconds) {
        (Some(per_cpu), Some(cpu)) => writeln!(
            s,
            "\nthroughput   {:.0} committed txn/s ({per_cpu:.0} per executor CPU second; the executor ran {:.0}% of the \
             wall time)",
            r.txn_per_sec,
            100.0 * cpu / r.seconds.max(1e-9)
        ),
        _ => writeln!(
            s,
            "\nthroughput   {:.0} committed txn/s (executor CPU not measured: {})",
            r.txn_per_sec,
            r.cpu_not_measured.as_deref().unwrap_or("no figure")
        ),
    };
    let _ = writeln!(s, "tpmC         {:.0} NewOrders per minute (measured phase)", r.tpmc);
    let mb = |b: u64| b as f64 / (1 << 20) as f64;
    let copies = r.warehouse_copies.max(1);
    let replicated = copies != u64::from(r.warehouses);
    let per = match replicated {
        false => "per warehouse".to_string(),
        true => format!("per warehouse per replica: {copies} copies of a warehouse"),
    };
    let _ = writeln!(
        s,
        "memory       {:.1} MiB resident after load ({:.1} MiB {per}), {:.1} MiB at the end ({:.0} bytes per NewOrder{}, grown into {} pages)",
        mb(r.rss_after_load_bytes),
        mb(r.rss_after_load_bytes) / copies as f64,
        mb(r.rss_bytes),
        r.rss_growth_per_neworder_bytes,
        if replicated { " per replica" } else { "" },
        r.growth_pages
    );
    s
}
