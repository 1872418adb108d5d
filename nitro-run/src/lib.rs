//! nitro-run: the Experiment trait, the Nitro handle and the training
//! lifecycle; the only crate that wires the others together.
//!
//! **Owns:** [`Experiment`] (four required hooks, defaulted optional ones),
//! [`Nitro`] (setup in `new`, frozen [`RunValues`], lazy programs through
//! the process-wide compile cache, [`Nitro::set_device`], padded
//! [`Nitro::predict`] / [`Nitro::evaluate`], [`Nitro::use_device`]: the
//! programs on a GPU with params and optimizer state resident there,
//! feature `cuda`), [`Nitro::train`] (one fused
//! step: forward, loss, grad, clip, optimizer update in place), optimizers,
//! schedules, metrics, early stopping, checkpoints and exact resume,
//! progress and Ctrl-C. **Does not own:** tensors and compiling
//! (nitro-graph), field markers (nitro-markers), keys (nitro-cache), host
//! data (nitro-data), the checkpoint format (nitro-ckpt).
//!
//! ```no_run
//! use nitro_graph::nn::Ctx;
//! use nitro_graph::nn::init::InitRng;
//! use nitro_graph::nn::layers::{Activation, Chain, Dense, Layer, Params};
//! use nitro_graph::nn::loss::softmax_cross_entropy;
//! use nitro_graph::Tensor;
//! use nitro_markers::{Experiment, ExperimentFields, Fields, GraphConst};
//! use nitro_run::{HookError, ModelParts, Nitro};
//!
//! #[derive(Experiment)]
//! struct Mlp {
//!     #[experiment(default = 64)]
//!     width: GraphConst<usize>,
//! }
//! #[derive(Fields)]
//! struct Img<T> { image: T }
//! #[derive(Fields)]
//! struct Label<T> { label: T }
//!
//! impl nitro_run::Experiment for Mlp {
//!     type Model = Chain;
//!     type Inputs = Img<Tensor>;
//!     type Targets = Label<Tensor>;
//!     type Outputs = Tensor;
//!     fn build_model(&self, rng: &mut InitRng) -> Result<ModelParts<Chain>, HookError> {
//!         let model = Chain::new()
//!             .push(Dense::new(784, *self.width).with(Activation::Relu))
//!             .push(Dense::new(*self.width, 10));
//!         let mut params = Params::new();
//!         model.init(rng, "", &mut params)?;
//!         Ok(ModelParts { model, params, state: Params::new() })
//!     }
//!     fn build_data(&self, _: Option<&nitro_run::Distributed>) -> Result<nitro_data::Splits, HookError> {
//!         let cfg = nitro_data::digits::DigitsConfig { train: 2000, val: 500, test: 500, seed: 1 };
//!         Ok(nitro_data::digits::generate(&cfg)?)
//!     }
//!     fn forward(_: &MlpView<Tensor>, m: &Chain, _: &Ctx, ps: &Params<Tensor>, st: &Params<Tensor>, x: Img<Tensor>) -> (Tensor, Params<Tensor>) {
//!         let n = x.image.shape()[0];
//!         (m.apply(ps, "", &x.image.reshape(&[n, 784])), st.clone())
//!     }
//!     fn loss(_: &MlpView<Tensor>, logits: &Tensor, y: Label<Tensor>) -> Tensor {
//!         softmax_cross_entropy(logits, &y.label, 0.0)
//!     }
//! }
//!
//! let mut n = Nitro::new(Mlp::defaults())?;
//! n.train()?;
//! println!("{:?}", n.evaluate("test")?);
//! # Ok::<(), nitro_run::RunError>(())
//! ```
#![warn(missing_docs)]

mod batches;
mod checkpointing;
mod ckpt;
pub mod cli;
mod convert;
mod dist;
mod error;
mod experiment;
mod export;
mod handle;
mod infer;
mod interrupt;
mod layout;
mod metric;
pub mod metrics_log;
mod optim;
mod placement;
pub mod plot;
mod programs;
mod progress;
mod ptx_store;
mod report;
mod run_state;
pub mod safetensors;
mod schedule;
mod setup;
pub mod step_api;
mod stop;
mod structure;
mod summary;
mod trace;
mod train;
mod train_step;
mod validate;

pub use convert::program_input;
pub use dist::Distributed;
pub use error::{HookError, Result, RunError};
pub use experiment::{
    Cadence, Checkpointer, Experiment, Logger, ModelParts, NoSampler, Predictor, Progress,
    SampleRequest, Tensors,
};
pub use export::{ExportError, Exported};
pub use handle::Nitro;
pub use interrupt::request_stop;
pub use metric::{HostOutputs, Metric, MetricReads};
pub use nitro_data::ShortBatch;
/// The context forward is traced in (mode and random key), from nitro-graph.
pub use nitro_graph::nn::{Ctx, Key, Mode};
pub use optim::Optimizer;
pub use programs::{cache_stats, compile_warnings, total_compiles};
pub use ptx_store::{DiskPtxStore, PTX_KIND};
pub use report::RunOverrides;
pub use report::{config_table, set_config_report, RunValues};
pub use run_state::Position;
pub use schedule::Schedule;
pub use stop::{Patience, Stopper};
pub use summary::{LayerSummary, Summary};
pub use train::TrainReport;

/// The README's Rust examples, compiled as doctests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
