//! Why a command did not do what was asked ([`CliError`]) and the exit
//! status of every error the command line returns ([`exit_code`]; the
//! table is in the `cli` module doc).

use std::path::PathBuf;

/// Why a command did not do what was asked, besides the errors of the
/// library it drives.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Training stopped early on request (Ctrl-C), after saving.
    #[error("interrupted at step {step}; {saved}")]
    Interrupted {
        /// Updates done.
        step: u64,
        /// What was saved and how to continue.
        saved: String,
    },
    /// A command that runs in one process was launched in a larger world.
    #[error("`{command}` runs in one process, and this job has {world}: run it without mpirun (only train, resume, eval and summary run data-parallel)")]
    OneProcess {
        /// The command.
        command: String,
        /// The job's world size.
        world: usize,
    },
    /// A command that needs trained params found none.
    #[error("`{command}`: no usable checkpoint in `{}` ({why}); train first: `{program} train --run-dir {}`", dir.display(), dir.display())]
    NoCheckpoint {
        /// The command.
        command: String,
        /// The run directory.
        dir: PathBuf,
        /// Missing directory, or no (intact) checkpoint in it.
        why: &'static str,
        /// The program's name, for the advice.
        program: String,
    },
}

/// The exit status for an error of [`run`](super::run) (see the module doc).
pub fn exit_code(e: &(dyn std::error::Error + 'static)) -> i32 {
    if let Some(e) = e.downcast_ref::<CliError>() {
        return match e {
            CliError::Interrupted { .. } => 130,
            CliError::NoCheckpoint { .. } => 3,
            CliError::OneProcess { .. } => 2,
        };
    }
    if let Some(e) = e.downcast_ref::<clap::Error>() {
        return e.exit_code();
    }
    let refused_value = e.downcast_ref::<nitro_markers::ConfigError>().is_some()
        || matches!(
            e.downcast_ref::<crate::RunError>(),
            Some(crate::RunError::Value(_))
        );
    if refused_value {
        2
    } else {
        1
    }
}
