//! The CUDA side of nitro-device (feature `cuda`): driver discovery that
//! never panics, one context and stream per GPU, typed device buffers from a
//! pooling allocator, host<->device copies, cuBLAS gemm, NVRTC, and the
//! NCCL all-reduce between the GPUs of a data-parallel job ([`nccl`]).
//!
//! Everything is loaded dynamically through cudarc, so this module builds on
//! a machine with no driver and no toolkit. cudarc's loader *panics* when a
//! library is missing (and panics again on every later call), so each entry
//! point first asks whether the library can be loaded at all
//! ([`probe_driver`], [`probe_nvrtc`], [`probe_cublas`]) and wraps the first
//! real call in `catch_unwind` as a backstop; the probe's verdict is cached,
//! so a missing driver costs one failed `dlopen` per process.
//!
//! Execution model: every device owns one *main* stream
//! ([`CudaDevice::stream`]); kernels, gemms, plain copies and the pool are
//! ordered on it, so no event bookkeeping is needed between them. A copy
//! back to the host synchronises. A second *copy stream*
//! ([`CudaDevice::copy_stream`], created on first use) carries only staged
//! uploads ([`CudaDevice::upload_staged`]): host bytes go through pinned
//! slots, and events order the two streams (the main stream waits for a
//! copy in [`PendingUpload::ready`]; the copy stream waits for the main
//! stream's last use of a block before writing it again), so the next
//! batch's transfer overlaps the current step. The `staging` module docs
//! draw the timeline and state the rules.

mod blas;
mod buffer;
pub mod nccl;
mod nvrtc;
mod pool;
mod slots;
mod staging;

pub use crate::ptx_cache::{PtxCache, PtxStats, PtxStore};
pub use blas::{ColumnMajorCall, GemmShape, GemmTypes};
pub use buffer::CudaBuffer;
pub use nccl::{nccl_version, probe_nccl, NcclCommunicator};
pub use nvrtc::{compile_ptx, nvrtc_version, CudaKernel, KernelArg};
pub use pool::PoolStats;
pub use slots::{
    choose_slot, slot_capacity, SlotChoice, SlotState, STAGING_MAX_SLOTS, STAGING_MIN_BYTES,
};
pub use staging::{PendingUpload, StagingStats};

use crate::DeviceError;
use cudarc::driver::{CudaContext, CudaStream};
use pool::Pool;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};

/// Run `f`, turning a panic from cudarc's dynamic loader into an error.
pub(crate) fn guarded<T>(
    op: &str,
    f: impl FnOnce() -> Result<T, DeviceError>,
) -> Result<T, DeviceError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(DeviceError::NoDriver(format!("{op} failed to load: {msg}")))
        }
    }
}

/// A CUDA error with what nitro was doing.
pub(crate) fn cuda_err(op: impl Into<String>, e: impl std::fmt::Debug) -> DeviceError {
    DeviceError::Cuda {
        op: op.into(),
        detail: format!("{e:?}"),
    }
}

fn cached_probe(
    cell: &'static OnceLock<Result<(), String>>,
    lib: &str,
    present: fn() -> bool,
) -> Result<(), DeviceError> {
    cell.get_or_init(|| match catch_unwind(present) {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!("{lib} could not be loaded")),
        Err(_) => Err(format!("{lib} could not be loaded (loader panicked)")),
    })
    .clone()
    .map_err(DeviceError::NoDriver)
}

/// Whether the CUDA driver library (libcuda) can be loaded here.
pub fn probe_driver() -> Result<(), DeviceError> {
    static CELL: OnceLock<Result<(), String>> = OnceLock::new();
    // SAFETY: is_culib_present only tries to dlopen the library.
    cached_probe(&CELL, "libcuda.so", || unsafe {
        cudarc::driver::sys::is_culib_present()
    })
}

/// Whether NVRTC (libnvrtc) can be loaded here.
pub fn probe_nvrtc() -> Result<(), DeviceError> {
    static CELL: OnceLock<Result<(), String>> = OnceLock::new();
    // SAFETY: as above.
    cached_probe(&CELL, "libnvrtc.so", || unsafe {
        cudarc::nvrtc::sys::is_culib_present()
    })
}

/// Whether cuBLAS (libcublas) can be loaded here.
pub fn probe_cublas() -> Result<(), DeviceError> {
    static CELL: OnceLock<Result<(), String>> = OnceLock::new();
    // SAFETY: as above.
    cached_probe(&CELL, "libcublas.so", || unsafe {
        cudarc::cublas::sys::is_culib_present()
    })
}

/// Number of CUDA devices, or why there are none.
pub fn device_count() -> Result<usize, DeviceError> {
    probe_driver()?;
    guarded("cuDeviceGetCount", || {
        CudaContext::device_count()
            .map(|n| n.max(0) as usize)
            .map_err(|e| DeviceError::NoDriver(format!("cuInit failed: {e:?}")))
    })
}

struct Inner {
    ordinal: usize,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    name: String,
    capability: (u32, u32),
    pool: Pool,
    blas: Mutex<Option<Arc<blas::Blas>>>,
    /// The copy stream and pinned slots, created by the first staged upload.
    staging: Mutex<Option<staging::Staging>>,
}

/// One GPU: its context, its stream, its memory pool. Cheap to clone (a
/// handle); [`CudaDevice::open`] returns the same device for an ordinal
/// every time, so every part of a process shares one pool and stream.
#[derive(Clone)]
pub struct CudaDevice {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaDevice(cuda:{}, {}, {})",
            self.inner.ordinal,
            self.inner.name,
            self.arch()
        )
    }
}

impl CudaDevice {
    /// Open GPU `ordinal`, or say why it cannot be used (no driver, no such
    /// device, a driver error). Never panics.
    pub fn open(ordinal: usize) -> Result<CudaDevice, DeviceError> {
        static OPEN: OnceLock<Mutex<HashMap<usize, CudaDevice>>> = OnceLock::new();
        let table = OPEN.get_or_init(Default::default);
        let mut table = table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = table.get(&ordinal) {
            return Ok(d.clone());
        }
        probe_driver()?;
        let count = device_count()?;
        if ordinal >= count {
            return Err(DeviceError::Cuda {
                op: format!("open cuda:{ordinal}"),
                detail: format!("this machine has {count} CUDA device(s)"),
            });
        }
        let device = guarded("CudaContext::new", || {
            let ctx = CudaContext::new(ordinal).map_err(|e| cuda_err("create context", e))?;
            // One stream per device orders all work; cudarc's per-buffer
            // event tracking would only add cost.
            // SAFETY: every buffer of this context is used on its one stream.
            unsafe { ctx.disable_event_tracking() };
            let stream = ctx.new_stream().map_err(|e| cuda_err("create stream", e))?;
            let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
            let (major, minor) = ctx
                .compute_capability()
                .map_err(|e| cuda_err("read compute capability", e))?;
            Ok(CudaDevice {
                inner: Arc::new(Inner {
                    ordinal,
                    pool: Pool::new(stream.clone(), ordinal),
                    ctx,
                    stream,
                    name,
                    capability: (major as u32, minor as u32),
                    blas: Mutex::new(None),
                    staging: Mutex::new(None),
                }),
            })
        })?;
        table.insert(ordinal, device.clone());
        Ok(device)
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.inner.ordinal
    }

    /// The marketing name (`NVIDIA H200`).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Compute capability (major, minor), read from the device.
    pub fn compute_capability(&self) -> (u32, u32) {
        self.inner.capability
    }

    /// The NVRTC architecture flag value for this device (`sm_90`).
    pub fn arch(&self) -> String {
        let (major, minor) = self.inner.capability;
        format!("sm_{major}{minor}")
    }

    /// The cudarc context (for code that needs the raw API).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.inner.ctx
    }

    /// The device's stream: every nitro operation on this device is queued here.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.inner.stream
    }

    /// Wait for all queued work.
    pub fn synchronize(&self) -> Result<(), DeviceError> {
        self.inner
            .stream
            .synchronize()
            .map_err(|e| cuda_err("synchronize", e))
    }

    /// (free, total) device memory in bytes.
    pub fn memory_info(&self) -> Result<(usize, usize), DeviceError> {
        self.inner
            .ctx
            .mem_get_info()
            .map_err(|e| cuda_err("cuMemGetInfo", e))
    }

    /// Pool figures: bytes in use, bytes cached, allocations served from cache.
    pub fn pool_stats(&self) -> PoolStats {
        self.inner.pool.stats()
    }

    /// Give every cached (unused) block back to the driver, including the
    /// blocks and pinned slots kept by staged uploads (this waits for the
    /// copy stream).
    pub fn empty_cache(&self) -> usize {
        let mut staging = self.inner.staging.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(st) = staging.as_mut() {
            st.release(self);
        }
        drop(staging);
        self.inner.pool.release_cache()
    }

    /// The staging state, created (with its copy stream) on first use.
    pub(crate) fn staging_lock(
        &self,
    ) -> Result<std::sync::MutexGuard<'_, Option<staging::Staging>>, DeviceError> {
        let mut guard = self.inner.staging.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            *guard = Some(guarded("create copy stream", || {
                staging::Staging::new(self)
            })?);
        }
        Ok(guard)
    }

    pub(crate) fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// The cuBLAS handle, created on first use.
    pub(crate) fn blas(&self) -> Result<Arc<blas::Blas>, DeviceError> {
        let mut slot = self.inner.blas.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = slot.as_ref() {
            return Ok(b.clone());
        }
        probe_cublas()?;
        let stream = self.inner.stream.clone();
        let b = Arc::new(guarded("cublasCreate", || blas::Blas::new(stream))?);
        *slot = Some(b.clone());
        Ok(b)
    }
}
