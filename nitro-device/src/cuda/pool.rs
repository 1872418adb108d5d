//! The pooling allocator: freed device blocks are kept in per-size free
//! lists and handed out again, so a training loop that allocates the same
//! shapes every step stops calling the driver after the first step.
//!
//! Sizes are rounded up to [`GRANULE`] bytes and reused only at exactly that
//! size (steady-state programs ask for the same sizes every call; exact
//! classes waste nothing). When the driver reports out-of-memory, the pool
//! releases every cached block, waits for the stream, and tries once more
//! before reporting [`DeviceError::OutOfMemory`] with the free and total
//! figures.

use super::cuda_err;
use crate::DeviceError;
use cudarc::driver::{sys::cudaError_enum, CudaSlice, CudaStream, DriverError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Allocation granule in bytes: cudaMalloc aligns to 256 anyway, and 512
/// keeps the number of distinct size classes small.
pub const GRANULE: usize = 512;

/// Figures about a device's pool.
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

#[derive(Default)]
struct State {
    free: HashMap<usize, Vec<CudaSlice<u8>>>,
    stats: PoolStats,
}

pub(crate) struct Pool {
    stream: Arc<CudaStream>,
    ordinal: usize,
    state: Mutex<State>,
}

/// Bytes actually reserved for a request of `bytes`.
pub(crate) fn rounded(bytes: usize) -> usize {
    bytes.max(1).div_ceil(GRANULE) * GRANULE
}

impl Pool {
    pub(crate) fn new(stream: Arc<CudaStream>, ordinal: usize) -> Pool {
        Pool {
            stream,
            ordinal,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A block of at least `bytes` bytes (contents undefined).
    pub(crate) fn alloc(&self, bytes: usize) -> Result<CudaSlice<u8>, DeviceError> {
        let size = rounded(bytes);
        {
            let mut st = self.state();
            if let Some(block) = st.free.get_mut(&size).and_then(Vec::pop) {
                st.stats.cached_bytes -= size;
                st.stats.in_use_bytes += size;
                st.stats.hits += 1;
                return Ok(block);
            }
        }
        let block = match self.driver_alloc(size) {
            Ok(b) => b,
            Err(e) if is_oom(&e) => {
                let released = self.release_cache();
                self.stream
                    .synchronize()
                    .map_err(|e| cuda_err("synchronize before retrying alloc", e))?;
                self.state().stats.oom_retries += 1;
                match self.driver_alloc(size) {
                    Ok(b) => b,
                    Err(e) if is_oom(&e) => {
                        let (free, total) = self.stream.context().mem_get_info().unwrap_or((0, 0));
                        return Err(DeviceError::OutOfMemory {
                            device: format!("cuda:{}", self.ordinal),
                            requested: size,
                            released,
                            free,
                            total,
                        });
                    }
                    Err(e) => return Err(cuda_err(format!("alloc {size} bytes"), e)),
                }
            }
            Err(e) => return Err(cuda_err(format!("alloc {size} bytes"), e)),
        };
        let mut st = self.state();
        st.stats.in_use_bytes += size;
        st.stats.misses += 1;
        Ok(block)
    }

    fn driver_alloc(&self, size: usize) -> Result<CudaSlice<u8>, DriverError> {
        // SAFETY: u8 has no invalid bit patterns; callers treat the contents
        // as undefined until they write them.
        unsafe { self.stream.alloc::<u8>(size) }
    }

    /// Return a block to its free list.
    pub(crate) fn give_back(&self, block: CudaSlice<u8>) {
        let size = block.len();
        let mut st = self.state();
        st.stats.in_use_bytes = st.stats.in_use_bytes.saturating_sub(size);
        st.stats.cached_bytes += size;
        st.free.entry(size).or_default().push(block);
    }

    /// Free every cached block; returns the bytes released.
    pub(crate) fn release_cache(&self) -> usize {
        let blocks: Vec<CudaSlice<u8>> = {
            let mut st = self.state();
            st.stats.cached_bytes = 0;
            st.free.drain().flat_map(|(_, v)| v).collect()
        };
        // Dropping a CudaSlice frees it (stream-ordered).
        blocks.iter().map(|b| b.len()).sum()
    }

    pub(crate) fn stats(&self) -> PoolStats {
        self.state().stats
    }
}

fn is_oom(e: &DriverError) -> bool {
    e.0 == cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY
}
