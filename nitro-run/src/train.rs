//! `train()`: the loop around the one fused train step. Per update it
//! takes a window of `accum` micro-batches from the `batches` stream (only
//! routed fields, gathered by nitro-data one window ahead on its prefetch
//! thread while the current step runs), feeds the scheduled
//! hyperparameters as scalar inputs, runs the step (params, state and
//! optimizer slots updated in place), checks the loss, and checkpoints on
//! the policy's cadence; per epoch it validates and asks the stopper.
//!
//! Accumulation: a window is `accum` micro-batches and one update. The
//! final window of an epoch may be partial; its loss is the mean over its
//! *real* micro-batches (weights `1/real`, 0 for the filler, which also
//! leaves the state untouched), so the update is normalised by its real
//! size. The short final training batch follows the run's
//! [`ShortBatch`] policy: `Drop` (the default), or `PadWithMask`: padded to
//! the compiled width with its padded rows weighted 0, so the update is
//! exactly that of its real samples, and a window's loss is the mean over
//! its real samples. Either way one program, never a silent second one.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use nitro_data::{Dataset, EpochOrder, ShortBatch};
use nitro_graph::{Array, DType};
use nitro_markers::{DeviceData, DeviceValue};

use crate::batches::{self, Window, WindowSpec};
use crate::checkpointing::Checkpoints;
use crate::error::{Result, RunError};
use crate::experiment::Experiment;
use crate::handle::Nitro;
use crate::infer::leaves_of;
use crate::interrupt;
use crate::layout::Kind;
use crate::metric::Totals;
use crate::placement::BatchInputs;
use crate::trace::Returned;

/// What `train()` did.
#[derive(Debug, Clone, Default)]
pub struct TrainReport {
    /// Updates done in total (including before a resume).
    pub steps: u64,
    /// Epochs completed.
    pub epochs: u64,
    /// Stopped by Ctrl-C / `request_stop` / `stop_after` (a checkpoint was written).
    pub interrupted: bool,
    /// Stopped by the early stopper.
    pub early_stopped: bool,
    /// The last epoch's metrics.
    pub metrics: BTreeMap<String, f64>,
    /// Time spent inside the compiled train step.
    pub program_time: Duration,
    /// Time the step loop was blocked on checkpoints: taking the host
    /// snapshot, handing it over, waiting for the writer (with the default
    /// background writer the file writing itself overlaps training).
    pub checkpoint_time: Duration,
    /// Time spent validating.
    pub eval_time: Duration,
    /// Time the train steps spent in the gradient all-reduce of a
    /// data-parallel job, waiting for the slowest rank included (zero in a
    /// world of one; part of `program_time`).
    pub all_reduce_time: Duration,
    /// Wall time of the whole call.
    pub wall_time: Duration,
}

/// A hyperparameter input: exact in an f64 program, rounded once to f32.
fn scalar(v: f64, dtype: DType) -> Array {
    Array::scalar_f64(v).cast(dtype)
}

/// Updates between the or-reductions of interrupt requests in a group.
const INTERRUPT_POLL_EVERY: u64 = 8;

impl<E: Experiment> Nitro<E> {
    /// Stops training (checkpoint, return) once `step` updates are done, as
    /// Ctrl-C would; for scripted interruption and resume tests.
    pub fn stop_after(&mut self, step: u64) {
        self.progress.stop_after = Some(step);
    }

    pub(crate) fn train_kind(&self) -> Kind {
        Kind::train_step(&self.frozen.run, !self.frozen.train_metrics.is_empty())
    }

    /// The hyperparameter inputs of update `step` (0-based): optimizer
    /// values with `lr` from its schedule, the clip norm, the micro-batch
    /// weights (and, for `PadWithMask`, the padded-row corrections), and
    /// the step's random key.
    /// `real[i]` is the number of real samples in micro-batch `i` on this
    /// rank (0 for the filler of a partial window), `global[i]` over every
    /// rank. The weights are normalised by the global window, so that the
    /// sum over ranks the train step's all-reduce makes is the global mean.
    fn hyper_inputs(&mut self, step: u64, real: &[usize], global: &[usize]) -> Result<Vec<Array>> {
        let dtype = self.programs.layout.dtype;
        let total = self.frozen.run.total;
        let mut lr = self.frozen.run.optimizer.lr();
        let mut device_changed = false;
        for (target, schedule) in &self.frozen.scheduled {
            let v = schedule.value(step, total);
            if target == "lr" {
                lr = v;
            } else if let Some(i) = self
                .programs
                .layout
                .device
                .iter()
                .position(|(n, _)| n == target)
            {
                self.values.device[i] = Array::scalar_f32(v as f32);
                let value = DeviceValue {
                    shape: vec![],
                    data: DeviceData::F32(vec![v as f32]),
                };
                self.e
                    .set_device_value(self.programs.layout.device[i].0, &value)?;
                device_changed = true;
            }
        }
        if device_changed {
            self.values.device_values_changed();
        }
        let mut out: Vec<Array> = self
            .frozen
            .run
            .optimizer
            .hyper_values(lr, step + 1)
            .into_iter()
            .map(|(_, v)| scalar(v, dtype))
            .collect();
        if let Some(c) = self.frozen.run.clip {
            out.push(scalar(c, dtype));
        }
        let (w, accum) = (self.frozen.run.batch_size as f64, self.frozen.run.accum);
        let ranks = self.frozen.run.world_size as f64;
        let vector = |values: Vec<f64>| {
            Array::new(&[accum], values)
                .expect("accum weights match their shape")
                .cast(dtype)
        };
        match self.frozen.run.short_batch {
            // The mean of the window's micro-batch means: weight 1/window
            // (each global micro-batch mean is the mean of its N rank means,
            // hence 1/(window·N) per rank).
            ShortBatch::Drop => {
                let window = global.iter().filter(|&&r| r > 0).count().max(1) as f64;
                out.push(vector(
                    real.iter()
                        .map(|&r| if r > 0 { 1.0 / (window * ranks) } else { 0.0 })
                        .collect(),
                ));
            }
            // The mean over the window's real samples: micro-batch i
            // contributes (W/R)·L_A − ((W − r_i)/R)·L_B (see `programs`).
            ShortBatch::PadWithMask => {
                // Over every rank's real samples of the window.
                let total_real = global.iter().sum::<usize>().max(1) as f64;
                let a = real
                    .iter()
                    .map(|&r| if r > 0 { w / total_real } else { 0.0 })
                    .collect();
                let b = real
                    .iter()
                    .map(|&r| {
                        if r > 0 {
                            (w - r as f64) / total_real
                        } else {
                            0.0
                        }
                    })
                    .collect();
                out.push(vector(a));
                out.push(vector(b));
            }
        }
        // The step's random key: a pure function of the run seed and the
        // global step, so a resumed run feeds the keys it would have.
        out.push(Array::scalar_i32(nitro_graph::nn::step_key(
            self.frozen.run.seed,
            step,
        )));
        Ok(out)
    }

    /// Trains from the current position to `max_epochs` (or an early stop,
    /// an interrupt, or a non-finite loss, which is an error naming the step
    /// and epoch and leaves the params at the last finite update).
    ///
    /// On a GPU ([`Nitro::use_device`]) params, state and optimizer slots
    /// stay on the device between steps; they are synced back to the host
    /// before each checkpoint and when this returns, however it returns.
    pub fn train(&mut self) -> Result<TrainReport> {
        let trained = self.train_loop();
        let synced = self.values.sync_host();
        let report = trained?;
        synced?;
        Ok(report)
    }

    /// Whether every rank stops after this update on an interrupt request
    /// (Ctrl-C, or `interrupt::request_stop` in a test). Alone it
    /// is this process's request; in a group the ranks or-reduce their
    /// requests every [`INTERRUPT_POLL_EVERY`] updates, at the same updates
    /// on every rank (so they stop together), leaving the other updates
    /// one collective (the gradients') instead of two. A request waits for
    /// the next poll: at most that many updates, well under a second.
    fn interrupt_agreed(&self) -> Result<bool> {
        if self.dist.world_size() == 1 {
            return Ok(interrupt::take_request());
        }
        if self.progress.position.step % INTERRUPT_POLL_EVERY != 0 {
            return Ok(false);
        }
        self.dist.any("interrupt", interrupt::take_request())
    }

    fn train_loop(&mut self) -> Result<TrainReport> {
        self.report(true);
        if self.frozen.run.max_epochs == 0 {
            return Err(RunError::Setting {
                setting: "max_epochs",
                reason: "is 0, but training needs at least one epoch: set it (or --max-epochs) to 1 or more".into(),
            });
        }
        if self.progress.stopped_early {
            // A resumed run that had stopped early is finished: training
            // on would not be what the uninterrupted run did.
            let display = self.display();
            display.line(&format!(
                "nitro: this run stopped early after epoch {}; nothing to train (change the stopper, or start a new run dir, to train on)",
                self.progress.position.epoch
            ));
            display.finish();
            return Ok(TrainReport {
                early_stopped: true,
                steps: self.progress.position.step,
                metrics: self
                    .progress
                    .history
                    .last()
                    .map(|h| h.1.clone())
                    .unwrap_or_default(),
                ..TrainReport::default()
            });
        }
        interrupt::install();
        let started = Instant::now();
        let reduced_before = self.dist.all_reduce_time();
        let compiled = self.program(&self.train_kind())?;
        let loss_at = compiled
            .position(&Returned::Loss)
            .ok_or_else(|| RunError::Setting {
                setting: "train",
                reason: "the train step returns no loss".into(),
            })?;
        let data = self.data.clone();
        let train = &data.train;
        let width = self.frozen.run.batch_size;
        // The order of global batches (world · width rows); this rank
        // takes its shard of each (see `batches`).
        let global_width = width * self.frozen.run.world_size;
        let order = EpochOrder::new(train.len(), global_width, self.frozen.run.seed)?
            .with_short_batch(self.frozen.run.short_batch);
        let batches = order.batches_per_epoch();
        let routed: Vec<String> = compiled.sig.names(nitro_graph::Role::Batch(0)).to_vec();
        let keep_micro = !self.frozen.train_metrics.is_empty();
        let mut ckpts = Checkpoints::open(self)?;
        let display = self.display();
        let mut report = TrainReport::default();
        'epochs: while self.progress.position.epoch < self.frozen.run.max_epochs {
            let epoch = self.progress.position.epoch;
            // A resumed epoch keeps the sums of its steps before the resume.
            if self.progress.position.batch == 0 {
                self.progress.epoch_totals = Totals::default();
            }
            let mut windows = batches::windows(
                data.clone(),
                order,
                epoch,
                self.progress.position.batch,
                WindowSpec {
                    accum: self.frozen.run.accum,
                    routed: routed.clone(),
                    metric_fields: self.frozen.metric_fields.clone(),
                    keep_micro,
                    shard: self.dist.shard(width),
                },
            )?;
            let mut prefetched: Option<Prepared> = None;
            while self.progress.position.batch < batches {
                let window = (batches - self.progress.position.batch).min(self.frozen.run.accum);
                let Prepared {
                    inputs,
                    real,
                    global,
                    micro,
                } = match prefetched.take() {
                    Some(p) => p,
                    None => Prepared::on_host(next_window(&mut windows)?),
                };
                let hyper = self.hyper_inputs(self.progress.position.step, &real, &global)?;
                let more = self.progress.position.batch + window < batches;
                let t0 = Instant::now();
                // The next window is gathered on nitro-data's prefetch thread
                // while this step runs, so batching stays off the critical
                // path; once the step is launched its upload is queued too
                // (on a GPU it overlaps the step; see `placement`).
                let mut next: Option<Result<Prepared>> = None;
                let out = self.run_program_then(&compiled, true, hyper, inputs, |me| {
                    if more {
                        next = Some(next_window(&mut windows).and_then(|w| {
                            Ok(Prepared {
                                inputs: me.prepare_batch(w.arrays)?,
                                real: w.real,
                                global: w.global,
                                micro: w.micro,
                            })
                        }));
                    }
                    Ok(())
                });
                report.program_time += t0.elapsed();
                let out = out?;
                prefetched = next.transpose()?;
                let loss = out[loss_at].item().unwrap_or(f64::NAN);
                if !loss.is_finite() {
                    display.finish();
                    return Err(RunError::NonFiniteLoss {
                        loss,
                        step: self.progress.position.step + 1,
                        epoch,
                        last_good: self.progress.position.step,
                    });
                }
                if !self.frozen.train_metrics.is_empty() {
                    let mut step_totals = Totals::default();
                    for (i, batch) in micro.iter().enumerate().take(window) {
                        if real[i] == 0 {
                            continue;
                        }
                        // Metrics never see a padded row.
                        let mine = leaves_of(&compiled, &out, Some(i), width, real[i])?;
                        let sliced;
                        let batch = if real[i] < width {
                            sliced = batch.slice_rows(0, real[i])?;
                            &sliced
                        } else {
                            batch
                        };
                        for m in &self.frozen.train_metrics {
                            let (s, c) = m.compute(&mine, batch);
                            step_totals.add(&m.name, s, c);
                        }
                    }
                    // Every rank's sums and counts, so the running totals
                    // (and the checkpoint rank 0 writes) are global.
                    let names: Vec<&str> = self
                        .frozen
                        .train_metrics
                        .iter()
                        .map(|m| m.name.as_str())
                        .collect();
                    self.dist
                        .reduce_totals("train metrics", &mut step_totals, &names)?;
                    self.progress.epoch_totals.merge(&step_totals);
                }
                self.progress.epoch_totals.add("loss", loss, 1.0);
                self.progress.position.step += 1;
                self.progress.position.batch += window;
                display.step(self.progress.position.step, epoch, loss);
                let stop_now = self.interrupt_agreed()?
                    || self.progress.stop_after == Some(self.progress.position.step);
                if stop_now || ckpts.due_after_step(self.progress.position.step) {
                    // The rows first: a checkpoint never knows rows the
                    // log could lose.
                    display.flush();
                    let path = ckpts.save(self, &BTreeMap::new())?;
                    if stop_now {
                        let saved = path.map_or_else(
                            || "checkpoints are off: nothing saved".to_string(),
                            |p| format!("checkpoint {}", p.display()),
                        );
                        display.line(&format!(
                            "nitro: stopped at step {} (epoch {}); {saved}",
                            self.progress.position.step,
                            epoch + 1,
                        ));
                        report.interrupted = true;
                        break 'epochs;
                    }
                }
            }
            let mut metrics = self.progress.epoch_totals.finish("");
            for (k, v) in self.progress.epoch_totals.finish("train_") {
                if k != "train_loss" {
                    metrics.insert(k, v);
                }
            }
            if let Some(val) = &data.val {
                let t0 = Instant::now();
                for (k, v) in self.evaluate_set(val)? {
                    metrics.insert(format!("val_{k}"), v);
                }
                report.eval_time += t0.elapsed();
            }
            let line = metrics
                .iter()
                .map(|(k, v)| format!("{k} {v:.4}"))
                .collect::<Vec<_>>()
                .join("  ");
            display.line(&format!(
                "epoch {}/{}  {line}",
                epoch + 1,
                self.frozen.run.max_epochs
            ));
            self.progress.history.push((epoch, metrics.clone()));
            display.epoch(self.progress.position.step, epoch, &metrics);
            self.progress.position.epoch += 1;
            self.progress.position.batch = 0;
            report.epochs += 1;
            report.metrics = metrics.clone();
            let stop = self
                .progress
                .stopper
                .as_mut()
                .is_some_and(|s| s.should_stop(epoch, &metrics));
            let last = stop || self.progress.position.epoch >= self.frozen.run.max_epochs;
            if last || ckpts.due_after_epoch(self.progress.position.epoch) {
                display.flush();
                ckpts.save(self, &metrics)?;
            }
            if stop {
                display.line(&format!("nitro: early stop after epoch {}", epoch + 1));
                tracing::info!(target: "nitro::train", epoch = epoch + 1, step = self.progress.position.step, "early stop");
                report.early_stopped = true;
                break;
            }
        }
        if ckpts.unsaved(self.progress.position.step) {
            display.flush();
            ckpts.save(self, &BTreeMap::new())?;
        }
        display.finish();
        report.checkpoint_time = ckpts.finish()?;
        // Rank 0's last checkpoint is on disk before any rank returns.
        self.dist.barrier("train (end)")?;
        report.steps = self.progress.position.step;
        report.wall_time = started.elapsed();
        report.all_reduce_time = self.dist.all_reduce_time() - reduced_before;
        Ok(report)
    }
}

/// The next update's inputs, ready for its step.
struct Prepared {
    /// Program inputs (on the host, or already queued for a GPU).
    inputs: BatchInputs,
    /// Real rows per micro-batch on this rank.
    real: Vec<usize>,
    /// Real rows per micro-batch over every rank.
    global: Vec<usize>,
    /// Host batches for host-side train metrics.
    micro: Vec<nitro_data::Batch>,
}

impl Prepared {
    fn on_host(g: Window) -> Prepared {
        Prepared {
            inputs: BatchInputs::Host(g.arrays),
            real: g.real,
            global: g.global,
            micro: g.micro,
        }
    }
}

/// The next window of the epoch's stream.
fn next_window(windows: &mut nitro_data::Prefetch<Result<Window>>) -> Result<Window> {
    windows.next().unwrap_or_else(|| {
        Err(RunError::Setting {
            setting: "train",
            reason: "the batch stream ended before the epoch's last batch".into(),
        })
    })
}
