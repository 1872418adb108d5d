//! The checks on the run values the framework owns (batch, accum, the
//! optimizer's hyperparameters, clip, the checkpoint policy, the run
//! directory), made once at construction so a bad value fails before any
//! data is touched, naming the accessor, the value and what is valid.
//! `max_epochs` = 0 is refused by `train()` only: a handle built to
//! evaluate or export needs no epochs. The experiment's own fields are
//! checked against their declared ranges (`#[experiment(range = ..)]`) by
//! nitro-markers.

use std::path::Path;

use crate::error::{Result, RunError};
use crate::experiment::{Cadence, Checkpointer};
use crate::optim::Optimizer;

fn refuse(setting: &'static str, reason: String) -> RunError {
    RunError::Setting { setting, reason }
}

/// `v` is finite and > 0.
fn positive(setting: &'static str, v: f64, fix: &str) -> Result<()> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(refuse(
            setting,
            format!("is {v}, but must be finite and greater than 0; {fix}"),
        ))
    }
}

/// `v` is in `[0, 1)`.
fn unit(setting: &'static str, v: f64) -> Result<()> {
    if (0.0..1.0).contains(&v) {
        Ok(())
    } else {
        Err(refuse(setting, format!("is {v}, but must be in [0, 1)")))
    }
}

/// Checks every framework-owned run value (what `RunValues` resolves;
/// taken apart so this file needs nothing of `report`).
pub(crate) fn run_values(
    optimizer: &Optimizer,
    clip: Option<f64>,
    policy: &Checkpointer,
    run_dir: &Path,
) -> Result<()> {
    match *optimizer {
        Optimizer::Sgd { lr, momentum, .. } => {
            positive("optimizer (lr)", lr, "a typical value is 1e-3 to 1e-1")?;
            unit("optimizer (momentum)", momentum)?;
        }
        Optimizer::Adam {
            lr,
            beta1,
            beta2,
            eps,
            weight_decay,
        } => {
            positive("optimizer (lr)", lr, "a typical value is 1e-4 to 1e-2")?;
            unit("optimizer (beta1)", beta1)?;
            unit("optimizer (beta2)", beta2)?;
            positive("optimizer (eps)", eps, "a typical value is 1e-8")?;
            if !(weight_decay.is_finite() && weight_decay >= 0.0) {
                return Err(refuse(
                    "optimizer (weight_decay)",
                    format!("is {weight_decay}, but must be finite and at least 0"),
                ));
            }
        }
    }
    if let Some(clip) = clip {
        positive(
            "clip",
            clip,
            "return None from `clip()` to turn clipping off",
        )?;
    }
    if let Cadence::Steps(0) | Cadence::Epochs(0) = policy.every {
        return Err(refuse(
            "checkpointer (every)",
            format!(
                "{:?} saves never; use a count of 1 or more, or `Cadence::Off`",
                policy.every
            ),
        ));
    }
    if policy.keep_last == 0 {
        return Err(refuse(
            "checkpointer (keep_last)",
            "is 0, but the latest checkpoint must survive: keep at least 1".into(),
        ));
    }
    if let Some((metric, 0, _)) = &policy.best {
        return Err(refuse(
            "checkpointer (best)",
            format!("keeps 0 checkpoints by `{metric}`; keep 1 or more, or set `best` to None"),
        ));
    }
    if run_dir.exists() && !run_dir.is_dir() {
        return Err(refuse(
            "run_dir",
            format!(
                "`{}` is a file, not a directory; name a directory (it is created when missing)",
                run_dir.display()
            ),
        ));
    }
    Ok(())
}
