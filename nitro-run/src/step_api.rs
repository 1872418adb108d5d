//! The step API for loops without an [`Experiment`](crate::Experiment)
//! (Flux's `trainstep!` / `train!`): one fused, cached program per step.
//!
//! [`trainstep`] traces `loss_fn(model, cx, params, batch)`, differentiates it,
//! applies the optimizer update, and compiles all of it into one program
//! that updates the parameters and optimizer slots in place (donated
//! buffers) and returns the loss as a host number. The program is cached in
//! the process-wide cache (kind `trainstep`, or `trainstep_withgradient`;
//! see [`cache_stats`](crate::cache_stats)) under a key of:
//!
//! - the model's type and the loss function's type;
//! - the optimizer's rule (hyperparameter values are inputs: changing `lr`
//!   never recompiles);
//! - every batch array's dtype and shape;
//! - **the traced graph's content hash**: two models whose `Chain`s differ
//!   only in an activation, or two closures of one type capturing different
//!   values, trace different graphs and never share a program; equal
//!   structures share one. A loss function that captures nothing (a
//!   zero-sized type) is traced once per model; one that captures values is
//!   traced every call (a fraction of a millisecond) so a changed capture is
//!   always seen.
//!
//! Programs are tied to their [`ModelAndParams`]: dropping it frees them.
//!
//! **One process.** A step trains on this process alone: under `mpirun -n
//! N` every rank trains its own copy (the first step warns once per
//! process). Data-parallel training is `Nitro`'s (an `Experiment`).
//!
//! **A smaller final batch** compiles one additional program for its shape,
//! once, then reuses it (Flux's choice, and the cache counters show it);
//! there is no padding in this API, so the loss of that batch is exactly the
//! loss of its samples. Drop it from `data` to avoid the extra compile.
//!
//! **Mode and key.** The loss function gets a [`Ctx`] in training mode
//! with the step's random key (`cx.key()`), an input derived from the
//! [`OptState`]'s seed ([`OptState::with_seed`], default 0) and its update
//! count by [`step_key`]: a new key each step compiles nothing, and an
//! `OptState` restored at update `s` draws the keys an uninterrupted loop
//! would have. Pass `cx` to the layers (`m.forward(cx, ps, &mut st, "", x)`).
//!
//! A loss may return auxiliary values computed in the same program: return
//! `(loss, aux)` with `aux` any tree of tensors (a `#[derive(Tree)]` struct,
//! a tuple); the gradient is of the loss alone and `aux` comes back as host
//! arrays by leaf path.
//!
//! ```
//! use nitro_graph::nn::layers::{Activation, Chain, Dense, Layer, Params};
//! use nitro_graph::nn::Ctx;
//! use nitro_graph::nn::loss::mse;
//! use nitro_graph::{Array, Tensor};
//! use nitro_run::step_api::{trainstep, ModelAndParams, OptState};
//! use nitro_run::Optimizer;
//!
//! let chain = Chain::new().push(Dense::new(4, 8).with(Activation::Tanh)).push(Dense::new(8, 2));
//! let params = chain.init_params(0).unwrap();
//! let mut model = ModelAndParams::new(chain, params);
//! let mut opt = OptState::new(Optimizer::adam(1e-2), &model);
//! let loss = |m: &Chain, cx: &Ctx, ps: &Params<Tensor>, b: &[Tensor]| {
//!     mse(&m.forward(cx, ps, &mut Params::new(), "", &b[0]), &b[1])
//! };
//! let x = Array::new(&[16, 4], vec![0.5f32; 64]).unwrap();
//! let y = Array::new(&[16, 2], vec![1.0f32; 32]).unwrap();
//! let first: f64 = trainstep(&loss, &mut model, &[x.clone(), y.clone()], &mut opt)?;
//! let later: f64 = trainstep(&loss, &mut model, &[x, y], &mut opt)?; // cached
//! assert!(later < first);
//! # Ok::<(), nitro_run::RunError>(())
//! ```

use std::any::TypeId;
use std::sync::Arc;

use nitro_cache::{KeyBuilder, OwnerToken};
use nitro_graph::exec::signature::{Role, Signature};
use nitro_graph::nn::layers::Params;
use nitro_graph::nn::{step_key, Ctx, Key};
use nitro_graph::{compile_graph, Array, DType, Tensor, TensorSpec};
use nitro_markers::Tree;

use crate::convert::signature as signature_text;
use crate::error::{Result, RunError};
use crate::experiment::{Logger, Tensors};
use crate::metric::HostOutputs;
use crate::optim::Optimizer;
use crate::programs::{announce, options_for, typed_outputs, Compiled, Executable, PROGRAMS};
use crate::progress::Display;
use crate::trace::{graph_error, trace_graph, Outputs, Returned};
use crate::train_step::optimizer_update;

/// The step's random key among the hyperparameter inputs.
const KEY: &str = "key";

/// A model structure and its parameters, trained in place by [`trainstep`].
/// The programs compiled for it are freed when it is dropped.
pub struct ModelAndParams<M> {
    model: M,
    /// Parameters by path; updated in place by every step.
    pub params: Params<Array>,
    /// Ties this model's cache entries to its lifetime.
    owner: OwnerToken,
    /// Keys of the steps of capture-free loss functions, which need no
    /// retrace: each call still looks its key up (the counters count it).
    memo: Vec<(StepMemoKey, nitro_cache::Key, Arc<[Returned]>)>,
}

/// What identifies a step program without tracing: a loss function that
/// captures nothing (a zero-sized type) traces the same graph for the same
/// model, optimizer rule and batch signature.
#[derive(Debug, Clone, PartialEq)]
struct StepMemoKey {
    loss_fn: TypeId,
    with_grads: bool,
    optimizer: String,
    inputs: Vec<(String, TensorSpec)>,
}

impl<M> ModelAndParams<M> {
    /// A model and its initial parameters.
    pub fn new(model: M, params: Params<Array>) -> Self {
        ModelAndParams {
            model,
            params,
            owner: OwnerToken::new(),
            memo: vec![],
        }
    }

    /// The model structure.
    pub fn model(&self) -> &M {
        &self.model
    }
}

/// An optimizer and its per-parameter slots (velocity; Adam's m and v) and
/// update count, updated in place by [`trainstep`].
pub struct OptState {
    optimizer: Optimizer,
    slots: Vec<Params<Array>>,
    step: u64,
    seed: u64,
}

impl OptState {
    /// Zeroed slots for `model`'s parameters.
    pub fn new<M>(optimizer: Optimizer, model: &ModelAndParams<M>) -> Self {
        let zeros: Params<Array> = model
            .params
            .iter()
            .map(|(n, a)| (n.clone(), Array::zeros(a.spec())))
            .collect();
        OptState {
            optimizer,
            slots: vec![zeros; optimizer.slots()],
            step: 0,
            seed: 0,
        }
    }

    /// The same state with the random keys derived from `seed` (the step's
    /// key is `step_key(seed, step)`).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Updates applied so far (non-finite steps are not counted).
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The optimizer; its hyperparameters can change between steps without
    /// a recompile.
    pub fn optimizer_mut(&mut self) -> &mut Optimizer {
        &mut self.optimizer
    }
}

/// What a loss function may return: the scalar loss alone, or the loss and
/// a tree of auxiliary values computed in the same program.
pub trait LossValue {
    /// What a step returns on the host: `f64`, or `(f64, HostOutputs)`.
    type Host;
    /// The loss and the auxiliary leaves by path.
    fn split(self) -> (Tensor, Vec<(String, Tensor)>);
    /// The host value from the loss and the auxiliary arrays.
    fn host(loss: f64, aux: HostOutputs) -> Self::Host;
}

impl LossValue for Tensor {
    type Host = f64;
    fn split(self) -> (Tensor, Vec<(String, Tensor)>) {
        (self, vec![])
    }
    fn host(loss: f64, _: HostOutputs) -> f64 {
        loss
    }
}

impl<A: Tree<Tensors>> LossValue for (Tensor, A) {
    type Host = (f64, HostOutputs);
    fn split(self) -> (Tensor, Vec<(String, Tensor)>) {
        let aux = crate::trace::output_leaves(&self.1);
        (self.0, aux)
    }
    fn host(loss: f64, aux: HostOutputs) -> (f64, HostOutputs) {
        (loss, aux)
    }
}

/// One fused training step: forward, loss, reverse pass, optimizer update
/// (params and slots in place); returns the loss (and aux values) on the
/// host. Compiles on the first call for this model, optimizer rule, loss
/// function and batch shape; reuses the cached program afterwards. A
/// non-finite loss leaves params and slots unchanged and is returned as is.
pub fn trainstep<M, F, L>(
    loss_fn: &F,
    model: &mut ModelAndParams<M>,
    batch: &[Array],
    opt: &mut OptState,
) -> Result<L::Host>
where
    M: 'static,
    F: Fn(&M, &Ctx, &Params<Tensor>, &[Tensor]) -> L + 'static,
    L: LossValue,
{
    step(loss_fn, model, batch, opt, false).map(|s| s.host)
}

/// [`trainstep`] that also returns the gradients by parameter path (as
/// arrays; returning them makes them program outputs, so prefer
/// `trainstep` when they are not needed).
pub fn trainstep_withgradient<M, F, L>(
    loss_fn: &F,
    model: &mut ModelAndParams<M>,
    batch: &[Array],
    opt: &mut OptState,
) -> Result<(L::Host, Params<Array>)>
where
    M: 'static,
    F: Fn(&M, &Ctx, &Params<Tensor>, &[Tensor]) -> L + 'static,
    L: LossValue,
{
    step(loss_fn, model, batch, opt, true).map(|s| (s.host, s.grads))
}

/// What [`train`] did.
#[derive(Debug, Clone, Default)]
pub struct StepTrainReport {
    /// Steps taken.
    pub steps: u64,
    /// The loss of every step, in order.
    pub losses: Vec<f64>,
}

/// One step per batch of `data`, with a progress display; stops with
/// [`RunError::NonFiniteLoss`] (naming the step) when the loss becomes
/// non-finite, leaving the params at the last finite update. Batches of a
/// new shape (a smaller final batch) compile once each, then are cached.
pub fn train<M, F, L, I, B>(
    loss_fn: &F,
    model: &mut ModelAndParams<M>,
    data: I,
    opt: &mut OptState,
) -> Result<StepTrainReport>
where
    M: 'static,
    F: Fn(&M, &Ctx, &Params<Tensor>, &[Tensor]) -> L + 'static,
    L: LossValue,
    I: IntoIterator<Item = B>,
    B: AsRef<[Array]>,
{
    train_with(loss_fn, model, data, opt, &Logger::default())
}

/// [`train`] with a progress setting (`Progress::Off` prints nothing).
#[allow(clippy::too_many_arguments)]
pub fn train_with<M, F, L, I, B>(
    loss_fn: &F,
    model: &mut ModelAndParams<M>,
    data: I,
    opt: &mut OptState,
    logger: &Logger,
) -> Result<StepTrainReport>
where
    M: 'static,
    F: Fn(&M, &Ctx, &Params<Tensor>, &[Tensor]) -> L + 'static,
    L: LossValue,
    I: IntoIterator<Item = B>,
    B: AsRef<[Array]>,
{
    let data = data.into_iter();
    let total = data.size_hint().0 as u64;
    let display = Display::new(logger, total, 0);
    let mut report = StepTrainReport::default();
    for batch in data {
        let loss = step::<M, F, L>(loss_fn, model, batch.as_ref(), opt, false)?.loss;
        if !loss.is_finite() {
            display.finish();
            return Err(RunError::NonFiniteLoss {
                loss,
                step: report.steps + 1,
                epoch: 0,
                last_good: report.steps,
            });
        }
        report.steps += 1;
        report.losses.push(loss);
        display.step(report.steps, 0, loss);
    }
    display.finish();
    Ok(report)
}

/// One step's results: the host value, the loss, the gradients (empty
/// unless asked for).
struct StepOut<H> {
    host: H,
    loss: f64,
    grads: Params<Array>,
}

fn step<M, F, L>(
    loss_fn: &F,
    model: &mut ModelAndParams<M>,
    batch: &[Array],
    opt: &mut OptState,
    with_grads: bool,
) -> Result<StepOut<L::Host>>
where
    M: 'static,
    F: Fn(&M, &Ctx, &Params<Tensor>, &[Tensor]) -> L + 'static,
    L: LossValue,
{
    warn_if_launched_in_a_group();
    let kind = if with_grads {
        "trainstep_withgradient"
    } else {
        "trainstep"
    };
    let dtype = model
        .params
        .values()
        .next()
        .map_or(DType::F32, |a| a.dtype());
    let scalar = TensorSpec::new(dtype, &[]);
    let param_specs = || {
        model
            .params
            .iter()
            .map(|(n, a)| (n.clone(), a.spec().clone()))
    };
    let mut sig = Signature::new().with(Role::Params, param_specs());
    for k in 0..opt.slots.len() {
        sig = sig.with(Role::Slot(k), param_specs());
    }
    let sig = sig
        .with(
            Role::Hyper,
            opt.optimizer
                .hyper_names()
                .into_iter()
                .map(|h| (h.to_string(), scalar.clone()))
                .chain([(KEY.to_string(), TensorSpec::new(DType::I32, &[]))]),
        )
        .with(
            Role::Batch(0),
            batch
                .iter()
                .enumerate()
                .map(|(i, a)| (i.to_string(), a.spec().clone())),
        );
    let memo_key = (std::mem::size_of::<F>() == 0).then(|| StepMemoKey {
        loss_fn: TypeId::of::<F>(),
        with_grads,
        optimizer: opt.optimizer.structure(),
        inputs: sig.inputs(),
    });
    let memoized = memo_key
        .as_ref()
        .and_then(|k| model.memo.iter().find(|(m, _, _)| m == k))
        .map(|(_, key, returned)| (key.clone(), returned.clone()));
    let compiled = match memoized {
        Some((key, returned)) => {
            let (exe, outcome) = PROGRAMS.get_or_compile(kind, &key, Some(&model.owner), || {
                let (graph, _) =
                    trace_step(loss_fn, model, &sig, &opt.optimizer, kind, with_grads)?;
                compile_cpu(graph, kind, &opt.optimizer, &sig)
            })?;
            announce(kind, outcome, false);
            Compiled {
                exe,
                sig: Arc::new(sig.clone()),
                returned,
            }
        }
        None => {
            let (compiled, key) =
                compile_step(loss_fn, model, &sig, &opt.optimizer, kind, with_grads)?;
            if let Some(k) = memo_key {
                model.memo.push((k, key, compiled.returned.clone()));
            }
            compiled
        }
    };
    let program = compiled.program();
    // Inputs in signature order: params, slots, hyperparameters, batch.
    let names: Vec<String> = model.params.keys().cloned().collect();
    let np = names.len();
    let mut args: Vec<Array> = Vec::with_capacity(sig.len());
    args.extend(std::mem::take(&mut model.params).into_values());
    for slot in &mut opt.slots {
        args.extend(std::mem::take(slot).into_values());
    }
    args.extend(
        opt.optimizer
            .hyper_values(opt.optimizer.lr(), opt.step + 1)
            .into_iter()
            .map(|(_, v)| Array::scalar_f64(v).cast(dtype)),
    );
    args.push(Array::scalar_i32(step_key(opt.seed, opt.step)));
    args.extend(batch.iter().cloned());
    let result = program.run(&mut args);
    // Donated inputs hold the updated values (or the old ones on failure).
    let mut rest = args.into_iter();
    model.params = names.iter().cloned().zip(rest.by_ref().take(np)).collect();
    for slot in &mut opt.slots {
        *slot = names.iter().cloned().zip(rest.by_ref().take(np)).collect();
    }
    let out = result.map_err(|source| RunError::Exec {
        program: kind.to_string(),
        source: Box::new(source),
    })?;
    let mut loss = f64::NAN;
    let mut aux = HostOutputs::new();
    let mut grads = Params::new();
    for (r, a) in compiled.returned.iter().zip(out) {
        match r {
            Returned::Loss => loss = a.item().unwrap_or(f64::NAN),
            Returned::Aux(path) => {
                aux.insert(path.clone(), a);
            }
            Returned::Grad(name) => {
                grads.insert(name.clone(), a);
            }
            _ => {}
        }
    }
    if loss.is_finite() {
        opt.step += 1;
    }
    Ok(StepOut {
        host: L::host(loss, aux),
        loss,
        grads,
    })
}

/// The step's graph: forward, loss, reverse pass and optimizer update.
/// The step API trains on this process alone. Under `mpirun -n N` each
/// rank would silently train its own copy on whatever data it was given,
/// so the first step says so, once per process, on stderr (a warning, not
/// a refusal: N independent loops, a seed or hyperparameter search, are a
/// legitimate use of a launcher).
fn warn_if_launched_in_a_group() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Ok(Some(launch)) = nitro_device::collective::Launch::from_env() {
            if launch.world_size > 1 {
                eprintln!(
                    "nitro: warning: rank {} of {}: the step API (`trainstep`) is not data-parallel; \
                     every rank trains alone on its own batches. For data-parallel training write \
                     an Experiment and run it with `Nitro` (its train step all-reduces the gradients)",
                    launch.rank, launch.world_size
                );
            }
        }
    });
}

fn trace_step<M, F, L>(
    loss_fn: &F,
    model: &ModelAndParams<M>,
    sig: &Signature,
    optimizer: &Optimizer,
    kind: &'static str,
    with_grads: bool,
) -> Result<(nitro_graph::Graph, Vec<Returned>)>
where
    F: Fn(&M, &Ctx, &Params<Tensor>, &[Tensor]) -> L,
    L: LossValue,
{
    trace_graph(kind, sig, |tracer, bound| {
        let ps = bound.tree(Role::Params);
        let batch: Vec<Tensor> = bound.all(Role::Batch(0)).to_vec();
        let key = bound.get(Role::Hyper, KEY).map_err(graph_error(kind))?;
        let cx = Ctx::train(Key::new(key).map_err(graph_error(kind))?);
        let (loss, aux) = loss_fn(&model.model, &cx, &ps, &batch).split();
        if !loss.shape().is_empty() {
            return Err(RunError::Setting {
                setting: "loss",
                reason: format!(
                    "the loss function returned shape {:?}; it must return a scalar (reduce with mean or sum)",
                    loss.shape()
                ),
            });
        }
        let names: Vec<String> = sig.names(Role::Params).to_vec();
        let p_refs: Vec<&Tensor> = names.iter().map(|n| &ps[n]).collect();
        let grads = tracer.grad(&loss, &p_refs).map_err(graph_error(kind))?;
        let ok = loss.abs().lt(&loss.scalar_like(f64::INFINITY));
        let slots: Vec<Params<Tensor>> = (0..optimizer.slots())
            .map(|k| bound.tree(Role::Slot(k)))
            .collect();
        let h = |n: &str| {
            bound
                .get(Role::Hyper, n)
                .cloned()
                .map_err(graph_error(kind))
        };
        let mut out: Outputs = vec![(Returned::Loss, loss)];
        out.extend(aux.into_iter().map(|(p, t)| (Returned::Aux(p), t)));
        if with_grads {
            out.extend(
                names
                    .iter()
                    .zip(&grads)
                    .map(|(n, g)| (Returned::Grad(n.clone()), g.clone())),
            );
        }
        out.extend(optimizer_update(
            optimizer, &names, &p_refs, &grads, &slots, &h, &ok,
        )?);
        Ok(out)
    })
}

/// Compiles a step graph for the CPU, params and slots donated.
fn compile_cpu(
    graph: nitro_graph::Graph,
    kind: &'static str,
    optimizer: &Optimizer,
    sig: &Signature,
) -> Result<Executable> {
    let mut roles = vec![Role::Params];
    roles.extend((0..optimizer.slots()).map(Role::Slot));
    compile_graph(graph, options_for(kind, &roles, sig))
        .map(|p| Executable::Cpu(Arc::new(p)))
        .map_err(graph_error(kind))
}

/// Traces the step, keys it by its named parts and the traced graph, and
/// compiles it on a miss (tied to the model: freed when it is dropped).
fn compile_step<M, F, L>(
    loss_fn: &F,
    model: &ModelAndParams<M>,
    sig: &Signature,
    optimizer: &Optimizer,
    kind: &'static str,
    with_grads: bool,
) -> Result<(Compiled, nitro_cache::Key)>
where
    M: 'static,
    F: Fn(&M, &Ctx, &Params<Tensor>, &[Tensor]) -> L + 'static,
    L: LossValue,
{
    let (graph, traced) = trace_step(loss_fn, model, sig, optimizer, kind, with_grads)?;
    let mut key = KeyBuilder::new()
        .part("program", kind)
        .part("model_type", std::any::type_name::<M>())
        .part("loss_fn", std::any::type_name::<F>())
        .config("optimizer", &optimizer.structure());
    for (name, spec) in sig.inputs() {
        key = key.input_sig(&name, &signature_text(&spec));
    }
    let key = key.graph(&graph.content_hash()).finish()?;
    let (exe, outcome) = PROGRAMS.get_or_compile(kind, &key, Some(&model.owner), || {
        compile_cpu(graph, kind, optimizer, sig)
    })?;
    announce(kind, outcome, false);
    let returned = typed_outputs(&exe, &traced)?;
    Ok((
        Compiled {
            exe,
            sig: Arc::new(sig.clone()),
            returned,
        },
        key,
    ))
}
