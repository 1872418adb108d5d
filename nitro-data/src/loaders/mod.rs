//! File loaders: IDX (MNIST's format, gzipped or not), CSV with a label
//! column, NPY and NPZ. Every error names the file, the byte offset or line,
//! and what was expected; malformed or truncated input never panics and
//! never makes the loader allocate more than the file can hold.

mod csv;
mod error;
mod idx;
mod npy;
mod npz;

pub use csv::{read_csv, CsvOptions, LabelColumn};
pub use error::LoadError;
pub use idx::{decode_idx, encode_idx, read_idx, read_idx_pair, write_idx};
pub use npy::{decode_npy, encode_npy, read_npy, write_npy};
pub use npz::{decode_npz, read_npz};

use std::path::Path;

/// Read a whole file, naming it in the error.
fn read_file(path: &Path) -> Result<Vec<u8>, LoadError> {
    std::fs::read(path).map_err(|e| LoadError::Io {
        file: path.display().to_string(),
        message: e.to_string(),
    })
}

/// Write a whole file, naming it in the error.
fn write_file(path: &Path, bytes: &[u8]) -> Result<(), LoadError> {
    std::fs::write(path, bytes).map_err(|e| LoadError::Io {
        file: path.display().to_string(),
        message: e.to_string(),
    })
}
