//! Where a run is: the position (updates done, epoch, next batch), the
//! per-epoch metric history, the running totals of the current epoch, the
//! early stopper and a scripted stop. Position, history and totals are
//! saved in every checkpoint and restored by resume; the stopper is not
//! saved but replayed over the restored history (a stopper is a function of
//! the metrics it has seen), so a resumed run stops when an uninterrupted
//! one would.

use std::collections::BTreeMap;

use crate::metric::Totals;
use crate::stop::Stopper;

/// Where a run is: updates done, and the next batch to take.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Position {
    /// Updates done.
    pub step: u64,
    /// Current epoch (0-based).
    pub epoch: u64,
    /// Next batch position within the epoch.
    pub batch: usize,
}

/// The run's progress.
pub(crate) struct RunState {
    pub position: Position,
    /// Metrics recorded per epoch: `(epoch, {name: value})`.
    pub history: Vec<(u64, BTreeMap<String, f64>)>,
    /// The current epoch's running sums (train loss and train metrics),
    /// so an epoch interrupted and resumed reports the means of all its
    /// steps, as an uninterrupted one does.
    pub epoch_totals: Totals,
    pub stopper: Option<Box<dyn Stopper>>,
    /// The stopper asked to stop after the last recorded epoch: the run is
    /// finished, and resuming it trains nothing.
    pub stopped_early: bool,
    /// Stop (checkpoint, return) once this many updates are done.
    pub stop_after: Option<u64>,
}

impl RunState {
    /// A run at its start.
    pub fn new(stopper: Option<Box<dyn Stopper>>) -> RunState {
        RunState {
            position: Position::default(),
            history: vec![],
            epoch_totals: Totals::default(),
            stopper,
            stopped_early: false,
            stop_after: None,
        }
    }

    /// Installs `fresh` (the experiment's stopper, in its initial state)
    /// and feeds it the recorded history, epoch by epoch, as the original
    /// run did.
    pub fn replay_stopper(&mut self, fresh: Option<Box<dyn Stopper>>) {
        self.stopper = fresh;
        self.stopped_early = false;
        if let Some(s) = self.stopper.as_mut() {
            for (epoch, metrics) in &self.history {
                self.stopped_early = s.should_stop(*epoch, metrics);
            }
        }
    }
}
