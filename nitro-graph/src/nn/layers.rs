//! Lux-style layers: a layer is a *description*; `init` writes its initial
//! parameters into a named tree (`"0.weight"`, `"encoder.1.bias"`),
//! `init_state` its initial state (BatchNorm's running statistics), and
//! `forward` reads traced parameters and state from the same paths, in a
//! [`Ctx`] that says whether it trains and holds the step's random key.
//! State goes in and comes out: `forward` replaces the entries it updates
//! in `st`, and the caller returns that tree as forward's new state.
//!
//! The basic layers live here. The contract every layer keeps (the
//! [`Layer`] trait, the [`Params`] tree and its path helpers) is in
//! `nn::layer`; `nn::norm` has BatchNorm, `nn::attention` attention and
//! transformer blocks, and `nn::combinators` `Chain`, `Residual` and
//! `Parallel` (re-exported here, where the models import them from).

pub use super::combinators::{Chain, Parallel, Residual};
use super::conv::{conv2d, max_pool2d};
use super::ctx::{Ctx, Mode};
use super::init::{constant_leaf, InitRng};
pub use super::layer::{init_parts, Layer, Params};
use super::layer::{param, path};
use super::ops::{dropout, gelu, gelu_erf, relu};
use crate::error::GraphError;
use crate::exec::Array;
use crate::trace::Tensor;

/// Elementwise activations usable as layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// max(x, 0)
    Relu,
    /// tanh
    Tanh,
    /// GELU, tanh approximation (GPT-2)
    Gelu,
    /// GELU, exact: `x Φ(x)` with the erf (PyTorch's `nn.GELU()` default)
    GeluErf,
    /// logistic sigmoid
    Sigmoid,
}

impl Activation {
    /// Apply to `x`.
    pub fn call(self, x: &Tensor) -> Tensor {
        match self {
            Activation::Relu => relu(x),
            Activation::Tanh => x.tanh(),
            Activation::Gelu => gelu(x),
            Activation::GeluErf => gelu_erf(x),
            Activation::Sigmoid => x.sigmoid(),
        }
    }
}

impl Layer for Activation {
    fn init(&self, _: &mut InitRng, _: &str, _: &mut Params<Array>) -> Result<(), GraphError> {
        Ok(())
    }
    fn forward(
        &self,
        _: &Ctx,
        _: &Params<Tensor>,
        _: &mut Params<Tensor>,
        _: &str,
        x: &Tensor,
    ) -> Tensor {
        self.call(x)
    }
}

/// How a [`Dense`] weight `[in, out]` is drawn (biases start at zero).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightInit {
    /// Glorot (Xavier) uniform, bound `√(6 / (in + out))`.
    #[default]
    Glorot,
    /// Uniform with bound `1 / √in`: PyTorch's `nn.Linear` weight bound,
    /// what GPT references (`peers/gpt_step.py`) draw.
    FanIn,
}

impl WeightInit {
    /// The uniform bound for a `[input, output]` weight.
    pub fn bound(self, input: usize, output: usize) -> f64 {
        match self {
            WeightInit::Glorot => (6.0 / (input + output).max(1) as f64).sqrt(),
            WeightInit::FanIn => 1.0 / (input.max(1) as f64).sqrt(),
        }
    }
}

/// `y = act(x @ weight + bias)`, weight `[in, out]` (uniform, [`WeightInit`],
/// Glorot by default), bias zeros.
#[derive(Clone, Debug)]
pub struct Dense {
    /// Input features.
    pub input: usize,
    /// Output features.
    pub output: usize,
    /// Optional activation.
    pub activation: Option<Activation>,
    /// Whether it adds a bias (default true).
    pub bias: bool,
    /// How the weight is drawn.
    pub init: WeightInit,
}

impl Dense {
    /// A dense layer with no activation.
    pub fn new(input: usize, output: usize) -> Dense {
        Dense {
            input,
            output,
            activation: None,
            bias: true,
            init: WeightInit::Glorot,
        }
    }

    /// The same layer without a bias (`y = act(x @ weight)`).
    pub fn without_bias(mut self) -> Dense {
        self.bias = false;
        self
    }

    /// The same layer followed by `activation`.
    pub fn with(mut self, activation: Activation) -> Dense {
        self.activation = Some(activation);
        self
    }

    /// The same layer, its weight drawn by `init`.
    pub fn with_init(mut self, init: WeightInit) -> Dense {
        self.init = init;
        self
    }
}

impl Layer for Dense {
    fn init(
        &self,
        rng: &mut InitRng,
        prefix: &str,
        params: &mut Params<Array>,
    ) -> Result<(), GraphError> {
        let limit = self.init.bound(self.input, self.output);
        let w = path(prefix, "weight");
        let leaf = rng.uniform_leaf(&w, &[self.input, self.output], limit)?;
        params.insert(w, leaf);
        if self.bias {
            let b = path(prefix, "bias");
            params.insert(b.clone(), constant_leaf(&b, &[self.output], 0.0)?);
        }
        Ok(())
    }

    fn forward(
        &self,
        _: &Ctx,
        params: &Params<Tensor>,
        _: &mut Params<Tensor>,
        prefix: &str,
        x: &Tensor,
    ) -> Tensor {
        // Every axis but the last is a batch axis: `[.., in] -> [.., out]`.
        let lead = &x.shape()[..x.rank().saturating_sub(1)];
        let rows: usize = lead.iter().product();
        let flat = if x.rank() == 2 {
            x.clone()
        } else {
            x.reshape(&[rows, self.input])
        };
        let w = param(params, x, prefix, "weight");
        let mut y = flat.matmul(&w);
        if self.bias {
            y = y + param(params, x, prefix, "bias").reshape(&[1, self.output]);
        }
        if x.rank() != 2 {
            let mut shape = lead.to_vec();
            shape.push(self.output);
            y = y.reshape(&shape);
        }
        match self.activation {
            Some(a) => a.call(&y),
            None => y,
        }
    }
}

/// 2-D convolution layer over NCHW (weight `[out, in, k, k]`, He uniform).
#[derive(Clone, Debug)]
pub struct Conv2d {
    /// Input channels.
    pub input: usize,
    /// Output channels.
    pub output: usize,
    /// Kernel size.
    pub kernel: usize,
    /// Stride.
    pub stride: usize,
    /// Zero padding.
    pub padding: usize,
}

impl Layer for Conv2d {
    fn init(
        &self,
        rng: &mut InitRng,
        prefix: &str,
        params: &mut Params<Array>,
    ) -> Result<(), GraphError> {
        let fan_in = self.input * self.kernel * self.kernel;
        let limit = (6.0 / fan_in as f64).sqrt();
        let shape = [self.output, self.input, self.kernel, self.kernel];
        let (w, b) = (path(prefix, "weight"), path(prefix, "bias"));
        params.insert(w.clone(), rng.uniform_leaf(&w, &shape, limit)?);
        params.insert(b.clone(), constant_leaf(&b, &[self.output], 0.0)?);
        Ok(())
    }

    fn forward(
        &self,
        _: &Ctx,
        params: &Params<Tensor>,
        _: &mut Params<Tensor>,
        prefix: &str,
        x: &Tensor,
    ) -> Tensor {
        let w = param(params, x, prefix, "weight");
        let b = param(params, x, prefix, "bias");
        conv2d(x, &w, Some(&b), self.stride, self.padding)
    }
}

/// Max pooling with a square window (stride = window).
#[derive(Clone, Debug)]
pub struct MaxPool2d(pub usize);

impl Layer for MaxPool2d {
    fn init(&self, _: &mut InitRng, _: &str, _: &mut Params<Array>) -> Result<(), GraphError> {
        Ok(())
    }
    fn forward(
        &self,
        _: &Ctx,
        _: &Params<Tensor>,
        _: &mut Params<Tensor>,
        _: &str,
        x: &Tensor,
    ) -> Tensor {
        max_pool2d(x, self.0, self.0)
    }
}

/// Flatten every axis after the first.
#[derive(Clone, Debug)]
pub struct Flatten;

impl Layer for Flatten {
    fn init(&self, _: &mut InitRng, _: &str, _: &mut Params<Array>) -> Result<(), GraphError> {
        Ok(())
    }
    fn forward(
        &self,
        _: &Ctx,
        _: &Params<Tensor>,
        _: &mut Params<Tensor>,
        _: &str,
        x: &Tensor,
    ) -> Tensor {
        let n = x.shape().first().copied().unwrap_or(1);
        x.reshape(&[n, x.numel() / n.max(1)])
    }
}

/// Layer normalisation over the last axis, with learned scale and shift.
#[derive(Clone, Debug)]
pub struct LayerNorm {
    /// Size of the last axis.
    pub dim: usize,
    /// Variance guard.
    pub eps: f64,
}

impl Layer for LayerNorm {
    fn init(
        &self,
        _: &mut InitRng,
        prefix: &str,
        params: &mut Params<Array>,
    ) -> Result<(), GraphError> {
        let (scale, shift) = (path(prefix, "scale"), path(prefix, "shift"));
        params.insert(scale.clone(), constant_leaf(&scale, &[self.dim], 1.0)?);
        params.insert(shift.clone(), constant_leaf(&shift, &[self.dim], 0.0)?);
        Ok(())
    }

    fn forward(
        &self,
        _: &Ctx,
        params: &Params<Tensor>,
        _: &mut Params<Tensor>,
        prefix: &str,
        x: &Tensor,
    ) -> Tensor {
        // One primitive: each row read once (see `Op::LayerNorm`).
        let scale = param(params, x, prefix, "scale");
        let shift = param(params, x, prefix, "shift");
        x.layer_norm(&scale, &shift, self.eps)
    }
}

/// Embedding lookup: integer ids `[..]` to rows of a `[vocab, dim]` table.
#[derive(Clone, Debug)]
pub struct Embedding {
    /// Rows of the table.
    pub vocab: usize,
    /// Width of a row.
    pub dim: usize,
}

impl Layer for Embedding {
    fn init(
        &self,
        rng: &mut InitRng,
        prefix: &str,
        params: &mut Params<Array>,
    ) -> Result<(), GraphError> {
        let t = path(prefix, "table");
        params.insert(
            t.clone(),
            rng.normal_leaf(&t, &[self.vocab, self.dim], 0.02)?,
        );
        Ok(())
    }

    fn forward(
        &self,
        _: &Ctx,
        params: &Params<Tensor>,
        _: &mut Params<Tensor>,
        prefix: &str,
        ids: &Tensor,
    ) -> Tensor {
        let table = param(params, ids, prefix, "table");
        let mut shape = ids.shape().to_vec();
        shape.push(self.dim);
        table.take(&ids.reshape(&[ids.numel()])).reshape(&shape)
    }
}

/// Inverted dropout: in training each element is zeroed with probability
/// `rate` and the survivors scaled by `1 / (1 - rate)`, from the step's key;
/// in evaluation the identity.
#[derive(Clone, Copy, Debug)]
pub struct Dropout {
    /// Probability of zeroing an element, in [0, 1).
    pub rate: f64,
}

impl Dropout {
    /// Dropout with probability `rate`.
    pub fn new(rate: f64) -> Dropout {
        Dropout { rate }
    }
}

impl Layer for Dropout {
    fn init(&self, _: &mut InitRng, _: &str, _: &mut Params<Array>) -> Result<(), GraphError> {
        Ok(())
    }

    fn forward(
        &self,
        cx: &Ctx,
        _: &Params<Tensor>,
        _: &mut Params<Tensor>,
        prefix: &str,
        x: &Tensor,
    ) -> Tensor {
        let name = format!("Dropout at `{prefix}`");
        if !(0.0..1.0).contains(&self.rate) {
            x.tracer().fail(GraphError::Layer {
                layer: name,
                reason: format!("rate {} is outside [0, 1)", self.rate),
                fix: "use a rate in [0, 1) (0 disables it)".into(),
            });
            return x.clone();
        }
        if self.rate == 0.0 {
            return x.clone();
        }
        match (cx.require_mode(&name, x), cx.key()) {
            (Mode::Train, Some(key)) => dropout(x, key.tensor(), self.rate, true),
            _ => x.clone(),
        }
    }
}
