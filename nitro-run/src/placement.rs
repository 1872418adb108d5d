//! Where a handle's programs run (`Nitro::use_device`) and where its
//! params, state, optimizer slots and Device values live between calls.
//!
//! Device-neutral: it is written against nitro-graph's [`Runtime`] (an
//! opened device: residency, staged uploads), [`Executable`] (a program for
//! one device, donation behind [`Executable::run_values`]) and [`Value`],
//! whose CUDA side is a stub in a build without the `cuda` feature, so no
//! line here depends on the feature.
//!
//! On the CPU the host arrays are the only copy. On a GPU they are
//! *resident*: uploaded once when the first program runs, updated
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
//! upload on the copy stream ([`Values::prepare_batch`]), so the next
//! batch's transfer runs while the current step computes. The next step's
//! main stream waits on that copy's event, on the device.
//!
//! **One sync point.** After a train step the host copies of params, state
//! and optimizer slots are stale. [`Values::sync_host`] is the only way
//! they become fresh again, and it runs before every host read: each
//! checkpoint save, `export`, and the end of every `train()` call, whatever
//! way it ends (finished, interrupted, early stop, error). So the public
//! readers (`params()`, `state()`, `checkpoint`, safetensors) always see
//! the latest values, and they assert it in debug builds. Host writes go
//! the other way: a resume or a safetensors load replaces the host arrays
//! and drops the resident copies ([`Values::host_replaced`]); a Device value
//! written on the host (`set_device`, a schedule) marks the resident Device
//! values dirty and they are uploaded before the next call.
//!
//! **Data parallel on GPUs.** In a world larger than one, opening a GPU
//! also bootstraps this rank's NCCL communicator on it over the process
//! group (every rank opens its device at the same point of the command, so
//! the collective bootstrap lines up), and each call's all-reduces sum
//! device buffers through it ([`Group`]); CPU programs sum host buffers
//! through the group's communicator.

use std::sync::Arc;

use nitro_device::collective::Communicator;
use nitro_device::cuda::NcclCommunicator;
use nitro_device::DeviceError;
use nitro_graph::{Array, Device, Executable, GraphError, Group, Runtime, Value};

use crate::dist::Distributed;
use crate::error::{Result, RunError};

/// A step's batch inputs: host arrays, or values already on their way to
/// the device (staged by [`Values::prepare_batch`]).
pub(crate) enum BatchInputs {
    /// On the host; a GPU call stages them when it runs.
    Host(Vec<Array>),
    /// Staged on the handle's runtime (queued uploads on a GPU).
    Staged(Vec<Value>),
}

/// The fix named by every error about running on a GPU.
const CPU_FIX: &str = "run on the CPU with `--device cpu` (`Device::Cpu`)";

/// The handle's value store: params, state, optimizer slots and Device
/// values on the host, and where programs run with, on a GPU, their
/// resident copies. The only place that moves them in and out of programs.
pub(crate) struct Values {
    /// Parameters, in the layout's order.
    pub params: Vec<Array>,
    /// Model state, in the layout's order.
    pub state: Vec<Array>,
    /// Optimizer slots: slot `k` of every parameter, slot after slot.
    pub opt: Vec<Array>,
    /// Device fields' values, in declaration order.
    pub device: Vec<Array>,
    placement: Placement,
}

/// The execution device and, on a GPU, the resident values.
struct Placement {
    runtime: Runtime,
    /// This rank's NCCL communicator on the GPU, in a world larger than one.
    nccl: Option<Arc<NcclCommunicator>>,
    /// Whether the host params/state/opt are older than the resident ones.
    host_stale: bool,
    resident: Option<Resident>,
}

/// Device copies of the handle's arrays, in the host vectors' order.
struct Resident {
    params: Vec<Value>,
    state: Vec<Value>,
    opt: Vec<Value>,
    device: Vec<Value>,
    /// A Device value changed on the host since `device` was uploaded.
    device_dirty: bool,
}

impl Placement {
    fn device(&self) -> Device {
        self.runtime.device()
    }
}

/// Runs `run` on one argument list made of the handle's value groups
/// (params, state, optimizer slots when present, Device values) followed by
/// `extra`, moving the values in and back out without copies: host arrays
/// for a CPU program, resident values for a GPU one.
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

/// A device layer error, with the rebuild fix when CUDA is not compiled in.
fn open_error(device: Device, e: DeviceError) -> RunError {
    match e {
        DeviceError::BuiltWithoutCuda(_) => RunError::Device {
            device,
            reason: "nitro was built without CUDA".into(),
            fix: "rebuild with `--features cuda`, or run on the CPU with `--device cpu`",
        },
        e => device_error(device, e.to_string()),
    }
}

impl Values {
    /// Values on the host, programs on the CPU.
    pub(crate) fn on_cpu(
        params: Vec<Array>,
        state: Vec<Array>,
        opt: Vec<Array>,
        device: Vec<Array>,
    ) -> Values {
        Values {
            params,
            state,
            opt,
            device,
            placement: Placement {
                runtime: Runtime::Cpu,
                nccl: None,
                host_stale: false,
                resident: None,
            },
        }
    }

    /// The device programs run on.
    pub(crate) fn device(&self) -> Device {
        self.placement.device()
    }

    /// Whether the host params/state/opt hold the latest values.
    pub(crate) fn host_fresh(&self) -> bool {
        !self.placement.host_stale
    }

    /// Runs this handle's programs on `device` from now on: `Device::Cpu`,
    /// or `Device::Cuda(n)` (feature `cuda`, a driver and a GPU `n`). The
    /// GPU is opened now, so a missing driver is an error here, naming the
    /// fix, not at the first step. Switching back syncs the values to the
    /// host and frees the GPU copies. Programs compile on first use per
    /// device (the device is part of every compile key). In a world larger
    /// than one every rank calls this together: a GPU's NCCL communicator
    /// is bootstrapped over `dist` here.
    pub(crate) fn use_device(&mut self, device: Device, dist: &Distributed) -> Result<()> {
        if device == self.placement.device() {
            return Ok(());
        }
        self.sync_host()?;
        let runtime = Runtime::open(device).map_err(|e| open_error(device, e))?;
        let mut nccl = None;
        if let Runtime::Cuda(gpu) = &runtime {
            crate::ptx_store::install_global();
            tracing::info!(target: "nitro::setup", device = %device, gpu = runtime.name(), "programs run on the GPU");
            if dist.world_size() > 1 {
                let comm = NcclCommunicator::init(dist.group(), gpu).map_err(|e| RunError::Device {
                    device,
                    reason: format!("rank {} could not join NCCL: {e}", dist.rank()),
                    fix: "install NCCL (libnccl2) on every host, give every rank its own GPU \
                          (`--device cuda` takes the local rank's), or run on the CPU with `--device cpu`",
                })?;
                nccl = Some(Arc::new(comm));
            }
        }
        self.placement = Placement {
            runtime,
            nccl,
            host_stale: false,
            resident: None,
        };
        Ok(())
    }

    /// The sync point: copies the resident params, state and optimizer
    /// slots back to the host arrays if a train step changed them since.
    pub(crate) fn sync_host(&mut self) -> Result<()> {
        if !self.placement.host_stale {
            return Ok(());
        }
        let device = self.placement.device();
        let resident = self
            .placement
            .resident
            .as_ref()
            .expect("stale host values imply resident ones");
        let download = |values: &[Value], like: &[Array]| {
            values
                .iter()
                .zip(like)
                .map(|(v, a)| {
                    v.to_host(a.shape())
                        .map_err(|e| device_error(device, e.to_string()))
                })
                .collect::<Result<Vec<_>>>()
        };
        let params = download(&resident.params, &self.params)?;
        let state = download(&resident.state, &self.state)?;
        let opt = download(&resident.opt, &self.opt)?;
        self.params = params;
        self.state = state;
        self.opt = opt;
        self.placement.host_stale = false;
        Ok(())
    }

    /// The host params/state/opt were replaced (resume, safetensors): they
    /// are the truth now, and the resident copies are dropped.
    pub(crate) fn host_replaced(&mut self) {
        self.placement.host_stale = false;
        self.placement.resident = None;
    }

    /// The batch inputs of a coming step. On a GPU their upload is queued
    /// now, on the copy stream, so it overlaps whatever the device is
    /// running; on the CPU they stay on the host.
    pub(crate) fn prepare_batch(&self, arrays: Vec<Array>) -> Result<BatchInputs> {
        let runtime = &self.placement.runtime;
        if runtime.device() == Device::Cpu {
            return Ok(BatchInputs::Host(arrays));
        }
        arrays
            .into_iter()
            .map(|a| runtime.stage(a))
            .collect::<nitro_graph::Result<Vec<_>>>()
            .map(BatchInputs::Staged)
            .map_err(|e| device_error(runtime.device(), e.to_string()))
    }

    /// A Device value changed on the host: upload it before the next call.
    pub(crate) fn device_values_changed(&mut self) {
        if let Some(r) = self.placement.resident.as_mut() {
            r.device_dirty = true;
        }
    }

    /// Runs `exe` on the handle's values (params, state, optimizer slots
    /// when `with_opt`, Device values), then `middle` (scalars) and the batch
    /// `tail`. A CPU program borrows the host arrays (moved in and back, no
    /// copies); any other runs on the resident copies (see the module docs).
    /// `after_launch` runs once the program is queued, before the returned
    /// outputs are read back.
    pub(crate) fn run_placed(
        &mut self,
        exe: &Executable,
        comm: Option<&dyn Communicator>,
        with_opt: bool,
        middle: Vec<Array>,
        tail: BatchInputs,
        after_launch: impl FnOnce(&Values) -> Result<()>,
    ) -> Result<Vec<Array>> {
        let exec = |source: GraphError| RunError::Exec {
            program: exe.name().to_string(),
            source: Box::new(source),
        };
        if exe.device() != Device::Cpu {
            return self.run_resident(exe, comm, with_opt, middle, tail, after_launch);
        }
        let BatchInputs::Host(tail) = tail else {
            return Err(device_error(
                Device::Cpu,
                "a batch staged for a GPU reached a CPU program".into(),
            ));
        };
        let result = lend_values(
            [
                Some(&mut self.params),
                Some(&mut self.state),
                with_opt.then_some(&mut self.opt),
                Some(&mut self.device),
            ],
            middle.into_iter().chain(tail),
            // In a data-parallel job the train step's all-reduce sums over
            // the group; a world of one calls the program alone.
            |args| match comm {
                Some(c) => exe.run_with(args, Group::host(c)),
                None => exe.run(args),
            },
        );
        let outs = result.map_err(exec)?;
        after_launch(self)?;
        Ok(outs)
    }

    /// [`Values::run_placed`] for a device program: the handle's values are
    /// made resident on first use (and Device values re-uploaded when they
    /// changed); scalars are copied now on the main stream (idle here: the
    /// last call read its outputs back, so they take no pinned slot) and
    /// batch fields staged, unless `prepare_batch` queued them ahead.
    fn run_resident(
        &mut self,
        exe: &Executable,
        comm: Option<&dyn Communicator>,
        with_opt: bool,
        middle: Vec<Array>,
        tail: BatchInputs,
        after_launch: impl FnOnce(&Values) -> Result<()>,
    ) -> Result<Vec<Array>> {
        let device = self.placement.device();
        let exec = |source: GraphError| RunError::Exec {
            program: exe.name().to_string(),
            source: Box::new(source),
        };
        let dev_err = |e: GraphError| device_error(device, e.to_string());
        let runtime = self.placement.runtime.clone();
        let nccl = self.placement.nccl.clone();
        let upload = |arrays: &[Array]| {
            arrays
                .iter()
                .map(|a| runtime.resident(a))
                .collect::<nitro_graph::Result<Vec<_>>>()
        };
        if self.placement.resident.is_none() {
            // Host values are the truth whenever nothing is resident.
            debug_assert!(!self.placement.host_stale);
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
            resident.device = upload(&self.device).map_err(dev_err)?;
            resident.device_dirty = false;
        }
        let mut incoming = upload(&middle).map_err(dev_err)?;
        match tail {
            BatchInputs::Host(arrays) => {
                for a in arrays {
                    incoming.push(runtime.stage(a).map_err(dev_err)?);
                }
            }
            BatchInputs::Staged(staged) => incoming.extend(staged),
        }
        // The signature is checked before any resident value moves.
        let result = lend_values(
            [
                Some(&mut resident.params),
                Some(&mut resident.state),
                with_opt.then_some(&mut resident.opt),
                Some(&mut resident.device),
            ],
            incoming,
            |args| match comm {
                Some(host) => exe.run_values_with(
                    args,
                    Group {
                        host,
                        nccl: nccl.as_deref(),
                    },
                ),
                None => exe.run_values(args),
            },
        );
        if with_opt {
            // The step updated params, state and slots in place (even when
            // it failed part way): the host copies are stale from here on.
            self.placement.host_stale = true;
        }
        let outs = result.map_err(exec)?;
        // The step is queued, not finished: work done here overlaps it.
        after_launch(self)?;
        let desc = exe.desc();
        desc.returned_names()
            .iter()
            .zip(outs)
            .map(|(name, value)| {
                let spec = desc
                    .output_spec(name)
                    .expect("returned names are graph outputs");
                value.to_host(&spec.shape).map_err(exec)
            })
            .collect()
    }
}
