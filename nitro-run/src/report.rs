//! The run values a handle freezes at construction, and the one-screen
//! report of them that entry points print (silence with
//! [`set_config_report`]).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use nitro_data::ShortBatch;

use crate::error::{Result, RunError};
use crate::experiment::{Checkpointer, Experiment, Logger, Progress};
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
    /// Micro-batch width (the compiled width; per rank in a data-parallel
    /// job).
    pub batch_size: usize,
    /// Processes in the job: each update sees `world_size · batch_size ·
    /// accum` samples.
    pub world_size: usize,
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
    /// The short-final-batch policy.
    pub short_batch: ShortBatch,
    /// Run values a driver set (`--run-dir`, `--max-epochs`): reported as
    /// such, never as redefined accessors.
    pub overridden: Vec<&'static str>,
}

impl RunValues {
    /// Reads every run accessor once, with the driver's overrides applied.
    pub(crate) fn resolve<E: Experiment>(
        e: &E,
        preset: Option<String>,
        n_train: usize,
        world_size: usize,
        overrides: &RunOverrides,
    ) -> Result<RunValues> {
        let batch_size = e.batch_size();
        let accum = e.accum();
        if batch_size == 0 || accum == 0 {
            return Err(RunError::Setting {
                setting: if batch_size == 0 {
                    "batch_size"
                } else {
                    "accum"
                },
                reason: "must be at least 1".into(),
            });
        }
        let short_batch = e.short_batch();
        // The epoch is cut into global batches of world_size · batch_size.
        let global = batch_size * world_size.max(1);
        let batches = batches_per_epoch(n_train, global, short_batch);
        if batches == 0 {
            return Err(RunError::Setting {
                setting: "batch_size",
                reason: format!(
                    "{batch_size}{} is larger than the {n_train} training samples; lower it or use `ShortBatch::PadWithMask`",
                    if world_size > 1 { format!(" x {world_size} ranks") } else { String::new() }
                ),
            });
        }
        let updates_per_epoch = batches.div_ceil(accum as u64);
        let mut overridden = vec![];
        let max_epochs = match overrides.max_epochs {
            Some(n) => {
                overridden.push("max_epochs");
                n
            }
            None => e.max_epochs(),
        };
        let run_dir = match &overrides.run_dir {
            Some(dir) => {
                overridden.push("run_dir");
                dir.clone()
            }
            None => e.run_dir(),
        };
        let mut logger = e.logger();
        if overrides.quiet {
            logger.progress = Progress::Off;
        }
        e.check_ranges()
            .map_err(|err| RunError::Value(Box::new(err)))?;
        let run = RunValues {
            seed: e.seed(),
            batch_size,
            world_size: world_size.max(1),
            accum,
            max_epochs,
            updates_per_epoch,
            total: updates_per_epoch * max_epochs,
            clip: e.clip(),
            run_dir,
            preset,
            optimizer: e.optimizer(),
            checkpointer: e.checkpointer(),
            logger,
            short_batch,
            overridden,
        };
        crate::validate::run_values(&run.optimizer, run.clip, &run.checkpointer, &run.run_dir)?;
        Ok(run)
    }

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
        ) + &if self.overridden.is_empty() {
            String::new()
        } else {
            format!("\n  set by the driver: {}", self.overridden.join(", "))
        }
    }
}

/// The scalar run accessors' values at one moment: taken at construction
/// and compared with a fresh reading in each report, so an accessor whose
/// code changed since is flagged (the handle keeps the frozen value).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Probes(Vec<(&'static str, String)>);

impl Probes {
    pub(crate) fn of<E: Experiment>(e: &E) -> Probes {
        let clip = e
            .clip()
            .map_or_else(|| "off".to_string(), |c| c.to_string());
        Probes(vec![
            ("seed", e.seed().to_string()),
            ("batch_size", e.batch_size().to_string()),
            ("accum", e.accum().to_string()),
            ("max_epochs", e.max_epochs().to_string()),
            ("clip", clip),
            ("run_dir", e.run_dir().display().to_string()),
            ("short_batch", format!("{:?}", e.short_batch())),
        ])
    }

    /// A `!` line for each accessor that returns something else in `now`.
    pub(crate) fn drift(&self, now: &Probes) -> Vec<String> {
        self.0
            .iter()
            .zip(&now.0)
            .filter(|((_, then), (_, now))| then != now)
            .map(|((name, then), (_, now))| {
                format!("! `{name}(e)` was redefined: it returned {then} at construction and returns {now} now.")
            })
            .collect()
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
                m.value.abbreviated(),
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

/// Run values a driver (the CLI) sets for one run, resolved before the
/// handle is built, so the handle and its report see them from the start
/// and they are never mistaken for a redefined accessor.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunOverrides {
    /// Replaces `run_dir()`.
    pub run_dir: Option<PathBuf>,
    /// Replaces `max_epochs()`.
    pub max_epochs: Option<u64>,
    /// No progress display.
    pub quiet: bool,
}

/// Batches in one epoch of `n_train` samples under the short-batch policy.
pub(crate) fn batches_per_epoch(n_train: usize, batch_size: usize, short: ShortBatch) -> u64 {
    (match short {
        ShortBatch::Drop => n_train / batch_size,
        ShortBatch::PadWithMask => n_train.div_ceil(batch_size),
    }) as u64
}
