//! Multi-rank tests: the `collective_ranks` binary (src/bin) launched by
//! `mpirun -n 2` and `-n 3` (feature `mpi`). Each skips with one line when
//! the feature is off or `mpirun` is absent.
//!
//! What they pin: every rank holds bitwise the same all-reduce result, and
//! that result is the sequential rank-order sum computed here; broadcast
//! delivers the root's bytes; a rank that hangs or exits makes the others
//! fail within 30 s with an error naming it.

mod support {
    pub mod rank_data;
}

use std::process::{Command, Output};
use std::time::{Duration, Instant};
use support::rank_data::{rank_value, BIG, LEN};

/// The bound the issue sets from a rank's loss to the others' exit.
const FAULT_BOUND: Duration = Duration::from_secs(30);

fn example() -> Option<std::path::PathBuf> {
    if !cfg!(feature = "mpi") {
        println!("skipped: built without --features mpi");
        return None;
    }
    if Command::new("mpirun").arg("--version").output().is_err() {
        println!("skipped: mpirun not found (install openmpi-bin libopenmpi-dev)");
        return None;
    }
    // Cargo builds the crate's binaries for its integration tests.
    let path = option_env!("CARGO_BIN_EXE_collective_ranks")?;
    Some(path.into())
}

fn mpirun(n: usize, extra: &[&str], args: &[&str]) -> (Output, Duration) {
    let exe = example().expect("checked by the caller");
    let start = Instant::now();
    let out = Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            &n.to_string(),
        ])
        .args(["-x", "NITRO_COLLECTIVE_TIMEOUT_S"])
        .args(extra)
        .arg(exe)
        .args(args)
        .env("NITRO_COLLECTIVE_TIMEOUT_S", "3")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .expect("mpirun starts");
    (out, start.elapsed())
}

fn hex_f32(v: &[f32]) -> String {
    v.iter().map(|x| format!("{:x},", x.to_bits())).collect()
}

fn hex_f64(v: &[f64]) -> String {
    v.iter().map(|x| format!("{:x},", x.to_bits())).collect()
}

/// The sum checks of `n` ranks, through the shared window (`shm`, the
/// default on one machine) or through messages (`NITRO_COLLECTIVE_SHM=0`,
/// the path of ranks on several machines).
fn check_sum(n: usize, shm: bool) {
    if example().is_none() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("nitro-ranks-{}-{n}-{shm}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = if shm { "1" } else { "0" };
    let (out, _) = mpirun(
        n,
        &["-x", &format!("NITRO_COLLECTIVE_SHM={path}")],
        &["sum", dir.to_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "mpirun -n {n} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The reference: each element summed over ranks 0, 1, ... in order,
    // starting from rank 0's value, in the element type itself.
    let f32_sum: Vec<f32> = (0..LEN)
        .map(|i| {
            let mut s = rank_value(0, i) as f32;
            for r in 1..n {
                s += rank_value(r, i) as f32;
            }
            s
        })
        .collect();
    let f64_sum: Vec<f64> = (0..LEN)
        .map(|i| (1..n).fold(rank_value(0, i), |s, r| s + rank_value(r, i)))
        .collect();
    let i64_sum: String = (0..LEN)
        .map(|i| format!("{:x},", (0..n).map(|r| (i * 1000 + r) as i64).sum::<i64>()))
        .collect();
    let bcast = hex_f64(&[(n - 1) as f64; 5]);
    let fold = |x: &dyn Fn(usize, usize) -> f64| -> Vec<f64> {
        (0..BIG)
            .map(|i| (1..n).fold(x(0, i), |s, r| s + x(r, i)))
            .collect()
    };
    let big = hex_f64(&fold(&rank_value));
    let big2 = hex_f64(&fold(&|r, i| -rank_value(r, BIG - 1 - i)));
    // With three or more ranks the order matters for these inputs (two
    // addends commute exactly): a reversed sum differs somewhere, so
    // agreement below is evidence of the order, not luck.
    let reversed: Vec<f64> = (0..LEN)
        .map(|i| {
            (0..n - 1)
                .rev()
                .fold(rank_value(n - 1, i), |s, r| s + rank_value(r, i))
        })
        .collect();
    if n >= 3 {
        assert_ne!(hex_f64(&reversed), hex_f64(&f64_sum), "inputs too tame");
    }
    for r in 0..n {
        let report = std::fs::read_to_string(dir.join(format!("rank{r}.txt")))
            .unwrap_or_else(|e| panic!("rank {r} of {n} wrote no report: {e}"));
        for (kind, want) in [
            ("f32", hex_f32(&f32_sum)),
            ("f64", hex_f64(&f64_sum)),
            ("i64", i64_sum.clone()),
            ("bcast", bcast.clone()),
            ("big", big.clone()),
            ("big2", big2.clone()),
            ("staged", big.clone()),
        ] {
            let line = format!("{kind} {want}");
            assert!(
                report.lines().any(|l| l == line),
                "rank {r} of {n}: {kind} differs from the sequential sum (or missing)"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn two_ranks_sum_bitwise_in_rank_order() {
    check_sum(2, true);
    check_sum(2, false);
}

#[test]
fn three_ranks_sum_bitwise_in_rank_order() {
    check_sum(3, true);
    check_sum(3, false);
}

#[test]
fn a_rank_hung_after_the_group_formed_is_named_within_30_s() {
    if example().is_none() {
        return;
    }
    // The shared window exists when rank 1 goes quiet: the survivors name
    // it from the counts each rank publishes there.
    let (out, took) = mpirun(3, &[], &["hang_later", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the job must fail:\n{stderr}");
    assert!(took < FAULT_BOUND, "took {took:?}:\n{stderr}");
    for survivor in [0, 2] {
        assert!(
            stderr.contains(&format!("rank {survivor}: all_reduce_sum timed out"))
                && stderr.contains("lost rank 1"),
            "rank {survivor} did not name the hung rank 1:\n{stderr}"
        );
    }
}

#[test]
fn a_hung_rank_is_named_by_the_others_within_30_s() {
    if example().is_none() {
        return;
    }
    let (out, took) = mpirun(3, &[], &["hang", "2"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the job must fail:\n{stderr}");
    assert!(took < FAULT_BOUND, "took {took:?}:\n{stderr}");
    assert!(
        stderr.contains("timed out after") && stderr.contains("lost rank 2"),
        "no rank named the hung rank 2:\n{stderr}"
    );
}

#[test]
fn a_dead_rank_ends_the_job_within_30_s_and_is_named() {
    if example().is_none() {
        return;
    }
    // Open MPI's default: mpirun ends the job when a rank exits non-zero,
    // naming it ([[job,1],1]).
    let (out, took) = mpirun(2, &[], &["exit", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the job must fail:\n{stderr}");
    assert!(took < FAULT_BOUND, "took {took:?}:\n{stderr}");
    assert!(
        stderr.contains(",1]"),
        "mpirun did not name rank 1:\n{stderr}"
    );
    // With that policy off, the survivors themselves must notice and name
    // the dead rank (each prints "error:" and exits 3 right after).
    let (out, took) = mpirun(
        3,
        &["--mca", "orte_abort_on_non_zero_status", "0"],
        &["exit", "1"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(took < FAULT_BOUND, "took {took:?}:\n{stderr}");
    for survivor in [0, 2] {
        assert!(
            stderr.contains(&format!("rank {survivor}: all_reduce_sum timed out"))
                && stderr.contains("lost rank 1"),
            "rank {survivor} did not name the dead rank 1:\n{stderr}"
        );
    }
}
