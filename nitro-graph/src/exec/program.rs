//! [`Program`]: the device-neutral description ([`ProgramDesc`], built by
//! `lower`) lowered to the CPU backend and callable with concrete arrays
//! (the CUDA program, `backend::cuda`, lowers the same description to
//! generated kernels; [`super::Executable`] is either).

use super::Array;
use crate::backend::cpu::{on_workers, CpuExecutable};
use crate::error::{GraphError, Result};
use crate::fusion::Rules;
use crate::ir::{Graph, TensorSpec};
pub use crate::lower::{CompileOptions, ProgramDesc, ProgramStats};
use crate::trace::{trace, Tensor, Tracer};
use nitro_device::collective::{CollectiveError, Communicator};
use std::time::Instant;

/// Programs whose intermediates total less than this run on the calling
/// thread (see [`Program::run`]).
const INLINE_BELOW_BYTES: usize = 256 * 1024;

/// A compiled, callable program.
pub struct Program {
    desc: ProgramDesc,
    exe: CpuExecutable,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Program({}, {} kernels)",
            self.desc.name(),
            self.desc.stats().kernels
        )
    }
}

/// Compile an already traced graph.
pub fn compile_graph(graph: Graph, options: CompileOptions) -> Result<Program> {
    // The CPU's fused kernels reduce row blocks in the same pass, it has
    // a direct convolution kernel, and its matmul runs epilogues on the
    // rows it finishes.
    let rules = Rules {
        reduce_tails: true,
        direct_conv: true,
        matmul_epilogue: true,
    };
    let mut desc = ProgramDesc::lower(graph, options, rules)?;
    let start = Instant::now();
    let exe = CpuExecutable::new(desc.graph(), desc.schedule());
    desc.add_compile_ms(start.elapsed().as_secs_f64() * 1e3);
    Ok(Program { desc, exe })
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
    ///
    /// A program with all-reduces over more than one process needs
    /// [`Program::run_with`].
    pub fn run(&self, inputs: &mut [Array]) -> Result<Vec<Array>> {
        self.run_inner(inputs, None)
    }

    /// [`Program::run`] in a process group: every all-reduce sums over the
    /// ranks of `comm`, which must have the world size the program was
    /// traced for ([`ProgramDesc::world_size`]). The communicator is used
    /// for this call only; the program never keeps it.
    pub fn run_with(&self, inputs: &mut [Array], comm: &dyn Communicator) -> Result<Vec<Array>> {
        self.run_inner(inputs, Some(comm))
    }

    fn run_inner(
        &self,
        inputs: &mut [Array],
        comm: Option<&dyn Communicator>,
    ) -> Result<Vec<Array>> {
        self.check_signature(inputs)?;
        self.desc.check_world(comm)?;
        let d = &self.desc;
        self.on_its_thread(|| self.exe.run(d.graph(), d.plan(), inputs, comm))
            .map_err(|source| self.collective_error(source))
    }

    /// A failed collective of this program, named.
    fn collective_error(&self, source: CollectiveError) -> GraphError {
        GraphError::Collective {
            program: self.desc.name().to_string(),
            source,
        }
    }

    /// `f` where this program's kernels run. A large program runs on a
    /// rayon worker, so the thread stepping through its kernels is one of
    /// the pool's threads rather than a third one competing with the
    /// spinning workers (measured here: the MLP step 6.3-8.6 ms -> 5.9 ms,
    /// stable), and the other workers stay awake until it returns
    /// (`on_workers`). A tiny one runs inline: waking a worker costs
    /// ~15 us, more than the whole call.
    fn on_its_thread<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        if self.desc.stats().unshared_bytes >= INLINE_BELOW_BYTES {
            on_workers(f)
        } else {
            f()
        }
    }

    /// Run once and report each kernel's wall time in milliseconds, with
    /// its description, slowest first (a poor man's profiler).
    pub fn profile(&self, inputs: &mut [Array]) -> Result<Vec<(f64, String)>> {
        self.profile_inner(inputs, None)
    }

    /// [`Program::profile`] in a process group, as [`Program::run_with`].
    pub fn profile_with(
        &self,
        inputs: &mut [Array],
        comm: &dyn Communicator,
    ) -> Result<Vec<(f64, String)>> {
        self.profile_inner(inputs, Some(comm))
    }

    fn profile_inner(
        &self,
        inputs: &mut [Array],
        comm: Option<&dyn Communicator>,
    ) -> Result<Vec<(f64, String)>> {
        self.check_signature(inputs)?;
        self.desc.check_world(comm)?;
        let d = &self.desc;
        let mut times = Vec::new();
        // On the thread `run` would use, so each kernel's time includes
        // the same wake-ups (from the caller's thread every parallel
        // kernel would also pay for waking the pool and being woken).
        self.on_its_thread(|| {
            self.exe
                .run_timed(d.graph(), d.plan(), inputs, comm, Some(&mut times))
        })
        .map_err(|source| self.collective_error(source))?;
        let mut rows: Vec<(f64, String)> = times
            .into_iter()
            .zip(self.exe.describe(d.graph()))
            .collect();
        rows.sort_by(|a, b| b.0.total_cmp(&a.0));
        Ok(rows)
    }

    /// The device-neutral description: graph, schedule, plan, signature,
    /// returned names and donations.
    pub fn desc(&self) -> &ProgramDesc {
        &self.desc
    }

    /// Check arity and every input's dtype and shape.
    pub fn check_signature(&self, inputs: &[Array]) -> Result<()> {
        self.desc.check_signature(inputs)
    }

    /// The program's name.
    pub fn name(&self) -> &str {
        self.desc.name()
    }

    /// The optimised graph.
    pub fn graph(&self) -> &Graph {
        self.desc.graph()
    }

    /// Input names and signatures, in call order.
    pub fn inputs(&self) -> Vec<(String, TensorSpec)> {
        self.desc.inputs()
    }

    /// Names of the outputs `run` returns, in order.
    pub fn returned_names(&self) -> &[String] {
        self.desc.returned_names()
    }

    /// Figures: kernels, peak bytes, compile time.
    pub fn stats(&self) -> &ProgramStats {
        self.desc.stats()
    }

    /// Kernels per call.
    pub fn kernel_count(&self) -> usize {
        self.desc.stats().kernels
    }

    /// Planned peak bytes of intermediates.
    pub fn peak_bytes(&self) -> usize {
        self.desc.stats().peak_bytes
    }

    /// Text listing: the optimised IR, then one line per kernel.
    pub fn listing(&self) -> String {
        let d = &self.desc;
        let mut s = format!(
            "program {} ({:?})\n{}\nkernels:\n",
            d.name(),
            d.stats(),
            d.graph()
        );
        for (i, line) in self.exe.describe(d.graph()).iter().enumerate() {
            s += &format!("  k{i}: {line}\n");
        }
        s
    }
}
