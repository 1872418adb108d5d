//! `Prefetch`: run any iterator on a background thread, `depth` items ahead,
//! so the next batch is gathered while the current one trains.

use std::sync::mpsc::{sync_channel, Receiver};
use std::thread::JoinHandle;

/// An iterator whose items are produced on a background thread.
///
/// Items arrive in the same order as from the wrapped iterator. Dropping a
/// `Prefetch` stops the producer after at most one more item and joins it;
/// a panic in the producer is re-raised on the consuming thread.
pub struct Prefetch<T: Send + 'static> {
    rx: Option<Receiver<T>>,
    handle: Option<JoinHandle<()>>,
}

impl<T: Send + 'static> Prefetch<T> {
    /// Start producing from `iter`, keeping up to `depth` items ready
    /// (`depth` 0 is treated as 1).
    pub fn new<I>(iter: I, depth: usize) -> Self
    where
        I: Iterator<Item = T> + Send + 'static,
    {
        let (tx, rx) = sync_channel(depth.max(1));
        let handle = std::thread::Builder::new()
            .name("nitro-data-prefetch".into())
            .spawn(move || {
                for item in iter {
                    if tx.send(item).is_err() {
                        return; // consumer gone
                    }
                }
            })
            .expect("spawning the prefetch thread");
        Self {
            rx: Some(rx),
            handle: Some(handle),
        }
    }

    fn join(&mut self) {
        if let Some(h) = self.handle.take() {
            if let Err(panic) = h.join() {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

impl<T: Send + 'static> Iterator for Prefetch<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        let item = self.rx.as_ref()?.recv().ok();
        if item.is_none() {
            self.rx = None;
            self.join();
        }
        item
    }
}

impl<T: Send + 'static> Drop for Prefetch<T> {
    fn drop(&mut self) {
        self.rx = None; // unblocks a producer waiting to send
        if let Some(h) = self.handle.take() {
            // A producer panic was already visible to the consumer or is
            // irrelevant now; never panic inside drop.
            let _ = h.join();
        }
    }
}
