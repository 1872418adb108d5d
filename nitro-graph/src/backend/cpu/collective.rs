//! The CPU kernel of [`crate::ir::Op::AllReduceSum`]: the argument's
//! elements summed over the process group through the communicator the
//! program was called with (`Program::run_with`), written to the output.
//!
//! The communicator is an argument of the call, never part of the compiled
//! program, so one program serves every call and a group is never baked in.
//! It reduces host buffers it owns. Where the output has a workspace slot
//! of its own size, that slot *is* the buffer reduced ([`into_slot`]): the
//! argument is copied in once (or not at all when the plan gave the sum the
//! dying argument's own slot) and the sum arrives in place. Otherwise
//! ([`into_raw`]) a staging buffer is reduced and copied out, one more
//! gradient-sized copy per call. A concat folded into the all-reduce hands
//! its parts over instead ([`parts_into_slot`]).

use super::raw::Raw;
use nitro_device::collective::{CollectiveError, Communicator};
use nitro_device::{DType, HostBuffer};

/// `slot = sum over ranks of src` (same dtype and length). With no
/// communicator the program runs alone (a world of one, which the caller
/// checked) and the sum is `src` itself. The communicator may hand back
/// another allocation (the caller re-reads the slot's address), and after a
/// failure the slot may be empty: the workspace must not be reused then.
pub(super) fn into_slot(
    src: Raw,
    slot: &mut HostBuffer,
    comm: Option<&dyn Communicator>,
) -> Result<(), CollectiveError> {
    summable(src.dtype)?;
    // The plan gives the sum its argument's own slot when the argument
    // dies here; then the argument is already in place.
    let dst = Raw::of(slot);
    if src.ptr::<u8>() != dst.ptr::<u8>() {
        copy(src, dst);
    }
    match comm {
        Some(comm) => comm.all_reduce_sum(slot),
        None => Ok(()),
    }
}

/// `slot = sum over ranks of (parts[0] ++ parts[1] ++ ...)`: a concat
/// folded into its all-reduce. The communicator copies the parts to where
/// it reduces them (a world of one: into the slot), so the concatenation
/// is not written first. Parts are live buffers of the slot's dtype,
/// `slot.len()` elements in all, none of them the slot.
pub(super) fn parts_into_slot(
    parts: &[Raw],
    slot: &mut HostBuffer,
    comm: Option<&dyn Communicator>,
) -> Result<(), CollectiveError> {
    summable(slot.dtype())?;
    let bytes: Vec<&[u8]> = parts
        .iter()
        // SAFETY: each part is a live buffer of `len` elements of its
        // dtype, not written while the collective runs (no other kernel
        // runs), and not the slot (the plan's contract).
        .map(|p| unsafe { std::slice::from_raw_parts(p.ptr::<u8>(), p.len * p.dtype.size_of()) })
        .collect();
    match comm {
        Some(comm) => comm.all_reduce_sum_parts(&bytes, slot),
        None => nitro_device::collective::concat_parts(&bytes, slot),
    }
}

/// `out = sum over ranks of src` through a staging buffer, for an output
/// whose storage is not a slot of exactly its size.
pub(super) fn into_raw(
    src: Raw,
    out: Raw,
    comm: Option<&dyn Communicator>,
) -> Result<(), CollectiveError> {
    let mut staged = HostBuffer::zeros(src.dtype, src.len);
    into_slot(src, &mut staged, comm)?;
    copy(Raw::of(&mut staged), out);
    Ok(())
}

/// `dst = src`, two distinct live buffers of one dtype and length.
fn copy(src: Raw, dst: Raw) {
    debug_assert_eq!((src.dtype, src.len), (dst.dtype, dst.len));
    // SAFETY: both buffers hold `len` elements of the dtype (its width in
    // bytes) and do not overlap (the callers' contract).
    unsafe {
        std::ptr::copy_nonoverlapping(
            src.ptr::<u8>(),
            dst.ptr::<u8>(),
            src.len * src.dtype.size_of(),
        )
    };
}

fn summable(dtype: DType) -> Result<(), CollectiveError> {
    if nitro_device::collective::summable(dtype) {
        Ok(())
    } else {
        Err(CollectiveError::DType {
            op: "all_reduce_sum",
            dtype,
        })
    }
}
