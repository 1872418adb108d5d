//! The run directory never lies, under random SIGKILLs: this test binary
//! re-executes itself as a child that does what the CLI's `train` (first
//! start, empty directory) and `resume` (every later start) do, with
//! background checkpoints every 3 updates, a schedule, validation each
//! epoch and a metric; the parent kills it at random moments, at least 30
//! times, until one start runs to the end. Then `metrics.csv` holds
//! exactly the bytes an uninterrupted run writes, `metrics.jsonl` the same
//! rows (`samples_per_s`, a timing, aside), no temporary file is left, and
//! every parameter is bit-identical.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{bits, tiny, Tiny};
use nitro_run::{Cadence, Nitro, Optimizer, Schedule};

const CHILD_DIR: &str = "NITRO_KILL_LOGS_CHILD_DIR";

/// 40 samples at width 4: 10 updates per epoch, 12 epochs; a checkpoint
/// every 3 updates (so most land mid-epoch), the newest two kept.
fn experiment(dir: &Path) -> Tiny {
    let mut e = tiny(dir);
    e.epochs = 12;
    e.knobs.optimizer = Some(Optimizer::adam(0.01));
    e.knobs.schedule = vec![("lr".into(), Schedule::one_cycle(0.02))];
    e.knobs.val = 12;
    e.knobs.every = Some(Cadence::Steps(3));
    e.knobs.keep_last = Some(2);
    e
}

/// What `train` / `resume` do: continue from the newest checkpoint (none
/// on the first start) and train to the end.
fn train_or_resume(dir: &Path) -> Nitro<Tiny> {
    let mut n = Nitro::new(experiment(dir)).unwrap();
    n.resume().unwrap();
    let report = n.train().unwrap();
    assert!(!report.interrupted);
    n
}

/// The child's entry point; a no-op unless the parent set `CHILD_DIR`.
#[test]
fn child_trains_or_resumes() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    nitro_run::set_config_report(false);
    train_or_resume(Path::new(&dir));
}

/// The JSONL rows without their timing.
fn rows_without_timing(dir: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    text.lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            v.as_object_mut().unwrap().remove("samples_per_s");
            v
        })
        .collect()
}

fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|f| f.ok()?.file_name().into_string().ok())
        .filter(|n| n.contains(".tmp-"))
        .collect()
}

/// A fixed xorshift: reproducible kill points without a rand dependency.
struct Xorshift(u64);

impl Xorshift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

#[test]
fn thirty_random_sigkills_leave_the_logs_of_an_uninterrupted_run() {
    nitro_run::set_config_report(false);
    let reference = tempfile::tempdir().unwrap();
    let spawn = |dir: &Path| {
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_trains_or_resumes", "--test-threads=1"])
            .env(CHILD_DIR, dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    // The uninterrupted run, in a child too, so it is timed as one start.
    let t0 = Instant::now();
    assert!(spawn(reference.path()).wait().unwrap().success());
    let full = t0.elapsed();
    // The kill window: the length of the last whole first start (later
    // ones are faster once the compile cache is warm).
    let mut full_ms = full.as_millis().max(20) as u64;
    let expected_csv = std::fs::read_to_string(reference.path().join("metrics.csv")).unwrap();
    let expected_rows = rows_without_timing(reference.path());
    assert_eq!(
        expected_rows.len(),
        12 * 10 + 12,
        "a step row per update, an epoch row per epoch"
    );
    let expected_bits = bits(&train_or_resume(reference.path()));

    let mut rng = Xorshift(0x9e37_79b9_7f4a_7c15);
    let (mut kills, mut kills_in_train, mut rounds) = (0, 0usize, 0);
    let deadline = Instant::now() + Duration::from_secs(240);
    while kills < 30 || kills_in_train == 0 || kills_in_train == kills {
        assert!(Instant::now() < deadline, "only {kills} kills in time");
        rounds += 1;
        let dir = tempfile::tempdir().unwrap();
        let mut starts = 0;
        loop {
            starts += 1;
            let started = Instant::now();
            let mut child = spawn(dir.path());
            // Anywhere from process start to the end of a whole run.
            let delay = Duration::from_millis(rng.below(full_ms));
            let end = Instant::now() + delay;
            let finished = loop {
                if let Some(status) = child.try_wait().unwrap() {
                    break Some(status);
                }
                if Instant::now() >= end {
                    break None;
                }
                std::thread::sleep(Duration::from_millis(1));
            };
            match finished {
                Some(status) => {
                    assert!(status.success(), "start {starts}: {status:?}");
                    if starts == 1 {
                        full_ms = started.elapsed().as_millis().max(20) as u64;
                    }
                    break;
                }
                None => {
                    child.kill().unwrap(); // SIGKILL
                    let status = child.wait().unwrap();
                    if status.signal() == Some(9) {
                        kills += 1;
                        kills_in_train += usize::from(starts == 1);
                    } else {
                        assert!(status.success(), "start {starts}: {status:?}");
                        break;
                    }
                }
            }
            assert!(starts < 200, "no start ran to the end");
        }
        let csv = std::fs::read_to_string(dir.path().join("metrics.csv")).unwrap();
        if csv != expected_csv {
            let (got, want): (Vec<&str>, Vec<&str>) =
                (csv.lines().collect(), expected_csv.lines().collect());
            let at = (0..got.len().max(want.len()))
                .find(|&i| got.get(i) != want.get(i))
                .unwrap_or(0);
            panic!(
                "round {rounds}: metrics.csv has {} lines, the uninterrupted run {}; first difference at line {}:\n  got  {:?}\n  want {:?}",
                got.len(),
                want.len(),
                at + 1,
                got.get(at),
                want.get(at)
            );
        }
        assert_eq!(
            rows_without_timing(dir.path()),
            expected_rows,
            "round {rounds}: metrics.jsonl"
        );
        assert_eq!(
            temporaries(dir.path()),
            Vec::<String>::new(),
            "round {rounds}"
        );
        let n = train_or_resume(dir.path());
        assert_eq!(bits(&n), expected_bits, "round {rounds}: params");
    }
    eprintln!(
        "{kills} kills ({kills_in_train} during a first start, the others during a resume) in {rounds} rounds; the first whole run took {full:?}"
    );
}
