//! Matmul epilogues: an elementwise group that reads a matmul's output
//! element for element (a bias, an activation, a residual add) and runs
//! right after it becomes part of the matmul's kernel
//! ([`super::Kernel::Epilogue`]) where the backend allows it
//! ([`super::Rules::matmul_epilogue`]). The backend can then apply the
//! group to each block of rows of the product as soon as those rows are
//! final, while they are still in cache, instead of reading the whole
//! product back from memory afterwards. The decision is here; when to run
//! the group is the backend's.

use super::{Access, FusedGroup, Kernel, Source};
use crate::ir::{Graph, NodeId, Op};
use nitro_device::DType;

/// How many kernels after a matmul are searched for its epilogue.
const LOOKAHEAD: usize = 4;

/// Merge every `matmul` kernel with a group that qualifies (see
/// [`qualifies`]) and follows it, at most [`LOOKAHEAD`] kernels later,
/// into one epilogue kernel. The kernels in between must not write
/// anything the group reads: the group then reads only values computed
/// before the matmul runs or by it, so it may run with it. (A backward
/// pass puts the weight gradient's product between the input gradient's
/// product and the activation derivative that multiplies it; adjacent
/// only, that multiply made a separate pass over the whole product.)
pub(super) fn merge(graph: &Graph, kernels: Vec<Kernel>) -> Vec<Kernel> {
    let mut pending: Vec<Option<Kernel>> = kernels.into_iter().map(Some).collect();
    let mut out: Vec<Kernel> = Vec::with_capacity(pending.len());
    for i in 0..pending.len() {
        let Some(k) = pending[i].take() else {
            continue;
        };
        let Kernel::Single(mm) = k else {
            out.push(k);
            continue;
        };
        let mut written: Vec<NodeId> = vec![];
        let mut found = None;
        for (j, later) in pending.iter().enumerate().skip(i + 1).take(LOOKAHEAD) {
            let Some(later) = later else { continue };
            if let Kernel::Fused(group) = later {
                if qualifies(graph, mm, group) && !loads_any(group, &written) {
                    found = Some(j);
                    break;
                }
            }
            written.extend(later.writes());
        }
        match found.and_then(|j| pending[j].take()) {
            Some(Kernel::Fused(group)) => out.push(Kernel::Epilogue { matmul: mm, group }),
            _ => out.push(Kernel::Single(mm)),
        }
    }
    out
}

/// Whether `group` loads any of `nodes` (loads name stored bases).
fn loads_any(group: &FusedGroup, nodes: &[NodeId]) -> bool {
    group
        .sources
        .iter()
        .flatten()
        .any(|s| matches!(s, Source::Load { node, .. } if nodes.contains(node)))
}

/// A group qualifies as the epilogue of the f32 product `mm` of two
/// matrices when it covers exactly the product's elements, has no
/// reduction tails, and reads the product only element for element (so
/// any block of rows of the product is all a block of the group needs).
fn qualifies(graph: &Graph, mm: usize, group: &FusedGroup) -> bool {
    let node = &graph.nodes[mm];
    let Op::MatMul { .. } = node.op else {
        return false;
    };
    let matrices = node
        .args
        .iter()
        .all(|&a| graph.nodes[a].spec.shape.len() == 2);
    let mut reads = group
        .sources
        .iter()
        .flatten()
        .filter_map(|s| match s {
            // Loads name stored bases: reshapes of the product resolve to it.
            Source::Load { node, access } if *node == mm => Some(access),
            _ => None,
        })
        .peekable();
    let reads_it = reads.peek().is_some();
    matrices
        && node.spec.dtype == DType::F32
        && group.tails.is_empty()
        && group.numel == node.spec.numel()
        && reads_it
        && reads.all(|a| *a == Access::Contiguous)
}
