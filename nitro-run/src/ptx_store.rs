//! The persistent tier of nitro-device's PTX cache (installed when a GPU is opened):
//! [`DiskPtxStore`] implements nitro-device's `PtxStore` over nitro-cache's
//! [`DiskStore`], so a kernel compiled by NVRTC in one process is loaded
//! from disk by the next. nitro-run wires the two because neither leaf
//! crate may depend on the other.
//!
//! An entry is stored under kind [`PTX_KIND`] and a nitro-cache key with one
//! part, the PTX cache's own key string (source, options, architecture and
//! NVRTC version); the disk tier adds its crate, format and toolchain
//! fingerprint and verifies every read. Every disk problem is logged as a
//! warning and answered as a miss: the kernel is compiled instead.
//!
//! The directory is `$NITRO_CACHE_DIR/ptx` when that variable is set (an
//! empty value turns the tier off), else `$XDG_CACHE_HOME/nitro/ptx`, else
//! `$HOME/.cache/nitro/ptx`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};

use nitro_cache::{DiskConfig, DiskError, DiskLookup, DiskStore, Key, KeyBuilder};
use nitro_device::cuda::{PtxCache, PtxStore};

/// The nitro-cache kind PTX entries are stored under.
pub const PTX_KIND: &str = "ptx";

/// nitro-device's PTX cache, persisted in a nitro-cache [`DiskStore`].
#[derive(Debug, Clone)]
pub struct DiskPtxStore {
    disk: DiskStore,
}

impl DiskPtxStore {
    /// Open (creating if needed) a PTX store in `dir`.
    pub fn open(dir: impl AsRef<Path>) -> Result<DiskPtxStore, DiskError> {
        let config = DiskConfig {
            fingerprint_extra: "nvrtc ptx".into(),
            ..DiskConfig::default()
        };
        Ok(DiskPtxStore {
            disk: DiskStore::open(dir, config)?,
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        self.disk.dir()
    }

    fn key(ptx_key: &str) -> Option<Key> {
        match KeyBuilder::new().part("ptx", ptx_key).finish() {
            Ok(key) => Some(key),
            Err(e) => {
                tracing::warn!(target: "nitro::ptx", "PTX key not encodable ({e}); not persisted");
                None
            }
        }
    }
}

impl PtxStore for DiskPtxStore {
    fn load(&self, key: &str) -> Option<String> {
        let key = Self::key(key)?;
        match self.disk.lookup(PTX_KIND, &key) {
            Ok(DiskLookup::Hit(bytes)) => match String::from_utf8(bytes) {
                Ok(ptx) => Some(ptx),
                Err(_) => {
                    tracing::warn!(target: "nitro::ptx", "a stored PTX entry is not UTF-8; compiling instead");
                    None
                }
            },
            Ok(DiskLookup::Missing) => None,
            // The disk tier already warned and removed the file.
            Ok(DiskLookup::Rejected(_)) => None,
            Err(e) => {
                tracing::warn!(target: "nitro::ptx", "{e}; compiling instead");
                None
            }
        }
    }

    fn save(&self, key: &str, ptx: &str) {
        let Some(key) = Self::key(key) else {
            return;
        };
        if let Err(e) = self.disk.store(PTX_KIND, &key, ptx.as_bytes()) {
            tracing::warn!(target: "nitro::ptx", "{e}; the PTX was not persisted");
        }
    }
}

/// The PTX store directory from the environment (see the module docs), or
/// `None` when the tier is off or no home directory is known.
pub(crate) fn ptx_dir_from(
    nitro_cache_dir: Option<&str>,
    xdg_cache_home: Option<&str>,
    home: Option<&str>,
) -> Option<PathBuf> {
    let non_empty = |v: Option<&str>| v.filter(|s| !s.is_empty()).map(PathBuf::from);
    let base = match nitro_cache_dir {
        Some(dir) => non_empty(Some(dir))?,
        None => non_empty(xdg_cache_home)
            .map(|d| d.join("nitro"))
            .or_else(|| non_empty(home).map(|h| h.join(".cache").join("nitro")))?,
    };
    Some(base.join("ptx"))
}

/// Install the disk tier under the process-wide PTX cache, once per
/// process. A directory that cannot be opened is a warning, never an error:
/// kernels are then compiled in every process.
pub(crate) fn install_global() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let var = |name: &str| std::env::var(name).ok();
        let Some(dir) = ptx_dir_from(
            var("NITRO_CACHE_DIR").as_deref(),
            var("XDG_CACHE_HOME").as_deref(),
            var("HOME").as_deref(),
        ) else {
            return;
        };
        match DiskPtxStore::open(&dir) {
            Ok(store) => {
                tracing::info!(target: "nitro::ptx", dir = %dir.display(), "persistent PTX cache");
                PtxCache::global().set_store(Arc::new(store));
            }
            Err(e) => {
                tracing::warn!(target: "nitro::ptx", "{e}; PTX is cached in memory only");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use nitro_device::DeviceError;

    fn compiled(text: &'static str) -> impl FnOnce() -> Result<String, DeviceError> {
        move || Ok(text.to_string())
    }

    #[test]
    fn entries_round_trip_through_the_disk_tier() {
        let dir = tempfile::tempdir().unwrap();
        let store = DiskPtxStore::open(dir.path()).unwrap();
        let key = PtxCache::key("src", &["-arch".into()], "compute_90", (12, 8));
        assert_eq!(store.load(&key), None);
        store.save(&key, "// PTX\n.version 8.0\n");
        assert_eq!(store.load(&key).as_deref(), Some("// PTX\n.version 8.0\n"));
        // Another key (a different architecture) is another entry.
        let other = PtxCache::key("src", &["-arch".into()], "compute_80", (12, 8));
        assert_eq!(store.load(&other), None);
        // Reopened (a new process): still there.
        let again = DiskPtxStore::open(dir.path()).unwrap();
        assert_eq!(again.load(&key).as_deref(), Some("// PTX\n.version 8.0\n"));
    }

    #[test]
    fn a_corrupt_entry_is_a_miss_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let store = DiskPtxStore::open(dir.path()).unwrap();
        store.save("k", "ptx text");
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let path = entry.unwrap().path();
            let mut bytes = std::fs::read(&path).unwrap();
            let last = bytes.len() - 1;
            bytes[last] ^= 0xFF;
            std::fs::write(&path, bytes).unwrap();
        }
        assert_eq!(store.load("k"), None);
        // And the cache compiles through it.
        let cache = PtxCache::new();
        cache.set_store(Arc::new(store));
        assert_eq!(
            &*cache.get_or_compile("k", compiled("fresh")).unwrap(),
            "fresh"
        );
        assert_eq!(cache.compiles(), 1);
    }

    #[test]
    fn the_cache_reads_memory_then_disk_then_compiles() {
        let dir = tempfile::tempdir().unwrap();
        let first = PtxCache::new();
        first.set_store(Arc::new(DiskPtxStore::open(dir.path()).unwrap()));
        first.get_or_compile("kernel", compiled("PTX-1")).unwrap();
        first
            .get_or_compile("kernel", || panic!("memory must answer"))
            .unwrap();
        assert_eq!((first.stats().memory_hits, first.stats().compiles), (1, 1));
        // A second process: the disk answers, NVRTC is never called.
        let second = PtxCache::new();
        second.set_store(Arc::new(DiskPtxStore::open(dir.path()).unwrap()));
        let ptx = second
            .get_or_compile("kernel", || panic!("the disk must answer"))
            .unwrap();
        assert_eq!(&*ptx, "PTX-1");
        assert_eq!((second.stats().store_hits, second.compiles()), (1, 0));
    }

    #[test]
    fn an_unwritable_directory_never_fails_a_compile() {
        let dir = tempfile::tempdir().unwrap();
        let store = DiskPtxStore::open(dir.path().join("ptx")).unwrap();
        // The directory disappears under the store (a full or removed disk).
        std::fs::remove_dir_all(dir.path().join("ptx")).unwrap();
        let cache = PtxCache::new();
        cache.set_store(Arc::new(store));
        assert_eq!(&*cache.get_or_compile("k", compiled("A")).unwrap(), "A");
        assert_eq!(cache.compiles(), 1);
    }

    #[test]
    fn the_directory_follows_the_environment() {
        let p = |s: &str| Some(PathBuf::from(s));
        assert_eq!(
            ptx_dir_from(Some("/c"), Some("/x"), Some("/h")),
            p("/c/ptx")
        );
        assert_eq!(ptx_dir_from(Some(""), Some("/x"), Some("/h")), None);
        assert_eq!(
            ptx_dir_from(None, Some("/x"), Some("/h")),
            p("/x/nitro/ptx")
        );
        assert_eq!(
            ptx_dir_from(None, Some(""), Some("/h")),
            p("/h/.cache/nitro/ptx")
        );
        assert_eq!(ptx_dir_from(None, None, None), None);
    }
}
