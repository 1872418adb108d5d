//! Host emulation of a generated CUDA module: the exact CUDA C the GPU
//! would compile, built by the host C++ compiler against a small header
//! that defines the CUDA dialect the generator uses ([`HEADER`]), and run
//! on the CPU with the launch list, grids and memory plan of the real
//! executable.
//!
//! Why: the code generator is most of the CUDA backend, and most machines
//! that build nitro have no GPU. Emulation executes every generated kernel
//! (indexing, broadcasting, storage conversions, the RNG, the parallel
//! reduction with its warp shuffles and barriers, atomics), so the
//! conformance suite checks the generated code against the CPU backend on
//! any machine with a C++20 compiler. What it cannot check: NVRTC's own
//! acceptance of the source, device math-library accuracy, cuBLAS (the
//! product is computed here by a reference loop over the same
//! [`GemmShape`]) and real concurrency
//! between blocks.
//!
//! All-reduce steps sum through the host communicator a run is given
//! ([`HostEmulation::run_with`]), standing in for NCCL: the step's place in
//! the launch list and the buffer it sums are the executable's.
//!
//! Build time: the header (the C++ standard library's threads, barriers
//! and functions) is most of what the compiler parses, so it is
//! precompiled once per machine ([`header_dir`]) and every module includes
//! it; a compiler that cannot use the precompiled form parses the header.
//!
//! Memory: every planned slot is filled with `0xFF` bytes (NaN, -1) before
//! each call, so a kernel that reads an intermediate before it is written
//! shows up as a wrong result instead of passing by luck.

use super::codegen::{Arg, Step};
use super::executable::gemm_call;
use super::CudaProgram;
use crate::error::{GraphError, Result};
use crate::ir::NodeId;
use crate::plan::Storage;
use nitro_device::collective::Communicator;
use nitro_device::cuda::{GemmShape, GemmTypes};
use nitro_device::HostArray as Array;
use nitro_device::{DType, HostBuffer};
use std::collections::HashMap;
use std::ffi::c_void;
use std::fmt::Write;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The CUDA dialect for the host compiler: thread indices, intrinsics,
/// atomics, barriers, warp shuffles and the launcher.
pub const HEADER: &str = include_str!("emulate.hpp");

type Launcher = unsafe extern "C" fn(u32, u32, *const *mut c_void);

/// A generated program built for host emulation.
pub struct HostEmulation {
    program: CudaProgram,
    launchers: HashMap<String, Launcher>,
    // Kept last so the launchers above never outlive the library.
    _library: libloading::Library,
    dir: PathBuf,
}

impl std::fmt::Debug for HostEmulation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostEmulation({:?})", self.program)
    }
}

impl Drop for HostEmulation {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The host C++ compiler: `$CXX`, else `c++`.
fn compiler() -> String {
    std::env::var("CXX").unwrap_or_else(|_| "c++".into())
}

/// Flags of every compile, the precompiled header's included (a
/// precompiled header is only used by a compile with the same flags).
const FLAGS: [&str; 5] = ["-std=c++20", "-O1", "-fPIC", "-pthread", "-w"];

/// The header's file name, included first by every translation unit.
const HEADER_FILE: &str = "nitro_emu.hpp";

/// The folder holding [`HEADER`] as `nitro_emu.hpp` and, where the
/// compiler built it, its precompiled form next to it (GCC uses it
/// instead of parsing: ~0.3 s a module instead of ~2.5 s). Shared by every
/// test process on the machine, keyed by the header text and compiler;
/// written under temporary names and renamed, so concurrent processes
/// never see half a file. `None` when the folder cannot be written.
fn header_dir() -> Option<&'static PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (HEADER, compiler(), FLAGS).hash(&mut h);
        let dir = std::env::temp_dir().join(format!("nitro-emulate-header-{:016x}", h.finish()));
        let (hpp, gch) = (
            dir.join(HEADER_FILE),
            dir.join(format!("{HEADER_FILE}.gch")),
        );
        if hpp.exists() && gch.exists() {
            return Some(dir);
        }
        std::fs::create_dir_all(&dir).ok()?;
        let pid = std::process::id();
        let tmp = dir.join(format!("{HEADER_FILE}.{pid}"));
        std::fs::write(&tmp, HEADER).ok()?;
        std::fs::rename(&tmp, &hpp).ok()?;
        let tmp_gch = dir.join(format!("{pid}.gch"));
        let built = std::process::Command::new(compiler())
            .args(FLAGS)
            .args(["-x", "c++-header"])
            .arg(&hpp)
            .arg("-o")
            .arg(&tmp_gch)
            .output()
            .is_ok_and(|o| o.status.success());
        if built {
            // Without it the header is parsed: slower, same result.
            let _ = std::fs::rename(&tmp_gch, &gch);
        }
        Some(dir)
    })
    .as_ref()
}

/// Whether a C++20 compiler that can build the emulation is available
/// (tests that need one skip with a line when it is not).
pub fn available() -> bool {
    std::process::Command::new(compiler())
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The parameter list of kernel `name` in its generated code.
fn params(code: &str, name: &str) -> Vec<String> {
    let head = format!("__global__ void {name}(");
    let start = code.find(&head).expect("generated kernel header") + head.len();
    let end = start + code[start..].find(')').expect("parameter list");
    code[start..end]
        .split(", ")
        .filter(|p| !p.is_empty())
        .map(|p| p[..p.rfind(' ').expect("typed parameter")].to_string())
        .collect()
}

/// The C++ translation unit: header (included from `header_dir`, else
/// inline), module, one launcher per kernel.
fn translation_unit(program: &CudaProgram, header_dir: Option<&PathBuf>) -> String {
    let cuda = program.cuda();
    let header = match header_dir {
        Some(_) => format!("#include \"{HEADER_FILE}\"\n"),
        None => HEADER.to_string(),
    };
    let mut unit = format!("{header}\n{}\n", cuda.source);
    for (name, code) in cuda.kernels.iter().zip(&cuda.code) {
        let cooperative = code.contains("__syncthreads") || code.contains("__shfl");
        let args: Vec<String> = params(code, name)
            .iter()
            .enumerate()
            .map(|(i, ty)| format!("({ty})a[{i}]"))
            .collect();
        let _ = writeln!(
            unit,
            "extern \"C\" void nitro_emu_{name}(unsigned grid, unsigned block, void* const* a) {{\n  \
             nitro_emu_launch(grid, block, {cooperative}, [&] {{ {name}({}); }});\n}}",
            args.join(", ")
        );
    }
    unit
}

impl HostEmulation {
    /// Build `program`'s generated module with the host C++ compiler.
    /// A compile error (the emulation's stand-in for an NVRTC error) comes
    /// back with the compiler's log.
    pub fn new(program: CudaProgram) -> Result<HostEmulation> {
        static BUILDS: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "nitro-emulate-{}-{}",
            std::process::id(),
            BUILDS.fetch_add(1, Ordering::Relaxed)
        ));
        let io = |e: std::io::Error| GraphError::Backend(format!("host emulation: {e}"));
        std::fs::create_dir_all(&dir).map_err(io)?;
        let (cpp, lib) = (dir.join("module.cpp"), dir.join("module.so"));
        let headers = header_dir();
        std::fs::write(&cpp, translation_unit(&program, headers)).map_err(io)?;
        let mut compile = std::process::Command::new(compiler());
        compile.args(FLAGS).arg("-shared");
        if let Some(dir) = headers {
            compile.arg("-I").arg(dir);
        }
        let out = compile
            .arg("-o")
            .arg(&lib)
            .arg(&cpp)
            .output()
            .map_err(|e| {
                GraphError::Backend(format!(
                    "host emulation needs a C++20 compiler (`{}`: {e}); install g++ or set CXX",
                    compiler()
                ))
            })?;
        if !out.status.success() {
            let log = String::from_utf8_lossy(&out.stderr);
            return Err(GraphError::Backend(format!(
                "generated CUDA of `{}` does not compile ({}):\n{}",
                program.desc().name(),
                cpp.display(),
                &log[..log.len().min(6000)]
            )));
        }
        // SAFETY: the library is the module just built; its initialisers
        // only set up thread-locals.
        let library = unsafe { libloading::Library::new(&lib) }
            .map_err(|e| GraphError::Backend(format!("host emulation: load {lib:?}: {e}")))?;
        let mut launchers = HashMap::new();
        for name in &program.cuda().kernels {
            let symbol = format!("nitro_emu_{name}");
            // SAFETY: every launcher has exactly this signature (generated above).
            let f: Launcher = unsafe {
                *library
                    .get::<Launcher>(symbol.as_bytes())
                    .map_err(|e| GraphError::Backend(format!("host emulation: {symbol}: {e}")))?
            };
            launchers.insert(name.clone(), f);
        }
        Ok(HostEmulation {
            program,
            launchers,
            _library: library,
            dir,
        })
    }

    /// The emulated program.
    pub fn program(&self) -> &CudaProgram {
        &self.program
    }

    /// Run as [`CudaProgram::run`] would on a GPU: donated outputs written
    /// back into their inputs, the rest returned in
    /// `Program::returned_names` order.
    pub fn run(&self, inputs: &mut [Array]) -> Result<Vec<Array>> {
        self.run_inner(inputs, None)
    }

    /// [`HostEmulation::run`] in a process group: each all-reduce step sums
    /// its buffer through `comm` (host memory here, where a GPU would use
    /// NCCL), after the same world check as [`crate::Program::run_with`].
    pub fn run_with(&self, inputs: &mut [Array], comm: &dyn Communicator) -> Result<Vec<Array>> {
        self.run_inner(inputs, Some(comm))
    }

    fn run_inner(
        &self,
        inputs: &mut [Array],
        comm: Option<&dyn Communicator>,
    ) -> Result<Vec<Array>> {
        let desc = self.program.desc();
        desc.check_signature(inputs)?;
        desc.check_world(comm)?;
        let (graph, plan) = (desc.graph(), desc.plan());
        let mut args: Vec<Memory> = inputs.iter().map(|a| Memory::of(a.data())).collect();
        let mut slots: Vec<Memory> = plan
            .slots
            .iter()
            .map(|&(d, n)| Memory::poisoned(d, n))
            .collect();
        let literals: Vec<Memory> = plan.literal_values(graph).iter().map(Memory::of).collect();
        let ptr = |n: NodeId, args: &mut [Memory], slots: &mut [Memory]| -> *mut c_void {
            match plan.storage[n] {
                Storage::Input(i) => args[i].ptr(),
                Storage::Slot(i) => slots[i].ptr(),
                // Literals are read-only: no kernel's output is a literal.
                Storage::Literal(i) => literals[i].words.as_ptr() as *mut c_void,
                Storage::Virtual => unreachable!("node %{n} read but never stored"),
            }
        };
        for step in &self.program.cuda().steps {
            match step {
                Step::Launch {
                    kernel,
                    grid,
                    args: params,
                    ..
                } => {
                    let Some((blocks, threads)) = grid.dims() else {
                        continue;
                    };
                    let pointers: Vec<*mut c_void> = params
                        .iter()
                        .map(|Arg::Node(n)| ptr(*n, &mut args, &mut slots))
                        .collect();
                    // SAFETY: each pointer is a live buffer of its node's
                    // planned size; the launcher takes exactly these.
                    unsafe { self.launchers[kernel](blocks, threads, pointers.as_ptr()) };
                }
                Step::Gemm { node, .. } => {
                    let (types, shape) = gemm_call(graph, *node);
                    let nd = &graph.nodes[*node];
                    let a = ptr(nd.args[0], &mut args, &mut slots);
                    let b = ptr(nd.args[1], &mut args, &mut slots);
                    let c = ptr(*node, &mut args, &mut slots);
                    // SAFETY: as above; the plan never lets a product write
                    // over its operands.
                    unsafe { reference_gemm(types, shape, a, b, c) };
                }
                Step::AllReduce { node, .. } => {
                    // Alone (a world of one, checked above) the copy before
                    // was the whole sum.
                    let Some(comm) = comm else { continue };
                    let spec = &graph.nodes[*node].spec;
                    let p = ptr(*node, &mut args, &mut slots);
                    // SAFETY: p is the node's planned buffer, at least its
                    // spec's bytes, and nothing else holds it during the step.
                    let bytes = unsafe {
                        std::slice::from_raw_parts_mut(
                            p as *mut u8,
                            spec.numel() * spec.dtype.size_of(),
                        )
                    };
                    let mut buf = HostBuffer::from_le_bytes(spec.dtype, bytes)
                        .map_err(|e| GraphError::Backend(format!("host emulation: {e}")))?;
                    comm.all_reduce_sum(&mut buf)
                        .map_err(|source| GraphError::Collective {
                            program: desc.name().to_string(),
                            source,
                        })?;
                    bytes.copy_from_slice(&buf.to_le_bytes());
                }
            }
        }
        for &(input, output) in &plan.swapped {
            match plan.storage[graph.outputs[output].1] {
                Storage::Slot(s) => std::mem::swap(&mut args[input], &mut slots[s]),
                Storage::Input(i) if i == input => {}
                Storage::Input(i) => args[input] = args[i].clone(),
                Storage::Literal(l) => args[input] = literals[l].clone(),
                Storage::Virtual => unreachable!("outputs are always stored"),
            }
        }
        for &(input, _) in plan.donations() {
            let d = inputs[input].dtype();
            *inputs[input].data_mut() = args[input].read(d, inputs[input].data().len())?;
        }
        plan.returned_outputs(graph)
            .into_iter()
            .map(|o| {
                let node = graph.outputs[o].1;
                let spec = &graph.nodes[node].spec;
                let memory = match plan.storage[node] {
                    Storage::Input(i) => &args[i],
                    Storage::Literal(l) => &literals[l],
                    Storage::Slot(s) => &slots[s],
                    Storage::Virtual => unreachable!("outputs are always stored"),
                };
                Ok(Array::new(
                    &spec.shape,
                    memory.read(spec.dtype, spec.numel())?,
                )?)
            })
            .collect()
    }
}

/// Emulated device memory: 8-byte aligned, so every element type the
/// kernels read is aligned as on a GPU.
#[derive(Clone)]
struct Memory {
    words: Vec<u64>,
}

impl Memory {
    fn of(host: &HostBuffer) -> Memory {
        let bytes = host.to_le_bytes();
        let mut words = vec![0u64; bytes.len().div_ceil(8).max(1)];
        for (w, chunk) in words.iter_mut().zip(bytes.chunks(8)) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            *w = u64::from_le_bytes(word);
        }
        Memory { words }
    }

    fn poisoned(d: DType, n: usize) -> Memory {
        Memory {
            words: vec![u64::MAX; (n * d.size_of()).div_ceil(8).max(1)],
        }
    }

    fn ptr(&mut self) -> *mut c_void {
        self.words.as_mut_ptr() as *mut c_void
    }

    fn read(&self, d: DType, n: usize) -> Result<HostBuffer> {
        let bytes: Vec<u8> = self.words.iter().flat_map(|w| w.to_le_bytes()).collect();
        HostBuffer::from_le_bytes(d, &bytes[..n * d.size_of()])
            .map_err(|e| GraphError::Backend(format!("host emulation: {e}")))
    }
}

/// `C[b] = op(A[b]) @ op(B[b])`, row-major, f64 accumulation: what cuBLAS
/// computes for the same [`GemmShape`], by the definition.
///
/// # Safety
/// The pointers must hold `batch` products of the shape's operands and result.
unsafe fn reference_gemm(
    types: GemmTypes,
    s: GemmShape,
    a: *const c_void,
    b: *const c_void,
    c: *mut c_void,
) {
    let (sa, sb, sc) = (s.m * s.k, s.k * s.n, s.m * s.n);
    let at = |i: usize, kk: usize| if s.ta { kk * s.m + i } else { i * s.k + kk };
    let bt = |kk: usize, j: usize| if s.tb { j * s.k + kk } else { kk * s.n + j };
    for batch in 0..s.batch {
        for i in 0..s.m {
            for j in 0..s.n {
                let mut acc = 0.0f64;
                for kk in 0..s.k {
                    let (x, y) = (batch * sa + at(i, kk), batch * sb + bt(kk, j));
                    // SAFETY: indices are within the operands (see above).
                    acc += unsafe {
                        match types {
                            GemmTypes::F64 => *(a as *const f64).add(x) * *(b as *const f64).add(y),
                            GemmTypes::F32 => {
                                *(a as *const f32).add(x) as f64 * *(b as *const f32).add(y) as f64
                            }
                            GemmTypes::BF16 => {
                                let (a, b) = (a as *const half::bf16, b as *const half::bf16);
                                (*a.add(x)).to_f64() * (*b.add(y)).to_f64()
                            }
                            GemmTypes::F16 => {
                                let (a, b) = (a as *const half::f16, b as *const half::f16);
                                (*a.add(x)).to_f64() * (*b.add(y)).to_f64()
                            }
                        }
                    };
                }
                let at = batch * sc + i * s.n + j;
                // SAFETY: as above.
                unsafe {
                    match types {
                        GemmTypes::F64 => *(c as *mut f64).add(at) = acc,
                        GemmTypes::F32 | GemmTypes::BF16 | GemmTypes::F16 => {
                            *(c as *mut f32).add(at) = acc as f32
                        }
                    }
                }
            }
        }
    }
}
