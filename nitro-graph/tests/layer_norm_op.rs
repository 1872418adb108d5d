//! The layer-norm primitive (`Tensor::layer_norm`, `Op::LayerNorm`) and
//! its input gradient against references written here: the textbook
//! formula by naive loops in f64, gradients of the input, scale and shift
//! against central finite differences, the f32 kernel against the f64
//! formula, and the refused second derivative. Rows from 1 element to
//! several vector widths (37, ragged against 16 lanes), over many tasks.

mod common;

use common::{assert_close, check_grad, run, values};
use nitro_graph::{compile, Array, CompileOptions, DType, TensorSpec};

/// Layer norm over the last axis (`n`) by the textbook formula, in f64.
fn reference(x: &[f64], scale: &[f64], shift: &[f64], n: usize, eps: f64) -> Vec<f64> {
    x.chunks(n)
        .flat_map(|row| {
            let mean = row.iter().sum::<f64>() / n as f64;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
            let sd = (var + eps).sqrt();
            row.iter()
                .enumerate()
                .map(move |(j, v)| (v - mean) / sd * scale[j] + shift[j])
                .collect::<Vec<_>>()
        })
        .collect()
}

const SHAPES: [&[usize]; 4] = [&[2, 3, 5], &[4, 1], &[3, 37], &[600, 64]];

#[test]
fn the_primitive_is_the_formula_in_f64() {
    for (i, shape) in SHAPES.iter().enumerate() {
        let n = *shape.last().unwrap();
        let numel: usize = shape.iter().product();
        let (x, scale, shift) = (
            values(numel, i as u64),
            values(n, 50 + i as u64),
            values(n, 90),
        );
        let y = run(
            &[shape.to_vec(), vec![n], vec![n]],
            &[x.clone(), scale.clone(), shift.clone()],
            |_, a| a[0].layer_norm(&a[1], &a[2], 1e-5),
        );
        assert_close(
            &y.to_f64_vec(),
            &reference(&x, &scale, &shift, n, 1e-5),
            1e-12,
        );
    }
}

#[test]
fn gradients_of_input_scale_and_shift_match_finite_differences() {
    for shape in &SHAPES[..3] {
        let n = *shape.last().unwrap();
        check_grad(&[shape.to_vec(), vec![n], vec![n]], 11, |_, a| {
            a[0].layer_norm(&a[1], &a[2], 1e-5)
        });
    }
}

#[test]
fn the_f32_kernel_is_the_f64_formula_to_f32_precision() {
    let (rows, n) = (600, 64);
    let x: Vec<f32> = values(rows * n, 3)
        .iter()
        .map(|&v| (3.0 * v + 1.0) as f32)
        .collect();
    let scale: Vec<f32> = values(n, 4).iter().map(|&v| v as f32).collect();
    let shift: Vec<f32> = values(n, 5).iter().map(|&v| v as f32).collect();
    let specs = [
        ("x", TensorSpec::new(DType::F32, &[rows, n])),
        ("scale", TensorSpec::new(DType::F32, &[n])),
        ("shift", TensorSpec::new(DType::F32, &[n])),
    ];
    let program = compile(&specs, CompileOptions::named("f32"), |_, a| {
        Ok(vec![("y".into(), a[0].layer_norm(&a[1], &a[2], 1e-5))])
    })
    .unwrap();
    let mut args = [
        Array::new(&[rows, n], x.clone()).unwrap(),
        Array::new(&[n], scale.clone()).unwrap(),
        Array::new(&[n], shift.clone()).unwrap(),
    ];
    let y = program.run(&mut args).unwrap();
    let wide = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
    let exact = reference(&wide(&x), &wide(&scale), &wide(&shift), n, 1e-5);
    assert_close(&y[0].to_f64_vec(), &exact, 2e-6);
}

#[test]
fn the_gradient_is_refused_as_a_second_derivative() {
    let specs = [("x", TensorSpec::new(DType::F64, &[2, 3]))];
    let Err(err) = compile(&specs, CompileOptions::named("second"), |tr, a| {
        let (s, dy) = (
            tr.literal(&[1.0; 3], &[3], DType::F64),
            tr.literal(&[1.0; 6], &[2, 3], DType::F64),
        );
        let g = a[0].layer_norm_grad(&s, &dy, 1e-5).sum_all();
        let gg = tr.grad(&g, &[&a[0]])?;
        Ok(vec![("gg".into(), gg[0].clone())])
    }) else {
        panic!("a second derivative of layer norm must be refused");
    };
    assert!(err.to_string().contains("layer_norm_grad"), "{err}");
}
