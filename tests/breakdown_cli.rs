//! End-to-end tests of `glass breakdown` (the paper's Figures 5, 6 and 8, Section 4.3): they
//! run the built binary with tiny settings and check the JSON rows (12 steps × 2 transaction
//! types, positive times, positive instruction counts where callgrind counted), the ratios
//! (full / stripped, full / lean), the full stack beside Shore, the time shares beside
//! Figure 8, the text report, the SVG, the refusal of bad flags before any work, and that the
//! working directory is cleaned up.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn glass(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_glass"))
        .env("GLASS_RESULTS_DIR", std::env::temp_dir().join("glass-test-results"))
        .args(args)
        .output()
        .expect("run glass")
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
    check_ratios_and_shares(&v, &source);
    let svg = std::fs::read_to_string(svg).expect("svg written");
    assert!(svg.starts_with("<svg") && svg.contains("NewOrder (Figure 6)"), "an SVG of both figures");
    assert!(svg.contains("NewOrder time (Figure 8)") && svg.trim_end().ends_with("</svg>"), "and of Figure 8");
    source
}

/// A number, or with `counted` false a null (instructions are not counted then).
fn assert_numbers(v: &serde_json::Value, what: &str, len: Option<usize>, counted: bool) {
    if !counted {
        assert!(v.is_null(), "{what}: not counted, so null: {v}");
        return;
    }
    match len {
        None => assert!(v.as_f64().is_some_and(|x| x.is_finite() && x > 0.0), "{what}: {v}"),
        Some(n) => {
            let a = v.as_array().unwrap_or_else(|| panic!("{what}: an array: {v}"));
            assert_eq!(a.len(), n, "{what}: {v}");
            assert!(a.iter().all(|x| x.as_f64().is_some_and(|x| x.is_finite() && x > 0.0)), "{what}: {v}");
        }
    }
}

/// The two ratios, the full stack beside Shore, the lean kernel with prefetching and the time
/// shares beside Figure 8.
fn check_ratios_and_shares(v: &serde_json::Value, source: &str) {
    let s = &v["summary"];
    let counted = source != "none";
    for f in [
        "full_over_stripped_time",
        "no_flush_over_stripped_time",
        "full_over_lean_time",
        "no_flush_over_lean_time",
        "full_over_lean_prefetch_time",
        "no_flush_over_lean_prefetch_time",
        "paper_full_over_stripped_instructions",
    ] {
        assert_numbers(&s[f], f, Some(3), true);
    }
    for f in ["full_over_stripped_instructions", "full_over_lean_instructions"] {
        assert_numbers(&s[f], f, Some(3), counted);
    }
    for f in ["full_stack_instructions", "shore_over_full_stack_instructions"] {
        assert_numbers(&s[f], f, Some(2), counted);
    }
    assert_numbers(&s["shore_instructions"], "shore_instructions", Some(2), true);
    for f in [
        "paper_full_over_stripped_time",
        "paper_no_flush_over_stripped_time",
        "paper_full_over_lean_time",
        "paper_no_flush_over_lean_time",
        "lean_prefetch_txn_per_s",
        "stripped_txn_per_s",
    ] {
        assert_numbers(&s[f], f, None, true);
    }
    assert_eq!(s["lean_prefetch_in_ratios"], false, "the ratios use the lean kernel without prefetching");
    assert_numbers(&v["lean_prefetch_ns_per_txn"], "lean_prefetch_ns_per_txn", Some(2), true);
    assert!(v["prefetch_note"].as_str().is_some_and(|n| n.contains("without prefetching")));
    let f8 = v["figure8_time_shares"].as_array().expect("figure8_time_shares");
    assert_eq!(f8.len(), 12, "6 Figure 8 categories per type");
    for t in f8 {
        assert!(t["time_share_pct"].as_f64().is_some_and(f64::is_finite), "{t}");
        match t["txn"].as_str().unwrap() {
            "neworder" => assert!(t["paper_pct"].as_f64().is_some(), "{t}"),
            _ => assert!(t["paper_pct"].is_null(), "Payment has no Figure 8: {t}"),
        }
    }
    for txn in ["payment", "neworder"] {
        let sum: f64 = f8.iter().filter(|t| t["txn"] == txn).map(|t| t["time_share_pct"].as_f64().unwrap()).sum();
        assert!((sum - 100.0).abs() < 1e-6, "{txn}: the time shares sum to 100%: {sum}");
    }
}

/// The text report names both ratios, the Figure 8 table, Shore and the prefetch treatment.
fn check_text(stdout: &str) {
    for needle in [
        "full stack / stripped stack (step 0 / step 10",
        "full stack / lean kernel (step 0 / step 11 without prefetching",
        "paper cycles (Fig. 8)",
        "useful work",
        "against Shore's",
        "lean kernel with prefetching",
        "prefetching: only the lean kernel prefetches",
    ] {
        assert!(stdout.contains(needle), "the report says {needle:?}: {stdout}");
    }
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
    check_text(&stdout);
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
    check_text(&String::from_utf8_lossy(&o.stdout));
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
