//! Standard small models, as [`Chain`]s: the benchmark workloads of
//! `shared/BENCH.md` (the MLP, LeNet-5 and the GPT of `peers/gpt_step.py`)
//! and the examples.

use super::attention::{PositionalEmbedding, TransformerBlock};
use super::layers::{
    Activation, Chain, Conv2d, Dense, Embedding, Flatten, LayerNorm, MaxPool2d, WeightInit,
};

/// A ReLU MLP through `sizes` (input, hidden..., classes); no activation
/// after the last layer. `mlp(&[784, 512, 512, 10])` is the benchmark MLP.
pub fn mlp(sizes: &[usize]) -> Chain {
    let mut chain = Chain::new();
    for (i, pair) in sizes.windows(2).enumerate() {
        let dense = Dense::new(pair[0], pair[1]);
        let last = i + 2 == sizes.len();
        chain = chain.push(if last {
            dense
        } else {
            dense.with(Activation::Relu)
        });
    }
    chain
}

/// LeNet-5-like CNN on `[n, 1, 28, 28]`: conv5x5x6, pool, conv5x5x16,
/// pool, dense 120, 84, 10 (ReLU between).
pub fn lenet5() -> Chain {
    Chain::new()
        .push(Conv2d {
            input: 1,
            output: 6,
            kernel: 5,
            stride: 1,
            padding: 0,
        })
        .push(Activation::Relu)
        .push(MaxPool2d(2))
        .push(Conv2d {
            input: 6,
            output: 16,
            kernel: 5,
            stride: 1,
            padding: 0,
        })
        .push(Activation::Relu)
        .push(MaxPool2d(2))
        .push(Flatten)
        .push(Dense::new(256, 120).with(Activation::Relu))
        .push(Dense::new(120, 84).with(Activation::Relu))
        .push(Dense::new(84, 10))
}

/// The shape of a [`gpt`]: a character-level decoder (pre-LN, exact-GELU
/// MLP `4 dim` wide, learned positional embedding, untied output
/// projection without a bias).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GptConfig {
    /// Token ids in `0..vocab`.
    pub vocab: usize,
    /// Longest sequence (positional table rows).
    pub context: usize,
    /// Model width.
    pub dim: usize,
    /// Attention heads (dividing `dim`).
    pub heads: usize,
    /// Transformer blocks.
    pub layers: usize,
    /// Dropout on the residual branches and attention weights (training only).
    pub dropout: f64,
}

impl GptConfig {
    /// The benchmark model of `peers/gpt_step.py`: vocab 96, context 128,
    /// d 256, 4 heads, 4 layers, no dropout.
    pub fn bench() -> GptConfig {
        GptConfig {
            vocab: 96,
            context: 128,
            dim: 256,
            heads: 4,
            layers: 4,
            dropout: 0.0,
        }
    }
}

/// A GPT over `i32` ids `[batch, time]` (`time <= context`) giving logits
/// `[batch, time, vocab]`: embedding, positional embedding, `layers` causal
/// [`TransformerBlock`]s, a final LayerNorm and the output projection.
/// Parameters under `0` (token table), `1` (positions), `2..2+layers`
/// (blocks), then the final norm and the projection.
///
/// Init as `peers/gpt_step.py` (so both start from the same distributions):
/// token and position tables normal with std 0.02, every projection weight
/// uniform within `±1/√fan_in` ([`WeightInit::FanIn`]), biases zero,
/// LayerNorm scale one and shift zero; the output projection has no bias.
pub fn gpt(c: &GptConfig) -> Chain {
    let mut chain = Chain::new()
        .push(Embedding {
            vocab: c.vocab,
            dim: c.dim,
        })
        .push(PositionalEmbedding {
            context: c.context,
            dim: c.dim,
        });
    for _ in 0..c.layers {
        let mut block = TransformerBlock::new(c.dim, c.heads)
            .causal()
            .with_init(WeightInit::FanIn)
            .with_dropout(c.dropout);
        block.attn.dropout = c.dropout;
        chain = chain.push(block);
    }
    chain
        .push(LayerNorm {
            dim: c.dim,
            eps: 1e-5,
        })
        .push(
            Dense::new(c.dim, c.vocab)
                .without_bias()
                .with_init(WeightInit::FanIn),
        )
}
