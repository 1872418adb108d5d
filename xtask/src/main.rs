//! Project automation: `cargo xtask test | test-gpu | bench [NAME...] | ci`.
//!
//! `test` runs the workspace tests (the README's test command calls it),
//! `ci` runs what `.ci/run` runs (format, lints, docs, tests, the CUDA build),
//! `bench` builds in release mode and prints one JSON object per line (see
//! `shared/BENCH.md`), `test-gpu` runs the CUDA conformance suite and GPU
//! benchmarks on a machine with a driver, and `gpu-bundle` builds the same
//! checks here into `target/gpu-bundle` (binaries and `run.sh`) for a GPU
//! machine that has no Rust toolchain.

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
        "gpu-bundle" => gpu_bundle(),
        _ => {
            eprintln!("usage: cargo xtask test | test-gpu | gpu-bundle | bench [NAME...] | ci");
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

/// The CUDA libraries nitro loads at run time (cudarc's dynamic loading),
/// besides the driver's libcuda.
const CUDA_LIBRARIES: [&str; 3] = ["nvrtc", "cublas", "cublasLt"];

/// Make the CUDA libraries findable by cudarc: the folders that hold them
/// (a toolkit under /usr/local/cuda, NVIDIA's Python wheels) go on
/// `LD_LIBRARY_PATH`, and where only a versioned file exists
/// (`libnvrtc.so.13`, a version cudarc does not list) an unversioned link
/// to it is made in `target/cuda-libs`. Prints what it found.
fn cuda_library_path() -> Result<String, String> {
    let mut dirs: Vec<std::path::PathBuf> = [
        "/usr/local/cuda/lib64",
        "/usr/local/cuda/targets/x86_64-linux/lib",
        "/usr/local/nvidia/lib64",
        "/usr/lib/x86_64-linux-gnu",
    ]
    .iter()
    .map(Into::into)
    .collect();
    let site = Command::new("python3")
        .args([
            "-c",
            "import site; print('\\n'.join(site.getsitepackages()))",
        ])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    for packages in site.lines() {
        let nvidia = std::path::Path::new(packages.trim()).join("nvidia");
        for entry in std::fs::read_dir(&nvidia).into_iter().flatten().flatten() {
            dirs.push(entry.path().join("lib"));
        }
    }
    let links = std::path::Path::new("target/cuda-libs");
    std::fs::create_dir_all(links).map_err(|e| format!("{}: {e}", links.display()))?;
    let mut path = vec![std::fs::canonicalize(links).map_err(|e| e.to_string())?];
    for lib in CUDA_LIBRARIES {
        let plain = format!("lib{lib}.so");
        let mut found = None;
        for dir in &dirs {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name == plain || name.starts_with(&format!("{plain}.")) {
                    let better = found
                        .as_ref()
                        .is_none_or(|(_, n): &(_, String)| n != &plain);
                    if better {
                        found = Some((dir.clone(), name));
                    }
                }
            }
        }
        match found {
            Some((dir, name)) => {
                eprintln!("xtask test-gpu: {plain}: {}", dir.join(&name).display());
                if name != plain {
                    let link = links.join(&plain);
                    let _ = std::fs::remove_file(&link);
                    #[cfg(unix)]
                    std::os::unix::fs::symlink(dir.join(&name), &link)
                        .map_err(|e| format!("link {}: {e}", link.display()))?;
                }
                if !path.contains(&dir) {
                    path.push(dir);
                }
            }
            None => eprintln!("xtask test-gpu: {plain}: not found (its tests will say so)"),
        }
    }
    let mut joined: Vec<String> = path.iter().map(|p| p.display().to_string()).collect();
    if let Ok(old) = std::env::var("LD_LIBRARY_PATH") {
        joined.push(old);
    }
    Ok(joined.join(":"))
}

fn test_gpu() -> Result<(), String> {
    let library_path = cuda_library_path()?;
    let env = [("LD_LIBRARY_PATH", library_path.as_str())];
    let _ = Command::new("nvidia-smi")
        .args([
            "--query-gpu=name,driver_version,memory.total",
            "--format=csv,noheader",
        ])
        .status();
    // Conformance and the GPU paths of every crate (device buffers, staged
    // uploads, codegen, CPU-vs-CUDA op and train-step conformance, the Nitro
    // handle training on the GPU), printing each skip or result. A failing
    // crate does not stop the others: GPU time is scarce.
    let mut failed = vec![];
    for (package, feature, targets) in GPU_TESTS {
        let mut args = vec![
            "test",
            "--release",
            "--package",
            package,
            "--features",
            feature,
        ];
        for t in targets {
            args.extend(["--test", t]);
        }
        args.extend(["--", "--nocapture"]);
        if let Err(e) = cargo(&args, &env) {
            eprintln!("xtask test-gpu: {e}");
            failed.push(package);
        }
    }
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
        &env,
    )?;
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("GPU tests failed in {}", failed.join(", ")))
    }
}

/// The GPU checks `gpu-bundle` packs: (package, feature, test targets).
const GPU_TESTS: [(&str, &str, &[&str]); 3] = [
    (
        "nitro-device",
        "nitro-device/cuda",
        &["cuda_device", "cuda_staging", "cuda_gemm_mapping"],
    ),
    (
        "nitro-graph",
        "nitro-graph/cuda",
        &["cuda_conformance", "cuda_codegen"],
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
