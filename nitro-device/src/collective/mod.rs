//! Collectives between processes: the [`ProcessGroup`] a job's processes
//! form, and the [`Communicator`] that reduces, broadcasts and synchronises
//! host buffers between them.
//!
//! **Owns:** launcher detection ([`Launch`]), the group's identity (rank,
//! world size, local rank, [`Backend`]), the fixed reduction order
//! ([`order`]), the single-process communicator and, with the `mpi`
//! feature, the MPI one. **Does not own:** what is reduced (gradients,
//! metrics: nitro-graph's all-reduce op and nitro-run decide), nor device
//! buffers (NCCL is a later backend).
//!
//! [`ProcessGroup::from_env`] is the one entry point: under `mpirun -n N`
//! it joins the N-process MPI group; started alone it is a world of one
//! that needs no MPI. A build without the `mpi` feature has the same types;
//! there a launch of more than one process is refused with
//! [`CollectiveError::BuiltWithoutMpi`], never silently run as N copies.
//!
//! Every collective is bitwise deterministic (see [`order`]) and bounded in
//! time: a rank that dies or hangs makes the others return
//! [`CollectiveError::LostRanks`] naming it within the group's timeout
//! ([`DEFAULT_TIMEOUT`], or `NITRO_COLLECTIVE_TIMEOUT_S`), never a hang.
//!
//! ```
//! use nitro_device::collective::{Backend, ProcessGroup};
//! use nitro_device::HostBuffer;
//! let group = ProcessGroup::single();
//! assert_eq!((group.rank(), group.world_size(), group.backend()), (0, 1, Backend::Single));
//! let mut grads = HostBuffer::from(vec![1.5f32, -2.0]);
//! group.all_reduce_sum(&mut grads)?; // a world of one: the identity
//! assert_eq!(grads, HostBuffer::from(vec![1.5f32, -2.0]));
//! # Ok::<(), nitro_device::collective::CollectiveError>(())
//! ```

mod error;
mod launch;
#[cfg(feature = "mpi")]
mod mpi;
pub mod order;

pub use error::CollectiveError;
pub use launch::Launch;

use crate::{DType, HostBuffer};
use std::sync::Arc;
use std::time::Duration;

/// How long a collective waits for the other ranks before naming the
/// missing ones. The issue's bound is 30 s from a rank's loss to every
/// other rank's exit; 20 s of waiting leaves 10 s to report and exit.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(20);

/// The variable that overrides [`DEFAULT_TIMEOUT`] (seconds, fractional
/// allowed), for jobs where a rank legitimately stalls longer (a slow
/// checkpoint disk) or tests that want a fast failure.
pub const TIMEOUT_VAR: &str = "NITRO_COLLECTIVE_TIMEOUT_S";

/// The transport under a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// One process: every collective is local.
    Single,
    /// MPI point-to-point messages between host processes.
    Mpi,
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Single => "single",
            Backend::Mpi => "mpi",
        })
    }
}

/// Collectives over host buffers. Every rank must make the same calls in
/// the same order with buffers of the same dtype and length.
pub trait Communicator: Send + Sync + std::fmt::Debug {
    /// This process's rank, `0..world_size`.
    fn rank(&self) -> usize;
    /// Processes in the group.
    fn world_size(&self) -> usize;
    /// The transport.
    fn backend(&self) -> Backend;
    /// Replace `buf` by the element-wise sum of every rank's `buf`, added
    /// in rank order ([`order`]): bitwise equal on every rank. f32, f64,
    /// i32 and i64 only.
    fn all_reduce_sum(&self, buf: &mut HostBuffer) -> Result<(), CollectiveError>;
    /// [`Communicator::all_reduce_sum`] of the concatenation of `parts`,
    /// written to `buf`: the parts are the bytes of consecutive runs of
    /// `buf`'s elements (its dtype, `buf.len()` elements in all). A
    /// program's flat gradient buffer is such a concatenation; a transport
    /// that copies its buffer anyway (MPI's shared window) copies the parts
    /// instead, so the concatenation is never written on its own. The
    /// default concatenates into `buf`, then reduces it.
    fn all_reduce_sum_parts(
        &self,
        parts: &[&[u8]],
        buf: &mut HostBuffer,
    ) -> Result<(), CollectiveError> {
        concat_parts(parts, buf)?;
        self.all_reduce_sum(buf)
    }
    /// Memory where this rank may write its contribution to its next
    /// all-reduce (of `len` elements of `dtype`) in place, if the
    /// transport has such memory (MPI's shared window on one machine): a
    /// program computes its gradients straight into it, then calls
    /// [`Communicator::all_reduce_sum_staged`], and the contribution is
    /// never copied. `None` (the default): use the other calls. Every rank
    /// makes the same calls (this one may be collective), and no other
    /// collective of this communicator comes between the two.
    fn stage(&self, dtype: DType, len: usize) -> Result<Option<Staged>, CollectiveError> {
        let _ = (dtype, len);
        Ok(None)
    }
    /// Sum every rank's contribution, written where [`Communicator::stage`]
    /// said, into `buf` (of the staged dtype and length).
    fn all_reduce_sum_staged(
        &self,
        staged: Staged,
        buf: &mut HostBuffer,
    ) -> Result<(), CollectiveError> {
        let _ = buf;
        Err(CollectiveError::Staged {
            rank: self.rank(),
            reason: format!(
                "this communicator stages nothing, but got {} staged bytes",
                staged.bytes
            ),
        })
    }
    /// Replace `buf` on every rank by rank `root`'s (any dtype).
    fn broadcast(&self, buf: &mut HostBuffer, root: usize) -> Result<(), CollectiveError>;
    /// Return once every rank has entered the barrier.
    fn barrier(&self) -> Result<(), CollectiveError>;
}

/// A contribution staged in a transport's own memory by
/// [`Communicator::stage`]: write `bytes()` bytes at `ptr()`, then pass it
/// to [`Communicator::all_reduce_sum_staged`].
#[derive(Debug)]
pub struct Staged {
    ptr: *mut u8,
    bytes: usize,
    /// Which call of the communicator it is for (the transport's ticket).
    call: u64,
}

// SAFETY: a Staged is an address in memory mapped for the whole process;
// writing it from the threads of one program call is the point.
unsafe impl Send for Staged {}
// SAFETY: as for Send.
unsafe impl Sync for Staged {}

impl Staged {
    /// A staging area of `bytes` bytes at `ptr` for the transport's call
    /// `call`.
    ///
    /// # Safety
    /// `ptr` must be valid for writes of `bytes` bytes, from any thread of
    /// the process, until the staged all-reduce has returned; and nothing
    /// else may write there meanwhile. A program writes its contribution
    /// there through this promise.
    pub unsafe fn new(ptr: *mut u8, bytes: usize, call: u64) -> Staged {
        Staged { ptr, bytes, call }
    }
    /// Where the contribution goes.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    /// Its size in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    /// The transport's ticket: which of its calls this is for.
    pub fn call(&self) -> u64 {
        self.call
    }
}

/// `buf = parts[0] ++ parts[1] ++ ...`, refusing parts whose bytes do
/// not fill `buf` exactly, and buffers of a dtype the all-reduce does not
/// sum (whose bit patterns are not all values).
pub fn concat_parts(parts: &[&[u8]], buf: &mut HostBuffer) -> Result<(), CollectiveError> {
    if !summable(buf.dtype()) {
        return Err(CollectiveError::DType {
            op: "all_reduce_sum_parts",
            dtype: buf.dtype(),
        });
    }
    let bytes = buf.as_bytes_mut();
    let total: usize = parts.iter().map(|p| p.len()).sum();
    if total != bytes.len() {
        return Err(CollectiveError::Parts {
            bytes: total,
            expected: bytes.len(),
        });
    }
    let mut at = 0;
    for part in parts {
        bytes[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    Ok(())
}

/// Whether [`Communicator::all_reduce_sum`] sums `dtype`.
pub fn summable(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F64 | DType::I32 | DType::I64)
}

/// The communicator of a world of one: reductions and broadcasts are the
/// identity (after the same checks a real group makes, so a program that
/// passes here does not fail only when scaled out).
#[derive(Debug, Default)]
pub struct SingleProcess;

impl Communicator for SingleProcess {
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        1
    }
    fn backend(&self) -> Backend {
        Backend::Single
    }
    fn all_reduce_sum(&self, buf: &mut HostBuffer) -> Result<(), CollectiveError> {
        if !summable(buf.dtype()) {
            return Err(CollectiveError::DType {
                op: "all_reduce_sum",
                dtype: buf.dtype(),
            });
        }
        Ok(())
    }
    fn broadcast(&self, _buf: &mut HostBuffer, root: usize) -> Result<(), CollectiveError> {
        if root != 0 {
            return Err(CollectiveError::Root {
                root,
                world_size: 1,
            });
        }
        Ok(())
    }
    fn barrier(&self) -> Result<(), CollectiveError> {
        Ok(())
    }
}

/// The processes of one job: who this one is, and the communicator to the
/// others. Cheap to clone (the communicator is shared); MPI is finalised
/// when the last clone drops.
#[derive(Clone, Debug)]
pub struct ProcessGroup {
    local_rank: usize,
    comm: Arc<dyn Communicator>,
}

impl ProcessGroup {
    /// A world of one, with no MPI.
    pub fn single() -> ProcessGroup {
        ProcessGroup {
            local_rank: 0,
            comm: Arc::new(SingleProcess),
        }
    }

    /// A group over any communicator (a test double, a future backend).
    pub fn with_communicator(comm: Arc<dyn Communicator>, local_rank: usize) -> ProcessGroup {
        ProcessGroup { local_rank, comm }
    }

    /// The group this process was launched into: the MPI world under
    /// `mpirun` (feature `mpi`), a world of one when no launcher started
    /// it. Without the feature, a launch of more than one process is
    /// [`CollectiveError::BuiltWithoutMpi`]. MPI can be joined once per
    /// process: keep (and clone) the group.
    pub fn from_env() -> Result<ProcessGroup, CollectiveError> {
        let launch = Launch::from_env()?;
        ProcessGroup::join(launch, timeout_from_env()?)
    }

    /// [`ProcessGroup::from_env`] for an already detected launch and a
    /// chosen timeout.
    pub fn join(
        launch: Option<Launch>,
        timeout: Duration,
    ) -> Result<ProcessGroup, CollectiveError> {
        let Some(launch) = launch else {
            return Ok(ProcessGroup::single());
        };
        #[cfg(feature = "mpi")]
        {
            let (comm, local_rank) = mpi::MpiCommunicator::init(&launch, timeout)?;
            Ok(ProcessGroup {
                local_rank,
                comm: Arc::new(comm),
            })
        }
        #[cfg(not(feature = "mpi"))]
        {
            let _ = timeout;
            if launch.world_size > 1 {
                return Err(CollectiveError::BuiltWithoutMpi {
                    launcher: launch.launcher,
                    world_size: launch.world_size,
                });
            }
            Ok(ProcessGroup::single())
        }
    }

    /// This process's rank, `0..world_size`.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// Processes in the group.
    pub fn world_size(&self) -> usize {
        self.comm.world_size()
    }

    /// This process's rank among the group's processes on its host (which
    /// GPU it takes).
    pub fn local_rank(&self) -> usize {
        self.local_rank
    }

    /// The transport.
    pub fn backend(&self) -> Backend {
        self.comm.backend()
    }

    /// Whether this is rank 0, the one that writes files and logs.
    pub fn is_root(&self) -> bool {
        self.rank() == 0
    }

    /// The communicator, to hand to a compiled program's run.
    pub fn communicator(&self) -> &Arc<dyn Communicator> {
        &self.comm
    }

    /// See [`Communicator::all_reduce_sum`].
    pub fn all_reduce_sum(&self, buf: &mut HostBuffer) -> Result<(), CollectiveError> {
        self.comm.all_reduce_sum(buf)
    }

    /// See [`Communicator::broadcast`].
    pub fn broadcast(&self, buf: &mut HostBuffer, root: usize) -> Result<(), CollectiveError> {
        self.comm.broadcast(buf, root)
    }

    /// See [`Communicator::barrier`].
    pub fn barrier(&self) -> Result<(), CollectiveError> {
        self.comm.barrier()
    }
}

impl std::fmt::Display for ProcessGroup {
    /// `rank 1 of 4 (local 1, mpi)`: for config reports and log prefixes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rank {} of {} (local {}, {})",
            self.rank(),
            self.world_size(),
            self.local_rank,
            self.backend()
        )
    }
}

/// The collective timeout: [`TIMEOUT_VAR`] when set, else [`DEFAULT_TIMEOUT`].
pub fn timeout_from_env() -> Result<Duration, CollectiveError> {
    match std::env::var(TIMEOUT_VAR) {
        Err(_) => Ok(DEFAULT_TIMEOUT),
        Ok(v) => v
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s > 0.0)
            .map(Duration::from_secs_f64)
            .ok_or(CollectiveError::BadEnv {
                var: TIMEOUT_VAR.to_string(),
                value: v,
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_world_of_one_is_the_identity_and_checks_like_a_group() {
        let g = ProcessGroup::single();
        assert_eq!(g.to_string(), "rank 0 of 1 (local 0, single)");
        assert!(g.is_root());
        let mut b = HostBuffer::from(vec![1.0f64, -0.0]);
        g.all_reduce_sum(&mut b).unwrap();
        g.broadcast(&mut b, 0).unwrap();
        g.barrier().unwrap();
        assert_eq!(b, HostBuffer::from(vec![1.0f64, -0.0]));
        let e = g
            .all_reduce_sum(&mut HostBuffer::from(vec![true]))
            .unwrap_err();
        assert!(e.to_string().contains("all_reduce_sum of bool"), "{e}");
        let e = g.broadcast(&mut b, 1).unwrap_err();
        assert!(e.to_string().contains("root 1"), "{e}");
    }

    #[test]
    fn no_launcher_joins_a_world_of_one() {
        let g = ProcessGroup::join(None, DEFAULT_TIMEOUT).unwrap();
        assert_eq!((g.world_size(), g.backend()), (1, Backend::Single));
    }

    #[cfg(not(feature = "mpi"))]
    #[test]
    fn a_multi_process_launch_without_mpi_is_refused() {
        let launch = Launch {
            launcher: "Open MPI",
            world_size: 2,
            rank: 1,
            local_rank: Some(1),
        };
        let e = ProcessGroup::join(Some(launch.clone()), DEFAULT_TIMEOUT).unwrap_err();
        assert!(
            e.to_string()
                .contains("built without MPI: rebuild with --features mpi"),
            "{e}"
        );
        let one = Launch {
            world_size: 1,
            rank: 0,
            ..launch
        };
        assert_eq!(
            ProcessGroup::join(Some(one), DEFAULT_TIMEOUT)
                .unwrap()
                .world_size(),
            1
        );
    }
}
