//! The bounded reader. Every length in the file is checked against the
//! file's size before anything is allocated, the index is checksummed before
//! it is decoded, CBOR nesting is capped, and tensor regions must tile the
//! data section exactly. A damaged or hostile file therefore yields an
//! [`Error`], never a panic or an allocation larger than the file.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{Cursor, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::cbor_head::bstr_head;
use super::index::{EntryRecord, IndexV1, IndexV2};
use super::{
    END_MAGIC, FOOTER_LEN, HEADER_LEN, MAGIC, MAX_DEPTH, MAX_INDEX_BYTES, OLDEST_READABLE, VERSION,
};
use crate::tensor::byte_len;
use crate::{Checkpoint, DType, Error, Metadata, Result, TensorEntry};

/// dtype and shape of a stored tensor, known without reading its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Element type.
    pub dtype: DType,
    /// Dimensions.
    pub shape: Vec<u64>,
    /// Raw byte count.
    pub bytes: u64,
}

/// A checkpoint opened for lazy reading: the header, footer and index are
/// read and verified on open; each tensor is read and verified only when
/// asked for by name (`tree/path`).
///
/// ```
/// # fn main() -> Result<(), nitro_ckpt::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("a.nckpt");
/// # let mut c = nitro_ckpt::Checkpoint::default();
/// # c.push("params", nitro_ckpt::TensorEntry::from_f32("w", vec![2], &[1.0, 2.0])?);
/// # nitro_ckpt::save(&path, &c)?;
/// let mut reader = nitro_ckpt::Reader::open(&path)?;
/// assert_eq!(reader.info("params/w").unwrap().shape, vec![2]);
/// let w = reader.tensor("params/w")?;
/// assert_eq!(w.to_f32()?, vec![1.0, 2.0]);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Reader<S = File> {
    source: S,
    path: PathBuf,
    version: u32,
    meta: Metadata,
    trees: BTreeMap<String, Vec<EntryRecord>>,
}

/// Reads a whole checkpoint, verifying every checksum.
pub fn load(path: impl AsRef<Path>) -> Result<Checkpoint> {
    Reader::open(path)?.into_checkpoint()
}

/// Decodes a whole checkpoint from memory, verifying every checksum.
pub fn decode(bytes: &[u8]) -> Result<Checkpoint> {
    Reader::from_bytes(bytes)?.into_checkpoint()
}

impl Reader<File> {
    /// Opens `path` and verifies its header, footer and index.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| Error::io(path, "open", e))?;
        Reader::new(file, path.to_path_buf())
    }
}

impl<'a> Reader<Cursor<&'a [u8]>> {
    /// Reads a checkpoint held in memory (errors name it `<memory>`).
    pub fn from_bytes(bytes: &'a [u8]) -> Result<Self> {
        Reader::new(Cursor::new(bytes), PathBuf::from("<memory>"))
    }
}

impl<S: Read + Seek> Reader<S> {
    /// Reads and verifies the header, footer and index from `source`;
    /// `path` only names it in errors.
    pub fn new(mut source: S, path: PathBuf) -> Result<Self> {
        let bad = |what: String| Error::format(&path, what);
        let io = |op, e| Error::io(&path, op, e);

        let len = source.seek(SeekFrom::End(0)).map_err(|e| io("seek", e))?;
        if len < HEADER_LEN + FOOTER_LEN {
            return Err(bad(format!(
                "{len} bytes is too short for a checkpoint (truncated?)"
            )));
        }
        let mut header = [0u8; HEADER_LEN as usize];
        read_at(&mut source, 0, &mut header).map_err(|e| io("read", e))?;
        if header[..8] != MAGIC {
            return Err(bad("bad magic: not a nitro checkpoint".into()));
        }
        let version = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
        if !(OLDEST_READABLE..=VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                path,
                found: version,
                oldest: OLDEST_READABLE,
                newest: VERSION,
            });
        }
        if header[12..16] != [0; 4] {
            return Err(bad("unknown header flags".into()));
        }

        let mut footer = [0u8; FOOTER_LEN as usize];
        read_at(&mut source, len - FOOTER_LEN, &mut footer).map_err(|e| io("read", e))?;
        if footer[48..] != END_MAGIC {
            return Err(bad(
                "no end marker: the file is truncated or was not completely written".into(),
            ));
        }
        let index_offset = u64::from_le_bytes(footer[..8].try_into().expect("8 bytes"));
        let index_len = u64::from_le_bytes(footer[8..16].try_into().expect("8 bytes"));
        if index_len > MAX_INDEX_BYTES {
            return Err(bad(format!(
                "index of {index_len} bytes exceeds the {MAX_INDEX_BYTES}-byte limit"
            )));
        }
        if index_offset < HEADER_LEN
            || index_offset.checked_add(index_len) != Some(len - FOOTER_LEN)
        {
            return Err(bad(format!(
                "index at {index_offset}+{index_len} does not end where the footer starts ({})",
                len - FOOTER_LEN
            )));
        }
        // Bounded: index_len < file length, checked just above.
        let mut index = vec![0u8; index_len as usize];
        read_at(&mut source, index_offset, &mut index).map_err(|e| io("read", e))?;
        let mut hasher = blake3::Hasher::new();
        hasher.update(&header);
        hasher.update(&index);
        if hasher.finalize().as_bytes() != &footer[16..48] {
            return Err(Error::Checksum {
                path,
                entry: "index".into(),
            });
        }

        let decoded = match version {
            1 => decode_index::<IndexV1>(&index)
                .and_then(|i| i.migrate())
                .map_err(|e| bad(format!("version 1 index: {e}")))?,
            _ => decode_index::<IndexV2>(&index).map_err(|e| bad(format!("index: {e}")))?,
        };
        check_table(&decoded.trees, index_offset).map_err(bad)?;
        Ok(Reader {
            source,
            path,
            version,
            meta: decoded.meta,
            trees: decoded.trees,
        })
    }

    /// The run metadata.
    pub fn meta(&self) -> &Metadata {
        &self.meta
    }

    /// The format version the file was written with.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Every tensor name, `tree/path`, tree by tree in stored order.
    pub fn names(&self) -> Vec<String> {
        self.trees
            .iter()
            .flat_map(|(tree, es)| es.iter().map(move |e| format!("{tree}/{}", e.path)))
            .collect()
    }

    /// dtype, shape and size of `tree/path`, without reading it.
    pub fn info(&self, name: &str) -> Option<TensorInfo> {
        self.entry(name).map(|e| TensorInfo {
            dtype: e.dtype,
            shape: e.shape.clone(),
            bytes: e.len,
        })
    }

    /// Reads and verifies the tensor `tree/path`.
    pub fn tensor(&mut self, name: &str) -> Result<TensorEntry> {
        let entry = self
            .entry(name)
            .cloned()
            .ok_or_else(|| Error::MissingTensor {
                path: self.path.clone(),
                entry: name.to_owned(),
            })?;
        read_tensor(&mut self.source, &self.path, name, entry)
    }

    /// Reads every tensor, verifying each checksum.
    pub fn into_checkpoint(mut self) -> Result<Checkpoint> {
        let mut trees = BTreeMap::new();
        for (tree, entries) in std::mem::take(&mut self.trees) {
            let mut tensors = Vec::with_capacity(entries.len());
            for e in entries {
                let name = format!("{tree}/{}", e.path);
                tensors.push(read_tensor(&mut self.source, &self.path, &name, e)?);
            }
            trees.insert(tree, tensors);
        }
        Ok(Checkpoint {
            meta: self.meta,
            trees,
        })
    }

    fn entry(&self, name: &str) -> Option<&EntryRecord> {
        let (tree, path) = name.split_once('/')?;
        self.trees.get(tree)?.iter().find(|e| e.path == path)
    }
}

fn read_at<S: Read + Seek>(source: &mut S, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
    source.seek(SeekFrom::Start(offset))?;
    source.read_exact(buf)
}

fn decode_index<T: serde::de::DeserializeOwned>(index: &[u8]) -> Result<T, String> {
    super::prescan::prescan(index, MAX_DEPTH)?;
    let mut rest = index;
    let value = ciborium::de::from_reader_with_recursion_limit(&mut rest, MAX_DEPTH)
        .map_err(|e| format!("does not decode: {e}"))?;
    if !rest.is_empty() {
        return Err(format!("{} stray bytes after the index", rest.len()));
    }
    Ok(value)
}

/// Names are well formed and unique, each entry's dtype and shape match its
/// length, and the entries' regions tile `[HEADER_LEN, index_offset)` exactly,
/// so every byte of the file is covered by a checksum or a structural check.
fn check_table(
    trees: &BTreeMap<String, Vec<EntryRecord>>,
    index_offset: u64,
) -> Result<(), String> {
    let mut regions = Vec::new();
    for (tree, entries) in trees {
        if tree.is_empty() || tree.contains('/') {
            return Err(format!("bad tree name {tree:?}"));
        }
        let mut seen = BTreeSet::new();
        for e in entries {
            let name = format!("{tree}/{}", e.path);
            if e.path.is_empty() || !seen.insert(e.path.as_str()) {
                return Err(format!("tensor `{name}` is unnamed or appears twice"));
            }
            if byte_len(e.dtype, &e.shape) != Some(e.len) {
                return Err(format!(
                    "tensor `{name}`: {} bytes do not match {} of shape {:?}",
                    e.len, e.dtype, e.shape
                ));
            }
            if e.blake3.len() != 32 {
                return Err(format!("tensor `{name}`: checksum is not 32 bytes"));
            }
            let head = bstr_head(e.len).1 as u64;
            regions.push((e.offset, head.saturating_add(e.len), name));
        }
    }
    regions.sort_by_key(|r| r.0);
    let mut expected = HEADER_LEN;
    for (offset, size, name) in regions {
        if offset != expected {
            return Err(format!(
                "tensor `{name}` starts at {offset}, expected {expected}"
            ));
        }
        expected = offset
            .checked_add(size)
            .filter(|&end| end <= index_offset)
            .ok_or_else(|| format!("tensor `{name}` extends past the data section"))?;
    }
    if expected != index_offset {
        return Err(format!(
            "{} unaccounted bytes before the index",
            index_offset - expected
        ));
    }
    Ok(())
}

fn read_tensor<S: Read + Seek>(
    source: &mut S,
    path: &Path,
    name: &str,
    e: EntryRecord,
) -> Result<TensorEntry> {
    let (want_head, n) = bstr_head(e.len);
    let mut head = [0u8; 9];
    read_at(source, e.offset, &mut head[..n]).map_err(|err| Error::io(path, "read", err))?;
    if head[..n] != want_head[..n] {
        return Err(Error::format(
            path,
            format!("tensor `{name}`: byte-string head does not match its length"),
        ));
    }
    // Bounded: check_table placed this region inside the file.
    let mut bytes = vec![0u8; e.len as usize];
    source
        .read_exact(&mut bytes)
        .map_err(|err| Error::io(path, "read", err))?;
    if crate::hash::digest(&bytes)[..] != e.blake3[..] {
        return Err(Error::Checksum {
            path: path.to_path_buf(),
            entry: name.to_owned(),
        });
    }
    Ok(TensorEntry {
        path: e.path,
        dtype: e.dtype,
        shape: e.shape,
        bytes,
    })
}
