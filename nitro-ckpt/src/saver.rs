//! Saving on a background thread, so training continues while the file is
//! written. The caller hands over an owned [`Checkpoint`] (its host copy of
//! the tensors); a bounded queue makes `submit` wait when saves fall behind
//! rather than piling up copies in memory.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::{Checkpoint, Error, Result, Store};

struct Job {
    step: u64,
    ckpt: Checkpoint,
    metrics: BTreeMap<String, f64>,
}

#[derive(Default)]
struct Outcome {
    saved: Vec<PathBuf>,
    failure: Option<Error>,
}

/// A [`Store`] driven by a background thread. The first failed save stops
/// the thread; later `submit`s then fail and [`AsyncSaver::finish`] returns
/// that error.
pub struct AsyncSaver {
    dir: PathBuf,
    jobs: Option<SyncSender<Job>>,
    worker: Option<JoinHandle<Store>>,
    outcome: Arc<Mutex<Outcome>>,
}

impl std::fmt::Debug for AsyncSaver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncSaver").finish_non_exhaustive()
    }
}

impl AsyncSaver {
    /// Starts the background thread. At most `queue` checkpoints wait
    /// besides the one being written (0 means `submit` waits for the
    /// thread to take each one).
    pub fn new(mut store: Store, queue: usize) -> Result<Self> {
        let dir = store.dir().to_path_buf();
        let (tx, rx) = sync_channel::<Job>(queue);
        let outcome = Arc::new(Mutex::new(Outcome::default()));
        let shared = Arc::clone(&outcome);
        let worker = std::thread::Builder::new()
            .name("nitro-ckpt-saver".into())
            .spawn(move || {
                for job in rx {
                    let result = store.save(job.step, &job.ckpt, &job.metrics);
                    let mut out = shared.lock().unwrap_or_else(|p| p.into_inner());
                    match result {
                        Ok(path) => out.saved.push(path),
                        Err(e) => {
                            tracing::error!(error = %e, "background checkpoint save failed");
                            out.failure = Some(e);
                            break;
                        }
                    }
                }
                store
            })
            .map_err(|e| Error::io("<saver thread>", "spawn", e))?;
        Ok(AsyncSaver {
            dir,
            jobs: Some(tx),
            worker: Some(worker),
            outcome,
        })
    }

    /// Queues a save; waits while the queue is full. Fails when an earlier
    /// save failed (the message names it).
    pub fn submit(
        &self,
        step: u64,
        ckpt: Checkpoint,
        metrics: BTreeMap<String, f64>,
    ) -> Result<()> {
        if let Some(e) = &self.lock().failure {
            return Err(Error::SaverStopped(e.to_string()));
        }
        let jobs = self.jobs.as_ref().expect("present until finish");
        jobs.send(Job {
            step,
            ckpt,
            metrics,
        })
        .map_err(|_| {
            let why = self.lock().failure.as_ref().map(ToString::to_string);
            Error::SaverStopped(why.unwrap_or_else(|| "the saver thread exited".into()))
        })
    }

    /// The file the checkpoint of `step` is (or will be) written to.
    pub fn path_for(&self, step: u64) -> PathBuf {
        crate::store::path_for(&self.dir, step)
    }

    /// Paths written so far.
    pub fn saved(&self) -> Vec<PathBuf> {
        self.lock().saved.clone()
    }

    /// Waits for every queued save and returns the store and the paths
    /// written, or the first error.
    pub fn finish(mut self) -> Result<(Store, Vec<PathBuf>)> {
        drop(self.jobs.take());
        let worker = self.worker.take().expect("present until finish");
        let store = worker
            .join()
            .map_err(|_| Error::SaverStopped("the saver thread panicked".into()))?;
        let mut out = self.lock();
        match out.failure.take() {
            Some(e) => Err(e),
            None => Ok((store, std::mem::take(&mut out.saved))),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Outcome> {
        self.outcome.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for AsyncSaver {
    /// Dropping without `finish` still waits for queued saves, so a
    /// checkpoint handed over is never silently abandoned.
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}
