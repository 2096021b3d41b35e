//! End-to-end tests of `glass bench --embedded`: they run the built binary as a user would and
//! check its outputs and its refusals of bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn glass(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_glass"))
        .env("GLASS_RESULTS_DIR", std::env::temp_dir().join("glass-test-results"))
        .args(args)
        .output()
        .expect("run glass")
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("glass-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn embedded_bench_writes_json_dump_and_passes_the_check() {
    let dir = scratch("run");
    let json = dir.join("r.json");
    let dump = dir.join("dump");
    let o = glass(&[
        "bench",
        "--embedded",
        "--profile",
        "standard",
        "--warehouses",
        "1",
        "--txns",
        "3000",
        "--warmup",
        "0",
        "--check",
        "--json",
        json.to_str().unwrap(),
        "--dump",
        dump.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "glass failed: {}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.starts_with("seed: 1"), "the seed is printed first: {stdout}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    for field in [
        "mode",
        "profile",
        "warehouses",
        "seed",
        "seconds",
        "committed",
        "aborted",
        "txn_per_sec",
        "per_txn",
        "rss_after_load_bytes",
        "rss_bytes",
        "warehouse_copies",
        "growth_pages",
    ] {
        assert!(v.get(field).is_some(), "json lacks {field}: {v}");
    }
    assert_eq!(v["growth_pages"], "small", "the default pages of the tables' growth");
    assert_eq!(v["committed"].as_u64().unwrap() + v["aborted"].as_u64().unwrap(), 3000);
    assert_eq!(v["profile"], "standard");
    let per_txn = v["per_txn"].as_array().unwrap();
    assert_eq!(per_txn.len(), 5, "all five transaction types ran: {per_txn:?}");
    for k in per_txn {
        for f in ["txn", "count", "aborts", "p50_us", "p99_us"] {
            assert!(k.get(f).is_some(), "per_txn entry lacks {f}");
        }
    }
    for table in ["warehouse", "district", "customer", "history", "orders", "new_order", "order_line", "item", "stock"]
    {
        let csv = std::fs::read_to_string(dump.join(format!("{table}.csv"))).unwrap();
        assert!(csv.lines().count() > 1, "{table}.csv has rows");
    }
    let header = std::fs::read_to_string(dump.join("order_line.csv")).unwrap();
    assert!(header.lines().next().unwrap().ends_with("ol_dist_info") || header.contains("ol_delivery_d"));
    let _ = std::fs::remove_dir_all(&dir);
}

fn dump_bytes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    files.sort();
    files
}

/// Determinism contract (docs/design.md): the same seed gives the same dump byte for byte,
/// whatever pages the tables grow into.
#[test]
fn same_seed_gives_the_same_dump_byte_for_byte() {
    let dir = scratch("determinism");
    let run = |name: &str, pages: &str| {
        let d = dir.join(name);
        let o = glass(&[
            "bench",
            "--embedded",
            "--profile",
            "standard",
            "--warehouses",
            "1",
            "--txns",
            "2000",
            "--warmup",
            "0",
            "--seed",
            "7",
            "--quiet",
            "--growth-pages",
            pages,
            "--dump",
            d.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        dump_bytes(&d)
    };
    let a = run("a", "small");
    let b = run("b", "huge");
    assert_eq!(a.len(), 9);
    assert!(a == b, "dumps differ between two runs with the same seed");
    let _ = std::fs::remove_dir_all(&dir);
}

fn refused(args: &[&str], needle: &str) {
    let o = glass(args);
    assert!(!o.status.success(), "{args:?} should fail");
    let e = stderr(&o);
    assert!(e.contains(needle), "{args:?}: error should mention {needle:?}, got: {e}");
    assert_eq!(e.trim().lines().count(), 1, "one-line error, got: {e}");
}

#[test]
fn bad_input_is_refused_with_a_clear_error_and_writes_nothing() {
    let dir = scratch("bad");
    let json = dir.join("out.json");
    let j = json.to_str().unwrap();
    refused(&["bench", "--embedded", "--warehouses", "0", "--json", j], "warehouses");
    // A value enum: the error names the flag and lists the values it takes.
    let o = glass(&["bench", "--embedded", "--profile", "tpch", "--json", j]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("invalid value 'tpch' for '--profile") && e.contains("[possible values: paper, standard]"),
        "{e}"
    );
    let o = glass(&["bench", "--embedded", "--engine", "shore", "--json", j]);
    assert!(stderr(&o).contains("'--engine") && stderr(&o).contains("[possible values: lean, conventional]"));
    refused(&["bench", "--embedded", "--mix", "neworder=50,bogus=3", "--json", j], "bogus");
    refused(&["bench", "--embedded", "--mix", "neworder=0", "--json", j], "mix");
    refused(&["bench", "--embedded", "--json", "/nonexistent-glass-dir/r.json"], "nonexistent-glass-dir");
    refused(&["bench", "--embedded", "--txns", "0", "--json", j], "txns");
    let o = glass(&["bench", "--embedded", "--growth-pages", "giant", "--json", j]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("'--growth-pages") && stderr(&o).contains("small or huge"), "{}", stderr(&o));
    assert!(!json.exists(), "nothing is written on bad input");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "no stray files");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Section 5.3's execute-or-replay experiment: the backup rolled forward from the primary's
/// redo records ends with the primary's digest, and both costs are reported.
#[test]
fn replay_experiment_rolls_a_backup_forward_to_the_primarys_digest() {
    let dir = scratch("replay");
    let json = dir.join("replay.json");
    let o = glass(&[
        "bench",
        "--embedded",
        "--replay",
        "--profile",
        "standard",
        "--warehouses",
        "1",
        "--txns",
        "3000",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "glass failed: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["digests_equal"], true);
    assert_eq!(v["txns"], 3000);
    for f in ["execute_cpu_ns_per_txn", "apply_cpu_ns_per_txn", "redo_bytes_per_txn"] {
        assert!(v[f].as_f64().unwrap() > 0.0, "{f} measured: {v}");
    }
    refused(&["bench", "--embedded", "--replay", "--check"], "--replay");
    let _ = std::fs::remove_dir_all(&dir);
}
