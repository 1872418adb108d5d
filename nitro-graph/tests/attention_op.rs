//! The attention primitive (`Tensor::attention`, `Op::Attention`) and its
//! adjoint against references written here: the formula by naive loops in
//! f64, gradients against central finite differences, the f32 kernel
//! against the f64 reference, causality as a bitwise fact, and the
//! primitive against the composite the layer builds when it has a mask
//! (an all-true key mask: the same attention by matmul and softmax).
//! Shapes run from one tile's edge to several tiles (t = 37, head width
//! 40: full 4 x 32 tiles and ragged edges in both directions).
#![allow(clippy::needless_range_loop)]

mod common;

use common::{assert_close, check_grad, run, values};
use nitro_graph::{compile, Array, CompileOptions, DType, TensorSpec};

/// Attention over `qkv [b, t, 3d]` by the textbook formula, in f64.
fn reference(qkv: &[f64], (b, t, d, h): (usize, usize, usize, usize), causal: bool) -> Vec<f64> {
    let hd = d / h;
    let at = |bb: usize, i: usize, part: usize, hh: usize, c: usize| {
        qkv[(bb * t + i) * 3 * d + part * d + hh * hd + c]
    };
    let mut y = vec![0.0; b * t * d];
    for bb in 0..b {
        for hh in 0..h {
            for i in 0..t {
                let keys = if causal { i + 1 } else { t };
                let s: Vec<f64> = (0..keys)
                    .map(|j| {
                        (0..hd)
                            .map(|c| at(bb, i, 0, hh, c) * at(bb, j, 1, hh, c))
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for c in 0..hd {
                    y[(bb * t + i) * d + hh * hd + c] =
                        (0..keys).map(|j| e[j] / z * at(bb, j, 2, hh, c)).sum();
                }
            }
        }
    }
    y
}

const SHAPES: [(usize, usize, usize, usize); 3] = [(2, 5, 6, 2), (1, 1, 4, 1), (2, 37, 80, 2)];

#[test]
fn the_primitive_is_the_formula_in_f64() {
    for (i, &g @ (b, t, d, h)) in SHAPES.iter().enumerate() {
        for causal in [false, true] {
            let x = values(b * t * 3 * d, 10 + i as u64);
            let y = run(&[vec![b, t, 3 * d]], std::slice::from_ref(&x), |_, a| {
                a[0].attention(h, causal)
            });
            assert_close(&y.to_f64_vec(), &reference(&x, g, causal), 1e-12);
        }
    }
}

#[test]
fn gradients_match_finite_differences() {
    for &(b, t, d, h) in &SHAPES[..2] {
        for causal in [false, true] {
            check_grad(&[vec![b, t, 3 * d]], 7, |_, a| a[0].attention(h, causal));
        }
    }
    // Tiles and edges, on a sample of elements (all of them would take
    // 2 x 17760 program runs).
    let (b, t, d, h) = SHAPES[2];
    let x = values(b * t * 3 * d, 3);
    let r = values(b * t * d, 4);
    let spec = [("qkv", TensorSpec::new(DType::F64, &[b, t, 3 * d]))];
    let program = compile(&spec, CompileOptions::named("grad"), |tr, a| {
        let w = tr.literal(&r, &[b, t, d], DType::F64);
        let loss = (a[0].attention(h, true) * w).sum_all();
        let g = tr.grad(&loss, &[&a[0]])?;
        Ok(vec![("loss".into(), loss), ("g".into(), g[0].clone())])
    })
    .unwrap();
    let call = |x: &[f64]| {
        program
            .run(&mut [Array::new(&[b, t, 3 * d], x.to_vec()).unwrap()])
            .unwrap()
    };
    let analytic = call(&x)[1].to_f64_vec();
    for j in (0..x.len()).step_by(97) {
        let (mut plus, mut minus) = (x.clone(), x.clone());
        plus[j] += 1e-6;
        minus[j] -= 1e-6;
        let fd = (call(&plus)[0].item().unwrap() - call(&minus)[0].item().unwrap()) / 2e-6;
        assert!(
            (analytic[j] - fd).abs() <= 1e-6 * (1.0 + fd.abs()),
            "element {j}: {} vs {fd}",
            analytic[j]
        );
    }
}

#[test]
fn the_f32_kernel_is_the_f64_formula_to_f32_precision() {
    let (g @ (b, t, d, h), causal) = (SHAPES[2], true);
    let x = values(b * t * 3 * d, 5);
    let spec = [("qkv", TensorSpec::new(DType::F32, &[b, t, 3 * d]))];
    let program = compile(&spec, CompileOptions::named("f32"), |_, a| {
        Ok(vec![("y".into(), a[0].attention(h, causal))])
    })
    .unwrap();
    let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
    let y = program
        .run(&mut [Array::new(&[b, t, 3 * d], x32.clone()).unwrap()])
        .unwrap();
    let exact = reference(
        &x32.iter().map(|&v| v as f64).collect::<Vec<_>>(),
        g,
        causal,
    );
    assert_close(&y[0].to_f64_vec(), &exact, 2e-6);
}

#[test]
fn a_later_token_never_changes_an_earlier_output() {
    let (b, t, d, h) = SHAPES[2];
    let x = values(b * t * 3 * d, 6);
    let mut moved = x.clone();
    // Every q, k and v column of the last position of each sequence.
    for bb in 0..b {
        for c in 0..3 * d {
            moved[(bb * t + t - 1) * 3 * d + c] += 0.5;
        }
    }
    let f = |x: &[f64]| {
        run(&[vec![b, t, 3 * d]], &[x.to_vec()], |_, a| {
            a[0].attention(h, true)
        })
        .to_f64_vec()
    };
    let (y0, y1) = (f(&x), f(&moved));
    for bb in 0..b {
        for i in 0..t {
            let row = |y: &[f64]| y[(bb * t + i) * d..(bb * t + i + 1) * d].to_vec();
            if i < t - 1 {
                assert_eq!(row(&y0), row(&y1), "position {i} of sequence {bb} moved");
            } else {
                assert_ne!(
                    row(&y0),
                    row(&y1),
                    "the last position must see its own change"
                );
            }
        }
    }
}

#[test]
fn the_adjoint_is_refused_as_a_second_derivative() {
    let spec = [("qkv", TensorSpec::new(DType::F64, &[1, 2, 6]))];
    let Err(err) = compile(&spec, CompileOptions::named("second"), |tr, a| {
        let dy = tr.literal(&[1.0; 4], &[1, 2, 2], DType::F64);
        let g = a[0].attention_grad(&dy, 1, false).sum_all();
        let gg = tr.grad(&g, &[&a[0]])?;
        Ok(vec![("gg".into(), gg[0].clone())])
    }) else {
        panic!("a second derivative of attention must be refused");
    };
    assert!(err.to_string().contains("attention_grad"), "{err}");
}
