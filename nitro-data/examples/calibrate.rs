//! Measure the digits dataset's difficulty: test accuracy of softmax
//! regression and a 1-hidden-layer MLP, plus generation time.
//! `cargo run --release -p nitro-data --example calibrate [train] [test] [epochs]`

#[path = "../tests/common/trainer.rs"]
mod trainer;

use nitro_data::digits::{generate, DigitsConfig};

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let train = args.first().copied().unwrap_or(60_000);
    let test = args.get(1).copied().unwrap_or(10_000);
    let epochs = args.get(2).copied().unwrap_or(10);
    let t = std::time::Instant::now();
    let _ = generate(&DigitsConfig {
        train: 10_000,
        test: 0,
        seed: 1,
        ..Default::default()
    });
    eprintln!("generate 10k: {:.3}s", t.elapsed().as_secs_f64());
    let splits = generate(&DigitsConfig {
        train,
        test,
        seed: 0,
        ..Default::default()
    })
    .expect("generate");
    let (x, y) = trainer::xy(&splits.train);
    let (xt, yt) = trainer::xy(splits.test.as_ref().expect("test split"));
    let t = std::time::Instant::now();
    let lin = trainer::train(&x, &y, 0, epochs, 0.05, 1);
    println!(
        "linear: test acc {:.4} (train {:.4}) in {:.1}s",
        trainer::accuracy(&lin, &xt, &yt),
        trainer::accuracy(&lin, &x, &y),
        t.elapsed().as_secs_f64()
    );
    let t = std::time::Instant::now();
    let mlp = trainer::train(&x, &y, 256, epochs, 0.02, 1);
    println!(
        "mlp-256: test acc {:.4} (train {:.4}) in {:.1}s",
        trainer::accuracy(&mlp, &xt, &yt),
        trainer::accuracy(&mlp, &x, &y),
        t.elapsed().as_secs_f64()
    );
}
