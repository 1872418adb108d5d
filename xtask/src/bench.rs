//! `cargo xtask bench [--peers PYTHON] [--rounds N] [NAME...]`: every
//! crate's bench example, one JSON object per line (shared/BENCH.md).
//!
//! Every line leaves here with `cpu`, `simd` and `threads` (added where a
//! bench did not say), because the machines differ between sessions.
//!
//! With `--peers PYTHON`, the peer scripts (`../shared/peers`, or
//! `$NITRO_PEERS_DIR`) run with that Python in the same sitting, in
//! `--rounds` rounds (default 3) that alternate nitro's benches and the
//! peers', so slow drift of the machine's load hits both alike. Each nitro
//! figure is then the median over rounds (the per-round figures are kept in
//! `rounds_ms` / `rounds_gflops`), and the MLP, CNN and GPT lines gain the
//! peers' medians (`torch_eager_ms`, `torch_compile_ms`, `jax_ms`), the
//! best of them (`best_peer`) and `ratio_vs_best_peer` = nitro's time / the
//! best peer's (below 1 is faster); the sgemm lines gain `openblas_gflops`
//! (numpy, BLAS environment as-is) and the same ratio in time.

use serde_json::{Map, Value};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Every crate with benchmarks has an example `bench_<crate>` (e.g.
/// `nitro-graph/examples/bench_graph.rs`) printing the JSON lines of its
/// benches: all of them, or those named on its command line.
const BENCH_PACKAGES: [&str; 5] = [
    "nitro-graph",
    "nitro-cache",
    "nitro-data",
    "nitro-ckpt",
    "nitro-run",
];

/// Which peer measurement answers which nitro bench: (nitro bench, peer
/// script's `bench`, its `phase`).
const PEER_WORKLOADS: [(&str, &str, &str); 6] = [
    ("mlp_train_step", "mlp", "train"),
    ("mlp_predict", "mlp", "eval"),
    ("cnn_train_step", "cnn", "train"),
    ("cnn_predict", "cnn", "eval"),
    ("gpt_train_step", "gpt", "train"),
    ("gpt_predict", "gpt", "eval"),
];

/// The peer script measuring each workload prefix (`mlp_` benches come
/// from `mlp_step.py`, ...), run with `--framework torch` and `jax`.
const PEER_SCRIPTS: [(&str, &str); 3] = [
    ("mlp_step.py", "mlp_"),
    ("cnn_step.py", "cnn_"),
    ("gpt_step.py", "gpt_"),
];

/// The peer figures each workload line gains: (field, framework, mode).
const PEER_FIELDS: [(&str, &str, &str); 3] = [
    ("torch_eager_ms", "torch", "eager"),
    ("torch_compile_ms", "torch", "compile"),
    ("jax_ms", "jax", "jit"),
];

struct Options {
    peers: Option<PathBuf>,
    rounds: usize,
    names: Vec<String>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        peers: None,
        rounds: 0,
        names: vec![],
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--peers" => {
                let p = it.next().ok_or(
                    "--peers needs the peers' Python, e.g. ../shared/peers/.venv/bin/python",
                )?;
                o.peers = Some(PathBuf::from(p));
            }
            "--rounds" => {
                let r = it.next().and_then(|r| r.parse().ok()).filter(|&r| r >= 1);
                o.rounds = r.ok_or("--rounds needs a whole number >= 1")?;
            }
            name => o.names.push(name.to_string()),
        }
    }
    if o.rounds == 0 {
        o.rounds = if o.peers.is_some() { 3 } else { 1 };
    }
    Ok(o)
}

pub fn bench(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    let peers_dir = match &o.peers {
        Some(python) => Some(peers_dir(python)?),
        None => None,
    };
    let machine = machine();
    let mut rounds: Vec<Vec<Map<String, Value>>> = vec![];
    let mut peer_lines: Vec<Map<String, Value>> = vec![];
    for round in 0..o.rounds {
        if o.rounds > 1 {
            eprintln!("xtask bench: round {} of {}", round + 1, o.rounds);
        }
        let lines = nitro_round(&o.names)?;
        if o.rounds == 1 && o.peers.is_none() {
            // Nothing to merge: print as they come.
            for mut l in lines {
                annotate(&mut l, &machine);
                println!("{}", Value::Object(l));
            }
            return Ok(());
        }
        rounds.push(lines);
        if let (Some(python), Some(dir)) = (&o.peers, &peers_dir) {
            peer_lines.extend(peer_round(python, dir, &o.names)?);
        }
    }
    for mut l in merge(rounds) {
        add_peers(&mut l, &peer_lines);
        annotate(&mut l, &machine);
        println!("{}", Value::Object(l));
    }
    Ok(())
}

/// `../shared/peers` beside the workspace, or `$NITRO_PEERS_DIR`; checked
/// to hold the scripts and the Python to run.
fn peers_dir(python: &std::path::Path) -> Result<PathBuf, String> {
    let dir = std::env::var_os("NITRO_PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("../shared/peers"));
    if !dir.join("_harness.py").exists() {
        return Err(format!(
            "no peer scripts in {} (set NITRO_PEERS_DIR to the folder with mlp_step.py)",
            dir.display()
        ));
    }
    if Command::new(python).arg("--version").output().is_err() {
        return Err(format!(
            "cannot run {} (set it up as peers/README.md says)",
            python.display()
        ));
    }
    Ok(dir)
}

/// One run of every bench example; its JSON lines.
fn nitro_round(names: &[String]) -> Result<Vec<Map<String, Value>>, String> {
    let mut lines = vec![];
    for package in BENCH_PACKAGES {
        let example = format!("bench_{}", package.trim_start_matches("nitro-"));
        if !std::path::Path::new(package)
            .join(format!("examples/{example}.rs"))
            .exists()
        {
            continue;
        }
        let mut args = vec![
            "run",
            "--release",
            "--quiet",
            "--package",
            package,
            "--example",
            &example,
        ];
        // nitro-run's `ddp_throughput` launches itself under mpirun: built
        // with the `mpi` feature where MPI is installed (skipped otherwise).
        if package == "nitro-run" && crate::mpi::available() {
            args.extend(["--features", "mpi"]);
        }
        args.push("--");
        args.extend(names.iter().map(String::as_str));
        eprintln!("$ cargo {}", args.join(" "));
        let out = Command::new(env!("CARGO"))
            .args(&args)
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run cargo: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "`cargo {}` failed ({})",
                args.join(" "),
                out.status
            ));
        }
        lines.extend(json_lines(&out.stdout));
    }
    Ok(lines)
}

fn json_lines(stdout: &[u8]) -> Vec<Map<String, Value>> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| match serde_json::from_str(l) {
            Ok(Value::Object(m)) => Some(m),
            _ => {
                eprintln!("xtask bench: not a JSON object, ignored: {l}");
                None
            }
        })
        .collect()
}

/// The peer scripts the selected benches need, each run once.
fn peer_round(
    python: &std::path::Path,
    dir: &std::path::Path,
    names: &[String],
) -> Result<Vec<Map<String, Value>>, String> {
    let want = |b: &str| names.is_empty() || names.iter().any(|n| n == b);
    let mut runs: Vec<Vec<&str>> = vec![];
    for (script, prefix) in PEER_SCRIPTS {
        if PEER_WORKLOADS
            .iter()
            .any(|(b, _, _)| b.starts_with(prefix) && want(b))
        {
            runs.push(vec![script, "--framework", "torch"]);
            runs.push(vec![script, "--framework", "jax"]);
        }
    }
    if want("sgemm") {
        runs.push(vec!["sgemm.py", "--sizes", "256", "512", "1024", "2048"]);
    }
    let mut lines = vec![];
    for args in runs {
        eprintln!(
            "$ (cd {}; {} {})",
            dir.display(),
            python.display(),
            args.join(" ")
        );
        let out = Command::new(python)
            .args(&args)
            .current_dir(dir)
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
        if !out.status.success() {
            return Err(format!("peer `{}` failed ({})", args.join(" "), out.status));
        }
        lines.extend(json_lines(&out.stdout));
    }
    Ok(lines)
}

/// What identifies one bench line across rounds.
fn identity(l: &Map<String, Value>) -> String {
    // `model` and `product` tell apart the lines of `matmul_shapes`.
    ["bench", "n", "via", "batch", "model", "product"]
        .iter()
        .map(|k| l.get(*k).map(Value::to_string).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("/")
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| v[v.len() / 2])
}

fn number(l: &Map<String, Value>, key: &str) -> Option<f64> {
    l.get(key).and_then(Value::as_f64)
}

/// One line per bench: the last round's, its headline figure the median
/// over rounds and every round's figure alongside.
fn merge(rounds: Vec<Vec<Map<String, Value>>>) -> Vec<Map<String, Value>> {
    let Some(last) = rounds.last() else {
        return vec![];
    };
    let mut merged = vec![];
    for line in last {
        let id = identity(line);
        let mut out = line.clone();
        for key in ["median_ms", "gflops"] {
            if !line.contains_key(key) {
                continue;
            }
            let all: Vec<f64> = rounds
                .iter()
                .flat_map(|r| r.iter().filter(|l| identity(l) == id))
                .filter_map(|l| number(l, key))
                .collect();
            if let Some(m) = median(all.clone()) {
                out.insert(key.into(), Value::from(m));
                let name = format!("rounds_{}", key.trim_start_matches("median_"));
                out.insert(name, Value::from(all));
            }
        }
        merged.push(out);
    }
    merged
}

/// The peer figures for `l`'s workload (medians over rounds) and the ratio.
fn add_peers(l: &mut Map<String, Value>, peers: &[Map<String, Value>]) {
    if peers.is_empty() {
        return;
    }
    let bench = l.get("bench").and_then(Value::as_str).unwrap_or_default();
    let s = |m: &Map<String, Value>, k: &str| m.get(k).and_then(Value::as_str).map(str::to_owned);
    if bench == "sgemm" {
        let n = number(l, "n");
        let blas: Vec<f64> = peers
            .iter()
            .filter(|p| s(p, "record").as_deref() == Some("sgemm"))
            .filter(|p| s(p, "config").as_deref() == Some("as-is") && number(p, "n") == n)
            .filter_map(|p| number(p, "gflops"))
            .collect();
        if let (Some(b), Some(g)) = (median(blas), number(l, "gflops")) {
            l.insert("openblas_gflops".into(), Value::from(b));
            l.insert("ratio_vs_best_peer".into(), Value::from(round3(b / g)));
        }
        return;
    }
    let Some(&(_, script, phase)) = PEER_WORKLOADS.iter().find(|w| w.0 == bench) else {
        return;
    };
    let mut best: Option<(&str, f64)> = None;
    let mut busy: f64 = 0.0;
    for (field, framework, mode) in PEER_FIELDS {
        let hits: Vec<&Map<String, Value>> = peers
            .iter()
            .filter(|p| s(p, "bench").as_deref() == Some(script))
            .filter(|p| s(p, "phase").as_deref() == Some(phase))
            .filter(|p| s(p, "framework").as_deref() == Some(framework))
            .filter(|p| s(p, "mode").as_deref() == Some(mode))
            .collect();
        busy = hits
            .iter()
            .filter_map(|p| number(p, "others_busy"))
            .fold(busy, f64::max);
        if let Some(ms) = median(hits.iter().filter_map(|p| number(p, "median_ms")).collect()) {
            l.insert(field.into(), Value::from(ms));
            if best.is_none_or(|(_, b)| ms < b) {
                best = Some((field, ms));
            }
        }
    }
    if let (Some((field, ms)), Some(own)) = (best, number(l, "median_ms")) {
        l.insert(
            "best_peer".into(),
            Value::from(field.trim_end_matches("_ms")),
        );
        l.insert("ratio_vs_best_peer".into(), Value::from(round3(own / ms)));
        l.insert("peers_others_busy_max".into(), Value::from(busy));
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// `cpu`, `simd`, `threads` of this machine.
fn machine() -> Vec<(&'static str, Value)> {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    // Rayon's pool size, as the benches see it.
    let threads = std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1);
    vec![
        ("cpu", Value::from(cpu)),
        ("simd", Value::from(simd())),
        ("threads", Value::from(threads)),
    ]
}

/// The SIMD level gemm dispatches to here (the same test as
/// `nitro_graph::backend::cpu::simd_level`, for lines of benches that do
/// not link nitro-graph).
fn simd() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        let v4 = is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512cd")
            && is_x86_feature_detected!("avx512dq")
            && is_x86_feature_detected!("avx512vl");
        if v4 {
            "avx512"
        } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            "avx2"
        } else {
            "sse2"
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        std::env::consts::ARCH
    }
}

/// Add the machine's fields a line lacks.
fn annotate(l: &mut Map<String, Value>, machine: &[(&'static str, Value)]) {
    for (k, v) in machine {
        l.entry(*k).or_insert_with(|| v.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(s: &str) -> Map<String, Value> {
        match serde_json::from_str(s).unwrap() {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn rounds_merge_to_their_median_and_keep_every_round() {
        let rounds = vec![
            vec![line(
                r#"{"bench":"cnn_predict","batch":128,"median_ms":5.0}"#,
            )],
            vec![line(
                r#"{"bench":"cnn_predict","batch":128,"median_ms":9.0}"#,
            )],
            vec![line(
                r#"{"bench":"cnn_predict","batch":128,"median_ms":4.0}"#,
            )],
        ];
        let merged = merge(rounds);
        assert_eq!(merged.len(), 1);
        assert_eq!(number(&merged[0], "median_ms"), Some(5.0));
        assert_eq!(merged[0]["rounds_ms"], serde_json::json!([5.0, 9.0, 4.0]));
    }

    #[test]
    fn products_of_one_width_merge_apart() {
        let round = |a: f64, b: f64| {
            vec![
                line(&format!(
                    r#"{{"bench":"matmul_shapes","model":"mlp","product":"fc2 forward","batch":1,"n":512,"median_ms":{a}}}"#
                )),
                line(&format!(
                    r#"{{"bench":"matmul_shapes","model":"mlp","product":"fc2 input grad","batch":1,"n":512,"median_ms":{b}}}"#
                )),
            ]
        };
        let m = merge(vec![round(1.0, 5.0), round(2.0, 6.0), round(3.0, 7.0)]);
        assert_eq!(m.len(), 2);
        assert_eq!(number(&m[0], "median_ms"), Some(2.0));
        assert_eq!(number(&m[1], "median_ms"), Some(6.0));
    }

    #[test]
    fn peers_give_their_medians_the_best_and_the_ratio() {
        let peers: Vec<_> = [
            r#"{"bench":"cnn","framework":"torch","mode":"eager","phase":"eval","median_ms":2.0,"others_busy":0.01}"#,
            r#"{"bench":"cnn","framework":"torch","mode":"eager","phase":"eval","median_ms":4.0,"others_busy":0.2}"#,
            r#"{"bench":"cnn","framework":"torch","mode":"compile","phase":"eval","median_ms":1.25}"#,
            r#"{"bench":"cnn","framework":"jax","mode":"jit","phase":"eval","median_ms":3.0}"#,
            r#"{"bench":"cnn","framework":"jax","mode":"jit","phase":"train","median_ms":0.1}"#,
            r#"{"config":"as-is","record":"sgemm","n":1024,"gflops":200.0}"#,
            r#"{"config":"unset","record":"sgemm","n":1024,"gflops":900.0}"#,
        ]
        .iter()
        .map(|s| line(s))
        .collect();
        let mut l = line(r#"{"bench":"cnn_predict","batch":128,"median_ms":1.0}"#);
        add_peers(&mut l, &peers);
        // Median of [2, 4] is the upper middle, 4 (as the benches' own median).
        assert_eq!(number(&l, "torch_eager_ms"), Some(4.0));
        assert_eq!(number(&l, "torch_compile_ms"), Some(1.25));
        assert_eq!(number(&l, "jax_ms"), Some(3.0));
        assert_eq!(l["best_peer"], "torch_compile");
        assert_eq!(number(&l, "ratio_vs_best_peer"), Some(0.8));
        assert_eq!(number(&l, "peers_others_busy_max"), Some(0.2));
        let mut g = line(r#"{"bench":"sgemm","n":1024,"gflops":100.0}"#);
        add_peers(&mut g, &peers);
        assert_eq!(number(&g, "openblas_gflops"), Some(200.0));
        assert_eq!(number(&g, "ratio_vs_best_peer"), Some(2.0));
        let mut other = line(r#"{"bench":"cache_hit","micros":3.0}"#);
        add_peers(&mut other, &peers);
        assert_eq!(other.len(), 2);
        let mut none_yet = line(r#"{"bench":"gpt_predict","batch":16,"median_ms":1.0}"#);
        add_peers(&mut none_yet, &peers);
        assert!(!none_yet.contains_key("ratio_vs_best_peer"));
    }

    #[test]
    fn gpt_benches_pair_with_the_gpt_peer_script() {
        let peers: Vec<_> = [
            r#"{"bench":"gpt","framework":"torch","mode":"eager","phase":"train","median_ms":300.0}"#,
            r#"{"bench":"gpt","framework":"jax","mode":"jit","phase":"train","median_ms":600.0}"#,
            r#"{"bench":"gpt","framework":"torch","mode":"eager","phase":"eval","median_ms":80.0}"#,
        ]
        .iter()
        .map(|s| line(s))
        .collect();
        let mut t = line(r#"{"bench":"gpt_train_step","batch":16,"median_ms":150.0}"#);
        add_peers(&mut t, &peers);
        assert_eq!(t["best_peer"], "torch_eager");
        assert_eq!(number(&t, "jax_ms"), Some(600.0));
        assert_eq!(number(&t, "ratio_vs_best_peer"), Some(0.5));
        let mut p = line(r#"{"bench":"gpt_predict","batch":16,"median_ms":40.0}"#);
        add_peers(&mut p, &peers);
        assert_eq!(number(&p, "ratio_vs_best_peer"), Some(0.5));
        assert!(PEER_SCRIPTS
            .iter()
            .any(|(s, p)| *s == "gpt_step.py" && "gpt_predict".starts_with(p)));
        let mut other = line(r#"{"bench":"cache_hit","micros":3.0}"#);
        add_peers(&mut other, &peers);
        assert_eq!(other.len(), 2);
    }

    #[test]
    fn lines_gain_the_machine_fields_they_lack() {
        let mut l = line(r#"{"bench":"sgemm","simd":"avx512"}"#);
        annotate(&mut l, &machine());
        assert_eq!(l["simd"], "avx512");
        assert!(l["cpu"].is_string() && l["threads"].as_u64().unwrap() >= 1);
        assert!(["avx2", "avx512", "sse2"].contains(&simd()) || !cfg!(target_arch = "x86_64"));
    }

    #[test]
    fn options_parse() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let o = parse(&a(&["--peers", "py", "cnn_predict"])).unwrap();
        assert_eq!((o.rounds, o.names.len()), (3, 1));
        assert_eq!(parse(&a(&["sgemm"])).unwrap().rounds, 1);
        assert!(parse(&a(&["--rounds", "0"])).is_err());
        assert!(parse(&a(&["--peers"])).is_err());
    }
}
