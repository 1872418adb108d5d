//! The `Experiment` trait: four required hooks, everything else defaulted.
//!
//! Traced hooks (`forward`, `loss`) are associated functions that receive the
//! compile view, not `self`: GraphConst fields keep their values, Device
//! fields are traced inputs, and reading a Host field does not compile.

use std::path::PathBuf;

use nitro_data::{Batch, ShortBatch, Splits};
use nitro_graph::nn::init::InitRng;
use nitro_graph::nn::layers::Params;
use nitro_graph::nn::Ctx;
use nitro_graph::{Array, Tensor};
use nitro_markers::{BatchFields, ExperimentFields, Tree};

use crate::error::HookError;
use crate::metric::{HostOutputs, Metric};
use crate::optim::Optimizer;
use crate::schedule::Schedule;
use crate::stop::Stopper;

nitro_markers::leaf_kind!(
    /// Trees whose leaves are traced tensors (forward's outputs).
    pub struct Tensors => Tensor
);

pub use crate::dist::Distributed;

/// What `build_model` returns: the model structure (host-side, read while
/// tracing), its initial parameters and its initial state.
pub struct ModelParts<M> {
    /// The model structure (layer sizes, a `Chain`, ...).
    pub model: M,
    /// Trainable parameters by path.
    pub params: Params<Array>,
    /// Non-trainable state by path (empty for most models).
    pub state: Params<Array>,
}

/// When a run saves a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cadence {
    /// Never, not even at the end or on Ctrl-C: such a run cannot be
    /// resumed, evaluated or exported from its run directory.
    Off,
    /// Every N updates (N >= 1), and at the end.
    Steps(u64),
    /// At the end of every N-th epoch (N >= 1), and at the end.
    Epochs(u64),
    /// At the end only.
    End,
}

/// Checkpoint policy: when to save, what to keep, and how to write. Every
/// cadence but [`Cadence::Off`] also saves when a run is interrupted
/// (Ctrl-C, `request_stop`, `stop_after`), so it resumes where it stopped.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpointer {
    /// When to save (default: every epoch).
    pub every: Cadence,
    /// Keep the newest N checkpoints (N >= 1).
    pub keep_last: usize,
    /// Also keep the best M by a metric: `(metric, keep, maximize)`.
    pub best: Option<(String, usize, bool)>,
    /// Write on a background thread (default): the step loop hands over a
    /// host snapshot and goes on; at most one save is in flight (the next
    /// waits for it), and the run waits for the writer before it returns.
    /// `false` writes in the step loop.
    pub background: bool,
}

impl Default for Checkpointer {
    fn default() -> Self {
        Checkpointer {
            every: Cadence::Epochs(1),
            keep_last: 3,
            best: None,
            background: true,
        }
    }
}

/// How training reports progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Progress {
    /// A bar on a terminal, plain periodic lines otherwise.
    #[default]
    Auto,
    /// Plain lines on stderr.
    Lines,
    /// Nothing but errors.
    Off,
}

/// Logging settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Logger {
    /// Progress display.
    pub progress: Progress,
    /// Steps between plain progress lines.
    pub every: u64,
}

impl Logger {
    /// No progress output at all (errors still surface as `Err`).
    pub fn quiet() -> Logger {
        Logger {
            progress: Progress::Off,
            ..Logger::default()
        }
    }
}

impl Default for Logger {
    fn default() -> Self {
        Logger {
            progress: Progress::Auto,
            every: 100,
        }
    }
}

/// What the `sample` command asks an experiment to generate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleRequest {
    /// The text (or other prompt) generation continues.
    pub prompt: String,
    /// How many tokens to generate.
    pub steps: usize,
    /// Seed of the sampler's draws: the same model, Device values, prompt
    /// and seed give the same output.
    pub seed: u64,
}

/// The trained model as a sampler drives it: forward outputs in eval mode,
/// with the handle's current Device values (so a Device field such as a
/// temperature changes them without a compile), for a batch of any number
/// of rows, and the experiment's values (its GraphConst shapes). `Nitro`
/// implements it.
pub trait Predictor<E: ?Sized> {
    /// The experiment as configured for this run.
    fn experiment(&self) -> &E;
    /// Forward outputs by leaf path (see [`crate::Nitro::predict`]).
    fn predict_batch(&mut self, batch: &Batch) -> Result<HostOutputs, HookError>;
}

/// [`Experiment::sample`]'s default: the experiment did not implement it.
#[derive(Debug, thiserror::Error)]
#[error("this experiment ({experiment}) has no sampler: implement `Experiment::sample` (a generation loop over `Predictor::predict_batch`) to use `sample`")]
pub struct NoSampler {
    /// The experiment's name.
    pub experiment: &'static str,
}

/// An experiment: one flat struct of knobs (`#[derive(Experiment)]`) plus
/// these hooks. Only the first four are required.
pub trait Experiment: ExperimentFields + 'static {
    /// The model structure `build_model` returns and `forward` reads.
    type Model: Send + Sync;
    /// The batch fields `forward` takes (`#[derive(Fields)]`), as tensors.
    type Inputs: BatchFields<Tensor>;
    /// The batch fields `loss` takes, as tensors.
    type Targets: BatchFields<Tensor>;
    /// What `forward` returns: a tensor, a tuple or a `#[derive(Tree)]`
    /// struct; every leaf keeps the batch on axis 0.
    type Outputs: Tree<Tensors>;

    /// Builds the model, its parameters and state (deterministic in `rng`).
    /// An error (weights that fail to load, a bad shape) reaches the user
    /// as `RunError::Hook { hook: "build_model", .. }`.
    fn build_model(&self, rng: &mut InitRng) -> Result<ModelParts<Self::Model>, HookError>;

    /// Builds the data: `Splits { train, val, test }`. `dist` is the job's
    /// process group (always `Some`; a world of one without `mpirun`): the
    /// framework shards the training and evaluation order itself, so return
    /// the whole splits unless the data is already sharded on disk.
    fn build_data(&self, dist: Option<&Distributed>) -> Result<Splits, HookError>;

    /// The exportable program: inputs only, never targets. Returns the
    /// outputs and the new state (return `st` itself if there is none).
    ///
    /// `cx` says how it is traced: `cx.mode()` is `Train` in the train
    /// step and `Eval` in validation and predict; `cx.key()` is the step's
    /// random key in training (derived from the run seed and the global
    /// step, so a resumed run draws the same numbers) and `None` otherwise.
    /// Pass it on to the layers (`model.forward(cx, ps, &mut st, "", x)`).
    /// The new state is kept after a train step and discarded in eval.
    /// `loss` gets no context: it is traced twice for a padded batch and
    /// must be a plain function of the outputs and targets.
    fn forward(
        e: &Self::View<Tensor>,
        model: &Self::Model,
        cx: &Ctx,
        ps: &Params<Tensor>,
        st: &Params<Tensor>,
        inputs: Self::Inputs,
    ) -> (Self::Outputs, Params<Tensor>);

    /// The scalar loss from forward's outputs (exactly as returned) and the
    /// target fields.
    fn loss(e: &Self::View<Tensor>, outputs: &Self::Outputs, targets: Self::Targets) -> Tensor;

    /// Validation metrics, computed on sliced host outputs (default: none;
    /// `val_loss` is always reported).
    fn metrics(&self) -> Vec<Metric> {
        Vec::new()
    }

    /// Training metrics, aggregated over each epoch (default: none; the
    /// train `loss` is always reported).
    fn train_metrics(&self) -> Vec<Metric> {
        Vec::new()
    }

    /// Values that depend on the data (class weights, normalisers): runs
    /// after `build_data`, before device conversion; recomputed on resume.
    fn derive(&mut self, data: &Splits) -> Result<(), HookError> {
        let _ = data;
        Ok(())
    }

    /// Seed for parameter init and data order.
    fn seed(&self) -> u64 {
        42
    }
    /// Micro-batch width.
    fn batch_size(&self) -> usize {
        128
    }
    /// The short final training batch of an epoch: `Drop` it (default), or
    /// `PadWithMask` it to the compiled width with padded rows weighted 0,
    /// so its loss and gradients are exactly those of its real samples
    /// (the same program; see the `programs` module for the loss form this
    /// needs).
    fn short_batch(&self) -> ShortBatch {
        ShortBatch::Drop
    }
    /// Micro-batches per update.
    fn accum(&self) -> usize {
        1
    }
    /// Epochs to train.
    fn max_epochs(&self) -> u64 {
        3
    }
    /// Global-norm gradient clipping (None = off).
    fn clip(&self) -> Option<f64> {
        None
    }
    /// The optimizer.
    fn optimizer(&self) -> Optimizer {
        Optimizer::default()
    }
    /// Schedules by target: `"lr"` or a Device field of scalar f32.
    fn schedule(&self) -> Vec<(String, Schedule)> {
        Vec::new()
    }
    /// Where checkpoints go (default `runs/<ExperimentName>`).
    fn run_dir(&self) -> PathBuf {
        PathBuf::from("runs").join(Self::experiment_name())
    }
    /// An early stopper (None = run every epoch).
    fn early_stop(&self) -> Option<Box<dyn Stopper>> {
        None
    }
    /// Checkpoint policy.
    fn checkpointer(&self) -> Checkpointer {
        Checkpointer::default()
    }
    /// Progress and logging.
    fn logger(&self) -> Logger {
        Logger::default()
    }
    /// The output leaves `Nitro::export` ships, by name (`logits`; a bare
    /// tensor output is `output`). Empty (the default) ships them all.
    fn export_outputs(&self) -> Vec<String> {
        Vec::new()
    }
    /// Generates from the trained model (the `sample` command): e.g. text
    /// from a prompt, one token per `model.predict_batch` call, drawn with
    /// a generator seeded by `request.seed`; `model.experiment()` gives the
    /// configured values. Returns what to print. The default refuses with
    /// [`NoSampler`].
    fn sample(
        model: &mut dyn Predictor<Self>,
        request: &SampleRequest,
    ) -> Result<String, HookError> {
        let _ = (model, request);
        Err(Box::new(NoSampler {
            experiment: Self::experiment_name(),
        }))
    }
}
