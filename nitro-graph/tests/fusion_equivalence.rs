//! Fusion, the memory plan and the passes change how a program runs, never
//! what it computes: random graphs compiled whole give exactly what the same
//! graph gives when every node runs alone as its own one-op program.

mod common;

use common::random_graph::build;
use common::values;
use nitro_graph::ir::{Graph, InputDecl, Node, Op};
use nitro_graph::{compile_graph, trace, Array, CompileOptions, DType, TensorSpec};
use proptest::prelude::*;

/// Evaluate `graph` one node at a time, each as its own program.
fn node_by_node(graph: &Graph, inputs: &[Array]) -> Vec<Array> {
    let mut vals: Vec<Option<Array>> = vec![None; graph.nodes.len()];
    for (id, node) in graph.nodes.iter().enumerate() {
        if let Op::Input { index } = node.op {
            vals[id] = Some(inputs[index].clone());
            continue;
        }
        let mut g = Graph::default();
        for (k, &a) in node.args.iter().enumerate() {
            let spec = graph.nodes[a].spec.clone();
            g.nodes.push(Node {
                op: Op::Input { index: k },
                args: vec![],
                spec: spec.clone(),
            });
            g.inputs.push(InputDecl {
                name: format!("a{k}"),
                spec,
                node: k,
            });
        }
        g.nodes.push(Node {
            op: node.op.clone(),
            args: (0..node.args.len()).collect(),
            spec: node.spec.clone(),
        });
        g.outputs.push(("y".into(), node.args.len()));
        let mut options = CompileOptions::named("one_op");
        options.passes = vec![];
        let program = compile_graph(g, options).unwrap();
        let mut args: Vec<Array> = node
            .args
            .iter()
            .map(|&a| vals[a].clone().unwrap())
            .collect();
        vals[id] = Some(program.run(&mut args).unwrap().remove(0));
    }
    graph
        .outputs
        .iter()
        .map(|(_, o)| vals[*o].clone().unwrap())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn compiled_equals_node_by_node(script in prop::collection::vec((0u8..17, 0usize..16, 0usize..16), 1..24), seed in 0u64..1000) {
        let specs = [
            ("a", TensorSpec::new(DType::F64, &[3, 4])),
            ("b", TensorSpec::new(DType::F64, &[4])),
            ("s", TensorSpec::new(DType::F64, &[])),
        ];
        let graph = trace(&specs, |tr, t| Ok(build(&script, tr, t))).unwrap();
        let inputs = vec![
            Array::new(&[3, 4], values(12, seed)).unwrap(),
            Array::new(&[4], values(4, seed + 1)).unwrap(),
            Array::new(&[], values(1, seed + 2)).unwrap(),
        ];
        let want = node_by_node(&graph, &inputs);
        let program = compile_graph(graph, CompileOptions::named("whole")).unwrap();
        let got = program.run(&mut inputs.clone()).unwrap();
        prop_assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            prop_assert_eq!(g.shape(), w.shape());
            for (a, b) in g.to_f64_vec().iter().zip(w.to_f64_vec()) {
                prop_assert!((a - b).abs() <= 1e-12 * (1.0 + b.abs()), "{} vs {}\n{}", a, b, program.listing());
            }
        }
    }
}

/// Softmax rows, layer-norm statistics and pooling windows: reductions
/// fused onto the elementwise group that computes their input (a tail, no
/// kernel of their own) give exactly the unfused result, bit for bit,
/// whether a task holds many rows or a row spans many chunks.
#[test]
fn reductions_fused_onto_their_producers_equal_the_unfused_ones_bit_for_bit() {
    type Model = fn(&nitro_graph::Tensor) -> Vec<(String, nitro_graph::Tensor)>;
    let softmax: Model = |x| {
        let z = x * 1.5 - 0.25;
        let m = z.max(&[1]);
        let e = (&z - m.reshape(&[z.shape()[0], 1])).exp();
        let s = e.sum(&[1]);
        vec![
            ("p".into(), &e / s.reshape(&[z.shape()[0], 1])),
            ("m".into(), m),
        ]
    };
    let pool: Model = |x| {
        // relu(x + 0.1), then 2x2 max and sum pooling of [n, c, 12, 12].
        let y = nitro_graph::nn::ops::relu(&(x + 0.1));
        let r = y.reshape(&[4, 3, 6, 2, 6, 2]);
        vec![
            ("max".into(), r.max(&[3, 5])),
            ("sum".into(), r.sum(&[3, 5])),
        ]
    };
    let cases: [(&str, Vec<usize>, Model); 4] = [
        // rows longer than a chunk, several rows per task
        ("softmax 300x1000", vec![300, 1000], softmax),
        // many short rows, several tasks
        ("softmax 40000x3", vec![40000, 3], softmax),
        ("softmax 2x20000", vec![2, 20000], softmax),
        ("pool 4x3x12x12", vec![4, 3, 12, 12], pool),
    ];
    for d in [DType::F32, DType::F64] {
        for (name, shape, model) in &cases {
            let specs = [("x", TensorSpec::new(d, shape))];
            let graph = trace(&specs, |_, t| Ok(model(&t[0]))).unwrap();
            let n: usize = shape.iter().product();
            let x = Array::new(shape, values(n, 7)).unwrap().cast(d);
            let want = node_by_node(&graph, std::slice::from_ref(&x));
            let program = compile_graph(graph, CompileOptions::named("whole")).unwrap();
            let listing = program.listing();
            assert!(
                !listing.contains("reduce_max ->") && !listing.contains("reduce_sum ->"),
                "{name} {d}: a reduction ran as its own kernel:\n{listing}"
            );
            let got = program.run(&mut [x]).unwrap();
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.shape(), w.shape(), "{name} {d}");
                assert!(
                    g.to_f64_vec() == w.to_f64_vec(),
                    "{name} {d}: fused and unfused differ"
                );
            }
        }
    }
}

/// A group reading a product still becomes its epilogue when another,
/// independent product runs in between (a backward pass: the input
/// gradient's product, the weight gradient's, then the activation
/// derivative times the first), and gives exactly the unfused values; a
/// group that also reads the product in between never runs before it.
#[test]
fn epilogues_reach_past_an_independent_product_but_not_past_their_inputs() {
    let (m, k, n) = (96, 40, 72);
    let shapes = [vec![m, k], vec![n, k], vec![k, n], vec![m, n]];
    let specs: Vec<(&str, TensorSpec)> = ["g", "w", "v", "d"]
        .into_iter()
        .zip(shapes.iter().map(|s| TensorSpec::f32(s)))
        .collect();
    let inputs: Vec<Array> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            Array::new(s, values(s.iter().product(), 31 + i as u64))
                .unwrap()
                .cast(DType::F32)
        })
        .collect();
    for reads_second in [false, true] {
        let graph = trace(&specs, |_, t| {
            let first = t[0].matmul(&t[1].t());
            let second = t[0].matmul(&t[2]);
            let mut dz = &first * &t[3] + 1.0;
            if reads_second {
                dz = dz + &second;
            }
            Ok(vec![("dz".into(), dz), ("second".into(), second)])
        })
        .unwrap();
        let want = node_by_node(&graph, &inputs);
        let program = compile_graph(graph, CompileOptions::named("epilogue-past")).unwrap();
        let listing = program.listing();
        let first_product = listing
            .lines()
            .find(|l| l.contains("matmul ->"))
            .expect("a matmul kernel");
        assert_eq!(
            first_product.contains("+ epilogue"),
            !reads_second,
            "reads_second={reads_second}:\n{listing}"
        );
        let got = program.run(&mut inputs.clone()).unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!(
                g.to_f64_vec() == w.to_f64_vec(),
                "reads_second={reads_second}: fused and unfused differ"
            );
        }
    }
}

/// A bias, activation and residual add applied to a matmul's rows as it
/// finishes them (the matmul's epilogue) give exactly what the unfused
/// nodes give: on the blocked kernel's sizes (epilogue per row block), on
/// a transposed operand, and on a small product (the group after it).
#[test]
fn matmul_epilogues_equal_the_unfused_nodes_bit_for_bit() {
    let cases: [(usize, usize, usize, bool); 3] = [
        (1024, 512, 256, false),
        (600, 300, 768, true),
        (64, 32, 16, false),
    ];
    for (m, k, n, tb) in cases {
        let w_shape = if tb { vec![n, k] } else { vec![k, n] };
        let specs = [
            ("x", TensorSpec::f32(&[m, k])),
            ("w", TensorSpec::f32(&w_shape)),
            ("b", TensorSpec::f32(&[1, n])),
            ("r", TensorSpec::f32(&[m, n])),
        ];
        let graph = trace(&specs, |_, t| {
            let w = if tb { t[1].t() } else { t[1].clone() };
            let h = t[0].matmul(&w) + &t[2];
            let y = nitro_graph::nn::ops::relu(&h) + &t[3] * 0.5;
            Ok(vec![("y".into(), y)])
        })
        .unwrap();
        let shapes = [vec![m, k], w_shape.clone(), vec![1, n], vec![m, n]];
        let inputs: Vec<Array> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let len = s.iter().product();
                Array::new(s, values(len, 11 + i as u64))
                    .unwrap()
                    .cast(DType::F32)
            })
            .collect();
        let want = node_by_node(&graph, &inputs);
        let program = compile_graph(graph, CompileOptions::named("epilogue")).unwrap();
        let listing = program.listing();
        assert!(
            listing.contains("epilogue"),
            "{m}x{k}x{n}: no epilogue:\n{listing}"
        );
        let got = program.run(&mut inputs.clone()).unwrap();
        assert!(
            got[0].to_f64_vec() == want[0].to_f64_vec(),
            "{m}x{k}x{n} tb={tb}: epilogue and unfused differ"
        );
    }
}

/// A group that reads a matmul's product in another order as well, through
/// a reshape (rows interleaved), equals the unfused nodes bit for bit: it
/// is no epilogue (one would read rows of the product before they are
/// computed), and the memory plan does not write its result over the
/// product it still reads out of order. A group reading the product in
/// order only writes over it and still agrees.
#[test]
fn a_product_read_out_of_order_is_never_overwritten_or_read_early() {
    let n = 512;
    for interleaved in [true, false] {
        let specs = [
            ("x", TensorSpec::f32(&[n, n])),
            ("w", TensorSpec::f32(&[n, n])),
        ];
        let graph = trace(&specs, |_, t| {
            let y = t[0].matmul(&t[1]);
            let other = if interleaved {
                y.reshape(&[n / 2, 2, n])
                    .permute(&[1, 0, 2])
                    .reshape(&[n, n])
            } else {
                y.exp()
            };
            Ok(vec![("z".into(), &y * 2.0 + other)])
        })
        .unwrap();
        let inputs: Vec<Array> = (0..2)
            .map(|i| {
                Array::new(&[n, n], values(n * n, 31 + i as u64))
                    .unwrap()
                    .cast(DType::F32)
            })
            .collect();
        let want = node_by_node(&graph, &inputs);
        let program = compile_graph(graph, CompileOptions::named("out_of_order")).unwrap();
        let got = program.run(&mut inputs.clone()).unwrap();
        assert!(
            got[0].to_f64_vec() == want[0].to_f64_vec(),
            "interleaved={interleaved}: fused and unfused differ\n{}",
            program.listing()
        );
        if !interleaved {
            assert_eq!(program.peak_bytes(), n * n * 4, "{}", program.listing());
        }
    }
}

/// A chain that only a later group reads is computed where it is read,
/// not stored by a kernel of its own: in a softmax backward, `g / s` is
/// needed only after the row sum `Σ g y / s`, so it joins the last group
/// (one fused kernel and one stored [rows, cols] value fewer). The values
/// are exactly the unfused ones.
#[test]
fn a_chain_read_only_after_a_reduction_is_computed_where_it_is_read() {
    let (rows, cols) = (64usize, 300usize);
    let specs = [
        ("g", TensorSpec::f32(&[rows, cols])),
        ("y", TensorSpec::f32(&[rows, cols])),
        ("s", TensorSpec::f32(&[rows, 1])),
    ];
    let graph = trace(&specs, |_, t| {
        let (g, y) = (&t[0], &t[1]);
        let s = t[2].broadcast_to(&[rows, cols]);
        let scaled = g / &s;
        let dot = (&(g * y) / &s).sum(&[1]).reshape(&[rows, 1]);
        let dx = (&scaled - &dot.broadcast_to(&[rows, cols])) * y;
        Ok(vec![("dx".into(), dx)])
    })
    .unwrap();
    let inputs = [
        Array::new(&[rows, cols], values(rows * cols, 1)).unwrap(),
        Array::new(&[rows, cols], values(rows * cols, 2)).unwrap(),
        Array::new(
            &[rows, 1],
            values(rows, 3)
                .iter()
                .map(|v| v.abs() + 0.5)
                .collect::<Vec<f64>>(),
        )
        .unwrap(),
    ]
    .map(|a| a.cast(DType::F32));
    let want = node_by_node(&graph, &inputs);
    let program = compile_graph(graph, CompileOptions::named("softmax_bwd")).unwrap();
    let listing = program.listing();
    let fused = listing.matches(": fused[").count();
    // The row sum's group, then the group that reads it (with g / s).
    assert_eq!(fused, 2, "{listing}");
    let got = program.run(&mut inputs.clone()).unwrap();
    assert!(
        got[0].to_f64_vec() == want[0].to_f64_vec(),
        "fused and unfused differ"
    );
}
