//! The CUDA stand-in of a build without the `cuda` feature (Candle's dummy
//! backend): the same types and signatures as the real `cuda` module, so
//! code that can run on a GPU compiles everywhere without a `cfg`. The
//! entry points that would reach a GPU ([`CudaDevice::open`], the probes,
//! NVRTC) answer [`DeviceError::BuiltWithoutCuda`], naming the fix. The
//! handle types are uninhabited, so no device, buffer or pending upload can
//! exist here, and their methods are statically unreachable (`match *self
//! {}`): no stub behaviour can stand in for a real one.
//!
//! The PTX cache is plain Rust and the same type in both builds.

use crate::collective::{Communicator, ProcessGroup};
use crate::{DType, DeviceError, HostBuffer};
use std::sync::Arc;
use std::time::Duration;

pub use crate::ptx_cache::{PtxCache, PtxStats, PtxStore};

fn without(what: &str) -> DeviceError {
    DeviceError::BuiltWithoutCuda(what.to_string())
}

/// Always an error: this build has no CUDA support.
pub fn probe_driver() -> Result<(), DeviceError> {
    Err(without("the CUDA driver"))
}

/// Always an error: this build has no CUDA support.
pub fn probe_nvrtc() -> Result<(), DeviceError> {
    Err(without("NVRTC"))
}

/// Always an error: this build has no CUDA support.
pub fn probe_cublas() -> Result<(), DeviceError> {
    Err(without("cuBLAS"))
}

/// Always an error: this build has no CUDA support.
pub fn device_count() -> Result<usize, DeviceError> {
    Err(without("CUDA devices"))
}

/// Always an error: this build has no CUDA support.
pub fn nvrtc_version() -> Result<(i32, i32), DeviceError> {
    Err(without("NVRTC"))
}

/// Always an error: this build has no CUDA support.
pub fn compile_ptx(name: &str, _source: &str, arch: &str) -> Result<Arc<str>, DeviceError> {
    Err(without(&format!("NVRTC (kernel `{name}` for {arch})")))
}

/// Figures about a device's pool (none exists in this build).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Bytes held by live buffers.
    pub in_use_bytes: usize,
    /// Bytes cached for reuse.
    pub cached_bytes: usize,
    /// Allocations served from the cache.
    pub hits: u64,
    /// Allocations that went to the driver.
    pub misses: u64,
    /// Times the cache was released to satisfy an allocation.
    pub oom_retries: u64,
}

/// A GPU handle; none can exist in this build.
#[derive(Clone, Debug)]
pub enum CudaDevice {}

impl CudaDevice {
    /// Always an error: this build has no CUDA support.
    pub fn open(ordinal: usize) -> Result<CudaDevice, DeviceError> {
        Err(without(&format!("cuda:{ordinal}")))
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        match *self {}
    }

    /// The device name.
    pub fn name(&self) -> &str {
        match *self {}
    }

    /// (major, minor) compute capability.
    pub fn compute_capability(&self) -> (u32, u32) {
        match *self {}
    }

    /// The virtual architecture kernels are compiled for.
    pub fn arch(&self) -> String {
        match *self {}
    }

    /// Wait for the device's main stream.
    pub fn synchronize(&self) -> Result<(), DeviceError> {
        match *self {}
    }

    /// (free, total) device memory in bytes.
    pub fn memory_info(&self) -> Result<(usize, usize), DeviceError> {
        match *self {}
    }

    /// The pool's figures.
    pub fn pool_stats(&self) -> PoolStats {
        match *self {}
    }

    /// Release cached pool blocks; returns the bytes released.
    pub fn empty_cache(&self) -> usize {
        match *self {}
    }

    /// A buffer of `len` uninitialised elements.
    pub fn alloc(&self, _dtype: DType, _len: usize) -> Result<CudaBuffer, DeviceError> {
        match *self {}
    }

    /// A buffer of uninitialised elements of `shape`.
    pub fn alloc_shaped(&self, _dtype: DType, _shape: &[usize]) -> Result<CudaBuffer, DeviceError> {
        match *self {}
    }

    /// A buffer of `len` zeros.
    pub fn alloc_zeros(&self, _dtype: DType, _len: usize) -> Result<CudaBuffer, DeviceError> {
        match *self {}
    }

    /// Copy `host` to a new device buffer.
    pub fn upload(&self, _host: &HostBuffer) -> Result<CudaBuffer, DeviceError> {
        match *self {}
    }

    /// Queue a copy of `host` on the copy stream.
    pub fn upload_staged(&self, _host: &HostBuffer) -> Result<PendingUpload, DeviceError> {
        match *self {}
    }

    /// Compile `source` to PTX for this device's architecture.
    pub fn compile(&self, _name: &str, _source: &str) -> Result<Arc<str>, DeviceError> {
        match *self {}
    }
}

/// A device buffer; none can exist in this build.
#[derive(Debug)]
pub enum CudaBuffer {}

impl CudaBuffer {
    /// The buffer's shape.
    pub fn shape(&self) -> &[usize] {
        match *self {}
    }

    /// The same buffer with another shape of the same length.
    pub fn reshape(self, _shape: &[usize]) -> Result<CudaBuffer, DeviceError> {
        match self {}
    }

    /// Set the shape (same length).
    pub fn set_shape(&mut self, _shape: &[usize]) -> Result<(), DeviceError> {
        match *self {}
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        match *self {}
    }

    /// Element count.
    pub fn len(&self) -> usize {
        match *self {}
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        match *self {}
    }

    /// Size in bytes.
    pub fn byte_len(&self) -> usize {
        match *self {}
    }

    /// The device it lives on.
    pub fn device(&self) -> &CudaDevice {
        match *self {}
    }

    /// Its device address.
    pub fn device_ptr(&self) -> u64 {
        match *self {}
    }

    /// Set every element to zero.
    pub fn fill_zero(&mut self) -> Result<(), DeviceError> {
        match *self {}
    }

    /// Overwrite from a host buffer of the same dtype and length.
    pub fn copy_from_host(&mut self, _host: &HostBuffer) -> Result<(), DeviceError> {
        match *self {}
    }

    /// Copy back to the host.
    pub fn download(&self) -> Result<HostBuffer, DeviceError> {
        match *self {}
    }

    /// Overwrite from another device buffer of the same dtype and length.
    pub fn copy_from(&mut self, _other: &CudaBuffer) -> Result<(), DeviceError> {
        match *self {}
    }

    /// A device-side copy.
    pub fn try_clone(&self) -> Result<CudaBuffer, DeviceError> {
        match *self {}
    }
}

/// A queued host-to-device copy; none can exist in this build.
#[derive(Debug)]
pub enum PendingUpload {}

impl PendingUpload {
    /// Element type of the buffer being filled.
    pub fn dtype(&self) -> DType {
        match *self {}
    }

    /// Element count of the buffer being filled.
    pub fn len(&self) -> usize {
        match *self {}
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        match *self {}
    }

    /// Whether the copy has finished.
    pub fn is_complete(&self) -> bool {
        match *self {}
    }

    /// The buffer, usable on the device's main stream.
    pub fn ready(self) -> Result<CudaBuffer, DeviceError> {
        match self {}
    }
}

/// Always an error: this build has no CUDA support.
pub fn probe_nccl() -> Result<(), DeviceError> {
    Err(without("NCCL"))
}

/// Always an error: this build has no CUDA support.
pub fn nccl_version() -> Result<(u32, u32, u32), DeviceError> {
    Err(without("NCCL"))
}

/// The NCCL module's types, as in the real build.
pub mod nccl {
    pub use super::{nccl_version, probe_nccl, NcclCommunicator};
}

/// An NCCL communicator; none can exist in this build.
#[derive(Debug)]
pub enum NcclCommunicator {}

impl NcclCommunicator {
    /// Always an error: this build has no CUDA support.
    pub fn init(
        _group: &ProcessGroup,
        device: &CudaDevice,
    ) -> Result<NcclCommunicator, DeviceError> {
        match *device {}
    }

    /// Always an error: this build has no CUDA support.
    pub fn init_over(
        _host: &dyn Communicator,
        device: &CudaDevice,
        _timeout: Duration,
    ) -> Result<NcclCommunicator, DeviceError> {
        match *device {}
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        match *self {}
    }

    /// Processes in the communicator.
    pub fn world_size(&self) -> usize {
        match *self {}
    }

    /// The GPU this rank's buffers live on.
    pub fn device(&self) -> &CudaDevice {
        match *self {}
    }

    /// Sum `buf` over the ranks.
    pub fn all_reduce_sum(&self, _buf: &mut CudaBuffer) -> Result<(), DeviceError> {
        match *self {}
    }

    /// `dst = Σ_ranks src` by device address.
    ///
    /// # Safety
    /// As in the real build (never callable here).
    pub unsafe fn all_reduce_sum_raw(
        &self,
        _src: u64,
        _dst: u64,
        _len: usize,
        _dtype: DType,
    ) -> Result<(), DeviceError> {
        match *self {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_point_names_the_fix() {
        let errors = [
            CudaDevice::open(1).unwrap_err(),
            probe_driver().unwrap_err(),
            nvrtc_version().unwrap_err(),
            compile_ptx("k", "", "compute_90").unwrap_err(),
            probe_nccl().unwrap_err(),
            nccl_version().unwrap_err(),
        ];
        for e in errors {
            assert!(matches!(e, DeviceError::BuiltWithoutCuda(_)), "{e}");
            assert!(e.to_string().contains("--features cuda"), "{e}");
        }
        assert!(CudaDevice::open(1)
            .unwrap_err()
            .to_string()
            .contains("cuda:1"));
    }
}
