//! Derive macros for `nitro-markers`. This crate is a documented skeleton; its issue fills it in.
#![warn(missing_docs)]
