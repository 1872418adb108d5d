//! Composite ops and a small neural-network vocabulary, all built from the
//! primitives, so autodiff and every backend get them for free.
//!
//! - [`ops`]: activations (GELU tanh and exact erf), reductions (mean, var, softmax, logsumexp), argmax, one_hot, dropout
//! - [`conv`]: conv2d (NCHW, stride, padding) via im2col, max/avg pooling
//! - [`loss`]: softmax cross-entropy on integer labels (label smoothing, sample weights), MSE
//! - [`ctx`]: the mode (train / eval) and the per-step random key traced code reads
//! - [`layers`]: Lux-style layers (`init` params and state, `forward` in a context), Dropout
//! - [`combinators`]: `Chain`, `Residual`, `Parallel`
//! - [`norm`]: BatchNorm with running statistics in the state tree
//! - [`attention`]: multi-head attention, transformer blocks, positional embedding, weight tying
//! - [`optim`]: SGD (momentum, Nesterov), Adam, AdamW as graph updates
//! - [`init`]: a seeded host RNG for parameter initialisation
//! - [`zoo`]: the benchmark MLP and LeNet-5 as ready-made chains
//! - [`train`]: [`train::AdamStep`], a whole classifier step in one program

pub mod attention;
pub mod combinators;
pub mod conv;
pub mod ctx;
pub mod init;
pub mod layer;
pub mod layers;
pub mod loss;
pub mod norm;
pub mod ops;
pub mod optim;
pub mod train;
pub mod zoo;

pub use attention::{MultiHeadAttention, PositionalEmbedding, TiedProjection, TransformerBlock};
pub use combinators::{Chain, Combine, Parallel, Residual};
pub use ctx::{step_key, Ctx, Key, Mode};
pub use layers::{Conv2d, Dense, Dropout, Embedding, Layer, LayerNorm, Params};
pub use norm::BatchNorm;
