//! `glass compare --sweep`: latency at equal offered load. For each mode, one cluster is
//! started and driven at increasing open-loop arrival rates (latency counted from each
//! request's scheduled time, so queueing shows — the driver's open loop), then checked and
//! stopped ([`run_sweep`]). Without explicit rates a closed-loop run first finds the mode's
//! saturation throughput and the offered loads are [`SATURATION_FRACTIONS`] of it. Owns
//! [`SweepPoint`] and its renderings: a table ([`render_table`]), CSV, JSON and the figure
//! that shows where each replication scheme breaks — p50 and p99 latency against achieved
//! throughput, one line per mode ([`write_svg`]) — and [`breaking_points`].
//!
//! Guarantees: every point comes from its own measured phase on the mode's one cluster; a
//! point *sustains* its offered load when it achieves at least [`SUSTAINED_SHARE`] of it and
//! its p99 stays within [`P99_GROWTH_MAX`] times the lowest p99 of the mode's open-loop
//! points (latency bounded by service, not by a queue that grows through the run: an open
//! loop can finish a phase at the offered rate while its queue, and so its latency, grows
//! without bound; [`judge`]); a series *breaks* at the offered load just above the highest
//! it sustains ([`breaking_points`]: a miss below that — a checkpoint's fsyncs, a noisy
//! neighbour — shows in the table but is not the break); the cluster is
//! checked once after all its points (replica digests, TPC-C consistency, every acknowledged
//! NewOrder and Payment present), and the points say whether that passed ([`checks`]: one
//! check per series).

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;
use serde::{Deserialize, Serialize};
use wire::config::{Mode, Shipping};
use workload::client::driver::{DriverConfig, RemoteShares};

use super::plan::{remove_data, Plan};
use super::{csv_table, mode_color, ms, CsvColumn, SvgError};
use crate::cluster::{runtime, Cluster, Progress};
use crate::html::Check;
use crate::measure::{check_and_down, measure_with, up_guarded, Measurement};
use crate::record::Record;
use crate::Result;

/// The offered loads of a sweep without explicit rates, as fractions of the closed-loop
/// saturation throughput: dense near saturation, where the curves bend, and one beyond it.
pub const SATURATION_FRACTIONS: [f64; 9] = [0.10, 0.25, 0.40, 0.55, 0.70, 0.80, 0.90, 1.00, 1.10];
/// A point sustains its offered load when it achieves at least this share of it.
pub const SUSTAINED_SHARE: f64 = 0.95;
/// ... and its p99 is at most this many times the mode's lowest open-loop p99.
pub const P99_GROWTH_MAX: f64 = 10.0;
/// The stem of the sweep's files (`.json`, `.csv`, `.svg`).
pub const FILE_STEM: &str = "sweep";

pub const X_LABEL: &str = "achieved throughput (committed txn/s, log scale)";
pub const Y_LABEL: &str = "latency (ms, log scale): p99 solid, p50 dashed";

const SVG_WIDTH_PX: u32 = 1000;
const SVG_HEIGHT_PX: u32 = 600;
const SVG_POINT_PX: i32 = 4;

/// One measured phase of a sweep: a mode at one offered load (or closed loop).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    /// The line this point belongs to (e.g. "active-passive (sync) ×2").
    pub series: String,
    pub mode: Mode,
    pub shipping: Option<Shipping>,
    pub replicas: usize,
    /// Open-loop arrival rate offered, transactions per second; `None`: closed loop (the
    /// saturation run).
    pub offered_per_sec: Option<f64>,
    pub seconds: f64,
    pub committed: u64,
    /// Achieved: committed transactions per second.
    pub txn_per_sec: f64,
    pub tpmc: f64,
    pub p50_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// Achieved ÷ offered (`None` for closed loop).
    pub achieved_share: Option<f64>,
    /// Achieved at least [`SUSTAINED_SHARE`] of the offered load with p99 within
    /// [`P99_GROWTH_MAX`] times the mode's lowest ([`judge`]; `None` for closed loop).
    pub sustained: Option<bool>,
    /// The mode's cluster passed its checks after the sweep.
    pub checks_passed: bool,
}

/// Runs one mode's sweep on one cluster start: closed loop first when `rates` is empty (its
/// throughput sets the offered loads), then each offered load; checks and stops the cluster.
/// Each phase uses the next seed, so no two replay the same inputs.
#[allow(clippy::too_many_arguments)] // the plan, the workload and the caller's three sinks
pub fn run_sweep(
    plan: &Plan,
    exe: &Path,
    cfg: &DriverConfig,
    shares: &RemoteShares,
    rates: &[f64],
    echo: crate::measure::Echo,
    keep_logs: bool,
    progress: &mut dyn Progress,
    each: &mut dyn FnMut(&SweepPoint),
) -> Result<Vec<SweepPoint>> {
    let note = format!(
        "Derived by `glass compare --sweep` from the cluster it was given: mode {}, {} replicas.",
        plan.mode,
        plan.config.replication_factor()
    );
    let cluster = Cluster::derived(&plan.config, &note, None)?;
    let guard = up_guarded(&cluster, exe, progress)?;
    let rt = runtime()?;
    let client = cluster.client();
    let series = super::CompareRow::series_of(plan.mode, plan.config.shipping(), plan.config.replication_factor());
    let mut acks = Vec::new();
    let mut payments = Vec::new();
    let mut points = Vec::new();
    let mut phase = 0u64;
    let mut run = |rate: Option<f64>, acks: &mut Vec<_>, payments: &mut Vec<_>| -> Result<SweepPoint> {
        let cfg = DriverConfig { rate, seed: cfg.seed.wrapping_add(phase), ..cfg.clone() };
        phase += 1;
        let Measurement { report, acks: a, payments: p, .. } =
            measure_with(&rt, &cluster, &client, &cfg, shares, echo, None)?;
        acks.extend(a);
        payments.extend(p);
        let max_us = report.per_txn.iter().map(|k| k.max_us).fold(0.0, f64::max);
        let achieved_share = rate.map(|r| report.txn_per_sec / r);
        Ok(SweepPoint {
            series: series.clone(),
            mode: plan.mode,
            shipping: plan.config.shipping(),
            replicas: plan.config.replication_factor(),
            offered_per_sec: rate,
            seconds: report.seconds,
            committed: report.committed,
            txn_per_sec: report.txn_per_sec,
            tpmc: report.tpmc,
            p50_us: report.p50_us,
            p95_us: report.p95_us,
            p99_us: report.p99_us,
            max_us,
            achieved_share,
            sustained: None,
            checks_passed: false,
        })
    };
    let offered: Vec<f64> = if rates.is_empty() {
        let saturation = run(None, &mut acks, &mut payments)?;
        each(&saturation);
        let s = saturation.txn_per_sec.max(1.0);
        points.push(saturation);
        SATURATION_FRACTIONS.iter().map(|f| (f * s).round().max(1.0)).collect()
    } else {
        rates.to_vec()
    };
    for r in offered {
        let p = run(Some(r), &mut acks, &mut payments)?;
        each(&p);
        points.push(p);
    }
    judge(&mut points);
    let verdict = check_and_down(&rt, guard, &client, &acks, &payments, progress)?;
    remove_data(&plan.dir, &cluster, keep_logs)?;
    let passed = verdict.passed();
    for p in &mut points {
        p.checks_passed = passed;
    }
    Ok(points)
}

/// Decides which open-loop points sustained their offered load (see the module's
/// guarantees), per series.
pub fn judge(points: &mut [SweepPoint]) {
    let names: Vec<String> = points.iter().map(|p| p.series.clone()).collect();
    for name in names {
        let floor = points
            .iter()
            .filter(|p| p.series == name && p.offered_per_sec.is_some())
            .map(|p| p.p99_us)
            .fold(f64::INFINITY, f64::min);
        for p in points.iter_mut().filter(|p| p.series == name) {
            p.sustained = p.achieved_share.map(|share| share >= SUSTAINED_SHARE && p.p99_us <= P99_GROWTH_MAX * floor);
        }
    }
}

/// Refuses offered loads that are not positive finite rates.
pub fn check_rates(rates: &[f64]) -> Result<()> {
    if let Some(r) = rates.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
        return Err(crate::HarnessError::Invalid(format!(
            "--sweep rates must be positive transactions per second, not {r}"
        )));
    }
    Ok(())
}

/// Where one series breaks.
#[derive(Debug, Clone, PartialEq)]
pub struct Breaking<'a> {
    pub series: &'a str,
    /// The highest offered load sustained (its point), if any.
    pub last_sustained: Option<&'a SweepPoint>,
    /// The next offered load above it, if the sweep went beyond.
    pub broke_at: Option<&'a SweepPoint>,
}

/// Each series' breaking point, ordered by the offered load it broke at (the first to break
/// first; series that never broke last).
pub fn breaking_points(points: &[SweepPoint]) -> Vec<Breaking<'_>> {
    let mut out: Vec<Breaking<'_>> = series(points)
        .into_iter()
        .map(|(name, group)| {
            let open: Vec<&SweepPoint> = group.into_iter().filter(|p| p.offered_per_sec.is_some()).collect();
            let highest = open.iter().rposition(|p| p.sustained == Some(true));
            let broke = match highest {
                Some(i) => Some(i + 1).filter(|&j| j < open.len()),
                None => (!open.is_empty()).then_some(0),
            };
            Breaking { series: name, last_sustained: highest.map(|i| open[i]), broke_at: broke.map(|i| open[i]) }
        })
        .collect();
    out.sort_by(|a, b| {
        let key = |x: &Breaking<'_>| x.broke_at.and_then(|p| p.offered_per_sec).unwrap_or(f64::INFINITY);
        key(a).total_cmp(&key(b))
    });
    out
}

/// The points grouped by series (first appearance): closed loop first, then by offered load.
fn series(points: &[SweepPoint]) -> Vec<(&str, Vec<&SweepPoint>)> {
    let mut out: Vec<(&str, Vec<&SweepPoint>)> = Vec::new();
    for p in points {
        match out.iter_mut().find(|(s, _)| *s == p.series) {
            Some((_, v)) => v.push(p),
            None => out.push((&p.series, vec![p])),
        }
    }
    for (_, v) in &mut out {
        v.sort_by(|a, b| a.offered_per_sec.unwrap_or(-1.0).total_cmp(&b.offered_per_sec.unwrap_or(-1.0)));
    }
    out
}

type Cell = CsvColumn<SweepPoint>;

fn offered(p: &SweepPoint) -> String {
    p.offered_per_sec.map_or("closed loop".to_string(), |r| format!("{r:.0}"))
}

const TABLE_COLUMNS: [Cell; 8] = [
    ("offered (txn/s)", offered),
    ("achieved (txn/s)", |p| format!("{:.0}", p.txn_per_sec)),
    ("achieved (%)", |p| p.achieved_share.map_or("—".into(), |s| format!("{:.0}", 100.0 * s))),
    ("tpmC", |p| format!("{:.0}", p.tpmc)),
    ("p50 (ms)", |p| ms(p.p50_us)),
    ("p95 (ms)", |p| ms(p.p95_us)),
    ("p99 (ms)", |p| ms(p.p99_us)),
    ("max (ms)", |p| ms(p.max_us)),
];

/// One point as its table line (what the command prints as each phase ends).
pub fn render_point(p: &SweepPoint) -> String {
    let cells: Vec<String> = TABLE_COLUMNS.iter().map(|(name, cell)| format!("{name} {}", cell(p))).collect();
    cells.join(", ")
}

/// The sweep as a table per series, then which series breaks first and where.
pub fn render_table(points: &[SweepPoint]) -> String {
    let mut out = String::new();
    if points.is_empty() {
        out.push_str("no sweep points\n");
        return out;
    }
    let widths: Vec<usize> = TABLE_COLUMNS
        .iter()
        .map(|(name, cell)| {
            points.iter().map(|p| cell(p).chars().count()).chain([name.chars().count()]).max().unwrap_or(0)
        })
        .collect();
    for (i, (name, group)) in series(points).into_iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let _ = writeln!(out, "{name}");
        for ((head, _), w) in TABLE_COLUMNS.iter().zip(&widths) {
            let _ = write!(out, "  {head:>w$}");
        }
        out.push('\n');
        for p in group {
            for ((_, cell), w) in TABLE_COLUMNS.iter().zip(&widths) {
                let _ = write!(out, "  {:>w$}", cell(p));
            }
            out.push('\n');
        }
    }
    out.push('\n');
    out.push_str(&render_breaking(points));
    let failed: Vec<&str> = series(points).into_iter().filter(|(_, g)| !g[0].checks_passed).map(|(s, _)| s).collect();
    if failed.is_empty() {
        out.push_str("checks: every cluster consistent, replica digests equal, nothing acknowledged missing\n");
    } else {
        let _ = writeln!(out, "CHECKS FAILED for {}", failed.join(", "));
    }
    out
}

/// Where each series breaks, the first to break first.
pub fn render_breaking(points: &[SweepPoint]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "where each mode breaks (the load above the highest it sustains: {:.0}% achieved, p99 within {:.0}× \
         its lowest):",
        100.0 * SUSTAINED_SHARE,
        P99_GROWTH_MAX
    );
    let load = |p: &SweepPoint| {
        format!(
            "{:.0} txn/s offered ({:.0} achieved, p99 {} ms)",
            p.offered_per_sec.unwrap_or(0.0),
            p.txn_per_sec,
            ms(p.p99_us)
        )
    };
    for b in breaking_points(points) {
        let before =
            b.last_sustained.map_or("no offered load sustained".to_string(), |p| format!("sustains {}", load(p)));
        let at = b.broke_at.map_or("does not break within the sweep".to_string(), |p| format!("breaks at {}", load(p)));
        let _ = writeln!(out, "  {}: {before}; {at}", b.series);
    }
    out
}

const CSV_COLUMNS: [Cell; 16] = [
    ("series", |p| p.series.clone()),
    ("mode", |p| p.mode.name().to_string()),
    ("shipping", |p| p.shipping.map_or(String::new(), |s| s.to_string())),
    ("replicas", |p| p.replicas.to_string()),
    ("offered_per_sec", |p| p.offered_per_sec.map_or(String::new(), |r| r.to_string())),
    ("seconds", |p| p.seconds.to_string()),
    ("committed", |p| p.committed.to_string()),
    ("txn_per_sec", |p| p.txn_per_sec.to_string()),
    ("tpmc", |p| p.tpmc.to_string()),
    ("p50_us", |p| p.p50_us.to_string()),
    ("p95_us", |p| p.p95_us.to_string()),
    ("p99_us", |p| p.p99_us.to_string()),
    ("max_us", |p| p.max_us.to_string()),
    ("achieved_share", |p| p.achieved_share.map_or(String::new(), |s| s.to_string())),
    ("sustained", |p| p.sustained.map_or(String::new(), |s| s.to_string())),
    ("checks_passed", |p| p.checks_passed.to_string()),
];

pub fn to_csv(points: &[SweepPoint]) -> String {
    csv_table(&CSV_COLUMNS, points)
}

/// `{"points": [...]}` (the run record heads it with `run`).
pub fn to_json(points: &[SweepPoint]) -> serde_json::Value {
    serde_json::json!({ "points": points })
}

/// Writes the sweep into the record: `sweep.json` (headed by the run), `sweep.csv` and
/// `sweep.svg`.
pub fn write_files(record: &Record, points: &[SweepPoint]) -> Result<()> {
    record.write_headed(&record.path("sweep.json"), "points", &to_json(points))?;
    crate::record::write(&record.path("sweep.csv"), to_csv(points).as_bytes())?;
    write_svg(points, &record.path("sweep.svg"))?;
    Ok(())
}

/// The checks a sweep made, one per series (its cluster's, after all its points), and the
/// series that failed theirs.
pub fn checks(points: &[SweepPoint]) -> (Vec<Check>, Vec<String>) {
    let mut checks = Vec::new();
    let mut failed = Vec::new();
    for p in points {
        if !checks.iter().any(|c: &Check| c.what.starts_with(&p.series)) {
            checks.push(Check {
                what: format!(
                    "{}: after the sweep, replica digests equal, TPC-C consistent (clause 3.3.2), every acknowledged \
                     NewOrder and Payment present",
                    p.series
                ),
                passed: p.checks_passed,
            });
            if !p.checks_passed {
                failed.push(p.series.clone());
            }
        }
    }
    (checks, failed)
}

/// Draws p99 (solid) and p50 (dashed) latency against achieved throughput, one colour per
/// series, log-scaled latency.
pub fn write_svg(points: &[SweepPoint], path: &Path) -> Result<(), SvgError> {
    if points.is_empty() {
        return Err(SvgError::NoRows);
    }
    draw(points, path).map_err(|source| SvgError::Draw { path: path.to_path_buf(), source })
}

fn draw(points: &[SweepPoint], path: &Path) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    let root = SVGBackend::new(path, (SVG_WIDTH_PX, SVG_HEIGHT_PX)).into_drawing_area();
    root.fill(&WHITE)?;
    // Both axes log-scaled: the full stack's curve sits two orders of magnitude left of the
    // logless modes', and latency spans milliseconds to seconds.
    let achieved = || points.iter().map(|p| p.txn_per_sec).filter(|v| v.is_finite() && *v > 0.0);
    let x_max = achieved().fold(1.0, f64::max) * 1.5;
    let x_min = achieved().fold(f64::INFINITY, f64::min).min(x_max / 10.0) / 1.5;
    let lat = |us: f64| (us / 1000.0).max(0.01);
    let y_max = points.iter().map(|p| lat(p.p99_us)).fold(0.1, f64::max) * 2.0;
    let y_min = points.iter().map(|p| lat(p.p50_us)).fold(f64::INFINITY, f64::min).min(y_max / 10.0) / 2.0;
    let mut chart = ChartBuilder::on(&root)
        .caption("glass compare --sweep: latency against achieved throughput", ("sans-serif", 20))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d((x_min..x_max).log_scale(), (y_min..y_max).log_scale())?;
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .x_desc(X_LABEL)
        .y_desc(Y_LABEL)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| if *v >= 1.0 { format!("{v:.0}") } else { format!("{v:.2}") })
        .draw()?;
    let groups = series(points);
    for (i, (name, group)) in groups.iter().enumerate() {
        let mode = group[0].mode;
        let earlier = groups[..i].iter().filter(|(_, g)| g[0].mode == mode).count();
        let color = mode_color(mode).mix(1.0 / (1.0 + earlier as f64));
        // Open-loop points only, by offered load; the closed-loop point is marked apart.
        let open: Vec<&&SweepPoint> = group.iter().filter(|p| p.offered_per_sec.is_some()).collect();
        let p99: Vec<(f64, f64)> = open.iter().map(|p| (p.txn_per_sec, lat(p.p99_us))).collect();
        let p50: Vec<(f64, f64)> = open.iter().map(|p| (p.txn_per_sec, lat(p.p50_us))).collect();
        chart
            .draw_series(LineSeries::new(p99.clone(), color.stroke_width(2)))?
            .label(format!("{name} p99"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(p99.iter().map(|c| Circle::new(*c, SVG_POINT_PX, color.filled())))?;
        chart
            .draw_series(DashedLineSeries::new(p50.clone(), 6, 4, color.stroke_width(1)))?
            .label(format!("{name} p50"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(1)));
        chart.draw_series(p50.iter().map(|c| Circle::new(*c, SVG_POINT_PX - 1, color.stroke_width(1))))?;
        for p in group.iter().filter(|p| p.offered_per_sec.is_none()) {
            chart.draw_series(std::iter::once(Cross::new((p.txn_per_sec, lat(p.p99_us)), 6, color.stroke_width(2))))?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()?;
    root.present()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(mode: Mode, offered: Option<f64>, achieved: f64, p99_ms: f64) -> SweepPoint {
        let share = offered.map(|o| achieved / o);
        SweepPoint {
            series: format!("{mode} ×2"),
            mode,
            shipping: None,
            replicas: 2,
            offered_per_sec: offered,
            seconds: 5.0,
            committed: (achieved * 5.0) as u64,
            txn_per_sec: achieved,
            tpmc: achieved * 30.0,
            p50_us: p99_ms * 300.0,
            p95_us: p99_ms * 800.0,
            p99_us: p99_ms * 1000.0,
            max_us: p99_ms * 1500.0,
            achieved_share: share,
            sustained: None,
            checks_passed: true,
        }
    }

    fn example() -> Vec<SweepPoint> {
        let mut points = vec![
            point(Mode::ActiveActive, None, 9_000.0, 20.0),
            point(Mode::ActiveActive, Some(4_000.0), 4_000.0, 1.0),
            point(Mode::ActiveActive, Some(8_000.0), 7_990.0, 3.0),
            point(Mode::ActiveActive, Some(9_900.0), 9_000.0, 400.0),
            point(Mode::FullStack, None, 2_000.0, 50.0),
            point(Mode::FullStack, Some(1_000.0), 1_000.0, 4.0),
            point(Mode::FullStack, Some(2_200.0), 1_900.0, 900.0),
        ];
        judge(&mut points);
        points
    }

    #[test]
    fn the_first_offered_load_not_sustained_is_where_a_mode_breaks() {
        let points = example();
        let b = breaking_points(&points);
        assert_eq!(b[0].series, "full-stack ×2", "the full stack breaks first, at the lower load");
        assert_eq!(b[0].broke_at.unwrap().offered_per_sec, Some(2_200.0));
        assert_eq!(b[0].last_sustained.unwrap().offered_per_sec, Some(1_000.0));
        assert_eq!(b[1].broke_at.unwrap().offered_per_sec, Some(9_900.0));
        assert_eq!(b[1].last_sustained.unwrap().p99_us, 3_000.0);
        let text = render_table(&points);
        assert!(text.contains("full-stack ×2: sustains 1000 txn/s offered"), "{text}");
        assert!(text.contains("breaks at 2200 txn/s offered (1900 achieved, p99 900.0 ms)"), "{text}");
        assert!(text.contains("closed loop"), "{text}");
        let mut unbroken = [point(Mode::ActiveActive, Some(100.0), 100.0, 1.0)];
        judge(&mut unbroken);
        assert!(render_breaking(&unbroken).contains("does not break within the sweep"));
        // Every offered load achieved, but the queue grew: p99 from 10 ms to 150 ms.
        let mut queued = vec![
            point(Mode::FullStack, Some(1_000.0), 1_000.0, 10.0),
            point(Mode::FullStack, Some(1_500.0), 1_500.0, 90.0),
            point(Mode::FullStack, Some(2_000.0), 1_990.0, 150.0),
        ];
        judge(&mut queued);
        let b = breaking_points(&queued);
        assert_eq!(b[0].broke_at.unwrap().offered_per_sec, Some(2_000.0), "p99 beyond 10× the lowest");
        assert_eq!(b[0].last_sustained.unwrap().offered_per_sec, Some(1_500.0));
        // A miss below the highest sustained load (a checkpoint, a neighbour) is not the break.
        let mut dip = vec![
            point(Mode::FullStack, Some(300.0), 300.0, 20.0),
            point(Mode::FullStack, Some(700.0), 700.0, 210.0),
            point(Mode::FullStack, Some(1_100.0), 1_100.0, 13.0),
            point(Mode::FullStack, Some(1_500.0), 1_500.0, 215.0),
        ];
        judge(&mut dip);
        assert_eq!(dip[1].sustained, Some(false), "the dip itself is not sustained");
        let b = breaking_points(&dip);
        assert_eq!(b[0].last_sustained.unwrap().offered_per_sec, Some(1_100.0));
        assert_eq!(b[0].broke_at.unwrap().offered_per_sec, Some(1_500.0));
    }

    #[test]
    fn csv_json_and_svg_hold_every_point() {
        let points = example();
        let csv = to_csv(&points);
        assert_eq!(csv.lines().count(), 1 + points.len());
        assert!(csv.starts_with("series,mode,shipping,replicas,offered_per_sec,"));
        assert_eq!(to_json(&points)["points"].as_array().unwrap().len(), points.len());
        let path = std::env::temp_dir().join(format!("glass-sweep-{}.svg", std::process::id()));
        write_svg(&points, &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(svg.contains(X_LABEL) && svg.contains("active-active ×2 p99") && svg.contains("full-stack ×2 p50"));
        assert!(check_rates(&[100.0, 0.0]).is_err() && check_rates(&[1.0]).is_ok());
    }
}
