//! A training child killed by SIGKILL: the test binary re-executes itself
//! as a child (an environment switch, `env_key = dir`, picks the child's
//! entry point), the parent waits for the child's first checkpoint in
//! `dir`, lets it run on a little so the kill lands mid-step, and kills it;
//! then the killed run is resumed next to an uninterrupted one.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nitro_run::{Experiment, Nitro};

/// The checkpoint files in `dir`, oldest first.
fn checkpoints(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|f| f.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with("ckpt-") && n.ends_with(".nckpt"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Runs this binary's test `entry` with `env_key` set to `dir`, and
/// SIGKILLs it once it has written a checkpoint there and trained on for
/// 15 ms. Panics if the child writes none within 60 s, exits on its own,
/// or dies of anything but the kill.
pub fn kill_after_first_checkpoint(entry: &str, env_key: &str, dir: &Path) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", entry, "--test-threads=1"])
        .env(env_key, dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while checkpoints(dir).is_empty() {
        let exited = child.try_wait().unwrap();
        if exited.is_some() || Instant::now() > deadline {
            let _ = child.kill();
            panic!("the child wrote no checkpoint (exit: {exited:?})");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // Let it run on a little, so the kill lands mid-step, mid-epoch.
    std::thread::sleep(Duration::from_millis(15));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the child must still be training"
    );
    child.kill().unwrap(); // SIGKILL on Unix
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "killed by SIGKILL: {status:?}");
}

/// Resumes the killed run in `dir` from its newest checkpoint (at a
/// multiple of `every` updates, past step 0), trains it `further` updates
/// on, and trains `make(reference)` uninterrupted to the same step:
/// (resumed, uninterrupted), for the caller to compare bit for bit.
pub fn resume_beside_uninterrupted<E: Experiment>(
    make: impl Fn(&Path) -> E,
    dir: &Path,
    reference: &Path,
    every: u64,
    further: u64,
) -> (Nitro<E>, Nitro<E>) {
    let mut resumed = Nitro::new(make(dir)).unwrap();
    let from = resumed
        .resume()
        .unwrap()
        .expect("a checkpoint to resume from");
    let step = resumed.step();
    assert!(
        step > 0 && step % every == 0,
        "resumed at step {step} from {}",
        from.display()
    );
    let target = step + further;
    resumed.stop_after(target);
    assert!(resumed.train().unwrap().interrupted);

    let mut full = Nitro::new(make(reference)).unwrap();
    full.stop_after(target);
    full.train().unwrap();
    assert_eq!(full.step(), target);
    (resumed, full)
}
