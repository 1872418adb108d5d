//! The kernels of fused multi-head attention ([`Op::Attention`]) and its
//! adjoint ([`Op::AttentionGrad`]): the CUDA C of each, its parameters
//! and its launch size. Owns the per-head index arithmetic over the fused
//! `qkv [b, t, 3 d]` layout (q | k | v, heads contiguous) and the order in
//! which scores, softmax and products are evaluated; `single` owns the
//! choice to launch them, `types` the storage conversions, and the meaning
//! of the ops is `ir::ops` (the CPU backend is the reference).
//!
//! A first, correct kernel, not a fast one: one thread per output element
//! (grid-stride), recomputing from global memory every score its element
//! needs. The forward is O(t * hd) per element; the adjoint's dk and dv
//! columns need the softmax statistics of every query row that sees their
//! key, O(t² * hd) per element. Nothing is shared between threads, so no
//! scratch buffer, no atomics and no barriers. A tiled kernel (a block per
//! query tile, keys streamed through shared memory with an online softmax,
//! as in FlashAttention) is future work.
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
use super::{per_element, scalar, Arg, CudaSource, Grid};
use crate::ir::{Graph, NodeId, Op, UnaryOp};
use nitro_device::DType;

/// The baked extents and C spellings one attention kernel is written with.
struct Dims {
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
    /// `s_ij`, and the row statistics `m_i` (maximum) and `z_i` (sum of
    /// `exp(s_ij - m_i)`) of one query row. `qkv` points at the batch
    /// element's `[t, 3 d]` block; `h` is the head.
    fn softmax_helpers(&self, name: &str) -> String {
        let Dims { d, hd, st, reg, .. } = *self;
        let row = 3 * d;
        let scale = constant(1.0 / (hd as f64).sqrt(), self.dtype);
        let (q, k) = (self.load("q[c]"), self.load("k[c]"));
        let end = self.key_end("i");
        // The elementwise `Exp` op's exp (the CPU's polynomial for f32).
        let exp = |x: &str| scalar::unary(UnaryOp::Exp, reg, x);
        let (e_sum, e_p) = (
            exp(&format!("{name}_score(qkv, h, i, j) - mx")),
            exp(&format!("{name}_score(qkv, h, i, j) - m")),
        );
        format!(
            "__device__ __forceinline__ {reg} {name}_score(const {st}* qkv, long long h, long long i, long long j) {{\n\
             \x20 const {st}* q = qkv + i * {row}LL + h * {hd}LL;\n\
             \x20 const {st}* k = qkv + j * {row}LL + {d}LL + h * {hd}LL;\n\
             \x20 {reg} acc = 0;\n\
             \x20 for (long long c = 0; c < {hd}LL; c++) acc += {q} * {k};\n\
             \x20 return acc * {scale};\n\
             }}\n\
             __device__ __forceinline__ void {name}_row(const {st}* qkv, long long h, long long i, {reg}* m, {reg}* z) {{\n\
             \x20 const long long end = {end};\n\
             \x20 {reg} mx = {name}_score(qkv, h, i, 0);\n\
             \x20 for (long long j = 1; j < end; j++) {{ const {reg} s = {name}_score(qkv, h, i, j); mx = s > mx ? s : mx; }}\n\
             \x20 {reg} sum = 0;\n\
             \x20 for (long long j = 0; j < end; j++) sum += {e_sum};\n\
             \x20 *m = mx;\n\
             \x20 *z = sum;\n\
             }}\n\
             __device__ __forceinline__ {reg} {name}_p(const {st}* qkv, long long h, long long i, long long j, {reg} m, {reg} z) {{\n\
             \x20 return {e_p} / z;\n\
             }}\n"
        )
    }

    /// C statements splitting the flat index `i` of a `[b, t, width]`
    /// tensor into `bi`, `pos` and `col`.
    fn split(&self, width: usize) -> String {
        let t = self.t;
        format!(
            "    const long long col = i % {width}LL, pos = (i / {width}LL) % {t}LL, bi = i / ({width}LL * {t}LL);\n"
        )
    }
}

/// The launch of an [`Op::Attention`] node `n`: one thread per element of
/// the output `[b, t, d]`, nothing when it is empty.
pub(super) fn attention(graph: &Graph, n: NodeId, k: usize, name: &str, out: &mut CudaSource) {
    let node = &graph.nodes[n];
    let Op::Attention { heads, causal } = node.op else {
        unreachable!("attention codegen of {}", node.op.name())
    };
    let numel = node.spec.numel();
    if numel == 0 {
        return;
    }
    let dm = Dims::of(graph, n, heads, causal);
    let Dims {
        t, d, hd, st, reg, ..
    } = dm;
    let row = 3 * d;
    let v = dm.load("v[j * ROW]").replace("ROW", &format!("{row}LL"));
    let end = dm.key_end("pos");
    let store = store_expr(dm.dtype, "acc");
    // Three passes over the keys of the row (maximum, sum, weighted sum of
    // v), as the definition reads: p is normalised before it weighs v.
    let body = format!(
        "{split}    const long long h = col / {hd}LL, c = col % {hd}LL;\n\
         \x20   const {st}* qkv = src + bi * {block}LL;\n\
         \x20   const {st}* v = qkv + {v_off}LL + h * {hd}LL + c;\n\
         \x20   {reg} m, z;\n\
         \x20   {name}_row(qkv, h, pos, &m, &z);\n\
         \x20   {reg} acc = 0;\n\
         \x20   for (long long j = 0; j < {end}; j++) acc += {name}_p(qkv, h, pos, j, m, z) * {v};\n\
         \x20   dst[i] = {store};\n",
        split = dm.split(d),
        block = t * row,
        v_off = 2 * d,
    );
    let params = [format!("const {st}* src"), format!("{st}* dst")];
    let code = dm.softmax_helpers(name) + &per_element(name, &params, numel, &body);
    out.add(
        name.to_string(),
        code,
        Grid::PerElement(numel),
        vec![Arg::Node(node.args[0]), Arg::Node(n)],
        k,
    );
}

/// The launch of an [`Op::AttentionGrad`] node `n`: one thread per element
/// of `dqkv [b, t, 3 d]`, which decides by its column whether it is a dq,
/// dk or dv element; nothing when it is empty.
pub(super) fn attention_grad(graph: &Graph, n: NodeId, k: usize, name: &str, out: &mut CudaSource) {
    let node = &graph.nodes[n];
    let Op::AttentionGrad { heads, causal } = node.op else {
        unreachable!("attention_grad codegen of {}", node.op.name())
    };
    let numel = node.spec.numel();
    if numel == 0 {
        return;
    }
    let dm = Dims::of(graph, n, heads, causal);
    let Dims {
        t, d, hd, st, reg, ..
    } = dm;
    let row = 3 * d;
    let scale = constant(1.0 / (hd as f64).sqrt(), dm.dtype);
    let (dy_c, v_c) = (dm.load("g[c]"), dm.load("v[c]"));
    let end_i = dm.key_end("i");
    // dp_ij = dy_i · v_j within head h, and r_i = Σ_j p_ij dp_ij: the
    // softmax's adjoint needs both for every row a column touches.
    let helpers = format!(
        "__device__ __forceinline__ {reg} {name}_dp(const {st}* qkv, const {st}* dy, long long h, long long i, long long j) {{\n\
         \x20 const {st}* g = dy + i * {d}LL + h * {hd}LL;\n\
         \x20 const {st}* v = qkv + j * {row}LL + {v_off}LL + h * {hd}LL;\n\
         \x20 {reg} acc = 0;\n\
         \x20 for (long long c = 0; c < {hd}LL; c++) acc += {dy_c} * {v_c};\n\
         \x20 return acc;\n\
         }}\n\
         __device__ __forceinline__ {reg} {name}_r(const {st}* qkv, const {st}* dy, long long h, long long i, {reg} m, {reg} z) {{\n\
         \x20 {reg} acc = 0;\n\
         \x20 for (long long j = 0; j < {end_i}; j++) acc += {name}_p(qkv, h, i, j, m, z) * {name}_dp(qkv, dy, h, i, j);\n\
         \x20 return acc;\n\
         }}\n",
        v_off = 2 * d,
    );
    let strided =
        |base: &str, idx: &str, stride: usize| dm.load(&format!("{base}[{idx} * {stride}LL]"));
    let (k_j, q_i, dy_i) = (
        strided("kc", "kj", row),
        strided("qc", "qi", row),
        strided("gc", "qi", d),
    );
    let (end_pos, start_pos) = (dm.key_end("pos"), dm.query_start("pos"));
    let store = store_expr(dm.dtype, "acc");
    // `part` picks the block of the fused projection: 0 q, 1 k, 2 v; the
    // thread's position is the query row for dq and the key row for dk, dv.
    let body = format!(
        "{split}    const long long part = col / {d}LL, h = (col % {d}LL) / {hd}LL, c = col % {hd}LL;\n\
         \x20   const {st}* qkv = src + bi * {block}LL;\n\
         \x20   const {st}* dy = dsrc + bi * {dy_block}LL;\n\
         \x20   const {st}* qc = qkv + h * {hd}LL + c;\n\
         \x20   const {st}* kc = qkv + {d}LL + h * {hd}LL + c;\n\
         \x20   const {st}* gc = dy + h * {hd}LL + c;\n\
         \x20   {reg} acc = 0;\n\
         \x20   if (part == 0) {{\n\
         \x20     const long long qi = pos;\n\
         \x20     {reg} m, z;\n\
         \x20     {name}_row(qkv, h, qi, &m, &z);\n\
         \x20     const {reg} r = {name}_r(qkv, dy, h, qi, m, z);\n\
         \x20     for (long long kj = 0; kj < {end_pos}; kj++) {{\n\
         \x20       const {reg} ds = {name}_p(qkv, h, qi, kj, m, z) * ({name}_dp(qkv, dy, h, qi, kj) - r) * {scale};\n\
         \x20       acc += ds * {k_j};\n\
         \x20     }}\n\
         \x20   }} else if (part == 1) {{\n\
         \x20     const long long kj = pos;\n\
         \x20     for (long long qi = {start_pos}; qi < {t}LL; qi++) {{\n\
         \x20       {reg} m, z;\n\
         \x20       {name}_row(qkv, h, qi, &m, &z);\n\
         \x20       const {reg} r = {name}_r(qkv, dy, h, qi, m, z);\n\
         \x20       const {reg} ds = {name}_p(qkv, h, qi, kj, m, z) * ({name}_dp(qkv, dy, h, qi, kj) - r) * {scale};\n\
         \x20       acc += ds * {q_i};\n\
         \x20     }}\n\
         \x20   }} else {{\n\
         \x20     const long long kj = pos;\n\
         \x20     for (long long qi = {start_pos}; qi < {t}LL; qi++) {{\n\
         \x20       {reg} m, z;\n\
         \x20       {name}_row(qkv, h, qi, &m, &z);\n\
         \x20       acc += {name}_p(qkv, h, qi, kj, m, z) * {dy_i};\n\
         \x20     }}\n\
         \x20   }}\n\
         \x20   dst[i] = {store};\n",
        split = dm.split(row),
        block = t * row,
        dy_block = t * d,
    );
    let params = [
        format!("const {st}* src"),
        format!("const {st}* dsrc"),
        format!("{st}* dst"),
    ];
    let code = dm.softmax_helpers(name) + &helpers + &per_element(name, &params, numel, &body);
    out.add(
        name.to_string(),
        code,
        Grid::PerElement(numel),
        vec![
            Arg::Node(node.args[0]),
            Arg::Node(node.args[1]),
            Arg::Node(n),
        ],
        k,
    );
}
