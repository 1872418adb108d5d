//! Project automation: `cargo xtask test | test-gpu | gpu-bundle | bench [--peers PYTHON] [NAME...] | ci`.
//!
//! `test` runs the workspace tests (the README's test command calls it),
//! `ci` runs what `.ci/run` runs (format, lints, docs, tests, the CUDA build,
//! the MPI feature's multi-rank tests: see `mpi.rs`),
//! `bench` builds in release mode and prints one JSON object per line (see
//! `shared/BENCH.md`; with `--peers`, next to the peer frameworks' figures
//! measured in the same sitting: see `bench.rs`), `test-gpu` runs the CUDA conformance suite and GPU
//! benchmarks on a machine with a driver, and `gpu-bundle` builds the same
//! checks here into `target/gpu-bundle` (binaries and `run.sh`) for a GPU
//! machine that has no Rust toolchain.

mod bench;
mod mpi;

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
        "bench" => bench::bench(&rest),
        "test-gpu" => test_gpu(),
        "gpu-bundle" => gpu_bundle(),
        _ => {
            eprintln!("usage: cargo xtask test | test-gpu | gpu-bundle | bench [--peers PYTHON] [--rounds N] [NAME...] | ci");
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
    optional_features()
}

/// The optional parts, in one feature configuration: CUDA (and so NCCL)
/// always, MPI where it is installed. One configuration, not one per
/// feature: every extra configuration recompiles the workspace, and that,
/// not running tests, is where CI's time goes. The GPU path must never stop
/// compiling, even on a machine without one: clippy checks every target with
/// the features on; then only the tests the features change run again (the
/// rest ran in [`test()`]). Their GPU cases print "skipped: no CUDA driver"
/// here; the generated kernels still run, through host emulation.
fn optional_features() -> Result<(), String> {
    let with_mpi = mpi::available();
    if !with_mpi {
        eprintln!(
            "skipped: MPI checks (mpirun or mpicc not found; install libopenmpi-dev openmpi-bin libclang-dev)"
        );
    }
    let features = if with_mpi {
        "nitro-run/cuda,nitro-run/mpi"
    } else {
        "nitro-run/cuda"
    };
    cargo(
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--features",
            features,
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    // The same packages and features in both commands below, so the second
    // reuses the first's build.
    let mut args = vec![
        "test",
        "--package",
        "nitro-device",
        "--package",
        "nitro-graph",
        "--package",
        "nitro-run",
        "--features",
        features,
    ];
    let mut feature_tests = vec!["--lib"];
    for target in FEATURE_TESTS {
        feature_tests.extend(["--test", target]);
    }
    if with_mpi {
        feature_tests.extend(["--test", "mpi_ranks"]);
    }
    cargo(&[&args[..], &feature_tests[..]].concat(), &mpi::ROOT)?;
    if with_mpi {
        // One test at a time: each launches two ranks.
        args.extend(["--test", "ddp", "--", "--test-threads", "1"]);
        cargo(&args, &mpi::ROOT)?;
    }
    Ok(())
}

/// The test targets whose behaviour the `cuda` feature changes (the rest
/// ran in the default configuration): the CUDA crates' own suites, the
/// all-reduce and executable paths that gain a device, and the CLI's
/// device messages and export.
const FEATURE_TESTS: [&str; 12] = [
    "cuda_device",
    "cuda_gemm_mapping",
    "cuda_nccl",
    "cuda_staging",
    "all_reduce",
    "cuda_codegen",
    "cuda_collective",
    "cuda_conformance",
    "executable",
    "cuda_handle",
    "cli",
    "ux",
];

/// Build the GPU bundle (see [`gpu_bundle`]) and run it here: the CUDA
/// conformance suite, every crate's GPU tests (all of them, even when one
/// fails: GPU time is scarce), then the GPU benchmark's JSON lines. One
/// script (`run.sh`) finds the CUDA libraries and runs the checks, wherever
/// they run.
fn test_gpu() -> Result<(), String> {
    gpu_bundle()?;
    let status = Command::new("bash")
        .arg("target/gpu-bundle/run.sh")
        .status()
        .map_err(|e| format!("cannot run bash: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "GPU checks failed ({status}); logs in $OUT or target/gpu-bundle/out"
        ))
    }
}

/// The GPU checks `gpu-bundle` packs: (package, feature, test targets).
const GPU_TESTS: [(&str, &str, &[&str]); 3] = [
    (
        "nitro-device",
        "nitro-device/cuda",
        &[
            "cuda_device",
            "cuda_staging",
            "cuda_gemm_mapping",
            "cuda_nccl",
        ],
    ),
    (
        "nitro-graph",
        "nitro-graph/cuda",
        &["cuda_conformance", "cuda_codegen", "cuda_collective"],
    ),
    ("nitro-run", "nitro-run/cuda", &["cuda_handle"]),
];

/// Run `cargo` with `args` and `--message-format=json`; the executables it built.
fn built_executables(args: &[&str]) -> Result<Vec<std::path::PathBuf>, String> {
    eprintln!("$ cargo {}", args.join(" "));
    let out = Command::new(env!("CARGO"))
        .args(args)
        .arg("--message-format=json")
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`cargo {}` failed ({})",
            args.join(" "),
            out.status
        ));
    }
    const FIELD: &str = "\"executable\":\"";
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let start = line.find(FIELD)? + FIELD.len();
            let end = start + line[start..].find('"')?;
            Some(line[start..end].into())
        })
        .collect())
}

/// Build the CUDA test binaries and the GPU benchmark in release mode into
/// `target/gpu-bundle/` with `run.sh`, stripped of debug info: carry that
/// folder to a GPU machine and run `bash target/gpu-bundle/run.sh` there.
fn gpu_bundle() -> Result<(), String> {
    let dir = std::path::Path::new("target/gpu-bundle");
    let _ = std::fs::remove_dir_all(dir);
    let tests = dir.join("tests");
    std::fs::create_dir_all(&tests).map_err(|e| format!("{}: {e}", tests.display()))?;
    let mut copies: Vec<(std::path::PathBuf, std::path::PathBuf)> = vec![];
    for (package, feature, targets) in GPU_TESTS {
        let mut args = vec![
            "test",
            "--release",
            "--no-run",
            "--package",
            package,
            "--features",
            feature,
        ];
        for t in targets {
            args.extend(["--test", t]);
        }
        for exe in built_executables(&args)? {
            let stem = exe.file_stem().unwrap_or_default().to_string_lossy();
            // Cargo names test binaries `<target>-<hash>`.
            let name = stem.rsplit_once('-').map_or(stem.as_ref(), |(n, _)| n);
            copies.push((exe.clone(), tests.join(format!("{package}.{name}"))));
        }
    }
    for exe in built_executables(&[
        "build",
        "--release",
        "--package",
        "nitro-graph",
        "--features",
        "nitro-graph/cuda",
        "--example",
        "bench_gpu",
    ])? {
        copies.push((exe, dir.join("bench_gpu")));
    }
    let mut bytes = 0;
    for (from, to) in &copies {
        std::fs::copy(from, to).map_err(|e| format!("copy {}: {e}", from.display()))?;
        // Debug info is most of a binary's size and useless there.
        let _ = Command::new("strip").arg("--strip-debug").arg(to).status();
        bytes += std::fs::metadata(to).map(|m| m.len()).unwrap_or(0);
    }
    let script = dir.join("run.sh");
    std::fs::write(&script, include_str!("gpu_run.sh"))
        .map_err(|e| format!("{}: {e}", script.display()))?;
    eprintln!(
        "xtask gpu-bundle: {} binaries, {:.1} MiB in {}; run there with `bash {}`",
        copies.len(),
        bytes as f64 / (1 << 20) as f64,
        dir.display(),
        script.display()
    );
    Ok(())
}
