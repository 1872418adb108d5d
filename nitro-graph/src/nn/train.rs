//! A self-contained classifier train step for users who drive nitro-graph
//! directly (no experiment): forward through a [`Layer`], mean softmax
//! cross-entropy, reverse pass, AdamW on every parameter, all in ONE
//! compiled program whose params and moments are updated in place.
//!
//! ```
//! use nitro_graph::nn::layers::{Activation, Chain, Dense};
//! use nitro_graph::nn::train::AdamStep;
//! use nitro_graph::Array;
//! let model = Chain::new().push(Dense::new(4, 8).with(Activation::Tanh)).push(Dense::new(8, 2));
//! let mut step = AdamStep::new(&model, model.init_params(0)?, &[16, 4], 1e-2)?;
//! let x = Array::new(&[16, 4], vec![0.5f32; 64])?;
//! let y = Array::new(&[16], vec![1i32; 16])?;
//! let first = step.step(&x, &y)?;
//! for _ in 0..20 {
//!     step.step(&x, &y)?;
//! }
//! assert!(step.step(&x, &y)? < first);
//! # Ok::<(), nitro_graph::GraphError>(())
//! ```

use super::layers::{Layer, Params};
use super::loss::softmax_cross_entropy;
use super::optim::{adam, AdamHyper};
use crate::error::Result;
use crate::exec::{Array, CompileOptions, Program};
use crate::ir::{Graph, TensorSpec};
use crate::trace::{trace, Tensor};
use nitro_device::DType;

/// Hyperparameter inputs, in call order after the batch.
const HYPER: [&str; 6] = ["lr", "beta1", "beta2", "eps", "weight_decay", "step"];

/// One compiled AdamW classifier step and the state it updates.
pub struct AdamStep {
    program: Program,
    /// Params, then first moments, then second moments, then x, y, hyperparameters.
    args: Vec<Array>,
    names: Vec<String>,
    updates: u64,
    trace_ms: f64,
}

/// The traced step and what it needs to run, before any backend sees it.
pub struct AdamStepGraph {
    /// The traced forward + backward + update graph.
    pub graph: Graph,
    /// Its name and donations (params, first and second moments).
    pub options: CompileOptions,
    /// Initial arguments: params, zero moments, zero batch, hyperparameters.
    pub args: Vec<Array>,
    /// Parameter paths, in argument order.
    pub names: Vec<String>,
    /// Milliseconds spent tracing (and differentiating).
    pub trace_ms: f64,
}

impl AdamStepGraph {
    /// Trace the step for f32 inputs of shape `x` (batch first) and integer
    /// labels `[batch]`, with learning rate `lr` (betas 0.9/0.999, eps 1e-8,
    /// no weight decay). Compile the graph for any backend.
    pub fn trace(
        model: &dyn Layer,
        params: &Params<Array>,
        x: &[usize],
        lr: f32,
    ) -> Result<AdamStepGraph> {
        let labels = TensorSpec::new(DType::I32, x.get(..1).unwrap_or(&[]));
        Self::trace_with(model, params, &TensorSpec::f32(x), &labels, lr)
    }

    /// [`AdamStepGraph::trace`] for inputs of any spec (e.g. `i32` token
    /// ids `[batch, time]`) and integer labels `y` shaped like the logits
    /// without their class axis (`[batch, time]` for a language model: the
    /// loss is the mean over every position).
    pub fn trace_with(
        model: &dyn Layer,
        params: &Params<Array>,
        x_spec: &TensorSpec,
        y_spec: &TensorSpec,
        lr: f32,
    ) -> Result<AdamStepGraph> {
        let x = &x_spec.shape[..];
        if x.is_empty() {
            return Err(crate::GraphError::shape(
                "AdamStep",
                "inputs need a batch axis",
                &[x],
                "pass [batch, ...]",
            ));
        }
        let names: Vec<String> = params.keys().cloned().collect();
        let np = names.len();
        let mut specs: Vec<(String, TensorSpec)> = vec![];
        for prefix in ["p", "m", "v"] {
            specs.extend(
                names
                    .iter()
                    .map(|n| (format!("{prefix}.{n}"), params[n].spec().clone())),
            );
        }
        specs.push(("x".into(), x_spec.clone()));
        specs.push(("y".into(), y_spec.clone()));
        specs.extend(HYPER.iter().map(|h| (h.to_string(), TensorSpec::f32(&[]))));
        let spec_refs: Vec<(&str, TensorSpec)> =
            specs.iter().map(|(n, s)| (n.as_str(), s.clone())).collect();
        let start = std::time::Instant::now();
        let graph = trace(&spec_refs, |tr, t| {
            let p: Params<Tensor> = names.iter().cloned().zip(t[..np].iter().cloned()).collect();
            let logits = model.apply(&p, "", &t[3 * np]);
            let loss = softmax_cross_entropy(&logits, &t[3 * np + 1], 0.0);
            let grads = tr.grad(&loss, &t[..np].iter().collect::<Vec<_>>())?;
            let h = &t[3 * np + 2..];
            let hyper = AdamHyper {
                lr: &h[0],
                beta1: &h[1],
                beta2: &h[2],
                eps: &h[3],
                weight_decay: &h[4],
                step: &h[5],
            };
            let mut out = vec![("loss".to_string(), loss)];
            let mut moments = vec![];
            for i in 0..np {
                let (p_new, m_new, v_new) =
                    adam(&t[i], &grads[i], &t[np + i], &t[2 * np + i], &hyper);
                out.push((format!("new.p.{}", names[i]), p_new));
                moments.push((format!("new.m.{}", names[i]), m_new));
                moments.push((format!("new.v.{}", names[i]), v_new));
            }
            out.extend(moments);
            Ok(out)
        })?;
        let trace_ms = start.elapsed().as_secs_f64() * 1e3;
        let mut options = CompileOptions::named("adam_train_step");
        for prefix in ["p", "m", "v"] {
            for n in &names {
                options = options.donate(&format!("{prefix}.{n}"), &format!("new.{prefix}.{n}"));
            }
        }
        let mut args: Vec<Array> = names.iter().map(|n| params[n].clone()).collect();
        for _ in 0..2 {
            args.extend(names.iter().map(|n| Array::zeros(params[n].spec())));
        }
        args.push(Array::zeros(x_spec));
        args.push(Array::zeros(y_spec));
        args.extend([lr, 0.9, 0.999, 1e-8, 0.0, 0.0].map(Array::scalar_f32));
        Ok(AdamStepGraph {
            graph,
            options,
            args,
            names,
            trace_ms,
        })
    }

    /// Index of the batch input `x` among the arguments (`y` follows it,
    /// then the hyperparameters, the update count last).
    pub fn x_index(&self) -> usize {
        3 * self.names.len()
    }
}

impl AdamStep {
    /// Trace and compile the step on the CPU (see [`AdamStepGraph::trace`]).
    pub fn new(model: &dyn Layer, params: Params<Array>, x: &[usize], lr: f32) -> Result<AdamStep> {
        Self::from_graph(AdamStepGraph::trace(model, &params, x, lr)?)
    }

    /// Trace and compile the step for inputs and labels of any spec (see
    /// [`AdamStepGraph::trace_with`]).
    pub fn with_specs(
        model: &dyn Layer,
        params: Params<Array>,
        x: &TensorSpec,
        y: &TensorSpec,
        lr: f32,
    ) -> Result<AdamStep> {
        Self::from_graph(AdamStepGraph::trace_with(model, &params, x, y, lr)?)
    }

    fn from_graph(g: AdamStepGraph) -> Result<AdamStep> {
        let AdamStepGraph {
            graph,
            options,
            args,
            names,
            trace_ms,
        } = g;
        let program = crate::exec::compile_graph(graph, options)?;
        Ok(AdamStep {
            program,
            args,
            names,
            updates: 0,
            trace_ms,
        })
    }

    /// Set a hyperparameter (`lr`, `beta1`, `beta2`, `eps`, `weight_decay`):
    /// a traced input, so this never recompiles.
    pub fn set_hyper(&mut self, name: &str, value: f32) -> Result<()> {
        let i = HYPER[..5].iter().position(|h| *h == name).ok_or_else(|| {
            crate::GraphError::Unknown {
                kind: "hyperparameter",
                name: name.to_string(),
                known: HYPER[..5].join(", "),
            }
        })?;
        let at = 3 * self.names.len() + 2 + i;
        self.args[at] = Array::scalar_f32(value);
        Ok(())
    }

    /// One update on batch (`x`, `y`); returns the loss before the update.
    pub fn step(&mut self, x: &Array, y: &Array) -> Result<f32> {
        let np = self.names.len();
        self.updates += 1;
        let last = self.args.len() - 1;
        self.args[3 * np] = x.clone();
        self.args[3 * np + 1] = y.clone();
        self.args[last] = Array::scalar_f32(self.updates as f32);
        let out = self.program.run(&mut self.args)?;
        Ok(out[0].item()? as f32)
    }

    /// Current parameters by path.
    pub fn params(&self) -> Params<Array> {
        self.names
            .iter()
            .cloned()
            .zip(self.args.iter().cloned())
            .collect()
    }

    /// The compiled program (for stats, listings, profiling).
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Run the step once more on the last batch, timing every kernel
    /// (see [`Program::profile`]); this performs a real update.
    pub fn profile(&mut self) -> Result<Vec<(f64, String)>> {
        self.program.profile(&mut self.args)
    }

    /// Milliseconds spent tracing (and differentiating) the step.
    pub fn trace_ms(&self) -> f64 {
        self.trace_ms
    }
}
