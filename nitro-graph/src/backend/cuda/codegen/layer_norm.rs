//! The kernels of layer normalisation ([`Op::LayerNorm`]) and its input
//! gradient ([`Op::LayerNormGrad`]): the CUDA C of each, its parameters and
//! its launch size. Owns the row arithmetic over the last axis (a row is
//! `n` contiguous elements, `rows = numel / n`) and the order in which the
//! row statistics and the result are evaluated; `single` owns the choice
//! to launch them, `types` the storage conversions and exact constants,
//! and the meaning of the ops is `ir::ops` (the CPU backend is the
//! reference). The gradients of `scale` and `shift` are not here: autodiff
//! builds them from ordinary ops (sums over rows).
//!
//! One block per row: one thread folds the row's statistics (and, for the
//! gradient, its two sums) in column order into shared memory, then the
//! block's threads write the row's elements. O(n) per row, where a thread
//! per element recomputing its row was O(n) per element; the order of
//! every sum is fixed, so results are deterministic, with no atomics and
//! no scratch memory. A tree reduction over the block's threads would
//! shorten the serial fold; it is the next step.
//!
//! Every value follows the op's definition step for step, in the register
//! type (f32 for f32/f16/bf16, f64 for f64): `mean = Σ x / n`,
//! `xc = x - mean`, `var = Σ xc² / n` (two passes, as the definition reads,
//! not `E[x²] - mean²`, which cancels), `sd = sqrt(var + eps)` with `n` and
//! `eps` constants rounded once from f64 as the CPU rounds them, then
//! `y = xc / sd * scale + shift`. So the result agrees with the CPU backend
//! up to summation order (and, on a GPU, the multiply-adds NVRTC may fuse).

use super::types::{constant, load_expr, register_type, storage_type, store_expr};
use super::{scalar, Arg, CudaSource, Grid};
use crate::ir::{Graph, NodeId, Op, UnaryOp};
use nitro_device::DType;

/// The baked extents and C spellings one layer-norm kernel is written with.
struct Dims {
    /// Row length (the last axis of `x`).
    n: usize,
    /// Storage type of every operand.
    st: &'static str,
    /// Register type the arithmetic runs in.
    reg: &'static str,
    dtype: DType,
    /// `eps` in the register type (an exact C constant).
    eps: String,
}

impl Dims {
    fn of(graph: &Graph, n: NodeId, eps: f64) -> Dims {
        let x = &graph.nodes[graph.nodes[n].args[0]].spec;
        Dims {
            n: x.shape.last().copied().unwrap_or(0),
            st: storage_type(x.dtype),
            reg: register_type(x.dtype),
            dtype: x.dtype,
            eps: constant(eps, x.dtype),
        }
    }

    /// Element `at` of a storage array, loaded into a register.
    fn load(&self, at: &str) -> String {
        load_expr(self.dtype, at)
    }

    /// Adds kernel `name` of node `n` (kernel index `k`) over `(x, scale,
    /// third, dst)`, `third` the shift or the cotangent: one block per row
    /// (block-stride), where thread 0 runs `fold` (which leaves the row's
    /// values in `stat`), then every thread runs `body` for the columns
    /// `j` it takes.
    fn launch(
        &self,
        out: &mut CudaSource,
        name: &str,
        (fold, body): (&str, &str),
        third: &str,
        (graph, n, k): (&Graph, NodeId, usize),
    ) {
        let Dims {
            n: len, st, reg, ..
        } = *self;
        let rows = graph.nodes[n].spec.numel() / len.max(1);
        let kernel = format!(
            "extern \"C\" __global__ void {name}(const {st}* x, const {st}* scale, const {st}* {third}, {st}* dst) {{\n\
             \x20 __shared__ {reg} stat[4];\n\
             \x20 for (long long r = blockIdx.x; r < {rows}LL; r += gridDim.x) {{\n\
             \x20   const {st}* xr = x + r * {len}LL;\n\
             {fold}\
             \x20   __syncthreads();\n\
             \x20   for (long long j = threadIdx.x; j < {len}LL; j += blockDim.x) {{\n\
             {body}\
             \x20   }}\n\
             \x20   __syncthreads();\n\
             \x20 }}\n\
             }}\n"
        );
        let code = self.stats_helper(name) + &kernel;
        let mut args: Vec<Arg> = graph.nodes[n].args.iter().map(|&a| Arg::Node(a)).collect();
        args.push(Arg::Node(n));
        out.add(name.to_string(), code, Grid::PerBlock(rows), args, k);
    }

    /// The device helper both kernels share, prefixed with the kernel's
    /// name (the module holds every kernel of a program): the mean and the
    /// standard deviation `sqrt(var + eps)` of the row `xr` points at.
    fn stats_helper(&self, name: &str) -> String {
        let Dims { n, st, reg, .. } = *self;
        let len = constant(n as f64, self.dtype);
        let x = self.load("xr[c]");
        let sd = scalar::unary(UnaryOp::Sqrt, reg, &format!("var + {}", self.eps));
        format!(
            "__device__ __forceinline__ void {name}_stats(const {st}* xr, {reg}* mean, {reg}* sd) {{\n\
             \x20 {reg} sum = 0;\n\
             \x20 for (long long c = 0; c < {n}LL; c++) sum += {x};\n\
             \x20 const {reg} m = sum / {len};\n\
             \x20 {reg} sq = 0;\n\
             \x20 for (long long c = 0; c < {n}LL; c++) {{ const {reg} xc = {x} - m; sq += xc * xc; }}\n\
             \x20 const {reg} var = sq / {len};\n\
             \x20 *mean = m;\n\
             \x20 *sd = {sd};\n\
             }}\n"
        )
    }
}

/// The launch of an [`Op::LayerNorm`] node `n` over `(x, scale, shift)`:
/// one block per row of the output (shaped like `x`), nothing when it is
/// empty.
pub(super) fn layer_norm(graph: &Graph, n: NodeId, k: usize, name: &str, out: &mut CudaSource) {
    let node = &graph.nodes[n];
    let Op::LayerNorm { eps } = node.op else {
        unreachable!("layer_norm codegen of {}", node.op.name())
    };
    let numel = node.spec.numel();
    if numel == 0 {
        return;
    }
    let dm = Dims::of(graph, n, eps);
    let reg = dm.reg;
    let (x, scale, shift) = (dm.load("xr[j]"), dm.load("scale[j]"), dm.load("shift[j]"));
    let store = store_expr(dm.dtype, "y");
    let fold = format!(
        "    if (threadIdx.x == 0) {{ {reg} mean, sd; {name}_stats(xr, &mean, &sd); stat[0] = mean; stat[1] = sd; }}\n"
    );
    let body = format!(
        "      const {reg} mean = stat[0], sd = stat[1];\n\
         \x20     const {reg} xc = {x} - mean;\n\
         \x20     const {reg} y = xc / sd * {scale} + {shift};\n\
         \x20     dst[r * {len}LL + j] = {store};\n",
        len = dm.n,
    );
    dm.launch(out, name, (&fold, &body), "shift", (graph, n, k));
}

/// The launch of an [`Op::LayerNormGrad`] node `n` over `(x, scale, dy)`:
/// one block per row of `dx` (shaped like `x`), whose statistics and two
/// sums of `g = dy * scale` are folded once; nothing when it is empty.
pub(super) fn layer_norm_grad(
    graph: &Graph,
    n: NodeId,
    k: usize,
    name: &str,
    out: &mut CudaSource,
) {
    let node = &graph.nodes[n];
    let Op::LayerNormGrad { eps } = node.op else {
        unreachable!("layer_norm_grad codegen of {}", node.op.name())
    };
    let numel = node.spec.numel();
    if numel == 0 {
        return;
    }
    let dm = Dims::of(graph, n, eps);
    let Dims {
        n: len, st, reg, ..
    } = dm;
    let len_c = constant(len as f64, dm.dtype);
    let (x_c, scale_c, dy_c) = (dm.load("xr[c]"), dm.load("scale[c]"), dm.load("gr[c]"));
    let (x_j, scale_j, dy_j) = (dm.load("xr[j]"), dm.load("scale[j]"), dm.load("gr[j]"));
    let store = store_expr(dm.dtype, "dx");
    // mg = Σ g / n and mgx = Σ g xhat / n over the row: the terms the
    // normalisation's mean and variance contribute to every element.
    let fold = format!(
        "    const {st}* gr = dy + r * {len}LL;\n\
         \x20   if (threadIdx.x == 0) {{\n\
         \x20     {reg} mean, sd;\n\
         \x20     {name}_stats(xr, &mean, &sd);\n\
         \x20     {reg} sg = 0, sgx = 0;\n\
         \x20     for (long long c = 0; c < {len}LL; c++) {{\n\
         \x20       const {reg} xhat = ({x_c} - mean) / sd;\n\
         \x20       const {reg} g = {dy_c} * {scale_c};\n\
         \x20       sg += g;\n\
         \x20       sgx += g * xhat;\n\
         \x20     }}\n\
         \x20     stat[0] = mean; stat[1] = sd; stat[2] = sg / {len_c}; stat[3] = sgx / {len_c};\n\
         \x20   }}\n"
    );
    let body = format!(
        "      const {reg} mean = stat[0], sd = stat[1], mg = stat[2], mgx = stat[3];\n\
         \x20     const {reg} xhat = ({x_j} - mean) / sd;\n\
         \x20     const {reg} g = {dy_j} * {scale_j};\n\
         \x20     const {reg} dx = (g - mg - xhat * mgx) / sd;\n\
         \x20     dst[r * {len}LL + j] = {store};\n"
    );
    dm.launch(out, name, (&fold, &body), "dy", (graph, n, k));
}
