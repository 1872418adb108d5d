//! The IR prints and round-trips through serde; each pass does its one job;
//! fusion turns an elementwise chain into one kernel; the memory plan reuses
//! buffers.

use nitro_graph::passes::{ConstantFold, Cse, Dce, Pass, Simplify};
use nitro_graph::{compile, compile_graph, trace, Array, CompileOptions, Graph, TensorSpec};

fn x_spec() -> [(&'static str, TensorSpec); 1] {
    [("x", TensorSpec::f32(&[64]))]
}

#[test]
fn graph_prints_and_round_trips_through_serde() {
    let g = trace(&x_spec(), |_, t| {
        Ok(vec![("y".into(), (t[0].exp() * 2.0).tanh())])
    })
    .unwrap();
    let text = g.to_string();
    assert!(
        text.contains("input \"x\"")
            && text.contains("exp")
            && text.contains("tanh")
            && text.contains("return y="),
        "{text}"
    );
    let json = serde_json::to_string(&g).unwrap();
    let back: Graph = serde_json::from_str(&json).unwrap();
    assert_eq!(back, g);
    let x = Array::new(&[64], (0..64).map(|i| i as f32 / 64.0).collect::<Vec<_>>()).unwrap();
    let a = compile_graph(g, CompileOptions::named("a"))
        .unwrap()
        .run(&mut [x.clone()])
        .unwrap();
    let b = compile_graph(back, CompileOptions::named("b"))
        .unwrap()
        .run(&mut [x])
        .unwrap();
    assert_eq!(a, b);
}

#[test]
fn elementwise_chain_is_one_kernel() {
    let p = compile(&x_spec(), CompileOptions::named("chain"), |_, t| {
        let x = &t[0];
        Ok(vec![(
            "y".into(),
            ((x * 3.0 + 1.0).exp() / (x * x + 2.0)).sqrt().tanh(),
        )])
    })
    .unwrap();
    assert_eq!(p.kernel_count(), 1, "{}", p.listing());
    // Only the output is stored: every temporary stays in registers.
    assert_eq!(p.peak_bytes(), 64 * 4, "{}", p.listing());
}

#[test]
fn cse_merges_and_dce_drops() {
    let mut g = trace(&x_spec(), |_, t| {
        let a = t[0].exp();
        let b = t[0].exp();
        let _unused = t[0].sin();
        Ok(vec![("y".into(), a + b)])
    })
    .unwrap();
    let count = |g: &Graph, name: &str| g.nodes.iter().filter(|n| n.op.name() == name).count();
    assert_eq!(count(&g, "exp"), 2);
    assert!(Cse.run(&mut g));
    assert!(Dce.run(&mut g));
    assert_eq!(count(&g, "exp"), 1);
    assert_eq!(count(&g, "sin"), 0);
    assert!(!Dce.run(&mut g), "a second DCE finds nothing");
}

#[test]
fn simplify_and_fold() {
    let mut g = trace(&x_spec(), |tr, t| {
        let two = tr.scalar(2.0, nitro_graph::DType::F32);
        let four = &two * &two; // folds to a constant
        Ok(vec![("y".into(), (&t[0] * 1.0 - 0.0) * four)])
    })
    .unwrap();
    Simplify.run(&mut g);
    ConstantFold.run(&mut g);
    Dce.run(&mut g);
    Simplify.run(&mut g);
    Dce.run(&mut g);
    let ops: Vec<String> = g.nodes.iter().map(|n| n.op.name()).collect();
    assert_eq!(
        ops.iter().filter(|o| *o == "mul").count(),
        1,
        "x*1 and 2*2 are gone: {ops:?}"
    );
    assert!(!ops.iter().any(|o| o == "sub"), "x-0 is gone: {ops:?}");
    let mut x = [Array::new(&[64], vec![1.5f32; 64]).unwrap()];
    let y = compile_graph(g, CompileOptions::named("s"))
        .unwrap()
        .run(&mut x)
        .unwrap();
    assert_eq!(y[0].to_f32_vec(), vec![6.0; 64]);
}

#[test]
fn simplify_keeps_x_plus_zero_which_turns_negative_zero_positive() {
    // -0.0 + 0.0 == +0.0, so `x + 0.0` is no identity on floats; `x + -0.0` is.
    let build = |zero: f64| {
        let mut g = trace(&x_spec(), |_, t| Ok(vec![("y".into(), &t[0] + zero)])).unwrap();
        Simplify.run(&mut g);
        g
    };
    let adds = |g: &nitro_graph::Graph| g.nodes.iter().filter(|n| n.op.name() == "add").count();
    assert_eq!(adds(&build(0.0)), 1);
    assert_eq!(adds(&build(-0.0)), 0);
    let mut x = [Array::new(&[64], vec![-0.0f32; 64]).unwrap()];
    let y = compile_graph(build(0.0), CompileOptions::named("z"))
        .unwrap()
        .run(&mut x)
        .unwrap();
    assert!(y[0]
        .to_f32_vec()
        .iter()
        .all(|v| *v == 0.0 && v.is_sign_positive()));
}

#[test]
fn transposes_fold_into_matmul() {
    let p = compile(
        &[
            ("a", TensorSpec::f32(&[3, 4])),
            ("b", TensorSpec::f32(&[5, 4])),
        ],
        CompileOptions::named("t"),
        |_, t| Ok(vec![("y".into(), t[0].matmul(&t[1].t()))]),
    )
    .unwrap();
    assert!(
        !p.graph().nodes.iter().any(|n| n.op.name() == "permute"),
        "{}",
        p.listing()
    );
    assert_eq!(p.kernel_count(), 1);
}

#[test]
fn unused_gradients_are_never_built() {
    let g = trace(
        &[("a", TensorSpec::f32(&[8])), ("b", TensorSpec::f32(&[8]))],
        |tr, t| {
            let loss = (t[0].exp() * 2.0).sum_all();
            let grads = tr.grad(&loss, &[&t[0], &t[1]])?;
            Ok(vec![
                ("ga".into(), grads[0].clone()),
                ("gb".into(), grads[1].clone()),
            ])
        },
    )
    .unwrap();
    // b does not reach the loss: its gradient is a zero fill, with no backward nodes.
    let gb = g.outputs[1].1;
    assert_eq!(g.nodes[gb].op.name(), "fill");
}

#[test]
fn memory_plan_reuses_buffers() {
    // A chain of matmuls: each intermediate dies after the next product.
    let p = compile(
        &[
            ("x", TensorSpec::f32(&[32, 32])),
            ("w", TensorSpec::f32(&[32, 32])),
        ],
        CompileOptions::named("chain"),
        |_, t| {
            let mut h = t[0].clone();
            for _ in 0..6 {
                h = h.matmul(&t[1]);
            }
            Ok(vec![("y".into(), h)])
        },
    )
    .unwrap();
    let s = p.stats();
    assert!(s.peak_bytes < s.unshared_bytes, "{s:?}");
    assert!(
        s.peak_bytes <= 3 * 32 * 32 * 4,
        "at most three live 32x32 buffers: {s:?}"
    );
}

/// The gradient of slices that split a tensor (a fused QKV projection's
/// q, k, v) is one concatenation of the pieces' gradients, not full-size
/// zero pads summed; pieces with a gap between them keep the pads. Both
/// equal the closed form: each column's gradient is its piece's weight.
#[test]
fn the_gradient_of_a_split_is_a_concatenation() {
    for (pieces, covers) in [
        (vec![(0, 2), (2, 5), (5, 6)], true),
        (vec![(0, 2), (4, 6)], false),
    ] {
        let specs = [("x", TensorSpec::new(nitro_graph::DType::F64, &[3, 6]))];
        let cut = pieces.clone();
        let mut g = trace(&specs, move |tr, t| {
            let loss = cut
                .iter()
                .enumerate()
                .map(|(i, &(a, b))| (t[0].narrow(1, a, b) * (i as f64 + 2.0)).sum_all())
                .reduce(|x, y| x + y)
                .unwrap();
            Ok(vec![("g".into(), tr.grad(&loss, &[&t[0]])?[0].clone())])
        })
        .unwrap();
        // The pads a join replaced are dead; the pass that drops them runs first.
        Dce.run(&mut g);
        let ops: Vec<String> = g.nodes.iter().map(|n| n.op.name()).collect();
        let pads = ops.iter().filter(|o| *o == "pad").count();
        assert_eq!(ops.iter().any(|o| o == "concat"), covers, "{ops:?}");
        assert_eq!(pads, if covers { 0 } else { 2 }, "{ops:?}");
        let program = compile_graph(g, CompileOptions::named("split_grad")).unwrap();
        let mut x = [Array::new(&[3, 6], vec![0.5f64; 18]).unwrap()];
        let got = program.run(&mut x).unwrap().remove(0).to_f64_vec();
        for r in 0..3 {
            for c in 0..6 {
                let want = pieces
                    .iter()
                    .position(|&(a, b)| a <= c && c < b)
                    .map_or(0.0, |i| i as f64 + 2.0);
                assert_eq!(got[r * 6 + c], want, "row {r} column {c}");
            }
        }
    }
}

/// `op(x @ w, column)` by naive f64 loops, for rows `rows` of the [n, n]
/// result.
fn naive_rows(
    x: &[f32],
    w: &[f32],
    n: usize,
    rows: &[usize],
    op: impl Fn(f64, usize) -> f64,
) -> Vec<f64> {
    let mut out = vec![];
    for &i in rows {
        for j in 0..n {
            let dot: f64 = (0..n)
                .map(|p| x[i * n + p] as f64 * w[p * n + j] as f64)
                .sum();
            out.push(op(dot, j));
        }
    }
    out
}

/// A matmul's epilogue writes its result over the product it reads element
/// for element (the product dies there), so the program holds one [n, n]
/// buffer, not two, and its rows still equal naive loops', at a size whose
/// epilogue runs on row blocks while the product is computed. (A product
/// read out of order too: `fusion_equivalence`.)
#[test]
fn an_elementwise_kernel_writes_over_the_dying_input_it_reads_in_order() {
    let n = 512;
    let specs = [
        ("x", TensorSpec::f32(&[n, n])),
        ("w", TensorSpec::f32(&[n, n])),
        ("b", TensorSpec::f32(&[1, n])),
    ];
    let value = |i: usize, s: f32| ((i * 7919 % 1013) as f32 / 1013.0 - 0.5) * s;
    let x: Vec<f32> = (0..n * n).map(|i| value(i, 1.0)).collect();
    let w: Vec<f32> = (0..n * n).map(|i| value(i + 17, 0.1)).collect();
    let b: Vec<f32> = (0..n).map(|i| value(i + 3, 1.0)).collect();
    let args = || {
        [
            Array::new(&[n, n], x.clone()).unwrap(),
            Array::new(&[n, n], w.clone()).unwrap(),
            Array::new(&[1, n], b.clone()).unwrap(),
        ]
    };
    let rows = [0, 1, 119, 120, 255, 300, 511];
    let close = |got: &[f32], want: &[f64]| {
        for (g, w) in got.iter().zip(want) {
            assert!(
                (*g as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()),
                "{g} vs {w}"
            );
        }
    };
    let pick = |a: &Array| -> Vec<f32> {
        let v = a.to_f32_vec();
        rows.iter()
            .flat_map(|&i| v[i * n..(i + 1) * n].to_vec())
            .collect()
    };

    let in_order = compile(&specs, CompileOptions::named("epilogue"), |_, t| {
        let y = t[0].matmul(&t[1]);
        Ok(vec![(
            "z".into(),
            nitro_graph::nn::ops::relu(&(&y + &t[2])) + 1.0,
        )])
    })
    .unwrap();
    assert_eq!(in_order.peak_bytes(), n * n * 4, "{}", in_order.listing());
    let got = in_order.run(&mut args()).unwrap();
    close(
        &pick(&got[0]),
        &naive_rows(&x, &w, n, &rows, |d, j| (d + b[j] as f64).max(0.0) + 1.0),
    );
}
