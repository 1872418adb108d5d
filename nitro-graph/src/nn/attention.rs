//! Attention and the transformer vocabulary: [`MultiHeadAttention`]
//! (fused QKV projection, causal and key-padding masks, a numerically
//! stable softmax), [`TransformerBlock`] (pre-LN, GELU MLP, residuals,
//! dropout), [`PositionalEmbedding`] (learned) and [`TiedProjection`] (an
//! output projection that reuses an embedding's table).
//!
//! Shapes are `[batch, time, dim]`; a key-padding mask is `[batch, time]`,
//! nonzero (or `true`) for real tokens. Masked scores are replaced by a
//! large negative number *before* the softmax subtracts its row maximum, so
//! a masked key gets weight exactly 0 and no gradient, and a row is never
//! all-infinite (a fully masked row attends uniformly rather than to NaN).

use super::ctx::Ctx;
use super::init::InitRng;
use super::layer::{param, path, Layer, Params};
use super::layers::{Activation, Dense, Dropout, LayerNorm, WeightInit};
use super::ops::softmax;
use crate::error::GraphError;
use crate::exec::Array;
use crate::trace::Tensor;
use nitro_device::DType;

/// The score a masked position gets: far below any real score, finite in
/// the dtype (so `max` and `exp` stay exact).
fn masked_score(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => -6.0e4,
        _ => -1.0e30,
    }
}

fn refuse(x: &Tensor, layer: String, reason: String, fix: &str) {
    x.tracer().fail(GraphError::Layer {
        layer,
        reason,
        fix: fix.into(),
    });
}

/// Multi-head self-attention over `[b, t, dim]`: one fused `qkv` projection
/// (`[dim, 3 dim]`, columns q | k | v, heads contiguous within each), scaled
/// dot-product attention per head, and the `out` projection.
#[derive(Clone, Debug)]
pub struct MultiHeadAttention {
    /// Model width (a multiple of `heads`).
    pub dim: usize,
    /// Attention heads.
    pub heads: usize,
    /// Position `i` attends only to positions `<= i`.
    pub causal: bool,
    /// Dropout on the attention weights (training only).
    pub dropout: f64,
    /// How the `qkv` and `out` weights are drawn.
    pub init: WeightInit,
}

impl MultiHeadAttention {
    /// Attention of width `dim` with `heads` heads, no mask, no dropout.
    pub fn new(dim: usize, heads: usize) -> MultiHeadAttention {
        MultiHeadAttention {
            dim,
            heads,
            causal: false,
            dropout: 0.0,
            init: WeightInit::Glorot,
        }
    }

    /// The same layer, causal.
    pub fn causal(mut self) -> MultiHeadAttention {
        self.causal = true;
        self
    }

    fn qkv(&self) -> Dense {
        Dense::new(self.dim, 3 * self.dim).with_init(self.init)
    }

    fn out(&self) -> Dense {
        Dense::new(self.dim, self.dim).with_init(self.init)
    }

    /// Attention over `x` with an optional key-padding mask `[b, t]`.
    pub fn attend(
        &self,
        cx: &Ctx,
        ps: &Params<Tensor>,
        prefix: &str,
        x: &Tensor,
        key_mask: Option<&Tensor>,
    ) -> Tensor {
        let name = format!("MultiHeadAttention at `{prefix}`");
        let (d, h) = (self.dim, self.heads);
        if x.rank() != 3 || x.shape()[2] != d || h == 0 || d % h != 0 {
            refuse(
                x,
                name,
                format!("input {:?} with dim {d} and {h} heads", x.shape()),
                "feed [batch, time, dim] with dim a multiple of heads",
            );
            return x.clone();
        }
        let (b, t, hd) = (x.shape()[0], x.shape()[1], d / h);
        if let Some(m) = key_mask {
            if m.shape() != [b, t] {
                refuse(
                    x,
                    name,
                    format!("key-padding mask {:?} for input {:?}", m.shape(), x.shape()),
                    "give the mask shape [batch, time], nonzero for real tokens",
                );
                return x.clone();
            }
        }
        let mut st = Params::new();
        let qkv = self.qkv().forward(cx, ps, &mut st, &path(prefix, "qkv"), x);
        // No key mask and no dropout on the weights: the attention
        // primitive, which reads the heads out of `qkv` in place and keeps
        // each head's scores in cache. Otherwise the composite below.
        if key_mask.is_none() && self.dropout == 0.0 {
            let y = qkv.attention(h, self.causal);
            return self
                .out()
                .forward(cx, ps, &mut st, &path(prefix, "out"), &y);
        }
        // [b, t, 3d] -> three [b, h, t, hd], flattened to [b h, t, hd].
        let head = |i: usize| {
            qkv.narrow(2, i * d, (i + 1) * d)
                .reshape(&[b, t, h, hd])
                .permute(&[0, 2, 1, 3])
                .reshape(&[b * h, t, hd])
        };
        let (q, k, v) = (head(0), head(1), head(2));
        let scores = q.matmul_t(&k, false, true) * (1.0 / (hd as f64).sqrt());
        let mut allowed: Option<Tensor> = None;
        if self.causal {
            let tr = x.tracer();
            let row = tr.iota(&[t, t], 0, DType::I32);
            let col = tr.iota(&[t, t], 1, DType::I32);
            allowed = Some(
                col.le(&row)
                    .reshape(&[1, t, t])
                    .broadcast_to(&[b * h, t, t]),
            );
        }
        if let Some(m) = key_mask {
            let real = if m.dtype() == DType::Bool {
                m.clone()
            } else {
                m.ne_t(&m.scalar_like(0.0))
            };
            let keys = real
                .reshape(&[b, 1, 1, t])
                .broadcast_to(&[b, h, t, t])
                .reshape(&[b * h, t, t]);
            allowed = Some(match allowed {
                Some(a) => a.select(&keys, &a),
                None => keys,
            });
        }
        let scores = match allowed {
            Some(a) => a.select(&scores, &scores.full_like(masked_score(scores.dtype()))),
            None => scores,
        };
        let weights = softmax(&scores, 2);
        let weights = Dropout::new(self.dropout).forward(
            &cx.child(0),
            ps,
            &mut st,
            &path(prefix, "attn_drop"),
            &weights,
        );
        let y = weights
            .matmul(&v)
            .reshape(&[b, h, t, hd])
            .permute(&[0, 2, 1, 3])
            .reshape(&[b, t, d]);
        self.out()
            .forward(cx, ps, &mut st, &path(prefix, "out"), &y)
    }
}

impl Layer for MultiHeadAttention {
    fn init(
        &self,
        rng: &mut InitRng,
        prefix: &str,
        params: &mut Params<Array>,
    ) -> Result<(), GraphError> {
        self.qkv().init(rng, &path(prefix, "qkv"), params)?;
        self.out().init(rng, &path(prefix, "out"), params)
    }

    fn forward(
        &self,
        cx: &Ctx,
        ps: &Params<Tensor>,
        _: &mut Params<Tensor>,
        prefix: &str,
        x: &Tensor,
    ) -> Tensor {
        self.attend(cx, ps, prefix, x, None)
    }
}

/// A pre-LN transformer block over `[b, t, dim]`:
///
/// ```text
/// x = x + dropout(attn(ln1(x)))
/// x = x + dropout(proj(act(fc(ln2(x)))))      fc: dim -> hidden, proj: hidden -> dim
/// ```
///
/// Parameters under `ln1`, `attn`, `ln2`, `fc`, `proj`.
#[derive(Clone, Debug)]
pub struct TransformerBlock {
    /// The attention (width, heads, causal, attention dropout).
    pub attn: MultiHeadAttention,
    /// MLP hidden width (4 dim in GPT).
    pub hidden: usize,
    /// The MLP activation (exact GELU by default).
    pub activation: Activation,
    /// Dropout on each residual branch (training only).
    pub dropout: f64,
    /// How the MLP's `fc` and `proj` weights are drawn (the attention's
    /// are `attn.init`; [`TransformerBlock::with_init`] sets both).
    pub init: WeightInit,
}

impl TransformerBlock {
    /// A block of width `dim`, `heads` heads, a `4 dim` exact-GELU MLP, no
    /// dropout, not causal.
    pub fn new(dim: usize, heads: usize) -> TransformerBlock {
        TransformerBlock {
            attn: MultiHeadAttention::new(dim, heads),
            hidden: 4 * dim,
            activation: Activation::GeluErf,
            dropout: 0.0,
            init: WeightInit::Glorot,
        }
    }

    /// The same block, causal (a decoder block).
    pub fn causal(mut self) -> TransformerBlock {
        self.attn.causal = true;
        self
    }

    /// The same block with every weight (attention and MLP) drawn by `init`.
    pub fn with_init(mut self, init: WeightInit) -> TransformerBlock {
        self.init = init;
        self.attn.init = init;
        self
    }

    /// The same block with residual-branch dropout `rate`.
    pub fn with_dropout(mut self, rate: f64) -> TransformerBlock {
        self.dropout = rate;
        self
    }

    fn norm(&self) -> LayerNorm {
        LayerNorm {
            dim: self.attn.dim,
            eps: 1e-5,
        }
    }

    /// The block over `x` with an optional key-padding mask `[b, t]`.
    pub fn attend(
        &self,
        cx: &Ctx,
        ps: &Params<Tensor>,
        prefix: &str,
        x: &Tensor,
        key_mask: Option<&Tensor>,
    ) -> Tensor {
        let mut st = Params::new();
        let at = |name: &str| path(prefix, name);
        let drop = Dropout::new(self.dropout);
        let ln1 = self.norm().forward(cx, ps, &mut st, &at("ln1"), x);
        let a = self
            .attn
            .attend(&cx.child(0), ps, &at("attn"), &ln1, key_mask);
        let x = x + drop.forward(&cx.child(1), ps, &mut st, &at("drop1"), &a);
        let ln2 = self.norm().forward(cx, ps, &mut st, &at("ln2"), &x);
        let fc = Dense::new(self.attn.dim, self.hidden).with(self.activation);
        let proj = Dense::new(self.hidden, self.attn.dim);
        let hid = fc.forward(cx, ps, &mut st, &at("fc"), &ln2);
        let m = proj.forward(cx, ps, &mut st, &at("proj"), &hid);
        &x + drop.forward(&cx.child(2), ps, &mut st, &at("drop2"), &m)
    }
}

impl Layer for TransformerBlock {
    fn init(
        &self,
        rng: &mut InitRng,
        prefix: &str,
        params: &mut Params<Array>,
    ) -> Result<(), GraphError> {
        let at = |name: &str| path(prefix, name);
        self.norm().init(rng, &at("ln1"), params)?;
        self.attn.init(rng, &at("attn"), params)?;
        self.norm().init(rng, &at("ln2"), params)?;
        Dense::new(self.attn.dim, self.hidden)
            .with_init(self.init)
            .init(rng, &at("fc"), params)?;
        Dense::new(self.hidden, self.attn.dim)
            .with_init(self.init)
            .init(rng, &at("proj"), params)
    }

    fn forward(
        &self,
        cx: &Ctx,
        ps: &Params<Tensor>,
        _: &mut Params<Tensor>,
        prefix: &str,
        x: &Tensor,
    ) -> Tensor {
        self.attend(cx, ps, prefix, x, None)
    }
}

/// A learned positional embedding: adds row `i` of a `[context, dim]`
/// table (normal, std 0.02) to position `i` of `[b, t, dim]`, `t <= context`.
#[derive(Clone, Debug)]
pub struct PositionalEmbedding {
    /// Longest sequence.
    pub context: usize,
    /// Width.
    pub dim: usize,
}

impl Layer for PositionalEmbedding {
    fn init(
        &self,
        rng: &mut InitRng,
        prefix: &str,
        params: &mut Params<Array>,
    ) -> Result<(), GraphError> {
        let t = path(prefix, "table");
        params.insert(
            t.clone(),
            rng.normal_leaf(&t, &[self.context, self.dim], 0.02)?,
        );
        Ok(())
    }

    fn forward(
        &self,
        _: &Ctx,
        ps: &Params<Tensor>,
        _: &mut Params<Tensor>,
        prefix: &str,
        x: &Tensor,
    ) -> Tensor {
        if x.rank() != 3 || x.shape()[1] > self.context || x.shape()[2] != self.dim {
            refuse(
                x,
                format!("PositionalEmbedding at `{prefix}`"),
                format!(
                    "input {:?} for a table of context {} and dim {}",
                    x.shape(),
                    self.context,
                    self.dim
                ),
                "feed [batch, time <= context, dim]",
            );
            return x.clone();
        }
        let t = x.shape()[1];
        let table = param(ps, x, prefix, "table");
        x + table.narrow(0, 0, t).reshape(&[1, t, self.dim])
    }
}

/// Weight tying: logits `h @ tableᵀ` from the `[vocab, dim]` table of the
/// [`super::layers::Embedding`] whose parameters live at `embedding` (its
/// full path, e.g. `"0"` or `"wte"`); no parameters of its own.
#[derive(Clone, Debug)]
pub struct TiedProjection {
    /// The embedding's parameter path.
    pub embedding: String,
    /// Rows of the table.
    pub vocab: usize,
    /// Width.
    pub dim: usize,
}

impl Layer for TiedProjection {
    fn init(&self, _: &mut InitRng, _: &str, _: &mut Params<Array>) -> Result<(), GraphError> {
        Ok(())
    }

    fn forward(
        &self,
        _: &Ctx,
        ps: &Params<Tensor>,
        _: &mut Params<Tensor>,
        _: &str,
        h: &Tensor,
    ) -> Tensor {
        let table = param(ps, h, &self.embedding, "table");
        if h.shape().last() != Some(&self.dim) {
            refuse(
                h,
                format!("TiedProjection of `{}`", self.embedding),
                format!("input {:?} for an embedding of dim {}", h.shape(), self.dim),
                "feed [.., dim]",
            );
            return h.clone();
        }
        let lead = &h.shape()[..h.rank() - 1];
        let rows: usize = lead.iter().product();
        let mut shape = lead.to_vec();
        shape.push(self.vocab);
        h.reshape(&[rows, self.dim])
            .matmul_t(&table, false, true)
            .reshape(&shape)
    }
}
