//! Params as safetensors, the format PyTorch and Hugging Face use: export
//! by parameter path, import with every name, dtype and shape checked.
//!
//! ```text
//!  ┌──────────────┬────────────────────────────────┬──────────────────────┐
//!  │ N: u64 LE    │ header: N bytes of UTF-8 JSON  │ data: raw LE bytes   │
//!  └──────────────┴────────────────────────────────┴──────────────────────┘
//!  header: { "<name>": { "dtype": "F32", "shape": [784, 256],
//!                        "data_offsets": [begin, end] },      (into data)
//!            "__metadata__": { "<key>": "<text>" } }          (optional)
//! ```
//!
//! Reading checks what the format promises before allocating: the header
//! fits the file, offsets lie inside the data, tensors tile it with no gap
//! or overlap, and each byte count matches its dtype and shape.
//!
//! Every dtype is stored as itself. [`compare`] lists every name, dtype and
//! shape that differs between a file and the arrays it should load into, so
//! an import that does not fit is refused with the whole list at once.
//!
//! Why a codec of our own rather than the `safetensors` crate: this one is
//! ~300 lines over the workspace's own [`HostArray`] (no conversion from
//! borrowed views), its errors name the file, the tensor and the byte range,
//! and its decoding is bounded the same way as the checkpoint reader's
//! (tests/safetensors.rs feeds it truncated and mutated files). The format
//! is small and frozen, so there is little to gain from the dependency.
//!
//! ```
//! use std::collections::BTreeMap;
//! use nitro_ckpt::safetensors;
//! use nitro_device::HostArray;
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("params.safetensors");
//! let params = BTreeMap::from([("dense.weight".to_string(), HostArray::new(&[2, 2], vec![1f32, 2., 3., 4.])?)]);
//! safetensors::write(&path, &params, &BTreeMap::new())?;
//! let file = safetensors::read(&path)?;
//! assert_eq!(file.tensors, params);
//! assert!(safetensors::compare(&params, &file.tensors).is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nitro_device::{DType, HostArray, HostBuffer};
use serde_json::{json, Map, Value};

/// The largest header read: far above any real params tree, far below a
/// size that would hurt to allocate from a hostile length field.
const MAX_HEADER_BYTES: u64 = 100 << 20;

/// One difference between a safetensors file and the params it should load into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// A param the model has and the file lacks.
    Missing {
        /// Param path.
        name: String,
    },
    /// A tensor in the file that names no param.
    Unexpected {
        /// Tensor name in the file.
        name: String,
    },
    /// Same name, another dtype.
    Dtype {
        /// Param path.
        name: String,
        /// The model's dtype.
        expected: String,
        /// The file's dtype.
        found: String,
    },
    /// Same name, another shape.
    Shape {
        /// Param path.
        name: String,
        /// The model's shape.
        expected: Vec<usize>,
        /// The file's shape.
        found: Vec<usize>,
    },
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mismatch::Missing { name } => write!(f, "`{name}`: missing from the file"),
            Mismatch::Unexpected { name } => {
                write!(f, "`{name}`: in the file, but the model has no such param")
            }
            Mismatch::Dtype {
                name,
                expected,
                found,
            } => write!(
                f,
                "`{name}`: dtype {found} in the file, the model has {expected}"
            ),
            Mismatch::Shape {
                name,
                expected,
                found,
            } => write!(
                f,
                "`{name}`: shape {found:?} in the file, the model has {expected:?}"
            ),
        }
    }
}

/// Reading, writing or importing a safetensors file failed.
#[derive(Debug, thiserror::Error)]
pub enum SafetensorsError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The bytes are not a valid safetensors file.
    #[error("{path}: not a valid safetensors file: {reason}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A dtype nitro has no array type for (e.g. `F8_E4M3`, `U16`).
    #[error("{path}: tensor `{name}` has dtype {dtype}, which nitro cannot hold; convert it to F32, F16, BF16, F64, I32, I64, U8 or BOOL")]
    UnsupportedDtype {
        /// The file.
        path: PathBuf,
        /// Tensor name.
        name: String,
        /// Its dtype.
        dtype: String,
    },
    /// The file does not fit the model: every difference, not just the first.
    #[error("{path} does not fit the model's params ({} mismatches):\n  {}", .mismatches.len(), list(.mismatches))]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// Each difference.
        mismatches: Vec<Mismatch>,
    },
}

fn list(m: &[Mismatch]) -> String {
    m.iter()
        .map(|m| m.to_string())
        .collect::<Vec<_>>()
        .join("\n  ")
}

/// A safetensors file's tensors and its `__metadata__`.
#[derive(Debug, Clone, PartialEq)]
pub struct SafetensorsFile {
    /// Tensors by name.
    pub tensors: BTreeMap<String, HostArray>,
    /// The free-form text metadata.
    pub metadata: BTreeMap<String, String>,
}

/// The safetensors name of a dtype.
pub fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "F32",
        DType::F64 => "F64",
        DType::F16 => "F16",
        DType::BF16 => "BF16",
        DType::I32 => "I32",
        DType::I64 => "I64",
        DType::U8 => "U8",
        DType::Bool => "BOOL",
    }
}

fn dtype_of(name: &str) -> Option<DType> {
    Some(match name {
        "F32" => DType::F32,
        "F64" => DType::F64,
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        "I32" => DType::I32,
        "I64" => DType::I64,
        "U8" => DType::U8,
        "BOOL" => DType::Bool,
        _ => return None,
    })
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SafetensorsError + '_ {
    move |source| SafetensorsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Encodes `tensors` (and text `metadata`) as safetensors bytes.
pub fn encode(
    tensors: &BTreeMap<String, HostArray>,
    metadata: &BTreeMap<String, String>,
) -> Vec<u8> {
    let mut header = Map::new();
    if !metadata.is_empty() {
        header.insert("__metadata__".into(), json!(metadata));
    }
    let mut data = Vec::new();
    for (name, a) in tensors {
        let bytes = a.data().to_le_bytes();
        let begin = data.len();
        data.extend_from_slice(&bytes);
        header.insert(
            name.clone(),
            json!({
                "dtype": dtype_name(a.dtype()),
                "shape": a.shape(),
                "data_offsets": [begin, data.len()],
            }),
        );
    }
    let mut text = Value::Object(header).to_string().into_bytes();
    // Pad the header with spaces so the data starts 8-byte aligned, as the
    // reference writer does (readers may then map it in place).
    while (8 + text.len()) % 8 != 0 {
        text.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + text.len() + data.len());
    out.extend_from_slice(&(text.len() as u64).to_le_bytes());
    out.extend_from_slice(&text);
    out.extend_from_slice(&data);
    out
}

/// Writes `tensors` to `path` (through a temporary file and a rename, so
/// a crash never leaves half a file under the final name).
pub fn write(
    path: impl AsRef<Path>,
    tensors: &BTreeMap<String, HostArray>,
    metadata: &BTreeMap<String, String>,
) -> Result<(), SafetensorsError> {
    let path = path.as_ref();
    let tmp = path.with_extension("safetensors.tmp");
    std::fs::write(&tmp, encode(tensors, metadata)).map_err(io(path))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

/// Reads a safetensors file, checking its structure (see the module docs).
pub fn read(path: impl AsRef<Path>) -> Result<SafetensorsFile, SafetensorsError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(io(path))?;
    decode(path, &bytes)
}

/// Decodes safetensors `bytes` (`path` names them in errors).
pub fn decode(path: &Path, bytes: &[u8]) -> Result<SafetensorsFile, SafetensorsError> {
    let bad = |reason: String| SafetensorsError::Format {
        path: path.to_path_buf(),
        reason,
    };
    let Some(len) = bytes.get(..8) else {
        return Err(bad(format!(
            "{} bytes, shorter than the 8-byte header length",
            bytes.len()
        )));
    };
    let n = u64::from_le_bytes(len.try_into().expect("8 bytes"));
    if n > MAX_HEADER_BYTES || n > (bytes.len() - 8) as u64 {
        return Err(bad(format!(
            "header length {n} does not fit the file's {} bytes",
            bytes.len()
        )));
    }
    let (header, data) = bytes[8..].split_at(n as usize);
    let header: Map<String, Value> = serde_json::from_slice(header)
        .map_err(|e| bad(format!("the header is not a JSON object: {e}")))?;
    let mut file = SafetensorsFile {
        tensors: BTreeMap::new(),
        metadata: BTreeMap::new(),
    };
    let mut regions = Vec::new();
    for (name, entry) in header {
        if name == "__metadata__" {
            let Value::Object(items) = entry else {
                return Err(bad("`__metadata__` is not an object".into()));
            };
            for (k, v) in items {
                let Value::String(v) = v else {
                    return Err(bad(format!("metadata `{k}` is not a string")));
                };
                file.metadata.insert(k, v);
            }
            continue;
        }
        let field = |key: &str| {
            entry
                .get(key)
                .ok_or_else(|| bad(format!("tensor `{name}` has no `{key}`")))
        };
        let dtype_text = field("dtype")?
            .as_str()
            .ok_or_else(|| bad(format!("tensor `{name}`: dtype is not a string")))?;
        let dtype = dtype_of(dtype_text).ok_or_else(|| SafetensorsError::UnsupportedDtype {
            path: path.to_path_buf(),
            name: name.clone(),
            dtype: dtype_text.into(),
        })?;
        let numbers = |key: &str| -> Result<Vec<usize>, SafetensorsError> {
            field(key)?
                .as_array()
                .and_then(|items| {
                    items
                        .iter()
                        .map(|v| v.as_u64().map(|u| u as usize))
                        .collect()
                })
                .ok_or_else(|| bad(format!("tensor `{name}`: {key} is not a list of integers")))
        };
        let shape = numbers("shape")?;
        let offsets = numbers("data_offsets")?;
        let [begin, end] = offsets[..] else {
            return Err(bad(format!(
                "tensor `{name}`: data_offsets is not [begin, end]"
            )));
        };
        let expected = shape
            .iter()
            .try_fold(dtype.size_of(), |acc, &d| acc.checked_mul(d));
        if begin > end || end > data.len() || expected != Some(end - begin) {
            return Err(bad(format!(
                "tensor `{name}`: bytes {begin}..{end} of {} do not hold a {dtype_text} tensor of shape {shape:?}",
                data.len()
            )));
        }
        regions.push((begin, end, name.clone()));
        let buffer = HostBuffer::from_le_bytes(dtype, &data[begin..end])
            .map_err(|e| bad(format!("tensor `{name}`: {e}")))?;
        let array =
            HostArray::new(&shape, buffer).map_err(|e| bad(format!("tensor `{name}`: {e}")))?;
        file.tensors.insert(name, array);
    }
    regions.sort();
    let mut at = 0;
    for (begin, end, name) in &regions {
        if *begin != at {
            return Err(bad(format!(
                "tensor `{name}` starts at byte {begin}, not {at}: the data has a gap or an overlap"
            )));
        }
        at = *end;
    }
    if at != data.len() {
        return Err(bad(format!(
            "{} data bytes after the last tensor",
            data.len() - at
        )));
    }
    Ok(file)
}

/// Every difference between `found` and the `expected` arrays, by name.
pub fn compare(
    expected: &BTreeMap<String, HostArray>,
    found: &BTreeMap<String, HostArray>,
) -> Vec<Mismatch> {
    let mut out = Vec::new();
    for (name, want) in expected {
        match found.get(name) {
            None => out.push(Mismatch::Missing { name: name.clone() }),
            Some(got) => {
                if got.dtype() != want.dtype() {
                    out.push(Mismatch::Dtype {
                        name: name.clone(),
                        expected: dtype_name(want.dtype()).into(),
                        found: dtype_name(got.dtype()).into(),
                    });
                }
                if got.shape() != want.shape() {
                    out.push(Mismatch::Shape {
                        name: name.clone(),
                        expected: want.shape().to_vec(),
                        found: got.shape().to_vec(),
                    });
                }
            }
        }
    }
    out.extend(
        found
            .keys()
            .filter(|n| !expected.contains_key(*n))
            .map(|n| Mismatch::Unexpected { name: n.clone() }),
    );
    out
}
