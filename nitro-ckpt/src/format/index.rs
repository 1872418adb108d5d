//! The index: metadata plus the table of tensor entries, one CBOR item per
//! file, in a layout per format version. Older layouts are migrated to the
//! newest on read, so the rest of the crate only sees version 2.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::meta::{ConfigValue, Metadata, MetricsRow};
use crate::DType;

/// Where one tensor lives in the file and what it must hash to.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct EntryRecord {
    /// Path inside the tree (version 2) or `tree/path` (version 1).
    pub path: String,
    #[serde(with = "crate::dtype")]
    pub dtype: DType,
    pub shape: Vec<u64>,
    /// Absolute file offset of the tensor's CBOR byte-string head.
    pub offset: u64,
    /// Raw byte count (after the head).
    pub len: u64,
    /// blake3 of the raw bytes.
    #[serde(with = "crate::blob")]
    pub blake3: Vec<u8>,
}

/// Version 2 index: metadata and named trees.
#[derive(Debug, Deserialize)]
pub(crate) struct IndexV2 {
    pub meta: Metadata,
    pub trees: BTreeMap<String, Vec<EntryRecord>>,
}

/// The same, borrowed, for writing without cloning the metadata.
#[derive(Serialize)]
pub(crate) struct IndexV2Ref<'a> {
    pub meta: &'a Metadata,
    pub trees: &'a BTreeMap<String, Vec<EntryRecord>>,
}

/// Version 1 metadata: no preset, schedule state or user key/values yet.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct MetadataV1 {
    pub experiment: String,
    pub config: Vec<ConfigValue>,
    pub fingerprint: String,
    pub step: u64,
    pub epoch: u64,
    pub position_in_epoch: u64,
    pub data_seed: u64,
    #[serde(with = "crate::blob::map")]
    pub rng_states: BTreeMap<String, Vec<u8>>,
    pub metrics_history: Vec<MetricsRow>,
    pub wall_time_s: f64,
}

/// Version 1 index: one flat tensor list named `tree/path`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct IndexV1 {
    pub meta: MetadataV1,
    pub tensors: Vec<EntryRecord>,
}

impl IndexV1 {
    /// Migrates to version 2: fields that did not exist take their defaults,
    /// and `tree/path` names split into trees.
    pub(crate) fn migrate(self) -> Result<IndexV2, String> {
        let m = self.meta;
        let meta = Metadata {
            experiment: m.experiment,
            preset: None,
            config: m.config,
            fingerprint: m.fingerprint,
            step: m.step,
            epoch: m.epoch,
            position_in_epoch: m.position_in_epoch,
            data_seed: m.data_seed,
            rng_states: m.rng_states,
            schedule: BTreeMap::new(),
            metrics_history: m.metrics_history,
            wall_time_s: m.wall_time_s,
            user: BTreeMap::new(),
        };
        let mut trees: BTreeMap<String, Vec<EntryRecord>> = BTreeMap::new();
        for mut e in self.tensors {
            let Some((tree, path)) = e.path.split_once('/') else {
                return Err(format!("version 1 tensor `{}` has no tree prefix", e.path));
            };
            let tree = tree.to_owned();
            e.path = path.to_owned();
            trees.entry(tree).or_default().push(e);
        }
        Ok(IndexV2 { meta, trees })
    }
}
