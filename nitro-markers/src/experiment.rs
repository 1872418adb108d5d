//! `ExperimentFields`: what the declaration of an experiment records, and the
//! by-name access (presets, overrides) built on it.

use crate::{Category, ConfigError, ConfigValue, DeviceValue};

/// One row of the hyperparameter table.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldMeta {
    /// The field name.
    pub name: &'static str,
    /// Its category.
    pub category: Category,
    /// Its type as written (the inner type for a marked field).
    pub type_name: String,
    /// Its current value, rendered (a list or map shows its items).
    pub value: ConfigValue,
    /// Its doc comment (empty if none).
    pub doc: &'static str,
}

/// A named partial configuration: field values by name.
#[derive(Debug, Clone, PartialEq)]
pub struct Preset {
    /// The preset's name.
    pub name: String,
    /// Field values; every key is validated against the field list.
    pub values: Vec<(String, ConfigValue)>,
}

impl Preset {
    /// An empty preset.
    pub fn new(name: impl Into<String>) -> Self {
        Preset {
            name: name.into(),
            values: Vec::new(),
        }
    }

    /// Adds a field value (builder style).
    pub fn set(mut self, field: impl Into<String>, value: impl crate::ConfigField) -> Self {
        self.values.push((field.into(), value.to_config()));
        self
    }
}

/// An experiment plus how it was configured: the run records the preset.
#[derive(Debug, Clone, PartialEq)]
pub struct Recipe<E> {
    /// The configured experiment.
    pub experiment: E,
    /// The preset that produced it, if any.
    pub preset: Option<String>,
    /// The overrides applied on top, in order.
    pub overrides: Vec<(String, ConfigValue)>,
}

/// What an experiment's declaration records. `#[derive(Experiment)]`
/// implements it; a hand-written impl works too (see the crate docs).
pub trait ExperimentFields: Sized {
    /// The compile view, generic over the tracer's tensor type: GraphConst
    /// fields keep their value, Device fields are tensors, Host fields are
    /// [`StrippedHost`](crate::StrippedHost).
    type View<T>;

    /// The experiment's type name.
    fn experiment_name() -> &'static str;
    /// Every field, in declaration order.
    fn field_names() -> &'static [&'static str];
    /// The Device fields.
    fn device_fields() -> &'static [&'static str];
    /// The Host fields (marked or unmarked).
    fn host_fields() -> &'static [&'static str];
    /// The experiment with every field at its default.
    fn defaults() -> Self;
    /// A field's value in dynamic form.
    fn get_field(&self, name: &str) -> Result<ConfigValue, ConfigError>;
    /// Sets a field from a dynamic value, converting to the field's type.
    fn set_field(&mut self, name: &str, value: &ConfigValue) -> Result<(), ConfigError>;
    /// The Device fields' host values, dtype-tagged, in declaration order.
    fn device_values(&self) -> Vec<(&'static str, DeviceValue)>;
    /// Sets a Device field from a dtype-tagged value (`set_device`).
    fn set_device_value(&mut self, name: &str, value: &DeviceValue) -> Result<(), ConfigError>;
    /// The view traced code receives; `device` gives the traced input for
    /// each Device field by name.
    fn compile_view<T>(&self, device: impl FnMut(&'static str) -> T) -> Self::View<T>;

    /// The GraphConst fields: the complement of Device and Host.
    fn graph_const_fields() -> Vec<&'static str> {
        let marked =
            |f: &&str| Self::device_fields().contains(f) || Self::host_fields().contains(f);
        Self::field_names()
            .iter()
            .copied()
            .filter(|f| !marked(f))
            .collect()
    }

    /// The category of a field, or `None` for an unknown name.
    fn category(name: &str) -> Option<Category> {
        if !Self::field_names().contains(&name) {
            None
        } else if Self::device_fields().contains(&name) {
            Some(Category::Device)
        } else if Self::host_fields().contains(&name) {
            Some(Category::Host)
        } else {
            Some(Category::GraphConst)
        }
    }

    /// Sets a field from override text (`512` in `width=512`), parsed by the
    /// field's type. The fallback parses the generic literal syntax; the
    /// derive parses by the declared type.
    fn set_field_text(&mut self, name: &str, text: &str) -> Result<(), ConfigError> {
        let value = ConfigValue::parse(text).map_err(|reason| ConfigError::BadValue {
            field: name.into(),
            value: text.into(),
            expected: "a value".into(),
            reason,
        })?;
        self.set_field(name, &value)
    }

    /// The hyperparameter table. The fallback reads the trait's other items
    /// (type = the value's kind, no docs); the derive gives declared types
    /// and doc comments.
    fn config_metadata(&self) -> Vec<FieldMeta> {
        Self::field_names()
            .iter()
            .map(|&name| {
                let value = self
                    .get_field(name)
                    .unwrap_or_else(|e| ConfigValue::Opaque(e.to_string()));
                FieldMeta {
                    name,
                    category: Self::category(name).unwrap_or(Category::Host),
                    type_name: value.kind().into(),
                    value,
                    doc: "",
                }
            })
            .collect()
    }

    /// What the compile key hashes: each GraphConst field's value.
    fn graph_const_values(&self) -> Vec<(&'static str, ConfigValue)> {
        let fields = Self::graph_const_fields();
        let value = |f| {
            self.get_field(f)
                .unwrap_or_else(|e| ConfigValue::Opaque(e.to_string()))
        };
        fields.into_iter().map(|f| (f, value(f))).collect()
    }

    /// Checks every field declared with a valid range
    /// (`#[experiment(range = 1..=65536)]`); the first outside its range is
    /// an error naming the field, the value and the range. Presets,
    /// overrides and the run's construction call it.
    fn check_ranges(&self) -> Result<(), ConfigError> {
        Ok(())
    }

    /// Named partial configurations; empty by default.
    fn presets() -> Vec<Preset> {
        Vec::new()
    }

    /// Checks that the field lists agree and every preset key is a field.
    /// Call it at setup: a hand-written impl can get either wrong.
    fn validate() -> Result<(), ConfigError> {
        crate::presets::validate::<Self>()
    }

    /// Builds the experiment from a preset, then applies `overrides`, which
    /// win. Unknown preset names and unknown keys are errors.
    fn from_preset(
        name: &str,
        overrides: &[(&str, ConfigValue)],
    ) -> Result<Recipe<Self>, ConfigError> {
        crate::presets::from_preset(Some(name), overrides)
    }

    /// The defaults with `overrides` applied (no preset).
    fn from_overrides(overrides: &[(&str, ConfigValue)]) -> Result<Recipe<Self>, ConfigError> {
        crate::presets::from_preset(None, overrides)
    }

    /// Applies CLI-style `field=value` overrides, each parsed by the field's
    /// type; returns the overrides as applied, for the run record.
    fn apply_text_overrides(
        &mut self,
        overrides: &[&str],
    ) -> Result<Vec<(String, ConfigValue)>, ConfigError> {
        crate::presets::apply_text(self, overrides)
    }
}
