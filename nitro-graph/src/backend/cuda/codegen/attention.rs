//! The kernels of fused multi-head attention ([`Op::Attention`]) and its
//! adjoint ([`Op::AttentionGrad`]): the CUDA C of each, its parameters
//! and its launch size. Owns the per-head index arithmetic over the fused
//! `qkv [b, t, 3 d]` layout (q | k | v, heads contiguous) and the order in
//! which scores, softmax and products are evaluated; `single` owns the
//! choice to launch them, `types` the storage conversions, and the meaning
//! of the ops is `ir::ops` (the CPU backend is the reference).
//!
//! One block per (batch, head, position). The block's threads compute a
//! row's scores a chunk of [`CHUNK`] keys at a time into shared memory, so
//! each score of a pass is computed once for the whole row, not once per
//! output element. The row's statistics (maximum, sum, and for the adjoint
//! `r = Σ p dp`) are folded from each chunk by one thread in key order,
//! and each output column is summed by one thread, also in key order: the
//! order of every sum is fixed, so results are deterministic, with no
//! atomics and no scratch memory. Shared memory is two chunks whatever
//! `t`. The forward costs O(t · hd) per row. The adjoint's dq needs its
//! own row's statistics; its dk and dv (the block's position as a key)
//! need those of every query row that sees the key, recomputed row by row:
//! O(t² · hd) per block, where a statistics buffer or FlashAttention's
//! tiling would need O(t · hd), the next step.
//!
//! Every value follows the op's definition step for step, in the register
//! type (f32 for f32/f16/bf16, f64 for f64): `s = (q · k) * scale` with
//! the scale `1 / sqrt(hd)` rounded once from f64, `m` the row maximum,
//! `p = exp(s - m) / Σ exp(s - m)` with the elementwise `Exp` op's exp (the
//! prelude's CPU-exact `nitro_exp_f32` for f32 registers), so the result
//! agrees with the CPU backend up to summation order. Causal masking skips
//! the masked positions outright (their weight is exactly 0, never an
//! `exp(-inf)`).

use super::types::{constant, load_expr, register_type, storage_type, store_expr};
use super::{scalar, Arg, CudaSource, Grid, BLOCK};
use crate::ir::{Graph, NodeId, Op, UnaryOp};
use nitro_device::DType;

/// The baked extents and C spellings one attention kernel is written with.
struct Dims {
    /// Batch (`b`).
    b: usize,
    /// Positions (`t`).
    t: usize,
    /// Model width (`d`); the fused projection is `3 d` wide.
    d: usize,
    /// Width of one head (`d / heads`).
    hd: usize,
    causal: bool,
    /// Storage type of every operand.
    st: &'static str,
    /// Register type the arithmetic runs in.
    reg: &'static str,
    dtype: DType,
}

impl Dims {
    fn of(graph: &Graph, n: NodeId, heads: usize, causal: bool) -> Dims {
        let qkv = &graph.nodes[graph.nodes[n].args[0]].spec;
        let d = qkv.shape[2] / 3;
        Dims {
            b: qkv.shape[0],
            t: qkv.shape[1],
            d,
            hd: d / heads,
            causal,
            st: storage_type(qkv.dtype),
            reg: register_type(qkv.dtype),
            dtype: qkv.dtype,
        }
    }

    /// Element `at` of a storage array, loaded into a register.
    fn load(&self, at: &str) -> String {
        load_expr(self.dtype, at)
    }

    /// One past the last key position query `i` sees.
    fn key_end(&self, i: &str) -> String {
        if self.causal {
            format!("({i} + 1)")
        } else {
            format!("{}LL", self.t)
        }
    }

    /// The first query position that sees key `j`.
    fn query_start(&self, j: &str) -> String {
        if self.causal {
            j.to_string()
        } else {
            "0LL".to_string()
        }
    }

    /// Device helpers shared by both kernels, prefixed with the kernel's
    /// name (the module holds every kernel of a program): the score
    /// `s_ij`, `dp_ij = dy_i · v_j` within head `h`, and the row
    /// statistics of query row `i`, computed by the whole block. `qkv`
    /// points at the batch element's `[t, 3 d]` block, `dy` at its
    /// `[t, d]` block (null for the forward).
    fn helpers(&self, name: &str) -> String {
        let Dims { d, hd, st, reg, .. } = *self;
        let row = 3 * d;
        let scale = constant(1.0 / (hd as f64).sqrt(), self.dtype);
        let (q, k) = (self.load("q[c]"), self.load("k[c]"));
        let (g, v) = (self.load("g[c]"), self.load("v[c]"));
        let end = self.key_end("i");
        let e = self.exp_minus_max(name, "i", "j0 + j");
        let p = self.p(name, "i", "j0 + j");
        format!(
            "__device__ __forceinline__ {reg} {name}_score(const {st}* qkv, long long h, long long i, long long j) {{\n\
             \x20 const {st}* q = qkv + i * {row}LL + h * {hd}LL;\n\
             \x20 const {st}* k = qkv + j * {row}LL + {d}LL + h * {hd}LL;\n\
             \x20 {reg} acc = 0;\n\
             \x20 for (long long c = 0; c < {hd}LL; c++) acc += {q} * {k};\n\
             \x20 return acc * {scale};\n\
             }}\n\
             __device__ __forceinline__ {reg} {name}_dp(const {st}* qkv, const {st}* dy, long long h, long long i, long long j) {{\n\
             \x20 const {st}* g = dy + i * {d}LL + h * {hd}LL;\n\
             \x20 const {st}* v = qkv + j * {row}LL + {v_off}LL + h * {hd}LL;\n\
             \x20 {reg} acc = 0;\n\
             \x20 for (long long c = 0; c < {hd}LL; c++) acc += {g} * {v};\n\
             \x20 return acc;\n\
             }}\n\
             // Row i's maximum score (stat[0]), sum of exp(s - max) (stat[1])\n\
             // and, given dy, r = sum of p dp (stat[2]): every thread of the\n\
             // block fills chunks of `e` (and `f`), one folds them in key order.\n\
             __device__ void {name}_stats(const {st}* qkv, const {st}* dy, long long h, long long i, {reg}* e, {reg}* f, {reg}* stat) {{\n\
             \x20 const long long end = {end};\n\
             \x20 {reg} acc = 0;\n\
             \x20 for (long long j0 = 0; j0 < end; j0 += {CHUNK}LL) {{\n\
             \x20   const long long n = end - j0 < {CHUNK}LL ? end - j0 : {CHUNK}LL;\n\
             \x20   for (long long j = threadIdx.x; j < n; j += blockDim.x) e[j] = {name}_score(qkv, h, i, j0 + j);\n\
             \x20   __syncthreads();\n\
             \x20   if (threadIdx.x == 0) for (long long j = 0; j < n; j++) acc = (j0 + j == 0 || e[j] > acc) ? e[j] : acc;\n\
             \x20   __syncthreads();\n\
             \x20 }}\n\
             \x20 if (threadIdx.x == 0) stat[0] = acc;\n\
             \x20 __syncthreads();\n\
             \x20 const {reg} m = stat[0];\n\
             \x20 acc = 0;\n\
             \x20 for (long long j0 = 0; j0 < end; j0 += {CHUNK}LL) {{\n\
             \x20   const long long n = end - j0 < {CHUNK}LL ? end - j0 : {CHUNK}LL;\n\
             \x20   for (long long j = threadIdx.x; j < n; j += blockDim.x) e[j] = {e};\n\
             \x20   __syncthreads();\n\
             \x20   if (threadIdx.x == 0) for (long long j = 0; j < n; j++) acc += e[j];\n\
             \x20   __syncthreads();\n\
             \x20 }}\n\
             \x20 if (threadIdx.x == 0) stat[1] = acc;\n\
             \x20 __syncthreads();\n\
             \x20 if (dy == 0) return;\n\
             \x20 const {reg} z = stat[1];\n\
             \x20 acc = 0;\n\
             \x20 for (long long j0 = 0; j0 < end; j0 += {CHUNK}LL) {{\n\
             \x20   const long long n = end - j0 < {CHUNK}LL ? end - j0 : {CHUNK}LL;\n\
             \x20   for (long long j = threadIdx.x; j < n; j += blockDim.x) {{ e[j] = {p}; f[j] = {name}_dp(qkv, dy, h, i, j0 + j); }}\n\
             \x20   __syncthreads();\n\
             \x20   if (threadIdx.x == 0) for (long long j = 0; j < n; j++) acc += e[j] * f[j];\n\
             \x20   __syncthreads();\n\
             \x20 }}\n\
             \x20 if (threadIdx.x == 0) stat[2] = acc;\n\
             \x20 __syncthreads();\n\
             }}\n",
            v_off = 2 * d,
        )
    }

    /// `exp(s_ij - m)` for query `i` and key `j` (C expressions), with the
    /// elementwise `Exp` op's exp (the CPU's polynomial for f32).
    fn exp_minus_max(&self, name: &str, i: &str, j: &str) -> String {
        let s = format!("{name}_score(qkv, h, {i}, {j}) - m");
        scalar::unary(UnaryOp::Exp, self.reg, &s)
    }

    /// The softmax weight `p_ij = exp(s_ij - m) / z`.
    fn p(&self, name: &str, i: &str, j: &str) -> String {
        format!("{} / z", self.exp_minus_max(name, i, j))
    }

    /// C statements naming the block's work item `w` of `[b, heads, t]`:
    /// `bi`, `h` and the position `pos`.
    fn split(&self, heads: usize) -> String {
        let t = self.t;
        format!(
            "    const long long pos = w % {t}LL, h = (w / {t}LL) % {heads}LL, bi = w / ({t}LL * {heads}LL);\n"
        )
    }

    /// A kernel over every (batch, head, position) of the node, one block
    /// each (block-stride): `params`, the shared chunks, then `body`.
    fn kernel(&self, name: &str, heads: usize, params: &[String], body: &str) -> String {
        let rows = self.rows(heads);
        let reg = self.reg;
        format!(
            "extern \"C\" __global__ void {name}({}) {{\n\
             \x20 __shared__ {reg} e[{CHUNK}];\n\
             \x20 __shared__ {reg} f[{CHUNK}];\n\
             \x20 __shared__ {reg} stat[5];\n\
             \x20 for (long long w = blockIdx.x; w < {rows}LL; w += gridDim.x) {{\n\
             {split}{body}  }}\n\
             }}\n",
            params.join(", "),
            split = self.split(heads),
        )
    }

    /// C statements writing, for every column `c` of the head, the sum
    /// over the row's keys (`j < end`, in key order) of a weight times a
    /// column element: the weights (`weight`, a C expression of `j0 + j`)
    /// a chunk at a time into `e` by the whole block, the element read
    /// through `xc = column` (the column's first element, rows `3 d`
    /// apart), the sum `acc` written by `write`.
    fn key_sum(&self, weight: &str, column: &str, write: &str) -> String {
        let Dims { d, hd, st, reg, .. } = *self;
        let x = self.load(&format!("xc[(j0 + j) * {}LL]", 3 * d));
        format!(
            "    for (long long c0 = 0; c0 < {hd}LL; c0 += blockDim.x) {{\n\
             \x20     const long long c = c0 + threadIdx.x;\n\
             \x20     const {st}* xc = {column};\n\
             \x20     {reg} acc = 0;\n\
             \x20     for (long long j0 = 0; j0 < end; j0 += {CHUNK}LL) {{\n\
             \x20       const long long n = end - j0 < {CHUNK}LL ? end - j0 : {CHUNK}LL;\n\
             \x20       for (long long j = threadIdx.x; j < n; j += blockDim.x) e[j] = {weight};\n\
             \x20       __syncthreads();\n\
             \x20       if (c < {hd}LL) for (long long j = 0; j < n; j++) acc += e[j] * {x};\n\
             \x20       __syncthreads();\n\
             \x20     }}\n\
             \x20     if (c < {hd}LL) {write};\n\
             \x20   }}\n"
        )
    }

    /// Blocks of work: one per (batch, head, position).
    fn rows(&self, heads: usize) -> usize {
        self.b * heads * self.t
    }
}

/// Keys per chunk of a row held in shared memory: one per thread of the
/// block, so each thread computes one score per chunk.
const CHUNK: usize = BLOCK as usize;

/// The launch of an [`Op::Attention`] node `n`: one block per (batch,
/// head, query position), each thread summing output columns; nothing when
/// it is empty.
pub(super) fn attention(graph: &Graph, n: NodeId, k: usize, name: &str, out: &mut CudaSource) {
    let node = &graph.nodes[n];
    let Op::Attention { heads, causal } = node.op else {
        unreachable!("attention codegen of {}", node.op.name())
    };
    if node.spec.numel() == 0 {
        return;
    }
    let dm = Dims::of(graph, n, heads, causal);
    let Dims {
        t, d, hd, st, reg, ..
    } = dm;
    let row = 3 * d;
    let end = dm.key_end("pos");
    let p = dm.p(name, "pos", "j0 + j");
    let store = store_expr(dm.dtype, "acc");
    // The row's statistics, then its weights a chunk at a time, each
    // normalised before it weighs v (as the definition reads).
    let sum = dm.key_sum(
        &p,
        &format!("qkv + {}LL + h * {hd}LL + c", 2 * d),
        &format!("dst[(bi * {t}LL + pos) * {d}LL + h * {hd}LL + c] = {store}"),
    );
    let body = format!(
        "    const {st}* qkv = src + bi * {block}LL;\n\
         \x20   {name}_stats(qkv, 0, h, pos, e, f, stat);\n\
         \x20   const {reg} m = stat[0], z = stat[1];\n\
         \x20   const long long end = {end};\n\
         {sum}",
        block = t * row,
    );
    let params = [format!("const {st}* src"), format!("{st}* dst")];
    let code = dm.helpers(name) + &dm.kernel(name, heads, &params, &body);
    out.add(
        name.to_string(),
        code,
        Grid::PerBlock(dm.rows(heads)),
        vec![Arg::Node(node.args[0]), Arg::Node(n)],
        k,
    );
}

/// The launch of an [`Op::AttentionGrad`] node `n`: one block per (batch,
/// head, position), writing that position's dq (as a query) and dk, dv (as
/// a key) of the head; nothing when it is empty.
pub(super) fn attention_grad(graph: &Graph, n: NodeId, k: usize, name: &str, out: &mut CudaSource) {
    let node = &graph.nodes[n];
    let Op::AttentionGrad { heads, causal } = node.op else {
        unreachable!("attention_grad codegen of {}", node.op.name())
    };
    if node.spec.numel() == 0 {
        return;
    }
    let dm = Dims::of(graph, n, heads, causal);
    let Dims {
        t, d, hd, st, reg, ..
    } = dm;
    let row = 3 * d;
    let scale = constant(1.0 / (hd as f64).sqrt(), dm.dtype);
    let (q_i, dy_i) = (
        dm.load(&format!("qc[qi * {row}LL]")),
        dm.load(&format!("gc[qi * {d}LL]")),
    );
    let (end, start) = (dm.key_end("pos"), dm.query_start("pos"));
    let p_row = dm.p(name, "pos", "j0 + j");
    let p_col = dm.p(name, "qi", "pos");
    let (store_q, store_k, store_v) = (
        store_expr(dm.dtype, "acc"),
        store_expr(dm.dtype, "ak"),
        store_expr(dm.dtype, "av"),
    );
    // dq of the block's position from its own row's statistics; then dk
    // and dv of the same position as a key, from the statistics of every
    // query row that sees it, in query order: the row's weight p and its
    // ds computed once (stat[3], stat[4]), not once per column.
    let dq = dm.key_sum(
        &format!("{p_row} * ({name}_dp(qkv, dy, h, pos, j0 + j) - r) * {scale}"),
        &format!("qkv + {d}LL + h * {hd}LL + c"),
        &format!("o[c] = {store_q}"),
    );
    let body = format!(
        "    const {st}* qkv = src + bi * {block}LL;\n\
         \x20   const {st}* dy = dsrc + bi * {dy_block}LL;\n\
         \x20   {st}* o = dst + bi * {block}LL + pos * {row}LL + h * {hd}LL;\n\
         \x20   {name}_stats(qkv, dy, h, pos, e, f, stat);\n\
         \x20   {{\n\
         \x20     const {reg} m = stat[0], z = stat[1], r = stat[2];\n\
         \x20     const long long end = {end};\n\
         {dq}\
         \x20   }}\n\
         \x20   for (long long c0 = 0; c0 < {hd}LL; c0 += blockDim.x) {{\n\
         \x20     const long long c = c0 + threadIdx.x;\n\
         \x20     const {st}* qc = qkv + h * {hd}LL + c;\n\
         \x20     const {st}* gc = dy + h * {hd}LL + c;\n\
         \x20     {reg} ak = 0, av = 0;\n\
         \x20     for (long long qi = {start}; qi < {t}LL; qi++) {{\n\
         \x20       {name}_stats(qkv, dy, h, qi, e, f, stat);\n\
         \x20       if (threadIdx.x == 0) {{\n\
         \x20         const {reg} m = stat[0], z = stat[1], r = stat[2];\n\
         \x20         const {reg} p = {p_col};\n\
         \x20         stat[3] = p;\n\
         \x20         stat[4] = p * ({name}_dp(qkv, dy, h, qi, pos) - r) * {scale};\n\
         \x20       }}\n\
         \x20       __syncthreads();\n\
         \x20       if (c < {hd}LL) {{\n\
         \x20         ak += stat[4] * {q_i};\n\
         \x20         av += stat[3] * {dy_i};\n\
         \x20       }}\n\
         \x20     }}\n\
         \x20     if (c < {hd}LL) {{ o[{d}LL + c] = {store_k}; o[{v_off}LL + c] = {store_v}; }}\n\
         \x20   }}\n",
        block = t * row,
        dy_block = t * d,
        v_off = 2 * d,
    );
    let params = [
        format!("const {st}* src"),
        format!("const {st}* dsrc"),
        format!("{st}* dst"),
    ];
    let code = dm.helpers(name) + &dm.kernel(name, heads, &params, &body);
    out.add(
        name.to_string(),
        code,
        Grid::PerBlock(dm.rows(heads)),
        vec![
            Arg::Node(node.args[0]),
            Arg::Node(node.args[1]),
            Arg::Node(n),
        ],
        k,
    );
}
