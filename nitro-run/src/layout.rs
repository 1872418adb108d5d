//! What a handle's programs take: the [`Layout`] of its values (params,
//! state, Device fields, routed batch fields), the program [`Kind`]s, and
//! the typed [`Signature`] each kind is compiled with.
//!
//! Every program of a handle takes its argument groups in one order,
//!
//! ```text
//! predict     params  state                device                  batch0 (forward fields)
//! eval_step   params  state                device  hyper(pad_a pad_b)  batch0 (routed fields)
//! train_step  params  state  slot0 [slot1]  device  hyper(optimizer, max_norm, micro_w, pad_b, key)  batch0 .. batch{accum-1}
//! ```
//!
//! The train step's `key` is the step's random key (an i32 scalar,
//! `nitro_graph::nn::step_key(seed, step)`): an input, so a new key each
//! step compiles nothing. Eval and predict take none (deterministic).
//!
//! so the value store lends params, state, slots and Device values as one
//! prefix (see `values`) and a call appends only its per-call groups. The
//! train step donates params, state and slots to their updated outputs.

use nitro_graph::exec::signature::{Role, Signature};
use nitro_graph::nn::Mode;
use nitro_graph::{DType, TensorSpec};

use crate::optim::Optimizer;
use crate::report::RunValues;

/// Input specs shared by every program of one handle.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub params: Vec<(String, TensorSpec)>,
    pub state: Vec<(String, TensorSpec)>,
    pub device: Vec<(&'static str, TensorSpec)>,
    /// Routed batch fields and their per-sample spec (no batch axis).
    pub fields: Vec<(String, TensorSpec)>,
    pub forward_fields: Vec<String>,
    pub loss_fields: Vec<String>,
    /// The parameters' dtype: hyperparameters and loss weights take it.
    pub dtype: DType,
}

/// Which program, and its structural settings.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    Predict {
        width: usize,
    },
    Eval {
        width: usize,
    },
    Train {
        width: usize,
        accum: usize,
        optimizer: Optimizer,
        clip: bool,
        outputs: bool,
        /// `ShortBatch::PadWithMask`: the loss is traced with the
        /// padded-row correction (`pad_b`).
        masked: bool,
        /// Processes the gradients are all-reduced over (1: no all-reduce
        /// in the program).
        world: usize,
    },
}

impl Kind {
    /// The train step of a run with values `run`; `outputs` when host-side
    /// train metrics read forward's outputs.
    pub fn train_step(run: &RunValues, outputs: bool) -> Kind {
        Kind::Train {
            width: run.batch_size,
            accum: run.accum,
            optimizer: run.optimizer,
            clip: run.clip.is_some(),
            outputs,
            masked: run.short_batch == nitro_data::ShortBatch::PadWithMask,
            world: run.world_size,
        }
    }

    /// The program kind's name (the cache's kind, and in messages).
    pub fn name(&self) -> &'static str {
        match self {
            Kind::Predict { .. } => "predict",
            Kind::Eval { .. } => "eval_step",
            Kind::Train { .. } => "train_step",
        }
    }

    /// The compiled batch width.
    pub fn width(&self) -> usize {
        match self {
            Kind::Predict { width } | Kind::Eval { width } | Kind::Train { width, .. } => *width,
        }
    }

    /// The mode forward is traced in (part of every compile key).
    pub fn mode(&self) -> Mode {
        match self {
            Kind::Train { .. } => Mode::Train,
            Kind::Predict { .. } | Kind::Eval { .. } => Mode::Eval,
        }
    }

    /// Micro-batches per call.
    pub fn micro_batches(&self) -> usize {
        match self {
            Kind::Train { accum, .. } => *accum,
            _ => 1,
        }
    }

    /// Optimizer slots the program takes (0 unless it trains).
    pub fn slots(&self) -> usize {
        match self {
            Kind::Train { optimizer, .. } => optimizer.slots(),
            _ => 0,
        }
    }
}

/// The padded-eval coefficients (see `trace`).
pub(crate) const PAD_A: &str = "pad_a";
/// The padded-row correction weights.
pub(crate) const PAD_B: &str = "pad_b";
/// Per-micro-batch loss weights of the train step.
pub(crate) const MICRO_W: &str = "micro_w";
/// The clip norm.
pub(crate) const MAX_NORM: &str = "max_norm";
/// The train step's random key (the last hyperparameter input).
pub(crate) const KEY: &str = "key";

fn batch_with(spec: &TensorSpec, width: usize) -> TensorSpec {
    let mut shape = vec![width];
    shape.extend(&spec.shape);
    TensorSpec::new(spec.dtype, &shape)
}

/// The hyperparameter entries of `kind`, in argument order.
fn hyper(layout: &Layout, kind: &Kind) -> Vec<(String, TensorSpec)> {
    let scalar = TensorSpec::new(layout.dtype, &[]);
    let mut out: Vec<(String, TensorSpec)> = vec![];
    match kind {
        Kind::Predict { .. } => {}
        Kind::Eval { .. } => {
            out.push((PAD_A.into(), scalar.clone()));
            out.push((PAD_B.into(), scalar));
        }
        Kind::Train {
            accum,
            optimizer,
            clip,
            masked,
            ..
        } => {
            for name in optimizer.hyper_names() {
                out.push((name.to_string(), scalar.clone()));
            }
            if *clip {
                out.push((MAX_NORM.into(), scalar));
            }
            let per_micro = TensorSpec::new(layout.dtype, &[*accum]);
            out.push((MICRO_W.into(), per_micro.clone()));
            if *masked {
                out.push((PAD_B.into(), per_micro));
            }
            out.push((KEY.into(), TensorSpec::new(DType::I32, &[])));
        }
    }
    out
}

/// The typed signature of `kind` for a handle of `layout`.
pub(crate) fn signature(layout: &Layout, kind: &Kind) -> Signature {
    let mut sig = Signature::new()
        .with(Role::Params, layout.params.iter().cloned())
        .with(Role::State, layout.state.iter().cloned());
    for k in 0..kind.slots() {
        sig = sig.with(Role::Slot(k), layout.params.iter().cloned());
    }
    sig = sig
        .with(
            Role::Device,
            layout
                .device
                .iter()
                .map(|(n, s)| (n.to_string(), s.clone())),
        )
        .with(Role::Hyper, hyper(layout, kind));
    let width = kind.width();
    let fields: Vec<&(String, TensorSpec)> = match kind {
        Kind::Predict { .. } => layout
            .fields
            .iter()
            .filter(|(n, _)| layout.forward_fields.contains(n))
            .collect(),
        _ => layout.fields.iter().collect(),
    };
    for i in 0..kind.micro_batches() {
        sig = sig.with(
            Role::Batch(i),
            fields
                .iter()
                .map(|(n, s)| (n.clone(), batch_with(s, width))),
        );
    }
    sig
}

/// The roles a train step updates in place (donated to their new values).
pub(crate) fn donated_roles(kind: &Kind) -> Vec<Role> {
    match kind {
        Kind::Train { .. } => {
            let mut roles = vec![Role::Params, Role::State];
            roles.extend((0..kind.slots()).map(Role::Slot));
            roles
        }
        _ => vec![],
    }
}
