//! Crash and full-disk behaviour, in child processes: this test binary
//! re-executes itself with an environment variable naming the role, so the
//! SIGKILLs and the file-size limit never touch the test runner itself.

#![cfg(unix)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nitro_ckpt::{BestBy, Goal, Store, StoreConfig};

const SAVER_DIR: &str = "NITRO_CKPT_TEST_SAVER_DIR";
const FULL_DIR: &str = "NITRO_CKPT_TEST_FULL_DIR";
/// 1 MiB of f32: large enough that a kill often lands inside a write.
const FLOATS: usize = 256 * 1024;

fn config() -> StoreConfig {
    StoreConfig {
        keep_last: 2,
        best: Some(BestBy {
            metric: "loss".into(),
            goal: Goal::Min,
            keep: 1,
        }),
        known_metrics: vec!["loss".into()],
    }
}

fn loss(step: u64) -> BTreeMap<String, f64> {
    BTreeMap::from([("loss".to_string(), ((step * 7919) % 101) as f64)])
}

fn child(role: &str, dir: &Path, test: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--test-threads=1", "--nocapture"])
        .env(role, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Child role: save checkpoints with consecutive steps until killed.
#[test]
fn child_saves_forever() {
    let Some(dir) = std::env::var_os(SAVER_DIR) else {
        return;
    };
    let mut store = Store::open(dir, config()).unwrap();
    let mut step = store.latest().unwrap().map_or(0, |c| c.step + 1);
    loop {
        store
            .save(step, &common::sample(step, FLOATS), &loss(step))
            .unwrap();
        step += 1;
    }
}

#[test]
fn sigkill_during_saves_never_leaves_a_partial_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    // A fixed xorshift: reproducible kill points without a rand dependency.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let start = Instant::now();
    let (mut kills, mut interrupted_writes, mut last_step) = (0, 0, None);
    while kills < 40 && start.elapsed() < Duration::from_secs(12) {
        let mut proc = child(SAVER_DIR, dir.path(), "child_saves_forever")
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(30 + next() % 150));
        proc.kill().unwrap(); // SIGKILL
        proc.wait().unwrap();
        kills += 1;

        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        if names.iter().any(|n| n.contains(".tmp-")) {
            interrupted_writes += 1;
        }
        let store = Store::open(dir.path(), config()).unwrap();
        let listed = store.list().unwrap();
        // Every file under a final name is complete and exactly what was saved.
        for c in &listed {
            let loaded = common::load_stored(&c.path)
                .unwrap_or_else(|e| panic!("partial checkpoint taken: {e}"));
            assert_eq!(loaded, common::sample(c.step, FLOATS), "step {}", c.step);
        }
        // Rotation bounds the directory: last 2 and best 1. A kill between
        // a save's rename and its rotation leaves one more, which the next
        // open adopts and rotates away, however many kills land there in a
        // row.
        assert!(listed.len() <= 3, "{names:?}");
        if let Some((stored, _)) = store.load_latest().unwrap() {
            assert!(Some(stored.step) >= last_step, "progress went backwards");
            last_step = Some(stored.step);
        }
        store.remove_stale_temps().unwrap();
    }
    eprintln!("{kills} kills, {interrupted_writes} inside a write, reached step {last_step:?}");
    assert!(kills >= 10, "only {kills} kills in the time budget");
    assert!(
        last_step.is_some(),
        "no checkpoint completed in {kills} runs"
    );
    assert!(interrupted_writes > 0, "no kill landed inside a save");
}

/// Child role: with a 1 MiB file-size limit (a full disk in miniature),
/// saving a 4 MiB checkpoint must fail with an error, not a signal.
#[test]
fn child_saves_into_full_disk() {
    let Some(dir) = std::env::var_os(FULL_DIR) else {
        return;
    };
    // SAFETY: plain libc calls with valid arguments; this process is a
    // dedicated child with one test thread.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let limit = libc::rlimit {
            rlim_cur: 1 << 20,
            rlim_max: 1 << 20,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
    }
    let mut store = Store::open(dir, config()).unwrap();
    match store.save(2, &common::sample(2, 1 << 20), &loss(2)) {
        Ok(path) => panic!("save into a full disk succeeded: {}", path.display()),
        Err(e) => println!("SAVE-ERROR: {e}"),
    }
}

#[test]
fn full_disk_keeps_the_previous_checkpoint_and_reports_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), config()).unwrap();
    let first = store.save(1, &common::sample(1, 1000), &loss(1)).unwrap();
    let before = std::fs::read(&first).unwrap();

    let out = child(FULL_DIR, dir.path(), "child_saves_into_full_disk")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.contains("SAVE-ERROR"))
        .expect("child reported");
    assert!(
        line.contains("write") && line.contains("ckpt-000000000002"),
        "{line}"
    );

    let store = Store::open(dir.path(), config()).unwrap();
    let steps: Vec<u64> = store.list().unwrap().iter().map(|c| c.step).collect();
    assert_eq!(steps, vec![1]);
    assert_eq!(std::fs::read(&first).unwrap(), before);
    assert_eq!(
        common::load_stored(&first).unwrap(),
        common::sample(1, 1000)
    );
    // The failed save removed its temporary file.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains(".tmp-")
        })
        .collect();
    assert!(leftovers.is_empty());
}
