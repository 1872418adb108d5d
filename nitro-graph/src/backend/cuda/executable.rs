//! Running a generated module on a GPU: NVRTC compilation of every kernel
//! (in parallel, through nitro-device's PTX cache), a workspace of device
//! slots kept between calls, and the launch loop (kernels, cuBLAS products,
//! NCCL all-reduces, all on the device's one stream).
//!
//! Buffers are bound by the memory plan exactly as on the CPU: an input's
//! node reads the caller's device buffer, a literal reads a buffer uploaded
//! once, an intermediate reads its workspace slot. Donated outputs planned
//! in place are written by their fused kernel straight into the input's
//! buffer; the others are swapped in at the end of the call (slot and input
//! exchange buffers), so steady-state calls allocate only their returned
//! outputs.

use super::codegen::{Arg, CudaSource, Step};
use crate::ir::{Graph, NodeId, Op};
use crate::plan::{MemoryPlan, Storage};
use nitro_device::cuda::{
    CudaBuffer, CudaDevice, CudaKernel, GemmShape, GemmTypes, KernelArg, NcclCommunicator,
};
use nitro_device::{DType, DeviceError};
use std::collections::HashMap;
use std::sync::Mutex;

struct Workspace {
    slots: Vec<CudaBuffer>,
    literals: Vec<CudaBuffer>,
}

/// A generated module compiled and loaded on one GPU.
pub struct CudaExecutable {
    device: CudaDevice,
    kernels: HashMap<String, CudaKernel>,
    workspace: Mutex<Option<Workspace>>,
}

impl CudaExecutable {
    /// Compile every kernel of `source` for `device` (NVRTC, cached) and load it.
    pub fn new(device: &CudaDevice, source: &CudaSource) -> Result<CudaExecutable, DeviceError> {
        let units: Vec<String> = (0..source.kernels.len()).map(|i| source.unit(i)).collect();
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .clamp(1, 8);
        let per = units.len().div_ceil(threads).max(1);
        let ptx: Vec<Result<std::sync::Arc<str>, DeviceError>> = std::thread::scope(|s| {
            let handles: Vec<_> = units
                .chunks(per)
                .zip(source.kernels.chunks(per))
                .map(|(u, names)| {
                    s.spawn(move || {
                        u.iter()
                            .zip(names)
                            .map(|(unit, name)| device.compile(name, unit))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| {
                    h.join().unwrap_or_else(|_| {
                        vec![Err(DeviceError::Cuda {
                            op: "compile".into(),
                            detail: "a compile thread panicked".into(),
                        })]
                    })
                })
                .collect()
        });
        let mut kernels = HashMap::new();
        for (name, ptx) in source.kernels.iter().zip(ptx) {
            let k = device.load_kernels(&ptx?, std::slice::from_ref(name))?;
            kernels.insert(name.clone(), k.into_iter().next().expect("one kernel"));
        }
        Ok(CudaExecutable {
            device: device.clone(),
            kernels,
            workspace: Mutex::new(None),
        })
    }

    /// The device it runs on.
    pub fn device(&self) -> &CudaDevice {
        &self.device
    }

    fn new_workspace(&self, graph: &Graph, plan: &MemoryPlan) -> Result<Workspace, DeviceError> {
        let slots = plan
            .slots
            .iter()
            .map(|&(d, n)| self.device.alloc(d, n))
            .collect::<Result<_, _>>()?;
        let literals = plan
            .literal_values(graph)
            .iter()
            .map(|host| self.device.upload(host))
            .collect::<Result<_, _>>()?;
        Ok(Workspace { slots, literals })
    }

    /// Run with device-resident `inputs` (checked against the graph's
    /// signature). Donated outputs replace their inputs' contents; the other
    /// outputs are returned as new buffers, in graph output order.
    /// All-reduce steps sum through `nccl`; without one (a world of one
    /// run alone, which the caller checked) they are skipped.
    pub fn run(
        &self,
        graph: &Graph,
        plan: &MemoryPlan,
        steps: &[Step],
        inputs: &mut [CudaBuffer],
        nccl: Option<&NcclCommunicator>,
    ) -> Result<Vec<CudaBuffer>, DeviceError> {
        for (decl, buf) in graph.inputs.iter().zip(inputs.iter()) {
            if buf.dtype() != decl.spec.dtype {
                return Err(DeviceError::DType {
                    expected: decl.spec.dtype,
                    got: buf.dtype(),
                });
            }
            if buf.len() != decl.spec.numel() {
                return Err(DeviceError::Length {
                    shape: decl.spec.shape.clone(),
                    expected: decl.spec.numel(),
                    got: buf.len(),
                });
            }
            // A flat buffer (as uploaded from a host buffer) fits any shape
            // of its length; a shaped one must be the input's shape.
            let flat = buf.shape() == [buf.len()];
            if !flat && buf.shape() != decl.spec.shape.as_slice() {
                return Err(DeviceError::Shape {
                    expected: decl.spec.shape.clone(),
                    got: buf.shape().to_vec(),
                });
            }
        }
        let mut guard = self.workspace.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            *guard = Some(self.new_workspace(graph, plan)?);
        }
        let ws = guard.as_mut().expect("created above");
        self.launch_all(graph, plan, steps, inputs, ws, nccl)?;
        for &(input, output) in &plan.swapped {
            match plan.storage[graph.outputs[output].1] {
                Storage::Slot(s) => {
                    let shape = inputs[input].shape().to_vec();
                    std::mem::swap(&mut inputs[input], &mut ws.slots[s]);
                    // The input keeps its shape; the slot goes back flat.
                    inputs[input].set_shape(&shape)?;
                    let n = ws.slots[s].len();
                    ws.slots[s].set_shape(&[n])?;
                }
                Storage::Input(i) if i == input => {}
                Storage::Input(i) => {
                    let value = inputs[i].try_clone()?;
                    inputs[input].copy_from(&value)?;
                }
                Storage::Literal(l) => inputs[input].copy_from(&ws.literals[l])?,
                Storage::Virtual => unreachable!("outputs are always stored"),
            }
        }
        plan.returned_outputs(graph)
            .into_iter()
            .map(|o| {
                let node = graph.outputs[o].1;
                let copy = match plan.storage[node] {
                    Storage::Input(i) => inputs[i].try_clone(),
                    Storage::Literal(l) => ws.literals[l].try_clone(),
                    Storage::Slot(s) => ws.slots[s].try_clone(),
                    Storage::Virtual => unreachable!("outputs are always stored"),
                }?;
                copy.reshape(&graph.nodes[node].spec.shape)
            })
            .collect()
    }

    fn launch_all(
        &self,
        graph: &Graph,
        plan: &MemoryPlan,
        steps: &[Step],
        inputs: &[CudaBuffer],
        ws: &Workspace,
        nccl: Option<&NcclCommunicator>,
    ) -> Result<(), DeviceError> {
        let ptr = |n: NodeId| -> u64 {
            match plan.storage[n] {
                Storage::Input(i) => inputs[i].device_ptr(),
                Storage::Literal(i) => ws.literals[i].device_ptr(),
                Storage::Slot(i) => ws.slots[i].device_ptr(),
                Storage::Virtual => unreachable!("node %{n} read but never stored"),
            }
        };
        for step in steps {
            match step {
                Step::Launch {
                    kernel, grid, args, ..
                } => {
                    let Some((blocks, threads)) = grid.dims() else {
                        continue;
                    };
                    let args: Vec<KernelArg> = args
                        .iter()
                        .map(|Arg::Node(n)| KernelArg::Ptr(ptr(*n)))
                        .collect();
                    // SAFETY: the generated kernel takes exactly these
                    // pointers, each to a planned buffer of its node's spec.
                    unsafe { self.kernels[kernel].launch(blocks, threads, 0, &args)? };
                }
                Step::Gemm { node, .. } => {
                    let nd = &graph.nodes[*node];
                    let (types, shape) = gemm_call(graph, *node);
                    // SAFETY: the planned buffers hold the shapes above; the
                    // plan never lets a matmul write over its operands.
                    unsafe {
                        self.device.gemm(
                            types,
                            shape,
                            ptr(nd.args[0]),
                            ptr(nd.args[1]),
                            ptr(*node),
                        )?
                    };
                }
                Step::AllReduce { node, .. } => {
                    let Some(nccl) = nccl else { continue };
                    let spec = &graph.nodes[*node].spec;
                    let p = ptr(*node);
                    // SAFETY: the node's planned buffer holds its spec on
                    // this device (the caller checked the communicator's
                    // device); NCCL sums it in place on the same stream.
                    unsafe { nccl.all_reduce_sum_raw(p, p, spec.numel(), spec.dtype)? };
                }
            }
        }
        Ok(())
    }
}

/// The cuBLAS call of matmul node `node`: element types and row-major shape.
pub(crate) fn gemm_call(graph: &Graph, node: NodeId) -> (GemmTypes, GemmShape) {
    let nd = &graph.nodes[node];
    let Op::MatMul { ta, tb } = nd.op else {
        unreachable!("gemm step on a matmul")
    };
    let a = &graph.nodes[nd.args[0]].spec.shape;
    let b = &graph.nodes[nd.args[1]].spec.shape;
    let r = a.len();
    let (m, k) = if ta {
        (a[r - 1], a[r - 2])
    } else {
        (a[r - 2], a[r - 1])
    };
    let n = if tb { b[r - 2] } else { b[r - 1] };
    let shape = GemmShape {
        batch: a[..r - 2].iter().product(),
        m,
        n,
        k,
        ta,
        tb,
    };
    let types = match graph.nodes[nd.args[0]].spec.dtype {
        DType::F64 => GemmTypes::F64,
        DType::BF16 => GemmTypes::BF16,
        DType::F16 => GemmTypes::F16,
        _ => GemmTypes::F32,
    };
    (types, shape)
}
