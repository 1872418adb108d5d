//! Early stopping: a host-side decision after each validation, on a stopper
//! object the experiment returns once per run.

use std::collections::BTreeMap;

/// Decides after each epoch's validation whether training should stop.
pub trait Stopper: Send {
    /// The metric it watches; checked against the run's metric names at
    /// setup, so a typo is an error before any training.
    fn monitored(&self) -> &str;
    /// Called once per epoch with that epoch's metrics (train `loss`,
    /// `val_loss`, `val_<metric>`, ...); `true` stops training.
    fn should_stop(&mut self, epoch: u64, metrics: &BTreeMap<String, f64>) -> bool;
}

/// Stops when `metric` has not improved by more than `min_delta` for
/// `patience` epochs in a row.
#[derive(Debug, Clone)]
pub struct Patience {
    /// Watched metric.
    pub metric: String,
    /// Epochs without improvement tolerated.
    pub patience: u64,
    /// Smallest change counted as an improvement.
    pub min_delta: f64,
    /// Whether larger is better (accuracy) rather than smaller (loss).
    pub maximize: bool,
    best: Option<f64>,
    bad_epochs: u64,
}

impl Patience {
    /// A stopper minimising `metric` (a loss).
    pub fn min(metric: &str, patience: u64) -> Patience {
        Patience {
            metric: metric.into(),
            patience,
            min_delta: 0.0,
            maximize: false,
            best: None,
            bad_epochs: 0,
        }
    }

    /// A stopper maximising `metric` (an accuracy).
    pub fn max(metric: &str, patience: u64) -> Patience {
        Patience {
            maximize: true,
            ..Patience::min(metric, patience)
        }
    }

    /// The same stopper with a minimum improvement.
    pub fn with_min_delta(mut self, min_delta: f64) -> Patience {
        self.min_delta = min_delta;
        self
    }
}

impl Stopper for Patience {
    fn monitored(&self) -> &str {
        &self.metric
    }

    fn should_stop(&mut self, _epoch: u64, metrics: &BTreeMap<String, f64>) -> bool {
        let Some(&value) = metrics.get(&self.metric) else {
            return false;
        };
        let improved = match self.best {
            None => true,
            Some(best) if self.maximize => value > best + self.min_delta,
            Some(best) => value < best - self.min_delta,
        };
        if improved {
            self.best = Some(value);
            self.bad_epochs = 0;
        } else {
            self.bad_epochs += 1;
        }
        self.bad_epochs >= self.patience
    }
}
