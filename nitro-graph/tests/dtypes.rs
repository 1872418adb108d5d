//! The element types beyond f32 and f64: f16 and bf16 storage through
//! casts, integer arithmetic (i32 and i64) against Rust's own, and the
//! mixed-precision matmul (half operands, f32 accumulation) with its
//! gradients. The primitives over floats are in `primitives.rs`.

mod common;

use common::{assert_close, values};
use nitro_graph::DType;

#[test]
fn half_precision_storage_round_trips_through_casts() {
    use nitro_device::{bf16, f16};
    use nitro_graph::{compile, Array, CompileOptions, TensorSpec};
    let x: Vec<f32> = vec![1.0, -2.5, 0.1, 65504.0, 1e-3, 7.25];
    for dtype in [DType::F16, DType::BF16] {
        // Store in the half type, compute in f32, store back in the half type.
        let program = compile(
            &[("h", TensorSpec::new(dtype, &[6]))],
            CompileOptions::named("half"),
            |_, t| {
                let wide = t[0].cast(DType::F32);
                Ok(vec![
                    ("y".into(), (&wide * 2.0).cast(dtype)),
                    ("wide".into(), wide),
                ])
            },
        )
        .unwrap();
        let h = Array::new(&[6], x.clone()).unwrap().cast(dtype);
        let out = program.run(&mut [h.clone()]).unwrap();
        assert_eq!(out[0].dtype(), dtype);
        let rounded: Vec<f64> = match dtype {
            DType::F16 => x
                .iter()
                .map(|&v| f16::from_f32(f16::from_f32(v).to_f32() * 2.0).to_f64())
                .collect(),
            _ => x
                .iter()
                .map(|&v| bf16::from_f32(bf16::from_f32(v).to_f32() * 2.0).to_f64())
                .collect(),
        };
        assert_eq!(out[0].to_f64_vec(), rounded, "{dtype}");
        assert_eq!(
            out[1].to_f64_vec(),
            h.to_f64_vec(),
            "{dtype} widens exactly"
        );
    }
}

#[test]
fn integer_arithmetic_and_i64() {
    let program = nitro_graph::compile(
        &[
            ("a", nitro_graph::TensorSpec::new(DType::I64, &[4])),
            ("b", nitro_graph::TensorSpec::new(DType::I32, &[4])),
        ],
        nitro_graph::CompileOptions::named("ints"),
        |_, t| {
            let b = t[1].cast(DType::I64);
            Ok(vec![
                ("y".into(), (&t[0] * &b - &t[0] / &b).maximum(&t[0].neg())),
                ("s".into(), t[0].sum(&[0])),
            ])
        },
    )
    .unwrap();
    let a = nitro_graph::Array::new(&[4], vec![7i64, -8, 9, 10]).unwrap();
    let b = nitro_graph::Array::new(&[4], vec![2i32, 3, 0, -4]).unwrap();
    let out = program.run(&mut [a, b]).unwrap();
    // 7*2 - 7/2 = 11; -8*3 - (-8/3) = -22 vs 8 -> 8; 9*0 - 9/0(=0) = 0 vs -9 -> 0; 10*-4 - 10/-4 = -38 vs -10 -> -10
    assert_eq!(out[0].to_f64_vec(), vec![11.0, 8.0, 0.0, -10.0]);
    assert_eq!(out[1].to_f64_vec(), vec![18.0]);
}

#[test]
fn mixed_precision_matmul_accumulates_in_f32_and_differentiates() {
    use nitro_device::{bf16, f16};
    use nitro_graph::{compile, Array, CompileOptions, TensorSpec};
    let (m, k, n) = (3, 5, 4);
    let a: Vec<f32> = values(m * k, 1).iter().map(|&v| v as f32 * 3.0).collect();
    let b: Vec<f32> = values(k * n, 2).iter().map(|&v| v as f32 * 3.0).collect();
    let w: Vec<f32> = values(m * n, 3).iter().map(|&v| v as f32).collect();
    for low in [DType::BF16, DType::F16] {
        let round = |v: f32| -> f64 {
            match low {
                DType::BF16 => bf16::from_f32(v).to_f64(),
                _ => f16::from_f32(v).to_f64(),
            }
        };
        let program = compile(
            &[
                ("a", TensorSpec::f32(&[m, k])),
                ("b", TensorSpec::f32(&[k, n])),
                ("w", TensorSpec::f32(&[m, n])),
            ],
            CompileOptions::named("mixed"),
            |tr, t| {
                let y = t[0].cast(low).matmul(&t[1].cast(low));
                let loss = (&y * &t[2]).sum_all();
                let g = tr.grad(&loss, &[&t[0], &t[1]])?;
                Ok(vec![
                    ("y".into(), y),
                    ("ga".into(), g[0].clone()),
                    ("gb".into(), g[1].clone()),
                ])
            },
        )
        .unwrap();
        let out = program
            .run(&mut [
                Array::new(&[m, k], a.clone()).unwrap(),
                Array::new(&[k, n], b.clone()).unwrap(),
                Array::new(&[m, n], w.clone()).unwrap(),
            ])
            .unwrap();
        assert_eq!(out[0].dtype(), DType::F32, "{low} product is f32");
        // By the definition, from the rounded operands, summed in f64.
        let (ar, br): (Vec<f64>, Vec<f64>) = (
            a.iter().map(|&v| round(v)).collect(),
            b.iter().map(|&v| round(v)).collect(),
        );
        let wr: Vec<f64> = w.iter().map(|&v| round(v)).collect();
        let y: Vec<f64> = (0..m * n)
            .map(|ij| {
                (0..k)
                    .map(|p| ar[ij / n * k + p] * br[p * n + ij % n])
                    .sum()
            })
            .collect();
        assert_close(&out[0].to_f64_vec(), &y, 1e-6);
        // dL/da = round(w) @ round(b)^T, dL/db = round(a)^T @ round(w), each
        // stored in the low type (relative error up to its half-ulp).
        let ga: Vec<f64> = (0..m * k)
            .map(|ip| {
                (0..n)
                    .map(|j| wr[ip / k * n + j] * br[ip % k * n + j])
                    .sum()
            })
            .collect();
        let gb: Vec<f64> = (0..k * n)
            .map(|pj| {
                (0..m)
                    .map(|i| ar[i * k + pj / n] * wr[i * n + pj % n])
                    .sum()
            })
            .collect();
        let ulp = if low == DType::BF16 {
            1.0 / 128.0
        } else {
            1.0 / 1024.0
        };
        for (got, want, what) in [(&out[1], &ga, "ga"), (&out[2], &gb, "gb")] {
            assert_eq!(got.dtype(), DType::F32);
            for (g, w) in got.to_f64_vec().iter().zip(want.iter()) {
                assert!(
                    (g - w).abs() <= ulp * w.abs() + 1e-6,
                    "{low} {what}: {g} vs {w}"
                );
            }
        }
    }
}
