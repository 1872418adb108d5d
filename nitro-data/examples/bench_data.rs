//! Benchmarks of nitro-data, one JSON object per line on stdout (see
//! shared/BENCH.md); progress on stderr. `bench [NAME...]` runs only the
//! named benches; no names runs all.
//!
//! `batcher`: batches per second of a shuffled [`BatchIter`] over the
//! built-in digits (60k train) at width 256, each batch touched once as a
//! consumer would, without and with [`Prefetch`] (whose figure includes
//! handing batches across threads). The median over `runs` epochs after one
//! warm-up epoch.

use std::sync::Arc;
use std::time::Instant;

use nitro_data::digits::{generate, DigitsConfig};
use nitro_data::{BatchIter, Dataset, EpochOrder, InMemory, Prefetch, ShortBatch};

const WIDTH: usize = 256;
const RUNS: usize = 7;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Consume one epoch; returns (batches, seconds).
fn epoch(data: &Arc<InMemory>, epoch: u64, prefetch: bool) -> (usize, f64) {
    let order = EpochOrder::new(data.len(), WIDTH, 1)
        .expect("width")
        .with_short_batch(ShortBatch::PadWithMask);
    let it = BatchIter::new(data.clone(), order, &["image", "label"])
        .expect("fields")
        .resume_at(epoch, 0);
    let t = Instant::now();
    let mut n = 0;
    let mut sink = 0.0f32;
    let mut consume = |item: Result<nitro_data::BatchItem, nitro_data::DataError>| {
        let item = item.expect("batch");
        sink += item
            .batch
            .get("image")
            .and_then(|a| a.as_slice::<f32>())
            .map_or(0.0, |a| a[14 * 28 + 14]);
        n += 1;
    };
    if prefetch {
        Prefetch::new(it, 2).for_each(&mut consume);
    } else {
        it.for_each(&mut consume);
    }
    std::hint::black_box(sink);
    (n, t.elapsed().as_secs_f64())
}

fn batcher() {
    eprintln!("batcher: generating 60k digits");
    let t = Instant::now();
    let data = Arc::new(
        generate(&DigitsConfig {
            test: 0,
            ..Default::default()
        })
        .expect("digits")
        .train,
    );
    let gen_s = t.elapsed().as_secs_f64();
    for prefetch in [false, true] {
        epoch(&data, 0, prefetch);
        let rates: Vec<f64> = (1..=RUNS as u64)
            .map(|e| {
                let (n, s) = epoch(&data, e, prefetch);
                n as f64 / s
            })
            .collect();
        println!(
            "{{\"bench\":\"batcher\",\"batches_per_s\":{:.1},\"prefetch\":{prefetch},\"width\":{WIDTH},\"samples\":{},\"runs\":{RUNS},\"generate_60k_s\":{gen_s:.3}}}",
            median(rates),
            data.len(),
        );
    }
}

fn main() {
    let names: Vec<String> = std::env::args().skip(1).collect();
    let wanted = |n: &str| names.is_empty() || names.iter().any(|a| a == n);
    if wanted("batcher") {
        batcher();
    }
}
