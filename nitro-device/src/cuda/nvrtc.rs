//! Run-time compilation (NVRTC) and kernel launch.
//!
//! Kernels are compiled to PTX for the device's own virtual architecture
//! (`compute_XY`, read from the device: the driver finishes the job for the
//! exact chip) and cached in memory under a key made of the source, the
//! options, the architecture and the NVRTC version, so two programs with
//! the same kernel compile it once per process. [`PtxCache::entries`] and
//! [`PtxCache::insert`] let a persistent tier (nitro-cache, wired by
//! nitro-run) save and preload entries under the same keys.

use super::{cuda_err, guarded, probe_nvrtc, CudaDevice};
use crate::DeviceError;
use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions, Ptx};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

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

/// The in-memory PTX cache (one per process).
#[derive(Default)]
pub struct PtxCache {
    entries: Mutex<HashMap<String, Arc<str>>>,
    compiles: Mutex<u64>,
}

impl PtxCache {
    /// The process-wide cache.
    pub fn global() -> &'static PtxCache {
        static CACHE: OnceLock<PtxCache> = OnceLock::new();
        CACHE.get_or_init(PtxCache::default)
    }

    /// The cache key of `source` compiled with `options` for `arch` by
    /// NVRTC `version`: every input that changes the PTX, spelled out.
    pub fn key(source: &str, options: &[String], arch: &str, version: (i32, i32)) -> String {
        format!(
            "nvrtc {}.{} arch {arch} options [{}]\n{source}",
            version.0,
            version.1,
            options.join(" ")
        )
    }

    /// A cached PTX text.
    pub fn get(&self, key: &str) -> Option<Arc<str>> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }

    /// Add an entry (e.g. loaded from a persistent tier).
    pub fn insert(&self, key: String, ptx: Arc<str>) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, ptx);
    }

    /// Every (key, PTX) pair, for saving to a persistent tier.
    pub fn entries(&self) -> Vec<(String, Arc<str>)> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Number of NVRTC compilations this process ran.
    pub fn compiles(&self) -> u64 {
        *self.compiles.lock().unwrap_or_else(|p| p.into_inner())
    }
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
    /// device, through the process-wide [`PtxCache`].
    pub fn compile(&self, name: &str, source: &str) -> Result<Arc<str>, DeviceError> {
        let version = nvrtc_version()?;
        let (major, minor) = self.compute_capability();
        let arch = format!("compute_{major}{minor}");
        let options = vec![format!("--gpu-architecture={arch}")];
        let key = PtxCache::key(source, &options, &arch, version);
        let cache = PtxCache::global();
        if let Some(ptx) = cache.get(&key) {
            return Ok(ptx);
        }
        let ptx = guarded("nvrtcCompileProgram", || {
            let opts = CompileOptions {
                options: options.clone(),
                name: Some(format!("{name}.cu")),
                ..Default::default()
            };
            compile_ptx_with_opts(source, opts)
                .map(|p| p.to_src())
                .map_err(|e| DeviceError::Compile {
                    kernel: name.to_string(),
                    arch: arch.clone(),
                    log: match e {
                        CompileError::CompileError { log, .. } => {
                            log.to_string_lossy().into_owned()
                        }
                        other => format!("{other:?}"),
                    },
                })
        })?;
        let ptx: Arc<str> = ptx.into();
        *cache.compiles.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        cache.insert(key, ptx.clone());
        Ok(ptx)
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
