//! Forward outputs as a `#[derive(Tree)]` struct (the seed's
//! `(; logits, energy)` with an auxiliary loss term), and the setup-time
//! rule that every output leaf keeps the batch on axis 0.

mod common;

use std::path::PathBuf;

use common::{dataset, X, Y};
use nitro_data::{Dataset, Splits};
use nitro_graph::nn::init::InitRng;
use nitro_graph::nn::layers::{Activation, Chain, Dense, Layer, Params};
use nitro_graph::nn::loss::softmax_cross_entropy;
use nitro_graph::nn::ops::mean_all;
use nitro_graph::nn::Ctx;
use nitro_graph::Tensor;
use nitro_markers::{Device, Experiment, ExperimentFields, GraphConst, Tree};
use nitro_run::{Distributed, HookError, Logger, Metric, ModelParts, Nitro, Progress, RunError};

/// The two named outputs.
#[derive(Tree)]
pub struct Heads {
    /// Class scores, `[n, 3]`.
    pub logits: Tensor,
    /// An auxiliary per-sample energy, `[n, 1]`.
    pub energy: Tensor,
}

/// A decoder and an auxiliary head.
pub struct TwoModel {
    decoder: Chain,
    aux: Chain,
}

/// A two-output experiment.
#[derive(Experiment)]
pub struct TwoHead {
    /// Weight of the auxiliary term (Device: no recompile).
    #[experiment(default = 0.5)]
    pub aux_weight: Device<f32>,
    /// 1 = forward wrongly returns `energy` reduced over the batch.
    #[experiment(default = 0)]
    pub reduce_energy: GraphConst<usize>,
    /// Run directory.
    pub dir: String,
}

impl nitro_run::Experiment for TwoHead {
    type Model = TwoModel;
    type Inputs = X<Tensor>;
    type Targets = Y<Tensor>;
    type Outputs = Heads;

    fn build_model(&self, rng: &mut InitRng) -> Result<ModelParts<TwoModel>, HookError> {
        let decoder = Chain::new()
            .push(Dense::new(4, 8).with(Activation::Tanh))
            .push(Dense::new(8, 3));
        let aux = Chain::new().push(Dense::new(4, 1));
        let mut params = Params::new();
        decoder.init(rng, "decoder", &mut params)?;
        aux.init(rng, "aux", &mut params)?;
        Ok(ModelParts {
            model: TwoModel { decoder, aux },
            params,
            state: Params::new(),
        })
    }

    fn build_data(&self, _: Option<&Distributed>) -> Result<Splits, HookError> {
        Ok(Splits {
            train: dataset(40, 1),
            val: Some(dataset(12, 2)),
            test: Some(dataset(10, 3)),
        })
    }

    fn forward(
        e: &TwoHeadView<Tensor>,
        m: &TwoModel,
        _: &Ctx,
        ps: &Params<Tensor>,
        st: &Params<Tensor>,
        x: X<Tensor>,
    ) -> (Heads, Params<Tensor>) {
        let logits = m.decoder.apply(ps, "decoder", &x.x);
        let mut energy = m.aux.apply(ps, "aux", &x.x);
        if e.reduce_energy == 1 {
            energy = mean_all(&energy);
        }
        (Heads { logits, energy }, st.clone())
    }

    fn loss(e: &TwoHeadView<Tensor>, out: &Heads, y: Y<Tensor>) -> Tensor {
        softmax_cross_entropy(&out.logits, &y.y, 0.0)
            + mean_all(&(&out.energy * &out.energy)) * &e.aux_weight
    }

    fn metrics(&self) -> Vec<Metric> {
        vec![Metric::accuracy("logits", "y")]
    }
    fn batch_size(&self) -> usize {
        4
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
}

fn two_head(dir: &std::path::Path) -> TwoHead {
    let mut e = TwoHead::defaults();
    e.dir = dir.display().to_string();
    e
}

#[test]
fn struct_outputs_reach_loss_and_metrics_by_name() {
    nitro_run::set_config_report(false);
    let d = tempfile::tempdir().unwrap();
    let mut n = Nitro::new(two_head(d.path())).unwrap();
    let report = n.train().unwrap();
    assert!(
        report.metrics.contains_key("val_acc"),
        "{:?}",
        report.metrics
    );
    let out = n
        .predict(&dataset(6, 9).gather(&[0, 1, 2, 3, 4, 5], &["x"]).unwrap())
        .unwrap();
    assert_eq!(out["logits"].shape(), [6, 3]);
    assert_eq!(out["energy"].shape(), [6, 1]);
    // The auxiliary term is in the loss: switching its weight off (a Device
    // value, no compile) lowers the loss by exactly aux_weight * mean(energy²).
    let with_aux = n.evaluate("test").unwrap()["loss"];
    n.set_device("aux_weight", 0.0f32).unwrap();
    let without = n.evaluate("test").unwrap()["loss"];
    let test = dataset(10, 3);
    let all: Vec<usize> = (0..10).collect();
    let energy = n.predict(&test.gather(&all, &["x"]).unwrap()).unwrap()["energy"].to_f32_vec();
    let aux = energy.iter().map(|e| (e * e) as f64).sum::<f64>() / 10.0;
    assert!(
        (with_aux - without - 0.5 * aux).abs() < 1e-5,
        "{with_aux} - {without} != 0.5 * {aux}"
    );
}

#[test]
fn an_output_reduced_in_forward_is_a_setup_error_naming_the_leaf() {
    nitro_run::set_config_report(false);
    let d = tempfile::tempdir().unwrap();
    let mut e = two_head(d.path());
    e.reduce_energy = 1.into();
    let err = Nitro::new(e)
        .err()
        .expect("setup must refuse a reduced output");
    assert!(matches!(err, RunError::OutputWithoutBatch { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("forward output `energy` has shape []"),
        "{text}"
    );
    assert!(
        text.contains("reduce over the batch in `loss` or `metrics`"),
        "{text}"
    );
}
