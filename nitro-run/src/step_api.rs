//! The step API for loops without an [`Experiment`](crate::Experiment)
//! (Flux's `trainstep!` / `train!`): one fused, cached program per step.
//!
//! [`trainstep`] traces `loss_fn(model, params, batch)`, differentiates it,
//! applies the optimizer update, and compiles all of it into one program
//! that updates the parameters and optimizer slots in place (donated
//! buffers) and returns the loss as a host number. The program is cached in
//! the process-wide cache (kind `trainstep`, or `trainstep_withgradient`;
//! see [`cache_stats`](crate::cache_stats)) under a key of:
//!
//! - the model: its type, its parameter tree (names, dtypes, shapes) and
//!   **which model value** it is. A [`ModelAndParams`] gets an identity at
//!   construction, so a second model compiles its own step even when its
//!   type and shapes match (a `Chain`'s activations are invisible to both),
//!   exactly as Flux keys on the model object. Give equal models one
//!   description with [`ModelAndParams::with_structure`] to share programs;
//! - the optimizer's rule (hyperparameter values are inputs: changing `lr`
//!   never recompiles);
//! - the loss function's type (`TypeId`). Values a closure captures are
//!   baked at its first compile: pass anything that varies in the batch;
//! - every batch array's dtype and shape.
//!
//! **A smaller final batch** compiles one additional program for its shape,
//! once, then reuses it (Flux's choice, and the cache counters show it);
//! there is no padding in this API, so the loss of that batch is exactly the
//! loss of its samples. Drop it from `data` to avoid the extra compile.
//!
//! A loss may return auxiliary values computed in the same program: return
//! `(loss, aux)` with `aux` any tree of tensors (a `#[derive(Tree)]` struct,
//! a tuple); the gradient is of the loss alone and `aux` comes back as host
//! arrays by leaf path.
//!
//! ```
//! use nitro_graph::nn::layers::{Activation, Chain, Dense, Layer, Params};
//! use nitro_graph::nn::loss::mse;
//! use nitro_graph::{Array, Tensor};
//! use nitro_run::step_api::{trainstep, ModelAndParams, OptState};
//! use nitro_run::Optimizer;
//!
//! let chain = Chain::new().push(Dense::new(4, 8).with(Activation::Tanh)).push(Dense::new(8, 2));
//! let params = chain.init_params(0);
//! let mut model = ModelAndParams::new(chain, params);
//! let mut opt = OptState::new(Optimizer::adam(1e-2), &model);
//! let loss = |m: &Chain, ps: &Params<Tensor>, b: &[Tensor]| mse(&m.apply(ps, "", &b[0]), &b[1]);
//! let x = Array::new(&[16, 4], vec![0.5f32; 64]).unwrap();
//! let y = Array::new(&[16, 2], vec![1.0f32; 32]).unwrap();
//! let first: f64 = trainstep(&loss, &mut model, &[x.clone(), y.clone()], &mut opt)?;
//! let later: f64 = trainstep(&loss, &mut model, &[x, y], &mut opt)?; // cached
//! assert!(later < first);
//! # Ok::<(), nitro_run::RunError>(())
//! ```

use std::any::TypeId;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use nitro_cache::{KeyBuilder, Outcome};
use nitro_graph::nn::layers::Params;
use nitro_graph::{compile, Array, CompileOptions, Program, Tensor, TensorSpec};
use nitro_markers::Tree;

use crate::convert::signature;
use crate::error::{Result, RunError};
use crate::experiment::{Logger, Tensors};
use crate::metric::HostOutputs;
use crate::optim::Optimizer;
use crate::programs::{optimizer_update, Executable, PROGRAMS};
use crate::progress::Display;

static NEXT_MODEL: AtomicU64 = AtomicU64::new(1);

/// A model structure and its parameters, trained in place by [`trainstep`].
pub struct ModelAndParams<M> {
    model: M,
    /// Parameters by path; updated in place by every step.
    pub params: Params<Array>,
    identity: String,
}

impl<M> ModelAndParams<M> {
    /// A model and its initial parameters, with an identity of its own (its
    /// steps are compiled for it alone).
    pub fn new(model: M, params: Params<Array>) -> Self {
        let id = NEXT_MODEL.fetch_add(1, Ordering::Relaxed);
        ModelAndParams {
            model,
            params,
            identity: format!("model #{id}"),
        }
    }

    /// Shares compiled steps with every model given the same description:
    /// promise that equal descriptions mean equal structure (layers,
    /// activations), since that is what the key then trusts.
    pub fn with_structure(mut self, description: &str) -> Self {
        self.identity = format!("structure {description}");
        self
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
        }
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
        let aux = crate::programs::output_leaves(&self.1);
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
    F: Fn(&M, &Params<Tensor>, &[Tensor]) -> L + 'static,
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
    F: Fn(&M, &Params<Tensor>, &[Tensor]) -> L + 'static,
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
    F: Fn(&M, &Params<Tensor>, &[Tensor]) -> L + 'static,
    L: LossValue,
    I: IntoIterator<Item = B>,
    B: AsRef<[Array]>,
{
    let data = data.into_iter();
    let total = data.size_hint().0 as u64;
    let display = Display::new(&Logger::default(), total, 0);
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
    F: Fn(&M, &Params<Tensor>, &[Tensor]) -> L + 'static,
    L: LossValue,
{
    let kind = if with_grads {
        "trainstep_withgradient"
    } else {
        "trainstep"
    };
    let names: Vec<String> = model.params.keys().cloned().collect();
    let mut specs: Vec<(String, TensorSpec)> = vec![];
    let groups =
        std::iter::once("p".to_string()).chain((0..opt.slots.len()).map(|k| format!("o{k}")));
    for g in groups {
        specs.extend(
            model
                .params
                .iter()
                .map(|(n, a)| (format!("{g}.{n}"), a.spec().clone())),
        );
    }
    let dtype = model
        .params
        .values()
        .next()
        .map_or(nitro_graph::DType::F32, |a| a.dtype());
    let hyper = opt.optimizer.hyper_values(opt.optimizer.lr(), opt.step + 1);
    for (h, _) in &hyper {
        specs.push((format!("h.{h}"), TensorSpec::new(dtype, &[])));
    }
    for (i, a) in batch.iter().enumerate() {
        specs.push((format!("b.{i}"), a.spec().clone()));
    }
    let mut key = KeyBuilder::new()
        .part("program", kind)
        .part("model_type", std::any::type_name::<M>())
        .part("model", &model.identity)
        .part("loss_fn", &format!("{:?}", TypeId::of::<F>()))
        .config("optimizer", &opt.optimizer.structure());
    for (name, spec) in &specs {
        key = key.input_sig(name, &signature(spec));
    }
    let key = key.finish()?;
    // The step API runs on the CPU: its entries are always `Executable::Cpu`.
    let (exe, outcome) = PROGRAMS.get_or_compile(kind, &key, None, || {
        build(
            loss_fn,
            &model.model,
            &names,
            &specs,
            &opt.optimizer,
            with_grads,
        )
        .map(|p| Executable::Cpu(Arc::new(p)))
    })?;
    let program = exe.program();
    if let Outcome::Miss(why) = outcome {
        if nitro_cache::log_compiles() {
            eprintln!("nitro: compiling {why}");
        }
    }
    // Inputs in spec order: params, slots, hyperparameters, batch.
    let np = names.len();
    let mut args: Vec<Array> = Vec::with_capacity(specs.len());
    args.extend(std::mem::take(&mut model.params).into_values());
    for slot in &mut opt.slots {
        args.extend(std::mem::take(slot).into_values());
    }
    args.extend(
        hyper
            .iter()
            .map(|(_, v)| Array::scalar_f32(*v as f32).cast(dtype)),
    );
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
    let returned = program.returned_names();
    let mut loss = f64::NAN;
    let mut aux = HostOutputs::new();
    let mut grads = Params::new();
    for (name, a) in returned.iter().zip(out) {
        if name == "loss" {
            loss = a.item().unwrap_or(f64::NAN);
        } else if let Some(path) = name.strip_prefix("aux.") {
            aux.insert(path.to_string(), a);
        } else if let Some(path) = name.strip_prefix("grad.") {
            grads.insert(path.to_string(), a);
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

fn build<M, F, L>(
    loss_fn: &F,
    model: &M,
    names: &[String],
    specs: &[(String, TensorSpec)],
    optimizer: &Optimizer,
    with_grads: bool,
) -> Result<Program>
where
    F: Fn(&M, &Params<Tensor>, &[Tensor]) -> L,
    L: LossValue,
{
    let kind = if with_grads {
        "trainstep_withgradient"
    } else {
        "trainstep"
    };
    let spec_refs: Vec<(&str, TensorSpec)> =
        specs.iter().map(|(n, s)| (n.as_str(), s.clone())).collect();
    let mut options = CompileOptions::named(kind);
    for g in std::iter::once("p".to_string()).chain((0..optimizer.slots()).map(|k| format!("o{k}")))
    {
        for n in names {
            options = options.donate(&format!("{g}.{n}"), &format!("new.{g}.{n}"));
        }
    }
    let program = compile(&spec_refs, options, |tracer, t| {
        let named: BTreeMap<&str, &Tensor> = specs
            .iter()
            .map(|(n, _)| n.as_str())
            .zip(t.iter())
            .collect();
        let ps: Params<Tensor> = names
            .iter()
            .map(|n| (n.clone(), named[format!("p.{n}").as_str()].clone()))
            .collect();
        let batch: Vec<Tensor> = specs
            .iter()
            .zip(t)
            .filter(|((n, _), _)| n.starts_with("b."))
            .map(|(_, t)| t.clone())
            .collect();
        let (loss, aux) = loss_fn(model, &ps, &batch).split();
        if !loss.shape().is_empty() {
            return Err(nitro_graph::GraphError::Backend(format!(
                "the loss function returned shape {:?}; it must return a scalar (reduce with mean or sum)",
                loss.shape()
            )));
        }
        let p_refs: Vec<&Tensor> = names.iter().map(|n| &ps[n]).collect();
        let grads = tracer.grad(&loss, &p_refs)?;
        let ok = loss.abs().lt(&loss.scalar_like(f64::INFINITY));
        let slot = |k: usize, n: &str| named[format!("o{k}.{n}").as_str()].clone();
        let h = |n: &str| named[format!("h.{n}").as_str()].clone();
        let mut out = vec![("loss".to_string(), loss)];
        out.extend(aux.into_iter().map(|(p, t)| (format!("aux.{p}"), t)));
        if with_grads {
            out.extend(
                names
                    .iter()
                    .zip(&grads)
                    .map(|(n, g)| (format!("grad.{n}"), g.clone())),
            );
        }
        out.extend(optimizer_update(
            optimizer, names, &p_refs, &grads, &slot, &h, &ok,
        ));
        Ok(out)
    });
    program.map_err(|source| RunError::Compile {
        program: kind,
        source: Box::new(source),
    })
}
