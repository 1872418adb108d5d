//! Fusion, the memory plan and the passes change how a program runs, never
//! what it computes: random graphs compiled whole give exactly what the same
//! graph gives when every node runs alone as its own one-op program.

mod common;

use common::values;
use nitro_graph::ir::{Graph, InputDecl, Node, Op};
use nitro_graph::{compile_graph, trace, Array, CompileOptions, DType, Tensor, TensorSpec};
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

/// Build a random graph from `script` over inputs a:[3,4], b:[4], s:[].
fn build(
    script: &[(u8, usize, usize)],
    tr: &nitro_graph::Tracer,
    t: &[Tensor],
) -> Vec<(String, Tensor)> {
    let mut pool: Vec<Tensor> = t.to_vec();
    for &(op, i, j) in script {
        let x = pool[i % pool.len()].clone();
        let y = pool[j % pool.len()].clone();
        let fit = |y: &Tensor, x: &Tensor| -> Tensor {
            // Bring y to something that broadcasts against x.
            match (x.rank(), y.rank()) {
                (_, 0) => y.clone(),
                (2, 1) if y.shape()[0] == x.shape()[1] => y.reshape(&[1, y.shape()[0]]),
                _ => y.sum_all(),
            }
        };
        let next = match op % 17 {
            0 => x.tanh(),
            1 => x.sin() * 0.5,
            2 => &x + &fit(&y, &x),
            3 => &x * &fit(&y, &x),
            4 => x.maximum(&fit(&y, &x)),
            5 => &x - &fit(&y, &x) * 0.25,
            6 if x.rank() == 2 => x.sum(&[0]),
            7 if x.rank() == 2 => x.max(&[1]),
            8 => x.sum_all() * 0.1,
            9 if x.rank() == 2 => x
                .matmul_t(&x, false, true)
                .narrow(1, 0, 1)
                .reshape(&[3])
                .sum_all()
                .tanh(),
            10 => x.gt(&fit(&y, &x)).select(&x, &(&x * 2.0)),
            11 => (x.clone() + tr.scalar(1.5, DType::F64))
                .cast(DType::F32)
                .cast(DType::F64),
            12 if x.rank() == 2 => x
                .t()
                .reshape(&[12])
                .narrow(0, 4, 12)
                .reshape(&[2, 4])
                .sum(&[0]),
            13 if x.rank() == 2 => x
                .pad(&[1, 0], &[0, 1], 0.5)
                .narrow(0, 0, 3)
                .narrow(1, 1, 5)
                .slice(&[0, 0], &[3, 4], &[1, 1]),
            14 if x.rank() == 2 => Tensor::concat(&[x.clone(), x.tanh()], 0)
                .expect("two parts")
                .narrow(0, 2, 5)
                .sum(&[0]),
            15 if x.rank() == 2 => x.take(&tr.literal(&[2.0, 0.0, 2.0], &[3], DType::I32)),
            16 if x.shape() == [4] => x.reshape(&[1, 4]).broadcast_to(&[3, 4]) * 0.5,
            _ => x.neg(),
        };
        pool.push(next);
    }
    let n = pool.len();
    let mut outputs: Vec<(String, Tensor)> = pool[n.saturating_sub(4)..]
        .iter()
        .enumerate()
        .map(|(k, t)| (format!("out{k}"), t.clone()))
        .collect();
    // Gradients too: the backward graph goes through the same scheduler.
    let loss = outputs
        .iter()
        .map(|(_, t)| t.sum_all())
        .reduce(|a, b| a + b)
        .expect("an output");
    let grads = tr
        .grad(&loss, &[&t[0], &t[1], &t[2]])
        .expect("differentiable");
    outputs.extend(
        grads
            .into_iter()
            .enumerate()
            .map(|(k, g)| (format!("grad{k}"), g)),
    );
    outputs
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
