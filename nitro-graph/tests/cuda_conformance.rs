//! Conformance: one test body per op and per program, instantiated for the
//! CPU and for CUDA. Each body runs its program on the device under test and
//! on the CPU backend, and compares within the stated tolerance (the CPU
//! instantiation checks the harness itself; on CUDA, reductions and
//! matmuls sum in another order, `sinf`/`logf` are within 2 ulp, and so
//! are the prelude's exp/erf/tanh: their multiply-adds are explicit
//! `fma`s, as the CPU's `mul_add`s, so they should agree exactly, but no
//! GPU has run them yet).
//! Without a driver, every CUDA instantiation prints one
//! "skipped: no CUDA driver" line and passes.
//!
//! A third instantiation, `emulated`, runs the very CUDA C each program
//! generates through host emulation (`backend::cuda::emulate`: the host C++
//! compiler, the real grids, barriers and warp shuffles), so the generated
//! kernels are checked on every machine, GPU or not. A fourth, `nvrtc`,
//! hands every generated kernel to the real NVRTC (which needs no driver and
//! no GPU, only libnvrtc: `.ci/run` installs it from the NVIDIA wheel) for
//! two architectures, so the source the GPU will get is known to compile.
#![cfg(feature = "cuda")]

mod common;
mod cuda_attention;
mod cuda_harness;
mod cuda_layer_norm;
mod mlp_shared;

use cuda_harness::{conform, conformance, data, runner, Body, Target};

use nitro_graph::backend::cuda::CudaProgram;
use nitro_graph::ir::{BinaryOp, CmpOp, UnaryOp, Window};
use nitro_graph::nn::init::InitRng;
use nitro_graph::nn::layers::Chain;
use nitro_graph::nn::train::AdamStepGraph;
use nitro_graph::nn::zoo;
use nitro_graph::semantics::Scalar;
use nitro_graph::{trace, Array, CompileOptions, DType, Device, Tensor, TensorSpec};

/// A one-output program over inputs of `dtype` and `shapes`.
fn op_case(test: &str, device: Target, dtype: DType, shapes: &[&[usize]], body: Body, tol: f64) {
    let specs: Vec<(String, TensorSpec)> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("x{i}"), TensorSpec::new(dtype, s)))
        .collect();
    let build = || {
        let named: Vec<(&str, TensorSpec)> =
            specs.iter().map(|(n, s)| (n.as_str(), s.clone())).collect();
        let g = trace(&named, |tr, t| Ok(vec![("y".to_string(), body(tr, t))]))?;
        Ok((g, CompileOptions::named(test)))
    };
    let args = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| data(s, i as u64 + 1, dtype))
        .collect();
    conform(test, device, build, args, 1, tol);
}

/// The AdamW classifier step of `model` over a batch of `x` (labels cycle
/// through `classes`), run `steps` times.
fn adam_step_case(
    test: &str,
    target: Target,
    model: &Chain,
    x: &[usize],
    classes: usize,
    steps: usize,
    tol: f64,
) {
    let params = model.init_params(1).unwrap();
    let build = || {
        let s = AdamStepGraph::trace(model, &params, x, 1e-2)?;
        Ok((s.graph, s.options))
    };
    let s = AdamStepGraph::trace(model, &params, x, 1e-2).unwrap();
    let (mut args, xi) = (s.args.clone(), s.x_index());
    args[xi] = data(x, 11, DType::F32);
    let labels: Vec<i32> = (0..x[0]).map(|i| ((i * 7) % classes) as i32).collect();
    args[xi + 1] = Array::new(&[x[0]], labels).unwrap();
    conform(test, target, build, args, steps, tol);
}

/// Edge values every elementwise op is checked on against the semantics
/// table: NaN, ±inf, ±0, a subnormal, huge and tiny values; integer edges.
fn edges(dtype: DType) -> Vec<f64> {
    if dtype.is_float() {
        vec![
            f64::NAN,
            f64::NEG_INFINITY,
            f64::INFINITY,
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            -2.5,
            1e-40,
            3.4e38,
            1e30,
            7.25,
            -0.1,
        ]
    } else {
        let (min, max) = if dtype == DType::I32 {
            (i32::MIN as f64, i32::MAX as f64)
        } else {
            (i64::MIN as f64, (1i64 << 53) as f64)
        };
        vec![0.0, 1.0, -1.0, 2.0, -7.0, 100.0, min, max, min + 1.0]
    }
}

/// Builds one output of a [`Row`] from the program's inputs.
type RowOut = Box<dyn Fn(&[Tensor]) -> Tensor>;
/// The semantics table's answer for a row at one point (`None`: undefined).
type Oracle = Box<dyn Fn(&[Scalar]) -> Option<Scalar>>;

/// One output of [`table_case`]: `out` over the unary column (`t[0]`) or the
/// binary pair (`t[1]`, `t[2]`), and the table's answer for it.
struct Row {
    name: String,
    binary: bool,
    out: RowOut,
    want: Oracle,
    tol: f64,
}

/// Every row over the edges of `dtype` in one program (inputs: the edges,
/// then every ordered pair of them), run on `target` and compared element
/// by element with the semantics table (the oracle): bit for bit (NaN
/// matching NaN), except `tol` (relative) for libm functions on a GPU,
/// whose `expf`/`sinf`/... may differ from the host's in the last ulp.
fn table_case(test: &str, target: Target, dtype: DType, rows: Vec<Row>) {
    let e = edges(dtype);
    let a: Vec<f64> = e.iter().flat_map(|&x| e.iter().map(move |_| x)).collect();
    let b: Vec<f64> = e.iter().flat_map(|_| e.iter().copied()).collect();
    let cols = [e, a, b];
    let specs: Vec<(String, TensorSpec)> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("x{i}"), TensorSpec::new(dtype, &[c.len()])))
        .collect();
    let named: Vec<(&str, TensorSpec)> =
        specs.iter().map(|(s, t)| (s.as_str(), t.clone())).collect();
    let g = trace(&named, |_, t| {
        Ok(rows.iter().map(|r| (r.name.clone(), (r.out)(t))).collect())
    })
    .unwrap();
    let Some(run) = runner(test, target, g, CompileOptions::named(test)) else {
        return;
    };
    let mut args: Vec<Array> = cols
        .iter()
        .map(|c| Array::new(&[c.len()], c.clone()).unwrap().cast(dtype))
        .collect();
    let got = run(&mut args);
    for (row, got) in rows.iter().zip(&got) {
        let used: &[Vec<f64>] = if row.binary { &cols[1..] } else { &cols[..1] };
        for (i, g) in got.to_f64_vec().into_iter().enumerate() {
            let regs: Vec<Scalar> = used.iter().map(|c| Scalar::fill(dtype, c[i])).collect();
            let w = (row.want)(&regs).expect("defined").to_f64();
            let ok = (g.is_nan() && w.is_nan())
                || g.to_bits() == w.to_bits()
                || (row.tol > 0.0
                    && matches!(target, Target::Cuda)
                    && (g - w).abs() <= row.tol * w.abs());
            let at: Vec<f64> = used.iter().map(|c| c[i]).collect();
            assert!(
                ok,
                "{test} {} at {at:?}: got {g:?}, the table says {w:?}",
                row.name
            );
        }
    }
}

/// Whether an op is a libm function (exact elsewhere, within ulps on a GPU).
fn libm(op: UnaryOp) -> bool {
    !matches!(
        op,
        UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sign | UnaryOp::Floor | UnaryOp::Recip
    )
}

conformance! {
    elementwise_edges_match_the_semantics_table => |t, d| {
        for dtype in [DType::F32, DType::F64, DType::I32, DType::I64] {
            let tol = if dtype == DType::F32 { 2.5e-7 } else { 5e-16 };
            let mut rows = vec![];
            for op in UnaryOp::ALL {
                if !dtype.is_float() && op.on_integers().is_none() {
                    continue;
                }
                let out: Body = match op {
                    UnaryOp::Neg => |_, x| x[0].neg(),
                    UnaryOp::Exp => |_, x| x[0].exp(),
                    UnaryOp::Log => |_, x| x[0].log(),
                    UnaryOp::Sqrt => |_, x| x[0].sqrt(),
                    UnaryOp::Tanh => |_, x| x[0].tanh(),
                    UnaryOp::Sigmoid => |_, x| x[0].sigmoid(),
                    UnaryOp::Sin => |_, x| x[0].sin(),
                    UnaryOp::Cos => |_, x| x[0].cos(),
                    UnaryOp::Abs => |_, x| x[0].abs(),
                    UnaryOp::Recip => |_, x| x[0].recip(),
                    UnaryOp::Sign => |_, x| x[0].sign(),
                    UnaryOp::Floor => |_, x| x[0].floor(),
                    UnaryOp::Erf => |_, x| x[0].erf(),
                    UnaryOp::Gelu => |_, x| x[0].gelu_erf(),
                    UnaryOp::GeluGrad => |_, x| x[0].gelu_erf_grad(),
                    UnaryOp::StopGradient => |_, x| x[0].stop_gradient(),
                };
                rows.push(Row {
                    name: format!("{op:?}"),
                    binary: false,
                    out: Box::new(move |x| out(x[0].tracer(), x)),
                    want: Box::new(move |s| s[0].unary(op)),
                    // GELU's 1 + erf cancels on the negative side, so any
                    // last-ulp difference of a GPU (its f64 erf against
                    // libm's) grows to ~1e-5 relative at -2.5. Host
                    // emulation is exact.
                    tol: match op {
                        UnaryOp::Gelu if dtype == DType::F32 => 2e-5,
                        UnaryOp::Gelu => 2e-14,
                        _ if libm(op) => tol,
                        _ => 0.0,
                    },
                });
            }
            for op in BinaryOp::ALL {
                if !dtype.is_float() && op.on_integers().is_none() {
                    continue;
                }
                let out: Body = match op {
                    BinaryOp::Add => |_, x| x[1].add(&x[2]),
                    BinaryOp::Sub => |_, x| x[1].sub(&x[2]),
                    BinaryOp::Mul => |_, x| x[1].mul(&x[2]),
                    BinaryOp::Div => |_, x| x[1].div(&x[2]),
                    BinaryOp::Max => |_, x| x[1].maximum(&x[2]),
                    BinaryOp::Min => |_, x| x[1].minimum(&x[2]),
                    BinaryOp::Pow => |_, x| x[1].pow(&x[2]),
                };
                rows.push(Row {
                    name: format!("{op:?}"),
                    binary: true,
                    out: Box::new(move |x| out(x[0].tracer(), x)),
                    want: Box::new(move |s| s[0].binary(op, s[1])),
                    tol: if op == BinaryOp::Pow { tol } else { 0.0 },
                });
            }
            for op in CmpOp::ALL {
                let out: Body = match op {
                    CmpOp::Eq => |_, x| x[1].eq_t(&x[2]),
                    CmpOp::Ne => |_, x| x[1].ne_t(&x[2]),
                    CmpOp::Lt => |_, x| x[1].lt(&x[2]),
                    CmpOp::Le => |_, x| x[1].le(&x[2]),
                    CmpOp::Gt => |_, x| x[1].gt(&x[2]),
                    CmpOp::Ge => |_, x| x[1].ge(&x[2]),
                };
                rows.push(Row {
                    name: format!("{op:?}"),
                    binary: true,
                    out: Box::new(move |x| out(x[0].tracer(), x)),
                    want: Box::new(move |s| s[0].compare(op, s[1]).map(Scalar::Bool)),
                    tol: 0.0,
                });
            }
            table_case(&format!("{t} {dtype}"), d, dtype, rows);
        }
    };
    unary_ops => |t, d| {
        let ops: [Body; 16] = [
            |_, x| -x[0].clone(),
            |_, x| x[0].exp(),
            |_, x| x[0].abs().log(),
            |_, x| x[0].abs().sqrt(),
            |_, x| x[0].tanh(),
            |_, x| x[0].sigmoid(),
            |_, x| x[0].sin(),
            |_, x| x[0].cos(),
            |_, x| x[0].abs(),
            |_, x| x[0].recip(),
            |_, x| x[0].sign(),
            |_, x| x[0].floor(),
            |_, x| x[0].erf(),
            |_, x| x[0].gelu_erf(),
            // The analytic VJPs (both read only x).
            |tr, x| tr.grad(&x[0].erf().sum_all(), &[&x[0]]).unwrap()[0].clone(),
            |tr, x| tr.grad(&(x[0].gelu_erf() * x[0].sin()).sum_all(), &[&x[0]]).unwrap()[0].clone(),
        ];
        for (i, op) in ops.into_iter().enumerate() {
            op_case(&format!("{t}[{i}]"), d, DType::F32, &[&[3, 17]], op, 1e-6);
            op_case(&format!("{t}[{i}] f64"), d, DType::F64, &[&[3, 17]], op, 1e-13);
        }
    };
    f32_transcendentals_match_the_cpu_on_a_dense_grid => |t, d| {
        // 48,001 inputs over [-12, 12] (step 2^-11, so every one is exact
        // in f32): erf's clamp at ±4, both branches of tanh (the series
        // below 0.2) and its clamp at 10, exp over 35 binades, and GELU
        // (the edge table above has 14 values). The prelude
        // evaluates the CPU's f64 sequences with the same fused
        // multiply-adds (`fma` there, `mul_add` here), so in emulation the
        // results are the CPU's bit for bit; on a GPU within 2.5e-7.
        let n = 48_001;
        let grid: Vec<f32> = (0..n).map(|i| (i as f32 - 24_000.0) / 2048.0).collect();
        let tol = if matches!(d, Target::Cuda) { 2.5e-7 } else { 0.0 };
        let build = || {
            let g = trace(&[("x", TensorSpec::f32(&[n]))], |_, x| {
                Ok(vec![
                    ("exp".to_string(), x[0].exp()),
                    ("erf".to_string(), x[0].erf()),
                    ("tanh".to_string(), x[0].tanh()),
                    ("gelu".to_string(), x[0].gelu_erf()),
                ])
            })?;
            Ok((g, CompileOptions::named("grid")))
        };
        conform(t, d, build, vec![Array::new(&[n], grid).unwrap()], 1, tol);
    };
    binary_compare_select => |t, d| {
        let ops: [Body; 7] = [
            |_, x| x[0].clone() + x[1].clone(),
            |_, x| x[0].clone() - x[1].clone(),
            |_, x| x[0].clone() * x[1].clone(),
            |_, x| x[0].clone() / x[1].clone(),
            |_, x| x[0].maximum(&x[1]) + x[0].minimum(&x[1]),
            |_, x| x[0].abs().pow(&x[1]),
            |_, x| x[0].lt(&x[1]).select(&x[0], &x[1]),
        ];
        for (i, op) in ops.into_iter().enumerate() {
            op_case(&format!("{t}[{i}]"), d, DType::F32, &[&[4, 9], &[4, 9]], op, 1e-6);
        }
    };
    casts_and_storage_types => |t, d| {
        op_case(t, d, DType::F32, &[&[33]], |_, x| {
            let h = x[0].cast(DType::F16).cast(DType::F32);
            let b = x[0].cast(DType::BF16).cast(DType::F32);
            let i = (x[0].clone() * x[0].clone()).cast(DType::I32).cast(DType::F32);
            h + b + i
        }, 0.0);
    };
    random_uniform_is_bit_identical => |t, d| {
        // Compared with the reference generator itself, bit for bit. (The key
        // is a traced constant: an *input* key trips the CPU backend, which
        // loads the one-element key contiguously; CUDA reads element 0.)
        let build = || {
            let g = trace(&[("x", TensorSpec::f32(&[]))], |tr, _| {
                let key = tr.scalar(-12345.0, DType::I32);
                Ok(vec![
                    ("u32".to_string(), tr.random_uniform(&key, &[1000], DType::F32)),
                    ("u64".to_string(), tr.random_uniform(&key, &[7, 3], DType::F64)),
                ])
            })?;
            Ok::<_, nitro_graph::GraphError>((g, CompileOptions::named("rng")))
        };
        let (graph, _) = build().unwrap();
        let salts: Vec<u64> = graph
            .nodes
            .iter()
            .filter_map(|n| match n.op {
                nitro_graph::ir::Op::RandomUniform { salt, .. } => Some(salt),
                _ => None,
            })
            .collect();
        let reference = |salt: u64, n: usize| -> Vec<f64> {
            (0..n).map(|i| nitro_graph::backend::cpu::uniform(-12345, salt, i)).collect()
        };
        let want32: Vec<f64> = reference(salts[0], 1000).into_iter().map(|v| v as f32 as f64).collect();
        let want64 = reference(salts[1], 21);
        let args = vec![Array::scalar_f32(0.0)];
        let (g, o) = build().unwrap();
        let Some(run) = runner(t, d, g, o) else { return };
        let got = run(&mut args.clone());
        assert_eq!(got[0].to_f64_vec(), want32, "{t} f32 stream");
        assert_eq!(got[1].to_f64_vec(), want64, "{t} f64 stream");
    };
    reductions => |t, d| {
        let ops: [Body; 5] = [
            |_, x| x[0].sum(&[1]),
            |_, x| x[0].sum(&[0]),
            |_, x| x[0].max(&[0, 2]),
            |_, x| x[0].sum(&[0, 1, 2]),
            |_, x| x[0].max(&[1]),
        ];
        for (i, op) in ops.into_iter().enumerate() {
            op_case(&format!("{t}[{i}]"), d, DType::F32, &[&[6, 300, 5]], op, 1e-5);
            op_case(&format!("{t}[{i}] f64"), d, DType::F64, &[&[6, 300, 5]], op, 1e-12);
        }
    };
    movement => |t, d| {
        let ops: [Body; 5] = [
            |_, x| x[0].permute(&[2, 0, 1]),
            |_, x| x[0].slice(&[1, 0, 1], &[3, 4, 5], &[1, 2, 3]),
            |_, x| x[0].pad(&[1, 0, 2], &[0, 3, 1], 1.5),
            |_, x| Tensor::concat(&[x[0].clone(), x[0].exp()], 1).unwrap(),
            |_, x| x[0].sum(&[1]).reshape(&[3, 1, 5]).broadcast_to(&[3, 4, 5]).permute(&[1, 0, 2]),
        ];
        for (i, op) in ops.into_iter().enumerate() {
            op_case(&format!("{t}[{i}]"), d, DType::F32, &[&[3, 4, 5]], op, 1e-6);
        }
    };
    take_and_scatter_add => |t, d| {
        let build = || {
            let g = trace(
                &[("table", TensorSpec::f32(&[6, 4])), ("idx", TensorSpec::new(DType::I32, &[9]))],
                |_, x| {
                    let rows = x[0].take(&x[1]);
                    let back = rows.scatter_add(&x[1], 6);
                    Ok(vec![("rows".to_string(), rows), ("back".to_string(), back)])
                },
            )?;
            Ok((g, CompileOptions::named("take")))
        };
        let idx = Array::new(&[9], vec![0i32, 5, 2, 2, 7, -1, 3, 0, 5]).unwrap();
        conform(t, d, build, vec![data(&[6, 4], 3, DType::F32), idx], 1, 1e-6);
    };
    matmul_every_transpose => |t, d| {
        let ops: [Body; 4] = [
            |_, x| x[0].matmul(&x[1]),
            |_, x| x[1].t().matmul(&x[0].t()).t(),
            |_, x| x[0].matmul(&x[0].t()),
            |_, x| x[1].t().matmul(&x[1]),
        ];
        for (i, op) in ops.into_iter().enumerate() {
            op_case(&format!("{t}[{i}]"), d, DType::F32, &[&[5, 7], &[7, 3]], op, 1e-5);
            op_case(&format!("{t}[{i}] f64"), d, DType::F64, &[&[5, 7], &[7, 3]], op, 1e-12);
        }
    };
    integer_ops => |t, d| {
        let ops: [Body; 6] = [
            |_, x| x[0].clone() + x[1].clone() * x[0].clone(),
            |_, x| x[0].clone() - x[1].clone(),
            |_, x| x[0].clone() / x[1].clone(),
            |_, x| x[0].maximum(&x[1]) - x[0].minimum(&x[1]),
            |_, x| x[0].abs() + x[1].sign() - x[0].neg(),
            |_, x| x[0].le(&x[1]).select(&x[0], &x[1]).sum(&[1]),
        ];
        for (i, op) in ops.into_iter().enumerate() {
            op_case(&format!("{t}[{i}] i32"), d, DType::I32, &[&[5, 7], &[5, 7]], op, 0.0);
            op_case(&format!("{t}[{i}] i64"), d, DType::I64, &[&[5, 7], &[5, 7]], op, 0.0);
        }
    };
    storage_types_in_and_out => |t, d| {
        let build = || {
            let specs = [
                ("h", TensorSpec::new(DType::F16, &[40])),
                ("b", TensorSpec::new(DType::BF16, &[40])),
                ("u", TensorSpec::new(DType::U8, &[40])),
                ("q", TensorSpec::new(DType::Bool, &[40])),
            ];
            let g = trace(&specs, |_, x| {
                let f32s: Vec<Tensor> = x.iter().map(|v| v.cast(DType::F32)).collect();
                let f = f32s[0].clone() * f32s[1].clone() + f32s[2].clone() * 3.0 + f32s[3].clone();
                Ok(vec![
                    ("h".to_string(), f.cast(DType::F16)),
                    ("b".to_string(), f.cast(DType::BF16)),
                    ("u".to_string(), (f.clone() * 40.0).cast(DType::U8)),
                    ("q".to_string(), f32s[0].gt(&f32s[1])),
                    ("i".to_string(), (f.clone() * 1e3).cast(DType::I64)),
                ])
            })?;
            Ok((g, CompileOptions::named("storage")))
        };
        let args = vec![
            data(&[40], 1, DType::F16),
            data(&[40], 2, DType::BF16),
            Array::new(&[40], (0..40).map(|i| (i * 37 % 256) as u8).collect::<Vec<u8>>()).unwrap(),
            data(&[40], 4, DType::Bool),
        ];
        conform(t, d, build, args, 1, 0.0);
    };
    random_programs_with_gradients => |t, d| {
        // The fusion-equivalence generator (every op family, movement,
        // casts, gather, and the gradients of it all), 12 fixed scripts.
        let specs = [
            ("a", TensorSpec::new(DType::F64, &[3, 4])),
            ("b", TensorSpec::new(DType::F64, &[4])),
            ("s", TensorSpec::new(DType::F64, &[])),
        ];
        for case in 0..12u64 {
            let mut rng = InitRng::new(100 + case);
            let len = 1 + (rng.next_u64() % 23) as usize;
            let script: Vec<(u8, usize, usize)> = (0..len)
                .map(|_| ((rng.next_u64() % 17) as u8, (rng.next_u64() % 16) as usize, (rng.next_u64() % 16) as usize))
                .collect();
            let build = || Ok((trace(&specs, |tr, x| Ok(common::random_graph::build(&script, tr, x)))?, CompileOptions::named("random")));
            let args = vec![
                Array::new(&[3, 4], common::values(12, case)).unwrap(),
                Array::new(&[4], common::values(4, case + 1)).unwrap(),
                Array::new(&[], common::values(1, case + 2)).unwrap(),
            ];
            conform(&format!("{t}[{case}] {script:?}"), d, build, args, 1, 1e-12);
        }
    };
    patches_im2col_col2im => |t, d| {
        // Strides, padding, a non-square window; col2im sums overlaps in
        // the same order on every backend, so f64 agrees to the bit.
        let ops: [Body; 6] = [
            |_, x| x[0].im2col(Window { kernel: [3, 3], stride: 1, padding: 0 }),
            |_, x| x[0].im2col(Window { kernel: [2, 3], stride: 2, padding: 1 }),
            |_, x| x[0].im2col(Window { kernel: [3, 2], stride: 1, padding: 2 }).col2im(&[2, 3, 7, 6], Window { kernel: [3, 2], stride: 1, padding: 2 }),
            |_, x| x[0].im2col(Window { kernel: [3, 3], stride: 2, padding: 1 }).exp().col2im(&[2, 3, 7, 6], Window { kernel: [3, 3], stride: 2, padding: 1 }),
            |_, x| nitro_graph::nn::conv::max_pool2d(&x[0], 3, 2),
            |tr, x| tr.grad(&nitro_graph::nn::conv::max_pool2d(&x[0], 3, 1).tanh().sum_all(), &[&x[0]]).unwrap()[0].clone(),
        ];
        for (i, op) in ops.into_iter().enumerate() {
            op_case(&format!("{t}[{i}]"), d, DType::F32, &[&[2, 3, 7, 6]], op, 1e-6);
            op_case(&format!("{t}[{i}] f64"), d, DType::F64, &[&[2, 3, 7, 6]], op, 1e-13);
        }
    };
    cnn_train_step_lenet5 => |t, d| {
        adam_step_case(t, d, &zoo::lenet5(), &[8, 1, 28, 28], 10, 2, 1e-4);
    };
    mlp_train_step_batch_256 => |t, d| {
        adam_step_case(t, d, &zoo::mlp(&[784, 128, 128, 10]), &[256, 784], 10, 2, 1e-4);
    };
    mixed_precision_matmul => |t, d| {
        // f16/bf16 operands, f32 accumulation and result (cuBLAS GemmEx on
        // a GPU), forward and both gradients (stored in the operand type).
        let ops: [Body; 4] = [
            |_, x| x[0].matmul(&x[1]),
            |_, x| x[1].t().matmul(&x[0].t()),
            |tr, x| tr.grad(&x[0].matmul(&x[1]).tanh().sum_all(), &[&x[0]]).unwrap()[0].cast(DType::F32),
            |tr, x| tr.grad(&x[0].matmul(&x[1]).tanh().sum_all(), &[&x[1]]).unwrap()[0].cast(DType::F32),
        ];
        for (i, op) in ops.into_iter().enumerate() {
            // A gradient is rounded to the low type: another summation
            // order may round it to the neighbouring value (1 ulp).
            let (bf, hf) = if i < 2 { (1e-5, 1e-5) } else { (1.0 / 128.0, 1.0 / 1024.0) };
            op_case(&format!("{t}[{i}] bf16"), d, DType::BF16, &[&[5, 7], &[7, 3]], op, bf);
            op_case(&format!("{t}[{i}] f16"), d, DType::F16, &[&[5, 7], &[7, 3]], op, hf);
        }
    };
    attention_and_its_adjoint => |t, d| {
        // Two heads of width 3 over a batch of two; one head over 3 positions.
        for dims in [(2, 5, 6, 2), (1, 3, 4, 1)] {
            for causal in [false, true] {
                for (dtype, tol) in [(DType::F32, 1e-5), (DType::F64, 1e-12)] {
                    let test = format!("{t} {dims:?} causal={causal} {dtype}");
                    cuda_attention::case(&test, d, dtype, dims, causal, tol);
                }
            }
        }
        // Rows longer than a chunk of keys (256): the statistics and the
        // weighted sums carried across chunks; a head wider than a block
        // (260 > 256 threads): the output columns in two rounds.
        for (dims, causal) in [((1, 257, 2, 1), false), ((1, 257, 2, 1), true), ((1, 2, 260, 1), false)] {
            let test = format!("{t} {dims:?} causal={causal} f32");
            cuda_attention::forward_case(&test, d, DType::F32, dims, causal, 1e-5);
        }
        cuda_attention::case(&format!("{t} (1, 2, 260, 1) adjoint f32"), d, DType::F32, (1, 2, 260, 1), true, 1e-5);
    };
    layer_norm_and_its_gradient => |t, d| {
        // Rows of 5 under two leading axes; rows of 8 under one; rows
        // longer than a block (300 > 256 threads: columns in two rounds).
        for shape in [&[2, 3, 5][..], &[4, 8], &[3, 300]] {
            for (dtype, tol) in [(DType::F32, 1e-5), (DType::F64, 1e-12)] {
                let test = format!("{t} {shape:?} {dtype}");
                cuda_layer_norm::case(&test, d, dtype, shape, 1e-5, tol);
            }
        }
    };
    mlp_train_step_three_steps => |t, d| {
        conform(t, d, || mlp_shared::mlp_train_step(DType::F32), mlp_shared::mlp_args(DType::F32, 1.0), 3, 1e-4);
        conform(t, d, || mlp_shared::mlp_train_step(DType::F64), mlp_shared::mlp_args(DType::F64, 1.0), 3, 1e-10);
    };
}

#[test]
fn cuda_run_device_checks_shapes_and_returns_shaped_outputs() {
    let test = "cuda_run_device_checks_shapes_and_returns_shaped_outputs";
    let g = trace(&[("x", TensorSpec::f32(&[3, 4]))], |_, t| {
        Ok(vec![("y".to_string(), t[0].sum(&[1]))])
    })
    .unwrap();
    let p = match CudaProgram::compile_graph(g, CompileOptions::named("shapes"), Device::Cuda(0)) {
        Ok(p) => p,
        Err(e) if e.to_string().contains("no CUDA driver") => {
            println!("{test}: skipped: no CUDA driver");
            return;
        }
        Err(e) => panic!("{test}: {e}"),
    };
    let dev = nitro_device::cuda::CudaDevice::open(0).unwrap();
    let ones = nitro_device::HostBuffer::F32(vec![1.0; 12]);
    let transposed = dev.upload(&ones).unwrap().reshape(&[4, 3]).unwrap();
    let e = p.run_device(&mut [transposed]).unwrap_err().to_string();
    assert!(e.contains("shape mismatch") && e.contains("[3, 4]"), "{e}");
    // A flat upload fits; the output comes back with its own shape.
    let out = p.run_device(&mut [dev.upload(&ones).unwrap()]).unwrap();
    assert_eq!(out[0].shape(), &[3]);
    assert_eq!(
        out[0].download().unwrap(),
        nitro_device::HostBuffer::F32(vec![4.0; 3])
    );
}
