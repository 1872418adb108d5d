//! The optional persistent tier: a directory of serialised artefacts
//! (compiled kernels, PTX), one file per (program kind, key), keyed also by
//! the crate version, format version and toolchain fingerprint.
//!
//! Writes go to a temporary file in the same directory, are fsynced, then
//! renamed over the entry: a reader sees a whole old entry, a whole new one,
//! or none, even with concurrent writers. Reads verify everything
//! ([`crate::disk_format`]); a file that fails is removed with a warning and
//! the artefact rebuilt, never trusted. After each write the directory is
//! trimmed to its size cap, least recently used entries first (a hit
//! refreshes the file's modification time).
//!
//! The tier is off unless a [`DiskStore`] is opened. It composes with the
//! memory cache: compile from the store inside the memory cache's closure.
//!
//! ```
//! # let dir = tempfile::tempdir().unwrap();
//! use nitro_cache::{CompileCache, DiskConfig, DiskStore, KeyBuilder};
//! let disk = DiskStore::open(dir.path(), DiskConfig::default()).unwrap();
//! let memory: CompileCache<std::sync::Arc<Vec<u8>>> = CompileCache::new();
//! let key = KeyBuilder::new().part("kernel", "gemm").finish().unwrap();
//! let (ptx, _) = memory
//!     .get_or_compile("ptx", &key, None, || {
//!         let (bytes, _) = disk.get_or_build("ptx", &key, || Ok::<_, String>(b"// ptx".to_vec()))?;
//!         Ok::<_, String>(std::sync::Arc::new(bytes))
//!     })
//!     .unwrap();
//! assert_eq!(&ptx[..], b"// ptx");
//! ```

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use crate::disk_format::{self, RejectReason, FORMAT_VERSION};
use crate::key::{hex, Key};

const ENTRY_EXTENSION: &str = "nce";
const TEMP_PREFIX: &str = ".tmp-";
/// Temporary files older than this belong to a writer that died; removed on open.
const STALE_TEMP: Duration = Duration::from_secs(3600);

/// Settings of a [`DiskStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskConfig {
    /// Total bytes of entry files kept; least recently used go first.
    pub max_bytes: u64,
    /// Anything else the artefacts depend on (CUDA driver, GPU model): a
    /// different value makes every existing entry foreign.
    pub fingerprint_extra: String,
}

impl Default for DiskConfig {
    fn default() -> Self {
        DiskConfig {
            max_bytes: 1 << 30,
            fingerprint_extra: String::new(),
        }
    }
}

/// A filesystem operation of the store failed.
#[derive(Debug, thiserror::Error)]
#[error("nitro-cache disk store: cannot {action} {path}: {source}")]
pub struct DiskError {
    /// What was being done (`create directory`, `write`, ...).
    pub action: &'static str,
    /// The file or directory.
    pub path: PathBuf,
    /// The OS error.
    #[source]
    pub source: io::Error,
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiskLookup {
    /// A verified entry's payload.
    Hit(Vec<u8>),
    /// No entry.
    Missing,
    /// An entry that failed verification; it has been removed.
    Rejected(RejectReason),
}

/// Where [`DiskStore::get_or_build`]'s bytes came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiskOutcome {
    /// Loaded from a verified entry.
    Loaded,
    /// Built by the closure (and stored); `rejected` says why an existing
    /// entry was not used, if there was one.
    Built {
        /// The reason an existing entry was refused.
        rejected: Option<RejectReason>,
    },
}

/// A directory store of artefacts. See the module documentation.
#[derive(Debug, Clone)]
pub struct DiskStore {
    dir: PathBuf,
    config: DiskConfig,
    fingerprint_text: String,
    fingerprint: [u8; 32],
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl DiskStore {
    /// Open (creating if needed) the store in `dir`.
    pub fn open(dir: impl AsRef<Path>, config: DiskConfig) -> Result<Self, DiskError> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).map_err(|source| DiskError {
            action: "create directory",
            path: dir.clone(),
            source,
        })?;
        let fingerprint_text = format!(
            "nitro-cache {}; format {FORMAT_VERSION}; {}; {}; {}",
            env!("CARGO_PKG_VERSION"),
            env!("NITRO_CACHE_RUSTC"),
            env!("NITRO_CACHE_TARGET"),
            config.fingerprint_extra
        );
        let fingerprint = *blake3::hash(fingerprint_text.as_bytes()).as_bytes();
        let store = DiskStore {
            dir,
            config,
            fingerprint_text,
            fingerprint,
        };
        store.remove_stale_temps();
        Ok(store)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The fingerprint every entry must carry, in words.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint_text
    }

    fn entry_id(&self, kind: &str, key: &Key) -> [u8; 32] {
        let mut hasher = blake3::Hasher::new();
        hasher.update(b"nitro-cache disk entry\n");
        hasher.update(&self.fingerprint);
        hasher.update(&(kind.len() as u64).to_le_bytes());
        hasher.update(kind.as_bytes());
        hasher.update(key.digest());
        *hasher.finalize().as_bytes()
    }

    /// The file that holds `(kind, key)`.
    pub fn path_for(&self, kind: &str, key: &Key) -> PathBuf {
        self.dir.join(format!(
            "{}.{ENTRY_EXTENSION}",
            hex(&self.entry_id(kind, key))
        ))
    }

    /// Read and verify the entry for `(kind, key)`. A file that fails
    /// verification is removed and reported (and logged as a warning).
    pub fn lookup(&self, kind: &str, key: &Key) -> Result<DiskLookup, DiskError> {
        let path = self.path_for(kind, key);
        let io_error = |action, source| DiskError {
            action,
            path: path.clone(),
            source,
        };
        let size = match fs::metadata(&path) {
            Ok(meta) => meta.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(DiskLookup::Missing),
            Err(e) => return Err(io_error("inspect", e)),
        };
        let verdict = if size > self.config.max_bytes {
            Err(RejectReason::TooLarge)
        } else {
            let file = match fs::read(&path) {
                Ok(file) => file,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(DiskLookup::Missing),
                Err(e) => return Err(io_error("read", e)),
            };
            disk_format::decode(&file, &self.fingerprint, &self.entry_id(kind, key))
                .map(<[u8]>::to_vec)
        };
        match verdict {
            Ok(payload) => {
                // Refresh recency for the size cap; failing that only ages it.
                let _ = fs::File::options()
                    .write(true)
                    .open(&path)
                    .and_then(|f| f.set_modified(SystemTime::now()));
                Ok(DiskLookup::Hit(payload))
            }
            Err(reason) => {
                tracing::warn!(
                    target: "nitro_cache",
                    kind,
                    key = %key,
                    path = %path.display(),
                    "ignoring persistent cache entry ({reason}); it will be rebuilt"
                );
                let _ = fs::remove_file(&path);
                Ok(DiskLookup::Rejected(reason))
            }
        }
    }

    /// Write the entry for `(kind, key)` atomically, then trim the store to
    /// its size cap. Returns `false` (writing nothing) when the entry alone
    /// would exceed the cap.
    pub fn store(&self, kind: &str, key: &Key, payload: &[u8]) -> Result<bool, DiskError> {
        let bytes = disk_format::encode(&self.fingerprint, &self.entry_id(kind, key), payload);
        if bytes.len() as u64 > self.config.max_bytes {
            return Ok(false);
        }
        let path = self.path_for(kind, key);
        let temp = self.dir.join(format!(
            "{TEMP_PREFIX}{}-{}",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let write = || -> io::Result<()> {
            let mut file = fs::File::create_new(&temp)?;
            file.write_all(&bytes)?;
            file.sync_all()
        };
        if let Err(source) = write() {
            let _ = fs::remove_file(&temp);
            return Err(DiskError {
                action: "write",
                path: temp,
                source,
            });
        }
        if let Err(source) = fs::rename(&temp, &path) {
            let _ = fs::remove_file(&temp);
            return Err(DiskError {
                action: "rename into place",
                path,
                source,
            });
        }
        self.trim_to_cap()?;
        Ok(true)
    }

    /// The verified payload for `(kind, key)`, or `build`'s, which is then
    /// stored. Disk problems never fail the call: they are logged as
    /// warnings and the artefact is built.
    pub fn get_or_build<E>(
        &self,
        kind: &str,
        key: &Key,
        build: impl FnOnce() -> Result<Vec<u8>, E>,
    ) -> Result<(Vec<u8>, DiskOutcome), E> {
        let rejected = match self.lookup(kind, key) {
            Ok(DiskLookup::Hit(payload)) => return Ok((payload, DiskOutcome::Loaded)),
            Ok(DiskLookup::Missing) => None,
            Ok(DiskLookup::Rejected(reason)) => Some(reason),
            Err(error) => {
                tracing::warn!(target: "nitro_cache", "{error}; building instead");
                None
            }
        };
        let payload = build()?;
        if let Err(error) = self.store(kind, key, &payload) {
            tracing::warn!(target: "nitro_cache", "{error}; the artefact was not persisted");
        }
        Ok((payload, DiskOutcome::Built { rejected }))
    }

    /// The entry files (path, size, modification time).
    fn entries(&self) -> Result<Vec<(PathBuf, u64, SystemTime)>, DiskError> {
        let read = fs::read_dir(&self.dir).map_err(|source| DiskError {
            action: "list",
            path: self.dir.clone(),
            source,
        })?;
        Ok(read
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == ENTRY_EXTENSION))
            .filter_map(|e| {
                let meta = e.metadata().ok()?;
                Some((e.path(), meta.len(), meta.modified().ok()?))
            })
            .collect())
    }

    /// Total bytes of entry files.
    pub fn total_bytes(&self) -> Result<u64, DiskError> {
        Ok(self.entries()?.iter().map(|(_, size, _)| size).sum())
    }

    fn trim_to_cap(&self) -> Result<(), DiskError> {
        let mut entries = self.entries()?;
        let mut total: u64 = entries.iter().map(|(_, size, _)| size).sum();
        if total <= self.config.max_bytes {
            return Ok(());
        }
        entries.sort_by_key(|(_, _, modified)| *modified);
        for (path, size, _) in entries {
            if total <= self.config.max_bytes {
                break;
            }
            // Another process may have removed it first; either way it is gone.
            let _ = fs::remove_file(&path);
            total = total.saturating_sub(size);
        }
        Ok(())
    }

    fn remove_stale_temps(&self) {
        let Ok(read) = fs::read_dir(&self.dir) else {
            return;
        };
        for entry in read.filter_map(Result::ok) {
            let is_temp = entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX);
            let stale = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > STALE_TEMP);
            if is_temp && stale {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}
