//! Composite ops and a small neural-network vocabulary, all built from the
//! primitives, so autodiff and every backend get them for free.
//!
//! - [`ops`]: activations, reductions (mean, var, softmax, logsumexp), argmax, one_hot
//! - [`conv`]: conv2d (NCHW, stride, padding) via im2col, max/avg pooling
//! - [`loss`]: softmax cross-entropy on integer labels (label smoothing, sample weights), MSE
//! - [`layers`]: Lux-style layers (`init` a params tree, `apply` to traced inputs), `Chain`
//! - [`optim`]: SGD (momentum, Nesterov), Adam, AdamW as graph updates
//! - [`init`]: a seeded host RNG for parameter initialisation
//! - [`zoo`]: the benchmark MLP and LeNet-5 as ready-made chains
//! - [`train`]: [`train::AdamStep`], a whole classifier step in one program

pub mod conv;
pub mod init;
pub mod layers;
pub mod loss;
pub mod ops;
pub mod optim;
pub mod train;
pub mod zoo;

pub use layers::{Chain, Conv2d, Dense, Embedding, Layer, LayerNorm, Params};
