//! Activations, reductions and indexing helpers built from primitives.

use crate::error::GraphError;
use crate::trace::Tensor;
use nitro_device::DType;

/// max(x, 0), with gradient 0 at and below 0.
pub fn relu(x: &Tensor) -> Tensor {
    x.gt(&x.scalar_like(0.0)).select(x, &x.scalar_like(0.0))
}

/// GELU, tanh approximation (as in GPT-2 and `jax.nn.gelu(approximate=True)`).
pub fn gelu(x: &Tensor) -> Tensor {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let inner = (x + x * x * x * 0.044715) * c;
    x * 0.5 * (inner.tanh() + 1.0)
}

/// The error function: the [`Erf`](crate::ir::UnaryOp::Erf) primitive
/// (f32 to 1.2e-7 absolute, f64 to libm's ulp; see
/// [`crate::semantics::erf`]), whose VJP `2/√π e^(-x²)` reads only x.
pub fn erf(x: &Tensor) -> Tensor {
    x.erf()
}

/// GELU, exact: `x Φ(x) = x (1 + erf(x / √2)) / 2` (PyTorch's `nn.GELU()`
/// default, `jax.nn.gelu(approximate=False)`): the
/// [`Gelu`](crate::ir::UnaryOp::Gelu) primitive, so the forward stores
/// only its output and the backward (`Φ(x) + x φ(x)`) reads only x.
pub fn gelu_erf(x: &Tensor) -> Tensor {
    x.gelu_erf()
}

/// ln(1 + e^x), computed stably.
pub fn softplus(x: &Tensor) -> Tensor {
    relu(x) + (-x.abs()).exp().add(&x.scalar_like(1.0)).log()
}

/// Mean over `axes`.
pub fn mean(x: &Tensor, axes: &[usize]) -> Tensor {
    let n: usize = axes
        .iter()
        .map(|&a| x.shape().get(a).copied().unwrap_or(1))
        .product();
    x.sum(axes) / (n.max(1) as f64)
}

/// Mean of every element.
pub fn mean_all(x: &Tensor) -> Tensor {
    mean(x, &(0..x.rank()).collect::<Vec<_>>())
}

/// Keep-dims shape of `x` reduced over `axis`.
fn kept(x: &Tensor, axis: usize) -> Vec<usize> {
    let mut s = x.shape().to_vec();
    if axis < s.len() {
        s[axis] = 1;
    }
    s
}

/// Population variance over `axes`.
pub fn var(x: &Tensor, axes: &[usize]) -> Tensor {
    let mut kd = x.shape().to_vec();
    for &a in axes {
        if a < kd.len() {
            kd[a] = 1;
        }
    }
    let mu = mean(x, axes).reshape(&kd);
    let d = x - mu;
    mean(&(&d * &d), axes)
}

/// log Σ exp over `axis` (stable: the max is subtracted first).
///
/// The max is a constant to autodiff (`stop_gradient`, as JAX writes it):
/// the result does not depend on the shift, so its exact gradient through
/// the max is zero, and differentiating the max anyway only added a
/// rounding-sized term at the cost of a pass routing it to the argmax.
pub fn logsumexp(x: &Tensor, axis: usize) -> Tensor {
    let kd = kept(x, axis);
    let m = x.max(&[axis]).stop_gradient();
    let shifted = x - m.reshape(&kd);
    shifted.exp().sum(&[axis]).log() + m
}

/// log softmax over `axis`.
pub fn log_softmax(x: &Tensor, axis: usize) -> Tensor {
    x - logsumexp(x, axis).reshape(&kept(x, axis))
}

/// softmax over `axis`, shifted by the row's max, a constant to autodiff
/// as in [`logsumexp`] (softmax does not depend on the shift).
pub fn softmax(x: &Tensor, axis: usize) -> Tensor {
    let kd = kept(x, axis);
    let e = (x - x.max(&[axis]).stop_gradient().reshape(&kd)).exp();
    &e / e.sum(&[axis]).reshape(&kd)
}

/// Index of the largest element along the last axis (first on ties), as i32.
pub fn argmax(x: &Tensor) -> Tensor {
    if x.rank() == 0 {
        x.tracer().fail(GraphError::shape(
            "argmax",
            "needs rank >= 1",
            &[x.shape()],
            "reshape the scalar to [1]",
        ));
        return x.cast(DType::I32);
    }
    let axis = x.rank() - 1;
    let n = x.shape()[axis];
    let kd = kept(x, axis);
    let is_max = x.eq_t(&x.max(&[axis]).reshape(&kd));
    // Score n-1-i where the max is, -1 elsewhere: the max score is the first index.
    let rev = x.tracer().iota(x.shape(), axis, DType::I32).neg()
        + x.tracer().scalar((n - 1) as f64, DType::I32);
    let score = is_max.select(&rev, &x.tracer().scalar(-1.0, DType::I32));
    x.tracer().scalar((n - 1) as f64, DType::I32) - score.max(&[axis])
}

/// One-hot rows: `labels` (integer, any shape) to `[.., classes]` of `dtype`.
pub fn one_hot(labels: &Tensor, classes: usize, dtype: DType) -> Tensor {
    let mut shape = labels.shape().to_vec();
    shape.push(classes);
    let mut lshape = labels.shape().to_vec();
    lshape.push(1);
    let idx = labels
        .tracer()
        .iota(&shape, shape.len() - 1, labels.dtype());
    idx.eq_t(&labels.reshape(&lshape)).cast(dtype)
}

/// Inverted dropout: during training each element is zeroed with
/// probability `rate` and the survivors scaled by `1 / (1 - rate)`, using
/// the counter-based generator keyed by the traced i32 scalar `key` (feed a
/// new key each step); at evaluation it is the identity.
pub fn dropout(x: &Tensor, key: &Tensor, rate: f64, train: bool) -> Tensor {
    if !train || rate <= 0.0 {
        return x.clone();
    }
    let u = x.tracer().random_uniform(key, x.shape(), x.dtype());
    let keep = u.ge(&u.scalar_like(rate)).cast(x.dtype());
    x * keep / (1.0 - rate)
}
