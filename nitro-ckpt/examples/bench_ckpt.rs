//! `ckpt_save` and `ckpt_load`: a 100 MB checkpoint against a raw
//! `std::fs::write` / `std::fs::read` of the same bytes, in the same run and
//! directory. JSON lines on stdout (see BENCH.md); progress on stderr.
//! Arguments name the benches to run; none runs both.
//!
//! `ratio_vs_raw` is checkpoint time / raw time (1.0 = as fast as raw).
//! `save` also fsyncs file and directory, which raw `fs::write` does not;
//! `ratio_vs_raw_fsync` compares with a raw write followed by `sync_all`.

use std::path::Path;
use std::time::Instant;

use nitro_ckpt::{load, save, Checkpoint, Metadata, TensorEntry};

const MB: usize = 1 << 20;
const TOTAL: usize = 100 * MB;
const TENSORS: usize = 20;
const RUNS: usize = 5;

fn checkpoint() -> Checkpoint {
    let mut c = Checkpoint::new(Metadata {
        experiment: "Bench".into(),
        ..Metadata::default()
    });
    let per = TOTAL / TENSORS;
    for i in 0..TENSORS {
        let bytes: Vec<u8> = (0..per).map(|j| (j * 31 + i) as u8).collect();
        let t = TensorEntry::new(
            format!("layer{i}.weight"),
            nitro_ckpt::DType::F32,
            vec![(per / 4) as u64],
            bytes,
        )
        .expect("consistent tensor");
        c.push("params", t);
    }
    c
}

/// Median seconds of `RUNS` timed runs after one warm-up.
fn median(mut f: impl FnMut()) -> f64 {
    f();
    let mut times: Vec<f64> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[RUNS / 2]
}

fn raw_bytes(c: &Checkpoint) -> Vec<u8> {
    c.trees
        .values()
        .flatten()
        .flat_map(|t| t.bytes.iter().copied())
        .collect()
}

fn mb_per_s(secs: f64) -> f64 {
    TOTAL as f64 / MB as f64 / secs
}

fn bench_save(dir: &Path, ckpt: &Checkpoint, raw: &[u8]) {
    eprintln!("ckpt_save: {RUNS} runs + warm-up");
    let raw_path = dir.join("raw.bin");
    let ckpt_path = dir.join("bench.nckpt");
    let raw_t = median(|| std::fs::write(&raw_path, raw).expect("raw write"));
    let raw_sync_t = median(|| {
        use std::io::Write;
        let mut f = std::fs::File::create(&raw_path).expect("raw create");
        f.write_all(raw).expect("raw write");
        f.sync_all().expect("raw fsync");
    });
    let t = median(|| save(&ckpt_path, ckpt).expect("save"));
    println!(
        "{{\"bench\":\"ckpt_save\",\"mb\":{},\"mb_per_s\":{:.1},\"raw_mb_per_s\":{:.1},\"ratio_vs_raw\":{:.3},\"raw_fsync_mb_per_s\":{:.1},\"ratio_vs_raw_fsync\":{:.3},\"runs\":{RUNS}}}",
        TOTAL / MB,
        mb_per_s(t),
        mb_per_s(raw_t),
        t / raw_t,
        mb_per_s(raw_sync_t),
        t / raw_sync_t
    );
}

fn bench_load(dir: &Path, ckpt: &Checkpoint, raw: &[u8]) {
    eprintln!("ckpt_load: {RUNS} runs + warm-up");
    let raw_path = dir.join("raw.bin");
    let ckpt_path = dir.join("bench.nckpt");
    std::fs::write(&raw_path, raw).expect("raw write");
    save(&ckpt_path, ckpt).expect("save");
    let raw_t = median(|| {
        std::hint::black_box(std::fs::read(&raw_path).expect("raw read"));
    });
    let t = median(|| {
        std::hint::black_box(load(&ckpt_path).expect("load"));
    });
    println!(
        "{{\"bench\":\"ckpt_load\",\"mb\":{},\"mb_per_s\":{:.1},\"raw_mb_per_s\":{:.1},\"ratio_vs_raw\":{:.3},\"runs\":{RUNS}}}",
        TOTAL / MB,
        mb_per_s(t),
        mb_per_s(raw_t),
        t / raw_t
    );
}

fn main() {
    let names: Vec<String> = std::env::args().skip(1).collect();
    let wanted = |n: &str| names.is_empty() || names.iter().any(|a| a == n);
    if !wanted("ckpt_save") && !wanted("ckpt_load") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("nitro-ckpt-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("bench directory");
    eprintln!(
        "building a {} MB checkpoint in {}",
        TOTAL / MB,
        dir.display()
    );
    let ckpt = checkpoint();
    let raw = raw_bytes(&ckpt);
    if wanted("ckpt_save") {
        bench_save(&dir, &ckpt, &raw);
    }
    if wanted("ckpt_load") {
        bench_load(&dir, &ckpt, &raw);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
