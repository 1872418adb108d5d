//! The run values a handle freezes at construction, and the one-screen
//! report of them that entry points print (silence with
//! [`set_config_report`]).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::experiment::{Checkpointer, Logger};
use crate::optim::Optimizer;

static REPORT: AtomicBool = AtomicBool::new(true);

/// Turns the config report printed at each entry point on or off (scripts,
/// tests and benches turn it off).
pub fn set_config_report(on: bool) {
    REPORT.store(on, Ordering::Relaxed);
}

pub(crate) fn report_enabled() -> bool {
    REPORT.load(Ordering::Relaxed)
}

/// Run values resolved once at construction; a handle never re-reads an
/// accessor, so nothing changes underneath it (rebuild to change them).
#[derive(Debug, Clone)]
pub struct RunValues {
    /// Init and data-order seed.
    pub seed: u64,
    /// Micro-batch width (the compiled width).
    pub batch_size: usize,
    /// Micro-batches per update.
    pub accum: usize,
    /// Epochs.
    pub max_epochs: u64,
    /// Updates per epoch.
    pub updates_per_epoch: u64,
    /// The schedule horizon: updates over the whole run.
    pub total: u64,
    /// Global-norm clip.
    pub clip: Option<f64>,
    /// Checkpoint directory.
    pub run_dir: PathBuf,
    /// The preset that produced the experiment.
    pub preset: Option<String>,
    /// Optimizer.
    pub optimizer: Optimizer,
    /// Checkpoint policy.
    pub checkpointer: Checkpointer,
    /// Progress settings.
    pub logger: Logger,
}

impl RunValues {
    pub(crate) fn report(&self, experiment: &str) -> String {
        let clip = self
            .clip
            .map_or_else(|| "off".to_string(), |c| c.to_string());
        format!(
            "nitro: {experiment} values fixed at construction (rebuild the `Nitro` to change them)\n  \
             seed {}   batch {}   accum {}   max_epochs {}   total {}   clip {}   optimizer {:?}\n  \
             run_dir {}{}",
            self.seed,
            self.batch_size,
            self.accum,
            self.max_epochs,
            self.total,
            clip,
            self.optimizer,
            self.run_dir.display(),
            self.preset
                .as_deref()
                .map(|p| format!("   preset {p}"))
                .unwrap_or_default()
        )
    }
}

/// The marker table of an experiment: one row per field with its category,
/// type, value and doc line (what `show-config` prints and `config.txt`
/// holds).
pub fn config_table(experiment: &str, meta: &[nitro_markers::FieldMeta]) -> String {
    let rows: Vec<[String; 5]> = meta
        .iter()
        .map(|m| {
            [
                m.name.to_string(),
                format!("{:?}", m.category),
                m.type_name.clone(),
                m.value.to_string(),
                m.doc.lines().next().unwrap_or("").trim().to_string(),
            ]
        })
        .collect();
    let head = ["field", "category", "type", "value", "doc"].map(String::from);
    let mut widths = head.clone().map(|h| h.len());
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |r: &[String; 5]| {
        let cells: Vec<String> = r
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        cells.join("  ").trim_end().to_string() + "\n"
    };
    let mut out = format!("{experiment}\n");
    out += &line(&head);
    for r in &rows {
        out += &line(r);
    }
    out
}
