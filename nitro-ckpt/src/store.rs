//! A directory of checkpoints with rotation: keep the last N and the best M
//! by a named metric. The store recognises its own files by name
//! (`ckpt-<step>.nckpt`) *and* by its manifest (`nitro-ckpt-store.cbor`),
//! and deletes only files that satisfy both, so nothing it did not write is
//! ever removed.
//!
//! Crash safety: a save writes the checkpoint atomically, then records it
//! in the manifest while rotating (one manifest write per save: the fewer
//! fsyncs, the less a run waits on its checkpoints). A crash anywhere leaves
//! complete checkpoints under final names; one saved but not yet recorded is
//! adopted when the store next opens (every checkpoint a store writes says
//! so, see below), and a recorded step whose file is gone is pruned at the
//! next save. Opening a store removes the temporaries of saves whose
//! process died.
//!
//! The manifest is checksummed, and every checkpoint a store writes records
//! the metrics it was saved with (user key [`STORE_METRICS`]), so a manifest
//! that is missing or damaged is rebuilt from the checkpoints beside it
//! (with a warning naming it) instead of stopping the run or steering
//! best-M rotation with altered values:
//!
//! ```text
//! nitro-ckpt-store.cbor  CBOR map { format: "nitro-ckpt-store", version: 2,
//!                                   steps: bytes (CBOR {step: {metric: f64}}),
//!                                   blake3: bytes (32, of `steps`) }
//! ```

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::atomic::{remove_stale_temps, write_atomic};
use crate::format::write::{to_cbor, write_checkpoint_with_meta};
use crate::rotation::{keep_set, rank, BestBy};
use crate::{load, Checkpoint, Error, Reader, Result, Value};

/// The store's manifest, beside its checkpoints.
pub const MANIFEST: &str = "nitro-ckpt-store.cbor";
/// The user metadata key under which a store records, in each checkpoint it
/// writes, the metrics that checkpoint was saved with (a map of floats): the
/// source a damaged manifest is rebuilt from.
pub const STORE_METRICS: &str = "nitro-ckpt.store_metrics";
const MANIFEST_FORMAT: &str = "nitro-ckpt-store";
const MANIFEST_VERSION: u32 = 2;
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

/// The manifest as stored: the steps' CBOR and its checksum.
#[derive(Serialize, Deserialize)]
struct ManifestFile {
    format: String,
    version: u32,
    #[serde(with = "crate::blob")]
    steps: Vec<u8>,
    #[serde(with = "crate::blob")]
    blake3: Vec<u8>,
}

/// A CBOR decoding error in words (ciborium's `Display` is a debug dump).
fn cbor_problem<T: std::fmt::Debug>(e: &ciborium::de::Error<T>) -> String {
    use ciborium::de::Error as E;
    match e {
        E::Io(_) => "it is cut short".into(),
        E::Syntax(at) => format!("it is not CBOR (byte {at})"),
        E::Semantic(at, what) => match at {
            Some(at) => format!("unexpected content at byte {at}: {what}"),
            None => format!("unexpected content: {what}"),
        },
        E::RecursionLimitExceeded => "it nests too deeply".into(),
    }
}

/// The manifest in `bytes`, or why it cannot be trusted.
fn decode_manifest(bytes: &[u8]) -> std::result::Result<Manifest, String> {
    let file: ManifestFile =
        ciborium::de::from_reader_with_recursion_limit(bytes, 16).map_err(|e| cbor_problem(&e))?;
    if file.format != MANIFEST_FORMAT || file.version != MANIFEST_VERSION {
        return Err(format!(
            "it is format `{}` version {}, not `{MANIFEST_FORMAT}` version {MANIFEST_VERSION}",
            file.format, file.version
        ));
    }
    if crate::hash::digest(&file.steps)[..] != file.blake3[..] {
        return Err("its checksum does not match its contents".into());
    }
    let steps = ciborium::de::from_reader_with_recursion_limit(&file.steps[..], 16)
        .map_err(|e| cbor_problem(&e))?;
    Ok(Manifest { steps })
}

/// A rotating directory of checkpoints. One store (one process) per directory.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    config: StoreConfig,
    manifest: Manifest,
    /// Why the manifest was rebuilt at open, if it was.
    rebuilt: Option<String>,
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
        if dir.exists() && !dir.is_dir() {
            return Err(Error::NotADirectory { path: dir });
        }
        fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, "create directory", e))?;
        let stale = remove_stale_temps(&dir, |target| {
            target == MANIFEST || parse_name(target).is_some()
        })?;
        if stale > 0 {
            tracing::debug!(dir = %dir.display(), stale, "removed temporaries of interrupted saves");
        }
        let mut store = Store {
            dir,
            config,
            manifest: Manifest::default(),
            rebuilt: None,
        };
        let manifest_path = store.dir.join(MANIFEST);
        let problem = match fs::read(&manifest_path) {
            Ok(bytes) => match decode_manifest(&bytes) {
                Ok(manifest) => {
                    store.manifest = manifest;
                    store.adopt_unrecorded()?;
                    None
                }
                Err(why) => Some(why),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("it is missing".to_string())
                .filter(|_| store.list().is_ok_and(|l| !l.is_empty())),
            Err(e) => return Err(Error::io(&manifest_path, "read", e)),
        };
        if let Some(why) = problem {
            let adopted = store.rebuild_manifest()?;
            let warning = format!(
                "store manifest `{}` could not be used ({why}); rebuilt it from the {adopted} checkpoint(s) beside it",
                manifest_path.display()
            );
            tracing::warn!(target: "nitro::ckpt", "{warning}");
            store.rebuilt = Some(warning);
        }
        Ok(store)
    }

    /// The warning given when [`Store::open`] found the manifest missing or
    /// damaged and rebuilt it from the checkpoint files (`None` otherwise).
    pub fn rebuilt_manifest(&self) -> Option<&str> {
        self.rebuilt.as_deref()
    }

    /// Records the checkpoints a store wrote that the manifest lacks (a
    /// kill between a save's rename and its manifest write) and finishes
    /// that save's rotation, so kills in that window never pile up files
    /// beyond the keep set plus the one being written.
    fn adopt_unrecorded(&mut self) -> Result<()> {
        let mut adopted = false;
        for stored in self.list()? {
            if self.manifest.steps.contains_key(&stored.step) {
                continue;
            }
            if let Some(metrics) = recorded_metrics(&stored.path) {
                self.manifest.steps.insert(stored.step, metrics);
                adopted = true;
            }
        }
        if adopted {
            self.rotate()?;
        }
        Ok(())
    }

    /// Rebuilds the manifest from the checkpoints in the directory that a
    /// store wrote (they record their metrics under [`STORE_METRICS`]); a
    /// damaged file or one written by other code is left out, and so is
    /// never rotated away. Returns how many were adopted.
    fn rebuild_manifest(&mut self) -> Result<usize> {
        let mut steps = BTreeMap::new();
        for stored in self.list()? {
            if let Some(metrics) = recorded_metrics(&stored.path) {
                steps.insert(stored.step, metrics);
            }
        }
        let adopted = steps.len();
        self.manifest = Manifest { steps };
        self.write_manifest()?;
        Ok(adopted)
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
        let path = self.path_for(step);
        let recorded = Value::Map(
            metrics
                .iter()
                .map(|(k, v)| (k.clone(), Value::Float(*v)))
                .collect(),
        );
        let mut meta = ckpt.meta.clone();
        meta.user.insert(STORE_METRICS.into(), recorded);
        write_atomic(&path, |w| write_checkpoint_with_meta(w, ckpt, &meta))?;
        tracing::debug!(path = %path.display(), "checkpoint saved");
        self.manifest.steps.insert(step, metrics.clone());
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
    /// any that are damaged; it equals what was saved (the store's
    /// [`STORE_METRICS`] record is taken out). `None` when the store holds none.
    pub fn load_latest(&self) -> Result<Option<(StoredCheckpoint, Checkpoint)>> {
        for stored in self.list()?.into_iter().rev() {
            match load(&stored.path) {
                Ok(mut ckpt) => {
                    // The store's own record is not part of what was saved.
                    ckpt.meta.user.remove(STORE_METRICS);
                    return Ok(Some((stored, ckpt)));
                }
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

    /// Removes temporary files left by interrupted saves whose process no
    /// longer runs ([`Store::open`] does this too). Returns how many.
    pub fn remove_stale_temps(&self) -> Result<usize> {
        remove_stale_temps(&self.dir, |target| {
            target == MANIFEST || parse_name(target).is_some()
        })
    }

    fn rotate(&mut self) -> Result<()> {
        // A recorded step whose file is gone (removed by hand, or by a
        // rotation killed before its manifest write) must not take a
        // keep-last slot from a real checkpoint.
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
        let path = self.dir.join(MANIFEST);
        let steps = to_cbor(&self.manifest.steps).map_err(|e| Error::io(&path, "encode", e))?;
        let file = ManifestFile {
            format: MANIFEST_FORMAT.into(),
            version: MANIFEST_VERSION,
            blake3: crate::hash::digest(&steps).to_vec(),
            steps,
        };
        let bytes = to_cbor(&file).map_err(|e| Error::io(&path, "encode", e))?;
        crate::atomic::write_file_atomic(&path, &bytes)
    }
}

/// The metrics a store recorded in the checkpoint at `path`, or `None` for
/// a damaged file or one another writer made (never adopted, so never
/// rotated away).
fn recorded_metrics(path: &Path) -> Option<BTreeMap<String, f64>> {
    let reader = match Reader::open(path) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(target: "nitro::ckpt", error = %e, "not recorded in the store manifest");
            return None;
        }
    };
    let Some(Value::Map(values)) = reader.meta().user.get(STORE_METRICS) else {
        return None;
    };
    Some(
        values
            .iter()
            .filter_map(|(k, v)| match v {
                Value::Float(x) => Some((k.clone(), *x)),
                _ => None,
            })
            .collect(),
    )
}

pub(crate) fn path_for(dir: &Path, step: u64) -> PathBuf {
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
