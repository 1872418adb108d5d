//! Batch uploads that overlap compute: a second per-device *copy stream*, a
//! set of reusable pinned (page-locked) host slots, and events that order
//! the copy stream against the device's main stream without the host
//! waiting.
//!
//! ```text
//!  host thread         copy stream                 main stream
//!  ───────────         ───────────                 ───────────
//!  upload_staged(b1)
//!    b1 -> pinned A ─> [wait fence(blk1)] H2D A->blk1, record up1
//!  run step 0 ────────────────────────────────────> step 0 kernels ...
//!  upload_staged(b2)
//!    b2 -> pinned B ─> [wait fence(blk2)] H2D B->blk2, record up2
//!  ready(up1) ──────────────────────────────────> wait up1
//!  run step 1 ────────────────────────────────────> step 1 kernels (blk1)
//! ```
//!
//! Three rules keep it correct:
//!
//! - **Pinned slots are never overwritten while a copy reads them.** Each
//!   slot records an event on the copy stream after its copy; a slot is
//!   reused only when that event has completed (queried without waiting);
//!   when every slot is busy and [`STAGING_MAX_SLOTS`] are allocated, the
//!   host waits for the least recently used one. [`choose_slot`] is that
//!   policy, free of driver calls so it is tested without a GPU.
//! - **The main stream never reads a staged block before its copy ends.**
//!   [`PendingUpload::ready`] makes the main stream wait on the copy's event
//!   (a device-side dependency; the host does not wait).
//! - **The copy stream never writes a block the main stream still uses.**
//!   The pool's blocks are ordered on the main stream only: a block freed by
//!   the host may still be read by queued kernels. So a staged buffer owns a
//!   *fence* event: when it is dropped, the fence is recorded on the main
//!   stream and the block goes back to the stager's own free list (not the
//!   pool); before the copy stream writes the block again it waits on the
//!   fence. A block fresh from the pool is fenced the same way at the time it
//!   is taken (so the first uploads wait for work already queued; the steady
//!   state reuses the stager's blocks and overlaps). [`CudaDevice::empty_cache`]
//!   synchronises the copy stream and hands the stager's blocks back to the
//!   pool, where main-stream order alone is then enough.

use super::pool::rounded;
use super::slots::{choose_slot, encode_le, SlotChoice, SlotState, STAGING_MAX_SLOTS};
use super::{cuda_err, CudaBuffer, CudaDevice};
use crate::{DType, DeviceError, HostBuffer};
use cudarc::driver::{
    result, sys::CUevent_flags, CudaEvent, CudaSlice, CudaStream, DevicePtrMut, PinnedHostSlice,
};
use std::collections::HashMap;
use std::sync::Arc;

/// Figures about a device's staged uploads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StagingStats {
    /// Staged uploads queued.
    pub uploads: u64,
    /// Bytes they moved.
    pub bytes: u64,
    /// Pinned slots allocated now.
    pub pinned_slots: usize,
    /// Page-locked host bytes held by those slots.
    pub pinned_bytes: usize,
    /// Times the host had to wait for a busy slot (every slot in flight).
    pub slot_waits: u64,
    /// Uploads whose device block came from the stager's own free list
    /// (no new fence on work queued at the time of the upload).
    pub block_reuses: u64,
    /// Device bytes the stager keeps for reuse (counted as in use by the pool).
    pub cached_block_bytes: usize,
}

struct PinnedSlot {
    memory: PinnedHostSlice<u8>,
    /// Recorded on the copy stream after the last copy that read `memory`.
    done: CudaEvent,
    last_use: u64,
}

/// A device block the stager may write again once its fence has passed.
struct FencedBlock {
    block: CudaSlice<u8>,
    fence: CudaEvent,
}

/// The per-device staging state (behind the device's staging lock).
pub(crate) struct Staging {
    copy: Arc<CudaStream>,
    slots: Vec<PinnedSlot>,
    /// Idle events, recycled for uploads and fences.
    events: Vec<CudaEvent>,
    /// Fenced device blocks by rounded size.
    blocks: HashMap<usize, Vec<FencedBlock>>,
    clock: u64,
    stats: StagingStats,
}

impl Staging {
    pub(crate) fn new(device: &CudaDevice) -> Result<Staging, DeviceError> {
        let copy = device
            .context()
            .new_stream()
            .map_err(|e| cuda_err("create copy stream", e))?;
        Ok(Staging {
            copy,
            slots: Vec::new(),
            events: Vec::new(),
            blocks: HashMap::new(),
            clock: 0,
            stats: StagingStats::default(),
        })
    }

    pub(crate) fn copy_stream(&self) -> &Arc<CudaStream> {
        &self.copy
    }

    fn event(&mut self, device: &CudaDevice) -> Result<CudaEvent, DeviceError> {
        match self.events.pop() {
            Some(e) => Ok(e),
            None => device
                .context()
                .new_event(None)
                .map_err(|e| cuda_err("create event", e)),
        }
    }

    /// A device block of `size` bytes that the copy stream may write now
    /// (its fence is already waited on by the copy stream).
    fn block(&mut self, device: &CudaDevice, size: usize) -> Result<FencedBlock, DeviceError> {
        let fenced = match self.blocks.get_mut(&size).and_then(Vec::pop) {
            Some(b) => {
                self.stats.block_reuses += 1;
                self.stats.cached_block_bytes -= size;
                b
            }
            None => {
                // A pool block may still be used by work queued on the main
                // stream (the pool is ordered on it alone): fence it now.
                let block = device.pool().alloc(size)?;
                let fence = self.event(device)?;
                fence
                    .record(device.stream())
                    .map_err(|e| cuda_err("record staging fence", e))?;
                FencedBlock { block, fence }
            }
        };
        self.copy
            .wait(&fenced.fence)
            .map_err(|e| cuda_err("copy stream waits on fence", e))?;
        Ok(fenced)
    }

    /// The index of an idle pinned slot of at least `bytes` bytes.
    fn slot(&mut self, device: &CudaDevice, bytes: usize) -> Result<usize, DeviceError> {
        loop {
            let states: Vec<SlotState> = self
                .slots
                .iter()
                .map(|s| SlotState {
                    capacity: s.memory.len(),
                    busy: !s
                        .done
                        .try_is_complete()
                        .map_err(|e| cuda_err("query staging slot", e))
                        .unwrap_or(false),
                    last_use: s.last_use,
                })
                .collect();
            match choose_slot(&states, bytes, STAGING_MAX_SLOTS) {
                SlotChoice::Reuse(i) => return Ok(i),
                SlotChoice::Add { capacity } => {
                    let slot = new_slot(device, capacity)?;
                    self.stats.pinned_bytes += capacity;
                    self.slots.push(slot);
                    self.stats.pinned_slots = self.slots.len();
                    return Ok(self.slots.len() - 1);
                }
                SlotChoice::Regrow { slot, capacity } => {
                    let fresh = new_slot(device, capacity)?;
                    let old = std::mem::replace(&mut self.slots[slot], fresh);
                    self.stats.pinned_bytes = self.stats.pinned_bytes - old.memory.len() + capacity;
                    return Ok(slot);
                }
                SlotChoice::Wait(i) => {
                    self.stats.slot_waits += 1;
                    self.slots[i]
                        .done
                        .synchronize()
                        .map_err(|e| cuda_err("wait for staging slot", e))?;
                }
            }
        }
    }

    /// Take back a staged buffer's block; its fence is already recorded on
    /// the main stream.
    pub(crate) fn give_back(&mut self, block: CudaSlice<u8>, fence: CudaEvent) {
        let size = block.len();
        self.stats.cached_block_bytes += size;
        self.blocks
            .entry(size)
            .or_default()
            .push(FencedBlock { block, fence });
    }

    /// Wait for the copy stream, free the pinned slots and return every
    /// cached block to the pool. Returns the device bytes handed back.
    pub(crate) fn release(&mut self, device: &CudaDevice) -> usize {
        // Nothing may still be reading a slot or writing a block after this.
        let _ = self.copy.synchronize();
        self.slots.clear();
        self.stats.pinned_slots = 0;
        self.stats.pinned_bytes = 0;
        self.stats.cached_block_bytes = 0;
        let mut bytes = 0;
        for (_, list) in self.blocks.drain() {
            for FencedBlock { block, fence } in list {
                bytes += block.len();
                // Main-stream order covers the block from here on: its last
                // use on the main stream precedes anything queued later.
                device.pool().give_back(block);
                self.events.push(fence);
            }
        }
        bytes
    }

    pub(crate) fn stats(&self) -> StagingStats {
        self.stats
    }
}

fn new_slot(device: &CudaDevice, capacity: usize) -> Result<PinnedSlot, DeviceError> {
    // SAFETY: u8 has no invalid bit patterns; the bytes are written before
    // any copy reads them.
    let memory = unsafe { device.context().alloc_pinned::<u8>(capacity) }
        .map_err(|e| cuda_err(format!("allocate {capacity} pinned bytes"), e))?;
    // A blocking-sync event: a host that waits for a slot sleeps instead of
    // spinning a core the data loader may need.
    let done = device
        .context()
        .new_event(Some(CUevent_flags::CU_EVENT_BLOCKING_SYNC))
        .map_err(|e| cuda_err("create staging event", e))?;
    Ok(PinnedSlot {
        memory,
        done,
        last_use: 0,
    })
}

/// A host-to-device copy queued on the copy stream. Turn it into a buffer
/// with [`PendingUpload::ready`] when the main stream needs it; dropping it
/// instead is safe (the block is fenced like any staged buffer).
pub struct PendingUpload {
    buffer: CudaBuffer,
    /// Recorded on the copy stream after the copy; `None` for an empty upload.
    copied: Option<CudaEvent>,
}

impl std::fmt::Debug for PendingUpload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PendingUpload({:?})", self.buffer)
    }
}

impl PendingUpload {
    /// Element type of the buffer being filled.
    pub fn dtype(&self) -> DType {
        self.buffer.dtype()
    }

    /// Element count of the buffer being filled.
    pub fn len(&self) -> usize {
        self.buffer.len()
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.buffer.is_empty()
    }

    /// Whether the copy has finished (asks the driver; never waits).
    pub fn is_complete(&self) -> bool {
        self.copied.as_ref().is_none_or(|e| e.is_complete())
    }

    /// The buffer, usable on the device's main stream: the main stream waits
    /// (on the device, not the host) for the copy before any later work.
    pub fn ready(mut self) -> Result<CudaBuffer, DeviceError> {
        let device = self.buffer.device().clone();
        if let Some(event) = self.copied.take() {
            device
                .stream()
                .wait(&event)
                .map_err(|e| cuda_err("main stream waits on upload", e))?;
            // The wait captured the event's state: it may be recorded again.
            if let Ok(mut guard) = device.staging_lock() {
                if let Some(st) = guard.as_mut() {
                    st.events.push(event);
                }
            }
        }
        // Move the buffer out: `PendingUpload` has no Drop, so this is a move.
        Ok(self.buffer)
    }
}

impl CudaDevice {
    /// Start copying `host` to a new device buffer on the copy stream,
    /// through a pinned staging slot, and return at once (the bytes are in
    /// pinned memory by then, so `host` may be dropped or reused).
    ///
    /// Call [`PendingUpload::ready`] before using the buffer; the next
    /// batch's upload then overlaps the current step's kernels.
    pub fn upload_staged(&self, host: &HostBuffer) -> Result<PendingUpload, DeviceError> {
        let (dtype, len, bytes) = (host.dtype(), host.len(), host.byte_len());
        if bytes == 0 {
            return Ok(PendingUpload {
                buffer: self.alloc(dtype, len)?,
                copied: None,
            });
        }
        let mut guard = self.staging_lock()?;
        let st = guard
            .as_mut()
            .expect("staging_lock initialises the staging state");
        let FencedBlock { mut block, fence } = st.block(self, rounded(bytes))?;
        let result = self.queue_copy(st, host, bytes, &mut block);
        // Even on failure the block goes back fenced, through the buffer's drop.
        let buffer = CudaBuffer::staged(self.clone(), block, fence, dtype, len);
        match result {
            Ok(copied) => {
                st.stats.uploads += 1;
                st.stats.bytes += bytes as u64;
                Ok(PendingUpload {
                    buffer,
                    copied: Some(copied),
                })
            }
            Err(e) => {
                // Dropping the buffer takes the staging lock: release it first.
                drop(guard);
                drop(buffer);
                Err(e)
            }
        }
    }

    /// Fill a pinned slot with `host` and queue its copy into `block` on the
    /// copy stream; returns the event recorded after the copy.
    fn queue_copy(
        &self,
        st: &mut Staging,
        host: &HostBuffer,
        bytes: usize,
        block: &mut CudaSlice<u8>,
    ) -> Result<CudaEvent, DeviceError> {
        let i = st.slot(self, bytes)?;
        st.clock += 1;
        let (clock, copy) = (st.clock, st.copy.clone());
        let slot = &mut st.slots[i];
        slot.last_use = clock;
        // The slot is idle (chosen so); cudarc's own slot event is never
        // recorded with event tracking off, so this does not wait.
        let pinned = slot
            .memory
            .as_mut_slice()
            .map_err(|e| cuda_err("map pinned slot", e))?;
        let src = &mut pinned[..bytes];
        encode_le(host, src);
        self.context()
            .bind_to_thread()
            .map_err(|e| cuda_err("bind context", e))?;
        let (dst, _no_tracking) = block.device_ptr_mut(&copy);
        // SAFETY: `dst` is a live device block of at least `bytes` bytes that
        // no stream touches until the copy's event (fenced above); `src` is
        // pinned memory that is not written again before `done` completes.
        unsafe { result::memcpy_htod_async(dst, &*src, copy.cu_stream()) }
            .map_err(|e| cuda_err("staged memcpy host to device", e))?;
        slot.done
            .record(&copy)
            .map_err(|e| cuda_err("record staging slot", e))?;
        let copied = st.event(self)?;
        copied
            .record(&copy)
            .map_err(|e| cuda_err("record upload", e))?;
        Ok(copied)
    }

    /// The copy stream staged uploads are queued on (created on first use).
    pub fn copy_stream(&self) -> Result<Arc<CudaStream>, DeviceError> {
        let guard = self.staging_lock()?;
        Ok(guard
            .as_ref()
            .expect("staging_lock initialises the staging state")
            .copy_stream()
            .clone())
    }

    /// Figures about staged uploads (all zero before the first).
    pub fn staging_stats(&self) -> StagingStats {
        match self.staging_lock() {
            Ok(guard) => guard.as_ref().map(Staging::stats).unwrap_or_default(),
            Err(_) => StagingStats::default(),
        }
    }
}
