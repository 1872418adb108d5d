//! The `Nitro` handle: setup (and nothing else) in `new`, frozen run
//! values, lazy programs, Device values on the live handle, `predict` and
//! `evaluate` with padding.

use std::collections::BTreeMap;
use std::sync::Arc;

use nitro_data::{Batch, Dataset, HookFields, InMemory, PadFill, RoutingPlan, ShortBatch, Splits};
use nitro_graph::nn::init::InitRng;
use nitro_graph::{Array, DType, HostBuffer, TensorSpec};
use nitro_markers::{BatchFields, Category, DeviceInput, Recipe};

use crate::convert::{device_spec, device_to_array, program_dtype, signature, to_array};
use crate::error::{Result, RunError};
use crate::experiment::Experiment;
use crate::metric::{HostOutputs, Metric, Totals};
use crate::placement::{BatchInputs, Placement};
use crate::programs::{self, Compiled, Executable, Kind, Layout};
use crate::report::{report_enabled, RunValues};
use crate::schedule::Schedule;
use crate::stop::Stopper;
use crate::train::Position;

/// A run of experiment `E`: its data, model, parameters, Device values and
/// frozen run values. Build one per training job; reuse it for evaluation,
/// prediction and Device sweeps.
pub struct Nitro<E: Experiment> {
    pub(crate) e: E,
    pub(crate) model: E::Model,
    pub(crate) data: Arc<Splits>,
    pub(crate) layout: Layout,
    pub(crate) params: Vec<Array>,
    pub(crate) state: Vec<Array>,
    pub(crate) opt: Vec<Array>,
    pub(crate) device: Vec<Array>,
    pub(crate) run: RunValues,
    pub(crate) transfer: Vec<String>,
    pub(crate) metrics: Vec<Metric>,
    pub(crate) train_metrics: Vec<Metric>,
    pub(crate) scheduled: Vec<(String, Schedule)>,
    pub(crate) stopper: Option<Box<dyn Stopper>>,
    pub(crate) position: Position,
    pub(crate) history: Vec<(u64, BTreeMap<String, f64>)>,
    pub(crate) compile_log: Vec<String>,
    pub(crate) stop_after: Option<u64>,
    /// The short-final-batch policy, frozen at construction.
    pub(crate) short_batch: ShortBatch,
    /// Where programs run; on a GPU, the resident copies of
    /// params/state/opt/device (see `placement`).
    pub(crate) placement: Placement,
    reported: bool,
}

fn hook_fields<F: BatchFields<nitro_graph::Tensor>>(hook: &str) -> HookFields {
    if F::takes_whole_batch() {
        HookFields::whole_batch(hook)
    } else {
        HookFields::new(hook, F::required_fields(), F::optional_fields())
    }
}

impl<E: Experiment> Nitro<E> {
    /// Setup only: build_data, derive, build_model, device conversion,
    /// routing. Compiles nothing.
    pub fn new(e: E) -> Result<Self> {
        Self::setup(e, None, None)
    }

    /// Setup from a recipe (`E::from_preset(..)`), recording its preset name.
    pub fn from_recipe(recipe: Recipe<E>) -> Result<Self> {
        Self::setup(recipe.experiment, recipe.preset, None)
    }

    /// Setup on an existing data collection (from [`Nitro::data`]): a
    /// rebuild loads no data. `derive` still runs.
    pub fn with_data(e: E, data: Arc<Splits>) -> Result<Self> {
        Self::setup(e, None, Some(data))
    }

    fn setup(mut e: E, preset: Option<String>, data: Option<Arc<Splits>>) -> Result<Self> {
        E::validate()?;
        let data = match data {
            Some(d) => d,
            None => Arc::new(e.build_data(None).map_err(|source| RunError::Hook {
                hook: "build_data",
                source,
            })?),
        };
        e.derive(&data).map_err(|source| RunError::Hook {
            hook: "derive",
            source,
        })?;
        let seed = e.seed();
        let parts = e.build_model(&mut InitRng::new(seed));
        let dtype = parts
            .params
            .values()
            .next()
            .map_or(DType::F32, |a| a.dtype());
        let plan = RoutingPlan::for_dataset(
            &data.train,
            &[
                hook_fields::<E::Inputs>("forward"),
                hook_fields::<E::Targets>("loss"),
            ],
        )?;
        let present = |hook: &str| -> Vec<String> {
            plan.route(hook)
                .map(|r| r.present.clone())
                .unwrap_or_default()
        };
        let transfer: Vec<String> = plan.transfer().iter().map(|s| s.to_string()).collect();
        let field_specs = data.train.fields();
        let fields = transfer
            .iter()
            .filter_map(|f| {
                let spec = field_specs.iter().find(|s| &s.name == f)?;
                Some((
                    f.clone(),
                    TensorSpec::new(program_dtype(spec.dtype), &spec.sample_shape),
                ))
            })
            .collect();
        let device_values = e.device_values();
        let layout = Layout {
            params: parts
                .params
                .iter()
                .map(|(n, a)| (n.clone(), a.spec().clone()))
                .collect(),
            state: parts
                .state
                .iter()
                .map(|(n, a)| (n.clone(), a.spec().clone()))
                .collect(),
            device: device_values
                .iter()
                .map(|(n, v)| (*n, device_spec(v)))
                .collect(),
            fields,
            forward_fields: present("forward"),
            loss_fields: present("loss"),
            dtype,
        };
        let short_batch = e.short_batch();
        let run = Self::resolve_run_values(&e, preset, data.train.len(), short_batch)?;
        let scheduled = e.schedule();
        for (target, _) in &scheduled {
            Self::check_schedule_target(&layout, target)?;
        }
        // Forward's output rules are setup errors: trace it once, compile nothing.
        programs::check_forward(&e, &parts.model, &layout, run.batch_size)?;
        let opt = (0..run.optimizer.slots())
            .flat_map(|_| layout.params.iter().map(|(_, s)| Array::zeros(s)))
            .collect();
        let metrics = e.metrics();
        let train_metrics = e.train_metrics();
        let stopper = e.early_stop();
        let mut known: Vec<String> = vec!["loss".into()];
        known.extend(train_metrics.iter().map(|m| format!("train_{}", m.name)));
        if data.val.is_some() {
            known.push("val_loss".into());
            known.extend(metrics.iter().map(|m| format!("val_{}", m.name)));
        }
        let unknown = |user: &'static str, metric: &str| RunError::UnknownMetric {
            user,
            metric: metric.into(),
            available: known.join(", "),
        };
        if let Some(s) = &stopper {
            if !known.iter().any(|k| k == s.monitored()) {
                return Err(unknown("early_stop", s.monitored()));
            }
        }
        if let Some((metric, _, _)) = &run.checkpointer.best {
            if !known.iter().any(|k| k == metric) {
                return Err(unknown("checkpointer (best)", metric));
            }
        }
        tracing::info!(target: "nitro::setup", experiment = E::experiment_name(), train = data.train.len(), params = layout.params.len(), "setup done");
        Ok(Nitro {
            model: parts.model,
            params: parts.params.into_values().collect(),
            state: parts.state.into_values().collect(),
            device: device_values
                .iter()
                .map(|(_, v)| device_to_array(v))
                .collect(),
            e,
            data,
            layout,
            opt,
            run,
            transfer,
            metrics,
            train_metrics,
            scheduled,
            stopper,
            position: Position::default(),
            history: vec![],
            compile_log: vec![],
            stop_after: None,
            short_batch,
            placement: Placement::cpu(),
            reported: false,
        })
    }

    fn resolve_run_values(
        e: &E,
        preset: Option<String>,
        n_train: usize,
        short_batch: ShortBatch,
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
        let batches = match short_batch {
            ShortBatch::Drop => n_train / batch_size,
            ShortBatch::PadWithMask => n_train.div_ceil(batch_size),
        } as u64;
        if batches == 0 {
            return Err(RunError::Setting {
                setting: "batch_size",
                reason: format!(
                    "{batch_size} is larger than the {n_train} training samples; lower it or use `ShortBatch::PadWithMask`"
                ),
            });
        }
        let updates_per_epoch = batches.div_ceil(accum as u64);
        let max_epochs = e.max_epochs();
        Ok(RunValues {
            seed: e.seed(),
            batch_size,
            accum,
            max_epochs,
            updates_per_epoch,
            total: updates_per_epoch * max_epochs,
            clip: e.clip(),
            run_dir: e.run_dir(),
            preset,
            optimizer: e.optimizer(),
            checkpointer: e.checkpointer(),
            logger: e.logger(),
        })
    }

    fn check_schedule_target(layout: &Layout, target: &str) -> Result<()> {
        if target == "lr" {
            return Ok(());
        }
        let scalar = TensorSpec::new(DType::F32, &[]);
        match layout.device.iter().find(|(n, _)| *n == target) {
            Some((_, spec)) if *spec == scalar => Ok(()),
            Some((_, spec)) => Err(RunError::Schedule {
                target: target.into(),
                reason: format!(
                    "a schedule drives an f32 scalar; this Device field is {}",
                    signature(spec)
                ),
            }),
            None => Err(RunError::Schedule {
                target: target.into(),
                reason: format!(
                    "only `lr` and Device fields can be scheduled (Device fields: {})",
                    E::device_fields().join(", ")
                ),
            }),
        }
    }

    /// The experiment (with Device fields at their current values).
    pub fn experiment(&self) -> &E {
        &self.e
    }

    /// The data collection, to rebuild a handle without loading it again.
    pub fn data(&self) -> Arc<Splits> {
        self.data.clone()
    }

    /// The frozen run values.
    pub fn run_values(&self) -> &RunValues {
        &self.run
    }

    /// Batch fields transferred to programs (every other field is never
    /// gathered or copied).
    pub fn routed_fields(&self) -> &[String] {
        &self.transfer
    }

    /// Parameters by path (host copies, current: a GPU run syncs them
    /// back before any entry point returns).
    pub fn params(&self) -> BTreeMap<String, Array> {
        self.assert_host_fresh();
        named(&self.layout.params, &self.params)
    }

    /// Model state by path (host copies, current as for [`Nitro::params`]).
    pub fn state(&self) -> BTreeMap<String, Array> {
        self.assert_host_fresh();
        named(&self.layout.state, &self.state)
    }

    /// Every host read of params/state/opt happens after the sync point
    /// (see `placement`); a read before it would be a nitro bug.
    pub(crate) fn assert_host_fresh(&self) {
        debug_assert!(
            self.placement.host_fresh(),
            "nitro bug: host params read before the GPU sync point"
        );
    }

    /// The model structure.
    pub fn model(&self) -> &E::Model {
        &self.model
    }

    /// Every recompile this handle caused, with its reason.
    pub fn compile_log(&self) -> &[String] {
        &self.compile_log
    }

    /// Metrics recorded per epoch: `(epoch, {name: value})`.
    pub fn history(&self) -> &[(u64, BTreeMap<String, f64>)] {
        &self.history
    }

    /// The short-final-batch policy frozen at construction.
    pub fn short_batch(&self) -> ShortBatch {
        self.short_batch
    }

    /// Updates done so far.
    pub fn step(&self) -> u64 {
        self.position.step
    }

    /// Prints the frozen-values report (once per handle unless `always`).
    pub(crate) fn report(&mut self, always: bool) {
        if report_enabled() && (always || !self.reported) {
            eprintln!("{}", self.config_report());
        }
        self.reported = true;
    }

    /// The one-screen report of the values frozen at construction, with a
    /// `!` line for every scalar accessor that returns something else now
    /// than it did then (the handle keeps the frozen value; rebuild to pick
    /// the new one up). Accessors that construct objects (`early_stop`,
    /// `checkpointer`, `logger`) are never probed.
    pub fn config_report(&self) -> String {
        let mut text = self.run.report(E::experiment_name());
        if self.placement.device() != nitro_graph::Device::Cpu {
            text.push_str(&format!("\n  programs run on {}", self.placement.device()));
        }
        let e = &self.e;
        let show = |c: Option<f64>| c.map_or_else(|| "off".to_string(), |c| c.to_string());
        let probes: [(&str, String, String); 7] = [
            ("seed", self.run.seed.to_string(), e.seed().to_string()),
            (
                "batch_size",
                self.run.batch_size.to_string(),
                e.batch_size().to_string(),
            ),
            ("accum", self.run.accum.to_string(), e.accum().to_string()),
            (
                "max_epochs",
                self.run.max_epochs.to_string(),
                e.max_epochs().to_string(),
            ),
            ("clip", show(self.run.clip), show(e.clip())),
            (
                "run_dir",
                self.run.run_dir.display().to_string(),
                e.run_dir().display().to_string(),
            ),
            (
                "short_batch",
                format!("{:?}", self.short_batch),
                format!("{:?}", e.short_batch()),
            ),
        ];
        for (name, then, now) in probes {
            if then != now {
                text.push_str(&format!(
                    "\n  ! `{name}(e)` was redefined: it returned {then} at construction and returns {now} now."
                ));
            }
        }
        text
    }

    pub(crate) fn program(&mut self, kind: &Kind) -> Result<Compiled> {
        self.program_on(kind, self.placement.device())
    }

    /// The program for `kind` compiled for `device` (export wants the
    /// graph, never a GPU compile).
    pub(crate) fn program_on(
        &mut self,
        kind: &Kind,
        device: nitro_graph::Device,
    ) -> Result<Compiled> {
        let (compiled, reason) = programs::get(&self.e, &self.model, &self.layout, kind, device)?;
        if let Some(why) = reason {
            tracing::info!(target: "nitro::compile", program = kind.name(), reason = %why, "compiling");
            if report_enabled() || nitro_cache::log_compiles() {
                eprintln!("nitro: compiling {why}");
            }
            self.compile_log.push(why);
        }
        Ok(compiled)
    }

    /// Writes Device field `name` on the live handle: zero compiles, the
    /// next program call sees the new value. Refused for GraphConst, Host
    /// and scheduled fields, and for a value of another dtype or shape.
    pub fn set_device(&mut self, name: &str, value: impl DeviceInput) -> Result<()> {
        const NEW_NITRO: &str = "build a new Nitro with the new value";
        let refuse = |reason: String, fix: &'static str| RunError::SetDevice {
            field: name.into(),
            reason,
            fix,
        };
        match E::category(name) {
            None => {
                return Err(RunError::UnknownField {
                    field: name.into(),
                    experiment: E::experiment_name(),
                    available: E::field_names().join(", "),
                })
            }
            Some(Category::GraphConst) => {
                return Err(refuse(
                    "it is a GraphConst field, baked into the compiled programs as a constant".into(),
                    "build a new Nitro with the new value (it compiles once per distinct value)",
                ))
            }
            Some(Category::Host) => {
                return Err(refuse(
                    "it is a Host field, which reaches no compiled program, so writing it on a live handle would change nothing".into(),
                    "set it on the experiment and build a new Nitro",
                ))
            }
            Some(Category::Device) => {}
        }
        if self.scheduled.iter().any(|(t, _)| t == name) {
            return Err(refuse(
                "it is driven by the run's schedule every update".into(),
                "change `schedule()` and build a new Nitro",
            ));
        }
        let value = value.to_device_value();
        let index = self
            .layout
            .device
            .iter()
            .position(|(n, _)| *n == name)
            .expect("every Device field has a slot");
        let (expected, given) = (&self.layout.device[index].1, device_spec(&value));
        if *expected != given {
            return Err(refuse(
                format!(
                    "the value is {} but the programs take {}, and a new signature would move the compile key",
                    signature(&given),
                    signature(expected)
                ),
                NEW_NITRO,
            ));
        }
        self.e.set_device_value(name, &value)?;
        self.device[index] = device_to_array(&value);
        self.device_values_changed();
        Ok(())
    }

    /// Reads Device field `name` back as a host value.
    pub fn device_value<T: DeviceInput>(&self, name: &str) -> Result<T> {
        let found = self.e.device_values().into_iter().find(|(n, _)| *n == name);
        let Some((_, value)) = found else {
            return Err(RunError::SetDevice {
                field: name.into(),
                reason: format!(
                    "it is not a Device field (Device fields: {})",
                    E::device_fields().join(", ")
                ),
                fix: "read GraphConst and Host fields from `experiment()`",
            });
        };
        T::from_device_value(&value).map_err(|e| RunError::SetDevice {
            field: name.into(),
            reason: e.to_string(),
            fix: "ask for the field's own type",
        })
    }

    /// Runs `compiled` on params, state, device values and `tail`, moving
    /// the handle's arrays in and back out (no copies). A CUDA program runs
    /// on the resident copies instead (see `placement`).
    pub(crate) fn run_program(
        &mut self,
        compiled: &Compiled,
        with_opt: bool,
        middle: Vec<Array>,
        tail: Vec<Array>,
    ) -> Result<Vec<Array>> {
        self.run_program_then(compiled, with_opt, middle, BatchInputs::Host(tail), |_| {
            Ok(())
        })
    }

    /// [`Nitro::run_program`] with the batch possibly queued ahead
    /// ([`Nitro::prepare_batch`]) and a hook that runs once the program is
    /// launched and before its outputs are read: on a GPU, work done there
    /// overlaps the step (the train loop queues the next batch's upload).
    pub(crate) fn run_program_then(
        &mut self,
        compiled: &Compiled,
        with_opt: bool,
        middle: Vec<Array>,
        tail: BatchInputs,
        after_launch: impl FnOnce(&Self) -> Result<()>,
    ) -> Result<Vec<Array>> {
        let program = match &compiled.exe {
            Executable::Cpu(p) => p.clone(),
            #[cfg(feature = "cuda")]
            Executable::Cuda(p) => {
                return self.run_resident(p, with_opt, middle, tail, after_launch);
            }
        };
        #[cfg(feature = "cuda")]
        let BatchInputs::Host(tail) = tail
        else {
            return Err(crate::placement::device_error(
                nitro_graph::Device::Cpu,
                "a batch staged for a GPU reached a CPU program".into(),
            ));
        };
        #[cfg(not(feature = "cuda"))]
        let BatchInputs::Host(tail) = tail;
        let result = crate::placement::lend_values(
            [
                Some(&mut self.params),
                Some(&mut self.state),
                with_opt.then_some(&mut self.opt),
                Some(&mut self.device),
            ],
            middle.into_iter().chain(tail),
            |args| program.run(args),
        );
        let outs = result.map_err(|source| RunError::Exec {
            program: program.name().to_string(),
            source: Box::new(source),
        })?;
        after_launch(self)?;
        Ok(outs)
    }

    fn batch_arrays(&self, batch: &Batch, fields: &[String]) -> Result<Vec<Array>> {
        fields
            .iter()
            .map(|f| to_array(f, batch.require(f)?))
            .collect()
    }

    /// Forward outputs for `batch` (any number of rows): run at the compiled
    /// width, short chunks padded, outputs sliced back to the real rows.
    pub fn predict(&mut self, batch: &Batch) -> Result<HostOutputs> {
        self.report(false);
        let width = self.run.batch_size;
        let compiled = self.program(&Kind::Predict { width })?;
        let fields: Vec<String> = self
            .layout
            .fields
            .iter()
            .map(|(n, _)| n.clone())
            .filter(|n| self.layout.forward_fields.contains(n))
            .collect();
        let rows = batch.rows();
        let mut parts: Vec<HostOutputs> = vec![];
        let mut start = 0;
        while start < rows || (rows == 0 && parts.is_empty()) {
            let end = (start + width).min(rows);
            let chunk = if start == 0 && end == rows {
                None
            } else {
                Some(batch.slice_rows(start, end)?)
            };
            let chunk_ref = chunk.as_ref().unwrap_or(batch);
            let (padded, real) = pad(chunk_ref, width)?;
            let arrays = self.batch_arrays(padded.as_ref().unwrap_or(chunk_ref), &fields)?;
            let out = self.run_program(&compiled, false, vec![], arrays)?;
            parts.push(outputs_of(&compiled, out, "out.", real));
            start = end;
            if rows == 0 {
                break;
            }
        }
        Ok(concat_outputs(parts))
    }

    /// Loss and metrics over a whole split (`"train"`, `"val"`, `"test"`),
    /// at the compiled width; the short final batch is padded and its
    /// outputs sliced, so metrics never see a padded sample. Keys: `loss`
    /// and each metric's name.
    pub fn evaluate(&mut self, split: &str) -> Result<BTreeMap<String, f64>> {
        self.report(false);
        let data = self.data.clone();
        let set = match split {
            "train" => Some(&data.train),
            "val" => data.val.as_ref(),
            "test" => data.test.as_ref(),
            _ => None,
        };
        let Some(set) = set else {
            return Err(RunError::Setting {
                setting: "evaluate",
                reason: format!("split `{split}` is absent; build_data returned no such split"),
            });
        };
        self.evaluate_set(set)
    }

    pub(crate) fn evaluate_set(&mut self, set: &InMemory) -> Result<BTreeMap<String, f64>> {
        let width = self.run.batch_size;
        let compiled = self.program(&Kind::Eval { width })?;
        let fields: Vec<String> = self.layout.fields.iter().map(|(n, _)| n.clone()).collect();
        let names: Vec<&str> = fields.iter().map(String::as_str).collect();
        let mut totals = Totals::default();
        let mut start = 0;
        while start < set.len() {
            let end = (start + width).min(set.len());
            let indices: Vec<usize> = (start..end).collect();
            let batch = set.gather(&indices, &names)?;
            let (padded, real) = pad(&batch, width)?;
            let arrays = self.batch_arrays(padded.as_ref().unwrap_or(&batch), &fields)?;
            // The exact mean over the real rows (see `programs`): padded
            // rows carry weight 0.
            let (w, r) = (width as f64, real as f64);
            let dtype = self.layout.dtype;
            let coefficients = vec![
                Array::scalar_f32((w / r) as f32).cast(dtype),
                Array::scalar_f32(((w - r) / r) as f32).cast(dtype),
            ];
            let out = self.run_program(&compiled, false, coefficients, arrays)?;
            let loss = out[compiled.index("loss").expect("eval returns its loss")]
                .item()
                .unwrap_or(f64::NAN);
            totals.add("loss", loss * real as f64, real as f64);
            let outputs = outputs_of(&compiled, out, "out.", real);
            for m in &self.metrics {
                let (s, c) = m.compute(&outputs, &batch);
                totals.add(&m.name, s, c);
            }
            start = end;
        }
        Ok(totals.finish(""))
    }
}

fn named(specs: &[(String, TensorSpec)], arrays: &[Array]) -> BTreeMap<String, Array> {
    specs
        .iter()
        .map(|(n, _)| n.clone())
        .zip(arrays.iter().cloned())
        .collect()
}

/// Pads a short batch to `width` (copies of the last real row); `None`
/// when it is already full.
fn pad(batch: &Batch, width: usize) -> Result<(Option<Batch>, usize)> {
    let real = batch.rows();
    if real == width {
        return Ok((None, real));
    }
    let (padded, real) = nitro_data::pad_to_width(batch, width, PadFill::RepeatLast)?;
    Ok((Some(padded), real))
}

/// The first `rows` rows of `a`.
pub(crate) fn slice_rows(a: &Array, rows: usize) -> Array {
    if a.shape().first() == Some(&rows) {
        return a.clone();
    }
    let mut shape = a.shape().to_vec();
    let per: usize = shape[1..].iter().product();
    shape[0] = rows;
    let n = rows * per;
    let buffer: HostBuffer = match a.data() {
        HostBuffer::F32(v) => v[..n].to_vec().into(),
        HostBuffer::F64(v) => v[..n].to_vec().into(),
        HostBuffer::I32(v) => v[..n].to_vec().into(),
        HostBuffer::I64(v) => v[..n].to_vec().into(),
        _ => a.to_f32_vec()[..n].to_vec().into(),
    };
    Array::new(&shape, buffer).expect("a row prefix keeps the shape consistent")
}

/// Named outputs with `prefix` stripped, sliced to `real` rows.
pub(crate) fn outputs_of(
    compiled: &Compiled,
    out: Vec<Array>,
    prefix: &str,
    real: usize,
) -> HostOutputs {
    compiled
        .returned
        .iter()
        .zip(out)
        .filter_map(|(n, a)| Some((n.strip_prefix(prefix)?.to_string(), slice_rows(&a, real))))
        .collect()
}

pub(crate) fn concat_outputs(mut parts: Vec<HostOutputs>) -> HostOutputs {
    if parts.len() == 1 {
        return parts.pop().unwrap_or_default();
    }
    let mut out = HostOutputs::new();
    let Some(first) = parts.first() else {
        return out;
    };
    for name in first.keys() {
        let arrays: Vec<&Array> = parts.iter().filter_map(|p| p.get(name)).collect();
        let mut shape = arrays[0].shape().to_vec();
        shape[0] = arrays.iter().map(|a| a.shape()[0]).sum();
        let values: Vec<f32> = arrays.iter().flat_map(|a| a.to_f32_vec()).collect();
        let dtype = arrays[0].dtype();
        if let Ok(a) = Array::new(&shape, values) {
            out.insert(name.clone(), a.cast(dtype));
        }
    }
    out
}
