//! `RunError`: every way setup, compiling or training can fail, each message
//! naming the field, hook or step involved and the fix.

use std::path::PathBuf;

/// An error returned by a user hook (`build_data`, `derive`, ...).
pub type HookError = Box<dyn std::error::Error + Send + Sync>;

/// Errors from the Nitro handle and the training loop.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A field value outside its declared range, or otherwise refused.
    #[error("{0}")]
    Value(Box<nitro_markers::ConfigError>),
    /// A user hook returned an error.
    #[error("hook `{hook}` failed: {source}")]
    Hook {
        /// The hook's name.
        hook: &'static str,
        /// What it returned.
        source: HookError,
    },
    /// The experiment's declaration is inconsistent (presets, field lists).
    #[error("experiment declaration: {0}")]
    Config(Box<nitro_markers::ConfigError>),
    /// A hook declares a batch field the data does not have.
    #[error("routing: {0}")]
    Routing(Box<nitro_data::RoutingError>),
    /// Host data could not be batched, padded or sliced.
    #[error("data: {0}")]
    Data(Box<nitro_data::DataError>),
    /// Tracing or compiling a program failed.
    #[error("compiling `{program}`: {source}")]
    Compile {
        /// `train_step`, `eval_step` or `predict`.
        program: &'static str,
        /// The compiler's error.
        source: Box<nitro_graph::GraphError>,
    },
    /// Running a compiled program failed.
    #[error("running `{program}`: {source}")]
    Exec {
        /// The program's name.
        program: String,
        /// The runtime's error.
        source: Box<nitro_graph::GraphError>,
    },
    /// A compile key could not be built.
    #[error("compile key: {0}")]
    Key(Box<nitro_cache::KeyError>),
    /// A checkpoint could not be written or read.
    #[error("checkpoint: {0}")]
    Checkpoint(Box<nitro_ckpt::Error>),
    /// `set_device` on a field that is not a Device field, or that a
    /// schedule owns, or with a value that would change the compile key.
    #[error("set_device(\"{field}\"): {reason}; {fix}")]
    SetDevice {
        /// The field named.
        field: String,
        /// Why it is refused.
        reason: String,
        /// What to do instead.
        fix: &'static str,
    },
    /// A name that is no field of the experiment.
    #[error("`{field}` is not a field of `{experiment}` (fields: {available})")]
    UnknownField {
        /// The name given.
        field: String,
        /// The experiment type.
        experiment: &'static str,
        /// Its fields.
        available: String,
    },
    /// A monitored metric (early stopping, best-M checkpoints) the run never
    /// produces.
    #[error("{user} monitors metric `{metric}`, which this run never produces (it produces: {available}); use one of those names or add a `metrics` entry")]
    UnknownMetric {
        /// Which accessor asked for it.
        user: &'static str,
        /// The name it asked for.
        metric: String,
        /// Names the run produces.
        available: String,
    },
    /// A forward output leaf that has no batch axis.
    #[error("forward output `{leaf}` has shape {shape:?}, but every output leaf must keep the batch on axis 0 (width {width}); reduce over the batch in `loss` or `metrics`, not in `forward`")]
    OutputWithoutBatch {
        /// The leaf's path.
        leaf: String,
        /// Its traced shape.
        shape: Vec<usize>,
        /// The batch width.
        width: usize,
    },
    /// forward's new state does not match the state it was given.
    #[error("forward returned state with keys {got:?}, expected {expected:?}; return every state entry (unchanged ones too)")]
    StateMismatch {
        /// Keys returned.
        got: Vec<String>,
        /// Keys given.
        expected: Vec<String>,
    },
    /// A batch field with an element type programs cannot take.
    #[error("batch field `{field}`: {reason}")]
    BatchField {
        /// The field.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// The loss became NaN or infinite.
    #[error("non-finite loss {loss} at step {step} (epoch {epoch}); training stopped and the parameters are those after step {last_good}; lower the learning rate, set `clip`, or check the data")]
    NonFiniteLoss {
        /// The loss value.
        loss: f64,
        /// The update that produced it (1-based).
        step: u64,
        /// Its epoch (0-based).
        epoch: u64,
        /// The last update with a finite loss.
        last_good: u64,
    },
    /// A schedule targets something it cannot drive.
    #[error("schedule for `{target}`: {reason}")]
    Schedule {
        /// The scheduled name.
        target: String,
        /// What is wrong.
        reason: String,
    },
    /// The checkpoint was written by a different configuration.
    #[error("cannot resume from {}: it differs from this run in {}; build the experiment with the checkpoint's values or start a fresh run_dir", path.display(), differences.join("; "))]
    ResumeMismatch {
        /// The checkpoint file.
        path: PathBuf,
        /// One line per difference, naming the field.
        differences: Vec<String>,
    },
    /// A metric reads an output leaf or batch field that does not exist.
    #[error("metric `{metric}` reads {what} `{name}`, which does not exist (there are: {available}); name one of those, or return/load it")]
    MetricInput {
        /// The metric's name.
        metric: String,
        /// `output leaf` or `batch field`.
        what: &'static str,
        /// The name it reads.
        name: String,
        /// What exists.
        available: String,
    },
    /// A checkpoint lacks a tensor this run needs, or has a different shape.
    #[error("checkpoint {}: {reason}", path.display())]
    CheckpointContent {
        /// The checkpoint file.
        path: PathBuf,
        /// What is missing or wrong.
        reason: String,
    },
    /// The handle cannot run its programs on the requested device (a build
    /// without CUDA, no driver, no such GPU, or a device error mid-run).
    #[error("cannot run on {device}: {reason}; {fix}")]
    Device {
        /// The device asked for.
        device: nitro_graph::Device,
        /// Why not (the device layer's own message).
        reason: String,
        /// What to do instead.
        fix: &'static str,
    },
    /// A collective between the ranks of a data-parallel job failed: a
    /// rank died or hangs (named in the source), or the group could not be
    /// joined. The job cannot continue.
    #[error("data-parallel `{op}`: {source}")]
    Collective {
        /// What nitro was doing (`join`, `evaluate`, `resume`, ...).
        op: &'static str,
        /// The group's error (names the lost rank).
        source: Box<nitro_device::collective::CollectiveError>,
    },
    /// A checkpoint written by a job of another world size: its data order
    /// and optimizer trajectory were those of another global batch.
    #[error("cannot resume from {}: it was written by a job of {saved} process(es) and this job has {now}; resume it with `mpirun -n {saved}` (or start a fresh run_dir)", path.display())]
    WorldSize {
        /// The checkpoint file.
        path: PathBuf,
        /// The world size recorded in it.
        saved: usize,
        /// This job's world size.
        now: usize,
    },
    /// A run setting is out of range.
    #[error("`{setting}`: {reason}")]
    Setting {
        /// The accessor or setting.
        setting: &'static str,
        /// What is wrong and what would be valid.
        reason: String,
    },
}

macro_rules! boxed_from {
    ($($variant:ident: $t:ty),*) => {$(
        impl From<$t> for RunError {
            fn from(e: $t) -> Self {
                RunError::$variant(Box::new(e))
            }
        }
    )*};
}

boxed_from!(
    Config: nitro_markers::ConfigError,
    Routing: nitro_data::RoutingError,
    Data: nitro_data::DataError,
    Key: nitro_cache::KeyError,
    Checkpoint: nitro_ckpt::Error
);

/// `Result` with [`RunError`].
pub type Result<T, E = RunError> = std::result::Result<T, E>;
