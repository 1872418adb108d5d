//! The PTX cache: compiled kernels in memory, over an optional persistent
//! [`PtxStore`], keyed by everything that changes the PTX ([`PtxCache::key`]:
//! source, options, architecture and NVRTC version). A lookup goes memory ->
//! store -> compile ([`PtxCache::get_or_compile`]). Plain Rust with no CUDA
//! dependency, so it exists (and nitro-run's disk store compiles) in every
//! build; only the NVRTC call that fills it needs the `cuda` feature.

use crate::DeviceError;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

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
