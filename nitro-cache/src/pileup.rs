//! The pile-up warning: when one program kind holds too many live entries,
//! name the parts whose values keep changing (the likely over-marked
//! GraphConst or unstable input shape).

use crate::key::{Category, Key};

/// How many distinct values of one part to show in the warning.
const SHOWN_VALUES: usize = 3;

/// A part that takes more than one value across the given keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Churn {
    pub category: Category,
    pub name: String,
    /// Distinct values, absence counted as one.
    pub distinct: usize,
    /// The first few distinct values, rendered (`<absent>` for absence).
    pub samples: Vec<String>,
}

/// The parts that differ across `keys`, most distinct values first (ties in
/// order of first appearance).
pub(crate) fn churning_parts(keys: &[Key]) -> Vec<Churn> {
    let mut slots: Vec<(Category, &str)> = Vec::new();
    for key in keys {
        for part in key.parts() {
            if !slots.contains(&(part.category(), part.name())) {
                slots.push((part.category(), part.name()));
            }
        }
    }
    let mut churn: Vec<Churn> = slots
        .into_iter()
        .filter_map(|(category, name)| {
            let mut seen: Vec<Option<&[u8]>> = Vec::new();
            let mut samples = Vec::new();
            for key in keys {
                let part = key
                    .parts()
                    .find(|p| p.category() == category && p.name() == name);
                let value = part.map(|p| p.value_bytes());
                if !seen.contains(&value) {
                    seen.push(value);
                    if samples.len() < SHOWN_VALUES {
                        samples.push(part.map_or_else(|| "<absent>".to_owned(), |p| p.render()));
                    }
                }
            }
            (seen.len() > 1).then(|| Churn {
                category,
                name: name.to_owned(),
                distinct: seen.len(),
                samples,
            })
        })
        .collect();
    churn.sort_by_key(|c| std::cmp::Reverse(c.distinct));
    churn
}

const GENERIC: &str = "A value that changes between calls recompiles every time: make it a \
     Device input instead of a GraphConst, or keep input shapes fixed.";

/// What to do about entries that differ in a part of `category`.
fn advice(category: Category) -> &'static str {
    match category {
        Category::GraphConst => {
            "A GraphConst value that changes between calls recompiles every time: make it a \
             Device input (changing one never recompiles)."
        }
        Category::Input => {
            "Input shapes keep changing: keep them fixed (pad short batches or drop them)."
        }
        Category::Graph | Category::Structure => {
            "The traced graph keeps changing, which is what a model, loss closure or optimizer \
             rebuilt every iteration with other structure or captured values does: build it once \
             and reuse it."
        }
        Category::Config => {
            "The optimizer or loss configuration keeps changing: build it once and reuse it \
             (hyperparameter values are inputs and never recompile)."
        }
        Category::Part | Category::Env => GENERIC,
    }
}

/// The warning text for `kind`, whose live `keys` exceed `threshold`.
pub(crate) fn message(kind: &str, threshold: usize, keys: &[Key]) -> String {
    let churn = churning_parts(keys);
    let parts = if churn.is_empty() {
        "none (the keys differ only in part order)".to_owned()
    } else {
        churn
            .iter()
            .map(|c| {
                let more = if c.distinct > c.samples.len() {
                    ", …"
                } else {
                    ""
                };
                format!(
                    "{} `{}` ({} values: {}{more})",
                    c.category,
                    c.name,
                    c.distinct,
                    c.samples.join(", ")
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let advice = churn.first().map_or(GENERIC, |c| advice(c.category));
    format!(
        "program `{kind}` has {} live compiled entries (more than {threshold}); parts that keep \
         changing: {parts}. {advice} (This warning fires once.)",
        keys.len()
    )
}
