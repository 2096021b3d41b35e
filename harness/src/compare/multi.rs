//! The curve of `glass compare --multi-partition 0,10,20,50`: for each mode compared, NewOrder
//! throughput as the share of multi-partition NewOrders grows — the figure H-Store's authors
//! drew to show what distributed transactions cost a partitioned main-memory system. Owns
//! [`CurvePoint`] (one run: a mode at one share) and its four renderings: a terminal table
//! ([`render_table`]), CSV ([`to_csv`]), JSON ([`to_json`]) and an SVG line chart
//! ([`write_svg`], plotters' SVG backend like the comparison's bars), and the three files
//! they are written to ([`write_files`]).
//!
//! Guarantees:
//! - every rendering shows every point; the table and the chart group points into series (a
//!   mode at a replication factor, [`CompareRow::series`]) in order of first appearance, and
//!   order each series by share, ascending; CSV and JSON keep the points' order;
//! - the CSV header names are [`CurvePoint`]'s serde field names, so CSV and JSON agree;
//! - the chart's x axis is the percent of NewOrders forced multi-partition, its y axis
//!   committed NewOrders per second, one line per series, each named in the legend.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde::{Deserialize, Serialize};
use wire::config::{Mode, Shipping};

use super::{csv_table, mode_color, ms, CompareRow, CsvColumn, SvgError, MISSING};
use crate::error::HarnessError;

/// The stem of the curve's files (`.json`, `.csv`, `.svg`), written next to the comparison's.
pub const FILE_STEM: &str = "compare-multi-partition";
/// The curve's three files (`FILE_STEM` with `.json`, `.csv`, `.svg`).
pub const FILE_STEM_FILES: [&str; 3] =
    ["compare-multi-partition.json", "compare-multi-partition.csv", "compare-multi-partition.svg"];

/// The x axis' label.
pub const X_LABEL: &str = "multi-partition NewOrders (%)";
/// The y axis' label.
pub const Y_LABEL: &str = "NewOrder throughput (commits/s)";

const SVG_WIDTH_PX: u32 = 1000;
const SVG_HEIGHT_PX: u32 = 600;
/// Room above the highest point, as a fraction of it.
const SVG_HEADROOM: f64 = 0.15;
/// Radius of a point's marker.
const SVG_POINT_PX: i32 = 4;

/// One run of the curve: a mode at one share of multi-partition NewOrders.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    /// The line this point belongs to: mode, shipping, replication factor
    /// (e.g. "active-passive (sync) ×2").
    pub series: String,
    pub mode: Mode,
    pub shipping: Option<Shipping>,
    pub replicas: usize,
    /// Percent of NewOrders forced multi-partition.
    pub multi_partition_pct: u32,
    /// Measured seconds.
    pub seconds: f64,
    pub committed: u64,
    /// Committed transactions per second, every type.
    pub txn_per_sec: f64,
    /// Committed NewOrders per second: the curve's y.
    pub neworder_per_sec: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub committed_single_partition: u64,
    pub committed_multi_partition: u64,
    /// Replica digests equal, TPC-C consistent and replica reads matching.
    pub checks_passed: bool,
}

impl CurvePoint {
    /// The point of a `--multi-partition` run (`None` for a run without a share).
    pub fn of(r: &CompareRow) -> Option<CurvePoint> {
        Some(CurvePoint {
            series: r.series(),
            mode: r.mode,
            shipping: r.shipping,
            replicas: r.replicas,
            multi_partition_pct: r.multi_partition_pct?,
            seconds: r.seconds,
            committed: r.committed,
            txn_per_sec: r.txn_per_sec,
            neworder_per_sec: r.neworder_per_sec,
            p50_us: r.p50_us,
            p99_us: r.p99_us,
            committed_single_partition: r.committed_single_partition,
            committed_multi_partition: r.committed_multi_partition,
            checks_passed: r.checks_passed(),
        })
    }
}

/// The points grouped by series (first appearance), each sorted by share.
fn series(points: &[CurvePoint]) -> Vec<(&str, Vec<&CurvePoint>)> {
    let mut out: Vec<(&str, Vec<&CurvePoint>)> = Vec::new();
    for p in points {
        match out.iter_mut().find(|(s, _)| *s == p.series) {
            Some((_, v)) => v.push(p),
            None => out.push((&p.series, vec![p])),
        }
    }
    for (_, v) in &mut out {
        v.sort_by_key(|p| p.multi_partition_pct);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Terminal table
// ---------------------------------------------------------------------------------------------

type Cell = CsvColumn<CurvePoint>;

const TABLE_COLUMNS: [Cell; 7] = [
    ("multi-partition (%)", |p| p.multi_partition_pct.to_string()),
    ("txn/s", |p| format!("{:.0}", p.txn_per_sec)),
    ("NewOrder commits/s", |p| format!("{:.0}", p.neworder_per_sec)),
    ("p50 (ms)", |p| ms(p.p50_us)),
    ("p99 (ms)", |p| ms(p.p99_us)),
    ("single-partition commits", |p| p.committed_single_partition.to_string()),
    ("multi-partition commits", |p| p.committed_multi_partition.to_string()),
];

/// The curve as a fixed-width table: one block per series, one line per share, then one
/// line per run whose checks failed.
pub fn render_table(points: &[CurvePoint]) -> String {
    let mut out = String::new();
    if points.is_empty() {
        out.push_str("no multi-partition runs\n");
        return out;
    }
    let groups = series(points);
    let name_width = groups.iter().map(|(s, _)| s.chars().count()).chain([MISSING.len()]).max().unwrap_or(0);
    let widths: Vec<usize> = TABLE_COLUMNS
        .iter()
        .map(|(head, cell)| {
            points.iter().map(|p| cell(p).chars().count()).chain([head.chars().count()]).max().unwrap_or(0)
        })
        .collect();
    let _ = write!(out, "{:<name_width$}", "");
    for ((head, _), w) in TABLE_COLUMNS.iter().zip(&widths) {
        let _ = write!(out, "   {head:>w$}");
    }
    out.push('\n');
    for (name, group) in &groups {
        for (i, p) in group.iter().enumerate() {
            let shown = if i == 0 { *name } else { "" };
            let _ = write!(out, "{shown:<name_width$}");
            for ((_, cell), w) in TABLE_COLUMNS.iter().zip(&widths) {
                let _ = write!(out, "   {:>w$}", cell(p));
            }
            out.push('\n');
        }
    }
    let failed: Vec<&CurvePoint> = points.iter().filter(|p| !p.checks_passed).collect();
    if failed.is_empty() {
        out.push_str("\nchecks: every run consistent, replica digests equal\n");
    } else {
        out.push_str("\nCHECKS FAILED:\n");
        for p in failed {
            let _ = writeln!(out, "  {} at {}% multi-partition", p.series, p.multi_partition_pct);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// CSV and JSON
// ---------------------------------------------------------------------------------------------

const CSV_COLUMNS: [Cell; 14] = [
    ("series", |p| p.series.clone()),
    ("mode", |p| p.mode.name().to_string()),
    ("shipping", |p| p.shipping.map(|s| s.name().to_string()).unwrap_or_default()),
    ("replicas", |p| p.replicas.to_string()),
    ("multi_partition_pct", |p| p.multi_partition_pct.to_string()),
    ("seconds", |p| p.seconds.to_string()),
    ("committed", |p| p.committed.to_string()),
    ("txn_per_sec", |p| p.txn_per_sec.to_string()),
    ("neworder_per_sec", |p| p.neworder_per_sec.to_string()),
    ("p50_us", |p| p.p50_us.to_string()),
    ("p99_us", |p| p.p99_us.to_string()),
    ("committed_single_partition", |p| p.committed_single_partition.to_string()),
    ("committed_multi_partition", |p| p.committed_multi_partition.to_string()),
    ("checks_passed", |p| p.checks_passed.to_string()),
];

/// The points as CSV: a header of the serde field names, one line per point in the order
/// given; `None` is an empty field, numbers at full precision, lines end with `\n`.
pub fn to_csv(points: &[CurvePoint]) -> String {
    csv_table(&CSV_COLUMNS, points)
}

/// The points as a JSON array of objects, in the order given.
pub fn to_json(points: &[CurvePoint]) -> serde_json::Value {
    serde_json::Value::Array(
        points.iter().map(|p| serde_json::to_value(p).expect("a struct of plain fields serialises")).collect(),
    )
}

/// Writes the curve of `rows` (those with a share) into `dir`, created if need be, as the
/// `files` JSON, CSV and SVG (in that order), announcing each to `wrote` once written.
pub fn write_files(
    rows: &[CompareRow],
    dir: &Path,
    files: &[PathBuf; 3],
    wrote: &mut dyn FnMut(&Path),
) -> crate::Result<()> {
    let points: Vec<CurvePoint> = rows.iter().filter_map(CurvePoint::of).collect();
    std::fs::create_dir_all(dir).map_err(|e| HarnessError::io(format!("create {}", dir.display()), e))?;
    let [json, csv, svg] = files;
    crate::record::write_json(json, &to_json(&points))?;
    wrote(json);
    crate::record::write(csv, to_csv(&points).as_bytes())?;
    wrote(csv);
    write_svg(&points, svg)?;
    wrote(svg);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// SVG
// ---------------------------------------------------------------------------------------------

/// Draws the curve into `path` (an SVG file): x = percent of NewOrders forced
/// multi-partition, y = committed NewOrders per second, one line with point markers per
/// series, coloured by mode (lighter for a mode's later series), named in the legend.
pub fn write_svg(points: &[CurvePoint], path: &Path) -> Result<(), SvgError> {
    if points.is_empty() {
        return Err(SvgError::NoRows);
    }
    draw(points, path).map_err(|source| SvgError::Draw { path: path.to_path_buf(), source })
}

fn draw(points: &[CurvePoint], path: &Path) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    let root = SVGBackend::new(path, (SVG_WIDTH_PX, SVG_HEIGHT_PX)).into_drawing_area();
    root.fill(&WHITE)?;
    let x_max = f64::from(points.iter().map(|p| p.multi_partition_pct).max().unwrap_or(0).max(1));
    let y_top = points.iter().map(|p| p.neworder_per_sec).filter(|v| v.is_finite()).fold(0.0, f64::max);
    let y_max = if y_top > 0.0 { y_top * (1.0 + SVG_HEADROOM) } else { 1.0 };
    let mut chart = ChartBuilder::on(&root)
        .caption("glass compare: NewOrder throughput against multi-partition NewOrders", ("sans-serif", 20))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .x_desc(X_LABEL)
        .y_desc(Y_LABEL)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()?;
    let groups = series(points);
    for (i, (name, group)) in groups.iter().enumerate() {
        let mode = group[0].mode;
        // A mode's later series (other replication factors) in lighter shades of its colour.
        let earlier = groups[..i].iter().filter(|(_, g)| g[0].mode == mode).count();
        let color = mode_color(mode).mix(1.0 / (1.0 + earlier as f64));
        let xy: Vec<(f64, f64)> = group
            .iter()
            .map(|p| {
                (
                    f64::from(p.multi_partition_pct),
                    if p.neworder_per_sec.is_finite() { p.neworder_per_sec } else { 0.0 },
                )
            })
            .collect();
        chart
            .draw_series(LineSeries::new(xy.clone(), color.stroke_width(2)))?
            .label(name.to_string())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(xy.into_iter().map(|c| Circle::new(c, SVG_POINT_PX, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()?;
    root.present()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(mode: Mode, replicas: usize, pct: u32, neworder_per_sec: f64) -> CurvePoint {
        let series = format!("{mode} ×{replicas}");
        CurvePoint {
            series,
            mode,
            shipping: None,
            replicas,
            multi_partition_pct: pct,
            seconds: 10.0,
            committed: (neworder_per_sec * 20.0) as u64,
            txn_per_sec: neworder_per_sec * 2.0,
            neworder_per_sec,
            p50_us: 900.0 + f64::from(pct) * 10.0,
            p99_us: 4_000.0 + f64::from(pct) * 100.0,
            committed_single_partition: (neworder_per_sec * 20.0) as u64 - u64::from(pct) * 10,
            committed_multi_partition: u64::from(pct) * 10,
            checks_passed: true,
        }
    }

    /// Two modes over the shares 0, 10, 20, 50, given out of order.
    fn example() -> Vec<CurvePoint> {
        let mut v = Vec::new();
        for pct in [50, 0, 20, 10] {
            v.push(point(Mode::ActiveActive, 2, pct, 8_000.0 - f64::from(pct) * 100.0));
            v.push(point(Mode::FullStack, 2, pct, 2_000.0 - f64::from(pct) * 20.0));
        }
        v
    }

    #[test]
    fn table_shows_every_mode_and_share_sorted() {
        let table = render_table(&example());
        for head in ["multi-partition (%)", "NewOrder commits/s", "p99 (ms)", "single-partition commits"] {
            assert!(table.contains(head), "{head} missing:\n{table}");
        }
        assert!(table.contains("active-active ×2") && table.contains("full-stack ×2"), "{table}");
        let aa: Vec<&str> = table.lines().skip(1).take(4).collect();
        let shares: Vec<u32> = aa.iter().map(|l| l.split_whitespace().rev().nth(6).unwrap().parse().unwrap()).collect();
        assert_eq!(shares, [0, 10, 20, 50], "{table}");
        assert!(table.contains("3000"), "NewOrder commits/s at 50%:\n{table}");
        assert!(table.contains("checks: every run consistent"));
        let widths: Vec<usize> = table.lines().take(9).map(|l| l.chars().count()).collect();
        assert!(widths.iter().all(|w| *w == widths[0]), "{widths:?}\n{table}");
    }

    #[test]
    fn table_names_failed_checks() {
        let mut points = example();
        points[2].checks_passed = false;
        let table = render_table(&points);
        assert!(table.contains("CHECKS FAILED") && table.contains("active-active ×2 at 0% multi-partition"));
        assert_eq!(render_table(&[]), "no multi-partition runs\n");
    }

    #[test]
    fn csv_and_json_hold_every_point_with_the_serde_names() {
        let points = example();
        let csv = to_csv(&points);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 1 + points.len());
        let mut header: Vec<&str> = lines[0].split(',').collect();
        let json = to_json(&points);
        let mut fields: Vec<String> = json[0].as_object().unwrap().keys().cloned().collect();
        header.sort_unstable();
        fields.sort();
        assert_eq!(header, fields);
        assert!(lines[1].starts_with("active-active ×2,active-active,,2,50,"), "{}", lines[1]);
        for pct in [0, 10, 20, 50] {
            let n = json.as_array().unwrap().iter().filter(|o| o["multi_partition_pct"] == pct).count();
            assert_eq!(n, 2, "both modes at {pct}%");
        }
        assert_eq!(json[0]["neworder_per_sec"], 3_000.0);
    }

    #[test]
    fn points_come_from_multi_partition_rows_only() {
        let rows = crate::compare::tests::example();
        assert!(rows.iter().all(|r| CurvePoint::of(r).is_none()));
        let mut r = rows[4].clone();
        r.multi_partition_pct = Some(20);
        r.committed_multi_partition = 7;
        let p = CurvePoint::of(&r).unwrap();
        assert_eq!((p.multi_partition_pct, p.committed_multi_partition), (20, 7));
        assert_eq!(p.series, "active-passive (async) ×2");
        assert_eq!(r.label(), "active-passive (async) ×2, 20% multi-partition");
        assert!(p.checks_passed);
    }

    #[test]
    fn svg_has_labelled_axes_a_line_per_mode_and_a_legend() {
        let path = std::env::temp_dir().join(format!("glass-{FILE_STEM}-{}.svg", std::process::id()));
        write_svg(&example(), &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(svg.contains("<svg"));
        assert!(svg.contains(X_LABEL) && svg.contains(Y_LABEL), "axis labels");
        assert!(svg.contains("active-active ×2") && svg.contains("full-stack ×2"), "legend");
        let lines = svg.lines().filter(|l| l.starts_with("<polyline") && l.contains("stroke-width=\"2\"")).count();
        assert_eq!(lines, 2 + 2, "one line per series plus the legend's");
        assert_eq!(svg.matches("<circle").count(), example().len(), "one marker per point");
        for tick in ["50", "0"] {
            assert!(svg.lines().any(|l| l.trim() == tick), "x tick {tick}");
        }
        assert!(matches!(write_svg(&[], &path), Err(SvgError::NoRows)));
    }
}
