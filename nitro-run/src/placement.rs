//! Where a handle's programs run ([`Nitro::use_device`]) and where its
//! params, state, optimizer slots and Device values live between calls.
//!
//! On the CPU the host arrays are the only copy. On a GPU (feature `cuda`)
//! they are *resident*: uploaded once when the first program runs, updated
//! in place by the train step (buffer donation) and never copied back per
//! step. Each call uploads only its batch fields, through the device's
//! staged path (pinned memory on the copy stream, so no upload waits for
//! the main stream), and its scalar hyperparameters and changed Device
//! values (small copies on the main stream, idle at that point), and
//! downloads only the outputs it returns (the loss, metrics' outputs,
//! predictions).
//!
//! **Overlap.** The train loop hands each step a hook that runs once the
//! step is queued on the GPU and before its loss is read back: it takes
//! the next window (gathered meanwhile on another thread) and queues its
//! upload on the copy stream ([`Nitro::prepare_batch`]), so the next
//! batch's transfer runs while the current step computes. The next step's
//! main stream waits on that copy's event, on the device.
//!
//! **One sync point.** After a train step the host copies of params, state
//! and optimizer slots are stale. [`Nitro::sync_host`] is the only way
//! they become fresh again, and it runs before every host read: each
//! checkpoint save, `export`, and the end of every `train()` call, whatever
//! way it ends (finished, interrupted, early stop, error). So the public
//! readers (`params()`, `state()`, `checkpoint`, safetensors) always see
//! the latest values, and they assert it in debug builds. Host writes go
//! the other way: a resume or a safetensors load replaces the host arrays
//! and drops the resident copies ([`Nitro::host_replaced`]); a Device value
//! written on the host (`set_device`, a schedule) marks the resident Device
//! values dirty and they are uploaded before the next call.

use nitro_graph::{Array, Device};

use crate::error::{Result, RunError};
use crate::experiment::Experiment;
use crate::handle::Nitro;

#[cfg(feature = "cuda")]
use nitro_device::cuda::{CudaBuffer, CudaDevice, PendingUpload};

/// A step's batch inputs: host arrays, or (GPU) arrays whose upload is
/// already queued on the copy stream.
pub(crate) enum BatchInputs {
    /// On the host; a GPU call uploads them when it runs.
    Host(Vec<Array>),
    /// Queued by [`Nitro::prepare_batch`], with the shapes they were sent as.
    #[cfg(feature = "cuda")]
    Staged(Vec<(nitro_graph::TensorSpec, PendingUpload)>),
}

/// The fix named by every error about running on a GPU.
const CPU_FIX: &str = "run on the CPU with `--device cpu` (`Device::Cpu`)";

/// The handle's execution device and, on a GPU, its resident values.
pub(crate) struct Placement {
    device: Device,
    /// Whether the host params/state/opt are older than the resident ones.
    host_stale: bool,
    #[cfg(feature = "cuda")]
    gpu: Option<CudaDevice>,
    #[cfg(feature = "cuda")]
    resident: Option<Resident>,
}

/// A per-call input on its way to the GPU.
#[cfg(feature = "cuda")]
enum Incoming {
    /// Copied on the main stream.
    Now(CudaBuffer),
    /// Queued on the copy stream; the main stream waits for it.
    Queued(PendingUpload),
}

/// Device copies of the handle's arrays, in the host vectors' order.
#[cfg(feature = "cuda")]
struct Resident {
    params: Vec<CudaBuffer>,
    state: Vec<CudaBuffer>,
    opt: Vec<CudaBuffer>,
    device: Vec<CudaBuffer>,
    /// A Device value changed on the host since `device` was uploaded.
    device_dirty: bool,
}

impl Placement {
    /// Programs run on the CPU; the host arrays are the only copy.
    pub(crate) fn cpu() -> Placement {
        Placement {
            device: Device::Cpu,
            host_stale: false,
            #[cfg(feature = "cuda")]
            gpu: None,
            #[cfg(feature = "cuda")]
            resident: None,
        }
    }

    /// The device programs run on.
    pub(crate) fn device(&self) -> Device {
        self.device
    }

    /// Whether the host params/state/opt hold the latest values.
    pub(crate) fn host_fresh(&self) -> bool {
        !self.host_stale
    }
}

/// Runs `run` on one argument list made of the handle's value groups
/// (params, state, optimizer slots when present, Device values) followed by
/// `extra`, moving the values in and back out without copies: host arrays
/// for a CPU program, resident buffers for a GPU one.
pub(crate) fn lend_values<T, R>(
    mut groups: [Option<&mut Vec<T>>; 4],
    extra: impl IntoIterator<Item = T>,
    run: impl FnOnce(&mut [T]) -> R,
) -> R {
    let sizes = groups.each_ref().map(|g| g.as_ref().map_or(0, |g| g.len()));
    let mut args: Vec<T> = Vec::with_capacity(sizes.iter().sum());
    for group in groups.iter_mut().flatten() {
        args.append(group);
    }
    args.extend(extra);
    let result = run(&mut args);
    let mut rest = args.into_iter();
    for (group, n) in groups.iter_mut().zip(sizes) {
        if let Some(group) = group {
            group.extend(rest.by_ref().take(n));
        }
    }
    result
}

/// The error for a device this process cannot use.
pub(crate) fn device_error(device: Device, reason: String) -> RunError {
    RunError::Device {
        device,
        reason,
        fix: CPU_FIX,
    }
}

impl<E: Experiment> Nitro<E> {
    /// Runs this handle's programs on `device` from now on: `Device::Cpu`,
    /// or `Device::Cuda(n)` (feature `cuda`, a driver and a GPU `n`). The
    /// GPU is opened now, so a missing driver is an error here, naming the
    /// fix, not at the first step. Switching back syncs the values to the
    /// host and frees the GPU copies. Programs compile on first use per
    /// device (the device is part of every compile key).
    pub fn use_device(&mut self, device: Device) -> Result<()> {
        if device == self.placement.device {
            return Ok(());
        }
        self.sync_host()?;
        match device {
            Device::Cpu => {
                self.placement = Placement::cpu();
                Ok(())
            }
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(_) => Err(RunError::Device {
                device,
                reason: "nitro was built without CUDA".into(),
                fix: "rebuild with `--features cuda`, or run on the CPU with `--device cpu`",
            }),
            #[cfg(feature = "cuda")]
            Device::Cuda(n) => {
                let gpu = CudaDevice::open(n).map_err(|e| device_error(device, e.to_string()))?;
                crate::ptx_store::install_global();
                tracing::info!(target: "nitro::setup", device = %device, gpu = gpu.name(), "programs run on the GPU");
                self.placement = Placement {
                    device,
                    host_stale: false,
                    gpu: Some(gpu),
                    resident: None,
                };
                Ok(())
            }
        }
    }

    /// The device this handle's programs run on.
    pub fn execution_device(&self) -> Device {
        self.placement.device
    }

    /// The sync point: copies the resident params, state and optimizer
    /// slots back to the host arrays if a train step changed them since.
    pub(crate) fn sync_host(&mut self) -> Result<()> {
        if !self.placement.host_stale {
            return Ok(());
        }
        #[cfg(feature = "cuda")]
        {
            let device = self.placement.device;
            let resident = self
                .placement
                .resident
                .as_ref()
                .expect("stale host values imply resident ones");
            let download = |bufs: &[CudaBuffer], like: &[nitro_graph::Array]| {
                bufs.iter()
                    .zip(like)
                    .map(|(b, a)| {
                        let data = b
                            .download()
                            .map_err(|e| device_error(device, e.to_string()))?;
                        nitro_graph::Array::new(a.shape(), data).map_err(|e| {
                            device_error(device, format!("a downloaded value does not fit: {e}"))
                        })
                    })
                    .collect::<Result<Vec<_>>>()
            };
            let params = download(&resident.params, &self.params)?;
            let state = download(&resident.state, &self.state)?;
            let opt = download(&resident.opt, &self.opt)?;
            self.params = params;
            self.state = state;
            self.opt = opt;
        }
        self.placement.host_stale = false;
        Ok(())
    }

    /// The host params/state/opt were replaced (resume, safetensors): they
    /// are the truth now, and the resident copies are dropped.
    pub(crate) fn host_replaced(&mut self) {
        self.placement.host_stale = false;
        #[cfg(feature = "cuda")]
        {
            self.placement.resident = None;
        }
    }

    /// The batch inputs of a coming step. On a GPU their upload is queued
    /// now, on the copy stream, so it overlaps whatever the device is
    /// running; on the CPU they stay on the host.
    pub(crate) fn prepare_batch(&self, arrays: Vec<Array>) -> Result<BatchInputs> {
        #[cfg(feature = "cuda")]
        if let Some(gpu) = &self.placement.gpu {
            let device = self.placement.device;
            return arrays
                .into_iter()
                .map(|a| {
                    let pending = gpu
                        .upload_staged(a.data())
                        .map_err(|e| device_error(device, e.to_string()))?;
                    Ok((a.spec().clone(), pending))
                })
                .collect::<Result<Vec<_>>>()
                .map(BatchInputs::Staged);
        }
        Ok(BatchInputs::Host(arrays))
    }

    /// A Device value changed on the host: upload it before the next call.
    pub(crate) fn device_values_changed(&mut self) {
        #[cfg(feature = "cuda")]
        if let Some(r) = self.placement.resident.as_mut() {
            r.device_dirty = true;
        }
    }

    /// Runs a CUDA program on the resident values plus the per-call inputs
    /// (`middle` scalars uploaded now through the staged path, then the
    /// batch `tail`, uploaded now or already queued), as `run_program` does
    /// on the CPU; `after_launch` runs once the program is queued, before
    /// the returned outputs are downloaded.
    #[cfg(feature = "cuda")]
    pub(crate) fn run_resident(
        &mut self,
        program: &nitro_graph::backend::cuda::CudaProgram,
        with_opt: bool,
        middle: Vec<Array>,
        tail: BatchInputs,
        after_launch: impl FnOnce(&Self) -> Result<()>,
    ) -> Result<Vec<Array>> {
        use nitro_graph::GraphError;
        let device = self.placement.device;
        let cpu = program.cpu();
        let exec = |source: GraphError| RunError::Exec {
            program: cpu.name().to_string(),
            source: Box::new(source),
        };
        let dev_err = |e: nitro_device::DeviceError| device_error(device, e.to_string());
        let gpu = self
            .placement
            .gpu
            .clone()
            .ok_or_else(|| device_error(device, "the GPU was not opened".into()))?;
        if self.placement.resident.is_none() {
            // Host values are the truth whenever nothing is resident.
            debug_assert!(!self.placement.host_stale);
            let upload = |arrays: &[Array]| {
                arrays
                    .iter()
                    .map(|a| gpu.upload(a.data()))
                    .collect::<std::result::Result<Vec<_>, _>>()
            };
            self.placement.resident = Some(Resident {
                params: upload(&self.params).map_err(dev_err)?,
                state: upload(&self.state).map_err(dev_err)?,
                opt: upload(&self.opt).map_err(dev_err)?,
                device: upload(&self.device).map_err(dev_err)?,
                device_dirty: false,
            });
        }
        let resident = self
            .placement
            .resident
            .as_mut()
            .expect("made resident above");
        if resident.device_dirty {
            for (buf, a) in resident.device.iter_mut().zip(&self.device) {
                let fresh = gpu.upload(a.data()).map_err(dev_err)?;
                *buf = fresh;
            }
            resident.device_dirty = false;
        }
        // The per-call inputs, checked against the program's signature and
        // queued on the copy stream before any resident buffer moves.
        let graph = cpu.graph();
        let first = resident.params.len()
            + resident.state.len()
            + if with_opt { resident.opt.len() } else { 0 }
            + resident.device.len();
        // Scalars (hyperparameters) are copied on the main stream, which is
        // idle here (the last call read its outputs back), so they take no
        // pinned slot; batch fields go through the staged path, or were
        // queued ahead by `prepare_batch`.
        let mut incoming: Vec<(nitro_graph::TensorSpec, Incoming)> = middle
            .iter()
            .map(|a| Ok((a.spec().clone(), Incoming::Now(gpu.upload(a.data())?))))
            .collect::<std::result::Result<_, nitro_device::DeviceError>>()
            .map_err(dev_err)?;
        match tail {
            BatchInputs::Host(arrays) => {
                for a in &arrays {
                    let queued = gpu.upload_staged(a.data()).map_err(dev_err)?;
                    incoming.push((a.spec().clone(), Incoming::Queued(queued)));
                }
            }
            BatchInputs::Staged(staged) => incoming.extend(
                staged
                    .into_iter()
                    .map(|(spec, queued)| (spec, Incoming::Queued(queued))),
            ),
        }
        if graph.inputs.len() != first + incoming.len() {
            return Err(exec(GraphError::Backend(format!(
                "the program takes {} inputs; the handle has {}",
                graph.inputs.len(),
                first + incoming.len()
            ))));
        }
        for (decl, (spec, _)) in graph.inputs[first..].iter().zip(&incoming) {
            if &decl.spec != spec {
                return Err(exec(GraphError::Backend(format!(
                    "input `{}` is {:?}{:?}; the program takes {:?}{:?}",
                    decl.name, spec.dtype, spec.shape, decl.spec.dtype, decl.spec.shape
                ))));
            }
        }
        let uploaded = incoming
            .into_iter()
            .map(|(_, i)| match i {
                Incoming::Now(buffer) => Ok(buffer),
                Incoming::Queued(queued) => queued.ready(),
            })
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(dev_err)?;
        let result = lend_values(
            [
                Some(&mut resident.params),
                Some(&mut resident.state),
                with_opt.then_some(&mut resident.opt),
                Some(&mut resident.device),
            ],
            uploaded,
            |args| program.run_device(args),
        );
        if with_opt {
            // The step updated params, state and slots in place (even when
            // it failed part way): the host copies are stale from here on.
            self.placement.host_stale = true;
        }
        let outs = result.map_err(exec)?;
        // The step is queued, not finished: work done here overlaps it.
        after_launch(self)?;
        cpu.returned_names()
            .iter()
            .zip(outs)
            .map(|(name, buf)| {
                let index = graph
                    .output_index(name)
                    .expect("returned names are graph outputs");
                let spec = &graph.nodes[graph.outputs[index].1].spec;
                let data = buf.download().map_err(dev_err)?;
                Array::new(&spec.shape, data).map_err(exec)
            })
            .collect()
    }
}
