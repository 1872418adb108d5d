//! Per-program-kind counters: the numbers that make a recompile visible.

use std::time::Duration;

/// Counters for one program kind (or, from [`Stats::merge`], several).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Lookups served from a live entry (including ones that waited for
    /// another thread's compile of the same key).
    pub hits: u64,
    /// Lookups that found no live entry.
    pub misses: u64,
    /// Successful compiles.
    pub compiles: u64,
    /// Compiles whose closure returned an error (nothing was cached).
    pub failed_compiles: u64,
    /// Total wall time spent in compile closures, failed ones included.
    pub compile_time: Duration,
    /// Entries evicted as least recently used.
    pub evictions: u64,
    /// Entries freed because their owners were dropped.
    pub freed: u64,
    /// Entries live now.
    pub live: usize,
    /// Whether the pile-up warning has fired for this kind.
    pub pileup_warned: bool,
}

impl Stats {
    /// The sum of two kinds' counters.
    pub fn merge(self, other: Stats) -> Stats {
        Stats {
            hits: self.hits + other.hits,
            misses: self.misses + other.misses,
            compiles: self.compiles + other.compiles,
            failed_compiles: self.failed_compiles + other.failed_compiles,
            compile_time: self.compile_time + other.compile_time,
            evictions: self.evictions + other.evictions,
            freed: self.freed + other.freed,
            live: self.live + other.live,
            pileup_warned: self.pileup_warned || other.pileup_warned,
        }
    }
}
