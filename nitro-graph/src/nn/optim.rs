//! Optimizer updates as graph nodes, so forward, backward and the update
//! compile into one program. Every hyperparameter is a traced scalar: a
//! schedule or sweep changes an input, never the program.

use crate::trace::Tensor;

/// Adam / AdamW hyperparameters as traced scalars.
pub struct AdamHyper<'a> {
    /// Learning rate.
    pub lr: &'a Tensor,
    /// First-moment decay.
    pub beta1: &'a Tensor,
    /// Second-moment decay.
    pub beta2: &'a Tensor,
    /// Denominator guard.
    pub eps: &'a Tensor,
    /// Decoupled weight decay (AdamW; 0 for Adam).
    pub weight_decay: &'a Tensor,
    /// 1-based update count, as a float scalar (bias correction).
    pub step: &'a Tensor,
}

/// One Adam(W) update: returns (param, m, v) after the step. With a
/// non-zero `weight_decay` the decay is decoupled from the gradient
/// (Loshchilov & Hutter): `p -= lr * wd * p`, not added to `g`.
pub fn adam(
    p: &Tensor,
    g: &Tensor,
    m: &Tensor,
    v: &Tensor,
    h: &AdamHyper<'_>,
) -> (Tensor, Tensor, Tensor) {
    let one = h.beta1.scalar_like(1.0);
    let m_new = h.beta1 * m + (&one - h.beta1) * g;
    let v_new = h.beta2 * v + (&one - h.beta2) * g * g;
    // The bias corrections fold into scalars (computed once, not per
    // element), as PyTorch arranges it: sqrt(v_hat) = sqrt(v) / sqrt(bc2)
    // and m_hat * lr = m * (lr / bc1). Per element that leaves one
    // division and one square root, where dividing m and v by their
    // corrections first took three divisions (the slowest vector op; the
    // update is a third of the MLP step's elementwise time).
    let bc1 = &one - h.beta1.pow(h.step);
    let inv_sqrt_bc2 = (&one - h.beta2.pow(h.step)).sqrt().recip();
    let denom = v_new.sqrt() * &inv_sqrt_bc2 + h.eps;
    let step_size = h.lr / &bc1;
    let keep = &one - h.lr * h.weight_decay;
    (p * &keep - (&m_new / &denom) * &step_size, m_new, v_new)
}

/// One SGD step with optional momentum (`buf` is the velocity) and
/// Nesterov: returns (param, buf).
pub fn sgd(
    p: &Tensor,
    g: &Tensor,
    buf: &Tensor,
    lr: &Tensor,
    momentum: &Tensor,
    nesterov: bool,
) -> (Tensor, Tensor) {
    let buf_new = momentum * buf + g;
    let step = if nesterov {
        g + momentum * &buf_new
    } else {
        buf_new.clone()
    };
    (p - lr * step, buf_new)
}

/// Scale `grads` so their global L2 norm is at most `max_norm` (unchanged
/// when already below). Returns the scaled gradients and the norm.
pub fn clip_by_global_norm(grads: &[Tensor], max_norm: &Tensor) -> (Vec<Tensor>, Tensor) {
    let sq = grads
        .iter()
        .map(|g| (g * g).sum_all())
        .reduce(|a, b| a + b)
        .unwrap_or_else(|| max_norm.scalar_like(0.0));
    let norm = sq.sqrt();
    let scale = (max_norm / (&norm + 1e-12)).minimum(&max_norm.scalar_like(1.0));
    (grads.iter().map(|g| g * &scale).collect(), norm)
}
