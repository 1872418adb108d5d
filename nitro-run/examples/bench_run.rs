//! nitro-run benchmarks, one JSON object per line on stdout (format in
//! BENCH.md); progress on stderr. `cargo run --release -p nitro-run
//! --example bench_run [NAME...]` runs `predict_overhead`, `mlp_predict` and
//! `digits_mlp_e2e` and `ddp_throughput` (or only those named;
//! `ddp_throughput` needs `--features mpi` and `mpirun`, which
//! `cargo xtask bench` passes where MPI is installed). The graph-level benches
//! (`mlp_train_step`, `cnn_train_step`, ...) live in nitro-graph's bench.

use std::time::Instant;

use nitro_data::digits::{generate, generate_split, DigitsConfig, Split};
use nitro_data::{Dataset, Splits};
use nitro_graph::nn::init::InitRng;
use nitro_graph::nn::layers::{Activation, Chain, Dense, Layer, Params};
use nitro_graph::nn::loss::softmax_cross_entropy;
use nitro_graph::nn::Ctx;
use nitro_graph::Tensor;
use nitro_markers::{Experiment, ExperimentFields, Fields, GraphConst};
use nitro_run::{Distributed, HookError, Logger, ModelParts, Nitro, Optimizer, Progress};

/// An MLP on digits with `layers` hidden layers of `width`.
#[derive(Experiment, Debug)]
struct BenchMlp {
    #[experiment(default = 512)]
    width: GraphConst<usize>,
    #[experiment(default = 2)]
    layers: GraphConst<usize>,
    #[experiment(default = 256)]
    batch: usize,
    #[experiment(default = 10000)]
    n_train: usize,
    #[experiment(default = 1)]
    epochs: u64,
}

#[derive(Fields)]
struct Images<T> {
    image: T,
}

#[derive(Fields)]
struct Labels<T> {
    label: T,
}

impl nitro_run::Experiment for BenchMlp {
    type Model = Chain;
    type Inputs = Images<Tensor>;
    type Targets = Labels<Tensor>;
    type Outputs = Tensor;

    fn build_model(&self, rng: &mut InitRng) -> Result<ModelParts<Chain>, HookError> {
        let mut model = Chain::new();
        let mut input = 784;
        for _ in 0..*self.layers {
            model = model.push(Dense::new(input, *self.width).with(Activation::Relu));
            input = *self.width;
        }
        let model = model.push(Dense::new(input, 10));
        let mut params = Params::new();
        model.init(rng, "", &mut params)?;
        Ok(ModelParts {
            model,
            params,
            state: Params::new(),
        })
    }
    fn build_data(&self, _: Option<&Distributed>) -> Result<Splits, HookError> {
        Ok(generate(&DigitsConfig {
            train: self.n_train,
            val: 0,
            test: 0,
            seed: 0,
        })?)
    }
    fn forward(
        _: &BenchMlpView<Tensor>,
        m: &Chain,
        _: &Ctx,
        ps: &Params<Tensor>,
        st: &Params<Tensor>,
        x: Images<Tensor>,
    ) -> (Tensor, Params<Tensor>) {
        let n = x.image.shape()[0];
        (m.apply(ps, "", &x.image.reshape(&[n, 784])), st.clone())
    }
    fn loss(_: &BenchMlpView<Tensor>, logits: &Tensor, y: Labels<Tensor>) -> Tensor {
        softmax_cross_entropy(logits, &y.label, 0.0)
    }
    fn batch_size(&self) -> usize {
        self.batch
    }
    fn max_epochs(&self) -> u64 {
        self.epochs
    }
    fn optimizer(&self) -> Optimizer {
        Optimizer::adam(1e-3)
    }
    fn run_dir(&self) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("nitro-bench-{}", std::process::id()))
    }
    fn logger(&self) -> Logger {
        Logger {
            progress: Progress::Off,
            every: 1000,
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The number of timed calls: `NITRO_BENCH_STEPS=N` (as in nitro-graph's
/// bench) where set, for longer runs on a noisy machine or under a
/// profiler; `default` otherwise.
fn runs_or(default: usize) -> usize {
    std::env::var("NITRO_BENCH_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(default, |n: usize| n.max(1))
}

fn images(n: usize) -> nitro_data::Batch {
    let set = generate_split(n, 5, Split::Test).expect("digits generate");
    set.gather(&(0..n).collect::<Vec<_>>(), &["image"])
        .expect("image field")
}

fn predict_overhead() -> Result<(), Box<dyn std::error::Error>> {
    let mut e = BenchMlp::defaults();
    (e.width, e.layers, e.batch, e.n_train) = (8.into(), 1.into(), 1, 16);
    let mut n = Nitro::new(e)?;
    let b = images(1);
    n.predict(&b)?;
    let runs = 2000;
    let mut times = vec![];
    for _ in 0..runs {
        let t = Instant::now();
        n.predict(&b)?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    println!(
        "{{\"bench\":\"predict_overhead\",\"micros\":{:.2},\"runs\":{runs},\"model\":\"784-8-10\",\"batch\":1}}",
        median(times)
    );
    Ok(())
}

fn mlp_predict() -> Result<(), Box<dyn std::error::Error>> {
    let mut e = BenchMlp::defaults();
    e.n_train = 256;
    let mut n = Nitro::new(e)?;
    let b = images(256);
    n.predict(&b)?;
    let runs = runs_or(30);
    let mut times = vec![];
    for _ in 0..runs {
        let t = Instant::now();
        n.predict(&b)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "{{\"bench\":\"mlp_predict\",\"batch\":256,\"median_ms\":{:.3},\"runs\":{runs},\"model\":\"784-512-512-10\",\"via\":\"Nitro::predict\"}}",
        median(times)
    );
    Ok(())
}

fn digits_mlp_e2e() -> Result<(), Box<dyn std::error::Error>> {
    let mut results = vec![];
    let runs = 3;
    for _ in 0..runs {
        let mut e = BenchMlp::defaults();
        (e.width, e.layers, e.batch, e.n_train, e.epochs) = (256.into(), 1.into(), 128, 10_000, 1);
        let mut n = Nitro::new(e)?;
        let dir = n.run_values().run_dir.clone();
        n.train()?; // warm-up: compile
                    // Three epochs, so the checkpoint per epoch is what the figure
                    // measures: the first two are written while training goes on, the
                    // last one the run waits for (its fsync) before returning.
        let mut e = BenchMlp::defaults();
        (e.width, e.layers, e.batch, e.n_train, e.epochs) = (256.into(), 1.into(), 128, 10_000, 3);
        let mut n = Nitro::with_data(e, n.data())?;
        let _ = std::fs::remove_dir_all(&dir);
        let r = n.train()?;
        // The training loop only: checkpoint writes and validation are
        // separate costs, reported on their own.
        let wall = (r.wall_time - r.checkpoint_time - r.eval_time).as_secs_f64();
        results.push((
            r.steps as f64 / wall,
            1.0 - r.program_time.as_secs_f64() / wall,
            // The share of the whole call's wall time the step loop was
            // blocked on its checkpoint (one per epoch, written in the
            // background; the run waits for the last before returning).
            r.checkpoint_time.as_secs_f64() / r.wall_time.as_secs_f64(),
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
    let steps = median(results.iter().map(|r| r.0).collect());
    let host = median(results.iter().map(|r| r.1).collect());
    let ckpt = median(results.iter().map(|r| r.2).collect());
    println!(
        "{{\"bench\":\"digits_mlp_e2e\",\"steps_per_s\":{steps:.1},\"host_share\":{host:.4},\"ckpt_blocked_share\":{ckpt:.4},\"runs\":{runs},\"batch\":128,\"model\":\"784-256-10\",\"epochs\":3,\"note\":\"3 epochs of 10k; steps_per_s: training loop only (checkpoint and validation excluded); ckpt_blocked_share: of the whole call, a background checkpoint per epoch, the last one waited for\"}}"
    );
    Ok(())
}

/// The digits example's training loop as the example runs it (784-256-10,
/// micro-batch 128, 8 epochs of 20k: a run's fixed costs weigh as they do
/// there), timed after a warm-up call that compiles: samples/s over
/// the loop (checkpoint and validation excluded) and the share of it spent
/// in the gradient all-reduce. One JSON object on rank 0's stdout.
fn ddp_worker() -> Result<(), Box<dyn std::error::Error>> {
    let config = |e: &mut BenchMlp| {
        (e.width, e.layers, e.batch, e.n_train, e.epochs) = (256.into(), 1.into(), 128, 20_000, 8);
    };
    let mut e = BenchMlp::defaults();
    config(&mut e);
    let mut n = Nitro::new(e)?;
    let dir = n.run_values().run_dir.clone();
    n.train()?;
    let (mut rates, mut shares, mut step_ms, mut reduce_ms) = (vec![], vec![], vec![], vec![]);
    let mut program_ms = vec![];
    for _ in 0..3 {
        let mut e = BenchMlp::defaults();
        config(&mut e);
        let mut n = Nitro::with_data(e, n.data())?;
        let _ = std::fs::remove_dir_all(&dir);
        let r = n.train()?;
        let wall = (r.wall_time - r.checkpoint_time - r.eval_time).as_secs_f64();
        let run = n.run_values();
        let samples = r.steps as f64 * (run.batch_size * run.accum * run.world_size) as f64;
        rates.push(samples / wall);
        shares.push(r.all_reduce_time.as_secs_f64() / wall);
        let steps = r.steps.max(1) as f64;
        step_ms.push(wall * 1e3 / steps);
        reduce_ms.push(r.all_reduce_time.as_secs_f64() * 1e3 / steps);
        program_ms.push(r.program_time.as_secs_f64() * 1e3 / steps);
    }
    let _ = std::fs::remove_dir_all(&dir);
    // The all-reduce alone, of the step's buffer size (params, loss and
    // weight), each after a barrier: what the step pays with no rank late.
    let len: usize = n.params().values().map(|a| a.data().len()).sum::<usize>() + 2;
    let comm = n.distributed().group().communicator().clone();
    let mut alone = vec![];
    for _ in 0..40 {
        let mut buf = nitro_graph::HostBuffer::F32(vec![1.0; len]);
        comm.barrier()?;
        let t0 = Instant::now();
        comm.all_reduce_sum(&mut buf)?;
        alone.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    if n.distributed().is_root() {
        println!(
            "{{\"samples_per_s\":{:.1},\"all_reduce_share\":{:.4},\"step_ms\":{:.3},\"all_reduce_ms\":{:.3},\"program_ms\":{:.3},\"all_reduce_alone_ms\":{:.3},\"floats\":{len},\"world\":{}}}",
            median(rates),
            median(shares),
            median(step_ms),
            median(reduce_ms),
            median(program_ms),
            median(alone),
            n.distributed().world_size()
        );
    }
    Ok(())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "null".into())
}

/// A `ddp_worker` line, as `ddp_throughput` reads it.
struct Figures {
    /// Samples/s over the training loop (all ranks).
    rate: f64,
    /// The share of the loop spent in the all-reduce.
    share: f64,
    /// Loop ms per step, of it ms in the compiled program, and of that ms
    /// in the all-reduce.
    step_ms: f64,
    program_ms: f64,
    reduce_ms: f64,
    /// One all-reduce of the step's buffer after a barrier.
    alone_ms: f64,
}

/// Adjacent (1-rank, 2-rank) run pairs of `ddp_throughput`.
const PAIRS: usize = 9;

/// `ddp_throughput`: the worker as 2 ranks x 1 thread (`mpirun -n 2`)
/// against 1 rank x 1 thread, alternated [`PAIRS`] times; the samples/s
/// ratio (2 is perfect scaling) and the 2-rank all-reduce share. The step
/// times say where a ratio under 2 goes: the all-reduce's part of the
/// 2-rank step, and what two unconnected workers at once pay for sharing
/// the machine (memory, caches, a VM's neighbours) with no exchange at all.
fn ddp_throughput() -> Result<(), Box<dyn std::error::Error>> {
    use std::process::Command;
    if !cfg!(feature = "mpi") || Command::new("mpirun").arg("--version").output().is_err() {
        println!(
            "{{\"bench\":\"ddp_throughput\",\"skipped\":\"needs --features mpi and mpirun\"}}"
        );
        return Ok(());
    }
    let exe = std::env::current_exe()?;
    let figures = |out: std::process::Output| -> Result<Figures, Box<dyn std::error::Error>> {
        if !out.status.success() {
            return Err(format!(
                "ddp worker failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.contains("samples_per_s"))
            .ok_or("no worker line")?;
        let v: serde_json::Value = serde_json::from_str(line)?;
        let field = |name: &'static str| v[name].as_f64().ok_or(name);
        Ok(Figures {
            rate: field("samples_per_s")?,
            share: field("all_reduce_share")?,
            step_ms: field("step_ms")?,
            program_ms: field("program_ms")?,
            reduce_ms: field("all_reduce_ms")?,
            alone_ms: field("all_reduce_alone_ms")?,
        })
    };
    let load_before = loadavg();
    let (mut one, mut two, mut share, mut pairs, mut alone, mut ceilings) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    // Per step: 1 rank alone, 2 ranks (and of it the all-reduce), and two
    // unconnected workers at once (what sharing the machine costs alone).
    let (mut step_one, mut step_two, mut reduce_two, mut step_both) =
        (vec![], vec![], vec![], vec![]);
    // Of each step, the time inside the compiled program (the rest is the
    // host loop: batches, logs, bookkeeping).
    let (mut program_one, mut program_two, mut program_both) = (vec![], vec![], vec![]);
    // Adjacent runs are paired, so a drift of the machine's speed (a VM's
    // neighbours) moves both sides of a ratio alike.
    // The 1-rank side runs bound to one core, as mpirun binds each of the
    // 2 ranks (`--bind-to core`, its default for 2 processes): one core
    // against two. Unbound, the one rank's data-prefetch thread and the
    // system's work borrow the idle second core, which the 2-rank job
    // does not have; that run is reported beside (`samples_per_s_1x1_unbound`).
    let bound = Command::new("taskset")
        .args(["-c", "0", "true"])
        .status()
        .is_ok_and(|s| s.success());
    let one_rank = |bind: bool| {
        let mut cmd = if bind {
            let mut c = Command::new("taskset");
            c.args(["-c", "0"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        cmd.arg("ddp_worker").env("RAYON_NUM_THREADS", "1").output()
    };
    let mut one_unbound = vec![];
    for _ in 0..PAIRS {
        one_unbound.push(figures(one_rank(false)?)?.rate);
        let f = figures(one_rank(bound)?)?;
        one.push(f.rate);
        step_one.push(f.step_ms);
        program_one.push(f.program_ms);
        let out = Command::new("mpirun")
            .args([
                "--allow-run-as-root",
                "--oversubscribe",
                "-n",
                "2",
                "-x",
                "RAYON_NUM_THREADS",
            ])
            .arg(&exe)
            .arg("ddp_worker")
            .env("RAYON_NUM_THREADS", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .output()?;
        let f = figures(out)?;
        step_two.push(f.step_ms);
        program_two.push(f.program_ms);
        reduce_two.push(f.reduce_ms);
        two.push(f.rate);
        share.push(f.share);
        alone.push(f.alone_ms);
        pairs.push(f.rate / one[one.len() - 1]);
        // The machine's own ceiling: two independent 1-rank workers at once
        // (no group, nothing exchanged), each pinned to a core as mpirun
        // binds its ranks.
        let spawn = |core: &str| {
            Command::new("taskset")
                .args(["-c", core])
                .arg(&exe)
                .arg("ddp_worker")
                .env("RAYON_NUM_THREADS", "1")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
        };
        if let (Ok(a), Ok(b)) = (spawn("0"), spawn("1")) {
            let (fa, fb) = (
                figures(a.wait_with_output()?)?,
                figures(b.wait_with_output()?)?,
            );
            ceilings.push((fa.rate + fb.rate) / one[one.len() - 1]);
            step_both.push((fa.step_ms + fb.step_ms) / 2.0);
            program_both.push((fa.program_ms + fb.program_ms) / 2.0);
        }
    }
    let ratios: Vec<String> = pairs.iter().map(|r| format!("{r:.3}")).collect();
    let (one, two, share, ratio) = (median(one), median(two), median(share), median(pairs));
    let one_unbound = median(one_unbound);
    let alone = median(alone);
    let (step_one, step_two, reduce_two) = (median(step_one), median(step_two), median(reduce_two));
    // The independent runs need `taskset`; without it their fields are null.
    let median_or_null = |v: Vec<f64>| {
        if v.is_empty() {
            "null".to_string()
        } else {
            format!("{:.3}", median(v))
        }
    };
    let (step_both, ceiling) = (median_or_null(step_both), median_or_null(ceilings));
    let (program_one, program_two) = (median(program_one), median(program_two));
    let program_both = median_or_null(program_both);
    println!(
        "{{\"bench\":\"ddp_throughput\",\"ranks\":2,\"ratio_vs_one_rank\":{ratio:.3},\"pair_ratios\":[{}],\"independent_ratio\":{ceiling},\"samples_per_s\":{two:.1},\"samples_per_s_1x1\":{one:.1},\"samples_per_s_1x1_unbound\":{one_unbound:.1},\"one_rank_bound\":{bound},\"allreduce_share\":{share:.4},\"allreduce_alone_ms\":{alone:.3},\"step_ms_1x1\":{step_one:.3},\"step_ms_2x1\":{step_two:.3},\"allreduce_ms_per_step\":{reduce_two:.3},\"step_ms_independent\":{step_both},\"program_ms_1x1\":{program_one:.3},\"program_ms_2x1\":{program_two:.3},\"program_ms_independent\":{program_both},\"threads\":1,\"model\":\"784-256-10\",\"batch_per_rank\":128,\"epochs\":8,\"loadavg_before\":{load_before},\"loadavg_after\":{},\"note\":\"digits_mlp training loop as the example runs it, 8 epochs of 20k; ratio_vs_one_rank = 2-rank samples/s (samples_per_s, global; mpirun binds each rank to a core) over 1-rank samples/s bound to one core (taskset; one_rank_bound) (goal >= 1.8): the median over {PAIRS} adjacent (1-rank, 2-rank) pairs of their ratio, each run the median of 3 trainings; independent_ratio = two unconnected 1-rank workers run at once, pinned, over the adjacent 1-rank run: the most this machine gives two processes; step_ms: training-loop ms per step (1 rank, 2 ranks with allreduce_ms_per_step of it, two unconnected workers at once): the ratio is about 2 step_ms_1x1 / step_ms_2x1; program_ms: of a step, the time inside the compiled program (the all-reduce included), the rest being the host loop\"}}",
        ratios.join(","),
        loadavg()
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    nitro_run::set_config_report(false);
    let names: Vec<String> = std::env::args().skip(1).collect();
    if names.first().is_some_and(|n| n == "ddp_worker") {
        return ddp_worker();
    }
    let want = |n: &str| names.is_empty() || names.iter().any(|a| a == n);
    type Bench = fn() -> Result<(), Box<dyn std::error::Error>>;
    let benches: [(&str, Bench); 4] = [
        ("predict_overhead", predict_overhead),
        ("mlp_predict", mlp_predict),
        ("digits_mlp_e2e", digits_mlp_e2e),
        ("ddp_throughput", ddp_throughput),
    ];
    for (name, f) in benches {
        if want(name) {
            eprintln!("bench {name} ...");
            f()?;
        }
    }
    Ok(())
}
