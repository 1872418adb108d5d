//! Lux-style layers: a layer is a *description*; `init` writes its initial
//! parameters into a named tree (`"0.weight"`, `"encoder.1.bias"`), `apply`
//! reads traced parameters from the same paths. `Chain` composes layers.

use super::conv::{conv2d, max_pool2d};
use super::init::InitRng;
use super::ops::{gelu, mean, relu, var};
use crate::error::GraphError;
use crate::exec::Array;
use crate::trace::Tensor;
use std::collections::BTreeMap;

/// A params (or state) tree: path -> leaf, ordered by path.
pub type Params<T> = BTreeMap<String, T>;

/// A layer: initialises parameters, applies to traced inputs.
pub trait Layer: Send + Sync {
    /// Write initial parameters under `prefix`.
    fn init(&self, rng: &mut InitRng, prefix: &str, params: &mut Params<Array>);
    /// Apply to `x`, reading parameters under `prefix`.
    fn apply(&self, params: &Params<Tensor>, prefix: &str, x: &Tensor) -> Tensor;
}

fn path(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

fn param(params: &Params<Tensor>, x: &Tensor, prefix: &str, name: &str) -> Tensor {
    let p = path(prefix, name);
    match params.get(&p) {
        Some(t) => t.clone(),
        None => {
            x.tracer().fail(GraphError::Unknown {
                kind: "parameter",
                name: p,
                known: params.keys().cloned().collect::<Vec<_>>().join(", "),
            });
            x.clone()
        }
    }
}

fn array(shape: &[usize], data: Vec<f32>) -> Array {
    Array::new(shape, data).expect("initialiser sizes match their shapes")
}

/// Elementwise activations usable as layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// max(x, 0)
    Relu,
    /// tanh
    Tanh,
    /// GELU (tanh approximation)
    Gelu,
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
            Activation::Sigmoid => x.sigmoid(),
        }
    }
}

impl Layer for Activation {
    fn init(&self, _: &mut InitRng, _: &str, _: &mut Params<Array>) {}
    fn apply(&self, _: &Params<Tensor>, _: &str, x: &Tensor) -> Tensor {
        self.call(x)
    }
}

/// `y = act(x @ weight + bias)`, weight `[in, out]` (Glorot uniform), bias zeros.
#[derive(Clone, Debug)]
pub struct Dense {
    /// Input features.
    pub input: usize,
    /// Output features.
    pub output: usize,
    /// Optional activation.
    pub activation: Option<Activation>,
}

impl Dense {
    /// A dense layer with no activation.
    pub fn new(input: usize, output: usize) -> Dense {
        Dense {
            input,
            output,
            activation: None,
        }
    }

    /// The same layer followed by `activation`.
    pub fn with(mut self, activation: Activation) -> Dense {
        self.activation = Some(activation);
        self
    }
}

impl Layer for Dense {
    fn init(&self, rng: &mut InitRng, prefix: &str, params: &mut Params<Array>) {
        let limit = (6.0 / (self.input + self.output) as f64).sqrt();
        let w = rng.uniform_vec(self.input * self.output, limit);
        params.insert(path(prefix, "weight"), array(&[self.input, self.output], w));
        params.insert(
            path(prefix, "bias"),
            array(&[self.output], vec![0.0; self.output]),
        );
    }

    fn apply(&self, params: &Params<Tensor>, prefix: &str, x: &Tensor) -> Tensor {
        let w = param(params, x, prefix, "weight");
        let b = param(params, x, prefix, "bias");
        let y = x.matmul(&w) + b.reshape(&[1, self.output]);
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
    fn init(&self, rng: &mut InitRng, prefix: &str, params: &mut Params<Array>) {
        let fan_in = self.input * self.kernel * self.kernel;
        let limit = (6.0 / fan_in as f64).sqrt();
        let shape = [self.output, self.input, self.kernel, self.kernel];
        params.insert(
            path(prefix, "weight"),
            array(&shape, rng.uniform_vec(shape.iter().product(), limit)),
        );
        params.insert(
            path(prefix, "bias"),
            array(&[self.output], vec![0.0; self.output]),
        );
    }

    fn apply(&self, params: &Params<Tensor>, prefix: &str, x: &Tensor) -> Tensor {
        let w = param(params, x, prefix, "weight");
        let b = param(params, x, prefix, "bias");
        conv2d(x, &w, Some(&b), self.stride, self.padding)
    }
}

/// Max pooling with a square window (stride = window).
#[derive(Clone, Debug)]
pub struct MaxPool2d(pub usize);

impl Layer for MaxPool2d {
    fn init(&self, _: &mut InitRng, _: &str, _: &mut Params<Array>) {}
    fn apply(&self, _: &Params<Tensor>, _: &str, x: &Tensor) -> Tensor {
        max_pool2d(x, self.0, self.0)
    }
}

/// Flatten every axis after the first.
#[derive(Clone, Debug)]
pub struct Flatten;

impl Layer for Flatten {
    fn init(&self, _: &mut InitRng, _: &str, _: &mut Params<Array>) {}
    fn apply(&self, _: &Params<Tensor>, _: &str, x: &Tensor) -> Tensor {
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
    fn init(&self, _: &mut InitRng, prefix: &str, params: &mut Params<Array>) {
        params.insert(
            path(prefix, "scale"),
            array(&[self.dim], vec![1.0; self.dim]),
        );
        params.insert(
            path(prefix, "shift"),
            array(&[self.dim], vec![0.0; self.dim]),
        );
    }

    fn apply(&self, params: &Params<Tensor>, prefix: &str, x: &Tensor) -> Tensor {
        let axis = x.rank() - 1;
        let mut kd = x.shape().to_vec();
        kd[axis] = 1;
        let mut pshape = vec![1; x.rank()];
        pshape[axis] = self.dim;
        let mu = mean(x, &[axis]).reshape(&kd);
        let sd = (var(x, &[axis]).reshape(&kd) + self.eps).sqrt();
        let scale = param(params, x, prefix, "scale").reshape(&pshape);
        let shift = param(params, x, prefix, "shift").reshape(&pshape);
        (x - mu) / sd * scale + shift
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
    fn init(&self, rng: &mut InitRng, prefix: &str, params: &mut Params<Array>) {
        let table = (0..self.vocab * self.dim)
            .map(|_| rng.normal() as f32 * 0.02)
            .collect();
        params.insert(path(prefix, "table"), array(&[self.vocab, self.dim], table));
    }

    fn apply(&self, params: &Params<Tensor>, prefix: &str, ids: &Tensor) -> Tensor {
        let table = param(params, ids, prefix, "table");
        let mut shape = ids.shape().to_vec();
        shape.push(self.dim);
        table.take(&ids.reshape(&[ids.numel()])).reshape(&shape)
    }
}

/// Layers applied in order; layer `i` keeps its parameters under `"i"`.
#[derive(Default)]
pub struct Chain(pub Vec<Box<dyn Layer>>);

impl Chain {
    /// An empty chain.
    pub fn new() -> Chain {
        Chain(Vec::new())
    }

    /// Append a layer.
    pub fn push(mut self, layer: impl Layer + 'static) -> Chain {
        self.0.push(Box::new(layer));
        self
    }

    /// Initial parameters from `seed`.
    pub fn init_params(&self, seed: u64) -> Params<Array> {
        let mut params = Params::new();
        self.init(&mut InitRng::new(seed), "", &mut params);
        params
    }
}

impl Layer for Chain {
    fn init(&self, rng: &mut InitRng, prefix: &str, params: &mut Params<Array>) {
        for (i, layer) in self.0.iter().enumerate() {
            layer.init(rng, &path(prefix, &i.to_string()), params);
        }
    }

    fn apply(&self, params: &Params<Tensor>, prefix: &str, x: &Tensor) -> Tensor {
        self.0.iter().enumerate().fold(x.clone(), |h, (i, layer)| {
            layer.apply(params, &path(prefix, &i.to_string()), &h)
        })
    }
}
