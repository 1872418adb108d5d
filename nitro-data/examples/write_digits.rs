//! Write the built-in digits as MNIST-named IDX files:
//! `cargo run --release -p nitro-data --example write_digits -- DIR [train] [test] [seed]`

use nitro_data::digits::{write_idx_files, DigitsConfig};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir) = args.first() else {
        eprintln!("usage: write_digits DIR [train] [test] [seed]");
        std::process::exit(2);
    };
    let num = |i: usize, d: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let config = DigitsConfig {
        train: num(1, 60_000) as usize,
        test: num(2, 10_000) as usize,
        seed: num(3, 0),
        ..Default::default()
    };
    if let Err(e) = write_idx_files(dir, &config) {
        eprintln!("write_digits: {e}");
        std::process::exit(1);
    }
    eprintln!(
        "wrote {} train and {} test digits to {dir}",
        config.train, config.test
    );
}
