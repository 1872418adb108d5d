//! The streaming writer: header, tensor byte strings straight from the
//! caller's buffers (hashed on the way), then the index and footer. One pass
//! over the tensor bytes; nothing is copied.

use std::collections::BTreeMap;
use std::io::{self, Write};

use super::cbor_head::bstr_head;
use super::index::{EntryRecord, IndexV2Ref};
use super::{END_MAGIC, HEADER_LEN, MAGIC, VERSION};
use crate::{Checkpoint, Metadata};

/// Below this many tensor bytes a helper thread costs more than it saves.
const PARALLEL_HASH_BYTES: u64 = 4 << 20;

/// Writes `ckpt` (already validated) in the current format version.
pub(crate) fn write_checkpoint<W: Write>(w: &mut W, ckpt: &Checkpoint) -> io::Result<()> {
    write_with_index(w, ckpt, VERSION, |meta, trees| {
        to_cbor(&IndexV2Ref { meta, trees })
    })
}

/// Writes `ckpt`'s tensors with `meta` in place of its metadata (a store
/// adds its record without copying the tensors).
pub(crate) fn write_checkpoint_with_meta<W: Write>(
    w: &mut W,
    ckpt: &Checkpoint,
    meta: &Metadata,
) -> io::Result<()> {
    write_with_index(w, ckpt, VERSION, |_, trees| {
        to_cbor(&IndexV2Ref { meta, trees })
    })
}

/// Writes header, data section, the index `make_index` renders from the
/// tensor table, and the footer.
pub(crate) fn write_with_index<W: Write>(
    w: &mut W,
    ckpt: &Checkpoint,
    version: u32,
    make_index: impl FnOnce(&Metadata, &BTreeMap<String, Vec<EntryRecord>>) -> io::Result<Vec<u8>>,
) -> io::Result<()> {
    let mut header = [0u8; HEADER_LEN as usize];
    header[..8].copy_from_slice(&MAGIC);
    header[8..12].copy_from_slice(&version.to_le_bytes());
    w.write_all(&header)?;

    // Hash on a second thread while this one writes: the digests are only
    // needed for the index, which goes last, so hashing costs no wall time
    // when a core is free.
    let digests = std::thread::scope(|scope| -> io::Result<Vec<[u8; 32]>> {
        let hasher = (ckpt.tensor_bytes() >= PARALLEL_HASH_BYTES).then(|| {
            scope.spawn(|| {
                ckpt.trees
                    .values()
                    .flatten()
                    .map(|t| crate::hash::digest(&t.bytes))
                    .collect::<Vec<_>>()
            })
        });
        for t in ckpt.trees.values().flatten() {
            let (head, n) = bstr_head(t.bytes.len() as u64);
            w.write_all(&head[..n])?;
            w.write_all(&t.bytes)?;
        }
        Ok(match hasher {
            Some(h) => h
                .join()
                .map_err(|_| io::Error::other("hashing thread panicked"))?,
            None => ckpt
                .trees
                .values()
                .flatten()
                .map(|t| crate::hash::digest(&t.bytes))
                .collect(),
        })
    })?;

    let mut offset = HEADER_LEN;
    let mut digests = digests.into_iter();
    let mut table: BTreeMap<String, Vec<EntryRecord>> = BTreeMap::new();
    for (tree, tensors) in &ckpt.trees {
        let records = table.entry(tree.clone()).or_default();
        for t in tensors {
            let len = t.bytes.len() as u64;
            records.push(EntryRecord {
                path: t.path.clone(),
                dtype: t.dtype,
                shape: t.shape.clone(),
                offset,
                len,
                blake3: digests.next().unwrap_or_default().to_vec(),
            });
            offset += bstr_head(len).1 as u64 + len;
        }
    }

    let index = make_index(&ckpt.meta, &table)?;
    let mut hasher = blake3::Hasher::new();
    hasher.update(&header);
    hasher.update(&index);
    w.write_all(&index)?;
    w.write_all(&offset.to_le_bytes())?;
    w.write_all(&(index.len() as u64).to_le_bytes())?;
    w.write_all(hasher.finalize().as_bytes())?;
    w.write_all(&END_MAGIC)?;
    Ok(())
}

pub(crate) fn to_cbor<T: serde::Serialize>(value: &T) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    ciborium::ser::into_writer(value, &mut out).map_err(io::Error::other)?;
    Ok(out)
}

/// Writes `ckpt` in the version 1 layout, to prove the reader still takes it.
#[cfg(test)]
pub(crate) fn write_v1<W: Write>(w: &mut W, ckpt: &Checkpoint) -> io::Result<()> {
    use super::index::{IndexV1, MetadataV1};
    write_with_index(w, ckpt, 1, |m, trees| {
        let meta = MetadataV1 {
            experiment: m.experiment.clone(),
            config: m.config.clone(),
            fingerprint: m.fingerprint.clone(),
            step: m.step,
            epoch: m.epoch,
            position_in_epoch: m.position_in_epoch,
            data_seed: m.data_seed,
            rng_states: m.rng_states.clone(),
            metrics_history: m.metrics_history.clone(),
            wall_time_s: m.wall_time_s,
        };
        let tensors = trees
            .iter()
            .flat_map(|(tree, es)| {
                es.iter().map(move |e| EntryRecord {
                    path: format!("{tree}/{}", e.path),
                    ..e.clone()
                })
            })
            .collect();
        to_cbor(&IndexV1 { meta, tensors })
    })
}
