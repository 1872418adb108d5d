//! Data-parallel training under `mpirun --oversubscribe -n 2`, one thread
//! per rank (feature `mpi`; each test skips with one line when the feature
//! is off or `mpirun` is absent).
//!
//! What they pin: the two ranks' params are bitwise identical after every
//! update, and equal to one process training with the global batch (twice
//! the micro-batch) to 1e-5 relative in f32 and 1e-12 in f64; the digits
//! example reaches the one-process accuracy; a killed rank ends the job
//! fast and is named, a hung one is named by the survivor; a killed and
//! resumed 2-rank job ends bit-identical to an uninterrupted one; and a
//! resume with another world size is refused naming both sizes.

// Only `example()` is used here.
#[allow(dead_code)]
#[path = "support/digits_bin.rs"]
mod digits_bin;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The bound from a rank's loss to the others' exit.
const FAULT_BOUND: Duration = Duration::from_secs(30);

fn mpi_ready() -> bool {
    if !cfg!(feature = "mpi") {
        println!("skipped: built without --features mpi");
        return false;
    }
    if Command::new("mpirun").arg("--version").output().is_err() {
        println!("skipped: mpirun not found (install openmpi-bin libopenmpi-dev)");
        return false;
    }
    true
}

/// `mpirun -n 2` of `exe args`, one thread per rank, as root if need be.
fn mpirun(n: usize, exe: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("mpirun");
    c.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-n",
        &n.to_string(),
    ])
    .args([
        "-x",
        "NITRO_COLLECTIVE_TIMEOUT_S",
        "-x",
        "RAYON_NUM_THREADS",
    ])
    .arg(exe)
    .args(args)
    .env("NITRO_COLLECTIVE_TIMEOUT_S", "4")
    .env("RAYON_NUM_THREADS", "1")
    .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    c
}

/// The same program alone (no launcher variables), one thread.
fn alone(exe: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(exe);
    c.args(args).env("RAYON_NUM_THREADS", "1");
    for (k, _) in std::env::vars() {
        if k.starts_with("OMPI_") || k.starts_with("PMI_") {
            c.env_remove(k);
        }
    }
    c
}

fn checked(what: &str, out: Output) -> Output {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn ranks_exe() -> PathBuf {
    // Built for this test with the `mpi` feature (checked by `mpi_ready`).
    let exe: Option<&str> = option_env!("CARGO_BIN_EXE_ddp_ranks");
    exe.map(PathBuf::from)
        .unwrap_or_else(|| panic!("the mpi feature builds ddp_ranks"))
}

/// `step -> tensor -> values` from a `ddp_ranks` report (and its val lines).
type Report = (Vec<BTreeMap<String, Vec<f64>>>, Vec<String>);

fn parse(text: &str, f64_params: bool) -> Report {
    let mut steps = vec![];
    let mut val = vec![];
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("step ") {
            let mut tensors = BTreeMap::new();
            for part in rest.split(' ').skip(1) {
                let (name, hex) = part.split_once('=').unwrap();
                let values = hex
                    .split(',')
                    .filter(|h| !h.is_empty())
                    .map(|h| {
                        let bits = u64::from_str_radix(h, 16).unwrap();
                        if f64_params {
                            f64::from_bits(bits)
                        } else {
                            f32::from_bits(bits as u32) as f64
                        }
                    })
                    .collect();
                tensors.insert(name.to_string(), values);
            }
            steps.push(tensors);
        } else if line.starts_with("val ") {
            val.push(line.to_string());
        }
    }
    (steps, val)
}

fn check_against_one_process(dtype: &str, tol: f64) {
    if !mpi_ready() {
        return;
    }
    let steps = "12";
    let exe = ranks_exe();
    let two = tempfile::tempdir().unwrap();
    let one = tempfile::tempdir().unwrap();
    let d2 = two.path().to_str().unwrap();
    let d1 = one.path().to_str().unwrap();
    checked(
        "mpirun -n 2 ddp_ranks",
        mpirun(2, &exe, &["steps", d2, dtype, "16", steps])
            .output()
            .unwrap(),
    );
    checked(
        "ddp_ranks alone",
        alone(&exe, &["steps", d1, dtype, "32", steps])
            .output()
            .unwrap(),
    );
    let read =
        |dir: &Path, r: usize| std::fs::read_to_string(dir.join(format!("rank{r}.txt"))).unwrap();
    let (r0, r1) = (read(two.path(), 0), read(two.path(), 1));
    assert!(r0.starts_with("world 2 (rank 0, local 0, mpi)"), "{r0:.80}");
    assert!(r1.starts_with("world 2 (rank 1, local 1, mpi)"), "{r1:.80}");
    // Bitwise, every update and the sharded evaluation: the reduction
    // order is fixed, so both ranks hold the same bits.
    let body = |t: &str| t.lines().skip(1).collect::<Vec<_>>().join("\n");
    assert_eq!(body(&r0), body(&r1), "the ranks' params or metrics differ");
    let f64_params = dtype == "f64";
    let (steps2, val2) = parse(&r0, f64_params);
    let (steps1, val1) = parse(&read(one.path(), 0), f64_params);
    assert_eq!(steps2.len(), 12);
    assert_eq!(steps1.len(), 12);
    // One process with batch 32 sees the same global batches as two ranks
    // with 16 each; the only difference is the order of the additions (the
    // gradient of 32 rows summed in one pass, against two sums of 16 added
    // by the all-reduce), so the params agree to rounding.
    for (s, (a, b)) in steps2.iter().zip(&steps1).enumerate() {
        for (name, va) in a {
            let vb = &b[name];
            let scale = vb.iter().fold(0f64, |m, x| m.max(x.abs()));
            let diff = va
                .iter()
                .zip(vb)
                .fold(0f64, |m, (x, y)| m.max((x - y).abs()));
            assert!(
                diff <= tol * scale,
                "{dtype} step {}: `{name}` differs from one process by {diff:e} (scale {scale:e})",
                s + 1
            );
        }
    }
    // The sharded, padded evaluation reduces sums and counts: the same
    // metrics as one process evaluating the whole split.
    assert_eq!(val2.len(), val1.len());
    for (a, b) in val2.iter().zip(&val1) {
        let num = |l: &str| l.split(' ').nth(2).unwrap().parse::<f64>().unwrap();
        assert!(
            (num(a) - num(b)).abs() <= tol * num(b).abs().max(1.0),
            "{a} vs {b}"
        );
    }
}

#[test]
fn two_ranks_are_bitwise_equal_and_match_one_process_with_the_global_batch_f32() {
    check_against_one_process("f32", 1e-5);
}

#[test]
fn two_ranks_are_bitwise_equal_and_match_one_process_with_the_global_batch_f64() {
    check_against_one_process("f64", 1e-12);
}

/// Epochs of the jobs that a signal must reach while they train.
const LONG_EPOCHS: &str = "12";

fn digits_args<'a>(dir: &'a str, batch: &'a str, command: &'a str) -> Vec<&'a str> {
    digits_args_for(dir, batch, command, "3")
}

/// [`digits_args`] with `epochs` epochs: the signal tests need a job that is
/// still training when the signal lands, well after its first checkpoint.
fn digits_args_for<'a>(
    dir: &'a str,
    batch: &'a str,
    command: &'a str,
    epochs: &'a str,
) -> Vec<&'a str> {
    vec![
        command,
        "--run-dir",
        dir,
        "--set",
        batch,
        "--set",
        "n_train=6000",
        "--set",
        "n_eval=1000",
        "--set",
        "width=64",
        "--max-epochs",
        epochs,
    ]
}

fn accuracy(out: &Output) -> f64 {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("test accuracy: "))
        .unwrap_or_else(|| panic!("no test accuracy in:\n{stdout}"))
        .trim()
        .parse()
        .unwrap()
}

/// Every rank's pid under `mpirun` (its children), by rank.
fn rank_pid(mpirun: &Child, rank: usize) -> Option<u32> {
    let want = format!("OMPI_COMM_WORLD_RANK={rank}");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The parent pid is the 4th field, after the `(comm)` one.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid != Some(mpirun.id()) {
            continue;
        }
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        if environ.split(|&b| b == 0).any(|v| v == want.as_bytes()) {
            return Some(pid);
        }
    }
    None
}

/// Starts a 2-rank digits job of `epochs` epochs, waits for its first
/// checkpoint, and sends `signal` to rank 1. Returns the job's output and
/// the time from the signal to its end. A job of 3 epochs may finish before
/// the signal lands (an epoch takes a fraction of a second), so the tests
/// that need a job still running pass more.
fn signal_rank_one(dir: &Path, signal: &str, epochs: &str) -> (Output, Duration) {
    let d = dir.to_str().unwrap();
    let child = mpirun(
        2,
        digits_bin::example(),
        &digits_args_for(d, "batch=32", "train", epochs),
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let started = Instant::now();
    let has_ckpt = || {
        std::fs::read_dir(dir).is_ok_and(|mut it| {
            it.any(|e| {
                e.is_ok_and(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.starts_with("ckpt-") && n.ends_with(".nckpt")
                })
            })
        })
    };
    while !has_ckpt() {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "no checkpoint appeared"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = rank_pid(&child, 1).expect("rank 1 is a child of mpirun");
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let signalled = Instant::now();
    let out = child.wait_with_output().unwrap();
    (out, signalled.elapsed())
}

fn params_of(dir: &Path) -> (u64, BTreeMap<String, Vec<u8>>) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "nckpt"))
        .collect();
    files.sort();
    let ckpt = files
        .iter()
        .map(|p| nitro_ckpt::load(p).unwrap())
        .max_by_key(|c| c.meta.step)
        .expect("a checkpoint");
    let tensors = ckpt
        .trees
        .iter()
        .flat_map(|(tree, entries)| {
            entries
                .iter()
                .map(move |t| (format!("{tree}/{}", t.path), t.bytes.clone()))
        })
        .collect();
    (ckpt.meta.step, tensors)
}

#[test]
fn the_digits_example_on_two_ranks_reaches_the_one_process_accuracy() {
    if !mpi_ready() {
        return;
    }
    let (two, one) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (d2, d1) = (two.path().to_str().unwrap(), one.path().to_str().unwrap());
    let out2 = checked(
        "digits_mlp on 2 ranks",
        mpirun(
            2,
            digits_bin::example(),
            &digits_args(d2, "batch=32", "train"),
        )
        .output()
        .unwrap(),
    );
    let out1 = checked(
        "digits_mlp alone",
        alone(digits_bin::example(), &digits_args(d1, "batch=64", "train"))
            .output()
            .unwrap(),
    );
    // The job prints one copy of its output: rank 0's report (naming
    // the world) and its final lines; rank 1 prints nothing of its own.
    let stderr = String::from_utf8_lossy(&out2.stderr);
    assert!(
        stderr.contains("world 2 (rank 0, local 0, mpi)"),
        "rank 0's config report shows no world:\n{stderr}"
    );
    assert!(
        !stderr.contains("rank 1, local 1"),
        "rank 1 printed its report:\n{stderr}"
    );
    assert_eq!(stderr.matches("trained to step").count(), 1, "{stderr}");
    let stdout = String::from_utf8_lossy(&out2.stdout);
    assert_eq!(stdout.matches("test accuracy").count(), 1, "{stdout}");
    // A command that runs in one process is refused by name (exit 2), on
    // every rank, before it writes anything.
    let refused = mpirun(2, digits_bin::example(), &["predict", "--run-dir", d2])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{text}");
    assert!(
        text.contains("`predict` runs in one process, and this job has 2"),
        "{text}"
    );
    assert!(!two.path().join("predictions.safetensors").exists());
    // show-config names the world the launcher announced, joining nothing.
    let shown = checked(
        "show-config on 2 ranks",
        mpirun(2, digits_bin::example(), &["show-config"])
            .output()
            .unwrap(),
    );
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("world 2 (rank 1, local 1, launched by Open MPI)"),
        "{shown}"
    );
    let (a2, a1) = (accuracy(&out2), accuracy(&out1));
    assert!(a1 > 0.8, "the one-process run itself did not learn: {a1}");
    assert!((a2 - a1).abs() <= 0.005, "2 ranks {a2} vs 1 process {a1}");
    // Rank 0 alone wrote the run's files: one metrics log, whose rows
    // are the one process's updates (the same number of global batches).
    let rows = |d: &Path| {
        std::fs::read_to_string(d.join("metrics.csv"))
            .unwrap()
            .lines()
            .count()
    };
    assert_eq!(rows(two.path()), rows(one.path()));
    let (s2, _) = params_of(two.path());
    let (s1, _) = params_of(one.path());
    assert_eq!(s2, s1, "2 ranks took another number of updates");
}

#[test]
fn a_killed_rank_ends_the_job_and_a_resumed_job_is_bit_identical() {
    if !mpi_ready() {
        return;
    }
    let whole = tempfile::tempdir().unwrap();
    checked(
        "uninterrupted 2-rank run",
        mpirun(
            2,
            digits_bin::example(),
            &digits_args_for(
                whole.path().to_str().unwrap(),
                "batch=32",
                "train",
                LONG_EPOCHS,
            ),
        )
        .output()
        .unwrap(),
    );
    let cut = tempfile::tempdir().unwrap();
    let (out, took) = signal_rank_one(cut.path(), "-KILL", LONG_EPOCHS);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the job must fail:\n{stderr}");
    assert!(
        took < FAULT_BOUND,
        "took {took:?} after the kill:\n{stderr}"
    );
    assert!(
        stderr.contains("process rank 1") || stderr.contains("lost rank 1"),
        "rank 1 was not named:\n{stderr}"
    );
    // Resuming the whole job reads rank 0's last intact checkpoint on
    // every rank and ends where the uninterrupted run ended, bit for bit.
    let c = cut.path().to_str().unwrap();
    let resumed = checked(
        "2-rank resume",
        mpirun(
            2,
            digits_bin::example(),
            &digits_args_for(c, "batch=32", "resume", LONG_EPOCHS),
        )
        .output()
        .unwrap(),
    );
    assert!(
        String::from_utf8_lossy(&resumed.stderr).contains("resumed from"),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let (step_a, a) = params_of(whole.path());
    let (step_b, b) = params_of(cut.path());
    assert_eq!(step_a, step_b);
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (k, bytes) in &a {
        assert!(bytes == &b[k], "`{k}` differs after kill and resume");
    }
    // A job of another world size is refused, naming both.
    let w = whole.path().to_str().unwrap();
    let refused = alone(digits_bin::example(), &digits_args(w, "batch=64", "resume"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains("written by a job of 2 process(es) and this job has 1"),
        "{stderr}"
    );
}

#[test]
fn a_hung_rank_is_named_by_the_survivor_within_30_s() {
    if !mpi_ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (out, took) = signal_rank_one(dir.path(), "-STOP", LONG_EPOCHS);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the job must fail:\n{stderr}");
    assert!(
        took < FAULT_BOUND,
        "took {took:?} after the hang:\n{stderr}"
    );
    assert!(
        stderr.contains("rank 0:") && stderr.contains("lost rank 1"),
        "rank 0 did not name the hung rank 1:\n{stderr}"
    );
    // No half-written checkpoint: every file in the run directory loads.
    for e in std::fs::read_dir(dir.path()).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "nckpt") {
            nitro_ckpt::load(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        }
    }
}

/// Ctrl-C reaching one rank only (here SIGINT to rank 1) stops the whole
/// job after one agreed update: the ranks or-reduce their requests every 8
/// updates, so the stop is at a multiple of 8, rank 0's checkpoint is of
/// that step, and the job exits non-zero; a 2-rank `resume` then finishes.
#[test]
fn an_interrupt_on_one_rank_stops_every_rank_at_one_agreed_step() {
    if !mpi_ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (out, took) = signal_rank_one(dir.path(), "-INT", LONG_EPOCHS);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "an interrupted job exits non-zero:\n{stderr}"
    );
    assert!(took < Duration::from_secs(30), "took {took:?}:\n{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("nitro: stopped at step "))
        .unwrap_or_else(|| panic!("no stop line:\n{stderr}"));
    let step: u64 = line
        .split("stopped at step ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert_eq!(step % 8, 0, "{line}");
    assert_eq!(
        stderr.matches("nitro: stopped at step").count(),
        1,
        "{stderr}"
    );
    let (saved, _) = params_of(dir.path());
    assert_eq!(saved, step, "the newest checkpoint is of the stop step");
    let d = dir.path().to_str().unwrap();
    checked(
        "resume after the interrupt",
        mpirun(
            2,
            digits_bin::example(),
            &digits_args_for(d, "batch=32", "resume", LONG_EPOCHS),
        )
        .output()
        .unwrap(),
    );
    let (done, _) = params_of(dir.path());
    assert!(done > step, "the resume trained on: {done} vs {step}");
}
