//! End-to-end tests of `glass breakdown` (the paper's Figures 5 and 6, Section 4.3): they run
//! the built binary with tiny settings and check the JSON rows (12 steps × 2 transaction
//! types, positive times, positive instruction counts where callgrind counted), the SVG, the
//! refusal of bad flags before any work, and that the working directory is cleaned up.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn glass(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_glass")).args(args).output().expect("run glass")
}

/// A fresh scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("glass-breakdown-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    fn s(&self, name: &str) -> String {
        self.path(name).to_str().unwrap().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn valgrind_present() -> bool {
    cfg!(target_arch = "x86_64")
        && Command::new("valgrind").arg("--version").output().map(|o| o.status.success()).unwrap_or(false)
}

/// Tiny settings: one warehouse, a handful of transactions.
fn tiny<'a>(wal: &'a str, json: &'a str, svg: &'a str) -> Vec<&'a str> {
    vec![
        "breakdown",
        "--warehouses",
        "1",
        "--txns",
        "10",
        "--reps",
        "1",
        "--warmup-txns",
        "10",
        "--count-warehouses",
        "1",
        "--count-txns",
        "5",
        "--count-warmup-txns",
        "5",
        "--wal-dir",
        wal,
        "--json",
        json,
        "--svg",
        svg,
    ]
}

/// Checks the JSON report and returns its source.
fn check_report(json: &Path, svg: &Path) -> String {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(json).expect("json written")).unwrap();
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 24, "12 steps x 2 transaction types");
    let source = v["source"].as_str().unwrap().to_string();
    for txn in ["payment", "neworder"] {
        let steps: Vec<u64> = rows.iter().filter(|r| r["txn"] == txn).map(|r| r["step"].as_u64().unwrap()).collect();
        assert_eq!(steps, (0..12).collect::<Vec<u64>>(), "{txn}: steps 0 to 11 in order");
    }
    for r in rows {
        assert!(r["ns_per_txn"].as_f64().unwrap() > 0.0, "time is measured: {r}");
        assert!(r["ns_per_txn_no_flush"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["source"].as_str().unwrap(), source);
        match source.as_str() {
            "none" => assert!(r["instructions"].is_null(), "no count is printed as a number: {r}"),
            _ => assert!(r["instructions"].as_f64().unwrap() > 0.0, "counted: {r}"),
        }
    }
    let s = &v["summary"];
    for f in ["full_stack_fsync_txn_per_s", "full_stack_no_flush_txn_per_s", "lean_txn_per_s"] {
        assert!(s[f].as_f64().unwrap() > 0.0, "{f}");
    }
    assert_eq!(v["components"].as_array().unwrap().len(), 14, "5 components + remaining + lean, per type");
    let svg = std::fs::read_to_string(svg).expect("svg written");
    assert!(svg.starts_with("<svg") && svg.contains("NewOrder (Figure 6)"), "an SVG of both figures");
    source
}

#[test]
fn time_only_breakdown_writes_24_rows_and_the_svg() {
    let dir = Scratch::new("time");
    let (wal, json, svg) = (dir.s(""), dir.s("b.json"), dir.s("b.svg"));
    let mut args = tiny(&wal, &json, &svg);
    args.push("--no-instructions");
    let o = glass(&args);
    assert!(o.status.success(), "glass failed: {}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.starts_with("seed: 1"), "{stdout}");
    assert!(stdout.contains("NOT COUNTED"), "says that instructions are not counted: {stdout}");
    assert!(stdout.contains("full stack, log flushed to disk (fsync)") && stdout.contains("full stack, no log flush"));
    assert_eq!(check_report(&dir.path("b.json"), &dir.path("b.svg")), "none");
    let left: Vec<_> = std::fs::read_dir(&dir.0).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 2, "only the outputs are left behind, the working directory is removed: {left:?}");
}

#[test]
fn callgrind_counts_instructions_when_valgrind_is_present() {
    if !valgrind_present() {
        eprintln!("valgrind is not installed: the callgrind run is skipped");
        return;
    }
    let dir = Scratch::new("callgrind");
    let (wal, json, svg) = (dir.s(""), dir.s("b.json"), dir.s("b.svg"));
    let o = glass(&tiny(&wal, &json, &svg));
    assert!(o.status.success(), "glass failed: {}", stderr(&o));
    let source = check_report(&dir.path("b.json"), &dir.path("b.svg"));
    // A machine with hardware counters counts with them instead.
    assert!(source == "callgrind" || source == "perf", "{source}");
}

#[test]
fn bad_flags_are_refused_in_one_line_before_any_work() {
    let dir = Scratch::new("bad");
    let missing = dir.path("no/such/dir/b.json");
    for (args, needle) in [
        (vec!["breakdown", "--warehouses", "0"], "--warehouses"),
        (vec!["breakdown", "--txns", "0"], "--txns"),
        (vec!["breakdown", "--count-txns", "0"], "--count-txns"),
        (vec!["breakdown", "--json", missing.to_str().unwrap()], "--json"),
        (vec!["breakdown", "--svg", dir.0.to_str().unwrap()], "--svg"),
        (vec!["breakdown", "--wal-dir", missing.to_str().unwrap()], "--wal-dir"),
        (vec!["breakdown", "--worker-step", "3", "--wal-dir", dir.0.to_str().unwrap()], "valgrind"),
    ] {
        let o = glass(&args);
        assert!(!o.status.success(), "{args:?} must fail");
        let e = stderr(&o);
        assert!(e.contains(needle), "{args:?}: {e}");
        assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
        assert!(o.stdout.is_empty(), "nothing ran: {}", String::from_utf8_lossy(&o.stdout));
    }
}
