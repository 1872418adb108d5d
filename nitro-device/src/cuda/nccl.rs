//! NCCL: the all-reduce of device buffers between the processes of a
//! data-parallel job, one GPU per process (as PyTorch DDP, Horovod and JAX
//! multi-process run it).
//!
//! **Owns:** loading libnccl without a panic ([`probe_nccl`]), the
//! communicator's bootstrap over the host [`ProcessGroup`] (rank 0 makes
//! NCCL's unique id, the group broadcasts it), the sum of a device buffer
//! over the group ([`NcclCommunicator::all_reduce_sum`]) and its bound in
//! time. **Does not own:** the process group itself (MPI, in
//! [`crate::collective`]), which GPU a rank takes (the caller passes the
//! device, normally `cuda:<local rank>`), nor what is reduced (nitro-graph's
//! all-reduce op).
//!
//! Loading: cudarc loads `libnccl.so` at run time like the rest of CUDA, so
//! nothing is needed to build. A machine without it gets
//! [`DeviceError::NoNccl`] ("NCCL not found: install libnccl2 ..."), and so
//! does every other rank of the group: the ranks first agree on who can load
//! NCCL, so one rank without it never leaves the others waiting.
//!
//! Determinism: NCCL, not nitro, fixes the order of the sum. For a fixed
//! topology (the same GPUs, links and rank placement), message size, NCCL
//! version and environment (`NCCL_ALGO`, `NCCL_PROTO`), its ring and tree
//! all-reduces combine the same elements in the same order on every run,
//! and every rank receives the same bits (the reduced chunks are copied
//! out, not re-summed per rank), so parameters stay bitwise equal across
//! ranks. What is *not* fixed: the order differs from the host group's
//! rank-order sum ([`crate::collective::order`]), so a GPU run and a CPU run
//! of the same job agree to rounding only; and another topology, world size,
//! NCCL version or algorithm choice may change the bits.
//!
//! Faults: a collective waits at most the group timeout
//! ([`crate::collective::timeout_from_env`]) once the work before it has
//! finished; a rank that died or hangs then makes this one abort the
//! communicator and return [`DeviceError::NcclTimeout`], never a hang. The
//! wait means one host-device synchronisation per all-reduce (a world of
//! one has nobody to wait for and does not synchronise).

use super::{guarded, CudaBuffer, CudaDevice};
use crate::collective::{timeout_from_env, Communicator, ProcessGroup};
use crate::{DType, DeviceError, HostBuffer};
use cudarc::nccl::{result, sys};
use std::ffi::{c_void, CStr};
use std::panic::catch_unwind;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Whether NCCL (`libnccl.so`) can be loaded here; the verdict is cached.
pub fn probe_nccl() -> Result<(), DeviceError> {
    static CELL: OnceLock<Result<(), String>> = OnceLock::new();
    // SAFETY: is_culib_present only tries to dlopen the library.
    CELL.get_or_init(
        || match catch_unwind(|| unsafe { sys::is_culib_present() }) {
            Ok(true) => Ok(()),
            Ok(false) => Err("libnccl.so could not be loaded".into()),
            Err(_) => Err("libnccl.so could not be loaded (loader panicked)".into()),
        },
    )
    .clone()
    .map_err(DeviceError::NoNccl)
}

/// The loaded NCCL's version (major, minor, patch).
pub fn nccl_version() -> Result<(u32, u32, u32), DeviceError> {
    probe_nccl()?;
    let code = guarded("ncclGetVersion", || {
        result::get_nccl_version().map_err(|e| nccl_err("ncclGetVersion", e, None))
    })?
    .max(0) as u32;
    // NCCL_VERSION_CODE: X*10000 + Y*100 + Z since 2.9, X*1000 + Y*100 + Z before.
    Ok(if code >= 10000 {
        (code / 10000, code / 100 % 100, code % 100)
    } else {
        (code / 1000, code / 100 % 10, code % 100)
    })
}

/// NCCL's message for `e`, and the communicator's last error when there is one.
fn nccl_err(op: &str, e: result::NcclError, comm: Option<sys::ncclComm_t>) -> DeviceError {
    // SAFETY: NCCL returns static (or communicator-owned) C strings.
    let text = |p: *const std::ffi::c_char| {
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    let mut detail =
        text(unsafe { sys::ncclGetErrorString(e.0) }).unwrap_or_else(|| format!("{:?}", e.0));
    if let Some(last) = comm
        .and_then(|c| text(unsafe { sys::ncclGetLastError(c) }))
        .filter(|s| !s.is_empty())
    {
        detail = format!("{detail} ({last})");
    }
    DeviceError::Cuda {
        op: op.to_string(),
        detail,
    }
}

/// The NCCL element type of a summable dtype (the same four the host group sums).
fn nccl_type(dtype: DType) -> Result<sys::ncclDataType_t, DeviceError> {
    Ok(match dtype {
        DType::F32 => sys::ncclDataType_t::ncclFloat32,
        DType::F64 => sys::ncclDataType_t::ncclFloat64,
        DType::I32 => sys::ncclDataType_t::ncclInt32,
        DType::I64 => sys::ncclDataType_t::ncclInt64,
        other => {
            return Err(DeviceError::Cuda {
                op: "ncclAllReduce".into(),
                detail: format!(
                "all_reduce_sum of {other}: only f32, f64, i32 and i64 are summed (as on the CPU)"
            ),
            })
        }
    })
}

/// Ranks whose flag is set, as `1, 3`.
fn flagged(flags: &[i32]) -> Vec<usize> {
    (0..flags.len()).filter(|&r| flags[r] != 0).collect()
}

fn list(ranks: &[usize]) -> String {
    ranks
        .iter()
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every rank of `host` says whether it can load NCCL; all go on, or all
/// fail with [`DeviceError::NoNccl`] (naming the ranks that cannot when
/// this one can).
fn agree_on_nccl(host: &dyn Communicator) -> Result<(), DeviceError> {
    let (rank, world_size) = (host.rank(), host.world_size());
    let local = probe_nccl();
    let mut flags = vec![0i32; world_size];
    flags[rank] = i32::from(local.is_err());
    let mut flags = HostBuffer::I32(flags);
    host.all_reduce_sum(&mut flags)
        .map_err(DeviceError::NcclBootstrap)?;
    let HostBuffer::I32(flags) = flags else {
        unreachable!("a collective keeps the buffer's dtype")
    };
    let missing = flagged(&flags);
    if missing.is_empty() {
        return Ok(());
    }
    Err(local.err().unwrap_or_else(|| {
        DeviceError::NoNccl(format!(
            "libnccl.so could not be loaded on rank(s) {} of {world_size} (it loads on rank {rank})",
            list(&missing)
        ))
    }))
}

/// One rank's NCCL communicator on its GPU: sums device buffers over the
/// group it was bootstrapped from. Calls are serialised (NCCL forbids
/// concurrent calls on one communicator); every rank must make the same
/// calls in the same order with buffers of the same dtype and length.
pub struct NcclCommunicator {
    comm: sys::ncclComm_t,
    device: CudaDevice,
    rank: usize,
    world_size: usize,
    timeout: Duration,
    /// Whether the communicator was aborted (after a timeout or an
    /// asynchronous error); held across every NCCL call.
    aborted: Mutex<bool>,
}

// SAFETY: the raw communicator is only used under `aborted`'s lock, so no
// two threads call NCCL on it at once; NCCL communicators may move between
// threads.
unsafe impl Send for NcclCommunicator {}
// SAFETY: as above.
unsafe impl Sync for NcclCommunicator {}

impl std::fmt::Debug for NcclCommunicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NcclCommunicator(rank {} of {} on cuda:{})",
            self.rank,
            self.world_size,
            self.device.ordinal()
        )
    }
}

impl Drop for NcclCommunicator {
    fn drop(&mut self) {
        let aborted = *self.aborted.get_mut().unwrap_or_else(|p| p.into_inner());
        if !aborted {
            let _ = self.device.context().bind_to_thread();
            // SAFETY: the communicator is live and no call is in flight (we
            // hold it by value); an abort already released it.
            let _ = guarded("ncclCommDestroy", || {
                let _ = unsafe { result::comm_destroy(self.comm) };
                Ok(())
            });
        }
    }
}

impl NcclCommunicator {
    /// Bootstrap this rank's communicator on `device` over `group` (every
    /// rank calls it, each with its own GPU), waiting at most the group
    /// timeout ([`crate::collective::timeout_from_env`]) in each later
    /// collective.
    pub fn init(
        group: &ProcessGroup,
        device: &CudaDevice,
    ) -> Result<NcclCommunicator, DeviceError> {
        let timeout = timeout_from_env().map_err(DeviceError::NcclBootstrap)?;
        NcclCommunicator::init_over(group.communicator().as_ref(), device, timeout)
    }

    /// [`NcclCommunicator::init`] over any host communicator, with a chosen
    /// collective timeout.
    ///
    /// The ranks first sum a flag per rank saying who cannot load NCCL, so
    /// either every rank goes on or every rank fails with the same
    /// [`DeviceError::NoNccl`] naming the ranks; then rank 0's unique id is
    /// broadcast (with a status byte, so a failure there fails everyone
    /// too), and each rank joins with `ncclCommInitRank`.
    pub fn init_over(
        host: &dyn Communicator,
        device: &CudaDevice,
        timeout: Duration,
    ) -> Result<NcclCommunicator, DeviceError> {
        let (rank, world_size) = (host.rank(), host.world_size());
        agree_on_nccl(host)?;
        // Rank 0 makes the id; byte 0 says whether it could.
        let mut id = vec![0u8; 1 + 128];
        if rank == 0 {
            match guarded("ncclGetUniqueId", || {
                result::get_uniqueid().map_err(|e| nccl_err("ncclGetUniqueId", e, None))
            }) {
                Ok(uid) => {
                    for (b, c) in id[1..].iter_mut().zip(uid.internal) {
                        *b = c as u8;
                    }
                }
                Err(_) => id[0] = 1,
            }
        }
        let mut id = HostBuffer::U8(id);
        host.broadcast(&mut id, 0)
            .map_err(DeviceError::NcclBootstrap)?;
        let HostBuffer::U8(id) = id else {
            unreachable!("a broadcast keeps the buffer's dtype")
        };
        if id[0] != 0 {
            return Err(DeviceError::Cuda {
                op: "ncclGetUniqueId".into(),
                detail: "rank 0 could not create the NCCL unique id (see its log)".into(),
            });
        }
        let mut uid = sys::ncclUniqueId { internal: [0; 128] };
        for (c, &b) in uid.internal.iter_mut().zip(&id[1..]) {
            *c = b as std::ffi::c_char;
        }
        let ranks = |n: usize| {
            i32::try_from(n).map_err(|_| DeviceError::NoNccl(format!("a group of {n} ranks")))
        };
        let (nranks, me) = (ranks(world_size)?, ranks(rank)?);
        let comm = guarded("ncclCommInitRank", || {
            device
                .context()
                .bind_to_thread()
                .map_err(|e| super::cuda_err("bind context", e))?;
            let mut comm: sys::ncclComm_t = std::ptr::null_mut();
            // SAFETY: `comm` is a valid out-pointer; every rank passes the
            // same id and world size and its own rank.
            unsafe { result::comm_init_rank(&mut comm, nranks, uid, me) }
                .map_err(|e| nccl_err("ncclCommInitRank", e, None))?;
            Ok(comm)
        })?;
        Ok(NcclCommunicator {
            comm,
            device: device.clone(),
            rank,
            world_size,
            timeout,
            aborted: Mutex::new(false),
        })
    }

    /// This process's rank, `0..world_size`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Processes (GPUs) in the communicator.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The GPU this rank's buffers live on.
    pub fn device(&self) -> &CudaDevice {
        &self.device
    }

    /// Replace `buf` (on this communicator's device) by the element-wise
    /// sum of every rank's `buf`: bitwise equal on every rank. f32, f64,
    /// i32 and i64 only.
    pub fn all_reduce_sum(&self, buf: &mut CudaBuffer) -> Result<(), DeviceError> {
        if buf.device().ordinal() != self.device.ordinal() {
            return Err(DeviceError::Cuda {
                op: "ncclAllReduce".into(),
                detail: format!(
                    "the buffer is on cuda:{} but the communicator on cuda:{}",
                    buf.device().ordinal(),
                    self.device.ordinal()
                ),
            });
        }
        let ptr = buf.device_ptr();
        // SAFETY: `buf` is a live buffer of `len` elements of its dtype on
        // this device, held mutably for the call (in place is allowed).
        unsafe { self.all_reduce_sum_raw(ptr, ptr, buf.len(), buf.dtype()) }
    }

    /// `dst = Σ_ranks src` over `len` elements of `dtype`, queued on the
    /// device's stream after the work already there; returns when it has
    /// completed (or at once in a world of one).
    ///
    /// # Safety
    /// `src` and `dst` must be device addresses on this communicator's GPU
    /// of at least `len` elements of `dtype`, either equal or not
    /// overlapping, and live until the call returns.
    pub unsafe fn all_reduce_sum_raw(
        &self,
        src: u64,
        dst: u64,
        len: usize,
        dtype: DType,
    ) -> Result<(), DeviceError> {
        let ty = nccl_type(dtype)?;
        if len == 0 {
            return Ok(());
        }
        let mut aborted = self.aborted.lock().unwrap_or_else(|p| p.into_inner());
        if *aborted {
            return Err(DeviceError::Cuda {
                op: "ncclAllReduce".into(),
                detail: "the communicator was aborted after an earlier failure".into(),
            });
        }
        let stream = self.device.stream();
        let err = |op: &str, e| super::cuda_err(op, e);
        guarded("ncclAllReduce", || {
            self.device
                .context()
                .bind_to_thread()
                .map_err(|e| err("bind context", e))?;
            // The clock starts once the work before the collective is done:
            // a long backward pass is not a lost rank.
            let before = stream
                .record_event(None)
                .map_err(|e| err("record event", e))?;
            // SAFETY: the caller's contract; the stream is this device's.
            unsafe {
                result::all_reduce(
                    src as *const c_void,
                    dst as *mut c_void,
                    len,
                    ty,
                    sys::ncclRedOp_t::ncclSum,
                    self.comm,
                    stream.cu_stream() as sys::cudaStream_t,
                )
            }
            .map_err(|e| nccl_err("ncclAllReduce", e, Some(self.comm)))?;
            if self.world_size == 1 {
                return Ok(());
            }
            let after = stream
                .record_event(None)
                .map_err(|e| err("record event", e))?;
            self.wait(&before, &after, &mut aborted)
        })
    }

    /// Wait for `after`, at most the timeout past `before`; abort the
    /// communicator on a timeout or an asynchronous NCCL error.
    fn wait(
        &self,
        before: &cudarc::driver::CudaEvent,
        after: &cudarc::driver::CudaEvent,
        aborted: &mut bool,
    ) -> Result<(), DeviceError> {
        let mut started: Option<Instant> = None;
        let mut pause = Duration::from_micros(20);
        loop {
            if after.is_complete() {
                return Ok(());
            }
            if started.is_none() && before.is_complete() {
                started = Some(Instant::now());
            }
            let mut state = sys::ncclResult_t::ncclSuccess;
            // SAFETY: the communicator is live; `state` is a valid out-pointer.
            let asked = unsafe { sys::ncclCommGetAsyncError(self.comm, &mut state) };
            let failed = !matches!(
                state,
                sys::ncclResult_t::ncclSuccess | sys::ncclResult_t::ncclInProgress
            );
            let late = started.is_some_and(|t| t.elapsed() > self.timeout);
            if failed || late || asked != sys::ncclResult_t::ncclSuccess {
                // SAFETY: aborting a live communicator; it is not used again.
                let _ = unsafe { result::comm_abort(self.comm) };
                *aborted = true;
                if failed {
                    return Err(nccl_err("ncclAllReduce", result::NcclError(state), None));
                }
                return Err(DeviceError::NcclTimeout {
                    rank: self.rank,
                    op: "ncclAllReduce",
                    waited_s: started.map_or(0.0, |t| t.elapsed().as_secs_f64()),
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::{Backend, CollectiveError};

    /// Rank 0 of a two-rank group whose rank 1 has no NCCL: its sums add
    /// rank 1's flag.
    #[derive(Debug)]
    struct PeerWithoutNccl;

    impl Communicator for PeerWithoutNccl {
        fn rank(&self) -> usize {
            0
        }
        fn world_size(&self) -> usize {
            2
        }
        fn backend(&self) -> Backend {
            Backend::Mpi
        }
        fn all_reduce_sum(&self, buf: &mut HostBuffer) -> Result<(), CollectiveError> {
            let HostBuffer::I32(v) = buf else {
                panic!("the agreement sums i32 flags, got {}", buf.dtype())
            };
            v[1] += 1;
            Ok(())
        }
        fn broadcast(&self, _: &mut HostBuffer, _: usize) -> Result<(), CollectiveError> {
            panic!("no id is broadcast once a rank lacks NCCL")
        }
        fn barrier(&self) -> Result<(), CollectiveError> {
            Ok(())
        }
    }

    #[test]
    fn a_rank_without_nccl_fails_every_rank_by_name() {
        let e = agree_on_nccl(&PeerWithoutNccl).unwrap_err();
        assert!(matches!(e, DeviceError::NoNccl(_)), "{e}");
        let text = e.to_string();
        assert!(text.starts_with("NCCL not found: "), "{text}");
        assert!(text.contains("install libnccl2"), "{text}");
        if probe_nccl().is_ok() {
            // NCCL loads here, so the error names the peer.
            assert!(text.contains("rank(s) 1 of 2"), "{text}");
        }
    }

    #[test]
    fn a_world_of_one_agrees_when_nccl_loads() {
        let single = crate::collective::SingleProcess;
        match probe_nccl() {
            Ok(()) => agree_on_nccl(&single).unwrap(),
            Err(e) => {
                let got = agree_on_nccl(&single).unwrap_err();
                assert_eq!(got.to_string(), e.to_string());
            }
        }
    }

    #[test]
    fn flags_name_the_ranks_without_nccl() {
        assert_eq!(flagged(&[0, 1, 0, 2]), vec![1, 3]);
        assert_eq!(list(&flagged(&[1, 0, 1])), "0, 2");
        assert!(flagged(&[0, 0]).is_empty());
    }

    #[test]
    fn only_the_host_groups_dtypes_are_summed() {
        for d in [DType::F32, DType::F64, DType::I32, DType::I64] {
            assert!(nccl_type(d).is_ok(), "{d}");
        }
        let e = nccl_type(DType::Bool).unwrap_err().to_string();
        assert!(e.contains("all_reduce_sum of bool"), "{e}");
    }
}
