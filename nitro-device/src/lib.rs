//! nitro-device: devices and memory.
//!
//! Owns what a value *is* and *where it lives*: the vocabulary of values
//! that every nitro crate shares, and devices. The vocabulary is one
//! element type enum ([`DType`]), one signature ([`TensorSpec`]: dtype and
//! shape), one untyped-by-Rust host buffer ([`HostBuffer`], a vector per
//! dtype) and one shaped host value ([`HostArray`]: a spec plus a buffer,
//! with the batch-on-axis-0 row operations datasets and padding need).
//! nitro-graph runs programs on `HostArray`s (its `Array` is this type),
//! nitro-data holds datasets and batches in them, nitro-ckpt stores them
//! bit for bit. The devices it can run on ([`Device`]) and device memory
//! ([`cuda`]) complete it.
//!
//! **Does not own:** graphs, file formats, experiments or runs; nothing
//! here depends on another nitro crate.
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
//! Collectives between processes ([`collective`]: the process group under
//! `mpirun`, a fixed-order all-reduce, broadcast, barrier) live here too, so
//! that nitro-graph can run an all-reduce without knowing MPI. MPI is the
//! `mpi` feature; without it a world of one needs nothing.
//!
//! ```
//! use nitro_device::{DType, Device, HostArray, HostBuffer};
//! let buf = HostBuffer::from(vec![1.0f32, 2.0, 3.0]);
//! assert_eq!(buf.dtype(), DType::F32);
//! assert_eq!(buf.len(), 3);
//! let a = HostArray::new(&[3, 1], buf)?;
//! assert_eq!(a.spec().to_string(), "f32[3,1]");
//! assert_eq!(a.slice_rows(1, 3)?.as_slice::<f32>(), Some(&[2.0, 3.0][..]));
//! assert_eq!(Device::parse("cuda:1"), Some(Device::Cuda(1)));
//! # Ok::<(), nitro_device::DeviceError>(())
//! ```
#![warn(missing_docs)]

mod array;
mod buffer;
pub mod collective;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(not(feature = "cuda"))]
#[path = "cuda_stub.rs"]
pub mod cuda;
mod device;
mod dtype;
mod error;
mod ptx_cache;
mod spec;

pub use array::{HostArray, PadFill};
pub use buffer::{Element, HostBuffer};
pub use device::Device;
pub use dtype::DType;
pub use error::DeviceError;
pub use half::{bf16, f16};
pub use spec::{ShapeFmt, TensorSpec};
