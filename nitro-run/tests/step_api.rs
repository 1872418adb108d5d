//! The step API without an Experiment: the cached fused step (same shape
//! reuses, a new shape compiles once), aux values, gradients, and `train`
//! stopping on a non-finite loss.

use std::sync::Mutex;

use nitro_graph::nn::layers::{Activation, Chain, Dense, Layer, Params};
use nitro_graph::nn::loss::mse;
use nitro_graph::nn::ops::mean_all;
use nitro_graph::nn::Ctx;
use nitro_graph::{Array, Tensor};
use nitro_markers::Tree;
use nitro_run::step_api::{train, trainstep, trainstep_withgradient, ModelAndParams, OptState};
use nitro_run::{cache_stats, Optimizer, RunError};

/// The process-wide counters are shared by the tests of this binary.
static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn model() -> ModelAndParams<Chain> {
    let chain = Chain::new()
        .push(Dense::new(4, 8).with(Activation::Tanh))
        .push(Dense::new(8, 2));
    let params = chain.init_params(7).unwrap();
    ModelAndParams::new(chain, params)
}

fn batch(n: usize, offset: f32) -> Vec<Array> {
    let x: Vec<f32> = (0..n * 4)
        .map(|i| (i as f32 * 0.37 + offset).sin())
        .collect();
    let y: Vec<f32> = x
        .chunks(4)
        .flat_map(|r| [r[0] + r[1], r[2] - r[3]])
        .collect();
    vec![
        Array::new(&[n, 4], x).unwrap(),
        Array::new(&[n, 2], y).unwrap(),
    ]
}

fn loss(m: &Chain, _: &Ctx, ps: &Params<Tensor>, b: &[Tensor]) -> Tensor {
    mse(&m.apply(ps, "", &b[0]), &b[1])
}

#[test]
fn same_shape_reuses_and_a_new_shape_compiles_once() {
    let _g = lock();
    let mut m = model();
    let mut opt = OptState::new(Optimizer::adam(0.02), &m);
    let before = cache_stats("trainstep");
    let mut losses = vec![];
    for i in 0..3 {
        losses.push(trainstep(&loss, &mut m, &batch(8, i as f32), &mut opt).unwrap());
    }
    let after = cache_stats("trainstep");
    assert_eq!(
        after.compiles - before.compiles,
        1,
        "one compile for width 8"
    );
    assert_eq!(after.hits - before.hits, 2, "then cache hits");
    for _ in 0..2 {
        trainstep(&loss, &mut m, &batch(4, 9.0), &mut opt).unwrap();
    }
    let last = cache_stats("trainstep");
    assert_eq!(last.compiles - after.compiles, 1, "width 4 compiles once");
    assert_eq!(last.hits - after.hits, 1);
    assert_eq!(opt.step(), 5);
    // Changing a hyperparameter value is an input, not a recompile.
    *opt.optimizer_mut() = Optimizer::adam(0.001);
    trainstep(&loss, &mut m, &batch(4, 9.0), &mut opt).unwrap();
    assert_eq!(cache_stats("trainstep").compiles, last.compiles);
    assert!(losses[2] < losses[0], "{losses:?}");
}

/// Statistics computed on-device in the same program as the step.
#[derive(Tree)]
struct Stats {
    twice: Tensor,
    pred: Tensor,
}

#[test]
fn aux_values_and_gradients_come_back() {
    let _g = lock();
    let mut m = model();
    let mut opt = OptState::new(Optimizer::sgd(0.1), &m);
    let with_aux = |m: &Chain, _: &Ctx, ps: &Params<Tensor>, b: &[Tensor]| {
        let pred = m.apply(ps, "", &b[0]);
        let l = mse(&pred, &b[1]);
        let twice = &l + &l;
        (l, Stats { twice, pred })
    };
    let before = m.params.clone();
    let ((l, aux), grads) =
        trainstep_withgradient(&with_aux, &mut m, &batch(6, 0.0), &mut opt).unwrap();
    assert!((aux["twice"].item().unwrap() - 2.0 * l).abs() < 1e-6);
    assert_eq!(aux["pred"].shape(), [6, 2]);
    assert_eq!(
        grads.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>()
    );
    // SGD without momentum: new = old - lr * grad.
    for (name, g) in &grads {
        let (old, new) = (before[name].to_f32_vec(), m.params[name].to_f32_vec());
        for ((o, n), g) in old.iter().zip(&new).zip(g.to_f32_vec()) {
            assert!((o - 0.1 * g - n).abs() < 1e-6, "{name}: {o} {g} {n}");
        }
    }
    let (l2, _) = trainstep(&with_aux, &mut m, &batch(6, 0.0), &mut opt).unwrap();
    assert!(l2 < l);
}

#[test]
fn train_stops_with_an_error_on_a_non_finite_loss() {
    let _g = lock();
    let mut m = model();
    let mut opt = OptState::new(Optimizer::sgd(0.05), &m);
    let with_term = |m: &Chain, _: &Ctx, ps: &Params<Tensor>, b: &[Tensor]| {
        mse(&m.apply(ps, "", &b[0]), &b[1]) + mean_all(&b[2])
    };
    let term = |v: f32| Array::new(&[1], vec![v]).unwrap();
    let data: Vec<Vec<Array>> = (0..4)
        .map(|i| {
            let mut b = batch(4, i as f32);
            b.push(term(if i == 2 { f32::NAN } else { 0.0 }));
            b
        })
        .collect();
    let ok = train(&with_term, &mut m, &data[..2], &mut opt).unwrap();
    assert_eq!(ok.steps, 2);
    let good = m.params.clone();
    let err = train(&with_term, &mut m, &data[2..], &mut opt).unwrap_err();
    assert!(
        matches!(err, RunError::NonFiniteLoss { step: 1, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("at step 1"), "{err}");
    for (name, a) in &good {
        assert_eq!(a.to_f32_vec(), m.params[name].to_f32_vec(), "{name} kept");
    }
    assert_eq!(opt.step(), 2, "the non-finite step is not counted");
}

/// Under a launcher's world of two, the first step warns once that the
/// step API trains this rank alone (the test runs itself again with Open
/// MPI's variables set, so this process's environment stays clean; the
/// step API only reads them, it joins no group).
#[test]
fn under_a_launcher_the_step_api_warns_it_is_not_data_parallel() {
    if std::env::var_os("NITRO_STEP_API_CHILD").is_some() {
        let mut m = model();
        let mut opt = OptState::new(Optimizer::sgd(0.1), &m);
        for _ in 0..3 {
            trainstep(&loss, &mut m, &batch(8, 0.0), &mut opt).unwrap();
        }
        return;
    }
    let run = |vars: &[(&str, &str)]| {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            "under_a_launcher_the_step_api_warns_it_is_not_data_parallel",
            "--nocapture",
        ])
        .env("NITRO_STEP_API_CHILD", "1")
        .env_remove("OMPI_COMM_WORLD_SIZE")
        .env_remove("PMI_SIZE");
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run(&[("OMPI_COMM_WORLD_SIZE", "2"), ("OMPI_COMM_WORLD_RANK", "1")]);
    assert_eq!(err.matches("is not data-parallel").count(), 1, "{err}");
    assert!(
        err.contains("rank 1 of 2") && err.contains("Experiment"),
        "{err}"
    );
    let alone = run(&[]);
    assert!(!alone.contains("data-parallel"), "{alone}");
}

// Moved from core.rs (issue "The run core", items 1 and 7): the step
// API's keys and the lifetime of its programs.

/// The step API keys a loss closure by what it traces, so two closures of
/// one type capturing different values get different programs.
#[test]
fn step_api_closures_capturing_different_values_do_not_share_a_program() {
    let _g = lock();
    let chain = || Chain::new().push(Dense::new(4, 2));
    let params = chain().init_params(3).unwrap();
    let x = Array::new(
        &[8, 4],
        (0..32).map(|i| (i as f32 * 0.3).sin()).collect::<Vec<_>>(),
    )
    .unwrap();
    let y = Array::new(&[8, 2], vec![0.5f32; 16]).unwrap();
    let make = |scale: f64| {
        move |m: &Chain, _: &Ctx, ps: &Params<Tensor>, b: &[Tensor]| {
            let l = mse(&m.apply(ps, "", &b[0]), &b[1]);
            &l * &l.scalar_like(scale)
        }
    };
    // One model, lr 0 (params stay put), two closures of one type.
    let mut model = ModelAndParams::new(chain(), params);
    let mut opt = OptState::new(Optimizer::sgd(0.0), &model);
    let mut losses = vec![];
    for scale in [1.0, 100.0] {
        let f = make(scale);
        losses.push(trainstep(&f, &mut model, &[x.clone(), y.clone()], &mut opt).unwrap());
    }
    let ratio = losses[1] / losses[0];
    assert!((ratio - 100.0).abs() < 1e-3, "losses {losses:?}");
}

#[test]
fn step_api_programs_are_freed_with_their_model() {
    let _g = lock();
    let x = Array::new(&[4, 4], vec![0.25f32; 16]).unwrap();
    let y = Array::new(&[4, 2], vec![0.5f32; 8]).unwrap();
    let loss =
        |m: &Chain, _: &Ctx, ps: &Params<Tensor>, b: &[Tensor]| mse(&m.apply(ps, "", &b[0]), &b[1]);
    let live_before = cache_stats("trainstep").live;
    for width in 0..12 {
        let chain = || {
            Chain::new()
                .push(Dense::new(4, 2 + width))
                .push(Dense::new(2 + width, 2))
        };
        let mut model = ModelAndParams::new(chain(), chain().init_params(width as u64).unwrap());
        let mut opt = OptState::new(Optimizer::sgd(0.1), &model);
        trainstep(&loss, &mut model, &[x.clone(), y.clone()], &mut opt).unwrap();
        assert_eq!(
            cache_stats("trainstep").live,
            live_before + 1,
            "model {width} is live"
        );
    }
    assert_eq!(
        cache_stats("trainstep").live,
        live_before,
        "every dropped model freed its step"
    );
}

/// A loss closure rebuilt every iteration with another captured value
/// compiles every time (correctly: the graph differs); the pile-up warning
/// says so, with advice for that cause, without a tracing subscriber.
#[test]
fn the_pileup_warning_reaches_the_user_with_advice_for_its_cause() {
    let _g = lock();
    let x = Array::new(&[4, 4], vec![0.25f32; 16]).unwrap();
    let y = Array::new(&[4, 2], vec![0.5f32; 8]).unwrap();
    let chain = Chain::new().push(Dense::new(4, 2));
    let params = chain.init_params(1).unwrap();
    let mut model = ModelAndParams::new(chain, params);
    let mut opt = OptState::new(Optimizer::sgd(0.1), &model);
    for i in 0..10 {
        let scale = 1.0 + i as f64;
        let loss = move |m: &Chain, _: &Ctx, ps: &Params<Tensor>, b: &[Tensor]| {
            let l = mse(&m.apply(ps, "", &b[0]), &b[1]);
            &l * &l.scalar_like(scale)
        };
        nitro_run::step_api::trainstep_withgradient(
            &loss,
            &mut model,
            &[x.clone(), y.clone()],
            &mut opt,
        )
        .unwrap();
    }
    let warnings = nitro_run::compile_warnings();
    let w = warnings
        .iter()
        .find(|w| w.contains("trainstep_withgradient"))
        .unwrap_or_else(|| panic!("no warning in {warnings:?}"));
    assert!(w.contains("build it once and reuse it"), "{w}");
}
