//! The multi-process checks of `cargo xtask ci`: nitro-device's and
//! nitro-run's `mpi` feature linted and tested, their `mpirun -n 2` / `-n 3`
//! tests included (`nitro-device/tests/mpi_ranks.rs`: the collectives;
//! `nitro-run/tests/ddp.rs`: data-parallel training, about a minute on two
//! cores). They need Open MPI and libclang
//! (`.ci/run` installs `libopenmpi-dev openmpi-bin libclang-dev`); without
//! `mpirun` and `mpicc` they are skipped with one line, so a machine with
//! no MPI still runs every other check.

use std::process::Command;

fn found(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether MPI is installed (its launcher and the compiler wrapper the
/// `mpi` crate's build probes).
pub fn available() -> bool {
    found("mpirun") && found("mpicc")
}

/// Lint and test the `mpi` feature where MPI is installed.
pub fn checks(
    cargo: impl Fn(&[&str], &[(&str, &str)]) -> Result<(), String>,
) -> Result<(), String> {
    if !available() {
        eprintln!(
            "skipped: MPI checks (mpirun or mpicc not found; install libopenmpi-dev openmpi-bin libclang-dev)"
        );
        return Ok(());
    }
    cargo(
        &[
            "clippy",
            "--package",
            "nitro-device",
            "--all-targets",
            "--features",
            "mpi",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    cargo(
        &[
            "clippy",
            "--package",
            "nitro-run",
            "--all-targets",
            "--features",
            "mpi",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    // CI runs as root in a container with fewer cores than ranks: Open MPI
    // refuses both unless told (the tests also pass --oversubscribe).
    let root = [
        ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
        ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
    ];
    cargo(
        &["test", "--package", "nitro-device", "--features", "mpi"],
        &root,
    )?;
    // The rest of nitro-run's tests run in the main test step; here only
    // what the feature adds. One test at a time: each launches two ranks.
    cargo(
        &[
            "test",
            "--package",
            "nitro-run",
            "--features",
            "mpi",
            "--lib",
            "--test",
            "ddp",
            "--",
            "--test-threads",
            "1",
        ],
        &root,
    )
}
