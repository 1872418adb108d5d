//! Hook batch declarations: a `#[derive(Fields)]` struct's field names are
//! the batch keys it takes; routing reads them once at setup.

use std::collections::BTreeMap;

use crate::MissingField;

/// Where a hook's batch fields come from: the routed batch, by name.
pub trait BatchSource<L> {
    /// Every field the batch has (for error messages and whole-batch hooks).
    fn field_names(&self) -> Vec<String>;
    /// Takes a field out of the batch.
    fn take(&mut self, name: &str) -> Option<L>;
}

impl<L> BatchSource<L> for BTreeMap<String, L> {
    fn field_names(&self) -> Vec<String> {
        self.keys().cloned().collect()
    }
    fn take(&mut self, name: &str) -> Option<L> {
        self.remove(name)
    }
}

/// The batch fields a hook declares, over leaf type `L` (a host array, a
/// traced tensor). `#[derive(Fields)]` implements it: a field of type `L` is
/// required, a field of type `Option<L>` optional.
pub trait BatchFields<L>: Sized {
    /// Fields the batch must have.
    fn required_fields() -> &'static [&'static str];
    /// Fields taken if present.
    fn optional_fields() -> &'static [&'static str];
    /// Whether the hook takes every batch field, unchecked.
    fn takes_whole_batch() -> bool {
        false
    }
    /// Builds the struct, taking its fields out of `batch`.
    fn from_batch(batch: &mut impl BatchSource<L>) -> Result<Self, MissingField>;
}

/// The whole-batch declaration: every field, by name, nothing checked.
#[derive(Debug, Clone, PartialEq)]
pub struct WholeBatch<L>(pub BTreeMap<String, L>);

impl<L> BatchFields<L> for WholeBatch<L> {
    fn required_fields() -> &'static [&'static str] {
        &[]
    }
    fn optional_fields() -> &'static [&'static str] {
        &[]
    }
    fn takes_whole_batch() -> bool {
        true
    }
    fn from_batch(batch: &mut impl BatchSource<L>) -> Result<Self, MissingField> {
        let names = batch.field_names();
        Ok(WholeBatch(
            names
                .into_iter()
                .filter_map(|n| Some((n.clone(), batch.take(&n)?)))
                .collect(),
        ))
    }
}

/// The error for a required field the batch lacks (used by the derive).
pub fn missing_field<L>(
    fields_type: &str,
    field: &str,
    batch: &impl BatchSource<L>,
) -> MissingField {
    MissingField {
        fields_type: fields_type.into(),
        field: field.into(),
        available: batch.field_names(),
    }
}
