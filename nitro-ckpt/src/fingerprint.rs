//! Comparing the run that wrote a checkpoint with the run about to resume it.

use std::collections::BTreeMap;

use crate::{ConfigValue, Metadata};

/// One field that differs between a checkpoint and the current run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// `fingerprint`, `experiment`, a config field name, or `<name> (category)`.
    pub field: String,
    /// Rendered value in the checkpoint; `None` when it had no such field.
    pub old: Option<String>,
    /// Rendered current value; `None` when the current run has no such field.
    pub new: Option<String>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "<absent>".into());
        write!(
            f,
            "{}: {} -> {}",
            self.field,
            show(&self.old),
            show(&self.new)
        )
    }
}

/// Every difference between the checkpoint's metadata and the current
/// experiment, fingerprint and config; empty when they match. Config fields
/// are reported in name order.
pub fn compare_fingerprint(
    saved: &Metadata,
    experiment: &str,
    fingerprint: &str,
    config: &[ConfigValue],
) -> Vec<Difference> {
    let mut out = Vec::new();
    let mut scalar = |field: &str, old: &str, new: &str| {
        if old != new {
            out.push(Difference {
                field: field.into(),
                old: Some(old.into()),
                new: Some(new.into()),
            });
        }
    };
    scalar("experiment", &saved.experiment, experiment);
    scalar("fingerprint", &saved.fingerprint, fingerprint);

    let by_name = |c: &[ConfigValue]| -> BTreeMap<String, ConfigValue> {
        c.iter().map(|v| (v.name.clone(), v.clone())).collect()
    };
    let old = by_name(&saved.config);
    let new = by_name(config);
    let names: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    for name in names {
        match (old.get(name), new.get(name)) {
            (Some(o), Some(n)) => {
                if o.category != n.category {
                    out.push(Difference {
                        field: format!("{name} (category)"),
                        old: Some(o.category.clone()),
                        new: Some(n.category.clone()),
                    });
                }
                // Rendered, so that NaN equals NaN and -0.0 differs from 0.0.
                let (ov, nv) = (o.value.to_string(), n.value.to_string());
                if ov != nv {
                    out.push(Difference {
                        field: name.clone(),
                        old: Some(ov),
                        new: Some(nv),
                    });
                }
            }
            (o, n) => out.push(Difference {
                field: name.clone(),
                old: o.map(|v| v.value.to_string()),
                new: n.map(|v| v.value.to_string()),
            }),
        }
    }
    out
}
