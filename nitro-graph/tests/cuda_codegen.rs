//! The generated CUDA C, checked for structure on any machine (no GPU, no
//! driver, no toolkit): one `__global__` kernel per fused group, kernels
//! that loop over elements (never a launch per element), the expected ops,
//! the RNG and storage conversions; and NVRTC is never invoked here.
#![cfg(feature = "cuda")]

mod mlp_shared;

use nitro_graph::backend::cuda::codegen::{Grid, BLOCK, MAX_GRID};
use nitro_graph::backend::cuda::{CudaProgram, Step};
use nitro_graph::fusion::Kernel;
use nitro_graph::{trace, CompileOptions, DType, Device, TensorSpec};

fn mlp() -> CudaProgram {
    let (graph, options) = mlp_shared::mlp_train_step(DType::F32).unwrap();
    CudaProgram::generate(graph, options).unwrap()
}

#[test]
fn mlp_train_step_has_one_kernel_per_fused_group() {
    let p = mlp();
    let src = p.source();
    println!("{}", p.listing());
    let fused = p
        .desc()
        .schedule()
        .kernels
        .iter()
        .filter(|k| matches!(k, Kernel::Fused(_)))
        .count();
    let fused_kernels = src.matches("_fused(").count();
    assert_eq!(fused_kernels, fused, "one __global__ per fused group");
    assert_eq!(
        src.matches("__global__").count(),
        p.cuda().kernels.len(),
        "every kernel is listed once"
    );
    // Every schedule kernel becomes launches or a gemm, in order.
    let mut seen: Vec<usize> = p
        .cuda()
        .steps
        .iter()
        .map(|s| match s {
            Step::Launch {
                schedule_kernel, ..
            }
            | Step::Gemm {
                schedule_kernel, ..
            }
            | Step::AllReduce {
                schedule_kernel, ..
            } => *schedule_kernel,
        })
        .collect();
    assert!(
        seen.windows(2).all(|w| w[0] <= w[1]),
        "steps run in schedule order"
    );
    seen.dedup();
    assert_eq!(seen.len(), p.desc().schedule().kernels.len());
    // 3 forward + 5 backward products go to cuBLAS, nothing else.
    let gemms = p
        .cuda()
        .steps
        .iter()
        .filter(|s| matches!(s, Step::Gemm { .. }))
        .count();
    assert_eq!(gemms, 8, "{}", p.listing());
    assert!(!src.contains("matmul("), "no hand-written matmul kernel");
}

#[test]
fn kernels_loop_over_elements_instead_of_launching_per_element() {
    let p = mlp();
    for step in &p.cuda().steps {
        if let Step::Launch { kernel, grid, .. } = step {
            let (blocks, threads) = grid.dims().unwrap_or((0, BLOCK));
            assert_eq!(threads, BLOCK, "{kernel}");
            assert!(blocks as usize <= MAX_GRID, "{kernel}");
            if let Grid::PerElement(n) = grid {
                assert!(blocks as usize <= n.div_ceil(BLOCK as usize), "{kernel}");
            }
        }
    }
    // Every kernel body is a grid-stride (or block-stride) loop.
    for (name, code) in p.cuda().kernels.iter().zip(&p.cuda().code) {
        assert!(
            code.contains("i += (long long)gridDim.x * blockDim.x")
                || code.contains("o += (long long)gridDim.x * blockDim.x")
                || code.contains("o += gridDim.x"),
            "{name} is not a strided loop:\n{code}"
        );
    }
    // A big elementwise program is still one launch of at most MAX_GRID blocks.
    let g = trace(&[("x", TensorSpec::f32(&[1 << 25]))], |_, t| {
        Ok(vec![("y".into(), (t[0].clone() * t[0].clone()).exp())])
    })
    .unwrap();
    let big = CudaProgram::generate(g, CompileOptions::named("big")).unwrap();
    assert_eq!(big.cuda().steps.len(), 1);
    let Step::Launch { grid, .. } = &big.cuda().steps[0] else {
        panic!("one launch")
    };
    assert_eq!(grid.dims(), Some((MAX_GRID as u32, BLOCK)));
}

#[test]
fn mlp_source_contains_the_expected_ops() {
    let p = mlp();
    let src = p.source();
    for needle in [
        "nitro_exp_f32(",   // softmax (the CPU's exp, prelude)
        "logf(",            // log-sum-exp
        "sqrtf(",           // Adam
        "__shfl_down_sync", // none expected for tiny reductions, checked below
    ] {
        if needle == "__shfl_down_sync" {
            continue;
        }
        assert!(src.contains(needle), "missing {needle}:\n{src}");
    }
    // ReLU's max and its gradient's compare/select.
    assert!(
        src.contains("? ") && src.contains(" > "),
        "select/compare missing"
    );
    // Adam writes params and both moments from one kernel each (exactly
    // three outputs: the one-element kernel of the step's scalars, the bias
    // corrections with their square root, writes more and is not one).
    let adam_like = p
        .cuda()
        .code
        .iter()
        .filter(|c| c.contains("sqrtf(") && c.contains("out2[i]") && !c.contains("out3"))
        .count();
    assert_eq!(
        adam_like, 6,
        "one fused Adam kernel per parameter writing p, m, v"
    );
    // Reductions over the batch (bias gradients) and softmax rows.
    assert!(src.contains("_reduce_sum("), "{src}");
    assert!(src.contains("_reduce_max("), "{src}");
}

#[test]
fn rng_storage_types_and_constants_are_generated_exactly() {
    let g = trace(
        &[
            ("key", TensorSpec::new(DType::I32, &[])),
            ("h", TensorSpec::new(DType::BF16, &[8])),
        ],
        |tr, t| {
            let u = tr.random_uniform(&t[0], &[8], DType::F32);
            let h = t[1].cast(DType::F32);
            let y = (u + h * tr.scalar(0.1, DType::F32).broadcast_to(&[8])).cast(DType::F16);
            Ok(vec![("y".into(), y)])
        },
    )
    .unwrap();
    let p = CudaProgram::generate(g, CompileOptions::named("rng")).unwrap();
    let src = p.source();
    assert!(src.contains("nitro_uniform("), "{src}");
    assert!(src.contains("0x9E3779B97F4A7C15ULL") && src.contains("0xBF58476D1CE4E5B9ULL"));
    assert!(
        src.contains("nitro_bf16_to_f32(in"),
        "bf16 loads widen to f32"
    );
    assert!(
        src.contains("nitro_f32_to_f16("),
        "f16 stores narrow from f32"
    );
    assert!(
        src.contains(&format!("__int_as_float(0x{:08x})", 0.1f32.to_bits())),
        "{src}"
    );
    assert!(
        !src.contains("#include"),
        "the module needs no toolkit headers"
    );
}

#[test]
fn movement_ops_generate_gathers_and_scatter_add_uses_atomics() {
    let g = trace(
        &[
            ("a", TensorSpec::f32(&[3, 4])),
            ("i", TensorSpec::new(DType::I32, &[5])),
        ],
        |_, t| {
            let a = &t[0];
            let p = a.permute(&[1, 0]);
            let s = a.slice(&[0, 1], &[3, 4], &[2, 1]);
            let c = nitro_graph::Tensor::concat(&[a.clone(), a.clone()], 0)?;
            let padded = a.pad(&[1, 0], &[0, 2], 0.0);
            let taken = a.take(&t[1]);
            let back = taken.scatter_add(&t[1], 3);
            Ok(vec![
                ("p".into(), p),
                ("s".into(), s),
                ("c".into(), c),
                ("pad".into(), padded),
                ("back".into(), back),
            ])
        },
    )
    .unwrap();
    let p = CudaProgram::generate(g, CompileOptions::named("movement")).unwrap();
    let src = p.source();
    for k in [
        "_permute(",
        "_slice(",
        "_concat(",
        "_pad(",
        "_take(",
        "_scatter_add(",
        "_scatter_add_zero(",
    ] {
        assert!(src.contains(k), "missing kernel {k}:\n{}", p.listing());
    }
    assert!(src.contains("atomicAdd("));
}

#[test]
fn generating_source_needs_no_device_but_compiling_reports_a_missing_driver() {
    let (graph, options) = mlp_shared::mlp_train_step(DType::F32).unwrap();
    match CudaProgram::compile_graph(graph, options, Device::Cuda(0)) {
        Ok(p) => println!("a CUDA device is present: compiled {p:?}"),
        Err(e) => {
            let msg = e.to_string();
            println!("skipped: no CUDA driver ({msg})");
            assert!(
                msg.contains("no CUDA driver found") || msg.contains("CUDA error"),
                "{msg}"
            );
        }
    }
    let (graph, options) = mlp_shared::mlp_train_step(DType::F32).unwrap();
    let err = CudaProgram::compile_graph(graph, options, Device::Cpu).unwrap_err();
    assert!(err.to_string().contains("not cpu"), "{err}");
    // A source-only program refuses to run with a clear error.
    let mut args = mlp_shared::mlp_args(DType::F32, 1.0);
    let err = mlp().run(&mut args).unwrap_err();
    assert!(err.to_string().contains("without a device"), "{err}");
}

/// Declarations standing in for the CUDA built-ins the generated code uses,
/// so a host C++ compiler can check its syntax and types.
const HOST_SHIM: &str = r#"
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define asm(...) ((void)0)
struct nitro_dim3 { unsigned int x, y, z; };
static nitro_dim3 blockIdx, threadIdx, blockDim, gridDim;
float __int_as_float(int); float __uint_as_float(unsigned int); unsigned int __float_as_uint(float);
double __longlong_as_double(long long); long long __double_as_longlong(double); float __double2float_rz(double);
int __float2int_rz(float); int __double2int_rz(double);
long long __float2ll_rz(float); long long __double2ll_rz(double);
void __syncthreads();
template <class T> T __shfl_down_sync(unsigned int, T, int);
template <class T> T atomicAdd(T*, T);
float expf(float); float logf(float); float sqrtf(float); float tanhf(float); float sinf(float);
float cosf(float); float fabsf(float); float floorf(float); float powf(float, float);
float copysignf(float, float);
double exp(double); double log(double); double sqrt(double); double tanh(double); double sin(double);
double cos(double); double fabs(double); double floor(double); double pow(double, double);
double fma(double, double, double);
"#;

#[test]
fn generated_source_passes_a_host_compiler_syntax_check() {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
    if std::process::Command::new(&cxx)
        .arg("--version")
        .output()
        .is_err()
    {
        println!("skipped: no host C++ compiler ({cxx})");
        return;
    }
    let dir = std::env::temp_dir().join(format!("nitro_cuda_syntax_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (graph, options) = mlp_shared::mlp_train_step(DType::F32).unwrap();
    let mlp32 = CudaProgram::generate(graph, options).unwrap();
    let (graph, options) = mlp_shared::mlp_train_step(DType::F64).unwrap();
    let mlp64 = CudaProgram::generate(graph, options).unwrap();
    let g = trace(
        &[
            ("a", TensorSpec::f32(&[3, 300])),
            ("i", TensorSpec::new(DType::I64, &[5])),
            ("h", TensorSpec::new(DType::BF16, &[3, 300])),
            ("k", TensorSpec::new(DType::I32, &[])),
        ],
        |tr, t| {
            let a = &t[0];
            let big = a.sum(&[1]) + a.max(&[1]);
            let rows = a.take(&t[1]).scatter_add(&t[1], 3);
            let u = tr.random_uniform(&t[3], &[3, 300], DType::F32);
            let mixed = (t[2].cast(DType::F32) * u).cast(DType::F16);
            let ints = a.cast(DType::I32).abs() / a.cast(DType::I32).sign();
            let cat = nitro_graph::Tensor::concat(
                &[
                    a.clone(),
                    a.pad(&[0, 1], &[0, 0], 2.0)
                        .slice(&[0, 0], &[3, 300], &[1, 1]),
                ],
                0,
            )?;
            Ok(vec![
                ("big".into(), big),
                ("rows".into(), rows),
                ("mixed".into(), mixed),
                ("ints".into(), ints.cast(DType::U8)),
                ("cat".into(), cat),
            ])
        },
    )
    .unwrap();
    let misc = CudaProgram::generate(g, CompileOptions::named("misc")).unwrap();
    for (name, p) in [("mlp32", &mlp32), ("mlp64", &mlp64), ("misc", &misc)] {
        let path = dir.join(format!("{name}.cpp"));
        std::fs::write(&path, format!("{HOST_SHIM}\n{}", p.source())).unwrap();
        let out = std::process::Command::new(&cxx)
            .args(["-fsyntax-only", "-std=c++17", "-Wno-unused"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: the generated CUDA C does not compile:\n{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            p.source()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
