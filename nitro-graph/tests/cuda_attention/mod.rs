//! The attention case of the CUDA conformance suite: fused multi-head
//! attention (`Op::Attention`) and its adjoint (`Op::AttentionGrad`) run on
//! a target and compared with naive loops over the ops' definitions in
//! f64, written here apart from every backend so that each backend answers
//! to the definition on its own (the CPU instantiation checks the CPU
//! backend's kernels the same way). Owns the reference; the harness owns
//! the targets.
#![allow(clippy::needless_range_loop)]

use crate::cuda_harness::{compare, data, runner, Target};
use nitro_graph::{trace, Array, CompileOptions, DType, TensorSpec};

/// Attention over `qkv [b, t, 3 d]`, its adjoint for a cotangent `dy`,
/// and the same adjoint reached through autodiff (the rule that emits
/// `attention_grad`), run on `target` and compared with
/// [`attention_and_grad`] within `tol` (relative).
pub fn case(test: &str, target: Target, dtype: DType, dims: Dims, causal: bool, tol: f64) {
    run_case(test, target, dtype, dims, causal, tol, true);
}

/// [`case`] for the forward alone: for long rows, whose adjoint would take
/// minutes under host emulation (one host thread per CUDA thread).
pub fn forward_case(test: &str, target: Target, dtype: DType, dims: Dims, causal: bool, tol: f64) {
    run_case(test, target, dtype, dims, causal, tol, false);
}

fn run_case(
    test: &str,
    target: Target,
    dtype: DType,
    dims: Dims,
    causal: bool,
    tol: f64,
    adjoint: bool,
) {
    let (b, t, d, heads) = dims;
    let (x, y) = ([b, t, 3 * d], [b, t, d]);
    let specs = [
        ("qkv", TensorSpec::new(dtype, &x)),
        ("dy", TensorSpec::new(dtype, &y)),
    ];
    let g = trace(&specs, |tr, a| {
        let out = a[0].attention(heads, causal);
        if !adjoint {
            return Ok(vec![("y".to_string(), out)]);
        }
        let through_autodiff = tr.grad(&(out.clone() * a[1].clone()).sum_all(), &[&a[0]])?;
        Ok(vec![
            ("y".to_string(), out),
            (
                "dqkv".to_string(),
                a[0].attention_grad(&a[1], heads, causal),
            ),
            ("autodiff".to_string(), through_autodiff[0].clone()),
        ])
    })
    .unwrap();
    let Some(run) = runner(test, target, g, CompileOptions::named(test)) else {
        return;
    };
    let mut args = vec![data(&x, 5, dtype), data(&y, 6, dtype)];
    let (want_y, want_dx) =
        attention_and_grad(&args[0].to_f64_vec(), &args[1].to_f64_vec(), dims, causal);
    let got = run(&mut args);
    let wants = [
        (&y[..], want_y),
        (&x[..], want_dx.clone()),
        (&x[..], want_dx),
    ];
    assert_eq!(got.len(), if adjoint { 3 } else { 1 }, "{test}");
    for ((name, got), (shape, want)) in ["y", "dqkv", "autodiff"].iter().zip(&got).zip(wants) {
        assert_eq!(got.spec(), &TensorSpec::new(dtype, shape), "{test} {name}");
        compare(
            &format!("{test} {name}"),
            got,
            &Array::new(shape, want).unwrap(),
            tol,
        );
    }
}

/// `(b, t, d, heads)`: batch, positions, model width, heads.
pub type Dims = (usize, usize, usize, usize);

/// The output `[b, t, d]` of attention over `qkv [b, t, 3 d]` and the
/// gradient `[b, t, 3 d]` of `qkv` for the output's cotangent `dy`.
pub fn attention_and_grad(
    qkv: &[f64],
    dy: &[f64],
    (b, t, d, heads): Dims,
    causal: bool,
) -> (Vec<f64>, Vec<f64>) {
    let hd = d / heads;
    let scale = 1.0 / (hd as f64).sqrt();
    // Element `c` of head `h`'s q (part 0), k (1) or v (2) at position `i`.
    let at = |bi: usize, i: usize, part: usize, h: usize, c: usize| {
        (bi * t + i) * 3 * d + part * d + h * hd + c
    };
    let g = |bi: usize, i: usize, h: usize, c: usize| dy[(bi * t + i) * d + h * hd + c];
    let allowed = |i: usize, j: usize| !causal || j <= i;
    let (mut y, mut dqkv) = (vec![0.0; b * t * d], vec![0.0; b * t * 3 * d]);
    for bi in 0..b {
        for h in 0..heads {
            // p[i][j], exactly 0 where masked.
            let mut p = vec![vec![0.0; t]; t];
            for i in 0..t {
                let s: Vec<f64> = (0..t)
                    .map(|j| {
                        let dot: f64 = (0..hd)
                            .map(|c| qkv[at(bi, i, 0, h, c)] * qkv[at(bi, j, 1, h, c)])
                            .sum();
                        dot * scale
                    })
                    .collect();
                let m = (0..t)
                    .filter(|&j| allowed(i, j))
                    .map(|j| s[j])
                    .fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = (0..t)
                    .filter(|&j| allowed(i, j))
                    .map(|j| (s[j] - m).exp())
                    .sum();
                for j in (0..t).filter(|&j| allowed(i, j)) {
                    p[i][j] = (s[j] - m).exp() / z;
                }
            }
            for i in 0..t {
                for c in 0..hd {
                    y[(bi * t + i) * d + h * hd + c] =
                        (0..t).map(|j| p[i][j] * qkv[at(bi, j, 2, h, c)]).sum();
                }
                let dp: Vec<f64> = (0..t)
                    .map(|j| {
                        (0..hd)
                            .map(|c| g(bi, i, h, c) * qkv[at(bi, j, 2, h, c)])
                            .sum()
                    })
                    .collect();
                let r: f64 = (0..t).map(|j| p[i][j] * dp[j]).sum();
                for j in 0..t {
                    let ds = p[i][j] * (dp[j] - r) * scale;
                    for c in 0..hd {
                        dqkv[at(bi, i, 0, h, c)] += ds * qkv[at(bi, j, 1, h, c)];
                        dqkv[at(bi, j, 1, h, c)] += ds * qkv[at(bi, i, 0, h, c)];
                        dqkv[at(bi, j, 2, h, c)] += p[i][j] * g(bi, i, h, c);
                    }
                }
            }
        }
    }
    (y, dqkv)
}
