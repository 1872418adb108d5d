//! Field categories for nitro experiments (GraphConst / Device / Host), the derive macros, compile views and presets.
//!
//! This crate is a documented skeleton; its issue fills it in.
#![warn(missing_docs)]
