//! Kill-and-resume bit identity with a real process (`common::kill`): the
//! child trains with a checkpoint every 3 updates, the parent SIGKILLs it
//! mid-run once a checkpoint exists, resumes from the newest checkpoint and
//! compares every parameter bit for bit with an uninterrupted run to the
//! same step.

mod common;

use std::path::Path;

use common::kill::{kill_after_first_checkpoint, resume_beside_uninterrupted};
use common::{bits, tiny, Tiny};
use nitro_run::{Nitro, Optimizer};

const CHILD_DIR: &str = "NITRO_KILL_RESUME_CHILD_DIR";

/// 40 samples at width 4: 10 updates per epoch; a checkpoint every 3
/// updates (never at an epoch end on its own), and far more epochs than the
/// child lives for.
fn experiment(dir: &Path) -> Tiny {
    let mut e = tiny(dir);
    e.epochs = 1000;
    e.knobs.optimizer = Some(Optimizer::adam(0.01));
    e.knobs.every = Some(nitro_run::Cadence::Steps(3));
    e.knobs.keep_last = Some(2);
    e
}

/// The child's entry point; a no-op unless the parent set `CHILD_DIR`.
#[test]
fn child_trains_until_killed() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    nitro_run::set_config_report(false);
    let mut n = Nitro::new(experiment(Path::new(&dir))).unwrap();
    n.train().unwrap();
}

#[test]
fn a_sigkilled_run_resumes_bit_identical() {
    nitro_run::set_config_report(false);
    let (dir, reference) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    kill_after_first_checkpoint("child_trains_until_killed", CHILD_DIR, dir.path());

    // 7 updates on: the comparison ends mid-epoch too.
    let (resumed, full) =
        resume_beside_uninterrupted(experiment, dir.path(), reference.path(), 3, 7);
    assert_eq!(bits(&resumed), bits(&full), "every parameter bit for bit");
}
