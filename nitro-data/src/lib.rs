//! nitro-data: host-side data (splits, batching, routing of declared fields, padding short batches, loaders, built-in datasets).
//!
//! This crate is a documented skeleton; its issue fills it in.
#![warn(missing_docs)]
