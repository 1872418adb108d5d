//! Tracing a handle's programs from the hooks: forward (and loss) on
//! traced micro-batches with the seed's checks, and the typed names of what
//! each program returns.
//!
//! **Exact loss on a padded batch.** A short batch is padded to the compiled
//! width by repeating its last real row, so rows `r..W` are copies of row
//! `r-1`, and row `W-1` always is. For a loss of the usual form (a mean over
//! samples of per-sample terms, plus any batch-independent term `c`),
//! with `L_A` the loss of the padded batch and `L_B` the loss of a batch made
//! of `W` copies of row `W-1`:
//!
//! ```text
//! W·L_A = S + (W-r)·f_last + W·c      L_B = f_last + c
//! mean over the r real rows = (W/r)·L_A − ((W−r)/r)·L_B = S/r + c
//! ```
//!
//! so the eval step and a `PadWithMask` train step trace the loss twice
//! (`L_B` from static slices of the outputs and targets, no second forward)
//! and weight them with coefficients fed as inputs (`pad_a`, `pad_b`; for a
//! full batch `1` and `0`). One program serves full and short batches,
//! padded rows carry weight 0 in the loss and its gradients. A loss that
//! couples samples (batch statistics, in-batch negatives) is not of that
//! form and cannot be padded exactly; nor can a forward that mixes rows
//! (batch norm in training mode): use `ShortBatch::Drop` for those. The
//! train step tells forward so (`Ctx::padded_rows`), and nitro's BatchNorm
//! refuses it by name; setup traces that step to raise it early.
//!
//! **Mode and key.** forward receives a [`Ctx`]: `Ctx::eval()` for predict
//! and eval (deterministic), `Ctx::train(key)` for the train step, where
//! micro-batch `i` gets the sub-key `i` of the step's key input.

use std::cell::RefCell;
use std::collections::BTreeMap;

use nitro_graph::exec::signature::{Bound, Role, Signature};
use nitro_graph::nn::layers::Params;
use nitro_graph::nn::Ctx;
use nitro_graph::{GraphError, Tensor, Tracer};
use nitro_markers::{BatchFields, Tree};

use crate::error::{Result, RunError};
use crate::experiment::{Experiment, Tensors};
use crate::layout::Layout;

/// What one output of a program is. Programs are traced with these, the
/// flat output names are derived from them, and callers find outputs by
/// them (never by parsing a name).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Returned {
    /// The (weighted) loss.
    Loss,
    /// A leaf of forward's outputs, by path; `micro` is the micro-batch of
    /// a train step (`None` for predict and eval).
    Leaf { micro: Option<usize>, path: String },
    /// The updated value of an input (donated back into it).
    Update(Role, String),
    /// The gradient of a parameter (the step API's `withgradient`).
    Grad(String),
    /// An auxiliary value of the step API's loss.
    Aux(String),
}

impl Returned {
    /// The flat output name (unique per program, readable in listings).
    pub fn name(&self) -> String {
        match self {
            Returned::Loss => "loss".into(),
            Returned::Leaf { micro: None, path } => format!("out/{path}"),
            Returned::Leaf {
                micro: Some(i),
                path,
            } => format!("out{i}/{path}"),
            Returned::Update(role, n) => format!("new.{role}/{n}"),
            Returned::Grad(n) => format!("grad/{n}"),
            Returned::Aux(p) => format!("aux/{p}"),
        }
    }
}

/// A traced program body: typed outputs in return order.
pub(crate) type Outputs = Vec<(Returned, Tensor)>;

/// Leaves of forward's outputs, named by path (a bare tensor is `output`).
pub(crate) fn output_leaves<O: Tree<Tensors>>(outputs: &O) -> Vec<(String, Tensor)> {
    Tree::<Tensors>::leaves(outputs)
        .into_iter()
        .map(|(p, t)| {
            let name = if p.is_empty() {
                "output".to_string()
            } else {
                p
            };
            (name, t.clone())
        })
        .collect()
}

/// forward (and the losses) of one micro-batch.
pub(crate) struct Traced {
    pub outputs: Vec<(String, Tensor)>,
    pub state: Params<Tensor>,
    /// The loss of the batch as given (`L_A`).
    pub loss: Option<Tensor>,
    /// The loss of `width` copies of the last row (`L_B`, see the module doc).
    pub loss_last_row: Option<Tensor>,
}

/// Which losses [`apply`] traces.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum LossTrace {
    None,
    Plain,
    WithLastRow,
}

/// `width` copies of row `width - 1` of `t`.
fn last_row(t: &Tensor, width: usize) -> Tensor {
    t.narrow(0, width - 1, width).broadcast_to(t.shape())
}

fn hook_batch(batch: &BTreeMap<String, Tensor>, fields: &[String]) -> BTreeMap<String, Tensor> {
    fields
        .iter()
        .filter_map(|f| Some((f.clone(), batch.get(f)?.clone())))
        .collect()
}

fn scalar_loss(loss: Tensor) -> Result<Tensor> {
    if loss.shape().is_empty() {
        Ok(loss)
    } else {
        Err(RunError::Setting {
            setting: "loss",
            reason: format!(
                "the loss hook returned shape {:?}; it must return a scalar (reduce with mean or sum)",
                loss.shape()
            ),
        })
    }
}

/// The traced hook inputs of one call.
pub(crate) struct HookArgs<'a, E: Experiment> {
    pub view: &'a E::View<Tensor>,
    pub model: &'a E::Model,
    pub layout: &'a Layout,
    pub width: usize,
}

/// forward (and loss) on one traced micro-batch, with the checks the seed
/// asks for: outputs keep the batch axis, state keeps its keys, loss is scalar.
pub(crate) fn apply<E: Experiment>(
    args: &HookArgs<'_, E>,
    cx: &Ctx,
    ps: &Params<Tensor>,
    st: &Params<Tensor>,
    batch: &BTreeMap<String, Tensor>,
    losses: LossTrace,
) -> Result<Traced> {
    let (layout, width) = (args.layout, args.width);
    let missing = |e: nitro_markers::MissingField| RunError::BatchField {
        field: e.field.clone(),
        reason: e.to_string(),
    };
    let inputs =
        E::Inputs::from_batch(&mut hook_batch(batch, &layout.forward_fields)).map_err(missing)?;
    let (outs, st_new) = E::forward(args.view, args.model, cx, ps, st, inputs);
    let outputs = output_leaves(&outs);
    for (leaf, t) in &outputs {
        if t.shape().first() != Some(&width) {
            return Err(RunError::OutputWithoutBatch {
                leaf: leaf.clone(),
                shape: t.shape().to_vec(),
                width,
            });
        }
    }
    if st_new.keys().ne(st.keys()) {
        return Err(RunError::StateMismatch {
            got: st_new.keys().cloned().collect(),
            expected: st.keys().cloned().collect(),
        });
    }
    let mut traced = Traced {
        outputs,
        state: st_new,
        loss: None,
        loss_last_row: None,
    };
    if losses == LossTrace::None {
        return Ok(traced);
    }
    let mut targets = hook_batch(batch, &layout.loss_fields);
    let mut last_targets: BTreeMap<String, Tensor> = targets
        .iter()
        .map(|(k, t)| (k.clone(), last_row(t, width)))
        .collect();
    let loss = E::loss(
        args.view,
        &outs,
        E::Targets::from_batch(&mut targets).map_err(missing)?,
    );
    traced.loss = Some(scalar_loss(loss)?);
    if losses == LossTrace::WithLastRow {
        let rows: Vec<Tensor> = traced
            .outputs
            .iter()
            .map(|(_, t)| last_row(t, width))
            .collect();
        let last_outs =
            Tree::<Tensors>::with_leaves(&outs, rows).map_err(|e| RunError::Setting {
                setting: "forward",
                reason: format!("its outputs could not be rebuilt for the padded-batch loss: {e}"),
            })?;
        let loss = E::loss(
            args.view,
            &last_outs,
            E::Targets::from_batch(&mut last_targets).map_err(missing)?,
        );
        traced.loss_last_row = Some(scalar_loss(loss)?);
    }
    Ok(traced)
}

/// A graph error inside a trace (an unknown signature entry).
pub(crate) fn graph_error(program: &'static str) -> impl Fn(GraphError) -> RunError {
    move |source| RunError::Compile {
        program,
        source: Box::new(source),
    }
}

/// Micro-batch `i`'s fields by name.
pub(crate) fn micro_batch(bound: &Bound<'_, Tensor>, i: usize) -> BTreeMap<String, Tensor> {
    bound.tree(Role::Batch(i))
}

/// Traces `body` over `sig`: the graph and the typed outputs in graph
/// order. A nitro-run error raised inside the trace (an output without a
/// batch axis, a missing field) wins over the graph's error.
pub(crate) fn trace_graph(
    program: &'static str,
    sig: &Signature,
    body: impl FnOnce(&Tracer, &Bound<'_, Tensor>) -> Result<Outputs>,
) -> Result<(nitro_graph::Graph, Vec<Returned>)> {
    let inputs = sig.inputs();
    let refs: Vec<(&str, nitro_graph::TensorSpec)> = inputs
        .iter()
        .map(|(n, s)| (n.as_str(), s.clone()))
        .collect();
    let failure: RefCell<Option<RunError>> = RefCell::new(None);
    let returned: RefCell<Vec<Returned>> = RefCell::new(vec![]);
    let graph = nitro_graph::trace(&refs, |tracer, tensors| {
        let run = || -> Result<Vec<(String, Tensor)>> {
            let bound = sig.bind(tensors).map_err(graph_error(program))?;
            let outs = body(tracer, &bound)?;
            let mut names = Vec::with_capacity(outs.len());
            let mut kinds = returned.borrow_mut();
            for (r, t) in outs {
                names.push((r.name(), t));
                kinds.push(r);
            }
            Ok(names)
        };
        run().map_err(|err| {
            *failure.borrow_mut() = Some(err);
            GraphError::Backend("the trace failed in nitro-run (see the run error)".into())
        })
    });
    match (graph, failure.into_inner()) {
        (_, Some(err)) => Err(err),
        (Ok(g), None) => Ok((g, returned.into_inner())),
        (Err(source), None) => Err(RunError::Compile {
            program,
            source: Box::new(source),
        }),
    }
}
