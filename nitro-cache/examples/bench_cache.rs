//! Benchmarks of nitro-cache, one JSON object per line on stdout
//! (`shared/BENCH.md`). `cache_hit`: building a key of 20 parts and looking
//! it up in a warm cache, the per-call cost every cached program pays.
//!
//! Usage: `bench [NAME...]`; no names runs every bench.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use nitro_cache::{CompileCache, Key, KeyBuilder, OwnerToken};
use serde::Serialize;

#[derive(Serialize)]
enum Optimizer {
    Adam {
        lr: f64,
        betas: (f64, f64),
        eps: f64,
    },
}

/// A realistic train-step key: 20 parts.
fn train_step_key(batch: usize) -> Key {
    let img = format!("f32[{batch},784]");
    let label = format!("i32[{batch}]");
    KeyBuilder::new()
        .part("program", "train_step")
        .part("experiment", "MnistMlp")
        .graph_const("width", &512usize)
        .graph_const("depth", &2usize)
        .graph_const("classes", &10usize)
        .graph_const("dropout", &0.1f64)
        .graph_const("activation", "relu")
        .graph_const("hidden", &[512usize, 512][..])
        .graph_const("use_bias", &true)
        .graph_const("init_seed", &42u64)
        .input_sig("img", &img)
        .input_sig("label", &label)
        .input_sig("smoothing", "f32[]")
        .input_sig("lr_scale", "f32[]")
        .structure(
            "params",
            &[
                ("dense1.weight", [784usize, 512]),
                ("dense1.bias", [512, 1]),
                ("dense2.weight", [512, 512]),
                ("dense2.bias", [512, 1]),
                ("out.weight", [512, 10]),
                ("out.bias", [10, 1]),
            ][..],
        )
        .config(
            "optimizer",
            &Optimizer::Adam {
                lr: 1e-3,
                betas: (0.9, 0.999),
                eps: 1e-8,
            },
        )
        .config("loss", "softmax_cross_entropy")
        .env("backend", "cpu")
        .env("device", "cpu:0")
        .env("nitro", "0.1.0")
        .finish()
        .expect("canonical")
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn cache_hit() {
    let cache: CompileCache<Arc<Vec<u8>>> = CompileCache::new();
    let owner = OwnerToken::new();
    let key = train_step_key(256);
    let parts = key.parts().len();
    cache
        .get_or_compile("train_step", &key, Some(&owner), || {
            Ok::<_, ()>(Arc::new(vec![0; 64]))
        })
        .unwrap();
    let per_run = 2000;
    let sample = || {
        let started = Instant::now();
        for _ in 0..per_run {
            let key = train_step_key(black_box(256));
            let (program, outcome) = cache
                .get_or_compile("train_step", &key, Some(&owner), || {
                    Err("a warm cache never compiles")
                })
                .unwrap();
            debug_assert!(outcome.is_hit());
            black_box(program);
        }
        started.elapsed().as_secs_f64() * 1e6 / per_run as f64
    };
    for _ in 0..5 {
        sample();
    }
    let runs = 31;
    let micros = median((0..runs).map(|_| sample()).collect());
    let stats = cache.stats("train_step");
    assert_eq!(stats.compiles, 1, "the bench must measure hits only");
    println!(
        "{{\"bench\":\"cache_hit\",\"micros\":{micros:.3},\"runs\":{runs},\"calls_per_run\":{per_run},\"parts\":{parts},\"goal_micros\":5}}"
    );
}

fn main() {
    let names: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wanted = |name: &str| names.is_empty() || names.iter().any(|n| n == name);
    if wanted("cache_hit") {
        eprintln!("nitro-cache bench: cache_hit");
        cache_hit();
    }
}
