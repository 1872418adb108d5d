//! Per-call overhead of a tiny compiled program, and the throughput of a
//! bias + relu fused kernel (used while tuning the CPU backend).
use nitro_graph::nn::ops::relu;
use nitro_graph::{compile, Array, CompileOptions, TensorSpec};
use std::time::Instant;

fn time(program: &nitro_graph::Program, args: &mut [Array], n: usize) -> f64 {
    for _ in 0..n / 10 {
        program.run(args).unwrap();
    }
    let t = Instant::now();
    for _ in 0..n {
        program.run(args).unwrap();
    }
    t.elapsed().as_secs_f64() * 1e6 / n as f64
}

fn main() {
    let tiny = compile(
        &[
            ("x", TensorSpec::f32(&[4, 8])),
            ("w", TensorSpec::f32(&[8, 2])),
            ("b", TensorSpec::f32(&[2])),
        ],
        CompileOptions::named("tiny"),
        |_, t| {
            Ok(vec![(
                "y".into(),
                (t[0].matmul(&t[1]) + t[2].reshape(&[1, 2])).tanh(),
            )])
        },
    )
    .unwrap();
    let mut args = [
        Array::zeros(&TensorSpec::f32(&[4, 8])),
        Array::zeros(&TensorSpec::f32(&[8, 2])),
        Array::zeros(&TensorSpec::f32(&[2])),
    ];
    println!(
        "tiny program: {:.2} us per call, {} kernels",
        time(&tiny, &mut args, 100_000),
        tiny.kernel_count()
    );
    let bias_relu = compile(
        &[
            ("z", TensorSpec::f32(&[256, 512])),
            ("b", TensorSpec::f32(&[512])),
        ],
        CompileOptions::named("bias_relu"),
        |_, t| {
            Ok(vec![(
                "y".into(),
                relu(&(&t[0] + &t[1].reshape(&[1, 512]))),
            )])
        },
    )
    .unwrap();
    let mut args = [
        Array::zeros(&TensorSpec::f32(&[256, 512])),
        Array::zeros(&TensorSpec::f32(&[512])),
    ];
    let us = time(&bias_relu, &mut args, 2000);
    println!(
        "bias+relu [256,512]: {us:.1} us per call ({:.2} ns per element)",
        us * 1e3 / (256.0 * 512.0)
    );
}
