//! nitro-cache: content-hashed compile keys, a process-wide compile cache
//! with counters, explain-a-miss, and an optional persistent tier.
//!
//! **Owns:** [`Key`]s (a blake3 hash over named, categorised parts with a
//! canonical encoding), the [`CompileCache`] (thread-safe, generic over the
//! compiled value, per-kind [`Stats`], LRU bound, owner-tied entries, a
//! one-time pile-up warning), [`explain_miss`](CompileCache::explain_miss)
//! and the compile log switch, and the [`DiskStore`].
//!
//! **Does not own:** deciding what enters a key. This is a general
//! content-addressed memo cache; nitro-run feeds it the program kind, the
//! experiment type, every GraphConst by content, every traced input's
//! signature (never its value), the parameter tree's structure, the optimizer
//! configuration, backend and device. Device and Host values never enter a
//! key: there is no method for them, and [`Unkeyed`] hides one inside a
//! hashed structure.
//!
//! # Encoding
//!
//! A key is `blake3` of a stream: the header `nitro-cache key v1\n`, then
//! each part framed as `category tag (u8)`, `name (u64 LE length + UTF-8)`,
//! `value (u64 LE length + bytes)`, so the stream parses back into exactly
//! one part list ([`Key::stream`] returns it). A value's bytes are its canonical
//! encoding through serde: one tag byte per item, little-endian fixed-width
//! numbers, length-prefixed strings, counted sequences, type and variant
//! names included (the table is in the `encoding` module source). Maps must
//! arrive with strictly ascending keys, so a `BTreeMap` hashes and a
//! `HashMap` is refused ([`EncodeError::UnorderedMap`]) rather than hashed by
//! iteration order. Sets serialise as sequences and cannot be detected: keep
//! `HashSet` out of keys.
//!
//! # Example
//!
//! ```
//! use std::sync::{Arc, LazyLock};
//! use nitro_cache::{CompileCache, KeyBuilder, Outcome};
//!
//! static STEPS: LazyLock<CompileCache<Arc<String>>> = LazyLock::new(CompileCache::new);
//!
//! fn key(width: usize, batch: usize) -> nitro_cache::Key {
//!     KeyBuilder::new()
//!         .part("experiment", "Mnist")
//!         .graph_const("width", &width)
//!         .input_sig("img", &format!("f32[{batch},784]"))
//!         .finish()
//!         .expect("plain values encode canonically")
//! }
//!
//! let compile = || Ok::<_, String>(Arc::new("program".to_owned()));
//! STEPS.get_or_compile("train_step", &key(128, 256), None, compile).unwrap();
//! let (_, outcome) = STEPS.get_or_compile("train_step", &key(256, 200), None, compile).unwrap();
//! let Outcome::Miss(why) = outcome else { panic!("a new width compiles") };
//! assert_eq!(
//!     why.to_string(),
//!     "train_step: graph_const `width` 128 -> 256; input `img` f32[256,784] -> f32[200,784]"
//! );
//! let stats = STEPS.stats("train_step");
//! assert_eq!((stats.compiles, stats.hits, stats.live), (2, 0, 2));
//! ```
#![warn(missing_docs)]

mod cache;
mod disk;
pub mod disk_format;
mod encoding;
mod explain;
mod global;
mod key;
mod owner;
mod pileup;
mod stats;
mod switches;
mod tags;
mod unkeyed;
mod value;

pub use cache::{CacheConfig, CompileCache, Outcome};
pub use disk::{DiskConfig, DiskError, DiskLookup, DiskOutcome, DiskStore};
pub use disk_format::RejectReason;
pub use encoding::EncodeError;
pub use explain::{diff_keys, Change, Explanation, GoneCause, Reason};
pub use global::global;
pub use key::{Category, Key, KeyBuilder, KeyError, PartRef};
pub use owner::OwnerToken;
pub use stats::Stats;
pub use switches::{log_compiles, set_log_compiles, LOG_COMPILES_ENV};
pub use unkeyed::Unkeyed;
