//! A model's identity as traced: the forward graph's content hash at a
//! width, and its op counts. Checkpoints record it; resume compares it, so
//! a checkpoint of another model structure (same parameter shapes, another
//! graph) is refused with the op counts that differ.

use std::collections::BTreeMap;

use nitro_ckpt::Value;
use nitro_graph::Graph;

/// The model's identity as traced: the forward graph's content hash at a
/// width, and its op counts (to say what differs).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Structure {
    pub width: usize,
    pub hash: String,
    pub ops: BTreeMap<String, u64>,
}

impl Structure {
    pub fn of(graph: &Graph, width: usize) -> Structure {
        let mut ops = BTreeMap::new();
        for node in &graph.nodes {
            *ops.entry(node.op.name()).or_insert(0) += 1;
        }
        Structure {
            width,
            hash: graph.content_hash(),
            ops,
        }
    }

    pub fn to_value(&self) -> Value {
        Value::Map(
            [
                ("width".to_string(), Value::UInt(self.width as u64)),
                ("hash".to_string(), Value::Text(self.hash.clone())),
                (
                    "ops".to_string(),
                    Value::Map(
                        self.ops
                            .iter()
                            .map(|(k, v)| (k.clone(), Value::UInt(*v)))
                            .collect(),
                    ),
                ),
            ]
            .into(),
        )
    }

    pub fn from_value(v: &Value) -> Option<Structure> {
        let Value::Map(m) = v else { return None };
        let uint = |v: &Value| match v {
            Value::UInt(u) => Some(*u),
            Value::Int(i) => u64::try_from(*i).ok(),
            _ => None,
        };
        let Value::Text(hash) = m.get("hash")? else {
            return None;
        };
        let Value::Map(ops) = m.get("ops")? else {
            return None;
        };
        Some(Structure {
            width: uint(m.get("width")?)? as usize,
            hash: hash.clone(),
            ops: ops
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), uint(v)?)))
                .collect(),
        })
    }

    /// The op counts that differ, `name a -> b`.
    pub fn op_changes(&self, now: &Structure) -> Vec<String> {
        let mut names: Vec<&String> = self.ops.keys().chain(now.ops.keys()).collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .filter_map(|n| {
                let (a, b) = (
                    self.ops.get(n).copied().unwrap_or(0),
                    now.ops.get(n).copied().unwrap_or(0),
                );
                (a != b).then(|| format!("{n} x{a} -> x{b}"))
            })
            .collect()
    }
}
