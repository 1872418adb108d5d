//! The wide (`#[target_feature]`) build of the chunk loops this CPU
//! dispatches to (AVX-512 or AVX2) computes exactly what the baseline build
//! does: every op, on values that include ±0, NaN, ±inf and chunk
//! remainders, compared bit for bit.

use super::FusedKernel;
use crate::backend::cpu::raw::Raw;
use crate::fusion::{schedule, Kernel, Rules};
use crate::ir::{Graph, Op, TensorSpec};
use crate::semantics::Scalar;
use crate::trace::{trace, Tensor};
use nitro_device::{DType, HostBuffer};

/// 1000 elements (not a multiple of the chunk) with the awkward values.
fn values(seed: u64, int: bool) -> Vec<f64> {
    let special = [
        0.0,
        -0.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1.0,
        -1.0,
        0.5,
    ];
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..1000)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let x = (s >> 11) as f64 / (1u64 << 53) as f64 * 8.0 - 4.0;
            match (int, i % 11) {
                (true, _) => (x * 1e3).trunc(),
                (false, 0) => special[(i / 11) % special.len()],
                _ => x,
            }
        })
        .collect()
}

fn every_op(x: &Tensor, y: &Tensor, row: &Tensor, float: bool) -> Vec<(String, Tensor)> {
    let mut out: Vec<Tensor> = vec![];
    if float {
        out.extend([
            x.neg(),
            x.exp(),
            x.log(),
            x.sqrt(),
            x.tanh(),
            x.sigmoid(),
            x.sin(),
            x.cos(),
            x.abs(),
            x.recip(),
            x.sign(),
            x.floor(),
            x.erf(),
            x.gelu_erf(),
            x.pow(y),
        ]);
    } else {
        out.extend([x.neg(), x.abs(), x.sign()]);
    }
    out.extend([
        x + y,
        x - y,
        x * y,
        x / y,
        x.maximum(y),
        x.minimum(y),
        x.gt(y).select(x, y),
        x.le(y).select(&x.neg(), y),
        x.eq_t(y).cast(x.dtype()),
        x.ne_t(y).cast(x.dtype()),
        x.lt(y).cast(DType::I32).cast(x.dtype()),
        x.ge(y).cast(DType::F64).cast(x.dtype()),
        x.cast(DType::F16).cast(x.dtype()),
        x.cast(DType::BF16).cast(x.dtype()),
        x.cast(DType::U8).cast(x.dtype()),
        x.cast(DType::I64).cast(x.dtype()),
        // A broadcast row: a strided read inside each chunk.
        x * &row.broadcast_to(&[25, 40]).reshape(&[1000]),
    ]);
    out.into_iter()
        .enumerate()
        .map(|(i, t)| (format!("o{i}"), t))
        .collect()
}

fn buffer(d: DType, v: &[f64]) -> HostBuffer {
    let mut b = HostBuffer::zeros(d, v.len());
    let r = Raw::of(&mut b);
    for (i, &x) in v.iter().enumerate() {
        // SAFETY: `b` holds v.len() elements of dtype d.
        unsafe {
            match Scalar::fill(d, x) {
                Scalar::F32(x) => *r.ptr::<f32>().add(i) = x,
                Scalar::F64(x) => *r.ptr::<f64>().add(i) = x,
                Scalar::I32(x) => *r.ptr::<i32>().add(i) = x,
                Scalar::I64(x) => *r.ptr::<i64>().add(i) = x,
                Scalar::Bool(x) => *r.ptr::<bool>().add(i) = x,
            }
        }
    }
    b
}

/// Run every fused kernel of `graph` (each reading graph inputs only) with
/// the baseline build and with the dispatched one; the outputs' bytes.
fn both_builds(graph: &Graph, inputs: &mut [HostBuffer]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let (mut base, mut wide) = (vec![], vec![]);
    for kernel in schedule(graph, Rules::default()).kernels {
        let Kernel::Fused(group) = kernel else {
            continue;
        };
        let k = FusedKernel::new(graph, &group);
        let ins: Vec<Raw> = k
            .inputs
            .iter()
            .map(|&n| match graph.nodes[n].op {
                Op::Input { index } => Raw::of(&mut inputs[index]),
                ref other => panic!("kernel reads {}: not an input", other.name()),
            })
            .collect();
        let outs = |run: &dyn Fn(&[Raw], &[Raw])| -> Vec<Vec<u8>> {
            let mut bufs: Vec<HostBuffer> = k
                .outputs
                .iter()
                .map(|&o| HostBuffer::zeros(graph.nodes[o].spec.dtype, graph.nodes[o].spec.numel()))
                .collect();
            let raws: Vec<Raw> = bufs.iter_mut().map(Raw::of).collect();
            run(&ins, &raws);
            bufs.iter().map(|b| b.to_le_bytes()).collect()
        };
        base.extend(outs(&|i, o| k.run_baseline(i, o)));
        wide.extend(outs(&|i, o| k.run(i, o)));
    }
    (base, wide)
}

#[test]
fn wide_build_equals_baseline_bit_for_bit() {
    for d in [DType::F32, DType::F64, DType::I32, DType::I64] {
        let float = matches!(d, DType::F32 | DType::F64);
        let specs = [
            ("x", TensorSpec::new(d, &[1000])),
            ("y", TensorSpec::new(d, &[1000])),
            ("row", TensorSpec::new(d, &[1, 40])),
        ];
        let graph = trace(&specs, |_, t| Ok(every_op(&t[0], &t[1], &t[2], float))).expect("traces");
        let row = values(3, !float)[..40].to_vec();
        let mut inputs = [
            buffer(d, &values(1, !float)),
            buffer(d, &values(2, !float)),
            buffer(d, &row),
        ];
        let (base, wide) = both_builds(&graph, &mut inputs);
        assert!(!base.is_empty(), "{d}: no fused kernel ran");
        for (i, (b, w)) in base.iter().zip(&wide).enumerate() {
            assert!(b == w, "{d}: output {i} differs between the builds");
        }
    }
}

#[test]
fn a_broadcast_last_axis_repeats_each_source_element() {
    // rep 2 divides every chunk start (the whole-window walk); rep 3 does
    // not (the per-run walk); both over several chunks and a remainder.
    for rep in [2usize, 3, 4] {
        let rows = 700;
        let specs = [("col", TensorSpec::new(DType::F32, &[rows, 1]))];
        let graph = trace(&specs, |_, t| {
            let wide = t[0].broadcast_to(&[rows, rep]).reshape(&[rows * rep]);
            Ok(vec![("y".into(), &wide * 2.0)])
        })
        .expect("traces");
        let col: Vec<f64> = (0..rows).map(|i| i as f64 - 300.5).collect();
        let mut inputs = [buffer(DType::F32, &col)];
        let (base, wide) = both_builds(&graph, &mut inputs);
        let want: Vec<u8> = (0..rows * rep)
            .flat_map(|i| ((col[i / rep] * 2.0) as f32).to_le_bytes())
            .collect();
        assert!(base[0] == want, "rep {rep}: baseline build");
        assert!(wide[0] == want, "rep {rep}: wide build");
    }
}

#[test]
fn paired_ops_round_after_each_op_on_either_side() {
    use super::chunk::Instr;
    // Every inner op under every outer op, the inner result on the left and
    // on the right, against plain arithmetic written here (IEEE ops round
    // to the type after each op; no fused multiply-add).
    type F = fn(f64, f64) -> f64;
    let inner: [(&str, F); 4] = [
        ("add", |a, b| a + b),
        ("sub", |a, b| a - b),
        ("mul", |a, b| a * b),
        ("div", |a, b| a / b),
    ];
    let outer = ["add", "sub", "mul"];
    let apply = |op: &str, a: &Tensor, b: &Tensor| match op {
        "add" => a + b,
        "sub" => a - b,
        "mul" => a * b,
        _ => a / b,
    };
    // Operand order per (outer, side): the inner nodes must differ (or CSE
    // merges them into one value with several uses, which never pairs).
    const ORDER: [[usize; 3]; 6] = [
        [0, 1, 2],
        [1, 0, 2],
        [0, 2, 1],
        [2, 0, 1],
        [1, 2, 0],
        [2, 1, 0],
    ];
    for d in [DType::F32, DType::F64] {
        let specs = [
            ("x", TensorSpec::new(d, &[1000])),
            ("y", TensorSpec::new(d, &[1000])),
            ("z", TensorSpec::new(d, &[1000])),
        ];
        let graph = trace(&specs, |_, t| {
            let mut out = vec![];
            for (i, _) in &inner {
                for (oi, o) in outer.iter().enumerate() {
                    let [a, b, c] = ORDER[2 * oi];
                    let p = apply(i, &t[a], &t[b]);
                    out.push((format!("{i}{o}l"), apply(o, &p, &t[c])));
                    let [a, b, c] = ORDER[2 * oi + 1];
                    let p = apply(i, &t[a], &t[b]);
                    out.push((format!("{i}{o}r"), apply(o, &t[c], &p)));
                }
            }
            Ok(out)
        })
        .expect("traces");
        let vals = [values(1, false), values(2, false), values(3, false)];
        let mut inputs = vals.clone().map(|v| buffer(d, &v));
        let pairs: usize = schedule(&graph, Rules::default())
            .kernels
            .iter()
            .filter_map(|k| match k {
                Kernel::Fused(g) => Some(FusedKernel::new(&graph, g)),
                _ => None,
            })
            .map(|k| {
                k.instrs
                    .iter()
                    .filter(|i| matches!(i, Instr::Pair { .. }))
                    .count()
            })
            .sum();
        assert_eq!(pairs, 24, "{d}: every outer op takes its inner op");
        let (base, wide) = both_builds(&graph, &mut inputs);
        let round = |v: f64| if d == DType::F32 { v as f32 as f64 } else { v };
        let mut n = 0;
        for (_, f) in &inner {
            for (oi, o) in outer.iter().enumerate() {
                let g: F = match *o {
                    "add" => |a, b| a + b,
                    "sub" => |a, b| a - b,
                    _ => |a, b| a * b,
                };
                for right in [false, true] {
                    let [a, b, c] = ORDER[2 * oi + right as usize];
                    let want: Vec<u8> = (0..1000)
                        .flat_map(|e| {
                            let v = |k: usize| round(vals[k][e]);
                            let (xe, ye, ze) = (v(a), v(b), v(c));
                            let p = round(f(xe, ye));
                            let v = round(if right { g(ze, p) } else { g(p, ze) });
                            match d {
                                DType::F32 => (v as f32).to_le_bytes().to_vec(),
                                _ => v.to_le_bytes().to_vec(),
                            }
                        })
                        .collect();
                    let same = |got: &[u8]| {
                        // NaN payloads may differ; every other value exactly.
                        got.chunks(d.size_of())
                            .zip(want.chunks(d.size_of()))
                            .all(|(a, b)| {
                                let nan = |c: &[u8]| match d {
                                    DType::F32 => {
                                        f32::from_le_bytes(c.try_into().unwrap()).is_nan()
                                    }
                                    _ => f64::from_le_bytes(c.try_into().unwrap()).is_nan(),
                                };
                                a == b || (nan(a) && nan(b))
                            })
                    };
                    assert!(same(&base[n]), "{d}: output {n} (baseline)");
                    assert!(same(&wide[n]), "{d}: output {n} (wide)");
                    n += 1;
                }
            }
        }
    }
}

/// Exact GELU and its derivative of one value (a training forward keeps
/// both) run as one instruction sharing the erf, with the bits of each op
/// evaluated alone by the semantics table; GELU of another value and a
/// derivative alone stay single ops.
#[test]
fn gelu_and_its_derivative_share_one_erf_with_the_bits_of_each_op() {
    use super::chunk::Instr;
    use crate::ir::UnaryOp;
    use crate::semantics::float_unary;
    for d in [DType::F32, DType::F64] {
        let specs = [
            ("x", TensorSpec::new(d, &[1000])),
            ("y", TensorSpec::new(d, &[1000])),
        ];
        let graph = trace(&specs, |_, t| {
            // One computed value read by both (as a matmul's bias add is):
            // one group.
            let h = &t[0] + &t[1];
            Ok(vec![
                ("gelu".into(), h.gelu_erf()),
                ("grad".into(), h.gelu_erf_grad()),
                ("gelu_y".into(), t[1].gelu_erf()),
                ("grad_x2".into(), (&t[0] * 2.0).gelu_erf_grad()),
            ])
        })
        .expect("traces");
        let kernels: Vec<FusedKernel> = schedule(&graph, Rules::default())
            .kernels
            .iter()
            .filter_map(|k| match k {
                Kernel::Fused(g) => Some(FusedKernel::new(&graph, g)),
                _ => None,
            })
            .collect();
        let count = |f: &dyn Fn(&Instr) -> bool| -> usize {
            kernels
                .iter()
                .flat_map(|k| &k.instrs)
                .filter(|i| f(i))
                .count()
        };
        assert_eq!(count(&|i| matches!(i, Instr::GeluBoth { .. })), 1, "{d}");
        let single =
            |op: UnaryOp| move |i: &Instr| matches!(i, Instr::Unary { op: o, .. } if *o == op);
        assert_eq!(count(&single(UnaryOp::Gelu)), 1, "{d}: GELU of y alone");
        assert_eq!(
            count(&single(UnaryOp::GeluGrad)),
            1,
            "{d}: the derivative of 2x alone"
        );
        let vals = [values(1, false), values(2, false)];
        let mut inputs = vals.clone().map(|v| buffer(d, &v));
        let (base, wide) = both_builds(&graph, &mut inputs);
        // Each output's op and argument, element by element, in the
        // dtype's own arithmetic.
        let ops = [
            UnaryOp::Gelu,
            UnaryOp::GeluGrad,
            UnaryOp::Gelu,
            UnaryOp::GeluGrad,
        ];
        let f32_arg: [fn(f32, f32) -> f32; 4] =
            [|x, y| x + y, |x, y| x + y, |_, y| y, |x, _| x * 2.0];
        let f64_arg: [fn(f64, f64) -> f64; 4] =
            [|x, y| x + y, |x, y| x + y, |_, y| y, |x, _| x * 2.0];
        let wants: Vec<Vec<u8>> = (0..4)
            .map(|o| {
                let pairs = vals[0].iter().zip(&vals[1]);
                match d {
                    DType::F32 => pairs
                        .flat_map(|(&x, &y)| {
                            float_unary(ops[o], f32_arg[o](x as f32, y as f32)).to_le_bytes()
                        })
                        .collect(),
                    _ => pairs
                        .flat_map(|(&x, &y)| float_unary(ops[o], f64_arg[o](x, y)).to_le_bytes())
                        .collect(),
                }
            })
            .collect();
        let bits = |b: &[u8]| -> Vec<u64> {
            b.chunks(d.size_of())
                .map(|c| match d {
                    DType::F32 => {
                        let x = f32::from_le_bytes(c.try_into().unwrap());
                        if x.is_nan() {
                            u64::MAX
                        } else {
                            x.to_bits() as u64
                        }
                    }
                    _ => {
                        let x = f64::from_le_bytes(c.try_into().unwrap());
                        if x.is_nan() {
                            u64::MAX
                        } else {
                            x.to_bits()
                        }
                    }
                })
                .collect()
        };
        // Outputs come kernel by kernel; match them by value set.
        for w in &wants {
            assert!(
                base.iter().any(|b| bits(b) == bits(w)),
                "{d}: an output of the baseline build differs from the table"
            );
            assert!(
                wide.iter().any(|b| bits(b) == bits(w)),
                "{d}: an output of the wide build differs from the table"
            );
        }
    }
}
