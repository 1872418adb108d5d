//! The three compiled programs (train step, eval step, predict): how each is
//! traced from the hooks, what its inputs are, and what enters its key in
//! the process-wide cache.
//!
//! Input layout (names are the program's input names):
//!
//! ```text
//! predict     p.*  s.*  d.*                  b0.<forward fields>
//! eval_step   p.*  s.*  d.*  h.pad_a h.pad_b  b0.<routed fields>
//! train_step  p.*  s.*  o0.* [o1.*]  d.*  h.*  h.micro_w [h.pad_b]  b0.* .. b{accum-1}.*
//! ```
//!
//! `p` params, `s` state, `o` optimizer slots, `d` Device fields, `h`
//! hyperparameters (scalars), `b<i>` micro-batch `i`. The train step donates
//! `new.p.*`, `new.s.*` and `new.o*.*` into their inputs, so one call
//! updates everything in place and returns only the loss (and outputs, when
//! train metrics need them).
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
//! and weight them with coefficients fed as inputs (`h.pad_a`, `h.pad_b`;
//! for a full batch `1` and `0`). One program serves full and short
//! batches, padded rows carry weight 0 in the loss and its gradients. A
//! loss that couples samples (batch statistics, in-batch negatives) is not
//! of that form and cannot be padded exactly; nor can a forward that mixes
//! rows (batch norm in training mode) — use `ShortBatch::Drop` for those.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use nitro_cache::{CompileCache, KeyBuilder, Outcome};
use nitro_graph::nn::layers::Params;
use nitro_graph::nn::optim::{adam, clip_by_global_norm, sgd, AdamHyper};
use nitro_graph::{
    compile, CompileOptions, DType, Device, GraphError, Program, Tensor, TensorSpec, Tracer,
};
use nitro_markers::{BatchFields, Tree};

use crate::convert::signature;
use crate::error::{Result, RunError};
use crate::experiment::{Experiment, Tensors};
use crate::optim::Optimizer;

/// The process-wide compile cache every handle shares: a second handle on
/// the same experiment with the same GraphConst values compiles nothing.
/// CPU and CUDA programs share it; the device is a key part, so they never
/// collide and a miss between them is explained as a device change.
pub(crate) static PROGRAMS: LazyLock<CompileCache<Executable>> = LazyLock::new(CompileCache::new);

/// A compiled program for one device.
#[derive(Clone)]
pub(crate) enum Executable {
    /// Runs on the host.
    Cpu(Arc<Program>),
    /// Runs on a GPU (it also holds the CPU compile of the same graph).
    #[cfg(feature = "cuda")]
    Cuda(Arc<nitro_graph::backend::cuda::CudaProgram>),
}

impl Executable {
    /// The CPU program: graph, signature and names (the same on every device).
    pub fn program(&self) -> &Program {
        match self {
            Executable::Cpu(p) => p,
            #[cfg(feature = "cuda")]
            Executable::Cuda(p) => p.cpu(),
        }
    }
}

/// Compile counters of one program kind (`train_step`, `eval_step`,
/// `predict`) in the process-wide cache.
pub fn cache_stats(kind: &str) -> nitro_cache::Stats {
    PROGRAMS.stats(kind)
}

/// Total successful compiles across all program kinds.
pub fn total_compiles() -> u64 {
    PROGRAMS.stats_all().values().map(|s| s.compiles).sum()
}

/// Input signatures shared by every program of one handle.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub params: Vec<(String, TensorSpec)>,
    pub state: Vec<(String, TensorSpec)>,
    pub device: Vec<(&'static str, TensorSpec)>,
    /// Routed batch fields and their per-sample spec (no batch axis).
    pub fields: Vec<(String, TensorSpec)>,
    pub forward_fields: Vec<String>,
    pub loss_fields: Vec<String>,
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
        /// padded-row correction (`h.pad_b`).
        masked: bool,
    },
}

impl Kind {
    pub fn name(&self) -> &'static str {
        match self {
            Kind::Predict { .. } => "predict",
            Kind::Eval { .. } => "eval_step",
            Kind::Train { .. } => "train_step",
        }
    }
}

/// A compiled program and the names of the values it returns.
#[derive(Clone)]
pub(crate) struct Compiled {
    pub exe: Executable,
    pub returned: Vec<String>,
}

impl Compiled {
    /// The CPU view of the program (graph, names, signature).
    pub fn program(&self) -> &Program {
        self.exe.program()
    }

    pub fn index(&self, name: &str) -> Option<usize> {
        self.returned.iter().position(|n| n == name)
    }
}

fn batch_with(spec: &TensorSpec, width: usize) -> TensorSpec {
    let mut shape = vec![width];
    shape.extend(&spec.shape);
    TensorSpec::new(spec.dtype, &shape)
}

/// Every input name and signature of `kind`, in order.
pub(crate) fn inputs(layout: &Layout, kind: &Kind) -> Vec<(String, TensorSpec)> {
    let mut out: Vec<(String, TensorSpec)> = vec![];
    let group =
        |out: &mut Vec<(String, TensorSpec)>, prefix: &str, items: &[(String, TensorSpec)]| {
            out.extend(
                items
                    .iter()
                    .map(|(n, s)| (format!("{prefix}.{n}"), s.clone())),
            )
        };
    group(&mut out, "p", &layout.params);
    group(&mut out, "s", &layout.state);
    if let Kind::Train { optimizer, .. } = kind {
        for k in 0..optimizer.slots() {
            group(&mut out, &format!("o{k}"), &layout.params);
        }
    }
    out.extend(
        layout
            .device
            .iter()
            .map(|(n, s)| (format!("d.{n}"), s.clone())),
    );
    let scalar = TensorSpec::new(layout.dtype, &[]);
    let (width, micro, fields): (usize, usize, Vec<&(String, TensorSpec)>) = match kind {
        Kind::Predict { width } => (
            *width,
            1,
            layout
                .fields
                .iter()
                .filter(|(n, _)| layout.forward_fields.contains(n))
                .collect(),
        ),
        Kind::Eval { width } => {
            out.push(("h.pad_a".into(), scalar.clone()));
            out.push(("h.pad_b".into(), scalar.clone()));
            (*width, 1, layout.fields.iter().collect())
        }
        Kind::Train {
            width,
            accum,
            optimizer,
            clip,
            masked,
            ..
        } => {
            for (h, _) in optimizer.hyper_values(0.0, 0) {
                out.push((format!("h.{h}"), scalar.clone()));
            }
            if *clip {
                out.push(("h.max_norm".into(), scalar.clone()));
            }
            out.push(("h.micro_w".into(), TensorSpec::new(layout.dtype, &[*accum])));
            if *masked {
                out.push(("h.pad_b".into(), TensorSpec::new(layout.dtype, &[*accum])));
            }
            (*width, *accum, layout.fields.iter().collect())
        }
    };
    for i in 0..micro {
        for (n, s) in &fields {
            out.push((format!("b{i}.{n}"), batch_with(s, width)));
        }
    }
    out
}

/// The program's key: what it is, for which experiment type and device,
/// every GraphConst by value, every input signature, and the optimizer
/// structure.
fn key<E: Experiment>(
    e: &E,
    layout: &Layout,
    kind: &Kind,
    device: Device,
) -> Result<nitro_cache::Key> {
    let mut b = KeyBuilder::new()
        .part("program", kind.name())
        .part("experiment", std::any::type_name::<E>())
        .part("device", &device.to_string());
    for (name, value) in e.graph_const_values() {
        b = b.graph_const(name, &value.to_string());
    }
    for (name, spec) in inputs(layout, kind) {
        b = b.input_sig(&name, &signature(&spec));
    }
    b = b
        .structure("forward_fields", &layout.forward_fields)
        .structure("loss_fields", &layout.loss_fields);
    if let Kind::Train {
        optimizer,
        clip,
        outputs,
        masked,
        ..
    } = kind
    {
        b = b
            .config("optimizer", &optimizer.structure())
            .config("clip", clip)
            .config("train_outputs", outputs)
            .config("short_batch_mask", masked);
    }
    Ok(b.finish()?)
}

/// The compiled program for `kind`, from the process-wide cache (compiling
/// on a miss). Returns it and, on a miss, the reason (explain-a-miss).
pub(crate) fn get<E: Experiment>(
    e: &E,
    model: &E::Model,
    layout: &Layout,
    kind: &Kind,
    device: Device,
) -> Result<(Compiled, Option<String>)> {
    let key = key(e, layout, kind, device)?;
    let (exe, outcome) = PROGRAMS.get_or_compile(kind.name(), &key, None, || {
        build(e, model, layout, kind, device)
    })?;
    let reason = match outcome {
        Outcome::Miss(why) => Some(why.to_string()),
        _ => None,
    };
    let returned = exe.program().returned_names().to_vec();
    Ok((Compiled { exe, returned }, reason))
}

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

struct Traced {
    outputs: Vec<(String, Tensor)>,
    state: Params<Tensor>,
    /// The loss of the batch as given (`L_A`).
    loss: Option<Tensor>,
    /// The loss of `width` copies of the last row (`L_B`, see the module doc).
    loss_last_row: Option<Tensor>,
}

/// Which losses `apply` traces.
#[derive(Clone, Copy, PartialEq, Eq)]
enum LossTrace {
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

/// forward (and loss) on one traced micro-batch, with the checks the seed
/// asks for: outputs keep the batch axis, state keeps its keys, loss is scalar.
#[allow(clippy::too_many_arguments)]
fn apply<E: Experiment>(
    view: &E::View<Tensor>,
    model: &E::Model,
    ps: &Params<Tensor>,
    st: &Params<Tensor>,
    batch: &BTreeMap<String, Tensor>,
    layout: &Layout,
    width: usize,
    losses: LossTrace,
) -> Result<Traced> {
    let missing = |e: nitro_markers::MissingField| RunError::BatchField {
        field: e.field.clone(),
        reason: e.to_string(),
    };
    let inputs =
        E::Inputs::from_batch(&mut hook_batch(batch, &layout.forward_fields)).map_err(missing)?;
    let (outs, st_new) = E::forward(view, model, ps, st, inputs);
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
    let scalar_loss = |loss: Tensor| {
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
    };
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
    let last_targets: BTreeMap<String, Tensor> = targets
        .iter()
        .map(|(k, t)| (k.clone(), last_row(t, width)))
        .collect();
    let loss = E::loss(
        view,
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
        let mut last_targets = last_targets;
        let loss = E::loss(
            view,
            &last_outs,
            E::Targets::from_batch(&mut last_targets).map_err(missing)?,
        );
        traced.loss_last_row = Some(scalar_loss(loss)?);
    }
    Ok(traced)
}

/// Traces `kind` from the hooks and hands the trace to `driver` (compile
/// or trace only); a nitro-run error raised inside the trace (an output
/// without a batch axis, a missing field) wins over the graph's error.
fn with_trace<E: Experiment, T>(
    e: &E,
    model: &E::Model,
    layout: &Layout,
    kind: &Kind,
    driver: impl FnOnce(&[(&str, TensorSpec)], TraceFn<'_>) -> nitro_graph::Result<T>,
) -> Result<T> {
    let specs = inputs(layout, kind);
    let spec_refs: Vec<(&str, TensorSpec)> =
        specs.iter().map(|(n, s)| (n.as_str(), s.clone())).collect();
    let failure: RefCell<Option<RunError>> = RefCell::new(None);
    let result = driver(
        &spec_refs,
        Box::new(|tracer: &Tracer, t: &[Tensor]| {
            let named: BTreeMap<&str, &Tensor> = specs
                .iter()
                .map(|(n, _)| n.as_str())
                .zip(t.iter())
                .collect();
            trace_program(e, model, layout, kind, tracer, &named).map_err(|err| {
                *failure.borrow_mut() = Some(err);
                GraphError::Backend("the trace failed in nitro-run (see the run error)".into())
            })
        }),
    );
    match (result, failure.into_inner()) {
        (_, Some(err)) => Err(err),
        (Ok(p), None) => Ok(p),
        (Err(source), None) => Err(RunError::Compile {
            program: kind.name(),
            source: Box::new(source),
        }),
    }
}

type TraceFn<'a> =
    Box<dyn FnOnce(&Tracer, &[Tensor]) -> nitro_graph::Result<Vec<(String, Tensor)>> + 'a>;

/// Traces `forward` once at `width` without compiling anything, so the
/// rules on its outputs (every leaf an array with the batch on axis 0) and
/// on its state are errors at setup, not at the first program call.
pub(crate) fn check_forward<E: Experiment>(
    e: &E,
    model: &E::Model,
    layout: &Layout,
    width: usize,
) -> Result<()> {
    with_trace(e, model, layout, &Kind::Predict { width }, |specs, f| {
        nitro_graph::trace(specs, f)
    })
    .map(drop)
}

fn build<E: Experiment>(
    e: &E,
    model: &E::Model,
    layout: &Layout,
    kind: &Kind,
    device: Device,
) -> Result<Executable> {
    let mut options = CompileOptions::named(kind.name());
    if let Kind::Train { optimizer, .. } = kind {
        let mut groups = vec!["p".to_string(), "s".to_string()];
        groups.extend((0..optimizer.slots()).map(|k| format!("o{k}")));
        for g in groups {
            let items = if g == "s" {
                &layout.state
            } else {
                &layout.params
            };
            for (n, _) in items {
                options = options.donate(&format!("{g}.{n}"), &format!("new.{g}.{n}"));
            }
        }
    }
    match device {
        Device::Cpu => with_trace(e, model, layout, kind, |specs, f| {
            compile(specs, options, f)
        })
        .map(|p| Executable::Cpu(Arc::new(p))),
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => with_trace(e, model, layout, kind, |specs, f| {
            nitro_graph::backend::cuda::CudaProgram::compile(specs, options, f, device)
        })
        .map(|p| Executable::Cuda(Arc::new(p))),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(_) => Err(crate::placement::device_error(
            device,
            "nitro was built without CUDA".into(),
        )),
    }
}

fn group(
    named: &BTreeMap<&str, &Tensor>,
    prefix: &str,
    items: &[(String, TensorSpec)],
) -> Params<Tensor> {
    items
        .iter()
        .map(|(n, _)| (n.clone(), named[format!("{prefix}.{n}").as_str()].clone()))
        .collect()
}

fn micro_batch(named: &BTreeMap<&str, &Tensor>, i: usize) -> BTreeMap<String, Tensor> {
    let prefix = format!("b{i}.");
    named
        .iter()
        .filter_map(|(n, t)| Some((n.strip_prefix(&prefix)?.to_string(), (*t).clone())))
        .collect()
}

fn trace_program<E: Experiment>(
    e: &E,
    model: &E::Model,
    layout: &Layout,
    kind: &Kind,
    tracer: &Tracer,
    named: &BTreeMap<&str, &Tensor>,
) -> Result<Vec<(String, Tensor)>> {
    let view = e.compile_view(|name| named[format!("d.{name}").as_str()].clone());
    let ps = group(named, "p", &layout.params);
    let st = group(named, "s", &layout.state);
    match kind {
        Kind::Predict { width } => {
            let traced = apply::<E>(
                &view,
                model,
                &ps,
                &st,
                &micro_batch(named, 0),
                layout,
                *width,
                LossTrace::None,
            )?;
            Ok(prefixed("out", traced.outputs))
        }
        Kind::Eval { width } => {
            let traced = apply::<E>(
                &view,
                model,
                &ps,
                &st,
                &micro_batch(named, 0),
                layout,
                *width,
                LossTrace::WithLastRow,
            )?;
            let h = |name: &str| named[format!("h.{name}").as_str()].clone();
            let (la, lb) = (
                traced.loss.expect("eval traces the loss"),
                traced.loss_last_row.expect("eval traces the last-row loss"),
            );
            let mut out = vec![("loss".to_string(), la * h("pad_a") - lb * h("pad_b"))];
            out.extend(prefixed("out", traced.outputs));
            Ok(out)
        }
        Kind::Train {
            width,
            accum,
            optimizer,
            clip,
            outputs,
            masked,
        } => train_step::<E>(
            &view, model, layout, tracer, named, ps, st, *width, *accum, optimizer, *clip,
            *outputs, *masked,
        ),
    }
}

fn prefixed(prefix: &str, items: Vec<(String, Tensor)>) -> Vec<(String, Tensor)> {
    items
        .into_iter()
        .map(|(n, t)| (format!("{prefix}.{n}"), t))
        .collect()
}

/// Keeps `new` when the loss is finite, `old` otherwise: a non-finite step
/// leaves every parameter, moment and state at its last finite value.
pub(crate) fn keep_if(ok: &Tensor, new: &Tensor, old: &Tensor) -> Tensor {
    ok.broadcast_to(new.shape()).select(new, old)
}

#[allow(clippy::too_many_arguments)]
fn train_step<E: Experiment>(
    view: &E::View<Tensor>,
    model: &E::Model,
    layout: &Layout,
    tracer: &Tracer,
    named: &BTreeMap<&str, &Tensor>,
    ps: Params<Tensor>,
    st: Params<Tensor>,
    width: usize,
    accum: usize,
    optimizer: &Optimizer,
    clip: bool,
    want_outputs: bool,
    masked: bool,
) -> Result<Vec<(String, Tensor)>> {
    let h = |name: &str| named[format!("h.{name}").as_str()].clone();
    let micro_w = h("micro_w");
    let mut state = st.clone();
    let mut total: Option<Tensor> = None;
    let mut out = vec![];
    for i in 0..accum {
        let traced = apply::<E>(
            view,
            model,
            &ps,
            &state,
            &micro_batch(named, i),
            layout,
            width,
            if masked {
                LossTrace::WithLastRow
            } else {
                LossTrace::Plain
            },
        )?;
        let w = micro_w.narrow(0, i, i + 1).reshape(&[]);
        let mut weighted = traced.loss.expect("train traces the loss") * &w;
        if let Some(lb) = traced.loss_last_row {
            weighted = weighted - lb * h("pad_b").narrow(0, i, i + 1).reshape(&[]);
        }
        total = Some(match total {
            Some(t) => t + weighted,
            None => weighted,
        });
        // A padding micro-batch of a short final window (weight 0) must not
        // move the state either.
        let real = w.gt(&w.scalar_like(0.0));
        state = traced
            .state
            .iter()
            .map(|(k, new)| (k.clone(), keep_if(&real, new, &state[k])))
            .collect();
        if want_outputs {
            out.extend(prefixed(&format!("out{i}"), traced.outputs));
        }
    }
    let loss = total.unwrap_or_else(|| tracer.scalar(0.0, layout.dtype));
    let p_refs: Vec<&Tensor> = layout.params.iter().map(|(n, _)| &ps[n]).collect();
    let mut grads = tracer
        .grad(&loss, &p_refs)
        .map_err(|source| RunError::Compile {
            program: "train_step",
            source: Box::new(source),
        })?;
    if clip {
        grads = clip_by_global_norm(&grads, &h("max_norm")).0;
    }
    let ok = loss.abs().lt(&loss.scalar_like(f64::INFINITY));
    let names: Vec<String> = layout.params.iter().map(|(n, _)| n.clone()).collect();
    let slot = |k: usize, n: &str| named[format!("o{k}.{n}").as_str()].clone();
    let mut updates = optimizer_update(optimizer, &names, &p_refs, &grads, &slot, &h, &ok);
    for (k, new) in &state {
        updates.push((format!("new.s.{k}"), keep_if(&ok, new, &st[k])));
    }
    let mut result = vec![("loss".to_string(), loss)];
    result.extend(out);
    result.extend(updates);
    Ok(result)
}

/// The optimizer update of every parameter, as `new.p.<name>` and
/// `new.o<k>.<name>` outputs; a non-finite loss (`ok` false) keeps every
/// parameter and slot at its old value. `slot(k, name)` is slot `k` of a
/// parameter, `h(name)` a hyperparameter input.
pub(crate) fn optimizer_update(
    optimizer: &Optimizer,
    names: &[String],
    params: &[&Tensor],
    grads: &[Tensor],
    slot: &dyn Fn(usize, &str) -> Tensor,
    h: &dyn Fn(&str) -> Tensor,
    ok: &Tensor,
) -> Vec<(String, Tensor)> {
    let mut updates = vec![];
    match optimizer {
        Optimizer::Sgd { nesterov, .. } => {
            let (lr, momentum) = (h("lr"), h("momentum"));
            for (n, (p, g)) in names.iter().zip(params.iter().zip(grads)) {
                let buf = slot(0, n);
                let (p_new, buf_new) = sgd(p, g, &buf, &lr, &momentum, *nesterov);
                updates.push((format!("new.p.{n}"), keep_if(ok, &p_new, p)));
                updates.push((format!("new.o0.{n}"), keep_if(ok, &buf_new, &buf)));
            }
        }
        Optimizer::Adam { .. } => {
            let hs = ["lr", "beta1", "beta2", "eps", "weight_decay", "step"].map(h);
            let hyper = AdamHyper {
                lr: &hs[0],
                beta1: &hs[1],
                beta2: &hs[2],
                eps: &hs[3],
                weight_decay: &hs[4],
                step: &hs[5],
            };
            for (n, (p, g)) in names.iter().zip(params.iter().zip(grads)) {
                let (m, v) = (slot(0, n), slot(1, n));
                let (p_new, m_new, v_new) = adam(p, g, &m, &v, &hyper);
                updates.push((format!("new.p.{n}"), keep_if(ok, &p_new, p)));
                updates.push((format!("new.o0.{n}"), keep_if(ok, &m_new, &m)));
                updates.push((format!("new.o1.{n}"), keep_if(ok, &v_new, &v)));
            }
        }
    }
    updates
}
