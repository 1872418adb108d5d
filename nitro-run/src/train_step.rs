//! The fused train step's body: forward and loss over `accum` traced
//! micro-batches, the reverse pass, clipping by the global norm, and the
//! optimizer update, all in one graph. A non-finite loss keeps every
//! parameter, slot and state entry at its old value.

use nitro_graph::exec::signature::{Bound, Role};
use nitro_graph::nn::layers::Params;
use nitro_graph::nn::optim::{adam, clip_by_global_norm, sgd, AdamHyper};
use nitro_graph::nn::{Ctx, Key};
use nitro_graph::{Tensor, Tracer};

use crate::error::{Result, RunError};
use crate::experiment::Experiment;
use crate::layout::{Kind, KEY, MAX_NORM, MICRO_W, PAD_B};
use crate::optim::Optimizer;
use crate::trace::{apply, graph_error, micro_batch, HookArgs, LossTrace, Outputs, Returned};

/// Keeps `new` when the loss is finite, `old` otherwise.
pub(crate) fn keep_if(ok: &Tensor, new: &Tensor, old: &Tensor) -> Tensor {
    ok.broadcast_to(new.shape()).select(new, old)
}

/// The train step of `kind` (a `Kind::Train`) over the traced inputs.
pub(crate) fn trace<E: Experiment>(
    args: &HookArgs<'_, E>,
    kind: &Kind,
    tracer: &Tracer,
    bound: &Bound<'_, Tensor>,
    ps: Params<Tensor>,
    st: Params<Tensor>,
) -> Result<Outputs> {
    let Kind::Train {
        accum,
        optimizer,
        clip,
        outputs: want_outputs,
        masked,
        world,
        ..
    } = kind
    else {
        unreachable!("train_step::trace takes a train kind")
    };
    let program = kind.name();
    let h = |name: &str| {
        bound
            .get(Role::Hyper, name)
            .cloned()
            .map_err(graph_error(program))
    };
    let micro_w = h(MICRO_W)?;
    let pad_b = if *masked { Some(h(PAD_B)?) } else { None };
    let key = Key::new(&h(KEY)?).map_err(graph_error(program))?;
    let cx = Ctx::train(key).with_padded_rows(*masked);
    let mut state = st.clone();
    let mut total: Option<Tensor> = None;
    let mut out: Outputs = vec![];
    for i in 0..*accum {
        let losses = if *masked {
            LossTrace::WithLastRow
        } else {
            LossTrace::Plain
        };
        let traced = apply::<E>(
            args,
            &cx.child(i as u64),
            &ps,
            &state,
            &micro_batch(bound, i),
            losses,
        )?;
        let w = micro_w.narrow(0, i, i + 1).reshape(&[]);
        let mut weighted = traced.loss.expect("train traces the loss") * &w;
        if let (Some(lb), Some(pad_b)) = (traced.loss_last_row, &pad_b) {
            weighted = weighted - lb * pad_b.narrow(0, i, i + 1).reshape(&[]);
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
        if *want_outputs {
            out.extend(traced.outputs.into_iter().map(|(path, t)| {
                (
                    Returned::Leaf {
                        micro: Some(i),
                        path,
                    },
                    t,
                )
            }));
        }
    }
    let mut loss = total.unwrap_or_else(|| tracer.scalar(0.0, args.layout.dtype));
    let names: Vec<String> = args.layout.params.iter().map(|(n, _)| n.clone()).collect();
    let p_refs: Vec<&Tensor> = names.iter().map(|n| &ps[n]).collect();
    let mut grads = tracer
        .grad(&loss, &p_refs)
        .map_err(|source| RunError::Compile {
            program,
            source: Box::new(source),
        })?;
    if *world > 1 {
        // After the reverse pass, before clipping: the global norm is that
        // of the reduced gradients.
        (loss, grads, state) = all_reduce(program, *world, loss, grads, state, args.layout.dtype)?;
    }
    if *clip {
        grads = clip_by_global_norm(&grads, &h(MAX_NORM)?).0;
    }
    let ok = loss.abs().lt(&loss.scalar_like(f64::INFINITY));
    let slots: Vec<Params<Tensor>> = (0..optimizer.slots())
        .map(|k| bound.tree(Role::Slot(k)))
        .collect();
    let hyper = |name: &str| h(name);
    let mut updates = optimizer_update(optimizer, &names, &p_refs, &grads, &slots, &hyper, &ok)?;
    for (k, new) in &state {
        updates.push((
            Returned::Update(Role::State, k.clone()),
            keep_if(&ok, new, &st[k]),
        ));
    }
    let mut result = vec![(Returned::Loss, loss)];
    result.extend(out);
    result.extend(updates);
    Ok(result)
}

/// The data-parallel reduction, one all-reduce per update: the loss and
/// every gradient (and the float state, averaged) flattened into one
/// buffer, summed over the `world` ranks in rank order, and cut back.
///
/// No division for the loss and gradients: each rank's micro-batch weights
/// are normalised by the *global* window (see `train::hyper_inputs`), so
/// the sum over ranks is the mean over the global batch, exactly what one
/// process with a batch `world` times as wide computes, up to the order of
/// the additions. State (running statistics) is each rank's own batch
/// statistic; its mean keeps every rank's state equal.
fn all_reduce(
    program: &'static str,
    world: usize,
    loss: Tensor,
    grads: Vec<Tensor>,
    state: Params<Tensor>,
    dtype: nitro_graph::DType,
) -> Result<(Tensor, Vec<Tensor>, Params<Tensor>)> {
    let reduced_state: Vec<String> = state
        .iter()
        .filter(|(_, t)| t.dtype() == dtype)
        .map(|(k, _)| k.clone())
        .collect();
    let mut parts: Vec<Tensor> = vec![loss.reshape(&[1])];
    let mut shapes: Vec<Vec<usize>> = vec![vec![]];
    for t in grads.iter().chain(reduced_state.iter().map(|k| &state[k])) {
        shapes.push(t.shape().to_vec());
        parts.push(t.reshape(&[t.shape().iter().product()]));
    }
    let flat = Tensor::concat(&parts, 0).map_err(graph_error(program))?;
    let sum = flat.all_reduce_sum(world);
    let mut at = 0;
    let mut pieces = shapes.iter().map(|shape| {
        let n: usize = shape.iter().product();
        let piece = sum.narrow(0, at, at + n).reshape(shape);
        at += n;
        piece
    });
    let loss = pieces.next().expect("the loss leads the buffer");
    let grads: Vec<Tensor> = pieces.by_ref().take(grads.len()).collect();
    let mut state = state;
    let inv = 1.0 / world as f64;
    for (k, piece) in reduced_state.iter().zip(pieces) {
        let mean = &piece * &piece.scalar_like(inv);
        state.insert(k.clone(), mean);
    }
    Ok((loss, grads, state))
}

/// The optimizer update of every parameter, as `Update(Params, name)` and
/// `Update(Slot(k), name)` outputs; a non-finite loss (`ok` false) keeps
/// every parameter and slot at its old value. `slots[k]` is slot tree `k`,
/// `h(name)` a hyperparameter input.
pub(crate) fn optimizer_update(
    optimizer: &Optimizer,
    names: &[String],
    params: &[&Tensor],
    grads: &[Tensor],
    slots: &[Params<Tensor>],
    h: &dyn Fn(&str) -> Result<Tensor>,
    ok: &Tensor,
) -> Result<Outputs> {
    let mut updates = vec![];
    let update = |role: Role, n: &str| Returned::Update(role, n.to_string());
    match optimizer {
        Optimizer::Sgd { nesterov, .. } => {
            let (lr, momentum) = (h("lr")?, h("momentum")?);
            for (n, (p, g)) in names.iter().zip(params.iter().zip(grads)) {
                let buf = &slots[0][n];
                let (p_new, buf_new) = sgd(p, g, buf, &lr, &momentum, *nesterov);
                updates.push((update(Role::Params, n), keep_if(ok, &p_new, p)));
                updates.push((update(Role::Slot(0), n), keep_if(ok, &buf_new, buf)));
            }
        }
        Optimizer::Adam { .. } => {
            let [lr, beta1, beta2, eps, weight_decay, step] =
                ["lr", "beta1", "beta2", "eps", "weight_decay", "step"].map(h);
            let (lr, beta1, beta2, eps, weight_decay, step) =
                (lr?, beta1?, beta2?, eps?, weight_decay?, step?);
            let hyper = AdamHyper {
                lr: &lr,
                beta1: &beta1,
                beta2: &beta2,
                eps: &eps,
                weight_decay: &weight_decay,
                step: &step,
            };
            for (n, (p, g)) in names.iter().zip(params.iter().zip(grads)) {
                let (m, v) = (&slots[0][n], &slots[1][n]);
                let (p_new, m_new, v_new) = adam(p, g, m, v, &hyper);
                updates.push((update(Role::Params, n), keep_if(ok, &p_new, p)));
                updates.push((update(Role::Slot(0), n), keep_if(ok, &m_new, m)));
                updates.push((update(Role::Slot(1), n), keep_if(ok, &v_new, v)));
            }
        }
    }
    Ok(updates)
}
