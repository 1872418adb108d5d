//! Shared test helpers: run a traced function on concrete f64 inputs, and
//! check its gradients against central finite differences.
#![allow(dead_code)]

pub mod random_graph;

use nitro_graph::nn::init::InitRng;
use nitro_graph::{compile, Array, CompileOptions, DType, Tensor, TensorSpec, Tracer};

/// Random values in [-1, 1) from `seed`.
pub fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut rng = InitRng::new(seed);
    (0..n).map(|_| rng.uniform() * 2.0 - 1.0).collect()
}

fn input_names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("x{i}")).collect()
}

fn f64_specs<'a>(names: &'a [String], shapes: &[Vec<usize>]) -> Vec<(&'a str, TensorSpec)> {
    names
        .iter()
        .zip(shapes)
        .map(|(n, s)| (n.as_str(), TensorSpec::new(DType::F64, s)))
        .collect()
}

/// Run `f` on f64 inputs of `shapes` with `data`; return the first output.
pub fn run(
    shapes: &[Vec<usize>],
    data: &[Vec<f64>],
    f: impl FnOnce(&Tracer, &[Tensor]) -> Tensor,
) -> Array {
    let names = input_names(shapes.len());
    let specs = f64_specs(&names, shapes);
    let program = compile(&specs, CompileOptions::named("test"), |tr, t| {
        Ok(vec![("y".into(), f(tr, t))])
    })
    .unwrap();
    let mut args: Vec<Array> = shapes
        .iter()
        .zip(data)
        .map(|(s, d)| Array::new(s, d.clone()).unwrap())
        .collect();
    program.run(&mut args).unwrap().remove(0)
}

/// Compare the gradient of `sum(f(x) * r)` (r random, fixed) with central
/// finite differences, for every element of every input.
pub fn check_grad(shapes: &[Vec<usize>], seed: u64, f: impl Fn(&Tracer, &[Tensor]) -> Tensor) {
    let names = input_names(shapes.len());
    let specs = f64_specs(&names, shapes);
    let program = compile(&specs, CompileOptions::named("grad_check"), |tr, t| {
        let y = f(tr, t);
        let r = tr.literal(&values(y.numel(), seed ^ 0xABCD), y.shape(), DType::F64);
        let loss = (y * r).sum_all();
        let grads = tr.grad(&loss, &t.iter().collect::<Vec<_>>())?;
        let mut out = vec![("loss".to_string(), loss)];
        out.extend(
            grads
                .into_iter()
                .enumerate()
                .map(|(i, g)| (format!("g{i}"), g)),
        );
        Ok(out)
    })
    .unwrap();
    let data: Vec<Vec<f64>> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| values(s.iter().product(), seed + i as u64))
        .collect();
    let arrays = |d: &[Vec<f64>]| -> Vec<Array> {
        shapes
            .iter()
            .zip(d)
            .map(|(s, v)| Array::new(s, v.clone()).unwrap())
            .collect()
    };
    let out = program.run(&mut arrays(&data)).unwrap();
    let h = 1e-6;
    for i in 0..shapes.len() {
        let analytic = out[1 + i].to_f64_vec();
        for j in 0..data[i].len() {
            let mut plus = data.clone();
            plus[i][j] += h;
            let mut minus = data.clone();
            minus[i][j] -= h;
            let lp = program.run(&mut arrays(&plus)).unwrap()[0].item().unwrap();
            let lm = program.run(&mut arrays(&minus)).unwrap()[0].item().unwrap();
            let fd = (lp - lm) / (2.0 * h);
            assert!(
                (analytic[j] - fd).abs() <= 1e-5 * (1.0 + fd.abs()),
                "input {i} element {j}: autodiff {} vs finite difference {fd}",
                analytic[j]
            );
        }
    }
}

/// Assert two float slices agree elementwise.
pub fn assert_close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "lengths differ");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "element {i}: {g} vs {w}"
        );
    }
}
