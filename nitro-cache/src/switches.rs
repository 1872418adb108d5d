//! The process-wide switch that makes every compile log its reason (the
//! equivalent of `jax_log_compiles` / `jax_explain_cache_misses`).

use std::sync::atomic::{AtomicU8, Ordering};

/// 0: not yet read from the environment, 1: off, 2: on.
static LOG_COMPILES: AtomicU8 = AtomicU8::new(0);

/// The environment variable that turns compile logging on at start-up
/// (`NITRO_LOG_COMPILES=1`).
pub const LOG_COMPILES_ENV: &str = "NITRO_LOG_COMPILES";

/// Log every compile with its reason at `info` level (off: `debug` level).
pub fn set_log_compiles(on: bool) {
    LOG_COMPILES.store(if on { 2 } else { 1 }, Ordering::Relaxed);
}

/// Whether every compile is logged at `info` level. Defaults to the
/// `NITRO_LOG_COMPILES` environment variable (`1`/`true` = on).
pub fn log_compiles() -> bool {
    match LOG_COMPILES.load(Ordering::Relaxed) {
        0 => {
            let on = std::env::var(LOG_COMPILES_ENV)
                .map(|v| matches!(v.as_str(), "1" | "true" | "yes" | "on"))
                .unwrap_or(false);
            // A concurrent `set_log_compiles` wins over the environment.
            let _ = LOG_COMPILES.compare_exchange(
                0,
                if on { 2 } else { 1 },
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            LOG_COMPILES.load(Ordering::Relaxed) == 2
        }
        v => v == 2,
    }
}
