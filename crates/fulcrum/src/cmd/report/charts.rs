//! PNG charts: lines over training steps (a mean line per series with a shaded band) and a
//! scatter with error bars and a fitted line. Every chart has a title, axis labels and a legend.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::font::FAMILY;

/// Chart size in pixels: small enough to embed many, large enough to read.
pub const SIZE: (u32, u32) = (760, 420);

/// How a series' line is drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Dash {
    Solid,
    Dashed,
    Thin,
}

/// One line: mean points, with an optional band (low, high) at the same x.
#[derive(Debug, Clone)]
pub struct Series {
    pub label: String,
    pub color: RGBColor,
    pub dash: Dash,
    pub points: Vec<(f64, f64)>,
    pub band: Vec<(f64, f64, f64)>,
}

impl Series {
    /// A rule's solid line in the rule's colour.
    pub fn solid(rule: &str, points: Vec<(f64, f64)>, band: Vec<(f64, f64, f64)>) -> Self {
        Series {
            label: rule.to_string(),
            color: rule_color(rule),
            dash: Dash::Solid,
            points,
            band,
        }
    }
}

/// Colours by rule, fixed so that a rule looks the same on every chart (grey for a label that
/// names no rule). In a grid over losses (labels `rule+loss`) the colour is the loss's: the
/// rules of one loss then share it, so such grids are best drawn one rule at a time.
pub fn rule_color(rule: &str) -> RGBColor {
    if let Some(loss) = crate::results::arm::Arm::parse(rule).loss {
        let Ok(loss) = loss.parse::<fulcrum_core::PolicyLoss>() else {
            return RGBColor(90, 90, 90);
        };
        const PALETTE: [RGBColor; 7] = [
            RGBColor(44, 160, 44),
            RGBColor(31, 119, 180),
            RGBColor(255, 127, 14),
            RGBColor(214, 39, 40),
            RGBColor(148, 103, 189),
            RGBColor(140, 86, 75),
            RGBColor(23, 190, 207),
        ];
        let k = fulcrum_core::PolicyLoss::ALL
            .iter()
            .position(|&l| l == loss)
            .unwrap_or(0);
        return PALETTE[k % PALETTE.len()];
    }
    let Ok(rule) = rule.parse::<fulcrum_core::Rule>() else {
        return RGBColor(90, 90, 90);
    };
    use fulcrum_core::Rule;
    match rule {
        Rule::Token => RGBColor(31, 119, 180),
        Rule::Seq => RGBColor(255, 127, 14),
        Rule::Ba => RGBColor(44, 160, 44),
        Rule::TokenGroup => RGBColor(148, 103, 189),
        Rule::DrGrpo => RGBColor(214, 39, 40),
        Rule::SeqSum => RGBColor(140, 86, 75),
        Rule::BaBatch => RGBColor(23, 190, 207),
    }
}

fn plot_err<E: std::fmt::Debug>(path: &Path) -> impl Fn(E) -> anyhow::Error + '_ {
    move |e| anyhow!("drawing {}: {e:?}", path.display())
}

/// `lo..hi` padded by 5%, widened when flat, so every point is inside.
fn padded(lo: f64, hi: f64) -> (f64, f64) {
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    let span = hi - lo;
    let pad = if span > 0.0 {
        0.05 * span
    } else {
        lo.abs().max(1.0) * 0.05
    };
    (lo - pad, hi + pad)
}

fn area(path: &Path) -> DrawingArea<BitMapBackend<'_>, Shift> {
    BitMapBackend::new(path, SIZE).into_drawing_area()
}

type Chart<'a, 'p> =
    ChartContext<'a, BitMapBackend<'p>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// What every chart shares: white canvas, title, axes with their labels, light grid.
fn frame<'a, 'p>(
    root: &'a DrawingArea<BitMapBackend<'p>, Shift>,
    path: &Path,
    title: &str,
    (x_label, y_label): (&str, &str),
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
) -> Result<Chart<'a, 'p>> {
    let err = plot_err(path);
    root.fill(&WHITE).map_err(&err)?;
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FAMILY, 22))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(&err)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 16))
        .light_line_style(RGBColor(235, 235, 235))
        .y_label_formatter(&|v| trim(*v))
        .x_label_formatter(&|v| trim(*v))
        .draw()
        .map_err(&err)?;
    Ok(chart)
}

/// An axis value without float noise: up to 4 decimals with no trailing zeros, and scientific
/// notation for values too small or large for that (a clip fraction of 2e-5 must not read 0).
fn trim(v: f64) -> String {
    let a = v.abs();
    // -0, and tick positions computed as multiples that miss zero by rounding error.
    if a < 1e-12 {
        return "0".into();
    }
    if !(1e-3..1e7).contains(&a) {
        return format!("{v:.2e}");
    }
    let s = format!("{v:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Draws the legend and writes the file.
fn finish<'a, 'p: 'a>(
    mut chart: Chart<'a, 'p>,
    root: &DrawingArea<BitMapBackend<'p>, Shift>,
    path: &Path,
) -> Result<bool> {
    let err = plot_err(path);
    chart
        .configure_series_labels()
        .label_font((FAMILY, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(160, 160, 160))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(&err)?;
    root.present().map_err(&err)?;
    Ok(true)
}

/// A line chart over steps. Returns false (and writes nothing) when no series has a point.
pub fn lines(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<bool> {
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = series.iter().flat_map(|s| {
        s.points
            .iter()
            .map(|p| p.1)
            .chain(s.band.iter().flat_map(|b| [b.1, b.2]))
    });
    let (x0, x1) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |a, x| {
        (a.0.min(x), a.1.max(x))
    });
    let (y0, y1) = ys.fold((f64::INFINITY, f64::NEG_INFINITY), |a, y| {
        (a.0.min(y), a.1.max(y))
    });
    if !x0.is_finite() {
        return Ok(false);
    }
    let (x0, x1) = if x1 > x0 {
        (x0, x1)
    } else {
        (x0 - 1.0, x1 + 1.0)
    };
    let (y0, y1) = padded(y0, y1);
    let err = plot_err(path);
    let root = area(path);
    let mut chart = frame(&root, path, title, (x_label, y_label), (x0, x1), (y0, y1))?;
    for s in series.iter().filter(|s| s.band.len() >= 2) {
        let mut poly: Vec<(f64, f64)> = s.band.iter().map(|b| (b.0, b.2)).collect();
        poly.extend(s.band.iter().rev().map(|b| (b.0, b.1)));
        chart
            .draw_series(std::iter::once(Polygon::new(
                poly,
                s.color.mix(0.18).filled(),
            )))
            .map_err(&err)?;
    }
    for s in series.iter().filter(|s| !s.points.is_empty()) {
        let (color, width) = (s.color, if s.dash == Dash::Thin { 1 } else { 2 });
        let style = color.stroke_width(width);
        if s.points.len() == 1 {
            // A line through one point draws nothing: mark it.
            chart
                .draw_series(s.points.iter().map(|p| Circle::new(*p, 3, color.filled())))
                .map_err(&err)?;
        }
        let drawn = match s.dash {
            Dash::Dashed => chart
                .draw_series(DashedLineSeries::new(s.points.clone(), 6, 4, style))
                .map_err(&err)?,
            _ => chart
                .draw_series(LineSeries::new(s.points.clone(), style))
                .map_err(&err)?,
        };
        let dash = s.dash;
        drawn.label(s.label.clone()).legend(move |(x, y)| {
            let pts = if dash == Dash::Dashed {
                vec![(x, y), (x + 8, y)]
            } else {
                vec![(x, y), (x + 20, y)]
            };
            PathElement::new(pts, color.stroke_width(width))
        });
    }
    finish(chart, &root, path)
}

/// A labelled point with an error bar (half-width) for the scatter.
#[derive(Debug, Clone)]
pub struct Point {
    pub label: String,
    pub x: f64,
    pub y: f64,
    pub err: Option<f64>,
}

/// A scatter of `points` with error bars and the fitted line `y = a + b x`.
pub fn scatter(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    points: &[Point],
    fit: Option<(f64, f64, f64)>,
) -> Result<bool> {
    if points.is_empty() {
        return Ok(false);
    }
    let fold = |f: &dyn Fn(&Point) -> [f64; 2]| {
        points
            .iter()
            .flat_map(f)
            .fold((f64::INFINITY, f64::NEG_INFINITY), |a, v| {
                (a.0.min(v), a.1.max(v))
            })
    };
    let (x0, x1) = padded(fold(&|p| [p.x, p.x]).0, fold(&|p| [p.x, p.x]).1);
    let (y0, y1) = fold(&|p| {
        let e = p.err.unwrap_or(0.0);
        [p.y - e, p.y + e]
    });
    let (y0, y1) = padded(y0.min(0.0), y1.max(0.0));
    let err = plot_err(path);
    let root = area(path);
    let mut chart = frame(&root, path, title, (x_label, y_label), (x0, x1), (y0, y1))?;
    let zero = RGBColor(150, 150, 150);
    chart
        .draw_series(LineSeries::new(
            [(x0, 0.0), (x1, 0.0)],
            zero.stroke_width(1),
        ))
        .map_err(&err)?;
    let blue = RGBColor(31, 119, 180);
    chart
        .draw_series(points.iter().filter_map(|p| {
            let e = p.err?;
            Some(PathElement::new(
                [(p.x, p.y - e), (p.x, p.y + e)],
                blue.stroke_width(1),
            ))
        }))
        .map_err(&err)?;
    chart
        .draw_series(
            points
                .iter()
                .map(|p| Circle::new((p.x, p.y), 5, blue.filled())),
        )
        .map_err(&err)?
        .label("setting (mean, 95% CI over seeds)")
        .legend(move |(x, y)| Circle::new((x + 10, y), 5, blue.filled()));
    chart
        .draw_series(points.iter().map(|p| {
            Text::new(
                p.label.clone(),
                (p.x, p.y),
                (FAMILY, 13).into_font().color(&BLACK),
            )
        }))
        .map_err(&err)?;
    if let Some((a, b, r2)) = fit {
        let red = RGBColor(214, 39, 40);
        chart
            .draw_series(LineSeries::new(
                [(x0, a + b * x0), (x1, a + b * x1)],
                red.stroke_width(2),
            ))
            .map_err(&err)?
            .label(format!("fit: {a:.3} {b:+.3} x  (R² {r2:.2})"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], red.stroke_width(2)));
    }
    finish(chart, &root, path)
}

#[cfg(test)]
mod tests {
    use super::trim;

    #[test]
    fn axis_labels_read_as_numbers() {
        assert_eq!(trim(-0.0), "0");
        assert_eq!(trim(5.5e-17), "0");
        assert_eq!(trim(10.0), "10");
        assert_eq!(trim(0.25), "0.25");
        assert_eq!(trim(-0.02), "-0.02");
        assert_eq!(trim(1.0 / 3.0), "0.3333");
        assert_eq!(trim(2e-5), "2.00e-5");
        assert_eq!(trim(3.5e8), "3.50e8");
    }
}
