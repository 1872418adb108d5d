//! The scalar semantics table (`nitro_graph::semantics`) against the two
//! places that compute with it: constant folding (a graph of constants taken
//! through the default passes) and the CPU fused kernels (the same op over
//! input arrays). For random inputs rich in NaN, ±inf, ±0, subnormals and
//! integer edges, both give the table's value bit for bit (NaN payloads
//! aside), for every unary, binary, comparison and cast, and every dtype.

use nitro_graph::ir::{BinaryOp, CmpOp, Op, UnaryOp};
use nitro_graph::passes::{default_pipeline, optimize};
use nitro_graph::semantics::Scalar;
use nitro_graph::{
    compile_graph, trace, Array, CompileOptions, DType, Graph, HostBuffer, Tensor, TensorSpec,
};
use proptest::prelude::*;

/// Every dtype but bool.
const NUMERIC: [DType; 7] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I32,
    DType::I64,
    DType::U8,
];

/// A test-local table from op to tracer method, exhaustive so that a new op
/// fails to compile here until it is tested.
fn apply_unary(op: UnaryOp, x: &Tensor) -> Tensor {
    match op {
        UnaryOp::Neg => x.neg(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.log(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => x.sigmoid(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Abs => x.abs(),
        UnaryOp::Recip => x.recip(),
        UnaryOp::Sign => x.sign(),
        UnaryOp::Floor => x.floor(),
        UnaryOp::Erf => x.erf(),
        UnaryOp::Gelu => x.gelu_erf(),
        UnaryOp::GeluGrad => x.gelu_erf_grad(),
        UnaryOp::StopGradient => x.stop_gradient(),
    }
}

fn apply_binary(op: BinaryOp, x: &Tensor, y: &Tensor) -> Tensor {
    match op {
        BinaryOp::Add => x.add(y),
        BinaryOp::Sub => x.sub(y),
        BinaryOp::Mul => x.mul(y),
        BinaryOp::Div => x.div(y),
        BinaryOp::Max => x.maximum(y),
        BinaryOp::Min => x.minimum(y),
        BinaryOp::Pow => x.pow(y),
    }
}

fn apply_compare(op: CmpOp, x: &Tensor, y: &Tensor) -> Tensor {
    match op {
        CmpOp::Eq => x.eq_t(y),
        CmpOp::Ne => x.ne_t(y),
        CmpOp::Lt => x.lt(y),
        CmpOp::Le => x.le(y),
        CmpOp::Gt => x.gt(y),
        CmpOp::Ge => x.ge(y),
    }
}

/// The element a `fill` of `v` of dtype `d` stores, as the f64 it carries:
/// inputs and constants then hold the same element.
fn canonical(d: DType, v: f64) -> f64 {
    Scalar::fill(d, v).stored(d).unwrap_or(v)
}

/// An array of dtype `d` holding the canonical `values`.
fn array(d: DType, values: &[f64]) -> Array {
    let n = [values.len()];
    let v = values.iter();
    match d {
        DType::F32 => Array::new(&n, v.map(|&x| x as f32).collect::<Vec<_>>()),
        DType::F64 => Array::new(&n, values.to_vec()),
        DType::F16 => Array::new(
            &n,
            v.map(|&x| nitro_device::f16::from_f64(x))
                .collect::<Vec<_>>(),
        ),
        DType::BF16 => Array::new(
            &n,
            v.map(|&x| nitro_device::bf16::from_f64(x))
                .collect::<Vec<_>>(),
        ),
        DType::I32 => Array::new(&n, v.map(|&x| x as i32).collect::<Vec<_>>()),
        DType::I64 => Array::new(&n, v.map(|&x| x as i64).collect::<Vec<_>>()),
        DType::U8 => Array::new(&n, v.map(|&x| x as u8).collect::<Vec<_>>()),
        DType::Bool => Array::new(&n, v.map(|&x| x != 0.0).collect::<Vec<_>>()),
    }
    .unwrap()
}

/// The registers an output array loads into.
fn registers(a: &Array) -> Vec<Scalar> {
    match a.data() {
        HostBuffer::F32(v) => v.iter().map(|&x| Scalar::F32(x)).collect(),
        HostBuffer::F64(v) => v.iter().map(|&x| Scalar::F64(x)).collect(),
        HostBuffer::F16(v) => v.iter().map(|&x| Scalar::F32(x.to_f32())).collect(),
        HostBuffer::BF16(v) => v.iter().map(|&x| Scalar::F32(x.to_f32())).collect(),
        HostBuffer::I32(v) => v.iter().map(|&x| Scalar::I32(x)).collect(),
        HostBuffer::I64(v) => v.iter().map(|&x| Scalar::I64(x)).collect(),
        HostBuffer::U8(v) => v.iter().map(|&x| Scalar::I32(x as i32)).collect(),
        HostBuffer::Bool(v) => v.iter().map(|&x| Scalar::Bool(x)).collect(),
    }
}

/// Bit-identical, or both NaN.
fn same(a: Scalar, b: Scalar) -> bool {
    match (a, b) {
        (Scalar::F32(x), Scalar::F32(y)) => {
            x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
        }
        (Scalar::F64(x), Scalar::F64(y)) => {
            x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
        }
        _ => a == b,
    }
}

/// The table's answer, rounded to the output's storage type.
fn expect(out: DType, r: Scalar) -> Scalar {
    r.cast(out)
}

/// `f` applied to element-wise argument tensors, two ways: over input
/// arrays through the CPU kernels, and over constants through the passes.
/// Checks both against `want` (per element) and each other.
fn check(
    what: &str,
    dtypes: &[DType],
    args: &[Vec<f64>],
    f: &dyn Fn(&[Tensor]) -> Tensor,
    want: &dyn Fn(&[Scalar]) -> Option<Scalar>,
) -> Result<(), TestCaseError> {
    let n = args[0].len();
    let args: Vec<Vec<f64>> = args
        .iter()
        .zip(dtypes)
        .map(|(a, &d)| a.iter().map(|&v| canonical(d, v)).collect())
        .collect();
    // Kernel path.
    let specs: Vec<(String, TensorSpec)> = dtypes
        .iter()
        .enumerate()
        .map(|(i, &d)| (format!("x{i}"), TensorSpec::new(d, &[n])))
        .collect();
    let named: Vec<(&str, TensorSpec)> =
        specs.iter().map(|(s, t)| (s.as_str(), t.clone())).collect();
    let g = trace(&named, |_, t| Ok(vec![("y".to_string(), f(t))])).unwrap();
    let out_dtype = g.spec(g.outputs[0].1).dtype;
    let program = compile_graph(g, CompileOptions::named(what)).unwrap();
    let mut inputs: Vec<Array> = args.iter().zip(dtypes).map(|(a, &d)| array(d, a)).collect();
    let kernel = registers(&program.run(&mut inputs).unwrap()[0]);
    // Folding path: one output per element, each an op over constants.
    let mut g: Graph = trace(&[], |tr, _| {
        Ok((0..n)
            .map(|i| {
                let consts: Vec<Tensor> = args
                    .iter()
                    .zip(dtypes)
                    .map(|(a, &d)| tr.scalar(a[i], d))
                    .collect();
                (format!("y{i}"), f(&consts))
            })
            .collect())
    })
    .unwrap();
    optimize(&mut g, &default_pipeline());
    for i in 0..n {
        let regs: Vec<Scalar> = args
            .iter()
            .zip(dtypes)
            .map(|(a, &d)| Scalar::fill(d, a[i]))
            .collect();
        let want = expect(out_dtype, want(&regs).expect("defined"));
        let at = format!(
            "{what} at {:?}",
            args.iter().map(|a| a[i]).collect::<Vec<_>>()
        );
        prop_assert!(
            same(kernel[i], want),
            "{at}: kernel {:?}, table {want:?}",
            kernel[i]
        );
        let node = &g.nodes[g.outputs[i].1];
        match node.op {
            Op::Fill { value, .. } => {
                let folded = Scalar::fill(out_dtype, value);
                prop_assert!(
                    same(folded, want),
                    "{at}: folded {folded:?}, table {want:?}"
                );
            }
            // Only a value a fill cannot carry (an i64 beyond 2^53) stays.
            _ => prop_assert!(
                out_dtype == DType::I64 && want.stored(out_dtype).is_none(),
                "{at}: not folded"
            ),
        }
    }
    Ok(())
}

/// Values rich in edge cases for dtype `d` (as f64; canonicalised later).
fn values(d: DType) -> BoxedStrategy<Vec<f64>> {
    let edge: Vec<f64> = if d.is_float() {
        vec![
            f64::NAN,
            -f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            -2.5,
            3.0,
            1e-40,
            -1e-310,
            f64::MAX,
            f32::MAX as f64,
            65504.0,
            1e30,
        ]
    } else {
        vec![
            0.0,
            1.0,
            -1.0,
            2.0,
            -7.0,
            127.0,
            128.0,
            255.0,
            i32::MIN as f64,
            i32::MAX as f64,
            i64::MIN as f64,
            (1u64 << 53) as f64,
        ]
    };
    let element = prop_oneof![
        prop::sample::select(edge),
        any::<f64>(),
        (-1000.0f64..1000.0),
        (-1000i64..1000).prop_map(|v| v as f64),
    ];
    prop::collection::vec(element, 4..12).boxed()
}

/// Dtypes that compute (the storage types f16, bf16 and u8 are cast to one
/// of these first; their rounding is covered by the cast test).
fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(vec![DType::F32, DType::F64, DType::I32, DType::I64])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn unary_ops_fold_and_run_as_the_table_says((d, xs) in dtype().prop_flat_map(|d| (Just(d), values(d)))) {
        for op in UnaryOp::ALL {
            if !d.is_float() && op.on_integers().is_none() {
                continue;
            }
            check(&format!("{op:?} {d}"), &[d], std::slice::from_ref(&xs), &|t| apply_unary(op, &t[0]), &|a| a[0].unary(op))?;
        }
    }

    #[test]
    fn binary_ops_fold_and_run_as_the_table_says((d, mut a, mut b) in dtype().prop_flat_map(|d| (Just(d), values(d), values(d)))) {
        let n = a.len().min(b.len());
        a.truncate(n);
        b.truncate(n);
        for op in BinaryOp::ALL {
            if !d.is_float() && op.on_integers().is_none() {
                continue;
            }
            check(&format!("{op:?} {d}"), &[d, d], &[a.clone(), b.clone()], &|t| apply_binary(op, &t[0], &t[1]), &|s| s[0].binary(op, s[1]))?;
            check(&format!("{op:?} {d} (x, x)"), &[d, d], &[a.clone(), a.clone()], &|t| apply_binary(op, &t[0], &t[1]), &|s| s[0].binary(op, s[1]))?;
        }
        for op in CmpOp::ALL {
            check(&format!("{op:?} {d}"), &[d, d], &[a.clone(), b.clone()], &|t| apply_compare(op, &t[0], &t[1]), &|s| s[0].compare(op, s[1]).map(Scalar::Bool))?;
        }
    }

    #[test]
    fn casts_fold_and_run_as_the_table_says(xs in values(DType::F64)) {
        let all = [NUMERIC.as_slice(), &[DType::Bool]].concat();
        for &from in &all {
            for &to in &all {
                check(&format!("cast {from} -> {to}"), &[from], std::slice::from_ref(&xs), &|t| t[0].cast(to), &|s| Some(s[0].cast(to)))?;
            }
        }
    }
}

#[test]
fn sign_keeps_nan_and_signed_zero() {
    let s = |x: f32| Scalar::F32(x).unary(UnaryOp::Sign).unwrap();
    assert!(matches!(s(f32::NAN), Scalar::F32(v) if v.is_nan()));
    assert!(matches!(s(-0.0), Scalar::F32(v) if v == 0.0 && v.is_sign_negative()));
    assert_eq!(s(3.0), Scalar::F32(1.0));
    assert_eq!(s(-f32::INFINITY), Scalar::F32(-1.0));
    assert_eq!(
        Scalar::I32(i32::MIN).unary(UnaryOp::Sign),
        Some(Scalar::I32(-1))
    );
    // Integer division by zero is 0 and MIN / -1 wraps, on every path.
    assert_eq!(
        Scalar::I32(7).binary(BinaryOp::Div, Scalar::I32(0)),
        Some(Scalar::I32(0))
    );
    assert_eq!(
        Scalar::I64(i64::MIN).binary(BinaryOp::Div, Scalar::I64(-1)),
        Some(Scalar::I64(i64::MIN))
    );
    // Float-only ops have no integer row.
    assert_eq!(Scalar::I32(4).unary(UnaryOp::Sqrt), None);
    assert_eq!(Scalar::I32(4).binary(BinaryOp::Pow, Scalar::I32(2)), None);
}
