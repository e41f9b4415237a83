//! The PNG plots: decisions/s against concurrency, one curve per series (contender), with the
//! `redis-benchmark` ceiling and the target as horizontal lines; and latency percentiles
//! against concurrency, every quantile of the first series, p50 and p99 of the others.
//!
//! Text is drawn with `--font PATH`, else the font `testkit::font` finds.

use std::path::{Path, PathBuf};

use plotters::coord::types::RangedCoordf64;
use plotters::element::{DashedPathElement, ErrorBarOrientV};
use plotters::prelude::*;

use crate::args::Args;
use crate::report::{CEILING_TASKS, Level, QUANTILES, Summary, THROUGHPUT_TARGET};
use crate::stats::Spread;

const SIZE: (u32, u32) = (1100, 650);
const THEIRS: RGBColor = RGBColor(214, 39, 40);
/// The throughput plot's curves, one colour per series in order (red is the ceiling's).
const CURVES: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];
/// The latency plot's quantiles, one colour each.
const SERIES: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
];

type Error = Box<dyn std::error::Error>;

/// Draws both plots into `args.out`; returns their paths.
pub(crate) fn draw(args: &Args, summary: &Summary) -> Result<Vec<PathBuf>, Error> {
    testkit::font::register(args.font.as_deref())?;
    std::fs::create_dir_all(&args.out)?;
    let throughput = args.out.join(format!("{}-throughput.png", args.prefix));
    let latency = args.out.join(format!("{}-latency.png", args.prefix));
    let caption = format!(
        "median of {} runs, bars: min–max; {}",
        summary.runs,
        args.runtime_label()
    );
    draw_throughput(&throughput, summary, &caption)?;
    draw_latency(&latency, summary, &caption)?;
    Ok(vec![throughput, latency])
}

/// Concurrency is drawn on a log2 axis: x = log2(tasks).
fn x_of(tasks: usize) -> f64 {
    u32::try_from(tasks).map_or(0.0, |t| f64::from(t).log2())
}

/// Every level of every series.
fn all_levels(summary: &Summary) -> impl Iterator<Item = &Level> {
    summary.series.iter().flat_map(|s| &s.levels)
}

fn x_range(summary: &Summary) -> std::ops::Range<f64> {
    let last = all_levels(summary)
        .map(|l| x_of(l.tasks))
        .fold(0.0, f64::max);
    -0.4..last + 0.4
}

/// A min–max bar of `spread` at each level, `width` pixels wide.
fn bars(
    levels: &[Level],
    spread: impl Fn(&Level) -> Spread,
    color: RGBColor,
    width: u32,
) -> impl Iterator<Item = ErrorBar<f64, f64, ErrorBarOrientV<f64, f64>>> {
    levels.iter().map(move |l| {
        let v = spread(l);
        ErrorBar::new_vertical(
            x_of(l.tasks),
            v.min,
            v.median,
            v.max,
            color.stroke_width(2),
            width,
        )
    })
}

fn tasks_label(x: &f64) -> String {
    let t = 2f64.powf(*x).round();
    if (x - x.round()).abs() < 1e-9 {
        format!("{t}")
    } else {
        String::new()
    }
}

fn thousands_label(y: &f64) -> String {
    if *y >= 1000.0 {
        format!("{:.0}k", y / 1000.0)
    } else {
        format!("{y:.0}")
    }
}

fn draw_throughput(path: &Path, s: &Summary, caption: &str) -> Result<(), Error> {
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    // Room for every curve and for the target line.
    let top = all_levels(s)
        .map(|l| l.decisions_per_sec.max)
        .fold(s.ceiling_rps.max * THROUGHPUT_TARGET, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Decisions per second vs concurrency (one process, one Redis)",
            ("sans-serif", 26),
        )
        .margin(20)
        .x_label_area_size(60)
        .y_label_area_size(90)
        .build_cartesian_2d(x_range(s), 0.0..top)?;
    chart
        .configure_mesh()
        .x_labels(12)
        .x_label_formatter(&tasks_label)
        .y_label_formatter(&thousands_label)
        .x_desc(format!("concurrent tasks (log scale)   —   {caption}"))
        .y_desc("decisions (EVALSHA calls) per second")
        .axis_desc_style(("sans-serif", 18))
        .label_style(("sans-serif", 16))
        .draw()?;

    let (x0, x1) = (chart.x_range().start, chart.x_range().end);
    let c = s.ceiling_rps;
    chart.draw_series(std::iter::once(Rectangle::new(
        [(x0, c.min), (x1, c.max)],
        THEIRS.mix(0.15).filled(),
    )))?;
    chart
        .draw_series(LineSeries::new(
            [(x0, c.median), (x1, c.median)],
            THEIRS.stroke_width(3),
        ))?
        .label(format!(
            "redis-benchmark -c 50 -P 16, same script and keys (ceiling): {:.0}k/s",
            c.median / 1000.0
        ))
        .legend(|(x, y)| PathElement::new([(x, y), (x + 24, y)], THEIRS.stroke_width(3)));
    let target = c.median * THROUGHPUT_TARGET;
    chart
        .draw_series(DashedLineSeries::new(
            [(x0, target), (x1, target)],
            10,
            6,
            THEIRS.stroke_width(2),
        ))?
        .label(format!(
            "{THROUGHPUT_TARGET} × ceiling (target at {CEILING_TASKS} tasks)"
        ))
        .legend(|(x, y)| PathElement::new([(x, y), (x + 24, y)], THEIRS.stroke_width(1)));

    for (k, series) in s.series.iter().enumerate() {
        let color = CURVES[k % CURVES.len()];
        chart
            .draw_series(
                LineSeries::new(
                    series
                        .levels
                        .iter()
                        .map(|l| (x_of(l.tasks), l.decisions_per_sec.median)),
                    color.stroke_width(3),
                )
                .point_size(5),
            )?
            .label(series.legend.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 24, y)], color.stroke_width(3)));
        chart.draw_series(bars(&series.levels, |l| l.decisions_per_sec, color, 12))?;
        // The first series' figures above its points, the others' below theirs.
        let dy = if k == 0 { 0.035 } else { -0.01 };
        chart.draw_series(series.levels.iter().map(|l| {
            let v = l.decisions_per_sec;
            Text::new(
                format!("{:.0}k", v.median / 1000.0),
                (x_of(l.tasks) - 0.15, v.median + top * dy),
                ("sans-serif", 16).into_font().color(&color),
            )
        }))?;
    }
    legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    root.present()?;
    Ok(())
}

fn draw_latency(path: &Path, s: &Summary, caption: &str) -> Result<(), Error> {
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let lo = all_levels(s)
        .map(|l| l.latency_us[0].min)
        .fold(s.single_p50_us.min, f64::min)
        * 0.7;
    let hi = all_levels(s)
        .map(|l| l.latency_us[3].max)
        .fold(s.single_p99_us.max, f64::max)
        * 1.5;
    let mut chart = ChartBuilder::on(&root)
        .caption("Latency of one decision vs concurrency", ("sans-serif", 26))
        .margin(20)
        .x_label_area_size(60)
        .y_label_area_size(90)
        .build_cartesian_2d(x_range(s), (lo.max(1.0)..hi).log_scale())?;
    chart
        .configure_mesh()
        .x_labels(12)
        .x_label_formatter(&tasks_label)
        .y_labels(30)
        .y_label_formatter(&|y: &f64| format!("{y:.0}"))
        .x_desc(format!("concurrent tasks (log scale)   —   {caption}"))
        .y_desc("latency, µs (log scale)")
        .axis_desc_style(("sans-serif", 18))
        .label_style(("sans-serif", 16))
        .draw()?;

    for (k, series) in s.series.iter().enumerate() {
        for (i, (_, name)) in QUANTILES.iter().enumerate() {
            // Every quantile of the first series; p50 and p99, dashed, of the others.
            if k > 0 && !matches!(*name, "p50" | "p99") {
                continue;
            }
            let color = SERIES[i];
            let points: Vec<(f64, f64)> = series
                .levels
                .iter()
                .map(|l| (x_of(l.tasks), l.latency_us[i].median))
                .collect();
            let label = format!("{} {name}", series.label);
            if k == 0 {
                chart
                    .draw_series(LineSeries::new(points, color.stroke_width(3)).point_size(4))?
                    .label(label)
                    .legend(move |(x, y)| {
                        PathElement::new([(x, y), (x + 24, y)], color.stroke_width(3))
                    });
            } else {
                chart.draw_series(
                    points
                        .iter()
                        .map(|&p| Circle::new(p, 4, color.stroke_width(2))),
                )?;
                chart
                    .draw_series(DashedLineSeries::new(points, 8, 5, color.stroke_width(2)))?
                    .label(label)
                    .legend(move |(x, y)| {
                        DashedPathElement::new([(x, y), (x + 24, y)], 5, 3, color.stroke_width(2))
                    });
            }
            chart.draw_series(bars(&series.levels, |l| l.latency_us[i], color, 10))?;
        }
    }
    let p50 = s.single_p50_us;
    chart
        .draw_series(std::iter::once(Cross::new(
            (0.0, p50.median),
            9,
            THEIRS.stroke_width(3),
        )))?
        .label(format!(
            "redis-benchmark -c 1 p50 (same script): {:.0} µs",
            p50.median
        ))
        .legend(|(x, y)| Cross::new((x + 12, y), 6, THEIRS.stroke_width(3)));
    let first = s.series.first();
    if let Some((series, level)) =
        first.and_then(|f| Some((f, f.levels.first().filter(|l| l.tasks == 1)?)))
    {
        chart.draw_series(std::iter::once(Text::new(
            format!("{} p50 {:.0} µs", series.label, level.latency_us[0].median),
            (0.2, level.latency_us[0].median * 0.86),
            ("sans-serif", 16).into_font().color(&SERIES[0]),
        )))?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present()?;
    Ok(())
}

fn legend<'a, Y: Ranged<ValueType = f64>>(
    chart: &mut ChartContext<'a, BitMapBackend<'a>, Cartesian2d<RangedCoordf64, Y>>,
    position: SeriesLabelPosition,
) -> Result<(), Error> {
    chart
        .configure_series_labels()
        .position(position)
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
