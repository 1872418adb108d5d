//! The run core's guarantees (issue "the run core"): a program runs only for
//! the graph it was compiled from, derive is recomputed on resume, f64
//! hyperparameters stay f64, large Host values never break a run, metrics
//! that cannot be computed fail at setup, and step-API programs die with
//! their model.

use std::sync::Mutex;

use nitro_data::{HostArray, InMemory, Splits};
use nitro_graph::nn::init::InitRng;
use nitro_graph::nn::layers::{Activation, Chain, Dense, Layer, Params};
use nitro_graph::nn::loss::{mse, softmax_cross_entropy};
use nitro_graph::nn::Ctx;
use nitro_graph::{Array, DType, Tensor};
use nitro_markers::{Device, Experiment, ExperimentFields, Fields};
use nitro_run::step_api::{trainstep, ModelAndParams, OptState};
use nitro_run::{
    cache_stats, set_config_report, Distributed, HookError, Logger, Metric, ModelParts, Nitro,
    Optimizer, Progress, RunError,
};

/// Compile counters and the config-report switch are process-wide: every
/// test here takes turns (one that did not raced the step-API free test).
static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Fields)]
struct X<T> {
    x: T,
}
#[derive(Fields)]
struct Y<T> {
    y: T,
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

fn quiet() -> Logger {
    Logger {
        progress: Progress::Off,
        every: 1000,
    }
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

// ---------------------------------------------------------------- item 3

/// A linear least-squares model in f64: one Dense, no activation.
#[derive(Experiment, Debug)]
struct Lsq {
    dir: String,
    weight_decay: f64,
}

const LR: f64 = 1e-3 / 3.0;

fn lsq_data() -> InMemory {
    let n = 8;
    let x: Vec<f64> = (0..n * 4).map(|i| (i as f64 * 0.731).sin()).collect();
    let y: Vec<f64> = (0..n * 2).map(|i| (i as f64 * 0.377).cos()).collect();
    InMemory::from_pairs([
        ("x", HostArray::from_vec(&[n, 4], x).unwrap()),
        ("y", HostArray::from_vec(&[n, 2], y).unwrap()),
    ])
    .unwrap()
}

fn lsq_params() -> Params<Array> {
    let mut p = Params::new();
    let w: Vec<f64> = (0..8).map(|i| 0.1 + 0.05 * (i as f64).cos()).collect();
    p.insert("0.weight".to_string(), Array::new(&[4, 2], w).unwrap());
    p.insert(
        "0.bias".to_string(),
        Array::new(&[2], vec![0.01f64, -0.02]).unwrap(),
    );
    p
}

impl nitro_run::Experiment for Lsq {
    type Model = Chain;
    type Inputs = X<Tensor>;
    type Targets = Y<Tensor>;
    type Outputs = Tensor;
    fn build_model(&self, _: &mut InitRng) -> Result<ModelParts<Chain>, HookError> {
        Ok(ModelParts {
            model: Chain::new().push(Dense::new(4, 2)),
            params: lsq_params(),
            state: Params::new(),
        })
    }
    fn build_data(&self, _: Option<&Distributed>) -> Result<Splits, HookError> {
        Ok(Splits {
            train: lsq_data(),
            val: None,
            test: None,
        })
    }
    fn forward(
        _: &LsqView<Tensor>,
        m: &Chain,
        _: &Ctx,
        ps: &Params<Tensor>,
        st: &Params<Tensor>,
        x: X<Tensor>,
    ) -> (Tensor, Params<Tensor>) {
        (m.apply(ps, "", &x.x), st.clone())
    }
    fn loss(_: &LsqView<Tensor>, out: &Tensor, y: Y<Tensor>) -> Tensor {
        mse(out, &y.y)
    }
    fn batch_size(&self) -> usize {
        8
    }
    fn max_epochs(&self) -> u64 {
        1
    }
    fn optimizer(&self) -> Optimizer {
        Optimizer::adamw(LR, self.weight_decay)
    }
    fn run_dir(&self) -> std::path::PathBuf {
        self.dir.clone().into()
    }
    fn logger(&self) -> Logger {
        quiet()
    }
}

/// One Adam(W) step from `lsq_params` on `lsq_data`, by definition: the
/// mean-squared-error gradient in closed form, then PyTorch's AdamW
/// (`p *= 1 - lr*wd; p -= lr * m_hat / (sqrt(v_hat) + eps)`), in f64.
fn reference_adamw(weight_decay: f64) -> Vec<(String, Vec<f64>)> {
    let (b1, b2, eps) = (0.9f64, 0.999f64, 1e-8f64);
    let data = lsq_data();
    let all: Vec<usize> = (0..8).collect();
    let b = nitro_data::Dataset::gather(&data, &all, &["x", "y"]).unwrap();
    let (x, y): (Vec<f64>, Vec<f64>) = (
        b.get("x").unwrap().to_f64_vec(),
        b.get("y").unwrap().to_f64_vec(),
    );
    let p = lsq_params();
    let w: Vec<f64> = p["0.weight"].to_f64_vec();
    let bias: Vec<f64> = p["0.bias"].to_f64_vec();
    let (n, outs) = (8usize, 2usize);
    let mut gw = vec![0.0; 8];
    let mut gb = vec![0.0; 2];
    let scale = 2.0 / (n * outs) as f64;
    for r in 0..n {
        for k in 0..outs {
            let mut pred = bias[k];
            for i in 0..4 {
                pred += x[r * 4 + i] * w[i * 2 + k];
            }
            let d = scale * (pred - y[r * 2 + k]);
            gb[k] += d;
            for i in 0..4 {
                gw[i * 2 + k] += d * x[r * 4 + i];
            }
        }
    }
    let step = |p: &[f64], g: &[f64]| -> Vec<f64> {
        p.iter()
            .zip(g)
            .map(|(&p, &g)| {
                let m_hat = (1.0 - b1) * g / (1.0 - b1);
                let v_hat = (1.0 - b2) * g * g / (1.0 - b2);
                p * (1.0 - LR * weight_decay) - LR * m_hat / (v_hat.sqrt() + eps)
            })
            .collect()
    };
    vec![
        ("0.bias".to_string(), step(&bias, &gb)),
        ("0.weight".to_string(), step(&w, &gw)),
    ]
}

/// Compares the updates (new - old) to the reference's to 1e-12 relative:
/// a hyperparameter rounded through f32 moves them by ~1e-8.
fn assert_update_matches(got: &[(String, Vec<f64>)], weight_decay: f64, api: &str) {
    let want = reference_adamw(weight_decay);
    let old = lsq_params();
    for ((name, g), (wname, w)) in got.iter().zip(&want) {
        assert_eq!(name, wname);
        let base = old[name].to_f64_vec();
        for ((g, w), p) in g.iter().zip(w).zip(&base) {
            let (dg, dw) = (g - p, w - p);
            assert!(
                (dg - dw).abs() <= 1e-12 * dw.abs(),
                "{api}, wd {weight_decay}, `{name}`: update {dg:e}, reference {dw:e}"
            );
        }
    }
}

#[test]
fn f64_adam_and_adamw_steps_equal_the_reference_through_both_apis() {
    let _g = lock();
    set_config_report(false);
    for wd in [0.0, 0.1] {
        // Nitro::train: one update of one full batch.
        let dir = tempfile::tempdir().unwrap();
        let mut n = Nitro::new(Lsq {
            dir: dir.path().display().to_string(),
            weight_decay: wd,
        })
        .unwrap();
        n.train().unwrap();
        assert_eq!(n.step(), 1);
        let got: Vec<(String, Vec<f64>)> = n
            .params()
            .into_iter()
            .map(|(k, a)| {
                assert_eq!(a.dtype(), DType::F64);
                (k, a.to_f64_vec())
            })
            .collect();
        assert_update_matches(&got, wd, "Nitro::train");

        // The step API.
        let mut model = ModelAndParams::new(Chain::new().push(Dense::new(4, 2)), lsq_params());
        let mut opt = OptState::new(Optimizer::adamw(LR, wd), &model);
        let data = lsq_data();
        let b =
            nitro_data::Dataset::gather(&data, &(0..8).collect::<Vec<_>>(), &["x", "y"]).unwrap();
        // Batch fields are program arrays already (one host array type).
        let as_array = |f: &str| b.get(f).unwrap().clone();
        let loss = |m: &Chain, _: &Ctx, ps: &Params<Tensor>, b: &[Tensor]| {
            mse(&m.apply(ps, "", &b[0]), &b[1])
        };
        trainstep(&loss, &mut model, &[as_array("x"), as_array("y")], &mut opt).unwrap();
        let got: Vec<(String, Vec<f64>)> = model
            .params
            .iter()
            .map(|(k, a)| (k.clone(), a.to_f64_vec()))
            .collect();
        assert_update_matches(&got, wd, "step API");
    }
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
