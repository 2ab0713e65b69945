//! SVG charts of sections 1 and 2 (`SIMBA_BENCH_CHARTS=<dir>`; none by default), drawn with
//! `plotters`' SVG backend: `handoff.svg`, the hand-off latency distribution per backend, and
//! `api-spi-raw.svg`, the uncontended acquire+release through the API, the SPI and the raw
//! primitive per backend. Text is written as SVG `<text>` in a generic `sans-serif` family (no
//! font is read or embedded); the viewer draws it.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use plotters::prelude::*;

use crate::common::{err, fmt_dur, BenchResult, Summary};
use crate::targets::Kind;
use crate::Config;

const SIZE: (u32, u32) = (1000, 600);
const FONT: &str = "sans-serif";
/// The p99 whiskers of the bar chart.
const WHISKER: RGBColor = RGBColor(50, 50, 50);

/// One color per backend, the same in every chart.
fn color(kind: Kind) -> RGBColor {
    match kind {
        Kind::Memory => RGBColor(110, 110, 110),
        Kind::Redis => RGBColor(214, 39, 40),
        Kind::RedisCluster => RGBColor(255, 127, 14),
        Kind::Postgres => RGBColor(31, 119, 180),
        Kind::Mysql => RGBColor(44, 160, 44),
        Kind::Zookeeper => RGBColor(148, 103, 189),
        Kind::Etcd => RGBColor(23, 190, 207),
    }
}

/// `quick run` or `full run` and the UTC date, for the charts' subtitles.
pub fn run_label(config: &Config) -> String {
    let days = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() / 86_400).unwrap_or(0);
    let (y, m, d) = civil_from_days(days as i64);
    format!("{} run, {y:04}-{m:02}-{d:02}", if config.quick { "quick (SIMBA_BENCH_QUICK=1)" } else { "full" })
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The directory charts go to, created if missing; `None` when `SIMBA_BENCH_CHARTS` is unset.
fn dir(config: &Config) -> BenchResult<Option<PathBuf>> {
    let Some(dir) = &config.charts else { return Ok(None) };
    std::fs::create_dir_all(dir).map_err(|e| err(format!("cannot create {}: {e}", dir.display())))?;
    Ok(Some(dir.clone()))
}

/// How a legend entry is marked: a line (a curve) or a filled box (a bar).
#[derive(Clone, Copy)]
enum Mark {
    Line(RGBColor),
    DashedLine(RGBColor),
    Bar(RGBColor),
}

/// The legend, under the chart, in `columns` columns (plotters' own legend box sits inside the
/// plot and would cover curves).
fn legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    entries: &[(String, Mark)],
    columns: usize,
) -> BenchResult<()>
where
    DB::ErrorType: 'static,
{
    let (w, _) = area.dim_in_pixel();
    let columns = columns.max(1);
    let col = (w as i32 - 100) / columns as i32;
    for (i, (label, mark)) in entries.iter().enumerate() {
        let (x, y) = (80 + (i % columns) as i32 * col, 12 + (i / columns) as i32 * 22);
        match *mark {
            Mark::Line(c) => area.draw(&PathElement::new(vec![(x, y), (x + 28, y)], c.stroke_width(3)))?,
            Mark::DashedLine(c) => {
                for k in 0..3 {
                    area.draw(&PathElement::new(vec![(x + k * 10, y), (x + k * 10 + 6, y)], c.stroke_width(1)))?;
                }
            }
            Mark::Bar(c) => area.draw(&Rectangle::new([(x + 4, y - 7), (x + 24, y + 7)], c.filled()))?,
        }
        area.draw(&Text::new(label.clone(), (x + 36, y - 8), (FONT, 17).into_font().color(&BLACK)))?;
    }
    Ok(())
}

/// Height of a legend of `n` entries in `columns` columns.
fn legend_height(n: usize, columns: usize) -> u32 {
    n.div_ceil(columns.max(1)) as u32 * 22 + 14
}

/// A tick label of a log axis in ms: `0.01`, `0.5`, `20`, `1000`.
fn ms_label(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// A log axis from below `lo` to above `hi` (both > 0), at least a decade wide.
fn log_span(lo: f64, hi: f64) -> (f64, f64) {
    let lo = lo.max(1e-9) / 1.5;
    (lo, (hi * 1.5).max(lo * 10.0))
}

/// Section 2: the empirical distribution (CDF) of each backend's hand-off samples, log time axis,
/// with the targets as vertical lines. Writes `<dir>/handoff.svg`; `None` without a directory.
pub fn handoff(config: &Config, series: &[(Kind, Vec<Duration>)]) -> BenchResult<Option<PathBuf>> {
    let Some(dir) = dir(config)? else { return Ok(None) };
    let path = dir.join("handoff.svg");
    draw_handoff(&path, &run_label(config), series)?;
    Ok(Some(path))
}

fn draw_handoff(path: &Path, run: &str, series: &[(Kind, Vec<Duration>)]) -> BenchResult<()> {
    let ms = |d: &Duration| d.as_secs_f64() * 1e3;
    let all = series.iter().flat_map(|(_, s)| s.iter().map(ms));
    let (min, max) = all.fold((f64::MAX, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if series.iter().all(|(_, s)| s.is_empty()) {
        return Err(err("no hand-off samples to chart"));
    }
    // The targets in view: 5 ms always, 1 s when a backend polls.
    let polls = series.iter().any(|(k, s)| !k.pushes() && !s.is_empty());
    let (lo, hi) = log_span(min.min(5.0), max.max(if polls { 1000.0 } else { 5.0 }));
    let shown: Vec<&(Kind, Vec<Duration>)> = series.iter().filter(|(_, s)| !s.is_empty()).collect();
    let root = SVGBackend::new(path, (SIZE.0, SIZE.1 + legend_height(shown.len() + 2, 1))).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, rest) = root.split_vertically(60);
    let (body, key) = rest.split_vertically(SIZE.1 - 60);
    title.draw(&Text::new(
        "Hand-off latency: holder's release → the waiting lock() returns",
        (20, 10),
        (FONT, 27).into_font().color(&BLACK),
    ))?;
    title.draw(&Text::new(
        format!("simba benchmark section 2, {run}; default timings; one curve per backend"),
        (20, 38),
        (FONT, 17).into_font().color(&RGBColor(80, 80, 80)),
    ))?;
    let mut chart = ChartBuilder::on(&body)
        .margin_right(30)
        .margin_left(10)
        .margin_bottom(10)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..100f64)?;
    chart
        .configure_mesh()
        .x_desc("hand-off latency (ms, log scale)")
        .y_desc("samples at or below (%)")
        .x_label_formatter(&|v| ms_label(*v))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .axis_desc_style((FONT, 20))
        .label_style((FONT, 17))
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(200, 200, 200))
        .draw()?;
    let mut entries = Vec::new();
    for (kind, samples) in shown {
        let mut sorted: Vec<f64> = samples.iter().map(ms).collect();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len() as f64;
        // A step per sample: the share of samples at or below each latency.
        let mut points = Vec::with_capacity(sorted.len() * 2);
        for (i, v) in sorted.iter().enumerate() {
            points.push((*v, i as f64 / n * 100.0));
            points.push((*v, (i + 1) as f64 / n * 100.0));
        }
        let s = Summary::of(samples);
        let c = color(*kind);
        chart.draw_series(LineSeries::new(points, c.stroke_width(2)))?;
        entries.push((
            format!(
                "{} ({} samples): p50 {}, p99 {}, max {}",
                kind.name(),
                s.n,
                fmt_dur(s.p50),
                fmt_dur(s.p99),
                fmt_dur(s.max)
            ),
            Mark::Line(c),
        ));
    }
    let grey = RGBColor(90, 90, 90);
    for (at, label) in [(5.0, "push target: p99 ≤ 5 ms"), (1000.0, "MySQL (polling) target: max ≤ 1 s")] {
        if at == 5.0 || polls {
            chart.draw_series(DashedLineSeries::new([(at, 0.0), (at, 100.0)], 6, 4, grey.stroke_width(1)))?;
            entries.push((label.to_string(), Mark::DashedLine(grey)));
        }
    }
    legend(&key, &entries, 1)?;
    root.present()?;
    Ok(())
}

/// Section 1, one backend: p50 and p99 of one acquire+release through the API, the SPI and the
/// raw primitive (`None`: memory has none).
pub struct ApiSpiRaw {
    pub kind: Kind,
    pub api: Summary,
    pub spi: Summary,
    pub raw: Option<Summary>,
}

/// Section 1: grouped bars per backend (API, SPI, raw p50; a whisker up to the p99), log time
/// axis, API/raw above each group. Writes `<dir>/api-spi-raw.svg`; `None` without a directory.
pub fn api_spi_raw(config: &Config, rows: &[ApiSpiRaw]) -> BenchResult<Option<PathBuf>> {
    let Some(dir) = dir(config)? else { return Ok(None) };
    let path = dir.join("api-spi-raw.svg");
    draw_api_spi_raw(&path, &run_label(config), rows)?;
    Ok(Some(path))
}

fn draw_api_spi_raw(path: &Path, run: &str, rows: &[ApiSpiRaw]) -> BenchResult<()> {
    if rows.is_empty() {
        return Err(err("no section 1 results to chart"));
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let values = rows.iter().flat_map(|r| {
        let mut v = vec![us(r.api.p50), us(r.api.p99), us(r.spi.p50), us(r.spi.p99)];
        v.extend(r.raw.iter().flat_map(|s| [us(s.p50), us(s.p99)]));
        v
    });
    let (min, max) = values.fold((f64::MAX, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (lo, hi) = log_span(min / 2.0, max * 1.5);
    let n = rows.len();
    let root = SVGBackend::new(path, (SIZE.0, SIZE.1 + legend_height(4, 2))).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, rest) = root.split_vertically(60);
    let (body, key) = rest.split_vertically(SIZE.1 - 60);
    title.draw(&Text::new(
        "Uncontended acquire + release: public API vs backend SPI vs raw primitive",
        (20, 10),
        (FONT, 27).into_font().color(&BLACK),
    ))?;
    title.draw(&Text::new(
        format!("simba benchmark section 1, {run}; bar: p50, whisker: p99; memory has no raw primitive"),
        (20, 38),
        (FONT, 17).into_font().color(&RGBColor(80, 80, 80)),
    ))?;
    let names: Vec<&'static str> = rows.iter().map(|r| r.kind.name()).collect();
    let mut chart = ChartBuilder::on(&body)
        .margin_right(30)
        .margin_left(10)
        .margin_bottom(10)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        // At most n labels over a span of n: one per integer, the backends' places.
        .x_labels(n)
        .x_desc("backend")
        .y_desc("one acquire + release (µs, log scale)")
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                names.get(i as usize).map_or(String::new(), |s| s.to_string())
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|v| ms_label(*v))
        .axis_desc_style((FONT, 20))
        .label_style((FONT, 17))
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(200, 200, 200))
        .draw()?;
    let variants = [
        ("API: Session::try_lock + Lease::release", RGBColor(31, 119, 180)),
        ("SPI: LeaseBackend::acquire + release, caller's thread", RGBColor(255, 127, 14)),
        ("raw primitive, same server and connection kind", RGBColor(44, 160, 44)),
    ];
    let width = 0.26;
    let mut entries = Vec::new();
    for (v, (label, c)) in variants.iter().enumerate() {
        let c = *c;
        let bars: Vec<(f64, Summary)> = rows
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let s = match v {
                    0 => Some(r.api),
                    1 => Some(r.spi),
                    _ => r.raw,
                }?;
                Some((i as f64 + (v as f64 - 1.0) * width, s))
            })
            .collect();
        chart.draw_series(bars.iter().map(|(x, s)| {
            Rectangle::new([(x - width * 0.45, lo), (x + width * 0.45, us(s.p50).max(lo))], c.filled())
        }))?;
        entries.push((label.to_string(), Mark::Bar(c)));
        chart.draw_series(bars.iter().map(|(x, s)| {
            PathElement::new(vec![(*x, us(s.p50).max(lo)), (*x, us(s.p99).max(lo))], WHISKER.stroke_width(2))
        }))?;
    }
    // API/raw (memory: API/SPI) above each group.
    chart.draw_series(rows.iter().enumerate().map(|(i, r)| {
        let base = r.raw.unwrap_or(r.spi);
        let ratio = r.api.p50.as_secs_f64() / base.p50.as_secs_f64().max(1e-12);
        let top = [Some(r.api), Some(r.spi), r.raw].into_iter().flatten().map(|s| us(s.p99)).fold(lo, f64::max);
        let what = if r.raw.is_some() { "API/raw" } else { "API/SPI" };
        Text::new(
            format!("{what} {ratio:.2}"),
            (i as f64 - 0.3, (top * 1.6).min(hi)),
            (FONT, 16).into_font().color(&BLACK),
        )
    }))?;
    entries.push(("p99 (whisker)".to_string(), Mark::Line(WHISKER)));
    legend(&key, &entries, 2)?;
    root.present()?;
    Ok(())
}
