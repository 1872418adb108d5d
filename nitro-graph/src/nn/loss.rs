//! Losses: softmax cross-entropy on integer labels and mean squared error.

use super::ops::{log_softmax, mean_all, one_hot};
use crate::error::GraphError;
use crate::trace::Tensor;

/// Mean softmax cross-entropy of `logits [n, classes]` against integer
/// `labels [n]`, with optional label smoothing (0 = none): the target is
/// `(1 - s) * onehot + s / classes`.
pub fn softmax_cross_entropy(logits: &Tensor, labels: &Tensor, smoothing: f64) -> Tensor {
    let per_sample = softmax_cross_entropy_per_sample(logits, labels, smoothing);
    mean_all(&per_sample)
}

/// Cross-entropy per sample (`[n]`), for weighting or masking.
pub fn softmax_cross_entropy_per_sample(
    logits: &Tensor,
    labels: &Tensor,
    smoothing: f64,
) -> Tensor {
    if logits.rank() == 0 {
        logits.tracer().fail(GraphError::shape(
            "softmax_cross_entropy",
            "logits need a class axis",
            &[logits.shape(), labels.shape()],
            "pass logits of shape [n, classes]",
        ));
        return logits.clone();
    }
    let classes = logits.shape().last().copied().unwrap_or(1);
    let logp = log_softmax(logits, logits.rank().saturating_sub(1));
    let target = one_hot(labels, classes, logits.dtype());
    let target = if smoothing == 0.0 {
        target
    } else {
        target * (1.0 - smoothing) + smoothing / classes as f64
    };
    -(target * logp).sum(&[logits.rank() - 1])
}

/// Cross-entropy averaged with per-sample `weights [n]` (e.g. a padding
/// mask: padded samples carry 0 and contribute nothing, the mean is over
/// the real ones).
pub fn weighted_softmax_cross_entropy(
    logits: &Tensor,
    labels: &Tensor,
    weights: &Tensor,
) -> Tensor {
    let per = softmax_cross_entropy_per_sample(logits, labels, 0.0);
    (per * weights).sum_all() / weights.sum_all()
}

/// Mean squared error.
pub fn mse(prediction: &Tensor, target: &Tensor) -> Tensor {
    let d = prediction - target;
    mean_all(&(&d * &d))
}
