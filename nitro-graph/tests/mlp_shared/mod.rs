//! The MLP train step shared by `mlp_train_step.rs` and the CUDA tests
//! (forward, softmax cross-entropy, backward, Adam, params and moments
//! donated) and its deterministic arguments.
#![allow(dead_code)]

use nitro_graph::nn::loss::softmax_cross_entropy;
use nitro_graph::nn::ops::relu;
use nitro_graph::nn::optim::{adam, AdamHyper};
use nitro_graph::{trace, Array, CompileOptions, DType, Graph, Result, TensorSpec};

/// Layer widths of the test MLP.
pub const SIZES: [usize; 4] = [7, 6, 5, 4];
/// Batch size.
pub const BATCH: usize = 5;

/// (name, shape) of every parameter.
pub fn param_names() -> Vec<(String, Vec<usize>)> {
    let mut v = vec![];
    for l in 0..3 {
        v.push((format!("w{l}"), vec![SIZES[l], SIZES[l + 1]]));
        v.push((format!("b{l}"), vec![SIZES[l + 1]]));
    }
    v
}

/// The traced MLP train step and its compile options (donations).
pub fn mlp_train_step(dtype: DType) -> Result<(Graph, CompileOptions)> {
    let params = param_names();
    let mut inputs: Vec<(String, TensorSpec)> = vec![];
    for prefix in ["p", "m", "v"] {
        for (n, s) in &params {
            inputs.push((format!("{prefix}.{n}"), TensorSpec::new(dtype, s)));
        }
    }
    inputs.push(("x".into(), TensorSpec::new(dtype, &[BATCH, SIZES[0]])));
    inputs.push(("y".into(), TensorSpec::new(DType::I32, &[BATCH])));
    for h in ["lr", "b1", "b2", "eps", "t"] {
        inputs.push((h.into(), TensorSpec::new(dtype, &[])));
    }
    let specs: Vec<(&str, TensorSpec)> = inputs
        .iter()
        .map(|(n, s)| (n.as_str(), s.clone()))
        .collect();
    let mut options = CompileOptions::named("mlp_train_step");
    for prefix in ["p", "m", "v"] {
        for (n, _) in &params {
            options = options.donate(&format!("{prefix}.{n}"), &format!("new.{prefix}.{n}"));
        }
    }
    let graph = trace(&specs, |tr, t| {
        let np = params.len();
        let (p, m, v) = (&t[..np], &t[np..2 * np], &t[2 * np..3 * np]);
        let (x, y) = (&t[3 * np], &t[3 * np + 1]);
        let h = &t[3 * np + 2..];
        let mut hidden = x.clone();
        for l in 0..3 {
            let z = hidden.matmul(&p[2 * l]) + p[2 * l + 1].reshape(&[1, SIZES[l + 1]]);
            hidden = if l < 2 { relu(&z) } else { z };
        }
        let loss = softmax_cross_entropy(&hidden, y, 0.0);
        let grads = tr.grad(&loss, &p.iter().collect::<Vec<_>>())?;
        let zero = tr.scalar(0.0, dtype);
        let hyper = AdamHyper {
            lr: &h[0],
            beta1: &h[1],
            beta2: &h[2],
            eps: &h[3],
            weight_decay: &zero,
            step: &h[4],
        };
        let mut out = vec![("loss".to_string(), loss.clone())];
        for (i, (n, _)) in params.iter().enumerate() {
            out.push((format!("grad.{n}"), grads[i].clone()));
        }
        let mut news = (vec![], vec![], vec![]);
        for i in 0..np {
            let (pn, mn, vn) = adam(&p[i], &grads[i], &m[i], &v[i], &hyper);
            news.0.push((format!("new.p.{}", params[i].0), pn));
            news.1.push((format!("new.m.{}", params[i].0), mn));
            news.2.push((format!("new.v.{}", params[i].0), vn));
        }
        out.extend(news.0);
        out.extend(news.1);
        out.extend(news.2);
        Ok(out)
    })?;
    Ok((graph, options))
}

/// Deterministic values in [-scale, scale).
pub fn values(n: usize, seed: u64, scale: f64) -> Vec<f64> {
    let mut rng = nitro_graph::nn::init::InitRng::new(seed);
    (0..n)
        .map(|_| (rng.uniform() * 2.0 - 1.0) * scale)
        .collect()
}

/// Arguments of the MLP train step at step `t`.
pub fn mlp_args(dtype: DType, t: f64) -> Vec<Array> {
    let to = |shape: &[usize], v: &[f64]| Array::new(shape, v.to_vec()).unwrap().cast(dtype);
    let params = param_names();
    let mut args: Vec<Array> = vec![];
    for (i, (_, s)) in params.iter().enumerate() {
        args.push(to(s, &values(s.iter().product(), i as u64, 0.6)));
    }
    for _ in 0..2 {
        for (_, s) in &params {
            args.push(Array::zeros(&TensorSpec::new(dtype, s)));
        }
    }
    args.push(to(&[BATCH, SIZES[0]], &values(BATCH * SIZES[0], 99, 1.0)));
    args.push(Array::new(&[BATCH], vec![0i32, 3, 1, 2, 3]).unwrap());
    for h in [0.01, 0.9, 0.999, 1e-8, t] {
        args.push(to(&[], &[h]));
    }
    args
}
