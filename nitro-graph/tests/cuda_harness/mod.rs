//! The conformance harness shared by the CUDA suites: where a case runs
//! ([`Target`]: the CPU, a GPU, host emulation of the generated CUDA C, or
//! NVRTC), running a program there and on the CPU and comparing
//! ([`conform`]), seeded data, and the macro that instantiates every case
//! once per target. Owns no case.
#![allow(dead_code)]

use nitro_graph::backend::cuda::emulate::{self, HostEmulation};
use nitro_graph::backend::cuda::CudaProgram;
use nitro_graph::nn::init::InitRng;
use nitro_graph::{compile_graph, Array, CompileOptions, DType, Device, Graph, Result};

/// Where a conformance body runs its program.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    /// The CPU backend (checks the harness itself).
    Cpu,
    /// A GPU.
    Cuda,
    /// The generated CUDA C, run on the host.
    Emulated,
    /// The generated CUDA C, compiled by NVRTC (nothing runs).
    Nvrtc,
}

/// Architectures every kernel is compiled for: Turing (the oldest NVRTC 12
/// supports without a deprecation warning) and Hopper (the H200).
pub const NVRTC_ARCHES: [&str; 2] = ["compute_75", "compute_90"];

/// The runner of `graph` on `target`, or `None` (after one printed line)
/// when the target does not exist on this machine.
pub fn runner(test: &str, target: Target, graph: Graph, options: CompileOptions) -> Option<Runner> {
    match target {
        Target::Cpu => {
            let p = compile_graph(graph, options).unwrap();
            Some(Box::new(move |a| p.run(a).unwrap()))
        }
        Target::Cuda => match CudaProgram::compile_graph(graph, options, Device::Cuda(0)) {
            Ok(p) => Some(Box::new(move |a| p.run(a).unwrap())),
            Err(e)
                if e.to_string().contains("no CUDA driver")
                    || e.to_string().contains("built without CUDA") =>
            {
                println!("{test}: skipped: no CUDA driver");
                None
            }
            Err(e) => panic!("{test}: {e}"),
        },
        Target::Emulated => {
            if !emulate::available() {
                println!("{test}: skipped: no C++ compiler for host emulation");
                return None;
            }
            let p = CudaProgram::generate(graph, options).unwrap();
            let e = HostEmulation::new(p).unwrap_or_else(|e| panic!("{test}: {e}"));
            Some(Box::new(move |a| e.run(a).unwrap()))
        }
        Target::Nvrtc => {
            if let Err(e) = nitro_device::cuda::nvrtc_version() {
                println!("{test}: skipped: NVRTC not found ({e})");
                return None;
            }
            let p = CudaProgram::generate(graph, options).unwrap();
            let cuda = p.cuda();
            for (i, name) in cuda.kernels.iter().enumerate() {
                for arch in NVRTC_ARCHES {
                    if let Err(e) = nitro_device::cuda::compile_ptx(name, &cuda.unit(i), arch) {
                        panic!("{test}: {e}\n{}", cuda.unit(i));
                    }
                }
            }
            // Compiled, nothing to run: the case ends here.
            None
        }
    }
}

/// Run `graph` on `target` and on the CPU; compare every output and every
/// donated input afterwards, `steps` times over the same argument list.
pub fn conform(
    test: &str,
    device: Target,
    build: impl Fn() -> Result<(Graph, CompileOptions)>,
    args: Vec<Array>,
    steps: usize,
    tol: f64,
) {
    let (graph, options) = build().unwrap();
    let cpu = compile_graph(graph, options).unwrap();
    let (graph, options) = build().unwrap();
    let Some(run_dev) = runner(test, device, graph, options) else {
        return;
    };
    let (mut a_cpu, mut a_dev) = (args.clone(), args);
    for step in 0..steps {
        let want = cpu.run(&mut a_cpu).unwrap();
        let got = run_dev(&mut a_dev);
        assert_eq!(got.len(), want.len());
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.spec(), w.spec(), "{test} output {k}");
            compare(
                &format!(
                    "{test} step {step} output {k} ({})",
                    cpu.returned_names()[k]
                ),
                g,
                w,
                tol,
            );
        }
        for (k, (g, w)) in a_dev.iter().zip(&a_cpu).enumerate() {
            compare(
                &format!("{test} step {step} input {k} after the call"),
                g,
                w,
                tol,
            );
        }
    }
}

pub fn compare(what: &str, got: &Array, want: &Array, tol: f64) {
    for (i, (g, w)) in got.to_f64_vec().iter().zip(want.to_f64_vec()).enumerate() {
        let same = (g.is_nan() && w.is_nan()) || g == &w || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(same, "{what} [{i}]: {g} vs {w} (tolerance {tol})");
    }
}

pub fn data(shape: &[usize], seed: u64, dtype: DType) -> Array {
    let mut rng = InitRng::new(seed);
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|_| rng.uniform() * 4.0 - 2.0).collect();
    Array::new(shape, v).unwrap().cast(dtype)
}

pub type Body = fn(&nitro_graph::Tracer, &[nitro_graph::Tensor]) -> nitro_graph::Tensor;

/// Runs a compiled program on the device under test.
pub type Runner = Box<dyn Fn(&mut [Array]) -> Vec<Array>>;

/// One test per (case, device).
macro_rules! conformance {
    ($($name:ident => $body:expr;)*) => {
        mod cpu {
            use super::*;
            $(#[test] fn $name() { ($body)(concat!("cpu::", stringify!($name)), Target::Cpu) })*
        }
        mod cuda {
            use super::*;
            $(#[test] fn $name() { ($body)(concat!("cuda::", stringify!($name)), Target::Cuda) })*
        }
        mod emulated {
            use super::*;
            $(#[test] fn $name() { ($body)(concat!("emulated::", stringify!($name)), Target::Emulated) })*
        }
        mod nvrtc {
            use super::*;
            $(#[test] fn $name() { ($body)(concat!("nvrtc::", stringify!($name)), Target::Nvrtc) })*
        }
    };
}

pub(crate) use conformance;
