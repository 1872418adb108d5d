//! The `digits_mlp` example binary, shared by the tests that drive the
//! standard CLI as a subprocess (`#[path]`-included, not a test target).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The example binary next to this test's directory
/// (`target/<profile>/examples/digits_mlp`). It is always (re)built first:
/// `cargo test` compiles examples without refreshing that path, so an
/// existing file may be a stale build of older code.
pub fn example() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let me = std::env::current_exe().expect("test exe path");
        let profile_dir = me
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>");
        let exe = profile_dir
            .join("examples")
            .join(format!("digits_mlp{}", std::env::consts::EXE_SUFFIX));
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build.args(["build", "-p", "nitro-run", "--example", "digits_mlp"]);
        // The binary gets this test's features (with `cuda`, `--device cuda`
        // runs; with `mpi`, it runs data-parallel under mpirun).
        let features: Vec<&str> = [
            ("cuda", cfg!(feature = "cuda")),
            ("mpi", cfg!(feature = "mpi")),
        ]
        .into_iter()
        .filter_map(|(f, on)| on.then_some(f))
        .collect();
        if !features.is_empty() {
            build.args(["--features", &features.join(",")]);
        }
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo build");
        assert!(status.success(), "building the digits_mlp example failed");
        exe
    })
}

pub fn run(args: &[&str]) -> Output {
    Command::new(example())
        .args(args)
        .output()
        .expect("run the digits_mlp example")
}
