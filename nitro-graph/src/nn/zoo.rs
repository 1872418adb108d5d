//! Standard small models, as [`Chain`]s: the benchmark workloads of
//! `shared/BENCH.md` and the examples.

use super::layers::{Activation, Chain, Conv2d, Dense, Flatten, MaxPool2d};

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
