//! Typed device buffers: a pooled block of device memory with a dtype and an
//! element count, and the copies between it and a [`HostBuffer`].

use super::{cuda_err, CudaDevice};
use crate::{DType, DeviceError, HostBuffer};
use cudarc::driver::{CudaEvent, CudaSlice, DevicePtr};

/// A contiguous device buffer of `len` elements of `dtype`. Dropping it
/// returns its block to the device's pool, or, for a buffer filled by a
/// staged upload ([`CudaDevice::upload_staged`]), to the stager, fenced
/// behind the work queued on the main stream so far.
pub struct CudaBuffer {
    device: CudaDevice,
    block: Option<CudaSlice<u8>>,
    dtype: DType,
    len: usize,
    /// The logical shape (its product is `len`); `[len]` until set.
    shape: Vec<usize>,
    /// For a staged buffer: the event recorded on the main stream when it is
    /// dropped, which the copy stream waits on before writing the block again.
    fence: Option<CudaEvent>,
}

impl std::fmt::Debug for CudaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaBuffer({}{:?} on cuda:{})",
            self.dtype,
            self.shape,
            self.device.ordinal()
        )
    }
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        let Some(block) = self.block.take() else {
            return;
        };
        match self.fence.take() {
            None => self.device.pool().give_back(block),
            Some(fence) => {
                // Everything queued on the main stream so far may use the
                // block; the copy stream waits for this point before reuse.
                if fence.record(self.device.stream()).is_err() {
                    // No fence: order the hard way rather than risk a race.
                    let _ = self.device.synchronize();
                }
                match self.device.staging_lock() {
                    Ok(mut guard) => match guard.as_mut() {
                        Some(st) => st.give_back(block, fence),
                        None => self.device.pool().give_back(block),
                    },
                    Err(_) => self.device.pool().give_back(block),
                }
            }
        }
    }
}

/// Host bytes of a buffer, in the device layout (bool as one byte 0/1).
fn host_bytes(buf: &HostBuffer) -> Vec<u8> {
    // Every platform CUDA supports is little-endian, so the device layout
    // is the little-endian byte image.
    buf.to_le_bytes()
}

impl CudaDevice {
    /// An uninitialised buffer of `len` elements of `dtype`.
    pub fn alloc(&self, dtype: DType, len: usize) -> Result<CudaBuffer, DeviceError> {
        let block = self.pool().alloc(len * dtype.size_of())?;
        Ok(CudaBuffer {
            device: self.clone(),
            block: Some(block),
            dtype,
            len,
            shape: vec![len],
            fence: None,
        })
    }

    /// An uninitialised buffer of `dtype` holding `shape`.
    pub fn alloc_shaped(&self, dtype: DType, shape: &[usize]) -> Result<CudaBuffer, DeviceError> {
        self.alloc(dtype, shape.iter().product())?.reshape(shape)
    }

    /// A buffer of `len` zeros (all-zero bits: 0, 0.0, false).
    pub fn alloc_zeros(&self, dtype: DType, len: usize) -> Result<CudaBuffer, DeviceError> {
        let mut buf = self.alloc(dtype, len)?;
        buf.fill_zero()?;
        Ok(buf)
    }

    /// Copy a host buffer to a new device buffer (queued on the stream; the
    /// host data is staged before this returns, so it may be dropped).
    pub fn upload(&self, host: &HostBuffer) -> Result<CudaBuffer, DeviceError> {
        let mut buf = self.alloc(host.dtype(), host.len())?;
        buf.copy_from_host(host)?;
        Ok(buf)
    }
}

impl CudaBuffer {
    /// A buffer over a block the stager owns (see [`CudaDevice::upload_staged`]).
    pub(crate) fn staged(
        device: CudaDevice,
        block: CudaSlice<u8>,
        fence: CudaEvent,
        dtype: DType,
        len: usize,
    ) -> CudaBuffer {
        CudaBuffer {
            device,
            block: Some(block),
            dtype,
            len,
            shape: vec![len],
            fence: Some(fence),
        }
    }

    /// The logical shape: `[len]` unless given by [`CudaBuffer::reshape`],
    /// [`CudaDevice::alloc_shaped`] or a program that returned it.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The same buffer viewed with `shape` (no copy); an error when the
    /// shape's element count is not the buffer's length.
    pub fn reshape(mut self, shape: &[usize]) -> Result<CudaBuffer, DeviceError> {
        self.set_shape(shape)?;
        Ok(self)
    }

    /// View this buffer with `shape` in place (see [`CudaBuffer::reshape`]).
    pub fn set_shape(&mut self, shape: &[usize]) -> Result<(), DeviceError> {
        let expected: usize = shape.iter().product();
        if expected != self.len {
            return Err(DeviceError::Length {
                shape: shape.to_vec(),
                expected,
                got: self.len,
            });
        }
        self.shape = shape.to_vec();
        Ok(())
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Element count.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of the elements (the block may be larger).
    pub fn byte_len(&self) -> usize {
        self.len * self.dtype.size_of()
    }

    /// The device it lives on.
    pub fn device(&self) -> &CudaDevice {
        &self.device
    }

    fn block(&self) -> &CudaSlice<u8> {
        self.block.as_ref().expect("a live buffer owns its block")
    }

    fn block_mut(&mut self) -> &mut CudaSlice<u8> {
        self.block.as_mut().expect("a live buffer owns its block")
    }

    /// The raw device address, for kernel arguments and library calls.
    /// Valid while the buffer lives; work using it must be queued on the
    /// device's stream.
    pub fn device_ptr(&self) -> u64 {
        let (ptr, _sync) = self.block().device_ptr(self.device.stream());
        ptr
    }

    fn check(&self, dtype: DType, len: usize) -> Result<(), DeviceError> {
        if dtype != self.dtype {
            return Err(DeviceError::DType {
                expected: self.dtype,
                got: dtype,
            });
        }
        if len != self.len {
            return Err(DeviceError::Length {
                shape: vec![self.len],
                expected: self.len,
                got: len,
            });
        }
        Ok(())
    }

    /// Set every byte to zero.
    pub fn fill_zero(&mut self) -> Result<(), DeviceError> {
        let bytes = self.byte_len();
        if bytes == 0 {
            return Ok(());
        }
        let stream = self.device.stream().clone();
        let mut view = self.block_mut().slice_mut(..bytes);
        stream
            .memset_zeros(&mut view)
            .map_err(|e| cuda_err("memset", e))
    }

    /// Overwrite the contents with `host` (same dtype and length).
    pub fn copy_from_host(&mut self, host: &HostBuffer) -> Result<(), DeviceError> {
        self.check(host.dtype(), host.len())?;
        if self.len == 0 {
            return Ok(());
        }
        let bytes = host_bytes(host);
        let stream = self.device.stream().clone();
        let mut view = self.block_mut().slice_mut(..bytes.len());
        stream
            .memcpy_htod(&bytes, &mut view)
            .map_err(|e| cuda_err("memcpy host to device", e))?;
        // The staging vector dies here: make sure the copy has read it.
        stream
            .synchronize()
            .map_err(|e| cuda_err("memcpy host to device", e))
    }

    /// Copy the contents back to a new host buffer (waits for queued work).
    pub fn download(&self) -> Result<HostBuffer, DeviceError> {
        let bytes = self.byte_len();
        if bytes == 0 {
            return Ok(HostBuffer::zeros(self.dtype, 0));
        }
        let stream = self.device.stream();
        let mut host = vec![0u8; bytes];
        stream
            .memcpy_dtoh(&self.block().slice(..bytes), &mut host)
            .map_err(|e| cuda_err("memcpy device to host", e))?;
        stream
            .synchronize()
            .map_err(|e| cuda_err("memcpy device to host", e))?;
        HostBuffer::from_le_bytes(self.dtype, &host)
    }

    /// Overwrite the contents with another device buffer's (same dtype and length).
    pub fn copy_from(&mut self, other: &CudaBuffer) -> Result<(), DeviceError> {
        self.check(other.dtype, other.len)?;
        let bytes = self.byte_len();
        if bytes == 0 {
            return Ok(());
        }
        let stream = self.device.stream().clone();
        let src = other.block().slice(..bytes);
        let mut dst = self.block.as_mut().expect("live").slice_mut(..bytes);
        stream
            .memcpy_dtod(&src, &mut dst)
            .map_err(|e| cuda_err("memcpy device to device", e))
    }

    /// A new buffer with the same contents and shape.
    pub fn try_clone(&self) -> Result<CudaBuffer, DeviceError> {
        let mut out = self.device.alloc_shaped(self.dtype, &self.shape)?;
        out.copy_from(self)?;
        Ok(out)
    }
}
