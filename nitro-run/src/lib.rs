//! nitro-run: the Experiment trait, the Nitro handle and the training lifecycle; the only crate that wires the others together.
//!
//! This crate is a documented skeleton; its issue fills it in.
#![warn(missing_docs)]
