//! The primitive op set: the one table every op is declared in, with its
//! names and its elementwise class. Its shape and dtype rule is
//! [`super::infer`]. Adding a primitive means one variant here, one arm in
//! `infer`, one VJP rule in `autodiff`, one kernel in `backend/cpu` and one
//! in the CUDA codegen.
//!
//! Everything else (relu, softmax, conv2d, cross-entropy, ...) is built from
//! these in `nn`. Elementwise primitives take operands of *equal* shape: the
//! tracer inserts explicit [`Op::Broadcast`] nodes, so no kernel guesses.

use super::Window;
use nitro_device::DType;
use serde::{Deserialize, Serialize};

/// Elementwise functions of one argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UnaryOp {
    /// -x
    Neg,
    /// e^x
    Exp,
    /// ln x
    Log,
    /// √x
    Sqrt,
    /// tanh x
    Tanh,
    /// 1 / (1 + e^-x)
    Sigmoid,
    /// sin x
    Sin,
    /// cos x
    Cos,
    /// |x|
    Abs,
    /// 1 / x
    Recip,
    /// sign(x) in {-1, 0, 1}
    Sign,
    /// ⌊x⌋
    Floor,
    /// The error function erf x = 2/√π ∫₀ˣ e^(-t²) dt.
    Erf,
    /// Exact GELU, x Φ(x) = x (1 + erf(x / √2)) / 2 (PyTorch's
    /// `nn.GELU()`): a primitive so that its backward reads only x, where
    /// the composite kept every intermediate of the erf for autodiff.
    Gelu,
    /// The derivative of exact GELU, Φ(x) + x φ(x), with φ(x) =
    /// e^(-x²/2) / √(2π): a primitive so that the backward of `Gelu` is one
    /// instruction of a fused loop (one erf, one exp) instead of a dozen,
    /// evaluated in the same order as the composite it replaces.
    GeluGrad,
    /// The identity whose adjoint is zero (JAX's `stop_gradient`,
    /// PyTorch's `detach`): the value passes, no gradient flows back
    /// through it. Simplification forwards it to its argument once the
    /// backward pass is traced, so no kernel ever computes it.
    StopGradient,
}

/// Elementwise functions of two arguments of equal shape and dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BinaryOp {
    /// a + b
    Add,
    /// a - b
    Sub,
    /// a * b
    Mul,
    /// a / b
    Div,
    /// max(a, b)
    Max,
    /// min(a, b)
    Min,
    /// a ^ b
    Pow,
}

/// Elementwise comparisons producing bool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CmpOp {
    /// a == b
    Eq,
    /// a != b
    Ne,
    /// a < b
    Lt,
    /// a <= b
    Le,
    /// a > b
    Gt,
    /// a >= b
    Ge,
}

/// A primitive operation. Output shapes that cannot be inferred from the
/// arguments are carried by the op itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Op {
    /// The `index`-th graph input.
    Input {
        /// Position in the call signature.
        index: usize,
    },
    /// Every element equal to `value`.
    Fill {
        /// The value (converted to the node's dtype).
        value: f64,
        /// Output shape.
        shape: Vec<usize>,
    },
    /// A baked constant array (row-major values, converted to the node's dtype).
    Literal {
        /// Values.
        values: Vec<f64>,
        /// Output shape.
        shape: Vec<usize>,
    },
    /// The index along `axis`: `out[i0,..,ik,..] = ik`.
    Iota {
        /// Which axis counts.
        axis: usize,
        /// Output shape.
        shape: Vec<usize>,
    },
    /// Counter-based uniform random numbers in [0, 1): element `i` is a hash
    /// of (key, salt, i), so the stream is the same on every backend.
    RandomUniform {
        /// Distinguishes two random ops fed the same key.
        salt: u64,
        /// Output shape.
        shape: Vec<usize>,
    },
    /// Elementwise function of one argument.
    Unary(UnaryOp),
    /// Elementwise function of two arguments.
    Binary(BinaryOp),
    /// Elementwise comparison.
    Compare(CmpOp),
    /// `cond ? a : b`, elementwise.
    Select,
    /// Convert to another dtype.
    Cast {
        /// Target dtype.
        to: DType,
    },
    /// Sum over `axes` (removed from the shape).
    ReduceSum {
        /// Axes to reduce, ascending.
        axes: Vec<usize>,
    },
    /// Maximum over `axes` (removed from the shape).
    ReduceMax {
        /// Axes to reduce, ascending.
        axes: Vec<usize>,
    },
    /// Same elements, another shape (row-major order kept).
    Reshape {
        /// Output shape.
        shape: Vec<usize>,
    },
    /// Reorder axes: output axis `i` is input axis `perm[i]`.
    Permute {
        /// The permutation.
        perm: Vec<usize>,
    },
    /// Repeat size-1 axes up to `shape` (same rank as the input).
    Broadcast {
        /// Output shape.
        shape: Vec<usize>,
    },
    /// Strided window `start..end` step `stride` on every axis.
    Slice {
        /// First index per axis.
        start: Vec<usize>,
        /// One past the last index per axis.
        end: Vec<usize>,
        /// Step per axis (>= 1).
        stride: Vec<usize>,
    },
    /// Pad with `value`: `lo` before, `hi` after, `interior` between elements.
    Pad {
        /// Elements before, per axis.
        lo: Vec<usize>,
        /// Elements after, per axis.
        hi: Vec<usize>,
        /// Elements between neighbours, per axis.
        interior: Vec<usize>,
        /// Fill value.
        value: f64,
    },
    /// Join arguments along `axis`.
    Concat {
        /// The joining axis.
        axis: usize,
    },
    /// Rows of a table: `out[i, ...] = table[idx[i], ...]` (idx integer, rank 1).
    Take,
    /// Sum rows into a zero table of `rows` rows: `out[idx[i], ...] += upd[i, ...]`.
    ScatterAdd {
        /// Rows of the output table.
        rows: usize,
    },
    /// Patch matrix of NCHW images (im2col): `x [n, c, h, w]` to
    /// `[c*kh*kw, n*oh*ow]`, row `(c, i, j)` and column `(n, y, x)` holding
    /// `x[n, c, y*stride + i - pad, x*stride + j - pad]` (zero outside).
    /// A convolution is then one matmul with the kernel as `[o, c*kh*kw]`.
    Im2Col {
        /// The window and its placement.
        window: Window,
    },
    /// The adjoint of [`Op::Im2Col`] (col2im): a patch matrix
    /// `[c*kh*kw, n*oh*ow]` summed back into images of shape `image`,
    /// every overlapping window adding its value.
    Col2Im {
        /// The images' shape `[n, c, h, w]`.
        image: Vec<usize>,
        /// The window and its placement.
        window: Window,
    },
    /// Batched matrix product `op(a) @ op(b)`, `op` transposing the last two
    /// axes where flagged; batch axes must be equal.
    MatMul {
        /// Transpose `a`.
        ta: bool,
        /// Transpose `b`.
        tb: bool,
    },
    /// Multi-head scaled dot-product self-attention over a fused projection
    /// `qkv [b, t, 3 d]` (columns q | k | v, each `heads` contiguous heads
    /// of `d / heads`): per head, `softmax(q k^T / sqrt(d / heads)) v`,
    /// the heads side by side in `[b, t, d]`. Causal: position `i` attends
    /// to positions `<= i` only (the others get weight exactly 0). One op,
    /// so no backend materialises the heads' layouts or the scores beyond
    /// one head at a time (the composite it replaces moved about 15 MB of
    /// slices, permutes and score matrices per GPT layer).
    Attention {
        /// Attention heads (divides `d`).
        heads: usize,
        /// Whether later positions are masked.
        causal: bool,
    },
    /// The adjoint of [`Op::Attention`]: `(qkv, dy [b, t, d])` to the
    /// gradient `[b, t, 3 d]` of `qkv` (the weights recomputed per head).
    /// Not differentiable again.
    AttentionGrad {
        /// Attention heads.
        heads: usize,
        /// Whether later positions are masked.
        causal: bool,
    },
    /// Layer normalisation over the last axis: `(x - mean) / sqrt(var +
    /// eps) * scale + shift` with `scale` and `shift` of the last axis's
    /// length, the mean and the (biased) variance over each row. One op so
    /// that a row is read once into cache, not five times through memory
    /// (the composite was five fused kernels and two row reductions).
    LayerNorm {
        /// Added to the variance.
        eps: f64,
    },
    /// The input gradient of [`Op::LayerNorm`]: `(x, scale, dy)` to `dx`,
    /// the row statistics recomputed. (The gradients of `scale` and
    /// `shift` are sums over rows, built from ops.) Not differentiable
    /// again.
    LayerNormGrad {
        /// Added to the variance.
        eps: f64,
    },
    /// The element-wise sum of the argument over the `world_size` processes
    /// of a process group (XLA's all-reduce): same shape and dtype, bitwise
    /// equal on every rank (summed in rank order, see
    /// `nitro_device::collective::order`). The group is handed to the
    /// program when it runs, never captured at trace time; the world size
    /// is part of the op (and so of the graph's content hash), so a program
    /// compiled for one world refuses to run in another. A world of one is
    /// the identity. Applied after the backward pass: autodiff refuses it.
    AllReduceSum {
        /// Processes the sum runs over.
        world_size: usize,
    },
}

impl Op {
    /// Short name, as printed in IR and errors.
    pub fn name(&self) -> String {
        match self {
            Op::Input { .. } => "input".into(),
            Op::Fill { .. } => "fill".into(),
            Op::Literal { .. } => "literal".into(),
            Op::Iota { .. } => "iota".into(),
            Op::RandomUniform { .. } => "random_uniform".into(),
            Op::Unary(u) => format!("{u:?}").to_lowercase(),
            Op::Binary(b) => format!("{b:?}").to_lowercase(),
            Op::Compare(c) => format!("cmp_{c:?}").to_lowercase(),
            Op::Select => "select".into(),
            Op::Cast { .. } => "cast".into(),
            Op::ReduceSum { .. } => "reduce_sum".into(),
            Op::ReduceMax { .. } => "reduce_max".into(),
            Op::Reshape { .. } => "reshape".into(),
            Op::Permute { .. } => "permute".into(),
            Op::Broadcast { .. } => "broadcast".into(),
            Op::Slice { .. } => "slice".into(),
            Op::Pad { .. } => "pad".into(),
            Op::Concat { .. } => "concat".into(),
            Op::Take => "take".into(),
            Op::ScatterAdd { .. } => "scatter_add".into(),
            Op::Im2Col { .. } => "im2col".into(),
            Op::Col2Im { .. } => "col2im".into(),
            Op::MatMul { .. } => "matmul".into(),
            Op::AllReduceSum { .. } => "all_reduce_sum".into(),
            Op::Attention { .. } => "attention".into(),
            Op::LayerNorm { .. } => "layer_norm".into(),
            Op::LayerNormGrad { .. } => "layer_norm_grad".into(),
            Op::AttentionGrad { .. } => "attention_grad".into(),
        }
    }

    /// Whether the op maps element `i` of equal-shaped operands to element
    /// `i` of the output, so that chains of them fuse into one loop.
    pub fn is_elementwise(&self) -> bool {
        matches!(
            self,
            Op::Fill { .. }
                | Op::Iota { .. }
                | Op::RandomUniform { .. }
                | Op::Unary(_)
                | Op::Binary(_)
                | Op::Compare(_)
                | Op::Select
                | Op::Cast { .. }
        )
    }
}
