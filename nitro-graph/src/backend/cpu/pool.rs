//! Where a large program's kernels run: on a rayon worker, with the pool's
//! other workers kept awake for the length of the call.
//!
//! A rayon worker that finds no work yields 32 times and then sleeps; the
//! next parallel kernel has to wake it (a futex wake and, in a VM, an
//! interrupt to a halted vCPU: 20-70 us measured on an Intel Xeon VM),
//! and meanwhile the stepping thread waits for the half it handed over. A
//! training step is a chain of parallel kernels with short serial stretches
//! between them, long enough for the helper to fall asleep before each
//! one. So for the length of a call every other worker runs a *keeper*: a
//! job that takes the pool's pending work itself (`rayon::yield_now`) and
//! otherwise spins with `thread::yield_now` (so an oversubscribed machine
//! still gets its core back), as OpenMP runtimes keep their threads
//! spinning between parallel regions. Measured on the Intel Xeon (avx512,
//! 2 threads), alternated builds: MLP train step 4.30-4.74 -> 3.95-4.32
//! ms, CNN train step 5.18-5.63 -> 4.81-5.05 ms, the same as with a rayon
//! patched never to sleep.
//!
//! Keepers run only where every worker has a core of its own: a process
//! bound to fewer cores than its pool has threads (`mpirun` binds each
//! rank to a core) would spin them against its own stepping thread.
//!
//! A keeper never blocks the call it serves: it stops when the call ends,
//! at once on the calling worker itself or on a thread already inside a
//! keeper (either could have a suspended frame below it that the call
//! waits for), and after [`IDLE_LIMIT`] without finding work, so a keeper
//! that started on a thread with other suspended work lets it resume.
//!
//! What it does not own: how kernels split their work (each kernel's own
//! module), and programs too small to leave the calling thread
//! (`exec::program`).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A keeper that has found no work for this long stops: the serial
/// stretches between a step's parallel kernels are far shorter, and a
/// longer one is worth a wake-up.
const IDLE_LIMIT: Duration = Duration::from_millis(1);

thread_local! {
    /// Whether this thread is running a keeper.
    static KEEPING: Cell<bool> = const { Cell::new(false) };
}

/// `f` on a worker of the current rayon pool, the pool's other workers
/// kept awake until it returns.
pub fn on_workers<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let done = AtomicBool::new(false);
    rayon::scope(|s| {
        let owner = rayon::current_thread_index();
        let threads = rayon::current_num_threads();
        let keepers = if threads <= cores() { threads - 1 } else { 0 };
        for _ in 0..keepers {
            let done = &done;
            s.spawn(move |_| keep(done, owner));
        }
        let out = f();
        done.store(true, Ordering::Release);
        out
    })
}

/// The cores this process may run on (its affinity mask and CPU quota),
/// read once.
fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Run the pool's pending work until `done`, or until none has come for
/// [`IDLE_LIMIT`]; nothing on the thread of the call (`owner`) or inside
/// another keeper.
fn keep(done: &AtomicBool, owner: Option<usize>) {
    if rayon::current_thread_index() == owner || KEEPING.with(Cell::get) {
        return;
    }
    KEEPING.with(|k| k.set(true));
    let mut idle_since = Instant::now();
    while !done.load(Ordering::Acquire) {
        match rayon::yield_now() {
            Some(rayon::Yield::Executed) => idle_since = Instant::now(),
            _ if idle_since.elapsed() >= IDLE_LIMIT => break,
            _ => std::thread::yield_now(),
        }
    }
    KEEPING.with(|k| k.set(false));
}
