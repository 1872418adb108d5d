//! Presets and overrides: every key is checked against the field list, which
//! is the mechanism's one correctness argument (an unchecked key would be a
//! silent no-op).

use crate::{ConfigError, ConfigValue, ExperimentFields, Recipe};

/// The error for a key that names no field of `E`.
pub fn unknown_field<E: ExperimentFields>(field: &str) -> ConfigError {
    ConfigError::UnknownField {
        experiment: E::experiment_name().into(),
        field: field.into(),
        valid: E::field_names().iter().map(|s| s.to_string()).collect(),
    }
}

fn check_key<E: ExperimentFields>(field: &str) -> Result<(), ConfigError> {
    match E::field_names().contains(&field) {
        true => Ok(()),
        false => Err(unknown_field::<E>(field)),
    }
}

pub(crate) fn validate<E: ExperimentFields>() -> Result<(), ConfigError> {
    let inconsistent = |problem: String| ConfigError::InconsistentFields {
        experiment: E::experiment_name().into(),
        problem,
    };
    for (list, what) in [
        (E::device_fields(), "device_fields"),
        (E::host_fields(), "host_fields"),
    ] {
        if let Some(f) = list.iter().find(|f| !E::field_names().contains(f)) {
            return Err(inconsistent(format!(
                "{what} lists `{f}`, which is not a field"
            )));
        }
    }
    if let Some(f) = E::device_fields()
        .iter()
        .find(|f| E::host_fields().contains(f))
    {
        return Err(inconsistent(format!(
            "`{f}` is listed as both Device and Host"
        )));
    }
    for preset in E::presets() {
        for (key, _) in &preset.values {
            check_key::<E>(key)?;
        }
    }
    Ok(())
}

pub(crate) fn from_preset<E: ExperimentFields>(
    name: Option<&str>,
    overrides: &[(&str, ConfigValue)],
) -> Result<Recipe<E>, ConfigError> {
    // Validate every key before touching a value, so an error never reports a
    // half-applied configuration.
    for (key, _) in overrides {
        check_key::<E>(key)?;
    }
    let mut experiment = E::defaults();
    if let Some(name) = name {
        let presets = E::presets();
        let Some(preset) = presets.iter().find(|p| p.name == name) else {
            return Err(ConfigError::UnknownPreset {
                experiment: E::experiment_name().into(),
                preset: name.into(),
                valid: presets.iter().map(|p| p.name.clone()).collect(),
            });
        };
        for (key, _) in &preset.values {
            check_key::<E>(key)?;
        }
        for (key, value) in &preset.values {
            experiment.set_field(key, value)?;
        }
    }
    for (key, value) in overrides {
        experiment.set_field(key, value)?;
    }
    experiment.check_ranges()?;
    Ok(Recipe {
        experiment,
        preset: name.map(str::to_string),
        overrides: overrides
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    })
}

/// Splits `field=value` at the first `=`.
pub fn split_override(text: &str) -> Result<(&str, &str), ConfigError> {
    match text.split_once('=') {
        Some((field, value)) if !field.trim().is_empty() => Ok((field.trim(), value.trim())),
        _ => Err(ConfigError::MalformedOverride { text: text.into() }),
    }
}

pub(crate) fn apply_text<E: ExperimentFields>(
    experiment: &mut E,
    overrides: &[&str],
) -> Result<Vec<(String, ConfigValue)>, ConfigError> {
    let mut parsed = Vec::with_capacity(overrides.len());
    for text in overrides {
        let (field, value) = split_override(text)?;
        check_key::<E>(field)?;
        parsed.push((field, value));
    }
    let mut applied = Vec::with_capacity(parsed.len());
    for (field, value) in parsed {
        experiment.set_field_text(field, value)?;
        applied.push((field.to_string(), experiment.get_field(field)?));
    }
    experiment.check_ranges()?;
    Ok(applied)
}
