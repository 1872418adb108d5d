//! The device-neutral surface (`Executable`, `Runtime`, `Value`): the same
//! calls in every build, a CPU executable that behaves as its `Program`
//! (donation included, through host arrays and through values), and a GPU
//! that cannot be opened here failing with a typed error naming the fix.

use nitro_graph::{
    compile_graph, trace, Array, CompileOptions, Device, Executable, Graph, Runtime, TensorSpec,
    Value,
};

/// `w <- w - 0.5 * x` (w donated) and `loss = sum(w * x)`.
fn step() -> (Graph, CompileOptions) {
    let g = trace(
        &[("w", TensorSpec::f32(&[4])), ("x", TensorSpec::f32(&[4]))],
        |_, t| {
            let new = &t[0] - &(&t[1] * 0.5);
            Ok(vec![
                ("new.w".to_string(), new),
                ("loss".to_string(), (&t[0] * &t[1]).sum_all()),
            ])
        },
    )
    .unwrap();
    (g, CompileOptions::named("step").donate("w", "new.w"))
}

fn args() -> Vec<Array> {
    vec![
        Array::new(&[4], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap(),
        Array::new(&[4], vec![2.0f32, 0.0, -2.0, 4.0]).unwrap(),
    ]
}

#[test]
fn a_cpu_executable_is_its_program_through_arrays_and_values() {
    let (g, o) = step();
    let program = compile_graph(g, o).unwrap();
    let (g, o) = step();
    let exe = Executable::compile_graph(g, o, Device::Cpu).unwrap();
    assert_eq!(exe.device(), Device::Cpu);
    assert_eq!(exe.returned_names(), program.returned_names());
    assert_eq!(
        exe.desc().donations(),
        &[("w".to_string(), "new.w".to_string())]
    );
    assert_eq!(format!("{}", exe.graph()), format!("{}", program.graph()));

    let (mut a, mut b) = (args(), args());
    let want = program.run(&mut a).unwrap();
    let got = exe.run(&mut b).unwrap();
    assert_eq!(got[0].to_f64_vec(), want[0].to_f64_vec());
    assert_eq!(b[0].to_f64_vec(), vec![0.0, 2.0, 4.0, 2.0]);

    // The same call through values made resident on the CPU runtime: the
    // donated value is updated in place, the loss comes back.
    let rt = Runtime::open(Device::Cpu).unwrap();
    let mut values: Vec<Value> = args().iter().map(|a| rt.resident(a).unwrap()).collect();
    let outs = exe.run_values(&mut values).unwrap();
    assert_eq!(outs.len(), 1);
    let loss = outs[0].to_host(&[]).unwrap().item().unwrap();
    assert_eq!(loss, 1.0 * 2.0 + 3.0 * -2.0 + 4.0 * 4.0);
    assert_eq!(
        values[0].to_host(&[4]).unwrap().to_f64_vec(),
        vec![0.0, 2.0, 4.0, 2.0]
    );
    assert_eq!(values[0].spec(), TensorSpec::f32(&[4]));
}

#[test]
fn a_wrong_argument_is_refused_before_any_value_moves() {
    let (g, o) = step();
    let exe = Executable::compile_graph(g, o, Device::Cpu).unwrap();
    let mut values = vec![
        Value::Host(Array::new(&[4], vec![1.0f32; 4]).unwrap()),
        Value::Host(Array::new(&[3], vec![1.0f32; 3]).unwrap()),
    ];
    let err = exe.run_values(&mut values).unwrap_err().to_string();
    assert!(err.contains('x'), "{err}");
    // Both values are still there, unchanged.
    assert_eq!(values[0].spec(), TensorSpec::f32(&[4]));
    assert_eq!(values[1].spec(), TensorSpec::f32(&[3]));
    assert!(
        exe.run_values(&mut values[..1]).is_err(),
        "arity is checked"
    );
}

#[test]
fn a_gpu_that_cannot_be_opened_is_a_typed_error_naming_the_fix() {
    let Err(e) = Runtime::open(Device::Cuda(0)) else {
        println!("skipped: a GPU is present");
        return;
    };
    let msg = e.to_string();
    if cfg!(feature = "cuda") {
        assert!(msg.contains("CUDA"), "{msg}");
    } else {
        assert!(
            matches!(e, nitro_device::DeviceError::BuiltWithoutCuda(_)),
            "{msg}"
        );
        assert!(msg.contains("--features cuda"), "{msg}");
        let (g, o) = step();
        let err = Executable::compile_graph(g, o, Device::Cuda(0))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("built without CUDA") && err.contains("--features cuda"),
            "{err}"
        );
    }
    // The CPU runtime stages nothing: a staged array is the array.
    let rt = Runtime::open(Device::Cpu).unwrap();
    let staged = rt.stage(Array::scalar_f32(3.0)).unwrap();
    assert!(matches!(staged, Value::Host(_)));
}

/// `[n, n]` values from a seed, distinct per seed.
fn square(n: usize, seed: usize) -> Vec<f32> {
    (0..n * n)
        .map(|i| ((i * 7 + seed * 13) % 17) as f32 * 0.25 - 2.0)
        .collect()
}

/// The product by the textbook triple loop (sums of quarter-integers
/// this small are exact in f32, in any order).
fn product(n: usize, a: &[f32], b: &[f32]) -> Vec<f32> {
    let mut c = vec![0.0f32; n * n];
    for i in 0..n {
        for j in 0..n {
            c[i * n + j] = (0..n).map(|p| a[i * n + p] * b[p * n + j]).sum();
        }
    }
    c
}

/// A program of two `[n, n]` f32 inputs `a` and `b` returning `outputs`,
/// checked to be large enough to run on the pool.
fn pooled_program(
    n: usize,
    outputs: impl FnOnce(&[nitro_graph::Tensor]) -> Vec<(String, nitro_graph::Tensor)>,
) -> nitro_graph::Program {
    let spec = TensorSpec::f32(&[n, n]);
    let program = nitro_graph::compile(
        &[("a", spec.clone()), ("b", spec)],
        CompileOptions::named("mm"),
        |_, t| Ok(outputs(t)),
    )
    .unwrap();
    assert!(
        program.stats().unshared_bytes >= 256 * 1024,
        "runs on the pool"
    );
    program
}

/// The arguments `a` and `b` as `[n, n]` arrays.
fn square_args(n: usize, a: Vec<f32>, b: Vec<f32>) -> Vec<Array> {
    vec![
        Array::new(&[n, n], a).unwrap(),
        Array::new(&[n, n], b).unwrap(),
    ]
}

#[test]
fn a_returned_output_is_the_callers_and_survives_the_next_call() {
    // Large enough to run on the pool (a slot handed over, not copied),
    // and one node returned under two names.
    let n = 264;
    let program = pooled_program(n, |t| {
        let c = t[0].matmul(&t[1]);
        vec![("c".into(), c.clone()), ("again".into(), c)]
    });
    let call = |seed: usize| {
        let (a, b) = (square(n, seed), square(n, seed + 1));
        let want = product(n, &a, &b);
        (program.run(&mut square_args(n, a, b)).unwrap(), want)
    };
    let (first, want1) = call(1);
    let (second, want2) = call(2);
    let (third, want3) = call(3);
    assert_ne!(want1, want2);
    for (outs, want) in [(&first, &want1), (&second, &want2), (&third, &want3)] {
        assert_eq!(outs.len(), 2);
        for out in outs {
            assert_eq!(out.as_slice::<f32>().unwrap(), &want[..]);
        }
    }
}

#[test]
fn programs_called_from_inside_the_pool_finish_with_the_right_values() {
    // Each call keeps the pool's other workers busy until it returns;
    // calls nested in parallel work (every worker inside one) must still
    // all finish, each with its own result.
    use nitro_graph::nn::ops::relu;
    use rayon::prelude::*;
    let n = 192;
    let program = pooled_program(n, |t| vec![("c".into(), relu(&t[0].matmul(&t[1])))]);
    (0..12usize).into_par_iter().for_each(|seed| {
        let (a, b) = (square(n, seed), square(n, seed + 5));
        let want: Vec<f32> = product(n, &a, &b).iter().map(|v| v.max(0.0)).collect();
        let out = program.run(&mut square_args(n, a, b)).unwrap();
        assert_eq!(out[0].as_slice::<f32>().unwrap(), &want[..], "call {seed}");
    });
}
