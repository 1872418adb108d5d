//! Helpers shared by the layer tests (`models.rs`, `attention.rs`):
//! references for erf and GELU, parameter trees by name, and one-shot
//! programs over f64 inputs (with a key) or one f32 vector.
#![allow(dead_code)]

use nitro_graph::nn::layers::{init_parts, Layer, Params};
use nitro_graph::{compile, Array, CompileOptions, DType, GraphError, Tensor, TensorSpec};

/// erf by the series `2/√π e^(-x²) Σ_n 2ⁿ x^(2n+1) / (1·3·…·(2n+1))`,
/// whose terms all have one sign (no cancellation): exact to ~1e-15 on
/// the |x| <= 6 used here.
pub fn erf_ref(x: f64) -> f64 {
    let (mut term, mut sum, mut n) = (x, x, 0.0);
    while term.abs() > 1e-18 * sum.abs() {
        n += 1.0;
        term *= 2.0 * x * x / (2.0 * n + 1.0);
        sum += term;
    }
    2.0 / std::f64::consts::PI.sqrt() * (-x * x).exp() * sum
}

pub fn gelu_ref(x: f64) -> f64 {
    0.5 * x * (1.0 + erf_ref(x / std::f64::consts::SQRT_2))
}

/// Parameter names and shapes of `layer`, in tree order.
pub fn param_shapes(layer: &dyn Layer) -> Vec<(String, Vec<usize>)> {
    init_parts(layer, 0)
        .unwrap()
        .0
        .iter()
        .map(|(n, a)| (n.clone(), a.shape().to_vec()))
        .collect()
}

pub fn tree(names: &[(String, Vec<usize>)], t: &[Tensor]) -> Params<Tensor> {
    names
        .iter()
        .zip(t)
        .map(|(n, t)| (n.0.clone(), t.clone()))
        .collect()
}

/// Compiles `f` over f64 inputs of `shapes` plus an i32 key input (last),
/// runs it once on `data` and `key`, returns every output.
pub fn run_keyed(
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
pub fn run_f32(x: &[f64], f: impl FnOnce(&Tensor) -> Tensor) -> Vec<f64> {
    let spec = TensorSpec::f32(&[x.len()]);
    let program = compile(&[("x", spec)], CompileOptions::named("f32"), |_, t| {
        Ok(vec![("y".into(), f(&t[0]))])
    })
    .unwrap();
    let mut args = vec![Array::new(&[x.len()], x.to_vec()).unwrap().cast(DType::F32)];
    program.run(&mut args).unwrap()[0].to_f64_vec()
}
