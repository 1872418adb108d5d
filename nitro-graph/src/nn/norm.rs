//! Batch normalisation with running statistics in the state tree
//! (PyTorch's `BatchNorm1d` / `BatchNorm2d` semantics).
//!
//! In training the batch is normalised by its own mean and biased variance
//! over every axis but the channel axis 1, and the running statistics are
//! updated as PyTorch does,
//!
//! ```text
//! running_mean <- (1 - momentum) running_mean + momentum mean
//! running_var  <- (1 - momentum) running_var  + momentum var * n / (n - 1)
//! ```
//!
//! (the *unbiased* variance, `n` values per channel), written into the
//! state tree forward returns. In evaluation the running statistics
//! normalise and nothing is updated. Training over a batch whose trailing
//! rows may be padding (`Ctx::padded_rows`) is refused: the copies would
//! enter the statistics and change every real row's output.

use super::ctx::{Ctx, Mode};
use super::init::{constant_leaf, InitRng};
use super::layer::{entry, param, path, Layer, Params};
use super::ops::mean;
use crate::error::GraphError;
use crate::exec::Array;
use crate::trace::Tensor;

/// Batch normalisation over channel axis 1: `[n, c]` or `[n, c, l]`
/// (`BatchNorm1d`), `[n, c, h, w]` (`BatchNorm2d`). Parameters `weight`
/// (ones) and `bias` (zeros); state `running_mean` (zeros) and
/// `running_var` (ones).
#[derive(Clone, Debug)]
pub struct BatchNorm {
    /// Channels (axis 1).
    pub features: usize,
    /// The input ranks it accepts (`[2, 3]` for 1d, `[4]` for 2d).
    pub ranks: &'static [usize],
    /// Weight of the newest batch in the running statistics (PyTorch: 0.1).
    pub momentum: f64,
    /// Variance guard (PyTorch: 1e-5).
    pub eps: f64,
}

impl BatchNorm {
    /// `BatchNorm1d(features)`: inputs `[n, c]` or `[n, c, l]`.
    pub fn d1(features: usize) -> BatchNorm {
        BatchNorm {
            features,
            ranks: &[2, 3],
            momentum: 0.1,
            eps: 1e-5,
        }
    }

    /// `BatchNorm2d(channels)`: inputs `[n, c, h, w]`.
    pub fn d2(channels: usize) -> BatchNorm {
        BatchNorm {
            ranks: &[4],
            ..BatchNorm::d1(channels)
        }
    }

    /// The same layer with another momentum.
    pub fn with_momentum(mut self, momentum: f64) -> BatchNorm {
        self.momentum = momentum;
        self
    }

    fn refuse(&self, x: &Tensor, prefix: &str, reason: String, fix: &str) -> Tensor {
        x.tracer().fail(GraphError::Layer {
            layer: format!("BatchNorm at `{prefix}`"),
            reason,
            fix: fix.into(),
        });
        x.clone()
    }
}

impl Layer for BatchNorm {
    fn init(
        &self,
        _: &mut InitRng,
        prefix: &str,
        params: &mut Params<Array>,
    ) -> Result<(), GraphError> {
        for (name, value) in [("weight", 1.0), ("bias", 0.0)] {
            let p = path(prefix, name);
            params.insert(p.clone(), constant_leaf(&p, &[self.features], value)?);
        }
        Ok(())
    }

    fn init_state(&self, prefix: &str, state: &mut Params<Array>) -> Result<(), GraphError> {
        for (name, value) in [("running_mean", 0.0), ("running_var", 1.0)] {
            let p = path(prefix, name);
            state.insert(p.clone(), constant_leaf(&p, &[self.features], value)?);
        }
        Ok(())
    }

    fn forward(
        &self,
        cx: &Ctx,
        ps: &Params<Tensor>,
        st: &mut Params<Tensor>,
        prefix: &str,
        x: &Tensor,
    ) -> Tensor {
        let name = format!("BatchNorm at `{prefix}`");
        if !self.ranks.contains(&x.rank()) || x.shape()[1] != self.features {
            return self.refuse(
                x,
                prefix,
                format!(
                    "input shape {:?}; it takes rank {:?} with {} channels on axis 1",
                    x.shape(),
                    self.ranks,
                    self.features
                ),
                "use BatchNorm::d1 for [n, c] / [n, c, l] and BatchNorm::d2 for [n, c, h, w], sized to the channels",
            );
        }
        let mode = cx.require_mode(&name, x);
        let mut pshape = vec![1; x.rank()];
        pshape[1] = self.features;
        let axes: Vec<usize> = (0..x.rank()).filter(|&a| a != 1).collect();
        let n: usize = axes.iter().map(|&a| x.shape()[a]).product();
        let (rm_path, rv_path) = (path(prefix, "running_mean"), path(prefix, "running_var"));
        let running_mean = entry(st, "state entry", x, prefix, "running_mean");
        let running_var = entry(st, "state entry", x, prefix, "running_var");
        let (mu, var) = match mode {
            Mode::Eval => (running_mean, running_var),
            Mode::Train => {
                if cx.padded_rows() {
                    return self.refuse(
                        x,
                        prefix,
                        "its batch statistics would count the padded rows of a short batch (ShortBatch::PadWithMask)".into(),
                        "use `ShortBatch::Drop` for a model with BatchNorm",
                    );
                }
                if n < 2 {
                    return self.refuse(
                        x,
                        prefix,
                        format!("training needs more than one value per channel, got {n}"),
                        "train with a batch of at least 2 samples",
                    );
                }
                let mu = mean(x, &axes);
                let d = x - mu.reshape(&pshape);
                let var = mean(&(&d * &d), &axes);
                let m = self.momentum;
                let unbiased = &var * (n as f64 / (n - 1) as f64);
                st.insert(rm_path, running_mean * (1.0 - m) + &mu * m);
                st.insert(rv_path, running_var * (1.0 - m) + unbiased * m);
                (mu, var)
            }
        };
        let weight = param(ps, x, prefix, "weight").reshape(&pshape);
        let bias = param(ps, x, prefix, "bias").reshape(&pshape);
        let inv = (var + self.eps).sqrt().recip().reshape(&pshape);
        (x - mu.reshape(&pshape)) * inv * weight + bias
    }
}
