//! nitro-ckpt: nitro's file formats. One-file CBOR checkpoints with
//! checksums, atomic writes, rotation and safe decoding; the export
//! container built on them ([`export`]); and the safetensors codec
//! ([`safetensors`]) for PyTorch and Hugging Face interop.
//!
//! **Owns:** the checkpoint format ([`save`], [`load`], lazy [`Reader`]),
//! the run-state record ([`Checkpoint`], [`Metadata`]), a rotating directory
//! of checkpoints ([`Store`], [`AsyncSaver`]) whose checksummed manifest is
//! rebuilt from the checkpoints when damaged, crash-safe replacement of any
//! small file ([`write_file_atomic`]) and the cleanup of what killed writers
//! left ([`remove_stale_temps`]), fingerprint comparison
//! ([`compare_fingerprint`]), the export container ([`export::Export`]) and
//! safetensors reading, writing and mismatch listing
//! ([`safetensors::compare`]). Every dtype is stored as itself:
//! [`TensorEntry::from_array`] and [`TensorEntry::to_array`] move a
//! [`HostArray`](nitro_device::HostArray) in and out bit for bit.
//! **Does not own:** what goes into a checkpoint or an export (nitro-run
//! decides), the value types ([`DType`] and `HostArray` are nitro-device's,
//! its only nitro dependency), device transfers (tensors arrive as host
//! arrays or bytes), or any notion of experiments.
//!
//! # File layout (version 2)
//!
//! ```text
//!  offset 0                                                    file end
//!  ┌──────────────┬──────────────────────────────┬───────────┬──────────┐
//!  │ header (16)  │ data section                 │ index     │ footer   │
//!  │              │                              │ (CBOR)    │ (56)     │
//!  └──────────────┴──────────────────────────────┴───────────┴──────────┘
//!
//!  header:  "NITROCKP" | version u32 LE | flags u32 LE (0)
//!  data:    one CBOR byte string per tensor, back to back:
//!           [head: major type 2 + length][raw little-endian bytes] ...
//!  index:   CBOR map { meta: Metadata,
//!                      trees: { "params": [ {path, dtype, shape,
//!                                            offset, len, blake3}, ...],
//!                               ... } }
//!  footer:  index offset u64 LE | index len u64 LE
//!           | blake3(header ‖ index) (32) | "NCKPEND\0"
//! ```
//!
//! Why this shape:
//! - Tensors stream from the caller's buffers to the file in one pass and
//!   are hashed on the way; the index, written last, holds their offsets and
//!   digests, so no size has to be known in advance.
//! - A file cut short lacks the end marker and is refused at once; the index
//!   checksum covers all metadata and (through the per-tensor digests) every
//!   tensor byte, and each tensor can be verified alone when read lazily.
//! - Tensor regions must tile the data section exactly, so no byte of the
//!   file escapes a checksum or a structural check.
//! - Every length is checked against the file size before allocation, the
//!   index is capped at [`format::MAX_INDEX_BYTES`], every CBOR length in it
//!   is checked against the bytes that remain before serde pre-allocates,
//!   and nesting is capped at [`format::MAX_DEPTH`]: a hostile file gives an
//!   [`Error`], never a panic or an allocation out of proportion to its size.
//! - Version 1 (a flat `tree/path` tensor list and no preset, schedule or
//!   user fields) is still read and migrated; see [`format::OLDEST_READABLE`].
//!
//! # The other two formats
//!
//! ```text
//!  export container (export::Export): a checkpoint file as above whose
//!  meta.user says format = "nitro-export", version 1, width, inputs, outputs
//!    tree "program"                    graph: u8, the caller's encoded program
//!    trees "params", "state", "device" the arrays it reads, each as itself
//!
//!  safetensors (safetensors::read / write / compare):
//!  ┌──────────────┬────────────────────────────────┬──────────────────────┐
//!  │ N: u64 LE    │ header: N bytes of UTF-8 JSON  │ data: raw LE bytes   │
//!  └──────────────┴────────────────────────────────┴──────────────────────┘
//!  header: { "<name>": { "dtype": "F32", "shape": [784, 256],
//!                        "data_offsets": [begin, end] }, "__metadata__": {..} }
//! ```
//!
//! # Example
//!
//! ```
//! use nitro_ckpt::{load, save, Checkpoint, Metadata, Reader, TensorEntry};
//!
//! # fn main() -> Result<(), nitro_ckpt::Error> {
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("step-100.nckpt");
//!
//! let mut ckpt = Checkpoint::new(Metadata {
//!     experiment: "DigitsMlp".into(),
//!     step: 100,
//!     ..Metadata::default()
//! });
//! ckpt.push("params", TensorEntry::from_f32("dense1.weight", vec![2, 2], &[1.0, 2.0, 3.0, 4.0])?);
//! ckpt.push("opt_state", TensorEntry::from_i64("count", vec![], &[100])?);
//! save(&path, &ckpt)?;
//!
//! assert_eq!(load(&path)?, ckpt);
//!
//! // Or lazily, one tensor at a time:
//! let mut reader = Reader::open(&path)?;
//! assert_eq!(reader.meta().step, 100);
//! assert_eq!(reader.tensor("params/dense1.weight")?.to_f32()?, vec![1.0, 2.0, 3.0, 4.0]);
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod atomic;
mod blob;
mod checkpoint;
mod dtype;
mod error;
pub mod export;
mod fingerprint;
pub mod format;
mod hash;
mod meta;
mod rotation;
pub mod safetensors;
mod save;
mod saver;
mod store;
mod tensor;

pub use atomic::{remove_stale_temps, write_file_atomic};
pub use checkpoint::Checkpoint;
pub use error::{Error, Result};
pub use fingerprint::{compare_fingerprint, Difference};
pub use format::read::{decode, load, Reader, TensorInfo};
pub use meta::{ConfigValue, Metadata, MetricsRow, Value};
pub use nitro_device::DType;
pub use rotation::{BestBy, Goal};
pub use save::{encode, save};
pub use saver::AsyncSaver;
pub use store::{Store, StoreConfig, StoredCheckpoint, MANIFEST, STORE_METRICS};
pub use tensor::TensorEntry;
