//! Typed errors. Each names what was wrong and, where there is one, the fix.

use crate::ConfigValue;

/// A value did not convert to a field's type (no field name yet; see
/// [`ConfigError::BadValue`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("expected {expected}, found {found}")]
pub struct ValueError {
    /// The expected type.
    pub expected: String,
    /// What was found instead, rendered.
    pub found: String,
}

/// Whether `value` of field `field` lies in its declared `range` (written
/// `text`); the derive calls this for `#[experiment(range = ..)]`.
pub fn check_range<T, R>(field: &str, value: &T, range: R, text: &str) -> Result<(), ConfigError>
where
    T: PartialOrd + std::fmt::Display,
    R: std::ops::RangeBounds<T>,
{
    if range.contains(value) {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            field: field.into(),
            value: value.to_string(),
            range: text.into(),
        })
    }
}

/// Joins valid names for an error message.
fn list(names: &[String]) -> String {
    names.join(", ")
}

/// An error addressing an experiment's fields or presets by name.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// A key names no field of the experiment.
    #[error("`{experiment}` has no field `{field}`; valid fields: {}", list(.valid))]
    UnknownField {
        /// The experiment type.
        experiment: String,
        /// The unknown key.
        field: String,
        /// Every field name.
        valid: Vec<String>,
    },
    /// A preset name is not in the experiment's preset table.
    #[error("`{experiment}` has no preset `{preset}`; valid presets: {}", list(.valid))]
    UnknownPreset {
        /// The experiment type.
        experiment: String,
        /// The unknown preset name.
        preset: String,
        /// Every preset name (empty if the table is empty).
        valid: Vec<String>,
    },
    /// A value does not fit the field's type.
    #[error("field `{field}`: cannot use `{value}`: expected {expected} ({reason})")]
    BadValue {
        /// The field.
        field: String,
        /// The value as given.
        value: String,
        /// The field's type.
        expected: String,
        /// Why it did not convert.
        reason: String,
    },
    /// A value outside the field's declared range.
    #[error("field `{field}`: {value} is outside its valid range {range}")]
    OutOfRange {
        /// The field.
        field: String,
        /// The value, rendered.
        value: String,
        /// The declared range, as written (`1..=65536`).
        range: String,
    },
    /// A string override is not of the form `field=value`.
    #[error("override `{text}` is not of the form `field=value`")]
    MalformedOverride {
        /// The override as given.
        text: String,
    },
    /// The field holds a value with no config form (`#[experiment(opaque)]`).
    #[error("field `{field}` holds a `{type_name}`, which has no config form; set it in code, or give the type a `ConfigField` impl")]
    NotConfigurable {
        /// The field.
        field: String,
        /// Its type.
        type_name: String,
    },
    /// `set_device` on a field that is not Device.
    #[error("field `{field}` is {category}, not Device: {fix}")]
    NotDevice {
        /// The field.
        field: String,
        /// Its category.
        category: crate::Category,
        /// What to do instead.
        fix: &'static str,
    },
    /// A hand-written impl lists a name in two categories or a category
    /// name that is not a field.
    #[error("`{experiment}`: {problem}")]
    InconsistentFields {
        /// The experiment type.
        experiment: String,
        /// What is inconsistent.
        problem: String,
    },
}

impl ConfigError {
    /// A [`ConfigError::NotDevice`] for `field` of `category`.
    pub fn not_device(field: &str, category: crate::Category) -> Self {
        let fix = match category {
            crate::Category::GraphConst => {
                "it bakes into the graph, so a new value is a new program; build a new run with it"
            }
            _ => "it reaches no trace, so writing it would change nothing compiled; set it before building the run",
        };
        ConfigError::NotDevice {
            field: field.into(),
            category,
            fix,
        }
    }

    /// A [`ConfigError::BadValue`] from a [`ValueError`].
    pub fn bad_value(field: &str, value: &ConfigValue, err: ValueError) -> Self {
        ConfigError::BadValue {
            field: field.into(),
            value: value.to_string(),
            expected: err.expected,
            reason: format!("found {}", err.found),
        }
    }
}

/// A batch lacks a field a hook declared as required.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("`{fields_type}` requires batch field `{field}`, which the batch does not have; batch fields: {}; make it `Option<_>` if it is optional", list(.available))]
pub struct MissingField {
    /// The `#[derive(Fields)]` struct.
    pub fields_type: String,
    /// The missing field.
    pub field: String,
    /// The fields the batch has.
    pub available: Vec<String>,
}

/// Rebuilding a tree from leaves failed: the leaf count does not match.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    /// Leaves ran out at this path.
    #[error("too few leaves: none left for `{path}`")]
    TooFewLeaves {
        /// The path that found no leaf.
        path: String,
    },
    /// Leaves were left over after the last path.
    #[error("too many leaves: the tree has {expected}, {extra} left over")]
    TooManyLeaves {
        /// Leaves the tree takes.
        expected: usize,
        /// Leaves left over.
        extra: usize,
    },
}
