//! Composite ops and layers: forward against references written here (naive
//! loops or closed forms), gradients against finite differences in f64.
#![allow(clippy::cloned_ref_to_slice_refs, clippy::needless_range_loop)] // `&[shape.clone()]` reads better in tests

mod common;

use common::{assert_close, check_grad, run, values};
use nitro_graph::nn::conv::{avg_pool2d, conv2d, max_pool2d};
use nitro_graph::nn::loss::{mse, softmax_cross_entropy, weighted_softmax_cross_entropy};
use nitro_graph::nn::ops::{argmax, gelu, log_softmax, logsumexp, one_hot, relu, softmax, var};
use nitro_graph::DType;
use proptest::prelude::*;

fn labels_literal(tr: &nitro_graph::Tracer, labels: &[i32]) -> nitro_graph::Tensor {
    tr.literal(
        &labels.iter().map(|&l| l as f64).collect::<Vec<_>>(),
        &[labels.len()],
        DType::I32,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, ..ProptestConfig::default() })]

    #[test]
    fn softmax_family(rows in 1usize..4, cols in 1usize..6, seed in 0u64..1000) {
        let x: Vec<f64> = values(rows * cols, seed).iter().map(|v| v * 5.0).collect();
        let shape = vec![rows, cols];
        let mut sm = vec![0.0; rows * cols];
        let mut lse = vec![0.0; rows];
        for r in 0..rows {
            let row = &x[r * cols..(r + 1) * cols];
            let s: f64 = row.iter().map(|v| v.exp()).sum();
            lse[r] = s.ln();
            for c in 0..cols {
                sm[r * cols + c] = row[c].exp() / s;
            }
        }
        let data = [x.clone()];
        assert_close(&run(&[shape.clone()], &data, |_, t| softmax(&t[0], 1)).to_f64_vec(), &sm, 1e-12);
        assert_close(&run(&[shape.clone()], &data, |_, t| logsumexp(&t[0], 1)).to_f64_vec(), &lse, 1e-12);
        let lsm: Vec<f64> = sm.iter().map(|v| v.ln()).collect();
        assert_close(&run(&[shape.clone()], &data, |_, t| log_softmax(&t[0], 1)).to_f64_vec(), &lsm, 1e-10);
        check_grad(&[shape.clone()], seed, |_, t| softmax(&t[0], 1));
        check_grad(&[shape.clone()], seed, |_, t| logsumexp(&t[0], 1));
    }

    #[test]
    fn activations_and_moments(n in 1usize..10, seed in 0u64..1000) {
        let x: Vec<f64> = values(n, seed).iter().map(|v| v * 3.0).collect();
        let relu_ref: Vec<f64> = x.iter().map(|&v| v.max(0.0)).collect();
        assert_close(&run(&[vec![n]], &[x.clone()], |_, t| relu(&t[0])).to_f64_vec(), &relu_ref, 0.0);
        let c = (2.0 / std::f64::consts::PI).sqrt();
        let gelu_ref: Vec<f64> = x.iter().map(|&v| 0.5 * v * (1.0 + (c * (v + 0.044715 * v.powi(3))).tanh())).collect();
        assert_close(&run(&[vec![n]], &[x.clone()], |_, t| gelu(&t[0])).to_f64_vec(), &gelu_ref, 1e-12);
        let mean = x.iter().sum::<f64>() / n as f64;
        let v = x.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / n as f64;
        assert_close(&run(&[vec![n]], &[x.clone()], |_, t| var(&t[0], &[0])).to_f64_vec(), &[v], 1e-12);
        check_grad(&[vec![n]], seed, |_, t| gelu(&t[0]));
        check_grad(&[vec![n]], seed, |_, t| var(&t[0], &[0]));
    }

    #[test]
    fn cross_entropy_and_mse(rows in 1usize..5, cols in 2usize..5, seed in 0u64..1000, smoothing in 0.0f64..0.3) {
        let x = values(rows * cols, seed);
        let labels: Vec<i32> = (0..rows).map(|r| ((seed as usize + r) % cols) as i32).collect();
        let mut want = 0.0;
        for r in 0..rows {
            let row = &x[r * cols..(r + 1) * cols];
            let lse = row.iter().map(|v| v.exp()).sum::<f64>().ln();
            for c in 0..cols {
                let target = (1.0 - smoothing) * ((c as i32 == labels[r]) as u8 as f64) + smoothing / cols as f64;
                want -= target * (row[c] - lse);
            }
        }
        want /= rows as f64;
        let l2 = labels.clone();
        let got = run(&[vec![rows, cols]], &[x.clone()], move |tr, t| softmax_cross_entropy(&t[0], &labels_literal(tr, &l2), smoothing));
        assert_close(&got.to_f64_vec(), &[want], 1e-12);
        let l3 = labels.clone();
        check_grad(&[vec![rows, cols]], seed, move |tr, t| softmax_cross_entropy(&t[0], &labels_literal(tr, &l3), smoothing));
        // A zero weight removes a sample exactly: weighted CE over [x; junk] with mask [1..1, 0] equals CE over x.
        let mut padded = x.clone();
        padded.extend(vec![7.0; cols]);
        let mut lp = labels.clone();
        lp.push(0);
        let weights: Vec<f64> = (0..=rows).map(|r| (r < rows) as u8 as f64).collect();
        let got_w = run(&[vec![rows + 1, cols]], &[padded], move |tr, t| {
            let w = tr.literal(&weights, &[rows + 1], DType::F64);
            weighted_softmax_cross_entropy(&t[0], &labels_literal(tr, &lp), &w)
        });
        let l4 = labels.clone();
        let plain = run(&[vec![rows, cols]], &[x.clone()], move |tr, t| softmax_cross_entropy(&t[0], &labels_literal(tr, &l4), 0.0));
        assert_close(&got_w.to_f64_vec(), &plain.to_f64_vec(), 1e-12);
        let y = values(rows * cols, seed + 5);
        let mse_ref = x.iter().zip(&y).map(|(a, b)| (a - b).powi(2)).sum::<f64>() / (rows * cols) as f64;
        let got_mse = run(&[vec![rows, cols], vec![rows, cols]], &[x.clone(), y], |_, t| mse(&t[0], &t[1]));
        assert_close(&got_mse.to_f64_vec(), &[mse_ref], 1e-12);
    }

    #[test]
    fn conv2d_matches_naive_loops(n in 1usize..3, c in 1usize..3, o in 1usize..3, hw in 3usize..6, k in 1usize..4,
                                  stride in 1usize..3, pad in 0usize..2, seed in 0u64..1000) {
        prop_assume!(hw + 2 * pad >= k);
        let (xs, ws) = (vec![n, c, hw, hw], vec![o, c, k, k]);
        let (x, w, b) = (values(n * c * hw * hw, seed), values(o * c * k * k, seed + 1), values(o, seed + 2));
        let oh = (hw + 2 * pad - k) / stride + 1;
        let mut want = vec![0.0; n * o * oh * oh];
        for ni in 0..n { for oi in 0..o { for y in 0..oh { for xo in 0..oh {
            let mut s = b[oi];
            for ci in 0..c { for i in 0..k { for j in 0..k {
                let (yy, xx) = ((y * stride + i) as isize - pad as isize, (xo * stride + j) as isize - pad as isize);
                if yy >= 0 && xx >= 0 && (yy as usize) < hw && (xx as usize) < hw {
                    s += x[((ni * c + ci) * hw + yy as usize) * hw + xx as usize] * w[((oi * c + ci) * k + i) * k + j];
                }
            }}}
            want[((ni * o + oi) * oh + y) * oh + xo] = s;
        }}}}
        let got = run(&[xs.clone(), ws.clone(), vec![o]], &[x, w, b], |_, t| conv2d(&t[0], &t[1], Some(&t[2]), stride, pad));
        assert_close(&got.to_f64_vec(), &want, 1e-12);
        check_grad(&[xs, ws, vec![o]], seed, |_, t| conv2d(&t[0], &t[1], Some(&t[2]), stride, pad));
    }

    #[test]
    fn pooling(hw in 2usize..7, k in 1usize..4, stride in 1usize..4, seed in 0u64..1000) {
        prop_assume!(hw >= k);
        let shape = vec![1, 2, hw, hw];
        let x = values(2 * hw * hw, seed);
        let oh = (hw - k) / stride + 1;
        let mut mx = vec![f64::NEG_INFINITY; 2 * oh * oh];
        let mut avg = vec![0.0; 2 * oh * oh];
        for ch in 0..2 { for y in 0..oh { for xo in 0..oh { for i in 0..k { for j in 0..k {
            let v = x[(ch * hw + y * stride + i) * hw + xo * stride + j];
            let o = (ch * oh + y) * oh + xo;
            mx[o] = mx[o].max(v);
            avg[o] += v / (k * k) as f64;
        }}}}}
        assert_close(&run(&[shape.clone()], &[x.clone()], |_, t| max_pool2d(&t[0], k, stride)).to_f64_vec(), &mx, 0.0);
        assert_close(&run(&[shape.clone()], &[x.clone()], |_, t| avg_pool2d(&t[0], k, stride)).to_f64_vec(), &avg, 1e-12);
        check_grad(&[shape.clone()], seed, |_, t| max_pool2d(&t[0], k, stride));
        check_grad(&[shape], seed, |_, t| avg_pool2d(&t[0], k, stride));
    }
}

/// Naive f64 convolution of f32 data (stride 1, zero padding), `[n, o, oh, ow]`.
#[allow(clippy::too_many_arguments)]
fn naive_conv(
    x: &[f32],
    w: &[f32],
    n: usize,
    c: usize,
    h: usize,
    wd: usize,
    o: usize,
    k: usize,
    pad: usize,
) -> Vec<f64> {
    let (oh, ow) = (h + 2 * pad - k + 1, wd + 2 * pad - k + 1);
    let mut out = vec![0.0; n * o * oh * ow];
    for ni in 0..n {
        for oi in 0..o {
            for y in 0..oh {
                for xo in 0..ow {
                    let mut s = 0.0f64;
                    for ci in 0..c {
                        for i in 0..k {
                            for j in 0..k {
                                let (yy, xx) = (
                                    (y + i) as isize - pad as isize,
                                    (xo + j) as isize - pad as isize,
                                );
                                if yy >= 0 && xx >= 0 && (yy as usize) < h && (xx as usize) < wd {
                                    s += x[((ni * c + ci) * h + yy as usize) * wd + xx as usize]
                                        as f64
                                        * w[((oi * c + ci) * k + i) * k + j] as f64;
                                }
                            }
                        }
                    }
                    out[((ni * o + oi) * oh + y) * ow + xo] = s;
                }
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// An f32 stride-1 convolution in a forward pass runs as one direct
    /// kernel (no patch matrix) and equals the naive loops: output
    /// channels across several six-channel blocks, images wider than a
    /// 16-pixel tile and narrower than one, padding, 1x1 to 5x5 windows.
    #[test]
    fn direct_f32_conv2d_matches_naive_loops(n in 1usize..4, c in 1usize..4, o in 1usize..15, h in 1usize..9,
                                             wd in 1usize..40, k in 1usize..6, pad in 0usize..3, seed in 0u64..1000) {
        prop_assume!(h + 2 * pad >= k && wd + 2 * pad >= k);
        let (xs, ws) = (vec![n, c, h, wd], vec![o, c, k, k]);
        let x: Vec<f32> = values(n * c * h * wd, seed).iter().map(|&v| v as f32).collect();
        let w: Vec<f32> = values(o * c * k * k, seed + 1).iter().map(|&v| v as f32).collect();
        let program = nitro_graph::compile(
            &[("x", nitro_graph::TensorSpec::f32(&xs)), ("w", nitro_graph::TensorSpec::f32(&ws))],
            nitro_graph::CompileOptions::named("conv"),
            |_, t| Ok(vec![("y".into(), conv2d(&t[0], &t[1], None, 1, pad))]),
        ).unwrap();
        let listing = program.listing();
        prop_assert!(listing.contains("conv ->") && !listing.contains("im2col ->"), "{listing}");
        let mut args = [nitro_graph::Array::new(&xs, x.clone()).unwrap(), nitro_graph::Array::new(&ws, w.clone()).unwrap()];
        let got = program.run(&mut args).unwrap().remove(0).to_f64_vec();
        let want = naive_conv(&x, &w, n, c, h, wd, o, k, pad);
        // f32 sums of c*k*k products of values in [-1, 1).
        let tol = 1e-6 * (c * k * k) as f64;
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            prop_assert!((g - w).abs() <= tol, "[{i}] {g} vs {w}\n{listing}");
        }
    }
}

/// Windows that tile the image (2x2 and 3x3, the pooling reductions'
/// unrolled paths) equal the naive maximum and mean of each window.
#[test]
fn tiling_pools_equal_the_naive_windows() {
    for (k, h, w) in [(2, 4, 6), (3, 6, 9), (3, 3, 3), (2, 2, 2)] {
        let x = values(3 * h * w, k as u64);
        let (oh, ow) = (h / k, w / k);
        let (mut mx, mut avg) = (vec![f64::NEG_INFINITY; 3 * oh * ow], vec![0.0; 3 * oh * ow]);
        for ch in 0..3 {
            for y in 0..oh {
                for xo in 0..ow {
                    for i in 0..k {
                        for j in 0..k {
                            let v = x[(ch * h + y * k + i) * w + xo * k + j];
                            let o = (ch * oh + y) * ow + xo;
                            mx[o] = mx[o].max(v);
                            avg[o] += v / (k * k) as f64;
                        }
                    }
                }
            }
        }
        let shape = vec![1, 3, h, w];
        assert_close(
            &run(&[shape.clone()], &[x.clone()], |_, t| {
                max_pool2d(&t[0], k, k)
            })
            .to_f64_vec(),
            &mx,
            0.0,
        );
        assert_close(
            &run(&[shape], &[x], |_, t| avg_pool2d(&t[0], k, k)).to_f64_vec(),
            &avg,
            1e-12,
        );
    }
}

#[test]
fn argmax_and_one_hot() {
    let x = vec![0.1, 0.9, 0.9, -1.0, 5.0, 2.0];
    let am = run(&[vec![2, 3]], &[x], |_, t| argmax(&t[0]).cast(DType::F64)).to_f64_vec();
    assert_eq!(am, vec![1.0, 1.0], "first index wins ties");
    let oh = run(&[vec![1]], &[vec![0.0]], |tr, _| {
        let labels = tr.literal(&[2.0, 0.0], &[2], DType::I32);
        one_hot(&labels, 3, DType::F64)
    })
    .to_f64_vec();
    assert_eq!(oh, vec![0.0, 0.0, 1.0, 1.0, 0.0, 0.0]);
}

#[test]
fn dropout_is_keyed_unbiased_and_differentiable() {
    use nitro_graph::nn::ops::dropout;
    let n = 20_000;
    let ones = vec![1.0; n];
    let draw = |key: i32| {
        run(&[vec![n]], &[ones.clone()], move |tr, t| {
            dropout(&t[0], &tr.scalar(key as f64, DType::I32), 0.25, true)
        })
        .to_f64_vec()
    };
    let (a, b, c) = (draw(3), draw(3), draw(4));
    assert_eq!(a, b, "same key, same mask");
    assert_ne!(a, c, "new key, new mask");
    let zeros = a.iter().filter(|&&v| v == 0.0).count() as f64 / n as f64;
    let mean = a.iter().sum::<f64>() / n as f64;
    assert!((zeros - 0.25).abs() < 0.02, "dropped fraction {zeros}");
    assert!(
        (mean - 1.0).abs() < 0.03,
        "inverted dropout keeps the mean: {mean}"
    );
    assert!(a
        .iter()
        .all(|&v| v == 0.0 || (v - 1.0 / 0.75).abs() < 1e-12));
    let eval = run(&[vec![n]], &[ones.clone()], |tr, t| {
        dropout(&t[0], &tr.scalar(3.0, DType::I32), 0.25, false)
    });
    assert_eq!(eval.to_f64_vec(), ones);
    check_grad(&[vec![6]], 1, |tr, t| {
        dropout(&t[0], &tr.scalar(9.0, DType::I32), 0.5, true)
    });
}

#[test]
fn layer_norm_and_embedding() {
    use nitro_graph::nn::layers::{Embedding, Layer, LayerNorm, Params};
    let ln = LayerNorm { dim: 4, eps: 1e-5 };
    let x = values(12, 5);
    let got = run(
        &[vec![3, 4], vec![4], vec![4]],
        &[
            x.clone(),
            vec![1.0, 2.0, 0.5, 1.0],
            vec![0.0, 0.1, 0.0, -0.1],
        ],
        |_, t| {
            let p: Params<nitro_graph::Tensor> = [
                ("scale".to_string(), t[1].clone()),
                ("shift".to_string(), t[2].clone()),
            ]
            .into();
            ln.apply(&p, "", &t[0])
        },
    );
    let (scale, shift) = ([1.0, 2.0, 0.5, 1.0], [0.0, 0.1, 0.0, -0.1]);
    let mut want = vec![];
    for r in 0..3 {
        let row = &x[r * 4..(r + 1) * 4];
        let mu = row.iter().sum::<f64>() / 4.0;
        let var = row.iter().map(|v| (v - mu).powi(2)).sum::<f64>() / 4.0;
        want.extend((0..4).map(|c| (row[c] - mu) / (var + 1e-5).sqrt() * scale[c] + shift[c]));
    }
    assert_close(&got.to_f64_vec(), &want, 1e-10);
    let ln2 = ln.clone();
    check_grad(&[vec![3, 4], vec![4], vec![4]], 2, move |_, t| {
        let p: Params<nitro_graph::Tensor> = [
            ("scale".to_string(), t[1].clone()),
            ("shift".to_string(), t[2].clone()),
        ]
        .into();
        ln2.apply(&p, "", &t[0])
    });
    let emb = Embedding { vocab: 5, dim: 3 };
    check_grad(&[vec![5, 3]], 3, move |tr, t| {
        let p: Params<nitro_graph::Tensor> = [("table".to_string(), t[0].clone())].into();
        emb.apply(
            &p,
            "",
            &tr.literal(&[4.0, 0.0, 4.0, 2.0], &[2, 2], DType::I32),
        )
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, ..ProptestConfig::default() })]

    #[test]
    fn log_softmax_mse_softplus_gradients(rows in 1usize..4, cols in 1usize..5, seed in 0u64..1000) {
        use nitro_graph::nn::ops::softplus;
        let shape = vec![rows, cols];
        check_grad(&[shape.clone()], seed, |_, t| log_softmax(&t[0], 1));
        check_grad(&[shape.clone(), shape.clone()], seed, |_, t| mse(&t[0], &t[1]));
        let x: Vec<f64> = values(rows * cols, seed).iter().map(|v| v * 6.0).collect();
        let want: Vec<f64> = x.iter().map(|v| (1.0 + v.exp()).ln()).collect();
        assert_close(&run(&[shape.clone()], &[x], |_, t| softplus(&t[0])).to_f64_vec(), &want, 1e-12);
        check_grad(&[shape], seed, |_, t| softplus(&t[0]));
    }

    #[test]
    fn dense_layer_matches_reference(n in 1usize..4, i in 1usize..5, o in 1usize..5, seed in 0u64..1000) {
        use nitro_graph::nn::layers::{Activation, Dense, Layer, Params};
        let (x, w, b) = (values(n * i, seed), values(i * o, seed + 1), values(o, seed + 2));
        let layer = Dense::new(i, o).with(Activation::Tanh);
        let l2 = layer.clone();
        let got = run(&[vec![n, i], vec![i, o], vec![o]], &[x.clone(), w.clone(), b.clone()], move |_, t| {
            let p: Params<nitro_graph::Tensor> = [("weight".to_string(), t[1].clone()), ("bias".to_string(), t[2].clone())].into();
            l2.apply(&p, "", &t[0])
        });
        let want: Vec<f64> = (0..n * o).map(|e| {
            let (r, c) = (e / o, e % o);
            ((0..i).map(|k| x[r * i + k] * w[k * o + c]).sum::<f64>() + b[c]).tanh()
        }).collect();
        assert_close(&got.to_f64_vec(), &want, 1e-12);
        check_grad(&[vec![n, i], vec![i, o], vec![o]], seed, move |_, t| {
            let p: Params<nitro_graph::Tensor> = [("weight".to_string(), t[1].clone()), ("bias".to_string(), t[2].clone())].into();
            layer.apply(&p, "", &t[0])
        });
    }
}

#[test]
fn dropout_with_a_traced_key_input() {
    use nitro_graph::nn::ops::dropout;
    use nitro_graph::{compile, Array, CompileOptions, TensorSpec};
    // The key is a program input, fed anew each step: no recompile per step.
    let program = compile(
        &[
            ("x", TensorSpec::f32(&[1000])),
            ("key", TensorSpec::new(DType::I32, &[])),
        ],
        CompileOptions::named("dropout"),
        |_, t| Ok(vec![("y".into(), dropout(&t[0], &t[1], 0.5, true))]),
    )
    .unwrap();
    let x = Array::new(&[1000], vec![1.0f32; 1000]).unwrap();
    let draw = |key: i32| {
        program
            .run(&mut [x.clone(), Array::scalar_i32(key)])
            .unwrap()
            .remove(0)
            .to_f64_vec()
    };
    let (a, b, c) = (draw(1), draw(1), draw(2));
    assert_eq!(a, b);
    assert_ne!(a, c);
    let kept = a.iter().filter(|&&v| v != 0.0).count();
    assert!((400..600).contains(&kept), "{kept}");
}

/// `stop_gradient` passes the value and blocks the adjoint: the gradient of
/// Σ x · sg(x) is x (the product rule's other half is cut), not 2x; of
/// Σ sg(x)² nothing flows (zeros). Integers pass through unrecorded, and the
/// compiled program keeps no trace of it.
#[test]
fn stop_gradient_passes_the_value_and_blocks_the_gradient() {
    use nitro_graph::{compile, Array, CompileOptions, TensorSpec};
    let x = [1.5f64, -2.0, 0.25, 3.0];
    let p = compile(
        &[
            ("x", TensorSpec::new(DType::F64, &[4])),
            ("i", TensorSpec::new(DType::I32, &[2])),
        ],
        CompileOptions::named("sg"),
        |tr, t| {
            let cut = t[0].stop_gradient();
            let half = (&t[0] * &cut).sum_all();
            let none = (&cut * &cut).sum_all() + t[0].sum_all() * 0.0;
            let g_half = tr.grad(&half, &[&t[0]])?.remove(0);
            let g_none = tr.grad(&none, &[&t[0]])?.remove(0);
            let ints = t[1].stop_gradient();
            Ok(vec![
                ("half".into(), half),
                ("g_half".into(), g_half),
                ("g_none".into(), g_none),
                ("ints".into(), ints),
            ])
        },
    )
    .unwrap();
    assert!(!p.listing().contains("stopgradient"), "{}", p.listing());
    let out = p
        .run(&mut [
            Array::from_vec(&[4], x.to_vec()).unwrap(),
            Array::from_vec(&[2], vec![7i32, -3]).unwrap(),
        ])
        .unwrap();
    let sum_sq: f64 = x.iter().map(|v| v * v).sum();
    assert_eq!(out[0].as_slice::<f64>().unwrap(), &[sum_sq]);
    assert_eq!(out[1].as_slice::<f64>().unwrap(), &x);
    assert_eq!(out[2].as_slice::<f64>().unwrap(), &[0.0; 4]);
    assert_eq!(out[3].as_slice::<i32>().unwrap(), &[7, -3]);
}
