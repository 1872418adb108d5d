//! The staging policy, free of driver calls so it is tested without a GPU:
//! how big a pinned slot is, which slot an upload takes ([`choose_slot`]),
//! and the little-endian byte image a slot is filled with. `staging` owns
//! the streams, events and pinned memory that carry the policy out.

use crate::HostBuffer;

/// Smallest pinned slot, in bytes: page-locking is a slow system call, so
/// small requests share one reasonably sized slot instead of many tiny ones.
pub const STAGING_MIN_BYTES: usize = 64 * 1024;

/// Most pinned slots per device. A training step uploads a handful of
/// fields; eight lets two batches be in flight without the host waiting,
/// while bounding the page-locked memory taken from the system.
pub const STAGING_MAX_SLOTS: usize = 8;

/// Bytes a pinned slot is allocated with to serve a request of `bytes`: the
/// next power of two (so a slot that grows does so rarely), at least
/// [`STAGING_MIN_BYTES`].
pub fn slot_capacity(bytes: usize) -> usize {
    bytes
        .checked_next_power_of_two()
        .unwrap_or(bytes)
        .max(STAGING_MIN_BYTES)
}

/// What [`choose_slot`] knows about one pinned slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotState {
    /// Bytes the slot holds.
    pub capacity: usize,
    /// Whether a copy from it may still be in flight.
    pub busy: bool,
    /// When it was last used (a counter; larger is more recent).
    pub last_use: u64,
}

/// Which pinned slot an upload of some bytes goes through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotChoice {
    /// An idle slot large enough: the smallest such.
    Reuse(usize),
    /// No idle slot fits and there is room: allocate a new slot.
    Add {
        /// Bytes to allocate.
        capacity: usize,
    },
    /// No room for another slot: replace an idle one with a larger one.
    Regrow {
        /// The idle slot to replace.
        slot: usize,
        /// Its new size in bytes.
        capacity: usize,
    },
    /// Every slot is busy and no more may be added: wait for this one (the
    /// least recently used), then choose again.
    Wait(usize),
}

/// The staging policy: reuse the best-fitting idle slot, else add one (up to
/// `max_slots`), else grow the smallest idle one, else wait for the least
/// recently used. Never hands out a busy slot.
pub fn choose_slot(slots: &[SlotState], bytes: usize, max_slots: usize) -> SlotChoice {
    let idle = || slots.iter().enumerate().filter(|(_, s)| !s.busy);
    if let Some((i, _)) = idle()
        .filter(|(_, s)| s.capacity >= bytes)
        .min_by_key(|(_, s)| s.capacity)
    {
        return SlotChoice::Reuse(i);
    }
    let capacity = slot_capacity(bytes);
    if slots.len() < max_slots.max(1) {
        return SlotChoice::Add { capacity };
    }
    if let Some((slot, _)) = idle().min_by_key(|(_, s)| s.capacity) {
        return SlotChoice::Regrow { slot, capacity };
    }
    let oldest = slots
        .iter()
        .enumerate()
        .min_by_key(|(_, s)| s.last_use)
        .map(|(i, _)| i)
        .unwrap_or(0);
    SlotChoice::Wait(oldest)
}

/// Write `host`'s elements into `out` in the device layout (little-endian;
/// bool as one byte 0/1). `out` must be exactly `host.byte_len()` long.
pub(crate) fn encode_le(host: &HostBuffer, out: &mut [u8]) {
    macro_rules! put {
        ($v:expr, $n:literal) => {
            for (dst, x) in out.chunks_exact_mut($n).zip($v.iter()) {
                dst.copy_from_slice(&x.to_le_bytes());
            }
        };
    }
    match host {
        HostBuffer::F32(v) => put!(v, 4),
        HostBuffer::F64(v) => put!(v, 8),
        HostBuffer::F16(v) => put!(v, 2),
        HostBuffer::BF16(v) => put!(v, 2),
        HostBuffer::I32(v) => put!(v, 4),
        HostBuffer::I64(v) => put!(v, 8),
        HostBuffer::U8(v) => out.copy_from_slice(v),
        HostBuffer::Bool(v) => {
            for (dst, &x) in out.iter_mut().zip(v) {
                *dst = x as u8;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    fn slot(capacity: usize, busy: bool, last_use: u64) -> SlotState {
        SlotState {
            capacity,
            busy,
            last_use,
        }
    }

    #[test]
    fn slot_capacity_rounds_up_to_a_power_of_two_with_a_floor() {
        assert_eq!(slot_capacity(0), STAGING_MIN_BYTES);
        assert_eq!(slot_capacity(1), STAGING_MIN_BYTES);
        assert_eq!(slot_capacity(STAGING_MIN_BYTES), STAGING_MIN_BYTES);
        assert_eq!(slot_capacity(STAGING_MIN_BYTES + 1), 2 * STAGING_MIN_BYTES);
        assert_eq!(slot_capacity(3_000_000), 4 * 1024 * 1024);
        // No overflow for absurd sizes: the request itself.
        assert_eq!(slot_capacity(usize::MAX), usize::MAX);
    }

    #[test]
    fn the_first_upload_adds_a_slot() {
        assert_eq!(
            choose_slot(&[], 100, 8),
            SlotChoice::Add {
                capacity: STAGING_MIN_BYTES
            }
        );
    }

    #[test]
    fn an_idle_slot_that_fits_is_reused_smallest_first() {
        let slots = [
            slot(1 << 20, false, 1),
            slot(1 << 17, false, 2),
            slot(1 << 16, false, 3),
        ];
        assert_eq!(choose_slot(&slots, 100_000, 8), SlotChoice::Reuse(1));
        assert_eq!(choose_slot(&slots, 10, 8), SlotChoice::Reuse(2));
    }

    #[test]
    fn a_busy_slot_is_never_handed_out() {
        // Double buffering: the slot in flight is skipped for the other one,
        // then a third is added rather than overwrite either.
        let slots = [slot(1 << 16, true, 1), slot(1 << 16, false, 2)];
        assert_eq!(choose_slot(&slots, 10, 8), SlotChoice::Reuse(1));
        let slots = [slot(1 << 16, true, 1), slot(1 << 16, true, 2)];
        assert!(matches!(choose_slot(&slots, 10, 8), SlotChoice::Add { .. }));
        // At the limit, the host waits for the least recently used one.
        let slots = [slot(1 << 16, true, 7), slot(1 << 16, true, 3)];
        assert_eq!(choose_slot(&slots, 10, 2), SlotChoice::Wait(1));
        for busy in [[true, false], [false, true], [true, true]] {
            let slots = [slot(1 << 16, busy[0], 1), slot(1 << 16, busy[1], 2)];
            for max in [1, 2, 8] {
                match choose_slot(&slots, 10, max) {
                    SlotChoice::Reuse(i) | SlotChoice::Regrow { slot: i, .. } => {
                        assert!(!slots[i].busy, "{busy:?} max {max}")
                    }
                    SlotChoice::Add { .. } => assert!(slots.len() < max),
                    SlotChoice::Wait(i) => assert!(slots.iter().all(|s| s.busy), "{i}"),
                }
            }
        }
    }

    #[test]
    fn a_request_larger_than_every_slot_adds_then_grows() {
        let slots = [slot(1 << 16, false, 1), slot(1 << 18, true, 2)];
        let want = 1 << 20;
        assert_eq!(
            choose_slot(&slots, want, 8),
            SlotChoice::Add { capacity: want }
        );
        // No room left: the smallest idle slot is replaced by a larger one.
        assert_eq!(
            choose_slot(&slots, want, 2),
            SlotChoice::Regrow {
                slot: 0,
                capacity: want
            }
        );
    }

    #[test]
    fn a_steady_loop_settles_on_reusing_slots() {
        // Simulate a loop uploading 3 fields per step where the previous
        // step's copies have finished by the next step: the slot count
        // stops growing and every later choice is a reuse.
        let mut slots: Vec<SlotState> = Vec::new();
        let sizes = [784 * 4 * 128, 128 * 4, 128];
        let mut clock = 0;
        for step in 0..20 {
            for s in &mut slots {
                s.busy = false;
            }
            for &bytes in &sizes {
                clock += 1;
                let i = match choose_slot(&slots, bytes, STAGING_MAX_SLOTS) {
                    SlotChoice::Reuse(i) => {
                        assert!(step < 1 || slots[i].capacity >= bytes);
                        i
                    }
                    SlotChoice::Add { capacity } => {
                        assert_eq!(step, 0, "steady state must not add slots");
                        slots.push(slot(capacity, false, 0));
                        slots.len() - 1
                    }
                    other => panic!("step {step}: {other:?}"),
                };
                slots[i].busy = true;
                slots[i].last_use = clock;
            }
        }
        assert_eq!(slots.len(), sizes.len());
    }

    #[test]
    fn encoding_matches_the_host_byte_image_for_every_dtype() {
        for dtype in DType::ALL {
            let host = HostBuffer::from((0..37).map(|i| i as f64 * 1.5 - 20.0).collect::<Vec<_>>())
                .cast(dtype);
            let mut out = vec![0xAAu8; host.byte_len()];
            encode_le(&host, &mut out);
            assert_eq!(out, host.to_le_bytes(), "{dtype}");
        }
    }
}
