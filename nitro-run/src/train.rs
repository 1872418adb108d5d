//! `train()`: the loop around the one fused train step. Per update it
//! gathers `accum` micro-batches (only routed fields; the next window is
//! gathered on a second thread while the current step runs), feeds the scheduled
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

use crate::convert::gather_array;
use crate::error::{Result, RunError};
use crate::experiment::Experiment;
use crate::handle::{outputs_of, slice_rows, Nitro};
use crate::interrupt;
use crate::metric::Totals;
use crate::placement::BatchInputs;
use crate::programs::Kind;

/// Where a run is: updates done, and the next batch to take.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Position {
    /// Updates done.
    pub step: u64,
    /// Current epoch (0-based).
    pub epoch: u64,
    /// Next batch position within the epoch.
    pub batch: usize,
}

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
    /// Time spent writing checkpoints.
    pub checkpoint_time: Duration,
    /// Time spent validating.
    pub eval_time: Duration,
    /// Wall time of the whole call.
    pub wall_time: Duration,
}

fn scalar(v: f64, dtype: DType) -> Array {
    Array::scalar_f32(v as f32).cast(dtype)
}

impl<E: Experiment> Nitro<E> {
    /// Stops training (checkpoint, return) once `step` updates are done, as
    /// Ctrl-C would; for scripted interruption and resume tests.
    pub fn stop_after(&mut self, step: u64) {
        self.stop_after = Some(step);
    }

    fn train_kind(&self) -> Kind {
        Kind::Train {
            width: self.run.batch_size,
            accum: self.run.accum,
            optimizer: self.run.optimizer,
            clip: self.run.clip.is_some(),
            outputs: !self.train_metrics.is_empty(),
            masked: self.short_batch == ShortBatch::PadWithMask,
        }
    }

    /// The hyperparameter inputs of update `step` (0-based): optimizer
    /// values with `lr` from its schedule, the clip norm, the micro-batch
    /// weights (and, for `PadWithMask`, the padded-row corrections).
    /// `real[i]` is the number of real samples in micro-batch `i` (0 for the
    /// filler of a partial window).
    fn hyper_inputs(&mut self, step: u64, real: &[usize]) -> Result<Vec<Array>> {
        let dtype = self.layout.dtype;
        let total = self.run.total;
        let mut lr = self.run.optimizer.lr();
        let mut device_changed = false;
        for (target, schedule) in &self.scheduled {
            let v = schedule.value(step, total);
            if target == "lr" {
                lr = v;
            } else if let Some(i) = self.layout.device.iter().position(|(n, _)| n == target) {
                self.device[i] = Array::scalar_f32(v as f32);
                let value = DeviceValue {
                    shape: vec![],
                    data: DeviceData::F32(vec![v as f32]),
                };
                self.e.set_device_value(self.layout.device[i].0, &value)?;
                device_changed = true;
            }
        }
        if device_changed {
            self.device_values_changed();
        }
        let mut out: Vec<Array> = self
            .run
            .optimizer
            .hyper_values(lr, step + 1)
            .into_iter()
            .map(|(_, v)| scalar(v, dtype))
            .collect();
        if let Some(c) = self.run.clip {
            out.push(scalar(c, dtype));
        }
        let (w, accum) = (self.run.batch_size as f64, self.run.accum);
        let vector = |values: Vec<f32>| {
            Array::new(&[accum], values)
                .expect("accum weights match their shape")
                .cast(dtype)
        };
        match self.short_batch {
            // The mean of the window's micro-batch means: weight 1/window.
            ShortBatch::Drop => {
                let window = real.iter().filter(|&&r| r > 0).count().max(1) as f32;
                out.push(vector(
                    real.iter()
                        .map(|&r| if r > 0 { 1.0 / window } else { 0.0 })
                        .collect(),
                ));
            }
            // The mean over the window's real samples: micro-batch i
            // contributes (W/R)·L_A − ((W − r_i)/R)·L_B (see `programs`).
            ShortBatch::PadWithMask => {
                let total_real = real.iter().sum::<usize>().max(1) as f64;
                let a = real
                    .iter()
                    .map(|&r| if r > 0 { (w / total_real) as f32 } else { 0.0 })
                    .collect();
                let b = real
                    .iter()
                    .map(|&r| {
                        if r > 0 {
                            ((w - r as f64) / total_real) as f32
                        } else {
                            0.0
                        }
                    })
                    .collect();
                out.push(vector(a));
                out.push(vector(b));
            }
        }
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
        let synced = self.sync_host();
        let report = trained?;
        synced?;
        Ok(report)
    }

    fn train_loop(&mut self) -> Result<TrainReport> {
        self.report(true);
        interrupt::install();
        let started = Instant::now();
        let compiled = self.program(&self.train_kind())?;
        let data = self.data.clone();
        let train = &data.train;
        let width = self.run.batch_size;
        let order =
            EpochOrder::new(train.len(), width, self.run.seed)?.with_short_batch(self.short_batch);
        let batches = order.batches_per_epoch();
        let names: Vec<String> = self.layout.fields.iter().map(|(n, _)| n.clone()).collect();
        let fields = train.as_fields();
        let columns = names
            .iter()
            .map(|f| {
                fields.get(f).ok_or_else(|| RunError::BatchField {
                    field: f.clone(),
                    reason: "routed but absent from the training split".into(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut store = self.open_store()?;
        let display = self.display();
        let every = self.run.checkpointer.every_steps;
        let mut report = TrainReport::default();
        let mut last_saved = None;
        'epochs: while self.position.epoch < self.run.max_epochs {
            let epoch = self.position.epoch;
            let perm = order.permutation(epoch);
            let mut totals = Totals::default();
            let mut prefetched: Option<Prepared> = None;
            while self.position.batch < batches {
                let window = (batches - self.position.batch).min(self.run.accum);
                let source = WindowSource {
                    order: &order,
                    perm: &perm,
                    batches,
                    accum: self.run.accum,
                    names: &names,
                    columns: &columns,
                    host_batches: (!self.train_metrics.is_empty()).then_some(train),
                };
                let Prepared {
                    inputs,
                    real,
                    micro,
                } = match prefetched.take() {
                    Some(p) => p,
                    None => Prepared::on_host(source.gather(self.position.batch)?),
                };
                let hyper = self.hyper_inputs(self.position.step, &real)?;
                let next_first = self.position.batch + window;
                let t0 = Instant::now();
                // The next window is gathered on another thread while this
                // step runs, so batching stays off the critical path; once
                // the step is launched its upload is queued too (on a GPU
                // it overlaps the step; see `placement`).
                let mut next: Option<Result<Prepared>> = None;
                let out = std::thread::scope(|scope| {
                    let gathering =
                        (next_first < batches).then(|| scope.spawn(|| source.gather(next_first)));
                    self.run_program_then(&compiled, true, hyper, inputs, |me| {
                        if let Some(h) = gathering {
                            let gathered =
                                h.join().expect("the batch-gathering thread does not panic");
                            next = Some(gathered.and_then(|g| {
                                Ok(Prepared {
                                    inputs: me.prepare_batch(g.arrays)?,
                                    real: g.real,
                                    micro: g.micro,
                                })
                            }));
                        }
                        Ok(())
                    })
                });
                report.program_time += t0.elapsed();
                let out = out?;
                prefetched = next.transpose()?;
                let loss = out[0].item().unwrap_or(f64::NAN);
                if !loss.is_finite() {
                    display.finish();
                    return Err(RunError::NonFiniteLoss {
                        loss,
                        step: self.position.step + 1,
                        epoch,
                        last_good: self.position.step,
                    });
                }
                if !self.train_metrics.is_empty() {
                    let outputs = outputs_of(&compiled, out, "", width);
                    for (i, batch) in micro.iter().enumerate().take(window) {
                        let prefix = format!("out{i}.");
                        // Metrics never see a padded row.
                        let mine = outputs
                            .iter()
                            .filter_map(|(k, v)| {
                                Some((k.strip_prefix(&prefix)?.to_string(), slice_rows(v, real[i])))
                            })
                            .collect();
                        let sliced;
                        let batch = if real[i] < width {
                            sliced = batch.slice_rows(0, real[i])?;
                            &sliced
                        } else {
                            batch
                        };
                        for m in &self.train_metrics {
                            let (s, c) = m.compute(&mine, batch);
                            totals.add(&m.name, s, c);
                        }
                    }
                }
                totals.add("loss", loss, 1.0);
                self.position.step += 1;
                self.position.batch += window;
                display.step(self.position.step, epoch, loss);
                let stop_now =
                    interrupt::take_request() || self.stop_after == Some(self.position.step);
                if stop_now || (every > 0 && self.position.step % every == 0) {
                    let t0 = Instant::now();
                    let path = self.save_checkpoint(&mut store, &BTreeMap::new())?;
                    report.checkpoint_time += t0.elapsed();
                    last_saved = Some(self.position.step);
                    if stop_now {
                        display.line(&format!(
                            "nitro: stopped at step {} (epoch {}); checkpoint {}",
                            self.position.step,
                            epoch + 1,
                            path.display()
                        ));
                        report.interrupted = true;
                        break 'epochs;
                    }
                }
            }
            let mut metrics = totals.finish("");
            for (k, v) in totals.finish("train_") {
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
                self.run.max_epochs
            ));
            self.history.push((epoch, metrics.clone()));
            display.epoch(self.position.step, epoch, &metrics);
            self.position.epoch += 1;
            self.position.batch = 0;
            report.epochs += 1;
            report.metrics = metrics.clone();
            let stop = self
                .stopper
                .as_mut()
                .is_some_and(|s| s.should_stop(epoch, &metrics));
            let last = stop || self.position.epoch >= self.run.max_epochs;
            if self.run.checkpointer.every_epoch || last {
                let t0 = Instant::now();
                self.save_checkpoint(&mut store, &metrics)?;
                report.checkpoint_time += t0.elapsed();
                last_saved = Some(self.position.step);
            }
            if stop {
                display.line(&format!("nitro: early stop after epoch {}", epoch + 1));
                tracing::info!(target: "nitro::train", epoch = epoch + 1, step = self.position.step, "early stop");
                report.early_stopped = true;
                break;
            }
        }
        if last_saved != Some(self.position.step) && self.position.step > 0 {
            let t0 = Instant::now();
            self.save_checkpoint(&mut store, &BTreeMap::new())?;
            report.checkpoint_time += t0.elapsed();
        }
        display.finish();
        report.steps = self.position.step;
        report.wall_time = started.elapsed();
        Ok(report)
    }
}

/// The next update's inputs, ready for its step.
struct Prepared {
    /// Program inputs (on the host, or already queued for a GPU).
    inputs: BatchInputs,
    /// Real rows per micro-batch.
    real: Vec<usize>,
    /// Host batches for host-side train metrics.
    micro: Vec<nitro_data::Batch>,
}

impl Prepared {
    fn on_host(g: Gathered) -> Prepared {
        Prepared {
            inputs: BatchInputs::Host(g.arrays),
            real: g.real,
            micro: g.micro,
        }
    }
}

/// One update's worth of gathered micro-batches.
struct Gathered {
    /// Program inputs: every routed field of every micro-batch, in order.
    arrays: Vec<Array>,
    /// Real rows per micro-batch (0 for the filler of a partial window).
    real: Vec<usize>,
    /// Host batches, only when host-side train metrics need them.
    micro: Vec<nitro_data::Batch>,
}

/// Where windows of micro-batches come from within one epoch.
struct WindowSource<'a> {
    order: &'a EpochOrder,
    perm: &'a [usize],
    batches: usize,
    accum: usize,
    names: &'a [String],
    columns: &'a [&'a nitro_data::HostArray],
    host_batches: Option<&'a nitro_data::InMemory>,
}

impl WindowSource<'_> {
    /// Gather the window starting at batch position `first`. A partial
    /// final window repeats its last micro-batch as filler (weight 0).
    fn gather(&self, first: usize) -> Result<Gathered> {
        let window = (self.batches - first).min(self.accum);
        let names: Vec<&str> = self.names.iter().map(String::as_str).collect();
        let mut g = Gathered {
            arrays: Vec::new(),
            real: vec![0; self.accum],
            micro: Vec::new(),
        };
        for i in 0..self.accum {
            let slot = self
                .order
                .slot_in(self.perm, first + i.min(window - 1))
                .expect("positions below batches_per_epoch have a slot");
            for (f, column) in self.names.iter().zip(self.columns) {
                g.arrays.push(gather_array(f, column, &slot.indices)?);
            }
            if i < window {
                g.real[i] = slot.real;
            }
            if let Some(train) = self.host_batches {
                g.micro.push(train.gather(&slot.indices, &names)?);
            }
        }
        Ok(g)
    }
}
