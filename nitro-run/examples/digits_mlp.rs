//! The main example: an MLP on the built-in digits dataset, trained through
//! the Experiment API.
//!
//! ```text
//! cargo run --release -p nitro-run --example digits_mlp            # fresh run
//! cargo run --release -p nitro-run --example digits_mlp -- width=512 max_epochs=4
//! cargo run --release -p nitro-run --example digits_mlp -- --resume
//! ```
//!
//! Checkpoints go to `runs/digits_mlp`; the last line is `test accuracy: X`.

use std::path::PathBuf;
use std::time::Instant;

use nitro_data::digits::{generate, DigitsConfig};
use nitro_data::Splits;
use nitro_graph::nn::init::InitRng;
use nitro_graph::nn::layers::{Activation, Chain, Dense, Layer, Params};
use nitro_graph::nn::loss::softmax_cross_entropy;
use nitro_graph::Tensor;
use nitro_markers::{Device, Experiment, ExperimentFields, Fields, GraphConst};
use nitro_run::{
    Checkpointer, Distributed, HookError, Metric, ModelParts, Nitro, Optimizer, Schedule,
};

/// A one-hidden-layer classifier for 28x28 digits.
#[derive(Experiment, Debug)]
struct DigitsMlp {
    /// Hidden width (structural: changing it recompiles).
    #[experiment(default = 256)]
    width: GraphConst<usize>,
    /// Label smoothing, a traced input: sweepable without recompiling.
    #[experiment(default = 0.0)]
    smoothing: Device<f32>,
    /// Peak learning rate.
    #[experiment(default = 2e-3)]
    lr: f64,
    /// Epochs.
    #[experiment(default = 8)]
    max_epochs: u64,
    /// Micro-batch width.
    #[experiment(default = 128)]
    batch: usize,
    /// Training samples.
    #[experiment(default = 20000)]
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

impl nitro_run::Experiment for DigitsMlp {
    type Model = Chain;
    type Inputs = Images<Tensor>;
    type Targets = Labels<Tensor>;
    type Outputs = Tensor;

    fn build_model(&self, rng: &mut InitRng) -> ModelParts<Chain> {
        let model = Chain::new()
            .push(Dense::new(784, *self.width).with(Activation::Relu))
            .push(Dense::new(*self.width, 10));
        let mut params = Params::new();
        model.init(rng, "", &mut params);
        ModelParts {
            model,
            params,
            state: Params::new(),
        }
    }

    fn build_data(&self, _: Option<&Distributed>) -> Result<Splits, HookError> {
        Ok(generate(&DigitsConfig {
            train: self.n_train,
            val: 5000,
            test: 5000,
            seed: 0,
        })?)
    }

    fn forward(
        _: &DigitsMlpView<Tensor>,
        model: &Chain,
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
        vec![Metric::accuracy("output", "label")]
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
            best: Some(("val_acc".into(), 1, true)),
            ..Checkpointer::default()
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let resume = args.iter().any(|a| a == "--resume");
    let overrides: Vec<&str> = args
        .iter()
        .filter(|a| a.contains('='))
        .map(String::as_str)
        .collect();
    let mut e = DigitsMlp::defaults();
    e.apply_text_overrides(&overrides)?;
    let started = Instant::now();
    let mut n = Nitro::new(e)?;
    eprintln!("setup: {:.2}s", started.elapsed().as_secs_f64());
    if resume {
        if let Some(path) = n.resume()? {
            eprintln!("resumed from {}", path.display());
        }
    } else {
        // A fresh run: old checkpoints would otherwise mix with this run's.
        let _ = std::fs::remove_dir_all(n.run_values().run_dir.clone());
    }
    let report = n.train()?;
    let test = n.evaluate("test")?;
    eprintln!(
        "trained {} steps in {:.1}s ({:.0}% inside the compiled step); test loss {:.4}",
        report.steps,
        report.wall_time.as_secs_f64(),
        100.0 * report.program_time.as_secs_f64() / report.wall_time.as_secs_f64().max(1e-9),
        test["loss"]
    );
    println!("test accuracy: {:.4}", test["acc"]);
    Ok(())
}
