//! PNG plots of a run directory's metrics log: training loss, validation
//! metrics and learning rate against step. Drawn with plotters' bitmap
//! backend and a small embedded font, so no system font is needed.
//!
//! ```no_run
//! for path in nitro_run::plot::plot_run("runs/digits_mlp".as_ref())? {
//!     println!("{}", path.display());
//! }
//! # Ok::<(), nitro_run::plot::PlotError>(())
//! ```

use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::prelude::*;

use crate::metrics_log::{read_rows, Row};

/// DejaVu Sans Mono cut to printable ASCII (8 KiB; licence in `assets/`).
const FONT: &[u8] = include_bytes!("../assets/DejaVuSansMono-ascii.ttf");

/// Plotting failed.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The run directory has no readable metrics log.
    #[error("{path}: no metrics log to plot ({source}); train first")]
    NoLog {
        /// The log file.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// Drawing or encoding a PNG failed.
    #[error("{path}: {reason}")]
    Draw {
        /// The PNG.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_err() {
            tracing::warn!(target: "nitro::plot", "the embedded font did not load; plots lack text");
        }
    });
}

/// One line of a chart.
struct Series {
    label: String,
    points: Vec<(f64, f64)>,
    /// Marks each point (per-epoch series have few points).
    markers: bool,
}

fn series(rows: &[Row], kind: &str, key: &str, label: &str) -> Option<Series> {
    let points: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| r.kind == kind)
        .filter_map(|r| Some((r.step as f64, *r.values.get(key)?)))
        .filter(|(_, y)| y.is_finite())
        .collect();
    (!points.is_empty()).then(|| Series {
        label: label.into(),
        points,
        markers: kind == "epoch",
    })
}

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

fn draw(path: &Path, title: &str, y_desc: &str, lines: &[Series]) -> Result<(), PlotError> {
    let fail = |e: &dyn std::fmt::Display| PlotError::Draw {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let all = lines.iter().flat_map(|s| &s.points);
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in all {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let pad = if y1 > y0 {
        (y1 - y0) * 0.05
    } else {
        y0.abs().max(1e-3) * 0.1
    };
    let (y0, y1) = (y0 - pad, y1 + pad);
    let root = BitMapBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(80)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc(y_desc)
        .y_label_formatter(&|v| tick(*v))
        .x_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|e| fail(&e))?;
    for (i, s) in lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| fail(&e))?
            .label(s.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        if s.markers {
            chart
                .draw_series(s.points.iter().map(|&p| Circle::new(p, 4, color.filled())))
                .map_err(|e| fail(&e))?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))
}

fn tick(v: f64) -> String {
    if v == 0.0 || (1e-2..1e4).contains(&v.abs()) {
        format!("{v:.4}")
    } else {
        format!("{v:.2e}")
    }
}

/// Writes `loss.png`, `metrics.png` (when there are validation metrics
/// besides the loss) and `lr.png` into `run_dir` from its metrics log,
/// and returns their paths.
pub fn plot_run(run_dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    let rows = read_rows(run_dir).map_err(|source| PlotError::NoLog {
        path: run_dir.join(crate::metrics_log::METRICS_JSONL),
        source,
    })?;
    register_font();
    let mut written = Vec::new();
    let loss: Vec<Series> = [
        series(&rows, "step", "loss", "train loss (step)"),
        series(&rows, "epoch", "loss", "train loss (epoch mean)"),
        series(&rows, "epoch", "val_loss", "val loss"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !loss.is_empty() {
        let path = run_dir.join("loss.png");
        draw(&path, "loss", "loss", &loss)?;
        written.push(path);
    }
    let mut names: Vec<&String> = rows
        .iter()
        .filter(|r| r.kind == "epoch")
        .flat_map(|r| r.values.keys())
        .filter(|k| *k != "loss" && *k != "val_loss")
        .collect();
    names.sort();
    names.dedup();
    let metrics: Vec<Series> = names
        .iter()
        .filter_map(|k| series(&rows, "epoch", k, k))
        .collect();
    if !metrics.is_empty() {
        let path = run_dir.join("metrics.png");
        draw(&path, "validation metrics", "value", &metrics)?;
        written.push(path);
    }
    if let Some(lr) = series(&rows, "step", "lr", "learning rate") {
        let path = run_dir.join("lr.png");
        draw(&path, "learning rate", "lr", &[lr])?;
        written.push(path);
    }
    Ok(written)
}
