//! A tiny configurable experiment shared by the behaviour tests: 4 features,
//! 3 classes, a two-layer tanh MLP, a Device temperature and a Device
//! `blowup` term (scheduled to plant a non-finite loss).
#![allow(dead_code)]

pub mod kill;

use std::path::PathBuf;

use nitro_data::{HostArray, InMemory, Splits};
use nitro_graph::nn::init::InitRng;
use nitro_graph::nn::layers::{Activation, Chain, Dense, Layer, Params};
use nitro_graph::nn::loss::softmax_cross_entropy;
use nitro_graph::nn::Ctx;
use nitro_graph::Tensor;
use nitro_markers::{Device, Experiment, Fields, GraphConst};
use nitro_run::{
    Checkpointer, Distributed, HookError, Logger, Metric, ModelParts, Optimizer, Patience,
    Progress, Schedule, Stopper,
};

/// When non-zero, `accum()` returns this instead of the field: an accessor
/// whose value drifts after construction (tests/report.rs only).
pub static ACCUM_OVERRIDE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Run settings that are not config values.
#[derive(Debug, Clone, Default)]
pub struct Knobs {
    pub optimizer: Option<Optimizer>,
    pub clip: Option<f64>,
    pub schedule: Vec<(String, Schedule)>,
    pub stop_on: Option<(String, u64)>,
    /// The checkpoint cadence (default: every epoch).
    pub every: Option<nitro_run::Cadence>,
    /// Write checkpoints in the step loop instead of the background.
    pub inline_saves: bool,
    pub val: usize,
    pub short: nitro_run::ShortBatch,
    pub keep_last: Option<usize>,
    pub best: Option<(String, usize, bool)>,
}

#[derive(Experiment, Debug)]
pub struct Tiny {
    #[experiment(default = 8)]
    pub width: GraphConst<usize>,
    #[experiment(default = 1.0)]
    pub temperature: Device<f32>,
    #[experiment(default = 0.0)]
    pub blowup: Device<f32>,
    pub dir: String,
    #[experiment(default = 4)]
    pub batch: usize,
    #[experiment(default = 1)]
    pub accum: usize,
    #[experiment(default = 2)]
    pub epochs: u64,
    #[experiment(default = 40)]
    pub n: usize,
    #[experiment(opaque)]
    pub knobs: Knobs,
}

#[derive(Fields)]
pub struct X<T> {
    pub x: T,
}

#[derive(Fields)]
pub struct Y<T> {
    pub y: T,
}

/// `n` samples: x in [-1, 1]^4, y = argmax of a fixed linear map, and an
/// `unused` field no hook declares.
pub fn dataset(n: usize, seed: u64) -> InMemory {
    let mut rng = InitRng::new(seed);
    let x: Vec<f32> = (0..n * 4)
        .map(|_| (rng.uniform() * 2.0 - 1.0) as f32)
        .collect();
    let y: Vec<i32> = x
        .chunks(4)
        .map(|r| {
            let s = [r[0] + r[1], r[2] - r[0], r[3] - r[1]];
            (0..3).max_by(|&a, &b| s[a].total_cmp(&s[b])).unwrap_or(0) as i32
        })
        .collect();
    InMemory::from_pairs([
        ("x", HostArray::from_vec(&[n, 4], x).unwrap()),
        ("y", HostArray::from_vec(&[n], y).unwrap()),
        ("unused", HostArray::from_vec(&[n], vec![0f32; n]).unwrap()),
    ])
    .unwrap()
}

impl nitro_run::Experiment for Tiny {
    type Model = Chain;
    type Inputs = X<Tensor>;
    type Targets = Y<Tensor>;
    type Outputs = Tensor;

    fn build_model(&self, rng: &mut InitRng) -> Result<ModelParts<Chain>, HookError> {
        let model = Chain::new()
            .push(Dense::new(4, *self.width).with(Activation::Tanh))
            .push(Dense::new(*self.width, 3));
        let mut params = Params::new();
        model.init(rng, "", &mut params)?;
        Ok(ModelParts {
            model,
            params,
            state: Params::new(),
        })
    }

    fn build_data(&self, _: Option<&Distributed>) -> Result<Splits, HookError> {
        let val = (self.knobs.val > 0).then(|| dataset(self.knobs.val, 2));
        Ok(Splits {
            train: dataset(self.n, 1),
            val,
            test: Some(dataset(10, 3)),
        })
    }

    fn forward(
        e: &TinyView<Tensor>,
        m: &Chain,
        _: &Ctx,
        ps: &Params<Tensor>,
        st: &Params<Tensor>,
        x: X<Tensor>,
    ) -> (Tensor, Params<Tensor>) {
        (&m.apply(ps, "", &x.x) / &e.temperature, st.clone())
    }

    fn loss(e: &TinyView<Tensor>, logits: &Tensor, y: Y<Tensor>) -> Tensor {
        softmax_cross_entropy(logits, &y.y, 0.0) + &e.blowup
    }

    fn metrics(&self) -> Vec<Metric> {
        vec![Metric::accuracy("output", "y")]
    }
    fn batch_size(&self) -> usize {
        self.batch
    }
    fn accum(&self) -> usize {
        match ACCUM_OVERRIDE.load(std::sync::atomic::Ordering::Relaxed) {
            0 => self.accum,
            drifted => drifted,
        }
    }
    fn short_batch(&self) -> nitro_run::ShortBatch {
        self.knobs.short
    }
    fn max_epochs(&self) -> u64 {
        self.epochs
    }
    fn clip(&self) -> Option<f64> {
        self.knobs.clip
    }
    fn optimizer(&self) -> Optimizer {
        self.knobs.optimizer.unwrap_or(Optimizer::sgd(0.1))
    }
    fn schedule(&self) -> Vec<(String, Schedule)> {
        self.knobs.schedule.clone()
    }
    fn run_dir(&self) -> PathBuf {
        PathBuf::from(&self.dir)
    }
    fn early_stop(&self) -> Option<Box<dyn Stopper>> {
        let (metric, patience) = self.knobs.stop_on.clone()?;
        Some(Box::new(Patience::min(&metric, patience)))
    }
    fn checkpointer(&self) -> Checkpointer {
        let default = Checkpointer::default();
        Checkpointer {
            every: self.knobs.every.unwrap_or(default.every),
            keep_last: self.knobs.keep_last.unwrap_or(default.keep_last),
            best: self.knobs.best.clone(),
            background: !self.knobs.inline_saves,
        }
    }
    fn logger(&self) -> Logger {
        quiet()
    }
}

/// A logger that prints nothing (no progress, a log row every 1000 steps).
pub fn quiet() -> Logger {
    Logger {
        progress: Progress::Off,
        every: 1000,
    }
}

/// A Tiny writing into `dir`.
pub fn tiny(dir: &std::path::Path) -> Tiny {
    let mut e = <Tiny as nitro_markers::ExperimentFields>::defaults();
    e.dir = dir.display().to_string();
    e
}

/// Parameters as raw bits, for bit-identity checks.
pub fn bits<E: nitro_run::Experiment>(n: &nitro_run::Nitro<E>) -> Vec<(String, Vec<u32>)> {
    n.params()
        .into_iter()
        .map(|(k, a)| (k, a.to_f32_vec().iter().map(|v| v.to_bits()).collect()))
        .collect()
}
