//! Shared test support.
pub mod trainer;
