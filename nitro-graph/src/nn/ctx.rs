//! What traced model code knows about the program it is traced into: the
//! [`Mode`] (train or eval) and, when training, a random [`Key`].
//!
//! There is no ambient state: a [`Ctx`] is passed explicitly, from the
//! framework to `forward` and from a combinator to each child layer, so a
//! layer that draws random numbers or updates running statistics says so in
//! its signature and cannot be traced without one.
//!
//! **Keys.** A program that trains takes one traced `i32` scalar per step,
//! [`step_key`]`(seed, step)`: counter-based (a hash of the run seed and the
//! global step, no generator state), so a resumed run draws exactly the
//! keys of an uninterrupted one, and feeding a new key each step recompiles
//! nothing. Inside the program, [`Key::fold_in`] derives independent
//! sub-keys (a combinator gives child `i` the sub-key `i`), and every random
//! op additionally draws its own stream (the IR's per-op salt), so two
//! dropouts fed the same key still draw different masks. Evaluation and
//! prediction have no key at all: they are deterministic by construction.
//!
//! ```
//! use nitro_graph::nn::ctx::{Ctx, Key, Mode};
//! use nitro_graph::{DType, TensorSpec};
//! let graph = nitro_graph::trace(&[("key", TensorSpec::new(DType::I32, &[]))], |tr, t| {
//!     let cx = Ctx::train(Key::new(&t[0])?);
//!     assert_eq!(cx.mode(), Some(Mode::Train));
//!     let layer0 = cx.child(0);
//!     let noise = layer0.key().expect("training has a key").uniform(&[4], DType::F32);
//!     Ok(vec![("noise".into(), noise)])
//! })?;
//! assert_eq!(Ctx::eval().key().map(|_| ()), None);
//! # let _ = graph;
//! # Ok::<(), nitro_graph::GraphError>(())
//! ```

use crate::error::GraphError;
use crate::trace::Tensor;
use nitro_device::DType;

/// Whether a program trains (batch statistics, dropout active, state
/// updated) or evaluates (running statistics, dropout the identity).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// A train step.
    Train,
    /// Validation and prediction.
    Eval,
}

impl Mode {
    /// `"train"` or `"eval"` (a compile-key part, and in messages).
    pub fn name(self) -> &'static str {
        match self {
            Mode::Train => "train",
            Mode::Eval => "eval",
        }
    }
}

/// A traced random key: an `i32` scalar that seeds the counter-based
/// generator. Cheap to clone (a handle to a graph node).
#[derive(Clone)]
pub struct Key(Tensor);

/// The odd multiplier of [`Key::fold_in`] (the golden-ratio constant, as
/// an i32): distinct `(key, n)` pairs give distinct sub-keys except on a
/// 2^-32-rare wrap-around coincidence.
const FOLD: i32 = 0x9E37_79B9_u32 as i32;

impl Key {
    /// A key from a traced `i32` scalar (a program input); anything else is
    /// a dtype error naming the fix.
    pub fn new(t: &Tensor) -> Result<Key, GraphError> {
        if t.dtype() != DType::I32 || !t.shape().is_empty() {
            return Err(GraphError::dtype(
                "Key::new",
                format!(
                    "a key is an i32 scalar, got {:?} of shape {:?}",
                    t.dtype(),
                    t.shape()
                ),
                "feed `step_key(seed, step)` as an `i32` scalar input",
            ));
        }
        Ok(Key(t.clone()))
    }

    /// An independent sub-key for child `n` (wrapping `key * FOLD + n` in
    /// the graph; the generator hashes it, so nearby values give unrelated
    /// streams).
    pub fn fold_in(&self, n: u64) -> Key {
        let tr = self.0.tracer();
        let n = (n as u32) as i32;
        Key(&self.0 * &tr.scalar(FOLD as f64, DType::I32) + tr.scalar(n as f64, DType::I32))
    }

    /// Uniform numbers in [0, 1) of `shape` drawn from this key.
    pub fn uniform(&self, shape: &[usize], dtype: DType) -> Tensor {
        self.0.tracer().random_uniform(&self.0, shape, dtype)
    }

    /// The traced `i32` scalar itself (for [`super::ops::dropout`]).
    pub fn tensor(&self) -> &Tensor {
        &self.0
    }
}

/// The per-step key of a run: a hash of `seed` and the 0-based global
/// `step` (SplitMix64's finaliser, folded to 32 bits). Pure, so a resumed
/// run at step `s` feeds exactly the key an uninterrupted one did.
pub fn step_key(seed: u64, step: u64) -> i32 {
    let mut z = seed
        .wrapping_mul(0xD6E8_FEB8_6659_FD93)
        .wrapping_add(step.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    ((z >> 32) ^ z) as u32 as i32
}

#[derive(Clone)]
enum Phase {
    Train(Key),
    Eval,
    /// No mode: `Layer::apply` on a model of stateless layers.
    Unspecified,
}

/// The context a layer is traced in: its [`Mode`], the random key when
/// training, and whether the batch may contain padded rows.
#[derive(Clone)]
pub struct Ctx {
    phase: Phase,
    padded_rows: bool,
}

impl Ctx {
    /// Training with the step's `key`.
    pub fn train(key: Key) -> Ctx {
        Ctx {
            phase: Phase::Train(key),
            padded_rows: false,
        }
    }

    /// Evaluation (and prediction): no key, deterministic.
    pub fn eval() -> Ctx {
        Ctx {
            phase: Phase::Eval,
            padded_rows: false,
        }
    }

    /// No mode at all: what [`super::Layer::apply`] traces with. A layer
    /// whose result depends on the mode refuses it (a trace error naming
    /// the layer), rather than guessing train or eval.
    pub fn unspecified() -> Ctx {
        Ctx {
            phase: Phase::Unspecified,
            padded_rows: false,
        }
    }

    /// The same context, marked as tracing a batch whose trailing rows may
    /// be padding (`ShortBatch::PadWithMask`): a layer that mixes rows in
    /// training (batch statistics) refuses it, since the padded copies
    /// would enter its statistics.
    pub fn with_padded_rows(mut self, padded: bool) -> Ctx {
        self.padded_rows = padded;
        self
    }

    /// Whether trailing rows of the batch may be padding.
    pub fn padded_rows(&self) -> bool {
        self.padded_rows
    }

    /// The mode, `None` for [`Ctx::unspecified`].
    pub fn mode(&self) -> Option<Mode> {
        match self.phase {
            Phase::Train(_) => Some(Mode::Train),
            Phase::Eval => Some(Mode::Eval),
            Phase::Unspecified => None,
        }
    }

    /// Whether the program trains.
    pub fn is_training(&self) -> bool {
        matches!(self.phase, Phase::Train(_))
    }

    /// The random key: present exactly when training.
    pub fn key(&self) -> Option<&Key> {
        match &self.phase {
            Phase::Train(k) => Some(k),
            _ => None,
        }
    }

    /// The context of child `n` (a combinator's `n`-th layer): the same
    /// mode, the sub-key `n`.
    pub fn child(&self, n: u64) -> Ctx {
        Ctx {
            phase: match &self.phase {
                Phase::Train(k) => Phase::Train(k.fold_in(n)),
                other => other.clone(),
            },
            padded_rows: self.padded_rows,
        }
    }

    /// The mode for `layer`, which depends on it: [`Ctx::unspecified`]
    /// records a trace error naming the layer and the fix (and `Eval` is
    /// returned so tracing can continue to the error).
    pub fn require_mode(&self, layer: &str, x: &Tensor) -> Mode {
        self.mode().unwrap_or_else(|| {
            x.tracer().fail(GraphError::Layer {
                layer: layer.to_string(),
                reason: "it behaves differently in training and evaluation, and was traced without a mode (`Layer::apply`)".into(),
                fix: "call `forward(cx, ...)` with the context forward received (or `Ctx::train(key)` / `Ctx::eval()`)".into(),
            });
            Mode::Eval
        })
    }
}
