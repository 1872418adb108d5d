//! Declaring a nitro experiment: field categories, the derives, compile
//! views, presets and overrides, hook batch declarations, and leaf trees.
//!
//! **Owns:** the three field categories ([`GraphConst`], [`Device`],
//! unmarked = Host, [`Host`] for emphasis); [`ExperimentFields`], which
//! `#[derive(Experiment)]` implements (field lists, hyperparameter table,
//! by-name get/set, presets, the compile view); [`BatchFields`]
//! (`#[derive(Fields)]`) for hook batches; [`Tree`] (`#[derive(Tree)]`) for
//! outputs, params and state. **Does not own:** tracing, tensors, compile
//! keys or runs: it depends on no other nitro crate, and the view is generic
//! over the tracer's tensor type.
//!
//! ```
//! use nitro_markers::{ConfigValue, Device, Experiment, ExperimentFields, GraphConst, Preset};
//!
//! /// A small classifier.
//! #[nitro_markers::marker_table]
//! #[derive(Experiment, Debug)]
//! #[experiment(presets = presets)]
//! struct MyExp {
//!     /// Structural: changes the graph, so it bakes and is in the compile key.
//!     #[experiment(default = 128)]
//!     width: GraphConst<usize>,
//!     /// A traced input: sweep or schedule it without recompiling.
//!     #[experiment(default = 0.05)]
//!     smoothing: Device<f32>,
//!     /// Unmarked, therefore Host: driver-only.
//!     #[experiment(default = 20)]
//!     max_epochs: usize,
//! }
//!
//! fn presets() -> Vec<Preset> {
//!     vec![Preset::new("wide").set("width", 256usize).set("smoothing", 0.0f32)]
//! }
//!
//! assert_eq!(MyExp::device_fields(), ["smoothing"]);
//! assert_eq!(MyExp::graph_const_fields(), ["width"]);
//!
//! // Presets, then overrides (which win), each key checked against the fields.
//! let recipe = MyExp::from_preset("wide", &[("max_epochs", ConfigValue::Int(40))]).unwrap();
//! assert_eq!((*recipe.experiment.width, recipe.experiment.max_epochs), (256, 40));
//! assert_eq!(recipe.preset.as_deref(), Some("wide"));
//! assert!(MyExp::from_preset("wide", &[("widht", ConfigValue::Int(1))]).is_err());
//!
//! // CLI overrides parse by the field's type.
//! let mut e = MyExp::defaults();
//! e.apply_text_overrides(&["width=512", "smoothing=0.1"]).unwrap();
//! assert!(e.apply_text_overrides(&["width=wide"]).is_err());
//!
//! // The compile view: GraphConst keeps its value, Device becomes the traced
//! // input (here a string stands in for a tensor), Host is stripped.
//! let view = e.compile_view(|name| format!("traced:{name}"));
//! assert_eq!(view.width, 512);
//! assert_eq!(view.smoothing, "traced:smoothing");
//! assert_eq!(view.max_epochs.field_name(), "max_epochs");
//! ```
//!
//! Reading `view.max_epochs` in traced code (`view.max_epochs * 2`,
//! `f32::from(view.max_epochs)`, `view.max_epochs > 3`) does not compile;
//! the message names the field and the three fixes (see [`StrippedHost`]).
//!
//! A hand-written `impl ExperimentFields` works without the macro: list the
//! fields and categories, implement by-name get/set, and declare a view type.
//!
//! # Attributes
//!
//! - `#[experiment(default = expr)]` on a field: its default (the inner
//!   value for a marked field); otherwise `Default::default()`.
//! - `#[experiment(opaque)]` on a Host field whose type has no config form
//!   (dataset-sized state, handles): it is listed but not settable by name.
//! - `#[experiment(presets = path)]` on the struct: a `fn() -> Vec<Preset>`.
//! - `#[marker_table]` above the derive appends the marker table (field,
//!   category, type, default) to the struct's rustdoc; the derive always puts
//!   it on the trait impl and on the view type.
#![warn(missing_docs)]

// The derives name `::nitro_markers`; this lets the crate use them itself.
extern crate self as nitro_markers;

mod batch;
mod device;
mod error;
pub mod example;
mod experiment;
mod field;
mod markers;
mod parse;
mod presets;
mod stripped;
mod tree;
mod value;

pub use batch::{missing_field, BatchFields, BatchSource, WholeBatch};
pub use device::{DeviceData, DeviceElement, DeviceInput, DeviceValue};
pub use error::{check_range, ConfigError, MissingField, TreeError, ValueError};
pub use experiment::{ExperimentFields, FieldMeta, Preset, Recipe};
pub use field::{ConfigField, ContentHash};
pub use markers::{AnyHost, Category, Device, GraphConst, Host};
pub use presets::{split_override, unknown_field};
pub use stripped::{HostFieldName, ReadInTrace, StrippedHost};
pub use tree::{next_leaf, with_segment, LeafKind, Tree};
pub use value::{ConfigValue, ABBREVIATE_ABOVE};

pub use nitro_markers_derive::{marker_table, Experiment, Fields, Tree};
