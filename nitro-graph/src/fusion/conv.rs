//! Direct convolutions: which `matmul(kernel, im2col(x))` pairs a backend
//! that allows it ([`super::Rules::direct_conv`]) computes in one kernel
//! straight from the image, so the patch matrix (`c*kh*kw` times the
//! image's size) is never written or read. The decision is here; the
//! kernel is the backend's (the CPU's `backend::cpu::conv`).
//!
//! A pair qualifies when the patch matrix has no other reader (in a train
//! step the weight gradient reads it too, so training keeps the matmul),
//! the window's stride is 1 (the direct kernel reads runs of adjacent
//! pixels), everything is f32, and one padded image fits in L2, where the
//! kernel reads it from.

use crate::ir::{Graph, NodeId, Op};
use nitro_device::DType;

/// Largest padded image (one sample, every channel) the direct kernel
/// reads from L2, in bytes.
const IMAGE_MAX_BYTES: usize = 256 * 1024;

/// Most output channels: the direct kernel re-reads the image once per six
/// of them, so wide layers go through the patch matrix and gemm.
const MAX_CHANNELS: usize = 64;

/// Per node: for an `im2col` node computed inside its consumer's direct
/// convolution, that consumer (a matmul); `None` for every other node.
pub fn direct_convs(graph: &Graph) -> Vec<Option<NodeId>> {
    let uses = graph.use_counts();
    let mut absorbed = vec![None; graph.nodes.len()];
    for (id, node) in graph.nodes.iter().enumerate() {
        let Op::MatMul {
            ta: false,
            tb: false,
        } = node.op
        else {
            continue;
        };
        let (kernel, patches) = (node.args[0], node.args[1]);
        let Op::Im2Col { window } = graph.nodes[patches].op else {
            continue;
        };
        let image = &graph.nodes[graph.nodes[patches].args[0]].spec;
        let [_, c, h, w] = image.shape[..] else {
            continue;
        };
        let (hp, wp) = (h + 2 * window.padding, w + 2 * window.padding);
        let f32s = [node.spec.dtype, graph.nodes[kernel].spec.dtype, image.dtype]
            .iter()
            .all(|&d| d == DType::F32);
        let channels = graph.nodes[kernel].spec.shape[0];
        if uses[patches] == 1
            && window.stride == 1
            && f32s
            && graph.nodes[kernel].spec.shape.len() == 2
            && channels <= MAX_CHANNELS
            && c * hp * wp * 4 <= IMAGE_MAX_BYTES
        {
            absorbed[patches] = Some(id);
        }
    }
    absorbed
}
