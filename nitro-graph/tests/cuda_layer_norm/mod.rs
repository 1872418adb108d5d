//! The layer-normalisation case of the CUDA conformance suite:
//! `Op::LayerNorm` and its input gradient `Op::LayerNormGrad` run on a
//! target and compared with naive loops over the ops' definitions in f64,
//! written here apart from every backend so that each backend answers to
//! the definition on its own (the CPU instantiation checks the CPU
//! backend's kernels the same way). Owns the reference; the harness owns
//! the targets.

use crate::cuda_harness::{compare, data, runner, Target};
use nitro_graph::{trace, Array, CompileOptions, DType, TensorSpec};

/// Layer normalisation of `x` (shape `shape`, rows over the last axis)
/// with `scale` and `shift`, its input gradient for a cotangent `dy`, and
/// the gradients of `sum(y * dy)` with respect to x, scale and shift
/// reached through autodiff (the rule that emits `layer_norm_grad`), run on
/// `target` and compared with [`layer_norm_and_grad`] within `tol`
/// (relative).
pub fn case(test: &str, target: Target, dtype: DType, shape: &[usize], eps: f64, tol: f64) {
    let n = shape[shape.len() - 1];
    let specs = [
        ("x", TensorSpec::new(dtype, shape)),
        ("scale", TensorSpec::new(dtype, &[n])),
        ("shift", TensorSpec::new(dtype, &[n])),
        ("dy", TensorSpec::new(dtype, shape)),
    ];
    let g = trace(&specs, |tr, a| {
        let (x, scale, shift, dy) = (&a[0], &a[1], &a[2], &a[3]);
        let out = x.layer_norm(scale, shift, eps);
        let loss = (out.clone() * dy.clone()).sum_all();
        let through_autodiff = tr.grad(&loss, &[x, scale, shift])?;
        let mut outs = vec![
            ("y".to_string(), out),
            ("dx".to_string(), x.layer_norm_grad(scale, dy, eps)),
        ];
        for (name, grad) in ["autodiff dx", "autodiff dscale", "autodiff dshift"]
            .iter()
            .zip(through_autodiff)
        {
            outs.push((name.to_string(), grad));
        }
        Ok(outs)
    })
    .unwrap();
    let Some(run) = runner(test, target, g, CompileOptions::named(test)) else {
        return;
    };
    let mut args = vec![
        data(shape, 7, dtype),
        data(&[n], 8, dtype),
        data(&[n], 9, dtype),
        data(shape, 10, dtype),
    ];
    let [x, scale, shift, dy] = [0, 1, 2, 3].map(|i| args[i].to_f64_vec());
    let want = layer_norm_and_grad(&x, &scale, &shift, &dy, n, eps);
    let got = run(&mut args);
    let wants = [
        ("y", shape, want.y),
        ("dx", shape, want.dx.clone()),
        ("autodiff dx", shape, want.dx),
        ("autodiff dscale", &[n][..], want.dscale),
        ("autodiff dshift", &[n][..], want.dshift),
    ];
    assert_eq!(got.len(), wants.len(), "{test}");
    for (got, (name, shape, want)) in got.iter().zip(wants) {
        assert_eq!(got.spec(), &TensorSpec::new(dtype, shape), "{test} {name}");
        compare(
            &format!("{test} {name}"),
            got,
            &Array::new(shape, want).unwrap(),
            tol,
        );
    }
}

/// What [`layer_norm_and_grad`] returns, in f64.
pub struct Reference {
    /// The output, shaped like x.
    pub y: Vec<f64>,
    /// The gradient of x for the cotangent `dy`.
    pub dx: Vec<f64>,
    /// The gradient of scale: `Σ_rows dy * xhat`.
    pub dscale: Vec<f64>,
    /// The gradient of shift: `Σ_rows dy`.
    pub dshift: Vec<f64>,
}

/// Layer normalisation over rows of `n` and its gradients for the
/// cotangent `dy`, term by term as the ops define them.
pub fn layer_norm_and_grad(
    x: &[f64],
    scale: &[f64],
    shift: &[f64],
    dy: &[f64],
    n: usize,
    eps: f64,
) -> Reference {
    let mut r = Reference {
        y: vec![0.0; x.len()],
        dx: vec![0.0; x.len()],
        dscale: vec![0.0; n],
        dshift: vec![0.0; n],
    };
    let len = n as f64;
    for (row, (xr, gr)) in x.chunks(n).zip(dy.chunks(n)).enumerate() {
        let mean = xr.iter().sum::<f64>() / len;
        let xc: Vec<f64> = xr.iter().map(|v| v - mean).collect();
        let var = xc.iter().map(|v| v * v).sum::<f64>() / len;
        let sd = (var + eps).sqrt();
        let xhat: Vec<f64> = xc.iter().map(|v| v / sd).collect();
        let g: Vec<f64> = gr.iter().zip(scale).map(|(d, s)| d * s).collect();
        let mg = g.iter().sum::<f64>() / len;
        let mgx = g.iter().zip(&xhat).map(|(g, h)| g * h).sum::<f64>() / len;
        for j in 0..n {
            let at = row * n + j;
            r.y[at] = xc[j] / sd * scale[j] + shift[j];
            r.dx[at] = (g[j] - mg - xhat[j] * mgx) / sd;
            r.dscale[j] += gr[j] * xhat[j];
            r.dshift[j] += gr[j];
        }
    }
    r
}
