//! The MPI communicator (feature `mpi`): the fixed-order all-reduce of
//! [`super::order`] over MPI point-to-point messages ([`exchange`]), or,
//! when every rank runs on this machine, through an MPI shared-memory
//! window ([`shm`]), with every wait bounded.
//!
//! Why point-to-point and not `MPI_Allreduce`: MPI picks its reduction
//! algorithm by message size and process count, so neither the order of the
//! additions nor bitwise equality across ranks is promised; and a blocking
//! collective cannot be abandoned when a peer dies or hangs. Here every
//! message is non-blocking (`MPI_Isend` / `MPI_Irecv`) and polled with
//! `MPI_Test` until it completes or the group's timeout passes; the
//! requests still pending then name the lost ranks. The communicator's
//! error handler is `MPI_ERRORS_RETURN`, so an MPI failure is an error
//! value, never an abort of the job.
//!
//! After a failure the group is *broken*: later calls are refused, and MPI
//! is not finalised at drop (finalising waits for the lost peer). Buffers
//! that pending requests may still touch are leaked, never freed under
//! MPI's feet: a failure ends the job, so the leak is bounded.
//!
//! Calls are serialised by a mutex (MPI is initialised with
//! `MPI_THREAD_SERIALIZED`): a program may run its collective on any
//! thread, one at a time.

mod exchange;
mod shm;

use super::order::{chunk_range, sum_into_own, Summable};
use super::{summable, Backend, CollectiveError, Communicator, Launch, Staged};
use crate::{DType, HostBuffer};
use exchange::Exchange;
use mpi::environment::{Threading, Universe};
use mpi::ffi;
use mpi::topology::Communicator as _;
use shm::Contribution;
use std::os::raw::c_int;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Message tags: one per phase, so that the two phases of one all-reduce
/// and a broadcast never match each other's messages (MPI keeps the order
/// of messages between two ranks with one tag, so successive calls of one
/// collective need no more).
const TAG_REDUCE: c_int = 101;
const TAG_GATHER: c_int = 102;
const TAG_BROADCAST: c_int = 103;

/// The MPI world of this process.
pub(super) struct MpiCommunicator {
    rank: usize,
    world_size: usize,
    timeout: Duration,
    /// `MPI_COMM_WORLD` duplicated, so that nitro's messages never match a
    /// user's own MPI traffic.
    comm: ffi::MPI_Comm,
    /// Serialises MPI calls; holds the first failure once there is one.
    state: Mutex<Option<String>>,
    /// The all-reduce's receive buffers, kept between calls.
    scratch: Mutex<Scratch>,
    /// The node-local path (see [`shm`]), when every rank shares this node.
    shared: Mutex<shm::Shared>,
    universe: Option<Universe>,
}

// SAFETY: the raw communicator handle is only used under `state`'s lock,
// and MPI was initialised with at least MPI_THREAD_SERIALIZED, which allows
// calls from any thread as long as they do not overlap.
unsafe impl Send for MpiCommunicator {}
// SAFETY: as for Send: every MPI call is made under `state`'s lock.
unsafe impl Sync for MpiCommunicator {}

impl std::fmt::Debug for MpiCommunicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MpiCommunicator(rank {} of {}, timeout {:?})",
            self.rank, self.world_size, self.timeout
        )
    }
}

impl Drop for MpiCommunicator {
    fn drop(&mut self) {
        let broken = self.state.get_mut().map_or(true, |s| s.is_some());
        if broken {
            // MPI_Finalize synchronises with every peer; a lost one would
            // hang it. The job fails anyway: exit without finalising.
            std::mem::forget(self.universe.take());
        } else {
            // The shared window, if any, is left to MPI_Finalize and the
            // process's exit: freeing it would wait for every rank, as
            // finalising does right after anyway.
            // SAFETY: `comm` came from MPI_Comm_dup and is freed once.
            unsafe { ffi::MPI_Comm_free(&mut self.comm) };
        }
    }
}

fn error_string(code: c_int) -> String {
    let mut buf = vec![0u8; ffi::MPI_MAX_ERROR_STRING as usize + 1];
    let mut len: c_int = 0;
    // SAFETY: the buffer holds MPI_MAX_ERROR_STRING characters, as required.
    unsafe { ffi::MPI_Error_string(code, buf.as_mut_ptr().cast(), &mut len) };
    buf.truncate(len.max(0) as usize);
    String::from_utf8_lossy(&buf).into_owned()
}

/// An MPI element type.
trait MpiElement: Copy {
    fn datatype() -> ffi::MPI_Datatype;
}

macro_rules! mpi_element {
    ($t:ty, $d:ident) => {
        impl MpiElement for $t {
            fn datatype() -> ffi::MPI_Datatype {
                // SAFETY: an extern constant of the MPI shim, set at link time.
                unsafe { ffi::$d }
            }
        }
    };
}
mpi_element!(f32, RSMPI_FLOAT);
mpi_element!(f64, RSMPI_DOUBLE);
mpi_element!(i32, RSMPI_INT32_T);
mpi_element!(i64, RSMPI_INT64_T);
mpi_element!(u8, RSMPI_UINT8_T);

/// Receive buffers of the all-reduce, one per summable dtype.
#[derive(Default)]
struct Scratch {
    f32: Vec<f32>,
    f64: Vec<f64>,
    i32: Vec<i32>,
    i64: Vec<i64>,
}

/// Wait a little before polling again, in a wait that began at `started`.
///
/// Yield-spin through the first milliseconds: a train step's peer usually
/// arrives within them (ranks drift by a fraction of a step), and a sleep's
/// wake-up latency (~60-100 us) would be paid at every synchronisation;
/// yielding still gives this core to any other runnable thread. Then back
/// off, so a long wait (a rank checkpointing, a lost rank) leaves the cores
/// to the ones still computing.
fn pause(started: Instant) {
    let waited = started.elapsed();
    if waited < SPIN_FOR {
        std::thread::yield_now();
    } else if waited < Duration::from_millis(200) {
        std::thread::sleep(Duration::from_micros(50));
    } else {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// How long a collective yield-spins before it sleeps between polls.
const SPIN_FOR: Duration = Duration::from_millis(5);

impl MpiCommunicator {
    /// Initialise MPI for `launch` and return the world with this
    /// process's local rank.
    pub(super) fn init(
        launch: &Launch,
        timeout: Duration,
    ) -> Result<(MpiCommunicator, usize), CollectiveError> {
        let (universe, provided) = mpi::initialize_with_threading(Threading::Serialized)
            .ok_or_else(|| {
                CollectiveError::Init(
                    "MPI is already initialised in this process: join the group once \
                     (ProcessGroup::from_env) and clone it"
                        .into(),
                )
            })?;
        if matches!(provided, Threading::Single | Threading::Funneled) {
            return Err(CollectiveError::Init(format!(
                "this MPI provides threading level {provided:?}; nitro needs MPI_THREAD_SERIALIZED"
            )));
        }
        let world = universe.world();
        let (rank, world_size) = (world.rank() as usize, world.size() as usize);
        if world_size != launch.world_size || rank != launch.rank {
            return Err(CollectiveError::Init(format!(
                "{} announced rank {} of {}, but MPI reports rank {rank} of {world_size}: \
                 is the binary linked against another MPI than the launcher's?",
                launch.launcher, launch.rank, launch.world_size
            )));
        }
        let node = world.split_shared(rank as c_int);
        let local_rank = node.rank() as usize;
        let shared = shm::Shared::for_node(node.size() as usize == world_size);
        // SAFETY: MPI is initialised; COMM_WORLD and ERRORS_RETURN are the
        // shim's constants, and `comm` receives a new handle.
        let comm = unsafe {
            let code =
                ffi::MPI_Comm_set_errhandler(ffi::RSMPI_COMM_WORLD, ffi::RSMPI_ERRORS_RETURN);
            if code != ffi::MPI_SUCCESS as c_int {
                return Err(CollectiveError::Init(error_string(code)));
            }
            let mut comm = ffi::RSMPI_COMM_WORLD;
            let code = ffi::MPI_Comm_dup(ffi::RSMPI_COMM_WORLD, &mut comm);
            if code != ffi::MPI_SUCCESS as c_int {
                return Err(CollectiveError::Init(error_string(code)));
            }
            // Inherited from the world by the duplicate, but say it.
            ffi::MPI_Comm_set_errhandler(comm, ffi::RSMPI_ERRORS_RETURN);
            comm
        };
        let group = MpiCommunicator {
            rank,
            world_size,
            timeout,
            comm,
            state: Mutex::new(None),
            scratch: Mutex::new(Scratch::default()),
            shared: Mutex::new(shared),
            universe: Some(universe),
        };
        // A failure marks the group broken, so that dropping it skips the
        // finalisation a lost peer would hang.
        group.guarded("start-up", || group.settle_shared())?;
        Ok((group, local_rank))
    }

    /// Run `body` under the lock, refusing once the group is broken and
    /// marking it broken when `body` fails.
    fn guarded(
        &self,
        op: &'static str,
        body: impl FnOnce() -> Result<(), CollectiveError>,
    ) -> Result<(), CollectiveError> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(cause) = state.as_ref() {
            return Err(CollectiveError::Broken {
                rank: self.rank,
                op,
                cause: cause.clone(),
            });
        }
        let result = body();
        if let Err(e) = &result {
            *state = Some(e.to_string());
        }
        result
    }

    /// The owner all-reduce of `data` (see [`super::order`]). `scratch`
    /// receives the peers' parts of this rank's chunk; it is kept between
    /// calls (a fresh zeroed buffer per call cost a memset and page faults
    /// of half the gradient every step).
    fn all_reduce<T: Summable + MpiElement>(
        &self,
        op: &'static str,
        data: &mut Vec<T>,
        scratch: &mut Vec<T>,
    ) -> Result<(), CollectiveError> {
        let (me, world, n) = (self.rank, self.world_size, data.len());
        let started = Instant::now();
        // The buffers are moved out for the exchange (no copy): pending
        // messages read and write `work` and `parts`, never memory the
        // caller gets back, so a failure leaks them (leaving the caller an
        // empty buffer) instead of freeing them under MPI.
        let mut work: Vec<T> = std::mem::take(data);
        let mut parts: Vec<T> = std::mem::take(scratch);
        let mine = chunk_range(n, world, me);
        // One part per rank, this rank's own unused: the owner's chunk is
        // at most one element longer than any other's.
        parts.resize(world * mine.len(), T::default());
        let outcome = (|| {
            let mut ex = Exchange::new(self, op);
            let len = mine.len();
            for q in (0..world).filter(|&q| q != me) {
                // SAFETY: `work` and `parts` outlive the wait, or are
                // leaked below when it fails.
                unsafe {
                    ex.recv(&mut parts[q * len..(q + 1) * len], q, TAG_REDUCE)?;
                    ex.send(&work[chunk_range(n, world, q)], q, TAG_REDUCE)?;
                }
            }
            ex.wait::<T>(started)?;
            // This rank's chunk, summed in rank order in place: its own
            // part is read element by element before it is overwritten.
            let others: Vec<Option<&[T]>> = (0..world)
                .map(|q| (q != me).then(|| &parts[q * len..(q + 1) * len]))
                .collect();
            sum_into_own(&others, &mut work[mine.clone()]);
            let mut ex = Exchange::new(self, op);
            let base = work.as_mut_ptr();
            for q in (0..world).filter(|&q| q != me) {
                let theirs = chunk_range(n, world, q);
                // SAFETY: the chunks of `work` are disjoint; the one sent
                // is only read and the others only written while pending,
                // and `work` outlives the wait or is leaked.
                unsafe {
                    let into = std::slice::from_raw_parts_mut(base.add(theirs.start), theirs.len());
                    ex.recv(into, q, TAG_GATHER)?;
                    let from = std::slice::from_raw_parts(base.add(mine.start), mine.len());
                    ex.send(from, q, TAG_GATHER)?;
                }
            }
            ex.wait::<T>(started)
        })();
        match outcome {
            Ok(()) => {
                *data = work;
                *scratch = parts;
                Ok(())
            }
            Err(e) => {
                std::mem::forget((work, parts));
                Err(e)
            }
        }
    }

    fn broadcast_bytes(&self, bytes: &mut [u8], root: usize) -> Result<(), CollectiveError> {
        let started = Instant::now();
        let mut staged: Vec<u8> = bytes.to_vec();
        let outcome = (|| {
            let mut ex = Exchange::new(self, "broadcast");
            if self.rank == root {
                for q in (0..self.world_size).filter(|&q| q != root) {
                    // SAFETY: `staged` outlives the wait or is leaked.
                    unsafe { ex.send(&staged, q, TAG_BROADCAST)? };
                }
            } else {
                // SAFETY: as above.
                unsafe { ex.recv(&mut staged, root, TAG_BROADCAST)? };
            }
            ex.wait::<u8>(started)
        })();
        match outcome {
            Ok(()) => {
                bytes.copy_from_slice(&staged);
                Ok(())
            }
            Err(e) => {
                std::mem::forget(staged);
                Err(e)
            }
        }
    }
}

impl MpiCommunicator {
    /// The sum of every rank's contribution into `buf`: `buf` itself, the
    /// concatenation of parts (see [`Communicator::all_reduce_sum_parts`]),
    /// or a staged one (see [`Communicator::stage`]); through the shared
    /// window when the group has one, else by messages.
    fn reduce(&self, buf: &mut HostBuffer, from: Contribution<'_>) -> Result<(), CollectiveError> {
        let op = "all_reduce_sum";
        if !summable(buf.dtype()) {
            return Err(CollectiveError::DType {
                op,
                dtype: buf.dtype(),
            });
        }
        let bytes = buf.len() * buf.dtype().size_of();
        if let Contribution::Parts(parts) = from {
            let got: usize = parts.iter().map(|p| p.len()).sum();
            if got != bytes {
                return Err(CollectiveError::Parts {
                    bytes: got,
                    expected: bytes,
                });
            }
        }
        if self.world_size == 1 {
            return match from {
                Contribution::Parts(parts) => super::concat_parts(parts, buf),
                _ => Ok(()),
            };
        }
        self.guarded(op, || {
            let mut shared = self.shared.lock().unwrap_or_else(|p| p.into_inner());
            let done = match buf {
                HostBuffer::F32(v) => self.shared_all_reduce(op, v, from, &mut shared)?,
                HostBuffer::F64(v) => self.shared_all_reduce(op, v, from, &mut shared)?,
                HostBuffer::I32(v) => self.shared_all_reduce(op, v, from, &mut shared)?,
                HostBuffer::I64(v) => self.shared_all_reduce(op, v, from, &mut shared)?,
                _ => unreachable!("checked summable above"),
            };
            if done {
                return Ok(());
            }
            if let Contribution::Parts(parts) = from {
                super::concat_parts(parts, buf)?;
            }
            let mut s = self.scratch.lock().unwrap_or_else(|p| p.into_inner());
            match buf {
                HostBuffer::F32(v) => self.all_reduce(op, v, &mut s.f32),
                HostBuffer::F64(v) => self.all_reduce(op, v, &mut s.f64),
                HostBuffer::I32(v) => self.all_reduce(op, v, &mut s.i32),
                HostBuffer::I64(v) => self.all_reduce(op, v, &mut s.i64),
                _ => unreachable!("checked summable above"),
            }
        })
    }
}

impl Communicator for MpiCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world_size
    }

    fn backend(&self) -> Backend {
        Backend::Mpi
    }

    fn all_reduce_sum(&self, buf: &mut HostBuffer) -> Result<(), CollectiveError> {
        self.reduce(buf, Contribution::Data)
    }

    fn all_reduce_sum_parts(
        &self,
        parts: &[&[u8]],
        buf: &mut HostBuffer,
    ) -> Result<(), CollectiveError> {
        self.reduce(buf, Contribution::Parts(parts))
    }

    fn stage(&self, dtype: DType, len: usize) -> Result<Option<Staged>, CollectiveError> {
        if !summable(dtype) || self.world_size == 1 {
            return Ok(None);
        }
        let op = "all_reduce_sum";
        let mut staged = None;
        self.guarded(op, || {
            let mut shared = self.shared.lock().unwrap_or_else(|p| p.into_inner());
            staged = self.stage_shared(op, len * dtype.size_of(), &mut shared)?;
            Ok(())
        })?;
        Ok(staged)
    }

    fn all_reduce_sum_staged(
        &self,
        staged: Staged,
        buf: &mut HostBuffer,
    ) -> Result<(), CollectiveError> {
        let bytes = buf.len() * buf.dtype().size_of();
        if staged.bytes() != bytes {
            return Err(CollectiveError::Staged {
                rank: self.rank,
                reason: format!("{} bytes staged for a buffer of {bytes}", staged.bytes()),
            });
        }
        self.reduce(
            buf,
            Contribution::Staged {
                call: staged.call(),
                at: staged.ptr(),
            },
        )
    }

    fn broadcast(&self, buf: &mut HostBuffer, root: usize) -> Result<(), CollectiveError> {
        if root >= self.world_size {
            return Err(CollectiveError::Root {
                root,
                world_size: self.world_size,
            });
        }
        if self.world_size == 1 {
            return Ok(());
        }
        // A bool buffer must receive only 0/1 bytes: every rank passes the
        // same dtype (a length check would not see a dtype mismatch of
        // equal byte size, so it is the contract, as for MPI itself).
        self.guarded("broadcast", || {
            self.broadcast_bytes(buf.as_bytes_mut(), root)
        })
    }

    fn barrier(&self) -> Result<(), CollectiveError> {
        if self.world_size == 1 {
            return Ok(());
        }
        // An all-reduce of nothing: every pair of ranks exchanges an empty
        // message, so no rank leaves before all arrived, and a missing one
        // is named by every other.
        self.guarded("barrier", || {
            self.all_reduce::<i32>("barrier", &mut Vec::new(), &mut Vec::new())
        })
    }
}
