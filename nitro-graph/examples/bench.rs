//! nitro-graph benchmarks: one JSON object per line on stdout (see
//! shared/BENCH.md); progress on stderr. Names on the command line select
//! benches (`sgemm`, `mlp_train_step`, `mlp_compile`, `cnn_train_step`,
//! `mlp_predict`); none runs all.

use nitro_graph::nn::init::InitRng;
use nitro_graph::nn::layers::{
    Activation, Chain, Conv2d, Dense, Flatten, Layer, MaxPool2d, Params,
};
use nitro_graph::nn::loss::softmax_cross_entropy;
use nitro_graph::nn::optim::{adam, AdamHyper};
use nitro_graph::{compile, trace, Array, CompileOptions, DType, Program, TensorSpec};
use std::time::Instant;

/// Theoretical fp32 peak of this machine class (2 Zen 3 cores at 2.445 GHz,
/// 32 FLOP/cycle), from shared/peers/RESULTS.md.
const PEAK_GFLOPS: f64 = 156.5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("finite timings"));
    v[v.len() / 2]
}

fn time_runs(warmup: usize, runs: usize, mut f: impl FnMut()) -> Vec<f64> {
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
    let mut rng = InitRng::new(seed);
    let n = shape.iter().product();
    Array::new(shape, rng.uniform_vec(n, 1.0)).expect("sizes match")
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
            "{{\"bench\":\"sgemm\",\"n\":{n},\"gflops\":{gflops:.1},\"median_ms\":{ms:.3},\"runs\":{runs},\"peak_fraction\":{:.3}}}",
            gflops / PEAK_GFLOPS
        );
    }
}

/// A train step for `model`: forward, mean softmax CE, backward, Adam on
/// every parameter (donated: updated in place). Inputs: params, m, v, x, y,
/// lr, b1, b2, eps, t.
fn train_step(
    model: &Chain,
    params: &Params<Array>,
    x: &[usize],
    classes: usize,
) -> (Program, Vec<Array>, f64) {
    let names: Vec<String> = params.keys().cloned().collect();
    let mut specs: Vec<(String, TensorSpec)> = vec![];
    for prefix in ["p", "m", "v"] {
        specs.extend(
            names
                .iter()
                .map(|n| (format!("{prefix}.{n}"), params[n].spec().clone())),
        );
    }
    specs.push(("x".into(), TensorSpec::f32(x)));
    specs.push(("y".into(), TensorSpec::new(DType::I32, &[x[0]])));
    for h in ["lr", "b1", "b2", "eps", "t"] {
        specs.push((h.into(), TensorSpec::f32(&[])));
    }
    let spec_refs: Vec<(&str, TensorSpec)> =
        specs.iter().map(|(n, s)| (n.as_str(), s.clone())).collect();
    let mut options = CompileOptions::named("train_step");
    for prefix in ["p", "m", "v"] {
        for n in &names {
            options = options.donate(&format!("{prefix}.{n}"), &format!("new.{prefix}.{n}"));
        }
    }
    let np = names.len();
    let build = |tr: &nitro_graph::Tracer, t: &[nitro_graph::Tensor]| {
        let p: Params<nitro_graph::Tensor> =
            names.iter().cloned().zip(t[..np].iter().cloned()).collect();
        let logits = model.apply(&p, "", &t[3 * np]);
        let loss = softmax_cross_entropy(&logits, &t[3 * np + 1], 0.0);
        let grads = tr.grad(&loss, &t[..np].iter().collect::<Vec<_>>())?;
        let zero = tr.scalar(0.0, DType::F32);
        let h = &t[3 * np + 2..];
        let hyper = AdamHyper {
            lr: &h[0],
            beta1: &h[1],
            beta2: &h[2],
            eps: &h[3],
            weight_decay: &zero,
            step: &h[4],
        };
        let mut out = vec![("loss".to_string(), loss)];
        let mut news = (vec![], vec![], vec![]);
        for i in 0..np {
            let (pn, mn, vn) = adam(&t[i], &grads[i], &t[np + i], &t[2 * np + i], &hyper);
            news.0.push((format!("new.p.{}", names[i]), pn));
            news.1.push((format!("new.m.{}", names[i]), mn));
            news.2.push((format!("new.v.{}", names[i]), vn));
        }
        out.extend(news.0.into_iter().chain(news.1).chain(news.2));
        Ok(out)
    };
    let t0 = Instant::now();
    let graph = trace(&spec_refs, build).expect("train step traces");
    let trace_ms = t0.elapsed().as_secs_f64() * 1e3;
    let program = nitro_graph::compile_graph(graph, options).expect("train step compiles");
    let mut args: Vec<Array> = vec![];
    for (i, prefix) in ["p", "m", "v"].iter().enumerate() {
        for n in &names {
            let a = &params[n];
            args.push(if i == 0 {
                a.clone()
            } else {
                Array::zeros(a.spec())
            });
            let _ = prefix;
        }
    }
    args.push(random_array(x, 3));
    let labels: Vec<i32> = (0..x[0]).map(|i| (i % classes) as i32).collect();
    args.push(Array::new(&[x[0]], labels).expect("labels"));
    for h in [1e-3f32, 0.9, 0.999, 1e-8, 1.0] {
        args.push(Array::scalar_f32(h));
    }
    (program, args, trace_ms)
}

fn mlp() -> Chain {
    Chain::new()
        .push(Dense::new(784, 512).with(Activation::Relu))
        .push(Dense::new(512, 512).with(Activation::Relu))
        .push(Dense::new(512, 10))
}

fn lenet() -> Chain {
    Chain::new()
        .push(Conv2d {
            input: 1,
            output: 6,
            kernel: 5,
            stride: 1,
            padding: 0,
        })
        .push(Activation::Relu)
        .push(MaxPool2d(2))
        .push(Conv2d {
            input: 6,
            output: 16,
            kernel: 5,
            stride: 1,
            padding: 0,
        })
        .push(Activation::Relu)
        .push(MaxPool2d(2))
        .push(Flatten)
        .push(Dense::new(256, 120).with(Activation::Relu))
        .push(Dense::new(120, 84).with(Activation::Relu))
        .push(Dense::new(84, 10))
}

fn bench_step(name: &str, model: Chain, x: &[usize], runs: usize) {
    let params = model.init_params(0);
    let (program, mut args, _) = train_step(&model, &params, x, 10);
    let t_index = args.len() - 1;
    let mut step = 0;
    let ms = median(time_runs(5, runs, || {
        step += 1;
        args[t_index] = Array::scalar_f32(step as f32);
        program.run(&mut args).expect("step runs");
    }));
    if std::env::var_os("NITRO_PROFILE").is_some() {
        for (ms, what) in program.profile(&mut args).expect("runs").iter().take(15) {
            eprintln!("{ms:8.3} ms  {what}");
        }
    }
    let s = program.stats();
    println!(
        "{{\"bench\":\"{name}\",\"batch\":{},\"median_ms\":{ms:.3},\"runs\":{runs},\"kernels\":{},\"fused_kernels\":{},\"peak_bytes\":{},\"unshared_bytes\":{},\"in_place\":{}}}",
        x[0], s.kernels, s.fused_kernels, s.peak_bytes, s.unshared_bytes, s.in_place
    );
}

fn bench_compile() {
    let model = mlp();
    let params = model.init_params(0);
    let mut trace_ms = vec![];
    let mut compile_ms = vec![];
    for _ in 0..7 {
        let (program, _, t) = train_step(&model, &params, &[256, 784], 10);
        trace_ms.push(t);
        compile_ms.push(program.stats().compile_ms);
    }
    let (t, c) = (median(trace_ms), median(compile_ms));
    println!(
        "{{\"bench\":\"mlp_compile\",\"trace_ms\":{t:.3},\"compile_ms\":{c:.3},\"total_ms\":{:.3},\"runs\":7,\"goal_ms\":20}}",
        t + c
    );
}

fn bench_predict() {
    let model = mlp();
    let params = model.init_params(0);
    let names: Vec<String> = params.keys().cloned().collect();
    let mut specs: Vec<(&str, TensorSpec)> = names
        .iter()
        .map(|n| (n.as_str(), params[n].spec().clone()))
        .collect();
    specs.push(("x", TensorSpec::f32(&[256, 784])));
    let program = compile(&specs, CompileOptions::named("predict"), |_, t| {
        let p: Params<nitro_graph::Tensor> = names.iter().cloned().zip(t.iter().cloned()).collect();
        Ok(vec![(
            "logits".into(),
            model.apply(&p, "", &t[names.len()]),
        )])
    })
    .expect("predict compiles");
    let mut args: Vec<Array> = names.iter().map(|n| params[n].clone()).collect();
    args.push(random_array(&[256, 784], 5));
    let ms = median(time_runs(5, 50, || {
        program.run(&mut args).expect("runs");
    }));
    println!("{{\"bench\":\"mlp_predict\",\"batch\":256,\"median_ms\":{ms:.3},\"runs\":50,\"kernels\":{}}}", program.kernel_count());
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
        bench_step("cnn_train_step", lenet(), &[128, 1, 28, 28], 20);
    }
    if run("mlp_predict") {
        eprintln!("bench: mlp_predict");
        bench_predict();
    }
    let _ = InitRng::new(0);
}
