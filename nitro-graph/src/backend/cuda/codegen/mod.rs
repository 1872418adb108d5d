//! CUDA C generation: a scheduled graph becomes one CUDA C module (the
//! [prelude](PRELUDE) plus one `extern "C" __global__` kernel per launch)
//! and a list of [`Step`]s that say, in execution order, which kernel to
//! launch over how many elements with which buffers, which product to
//! hand to cuBLAS, or which buffer to sum over the process group.
//!
//! | schedule kernel | CUDA |
//! |---|---|
//! | fused group | one kernel, one thread per element in a grid-stride loop; every member is a register expression, sources load by access pattern (contiguous, scalar, strided with baked shape and strides); storage types (f16, bf16, u8, bool) convert at load and store, compute is f32/f64/i32/i64 as on the CPU |
//! | permute, broadcast, slice | one strided gather over the output |
//! | pad, concat | one gather over the output that decides per element which input (or the pad value) it comes from: a scatter turned around, so no second pass and no atomics |
//! | take | a row gather with clamped indices |
//! | scatter_add | a zeroing kernel, then `atomicAdd` per update element |
//! | reduce_sum / reduce_max | one thread per output when the reduced extent is small; otherwise one block per output: threads stride over the reduced elements, then warp shuffles and one shared-memory pass |
//! | attention, attention_grad | one thread per output element, recomputing the scores and softmax statistics of the rows it needs (a first, untiled kernel) |
//! | layer_norm, layer_norm_grad | one thread per output element, recomputing its row's mean, variance (and, for the gradient, the row sums of `dy * scale`) in loops: O(n) per element (a first kernel; a row per block with shared-memory reductions is future work) |
//! | matmul | cuBLAS (row-major through the transpose trick, see nitro-device) |
//! | all_reduce_sum | a copy of the argument into the sum's buffer, then a collective step: NCCL sums that buffer in place over the ranks (a world of one run alone stops after the copy) |
//!
//! Shapes are static, so every extent, stride and constant is baked into
//! the source: a kernel's only parameters are its buffers. Constants are
//! written as bit patterns (`__int_as_float(0x3f800000)`), so the value the
//! GPU sees is exactly the one the CPU backend uses.

//!
//! | module | owns |
//! |---|---|
//! | `codegen` (this) | the output types ([`CudaSource`], [`Step`], [`Grid`], [`Arg`]), the walk over the schedule, the shared index arithmetic |
//! | [`types`] | C types of dtypes, exact constants, storage conversions at load and store |
//! | `scalar` | the scalar op table (`crate::semantics`) as CUDA C expressions, casts |
//! | `fused` | the kernel of one fused group |
//! | `single` | data movement, gathers, scatters, patches and the collective step of single kernels |
//! | `reduce` | reduction kernels |
//! | `attention` | the attention kernel and its adjoint |
//! | `layer_norm` | the layer-normalisation kernel and its input gradient |

mod attention;
mod fused;
mod layer_norm;
mod reduce;
mod scalar;
mod single;
pub mod types;

pub use types::{constant, register_type, storage_type};

use crate::fusion::{Kernel, Schedule};
use crate::ir::{Graph, NodeId};
use std::fmt::Write;

/// The device-side helpers every module starts with.
pub const PRELUDE: &str = include_str!("../prelude.cu");

/// Threads per block of every generated kernel.
pub const BLOCK: u32 = 256;
/// Grid-stride kernels never launch more blocks than this; the loop covers
/// the rest (enough to fill any current GPU several times over).
pub const MAX_GRID: usize = 65535;
/// Reduced extents at least this long get a block per output element.
pub const BLOCK_REDUCE_MIN: usize = 256;

/// What a kernel parameter is bound to at launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arg {
    /// The device address of a stored node's buffer.
    Node(NodeId),
}

/// How a launch is sized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grid {
    /// One thread per work item (grid-stride loop).
    PerElement(usize),
    /// One block per work item (block-stride loop).
    PerBlock(usize),
}

impl Grid {
    /// (blocks, threads per block) for this launch; `None` when there is no work.
    pub fn dims(self) -> Option<(u32, u32)> {
        match self {
            Grid::PerElement(0) | Grid::PerBlock(0) => None,
            Grid::PerElement(n) => Some((n.div_ceil(BLOCK as usize).min(MAX_GRID) as u32, BLOCK)),
            Grid::PerBlock(n) => Some((n.min(MAX_GRID) as u32, BLOCK)),
        }
    }
}

/// One unit of work on the device, in execution order.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Launch a generated kernel.
    Launch {
        /// The kernel's name in the module.
        kernel: String,
        /// Launch size.
        grid: Grid,
        /// Parameters, in order.
        args: Vec<Arg>,
        /// The schedule kernel this launch belongs to.
        schedule_kernel: usize,
    },
    /// A matrix product through cuBLAS (the node is a `matmul`).
    Gemm {
        /// The matmul node.
        node: NodeId,
        /// The schedule kernel it is.
        schedule_kernel: usize,
    },
    /// Sum the node's buffer in place over the process group (the node is
    /// an `all_reduce_sum`, whose buffer the launch before filled with its
    /// argument): NCCL on a GPU, the host communicator in emulation.
    AllReduce {
        /// The all-reduce node.
        node: NodeId,
        /// The schedule kernel it belongs to.
        schedule_kernel: usize,
    },
}

/// A program's generated CUDA: the module source and its launch list.
#[derive(Clone, Debug, Default)]
pub struct CudaSource {
    /// The complete CUDA C module (prelude + kernels).
    pub source: String,
    /// Kernel names, in the order they are defined.
    pub kernels: Vec<String>,
    /// Each kernel's own code (without the prelude), parallel to `kernels`:
    /// the unit NVRTC compiles and caches.
    pub code: Vec<String>,
    /// What to run, in order.
    pub steps: Vec<Step>,
}

/// Generate the CUDA module of `schedule` over `graph`.
pub fn generate(graph: &Graph, schedule: &Schedule) -> CudaSource {
    let mut out = CudaSource {
        source: format!("// generated by nitro-graph backend/cuda\n{PRELUDE}\n"),
        ..Default::default()
    };
    for (k, kernel) in schedule.kernels.iter().enumerate() {
        match kernel {
            Kernel::Fused(group) => {
                // Lowered for CUDA with `Rules::default()`: no tails.
                debug_assert!(
                    group.tails.is_empty(),
                    "CUDA fused kernels have no reduction tails"
                );
                let name = format!("k{k}_fused");
                let (code, args) = fused::fused(graph, group, &name);
                out.add(name, code, Grid::PerElement(group.numel), args, k);
            }
            Kernel::Single(n) => single::single(graph, *n, k, &mut out),
            Kernel::Conv { .. } | Kernel::Epilogue { .. } => {
                unreachable!(
                    "CUDA lowers with `Rules::default()`: no direct convolutions or epilogues"
                )
            }
        }
    }
    out
}

impl CudaSource {
    /// The translation unit NVRTC compiles for kernel `i`: prelude + its code.
    pub fn unit(&self, i: usize) -> String {
        format!("{PRELUDE}\n{}", self.code[i])
    }

    pub(super) fn add(&mut self, name: String, code: String, grid: Grid, args: Vec<Arg>, k: usize) {
        self.source += &code;
        self.source.push('\n');
        self.kernels.push(name.clone());
        self.code.push(code);
        self.steps.push(Step::Launch {
            kernel: name,
            grid,
            args,
            schedule_kernel: k,
        });
    }
}

/// C statements adding `Σ index_d(flat) * strides[d]` over `shape` to `acc`.
pub(super) fn decompose(
    flat: &str,
    shape: &[usize],
    strides: &[usize],
    acc: &str,
    indent: &str,
) -> String {
    let mut s = String::new();
    if shape.is_empty() {
        return s;
    }
    let _ = writeln!(s, "{indent}{{ long long t = {flat};");
    for d in (0..shape.len()).rev() {
        let (n, st) = (shape[d], strides[d]);
        if d == 0 {
            if st != 0 && n != 1 {
                let _ = writeln!(s, "{indent}  {acc} += t * {st}LL;");
            }
        } else {
            if st != 0 && n != 1 {
                let _ = writeln!(s, "{indent}  {acc} += (t % {n}LL) * {st}LL;");
            }
            if n != 1 {
                let _ = writeln!(s, "{indent}  t /= {n}LL;");
            }
        }
    }
    let _ = writeln!(s, "{indent}}}");
    s
}

pub(super) const GRID_STRIDE: &str = "for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)";

/// A kernel over `n` output elements with a grid-stride loop around `body`.
pub(super) fn per_element(name: &str, params: &[String], n: usize, body: &str) -> String {
    format!(
        "extern \"C\" __global__ void {name}({}) {{\n  const long long n = {n}LL;\n  {GRID_STRIDE} {{\n{body}  }}\n}}\n",
        params.join(", ")
    )
}
