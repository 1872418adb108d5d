//! The `Nitro` handle: one run of an experiment, made of parts with one job
//! each. Setup builds it (`setup`); it owns the experiment, the model and
//! the data, its programs (`programs`: layout, memo, compile log), its
//! values (params, state, optimizer slots, Device values and where they
//! live: `placement`), the values frozen at construction ([`Frozen`]) and
//! where the run is ([`RunState`]). The entry points live beside the part
//! they drive: `infer` (predict, evaluate), `train`, `ckpt` (checkpoint,
//! resume), `export`.

use std::collections::BTreeMap;
use std::sync::Arc;

use nitro_data::{ShortBatch, Splits};
use nitro_graph::{Array, TensorSpec};
use nitro_markers::{Category, DeviceInput};

use crate::convert::{device_spec, device_to_array, signature};
use crate::dist::Distributed;
use crate::error::{Result, RunError};
use crate::experiment::Experiment;
use crate::layout::Kind;
use crate::metric::Metric;
use crate::placement::{BatchInputs, Values};
use crate::programs::{Compiled, Programs};
use crate::report::{report_enabled, Probes, RunValues};
use crate::run_state::RunState;
use crate::schedule::Schedule;
use crate::structure::Structure;

/// What setup resolved once and the handle never re-reads: run values,
/// routing, metrics, schedules, and the model's structure.
pub(crate) struct Frozen {
    pub run: RunValues,
    /// The accessors' values at construction (the report's probes).
    pub probes: Probes,
    /// Batch fields transferred to programs.
    pub transfer: Vec<String>,
    /// Batch fields host metrics read (gathered, never transferred).
    pub metric_fields: Vec<String>,
    pub metrics: Vec<Metric>,
    pub train_metrics: Vec<Metric>,
    pub scheduled: Vec<(String, Schedule)>,
    /// The traced forward graph's identity, checked on resume.
    pub structure: Structure,
    /// Device fields `derive` computes: recomputed on resume, never restored.
    pub derived: Vec<&'static str>,
}

/// A run of experiment `E`: its data, model, parameters, Device values and
/// frozen run values. Build one per training job; reuse it for evaluation,
/// prediction and Device sweeps.
pub struct Nitro<E: Experiment> {
    pub(crate) e: E,
    pub(crate) model: E::Model,
    pub(crate) data: Arc<Splits>,
    pub(crate) programs: Programs,
    pub(crate) frozen: Frozen,
    pub(crate) progress: RunState,
    /// The values programs run on and where they live (see `placement`).
    pub(crate) values: Values,
    pub(crate) reported: bool,
    /// The job's process group (a world of one without `mpirun`).
    pub(crate) dist: Distributed,
}

fn named(specs: &[(String, TensorSpec)], arrays: &[Array]) -> BTreeMap<String, Array> {
    specs
        .iter()
        .map(|(n, _)| n.clone())
        .zip(arrays.iter().cloned())
        .collect()
}

impl<E: Experiment> Nitro<E> {
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
        &self.frozen.run
    }

    /// Batch fields transferred to programs (every other field is never
    /// gathered or copied).
    pub fn routed_fields(&self) -> &[String] {
        &self.frozen.transfer
    }

    /// Parameters by path (host copies, current: a GPU run syncs them
    /// back before any entry point returns).
    pub fn params(&self) -> BTreeMap<String, Array> {
        self.assert_host_fresh();
        named(&self.programs.layout.params, &self.values.params)
    }

    /// Model state by path (host copies, current as for [`Nitro::params`]).
    pub fn state(&self) -> BTreeMap<String, Array> {
        self.assert_host_fresh();
        named(&self.programs.layout.state, &self.values.state)
    }

    /// Every host read of params/state/opt happens after the sync point
    /// (see `placement`); a read before it would be a nitro bug.
    pub(crate) fn assert_host_fresh(&self) {
        debug_assert!(
            self.values.host_fresh(),
            "nitro bug: host params read before the GPU sync point"
        );
    }

    /// Runs this handle's programs on `device` from now on: `Device::Cpu`,
    /// or `Device::Cuda(n)` (feature `cuda`, a driver and a GPU `n`). The
    /// GPU is opened now, so a missing driver is an error here, naming the
    /// fix, not at the first step. Switching back syncs the values to the
    /// host and frees the GPU copies. Programs compile on first use per
    /// device (the device is part of every compile key). In a
    /// data-parallel job every rank calls it at the same point, each with its
    /// own GPU: a GPU's NCCL communicator is bootstrapped here, and the train
    /// step's all-reduce sums device buffers through it.
    pub fn use_device(&mut self, device: nitro_graph::Device) -> Result<()> {
        self.values.use_device(device, &self.dist)
    }

    /// The device this handle's programs run on.
    pub fn execution_device(&self) -> nitro_graph::Device {
        self.values.device()
    }

    /// The job's process group: rank, world size, transport.
    pub fn distributed(&self) -> &Distributed {
        &self.dist
    }

    /// The model structure.
    pub fn model(&self) -> &E::Model {
        &self.model
    }

    /// Every recompile this handle caused, with its reason.
    pub fn compile_log(&self) -> &[String] {
        self.programs.log()
    }

    /// Metrics recorded per epoch: `(epoch, {name: value})`.
    pub fn history(&self) -> &[(u64, BTreeMap<String, f64>)] {
        &self.progress.history
    }

    /// The short-final-batch policy frozen at construction.
    pub fn short_batch(&self) -> ShortBatch {
        self.frozen.run.short_batch
    }

    /// Updates done so far.
    pub fn step(&self) -> u64 {
        self.progress.position.step
    }

    /// Prints the frozen-values report (once per handle unless `always`),
    /// on rank 0 only in a data-parallel job.
    pub(crate) fn report(&mut self, always: bool) {
        if report_enabled() && self.dist.is_root() && (always || !self.reported) {
            eprintln!("{}", self.config_report());
        }
        self.reported = true;
    }

    /// The one-screen report of the values frozen at construction, with a
    /// `!` line for every scalar accessor that returns something else now
    /// than it did then (the handle keeps the frozen value; rebuild to pick
    /// the new one up). Values a driver set (`RunOverrides`) are marked as
    /// such, never as redefinitions. Accessors that construct objects
    /// (`early_stop`, `checkpointer`, `logger`) are never probed.
    pub fn config_report(&self) -> String {
        let mut text = self.frozen.run.report(E::experiment_name());
        text.push_str(&format!("\n  {}", self.dist));
        if self.values.device() != nitro_graph::Device::Cpu {
            text.push_str(&format!("\n  programs run on {}", self.values.device()));
        }
        for line in self.frozen.probes.drift(&Probes::of(&self.e)) {
            text.push_str("\n  ");
            text.push_str(&line);
        }
        text
    }

    /// The program for `kind` on this handle's device (memoized).
    pub(crate) fn program(&mut self, kind: &Kind) -> Result<Compiled> {
        self.program_on(kind, self.values.device())
    }

    /// The program for `kind` compiled for `device` (export wants the
    /// graph, never a GPU compile).
    pub(crate) fn program_on(
        &mut self,
        kind: &Kind,
        device: nitro_graph::Device,
    ) -> Result<Compiled> {
        self.programs
            .get(&self.e, &self.model, kind, device, report_enabled())
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
        if self.frozen.scheduled.iter().any(|(t, _)| t == name) {
            return Err(refuse(
                "it is driven by the run's schedule every update".into(),
                "change `schedule()` and build a new Nitro",
            ));
        }
        let value = value.to_device_value();
        let index = self
            .programs
            .layout
            .device
            .iter()
            .position(|(n, _)| *n == name)
            .expect("every Device field has a slot");
        let (expected, given) = (&self.programs.layout.device[index].1, device_spec(&value));
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
        self.values.device[index] = device_to_array(&value);
        self.values.device_values_changed();
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
        after_launch: impl FnOnce(&Values) -> Result<()>,
    ) -> Result<Vec<Array>> {
        let comm = self.dist.communicator();
        self.values.run_placed(
            &compiled.exe,
            comm.as_deref(),
            with_opt,
            middle,
            tail,
            after_launch,
        )
    }
}
