//! The CPU kernel of [`crate::ir::Op::AllReduceSum`]: the argument's
//! elements summed over the process group through the communicator the
//! program was called with (`Program::run_with`), written to the output.
//!
//! The communicator is an argument of the call, never part of the compiled
//! program, so one program serves every call and a group is never baked in.
//! It reduces host buffers it owns, so the kernel copies the argument out,
//! reduces, and copies the result in: two copies of a gradient-sized buffer,
//! small beside the messages themselves.

use super::raw::Raw;
use nitro_device::collective::{CollectiveError, Communicator};
use nitro_device::HostBuffer;

/// `out = sum over ranks of src` (same dtype and length). With no
/// communicator the program runs alone (a world of one, which the caller
/// checked) and the sum is `src` itself.
pub(super) fn all_reduce_sum(
    src: Raw,
    out: Raw,
    comm: Option<&dyn Communicator>,
) -> Result<(), CollectiveError> {
    debug_assert_eq!((src.dtype, src.len), (out.dtype, out.len));
    // SAFETY: src and out are distinct live buffers of the node's dtype and
    // length (a stored single kernel's output never aliases its argument).
    unsafe {
        macro_rules! reduce {
            ($t:ty, $variant:ident) => {{
                let Some(comm) = comm else {
                    out.slice_mut::<$t>().copy_from_slice(src.slice::<$t>());
                    return Ok(());
                };
                let mut buf = HostBuffer::$variant(src.slice::<$t>().to_vec());
                comm.all_reduce_sum(&mut buf)?;
                let HostBuffer::$variant(sum) = buf else {
                    unreachable!("a collective keeps the buffer's dtype")
                };
                out.slice_mut::<$t>().copy_from_slice(&sum);
                Ok(())
            }};
        }
        match src.dtype {
            nitro_device::DType::F32 => reduce!(f32, F32),
            nitro_device::DType::F64 => reduce!(f64, F64),
            nitro_device::DType::I32 => reduce!(i32, I32),
            nitro_device::DType::I64 => reduce!(i64, I64),
            dtype => Err(CollectiveError::DType {
                op: "all_reduce_sum",
                dtype,
            }),
        }
    }
}
