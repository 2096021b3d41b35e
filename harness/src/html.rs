//! `report.html`: one self-contained page per run record — the run's metadata, its checks,
//! its tables and every chart inline — that opens in a browser without a network
//! ([`record_page`]), and the page that sets two records side by side with the ratio of each
//! figure ([`side_by_side`]).
//!
//! The page is built from the record's own files, so `glass report DIR` rebuilds exactly what
//! the run wrote: `run.json` ([`RunMeta`]), `summary.txt` (the table the run printed),
//! `checks.json` ([`Check`]s) and every `*.svg` in the folder, inlined.
//!
//! Guarantees: the page is well-formed XML as well as HTML (every element closed, every
//! text escaped, each SVG inlined without its XML prolog), references nothing outside itself
//! (no script, stylesheet, font or image by URL), and names every chart by its file.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::HarnessError;
use crate::record::{RunMeta, RUN_JSON};
use crate::Result;

/// The page's file in a record.
pub const REPORT_HTML: &str = "report.html";
/// The table the run printed, kept for the page.
pub const SUMMARY_TXT: &str = "summary.txt";
/// The run's checks, kept for the page.
pub const CHECKS_JSON: &str = "checks.json";

/// One check a run made and whether it passed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Check {
    pub what: String,
    pub passed: bool,
}

/// What a record holds for its page.
#[derive(Debug, Clone)]
pub struct RecordFiles {
    pub dir: PathBuf,
    pub meta: RunMeta,
    pub summary: String,
    pub checks: Vec<Check>,
    /// (file name, SVG text), by file name.
    pub charts: Vec<(String, String)>,
}

impl RecordFiles {
    /// Reads a record folder: `run.json` is required, the rest is shown if present.
    pub fn read(dir: &Path) -> Result<RecordFiles> {
        let read = |name: &str| std::fs::read_to_string(dir.join(name));
        let meta_text = read(RUN_JSON).map_err(|e| {
            HarnessError::io(format!("{} is not a run record: cannot read its {RUN_JSON}", dir.display()), e)
        })?;
        let meta: RunMeta = serde_json::from_str(&meta_text).map_err(|e| {
            HarnessError::Invalid(format!("{}: not a run record's metadata: {e}", dir.join(RUN_JSON).display()))
        })?;
        let summary = read(SUMMARY_TXT).unwrap_or_default();
        let checks = match read(CHECKS_JSON) {
            Ok(t) => serde_json::from_str(&t)
                .map_err(|e| HarnessError::Invalid(format!("{}: {e}", dir.join(CHECKS_JSON).display())))?,
            Err(_) => Vec::new(),
        };
        let mut charts = Vec::new();
        let entries = std::fs::read_dir(dir).map_err(|e| HarnessError::io(format!("read {}", dir.display()), e))?;
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().is_some_and(|x| x == "svg") {
                let svg = std::fs::read_to_string(&path)
                    .map_err(|e| HarnessError::io(format!("read {}", path.display()), e))?;
                charts.push((e.file_name().to_string_lossy().into_owned(), svg));
            }
        }
        charts.sort();
        Ok(RecordFiles { dir: dir.to_path_buf(), meta, summary, checks, charts })
    }
}

/// Escapes text for HTML and XML.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// An SVG document as an element to inline: from its `<svg` on (no XML prolog or doctype).
fn inline_svg(svg: &str) -> &str {
    svg.find("<svg").map_or("", |i| svg[i..].trim_end())
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em;max-width:80em;color:#222}\
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em}\
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:0.2em 0.6em;text-align:left}\
td.n{text-align:right;font-family:monospace}\
pre{background:#f6f6f6;padding:1em;overflow-x:auto;font-size:0.85em}\
.pass{color:#070}.fail{color:#b00;font-weight:bold}\
figure{margin:1em 0}figure svg{max-width:100%;height:auto}figcaption{font-size:0.85em;color:#555}";

fn head(out: &mut String, title: &str) {
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\" xmlns=\"http://www.w3.org/1999/xhtml\">\n<head>\n\
         <meta charset=\"utf-8\"/>\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n",
        escape(title),
        escape(title)
    );
}

fn meta_table(out: &mut String, metas: &[&RunMeta]) {
    let row = |out: &mut String, name: &str, cell: &dyn Fn(&RunMeta) -> String| {
        let _ = write!(out, "<tr><th>{}</th>", escape(name));
        for m in metas {
            let _ = write!(out, "<td>{}</td>", escape(&cell(m)));
        }
        out.push_str("</tr>\n");
    };
    out.push_str("<table>\n");
    row(out, "command", &|m| crate::record::shell_line(&m.command_line));
    row(out, "status", &|m| m.status.clone());
    row(out, "glass", &|m| format!("{} (commit {})", m.glass_version, m.git_commit));
    row(out, "host", &|m| m.host.clone());
    row(out, "CPU", &|m| format!("{} ({} cores)", m.cpu_model, m.cores));
    row(out, "memory", &|m| format!("{:.1} GiB", m.memory_bytes as f64 / (1u64 << 30) as f64));
    row(out, "kernel", &|m| m.kernel.clone());
    row(out, "run directory", &|m| format!("{} ({})", m.run_dir.display(), m.run_dir_fs));
    row(out, "started", &|m| m.started_utc.clone());
    row(out, "ended", &|m| m.ended_utc.clone().unwrap_or_else(|| "—".into()));
    out.push_str("</table>\n");
}

fn checks_list(out: &mut String, checks: &[Check]) {
    if checks.is_empty() {
        out.push_str("<p>No checks were recorded.</p>\n");
        return;
    }
    out.push_str("<ul>\n");
    for c in checks {
        let (class, word) = if c.passed { ("pass", "passed") } else { ("fail", "FAILED") };
        let _ = writeln!(out, "<li><span class=\"{class}\">{word}</span> {}</li>", escape(&c.what));
    }
    out.push_str("</ul>\n");
}

fn charts(out: &mut String, charts: &[(String, String)], prefix: &str) {
    for (name, svg) in charts {
        let _ = writeln!(
            out,
            "<figure>\n{}\n<figcaption>{}{}</figcaption>\n</figure>",
            inline_svg(svg),
            escape(prefix),
            escape(name)
        );
    }
}

/// The page of one record.
pub fn record_page(r: &RecordFiles) -> String {
    let mut out = String::new();
    head(&mut out, &format!("glass {} — {}", r.meta.command, r.meta.started_utc));
    out.push_str("<h2>Run</h2>\n");
    meta_table(&mut out, &[&r.meta]);
    out.push_str("<h2>Checks</h2>\n");
    checks_list(&mut out, &r.checks);
    if !r.summary.trim().is_empty() {
        out.push_str("<h2>Results</h2>\n");
        let _ = writeln!(out, "<pre>{}</pre>", escape(r.summary.trim_end()));
    }
    if !r.charts.is_empty() {
        out.push_str("<h2>Charts</h2>\n");
        charts(&mut out, &r.charts, "");
    }
    out.push_str("</body>\n</html>\n");
    out
}

/// Writes `report.html` into the record folder; returns its path. A sweep's table and chart
/// are first drawn again from its `sweep.json` (judged by the current rule), so a record kept
/// from an older glass shows today's reading of its points.
pub fn write_record_page(dir: &Path) -> Result<PathBuf> {
    let sweep = dir.join("sweep.json");
    if let Ok(text) = std::fs::read_to_string(&sweep) {
        use crate::compare::sweep as s;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| HarnessError::Invalid(format!("{}: {e}", sweep.display())))?;
        let mut points: Vec<s::SweepPoint> = serde_json::from_value(v["points"].clone())
            .map_err(|e| HarnessError::Invalid(format!("{}: {e}", sweep.display())))?;
        s::judge(&mut points);
        let summary = s::render_table(&points);
        workload::bench::write_atomic(&dir.join(SUMMARY_TXT), summary.as_bytes())
            .map_err(|e| HarnessError::Invalid(e.to_string()))?;
        s::write_svg(&points, &dir.join(format!("{}.svg", s::FILE_STEM)))?;
    }
    let page = record_page(&RecordFiles::read(dir)?);
    let path = dir.join(REPORT_HTML);
    workload::bench::write_atomic(&path, page.as_bytes()).map_err(|e| HarnessError::Invalid(e.to_string()))?;
    Ok(path)
}

/// One figure of a run: its JSON field, its value and, for the median of repeated runs
/// (`compare --repeat`), their least and greatest.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub field: String,
    pub value: f64,
    pub range: Option<(f64, f64)>,
}

impl Figure {
    fn single(field: impl Into<String>, value: f64) -> Figure {
        Figure { field: field.into(), value, range: None }
    }

    /// The value, with its range when it has one: `200 (100–300)`.
    fn shown(&self) -> String {
        match self.range {
            Some((lo, hi)) => format!("{} ({}–{})", fmt_num(self.value), fmt_num(lo), fmt_num(hi)),
            None => fmt_num(self.value),
        }
    }
}

/// B / A, and with two ranges whether they overlap (a difference within the runs' spread)
/// or lie apart.
fn ratio(a: &Figure, b: &Figure) -> String {
    let mut r =
        if a.value.abs() > 0.0 && a.value.is_finite() { format!("{:.3}", b.value / a.value) } else { "—".into() };
    if let (Some((alo, ahi)), Some((blo, bhi))) = (a.range, b.range) {
        r.push_str(if ahi < blo || bhi < alo { " (apart)" } else { " (ranges overlap)" });
    }
    r
}

/// The figures of one run inside a result, by name, for [`side_by_side`].
pub type Figures = Vec<(String, Vec<Figure>)>;

/// The figures compared between records: the numeric fields of each run of `compare.json`
/// (one entry per run label), `sweep.json` (one per point) or `bench.json` (one entry).
pub fn figures(dir: &Path) -> Result<Figures> {
    const FIELDS: [&str; 15] = [
        "txn_per_sec",
        "tpmc",
        "neworder_per_sec",
        "offered_per_sec",
        "p50_us",
        "p95_us",
        "p99_us",
        "primary_cpu_s_per_1000",
        "backup_cpu_s_per_1000",
        "node_cpu_s_per_1000",
        "cpu_us_per_txn",
        "net_bytes_per_txn",
        "log_bytes_per_txn",
        "fsyncs",
        "disk_bytes",
    ];
    let pick = |v: &serde_json::Value| -> Vec<Figure> {
        FIELDS
            .iter()
            .filter_map(|f| {
                let value = v.get(*f).and_then(serde_json::Value::as_f64)?;
                let spread = v.get("repeats").and_then(|r| r.get(*f));
                let bound = |k: &str| spread.and_then(|s| s.get(k)).and_then(serde_json::Value::as_f64);
                Some(Figure { field: f.to_string(), value, range: bound("min").zip(bound("max")) })
            })
            .collect()
    };
    let read = |name: &str| -> Result<Option<serde_json::Value>> {
        let path = dir.join(name);
        match std::fs::read_to_string(&path) {
            Ok(t) => serde_json::from_str(&t)
                .map(Some)
                .map_err(|e| HarnessError::Invalid(format!("{}: {e}", path.display()))),
            Err(_) => Ok(None),
        }
    };
    if let Some(v) = read("compare.json")? {
        let runs = v.get("runs").and_then(serde_json::Value::as_array).cloned().unwrap_or_default();
        let label = |r: &serde_json::Value| -> String {
            let s = |k: &str| r.get(k).and_then(serde_json::Value::as_str).unwrap_or("").to_string();
            let mut l =
                format!("{} ×{}", s("mode"), r.get("replicas").and_then(serde_json::Value::as_u64).unwrap_or(0));
            if !s("shipping").is_empty() {
                l = format!("{} ({}) ×{}", s("mode"), s("shipping"), r["replicas"]);
            }
            if let Some(p) = r.get("multi_partition_pct").and_then(serde_json::Value::as_u64) {
                l.push_str(&format!(", {p}% multi-partition"));
            }
            l
        };
        return Ok(runs.iter().map(|r| (label(r), pick(r))).collect());
    }
    if let Some(v) = read("sweep.json")? {
        let points = v.get("points").and_then(serde_json::Value::as_array).cloned().unwrap_or_default();
        return Ok(points
            .iter()
            .map(|p| {
                let series = p.get("series").and_then(serde_json::Value::as_str).unwrap_or("");
                let offered = p.get("offered_per_sec").and_then(serde_json::Value::as_f64);
                let at = offered.map_or("closed loop".to_string(), |o| format!("{o:.0} txn/s offered"));
                (format!("{series} @ {at}"), pick(p))
            })
            .collect());
    }
    if let Some(v) = read("bench.json")? {
        return Ok(vec![("bench".to_string(), pick(&v))]);
    }
    if let Some(v) = read("failover.json")? {
        return Ok(vec![(failover_label(&v), failover_figures(&v))]);
    }
    Err(HarnessError::Invalid(format!(
        "{} holds no compare.json, sweep.json, bench.json or failover.json to compare",
        dir.display()
    )))
}

/// A failover record's run, named by mode, replicas and what was killed.
fn failover_label(v: &serde_json::Value) -> String {
    let s = |k: &str| v.get(k).and_then(serde_json::Value::as_str).unwrap_or("").to_string();
    let killed = match v.get("killed") {
        Some(serde_json::Value::Object(o)) => {
            o.iter().next().map_or(String::new(), |(k, id)| format!("{} {id}", k.to_lowercase()))
        }
        Some(other) => other.to_string().trim_matches('"').to_lowercase(),
        None => String::new(),
    };
    format!(
        "failover: {} ×{}, {} {killed}",
        s("mode"),
        v.get("replicas").map_or(0, |r| r.as_u64().unwrap_or(0)),
        s("signal")
    )
}

/// A failover record's figures: detection, unavailability, recovery, throughput around the
/// kill, the checks, and a rejoin's cost.
fn failover_figures(v: &serde_json::Value) -> Vec<Figure> {
    let mut out: Vec<Figure> = [
        "detection_ms",
        "election_ms",
        "unavailability_ms",
        "recovery_ms",
        "txn_per_sec_before",
        "txn_per_sec_lowest_after",
        "committed",
        "lost_acknowledged",
        "outcome_unknown",
        "unavailable_answers",
        "cpu_stolen_pct",
    ]
    .iter()
    .filter_map(|f| v.get(*f).and_then(serde_json::Value::as_f64).map(|x| Figure::single(*f, x)))
    .collect();
    if let Some(r) = v.get("rejoin").filter(|r| r.is_object()) {
        for f in ["longest_silence_ms", "longest_gap_ms"] {
            let longest = r
                .get(f)
                .and_then(|g| g.as_array())
                .map(|g| g.iter().filter_map(serde_json::Value::as_f64).fold(0.0, f64::max));
            out.extend(longest.map(|x| Figure::single(format!("rejoin_{f}"), x)));
        }
        for f in ["txn_per_sec_during", "given_up_pct"] {
            out.extend(r.get(f).and_then(serde_json::Value::as_f64).map(|x| Figure::single(format!("rejoin_{f}"), x)));
        }
    }
    out
}

/// A figure's name as a reader says it (the JSON field's name for one not listed).
pub fn figure_name(field: &str) -> String {
    let name = match field {
        "txn_per_sec" => "throughput (txn/s)",
        "tpmc" => "tpmC",
        "neworder_per_sec" => "NewOrders per second",
        "offered_per_sec" => "offered load (txn/s)",
        "p50_us" => "median latency (µs)",
        "p95_us" => "p95 latency (µs)",
        "p99_us" => "p99 latency (µs)",
        "primary_cpu_s_per_1000" => "primary CPU per 1000 txns (s)",
        "backup_cpu_s_per_1000" => "backup CPU per 1000 txns (s)",
        "node_cpu_s_per_1000" => "node CPU per 1000 txns (s)",
        "cpu_us_per_txn" => "CPU per txn, every process (µs)",
        "net_bytes_per_txn" => "network bytes per txn",
        "log_bytes_per_txn" => "log bytes per txn",
        "fsyncs" => "fsync calls",
        "disk_bytes" => "bytes written to disk",
        "detection_ms" => "failure detected after (ms)",
        "election_ms" => "new leader serving after (ms)",
        "unavailability_ms" => "longest unavailability (ms)",
        "recovery_ms" => "recovery (ms)",
        "txn_per_sec_before" => "throughput before the kill (txn/s)",
        "txn_per_sec_lowest_after" => "lowest 100 ms after the kill (txn/s)",
        "committed" => "transactions committed",
        "lost_acknowledged" => "acknowledged transactions lost",
        "outcome_unknown" => "answered \"outcome unknown\"",
        "unavailable_answers" => "answered \"unavailable\"",
        "rejoin_longest_silence_ms" => "rejoin: longest stretch without a commit (ms)",
        "rejoin_longest_gap_ms" => "rejoin: longest one client waited (ms)",
        "cpu_stolen_pct" => "CPU time stolen by the hypervisor (%)",
        "rejoin_txn_per_sec_during" => "rejoin: throughput meanwhile (txn/s)",
        "rejoin_given_up_pct" => "rejoin: throughput given up (%)",
        other => other,
    };
    name.to_string()
}

/// The parameters two runs differ in: their command lines without the program and `--out`,
/// and the build, host and cores they ran on. Empty when they agree.
pub fn parameter_differences(a: &RunMeta, b: &RunMeta) -> Vec<String> {
    let args = |m: &RunMeta| -> Vec<String> {
        let mut out = Vec::new();
        let mut it = m.command_line.iter().skip(1);
        while let Some(x) = it.next() {
            if x == "--out" {
                it.next();
            } else if !x.starts_with("--out=") {
                out.push(x.clone());
            }
        }
        out
    };
    let mut diffs = Vec::new();
    let (aa, ab) = (args(a), args(b));
    if aa != ab {
        diffs.push(format!("command: A `{}`, B `{}`", aa.join(" "), ab.join(" ")));
    }
    for (what, va, vb) in [
        ("git commit", &a.git_commit, &b.git_commit),
        ("host", &a.host, &b.host),
        ("CPU", &a.cpu_model, &b.cpu_model),
        ("kernel", &a.kernel, &b.kernel),
        ("file system", &a.run_dir_fs, &b.run_dir_fs),
    ] {
        if va != vb {
            diffs.push(format!("{what}: A {va}, B {vb}"));
        }
    }
    if a.cores != b.cores {
        diffs.push(format!("cores: A {}, B {}", a.cores, b.cores));
    }
    diffs
}

/// The page setting record `b` beside record `a`: both runs' metadata, every figure of every
/// run the two share (by label) with the ratio b/a, then each record's charts.
pub fn side_by_side(a: &RecordFiles, fa: &Figures, b: &RecordFiles, fb: &Figures) -> String {
    let name = |r: &RecordFiles| r.dir.file_name().map_or(r.dir.display().to_string(), |n| n.to_string_lossy().into());
    let (na, nb) = (name(a), name(b));
    let mut out = String::new();
    head(&mut out, &format!("glass: {nb} against {na}"));
    let _ = writeln!(out, "<p>A = {}, B = {}; ratios are B / A.</p>", escape(&na), escape(&nb));
    out.push_str("<h2>Runs</h2>\n");
    meta_table(&mut out, &[&a.meta, &b.meta]);
    let diffs = parameter_differences(&a.meta, &b.meta);
    if !diffs.is_empty() {
        out.push_str(
            "<p><strong>The runs differ in their parameters</strong>: a ratio may reflect them, not the change \
                      compared.</p>\n<ul>\n",
        );
        for d in &diffs {
            let _ = writeln!(out, "<li>{}</li>", escape(d));
        }
        out.push_str("</ul>\n");
    }
    let repeated = [fa, fb].iter().any(|f| f.iter().any(|(_, figs)| figs.iter().any(|x| x.range.is_some())));
    out.push_str(if repeated {
        "<p>A figure with a range is the median of repeated runs (<code>compare --repeat</code>), their least and \
         greatest in brackets; where both have one, the ratio says whether the ranges overlap (a difference \
         within the runs' spread) or lie apart.</p>\n"
    } else {
        "<p>Each figure is one run's: on a shared machine a single run can be off by a factor of two, so read a \
         ratio against the spread of repeated runs (<code>compare --repeat N</code>).</p>\n"
    });
    out.push_str("<h2>Figures</h2>\n");
    let mut shared = 0;
    for (label, figs_a) in fa {
        let Some((_, figs_b)) = fb.iter().find(|(l, _)| l == label) else { continue };
        shared += 1;
        let _ = writeln!(
            out,
            "<h3>{}</h3>\n<table>\n<tr><th>figure</th><th>A</th><th>B</th><th>B / A</th></tr>",
            escape(label)
        );
        for a in figs_a {
            let Some(b) = figs_b.iter().find(|b| b.field == a.field) else { continue };
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                escape(&figure_name(&a.field)),
                a.shown(),
                b.shown(),
                ratio(a, b)
            );
        }
        out.push_str("</table>\n");
    }
    if shared == 0 {
        out.push_str("<p>The two records share no run (by mode, shipping and replication factor).</p>\n");
    }
    for (r, n) in [(a, &na), (b, &nb)] {
        if !r.charts.is_empty() {
            let _ = writeln!(out, "<h2>Charts of {}</h2>", escape(n));
            charts(&mut out, &r.charts, &format!("{n}: "));
        }
    }
    out.push_str("</body>\n</html>\n");
    out
}

/// [`side_by_side`] as text for the terminal: the parameters the runs differ in, then every
/// figure the two share with its ratio B / A.
pub fn side_by_side_text(a: &RecordFiles, fa: &Figures, b: &RecordFiles, fb: &Figures) -> String {
    let mut out = String::new();
    let diffs = parameter_differences(&a.meta, &b.meta);
    if !diffs.is_empty() {
        out.push_str("the runs differ in their parameters (a ratio may reflect them):\n");
        for d in &diffs {
            let _ = writeln!(out, "  {d}");
        }
    }
    for (label, figs_a) in fa {
        let Some((_, figs_b)) = fb.iter().find(|(l, _)| l == label) else { continue };
        let _ = writeln!(out, "{label}\n  {:<46} {:>14} {:>14} {:>8}", "figure", "A", "B", "B / A");
        for a in figs_a {
            let Some(b) = figs_b.iter().find(|b| b.field == a.field) else { continue };
            let _ =
                writeln!(out, "  {:<46} {:>14} {:>14} {:>8}", figure_name(&a.field), a.shown(), b.shown(), ratio(a, b));
        }
    }
    if !fa.iter().any(|(l, _)| fb.iter().any(|(m, _)| m == l)) {
        out.push_str("the two records share no run (by mode, shipping, replication factor, or what was killed)\n");
    }
    out
}

fn fmt_num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.4}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 40: two failover records are compared figure by figure, named for people, and a
    /// difference in their parameters is said first.
    #[test]
    fn two_failover_records_are_compared_and_their_differences_named() {
        let base = std::env::temp_dir().join(format!("glass-html-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let build = crate::record::Build { version: "0.1.0", commit: "abc" };
        let record = |name: &str, detection: f64, gap: f64| {
            let r = crate::record::Record::create(Some(&base.join(name)), "failover", build, &base).unwrap();
            let v = serde_json::json!({"mode": "active-active", "replicas": 2, "killed": {"node": 1},
                "signal": "SIGKILL", "detection_ms": detection, "recovery_ms": 15_000.0, "lost_acknowledged": 0,
                "rejoin": {"longest_silence_ms": [gap, 31.0], "longest_gap_ms": [gap * 2.0, 62.0], "given_up_pct": 39.0}});
            r.write_headed(&r.path("failover.json"), "failover", &v).unwrap();
            r
        };
        let (a, mut b) = (record("a", 40.0, 44.0), record("b", 20.0, 88.0));
        let (fa, fb) = (figures(&a.dir).unwrap(), figures(&b.dir).unwrap());
        assert_eq!(fa[0].0, "failover: active-active ×2, SIGKILL node 1");
        let (ra, rb) = (RecordFiles::read(&a.dir).unwrap(), RecordFiles::read(&b.dir).unwrap());
        let text = side_by_side_text(&ra, &fa, &rb, &fb);
        assert!(text.contains("failure detected after (ms)") && text.contains("0.500"), "{text}");
        assert!(text.contains("rejoin: longest stretch without a commit (ms)") && text.contains("2.000"), "{text}");
        assert!(text.contains("rejoin: longest one client waited (ms)"), "{text}");
        assert!(!text.contains("differ in their parameters"), "{text}");
        b.meta.git_commit = "def".into();
        b.meta.command_line = vec!["glass".into(), "failover".into(), "--mode".into(), "active-passive".into()];
        let diffs = parameter_differences(&ra.meta, &b.meta);
        assert_eq!(diffs.len(), 2, "{diffs:?}");
        assert!(diffs[0].starts_with("command: A `") && diffs[0].ends_with("B `failover --mode active-passive`"));
        assert_eq!(diffs[1], "git commit: A abc, B def");
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// Issue 40, "reports show the spread": two records of repeated runs are compared by their
    /// medians, each with its least and greatest, and the ratio says whether the ranges overlap.
    #[test]
    fn repeated_runs_are_compared_with_their_spread() {
        let base = std::env::temp_dir().join(format!("glass-html-spread-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let build = crate::record::Build { version: "0.1.0", commit: "abc" };
        let record = |name: &str, runs: &[f64]| {
            let r = crate::record::Record::create(Some(&base.join(name)), "compare", build, &base).unwrap();
            let rows: Vec<crate::compare::CompareRow> = runs
                .iter()
                .map(|&t| crate::compare::tests::row(wire::config::Mode::ActiveActive, None, 2, t))
                .collect();
            let row = crate::compare::repeat::combine(&rows).unwrap();
            r.write_headed(&r.path("compare.json"), "runs", &crate::compare::to_json(&[row])).unwrap();
            r
        };
        let (a, b, c) =
            (record("a", &[100.0, 200.0, 300.0]), record("b", &[250.0, 260.0, 270.0]), record("c", &[400.0, 500.0]));
        let fig = |r: &crate::record::Record| figures(&r.dir).unwrap();
        let files = |r: &crate::record::Record| RecordFiles::read(&r.dir).unwrap();
        let ab = side_by_side_text(&files(&a), &fig(&a), &files(&b), &fig(&b));
        assert!(
            ab.contains("200 (100–300)") && ab.contains("260 (250–270)") && ab.contains("1.300 (ranges overlap)"),
            "{ab}"
        );
        let ac = side_by_side(&files(&a), &fig(&a), &files(&c), &fig(&c));
        assert!(
            ac.contains("450 (400–500)") && ac.contains("2.250 (apart)") && ac.contains("median of repeated runs"),
            "{ac}"
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn text_is_escaped_and_svgs_lose_their_prolog() {
        assert_eq!(escape(r#"<a href="x">&'</a>"#), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;");
        assert_eq!(inline_svg("<?xml version=\"1.0\"?>\n<svg x=\"1\"/>\n"), "<svg x=\"1\"/>");
        assert_eq!(inline_svg("not a picture"), "");
    }
}
