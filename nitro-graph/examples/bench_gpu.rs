//! GPU benchmarks (feature `cuda`): one JSON object per line on stdout with
//! `"device":"cuda"` (see shared/BENCH.md); progress on stderr. Prints one
//! "skipped: ..." line on stderr and exits cleanly where no driver is found.
//!
//! - `gemm`: f32 (CUDA cores, no TF32) and bf16-in/f32-out (tensor cores)
//!   cuBLAS products, TFLOP/s and the fraction of an H200's dense peak.
//! - `mlp_train_step` / `cnn_train_step` at batch 256 and 1024: one compiled
//!   step (forward, backward, Adam in place), data already on the device.
//!
//! `cargo run --release -p nitro-graph --features cuda --example bench_gpu`

use nitro_device::cuda::{CudaBuffer, CudaDevice, GemmShape, GemmTypes};
use nitro_device::{DType, Device};
use nitro_graph::backend::cuda::CudaProgram;
use nitro_graph::nn::layers::Chain;
use nitro_graph::nn::train::AdamStepGraph;
use nitro_graph::nn::zoo;
use nitro_graph::Array;
use std::time::Instant;

/// H200 SXM dense peaks (TFLOP/s): FP32 on CUDA cores, BF16 on tensor cores.
const H200_F32_TFLOPS: f64 = 67.0;
const H200_BF16_TFLOPS: f64 = 989.0;

type BenchResult = Result<(), Box<dyn std::error::Error>>;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn bench_gemm(dev: &CudaDevice) -> BenchResult {
    for (types, dtype, name, peak) in [
        (GemmTypes::F32, DType::F32, "f32", H200_F32_TFLOPS),
        (GemmTypes::BF16, DType::BF16, "bf16", H200_BF16_TFLOPS),
    ] {
        for n in [4096usize, 8192] {
            let a = dev.alloc_zeros(dtype, n * n)?;
            let b = dev.alloc_zeros(dtype, n * n)?;
            let c = dev.alloc_zeros(DType::F32, n * n)?;
            let shape = GemmShape {
                batch: 1,
                m: n,
                n,
                k: n,
                ta: false,
                tb: false,
            };
            let run = || -> Result<f64, Box<dyn std::error::Error>> {
                let t = Instant::now();
                // SAFETY: a, b, c are live n*n buffers of the named types on `dev`.
                unsafe { dev.gemm(types, shape, a.device_ptr(), b.device_ptr(), c.device_ptr())? };
                dev.synchronize()?;
                Ok(t.elapsed().as_secs_f64())
            };
            run()?;
            let runs = 10;
            let secs = median((0..runs).map(|_| run()).collect::<Result<_, _>>()?);
            let tflops = 2.0 * (n as f64).powi(3) / secs / 1e12;
            println!(
                "{{\"bench\":\"gemm\",\"device\":\"cuda\",\"dtype\":\"{name}\",\"n\":{n},\"tflops\":{tflops:.1},\"median_ms\":{:.3},\"runs\":{runs},\"peak_fraction\":{:.3}}}",
                secs * 1e3,
                tflops / peak
            );
        }
    }
    Ok(())
}

fn bench_step(dev: &CudaDevice, name: &str, model: &Chain, x: &[usize]) -> BenchResult {
    let mut step = AdamStepGraph::trace(model, &model.init_params(0)?, x, 1e-3)?;
    let last = step.args.len() - 1;
    step.args[last] = Array::scalar_f32(1.0); // the update count must be >= 1 for bias correction
    let compile = Instant::now();
    let program =
        CudaProgram::compile_graph(step.graph, step.options, Device::Cuda(dev.ordinal()))?;
    let compile_ms = compile.elapsed().as_secs_f64() * 1e3;
    let mut bufs: Vec<CudaBuffer> = step
        .args
        .iter()
        .map(|a| dev.upload(a.data()))
        .collect::<Result<_, _>>()?;
    let mut run = || -> Result<f64, Box<dyn std::error::Error>> {
        let t = Instant::now();
        program.run_device(&mut bufs)?;
        dev.synchronize()?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    for _ in 0..5 {
        run()?;
    }
    let runs = 50;
    let ms = median((0..runs).map(|_| run()).collect::<Result<_, _>>()?);
    let stats = program.desc().stats();
    println!(
        "{{\"bench\":\"{name}\",\"device\":\"cuda\",\"batch\":{},\"median_ms\":{ms:.3},\"runs\":{runs},\"kernels\":{},\"peak_bytes\":{},\"compile_ms\":{compile_ms:.1}}}",
        x[0], stats.kernels, stats.peak_bytes
    );
    Ok(())
}

fn main() -> BenchResult {
    let dev = match CudaDevice::open(0) {
        Ok(dev) => dev,
        Err(e) => {
            eprintln!("skipped: {e}");
            return Ok(());
        }
    };
    eprintln!("bench_gpu on {} ({})", dev.name(), dev.arch());
    let wanted: Vec<String> = std::env::args().skip(1).collect();
    let want = |name: &str| wanted.is_empty() || wanted.iter().any(|w| w == name);
    if want("gemm") {
        bench_gemm(&dev)?;
    }
    let mlp = zoo::mlp(&[784, 512, 512, 10]);
    let cnn = zoo::lenet5();
    for batch in [256usize, 1024] {
        if want("mlp_train_step") {
            bench_step(&dev, "mlp_train_step", &mlp, &[batch, 784])?;
        }
        if want("cnn_train_step") {
            bench_step(&dev, "cnn_train_step", &cnn, &[batch, 1, 28, 28])?;
        }
    }
    Ok(())
}
