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
use crate::ir::{Graph, Op};
use nitro_device::DType;

/// Merge every `matmul` kernel immediately followed by a group that
/// qualifies (see [`qualifies`]) into one epilogue kernel. Adjacent only:
/// every value the group reads is then computed before the matmul runs or
/// by it.
pub(super) fn merge(graph: &Graph, kernels: Vec<Kernel>) -> Vec<Kernel> {
    let mut out: Vec<Kernel> = Vec::with_capacity(kernels.len());
    for k in kernels {
        match (out.last(), k) {
            (Some(&Kernel::Single(mm)), Kernel::Fused(group)) if qualifies(graph, mm, &group) => {
                out.pop();
                out.push(Kernel::Epilogue { matmul: mm, group });
            }
            (_, k) => out.push(k),
        }
    }
    out
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
