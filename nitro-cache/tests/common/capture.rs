//! Capturing `tracing` output of the current thread, for asserting on logs.

use std::io::Write;
use std::sync::Arc;

use parking_lot::Mutex;
use tracing_subscriber::fmt::writer::OptionalWriter;
use tracing_subscriber::fmt::MakeWriter;

/// A shared byte buffer that a `fmt` subscriber writes into.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock()).into_owned()
    }
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

/// Where the one process-wide subscriber writes an event: into the
/// calling thread's capture when one is running at that event's level or
/// above, nowhere otherwise.
struct Router;

thread_local! {
    static SINK: std::cell::RefCell<Option<(Captured, tracing::Level)>> =
        const { std::cell::RefCell::new(None) };
}

impl<'a> MakeWriter<'a> for Router {
    type Writer = OptionalWriter<Captured>;
    fn make_writer(&'a self) -> Self::Writer {
        OptionalWriter::none()
    }
    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        SINK.with(|s| match &*s.borrow() {
            // More verbose levels compare greater (TRACE > DEBUG > INFO).
            Some((c, level)) if meta.level() <= level => OptionalWriter::some(c.clone()),
            _ => OptionalWriter::none(),
        })
    }
}

/// Run `f` with this thread's events at `level` and above captured; return
/// what it logged.
///
/// One global subscriber listens to everything and routes by thread,
/// instead of a thread-local subscriber per capture: tracing caches per
/// callsite whether any subscriber listens, and a callsite first hit by
/// another test's thread while a capture's subscriber came or went could
/// keep a stale "nobody" and drop the capture's events (seen: an INFO line
/// missing one run in ten).
pub fn capture<R>(level: tracing::Level, f: impl FnOnce() -> R) -> (R, String) {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(Router)
            .with_ansi(false)
            .without_time()
            .finish();
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other global subscriber in this test binary");
    });
    let captured = Captured::default();
    SINK.with(|s| *s.borrow_mut() = Some((captured.clone(), level)));
    let result = f();
    SINK.with(|s| *s.borrow_mut() = None);
    (result, captured.text())
}
