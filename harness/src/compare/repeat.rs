//! `glass compare --repeat N`: each mode run N times, the runs of all modes interleaved
//! (round after round, so that a slow stretch of a shared machine falls on every mode alike),
//! and each mode reported by the median of its runs with their least and greatest.
//!
//! Owns [`Spread`] (median, min, max of one figure), [`Repeats`] (the spreads a row carries)
//! and [`combine`], which turns one mode's runs into its row of the table: the figures of the
//! run of median throughput, its throughput, NewOrder rate, tpmC and latencies replaced by
//! their medians over the runs, and the checks passed only if they passed in every run;
//! [`rows`] makes the table's rows so, keeping every run in the record.

use super::CompareRow;
use crate::record::Record;
use serde::{Deserialize, Serialize};

/// The median, least and greatest of one figure over repeated runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// The spread of `values` (the median of an even count is the mean of the middle two);
    /// `None` for no values.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Some(Spread { median, min: v[0], max: v[n - 1] })
    }

    /// Half the range as a percent of the median: the runs lay within ± this of it (at most).
    pub fn half_range_pct(&self) -> f64 {
        if self.median > 0.0 {
            (self.max - self.min) / 2.0 / self.median * 100.0
        } else {
            0.0
        }
    }
}

/// What a row of repeated runs carries besides its medians.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Repeats {
    /// Runs combined.
    pub runs: usize,
    pub txn_per_sec: Spread,
    pub neworder_per_sec: Spread,
    pub tpmc: Spread,
    pub p50_us: Spread,
    pub p99_us: Spread,
    pub node_cpu_s_per_1000: Spread,
    /// Each run's throughput, in the order run.
    pub txn_per_sec_each: Vec<f64>,
}

/// The table's rows from each plan's runs (`each_run`, one list per plan, `rounds` runs in
/// each): the run itself with one round; with several, each plan's runs as one row
/// ([`combine`]), and every run kept in the record as `compare-runs.json`.
pub fn rows(record: &Record, mut each_run: Vec<Vec<CompareRow>>, rounds: usize) -> crate::Result<Vec<CompareRow>> {
    if rounds == 1 {
        return Ok(each_run.iter_mut().filter_map(Vec::pop).collect());
    }
    write_runs(record, &each_run)?;
    Ok(each_run.iter().filter_map(|runs| combine(runs)).collect())
}

/// Writes every run so far into the record's `compare-runs.json` (after each run, so a later
/// run that fails leaves the earlier ones on record).
pub fn write_runs(record: &Record, each_run: &[Vec<CompareRow>]) -> crate::Result<()> {
    let all: Vec<CompareRow> = each_run.iter().flatten().cloned().collect();
    record.write_headed(&record.path("compare-runs.json"), "runs", &super::to_json(&all))
}

/// One mode's runs as one row (see the module's comment); `None` for no runs.
pub fn combine(runs: &[CompareRow]) -> Option<CompareRow> {
    let spread = |f: fn(&CompareRow) -> f64| Spread::of(&runs.iter().map(f).collect::<Vec<_>>());
    let txn_per_sec = spread(|r| r.txn_per_sec)?;
    let repeats = Repeats {
        runs: runs.len(),
        txn_per_sec,
        neworder_per_sec: spread(|r| r.neworder_per_sec)?,
        tpmc: spread(|r| r.tpmc)?,
        p50_us: spread(|r| r.p50_us)?,
        p99_us: spread(|r| r.p99_us)?,
        node_cpu_s_per_1000: spread(|r| r.node_cpu_s_per_1000)?,
        txn_per_sec_each: runs.iter().map(|r| r.txn_per_sec).collect(),
    };
    // The run nearest the median throughput gives the figures not combined.
    let middle = runs.iter().min_by(|a, b| {
        (a.txn_per_sec - txn_per_sec.median).abs().total_cmp(&(b.txn_per_sec - txn_per_sec.median).abs())
    })?;
    let mut row = middle.clone();
    row.txn_per_sec = repeats.txn_per_sec.median;
    row.neworder_per_sec = repeats.neworder_per_sec.median;
    row.tpmc = repeats.tpmc.median;
    row.p50_us = repeats.p50_us.median;
    row.p99_us = repeats.p99_us.median;
    row.node_cpu_s_per_1000 = repeats.node_cpu_s_per_1000.median;
    row.digests_equal = runs.iter().all(|r| r.digests_equal);
    row.consistent = runs.iter().all(|r| r.consistent);
    if runs.iter().any(|r| r.replica_reads_consistent == Some(false)) {
        row.replica_reads_consistent = Some(false);
    }
    row.repeats = Some(repeats);
    Some(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_odd_and_even_counts_and_the_range() {
        assert_eq!(Spread::of(&[3.0, 1.0, 2.0]), Some(Spread { median: 2.0, min: 1.0, max: 3.0 }));
        assert_eq!(Spread::of(&[4.0, 1.0, 2.0, 3.0]), Some(Spread { median: 2.5, min: 1.0, max: 4.0 }));
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[f64::NAN, 5.0]).map(|s| s.median), Some(5.0));
        assert!((Spread { median: 200.0, min: 100.0, max: 300.0 }.half_range_pct() - 50.0).abs() < 1e-9);
    }

    /// The row of three runs: medians of the combined figures, the other figures of the run
    /// of median throughput, and a check that failed in one run fails the row.
    #[test]
    fn runs_combine_into_their_medians_and_a_failed_check_fails_the_row() {
        let run = |tps: f64, p99: f64, consistent: bool| {
            let mut r = super::super::tests::row(wire::config::Mode::ActiveActive, None, 2, tps);
            r.p99_us = p99;
            r.committed = tps as u64 * 10;
            r.consistent = consistent;
            r
        };
        let runs = [run(100.0, 9_000.0, true), run(300.0, 3_000.0, true), run(200.0, 5_000.0, false)];
        let row = combine(&runs).unwrap();
        assert_eq!(row.txn_per_sec, 200.0);
        assert_eq!(row.p99_us, 5_000.0);
        assert_eq!(row.committed, 2_000, "the median run's own count");
        assert!(!row.consistent);
        let r = row.repeats.unwrap();
        assert_eq!((r.runs, r.txn_per_sec.min, r.txn_per_sec.max), (3, 100.0, 300.0));
        assert_eq!(r.txn_per_sec_each, vec![100.0, 300.0, 200.0]);
        assert!(combine(&[]).is_none());
    }
}
