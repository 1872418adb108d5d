//! Errors of device selection and memory.

use crate::DType;

/// What went wrong asking for a device or moving memory.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// A CUDA device was requested from a build without the `cuda` feature.
    #[error("nitro was built without CUDA: rebuild with `--features cuda` to use {0}")]
    BuiltWithoutCuda(String),
    /// The CUDA driver library could not be loaded.
    #[error("no CUDA driver found: {0}; use Device::Cpu or install the NVIDIA driver")]
    NoDriver(String),
    /// A buffer had another dtype than the operation expected.
    #[error("dtype mismatch: expected {expected}, got {got}")]
    DType {
        /// The dtype the operation needs.
        expected: DType,
        /// The dtype it was given.
        got: DType,
    },
    /// A buffer had another length than its shape implies.
    #[error("buffer of {got} elements cannot hold shape {shape:?} ({expected} elements)")]
    Length {
        /// The shape it should hold.
        shape: Vec<usize>,
        /// Elements the shape needs.
        expected: usize,
        /// Elements the buffer has.
        got: usize,
    },
}
