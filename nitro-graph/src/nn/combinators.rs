//! Layers made of layers, so a ResNet or a transformer is written without
//! wiring parameter paths by hand: [`Chain`] (in order), [`Residual`]
//! (`body(x) + shortcut(x)`) and [`Parallel`] (branches on one input,
//! summed or concatenated).
//!
//! Each child gets its own parameter path and its own sub-context
//! ([`Ctx::child`]: the same mode, an independent random sub-key), and the
//! state tree is threaded through the children in order.

use super::ctx::Ctx;
use super::init::InitRng;
use super::layer::{init_parts, path, Layer, Params};
use crate::error::GraphError;
use crate::exec::Array;
use crate::trace::Tensor;

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

    /// Initial parameters from `seed` (an error only when a leaf cannot be
    /// allocated).
    pub fn init_params(&self, seed: u64) -> Result<Params<Array>, GraphError> {
        Ok(init_parts(self, seed)?.0)
    }

    /// Initial state (running statistics; empty for stateless layers).
    pub fn initial_state(&self) -> Result<Params<Array>, GraphError> {
        let mut state = Params::new();
        Layer::init_state(self, "", &mut state)?;
        Ok(state)
    }
}

impl Layer for Chain {
    fn init(
        &self,
        rng: &mut InitRng,
        prefix: &str,
        params: &mut Params<Array>,
    ) -> Result<(), GraphError> {
        for (i, layer) in self.0.iter().enumerate() {
            layer.init(rng, &path(prefix, &i.to_string()), params)?;
        }
        Ok(())
    }

    fn init_state(&self, prefix: &str, state: &mut Params<Array>) -> Result<(), GraphError> {
        for (i, layer) in self.0.iter().enumerate() {
            layer.init_state(&path(prefix, &i.to_string()), state)?;
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
        self.0.iter().enumerate().fold(x.clone(), |h, (i, layer)| {
            let at = path(prefix, &i.to_string());
            layer.forward(&cx.child(i as u64), ps, st, &at, &h)
        })
    }
}

/// `body(x) + shortcut(x)`, the shortcut the identity unless given (a
/// projection when the body changes the shape). The body keeps its
/// parameters at the residual's own path, the shortcut under `shortcut`.
pub struct Residual {
    /// The residual branch.
    pub body: Box<dyn Layer>,
    /// The skip branch (`None`: the identity).
    pub shortcut: Option<Box<dyn Layer>>,
}

impl Residual {
    /// `x + body(x)`.
    pub fn new(body: impl Layer + 'static) -> Residual {
        Residual {
            body: Box::new(body),
            shortcut: None,
        }
    }

    /// `shortcut(x) + body(x)`.
    pub fn with_shortcut(mut self, shortcut: impl Layer + 'static) -> Residual {
        self.shortcut = Some(Box::new(shortcut));
        self
    }
}

impl Layer for Residual {
    fn init(
        &self,
        rng: &mut InitRng,
        prefix: &str,
        params: &mut Params<Array>,
    ) -> Result<(), GraphError> {
        self.body.init(rng, prefix, params)?;
        if let Some(s) = &self.shortcut {
            s.init(rng, &path(prefix, "shortcut"), params)?;
        }
        Ok(())
    }

    fn init_state(&self, prefix: &str, state: &mut Params<Array>) -> Result<(), GraphError> {
        self.body.init_state(prefix, state)?;
        if let Some(s) = &self.shortcut {
            s.init_state(&path(prefix, "shortcut"), state)?;
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
        let y = self.body.forward(&cx.child(0), ps, st, prefix, x);
        let skip = match &self.shortcut {
            Some(s) => s.forward(&cx.child(1), ps, st, &path(prefix, "shortcut"), x),
            None => x.clone(),
        };
        if y.shape() != skip.shape() {
            x.tracer().fail(GraphError::Layer {
                layer: format!("Residual at `{prefix}`"),
                reason: format!(
                    "the body returns shape {:?} and the shortcut {:?}",
                    y.shape(),
                    skip.shape()
                ),
                fix: "give it a shortcut that maps the input to the body's shape (`with_shortcut`)"
                    .into(),
            });
            return y;
        }
        y + skip
    }
}

/// How [`Parallel`] joins its branches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combine {
    /// Elementwise sum (equal shapes).
    Sum,
    /// Concatenation along an axis.
    Concat(usize),
}

/// Branches applied to the same input, joined by [`Combine`]; branch `i`
/// keeps its parameters under `"i"`.
pub struct Parallel {
    /// The branches.
    pub branches: Vec<Box<dyn Layer>>,
    /// How their results are joined.
    pub combine: Combine,
}

impl Parallel {
    /// No branches yet, joined by `combine`.
    pub fn new(combine: Combine) -> Parallel {
        Parallel {
            branches: Vec::new(),
            combine,
        }
    }

    /// Add a branch.
    pub fn push(mut self, layer: impl Layer + 'static) -> Parallel {
        self.branches.push(Box::new(layer));
        self
    }
}

impl Layer for Parallel {
    fn init(
        &self,
        rng: &mut InitRng,
        prefix: &str,
        params: &mut Params<Array>,
    ) -> Result<(), GraphError> {
        for (i, layer) in self.branches.iter().enumerate() {
            layer.init(rng, &path(prefix, &i.to_string()), params)?;
        }
        Ok(())
    }

    fn init_state(&self, prefix: &str, state: &mut Params<Array>) -> Result<(), GraphError> {
        for (i, layer) in self.branches.iter().enumerate() {
            layer.init_state(&path(prefix, &i.to_string()), state)?;
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
        let outs: Vec<Tensor> = self
            .branches
            .iter()
            .enumerate()
            .map(|(i, layer)| {
                let at = path(prefix, &i.to_string());
                layer.forward(&cx.child(i as u64), ps, st, &at, x)
            })
            .collect();
        let Some(first) = outs.first().cloned() else {
            x.tracer().fail(GraphError::Layer {
                layer: format!("Parallel at `{prefix}`"),
                reason: "it has no branches".into(),
                fix: "add branches with `push`".into(),
            });
            return x.clone();
        };
        match self.combine {
            Combine::Sum => outs[1..].iter().fold(first, |acc, y| acc + y),
            Combine::Concat(axis) => Tensor::concat(&outs, axis).unwrap_or_else(|e| {
                x.tracer().fail(e);
                first
            }),
        }
    }
}
