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
    /// A buffer holds another shape than the operation expected.
    #[error("shape mismatch: expected {expected:?}, got {got:?} (reshape the buffer if the layout is right)")]
    Shape {
        /// The shape the operation needs.
        expected: Vec<usize>,
        /// The buffer's shape.
        got: Vec<usize>,
    },
    /// A CUDA library (driver, NVRTC, cuBLAS) call failed.
    #[error("CUDA error in {op}: {detail}")]
    Cuda {
        /// What nitro was doing (`alloc`, `memcpy_htod`, `launch fused_3`, ...).
        op: String,
        /// The library's own message.
        detail: String,
    },
    /// The device ran out of memory even after the pool released its cache.
    #[error("CUDA out of memory on {device}: {requested} bytes requested, {free} of {total} bytes free after releasing {released} cached bytes; lower the batch size or free arrays held on the device")]
    OutOfMemory {
        /// The device (`cuda:0`).
        device: String,
        /// Bytes asked for.
        requested: usize,
        /// Bytes the pool gave back before retrying.
        released: usize,
        /// Free device bytes after the retry failed.
        free: usize,
        /// Total device bytes.
        total: usize,
    },
    /// NVRTC refused a generated kernel (a nitro bug: please report it with the log).
    #[error("NVRTC could not compile `{kernel}` for {arch}: {log}")]
    Compile {
        /// Kernel or module name.
        kernel: String,
        /// Target architecture (`sm_90`).
        arch: String,
        /// The compiler log.
        log: String,
    },
}
