//! The run core's guarantees (issue "the run core"): a program runs only for
//! the graph it was compiled from, derive is recomputed on resume, large
//! Host values never break a run, metrics that cannot be computed fail at
//! setup, and step-API programs die with their model. f64 hyperparameters
//! staying f64 is `f64_hyper.rs`.

mod common;

use common::{quiet, X, Y};
use std::sync::Mutex;

use nitro_data::{HostArray, InMemory, Splits};
use nitro_graph::nn::init::InitRng;
use nitro_graph::nn::layers::{Activation, Chain, Dense, Layer, Params};
use nitro_graph::nn::loss::softmax_cross_entropy;
use nitro_graph::nn::Ctx;
use nitro_graph::{Array, Tensor};
use nitro_markers::{Device, Experiment, ExperimentFields};
use nitro_run::{
    cache_stats, set_config_report, Distributed, HookError, Logger, Metric, ModelParts, Nitro,
    RunError,
};

/// Compile counters and the config-report switch are process-wide: every
/// test here takes turns (one that did not raced the step-API free test).
static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// `n` rows of 4 features in [-1, 1] and a class in 0..3.
fn rows(n: usize, seed: u64) -> InMemory {
    let mut rng = InitRng::new(seed);
    let x: Vec<f32> = (0..n * 4)
        .map(|_| (rng.uniform() * 2.0 - 1.0) as f32)
        .collect();
    let y: Vec<i32> = (0..n).map(|i| (i % 3) as i32).collect();
    InMemory::from_pairs([
        ("x", HostArray::from_vec(&[n, 4], x).unwrap()),
        ("y", HostArray::from_vec(&[n], y).unwrap()),
    ])
    .unwrap()
}

// ---------------------------------------------------------------- item 1

/// `build_model` picks the activation from a Host bool: the key's named
/// parts are equal for both values, only the traced graph differs.
#[derive(Experiment, Debug)]
struct Act {
    relu: bool,
    dir: String,
    #[experiment(default = 1.0)]
    scale: Device<f32>,
}

impl nitro_run::Experiment for Act {
    type Model = Chain;
    type Inputs = X<Tensor>;
    type Targets = Y<Tensor>;
    type Outputs = Tensor;
    fn build_model(&self, rng: &mut InitRng) -> Result<ModelParts<Chain>, HookError> {
        let act = if self.relu {
            Activation::Relu
        } else {
            Activation::Tanh
        };
        let model = Chain::new()
            .push(Dense::new(4, 6).with(act))
            .push(Dense::new(6, 3));
        let mut params = Params::new();
        model.init(rng, "", &mut params)?;
        Ok(ModelParts {
            model,
            params,
            state: Params::new(),
        })
    }
    fn build_data(&self, _: Option<&Distributed>) -> Result<Splits, HookError> {
        Ok(Splits {
            train: rows(16, 1),
            val: None,
            test: Some(rows(8, 2)),
        })
    }
    fn forward(
        e: &ActView<Tensor>,
        m: &Chain,
        _: &Ctx,
        ps: &Params<Tensor>,
        st: &Params<Tensor>,
        x: X<Tensor>,
    ) -> (Tensor, Params<Tensor>) {
        (&m.apply(ps, "", &x.x) * &e.scale, st.clone())
    }
    fn loss(_: &ActView<Tensor>, logits: &Tensor, y: Y<Tensor>) -> Tensor {
        softmax_cross_entropy(logits, &y.y, 0.0)
    }
    fn batch_size(&self) -> usize {
        8
    }
    fn max_epochs(&self) -> u64 {
        1
    }
    fn run_dir(&self) -> std::path::PathBuf {
        self.dir.clone().into()
    }
    fn logger(&self) -> Logger {
        quiet()
    }
}

fn act(relu: bool, dir: &std::path::Path) -> Act {
    let mut e = Act::defaults();
    e.relu = relu;
    e.dir = dir.display().to_string();
    e
}

fn values(a: &Array) -> Vec<f64> {
    a.to_f32_vec().iter().map(|&v| v as f64).collect()
}

/// The MLP by definition: `act(x W1 + b1) W2 + b2`, naive loops.
fn reference_mlp(
    ps: &std::collections::BTreeMap<String, Array>,
    x: &[f32],
    relu: bool,
) -> Vec<f64> {
    let get = |k: &str| values(&ps[k]);
    let (w1, b1, w2, b2) = (
        get("0.weight"),
        get("0.bias"),
        get("1.weight"),
        get("1.bias"),
    );
    let n = x.len() / 4;
    let mut out = vec![];
    for r in 0..n {
        let mut h = [0.0f64; 6];
        for (j, hj) in h.iter_mut().enumerate() {
            let mut s = b1[j];
            for i in 0..4 {
                s += x[r * 4 + i] as f64 * w1[i * 6 + j];
            }
            *hj = if relu { s.max(0.0) } else { s.tanh() };
        }
        for k in 0..3 {
            let mut s = b2[k];
            for (j, hj) in h.iter().enumerate() {
                s += hj * w2[j * 3 + k];
            }
            out.push(s);
        }
    }
    out
}

#[test]
fn a_host_field_that_shapes_the_model_gets_its_own_program() {
    let _g = lock();
    set_config_report(false);
    let dir = tempfile::tempdir().unwrap();
    let data = rows(8, 2);
    let batch = nitro_data::Dataset::gather(&data, &(0..8).collect::<Vec<_>>(), &["x"]).unwrap();
    let x = batch.get("x").unwrap().as_slice::<f32>().unwrap().to_vec();
    for relu in [false, true] {
        let before = cache_stats("predict").compiles;
        let mut n = Nitro::new(act(relu, dir.path())).unwrap();
        let got = values(&n.predict(&batch).unwrap()["output"]);
        let want = reference_mlp(&n.params(), &x, relu);
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-5, "relu={relu}: got {g}, want {w}");
        }
        if relu {
            // Every named part equals the tanh handle's: only the graph differs.
            assert_eq!(
                cache_stats("predict").compiles,
                before + 1,
                "relu compiles its own"
            );
            let log = n.compile_log().join("\n");
            assert!(
                log.contains("traced graph differs"),
                "the miss names the graph: {log}"
            );
        }
    }
}

#[test]
fn a_handle_rebuilt_with_the_same_values_compiles_nothing() {
    let _g = lock();
    set_config_report(false);
    let dir = tempfile::tempdir().unwrap();
    let data = rows(8, 2);
    let batch = nitro_data::Dataset::gather(&data, &(0..8).collect::<Vec<_>>(), &["x"]).unwrap();
    Nitro::new(act(false, dir.path()))
        .unwrap()
        .predict(&batch)
        .unwrap();
    let before = cache_stats("predict").compiles;
    let mut n = Nitro::new(act(false, dir.path())).unwrap();
    for scale in [0.5f32, 2.0] {
        n.set_device("scale", scale).unwrap();
        n.predict(&batch).unwrap();
    }
    assert_eq!(
        cache_stats("predict").compiles,
        before,
        "a hit, and a Device sweep is free"
    );
}

#[test]
fn resume_refuses_a_checkpoint_of_another_model_structure() {
    let _g = lock();
    set_config_report(false);
    let dir = tempfile::tempdir().unwrap();
    Nitro::new(act(false, dir.path())).unwrap().train().unwrap();
    let mut other = Nitro::new(act(true, dir.path())).unwrap();
    let err = other.resume().unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, RunError::ResumeMismatch { .. }), "{text}");
    assert!(text.contains("model structure"), "{text}");
    assert!(
        text.contains("relu"),
        "names the Host field that differs: {text}"
    );
    // The same structure resumes.
    let mut same = Nitro::new(act(false, dir.path())).unwrap();
    assert!(same.resume().unwrap().is_some());
}

// ---------------------------------------------------------------- item 2

/// `derive` sets a Device normaliser from the training split, whose seed is
/// a Host field: a resumed run on other data recomputes it.
#[derive(Experiment, Debug)]
struct Derived {
    data_seed: u64,
    dir: String,
    #[experiment(default = 1.0)]
    norm: Device<f32>,
}

impl nitro_run::Experiment for Derived {
    type Model = Chain;
    type Inputs = X<Tensor>;
    type Targets = Y<Tensor>;
    type Outputs = Tensor;
    fn build_model(&self, rng: &mut InitRng) -> Result<ModelParts<Chain>, HookError> {
        let model = Chain::new().push(Dense::new(4, 3));
        let mut params = Params::new();
        model.init(rng, "", &mut params)?;
        Ok(ModelParts {
            model,
            params,
            state: Params::new(),
        })
    }
    fn build_data(&self, _: Option<&Distributed>) -> Result<Splits, HookError> {
        Ok(Splits {
            train: rows(16, self.data_seed),
            val: None,
            test: None,
        })
    }
    fn derive(&mut self, data: &Splits) -> Result<(), HookError> {
        let all: Vec<usize> = (0..16).collect();
        let b = nitro_data::Dataset::gather(&data.train, &all, &["x"])?;
        let x = b.get("x").unwrap().as_slice::<f32>().unwrap();
        let mean_abs = x.iter().map(|v| v.abs()).sum::<f32>() / x.len() as f32;
        *self.norm = 1.0 / mean_abs;
        Ok(())
    }
    fn forward(
        e: &DerivedView<Tensor>,
        m: &Chain,
        _: &Ctx,
        ps: &Params<Tensor>,
        st: &Params<Tensor>,
        x: X<Tensor>,
    ) -> (Tensor, Params<Tensor>) {
        (m.apply(ps, "", &(&x.x * &e.norm)), st.clone())
    }
    fn loss(_: &DerivedView<Tensor>, logits: &Tensor, y: Y<Tensor>) -> Tensor {
        softmax_cross_entropy(logits, &y.y, 0.0)
    }
    fn batch_size(&self) -> usize {
        8
    }
    fn max_epochs(&self) -> u64 {
        1
    }
    fn run_dir(&self) -> std::path::PathBuf {
        self.dir.clone().into()
    }
    fn logger(&self) -> Logger {
        quiet()
    }
}

#[test]
fn derive_is_recomputed_on_resume_never_restored() {
    let _g = lock();
    set_config_report(false);
    let dir = tempfile::tempdir().unwrap();
    let build = |seed: u64| {
        let mut e = Derived::defaults();
        e.data_seed = seed;
        e.dir = dir.path().display().to_string();
        Nitro::new(e).unwrap()
    };
    let mut first = build(1);
    first.train().unwrap();
    let saved: f32 = first.device_value("norm").unwrap();
    let mut resumed = build(7);
    let derived: f32 = resumed.device_value("norm").unwrap();
    assert_ne!(saved, derived, "the two splits give different normalisers");
    resumed.resume().unwrap().expect("a checkpoint");
    let after: f32 = resumed.device_value("norm").unwrap();
    assert_eq!(
        after.to_bits(),
        derived.to_bits(),
        "derive wins over the checkpoint"
    );
}

// ---------------------------------------------------------------- item 5

/// A dataset-sized unmarked field.
#[derive(Experiment, Debug)]
struct Big {
    dir: String,
    table: Vec<f32>,
}

impl nitro_run::Experiment for Big {
    type Model = Chain;
    type Inputs = X<Tensor>;
    type Targets = Y<Tensor>;
    type Outputs = Tensor;
    fn build_model(&self, rng: &mut InitRng) -> Result<ModelParts<Chain>, HookError> {
        let model = Chain::new().push(Dense::new(4, 3));
        let mut params = Params::new();
        model.init(rng, "", &mut params)?;
        Ok(ModelParts {
            model,
            params,
            state: Params::new(),
        })
    }
    fn build_data(&self, _: Option<&Distributed>) -> Result<Splits, HookError> {
        Ok(Splits {
            train: rows(16, 1),
            val: None,
            test: None,
        })
    }
    fn forward(
        _: &BigView<Tensor>,
        m: &Chain,
        _: &Ctx,
        ps: &Params<Tensor>,
        st: &Params<Tensor>,
        x: X<Tensor>,
    ) -> (Tensor, Params<Tensor>) {
        (m.apply(ps, "", &x.x), st.clone())
    }
    fn loss(_: &BigView<Tensor>, logits: &Tensor, y: Y<Tensor>) -> Tensor {
        softmax_cross_entropy(logits, &y.y, 0.0)
    }
    fn batch_size(&self) -> usize {
        8
    }
    fn max_epochs(&self) -> u64 {
        1
    }
    fn run_dir(&self) -> std::path::PathBuf {
        self.dir.clone().into()
    }
    fn logger(&self) -> Logger {
        quiet()
    }
}

#[test]
fn a_large_unmarked_field_is_abbreviated_not_stored() {
    let _g = lock();
    set_config_report(true);
    for len in [13_000usize, 13_200] {
        let dir = tempfile::tempdir().unwrap();
        let mut n = Nitro::new(Big {
            dir: dir.path().display().to_string(),
            table: (0..len).map(|i| i as f32).collect(),
        })
        .unwrap();
        let report = n.config_report();
        assert!(
            report.len() < 4000,
            "the report abbreviates: {} bytes",
            report.len()
        );
        n.train().unwrap();
        let ckpt_bytes: u64 = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".nckpt"))
            .map(|e| e.metadata().unwrap().len())
            .max()
            .expect("a checkpoint");
        assert!(
            ckpt_bytes < 8_000,
            "{len} floats: checkpoint of {ckpt_bytes} bytes"
        );
    }
    set_config_report(false);
}

// ---------------------------------------------------------------- item 6

#[derive(Experiment, Debug)]
struct Metrics {
    dir: String,
    output: String,
    field: String,
}

impl nitro_run::Experiment for Metrics {
    type Model = Chain;
    type Inputs = X<Tensor>;
    type Targets = Y<Tensor>;
    type Outputs = Tensor;
    fn build_model(&self, rng: &mut InitRng) -> Result<ModelParts<Chain>, HookError> {
        let model = Chain::new().push(Dense::new(4, 3));
        let mut params = Params::new();
        model.init(rng, "", &mut params)?;
        Ok(ModelParts {
            model,
            params,
            state: Params::new(),
        })
    }
    fn build_data(&self, _: Option<&Distributed>) -> Result<Splits, HookError> {
        let with_label2 = |n: usize, seed: u64| {
            let base = rows(n, seed);
            let all: Vec<usize> = (0..n).collect();
            let b = nitro_data::Dataset::gather(&base, &all, &["x", "y"]).unwrap();
            let extra: Vec<i32> = (0..n).map(|i| (i % 3) as i32).collect();
            InMemory::from_pairs([
                ("x", b.get("x").unwrap().clone()),
                ("y", b.get("y").unwrap().clone()),
                ("label2", HostArray::from_vec(&[n], extra).unwrap()),
            ])
            .unwrap()
        };
        let (train, test) = (with_label2(16, 1), with_label2(8, 3));
        Ok(Splits {
            train,
            val: None,
            test: Some(test),
        })
    }
    fn forward(
        _: &MetricsView<Tensor>,
        m: &Chain,
        _: &Ctx,
        ps: &Params<Tensor>,
        st: &Params<Tensor>,
        x: X<Tensor>,
    ) -> (Tensor, Params<Tensor>) {
        (m.apply(ps, "", &x.x), st.clone())
    }
    fn loss(_: &MetricsView<Tensor>, logits: &Tensor, y: Y<Tensor>) -> Tensor {
        softmax_cross_entropy(logits, &y.y, 0.0)
    }
    fn metrics(&self) -> Vec<Metric> {
        vec![Metric::accuracy(&self.output, &self.field)]
    }
    fn batch_size(&self) -> usize {
        8
    }
    fn run_dir(&self) -> std::path::PathBuf {
        self.dir.clone().into()
    }
    fn logger(&self) -> Logger {
        quiet()
    }
}

#[test]
fn a_metric_that_cannot_be_computed_fails_at_setup() {
    let _g = lock();
    set_config_report(false);
    let dir = tempfile::tempdir().unwrap();
    let e = |output: &str, field: &str| Metrics {
        dir: dir.path().display().to_string(),
        output: output.into(),
        field: field.into(),
    };
    let err = Nitro::new(e("logits", "y"))
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("`logits`") && err.contains("output"), "{err}");
    let err = Nitro::new(e("output", "nope"))
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("`nope`") && err.contains("label2"), "{err}");
    // A field no hook declares is routed for the metric, and counts.
    let mut n = Nitro::new(e("output", "label2")).unwrap();
    let m = n.evaluate("test").unwrap();
    assert!(m.contains_key("acc"), "{m:?}");
}
