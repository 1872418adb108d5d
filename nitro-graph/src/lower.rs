//! Lowering, the stage every backend shares: [`ProgramDesc`] is a graph
//! taken once through the passes, fusion and the memory plan, with its
//! signature, returned names and donations, and [`CompileOptions`] says how.
//! The CPU program (`exec`) and the CUDA program (`backend::cuda`) are
//! both built from a description; this module knows neither of them, so
//! the dependency runs one way: `exec` -> `backend` -> `lower` -> `plan`,
//! `fusion`, `passes`, `ir`.

use crate::error::{GraphError, Result};
use crate::fusion::{schedule, Kernel, Rules, Schedule};
use crate::ir::{Graph, TensorSpec};
use crate::passes::{default_pipeline, optimize, Pass};
use crate::plan::{plan, MemoryPlan};
use nitro_device::collective::Communicator;
use nitro_device::HostArray as Array;
use std::time::Instant;

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

/// A graph optimised, scheduled and planned once, and everything a caller
/// needs to lay out arguments and read results, whatever the backend.
#[derive(Clone, Debug)]
pub struct ProgramDesc {
    name: String,
    graph: Graph,
    schedule: Schedule,
    plan: MemoryPlan,
    stats: ProgramStats,
    returned: Vec<String>,
    donated: Vec<(String, String)>,
    /// The world size of its all-reduces, if it has any.
    world_size: Option<usize>,
}

impl ProgramDesc {
    /// Check the donations, run the passes, schedule (under the backend's
    /// fusion `rules`) and plan `graph`: the part of compiling every backend
    /// shares, done once.
    pub fn lower(mut graph: Graph, options: CompileOptions, rules: Rules) -> Result<ProgramDesc> {
        let start = Instant::now();
        let mut donate = Vec::new();
        for (input, output) in &options.donate {
            let known =
                |names: Vec<&String>| names.into_iter().cloned().collect::<Vec<_>>().join(", ");
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
        let world_size = collective_world(&graph, &options.name)?;
        let sched: Schedule = schedule(&graph, rules);
        let memory = plan(&graph, &sched, &donate);
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
                .filter(|k| matches!(k, Kernel::Fused(_) | Kernel::Epilogue { .. }))
                .count(),
            peak_bytes: memory.peak_bytes,
            unshared_bytes: memory.unshared_bytes,
            in_place: memory.in_place.len(),
            compile_ms: start.elapsed().as_secs_f64() * 1e3,
        };
        Ok(ProgramDesc {
            name: options.name,
            graph,
            schedule: sched,
            plan: memory,
            stats,
            returned,
            donated: options.donate,
            world_size,
        })
    }

    /// The number of processes its all-reduces sum over; `None` when it has
    /// none (it then runs alone or in any group alike).
    pub fn world_size(&self) -> Option<usize> {
        self.world_size
    }

    /// Check that the program may run with `comm` (or alone, with `None`):
    /// a program with all-reduces over N > 1 processes needs a group of
    /// exactly N; one over a world of one runs alone or in a group of one.
    pub fn check_world(&self, comm: Option<&dyn Communicator>) -> Result<()> {
        let Some(compiled) = self.world_size else {
            return Ok(());
        };
        let given = comm.map_or(1, |c| c.world_size());
        if given == compiled {
            return Ok(());
        }
        Err(GraphError::World {
            program: self.name.clone(),
            compiled,
            given: match comm {
                None => "alone".into(),
                Some(c) => format!("in a group of {}", c.world_size()),
            },
            hint: match comm {
                None if compiled > 1 => {
                    "call `run_with` with the process group's communicator (launch under mpirun -n N)"
                }
                _ => "trace and compile it again for this world (the world size is part of its graph and key)",
            },
        })
    }

    /// The program's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The optimised graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The kernel schedule of the optimised graph.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// The memory plan every backend binds buffers by.
    pub fn plan(&self) -> &MemoryPlan {
        &self.plan
    }

    /// Input names and signatures, in call order.
    pub fn inputs(&self) -> Vec<(String, TensorSpec)> {
        self.graph
            .inputs
            .iter()
            .map(|i| (i.name.clone(), i.spec.clone()))
            .collect()
    }

    /// Names of the outputs a call returns, in order (donated outputs are
    /// written into their inputs instead).
    pub fn returned_names(&self) -> &[String] {
        &self.returned
    }

    /// The (input, output) donations it was compiled with.
    pub fn donations(&self) -> &[(String, String)] {
        &self.donated
    }

    /// Figures: kernels, peak bytes, compile time.
    pub fn stats(&self) -> &ProgramStats {
        &self.stats
    }

    /// Check arity and every input's dtype and shape.
    pub fn check_signature(&self, inputs: &[Array]) -> Result<()> {
        self.check_specs(inputs.iter().map(|a| a.spec()))
    }

    /// [`ProgramDesc::check_signature`] over the inputs' specs alone.
    pub fn check_specs<'a>(
        &self,
        given: impl ExactSizeIterator<Item = &'a TensorSpec>,
    ) -> Result<()> {
        if given.len() != self.graph.inputs.len() {
            return Err(GraphError::Arity {
                program: self.name.clone(),
                expected: self.graph.inputs.len(),
                got: given.len(),
                names: self
                    .graph
                    .inputs
                    .iter()
                    .map(|i| i.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        for (decl, given) in self.graph.inputs.iter().zip(given) {
            if &decl.spec != given {
                return Err(GraphError::Signature {
                    program: self.name.clone(),
                    input: decl.name.clone(),
                    expected: decl.spec.clone(),
                    given: given.clone(),
                });
            }
        }
        Ok(())
    }

    /// Spec of output `name`, if the graph has it.
    pub fn output_spec(&self, name: &str) -> Option<&TensorSpec> {
        let o = self.graph.output_index(name)?;
        Some(&self.graph.nodes[self.graph.outputs[o].1].spec)
    }

    pub(crate) fn add_compile_ms(&mut self, ms: f64) {
        self.stats.compile_ms += ms;
    }
}

/// The one world size of `graph`'s all-reduces: a program sums over one
/// process group, so two sizes in one graph are refused.
fn collective_world(graph: &Graph, program: &str) -> Result<Option<usize>> {
    let mut sizes = graph.nodes.iter().filter_map(|n| match n.op {
        crate::ir::Op::AllReduceSum { world_size } => Some(world_size),
        _ => None,
    });
    let Some(first) = sizes.next() else {
        return Ok(None);
    };
    match sizes.find(|&w| w != first) {
        None => Ok(Some(first)),
        Some(other) => Err(GraphError::Backend(format!(
            "program `{program}` all-reduces over {first} and over {other} processes: \
             one program runs in one process group; trace every all_reduce_sum with the group's world_size()"
        ))),
    }
}
