//! A small ResNet with BatchNorm and residual blocks on the built-in
//! digits (or MNIST IDX files), through the Experiment API:
//!
//! ```text
//! stem   conv3x3 1->c, BN, ReLU, max-pool 2            [n, c, 14, 14]
//! block  x + BN(conv(ReLU(BN(conv x)))), ReLU          [n, c, 14, 14]
//! block  stride 2, 1x1-conv + BN projection shortcut   [n, 2c, 7, 7]
//! head   flatten, dense 2c·7·7 -> 10
//! ```
//!
//! BatchNorm keeps its running statistics in the state tree: batch
//! statistics while training, running ones when evaluating, and they are
//! checkpointed and resumed with the parameters. It uses the standard CLI
//! (`nitro_run::cli`), like `digits_cnn`:
//!
//! ```text
//! cargo run --release -p nitro-run --example digits_resnet
//! cargo run --release -p nitro-run --example digits_resnet -- train --set max_epochs=4
//! cargo run --release -p nitro-run --example digits_resnet -- train --set idx_dir=/data/mnist
//! ```
//!
//! `idx_dir` holds MNIST's `train-images-idx3-ubyte`, `train-labels-idx1-ubyte`,
//! `t10k-images-idx3-ubyte` and `t10k-labels-idx1-ubyte` (each may end in
//! `.gz`); the last 5000 training samples validate. Checkpoints, logs and
//! plots go to `runs/digits_resnet`; the last line is `test accuracy: X`.

use std::path::{Path, PathBuf};

use nitro_data::digits::{generate, DigitsConfig};
use nitro_data::loaders::read_idx_pair;
use nitro_data::{InMemory, Splits};
use nitro_graph::nn::init::InitRng;
use nitro_graph::nn::layers::{Activation, Conv2d, Dense, Layer, MaxPool2d, Params};
use nitro_graph::nn::loss::softmax_cross_entropy;
use nitro_graph::nn::{BatchNorm, Chain, Ctx, Residual};
use nitro_graph::Tensor;
use nitro_markers::{Experiment, Fields, GraphConst};
use nitro_run::{Distributed, HookError, Metric, ModelParts, Optimizer};

/// ResNet hyperparameters.
#[derive(Experiment, Debug)]
struct DigitsResnet {
    /// Channels of the first stage (the second has twice as many).
    #[experiment(default = 16)]
    channels: GraphConst<usize>,
    /// Learning rate (Adam).
    #[experiment(default = 2e-3)]
    lr: f64,
    /// Epochs.
    #[experiment(default = 2)]
    max_epochs: u64,
    /// Micro-batch width.
    #[experiment(default = 128)]
    batch: usize,
    /// Training samples of the built-in digits.
    #[experiment(default = 8000)]
    n_train: usize,
    /// A folder of MNIST IDX files; empty: the built-in digits.
    idx_dir: String,
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

fn conv(input: usize, output: usize, kernel: usize, stride: usize) -> Conv2d {
    Conv2d {
        input,
        output,
        kernel,
        stride,
        padding: kernel / 2,
    }
}

/// A basic residual block `input -> output` channels; a stride or a
/// change of width gets a 1x1-conv + BN projection shortcut.
fn block(input: usize, output: usize, stride: usize) -> Chain {
    let body = Chain::new()
        .push(conv(input, output, 3, stride))
        .push(BatchNorm::d2(output))
        .push(Activation::Relu)
        .push(conv(output, output, 3, 1))
        .push(BatchNorm::d2(output));
    let mut residual = Residual::new(body);
    if stride != 1 || input != output {
        residual = residual.with_shortcut(
            Chain::new()
                .push(conv(input, output, 1, stride))
                .push(BatchNorm::d2(output)),
        );
    }
    Chain::new().push(residual).push(Activation::Relu)
}

/// The convolutional trunk and the classifier head (after pooling).
struct ResNet {
    trunk: Chain,
    head: Dense,
}

/// The `image`/`label` fields of an MNIST pair under `dir`, named as
/// MNIST ships them, gzipped or not.
fn idx_split(dir: &Path, prefix: &str) -> Result<InMemory, HookError> {
    let find = |kind: &str| {
        let plain = dir.join(format!("{prefix}-{kind}"));
        let gz = dir.join(format!("{prefix}-{kind}.gz"));
        if plain.exists() || !gz.exists() {
            plain
        } else {
            gz
        }
    };
    Ok(read_idx_pair(
        find("images-idx3-ubyte"),
        find("labels-idx1-ubyte"),
    )?)
}

impl nitro_run::Experiment for DigitsResnet {
    type Model = ResNet;
    type Inputs = Images<Tensor>;
    type Targets = Labels<Tensor>;
    type Outputs = Tensor;

    fn build_model(&self, rng: &mut InitRng) -> Result<ModelParts<ResNet>, HookError> {
        let c = *self.channels;
        let trunk = Chain::new()
            .push(conv(1, c, 3, 1))
            .push(BatchNorm::d2(c))
            .push(Activation::Relu)
            .push(MaxPool2d(2))
            .push(block(c, c, 1))
            .push(block(c, 2 * c, 2));
        // A flattened head, not global pooling: on 7x7 digit maps where a
        // stroke is matters, and pooling it away learns far slower.
        let head = Dense::new(2 * c * 7 * 7, 10);
        let mut params = Params::new();
        trunk.init(rng, "trunk", &mut params)?;
        head.init(rng, "head", &mut params)?;
        let mut state = Params::new();
        trunk.init_state("trunk", &mut state)?;
        Ok(ModelParts {
            model: ResNet { trunk, head },
            params,
            state,
        })
    }

    fn build_data(&self, _: Option<&Distributed>) -> Result<Splits, HookError> {
        if self.idx_dir.is_empty() {
            return Ok(generate(&DigitsConfig {
                train: self.n_train,
                val: 2000,
                test: 5000,
                seed: 0,
            })?);
        }
        let dir = Path::new(&self.idx_dir);
        let all = idx_split(dir, "train")?;
        let n = all.as_fields().len();
        let val = n.saturating_sub(5000);
        Ok(Splits {
            train: InMemory::new(all.as_fields().slice_rows(0, val)?),
            val: Some(InMemory::new(all.as_fields().slice_rows(val, n)?)),
            test: Some(idx_split(dir, "t10k")?),
        })
    }

    fn forward(
        _: &DigitsResnetView<Tensor>,
        m: &ResNet,
        cx: &Ctx,
        ps: &Params<Tensor>,
        st: &Params<Tensor>,
        x: Images<Tensor>,
    ) -> (Tensor, Params<Tensor>) {
        let n = x.image.shape()[0];
        let image = x.image.reshape(&[n, 1, 28, 28]);
        let mut st = st.clone();
        let h = m.trunk.forward(cx, ps, &mut st, "trunk", &image);
        let flat = h.reshape(&[n, h.numel() / n]);
        (m.head.forward(cx, ps, &mut st, "head", &flat), st)
    }

    fn loss(_: &DigitsResnetView<Tensor>, logits: &Tensor, y: Labels<Tensor>) -> Tensor {
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
        PathBuf::from("runs/digits_resnet")
    }
}

fn main() {
    nitro_run::cli::main::<DigitsResnet>()
}
