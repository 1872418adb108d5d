//! The checkpoints of one `train()` call: when they are due (the policy's
//! [`Cadence`]), and the writer that saves them.
//!
//! A save is a host snapshot taken in the step loop (the GPU sync point and
//! a copy of every tensor) handed to a writer. The background writer is a
//! thread with a rendezvous queue, so at most one save is in flight: the
//! next snapshot waits for it, and no copies pile up. Each file is written
//! atomically and rotation runs only after its rename, so a kill during a
//! background save leaves the previous checkpoint intact. The time the
//! step loop spends here (snapshot, hand-over, waiting) is what
//! [`crate::TrainReport::checkpoint_time`] reports; [`Checkpoints::finish`]
//! waits for the writer, and so does dropping it on an error path.
//!
//! In a data-parallel job only rank 0 writes (the others hold
//! [`Writer::Off`] and keep the same cadence bookkeeping); every rank's
//! params are bitwise equal, so rank 0's checkpoint is the job's. Before
//! `train()` returns, every rank waits at a barrier until rank 0's writer
//! is done, so no rank reports a run finished whose checkpoint is still
//! being written.
//!
//! Does not own what a checkpoint holds (`ckpt`), nor the metrics log,
//! whose rows the train loop flushes before each save.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nitro_ckpt::{AsyncSaver, Store};

use crate::error::{Result, RunError};
use crate::experiment::{Cadence, Experiment};
use crate::handle::Nitro;

enum Writer {
    /// Checkpoints are off.
    Off,
    /// Saves in the step loop.
    Inline(Store),
    /// Saves on the writer thread.
    Background(AsyncSaver),
}

/// The checkpoint writer of a training call.
pub(crate) struct Checkpoints {
    writer: Writer,
    cadence: Cadence,
    /// The step of the last save handed over.
    last: Option<u64>,
    /// Time the step loop was blocked on checkpoints.
    blocked: Duration,
}

impl Checkpoints {
    /// The writer for `n`'s policy (opening its store: stale temporaries
    /// are removed and a damaged manifest rebuilt there).
    pub fn open<E: Experiment>(n: &Nitro<E>) -> Result<Checkpoints> {
        let policy = &n.frozen.run.checkpointer;
        let writer = match policy.every {
            Cadence::Off => Writer::Off,
            _ if !n.dist.is_root() => Writer::Off,
            _ if policy.background => Writer::Background(AsyncSaver::new(n.open_store()?, 0)?),
            _ => Writer::Inline(n.open_store()?),
        };
        Ok(Checkpoints {
            writer,
            cadence: policy.every,
            last: None,
            blocked: Duration::ZERO,
        })
    }

    /// Whether a save is due after update `step` (1-based).
    pub fn due_after_step(&self, step: u64) -> bool {
        matches!(self.cadence, Cadence::Steps(n) if n > 0 && step % n == 0)
    }

    /// Whether a save is due once `epochs` epochs are complete.
    pub fn due_after_epoch(&self, epochs: u64) -> bool {
        matches!(self.cadence, Cadence::Epochs(n) if n > 0 && epochs % n == 0)
    }

    /// Whether the position at `step` still needs saving before the run
    /// ends.
    pub fn unsaved(&self, step: u64) -> bool {
        step > 0 && self.last != Some(step)
    }

    /// Saves `n`'s current position, filed with `metrics`; returns the file
    /// it goes to (`None` when checkpoints are off). In the background the
    /// file appears once the writer is done with it.
    pub fn save<E: Experiment>(
        &mut self,
        n: &mut Nitro<E>,
        metrics: &BTreeMap<String, f64>,
    ) -> Result<Option<PathBuf>> {
        let t0 = Instant::now();
        let step = n.progress.position.step;
        let path = match &mut self.writer {
            Writer::Off => None,
            Writer::Inline(store) => Some(n.save_checkpoint(store, metrics)?),
            Writer::Background(saver) => {
                let (ckpt, metrics) = n.snapshot(metrics)?;
                saver.submit(step, ckpt, metrics)?;
                tracing::info!(target: "nitro::ckpt", step, "checkpoint handed to the writer");
                Some(saver.path_for(step))
            }
        };
        self.last = Some(step);
        self.blocked += t0.elapsed();
        Ok(path)
    }

    /// Waits for the writer; returns the time the run was blocked on
    /// checkpoints, or the first failed save.
    pub fn finish(self) -> Result<Duration> {
        let t0 = Instant::now();
        if let Writer::Background(saver) = self.writer {
            saver.finish().map_err(RunError::from)?;
        }
        Ok(self.blocked + t0.elapsed())
    }
}
