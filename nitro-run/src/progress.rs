//! Training progress and the run's logs. On a terminal, an indicatif bar
//! with loss, learning rate, throughput and ETA; otherwise (logs, CI, a
//! pipe) plain periodic lines with the same figures; nothing when turned
//! off. Every step and every epoch also goes to the metrics log in the run
//! directory (see [`crate::metrics_log`]), and the config table is written
//! there once per run.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::experiment::{Experiment, Logger, Progress};
use crate::handle::Nitro;
use crate::metrics_log::{write_config, MetricsLog, Seen};
use crate::schedule::Schedule;

enum View {
    Bar(ProgressBar),
    Lines { every: u64 },
    Off,
}

/// The learning rate of each update, as the train step is fed it.
struct LrCurve {
    schedule: Option<Schedule>,
    base: f64,
    total: u64,
}

impl LrCurve {
    /// The lr update `step` (1-based: updates done) used.
    fn at(&self, step: u64) -> f64 {
        self.schedule
            .map_or(self.base, |s| s.value(step.saturating_sub(1), self.total))
    }
}

pub(crate) struct Display {
    view: View,
    log: RefCell<Option<MetricsLog>>,
    lr: Option<LrCurve>,
    /// Samples per update, when known: throughput is then samples/s.
    samples_per_step: Option<f64>,
    total: u64,
    start_step: u64,
    started: Instant,
}

fn seconds(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

impl<E: Experiment> Nitro<E> {
    /// The progress display and metrics log of a `train()` call starting
    /// at the current position. A log that cannot be opened is reported
    /// and skipped: logging never stops a run.
    pub(crate) fn display(&self) -> Display {
        let run = &self.frozen.run;
        let mut columns: Vec<String> = self
            .frozen
            .train_metrics
            .iter()
            .map(|m| format!("train_{}", m.name))
            .collect();
        if self.data.val.is_some() {
            columns.push("val_loss".into());
            columns.extend(
                self.frozen
                    .metrics
                    .iter()
                    .map(|m| format!("val_{}", m.name)),
            );
        }
        let meta = self.e.config_metadata();
        if !self.dist.is_root() {
            // Rank 0 alone logs and shows progress: the other ranks' numbers
            // are the same (the loss is reduced) or partial.
            return Display::new(&Logger::quiet(), run.total, self.progress.position.step);
        }
        let opened = write_config(
            &run.run_dir,
            E::experiment_name(),
            run.preset.as_deref(),
            &meta,
            run,
        )
        .and_then(|()| {
            let position = self.progress.position;
            let seen = (position.step > 0).then_some(Seen {
                step: position.step,
                epochs: position.epoch,
            });
            MetricsLog::open(&run.run_dir, seen, columns)
        });
        let log = match opened {
            Ok(log) => Some(log),
            Err(e) => {
                tracing::warn!(target: "nitro::log", run_dir = %run.run_dir.display(), error = %e, "metrics log disabled");
                None
            }
        };
        let mut display = Display::new(&run.logger, run.total, self.progress.position.step);
        display.log = RefCell::new(log);
        display.lr = Some(LrCurve {
            schedule: self
                .frozen
                .scheduled
                .iter()
                .find(|(t, _)| t == "lr")
                .map(|(_, s)| *s),
            base: run.optimizer.lr(),
            total: run.total,
        });
        // Global throughput: every rank's samples of an update.
        display.samples_per_step = Some((run.batch_size * run.accum * run.world_size) as f64);
        display
    }
}

impl Display {
    /// A display of `total` steps, `done` of them already done, with no
    /// metrics log, learning rate or sample count (the step API's loop).
    pub fn new(logger: &Logger, total: u64, done: u64) -> Display {
        let tty = std::io::stderr().is_terminal();
        let view = match logger.progress {
            Progress::Off => View::Off,
            Progress::Auto if tty => {
                let bar = ProgressBar::new(total).with_position(done);
                bar.set_style(
                    ProgressStyle::with_template(
                        "{spinner} epoch {prefix} [{bar:30}] {pos}/{len} {per_sec} eta {eta} {msg}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
                );
                View::Bar(bar)
            }
            _ => View::Lines {
                every: logger.every.max(1),
            },
        };
        Display {
            view,
            log: RefCell::new(None),
            lr: None,
            samples_per_step: None,
            total,
            start_step: done,
            started: Instant::now(),
        }
    }

    fn with_log(&self, f: impl FnOnce(&mut MetricsLog) -> std::io::Result<()>) {
        let mut slot = self.log.borrow_mut();
        if let Some(log) = slot.as_mut() {
            if let Err(e) = f(log) {
                tracing::warn!(target: "nitro::log", error = %e, "metrics log disabled");
                *slot = None;
            }
        }
    }

    /// After update `step` (1-based) of `epoch` (0-based).
    pub fn step(&self, step: u64, epoch: u64, loss: f64) {
        let lr = self.lr.as_ref().map(|c| c.at(step));
        let elapsed = self.started.elapsed();
        let done = step.saturating_sub(self.start_step);
        let steps_per_s = done as f64 / elapsed.as_secs_f64().max(1e-9);
        let per_s = steps_per_s * self.samples_per_step.unwrap_or(1.0);
        self.with_log(|log| log.step(step, epoch + 1, loss, lr.unwrap_or(f64::NAN), per_s));
        let lr_text = lr.map(|lr| format!("  lr {lr:.2e}")).unwrap_or_default();
        match &self.view {
            View::Bar(bar) => {
                bar.set_position(step);
                bar.set_prefix((epoch + 1).to_string());
                if step % 10 == 0 {
                    bar.set_message(format!("loss {loss:.4}{lr_text}"));
                }
            }
            View::Lines { every } if step % every == 0 || step == self.total => {
                let left = self.total.saturating_sub(step) as f64;
                let eta = elapsed.mul_f64(left / done.max(1) as f64);
                let unit = if self.samples_per_step.is_some() {
                    "samples"
                } else {
                    "steps"
                };
                eprintln!(
                    "step {step}/{}  epoch {}  loss {loss:.4}{lr_text}  {per_s:.0} {unit}/s  eta {}",
                    self.total,
                    epoch + 1,
                    seconds(eta)
                )
            }
            _ => {}
        }
    }

    /// After epoch `epoch` (0-based) ends at update `step`, with its metrics.
    pub fn epoch(&self, step: u64, epoch: u64, metrics: &BTreeMap<String, f64>) {
        self.with_log(|log| log.epoch(step, epoch + 1, metrics));
    }

    pub fn line(&self, text: &str) {
        match &self.view {
            View::Bar(bar) => bar.println(text),
            View::Lines { .. } => eprintln!("{text}"),
            View::Off => {}
        }
    }

    /// Hands the buffered rows to the OS: called before a checkpoint is
    /// handed to its writer, so no checkpoint knows rows a kill could lose.
    pub fn flush(&self) {
        self.with_log(MetricsLog::flush);
    }

    pub fn finish(&self) {
        self.with_log(MetricsLog::flush);
        if let View::Bar(bar) = &self.view {
            bar.finish_and_clear();
        }
    }
}
