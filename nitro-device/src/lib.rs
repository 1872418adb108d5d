//! nitro-device: devices and memory.
//!
//! Owns what a value *is* and *where it lives*: the element types nitro
//! understands ([`DType`]), the devices it can run on ([`Device`]), and host
//! buffers ([`HostBuffer`]) that every backend reads and writes. It knows
//! nothing about graphs, experiments or runs; `nitro-graph` builds on it.
//!
//! The CUDA side (feature `cuda`) is loaded dynamically: a machine with no
//! driver builds and runs everything, and asking for a CUDA device there is
//! an error ([`DeviceError::NoDriver`] or [`DeviceError::BuiltWithoutCuda`]),
//! never a panic. With the feature, [`cuda`] holds the GPU side: device
//! handles with one main stream each (plus a copy stream for staged uploads
//! through pinned memory that overlap compute), typed device buffers from a
//! pooling allocator, host<->device copies, cuBLAS products and NVRTC
//! compilation.
//!
//! ```
//! use nitro_device::{DType, Device, HostBuffer};
//! let buf = HostBuffer::from(vec![1.0f32, 2.0, 3.0]);
//! assert_eq!(buf.dtype(), DType::F32);
//! assert_eq!(buf.len(), 3);
//! assert_eq!(Device::parse("cuda:1"), Some(Device::Cuda(1)));
//! ```
#![warn(missing_docs)]

mod buffer;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(not(feature = "cuda"))]
#[path = "cuda_stub.rs"]
pub mod cuda;
mod device;
mod dtype;
mod error;
mod ptx_cache;

pub use buffer::HostBuffer;
pub use device::Device;
pub use dtype::DType;
pub use error::DeviceError;
pub use half::{bf16, f16};
