//! The method API of [`Tensor`]: one thin wrapper per primitive, plus the
//! explicit broadcasting rule shared by every binary op.

use super::Tensor;
use crate::error::GraphError;
use crate::ir::{BinaryOp, CmpOp, Op, UnaryOp, Window};
use nitro_device::DType;

/// The common shape of two operands: equal shapes, a rank-0 scalar against
/// anything, or equal ranks whose axes are equal or 1. Anything else (in
/// particular `[n,1]` against `[n]`) is an error: no implicit rank promotion.
fn broadcast_shape(op: &str, a: &[usize], b: &[usize]) -> Result<Vec<usize>, GraphError> {
    if a == b {
        return Ok(a.to_vec());
    }
    if a.is_empty() {
        return Ok(b.to_vec());
    }
    if b.is_empty() {
        return Ok(a.to_vec());
    }
    if a.len() != b.len() {
        return Err(GraphError::shape(
            op,
            format!(
                "operands have rank {} and {} (no implicit rank promotion)",
                a.len(),
                b.len()
            ),
            &[a, b],
            "reshape one operand to the other's rank, e.g. `x.reshape(&[n, 1])`",
        ));
    }
    a.iter()
        .zip(b)
        .map(|(&x, &y)| match (x, y) {
            _ if x == y => Ok(x),
            (1, _) => Ok(y),
            (_, 1) => Ok(x),
            _ => Err(GraphError::shape(
                op,
                format!("axes of size {x} and {y} cannot broadcast"),
                &[a, b],
                "only size-1 axes broadcast",
            )),
        })
        .collect()
}

macro_rules! unary_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(&self) -> Tensor {
            self.tracer.record(Op::Unary(UnaryOp::$op), &[self], self.dtype())
        }
    )*};
}

macro_rules! binary_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(&self, other: &Tensor) -> Tensor {
            self.binary(Op::Binary(BinaryOp::$op), other)
        }
    )*};
}

macro_rules! compare_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(&self, other: &Tensor) -> Tensor {
            self.binary(Op::Compare(CmpOp::$op), other)
        }
    )*};
}

impl Tensor {
    /// The same value with no gradient flowing back through it (JAX's
    /// `stop_gradient`, PyTorch's `detach`): autodiff treats it as a
    /// constant. Integer and bool tensors carry no gradient and are
    /// returned as they are.
    pub fn stop_gradient(&self) -> Tensor {
        if self.dtype().is_float() {
            self.tracer
                .record(Op::Unary(UnaryOp::StopGradient), &[self], self.dtype())
        } else {
            self.clone()
        }
    }

    unary_methods! {
        /// -x
        neg => Neg,
        /// e^x
        exp => Exp,
        /// ln x
        log => Log,
        /// √x
        sqrt => Sqrt,
        /// tanh x
        tanh => Tanh,
        /// 1 / (1 + e^-x)
        sigmoid => Sigmoid,
        /// sin x
        sin => Sin,
        /// cos x
        cos => Cos,
        /// |x|
        abs => Abs,
        /// 1 / x
        recip => Recip,
        /// sign(x)
        sign => Sign,
        /// ⌊x⌋
        floor => Floor,
        /// erf x
        erf => Erf,
        /// Exact GELU, x Φ(x) = x (1 + erf(x / √2)) / 2
        gelu_erf => Gelu,
        /// d/dx of exact GELU, Φ(x) + x φ(x) (its backward)
        gelu_erf_grad => GeluGrad,
    }

    binary_methods! {
        /// a + b (broadcasting)
        add => Add,
        /// a - b (broadcasting)
        sub => Sub,
        /// a * b (broadcasting)
        mul => Mul,
        /// a / b (broadcasting)
        div => Div,
        /// max(a, b) (broadcasting)
        maximum => Max,
        /// min(a, b) (broadcasting)
        minimum => Min,
        /// a ^ b (broadcasting)
        pow => Pow,
    }

    compare_methods! {
        /// a == b
        eq_t => Eq,
        /// a != b
        ne_t => Ne,
        /// a < b
        lt => Lt,
        /// a <= b
        le => Le,
        /// a > b
        gt => Gt,
        /// a >= b
        ge => Ge,
    }

    fn binary(&self, op: Op, other: &Tensor) -> Tensor {
        match broadcast_shape(&op.name(), self.shape(), other.shape()) {
            Ok(shape) => {
                let a = self.broadcast_to(&shape);
                let b = other.broadcast_to(&shape);
                self.tracer.record(op, &[&a, &b], self.dtype())
            }
            Err(err) => {
                self.tracer.fail(err);
                self.clone()
            }
        }
    }

    /// A scalar constant of this tensor's dtype.
    pub fn scalar_like(&self, value: f64) -> Tensor {
        self.tracer.scalar(value, self.dtype())
    }

    /// A tensor of this shape and dtype filled with `value`.
    pub fn full_like(&self, value: f64) -> Tensor {
        self.tracer.fill(value, self.shape(), self.dtype())
    }

    /// Elementwise `self ? a : b` (self must be bool); operands broadcast.
    pub fn select(&self, a: &Tensor, b: &Tensor) -> Tensor {
        let shape = broadcast_shape("select", self.shape(), a.shape())
            .and_then(|s| broadcast_shape("select", &s, b.shape()));
        match shape {
            Ok(shape) => {
                let (c, a, b) = (
                    self.broadcast_to(&shape),
                    a.broadcast_to(&shape),
                    b.broadcast_to(&shape),
                );
                self.tracer.record(Op::Select, &[&c, &a, &b], a.dtype())
            }
            Err(err) => {
                self.tracer.fail(err);
                a.clone()
            }
        }
    }

    /// Convert to `dtype`.
    pub fn cast(&self, dtype: DType) -> Tensor {
        if dtype == self.dtype() {
            return self.clone();
        }
        self.tracer.record(Op::Cast { to: dtype }, &[self], dtype)
    }

    /// Sum over `axes` (removed from the shape).
    pub fn sum(&self, axes: &[usize]) -> Tensor {
        self.tracer
            .record(Op::ReduceSum { axes: sorted(axes) }, &[self], self.dtype())
    }

    /// Maximum over `axes` (removed from the shape).
    pub fn max(&self, axes: &[usize]) -> Tensor {
        self.tracer
            .record(Op::ReduceMax { axes: sorted(axes) }, &[self], self.dtype())
    }

    /// Sum of every element (a scalar).
    pub fn sum_all(&self) -> Tensor {
        self.sum(&(0..self.rank()).collect::<Vec<_>>())
    }

    /// Same elements, another shape.
    pub fn reshape(&self, shape: &[usize]) -> Tensor {
        if shape == self.shape() {
            return self.clone();
        }
        self.tracer.record(
            Op::Reshape {
                shape: shape.to_vec(),
            },
            &[self],
            self.dtype(),
        )
    }

    /// Reorder axes: output axis `i` is input axis `perm[i]`.
    pub fn permute(&self, perm: &[usize]) -> Tensor {
        self.tracer.record(
            Op::Permute {
                perm: perm.to_vec(),
            },
            &[self],
            self.dtype(),
        )
    }

    /// Swap the last two axes.
    pub fn t(&self) -> Tensor {
        let r = self.rank();
        if r < 2 {
            self.tracer.fail(GraphError::shape(
                "transpose",
                "needs rank >= 2",
                &[self.shape()],
                "",
            ));
            return self.clone();
        }
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 2, r - 1);
        self.permute(&perm)
    }

    /// Repeat to `shape`: a scalar broadcasts to anything; otherwise ranks
    /// must be equal and only size-1 axes repeat.
    pub fn broadcast_to(&self, shape: &[usize]) -> Tensor {
        if shape == self.shape() {
            return self.clone();
        }
        let src = if self.rank() == 0 {
            self.reshape(&vec![1; shape.len()])
        } else {
            self.clone()
        };
        self.tracer.record(
            Op::Broadcast {
                shape: shape.to_vec(),
            },
            &[&src],
            self.dtype(),
        )
    }

    /// Strided window `start..end` step `stride` on every axis.
    pub fn slice(&self, start: &[usize], end: &[usize], stride: &[usize]) -> Tensor {
        let op = Op::Slice {
            start: start.to_vec(),
            end: end.to_vec(),
            stride: stride.to_vec(),
        };
        self.tracer.record(op, &[self], self.dtype())
    }

    /// `start..end` along one axis.
    pub fn narrow(&self, axis: usize, start: usize, end: usize) -> Tensor {
        if axis >= self.rank() {
            self.tracer.fail(GraphError::shape(
                "narrow",
                format!("axis {axis} out of range"),
                &[self.shape()],
                "",
            ));
            return self.clone();
        }
        let mut s = vec![0; self.rank()];
        let mut e = self.shape().to_vec();
        s[axis] = start;
        e[axis] = end;
        self.slice(&s, &e, &vec![1; self.rank()])
    }

    /// Pad with `value`: `lo` before and `hi` after every axis.
    pub fn pad(&self, lo: &[usize], hi: &[usize], value: f64) -> Tensor {
        let op = Op::Pad {
            lo: lo.to_vec(),
            hi: hi.to_vec(),
            interior: vec![0; lo.len()],
            value,
        };
        self.tracer.record(op, &[self], self.dtype())
    }

    /// Join `parts` along `axis`; an error when `parts` is empty.
    pub fn concat(parts: &[Tensor], axis: usize) -> Result<Tensor, GraphError> {
        let refs: Vec<&Tensor> = parts.iter().collect();
        let first = refs.first().ok_or_else(|| {
            GraphError::shape("concat", "nothing to join", &[], "pass at least one tensor")
        })?;
        Ok(first
            .tracer
            .record(Op::Concat { axis }, &refs, first.dtype()))
    }

    /// Rows `idx` of this table (idx: rank-1 integers).
    pub fn take(&self, idx: &Tensor) -> Tensor {
        self.tracer.record(Op::Take, &[self, idx], self.dtype())
    }

    /// Sum rows of `self` into a zero table of `rows` rows at `idx`.
    pub fn scatter_add(&self, idx: &Tensor, rows: usize) -> Tensor {
        self.tracer
            .record(Op::ScatterAdd { rows }, &[self, idx], self.dtype())
    }

    /// The sum of `self` over the `world_size` processes of the process
    /// group the program will run with (see [`Op::AllReduceSum`]); the
    /// identity for a world of one. Not differentiable: apply it to
    /// gradients, after [`crate::trace::Tracer::grad`].
    pub fn all_reduce_sum(&self, world_size: usize) -> Tensor {
        self.tracer
            .record(Op::AllReduceSum { world_size }, &[self], self.dtype())
    }

    /// Layer normalisation over the last axis (see [`Op::LayerNorm`]):
    /// `scale` and `shift` have its length.
    pub fn layer_norm(&self, scale: &Tensor, shift: &Tensor, eps: f64) -> Tensor {
        self.tracer
            .record(Op::LayerNorm { eps }, &[self, scale, shift], self.dtype())
    }

    /// The gradient of [`Tensor::layer_norm`] with respect to `self`, given
    /// the output's cotangent `dy`.
    pub fn layer_norm_grad(&self, scale: &Tensor, dy: &Tensor, eps: f64) -> Tensor {
        self.tracer
            .record(Op::LayerNormGrad { eps }, &[self, scale, dy], self.dtype())
    }

    /// Multi-head self-attention of a fused projection `[b, t, 3 d]` (see
    /// [`Op::Attention`]): `[b, t, d]`.
    pub fn attention(&self, heads: usize, causal: bool) -> Tensor {
        self.tracer
            .record(Op::Attention { heads, causal }, &[self], self.dtype())
    }

    /// The gradient of [`Tensor::attention`] with respect to `self` (the
    /// fused projection), given the output's cotangent `dy`.
    pub fn attention_grad(&self, dy: &Tensor, heads: usize, causal: bool) -> Tensor {
        self.tracer.record(
            Op::AttentionGrad { heads, causal },
            &[self, dy],
            self.dtype(),
        )
    }

    /// The patch matrix `[c*kh*kw, n*oh*ow]` of NCHW images under `window`
    /// (im2col; see [`Op::Im2Col`]).
    pub fn im2col(&self, window: Window) -> Tensor {
        self.tracer
            .record(Op::Im2Col { window }, &[self], self.dtype())
    }

    /// Sum a patch matrix back into images of shape `image` (col2im, the
    /// adjoint of [`Tensor::im2col`]).
    pub fn col2im(&self, image: &[usize], window: Window) -> Tensor {
        let op = Op::Col2Im {
            image: image.to_vec(),
            window,
        };
        self.tracer.record(op, &[self], self.dtype())
    }

    /// Matrix product over the last two axes (batch axes equal).
    pub fn matmul(&self, other: &Tensor) -> Tensor {
        self.matmul_t(other, false, false)
    }

    /// Matrix product with either operand transposed in place (no copy).
    pub fn matmul_t(&self, other: &Tensor, ta: bool, tb: bool) -> Tensor {
        self.tracer
            .record(Op::MatMul { ta, tb }, &[self, other], self.dtype())
    }
}

fn sorted(axes: &[usize]) -> Vec<usize> {
    let mut a = axes.to_vec();
    a.sort_unstable();
    a
}

#[cfg(test)]
mod tests {
    use super::broadcast_shape;

    #[test]
    fn broadcasting_rule() {
        assert_eq!(
            broadcast_shape("add", &[3, 1], &[3, 4]).unwrap(),
            vec![3, 4]
        );
        assert_eq!(broadcast_shape("add", &[], &[3, 4]).unwrap(), vec![3, 4]);
        let err = broadcast_shape("add", &[4, 1], &[4])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`add`") && err.contains("[4,1] and [4]"),
            "{err}"
        );
    }
}
