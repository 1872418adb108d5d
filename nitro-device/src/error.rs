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
    /// NCCL (libnccl, the GPU collectives) could not be loaded here or on
    /// another rank of the group.
    #[error(
        "NCCL not found: {0}; install libnccl2 and libnccl-dev (nitro loads `libnccl.so`: with only \
         libnccl.so.2, link it as libnccl.so in a folder on LD_LIBRARY_PATH), or run on the CPU \
         (`--device cpu`)"
    )]
    NoNccl(String),
    /// Exchanging the NCCL unique id over the host process group failed.
    #[error("NCCL bootstrap over the process group failed: {0}")]
    NcclBootstrap(#[source] crate::collective::CollectiveError),
    /// An NCCL collective did not complete in time: a rank died or hangs.
    #[error(
        "rank {rank}: {op} on the GPU did not complete within {waited_s:.1} s: a rank died or hangs; \
         the NCCL communicator was aborted and the job cannot continue (raise \
         NITRO_COLLECTIVE_TIMEOUT_S if a rank is legitimately slow)"
    )]
    NcclTimeout {
        /// This process's rank.
        rank: usize,
        /// The collective (`ncclAllReduce`).
        op: &'static str,
        /// Seconds waited.
        waited_s: f64,
    },
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
    /// A row operation on an array of rank 0, which has no batch axis.
    #[error("`{op}` on an array of rank 0: it has no batch axis (axis 0); give each sample a row")]
    NoBatchAxis {
        /// The row operation (`gather_rows`, `slice_rows`, ...).
        op: &'static str,
    },
    /// A row index past the last row.
    #[error("row {index} out of range for {rows} rows")]
    RowIndex {
        /// The index asked for.
        index: usize,
        /// Rows the array has.
        rows: usize,
    },
    /// A row range outside the array.
    #[error("row range {start}..{end} out of bounds for {rows} rows")]
    RowRange {
        /// First row asked for.
        start: usize,
        /// One past the last row asked for.
        end: usize,
        /// Rows the array has.
        rows: usize,
    },
    /// Padding an array to fewer rows than it has.
    #[error("cannot pad {rows} rows to width {width}: already wider")]
    TooManyRows {
        /// Rows the array has.
        rows: usize,
        /// The width asked for.
        width: usize,
    },
    /// No row to repeat (padding an empty array) or no array to concatenate.
    #[error("`{op}` needs at least one row: the array (or list of arrays) is empty")]
    NoRows {
        /// The row operation.
        op: &'static str,
    },
    /// `item()` of an array that is not one element.
    #[error("item() of an array of shape {shape:?}, which is not one element")]
    NotOneElement {
        /// The array's shape.
        shape: Vec<usize>,
    },
}
