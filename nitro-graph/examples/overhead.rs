//! Per-call overhead of a tiny compiled program (used while tuning).
use nitro_graph::{compile, Array, CompileOptions, TensorSpec};
use std::time::Instant;
fn main() {
    let p = compile(
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
    for _ in 0..1000 {
        p.run(&mut args).unwrap();
    }
    let t = Instant::now();
    let n = 100_000;
    for _ in 0..n {
        p.run(&mut args).unwrap();
    }
    println!(
        "{:.2} us per call, {} kernels",
        t.elapsed().as_secs_f64() * 1e6 / n as f64,
        p.kernel_count()
    );
}
