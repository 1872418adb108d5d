//! `matmul_shapes` for `bench_graph`: every distinct matrix product of the
//! MLP and GPT train steps, each compiled alone and timed, one JSON line
//! per product with its GFLOPS. It says which products of a step run below
//! the machine's matmul rate, and (through `peers/matmul_shapes.py`, which
//! reads these lines and times the same products with torch on MKL) by how
//! much each trails the BLAS the peers use. `NITRO_COLD=1` times each
//! run after writing over a buffer larger than the last-level cache, so
//! the operands come from memory as a step's long-lived activations do
//! (a weight gradient reads what the forward wrote a whole step earlier);
//! the lines then say `"cold":true`. What it does not own: the steps
//! themselves (the other benches).

use super::{machine, median, random_array, time_runs};
use nitro_graph::{compile, CompileOptions, TensorSpec};

/// A product `op(a)[m, k] @ op(b)[k, n]`, `batch` times, as a step runs
/// it: (what, batch, (m, k, n), (a transposed, b transposed)).
type Product = (&'static str, usize, (usize, usize, usize), (bool, bool));

/// Layouts: `x @ w` (forward), `dy @ w^T` (input gradient), `x^T @ dy`
/// (weight gradient).
const NN: (bool, bool) = (false, false);
const NT: (bool, bool) = (false, true);
const TN: (bool, bool) = (true, false);

/// The MLP 784-512-512-10 at b = 256.
const MLP: &[Product] = &[
    ("fc1 forward", 1, (256, 784, 512), NN),
    ("fc1 weight grad", 1, (784, 256, 512), TN),
    ("fc2 forward", 1, (256, 512, 512), NN),
    ("fc2 input grad", 1, (256, 512, 512), NT),
    ("fc2 weight grad", 1, (512, 256, 512), TN),
    ("head forward", 1, (256, 512, 10), NN),
    ("head input grad", 1, (256, 10, 512), NT),
    ("head weight grad", 1, (512, 256, 10), TN),
];

/// The GPT of `peers/gpt_step.py`: 2048 positions, d 256, 4 heads of 64,
/// MLP 1024, vocab 96.
const GPT: &[Product] = &[
    ("qkv forward", 1, (2048, 256, 768), NN),
    ("qkv input grad", 1, (2048, 768, 256), NT),
    ("qkv weight grad", 1, (256, 2048, 768), TN),
    ("proj forward", 1, (2048, 256, 256), NN),
    ("proj input grad", 1, (2048, 256, 256), NT),
    ("proj weight grad", 1, (256, 2048, 256), TN),
    ("fc1 forward", 1, (2048, 256, 1024), NN),
    ("fc1 input grad", 1, (2048, 1024, 256), NT),
    ("fc1 weight grad", 1, (256, 2048, 1024), TN),
    ("fc2 forward", 1, (2048, 1024, 256), NN),
    ("fc2 input grad", 1, (2048, 256, 1024), NT),
    ("fc2 weight grad", 1, (1024, 2048, 256), TN),
    ("scores q k^T", 64, (128, 64, 128), NT),
    ("weights @ v", 64, (128, 128, 64), NN),
    ("attention grads p^T dy", 64, (128, 128, 64), TN),
    ("head forward", 1, (2048, 256, 96), NN),
    ("head input grad", 1, (2048, 96, 256), NT),
    ("head weight grad", 1, (256, 2048, 96), TN),
];

/// The stored shape of an operand whose op is `rows x cols`: `[batch,]`
/// then `[cols, rows]` when it is transposed.
fn stored(batch: usize, rows: usize, cols: usize, transposed: bool) -> Vec<usize> {
    let lead = if batch > 1 { vec![batch] } else { vec![] };
    let (r, c) = if transposed {
        (cols, rows)
    } else {
        (rows, cols)
    };
    [lead, vec![r, c]].concat()
}

/// Bytes written between runs under `NITRO_COLD=1`: past any L3 this
/// project's machines report.
const EVICT_BYTES: usize = 1 << 30;

/// `f` timed `runs` times after `warmup` untimed calls, each call after
/// `evict` has run (untimed).
fn timed_after(
    warmup: usize,
    runs: usize,
    mut evict: impl FnMut(),
    mut f: impl FnMut(),
) -> Vec<f64> {
    (0..warmup + runs)
        .filter_map(|r| {
            evict();
            let t = std::time::Instant::now();
            f();
            (r >= warmup).then(|| t.elapsed().as_secs_f64() * 1e3)
        })
        .collect()
}

/// Time each product alone (median of `runs` after a warm-up);
/// `NITRO_PRODUCT=TEXT` times only the products whose "model product"
/// name contains TEXT (`NITRO_PRODUCT="gpt qkv"`), one shape under a
/// profiler.
pub fn bench_matmul_shapes(runs: usize) {
    let all = MLP
        .iter()
        .map(|p| ("mlp", p))
        .chain(GPT.iter().map(|p| ("gpt", p)));
    let only = std::env::var("NITRO_PRODUCT").ok();
    let cold = std::env::var_os("NITRO_COLD").is_some();
    let mut junk = vec![0u8; if cold { EVICT_BYTES } else { 0 }];
    let mut evict = || {
        // One write per cache line: every line of the cache is replaced.
        for (i, b) in junk.iter_mut().enumerate().step_by(64) {
            *b = i as u8;
        }
        std::hint::black_box(&junk);
    };
    for (i, (model, &(what, batch, (m, k, n), (ta, tb)))) in all.enumerate() {
        if only
            .as_ref()
            .is_some_and(|o| !format!("{model} {what}").contains(o.as_str()))
        {
            continue;
        }
        let (a, b) = (stored(batch, m, k, ta), stored(batch, k, n, tb));
        let program = compile(
            &[("a", TensorSpec::f32(&a)), ("b", TensorSpec::f32(&b))],
            CompileOptions::named("matmul_shape"),
            |_, t| Ok(vec![("c".into(), t[0].matmul_t(&t[1], ta, tb))]),
        )
        .expect("one product compiles");
        let seed = 2 * i as u64;
        let mut args = [random_array(&a, seed), random_array(&b, seed + 1)];
        let times = if cold {
            timed_after(2, runs, &mut evict, || {
                program.run(&mut args).expect("runs");
            })
        } else {
            time_runs(5, runs, || {
                program.run(&mut args).expect("runs");
            })
        };
        let ms = median(times);
        let gflops = 2.0 * (batch * m * k * n) as f64 / (ms * 1e-3) / 1e9;
        println!(
            "{{\"bench\":\"matmul_shapes\",\"model\":\"{model}\",\"product\":\"{what}\",\"batch\":{batch},\"m\":{m},\"k\":{k},\"n\":{n},\"ta\":{ta},\"tb\":{tb},\"median_ms\":{ms:.4},\"gflops\":{gflops:.1},\"runs\":{runs},\"cold\":{cold},{}}}",
            machine()
        );
    }
}
