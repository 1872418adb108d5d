//! Run-time compilation (NVRTC), the PTX cache, and kernel launch.
//!
//! Kernels are compiled to PTX for the device's own virtual architecture
//! (`compute_XY`, read from the device: the driver finishes the job for the
//! exact chip) and cached under a key made of the source, the options, the
//! architecture and the NVRTC version ([`PtxCache::key`]). A lookup goes
//! memory -> persistent store -> NVRTC ([`PtxCache::get_or_compile`]): an
//! in-process hit costs a map lookup, a hit in the [`PtxStore`] (nitro-run
//! installs one over nitro-cache's disk tier, since this crate depends on no
//! nitro crate) saves the NVRTC call across processes, and a fresh compile
//! is saved to both. The store is best effort: it reports nothing, and a
//! store that fails (or panics) never fails a compile.

use super::{cuda_err, guarded, probe_nvrtc, CudaDevice};
use crate::ptx_cache::PtxCache;
use crate::DeviceError;
use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions, Ptx};
use std::sync::Arc;

/// NVRTC's (major, minor) version, or why NVRTC cannot be loaded.
pub fn nvrtc_version() -> Result<(i32, i32), DeviceError> {
    probe_nvrtc()?;
    guarded("nvrtcVersion", || {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: both pointers are valid for writes.
        unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
            .result()
            .map_err(|e| cuda_err("nvrtcVersion", e))?;
        Ok((major, minor))
    })
}

/// Compile `source` (CUDA C with `extern "C"` kernels) to PTX for the
/// virtual architecture `arch` (`compute_90`), through the process-wide
/// [`PtxCache`] (memory, then its store, then NVRTC). Needs only NVRTC, no
/// driver and no GPU, so generated code can be checked on any machine where
/// libnvrtc loads; a rejected source is [`DeviceError::Compile`] with the
/// NVRTC log.
pub fn compile_ptx(name: &str, source: &str, arch: &str) -> Result<Arc<str>, DeviceError> {
    let version = nvrtc_version()?;
    let options = vec![format!("--gpu-architecture={arch}")];
    let key = PtxCache::key(source, &options, arch, version);
    PtxCache::global().get_or_compile(&key, || {
        guarded("nvrtcCompileProgram", || {
            let opts = CompileOptions {
                options: options.clone(),
                name: Some(format!("{name}.cu")),
                ..Default::default()
            };
            compile_ptx_with_opts(source, opts)
                .map(|p| p.to_src())
                .map_err(|e| DeviceError::Compile {
                    kernel: name.to_string(),
                    arch: arch.to_string(),
                    log: match e {
                        CompileError::CompileError { log, .. } => {
                            log.to_string_lossy().into_owned()
                        }
                        other => format!("{other:?}"),
                    },
                })
        })
    })
}

/// A kernel argument, passed by value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KernelArg {
    /// A device address ([`super::CudaBuffer::device_ptr`]).
    Ptr(u64),
    /// A 64-bit signed integer (element counts, offsets).
    I64(i64),
    /// A 32-bit signed integer.
    I32(i32),
    /// A 32-bit float.
    F32(f32),
    /// A 64-bit float.
    F64(f64),
}

/// A compiled kernel ready to launch on its device's stream.
#[derive(Clone)]
pub struct CudaKernel {
    device: CudaDevice,
    function: CudaFunction,
    name: String,
}

impl std::fmt::Debug for CudaKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaKernel({})", self.name)
    }
}

impl CudaDevice {
    /// Compile `source` (CUDA C with `extern "C"` kernels) to PTX for this
    /// device's architecture (see [`compile_ptx`]).
    pub fn compile(&self, name: &str, source: &str) -> Result<Arc<str>, DeviceError> {
        let (major, minor) = self.compute_capability();
        compile_ptx(name, source, &format!("compute_{major}{minor}"))
    }

    /// Load PTX into this device and look up the named kernels.
    pub fn load_kernels(
        &self,
        ptx: &str,
        names: &[String],
    ) -> Result<Vec<CudaKernel>, DeviceError> {
        let module = self
            .context()
            .load_module(Ptx::from_src(ptx))
            .map_err(|e| cuda_err("load PTX module (driver older than NVRTC?)", e))?;
        names
            .iter()
            .map(|n| {
                let function = module
                    .load_function(n)
                    .map_err(|e| cuda_err(format!("look up kernel `{n}`"), e))?;
                Ok(CudaKernel {
                    device: self.clone(),
                    function,
                    name: n.clone(),
                })
            })
            .collect()
    }
}

impl CudaKernel {
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Queue a launch of `grid` blocks of `block` threads with `shared`
    /// bytes of dynamic shared memory.
    ///
    /// # Safety
    /// `args` must match the kernel's parameter list in number and type,
    /// and every pointer must be a live device address of sufficient size.
    pub unsafe fn launch(
        &self,
        grid: u32,
        block: u32,
        shared: u32,
        args: &[KernelArg],
    ) -> Result<(), DeviceError> {
        let stream = self.device.stream();
        let mut builder = stream.launch_builder(&self.function);
        for arg in args {
            match arg {
                KernelArg::Ptr(v) => builder.arg(v),
                KernelArg::I64(v) => builder.arg(v),
                KernelArg::I32(v) => builder.arg(v),
                KernelArg::F32(v) => builder.arg(v),
                KernelArg::F64(v) => builder.arg(v),
            };
        }
        let cfg = LaunchConfig {
            grid_dim: (grid.max(1), 1, 1),
            block_dim: (block, 1, 1),
            shared_mem_bytes: shared,
        };
        // SAFETY: the caller guarantees the arguments.
        unsafe { builder.launch(cfg) }
            .map(|_| ())
            .map_err(|e| cuda_err(format!("launch {}", self.name), e))
    }
}
