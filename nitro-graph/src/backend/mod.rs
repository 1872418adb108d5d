//! Kernel backends: `cpu` (always) and `cuda` (feature `cuda`; without it a
//! stub with the same `CudaProgram` type, whose compile answers "built without
//! CUDA", so callers need no `cfg`).

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(not(feature = "cuda"))]
#[path = "cuda_stub.rs"]
pub mod cuda;
