//! nitro-run benchmarks, one JSON object per line on stdout (format in
//! BENCH.md); progress on stderr. `cargo run --release -p nitro-run
//! --example bench_run [NAME...]` runs `predict_overhead`, `mlp_predict` and
//! `digits_mlp_e2e` (or only those named). The graph-level benches
//! (`mlp_train_step`, `cnn_train_step`, ...) live in nitro-graph's bench.

use std::time::Instant;

use nitro_data::digits::{generate, generate_split, DigitsConfig, Split};
use nitro_data::{Dataset, Splits};
use nitro_graph::nn::init::InitRng;
use nitro_graph::nn::layers::{Activation, Chain, Dense, Layer, Params};
use nitro_graph::nn::loss::softmax_cross_entropy;
use nitro_graph::nn::Ctx;
use nitro_graph::Tensor;
use nitro_markers::{Experiment, ExperimentFields, Fields, GraphConst};
use nitro_run::{Distributed, HookError, Logger, ModelParts, Nitro, Optimizer, Progress};

/// An MLP on digits with `layers` hidden layers of `width`.
#[derive(Experiment, Debug)]
struct BenchMlp {
    #[experiment(default = 512)]
    width: GraphConst<usize>,
    #[experiment(default = 2)]
    layers: GraphConst<usize>,
    #[experiment(default = 256)]
    batch: usize,
    #[experiment(default = 10000)]
    n_train: usize,
    #[experiment(default = 1)]
    epochs: u64,
}

#[derive(Fields)]
struct Images<T> {
    image: T,
}

#[derive(Fields)]
struct Labels<T> {
    label: T,
}

impl nitro_run::Experiment for BenchMlp {
    type Model = Chain;
    type Inputs = Images<Tensor>;
    type Targets = Labels<Tensor>;
    type Outputs = Tensor;

    fn build_model(&self, rng: &mut InitRng) -> Result<ModelParts<Chain>, HookError> {
        let mut model = Chain::new();
        let mut input = 784;
        for _ in 0..*self.layers {
            model = model.push(Dense::new(input, *self.width).with(Activation::Relu));
            input = *self.width;
        }
        let model = model.push(Dense::new(input, 10));
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
            val: 0,
            test: 0,
            seed: 0,
        })?)
    }
    fn forward(
        _: &BenchMlpView<Tensor>,
        m: &Chain,
        _: &Ctx,
        ps: &Params<Tensor>,
        st: &Params<Tensor>,
        x: Images<Tensor>,
    ) -> (Tensor, Params<Tensor>) {
        let n = x.image.shape()[0];
        (m.apply(ps, "", &x.image.reshape(&[n, 784])), st.clone())
    }
    fn loss(_: &BenchMlpView<Tensor>, logits: &Tensor, y: Labels<Tensor>) -> Tensor {
        softmax_cross_entropy(logits, &y.label, 0.0)
    }
    fn batch_size(&self) -> usize {
        self.batch
    }
    fn max_epochs(&self) -> u64 {
        self.epochs
    }
    fn optimizer(&self) -> Optimizer {
        Optimizer::adam(1e-3)
    }
    fn run_dir(&self) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("nitro-bench-{}", std::process::id()))
    }
    fn logger(&self) -> Logger {
        Logger {
            progress: Progress::Off,
            every: 1000,
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn images(n: usize) -> nitro_data::Batch {
    let set = generate_split(n, 5, Split::Test).expect("digits generate");
    set.gather(&(0..n).collect::<Vec<_>>(), &["image"])
        .expect("image field")
}

fn predict_overhead() -> Result<(), Box<dyn std::error::Error>> {
    let mut e = BenchMlp::defaults();
    (e.width, e.layers, e.batch, e.n_train) = (8.into(), 1.into(), 1, 16);
    let mut n = Nitro::new(e)?;
    let b = images(1);
    n.predict(&b)?;
    let runs = 2000;
    let mut times = vec![];
    for _ in 0..runs {
        let t = Instant::now();
        n.predict(&b)?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    println!(
        "{{\"bench\":\"predict_overhead\",\"micros\":{:.2},\"runs\":{runs},\"model\":\"784-8-10\",\"batch\":1}}",
        median(times)
    );
    Ok(())
}

fn mlp_predict() -> Result<(), Box<dyn std::error::Error>> {
    let mut e = BenchMlp::defaults();
    e.n_train = 256;
    let mut n = Nitro::new(e)?;
    let b = images(256);
    n.predict(&b)?;
    let runs = 30;
    let mut times = vec![];
    for _ in 0..runs {
        let t = Instant::now();
        n.predict(&b)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "{{\"bench\":\"mlp_predict\",\"batch\":256,\"median_ms\":{:.3},\"runs\":{runs},\"model\":\"784-512-512-10\",\"via\":\"Nitro::predict\"}}",
        median(times)
    );
    Ok(())
}

fn digits_mlp_e2e() -> Result<(), Box<dyn std::error::Error>> {
    let mut results = vec![];
    let runs = 3;
    for _ in 0..runs {
        let mut e = BenchMlp::defaults();
        (e.width, e.layers, e.batch, e.n_train, e.epochs) = (256.into(), 1.into(), 128, 10_000, 1);
        let mut n = Nitro::new(e)?;
        let dir = n.run_values().run_dir.clone();
        n.train()?; // warm-up: compile
                    // Three epochs, so the checkpoint per epoch is what the figure
                    // measures: the first two are written while training goes on, the
                    // last one the run waits for (its fsync) before returning.
        let mut e = BenchMlp::defaults();
        (e.width, e.layers, e.batch, e.n_train, e.epochs) = (256.into(), 1.into(), 128, 10_000, 3);
        let mut n = Nitro::with_data(e, n.data())?;
        let _ = std::fs::remove_dir_all(&dir);
        let r = n.train()?;
        // The training loop only: checkpoint writes and validation are
        // separate costs, reported on their own.
        let wall = (r.wall_time - r.checkpoint_time - r.eval_time).as_secs_f64();
        results.push((
            r.steps as f64 / wall,
            1.0 - r.program_time.as_secs_f64() / wall,
            // The share of the whole call's wall time the step loop was
            // blocked on its checkpoint (one per epoch, written in the
            // background; the run waits for the last before returning).
            r.checkpoint_time.as_secs_f64() / r.wall_time.as_secs_f64(),
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
    let steps = median(results.iter().map(|r| r.0).collect());
    let host = median(results.iter().map(|r| r.1).collect());
    let ckpt = median(results.iter().map(|r| r.2).collect());
    println!(
        "{{\"bench\":\"digits_mlp_e2e\",\"steps_per_s\":{steps:.1},\"host_share\":{host:.4},\"ckpt_blocked_share\":{ckpt:.4},\"runs\":{runs},\"batch\":128,\"model\":\"784-256-10\",\"epochs\":3,\"note\":\"3 epochs of 10k; steps_per_s: training loop only (checkpoint and validation excluded); ckpt_blocked_share: of the whole call, a background checkpoint per epoch, the last one waited for\"}}"
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    nitro_run::set_config_report(false);
    let names: Vec<String> = std::env::args().skip(1).collect();
    let want = |n: &str| names.is_empty() || names.iter().any(|a| a == n);
    type Bench = fn() -> Result<(), Box<dyn std::error::Error>>;
    let benches: [(&str, Bench); 3] = [
        ("predict_overhead", predict_overhead),
        ("mlp_predict", mlp_predict),
        ("digits_mlp_e2e", digits_mlp_e2e),
    ];
    for (name, f) in benches {
        if want(name) {
            eprintln!("bench {name} ...");
            f()?;
        }
    }
    Ok(())
}
