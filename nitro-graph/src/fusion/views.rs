//! Movement nodes that elementwise consumers read in place, from their
//! source's buffer, instead of from a materialised copy.
//!
//! **Owns:** the two tests the fuser asks ([`permute_is_free`],
//! [`slice_offset`]). **Does not own:** how a read is expressed (the
//! fuser's `resolve` turns the answer into an [`super::Access`]) or how
//! it runs (the backends' loads). A consumer that is not elementwise (a
//! matmul, a reduction) still gets the value materialised.

use super::strides_of;
use crate::ir::{Graph, NodeId, Op};

/// Whether elementwise consumers read permute node `n` in place instead of
/// a materialised copy: its last axis stays last and is long enough that
/// the strided read is a run of contiguous copies.
pub fn permute_is_free(graph: &Graph, n: NodeId) -> bool {
    let Op::Permute { perm } = &graph.nodes[n].op else {
        return false;
    };
    let r = perm.len();
    r >= 2 && perm[r - 1] == r - 1 && graph.nodes[n].spec.shape[r - 1] >= 8
}

/// The stored node a slice `n` lies in, and where it starts there, if
/// consumers can read it in place instead of from a copy: its elements are
/// one contiguous range of a
/// source stored by a kernel of its own (an input, a literal, an
/// all-reduce, a matmul, a concat or a gather, seen through reshapes).
/// Cutting the gradients back out of a data-parallel job's flat
/// all-reduce buffer is four such slices, each a copy of its gradient
/// before it; a slice of anything else is still materialised.
pub fn slice_offset(graph: &Graph, n: NodeId) -> Option<(NodeId, usize)> {
    let Op::Slice { start, end, stride } = &graph.nodes[n].op else {
        return None;
    };
    let src = graph.nodes[n].args[0];
    let mut base = src;
    while let Op::Reshape { .. } = graph.nodes[base].op {
        base = graph.nodes[base].args[0];
    }
    let stored_alone = matches!(
        graph.nodes[base].op,
        Op::Input { .. }
            | Op::Literal { .. }
            | Op::AllReduceSum { .. }
            | Op::MatMul { .. }
            | Op::Concat { .. }
            | Op::Take
    );
    if !stored_alone || graph.nodes[n].spec.numel() < 2 || stride.iter().any(|&s| s != 1) {
        return None;
    }
    // Contiguous: below some axis every axis is whole, above it every
    // axis has extent one.
    let shape = &graph.nodes[src].spec.shape;
    let partial = (0..shape.len())
        .rev()
        .find(|&d| end[d] - start[d] != shape[d]);
    if let Some(p) = partial {
        if (0..p).any(|d| end[d] - start[d] != 1) {
            return None;
        }
    }
    let strides = strides_of(shape);
    Some((base, start.iter().zip(&strides).map(|(a, s)| a * s).sum()))
}
