//! nitro-graph benchmarks: one JSON object per line on stdout (see
//! shared/BENCH.md); progress on stderr. Names on the command line select
//! benches (`sgemm`, `mlp_train_step`, `mlp_compile`, `cnn_train_step`,
//! `mlp_predict`, `cnn_predict`, `gpt_train_step`, `gpt_predict`, and
//! `matmul_shapes`: each product of the MLP and GPT steps alone); none
//! runs all. Every line says the SIMD
//! level the gemm kernels dispatched to and the worker threads.

use nitro_graph::nn::init::InitRng;
use nitro_graph::nn::layers::{Chain, Layer, Params};
use nitro_graph::nn::train::AdamStep;
use nitro_graph::nn::zoo;
use nitro_graph::nn::zoo::GptConfig;
use nitro_graph::{compile, Array, CompileOptions, DType, TensorSpec};
use std::time::Instant;

#[path = "parts/matmul_shapes.rs"]
mod matmul_shapes;

/// `"simd":..,"threads":..` for every line: what this run really used.
fn machine() -> String {
    format!(
        "\"simd\":\"{}\",\"threads\":{}",
        nitro_graph::backend::cpu::simd_level(),
        rayon::current_num_threads()
    )
}

/// `NITRO_PROFILE=1`: the `top` slowest kernels of one profiled call
/// (`NITRO_PROFILE=N`: the N slowest), then the time per kind of kernel
/// (the op's name), on stderr.
fn print_profile(rows: &[(f64, String)], top: usize) {
    let top = match std::env::var("NITRO_PROFILE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(n) if n > 1 => n,
        _ => top,
    };
    for (ms, what) in rows.iter().take(top) {
        eprintln!("{ms:8.3} ms  {what}");
    }
    let mut kinds: Vec<(String, f64, usize)> = vec![];
    for (ms, what) in rows {
        let kind = what.split([' ', '[']).next().unwrap_or("").to_string();
        match kinds.iter_mut().find(|k| k.0 == kind) {
            Some(k) => {
                k.1 += ms;
                k.2 += 1;
            }
            None => kinds.push((kind, *ms, 1)),
        }
    }
    kinds.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total: f64 = rows.iter().map(|r| r.0).sum();
    eprintln!("by kind (total {total:.3} ms):");
    for (kind, ms, n) in kinds {
        eprintln!("{ms:8.3} ms  {:5.1}%  {n:4} x {kind}", 100.0 * ms / total);
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("finite timings"));
    v[v.len() / 2]
}

/// `NITRO_BENCH_STEPS=N` replaces every warm-up and run count by exactly
/// N calls (no warm-up), for instruction counts: under
/// `valgrind --tool=callgrind` the cost of one call is the difference of
/// two runs with different N, divided by their difference.
fn fixed_steps() -> Option<usize> {
    std::env::var("NITRO_BENCH_STEPS").ok()?.parse().ok()
}

fn time_runs(warmup: usize, runs: usize, mut f: impl FnMut()) -> Vec<f64> {
    let (warmup, runs) = fixed_steps().map_or((warmup, runs), |n| (0, n.max(1)));
    for _ in 0..warmup {
        f();
    }
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect()
}

fn random_array(shape: &[usize], seed: u64) -> Array {
    InitRng::new(seed)
        .uniform_leaf("bench input", shape, 1.0)
        .expect("bench inputs fit in memory")
}

fn bench_sgemm() {
    for n in [256usize, 512, 1024, 2048] {
        let spec = TensorSpec::f32(&[n, n]);
        let program = compile(
            &[("a", spec.clone()), ("b", spec)],
            CompileOptions::named("sgemm"),
            |_, t| Ok(vec![("c".into(), t[0].matmul(&t[1]))]),
        )
        .expect("sgemm compiles");
        let mut args = [random_array(&[n, n], 1), random_array(&[n, n], 2)];
        let runs = if n >= 2048 { 5 } else { 15 };
        let ms = median(time_runs(2, runs, || {
            program.run(&mut args).expect("runs");
        }));
        let gflops = 2.0 * (n as f64).powi(3) / (ms * 1e-3) / 1e9;
        println!(
            "{{\"bench\":\"sgemm\",\"n\":{n},\"gflops\":{gflops:.1},\"median_ms\":{ms:.3},\"runs\":{runs},{}}}",
            machine()
        );
    }
}

fn mlp() -> Chain {
    zoo::mlp(&[784, 512, 512, 10])
}

fn labels(n: usize) -> Array {
    Array::new(&[n], (0..n).map(|i| (i % 10) as i32).collect::<Vec<_>>()).expect("labels")
}

fn bench_step(name: &str, model: Chain, x: &[usize], runs: usize) {
    let mut step = AdamStep::new(
        &model,
        model.init_params(0).expect("params fit in memory"),
        x,
        1e-3,
    )
    .expect("train step compiles");
    let (batch, y) = (random_array(x, 3), labels(x[0]));
    let ms = median(time_runs(5, runs, || {
        step.step(&batch, &y).expect("step runs");
    }));
    if std::env::var_os("NITRO_PROFILE").is_some() {
        print_profile(&step.profile().expect("runs"), 15);
    }
    let s = step.program().stats();
    println!(
        "{{\"bench\":\"{name}\",\"batch\":{},\"median_ms\":{ms:.3},\"runs\":{runs},\"kernels\":{},\"fused_kernels\":{},\"peak_bytes\":{},\"unshared_bytes\":{},\"in_place\":{},{}}}",
        x[0], s.kernels, s.fused_kernels, s.peak_bytes, s.unshared_bytes, s.in_place, machine()
    );
}

fn bench_compile() {
    let model = mlp();
    let params = model.init_params(0).expect("params fit in memory");
    let mut trace_ms = vec![];
    let mut compile_ms = vec![];
    for _ in 0..7 {
        let step = AdamStep::new(&model, params.clone(), &[256, 784], 1e-3).expect("compiles");
        trace_ms.push(step.trace_ms());
        compile_ms.push(step.program().stats().compile_ms);
    }
    let (t, c) = (median(trace_ms), median(compile_ms));
    println!(
        "{{\"bench\":\"mlp_compile\",\"trace_ms\":{t:.3},\"compile_ms\":{c:.3},\"total_ms\":{:.3},\"runs\":7,\"goal_ms\":20,{}}}",
        t + c,
        machine()
    );
}

fn bench_predict(name: &str, model: Chain, x: &[usize], runs: usize) {
    let params = model.init_params(0).expect("params fit in memory");
    let names: Vec<String> = params.keys().cloned().collect();
    let mut specs: Vec<(&str, TensorSpec)> = names
        .iter()
        .map(|n| (n.as_str(), params[n].spec().clone()))
        .collect();
    specs.push(("x", TensorSpec::f32(x)));
    let program = compile(&specs, CompileOptions::named(name), |_, t| {
        let p: Params<nitro_graph::Tensor> = names.iter().cloned().zip(t.iter().cloned()).collect();
        Ok(vec![(
            "logits".into(),
            model.apply(&p, "", &t[names.len()]),
        )])
    })
    .expect("predict compiles");
    let mut args: Vec<Array> = names.iter().map(|n| params[n].clone()).collect();
    args.push(random_array(x, 5));
    let ms = median(time_runs(5, runs, || {
        program.run(&mut args).expect("runs");
    }));
    if std::env::var_os("NITRO_PROFILE").is_some() {
        print_profile(&program.profile(&mut args).expect("runs"), 15);
    }
    println!(
        "{{\"bench\":\"{name}\",\"batch\":{},\"median_ms\":{ms:.3},\"runs\":{runs},\"kernels\":{},{}}}",
        x[0],
        program.kernel_count(),
        machine()
    );
}

/// The GPT benches' batch: 16 sequences of the full context.
const GPT_BATCH: usize = 16;

/// Token ids `[rows, cols]` in `0..vocab` from a fixed seed (the peer
/// script draws random tokens too: the step's cost does not depend on them).
fn gpt_tokens(rows: usize, cols: usize, vocab: usize, seed: u64) -> Array {
    let mut rng = InitRng::new(seed);
    let ids = (0..rows * cols)
        .map(|_| (rng.next_u64() % vocab as u64) as i32)
        .collect::<Vec<i32>>();
    Array::new(&[rows, cols], ids).expect("sizes match")
}

/// `gpt_train_step`: the whole Adam step of `peers/gpt_step.py`'s model
/// (mean next-token cross-entropy over all 2048 positions), and the
/// trace and compile times of that step (cold: a fresh trace each run).
fn bench_gpt_step(runs: usize) {
    let c = GptConfig::bench();
    let model = zoo::gpt(&c);
    let params = model.init_params(0).expect("gpt params fit in memory");
    let x = TensorSpec::new(DType::I32, &[GPT_BATCH, c.context]);
    let mut trace_ms = vec![];
    let mut compile_ms = vec![];
    let mut step = None;
    for _ in 0..3 {
        let s = AdamStep::with_specs(&model, params.clone(), &x, &x, 1e-3)
            .expect("gpt train step compiles");
        trace_ms.push(s.trace_ms());
        compile_ms.push(s.program().stats().compile_ms);
        step = Some(s);
    }
    let mut step = step.expect("compiled at least once");
    let tokens = gpt_tokens(GPT_BATCH, c.context + 1, c.vocab, 3);
    let (ids, next) = shifted(&tokens, c.context);
    let mut loss0 = 0.0;
    let ms = median(time_runs(2, runs, || {
        let l = step.step(&ids, &next).expect("step runs");
        if loss0 == 0.0 {
            loss0 = l;
        }
    }));
    if std::env::var_os("NITRO_PROFILE").is_some() {
        print_profile(&step.profile().expect("runs"), 25);
    }
    let s = step.program().stats();
    let (t, c_ms) = (median(trace_ms), median(compile_ms));
    println!(
        "{{\"bench\":\"gpt_train_step\",\"batch\":{GPT_BATCH},\"context\":{},\"median_ms\":{ms:.3},\"runs\":{runs},\"kernels\":{},\"fused_kernels\":{},\"peak_bytes\":{},\"trace_ms\":{t:.3},\"compile_ms\":{:.3},\"compile_goal_ms\":50,\"loss0\":{loss0:.4},{}}}",
        c.context,
        s.kernels,
        s.fused_kernels,
        s.peak_bytes,
        t + c_ms,
        machine()
    );
}

/// Inputs (the first `t` tokens of each row) and next-token labels
/// (tokens `1..=t`) of `tokens [rows, t + 1]`.
fn shifted(tokens: &Array, t: usize) -> (Array, Array) {
    let rows = tokens.shape()[0];
    let all: &[i32] = tokens.as_slice().expect("i32 tokens");
    let (mut x, mut y) = (vec![], vec![]);
    for r in 0..rows {
        let row = &all[r * (t + 1)..(r + 1) * (t + 1)];
        x.extend_from_slice(&row[..t]);
        y.extend_from_slice(&row[1..]);
    }
    (
        Array::new(&[rows, t], x).expect("sizes match"),
        Array::new(&[rows, t], y).expect("sizes match"),
    )
}

/// `gpt_predict`: the forward pass (logits `[16, 128, 96]`) of the same
/// model, as `peers/gpt_step.py`'s eval step.
fn bench_gpt_predict(runs: usize) {
    let c = GptConfig::bench();
    let model = zoo::gpt(&c);
    let params = model.init_params(0).expect("gpt params fit in memory");
    let names: Vec<String> = params.keys().cloned().collect();
    let mut specs: Vec<(&str, TensorSpec)> = names
        .iter()
        .map(|n| (n.as_str(), params[n].spec().clone()))
        .collect();
    specs.push(("ids", TensorSpec::new(DType::I32, &[GPT_BATCH, c.context])));
    let program = compile(&specs, CompileOptions::named("gpt_predict"), |_, t| {
        let p: Params<nitro_graph::Tensor> = names.iter().cloned().zip(t.iter().cloned()).collect();
        Ok(vec![(
            "logits".into(),
            model.apply(&p, "", &t[names.len()]),
        )])
    })
    .expect("gpt predict compiles");
    let mut args: Vec<Array> = names.iter().map(|n| params[n].clone()).collect();
    args.push(gpt_tokens(GPT_BATCH, c.context, c.vocab, 5));
    let ms = median(time_runs(3, runs, || {
        program.run(&mut args).expect("runs");
    }));
    if std::env::var_os("NITRO_PROFILE").is_some() {
        print_profile(&program.profile(&mut args).expect("runs"), 15);
    }
    println!(
        "{{\"bench\":\"gpt_predict\",\"batch\":{GPT_BATCH},\"context\":{},\"median_ms\":{ms:.3},\"runs\":{runs},\"kernels\":{},\"compile_ms\":{:.3},{}}}",
        c.context,
        program.kernel_count(),
        program.stats().compile_ms,
        machine()
    );
}

fn main() {
    let wanted: Vec<String> = std::env::args().skip(1).collect();
    let run = |name: &str| wanted.is_empty() || wanted.iter().any(|w| w == name);
    if run("sgemm") {
        eprintln!("bench: sgemm");
        bench_sgemm();
    }
    if run("mlp_train_step") {
        eprintln!("bench: mlp_train_step");
        bench_step("mlp_train_step", mlp(), &[256, 784], 50);
    }
    if run("mlp_compile") {
        eprintln!("bench: mlp_compile");
        bench_compile();
    }
    if run("cnn_train_step") {
        eprintln!("bench: cnn_train_step");
        bench_step("cnn_train_step", zoo::lenet5(), &[128, 1, 28, 28], 20);
    }
    if run("mlp_predict") {
        eprintln!("bench: mlp_predict");
        bench_predict("mlp_predict", mlp(), &[256, 784], 50);
    }
    if run("cnn_predict") {
        eprintln!("bench: cnn_predict");
        bench_predict("cnn_predict", zoo::lenet5(), &[128, 1, 28, 28], 30);
    }
    if run("gpt_train_step") {
        eprintln!("bench: gpt_train_step");
        bench_gpt_step(10);
    }
    if run("gpt_predict") {
        eprintln!("bench: gpt_predict");
        bench_gpt_predict(20);
    }
    if run("matmul_shapes") {
        eprintln!("bench: matmul_shapes");
        matmul_shapes::bench_matmul_shapes(30);
    }
}
