//! Conformance of the all-reduce on the CUDA backend, per target (see
//! `cuda_harness`): a world of one run alone is the identity on every
//! target (the generated copy kernel runs through host emulation and
//! NVRTC); in a group, the generated program's all-reduce step sums its
//! buffer through the communicator, checked in host emulation with an
//! in-process double for the other rank against the CPU backend with the
//! same double; on a GPU, a world of one runs through NCCL. Cases that need
//! what this machine lacks print one "skipped:" line and pass.
#![cfg(feature = "cuda")]

mod cuda_harness;

use cuda_harness::{compare, conform, conformance, data, runner, Target};
use std::sync::Arc;

use nitro_device::collective::{
    Backend, CollectiveError, Communicator, ProcessGroup, SingleProcess,
};
use nitro_graph::backend::cuda::emulate::{self, HostEmulation};
use nitro_graph::backend::cuda::CudaProgram;
use nitro_graph::{
    compile_graph, trace, Array, CompileOptions, DType, Device, Executable, Graph, Group,
    HostBuffer, Result, Runtime, TensorSpec,
};

/// A program of a fused group, its all-reduce over `world`, and math after
/// it (so the sum's buffer is read by a later kernel): outputs the sum and
/// `tanh(sum) * 3` (float) or `sum * 3` (integer).
fn program(world: usize, dtype: DType, shape: &[usize]) -> Result<(Graph, CompileOptions)> {
    let g = trace(&[("x", TensorSpec::new(dtype, shape))], |tr, t| {
        let two = tr.scalar(2.0, dtype);
        let one = tr.scalar(1.0, dtype);
        let grads = t[0].clone() * two + one;
        let sum = grads.all_reduce_sum(world);
        let three = tr.scalar(3.0, dtype);
        let after = if dtype.is_float() {
            sum.tanh() * three
        } else {
            sum.clone() * three
        };
        Ok(vec![("sum".into(), sum), ("after".into(), after)])
    })?;
    Ok((g, CompileOptions::named("all_reduce")))
}

/// Rank 0 of a world of two whose rank 1 holds the same values: the sum is
/// `x + x` (exact).
#[derive(Debug, Default)]
struct Twin;

impl Communicator for Twin {
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        2
    }
    fn backend(&self) -> Backend {
        Backend::Single
    }
    fn all_reduce_sum(&self, buf: &mut HostBuffer) -> std::result::Result<(), CollectiveError> {
        let twice = match buf {
            HostBuffer::F32(v) => HostBuffer::F32(v.iter().map(|x| x + x).collect()),
            HostBuffer::F64(v) => HostBuffer::F64(v.iter().map(|x| x + x).collect()),
            HostBuffer::I32(v) => HostBuffer::I32(v.iter().map(|x| x.wrapping_add(*x)).collect()),
            HostBuffer::I64(v) => HostBuffer::I64(v.iter().map(|x| x.wrapping_add(*x)).collect()),
            other => {
                return Err(CollectiveError::DType {
                    op: "all_reduce_sum",
                    dtype: other.dtype(),
                })
            }
        };
        *buf = twice;
        Ok(())
    }
    fn broadcast(&self, _: &mut HostBuffer, _: usize) -> std::result::Result<(), CollectiveError> {
        Ok(())
    }
    fn barrier(&self) -> std::result::Result<(), CollectiveError> {
        Ok(())
    }
}

const DTYPES: [DType; 4] = [DType::F32, DType::F64, DType::I32, DType::I64];

conformance! {
    a_world_of_one_alone_is_the_identity => |t: &str, d| {
        for dtype in DTYPES {
            // 1000 elements: more than one block; [] : a scalar.
            for shape in [&[8, 125][..], &[][..]] {
                let args = vec![data(shape, 5, dtype)];
                conform(&format!("{t} {dtype}{shape:?}"), d, || program(1, dtype, shape), args, 2, 1e-6);
            }
        }
    };
    a_group_sums_through_the_communicator => |t: &str, d: Target| {
        for dtype in DTYPES {
            let test = format!("{t} {dtype}");
            let (graph, options) = program(2, dtype, &[8, 125]).unwrap();
            let cpu = compile_graph(graph, options).unwrap();
            let mut want_args = vec![data(&[8, 125], 7, dtype)];
            let twin = Twin;
            let want = cpu.run_with(&mut want_args, &twin).unwrap();
            let (graph, options) = program(2, dtype, &[8, 125]).unwrap();
            let got = match d {
                Target::Cpu => compile_graph(graph, options).unwrap().run_with(&mut want_args.clone(), &twin).unwrap(),
                Target::Emulated => {
                    if !emulate::available() {
                        println!("{test}: skipped: no C++ compiler for host emulation");
                        return;
                    }
                    let e = HostEmulation::new(CudaProgram::generate(graph, options).unwrap()).unwrap();
                    // Alone, a program over two processes is refused by name.
                    let err = e.run(&mut want_args.clone()).unwrap_err().to_string();
                    assert!(err.contains("all-reduces over 2 processes but was run alone"), "{err}");
                    // Through the device-neutral surface, a host communicator
                    // alone does not make a GPU program's group: refused by name.
                    let (graph, options) = program(2, dtype, &[8, 125]).unwrap();
                    let exe = Executable::Cuda(Arc::new(CudaProgram::generate(graph, options).unwrap()));
                    let err = exe.run_with(&mut want_args.clone(), Group::host(&twin)).unwrap_err().to_string();
                    assert!(err.contains("all-reduce on CUDA needs NCCL"), "{err}");
                    e.run_with(&mut want_args.clone(), &twin).unwrap()
                }
                Target::Nvrtc => {
                    // The copy kernel compiles like every other one.
                    runner(&test, d, graph, options);
                    return;
                }
                Target::Cuda => {
                    println!("{test}: skipped: a group of two needs two GPUs (one rank each)");
                    return;
                }
            };
            assert_eq!(got.len(), want.len());
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                compare(&format!("{test} output {k}"), g, w, 1e-6);
            }
            // The sum is twice the argument: the step went through the double.
            for (i, (s, x)) in got[0].to_f64_vec().iter().zip(want_args[0].to_f64_vec()).enumerate() {
                let w = 2.0 * (2.0 * x + 1.0);
                let tol = if dtype == DType::F32 { 1e-6 * (1.0 + w.abs()) } else { 0.0 };
                assert!((s - w).abs() <= tol, "{test} [{i}]: {s} vs {w}");
            }
        }
    };
}

/// A GPU with NCCL: the all-reduce of a world of one goes through
/// `ncclAllReduce` and agrees with the CPU; the communicator's world is
/// checked against the program's.
#[test]
fn cuda_a_world_of_one_runs_through_nccl() {
    let test = "cuda_a_world_of_one_runs_through_nccl";
    let program_for = |world| {
        let (graph, options) = program(world, DType::F32, &[8, 125]).unwrap();
        CudaProgram::compile_graph(graph, options, Device::Cuda(0))
    };
    let gpu = match program_for(1) {
        Ok(p) => p,
        Err(e) if e.to_string().contains("no CUDA driver") => {
            println!("{test}: skipped: no CUDA driver");
            return;
        }
        Err(e) => panic!("{test}: {e}"),
    };
    let dev = gpu.device().expect("compiled for a device").clone();
    let nccl = match nitro_device::cuda::NcclCommunicator::init(&ProcessGroup::single(), &dev) {
        Ok(c) => c,
        Err(e @ nitro_device::DeviceError::NoNccl(_)) => {
            println!("{test}: skipped: {e}");
            return;
        }
        Err(e) => panic!("{test}: {e}"),
    };
    let (graph, options) = program(1, DType::F32, &[8, 125]).unwrap();
    let cpu = compile_graph(graph, options).unwrap();
    let args = vec![data(&[8, 125], 9, DType::F32)];
    let want = cpu.run(&mut args.clone()).unwrap();
    for step in 0..3 {
        let got = gpu.run_with(&mut args.clone(), &nccl).unwrap();
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            compare(&format!("{test} step {step} output {k}"), g, w, 1e-6);
        }
    }
    // Through device buffers too.
    let mut bufs = vec![dev.upload(args[0].data()).unwrap()];
    let outs = gpu.run_device_with(&mut bufs, &nccl).unwrap();
    let sum = Array::new(&[8, 125], outs[0].download().unwrap()).unwrap();
    compare(&format!("{test} run_device_with"), &sum, &want[0], 0.0);
    // A program traced for two GPUs refuses a communicator of one.
    let two = program_for(2).unwrap();
    let e = two
        .run_with(&mut args.clone(), &nccl)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("over 2 processes but was run in a group of 1"),
        "{e}"
    );
    let e = two.run(&mut args.clone()).unwrap_err().to_string();
    assert!(e.contains("all-reduce on CUDA needs NCCL"), "{e}");
    // The device-neutral surface nitro-run calls: a group's NCCL
    // communicator reaches the GPU program, over resident values too.
    let exe = Executable::Cuda(Arc::new(program_for(1).unwrap()));
    let group = Group {
        host: &SingleProcess,
        nccl: Some(&nccl),
    };
    let got = exe.run_with(&mut args.clone(), group).unwrap();
    compare(
        &format!("{test} Executable::run_with"),
        &got[0],
        &want[0],
        0.0,
    );
    let runtime = Runtime::Cuda(dev.clone());
    let mut values = vec![runtime.resident(&args[0]).unwrap()];
    let outs = exe.run_values_with(&mut values, group).unwrap();
    let sum = outs[0].to_host(&[8, 125]).unwrap();
    compare(
        &format!("{test} Executable::run_values_with"),
        &sum,
        &want[0],
        0.0,
    );
    // A two-GPU program given the host communicator alone is refused
    // before anything moves to the device, never run alone.
    let two = Executable::Cuda(Arc::new(two));
    let mut values = vec![runtime.resident(&args[0]).unwrap()];
    let e = two
        .run_values_with(&mut values, Group::host(&Twin))
        .unwrap_err()
        .to_string();
    assert!(e.contains("all-reduce on CUDA needs NCCL"), "{e}");
}
