//! The device-neutral surface a caller programs against, so that code which
//! may run on a GPU needs no `cfg(feature = "cuda")` (Candle's pattern: one
//! enum over the backends, and a dummy CUDA backend with the same types in a
//! build without the feature, see `backend::cuda` and `nitro_device::cuda`).
//!
//! - [`Executable`]: a compiled program for one device, the CPU [`Program`]
//!   or the [`CudaProgram`], with one API: its [`ProgramDesc`] (graph,
//!   signature, returned names, donations), `run` on host arrays, and
//!   [`Executable::run_values`] on [`Value`]s wherever they live, donated
//!   outputs replacing their inputs in place.
//! - [`Runtime`]: an opened device, where values are made resident (copied
//!   once and kept between calls), staged (uploads queued on the copy stream
//!   ahead of the call that reads them) and read back.
//! - [`Value`]: a program argument or result: a host array, a device buffer,
//!   or a staged upload.
//! - [`Group`]: what a call's all-reduces sum over in a process group: the
//!   host communicator (a CPU program's) and, for a GPU program, this
//!   rank's NCCL communicator on that GPU.
//!
//! On the CPU a value is its host array and residency costs nothing; with
//! the `cuda` feature off the CUDA variants still exist but can never hold a
//! value (their types are uninhabited), and opening a GPU is an error that
//! says how to rebuild.

use super::{compile_graph, Array, CompileOptions, Program, ProgramDesc};
use crate::backend::cuda::CudaProgram;
use crate::error::{GraphError, Result};
use crate::ir::{Graph, TensorSpec};
use crate::trace::{trace, Tensor, Tracer};
use nitro_device::collective::Communicator;
use nitro_device::cuda::{CudaBuffer, CudaDevice, NcclCommunicator, PendingUpload};
use nitro_device::{Device, DeviceError};
use std::sync::Arc;

fn backend(e: DeviceError) -> GraphError {
    GraphError::Backend(e.to_string())
}

/// A compiled program for one device (cheap to clone: the program is shared).
#[derive(Clone, Debug)]
pub enum Executable {
    /// Runs on the host.
    Cpu(Arc<Program>),
    /// Runs on a GPU (generated kernels over the same description; it holds
    /// no CPU program).
    Cuda(Arc<CudaProgram>),
}

/// The process group of one program call: a CPU program sums its
/// all-reduces over `host` (MPI on host buffers), a GPU program over `nccl`
/// (device buffers, this rank's communicator on the program's GPU). A GPU
/// program of a world larger than one given no `nccl` is refused by name,
/// never run alone.
#[derive(Clone, Copy, Debug)]
pub struct Group<'a> {
    /// The host communicator (every rank has one).
    pub host: &'a dyn Communicator,
    /// This rank's NCCL communicator, when its programs run on a GPU.
    pub nccl: Option<&'a NcclCommunicator>,
}

impl<'a> Group<'a> {
    /// A group of host processes only (CPU programs).
    pub fn host(host: &'a dyn Communicator) -> Group<'a> {
        Group { host, nccl: None }
    }
}

/// A program argument or result, where it lives.
#[derive(Debug)]
pub enum Value {
    /// On the host.
    Host(Array),
    /// On a GPU, shaped.
    Cuda(CudaBuffer),
    /// On its way to a GPU: an upload queued on the copy stream, with the
    /// spec it was sent as; the call that reads it waits for it on the device.
    Staged(TensorSpec, PendingUpload),
}

impl Value {
    /// Dtype and shape.
    pub fn spec(&self) -> TensorSpec {
        match self {
            Value::Host(a) => a.spec().clone(),
            Value::Cuda(b) => TensorSpec::new(b.dtype(), b.shape()),
            Value::Staged(spec, _) => spec.clone(),
        }
    }

    /// A host copy of the value shaped `shape` (a device buffer is
    /// downloaded; a staged upload has nothing to read yet).
    pub fn to_host(&self, shape: &[usize]) -> Result<Array> {
        match self {
            Value::Host(a) => Ok(a.clone().reshape(shape)?),
            Value::Cuda(b) => Ok(Array::new(shape, b.download().map_err(backend)?)?),
            Value::Staged(spec, _) => Err(GraphError::Backend(format!(
                "a staged upload ({spec}) is read by a program, not on the host"
            ))),
        }
    }

    /// The host array, if the value is one.
    fn into_host(self) -> Option<Array> {
        match self {
            Value::Host(a) => Some(a),
            _ => None,
        }
    }

    /// A placeholder left behind while a value is lent to a call.
    fn placeholder() -> Value {
        Value::Host(Array::scalar_f32(0.0))
    }
}

/// An opened device: where values are made resident, staged and read back.
#[derive(Clone, Debug)]
pub enum Runtime {
    /// The host: a value is its array.
    Cpu,
    /// A GPU.
    Cuda(CudaDevice),
}

impl Runtime {
    /// Open `device`: the CPU always; a GPU needs the `cuda` feature
    /// ([`DeviceError::BuiltWithoutCuda`] otherwise), a driver and the device.
    pub fn open(device: Device) -> std::result::Result<Runtime, DeviceError> {
        match device {
            Device::Cpu => Ok(Runtime::Cpu),
            Device::Cuda(n) => Ok(Runtime::Cuda(CudaDevice::open(n)?)),
        }
    }

    /// The device.
    pub fn device(&self) -> Device {
        match self {
            Runtime::Cpu => Device::Cpu,
            Runtime::Cuda(d) => Device::Cuda(d.ordinal()),
        }
    }

    /// The device's own name (the GPU model, or "cpu").
    pub fn name(&self) -> String {
        match self {
            Runtime::Cpu => "cpu".into(),
            Runtime::Cuda(d) => d.name().to_string(),
        }
    }

    /// A copy of `a` kept on this device between calls.
    pub fn resident(&self, a: &Array) -> Result<Value> {
        match self {
            Runtime::Cpu => Ok(Value::Host(a.clone())),
            Runtime::Cuda(d) => Ok(Value::Cuda(
                d.upload(a.data())
                    .and_then(|b| b.reshape(a.shape()))
                    .map_err(backend)?,
            )),
        }
    }

    /// `a` on its way to this device: on a GPU its upload is queued now on
    /// the copy stream (through pinned memory), so it overlaps whatever the
    /// device runs; the next call that takes it waits for it on the device.
    pub fn stage(&self, a: Array) -> Result<Value> {
        match self {
            Runtime::Cpu => Ok(Value::Host(a)),
            Runtime::Cuda(d) => {
                let pending = d.upload_staged(a.data()).map_err(backend)?;
                Ok(Value::Staged(a.spec().clone(), pending))
            }
        }
    }
}

impl Executable {
    /// Compile `graph` for `device`: a CPU [`Program`], or a [`CudaProgram`]
    /// compiled and loaded on the GPU (an error without the `cuda` feature
    /// or a driver, naming the fix).
    pub fn compile_graph(
        graph: Graph,
        options: CompileOptions,
        device: Device,
    ) -> Result<Executable> {
        match device {
            Device::Cpu => Ok(Executable::Cpu(Arc::new(compile_graph(graph, options)?))),
            Device::Cuda(_) => Ok(Executable::Cuda(Arc::new(CudaProgram::compile_graph(
                graph, options, device,
            )?))),
        }
    }

    /// Trace `f` over named input signatures and compile it for `device`.
    pub fn compile<F>(
        inputs: &[(&str, TensorSpec)],
        options: CompileOptions,
        f: F,
        device: Device,
    ) -> Result<Executable>
    where
        F: FnOnce(&Tracer, &[Tensor]) -> Result<Vec<(String, Tensor)>>,
    {
        Executable::compile_graph(trace(inputs, f)?, options, device)
    }

    /// The description every backend shares: graph, signature, returned
    /// names, donations, stats.
    pub fn desc(&self) -> &ProgramDesc {
        match self {
            Executable::Cpu(p) => p.desc(),
            Executable::Cuda(p) => p.desc(),
        }
    }

    /// The device it runs on.
    pub fn device(&self) -> Device {
        match self {
            Executable::Cpu(_) => Device::Cpu,
            Executable::Cuda(p) => Device::Cuda(p.device().map_or(0, |d| d.ordinal())),
        }
    }

    /// The program's name.
    pub fn name(&self) -> &str {
        self.desc().name()
    }

    /// The optimised graph.
    pub fn graph(&self) -> &Graph {
        self.desc().graph()
    }

    /// Names of the outputs a call returns, in order.
    pub fn returned_names(&self) -> &[String] {
        self.desc().returned_names()
    }

    /// Text listing: the CPU kernels, or the device steps and CUDA source.
    pub fn listing(&self) -> String {
        match self {
            Executable::Cpu(p) => p.listing(),
            Executable::Cuda(p) => p.listing(),
        }
    }

    /// Call with host arrays: donated outputs are written into their inputs,
    /// the others returned (a GPU program uploads and downloads around the
    /// call).
    pub fn run(&self, inputs: &mut [Array]) -> Result<Vec<Array>> {
        match self {
            Executable::Cpu(p) => p.run(inputs),
            Executable::Cuda(p) => p.run(inputs),
        }
    }

    /// [`Executable::run`] in a process group: all-reduces sum over the
    /// group's ranks (see [`Group`] and [`Program::run_with`]).
    pub fn run_with(&self, inputs: &mut [Array], group: Group<'_>) -> Result<Vec<Array>> {
        match self {
            Executable::Cpu(p) => p.run_with(inputs, group.host),
            Executable::Cuda(p) => match group.nccl {
                Some(nccl) => p.run_with(inputs, nccl),
                None => p.run(inputs),
            },
        }
    }

    /// [`Executable::run_values`] in a process group (see
    /// [`Executable::run_with`]).
    pub fn run_values_with(&self, args: &mut [Value], group: Group<'_>) -> Result<Vec<Value>> {
        self.run_values_in(args, Some(group))
    }

    /// Call with values wherever they live. Donated outputs replace their
    /// inputs in place (a resident buffer stays resident and is updated
    /// without a copy back); the other outputs are returned on the device,
    /// in [`ProgramDesc::returned_names`] order. On a GPU, a staged value is
    /// awaited on the device and a host one uploaded for this call; a CPU
    /// program takes host values only.
    pub fn run_values(&self, args: &mut [Value]) -> Result<Vec<Value>> {
        self.run_values_in(args, None)
    }

    fn run_values_in(&self, args: &mut [Value], group: Option<Group<'_>>) -> Result<Vec<Value>> {
        let desc = self.desc();
        let specs: Vec<TensorSpec> = args.iter().map(Value::spec).collect();
        desc.check_specs(specs.iter())?;
        match self {
            Executable::Cpu(p) => {
                desc.check_world(group.map(|g| g.host))?;
                if args.iter().any(|v| !matches!(v, Value::Host(_))) {
                    return Err(GraphError::Backend(format!(
                        "program `{}` runs on the CPU; a device value reached it",
                        desc.name()
                    )));
                }
                let mut arrays: Vec<Array> = args
                    .iter_mut()
                    .map(|v| match std::mem::replace(v, Value::placeholder()) {
                        Value::Host(a) => a,
                        _ => unreachable!("checked above"),
                    })
                    .collect();
                let result = match group {
                    Some(g) => p.run_with(&mut arrays, g.host),
                    None => p.run(&mut arrays),
                };
                for (v, a) in args.iter_mut().zip(arrays) {
                    *v = Value::Host(a);
                }
                Ok(result?.into_iter().map(Value::Host).collect())
            }
            Executable::Cuda(p) => {
                // Refused before any argument moves to the device.
                let nccl = group.and_then(|g| g.nccl);
                p.check_world(nccl)?;
                let device = p.device().cloned().ok_or_else(|| {
                    GraphError::Backend(format!(
                        "program `{}` was generated without a device",
                        desc.name()
                    ))
                })?;
                // Everything onto the device first (staged uploads awaited,
                // host arrays uploaded for this call and kept to be given
                // back), so a failed upload leaves every argument a value.
                let mut hosts: Vec<Option<Array>> = Vec::with_capacity(args.len());
                for v in args.iter_mut() {
                    match v {
                        Value::Cuda(_) => hosts.push(None),
                        Value::Host(a) => {
                            let b = device.upload(a.data()).and_then(|b| b.reshape(a.shape()));
                            let b = b.map_err(backend)?;
                            hosts.push(std::mem::replace(v, Value::Cuda(b)).into_host());
                        }
                        Value::Staged(..) => {
                            let Value::Staged(spec, pending) =
                                std::mem::replace(v, Value::placeholder())
                            else {
                                unreachable!("matched above")
                            };
                            let b = pending.ready().and_then(|b| b.reshape(&spec.shape));
                            *v = Value::Cuda(b.map_err(backend)?);
                            hosts.push(None);
                        }
                    }
                }
                let mut bufs: Vec<CudaBuffer> = args
                    .iter_mut()
                    .map(|v| match std::mem::replace(v, Value::placeholder()) {
                        Value::Cuda(b) => b,
                        _ => unreachable!("moved to the device above"),
                    })
                    .collect();
                let result = match nccl {
                    Some(nccl) => p.run_device_with(&mut bufs, nccl),
                    None => p.run_device(&mut bufs),
                };
                let donated: Vec<usize> = desc.plan().donations().map(|&(i, _)| i).collect();
                for (i, ((v, b), host)) in args.iter_mut().zip(bufs).zip(hosts).enumerate() {
                    *v = match host {
                        // A donated host input takes its new value back.
                        Some(mut a) if donated.contains(&i) && result.is_ok() => {
                            *a.data_mut() = b.download().map_err(backend)?;
                            Value::Host(a)
                        }
                        Some(a) => Value::Host(a),
                        None => Value::Cuda(b),
                    };
                }
                Ok(result?.into_iter().map(Value::Cuda).collect())
            }
        }
    }
}
