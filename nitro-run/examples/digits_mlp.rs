//! The main example: an MLP on the built-in digits dataset, trained through
//! the Experiment API.
//!
//! ```text
//! cargo run --release -p nitro-run --example digits_mlp            # train with defaults
//! cargo run --release -p nitro-run --example digits_mlp -- --help  # fields, commands
//! cargo run --release -p nitro-run --example digits_mlp -- train --set width=512 --max-epochs 4
//! cargo run --release -p nitro-run --example digits_mlp -- resume
//! cargo run --release -p nitro-run --example digits_mlp -- --preset quick show-config
//! ```
//!
//! Checkpoints, metrics and plots go to `runs/digits_mlp`; the last line a
//! training command prints is `test accuracy: X`.

use std::path::PathBuf;

use nitro_data::digits::{generate, DigitsConfig};
use nitro_data::Splits;
use nitro_graph::nn::init::InitRng;
use nitro_graph::nn::layers::{Activation, Chain, Dense, Layer, Params};
use nitro_graph::nn::loss::softmax_cross_entropy;
use nitro_graph::nn::Ctx;
use nitro_graph::Tensor;
use nitro_markers::{Device, Experiment, Fields, GraphConst, Preset};
use nitro_run::{Checkpointer, Distributed, HookError, Metric, ModelParts, Optimizer, Schedule};

/// A one-hidden-layer classifier for 28x28 digits.
#[derive(Experiment, Debug)]
#[experiment(presets = presets)]
struct DigitsMlp {
    /// Hidden width (structural: changing it recompiles).
    #[experiment(default = 256, range = 1..=65536)]
    width: GraphConst<usize>,
    /// Label smoothing, a traced input: sweepable without recompiling.
    #[experiment(default = 0.0, range = 0.0..1.0)]
    smoothing: Device<f32>,
    /// Peak learning rate.
    #[experiment(default = 2e-3)]
    lr: f64,
    /// Epochs.
    #[experiment(default = 8)]
    max_epochs: u64,
    /// Micro-batch width.
    #[experiment(default = 128, range = 1..=65536)]
    batch: usize,
    /// Training samples.
    #[experiment(default = 20000, range = 1..)]
    n_train: usize,
    /// Validation and test samples (each).
    #[experiment(default = 5000, range = 1..)]
    n_eval: usize,
}

/// Named configurations (`--preset NAME`); `--set` overrides win.
fn presets() -> Vec<Preset> {
    vec![
        // A smoke run: seconds, even in a debug build.
        Preset::new("quick")
            .set("width", 32usize)
            .set("n_train", 1024usize)
            .set("n_eval", 512usize)
            .set("max_epochs", 1u64),
        Preset::new("wide").set("width", 1024usize),
    ]
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

impl nitro_run::Experiment for DigitsMlp {
    type Model = Chain;
    type Inputs = Images<Tensor>;
    type Targets = Labels<Tensor>;
    type Outputs = Tensor;

    fn build_model(&self, rng: &mut InitRng) -> Result<ModelParts<Chain>, HookError> {
        let model = Chain::new()
            .push(Dense::new(784, *self.width).with(Activation::Relu))
            .push(Dense::new(*self.width, 10));
        let mut params = Params::new();
        model.init(rng, "", &mut params)?;
        Ok(ModelParts {
            model,
            params,
            state: Params::new(),
        })
    }

    fn build_data(&self, _: Option<&Distributed>) -> Result<Splits, HookError> {
        Ok(generate(&DigitsConfig {
            train: self.n_train,
            val: self.n_eval,
            test: self.n_eval,
            seed: 0,
        })?)
    }

    fn forward(
        _: &DigitsMlpView<Tensor>,
        model: &Chain,
        _: &Ctx,
        ps: &Params<Tensor>,
        st: &Params<Tensor>,
        x: Images<Tensor>,
    ) -> (Tensor, Params<Tensor>) {
        let n = x.image.shape()[0];
        (model.apply(ps, "", &x.image.reshape(&[n, 784])), st.clone())
    }

    fn loss(e: &DigitsMlpView<Tensor>, logits: &Tensor, y: Labels<Tensor>) -> Tensor {
        // Smoothing is a traced scalar: mix the one-hot target with uniform.
        let plain = softmax_cross_entropy(logits, &y.label, 0.0);
        let uniform = softmax_cross_entropy(logits, &y.label, 1.0);
        let s = e.smoothing.cast(logits.dtype());
        &plain + &(&s * &(&uniform - &plain))
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
        Optimizer::adamw(self.lr, 1e-4)
    }
    fn schedule(&self) -> Vec<(String, Schedule)> {
        let warmup = 100;
        vec![(
            "lr".into(),
            Schedule::Cosine {
                peak: self.lr,
                floor: self.lr * 0.02,
                warmup,
            },
        )]
    }
    fn run_dir(&self) -> PathBuf {
        PathBuf::from("runs/digits_mlp")
    }
    fn checkpointer(&self) -> Checkpointer {
        Checkpointer {
            best: Some(("val_accuracy".into(), 1, true)),
            ..Checkpointer::default()
        }
    }
}

fn main() {
    nitro_run::cli::main::<DigitsMlp>()
}
