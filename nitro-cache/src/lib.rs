//! nitro-cache: content-hashed compile keys, a process-wide compile cache with counters, and explain-a-miss.
//!
//! This crate is a documented skeleton; its issue fills it in.
#![warn(missing_docs)]
