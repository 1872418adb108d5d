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
