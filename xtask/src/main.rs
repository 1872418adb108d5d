//! Project automation: `cargo xtask test | test-gpu | bench [NAME...] | ci`.
//!
//! `test` runs the workspace tests (the README's test command calls it),
//! `ci` runs what `.ci/run` runs (format, lints, docs, tests, the CUDA build),
//! `bench` builds in release mode and prints one JSON object per line (see
//! `shared/BENCH.md`), `test-gpu` runs the CUDA conformance suite and GPU
//! benchmarks on a machine with a driver.

use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (task, rest) = match args.split_first() {
        Some((task, rest)) => (task.as_str(), rest.to_vec()),
        None => ("help", Vec::new()),
    };
    let result = match task {
        "test" => test(),
        "ci" => ci(),
        "bench" => bench(&rest),
        "test-gpu" => test_gpu(),
        _ => {
            eprintln!("usage: cargo xtask test | test-gpu | bench [NAME...] | ci");
            return ExitCode::from(if task == "help" { 0 } else { 2 });
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask {task}: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Run `cargo` with `args`, failing with the command line on a non-zero exit.
fn cargo(args: &[&str], env: &[(&str, &str)]) -> Result<(), String> {
    eprintln!("$ cargo {}", args.join(" "));
    let status = Command::new(env!("CARGO"))
        .args(args)
        .envs(env.iter().copied())
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`cargo {}` failed ({status})", args.join(" ")))
    }
}

fn test() -> Result<(), String> {
    cargo(&["test", "--workspace", "--all-targets"], &[])?;
    cargo(&["test", "--workspace", "--doc"], &[])
}

fn ci() -> Result<(), String> {
    cargo(&["fmt", "--all", "--check"], &[])?;
    cargo(
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    cargo(
        &["doc", "--workspace", "--no-deps"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    test()?;
    // The GPU path must never stop compiling, even on a machine without one:
    // build everything with CUDA on, and run the CUDA crates' tests (their
    // GPU cases print "skipped: no CUDA driver" here; the generated kernels
    // still run, through host emulation).
    cargo(
        &[
            "build",
            "--workspace",
            "--all-targets",
            "--features",
            "nitro-run/cuda",
        ],
        &[],
    )?;
    cargo(
        &[
            "test",
            "--package",
            "nitro-device",
            "--package",
            "nitro-graph",
            "--package",
            "nitro-run",
            "--features",
            "nitro-graph/cuda,nitro-run/cuda",
        ],
        &[],
    )
}

/// Every crate with benchmarks has an example `bench_<crate>` (e.g.
/// `nitro-graph/examples/bench_graph.rs`) printing the JSON lines of its
/// benches: all of them, or those named on its command line.
const BENCH_PACKAGES: [&str; 5] = [
    "nitro-graph",
    "nitro-cache",
    "nitro-data",
    "nitro-ckpt",
    "nitro-run",
];

fn bench(names: &[String]) -> Result<(), String> {
    for package in BENCH_PACKAGES {
        let example = format!("bench_{}", package.trim_start_matches("nitro-"));
        if !std::path::Path::new(package)
            .join(format!("examples/{example}.rs"))
            .exists()
        {
            continue;
        }
        let mut args = vec![
            "run",
            "--release",
            "--quiet",
            "--package",
            package,
            "--example",
            &example,
            "--",
        ];
        args.extend(names.iter().map(String::as_str));
        cargo(&args, &[])?;
    }
    Ok(())
}

fn test_gpu() -> Result<(), String> {
    // Conformance: every CUDA test (device buffers, codegen, CPU-vs-CUDA
    // op and train-step conformance), printing each skip or result.
    cargo(
        &[
            "test",
            "--release",
            "--package",
            "nitro-device",
            "--features",
            "cuda",
            "--",
            "--nocapture",
        ],
        &[],
    )?;
    cargo(
        &[
            "test",
            "--release",
            "--package",
            "nitro-graph",
            "--features",
            "cuda",
            "--test",
            "cuda_*",
            "--",
            "--nocapture",
        ],
        &[],
    )?;
    // The Nitro handle on the GPU: digits MLP trained on CUDA vs CPU,
    // resident params synced at checkpoints, a GPU checkpoint resumed on the CPU.
    cargo(
        &[
            "test",
            "--release",
            "--package",
            "nitro-run",
            "--features",
            "cuda",
            "--test",
            "cuda_handle",
            "--",
            "--nocapture",
        ],
        &[],
    )?;
    // GPU benchmarks as JSON lines: gemm f32/bf16, MLP and CNN train steps at batch 256 and 1024.
    cargo(
        &[
            "run",
            "--release",
            "--quiet",
            "--package",
            "nitro-graph",
            "--features",
            "cuda",
            "--example",
            "bench_gpu",
        ],
        &[],
    )
}
