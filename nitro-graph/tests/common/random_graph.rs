//! Random programs for equivalence properties: a script of (op, operand,
//! operand) picks builds a graph over inputs a:[3,4], b:[4], s:[] (all f64)
//! that mixes elementwise math, reductions, products, every movement op
//! (slices read in place among them),
//! casts, select and gather, plus the gradients of all of it.

use nitro_graph::{DType, Tensor};

/// Build a random graph from `script` over inputs a:[3,4], b:[4], s:[].
pub fn build(
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
        let next = match op % 18 {
            0 => x.tanh(),
            // erf, exact GELU and exp with their VJPs (exp of a bounded value).
            1 => x.sin() * 0.5 + x.gelu_erf().sin() + x.erf() * x.sin().exp(),
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
            // Contiguous slices read in place by an elementwise group (at
            // offsets 0 and 12 of the concat), as a data-parallel step cuts
            // its gradients out of the all-reduced buffer.
            17 if x.rank() == 2 => {
                let both = Tensor::concat(&[x.clone(), x.sin()], 0).expect("two parts");
                both.narrow(0, 3, 6).tanh() + both.narrow(0, 0, 3) * 0.5
            }
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
