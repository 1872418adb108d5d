//! Run metadata: everything besides tensors that a resumed run needs, and
//! the small value type config entries and user keys are rendered into.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A config, schedule or user value: a small CBOR-able tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Value {
    /// A boolean.
    Bool(bool),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer too large for `Int`.
    UInt(u64),
    /// A float (stored bit-exact, NaN payloads included).
    Float(f64),
    /// Text.
    Text(String),
    /// Raw bytes (a CBOR byte string, not a list of numbers).
    Bytes(#[serde(with = "crate::blob")] Vec<u8>),
    /// A list of values.
    List(Vec<Value>),
    /// Named values.
    Map(BTreeMap<String, Value>),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Bool(v) => write!(f, "{v}"),
            Value::Int(v) => write!(f, "{v}"),
            Value::UInt(v) => write!(f, "{v}"),
            Value::Float(v) => write!(f, "{v:?}"),
            Value::Text(v) => write!(f, "{v:?}"),
            Value::Bytes(v) => write!(f, "<{} bytes>", v.len()),
            Value::List(items) => {
                f.write_str("[")?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
            Value::Map(items) => {
                f.write_str("{")?;
                for (i, (k, v)) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k}: {v}")?;
                }
                f.write_str("}")
            }
        }
    }
}

/// One configuration field as the run saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigValue {
    /// Field name, e.g. `width`.
    pub name: String,
    /// Its category, e.g. `graph_const`, `device` or `host`.
    pub category: String,
    /// Its value.
    pub value: Value,
}

/// Metrics recorded at one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricsRow {
    /// The step they were measured at.
    pub step: u64,
    /// Metric name to value.
    pub values: BTreeMap<String, f64>,
}

/// Everything a checkpoint records besides tensors (format version 2).
///
/// Fields added after version 2 must carry `#[serde(default)]` so that
/// older files still decode.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    /// The experiment's type name.
    pub experiment: String,
    /// The preset the run started from, if any.
    pub preset: Option<String>,
    /// Every config value with its category.
    pub config: Vec<ConfigValue>,
    /// Code/config fingerprint of the run that wrote the checkpoint.
    pub fingerprint: String,
    /// Optimizer steps taken.
    pub step: u64,
    /// Epochs completed.
    pub epoch: u64,
    /// Batches consumed within the current epoch.
    pub position_in_epoch: u64,
    /// Seed of the data order.
    pub data_seed: u64,
    /// Named RNG states as opaque bytes.
    #[serde(with = "crate::blob::map")]
    pub rng_states: BTreeMap<String, Vec<u8>>,
    /// Learning-rate schedule (and similar) state.
    pub schedule: BTreeMap<String, Value>,
    /// Metrics history, oldest first.
    pub metrics_history: Vec<MetricsRow>,
    /// Wall time spent in the run so far, in seconds.
    pub wall_time_s: f64,
    /// Free-form user key/values.
    pub user: BTreeMap<String, Value>,
}
