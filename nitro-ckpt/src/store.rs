//! A directory of checkpoints with rotation: keep the last N and the best M
//! by a named metric. The store recognises its own files by name
//! (`ckpt-<step>.nckpt`) *and* by its manifest (`nitro-ckpt-store.cbor`),
//! and deletes only files that satisfy both, so nothing it did not write is
//! ever removed.
//!
//! Crash safety: a save first records the step in the manifest, then writes
//! the checkpoint atomically, then rotates. A crash anywhere leaves complete
//! checkpoints under final names; the manifest may name a step whose file
//! never appeared, which is harmless and pruned at the next save.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::atomic::{is_temp_name, write_atomic};
use crate::format::write::{to_cbor, write_checkpoint};
use crate::rotation::{keep_set, rank, BestBy};
use crate::{load, Checkpoint, Error, Result};

const MANIFEST: &str = "nitro-ckpt-store.cbor";
const PREFIX: &str = "ckpt-";
const SUFFIX: &str = ".nckpt";
/// Steps are zero-padded so that names sort by step in a plain listing.
const STEP_DIGITS: usize = 12;

/// How a [`Store`] rotates.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreConfig {
    /// Keep this many most recent checkpoints (at least 1, so a run can
    /// always resume from its latest).
    pub keep_last: usize,
    /// Also keep the best checkpoints by a metric.
    pub best: Option<BestBy>,
    /// Every metric name the run reports; `best.metric` must be one of them.
    pub known_metrics: Vec<String>,
}

/// One checkpoint in a store.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredCheckpoint {
    /// Its step.
    pub step: u64,
    /// Its file.
    pub path: PathBuf,
    /// Metrics recorded with it (empty for a file the store did not write).
    pub metrics: BTreeMap<String, f64>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Manifest {
    /// Steps this store wrote, with the metrics given at save time.
    steps: BTreeMap<u64, BTreeMap<String, f64>>,
}

/// A rotating directory of checkpoints. One store (one process) per directory.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    config: StoreConfig,
    manifest: Manifest,
}

impl Store {
    /// Opens (creating if needed) a store in `dir`. Fails at once when the
    /// ranking metric is not among `known_metrics`, or `keep_last` is 0.
    pub fn open(dir: impl Into<PathBuf>, config: StoreConfig) -> Result<Self> {
        let dir = dir.into();
        if config.keep_last == 0 {
            return Err(Error::Config(
                "keep_last must be at least 1 so the latest checkpoint survives".into(),
            ));
        }
        if let Some(best) = &config.best {
            if !config.known_metrics.contains(&best.metric) {
                return Err(Error::UnknownMetric {
                    metric: best.metric.clone(),
                    known: config.known_metrics.clone(),
                });
            }
        }
        fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, "create directory", e))?;
        let manifest_path = dir.join(MANIFEST);
        let manifest = match fs::read(&manifest_path) {
            Ok(bytes) => ciborium::de::from_reader_with_recursion_limit(&bytes[..], 16)
                .map_err(|e| Error::format(&manifest_path, format!("store manifest: {e}")))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Manifest::default(),
            Err(e) => return Err(Error::io(&manifest_path, "read", e)),
        };
        Ok(Store {
            dir,
            config,
            manifest,
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file a checkpoint of `step` is stored in.
    pub fn path_for(&self, step: u64) -> PathBuf {
        path_for(&self.dir, step)
    }

    /// Saves `ckpt` as `step` with the metrics measured there, then rotates.
    /// Returns the checkpoint's path. When the store ranks by a metric,
    /// `metrics` must contain it.
    pub fn save(
        &mut self,
        step: u64,
        ckpt: &Checkpoint,
        metrics: &BTreeMap<String, f64>,
    ) -> Result<PathBuf> {
        if let Some(best) = &self.config.best {
            if !metrics.contains_key(&best.metric) {
                return Err(Error::MissingMetric {
                    metric: best.metric.clone(),
                    step,
                });
            }
        }
        ckpt.validate()?;
        self.manifest.steps.insert(step, metrics.clone());
        self.write_manifest()?;
        let path = self.path_for(step);
        write_atomic(&path, |w| write_checkpoint(w, ckpt))?;
        tracing::debug!(path = %path.display(), "checkpoint saved");
        self.rotate()?;
        Ok(path)
    }

    /// Every complete checkpoint in the directory, by step. Temporary files
    /// of interrupted saves are never listed.
    pub fn list(&self) -> Result<Vec<StoredCheckpoint>> {
        let entries = fs::read_dir(&self.dir).map_err(|e| Error::io(&self.dir, "list", e))?;
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&self.dir, "list", e))?;
            let name = entry.file_name();
            let Some(step) = name.to_str().and_then(parse_name) else {
                continue;
            };
            out.push(StoredCheckpoint {
                step,
                path: entry.path(),
                metrics: self.manifest.steps.get(&step).cloned().unwrap_or_default(),
            });
        }
        out.sort_by_key(|c| c.step);
        Ok(out)
    }

    /// The checkpoint with the highest step, if any.
    pub fn latest(&self) -> Result<Option<StoredCheckpoint>> {
        Ok(self.list()?.pop())
    }

    /// Loads the newest checkpoint that verifies, skipping (with a warning)
    /// any that are damaged. `None` when the store holds none.
    pub fn load_latest(&self) -> Result<Option<(StoredCheckpoint, Checkpoint)>> {
        for stored in self.list()?.into_iter().rev() {
            match load(&stored.path) {
                Ok(ckpt) => return Ok(Some((stored, ckpt))),
                Err(e) => tracing::warn!(error = %e, "skipping damaged checkpoint"),
            }
        }
        Ok(None)
    }

    /// The best checkpoint by the configured metric (`None` without a
    /// ranking metric or without ranked checkpoints).
    pub fn best(&self) -> Result<Option<StoredCheckpoint>> {
        let Some(best) = &self.config.best else {
            return Ok(None);
        };
        let present: BTreeMap<u64, StoredCheckpoint> =
            self.list()?.into_iter().map(|c| (c.step, c)).collect();
        let ranked = rank(&self.manifest.steps, best);
        Ok(ranked.into_iter().find_map(|s| present.get(&s).cloned()))
    }

    /// Removes temporary files left by interrupted saves. Call only when no
    /// other process is saving into this directory.
    pub fn remove_stale_temps(&self) -> Result<usize> {
        let entries = fs::read_dir(&self.dir).map_err(|e| Error::io(&self.dir, "list", e))?;
        let mut removed = 0;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&self.dir, "list", e))?;
            let name = entry.file_name();
            let ours = name
                .to_str()
                .is_some_and(|n| is_temp_name(n) && (n.contains(SUFFIX) || n.contains(MANIFEST)));
            if ours {
                fs::remove_file(entry.path()).map_err(|e| Error::io(entry.path(), "remove", e))?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    fn rotate(&mut self) -> Result<()> {
        // A step recorded by a save that crashed before its rename has no
        // file; it must not take a keep-last slot from a real checkpoint.
        let dir = &self.dir;
        self.manifest
            .steps
            .retain(|&step, _| path_for(dir, step).exists());
        let keep = keep_set(
            &self.manifest.steps,
            self.config.keep_last,
            self.config.best.as_ref(),
        );
        let drop: Vec<u64> = self
            .manifest
            .steps
            .keys()
            .filter(|s| !keep.contains(s))
            .copied()
            .collect();
        if drop.is_empty() {
            return Ok(());
        }
        for &step in &drop {
            let path = self.path_for(step);
            match fs::remove_file(&path) {
                Ok(()) => tracing::debug!(path = %path.display(), "rotated out"),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&path, "remove", e)),
            }
            self.manifest.steps.remove(&step);
        }
        self.write_manifest()
    }

    fn write_manifest(&self) -> Result<()> {
        let bytes =
            to_cbor(&self.manifest).map_err(|e| Error::io(self.dir.join(MANIFEST), "encode", e))?;
        write_atomic(&self.dir.join(MANIFEST), |w| {
            std::io::Write::write_all(w, &bytes)
        })
    }
}

fn path_for(dir: &Path, step: u64) -> PathBuf {
    dir.join(format!(
        "{PREFIX}{step:0width$}{SUFFIX}",
        width = STEP_DIGITS
    ))
}

/// The step of a final checkpoint name `ckpt-<digits>.nckpt`.
fn parse_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_temps_do_not_parse() {
        assert_eq!(parse_name("ckpt-000000000042.nckpt"), Some(42));
        assert_eq!(
            parse_name("ckpt-99999999999999.nckpt"),
            Some(99999999999999)
        );
        assert_eq!(parse_name(".ckpt-000000000042.nckpt.tmp-1-0"), None);
        assert_eq!(parse_name("ckpt-.nckpt"), None);
        assert_eq!(parse_name("ckpt-+1.nckpt"), None);
        assert_eq!(parse_name("notes.txt"), None);
    }
}
