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
//! resumed run keeps the rows its checkpoint had seen (step rows up to its
//! step, epoch rows of the epochs it completed) and drops any written after
//! it, so the log reads as one uninterrupted run: the same rows, value for
//! value (`samples_per_s` aside, a timing).
//!
//! Durability: rows are flushed before every checkpoint is handed to its
//! writer, so a checkpoint never knows rows the log lacks. Every rewrite
//! (the resume's truncation, the config table) is atomic (temporary file,
//! fsync, rename), so a kill leaves the old file or the new one, never a
//! half; a row cut by a kill mid-append (no final newline) is dropped at
//! the next open, and temporaries of dead processes are removed there.

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
    remove_stale_temps(run_dir)?;
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
    write_atomic(
        &run_dir.join(CONFIG_JSON),
        &(serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"),
    )?;
    write_atomic(
        &run_dir.join(CONFIG_TXT),
        &(crate::report::config_table(experiment, meta) + &run.report(experiment) + "\n"),
    )
}

/// `text` to `path`, atomically (see the module doc).
fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    nitro_ckpt::write_file_atomic(path, text.as_bytes()).map_err(std::io::Error::other)
}

/// Removes the temporaries a killed process left while rewriting this
/// module's files.
fn remove_stale_temps(run_dir: &Path) -> std::io::Result<()> {
    let ours = [METRICS_CSV, METRICS_JSONL, CONFIG_JSON, CONFIG_TXT];
    nitro_ckpt::remove_stale_temps(run_dir, |t| ours.contains(&t))
        .map(drop)
        .map_err(std::io::Error::other)
}

/// What a resumed run's checkpoint had seen: the rows to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    /// Updates done: step rows up to this one are kept.
    pub step: u64,
    /// Epochs completed: epoch rows of epochs 1..=this are kept.
    pub epochs: u64,
}

impl Seen {
    /// Whether a row of `kind` at `step` in `epoch` (1-based) is kept.
    fn keeps(&self, kind: &str, step: u64, epoch: u64) -> bool {
        match kind {
            "step" => step <= self.step,
            "epoch" => epoch <= self.epochs && step <= self.step,
            _ => false,
        }
    }
}

/// The complete lines of `text`: a last line without its newline was cut
/// by a kill mid-append and is dropped.
fn complete_lines(text: &str) -> impl Iterator<Item = &str> {
    let end = text.rfind('\n').map_or(0, |i| i + 1);
    text[..end].lines()
}

/// Whether CSV row `line` (of `cells` cells) is one `seen` keeps.
fn csv_kept(line: &str, cells: usize, seen: Seen) -> bool {
    let c: Vec<&str> = line.split(',').collect();
    let num = |i: usize| c.get(i).and_then(|v| v.parse::<u64>().ok());
    c.len() == cells
        && matches!((num(1), num(2)), (Some(step), Some(epoch)) if seen.keeps(c[0], step, epoch))
}

/// Whether JSONL row `line` is one `seen` keeps.
fn jsonl_kept(line: &str, seen: Seen) -> bool {
    let Ok(Value::Object(row)) = serde_json::from_str::<Value>(line) else {
        return false;
    };
    let num = |k: &str| row.get(k).and_then(Value::as_u64);
    match (
        row.get("kind").and_then(Value::as_str),
        num("step"),
        num("epoch"),
    ) {
        (Some(kind), Some(step), Some(epoch)) => seen.keeps(kind, step, epoch),
        _ => false,
    }
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

impl MetricsLog {
    /// Opens the log in `run_dir`: a fresh run (`seen` is `None`) starts
    /// new files; a resumed one keeps the rows its checkpoint had `seen`
    /// and drops the rest (rewritten atomically). `columns` are the epoch
    /// metrics the CSV has columns for; a log with other columns (another
    /// configuration wrote it) is started afresh.
    pub fn open(
        run_dir: &Path,
        seen: Option<Seen>,
        columns: Vec<String>,
    ) -> std::io::Result<MetricsLog> {
        std::fs::create_dir_all(run_dir)?;
        remove_stale_temps(run_dir)?;
        let (csv_path, jsonl_path) = (run_dir.join(METRICS_CSV), run_dir.join(METRICS_JSONL));
        let header = ["kind", "step", "epoch", "loss", "lr"]
            .iter()
            .map(|s| s.to_string())
            .chain(columns.iter().cloned())
            .collect::<Vec<_>>()
            .join(",");
        let csv = seen.and_then(|_| std::fs::read_to_string(&csv_path).ok());
        let kept = match (seen, &csv) {
            (Some(seen), Some(text)) if text.lines().next() == Some(header.as_str()) => {
                Some((seen, text))
            }
            _ => None,
        };
        match kept {
            None => {
                if seen.is_some() {
                    tracing::warn!(target: "nitro::log", file = %csv_path.display(), "metrics log missing or written with other columns: started afresh");
                }
                write_atomic(&csv_path, &format!("{header}\n"))?;
                write_atomic(&jsonl_path, "")?;
            }
            Some((seen, text)) => {
                let cells = header.split(',').count();
                let mut out = format!("{header}\n");
                for line in complete_lines(text)
                    .skip(1)
                    .filter(|l| csv_kept(l, cells, seen))
                {
                    out.push_str(line);
                    out.push('\n');
                }
                write_atomic(&csv_path, &out)?;
                let text = std::fs::read_to_string(&jsonl_path).unwrap_or_default();
                let mut out = String::new();
                for line in complete_lines(&text).filter(|l| jsonl_kept(l, seen)) {
                    out.push_str(line);
                    out.push('\n');
                }
                write_atomic(&jsonl_path, &out)?;
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A resume keeps exactly the rows its checkpoint had seen: step rows
    /// up to its step, epoch rows of completed epochs; a row cut by a kill
    /// (no final newline) and rows written after the checkpoint go.
    #[test]
    fn a_resume_keeps_the_rows_its_checkpoint_saw_and_drops_a_cut_row() {
        let dir = tempfile::tempdir().unwrap();
        let columns = vec!["val_loss".to_string()];
        let mut log = MetricsLog::open(dir.path(), None, columns.clone()).unwrap();
        for step in 1..=4 {
            log.step(step, 1, 0.5, 0.1, 1.0).unwrap();
        }
        log.epoch(4, 1, &BTreeMap::from([("val_loss".into(), 0.25)]))
            .unwrap();
        log.step(5, 2, 0.4, 0.1, 1.0).unwrap();
        log.step(6, 2, 0.3, 0.1, 1.0).unwrap();
        log.flush().unwrap();
        drop(log);
        // A kill mid-append: half a row in each file.
        for (name, cut) in [
            (METRICS_CSV, "step,7,2,0.2"),
            (METRICS_JSONL, "{\"kind\":\"step\",\"step\":7"),
        ] {
            let mut f = File::options()
                .append(true)
                .open(dir.path().join(name))
                .unwrap();
            f.write_all(cut.as_bytes()).unwrap();
        }
        // Checkpointed at step 5, one epoch done.
        let seen = Seen { step: 5, epochs: 1 };
        MetricsLog::open(dir.path(), Some(seen), columns.clone()).unwrap();
        let csv = std::fs::read_to_string(dir.path().join(METRICS_CSV)).unwrap();
        let steps: Vec<&str> = csv
            .lines()
            .skip(1)
            .map(|l| l.split(',').nth(1).unwrap())
            .collect();
        assert_eq!(steps, ["1", "2", "3", "4", "4", "5"], "{csv}");
        assert!(csv.ends_with('\n'));
        let rows = read_rows(dir.path()).unwrap();
        let kinds: Vec<(&str, u64)> = rows.iter().map(|r| (r.kind.as_str(), r.step)).collect();
        assert_eq!(
            kinds,
            [
                ("step", 1),
                ("step", 2),
                ("step", 3),
                ("step", 4),
                ("epoch", 4),
                ("step", 5)
            ]
        );
        // Checkpointed at step 4 *before* its epoch row (the epoch is not
        // complete in it): the epoch row goes too, to be written again.
        let seen = Seen { step: 4, epochs: 0 };
        MetricsLog::open(dir.path(), Some(seen), columns).unwrap();
        let rows = read_rows(dir.path()).unwrap();
        assert_eq!(rows.len(), 4);
        assert!(rows.iter().all(|r| r.kind == "step"));
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.contains(".tmp-"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
}
