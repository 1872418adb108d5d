//! The CUDA backend (feature `cuda`): the same scheduled, planned graph the
//! CPU runs, lowered to CUDA C ([`codegen`]), compiled with NVRTC for the
//! device's own architecture and run on its stream ([`executable`]).
//!
//! [`CudaProgram`] is the entry point. It lowers the graph once through the
//! shared pipeline ([`ProgramDesc::lower`]: passes, schedule, memory plan,
//! the same description a CPU `Program` is built from; no CPU
//! program is built), then generates one CUDA kernel per fused group and per
//! data-movement or reduction kernel; matrix products go to cuBLAS, and
//! all-reduces to NCCL through the communicator a run is given
//! ([`CudaProgram::run_with`]; see `nitro_device::cuda::nccl`).
//! [`CudaProgram::generate`] stops before touching a device, so the
//! generated source can be printed and tested on any machine;
//! [`CudaProgram::compile_graph`] also compiles and loads it, and is where a
//! machine without a driver gets its error ("no CUDA driver found: ...").
//!
//! ```no_run
//! # use nitro_graph::backend::cuda::CudaProgram;
//! # use nitro_graph::{Array, CompileOptions, Device, TensorSpec};
//! let program = CudaProgram::compile(
//!     &[("x", TensorSpec::f32(&[1024]))],
//!     CompileOptions::named("double_tanh"),
//!     |_, t| Ok(vec![("y".into(), (t[0].clone() * t[0].clone()).tanh())]),
//!     Device::Cuda(0),
//! )?;
//! println!("{}", program.source());
//! let y = program.run(&mut [Array::new(&[1024], vec![0.5f32; 1024])?])?;
//! # Ok::<(), nitro_graph::GraphError>(())
//! ```

pub mod codegen;
pub mod emulate;
pub mod executable;
mod patches;

pub use codegen::{CudaSource, Step};
pub use executable::CudaExecutable;

use crate::error::{GraphError, Result};
use crate::fusion::Rules;
use crate::ir::{Graph, TensorSpec};
use crate::lower::{CompileOptions, ProgramDesc};
use crate::trace::{trace, Tensor, Tracer};
use nitro_device::cuda::{CudaBuffer, CudaDevice, NcclCommunicator};
use nitro_device::HostArray as Array;
use nitro_device::{Device, DeviceError};

fn backend(e: DeviceError) -> GraphError {
    GraphError::Backend(e.to_string())
}

/// A program lowered to CUDA: its generated source, and (when compiled for
/// a device) the loaded kernels.
pub struct CudaProgram {
    desc: ProgramDesc,
    source: CudaSource,
    exe: Option<CudaExecutable>,
}

impl std::fmt::Debug for CudaProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaProgram({}, {} kernels, {})",
            self.desc.name(),
            self.source.kernels.len(),
            if self.exe.is_some() {
                "loaded"
            } else {
                "source only"
            }
        )
    }
}

impl CudaProgram {
    /// Compile `graph` and generate its CUDA source, without a device.
    pub fn generate(graph: Graph, options: CompileOptions) -> Result<CudaProgram> {
        // The generated kernels fuse elementwise work only.
        let desc = ProgramDesc::lower(graph, options, Rules::default())?;
        let source = codegen::generate(desc.graph(), desc.schedule());
        Ok(CudaProgram {
            desc,
            source,
            exe: None,
        })
    }

    /// Compile `graph` for `device` (a `Device::Cuda`): generate, compile
    /// every kernel with NVRTC and load it.
    pub fn compile_graph(
        graph: Graph,
        options: CompileOptions,
        device: Device,
    ) -> Result<CudaProgram> {
        let Device::Cuda(ordinal) = device else {
            return Err(GraphError::Backend(format!(
                "CudaProgram runs on a CUDA device, not {device}; use nitro_graph::compile for the CPU"
            )));
        };
        let dev = CudaDevice::open(ordinal).map_err(backend)?;
        let mut p = CudaProgram::generate(graph, options)?;
        p.exe = Some(CudaExecutable::new(&dev, &p.source).map_err(backend)?);
        Ok(p)
    }

    /// Trace `f` over named input signatures and compile it for `device`.
    pub fn compile<F>(
        inputs: &[(&str, TensorSpec)],
        options: CompileOptions,
        f: F,
        device: Device,
    ) -> Result<CudaProgram>
    where
        F: FnOnce(&Tracer, &[Tensor]) -> Result<Vec<(String, Tensor)>>,
    {
        CudaProgram::compile_graph(trace(inputs, f)?, options, device)
    }

    /// The complete generated CUDA C module.
    pub fn source(&self) -> &str {
        &self.source.source
    }

    /// The generated module with its launch list.
    pub fn cuda(&self) -> &CudaSource {
        &self.source
    }

    /// The device-neutral description (graph, schedule, memory plan,
    /// signature, returned names, donations) the kernels were generated from.
    pub fn desc(&self) -> &ProgramDesc {
        &self.desc
    }

    /// The device it was loaded on (`None` for generated source only).
    pub fn device(&self) -> Option<&CudaDevice> {
        self.exe.as_ref().map(|e| e.device())
    }

    /// Text listing: one line per device step, then the CUDA source.
    pub fn listing(&self) -> String {
        let mut s = format!(
            "cuda program {} ({} steps, {} kernels)\n",
            self.desc.name(),
            self.source.steps.len(),
            self.source.kernels.len()
        );
        let graph = self.desc.graph();
        for (i, step) in self.source.steps.iter().enumerate() {
            s += &match step {
                Step::Launch { kernel, grid, .. } => format!("  s{i}: launch {kernel} {grid:?}\n"),
                Step::Gemm { node, .. } => {
                    format!(
                        "  s{i}: cublas gemm -> %{node}: {}\n",
                        graph.nodes[*node].spec
                    )
                }
                Step::AllReduce { node, .. } => {
                    format!(
                        "  s{i}: nccl all-reduce sum %{node}: {}\n",
                        graph.nodes[*node].spec
                    )
                }
            };
        }
        s + "\n" + &self.source.source
    }

    fn exe(&self) -> Result<&CudaExecutable> {
        self.exe.as_ref().ok_or_else(|| {
            GraphError::Backend(format!(
                "program `{}` was generated without a device; compile it with CudaProgram::compile_graph",
                self.desc.name()
            ))
        })
    }

    /// Run with device-resident inputs: donated outputs replace their
    /// inputs' contents, the others come back (in
    /// [`ProgramDesc::returned_names`] order) as new device buffers.
    ///
    /// A program with all-reduces over more than one process needs
    /// [`CudaProgram::run_device_with`]; alone, a world of one's all-reduce
    /// is the identity, as on the CPU.
    pub fn run_device(&self, inputs: &mut [CudaBuffer]) -> Result<Vec<CudaBuffer>> {
        self.run_device_inner(inputs, None)
    }

    /// [`CudaProgram::run_device`] in a process group: every all-reduce
    /// sums over the GPUs of `nccl` (this rank's communicator, on the
    /// program's device), which must have the world size the program was
    /// traced for. The communicator is used for this call only.
    pub fn run_device_with(
        &self,
        inputs: &mut [CudaBuffer],
        nccl: &NcclCommunicator,
    ) -> Result<Vec<CudaBuffer>> {
        self.run_device_inner(inputs, Some(nccl))
    }

    /// Check that the program may run with `nccl` (or alone, with `None`):
    /// the rule of [`ProgramDesc::check_world`], with NCCL in the place of
    /// the host communicator, and the communicator on the program's GPU.
    pub fn check_world(&self, nccl: Option<&NcclCommunicator>) -> Result<()> {
        if let (Some(c), Some(exe)) = (nccl, self.exe.as_ref()) {
            if c.device().ordinal() != exe.device().ordinal() {
                return Err(GraphError::Backend(format!(
                    "program `{}` runs on cuda:{} but its NCCL communicator is on cuda:{}; \
                     initialise the communicator on the program's device",
                    self.desc.name(),
                    exe.device().ordinal(),
                    c.device().ordinal()
                )));
            }
        }
        let Some(compiled) = self.desc.world_size() else {
            return Ok(());
        };
        let given = nccl.map_or(1, |c| c.world_size());
        if given == compiled {
            return Ok(());
        }
        Err(GraphError::World {
            program: self.desc.name().to_string(),
            compiled,
            given: match nccl {
                None => "alone".into(),
                Some(c) => format!("in a group of {}", c.world_size()),
            },
            hint: match nccl {
                None if compiled > 1 => {
                    "all-reduce on CUDA needs NCCL: call `run_with` (or `run_device_with`) with \
                     this rank's NcclCommunicator (NcclCommunicator::init over the process group, \
                     one GPU per rank; launch under mpirun -n N)"
                }
                _ => "trace and compile it again for this world (the world size is part of its graph and key)",
            },
        })
    }

    fn run_device_inner(
        &self,
        inputs: &mut [CudaBuffer],
        nccl: Option<&NcclCommunicator>,
    ) -> Result<Vec<CudaBuffer>> {
        let graph = self.desc.graph();
        if inputs.len() != graph.inputs.len() {
            return Err(GraphError::Arity {
                program: self.desc.name().to_string(),
                expected: graph.inputs.len(),
                got: inputs.len(),
                names: graph
                    .inputs
                    .iter()
                    .map(|i| i.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        self.check_world(nccl)?;
        self.exe()?
            .run(graph, self.desc.plan(), &self.source.steps, inputs, nccl)
            .map_err(backend)
    }

    /// Upload `inputs`, run, and copy results back: donated outputs into
    /// their inputs, the rest returned, exactly as `Program::run`.
    pub fn run(&self, inputs: &mut [Array]) -> Result<Vec<Array>> {
        self.run_inner(inputs, None)
    }

    /// [`CudaProgram::run`] in a process group, summing every all-reduce
    /// over the GPUs of `nccl` (see [`CudaProgram::run_device_with`]).
    pub fn run_with(&self, inputs: &mut [Array], nccl: &NcclCommunicator) -> Result<Vec<Array>> {
        self.run_inner(inputs, Some(nccl))
    }

    fn run_inner(
        &self,
        inputs: &mut [Array],
        nccl: Option<&NcclCommunicator>,
    ) -> Result<Vec<Array>> {
        self.desc.check_signature(inputs)?;
        self.check_world(nccl)?;
        let exe = self.exe()?;
        let dev = exe.device();
        let mut bufs = inputs
            .iter()
            .map(|a| dev.upload(a.data())?.reshape(a.shape()))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(backend)?;
        let outs = self.run_device_inner(&mut bufs, nccl)?;
        let (graph, plan) = (self.desc.graph(), self.desc.plan());
        for &(input, _) in plan.donations() {
            *inputs[input].data_mut() = bufs[input].download().map_err(backend)?;
        }
        plan.returned_outputs(graph)
            .into_iter()
            .map(|o| &graph.outputs[o])
            .zip(outs)
            .map(|(&(_, node), buf)| {
                Ok(Array::new(
                    &graph.nodes[node].spec.shape,
                    buf.download().map_err(backend)?,
                )?)
            })
            .collect()
    }
}
