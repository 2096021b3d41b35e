//! Results people can keep (docs/design.md §12), end to end on real processes: Ctrl-C
//! (SIGINT) to `glass compare` and to `glass bench --config` mid-run leaves no glass process
//! and no bound port; processes a SIGKILLed `glass` left are refused by the next `compare`
//! and stopped by `glass cluster down`; a run record holds every file and field it promises;
//! `--rate` runs open loop (its achieved rate reported beside the target, not asserted: the
//! machine is shared); `compare --sweep` names where each mode breaks; `report.html` parses,
//! with every chart inline; the same seed with `--txns` gives byte-identical dumps; a WAL on
//! tmpfs is refused unless `--allow-tmpfs`.

mod common;

use std::io::Read;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// Starts `glass` with `args`, stdout and stderr into files under `dir`.
fn spawn(dir: &Path, name: &str, args: &[&str]) -> (Child, PathBuf, PathBuf) {
    let (out, err) = (dir.join(format!("{name}.out")), dir.join(format!("{name}.err")));
    let child = Command::new(env!("CARGO_BIN_EXE_glass"))
        .env("GLASS_RESULTS_DIR", dir.join("results"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("run glass");
    (child, out, err)
}

fn read(path: &Path) -> String {
    let mut s = String::new();
    let _ = std::fs::File::open(path).map(|mut f| f.read_to_string(&mut s));
    s
}

/// Waits until `file` contains `needle` (or `child` exited, or a minute passed).
fn wait_for(file: &Path, needle: &str, child: &mut Child) {
    let t0 = Instant::now();
    while !read(file).contains(needle) {
        assert!(child.try_wait().unwrap().is_none(), "glass ended before printing {needle:?}:\n{}", read(file));
        assert!(t0.elapsed() < Duration::from_secs(120), "no {needle:?} within 120 s:\n{}", read(file));
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for `child` to exit (at most a minute); its exit code.
fn wait_exit(child: &mut Child) -> Option<i32> {
    let t0 = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code();
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "glass did not exit within 60 s of the signal");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The UDP ports of `config`'s processes.
fn ports_of(config: &Path) -> Vec<u16> {
    let text = std::fs::read_to_string(config).unwrap();
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("address = \"127.0.0.1:"))
        .map(|p| p.trim_end_matches('"').parse().unwrap())
        .collect()
}

fn sigint(child: &Child) {
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
}

/// After an interrupt: exit 130, the stop reported, no process of the cluster (any derived
/// one included) left, every port bindable, the record marked.
fn assert_stopped_cleanly(dir: &Path, config: &Path, code: Option<i32>, err: &Path, record: &Path) {
    let stderr = read(err);
    assert_eq!(code, Some(130), "128 + SIGINT; stderr:\n{stderr}");
    assert!(stderr.contains("interrupted by SIGINT; stopped "), "{stderr}");
    assert!(stderr.contains("node 1 pid"), "the nodes are named: {stderr}");
    // The nodes answer SIGTERM: glass's own handling of the signal is not inherited by them.
    assert!(stderr.contains("(SIGTERM)"), "stopped cleanly, not only killed: {stderr}");
    assert!(processes_of(dir).is_empty(), "processes left: {:?}\n{stderr}", processes_of(dir));
    for port in ports_of(config) {
        assert!(UdpSocket::bind(("127.0.0.1", port)).is_ok(), "port {port} still bound after the interrupt");
    }
    let run: Value = serde_json::from_str(&read(&record.join("run.json"))).unwrap();
    assert_eq!(run["status"], "interrupted", "{run}");
    assert!(run["ended_utc"].is_string(), "{run}");
}

/// Starts `glass` with `args` (a cluster command on a fresh scratch cluster, its record in
/// `<dir>/record`), waits until its cluster serves and two seconds more (mid-run), sends
/// SIGINT, and checks that everything stopped cleanly.
fn interrupt_mid_run(name: &str, args: &[&str]) {
    let _machine = one_cluster_at_a_time();
    let dir = scratch(name);
    let config = cluster_toml(&dir, "run/certs");
    let _guard = Teardown(config.clone());
    let record = dir.join("record");
    let mut all = args.to_vec();
    all.extend_from_slice(&["--config", config.to_str().unwrap(), "--duration", "30", "--warmup", "0.5"]);
    all.extend_from_slice(&["--inflight", "16", "--out", record.to_str().unwrap()]);
    let (mut child, out, err) = spawn(&dir, name, &all);
    wait_for(&out, "cluster up in", &mut child);
    std::thread::sleep(Duration::from_secs(2)); // mid-run: measuring
    assert!(!processes_of(&dir).is_empty(), "the cluster runs before the interrupt");
    sigint(&child);
    let code = wait_exit(&mut child);
    assert_stopped_cleanly(&dir, &config, code, &err, &record);
}

/// The issue's case: SIGINT to `glass compare` while its cluster serves the workload.
#[test]
fn sigint_to_compare_mid_run_leaves_no_process_and_no_bound_port() {
    interrupt_mid_run("results-sigint-compare", &["compare", "--modes", "active-active,full-stack"]);
}

/// The issue's case: SIGINT to `glass bench --config` that started its own cluster.
#[test]
fn sigint_to_a_cluster_bench_mid_run_leaves_no_process_and_no_bound_port() {
    interrupt_mid_run("results-sigint-bench", &["bench"]);
}

/// A `glass` killed with SIGKILL cannot clean up: its cluster's processes keep running. The
/// next `compare` refuses (rather than deleting their pid files and failing on the ports),
/// naming them and what to run; `glass cluster down` finds and stops them.
#[test]
fn strays_of_a_killed_glass_are_refused_by_compare_and_stopped_by_cluster_down() {
    let _machine = one_cluster_at_a_time();
    let dir = scratch("results-strays");
    let config = cluster_toml(&dir, "run/certs");
    let _guard = Teardown(config.clone());
    let cfg = config.to_str().unwrap();
    let args = ["compare", "--config", cfg, "--duration", "30", "--warmup", "0.5", "--inflight", "16"];
    let (mut child, out, _) = spawn(&dir, "compare", &args);
    wait_for(&out, "cluster up in", &mut child);
    child.kill().unwrap(); // SIGKILL: no handler runs
    child.wait().unwrap();
    let strays = processes_of(&dir);
    assert!(!strays.is_empty(), "a SIGKILLed glass leaves its cluster running");

    let o = glass(&["compare", "--config", cfg, "--duration", "1", "--modes", "active-active"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("processes left by an earlier run still run here"), "{stderr}");
    assert!(stderr.contains("glass cluster down --config"), "{stderr}");
    assert_eq!(processes_of(&dir).len(), strays.len(), "the refused compare touched nothing");

    let o = glass(&["cluster", "down", "--config", cfg]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("left by an earlier run"), "{}", text(&o));
    assert!(processes_of(&dir).is_empty(), "cluster down left {:?}", processes_of(&dir));
    for port in ports_of(&config) {
        assert!(UdpSocket::bind(("127.0.0.1", port)).is_ok(), "port {port} still bound");
    }
}

/// Every field run.json promises, non-empty where the host can tell.
fn assert_run_fields(run: &Value, command: &str) {
    assert_eq!(run["command"], command, "{run}");
    for field in
        ["glass_version", "git_commit", "host", "cpu_model", "kernel", "run_dir_fs", "started_utc", "ended_utc"]
    {
        let v = run[field].as_str().unwrap_or_else(|| panic!("{field} missing: {run}"));
        assert!(!v.is_empty(), "{field} empty: {run}");
    }
    assert!(run["cores"].as_u64().unwrap() >= 1 && run["memory_bytes"].as_u64().unwrap() > 0, "{run}");
    assert!(run["command_line"].as_array().unwrap().iter().any(|a| a == command), "{run}");
    assert!(run["started_utc"].as_str().unwrap().ends_with('Z'), "UTC: {run}");
    assert_eq!(run["status"], "passed", "{run}");
}

/// An HTML page parsed as XML (its `<!DOCTYPE html>` allowed).
fn parse_html(html: &str) -> Result<roxmltree::Document<'_>, roxmltree::Error> {
    let options = roxmltree::ParsingOptions { allow_dtd: true, ..Default::default() };
    roxmltree::Document::parse_with_options(html, options)
}

/// report.html parses (as XML, which is stricter than HTML), shows the run and its checks,
/// and inlines one `<svg>` per chart file of the record; each chart parses on its own.
fn assert_report_parses(record: &Path) -> usize {
    let html = std::fs::read_to_string(record.join("report.html")).unwrap();
    let doc = parse_html(&html).unwrap_or_else(|e| panic!("report.html is not well-formed: {e}"));
    assert_eq!(doc.root_element().tag_name().name(), "html");
    let inline = doc.descendants().filter(|n| n.tag_name().name() == "svg").count();
    let files: Vec<PathBuf> =
        files_under(record).into_iter().filter(|p| p.extension().is_some_and(|x| x == "svg")).collect();
    assert!(!files.is_empty(), "the record has charts");
    assert_eq!(inline, files.len(), "one inline chart per SVG file");
    for f in &files {
        let svg = std::fs::read_to_string(f).unwrap();
        roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{} does not parse: {e}", f.display()));
        assert!(html.contains(&*f.file_name().unwrap().to_string_lossy()), "chart {} named", f.display());
    }
    assert!(!html.contains("http://") || html.matches("http://www.w3.org/").count() == html.matches("http://").count());
    assert!(!html.contains("<script") && !html.contains("https://"), "self-contained");
    assert!(html.contains("passed"), "the checks are shown");
    inline
}

/// What the page showed in a headless Chromium: each top-level chart's size in CSS pixels,
/// and every error it raised (a script error, a resource that did not load, `console.error`),
/// as the probe's own listeners saw them (Chromium logs a page's console at INFO, so its log
/// is no better a witness).
#[derive(Debug, serde::Deserialize)]
struct Rendered {
    sizes: Vec<(u32, u32)>,
    errors: Vec<String>,
}

/// Opens `page` in Debian's Chromium, headless, with a probe added at the top of its `<head>`
/// that records errors as they happen and, once the page loaded, the charts' sizes; `None`
/// (after saying why) where Chromium is missing and `scripts/setup-test-tools` cannot install
/// it.
fn render_in_a_browser(page: &str, dir: &Path) -> Option<Rendered> {
    let installed = Command::new("chromium").arg("--version").output().is_ok_and(|o| o.status.success());
    if !installed {
        let setup = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/setup-test-tools");
        let o = Command::new(setup).arg("chromium").output().unwrap();
        if o.status.code() == Some(3) {
            eprintln!("skipped the browser check: {}", String::from_utf8_lossy(&o.stderr).trim());
            return None;
        }
        assert!(o.status.success(), "scripts/setup-test-tools chromium: {}", text(&o));
    }
    const PROBE: &str = r#"<script>
window.glassErrors = [];
window.addEventListener('error', function (e) {
  window.glassErrors.push(String(e.message || (e.target && e.target.outerHTML) || e.type));
}, true);
var glassConsoleError = console.error;
console.error = function () {
  window.glassErrors.push(Array.prototype.join.call(arguments, ' '));
  glassConsoleError.apply(console, arguments);
};
window.addEventListener('load', function () {
  var charts = Array.prototype.filter.call(document.querySelectorAll('svg'), function (s) {
    return !s.parentElement.closest('svg');
  });
  var sizes = charts.map(function (s) {
    var r = s.getBoundingClientRect();
    return [Math.round(r.width), Math.round(r.height)];
  });
  var out = document.createElement('pre');
  out.id = 'glass-probe';
  out.textContent = JSON.stringify({ sizes: sizes, errors: window.glassErrors });
  document.body.appendChild(out);
});
</script>"#;
    let at = page.find("<head>").map_or(0, |i| i + "<head>".len());
    let probed = dir.join("browser-probe.html");
    std::fs::write(&probed, format!("{}{PROBE}{}", &page[..at], &page[at..])).unwrap();
    let profile = dir.join("browser-profile");
    let o = Command::new("timeout")
        .arg("120")
        .arg("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--virtual-time-budget=3000", "--dump-dom"])
        .arg(format!("file://{}", probed.display()))
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&profile);
    let dom = String::from_utf8_lossy(&o.stdout);
    let (_, rest) =
        dom.split_once("<pre id=\"glass-probe\">").unwrap_or_else(|| panic!("the page did not load: {}", text(&o)));
    // The text of an element, as serialised: `&amp;` last, so that `&amp;lt;` stays `&lt;`.
    let json = rest.split("</pre>").next().unwrap().replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&");
    Some(serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}")))
}

/// Issue 40: the record's `report.html` in a real browser: `charts` charts, each with a size,
/// and no error on the console. The probe itself is checked first on a page that does fail.
fn assert_renders_in_a_browser(record: &Path, charts: usize) {
    let scratch = record.join("..").join(format!("browser-{}", record.file_name().unwrap().to_string_lossy()));
    std::fs::create_dir_all(&scratch).unwrap();
    let broken = "<html><head></head><body><img src=\"missing.png\"/><script>nosuchfunction();</script></body></html>";
    let Some(seen) = render_in_a_browser(broken, &scratch) else { return };
    assert_eq!(seen.errors.len(), 2, "the probe sees a missing image and a script error: {seen:?}");
    let page = std::fs::read_to_string(record.join("report.html")).unwrap();
    let seen = render_in_a_browser(&page, &scratch).unwrap();
    println!("{}: charts {:?} in a browser, errors {:?}", record.display(), seen.sizes, seen.errors);
    assert!(seen.errors.is_empty(), "report.html raised errors in the browser: {:?}", seen.errors);
    assert_eq!(seen.sizes.len(), charts, "{seen:?}");
    assert!(seen.sizes.iter().all(|&(w, h)| w >= 200 && h >= 100), "every chart has a size: {seen:?}");
    let _ = std::fs::remove_dir_all(&scratch);
}

/// A compare's record holds every file and field; `--rate` drives it open loop (the achieved
/// rate is reported beside the target); `compare --sweep` on the same config draws its curve
/// and names where the mode breaks; `glass report` rebuilds a page and sets two records side
/// by side with their ratios.
#[test]
fn compare_keeps_a_complete_record_with_a_report_and_the_sweep_draws_its_curve() {
    let _machine = one_cluster_at_a_time();
    let dir = scratch("results-record");
    let config = cluster_toml(&dir, "run/certs");
    let _guard = Teardown(config.clone());
    let cfg = config.to_str().unwrap();
    let record = dir.join("rate");
    let target = 300.0;
    let o = glass(&[
        "compare",
        "--config",
        cfg,
        "--modes",
        "active-active",
        "--duration",
        "3",
        "--warmup",
        "0.5",
        "--inflight",
        "16",
        "--rate",
        "300",
        "--repeat",
        "2",
        "--quiet",
        "--out",
        record.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    for f in [
        "run.json",
        "command.txt",
        "cluster.toml",
        "cluster-active-active-r2.toml",
        "compare.json",
        "compare-runs.json",
        "compare.csv",
        "compare.svg",
        "summary.txt",
        "checks.json",
        "report.html",
    ] {
        assert!(record.join(f).is_file(), "{f} missing from the record: {:?}", files_under(&record));
    }
    let run: Value = serde_json::from_str(&read(&record.join("run.json"))).unwrap();
    assert_run_fields(&run, "compare");
    let command = read(&record.join("command.txt"));
    assert!(command.contains("compare --config") && command.contains("--rate 300"), "{command}");
    let json: Value = serde_json::from_str(&read(&record.join("compare.json"))).unwrap();
    assert!(read(&record.join("compare.json")).trim_start().starts_with("{\n  \"run\""), "run heads the JSON");
    assert_eq!(json["run"]["started_utc"], run["started_utc"], "the same fields head the result");
    let row = &json["runs"][0];
    assert_eq!(row["rate"].as_f64(), Some(target), "open loop at the target: {row}");
    let achieved = row["txn_per_sec"].as_f64().unwrap();
    println!("--rate {target}: achieved {achieved:.1} txn/s ({:.1}% of the target)", 100.0 * achieved / target);
    assert!(achieved > 0.0 && row["tpmc"].as_f64().unwrap() > 0.0, "{row}");
    let summary = read(&record.join("summary.txt"));
    assert!(summary.contains("tpmC"), "{summary}");
    // Issue 40, `--repeat 2`: the row is the median of two runs, with their spread; both runs
    // are in the record.
    assert_eq!(row["repeats"]["runs"], 2, "{row}");
    let each = row["repeats"]["txn_per_sec_each"].as_array().unwrap();
    assert_eq!(each.len(), 2, "{row}");
    let (lo, hi) = (
        row["repeats"]["txn_per_sec"]["min"].as_f64().unwrap(),
        row["repeats"]["txn_per_sec"]["max"].as_f64().unwrap(),
    );
    assert!(lo <= achieved && achieved <= hi, "the median lies within the runs: {row}");
    assert!(summary.contains("repeated: runs") && summary.contains("repeated: throughput min–max"), "{summary}");
    let runs: Value = serde_json::from_str(&read(&record.join("compare-runs.json"))).unwrap();
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(2), "every run kept");
    assert_eq!(read(&record.join("compare.csv")).lines().next().unwrap().matches("repeats_").count(), 5);
    assert_eq!(assert_report_parses(&record), 1);
    assert_renders_in_a_browser(&record, 1);

    // The sweep: two offered loads, one cluster start.
    let sweep = dir.join("sweep");
    let o = glass(&[
        "compare",
        "--config",
        cfg,
        "--modes",
        "active-active",
        "--sweep",
        "150,300",
        "--duration",
        "2",
        "--warmup",
        "0.5",
        "--inflight",
        "16",
        "--out",
        sweep.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("where each mode breaks"), "{stdout}");
    let points: Value = serde_json::from_str(&read(&sweep.join("sweep.json"))).unwrap();
    let points = points["points"].as_array().unwrap();
    let offered: Vec<f64> = points.iter().map(|p| p["offered_per_sec"].as_f64().unwrap()).collect();
    assert_eq!(offered, [150.0, 300.0]);
    for p in points {
        println!(
            "sweep: offered {} achieved {:.1} txn/s, p99 {:.2} ms",
            p["offered_per_sec"],
            p["txn_per_sec"].as_f64().unwrap(),
            p["p99_us"].as_f64().unwrap() / 1e3
        );
        assert_eq!(p["checks_passed"], true, "{p}");
    }
    assert_eq!(read(&sweep.join("sweep.csv")).lines().count(), 3);
    assert_eq!(assert_report_parses(&sweep), 1, "sweep.svg inline");
    assert_renders_in_a_browser(&sweep, 1);

    // `glass report DIR` rebuilds the page; `glass report A B` sets them side by side.
    std::fs::remove_file(record.join("report.html")).unwrap();
    let o = glass(&["report", record.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert_report_parses(&record);
    let o = glass(&[
        "report",
        record.to_str().unwrap(),
        record.to_str().unwrap(),
        "--out",
        dir.join("ab.html").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let page = read(&dir.join("ab.html"));
    parse_html(&page).expect("the side-by-side page is well-formed");
    assert!(
        page.contains("active-active ×2") && page.contains("throughput (txn/s)") && page.contains("1.000"),
        "{page}"
    );
    let o = glass(&["report", dir.join("nothing").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not a run record"), "{}", text(&o));
}

/// The README's promise, at the CLI: the same seed with `--txns` gives the same final
/// database, byte for byte (the warm-up is counted in transactions, not seconds).
#[test]
fn the_same_seed_with_txns_gives_byte_identical_dumps() {
    let dir = scratch("results-determinism");
    let mut dumps = Vec::new();
    for run in ["a", "b"] {
        let dump = dir.join(format!("dump-{run}"));
        let o = glass(&[
            "bench",
            "--embedded",
            "--warehouses",
            "1",
            "--txns",
            "2000",
            "--warmup-txns",
            "500",
            "--seed",
            "7",
            "--quiet",
            "--dump",
            dump.to_str().unwrap(),
            "--out",
            dir.join(format!("record-{run}")).to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", text(&o));
        dumps.push(dump);
    }
    let (a, b) = (files_under(&dumps[0]), files_under(&dumps[1]));
    assert_eq!(a.len(), 9, "one CSV per table");
    for (fa, fb) in a.iter().zip(&b) {
        assert_eq!(fa.file_name(), fb.file_name());
        assert!(std::fs::read(fa).unwrap() == std::fs::read(fb).unwrap(), "{} differs between runs", fa.display());
    }
    let run: Value = serde_json::from_str(&read(&dir.join("record-a/run.json"))).unwrap();
    assert_run_fields(&run, "bench");
    // A seconds warm-up would make the stream depend on the machine's speed: refused.
    let o = glass(&["bench", "--embedded", "--txns", "10", "--warmup", "1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--warmup-txns"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// fsync on tmpfs costs nothing, so a full-stack figure measured there means nothing: the
/// WAL directory is refused, named, unless --allow-tmpfs (then a loud warning).
#[test]
fn a_wal_on_tmpfs_is_refused_unless_allowed() {
    let shm = Path::new("/dev/shm");
    let fs = std::process::Command::new("stat").args(["-f", "-c", "%T", "/dev/shm"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&fs.stdout).trim(), "tmpfs", "this test needs /dev/shm on tmpfs");
    let wal = shm.join(format!("glass-wal-test-{}", std::process::id()));
    let dir = scratch("results-tmpfs");
    let args = |allow: bool| {
        let mut v = vec!["bench", "--embedded", "--engine", "conventional", "--warehouses", "1", "--txns", "50"];
        v.extend_from_slice(&["--warmup", "0", "--quiet", "--wal-dir", wal.to_str().unwrap()]);
        if allow {
            v.push("--allow-tmpfs");
        }
        v.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let refused = Command::new(env!("CARGO_BIN_EXE_glass"))
        .env("GLASS_RESULTS_DIR", dir.join("results"))
        .args(args(false))
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    let e = String::from_utf8_lossy(&refused.stderr);
    assert!(e.contains("is on tmpfs") && e.contains("--allow-tmpfs"), "{e}");
    assert!(!wal.exists() && !dir.join("results").exists(), "a refused bench wrote nothing");
    let allowed = Command::new(env!("CARGO_BIN_EXE_glass"))
        .env("GLASS_RESULTS_DIR", dir.join("results"))
        .args(args(true))
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&wal);
    assert!(allowed.status.success(), "{}", text(&allowed));
    assert!(String::from_utf8_lossy(&allowed.stderr).contains("WARNING"), "{}", text(&allowed));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Nothing committed holds a private key or a path of the machine that built it: run folders
/// (certificates, logs, raft state) are ignored, and records keep paths relative (issue 35's
/// gate; issue 37 asks the same of the per-host bundles).
#[test]
fn no_tracked_file_holds_a_private_key_or_a_build_machines_path() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let Ok(o) = Command::new("git").arg("-C").arg(root).args(["ls-files", "-z"]).output() else {
        eprintln!("skipped: git is not installed");
        return;
    };
    if !o.status.success() {
        eprintln!("skipped: {} is not a git checkout", root.display());
        return;
    }
    let mut bad = Vec::new();
    for name in String::from_utf8_lossy(&o.stdout).split('\0').filter(|n| !n.is_empty()) {
        if name.ends_with(".key") {
            bad.push(format!("{name}: a key file"));
            continue;
        }
        let Ok(text) = std::fs::read_to_string(root.join(name)) else { continue };
        // Split so that this file does not match itself.
        if text.contains(concat!("PRIVATE", " KEY-----")) {
            bad.push(format!("{name}: a PEM private key"));
        }
        for needle in [concat!("/work", "/mine/"), concat!("/work", "/rel-target/"), concat!("\"/tmp", "/")] {
            if text.contains(needle) {
                bad.push(format!("{name}: the path {needle}"));
            }
        }
    }
    assert!(bad.is_empty(), "tracked files that must not be: {bad:#?}");
}
