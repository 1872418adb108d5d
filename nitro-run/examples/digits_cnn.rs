//! A LeNet-like CNN on the built-in digits dataset, through the Experiment
//! API (conv 5x5x6, pool, conv 5x5x16, pool, 120, 84, 10).
//!
//! It uses the standard CLI (`nitro_run::cli`), like `digits_mlp`:
//!
//! ```text
//! cargo run --release -p nitro-run --example digits_cnn
//! cargo run --release -p nitro-run --example digits_cnn -- train --set max_epochs=4 --set n_train=20000
//! cargo run --release -p nitro-run --example digits_cnn -- --help
//! ```
//!
//! Checkpoints, logs and plots go to `runs/digits_cnn`; the last line is
//! `test accuracy: X`.

use std::path::PathBuf;

use nitro_data::digits::{generate, DigitsConfig};
use nitro_data::Splits;
use nitro_graph::nn::init::InitRng;
use nitro_graph::nn::layers::{Activation, Conv2d, Dense, Flatten, Layer, MaxPool2d, Params};
use nitro_graph::nn::loss::softmax_cross_entropy;
use nitro_graph::nn::ops::relu;
use nitro_graph::nn::Ctx;
use nitro_graph::Tensor;
use nitro_markers::{Experiment, Fields};
use nitro_run::{Distributed, HookError, Metric, ModelParts, Optimizer};

/// LeNet-like hyperparameters (everything Host: nothing here is swept).
#[derive(Experiment, Debug)]
struct DigitsCnn {
    /// Learning rate (Adam).
    #[experiment(default = 2e-3)]
    lr: f64,
    /// Epochs.
    #[experiment(default = 2)]
    max_epochs: u64,
    /// Micro-batch width.
    #[experiment(default = 128)]
    batch: usize,
    /// Training samples.
    #[experiment(default = 8000)]
    n_train: usize,
}

/// What `forward` takes.
#[derive(Fields)]
struct Images<T> {
    image: T,
}

/// What `loss` takes.
#[derive(Fields)]
struct Labels<T> {
    label: T,
}

/// The layers, applied in `forward` (ReLU after each conv).
struct LeNet {
    conv1: Conv2d,
    conv2: Conv2d,
    pool: MaxPool2d,
    fc1: Dense,
    fc2: Dense,
    fc3: Dense,
}

impl nitro_run::Experiment for DigitsCnn {
    type Model = LeNet;
    type Inputs = Images<Tensor>;
    type Targets = Labels<Tensor>;
    type Outputs = Tensor;

    fn build_model(&self, rng: &mut InitRng) -> Result<ModelParts<LeNet>, HookError> {
        let conv = |input, output, padding| Conv2d {
            input,
            output,
            kernel: 5,
            stride: 1,
            padding,
        };
        let model = LeNet {
            conv1: conv(1, 6, 2),
            conv2: conv(6, 16, 0),
            pool: MaxPool2d(2),
            fc1: Dense::new(16 * 5 * 5, 120).with(Activation::Relu),
            fc2: Dense::new(120, 84).with(Activation::Relu),
            fc3: Dense::new(84, 10),
        };
        let mut params = Params::new();
        model.conv1.init(rng, "conv1", &mut params)?;
        model.conv2.init(rng, "conv2", &mut params)?;
        model.fc1.init(rng, "fc1", &mut params)?;
        model.fc2.init(rng, "fc2", &mut params)?;
        model.fc3.init(rng, "fc3", &mut params)?;
        Ok(ModelParts {
            model,
            params,
            state: Params::new(),
        })
    }

    fn build_data(&self, _: Option<&Distributed>) -> Result<Splits, HookError> {
        Ok(generate(&DigitsConfig {
            train: self.n_train,
            val: 2000,
            test: 5000,
            seed: 0,
        })?)
    }

    fn forward(
        _: &DigitsCnnView<Tensor>,
        m: &LeNet,
        _: &Ctx,
        ps: &Params<Tensor>,
        st: &Params<Tensor>,
        x: Images<Tensor>,
    ) -> (Tensor, Params<Tensor>) {
        let n = x.image.shape()[0];
        let h = x.image.reshape(&[n, 1, 28, 28]);
        let h = m.pool.apply(ps, "", &relu(&m.conv1.apply(ps, "conv1", &h)));
        let h = m.pool.apply(ps, "", &relu(&m.conv2.apply(ps, "conv2", &h)));
        let h = Flatten.apply(ps, "", &h);
        let h = m.fc2.apply(ps, "fc2", &m.fc1.apply(ps, "fc1", &h));
        (m.fc3.apply(ps, "fc3", &h), st.clone())
    }

    fn loss(_: &DigitsCnnView<Tensor>, logits: &Tensor, y: Labels<Tensor>) -> Tensor {
        softmax_cross_entropy(logits, &y.label, 0.0)
    }

    fn metrics(&self) -> Vec<Metric> {
        // Named `accuracy`, so the last line a run prints reads `test accuracy: X`.
        let mut accuracy = Metric::accuracy("output", "label");
        accuracy.name = "accuracy".into();
        vec![accuracy]
    }
    fn batch_size(&self) -> usize {
        self.batch
    }
    fn max_epochs(&self) -> u64 {
        self.max_epochs
    }
    fn optimizer(&self) -> Optimizer {
        Optimizer::adam(self.lr)
    }
    fn run_dir(&self) -> PathBuf {
        PathBuf::from("runs/digits_cnn")
    }
}

fn main() {
    nitro_run::cli::main::<DigitsCnn>()
}
