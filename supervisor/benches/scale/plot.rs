//! The scale bench's chart: the Bash sessions' latencies (a session's return after the idle time among them) and
//! memory against the count of live sessions, drawn with plotters into a PNG for docs/src/benchmarks.md.

use std::path::Path;

use plotters::prelude::*;

type PlotResult<T> = Result<T, Box<dyn std::error::Error>>;

/// A line of a panel: its name, its colour, and its y at a point.
type Series<'a> = (&'a str, RGBColor, fn(&Point) -> f64);

/// One session count's figures: the median of its runs.
pub struct Point {
    sessions: f64,
    cold_p99_ms: f64,
    warm_median_ms: f64,
    warm_p99_ms: f64,
    after_mib: f64,
    idle_mib: f64,
    /// A session's next turn after the idle time, running Bash in a new sandbox: its p99 (0 when not measured).
    returned_p99_ms: f64,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

impl Point {
    /// The median of each figure over `runs` (all of one session count).
    pub fn median_of(runs: &[super::Run]) -> Point {
        let of = |f: &dyn Fn(&super::Run) -> f64| median(runs.iter().map(f).collect());
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        Point {
            sessions: of(&|r| r.sessions as f64),
            cold_p99_ms: of(&|r| ms(r.cold_p99)),
            warm_median_ms: of(&|r| ms(r.warm_median)),
            warm_p99_ms: of(&|r| ms(r.warm_p99)),
            after_mib: of(&|r| r.after.pss_mib),
            idle_mib: of(&|r| r.idle.pss_mib),
            returned_p99_ms: of(&|r| r.returned.as_ref().map_or(0.0, |t| ms(t.p99))),
        }
    }
}

/// Where plotters finds the sans-serif face it draws text with (pure Rust, `ab_glyph`): `BENCH_FONT`, or DejaVu
/// Sans where Debian puts it.
fn register_font() -> PlotResult<()> {
    let path = std::env::var_os("BENCH_FONT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf".into());
    let bytes = std::fs::read(&path)
        .map_err(|e| format!("font {}: {e} (set BENCH_FONT to a .ttf)", path.display()))?;
    plotters::style::register_font(
        "sans-serif",
        FontStyle::Normal,
        Box::leak(bytes.into_boxed_slice()),
    )
    .map_err(|_| format!("font {}: not a font plotters can read", path.display()))?;
    Ok(())
}

/// One panel: `series` (name, colour, y of each point) against the session count.
fn panel(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    caption: &str,
    unit: &str,
    points: &[Point],
    series: &[Series<'_>],
) -> PlotResult<()> {
    let x_max = points.iter().map(|p| p.sessions).fold(0.0, f64::max) * 1.05;
    let y_max = points
        .iter()
        .flat_map(|p| series.iter().map(move |(_, _, y)| y(p)))
        .fold(0.0, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max.max(1.0))?;
    chart
        .configure_mesh()
        .x_desc("live sessions")
        .y_desc(unit)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    for (name, colour, y) in series {
        let line: Vec<(f64, f64)> = points.iter().map(|p| (p.sessions, y(p))).collect();
        let colour = *colour;
        chart
            .draw_series(LineSeries::new(line.clone(), colour.stroke_width(2)))?
            .label(*name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2))
            });
        chart.draw_series(line.into_iter().map(|p| Circle::new(p, 4, colour.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// Draws the latency and memory panels of `points` into the PNG at `path`.
pub fn draw(path: &Path, points: &[Point], clients: usize) -> PlotResult<()> {
    register_font()?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let root = BitMapBackend::new(path, (1200, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(600);
    let blue = RGBColor(31, 119, 180);
    let orange = RGBColor(255, 127, 14);
    let green = RGBColor(44, 160, 44);
    let red = RGBColor(214, 39, 40);
    let mut latencies: Vec<Series<'_>> = vec![
        ("first turn (Bash), p99", orange, |p| p.cold_p99_ms),
        ("warm turn, p99", blue, |p| p.warm_p99_ms),
        ("warm turn, median", green, |p| p.warm_median_ms),
    ];
    if points.iter().all(|p| p.returned_p99_ms > 0.0) {
        latencies.push(("back after idle (Bash), p99", red, |p| p.returned_p99_ms));
    }
    panel(
        &left,
        &format!("Turn latency over HTTP, {clients} clients"),
        "ms",
        points,
        &latencies,
    )?;
    panel(
        &right,
        "PSS of serve and every sandbox",
        "MiB",
        points,
        &[
            ("right after the turns", orange, |p| p.after_mib),
            ("idle", blue, |p| p.idle_mib),
        ],
    )?;
    root.present()?;
    Ok(())
}
