//! The layers of today's models (exact GELU, Dropout, BatchNorm,
//! attention, transformer blocks, positional embedding, weight tying,
//! Residual / Parallel) against references written here: naive loops and
//! textbook formulas (PyTorch's definitions for BatchNorm), gradients
//! against finite differences in f64, and the context's keys.
#![allow(clippy::needless_range_loop, clippy::cloned_ref_to_slice_refs)] // `&[x.clone()]` reads better in tests

mod common;

use common::{assert_close, check_grad, run, values};
use nitro_graph::nn::attention::{
    MultiHeadAttention, PositionalEmbedding, TiedProjection, TransformerBlock,
};
use nitro_graph::nn::combinators::{Chain, Combine, Parallel, Residual};
use nitro_graph::nn::ctx::{step_key, Ctx, Key, Mode};
use nitro_graph::nn::layers::{init_parts, Dense, Dropout, Embedding, Layer, Params};
use nitro_graph::nn::norm::BatchNorm;
use nitro_graph::nn::ops::{erf, gelu_erf};
use nitro_graph::{compile, Array, CompileOptions, DType, GraphError, Tensor, TensorSpec};
use proptest::prelude::*;

/// erf by the series `2/√π e^(-x²) Σ_n 2ⁿ x^(2n+1) / (1·3·…·(2n+1))`,
/// whose terms all have one sign (no cancellation): exact to ~1e-15 on
/// the |x| <= 6 used here.
fn erf_ref(x: f64) -> f64 {
    let (mut term, mut sum, mut n) = (x, x, 0.0);
    while term.abs() > 1e-18 * sum.abs() {
        n += 1.0;
        term *= 2.0 * x * x / (2.0 * n + 1.0);
        sum += term;
    }
    2.0 / std::f64::consts::PI.sqrt() * (-x * x).exp() * sum
}

fn gelu_ref(x: f64) -> f64 {
    0.5 * x * (1.0 + erf_ref(x / std::f64::consts::SQRT_2))
}

/// Parameter names and shapes of `layer`, in tree order.
fn param_shapes(layer: &dyn Layer) -> Vec<(String, Vec<usize>)> {
    init_parts(layer, 0)
        .unwrap()
        .0
        .iter()
        .map(|(n, a)| (n.clone(), a.shape().to_vec()))
        .collect()
}

fn tree(names: &[(String, Vec<usize>)], t: &[Tensor]) -> Params<Tensor> {
    names
        .iter()
        .zip(t)
        .map(|(n, t)| (n.0.clone(), t.clone()))
        .collect()
}

/// Compiles `f` over f64 inputs of `shapes` plus an i32 key input (last),
/// runs it once on `data` and `key`, returns every output.
fn run_keyed(
    shapes: &[Vec<usize>],
    data: &[Vec<f64>],
    key: i32,
    f: impl FnOnce(&[Tensor], &Tensor) -> Vec<Tensor>,
) -> Result<Vec<Array>, GraphError> {
    let names: Vec<String> = (0..shapes.len()).map(|i| format!("x{i}")).collect();
    let mut specs: Vec<(&str, TensorSpec)> = names
        .iter()
        .zip(shapes)
        .map(|(n, s)| (n.as_str(), TensorSpec::new(DType::F64, s)))
        .collect();
    specs.push(("key", TensorSpec::new(DType::I32, &[])));
    let program = compile(&specs, CompileOptions::named("models"), |_, t| {
        let n = t.len() - 1;
        Ok(f(&t[..n], &t[n])
            .into_iter()
            .enumerate()
            .map(|(i, y)| (format!("y{i}"), y))
            .collect())
    })?;
    let mut args: Vec<Array> = shapes
        .iter()
        .zip(data)
        .map(|(s, d)| Array::new(s, d.clone()).unwrap())
        .collect();
    args.push(Array::scalar_i32(key));
    program.run(&mut args)
}

/// Runs `f` over one f32 vector (the hot path: the fused kernel's f32 loop).
fn run_f32(x: &[f64], f: impl FnOnce(&Tensor) -> Tensor) -> Vec<f64> {
    let spec = TensorSpec::f32(&[x.len()]);
    let program = compile(&[("x", spec)], CompileOptions::named("f32"), |_, t| {
        Ok(vec![("y".into(), f(&t[0]))])
    })
    .unwrap();
    let mut args = vec![Array::new(&[x.len()], x.to_vec()).unwrap().cast(DType::F32)];
    program.run(&mut args).unwrap()[0].to_f64_vec()
}

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

/// Naive multi-head attention over `[b, t, d]` with the fused `[d, 3d]`
/// projection (q | k | v, heads contiguous) and the output projection.
#[allow(clippy::too_many_arguments)]
fn attention_ref(
    x: &[f64],
    (b, t, d, h): (usize, usize, usize, usize),
    p: &Params<Vec<f64>>,
    prefix: &str,
    causal: bool,
    mask: Option<&[bool]>,
) -> Vec<f64> {
    let g = |n: &str| &p[&format!("{prefix}{n}")];
    let dense = |x: &[f64], w: &[f64], bias: &[f64], i: usize, o: usize| -> Vec<f64> {
        let rows = x.len() / i;
        (0..rows * o)
            .map(|e| {
                (0..i)
                    .map(|k| x[(e / o) * i + k] * w[k * o + e % o])
                    .sum::<f64>()
                    + bias[e % o]
            })
            .collect()
    };
    let qkv = dense(x, g("qkv.weight"), g("qkv.bias"), d, 3 * d);
    let hd = d / h;
    let mut y = vec![0.0; b * t * d];
    for bb in 0..b {
        for hh in 0..h {
            for i in 0..t {
                let q = |c: usize| qkv[(bb * t + i) * 3 * d + hh * hd + c];
                let allowed: Vec<bool> = (0..t)
                    .map(|j| (!causal || j <= i) && mask.is_none_or(|m| m[bb * t + j]))
                    .collect();
                let scores: Vec<f64> = (0..t)
                    .map(|j| {
                        (0..hd)
                            .map(|c| q(c) * qkv[(bb * t + j) * 3 * d + d + hh * hd + c])
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let m = (0..t)
                    .filter(|&j| allowed[j])
                    .map(|j| scores[j])
                    .fold(f64::MIN, f64::max);
                let e: Vec<f64> = (0..t)
                    .map(|j| {
                        if allowed[j] {
                            (scores[j] - m).exp()
                        } else {
                            0.0
                        }
                    })
                    .collect();
                let z: f64 = e.iter().sum();
                for c in 0..hd {
                    y[(bb * t + i) * d + hh * hd + c] = (0..t)
                        .map(|j| e[j] / z * qkv[(bb * t + j) * 3 * d + 2 * d + hh * hd + c])
                        .sum();
                }
            }
        }
    }
    dense(&y, g("out.weight"), g("out.bias"), d, d)
}

fn layer_norm_ref(x: &[f64], d: usize, g: &[f64], s: &[f64]) -> Vec<f64> {
    x.chunks(d)
        .flat_map(|row| {
            let mu = row.iter().sum::<f64>() / d as f64;
            let var = row.iter().map(|v| (v - mu).powi(2)).sum::<f64>() / d as f64;
            (0..d).map(move |c| (row[c] - mu) / (var + 1e-5).sqrt() * g[c] + s[c])
        })
        .collect()
}

/// Data for every parameter of `shapes` (seeded by position), as a tree.
fn param_data(shapes: &[(String, Vec<usize>)], seed: u64) -> Params<Vec<f64>> {
    shapes
        .iter()
        .enumerate()
        .map(|(i, (n, s))| (n.clone(), values(s.iter().product(), seed + i as u64)))
        .collect()
}

#[test]
fn attention_matches_the_naive_loops_with_both_masks() {
    let (b, t, d, h) = (2, 4, 6, 3);
    let x = values(b * t * d, 40);
    let mask: Vec<bool> = vec![true, true, true, false, true, true, false, false];
    for causal in [false, true] {
        for with_mask in [false, true] {
            let mut mha = MultiHeadAttention::new(d, h);
            mha.causal = causal;
            let shapes = param_shapes(&mha);
            let p = param_data(&shapes, 50);
            let mut all_shapes = vec![vec![b, t, d], vec![b, t]];
            let mut data = vec![x.clone(), mask.iter().map(|&m| m as u8 as f64).collect()];
            all_shapes.extend(shapes.iter().map(|s| s.1.clone()));
            data.extend(shapes.iter().map(|s| p[&s.0].clone()));
            let got = run(&all_shapes, &data, |_, tt| {
                let m = with_mask.then(|| tt[1].clone());
                mha.attend(
                    &Ctx::eval(),
                    &tree(&shapes, &tt[2..]),
                    "",
                    &tt[0],
                    m.as_ref(),
                )
            });
            let want = attention_ref(
                &x,
                (b, t, d, h),
                &p,
                "",
                causal,
                with_mask.then_some(&mask[..]),
            );
            assert_close(&got.to_f64_vec(), &want, 1e-10);
            let (m2, s2) = (mha.clone(), shapes.clone());
            check_grad(&all_shapes, 60, move |_, tt| {
                let m = with_mask.then(|| tt[1].clone());
                m2.attend(&Ctx::eval(), &tree(&s2, &tt[2..]), "", &tt[0], m.as_ref())
            });
        }
    }
}

/// The gradient of `sum(out[:, i, :] * r)` with respect to every input
/// position, from one compiled program.
fn position_grads(
    layer: &(impl Fn(&Tensor, &Params<Tensor>) -> Tensor + ?Sized),
    shapes: &[(String, Vec<usize>)],
    (b, t, d): (usize, usize, usize),
    i: usize,
) -> Vec<f64> {
    let mut specs = vec![("x".to_string(), TensorSpec::new(DType::F64, &[b, t, d]))];
    specs.extend(
        shapes
            .iter()
            .map(|(n, s)| (n.clone(), TensorSpec::new(DType::F64, s))),
    );
    let refs: Vec<(&str, TensorSpec)> =
        specs.iter().map(|(n, s)| (n.as_str(), s.clone())).collect();
    let program = compile(&refs, CompileOptions::named("causal"), |tr, tt| {
        let y = layer(&tt[0], &tree(shapes, &tt[1..]));
        let r = tr.literal(&values(b * d, 77), &[b, 1, d], DType::F64);
        let loss = (y.narrow(1, i, i + 1) * r).sum_all();
        let g = tr.grad(&loss, &[&tt[0]])?;
        Ok(vec![("g".into(), g[0].clone())])
    })
    .unwrap();
    let mut args = vec![Array::new(&[b, t, d], values(b * t * d, 78)).unwrap()];
    args.extend(
        shapes
            .iter()
            .enumerate()
            .map(|(k, (_, s))| Array::new(s, values(s.iter().product(), 90 + k as u64)).unwrap()),
    );
    program.run(&mut args).unwrap().remove(0).to_f64_vec()
}

#[test]
fn a_later_token_never_changes_an_earlier_output() {
    let (b, t, d) = (2, 5, 8);
    let block = TransformerBlock::new(d, 2).causal();
    let shapes = param_shapes(&block);
    let f = |x: &Tensor, ps: &Params<Tensor>| {
        block.forward(&Ctx::eval(), ps, &mut Params::new(), "", x)
    };
    for i in 0..t {
        let g = position_grads(&f, &shapes, (b, t, d), i);
        for bb in 0..b {
            for j in 0..t {
                let n: f64 = (0..d).map(|c| g[(bb * t + j) * d + c].abs()).sum();
                if j > i {
                    assert_eq!(n, 0.0, "output {i} depends on later token {j}");
                } else if j == i {
                    assert!(n > 0.0, "output {i} depends on its own token");
                }
            }
        }
    }
    // A padded key never changes a real token's output either.
    let mha = MultiHeadAttention::new(d, 2);
    let shapes = param_shapes(&mha);
    let mask = [1.0, 1.0, 1.0, 0.0, 0.0];
    let f = |x: &Tensor, ps: &Params<Tensor>| {
        let m = x
            .tracer()
            .literal(&[mask, mask].concat(), &[b, t], DType::F64);
        mha.attend(&Ctx::eval(), ps, "", x, Some(&m))
    };
    for i in 0..3 {
        let g = position_grads(&f, &shapes, (b, t, d), i);
        for j in 3..t {
            assert!(
                (0..d).all(|c| g[j * d + c] == 0.0),
                "real token {i} sees padded key {j}"
            );
        }
    }
}

#[test]
fn transformer_block_positional_embedding_and_tying_match_references() {
    let (b, t, d, h) = (2, 3, 4, 2);
    let block = TransformerBlock::new(d, h).causal();
    let shapes = param_shapes(&block);
    let names: Vec<&str> = shapes.iter().map(|s| s.0.as_str()).collect();
    assert!(
        names.contains(&"attn.qkv.weight")
            && names.contains(&"fc.weight")
            && names.contains(&"ln2.scale")
    );
    let p = param_data(&shapes, 100);
    let x = values(b * t * d, 99);
    let mut all = vec![vec![b, t, d]];
    all.extend(shapes.iter().map(|s| s.1.clone()));
    let mut data = vec![x.clone()];
    data.extend(shapes.iter().map(|s| p[&s.0].clone()));
    let got = run(&all, &data, |_, tt| {
        block.apply(&tree(&shapes, &tt[1..]), "", &tt[0])
    });
    let ln1 = layer_norm_ref(&x, d, &p["ln1.scale"], &p["ln1.shift"]);
    let a = attention_ref(&ln1, (b, t, d, h), &p, "attn.", true, None);
    let x1: Vec<f64> = x.iter().zip(&a).map(|(u, v)| u + v).collect();
    let ln2 = layer_norm_ref(&x1, d, &p["ln2.scale"], &p["ln2.shift"]);
    let hidden = 4 * d;
    let fc: Vec<f64> = (0..b * t * hidden)
        .map(|e| {
            let (r, c) = (e / hidden, e % hidden);
            gelu_ref(
                (0..d)
                    .map(|k| ln2[r * d + k] * p["fc.weight"][k * hidden + c])
                    .sum::<f64>()
                    + p["fc.bias"][c],
            )
        })
        .collect();
    let want: Vec<f64> = (0..b * t * d)
        .map(|e| {
            let (r, c) = (e / d, e % d);
            x1[e]
                + (0..hidden)
                    .map(|k| fc[r * hidden + k] * p["proj.weight"][k * d + c])
                    .sum::<f64>()
                + p["proj.bias"][c]
        })
        .collect();
    // f64 programs get libm's erf: as exact as the reference.
    assert_close(&got.to_f64_vec(), &want, 1e-10);
    check_grad(&all, 101, |_, tt| {
        block.apply(&tree(&shapes, &tt[1..]), "", &tt[0])
    });

    // Token + position embeddings and a tied output projection.
    let (vocab, context) = (5, 4);
    let model = Chain::new()
        .push(Embedding { vocab, dim: d })
        .push(PositionalEmbedding { context, dim: d })
        .push(TiedProjection {
            embedding: "0".into(),
            vocab,
            dim: d,
        });
    let shapes = param_shapes(&model);
    assert_eq!(
        shapes.iter().map(|s| s.0.as_str()).collect::<Vec<_>>(),
        ["0.table", "1.table"]
    );
    let p = param_data(&shapes, 200);
    let ids = [4usize, 0, 2, 1, 1, 3];
    let got = run(
        &[vec![vocab, d], vec![context, d]],
        &[p["0.table"].clone(), p["1.table"].clone()],
        |tr, tt| {
            let idx = tr.literal(&ids.map(|i| i as f64), &[b, t], DType::I32);
            model.apply(&tree(&shapes, tt), "", &idx)
        },
    );
    let mut want = vec![];
    for (pos, &id) in ids.iter().enumerate() {
        let e: Vec<f64> = (0..d)
            .map(|c| p["0.table"][id * d + c] + p["1.table"][(pos % t) * d + c])
            .collect();
        want.extend(
            (0..vocab).map(|v| (0..d).map(|c| e[c] * p["0.table"][v * d + c]).sum::<f64>()),
        );
    }
    assert_close(&got.to_f64_vec(), &want, 1e-12);
    check_grad(&[vec![vocab, d], vec![context, d]], 201, |tr, tt| {
        let idx = tr.literal(&ids.map(|i| i as f64), &[b, t], DType::I32);
        model.apply(&tree(&shapes, tt), "", &idx)
    });
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
