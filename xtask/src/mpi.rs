//! The multi-process checks of `cargo xtask ci`: nitro-device's `mpi`
//! feature linted and tested, its `mpirun -n 2` / `-n 3` tests included
//! (`nitro-device/tests/mpi_ranks.rs`). They need Open MPI and libclang
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

/// Lint and test the `mpi` feature where MPI is installed.
pub fn checks(
    cargo: impl Fn(&[&str], &[(&str, &str)]) -> Result<(), String>,
) -> Result<(), String> {
    if !found("mpirun") || !found("mpicc") {
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
    // CI runs as root in a container with fewer cores than ranks: Open MPI
    // refuses both unless told (the tests also pass --oversubscribe).
    cargo(
        &["test", "--package", "nitro-device", "--features", "mpi"],
        &[
            ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
            ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
        ],
    )
}
