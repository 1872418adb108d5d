//! The metrics log of a run directory: `metrics.csv` and `metrics.jsonl`,
//! one row per training step and one per epoch (validation), plus the
//! config table (`config.json`, `config.txt`) written once per run.
//!
//! ```text
//! metrics.csv    kind,step,epoch,loss,lr,<epoch metrics: val_loss, val_acc, ...>
//!                step,1,1,2.301,0.0002,,
//!                epoch,30,1,0.912,,0.45,0.88
//! metrics.jsonl  {"kind":"step","step":1,"epoch":1,"loss":2.301,"lr":0.0002,"samples_per_s":5120.0}
//!                {"kind":"epoch","step":30,"epoch":1,"loss":0.912,"val_loss":0.45,"val_acc":0.88}
//! ```
//!
//! `step` counts updates done (1 after the first); `epoch` is 1-based. A
//! resumed run keeps the rows up to its checkpoint's step and drops any
//! written after it, so the log reads as one uninterrupted run.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use nitro_markers::FieldMeta;
use serde_json::{json, Map, Value};

/// File names inside the run directory.
pub const METRICS_CSV: &str = "metrics.csv";
/// See [`METRICS_CSV`].
pub const METRICS_JSONL: &str = "metrics.jsonl";
/// The config table as JSON (one object per field).
pub const CONFIG_JSON: &str = "config.json";
/// The config table as text (the marker table `show-config` prints).
pub const CONFIG_TXT: &str = "config.txt";

/// One row of `metrics.jsonl`, as [`read_rows`] returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// `step` (one per update) or `epoch` (one per validation).
    pub kind: String,
    /// Updates done.
    pub step: u64,
    /// Epoch, 1-based.
    pub epoch: u64,
    /// Every numeric value in the row (`loss`, `lr`, `val_acc`, ...).
    pub values: BTreeMap<String, f64>,
}

/// Reads `metrics.jsonl` from a run directory.
pub fn read_rows(run_dir: &Path) -> std::io::Result<Vec<Row>> {
    let file = File::open(run_dir.join(METRICS_JSONL))?;
    let mut rows = Vec::new();
    for line in BufReader::new(file).lines() {
        let line = line?;
        let Ok(Value::Object(map)) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let int = |k: &str| map.get(k).and_then(Value::as_u64).unwrap_or(0);
        rows.push(Row {
            kind: map
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            step: int("step"),
            epoch: int("epoch"),
            values: map
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "kind" | "step" | "epoch"))
                .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
                .collect(),
        });
    }
    Ok(rows)
}

/// Writes the config table of a run (`config.json` and `config.txt`).
pub(crate) fn write_config(
    run_dir: &Path,
    experiment: &str,
    preset: Option<&str>,
    meta: &[FieldMeta],
    run: &crate::report::RunValues,
) -> std::io::Result<()> {
    std::fs::create_dir_all(run_dir)?;
    let fields: Vec<Value> = meta
        .iter()
        .map(|m| {
            json!({
                "name": m.name,
                "category": format!("{:?}", m.category),
                "type": m.type_name,
                "value": m.value.abbreviated(),
                "doc": m.doc,
            })
        })
        .collect();
    let doc = json!({
        "experiment": experiment,
        "preset": preset,
        "fields": fields,
        "run": {
            "seed": run.seed,
            "batch_size": run.batch_size,
            "accum": run.accum,
            "max_epochs": run.max_epochs,
            "total_updates": run.total,
            "run_dir": run.run_dir.display().to_string(),
            "set_by_driver": run.overridden,
        },
    });
    std::fs::write(
        run_dir.join(CONFIG_JSON),
        serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n",
    )?;
    std::fs::write(
        run_dir.join(CONFIG_TXT),
        crate::report::config_table(experiment, meta) + &run.report(experiment) + "\n",
    )
}

/// The open metrics log of a training call.
pub(crate) struct MetricsLog {
    csv: BufWriter<File>,
    jsonl: BufWriter<File>,
    columns: Vec<String>,
}

fn number(v: f64) -> Value {
    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
}

/// Keeps the lines of `path` whose step (read by `step_of`) is at most
/// `upto`; lines `step_of` cannot read (a header) are kept.
fn truncate_after(
    path: &Path,
    upto: u64,
    step_of: impl Fn(&str) -> Option<u64>,
) -> std::io::Result<()> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(());
    };
    let kept: String = text
        .lines()
        .filter(|l| step_of(l).is_none_or(|s| s <= upto))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(path, kept)
}

impl MetricsLog {
    /// Opens the log in `run_dir` for a run that has done `step` updates:
    /// a fresh run (0) starts new files, a resumed one keeps its rows up
    /// to `step`. `columns` are the epoch metrics the CSV has columns for.
    pub fn open(run_dir: &Path, step: u64, columns: Vec<String>) -> std::io::Result<MetricsLog> {
        std::fs::create_dir_all(run_dir)?;
        let (csv_path, jsonl_path) = (run_dir.join(METRICS_CSV), run_dir.join(METRICS_JSONL));
        let header = ["kind", "step", "epoch", "loss", "lr"]
            .iter()
            .map(|s| s.to_string())
            .chain(columns.iter().cloned())
            .collect::<Vec<_>>()
            .join(",");
        let fresh = step == 0
            || std::fs::read_to_string(&csv_path)
                .map(|t| t.lines().next() != Some(header.as_str()))
                .unwrap_or(true);
        if fresh {
            std::fs::write(&csv_path, format!("{header}\n"))?;
            std::fs::write(&jsonl_path, "")?;
        } else {
            truncate_after(&csv_path, step, |l| l.split(',').nth(1)?.parse().ok())?;
            truncate_after(&jsonl_path, step, |l| {
                serde_json::from_str::<Value>(l).ok()?.get("step")?.as_u64()
            })?;
        }
        let append = |p: &PathBuf| File::options().append(true).open(p).map(BufWriter::new);
        Ok(MetricsLog {
            csv: append(&csv_path)?,
            jsonl: append(&jsonl_path)?,
            columns,
        })
    }

    fn write(
        &mut self,
        kind: &str,
        step: u64,
        epoch: u64,
        values: &[(&str, f64)],
    ) -> std::io::Result<()> {
        let get = |k: &str| values.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        let cell = |k: &str| get(k).map(|v| v.to_string()).unwrap_or_default();
        let mut csv = vec![
            kind.to_string(),
            step.to_string(),
            epoch.to_string(),
            cell("loss"),
            cell("lr"),
        ];
        csv.extend(self.columns.iter().map(|c| cell(c)));
        writeln!(self.csv, "{}", csv.join(","))?;
        let mut row = Map::new();
        row.insert("kind".into(), json!(kind));
        row.insert("step".into(), json!(step));
        row.insert("epoch".into(), json!(epoch));
        for (k, v) in values {
            row.insert(k.to_string(), number(*v));
        }
        writeln!(self.jsonl, "{}", Value::Object(row))
    }

    /// One training step.
    pub fn step(
        &mut self,
        step: u64,
        epoch: u64,
        loss: f64,
        lr: f64,
        samples_per_s: f64,
    ) -> std::io::Result<()> {
        self.write(
            "step",
            step,
            epoch,
            &[("loss", loss), ("lr", lr), ("samples_per_s", samples_per_s)],
        )
    }

    /// One epoch's metrics (mean train loss, train and validation metrics).
    pub fn epoch(
        &mut self,
        step: u64,
        epoch: u64,
        metrics: &BTreeMap<String, f64>,
    ) -> std::io::Result<()> {
        let values: Vec<(&str, f64)> = metrics.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        self.write("epoch", step, epoch, &values)?;
        self.flush()
    }

    /// Writes buffered rows to disk.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.csv.flush()?;
        self.jsonl.flush()
    }
}
