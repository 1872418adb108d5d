//! A handle's compiled programs: each traced from the hooks once per handle
//! and kind, keyed in the process-wide cache by named parts *and* the
//! traced graph's content hash, compiled on a miss, and memoized on the
//! handle so every later call of that kind goes straight to the program.
//!
//! **Never a stale program.** The named parts (program kind, the mode
//! forward was traced in, experiment type, device, every GraphConst value, every input signature, routed
//! fields, optimizer structure) explain a miss in words; the graph hash
//! guarantees it. Anything the named parts cannot see (a `build_model` that
//! reads a Host value, a constant a closure captured) changes the graph and
//! so the key: the miss then reads "the traced graph differs (model
//! structure or a captured value)". Tracing costs a fraction of a
//! millisecond for the MLP step, once per handle and kind.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use nitro_cache::{CompileCache, KeyBuilder, Outcome};

use nitro_graph::exec::signature::{input_name, Bound, Role, Signature};
use nitro_graph::nn::Ctx;
use nitro_graph::{CompileOptions, Device, Graph, Tensor, Tracer};

use crate::convert::signature as signature_text;
use crate::error::{Result, RunError};
use crate::experiment::Experiment;
use crate::layout::{donated_roles, signature, Kind, Layout};
use crate::layout::{PAD_A, PAD_B};
use crate::trace::{
    apply, graph_error, micro_batch, trace_graph, HookArgs, LossTrace, Outputs, Returned,
};

/// The process-wide compile cache every handle shares: a second handle on
/// the same experiment with the same GraphConst values compiles nothing.
/// CPU and CUDA programs share it; the device is a key part, so they never
/// collide and a miss between them is explained as a device change.
pub(crate) static PROGRAMS: LazyLock<CompileCache<Executable>> = LazyLock::new(CompileCache::new);

/// A compiled program for one device: nitro-graph's device-neutral
/// executable (CPU program or CUDA program, one API).
pub(crate) use nitro_graph::Executable;

/// Compile counters of one program kind (`train_step`, `eval_step`,
/// `predict`, `trainstep`) in the process-wide cache.
pub fn cache_stats(kind: &str) -> nitro_cache::Stats {
    PROGRAMS.stats(kind)
}

/// The pile-up warnings shown so far in this process, oldest first (each
/// kind warns once; see `nitro_cache::CacheConfig`).
pub fn compile_warnings() -> Vec<String> {
    WARNINGS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

static WARNINGS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Reports a lookup's outcome: a compile's reason (printed when `print`
/// or `NITRO_LOG_COMPILES` is set, and returned), and a pile-up warning,
/// always printed: it must reach the user without a tracing subscriber.
pub(crate) fn announce(program: &str, outcome: Outcome, print: bool) -> Option<String> {
    let Outcome::Miss(why) = outcome else {
        return None;
    };
    let reason = why.to_string();
    tracing::info!(target: "nitro::compile", program, reason = %reason, "compiling");
    if print || nitro_cache::log_compiles() {
        eprintln!("nitro: compiling {reason}");
    }
    if let Some(warning) = &why.warning {
        eprintln!("nitro: warning: {warning}");
        WARNINGS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(warning.clone());
    }
    Some(reason)
}

/// Total successful compiles across all program kinds.
pub fn total_compiles() -> u64 {
    PROGRAMS.stats_all().values().map(|s| s.compiles).sum()
}

/// A compiled program with its typed signature and outputs.
#[derive(Clone)]
pub(crate) struct Compiled {
    pub exe: Executable,
    /// The argument groups the program takes, in order.
    pub sig: Arc<Signature>,
    /// What each returned value is, in return order.
    pub returned: Arc<[Returned]>,
}

impl Compiled {
    /// The program (graph, names, signature), whatever its device.
    pub fn program(&self) -> &Executable {
        &self.exe
    }

    /// The position of `r` among the returned values.
    pub fn position(&self, r: &Returned) -> Option<usize> {
        self.returned.iter().position(|x| x == r)
    }
}

/// The typed outputs of `program`, matched once by name to what the trace
/// returned.
pub(crate) fn typed_outputs(program: &Executable, traced: &[Returned]) -> Result<Arc<[Returned]>> {
    let by_name: HashMap<String, &Returned> = traced.iter().map(|r| (r.name(), r)).collect();
    program
        .returned_names()
        .iter()
        .map(|n| {
            by_name
                .get(n)
                .map(|r| (*r).clone())
                .ok_or_else(|| RunError::Compile {
                    program: "program",
                    source: Box::new(nitro_graph::GraphError::Backend(format!(
                        "returned value `{n}` was not traced"
                    ))),
                })
        })
        .collect()
}

/// Compile options for program `name` whose `roles` are donated: every
/// updated value into its input.
pub(crate) fn options_for(name: &str, roles: &[Role], sig: &Signature) -> CompileOptions {
    let mut options = CompileOptions::named(name);
    for &role in roles {
        for n in sig.names(role) {
            options = options.donate(
                &input_name(role, n),
                &Returned::Update(role, n.clone()).name(),
            );
        }
    }
    options
}

/// A handle's programs: its layout, the memo of compiled kinds, and the
/// reasons it compiled.
pub(crate) struct Programs {
    pub layout: Layout,
    memo: Vec<(Kind, Device, Compiled)>,
    log: Vec<String>,
}

impl Programs {
    pub fn new(layout: Layout) -> Programs {
        Programs {
            layout,
            memo: vec![],
            log: vec![],
        }
    }

    /// Why this handle compiled, one line per compile.
    pub fn log(&self) -> &[String] {
        &self.log
    }

    /// The graph of `kind`, traced from the hooks (nothing compiled).
    pub fn trace<E: Experiment>(
        &self,
        e: &E,
        model: &E::Model,
        kind: &Kind,
    ) -> Result<(Signature, Graph, Vec<Returned>)> {
        let sig = signature(&self.layout, kind);
        let (graph, returned) = trace_graph(kind.name(), &sig, |tracer, bound| {
            trace_body(e, model, &self.layout, kind, tracer, bound)
        })?;
        Ok((sig, graph, returned))
    }

    /// The program for `kind` on `device`: memoized on the handle, else
    /// traced, looked up in the process-wide cache and compiled on a miss
    /// (the reason is printed and kept in [`Programs::log`]).
    pub fn get<E: Experiment>(
        &mut self,
        e: &E,
        model: &E::Model,
        kind: &Kind,
        device: Device,
        print: bool,
    ) -> Result<Compiled> {
        if let Some((_, _, c)) = self.memo.iter().find(|(k, d, _)| k == kind && *d == device) {
            return Ok(c.clone());
        }
        let (sig, graph, traced) = self.trace(e, model, kind)?;
        let key = key(e, &self.layout, kind, device, &sig, &graph.content_hash())?;
        let (exe, outcome) = PROGRAMS.get_or_compile(kind.name(), &key, None, || {
            build(
                graph,
                options_for(kind.name(), &donated_roles(kind), &sig),
                kind,
                device,
            )
        })?;
        if let Some(why) = announce(kind.name(), outcome, print) {
            self.log.push(why);
        }
        let returned = typed_outputs(&exe, &traced)?;
        let compiled = Compiled {
            exe,
            sig: Arc::new(sig),
            returned,
        };
        self.memo.push((kind.clone(), device, compiled.clone()));
        Ok(compiled)
    }
}

/// The program's key: what it is, for which experiment type and device,
/// every GraphConst by value, every input signature, the optimizer
/// structure, and the traced graph itself.
fn key<E: Experiment>(
    e: &E,
    layout: &Layout,
    kind: &Kind,
    device: Device,
    sig: &Signature,
    graph_hash: &str,
) -> Result<nitro_cache::Key> {
    let mut b = KeyBuilder::new()
        .part("program", kind.name())
        .part("mode", kind.mode().name())
        .part("experiment", std::any::type_name::<E>())
        .part("device", &device.to_string());
    for (name, value) in e.graph_const_values() {
        b = b.graph_const(name, &value.to_string());
    }
    for (name, spec) in sig.inputs() {
        b = b.input_sig(&name, &signature_text(&spec));
    }
    b = b
        .structure("forward_fields", &layout.forward_fields)
        .structure("loss_fields", &layout.loss_fields);
    if let Kind::Train {
        optimizer,
        clip,
        outputs,
        masked,
        world,
        ..
    } = kind
    {
        b = b
            .config("optimizer", &optimizer.structure())
            .config("clip", clip)
            .config("train_outputs", outputs)
            .config("short_batch_mask", masked)
            .config("world_size", world);
    }
    Ok(b.graph(graph_hash).finish()?)
}

fn build(graph: Graph, options: CompileOptions, kind: &Kind, device: Device) -> Result<Executable> {
    let compile_error = |source| RunError::Compile {
        program: kind.name(),
        source: Box::new(source),
    };
    Executable::compile_graph(graph, options, device).map_err(compile_error)
}

fn leaves(micro: Option<usize>, outputs: Vec<(String, Tensor)>) -> Outputs {
    outputs
        .into_iter()
        .map(|(path, t)| (Returned::Leaf { micro, path }, t))
        .collect()
}

/// The body of `kind` over the traced inputs `bound`.
fn trace_body<E: Experiment>(
    e: &E,
    model: &E::Model,
    layout: &Layout,
    kind: &Kind,
    tracer: &Tracer,
    bound: &Bound<'_, Tensor>,
) -> Result<Outputs> {
    let program = kind.name();
    let device = bound.tree(Role::Device);
    let view = e.compile_view(|name| device[name].clone());
    let args = HookArgs::<E> {
        view: &view,
        model,
        layout,
        width: kind.width(),
    };
    let ps = bound.tree(Role::Params);
    let st = bound.tree(Role::State);
    // Predict and eval are deterministic: no key, running statistics.
    let eval = Ctx::eval();
    match kind {
        Kind::Predict { .. } => {
            let traced = apply::<E>(
                &args,
                &eval,
                &ps,
                &st,
                &micro_batch(bound, 0),
                LossTrace::None,
            )?;
            Ok(leaves(None, traced.outputs))
        }
        Kind::Eval { .. } => {
            let traced = apply::<E>(
                &args,
                &eval,
                &ps,
                &st,
                &micro_batch(bound, 0),
                LossTrace::WithLastRow,
            )?;
            let h = |name| bound.get(Role::Hyper, name).map_err(graph_error(program));
            let (la, lb) = (
                traced.loss.expect("eval traces the loss"),
                traced.loss_last_row.expect("eval traces the last-row loss"),
            );
            let mut out = vec![(Returned::Loss, la * h(PAD_A)? - lb * h(PAD_B)?)];
            out.extend(leaves(None, traced.outputs));
            Ok(out)
        }
        Kind::Train { .. } => crate::train_step::trace::<E>(&args, kind, tracer, bound, ps, st),
    }
}
