//! The `--svg` picture of `glass breakdown`: three pairs of stacked bars — for Payment and
//! for NewOrder glass's share of each component beside the paper's Figures 5 and 6, and for
//! NewOrder glass's time shares beside the paper's cycle shares (Figure 8).
//!
//! Owns the drawing only (plotters, SVG backend, no font files). Guarantees: the first two
//! pairs are the component rows of the report, instruction shares when instructions were
//! counted and time shares otherwise (the title says which); the third pair is the report's
//! Figure 8 rows (time without the log flush, always); a negative share (a step that added
//! work) is drawn as an empty segment and named in the segment label list rather than hidden.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use engine::procedures::TxnKind;

use super::{Breakdown, Source, MEASURED};

const WIDTH_PX: u32 = 1250;
const HEIGHT_PX: u32 = 600;
const LEGEND_PX: u32 = 230;

/// One colour per component, then the remaining kernel (the paper's grey).
const COLORS: [RGBColor; 6] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xba, 0xb0, 0xac),
];

/// (label, glass share, paper share) per segment, bottom first.
type Segments = Vec<(&'static str, f64, f64)>;

/// NewOrder's time shares beside Figure 8, in the components' order (same colours).
fn figure8_segments(b: &Breakdown) -> Segments {
    b.figure8_time_shares
        .iter()
        .filter(|t| t.txn == TxnKind::NewOrder.name())
        .map(|t| (t.category, t.time_share_pct, t.paper_pct.unwrap_or(0.0)))
        .collect()
}

fn segments(b: &Breakdown, txn: &str, use_instructions: bool) -> Segments {
    b.components
        .iter()
        .filter(|c| c.txn == txn && c.paper_pct.is_some())
        .map(|c| {
            let glass = if use_instructions { c.instructions_share_pct.unwrap_or(0.0) } else { c.time_share_pct };
            (c.component, glass, c.paper_pct.unwrap_or(0.0))
        })
        .collect()
}

/// Why drawing failed (plotters' error over the SVG file's I/O).
pub type DrawError = DrawingAreaErrorKind<std::io::Error>;

/// Draws the picture of `b` into `path` (an SVG file).
pub fn draw(b: &Breakdown, path: &Path) -> Result<(), DrawError> {
    let use_instructions = b.source != Source::None;
    let root = SVGBackend::new(path, (WIDTH_PX, HEIGHT_PX)).into_drawing_area();
    root.fill(&WHITE)?;
    let what = if use_instructions {
        format!("instructions ({})", b.source.name())
    } else {
        "time (no instruction counts)".to_string()
    };
    let root = root.titled(
        &format!(
            "Share of the full stack removed per component, glass vs the paper: {what} (Figures 5, 6); \
             NewOrder time vs cycles (Figure 8)"
        ),
        ("sans-serif", 17),
    )?;
    let (charts, legend) = root.split_horizontally(WIDTH_PX - LEGEND_PX);
    let panels = charts.split_evenly((1, 3));
    let mut negatives = Vec::new();
    let mut note_negatives = |what: &str, segs: &Segments| {
        for (name, glass, _) in segs {
            if *glass < 0.0 {
                negatives.push(format!("{what} {name} {glass:.1}%"));
            }
        }
    };
    for (panel, kind) in panels.iter().zip(MEASURED) {
        let segs = segments(b, kind.name(), use_instructions);
        note_negatives(kind.name(), &segs);
        let caption = match kind {
            TxnKind::Payment => "Payment (Figure 5)",
            _ => "NewOrder (Figure 6)",
        };
        draw_panel(panel, caption, &segs)?;
    }
    let segs = figure8_segments(b);
    note_negatives("neworder time", &segs);
    draw_panel(&panels[2], "NewOrder time (Figure 8)", &segs)?;
    draw_legend(&legend, &negatives)?;
    root.present()
}

fn draw_panel(area: &DrawingArea<SVGBackend<'_>, Shift>, caption: &str, segs: &Segments) -> Result<(), DrawError> {
    let top = |f: fn(&(&'static str, f64, f64)) -> f64| segs.iter().map(|s| f(s).max(0.0)).sum::<f64>();
    let y_max = top(|s| s.1).max(top(|s| s.2)).max(100.0);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(45)
        .build_cartesian_2d((0u32..1u32).into_segmented(), 0.0..y_max)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(TRANSPARENT)
        .y_desc("% of the full stack")
        .y_label_formatter(&|v| format!("{v:.0}%"))
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(0) => "glass".to_string(),
            SegmentValue::CenterOf(1) => "paper".to_string(),
            _ => String::new(),
        })
        .draw()?;
    let label_style = ("sans-serif", 12).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Center));
    for bar in 0..2u32 {
        let mut base = 0.0;
        for (i, seg) in segs.iter().enumerate() {
            let value = if bar == 0 { seg.1 } else { seg.2 };
            let h = value.max(0.0);
            if h > 0.0 {
                let mut rect = Rectangle::new(
                    [(SegmentValue::Exact(bar), base), (SegmentValue::Exact(bar + 1), base + h)],
                    COLORS[i % COLORS.len()].filled(),
                );
                rect.set_margin(0, 0, 28, 28);
                chart.draw_series(std::iter::once(rect))?;
                if h >= 3.0 {
                    let text = Text::new(
                        format!("{value:.1}%"),
                        (SegmentValue::CenterOf(bar), base + h / 2.0),
                        label_style.clone(),
                    );
                    chart.draw_series(std::iter::once(text))?;
                }
            }
            base += h;
        }
    }
    Ok(())
}

fn draw_legend(area: &DrawingArea<SVGBackend<'_>, Shift>, negatives: &[String]) -> Result<(), DrawError> {
    const NAMES: [&str; 6] =
        ["B-tree keys", "logging", "locking", "latching", "buffer manager / pool", "remaining / useful work"];
    let style = ("sans-serif", 13).into_font().color(&BLACK);
    let mut y = 60;
    // Top of the stack first, as the bars read.
    for (i, name) in NAMES.iter().enumerate().rev() {
        area.draw(&Rectangle::new([(10, y), (26, y + 14)], COLORS[i].filled()))?;
        area.draw(&Text::new(name.to_string(), (34, y), style.clone()))?;
        y += 24;
    }
    if !negatives.is_empty() {
        y += 12;
        area.draw(&Text::new("negative (drawn empty):".to_string(), (10, y), style.clone()))?;
        for n in negatives {
            y += 18;
            area.draw(&Text::new(n.clone(), (10, y), style.clone()))?;
        }
    }
    Ok(())
}
