//! Mode, keys and state through the whole run: a dropout + BatchNorm model
//! stopped mid-epoch, or killed by SIGKILL in another process, and resumed
//! is bit-identical to an uninterrupted run (params *and* running
//! statistics), the running statistics move only in
//! training, evaluation is deterministic, the per-step key compiles
//! nothing, BatchNorm under `ShortBatch::PadWithMask` is refused at setup,
//! and a failing `build_model` reaches the user.

mod common;

use std::path::{Path, PathBuf};

use common::dataset;
use nitro_data::{ShortBatch, Splits};
use nitro_graph::nn::init::InitRng;
use nitro_graph::nn::layers::{Activation, Chain, Dense, Dropout, Layer, Params};
use nitro_graph::nn::loss::{mse, softmax_cross_entropy};
use nitro_graph::nn::norm::BatchNorm;
use nitro_graph::{Array, Tensor};
use nitro_markers::{Experiment, Fields, GraphConst};
use nitro_run::step_api::{trainstep, ModelAndParams, OptState};
use nitro_run::{
    Cadence, Checkpointer, Ctx, Distributed, HookError, Logger, ModelParts, Nitro, Optimizer,
    Progress, RunError,
};

#[derive(Experiment, Debug)]
struct Noisy {
    #[experiment(default = 0.3)]
    rate: GraphConst<f64>,
    dir: String,
    #[experiment(default = 3)]
    epochs: u64,
    #[experiment(default = false)]
    padded: bool,
    #[experiment(default = false)]
    broken_weights: bool,
    /// Checkpoint every this many updates (0: the default cadence).
    #[experiment(default = 0)]
    ckpt_steps: u64,
}

#[derive(Fields)]
struct X<T> {
    x: T,
}

#[derive(Fields)]
struct Y<T> {
    y: T,
}

impl nitro_run::Experiment for Noisy {
    type Model = Chain;
    type Inputs = X<Tensor>;
    type Targets = Y<Tensor>;
    type Outputs = Tensor;

    fn build_model(&self, rng: &mut InitRng) -> Result<ModelParts<Chain>, HookError> {
        if self.broken_weights {
            return Err("weights.safetensors: no tensor `0.weight`".into());
        }
        let model = Chain::new()
            .push(Dense::new(4, 8))
            .push(BatchNorm::d1(8))
            .push(Activation::Relu)
            .push(Dropout::new(*self.rate))
            .push(Dense::new(8, 3));
        let mut params = Params::new();
        model.init(rng, "", &mut params)?;
        Ok(ModelParts {
            state: model.initial_state()?,
            model,
            params,
        })
    }

    fn build_data(&self, _: Option<&Distributed>) -> Result<Splits, HookError> {
        Ok(Splits {
            train: dataset(38, 1),
            val: Some(dataset(12, 2)),
            test: Some(dataset(12, 3)),
        })
    }

    fn forward(
        _: &NoisyView<Tensor>,
        m: &Chain,
        cx: &Ctx,
        ps: &Params<Tensor>,
        st: &Params<Tensor>,
        x: X<Tensor>,
    ) -> (Tensor, Params<Tensor>) {
        let mut st = st.clone();
        let y = m.forward(cx, ps, &mut st, "", &x.x);
        (y, st)
    }

    fn loss(_: &NoisyView<Tensor>, logits: &Tensor, y: Y<Tensor>) -> Tensor {
        softmax_cross_entropy(logits, &y.y, 0.0)
    }

    fn batch_size(&self) -> usize {
        4
    }
    fn short_batch(&self) -> ShortBatch {
        if self.padded {
            ShortBatch::PadWithMask
        } else {
            ShortBatch::Drop
        }
    }
    fn max_epochs(&self) -> u64 {
        self.epochs
    }
    fn optimizer(&self) -> Optimizer {
        Optimizer::adam(0.01)
    }
    fn run_dir(&self) -> PathBuf {
        PathBuf::from(&self.dir)
    }
    fn logger(&self) -> Logger {
        Logger {
            progress: Progress::Off,
            every: 1000,
        }
    }
    fn checkpointer(&self) -> Checkpointer {
        let mut c = Checkpointer::default();
        if self.ckpt_steps > 0 {
            c.every = Cadence::Steps(self.ckpt_steps);
            c.keep_last = 2;
        }
        c
    }
}

fn noisy(dir: &Path) -> Noisy {
    let mut e = <Noisy as nitro_markers::ExperimentFields>::defaults();
    e.dir = dir.display().to_string();
    e
}

/// Params and state as raw bits.
fn all_bits(n: &Nitro<Noisy>) -> Vec<(String, Vec<u32>)> {
    n.params()
        .into_iter()
        .chain(n.state())
        .map(|(k, a)| (k, a.to_f32_vec().iter().map(|v| v.to_bits()).collect()))
        .collect()
}

#[test]
fn a_dropout_batchnorm_run_stopped_mid_epoch_resumes_bit_identical() {
    nitro_run::set_config_report(false);
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut full = Nitro::new(noisy(da.path())).unwrap();
    let start = full.state();
    full.train().unwrap();
    // One train step program for the whole run: the key is an input.
    assert_eq!(
        full.compile_log()
            .iter()
            .filter(|l| l.contains("train_step"))
            .count(),
        1,
        "{:?}",
        full.compile_log()
    );
    let end = full.state();
    assert_ne!(
        start["1.running_mean"].to_f32_vec(),
        end["1.running_mean"].to_f32_vec(),
        "training moves the running statistics"
    );

    let mut first = Nitro::new(noisy(db.path())).unwrap();
    first.stop_after(13); // mid-epoch 2 (9 updates per epoch)
    assert!(first.train().unwrap().interrupted);
    let mut resumed = Nitro::new(noisy(db.path())).unwrap();
    assert!(resumed.resume().unwrap().is_some());
    assert_eq!(resumed.step(), 13);
    resumed.train().unwrap();
    assert_eq!(all_bits(&resumed), all_bits(&full));

    // Evaluation uses the running statistics, never updates them, and
    // draws no random numbers: twice is the same, and the state is kept.
    let a = full.evaluate("test").unwrap();
    let b = full.evaluate("test").unwrap();
    assert_eq!(a, b);
    assert_eq!(
        full.state()["1.running_var"].to_f32_vec(),
        end["1.running_var"].to_f32_vec()
    );
}

const KILL_CHILD_DIR: &str = "NITRO_MODELS_KILL_CHILD_DIR";

/// The dropout + BatchNorm run the kill test stops: a checkpoint every 3
/// updates (9 updates an epoch, so also mid-epoch), far more epochs than
/// the child lives for.
fn killable(dir: &Path) -> Noisy {
    let mut e = noisy(dir);
    e.epochs = 1000;
    e.ckpt_steps = 3;
    e
}

/// The kill test's child; a no-op unless the parent set `KILL_CHILD_DIR`.
#[test]
fn child_trains_dropout_batchnorm_until_killed() {
    let Ok(dir) = std::env::var(KILL_CHILD_DIR) else {
        return;
    };
    nitro_run::set_config_report(false);
    Nitro::new(killable(Path::new(&dir)))
        .unwrap()
        .train()
        .unwrap();
}

#[test]
fn a_dropout_batchnorm_run_killed_by_sigkill_resumes_bit_identical() {
    nitro_run::set_config_report(false);
    let (dir, reference) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    common::kill::kill_after_first_checkpoint(
        "child_trains_dropout_batchnorm_until_killed",
        KILL_CHILD_DIR,
        dir.path(),
    );
    // 11 updates on: past the next epoch boundary, ending mid-epoch, so
    // the dropout keys and the shuffle of the epochs after the kill must
    // match too.
    let (resumed, full) =
        common::kill::resume_beside_uninterrupted(killable, dir.path(), reference.path(), 3, 11);
    assert_eq!(
        all_bits(&resumed),
        all_bits(&full),
        "params and running statistics, bit for bit"
    );
}

#[test]
fn dropout_draws_a_new_mask_each_step_and_the_seed_decides_it() {
    nitro_run::set_config_report(false);
    let d = tempfile::tempdir().unwrap();
    let train = |rate: f64| {
        let mut e = noisy(d.path());
        e.rate = rate.into();
        e.epochs = 1;
        let mut n = Nitro::new(e).unwrap();
        n.train().unwrap();
        n.params()["4.weight"].to_f32_vec()
    };
    // Same seed, same keys: identical; dropout on vs off: different.
    // (0.25, not the default: the resume test counts its own compiles.)
    assert_eq!(train(0.25), train(0.25));
    assert_ne!(train(0.25), train(0.0));
}

#[test]
fn batchnorm_under_pad_with_mask_is_refused_at_setup() {
    let d = tempfile::tempdir().unwrap();
    let mut e = noisy(d.path());
    e.padded = true;
    let err = Nitro::new(e).map(|_| ()).unwrap_err().to_string();
    assert!(
        err.contains("BatchNorm at `1`") && err.contains("ShortBatch::Drop"),
        "{err}"
    );
}

#[test]
fn a_failing_build_model_reaches_the_user() {
    let d = tempfile::tempdir().unwrap();
    let mut e = noisy(d.path());
    e.broken_weights = true;
    match Nitro::new(e).map(|_| ()) {
        Err(RunError::Hook { hook, source }) => {
            assert_eq!(hook, "build_model");
            assert!(source.to_string().contains("0.weight"), "{source}");
        }
        other => panic!("expected the build_model error, got {other:?}"),
    }
}

#[test]
fn the_step_api_feeds_a_fresh_key_per_step_from_the_opt_state_seed() {
    let losses = |seed: u64| {
        let chain = Chain::new().push(Dropout::new(0.5)).push(Dense::new(4, 2));
        let params = chain.init_params(0).unwrap();
        let mut model = ModelAndParams::new(chain, params);
        let mut opt = OptState::new(Optimizer::sgd(0.0), &model).with_seed(seed);
        let loss = |m: &Chain, cx: &Ctx, ps: &Params<Tensor>, b: &[Tensor]| {
            mse(&m.forward(cx, ps, &mut Params::new(), "", &b[0]), &b[1])
        };
        let x = Array::new(&[8, 4], (0..32).map(|i| i as f32 / 8.0).collect::<Vec<_>>()).unwrap();
        let y = Array::new(&[8, 2], vec![0.5f32; 16]).unwrap();
        (0..4)
            .map(|_| trainstep(&loss, &mut model, &[x.clone(), y.clone()], &mut opt).unwrap())
            .collect::<Vec<f64>>()
    };
    let (a, b) = (losses(1), losses(2));
    // lr 0: only the key changes between steps.
    assert_ne!(a[0], a[1], "each step draws a new mask");
    assert_eq!(a, losses(1), "the seed decides the keys");
    assert_ne!(a, b);
}
