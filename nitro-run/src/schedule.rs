//! Schedules: a value per optimizer update, resolved against the run's
//! frozen horizon `total` (updates over the whole run). Values are fed to the
//! compiled step as scalar inputs, so a schedule never recompiles.

use std::f64::consts::PI;

/// A value as a function of the update count `t` (0-based: the value used
/// by update `t + 1`) and the horizon `total`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Schedule {
    /// Always `value`.
    Constant(f64),
    /// From 0 up to `peak` over `warmup` updates, then `peak`.
    LinearWarmup {
        /// Value after warm-up.
        peak: f64,
        /// Warm-up length in updates.
        warmup: u64,
    },
    /// Linear warm-up to `peak`, then half a cosine down to `floor` at `total`.
    Cosine {
        /// Value after warm-up.
        peak: f64,
        /// Value at the end of the run.
        floor: f64,
        /// Warm-up length in updates (0 for none).
        warmup: u64,
    },
    /// `initial * gamma^(t / every)`.
    Step {
        /// Starting value.
        initial: f64,
        /// Factor applied every `every` updates.
        gamma: f64,
        /// Updates between decays.
        every: u64,
    },
    /// One-cycle: cosine from `peak / div` up to `peak` over the first
    /// `pct_start` of the run, then cosine down to `peak / final_div`.
    OneCycle {
        /// Highest value.
        peak: f64,
        /// Fraction of the run spent rising.
        pct_start: f64,
        /// Start value is `peak / div`.
        div: f64,
        /// End value is `peak / final_div`.
        final_div: f64,
    },
}

impl Schedule {
    /// One-cycle with the usual settings (30% up, div 25, final div 1e4).
    pub fn one_cycle(peak: f64) -> Schedule {
        Schedule::OneCycle {
            peak,
            pct_start: 0.3,
            div: 25.0,
            final_div: 1e4,
        }
    }

    /// The value for update `t` (0-based) of a run of `total` updates.
    pub fn value(&self, t: u64, total: u64) -> f64 {
        let total = total.max(1);
        match *self {
            Schedule::Constant(v) => v,
            Schedule::LinearWarmup { peak, warmup } => {
                if t < warmup {
                    peak * (t + 1) as f64 / warmup as f64
                } else {
                    peak
                }
            }
            Schedule::Cosine {
                peak,
                floor,
                warmup,
            } => {
                if t < warmup {
                    return peak * (t + 1) as f64 / warmup as f64;
                }
                let span = total.saturating_sub(warmup).max(1) as f64;
                let progress = ((t - warmup) as f64 / span).min(1.0);
                floor + (peak - floor) * 0.5 * (1.0 + (PI * progress).cos())
            }
            Schedule::Step {
                initial,
                gamma,
                every,
            } => initial * gamma.powi((t / every.max(1)) as i32),
            Schedule::OneCycle {
                peak,
                pct_start,
                div,
                final_div,
            } => {
                let up = ((total as f64 * pct_start).round() as u64).max(1);
                let cos =
                    |from: f64, to: f64, p: f64| to + (from - to) * 0.5 * (1.0 + (PI * p).cos());
                if t < up {
                    cos(peak / div, peak, t as f64 / up as f64)
                } else {
                    let down = total.saturating_sub(up).max(1) as f64;
                    let p = ((t - up) as f64 / down).min(1.0);
                    cos(peak, peak / final_div, p)
                }
            }
        }
    }
}
