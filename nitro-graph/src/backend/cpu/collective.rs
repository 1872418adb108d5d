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
use crate::fusion::{Kernel, Schedule};
use crate::ir::{Graph, NodeId, Op};
use crate::plan::{MemoryPlan, Storage};
use nitro_device::collective::{CollectiveError, Communicator, Staged};
use nitro_device::{DType, HostBuffer};

/// A concat folded into the all-reduce after it (see [`fold`]).
pub(in crate::backend::cpu) struct Fold {
    /// The concat, which no kernel runs.
    pub concat: NodeId,
    /// Each part's stored node and where the part starts in the flat
    /// buffer (elements), when every part's producer may write straight
    /// into staged memory (see [`stageable`]).
    stageable: Option<Vec<(NodeId, usize)>>,
}

/// The concat that all-reduce kernel `k` writes itself, if any: the
/// kernel just before it, a 1-D concat that the all-reduce alone reads
/// (the flat buffer of a data-parallel train step). Its parts then go to
/// the communicator as they are, which copies them where it reduces (the
/// shared window) instead of a concat writing the buffer first: one
/// gradient-sized copy fewer per step. Only the adjacent kernel: the parts
/// are read where the concat would have read them, before any later
/// kernel reuses their buffers.
pub(super) fn fold(graph: &Graph, schedule: &Schedule, k: usize) -> Option<Fold> {
    let Kernel::Single(n) = schedule.kernels.get(k)? else {
        return None;
    };
    let Kernel::Single(c) = schedule.kernels.get(k.checked_sub(1)?)? else {
        return None;
    };
    let (node, concat) = (&graph.nodes[*n], &graph.nodes[*c]);
    let flattens = matches!(node.op, Op::AllReduceSum { .. })
        && node.args[0] == *c
        && matches!(concat.op, Op::Concat { axis: 0 })
        && concat.spec.shape.len() == 1;
    if !flattens {
        return None;
    }
    // Counted only here: every adjacent pair of single kernels asks.
    let readers = readers(graph);
    (readers[*c] == 1).then(|| Fold {
        concat: *c,
        stageable: stageable(graph, *c, &readers),
    })
}

/// How many times each node is read (as an argument or a program output).
fn readers(graph: &Graph) -> Vec<usize> {
    let mut count = vec![0; graph.nodes.len()];
    for node in &graph.nodes {
        for &a in &node.args {
            count[a] += 1;
        }
    }
    for (_, o) in &graph.outputs {
        count[*o] += 1;
    }
    count
}

/// Each part of concat `c` as the node whose kernel stores it (through
/// reshapes) and its offset in the concatenation, if every part can be
/// computed straight into a staged buffer: a value this concat alone reads
/// (so no kernel reads it where the plan put it), computed by a kernel
/// (not an input or a literal), and no two parts the same value.
fn stageable(graph: &Graph, c: NodeId, readers: &[usize]) -> Option<Vec<(NodeId, usize)>> {
    let mut parts: Vec<(NodeId, usize)> = vec![];
    let mut at = 0;
    for &a in &graph.nodes[c].args {
        let mut n = a;
        while let Op::Reshape { .. } = graph.nodes[n].op {
            if readers[n] != 1 {
                return None;
            }
            n = graph.nodes[n].args[0];
        }
        let computed = !matches!(graph.nodes[n].op, Op::Input { .. } | Op::Literal { .. });
        if readers[n] != 1 || !computed || parts.iter().any(|&(b, _)| b == n) {
            return None;
        }
        parts.push((n, at));
        at += graph.nodes[a].spec.numel();
    }
    Some(parts)
}

/// A folded all-reduce's contribution staged in the communicator's memory
/// for one call: the kernel that reduces it, and where each part's
/// producer writes instead of its slot.
pub(in crate::backend::cpu) struct Staging {
    pub kernel: usize,
    staged: Staged,
    pub parts: Vec<(NodeId, Raw)>,
}

/// Stage `fold`'s contribution for all-reduce node `n` (kernel `kernel`)
/// when `comm` offers memory for it and every part lives in a slot (so
/// redirecting its writes changes no input, literal or output).
pub(super) fn stage(
    graph: &Graph,
    plan: &MemoryPlan,
    n: NodeId,
    fold: &Fold,
    comm: &dyn Communicator,
    kernel: usize,
) -> Result<Option<Staging>, CollectiveError> {
    let Some(parts) = &fold.stageable else {
        return Ok(None);
    };
    if parts
        .iter()
        .any(|&(b, _)| !matches!(plan.storage[b], Storage::Slot(_)))
    {
        return Ok(None);
    }
    let spec = &graph.nodes[n].spec;
    let Some(staged) = comm.stage(spec.dtype, spec.numel())? else {
        return Ok(None);
    };
    let size = spec.dtype.size_of();
    let parts = parts
        .iter()
        .map(|&(b, at)| {
            let len = graph.nodes[b].spec.numel();
            debug_assert!((at + len) * size <= staged.bytes());
            // SAFETY: the staged memory holds the whole flat buffer, of
            // which this part is elements at..at+len, and stays mapped for
            // the call.
            (b, unsafe {
                Raw::from_ptr(staged.ptr().wrapping_add(at * size), spec.dtype, len)
            })
        })
        .collect();
    Ok(Some(Staging {
        kernel,
        staged,
        parts,
    }))
}

/// `slot = sum over ranks` of the contribution computed into `staging`.
pub(super) fn staged_into_slot(
    staging: Staging,
    slot: &mut HostBuffer,
    comm: Option<&dyn Communicator>,
) -> Result<(), CollectiveError> {
    match comm {
        Some(comm) => comm.all_reduce_sum_staged(staging.staged, slot),
        None => Err(CollectiveError::Staged {
            rank: 0,
            reason: "a contribution was staged, but the call has no communicator".into(),
        }),
    }
}

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
