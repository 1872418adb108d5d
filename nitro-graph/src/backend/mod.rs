//! Kernel backends: `cpu` (always) and `cuda` (feature `cuda`).

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
