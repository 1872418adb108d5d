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
use crate::DeviceError;
use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions, Ptx};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

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

/// A persistent tier for PTX, keyed by [`PtxCache::key`] strings.
///
/// Both methods are best effort: an implementation logs its own problems
/// (an unreadable directory, a corrupt entry) and answers `None` or drops
/// the write; the cache never fails a compile because of its store.
pub trait PtxStore: Send + Sync {
    /// The PTX saved under `key`, if there is a valid entry.
    fn load(&self, key: &str) -> Option<String>;
    /// Save `ptx` under `key` (errors are the store's to log).
    fn save(&self, key: &str, ptx: &str);
}

/// Where the PTX of [`PtxCache::get_or_compile`] calls came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PtxStats {
    /// Found in memory.
    pub memory_hits: u64,
    /// Loaded from the persistent store.
    pub store_hits: u64,
    /// Compiled by NVRTC (the closure ran and succeeded).
    pub compiles: u64,
    /// Store calls that panicked (ignored; the compile went on).
    pub store_failures: u64,
}

/// The PTX cache: in memory, over an optional persistent [`PtxStore`].
#[derive(Default)]
pub struct PtxCache {
    entries: Mutex<HashMap<String, Arc<str>>>,
    store: RwLock<Option<Arc<dyn PtxStore>>>,
    stats: Mutex<PtxStats>,
}

impl std::fmt::Debug for PtxCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtxCache")
            .field("entries", &self.lock_entries().len())
            .field("store", &self.has_store())
            .field("stats", &self.stats())
            .finish()
    }
}

impl PtxCache {
    /// An empty cache with no store (tests, tools; kernels use [`PtxCache::global`]).
    pub fn new() -> PtxCache {
        PtxCache::default()
    }

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

    fn lock_entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<str>>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn count(&self, bump: impl FnOnce(&mut PtxStats)) {
        bump(&mut self.stats.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// Install the persistent tier (replacing any previous one).
    pub fn set_store(&self, store: Arc<dyn PtxStore>) {
        *self.store.write().unwrap_or_else(|p| p.into_inner()) = Some(store);
    }

    /// Remove the persistent tier.
    pub fn clear_store(&self) {
        *self.store.write().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Whether a persistent tier is installed.
    pub fn has_store(&self) -> bool {
        self.store
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    fn current_store(&self) -> Option<Arc<dyn PtxStore>> {
        self.store.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The PTX under `key`: from memory, else from the store (then kept in
    /// memory), else from `compile` (then saved to both). A failing compile
    /// caches nothing and returns its error; a failing store is ignored.
    pub fn get_or_compile(
        &self,
        key: &str,
        compile: impl FnOnce() -> Result<String, DeviceError>,
    ) -> Result<Arc<str>, DeviceError> {
        if let Some(ptx) = self.get(key) {
            self.count(|s| s.memory_hits += 1);
            return Ok(ptx);
        }
        let store = self.current_store();
        if let Some(store) = &store {
            match catch_unwind(AssertUnwindSafe(|| store.load(key))) {
                Ok(Some(ptx)) if !ptx.is_empty() => {
                    let ptx: Arc<str> = ptx.into();
                    self.insert(key.to_string(), ptx.clone());
                    self.count(|s| s.store_hits += 1);
                    return Ok(ptx);
                }
                Ok(_) => {}
                Err(_) => self.count(|s| s.store_failures += 1),
            }
        }
        let ptx: Arc<str> = compile()?.into();
        self.count(|s| s.compiles += 1);
        self.insert(key.to_string(), ptx.clone());
        if let Some(store) = &store {
            if catch_unwind(AssertUnwindSafe(|| store.save(key, &ptx))).is_err() {
                self.count(|s| s.store_failures += 1);
            }
        }
        Ok(ptx)
    }

    /// A PTX text cached in memory.
    pub fn get(&self, key: &str) -> Option<Arc<str>> {
        self.lock_entries().get(key).cloned()
    }

    /// Add an entry to memory (e.g. preloaded from elsewhere).
    pub fn insert(&self, key: String, ptx: Arc<str>) {
        self.lock_entries().insert(key, ptx);
    }

    /// Every (key, PTX) pair in memory.
    pub fn entries(&self) -> Vec<(String, Arc<str>)> {
        self.lock_entries()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Number of NVRTC compilations this cache ran.
    pub fn compiles(&self) -> u64 {
        self.stats().compiles
    }

    /// Memory hits, store hits, compiles and store failures so far.
    pub fn stats(&self) -> PtxStats {
        *self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An in-memory store that counts its calls.
    #[derive(Default)]
    struct MapStore {
        map: Mutex<HashMap<String, String>>,
        loads: AtomicUsize,
        saves: AtomicUsize,
    }

    impl PtxStore for MapStore {
        fn load(&self, key: &str) -> Option<String> {
            self.loads.fetch_add(1, Ordering::Relaxed);
            self.map.lock().unwrap().get(key).cloned()
        }
        fn save(&self, key: &str, ptx: &str) {
            self.saves.fetch_add(1, Ordering::Relaxed);
            self.map.lock().unwrap().insert(key.into(), ptx.into());
        }
    }

    struct PanickingStore;

    impl PtxStore for PanickingStore {
        fn load(&self, _: &str) -> Option<String> {
            panic!("disk on fire")
        }
        fn save(&self, _: &str, _: &str) {
            panic!("disk on fire")
        }
    }

    fn ptx(text: &str) -> impl FnOnce() -> Result<String, DeviceError> + '_ {
        move || Ok(text.to_string())
    }

    #[test]
    fn the_key_names_every_input_that_changes_the_ptx() {
        let opts = vec!["--gpu-architecture=compute_90".to_string()];
        let k = PtxCache::key("src", &opts, "compute_90", (12, 8));
        assert_ne!(k, PtxCache::key("src2", &opts, "compute_90", (12, 8)));
        assert_ne!(k, PtxCache::key("src", &[], "compute_90", (12, 8)));
        assert_ne!(k, PtxCache::key("src", &opts, "compute_80", (12, 8)));
        assert_ne!(k, PtxCache::key("src", &opts, "compute_90", (12, 9)));
    }

    #[test]
    fn lookup_goes_memory_then_store_then_compile() {
        let store = Arc::new(MapStore::default());
        let first = PtxCache::new();
        first.set_store(store.clone());
        // Cold: the store is asked, then NVRTC runs, then both tiers keep it.
        assert_eq!(&*first.get_or_compile("k", ptx("A")).unwrap(), "A");
        assert_eq!(store.loads.load(Ordering::Relaxed), 1);
        assert_eq!(store.saves.load(Ordering::Relaxed), 1);
        // Warm: memory answers; neither the store nor the compiler is asked.
        let again = first
            .get_or_compile("k", || panic!("must not compile"))
            .unwrap();
        assert_eq!(&*again, "A");
        assert_eq!(store.loads.load(Ordering::Relaxed), 1);
        assert_eq!(
            first.stats(),
            PtxStats {
                memory_hits: 1,
                store_hits: 0,
                compiles: 1,
                store_failures: 0
            }
        );
        // A new process (a new cache) on the same store: a store hit, no compile.
        let second = PtxCache::new();
        second.set_store(store.clone());
        let loaded = second
            .get_or_compile("k", || panic!("must not compile"))
            .unwrap();
        assert_eq!(&*loaded, "A");
        assert_eq!((second.stats().store_hits, second.compiles()), (1, 0));
        // ... and memory answers after that.
        second.get_or_compile("k", || panic!("no")).unwrap();
        assert_eq!(store.loads.load(Ordering::Relaxed), 2);
        assert_eq!(
            store.saves.load(Ordering::Relaxed),
            1,
            "a hit is not re-saved"
        );
    }

    #[test]
    fn without_a_store_it_is_a_memory_cache() {
        let cache = PtxCache::new();
        assert!(!cache.has_store());
        cache.get_or_compile("k", ptx("A")).unwrap();
        cache.get_or_compile("k", ptx("B")).unwrap();
        assert_eq!(cache.compiles(), 1);
        assert_eq!(cache.entries().len(), 1);
    }

    #[test]
    fn a_failed_compile_caches_nothing() {
        let store = Arc::new(MapStore::default());
        let cache = PtxCache::new();
        cache.set_store(store.clone());
        let err = cache
            .get_or_compile("bad", || {
                Err(DeviceError::Compile {
                    kernel: "k".into(),
                    arch: "compute_90".into(),
                    log: "error".into(),
                })
            })
            .unwrap_err();
        assert!(matches!(err, DeviceError::Compile { .. }));
        assert!(cache.get("bad").is_none());
        assert_eq!(store.saves.load(Ordering::Relaxed), 0);
        assert_eq!(cache.compiles(), 0);
    }

    #[test]
    fn a_broken_store_never_fails_a_compile() {
        let cache = PtxCache::new();
        cache.set_store(Arc::new(PanickingStore));
        assert_eq!(&*cache.get_or_compile("k", ptx("A")).unwrap(), "A");
        assert_eq!(cache.stats().store_failures, 2, "one load, one save");
        assert_eq!(cache.compiles(), 1);
        // An empty entry is not PTX: compiled instead.
        let store = Arc::new(MapStore::default());
        store.save("e", "");
        let cache = PtxCache::new();
        cache.set_store(store);
        assert_eq!(&*cache.get_or_compile("e", ptx("E")).unwrap(), "E");
        assert_eq!(cache.compiles(), 1);
        cache.clear_store();
        assert!(!cache.has_store());
    }
}
