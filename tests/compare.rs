//! End-to-end tests of `glass compare` (the paper's Section 5.3 on real processes): on a tiny
//! cluster (coordinator + 2 nodes, 2 partitions of one warehouse × 2 replicas), every mode's
//! run ends with every replica — or backup, once caught up — at the primary's digest, the
//! TPC-C consistency conditions (clause 3.3.2) holding and reads on every replica agreeing;
//! the full stack writes its WAL and fsyncs it while the logless modes leave no file behind;
//! async shipping's backup lag is measured, not assumed.

mod common;

use std::path::Path;

use common::*;
use serde_json::Value;

fn compare(config: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["compare", "--config", config.to_str().unwrap(), "--duration", "2", "--warmup", "0.5"];
    args.extend_from_slice(&["--quiet", "--inflight", "16"]);
    args.extend_from_slice(extra);
    glass(&args)
}

fn rows(json: &Path) -> Vec<Value> {
    let v: Value = serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap();
    assert!(v["run"]["git_commit"].is_string(), "headed by the run's metadata: {v}");
    v["runs"].as_array().expect("a JSON array, one object per run").clone()
}

fn num(row: &Value, field: &str) -> f64 {
    row[field].as_f64().unwrap_or_else(|| panic!("{field} is not a number in {row}"))
}

/// The CI case: all three modes on a tiny config complete and produce three rows,
/// each checked; the logless modes write no log (zero bytes of files besides process logs),
/// the full stack writes WAL bytes and fsyncs them; the bench's fields are in each object.
#[test]
fn compare_runs_every_mode_and_each_run_passes_its_checks() {
    let dir = scratch("compare-all");
    let config = cluster_toml(&dir, "run/certs");
    let _guard = Teardown(config.clone());
    let (json, csv, svg) = (dir.join("c.json"), dir.join("c.csv"), dir.join("c.svg"));
    let out = compare(
        &config,
        &["--json", json.to_str().unwrap(), "--csv", csv.to_str().unwrap(), "--svg", svg.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("checks: every run consistent, replica digests equal"), "{stdout}");

    let rows = rows(&json);
    let modes: Vec<&str> = rows.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["active-active", "active-passive", "full-stack"]);
    for r in &rows {
        assert_eq!(r["digests_equal"], true, "{r}");
        assert_eq!(r["consistent"], true, "{r}");
        assert_eq!(r["replica_reads_consistent"], true, "{r}");
        assert_eq!(r["replicas"], 2);
        assert!(num(r, "committed") > 0.0 && num(r, "txn_per_sec") > 0.0, "{r}");
        assert!(r["per_txn"].is_array() && r["profile"] == "paper", "bench fields flattened: {r}");
        assert!(num(r, "primary_cpu_s_per_1000") > 0.0 && num(r, "backup_cpu_s_per_1000") > 0.0, "{r}");
    }
    let [aa, ap, fs] = [&rows[0], &rows[1], &rows[2]];
    for logless in [aa, ap] {
        assert_eq!(num(logless, "disk_bytes"), 0.0, "a logless mode wrote files: {logless}");
        assert_eq!(num(logless, "log_bytes_per_txn"), 0.0);
        assert_eq!(num(logless, "fsyncs"), 0.0);
    }
    assert_eq!(num(aa, "net_bytes_per_txn"), 0.0, "active-active replicas exchange nothing");
    assert!(num(aa, "batch_bytes_per_txn") > num(ap, "batch_bytes_per_txn"), "every replica gets the batches");
    assert!(num(ap, "net_bytes_per_txn") > 0.0, "the primary ships redo records");
    assert_eq!(ap["shipping"], "sync");
    assert!(num(fs, "log_bytes_per_txn") > 0.0 && num(fs, "fsyncs") > 0.0, "{fs}");
    assert!(num(fs, "disk_bytes") > 0.0 && num(fs, "net_bytes_per_txn") > 0.0, "{fs}");
    // Measured, then removed (no --keep-logs): only the launcher's files are left.
    let left: Vec<_> = files_under(&dir.join("run/compare/full-stack-r2"))
        .into_iter()
        .filter(|p| !p.extension().is_some_and(|x| x == "log" || x == "raft" || x == "toml" || x == "pid"))
        .collect();
    assert!(left.is_empty(), "the full stack's data outlived the run: {left:?}");

    let csv = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(csv.lines().count(), 4, "{csv}");
    assert!(csv.starts_with("mode,shipping,replicas,"), "{csv}");
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
    assert!(processes_of(&dir).is_empty(), "compare left processes behind");
}

/// Async active-passive answers after the primary commits; the backups' lag is measured
/// (ship-to-acknowledgement delay) and the backups still converge once the run ends; with
/// `--failover` the row gains the failover columns.
#[test]
fn async_shipping_measures_the_backups_lag_and_backups_converge() {
    let dir = scratch("compare-async");
    let config = cluster_toml(&dir, "run/certs");
    let _guard = Teardown(config.clone());
    let json = dir.join("a.json");
    let out = compare(
        &config,
        &["--modes", "active-passive", "--shipping", "async", "--failover", "--json", json.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", text(&out));
    let rows = rows(&json);
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(r["shipping"], "async");
    assert!(num(r, "backup_lag_ms") > 0.0, "lag measured, not assumed zero: {r}");
    assert_eq!(r["digests_equal"], true, "{r}");
    assert_eq!(r["consistent"], true, "{r}");
    // `--failover`: the primary killed, the backup promoted; the loss measured.
    assert!(r["failover_recovery_ms"].as_f64().is_some(), "promoted within the run: {r}");
    assert!(r["failover_lost"].as_u64().is_some() && r["failover_outcome_unknown"].as_u64().is_some(), "{r}");
}

/// Impossible flags are refused before anything starts, naming the problem; nothing is
/// written.
#[test]
fn impossible_flags_are_refused_and_nothing_runs() {
    let dir = scratch("compare-refused");
    let config = cluster_toml(&dir, "run/certs");
    let json = dir.join("r.json");
    for (extra, needle) in [
        (vec!["--replicas", "3"], "a replication factor of 3 needs at least 3 nodes; the cluster has 2"),
        (vec!["--modes", "active-active,eventual"], "unknown mode `eventual`"),
        (vec!["--shipping", "later"], "unknown shipping `later`"),
    ] {
        let mut args = extra.clone();
        args.extend_from_slice(&["--json", json.to_str().unwrap()]);
        let out = compare(&config, &args);
        assert!(!out.status.success(), "{}", text(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains(needle), "{}", text(&out));
        assert!(!json.exists() && !dir.join("run").exists(), "a refused compare wrote something");
    }
    // A per-run file named as the multi-partition curve's own would be overwritten by it.
    let curve = dir.join("compare-multi-partition.json");
    let out = compare(&config, &["--multi-partition", "10", "--json", curve.to_str().unwrap()]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("would be overwritten by the multi-partition curve"));
    assert!(!curve.exists() && !dir.join("run").exists(), "a refused compare wrote something");
    let _ = std::fs::remove_dir_all(&dir);
}
