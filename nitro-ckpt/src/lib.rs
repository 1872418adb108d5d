//! nitro-ckpt: one-file CBOR checkpoints with checksums, atomic writes, rotation and safe decoding.
//!
//! This crate is a documented skeleton; its issue fills it in.
#![warn(missing_docs)]
