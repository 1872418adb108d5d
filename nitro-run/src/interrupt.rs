//! Ctrl-C: the first press asks training to stop after the current step
//! (it then checkpoints and returns); the handler is installed once per
//! process, on the first `train()`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

static REQUESTED: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();

pub(crate) fn install() {
    INSTALL.call_once(|| {
        // Another handler (the embedding program's) wins; we then only
        // honour `request_stop`.
        let _ = ctrlc::set_handler(|| {
            if REQUESTED.swap(true, Ordering::SeqCst) {
                std::process::exit(130);
            }
            eprintln!("\nnitro: interrupt: finishing this step, then checkpointing (press again to quit now)");
        });
    });
}

/// Asks a running `train()` to stop after its current step, as Ctrl-C does.
pub fn request_stop() {
    REQUESTED.store(true, Ordering::SeqCst);
}

pub(crate) fn take_request() -> bool {
    REQUESTED.swap(false, Ordering::SeqCst)
}
