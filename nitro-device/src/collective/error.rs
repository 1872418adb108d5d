//! Errors of the process group and its collectives.

use crate::DType;
use std::time::Duration;

/// What went wrong joining a process group or running a collective.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CollectiveError {
    /// The environment says this process is one of several launched by an
    /// MPI launcher, but this build has no MPI.
    #[error(
        "this process was launched by {launcher} as one of {world_size} processes, but nitro was \
         built without MPI: rebuild with --features mpi (or run without the launcher for one process)"
    )]
    BuiltWithoutMpi {
        /// The launcher the environment names (`Open MPI`, `PMI`).
        launcher: &'static str,
        /// The world size the launcher announced.
        world_size: usize,
    },
    /// A launcher variable holds something that is not a number.
    #[error("environment variable {var}={value:?} is not a non-negative integer (set by the MPI launcher; unset it to run one process)")]
    BadEnv {
        /// The variable.
        var: String,
        /// Its value.
        value: String,
    },
    /// MPI could not be initialised, or was initialised twice.
    #[error("MPI initialisation failed: {0}")]
    Init(String),
    /// An MPI call returned an error code.
    #[error("rank {rank}: MPI error in {op}{peer}: {message} (code {code})", peer = peer.map(|p| format!(" with rank {p}")).unwrap_or_default())]
    Mpi {
        /// This process's rank.
        rank: usize,
        /// The collective (`all_reduce_sum`, `broadcast`, `barrier`).
        op: &'static str,
        /// The rank the failing operation talked to, when one did.
        peer: Option<usize>,
        /// MPI's error code.
        code: i32,
        /// MPI's own message for it.
        message: String,
    },
    /// Ranks did not take part in a collective within the timeout: they
    /// died or hang. The job cannot continue.
    #[error(
        "rank {rank}: {op} timed out after {:.1} s waiting for {}: lost rank {} (it died or hangs); \
         the job cannot continue (raise NITRO_COLLECTIVE_TIMEOUT_S if a rank is legitimately slow)",
        waited.as_secs_f64(),
        lost_list(lost),
        lost.first().copied().unwrap_or(usize::MAX)
    )]
    LostRanks {
        /// This process's rank.
        rank: usize,
        /// The collective.
        op: &'static str,
        /// The ranks that never answered, ascending.
        lost: Vec<usize>,
        /// How long it waited.
        waited: Duration,
    },
    /// Ranks called a collective with buffers of different lengths.
    #[error("rank {rank}: {op} got {got} elements from rank {peer} where it expected {expected}: every rank must pass a buffer of the same dtype and length")]
    Length {
        /// This process's rank.
        rank: usize,
        /// The collective.
        op: &'static str,
        /// The rank that sent the odd buffer.
        peer: usize,
        /// Elements expected.
        expected: usize,
        /// Elements received.
        got: usize,
    },
    /// A dtype the collective does not reduce.
    #[error(
        "{op} of {dtype} is not supported: sums are defined for f32, f64, i32 and i64 (cast first)"
    )]
    DType {
        /// The collective.
        op: &'static str,
        /// The buffer's dtype.
        dtype: DType,
    },
    /// A buffer too large for one MPI message.
    #[error("{op} of {bytes} bytes exceeds one MPI message (2^31 - 1 elements per chunk): split the buffer")]
    TooLarge {
        /// The collective.
        op: &'static str,
        /// The buffer's size in bytes.
        bytes: usize,
    },
    /// The parts of a concatenated all-reduce do not fill its buffer.
    #[error("all_reduce_sum_parts got parts of {bytes} bytes for a buffer of {expected}: the parts must be the buffer's elements, all of them")]
    Parts {
        /// The parts' bytes in all.
        bytes: usize,
        /// The buffer's bytes.
        expected: usize,
    },
    /// A staged all-reduce that does not match its staging.
    #[error("rank {rank}: staged all_reduce_sum refused: {reason}")]
    Staged {
        /// This process's rank.
        rank: usize,
        /// What did not match.
        reason: String,
    },
    /// A broadcast root outside the world.
    #[error("broadcast root {root} is not a rank of a world of {world_size}")]
    Root {
        /// The root asked for.
        root: usize,
        /// The world size.
        world_size: usize,
    },
    /// An earlier collective failed; the group cannot be used any more.
    #[error("rank {rank}: {op} on a process group broken by an earlier failure ({cause}); the job must restart")]
    Broken {
        /// This process's rank.
        rank: usize,
        /// The collective asked for now.
        op: &'static str,
        /// The first failure.
        cause: String,
    },
}

fn lost_list(lost: &[usize]) -> String {
    let names: Vec<String> = lost.iter().map(|r| r.to_string()).collect();
    match names.len() {
        1 => format!("rank {}", names[0]),
        _ => format!("ranks {}", names.join(", ")),
    }
}
