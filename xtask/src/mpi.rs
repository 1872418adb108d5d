//! What the multi-process checks of `cargo xtask ci` need: whether MPI is
//! installed, and the environment its launcher wants here. The checks
//! themselves run in `main.rs`, in one configuration with the CUDA feature:
//! nitro-device's and nitro-run's `mpi` feature linted and their
//! `mpirun -n 2` / `-n 3` tests run (`nitro-device/tests/mpi_ranks.rs`: the
//! collectives; `nitro-run/tests/ddp.rs`: data-parallel training, about a
//! minute on two cores). They need Open MPI and libclang (`.ci/run` installs
//! `libopenmpi-dev openmpi-bin libclang-dev`); without `mpirun` and `mpicc`
//! they are skipped with one line, so a machine with no MPI still runs every
//! other check.

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

/// CI runs as root in a container with fewer cores than ranks: Open MPI
/// refuses both unless told (the tests also pass `--oversubscribe`).
pub const ROOT: [(&str, &str); 2] = [
    ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
    ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
];
