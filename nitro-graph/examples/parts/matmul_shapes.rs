//! `matmul_shapes` for `bench_graph`: every distinct matrix product of the
//! MLP and GPT train steps, each compiled alone and timed, one JSON line
//! per product with its GFLOPS. It says which products of a step run below
//! the machine's matmul rate, and (through `peers/matmul_shapes.py`, which
//! reads these lines and times the same products with torch on MKL) by how
//! much each trails the BLAS the peers use. What it does not own: the steps
//! themselves (the other benches).

use super::{machine, median, random_array, time_runs};
use nitro_graph::{compile, CompileOptions, TensorSpec};

/// A product `op(a)[m, k] @ op(b)[k, n]`, `batch` times, as a step runs it.
struct Product {
    model: &'static str,
    what: &'static str,
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    ta: bool,
    tb: bool,
}

const fn p(
    model: &'static str,
    what: &'static str,
    batch: usize,
    (m, k, n): (usize, usize, usize),
    (ta, tb): (bool, bool),
) -> Product {
    Product {
        model,
        what,
        batch,
        m,
        k,
        n,
        ta,
        tb,
    }
}

/// The MLP 784-512-512-10 at b = 256 and the GPT of `peers/gpt_step.py`
/// (2048 positions, d 256, 4 heads, MLP 1024, vocab 96): forward `x @ w`,
/// input gradient `dy @ w^T`, weight gradient `x^T @ dy`.
const PRODUCTS: &[Product] = &[
    p("mlp", "fc1 forward", 1, (256, 784, 512), (false, false)),
    p("mlp", "fc1 weight grad", 1, (784, 256, 512), (true, false)),
    p("mlp", "fc2 forward", 1, (256, 512, 512), (false, false)),
    p("mlp", "fc2 input grad", 1, (256, 512, 512), (false, true)),
    p("mlp", "fc2 weight grad", 1, (512, 256, 512), (true, false)),
    p("mlp", "head forward", 1, (256, 512, 10), (false, false)),
    p("mlp", "head input grad", 1, (256, 10, 512), (false, true)),
    p("mlp", "head weight grad", 1, (512, 256, 10), (true, false)),
    p("gpt", "qkv forward", 1, (2048, 256, 768), (false, false)),
    p("gpt", "qkv input grad", 1, (2048, 768, 256), (false, true)),
    p("gpt", "qkv weight grad", 1, (256, 2048, 768), (true, false)),
    p("gpt", "proj forward", 1, (2048, 256, 256), (false, false)),
    p("gpt", "proj input grad", 1, (2048, 256, 256), (false, true)),
    p(
        "gpt",
        "proj weight grad",
        1,
        (256, 2048, 256),
        (true, false),
    ),
    p("gpt", "fc1 forward", 1, (2048, 256, 1024), (false, false)),
    p("gpt", "fc1 input grad", 1, (2048, 1024, 256), (false, true)),
    p(
        "gpt",
        "fc1 weight grad",
        1,
        (256, 2048, 1024),
        (true, false),
    ),
    p("gpt", "fc2 forward", 1, (2048, 1024, 256), (false, false)),
    p("gpt", "fc2 input grad", 1, (2048, 256, 1024), (false, true)),
    p(
        "gpt",
        "fc2 weight grad",
        1,
        (1024, 2048, 256),
        (true, false),
    ),
    p("gpt", "scores q k^T", 64, (128, 64, 128), (false, true)),
    p("gpt", "weights @ v", 64, (128, 128, 64), (false, false)),
    p(
        "gpt",
        "attention grads p^T dy",
        64,
        (128, 128, 64),
        (true, false),
    ),
    p("gpt", "head forward", 1, (2048, 256, 96), (false, false)),
    p("gpt", "head input grad", 1, (2048, 96, 256), (false, true)),
    p("gpt", "head weight grad", 1, (256, 2048, 96), (true, false)),
];

/// Time each product alone (median of `runs` after a warm-up).
pub fn bench_matmul_shapes(runs: usize) {
    for (i, pr) in PRODUCTS.iter().enumerate() {
        let lead = if pr.batch > 1 { vec![pr.batch] } else { vec![] };
        let a = [
            lead.clone(),
            if pr.ta {
                vec![pr.k, pr.m]
            } else {
                vec![pr.m, pr.k]
            },
        ]
        .concat();
        let b = [
            lead,
            if pr.tb {
                vec![pr.n, pr.k]
            } else {
                vec![pr.k, pr.n]
            },
        ]
        .concat();
        let (ta, tb) = (pr.ta, pr.tb);
        let program = compile(
            &[("a", TensorSpec::f32(&a)), ("b", TensorSpec::f32(&b))],
            CompileOptions::named("matmul_shape"),
            |_, t| Ok(vec![("c".into(), t[0].matmul_t(&t[1], ta, tb))]),
        )
        .expect("one product compiles");
        let mut args = [
            random_array(&a, 2 * i as u64),
            random_array(&b, 2 * i as u64 + 1),
        ];
        let ms = median(time_runs(5, runs, || {
            program.run(&mut args).expect("runs");
        }));
        let flop = 2.0 * (pr.batch * pr.m * pr.k * pr.n) as f64;
        println!(
            "{{\"bench\":\"matmul_shapes\",\"model\":\"{}\",\"product\":\"{}\",\"batch\":{},\"m\":{},\"k\":{},\"n\":{},\"ta\":{},\"tb\":{},\"median_ms\":{ms:.4},\"gflops\":{:.1},\"runs\":{runs},{}}}",
            pr.model,
            pr.what,
            pr.batch,
            pr.m,
            pr.k,
            pr.n,
            pr.ta,
            pr.tb,
            flop / (ms * 1e-3) / 1e9,
            machine()
        );
    }
}
