//! The layers of today's models (exact GELU, Dropout, BatchNorm,
//! Residual / Parallel) against references written here: naive loops and
//! textbook formulas (PyTorch's definitions for BatchNorm), gradients
//! against finite differences in f64, and the context's keys. Attention
//! and the transformer block are in `attention.rs`.
#![allow(clippy::needless_range_loop, clippy::cloned_ref_to_slice_refs)] // `&[x.clone()]` reads better in tests

mod common;
mod layer_refs;

use common::{assert_close, check_grad, run, values};
use layer_refs::{erf_ref, gelu_ref, param_shapes, run_f32, run_keyed, tree};
use nitro_graph::nn::combinators::{Chain, Combine, Parallel, Residual};
use nitro_graph::nn::ctx::{step_key, Ctx, Key, Mode};
use nitro_graph::nn::layers::{init_parts, Dense, Dropout, Layer, Params};
use nitro_graph::nn::norm::BatchNorm;
use nitro_graph::nn::ops::{erf, gelu_erf};
use nitro_graph::{compile, CompileOptions, DType, Tensor, TensorSpec};
use proptest::prelude::*;

#[test]
fn erf_and_exact_gelu_match_the_series_in_f64_and_f32() {
    let x: Vec<f64> = (0..2001).map(|i| -6.0 + i as f64 * 0.006).collect();
    let worst = |got: &[f64], want: &dyn Fn(f64) -> f64, xs: &[f64]| {
        xs.iter()
            .zip(got)
            .map(|(&v, g)| (g - want(v)).abs())
            .fold(0.0, f64::max)
    };
    // f64: libm's erf, as exact as the series itself.
    let got = run(&[vec![x.len()]], &[x.clone()], |_, t| erf(&t[0])).to_f64_vec();
    let e = worst(&got, &erf_ref, &x);
    assert!(e < 1e-10, "f64 erf max abs error {e}");
    let got = run(&[vec![x.len()]], &[x.clone()], |_, t| gelu_erf(&t[0])).to_f64_vec();
    let want: Vec<f64> = x.iter().map(|&v| gelu_ref(v)).collect();
    assert_close(&got, &want, 1e-10);
    // f32: within about two ulps of the exact value at the f32 input.
    let x32: Vec<f64> = x.iter().map(|&v| v as f32 as f64).collect();
    let e = worst(&run_f32(&x32, erf), &erf_ref, &x32);
    assert!(e < 1.2e-7, "f32 erf max abs error {e}");
    let got = run_f32(&x32, gelu_erf);
    for (&v, g) in x32.iter().zip(&got) {
        // x Φ(x): the erf's absolute error, scaled by |x| / 2, plus rounding.
        let tol = 0.6e-7 * v.abs() + 1.2e-7 * gelu_ref(v).abs();
        assert!(
            (g - gelu_ref(v)).abs() <= tol,
            "f32 gelu({v}) = {g}, want {}",
            gelu_ref(v)
        );
    }
    // The analytic VJPs against finite differences, over the whole curve.
    check_grad(&[vec![7]], 3, |_, t| erf(&(&t[0] * 2.5)));
    check_grad(&[vec![7]], 3, |_, t| gelu_erf(&(&t[0] * 2.5)));
    check_grad(&[vec![7]], 5, |_, t| gelu_erf(&(&t[0] * 6.0)).tanh());
}

#[test]
fn the_exact_gelu_derivative_matches_its_closed_form_and_finite_differences() {
    // d/dx x Φ(x) = Φ(x) + x φ(x), written from the series erf and the
    // textbook normal density: independent of the primitive's own formula.
    let want = |x: f64| {
        let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
        0.5 * (1.0 + erf_ref(x / std::f64::consts::SQRT_2)) + x * pdf
    };
    let x: Vec<f64> = (0..2001).map(|i| -6.0 + i as f64 * 0.006).collect();
    let got = run(&[vec![x.len()]], &[x.clone()], |_, t| t[0].gelu_erf_grad()).to_f64_vec();
    let want64: Vec<f64> = x.iter().map(|&v| want(v)).collect();
    assert_close(&got, &want64, 1e-10);
    // f32: the erf's 1.2e-7 (halved by Φ), exp's and the sum's roundings.
    let x32: Vec<f64> = x.iter().map(|&v| v as f32 as f64).collect();
    for (&v, g) in x32.iter().zip(&run_f32(&x32, |t| t.gelu_erf_grad())) {
        let tol = 1e-7 + 2.4e-7 * want(v).abs();
        assert!(
            (g - want(v)).abs() <= tol,
            "f32 gelu'({v}) = {g}, want {}",
            want(v)
        );
    }
    // Its own VJP (GELU's second derivative, φ(x)(2 - x²)) by finite
    // differences, and GELU's first through it once more.
    check_grad(&[vec![7]], 3, |_, t| (&t[0] * 2.5).gelu_erf_grad());
    check_grad(&[vec![7]], 7, |_, t| gelu_erf(&(&t[0] * 1.5)).exp());
}

#[test]
fn dropout_rate_scaling_same_key_same_mask_and_eval_identity() {
    let n = 20_000;
    let x: Vec<f64> = (0..n).map(|i| 1.0 + (i % 7) as f64).collect();
    let layer = Dropout::new(0.3);
    let draw = |key: i32| {
        run_keyed(&[vec![n]], &[x.clone()], key, |t, k| {
            let cx = Ctx::train(Key::new(k).unwrap());
            vec![layer.forward(&cx, &Params::new(), &mut Params::new(), "", &t[0])]
        })
        .unwrap()
        .remove(0)
        .to_f64_vec()
    };
    let (a, b, c) = (draw(7), draw(7), draw(8));
    assert_eq!(a, b, "the same key draws the same mask");
    assert_ne!(a, c, "another key draws another mask");
    let zeros = a.iter().filter(|&&v| v == 0.0).count() as f64 / n as f64;
    // 3.9 standard deviations of a binomial proportion.
    assert!(
        (zeros - 0.3).abs() < 3.9 * (0.3f64 * 0.7 / n as f64).sqrt(),
        "rate {zeros}"
    );
    for (y, x) in a.iter().zip(&x) {
        assert!(*y == 0.0 || (y - x / 0.7).abs() < 1e-12, "kept {y} for {x}");
    }
    let eval = run(&[vec![n]], &[x.clone()], |_, t| {
        layer.forward(&Ctx::eval(), &Params::new(), &mut Params::new(), "", &t[0])
    });
    assert_eq!(eval.to_f64_vec(), x);
    // Without a mode it refuses, by name.
    let err = compile(
        &[("x", TensorSpec::new(DType::F64, &[3]))],
        CompileOptions::named("no_mode"),
        |_, t| {
            Ok(vec![(
                "y".into(),
                layer.apply(&Params::new(), "drop", &t[0]),
            )])
        },
    )
    .expect_err("dropout without a mode is refused");
    let msg = err.to_string();
    assert!(
        msg.contains("Dropout at `drop`") && msg.contains("forward(cx"),
        "{msg}"
    );
}

#[test]
fn combinators_give_children_independent_keys_and_thread_state() {
    // Two dropouts in parallel, summed, see independent masks.
    let par = Parallel::new(Combine::Concat(0))
        .push(Dropout::new(0.5))
        .push(Dropout::new(0.5));
    let n = 4000;
    let out = run_keyed(&[vec![n]], &[vec![1.0; n]], 3, |t, k| {
        let cx = Ctx::train(Key::new(k).unwrap());
        vec![par.forward(&cx, &Params::new(), &mut Params::new(), "", &t[0])]
    })
    .unwrap()
    .remove(0)
    .to_f64_vec();
    assert_eq!(out.len(), 2 * n);
    let same = (0..n).filter(|&i| out[i] == out[n + i]).count() as f64 / n as f64;
    assert!(
        (same - 0.5).abs() < 0.05,
        "masks agree on {same} of elements"
    );
    // Residual: x + body(x); Parallel Sum: a(x) + b(x); Chain threads
    // state through a BatchNorm.
    let (d, rows) = (3, 4);
    let res = Residual::new(Dense::new(d, d));
    let shapes = param_shapes(&res);
    let x = values(rows * d, 1);
    let (w, bias) = (values(d * d, 2), values(d, 3));
    let got = run(
        &[vec![rows, d], vec![d], vec![d, d]],
        &[x.clone(), bias.clone(), w.clone()],
        |_, t| res.apply(&tree(&shapes, &t[1..]), "", &t[0]),
    );
    let want: Vec<f64> = (0..rows * d)
        .map(|e| {
            let (r, c) = (e / d, e % d);
            x[e] + (0..d).map(|k| x[r * d + k] * w[k * d + c]).sum::<f64>() + bias[c]
        })
        .collect();
    assert_close(&got.to_f64_vec(), &want, 1e-12);
    let sum = Parallel::new(Combine::Sum)
        .push(Dense::new(d, d))
        .push(Dense::new(d, d));
    let shapes = param_shapes(&sum);
    let mut all = vec![vec![rows, d]];
    all.extend(shapes.iter().map(|s| s.1.clone()));
    check_grad(&all, 5, |_, t| {
        sum.apply(&tree(&shapes, &t[1..]), "", &t[0])
    });
    let chain = Chain::new().push(Dense::new(d, d)).push(BatchNorm::d1(d));
    let (_, st) = init_parts(&chain, 0).unwrap();
    assert_eq!(
        st.keys().collect::<Vec<_>>(),
        ["1.running_mean", "1.running_var"]
    );
}

/// PyTorch's BatchNorm over axis 1 of `[n, c, rest]`: the normalised
/// output with batch statistics, and the new running mean and variance.
fn batch_norm_ref(
    x: &[f64],
    (n, c, rest): (usize, usize, usize),
    weight: &[f64],
    bias: &[f64],
    running: (&[f64], &[f64]),
    momentum: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let at = |i: usize, ch: usize, r: usize| x[(i * c + ch) * rest + r];
    let count = (n * rest) as f64;
    let mut y = vec![0.0; x.len()];
    let (mut rm, mut rv) = (vec![0.0; c], vec![0.0; c]);
    for ch in 0..c {
        let mut s = 0.0;
        for i in 0..n {
            for r in 0..rest {
                s += at(i, ch, r);
            }
        }
        let mu = s / count;
        let mut ss = 0.0;
        for i in 0..n {
            for r in 0..rest {
                ss += (at(i, ch, r) - mu).powi(2);
            }
        }
        let var = ss / count;
        for i in 0..n {
            for r in 0..rest {
                y[(i * c + ch) * rest + r] =
                    (at(i, ch, r) - mu) / (var + 1e-5).sqrt() * weight[ch] + bias[ch];
            }
        }
        rm[ch] = (1.0 - momentum) * running.0[ch] + momentum * mu;
        rv[ch] = (1.0 - momentum) * running.1[ch] + momentum * ss / (count - 1.0);
    }
    (y, rm, rv)
}

#[test]
fn batch_norm_train_and_eval_follow_pytorch() {
    for (bn, shape) in [
        (BatchNorm::d1(3), vec![5, 3]),
        (BatchNorm::d1(3), vec![4, 3, 2]),
        (BatchNorm::d2(2), vec![3, 2, 2, 3]),
    ] {
        let c = shape[1];
        let rest: usize = shape[2..].iter().product();
        let x: Vec<f64> = values(shape.iter().product(), 11)
            .iter()
            .map(|v| v * 3.0 + 1.0)
            .collect();
        let (w, b) = (values(c, 12), values(c, 13));
        let (rm0, rv0): (Vec<f64>, Vec<f64>) = (
            values(c, 14),
            values(c, 15).iter().map(|v| v.abs() + 0.5).collect(),
        );
        let shapes = [shape.clone(), vec![c], vec![c], vec![c], vec![c]];
        let data = [x.clone(), b.clone(), w.clone(), rm0.clone(), rv0.clone()];
        let trace = |mode: Mode| {
            let bn = bn.clone();
            run_keyed(&shapes, &data, 0, move |t, k| {
                let ps: Params<Tensor> = [
                    ("bias".into(), t[1].clone()),
                    ("weight".into(), t[2].clone()),
                ]
                .into();
                let mut st: Params<Tensor> = [
                    ("running_mean".into(), t[3].clone()),
                    ("running_var".into(), t[4].clone()),
                ]
                .into();
                let cx = match mode {
                    Mode::Train => Ctx::train(Key::new(k).unwrap()),
                    Mode::Eval => Ctx::eval(),
                };
                let y = bn.forward(&cx, &ps, &mut st, "", &t[0]);
                vec![y, st["running_mean"].clone(), st["running_var"].clone()]
            })
            .unwrap()
        };
        let (y, rm, rv) = batch_norm_ref(&x, (shape[0], c, rest), &w, &b, (&rm0, &rv0), 0.1);
        let train = trace(Mode::Train);
        assert_close(&train[0].to_f64_vec(), &y, 1e-10);
        assert_close(&train[1].to_f64_vec(), &rm, 1e-12);
        assert_close(&train[2].to_f64_vec(), &rv, 1e-12);
        let eval = trace(Mode::Eval);
        let want: Vec<f64> = (0..x.len())
            .map(|e| {
                let ch = (e / rest) % c;
                (x[e] - rm0[ch]) / (rv0[ch] + 1e-5).sqrt() * w[ch] + b[ch]
            })
            .collect();
        assert_close(&eval[0].to_f64_vec(), &want, 1e-12);
        assert_eq!(eval[1].to_f64_vec(), rm0, "eval leaves the running mean");
        assert_eq!(
            eval[2].to_f64_vec(),
            rv0,
            "eval leaves the running variance"
        );
        // Gradients of the train-mode output (batch statistics included).
        let bn2 = bn.clone();
        check_grad(&shapes[..3], 21, move |tr, t| {
            let ps: Params<Tensor> = [
                ("bias".into(), t[1].clone()),
                ("weight".into(), t[2].clone()),
            ]
            .into();
            let mut st: Params<Tensor> = [
                ("running_mean".into(), tr.fill(0.0, &[c], DType::F64)),
                ("running_var".into(), tr.fill(1.0, &[c], DType::F64)),
            ]
            .into();
            let cx = Ctx::train(Key::new(&tr.scalar(0.0, DType::I32)).unwrap());
            bn2.forward(&cx, &ps, &mut st, "", &t[0])
        });
    }
    // Padded rows would enter the statistics: refused by name.
    let bn = BatchNorm::d1(2);
    let err = run_keyed(
        &[vec![4, 2], vec![2], vec![2]],
        &[vec![0.0; 8], vec![0.0; 2], vec![1.0; 2]],
        0,
        |t, k| {
            let ps: Params<Tensor> = [
                ("bn.bias".into(), t[1].clone()),
                ("bn.weight".into(), t[2].clone()),
            ]
            .into();
            let mut st: Params<Tensor> = [
                ("bn.running_mean".into(), t[1].clone()),
                ("bn.running_var".into(), t[2].clone()),
            ]
            .into();
            let cx = Ctx::train(Key::new(k).unwrap()).with_padded_rows(true);
            vec![bn.forward(&cx, &ps, &mut st, "bn", &t[0])]
        },
    )
    .expect_err("batch statistics over padded rows are refused");
    assert!(
        err.to_string().contains("BatchNorm at `bn`")
            && err.to_string().contains("ShortBatch::Drop"),
        "{err}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// The step key is a pure function of (seed, step) and does not repeat
    /// over a run's first thousand steps.
    #[test]
    fn step_keys_are_pure_and_distinct(seed in any::<u64>()) {
        let keys: Vec<i32> = (0..1000).map(|s| step_key(seed, s)).collect();
        let again: Vec<i32> = (0..1000).map(|s| step_key(seed, s)).collect();
        prop_assert_eq!(&keys, &again);
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        sorted.dedup();
        prop_assert_eq!(sorted.len(), keys.len());
    }

    /// Sub-keys of distinct children differ, and differ from the parent.
    #[test]
    fn folded_keys_differ(key in any::<i32>(), a in 0u64..64, b in 0u64..64) {
        prop_assume!(a != b);
        let out = run_keyed(&[], &[], key, |_, k| {
            let key = Key::new(k).unwrap();
            [key.fold_in(a), key.fold_in(b)].iter().map(|k| k.tensor().cast(DType::F64)).collect()
        }).unwrap();
        prop_assert_ne!(out[0].to_f64_vec(), out[1].to_f64_vec());
    }
}
