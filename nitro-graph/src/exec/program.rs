//! [`Program`]: a graph taken through the passes, fusion and the memory plan,
//! lowered to a backend, and callable with concrete arrays.

use super::Array;
use crate::backend::cpu::CpuExecutable;
use crate::error::{GraphError, Result};
use crate::fusion::{schedule, Kernel, Schedule};
use crate::ir::{Graph, TensorSpec};
use crate::passes::{default_pipeline, optimize, Pass};
use crate::plan::{plan, MemoryPlan};
use crate::trace::{trace, Tensor, Tracer};
use std::time::Instant;

/// Programs whose intermediates total less than this run on the calling
/// thread (see [`Program::run`]).
const INLINE_BELOW_BYTES: usize = 256 * 1024;

/// How to compile a graph.
pub struct CompileOptions {
    /// Name, used in errors and listings.
    pub name: String,
    /// (input, output) name pairs: the output's value replaces the input's
    /// buffer in place (params and optimizer state in a train step).
    pub donate: Vec<(String, String)>,
    /// The optimisation passes, in order.
    pub passes: Vec<Box<dyn Pass>>,
}

impl CompileOptions {
    /// Default passes, no donations.
    pub fn named(name: &str) -> CompileOptions {
        CompileOptions {
            name: name.to_string(),
            donate: vec![],
            passes: default_pipeline(),
        }
    }

    /// Add a donation of `input` to `output`.
    pub fn donate(mut self, input: &str, output: &str) -> CompileOptions {
        self.donate.push((input.to_string(), output.to_string()));
        self
    }
}

/// Figures about a compiled program.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProgramStats {
    /// Nodes after optimisation.
    pub nodes: usize,
    /// Kernels launched per call.
    pub kernels: usize,
    /// Fused elementwise kernels among them.
    pub fused_kernels: usize,
    /// Workspace bytes (the planned peak of intermediates).
    pub peak_bytes: usize,
    /// Bytes intermediates would need without buffer reuse.
    pub unshared_bytes: usize,
    /// Donated outputs written in place.
    pub in_place: usize,
    /// Milliseconds spent in passes, fusion, planning and lowering.
    pub compile_ms: f64,
}

/// A compiled, callable program.
pub struct Program {
    name: String,
    graph: Graph,
    plan: MemoryPlan,
    exe: CpuExecutable,
    stats: ProgramStats,
    returned: Vec<String>,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Program({}, {} kernels)", self.name, self.stats.kernels)
    }
}

/// Compile an already traced graph.
pub fn compile_graph(mut graph: Graph, options: CompileOptions) -> Result<Program> {
    let start = Instant::now();
    let mut donate = Vec::new();
    for (input, output) in &options.donate {
        let known = |names: Vec<&String>| names.into_iter().cloned().collect::<Vec<_>>().join(", ");
        let i = graph
            .input_index(input)
            .ok_or_else(|| GraphError::Unknown {
                kind: "donated input",
                name: input.clone(),
                known: known(graph.inputs.iter().map(|i| &i.name).collect()),
            })?;
        let o = graph
            .output_index(output)
            .ok_or_else(|| GraphError::Unknown {
                kind: "donation target output",
                name: output.clone(),
                known: known(graph.outputs.iter().map(|(n, _)| n).collect()),
            })?;
        let (ispec, ospec) = (&graph.inputs[i].spec, graph.spec(graph.outputs[o].1));
        if ispec != ospec {
            return Err(GraphError::Signature {
                program: options.name.clone(),
                input: format!("{input} (donated to `{output}`)"),
                expected: ispec.clone(),
                given: ospec.clone(),
            });
        }
        donate.push((i, o));
    }
    optimize(&mut graph, &options.passes);
    let sched: Schedule = schedule(&graph);
    let memory = plan(&graph, &sched, &donate);
    let exe = CpuExecutable::new(&graph, &sched);
    let returned = memory
        .returned_outputs(&graph)
        .into_iter()
        .map(|o| graph.outputs[o].0.clone())
        .collect();
    let stats = ProgramStats {
        nodes: graph.nodes.len(),
        kernels: sched.kernels.len(),
        fused_kernels: sched
            .kernels
            .iter()
            .filter(|k| matches!(k, Kernel::Fused(_)))
            .count(),
        peak_bytes: memory.peak_bytes,
        unshared_bytes: memory.unshared_bytes,
        in_place: memory.in_place.len(),
        compile_ms: start.elapsed().as_secs_f64() * 1e3,
    };
    Ok(Program {
        name: options.name,
        graph,
        plan: memory,
        exe,
        stats,
        returned,
    })
}

/// Trace `f` over named input signatures and compile it with `options`.
pub fn compile<F>(inputs: &[(&str, TensorSpec)], options: CompileOptions, f: F) -> Result<Program>
where
    F: FnOnce(&Tracer, &[Tensor]) -> Result<Vec<(String, Tensor)>>,
{
    compile_graph(trace(inputs, f)?, options)
}

/// Compile `f` for the signatures of `inputs` and run it once.
pub fn jit<F>(inputs: &[(&str, Array)], f: F) -> Result<Vec<Array>>
where
    F: FnOnce(&Tracer, &[Tensor]) -> Result<Vec<(String, Tensor)>>,
{
    let specs: Vec<(&str, TensorSpec)> =
        inputs.iter().map(|(n, a)| (*n, a.spec().clone())).collect();
    let program = compile(&specs, CompileOptions::named("jit"), f)?;
    let mut args: Vec<Array> = inputs.iter().map(|(_, a)| a.clone()).collect();
    program.run(&mut args)
}

impl Program {
    /// Call the program. Donated outputs are written into their inputs
    /// (which is why `inputs` is mutable); the other outputs are returned in
    /// the order of [`Program::returned_names`].
    pub fn run(&self, inputs: &mut [Array]) -> Result<Vec<Array>> {
        self.check_signature(inputs)?;
        // A large program runs on a rayon worker, so the thread stepping
        // through its kernels is one of the pool's threads rather than a
        // third one competing with the spinning workers (measured here: the
        // MLP step 6.3-8.6 ms -> 5.9 ms, stable). A tiny one runs inline:
        // waking a worker costs ~15 us, more than the whole call.
        if self.stats.unshared_bytes >= INLINE_BELOW_BYTES {
            Ok(rayon::scope(|_| {
                self.exe.run(&self.graph, &self.plan, inputs)
            }))
        } else {
            Ok(self.exe.run(&self.graph, &self.plan, inputs))
        }
    }

    /// Run once and report each kernel's wall time in milliseconds, with
    /// its description, slowest first (a poor man's profiler).
    pub fn profile(&self, inputs: &mut [Array]) -> Result<Vec<(f64, String)>> {
        self.check_signature(inputs)?;
        let mut times = Vec::new();
        self.exe
            .run_timed(&self.graph, &self.plan, inputs, Some(&mut times));
        let mut rows: Vec<(f64, String)> = times
            .into_iter()
            .zip(self.exe.describe(&self.graph))
            .collect();
        rows.sort_by(|a, b| b.0.total_cmp(&a.0));
        Ok(rows)
    }

    /// Check arity and every input's dtype and shape.
    pub fn check_signature(&self, inputs: &[Array]) -> Result<()> {
        if inputs.len() != self.graph.inputs.len() {
            return Err(GraphError::Arity {
                program: self.name.clone(),
                expected: self.graph.inputs.len(),
                got: inputs.len(),
                names: self
                    .graph
                    .inputs
                    .iter()
                    .map(|i| i.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        for (decl, given) in self.graph.inputs.iter().zip(inputs) {
            if &decl.spec != given.spec() {
                return Err(GraphError::Signature {
                    program: self.name.clone(),
                    input: decl.name.clone(),
                    expected: decl.spec.clone(),
                    given: given.spec().clone(),
                });
            }
        }
        Ok(())
    }

    /// The program's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The optimised graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Input names and signatures, in call order.
    pub fn inputs(&self) -> Vec<(String, TensorSpec)> {
        self.graph
            .inputs
            .iter()
            .map(|i| (i.name.clone(), i.spec.clone()))
            .collect()
    }

    /// Names of the outputs `run` returns, in order.
    pub fn returned_names(&self) -> &[String] {
        &self.returned
    }

    /// Figures: kernels, peak bytes, compile time.
    pub fn stats(&self) -> &ProgramStats {
        &self.stats
    }

    /// Kernels per call.
    pub fn kernel_count(&self) -> usize {
        self.stats.kernels
    }

    /// Planned peak bytes of intermediates.
    pub fn peak_bytes(&self) -> usize {
        self.stats.peak_bytes
    }

    /// Text listing: the optimised IR, then one line per kernel.
    pub fn listing(&self) -> String {
        let mut s = format!(
            "program {} ({:?})\n{}\nkernels:\n",
            self.name, self.stats, self.graph
        );
        for (i, line) in self.exe.describe(&self.graph).iter().enumerate() {
            s += &format!("  k{i}: {line}\n");
        }
        s
    }
}
