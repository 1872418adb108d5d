//! Property tests: presets + overrides equal field-by-field sets; unknown
//! keys always error; config_metadata lists every field once; values survive
//! Display -> parse.

use std::collections::BTreeSet;

use nitro_markers::{
    ConfigError, ConfigValue, Device, Experiment, ExperimentFields, GraphConst, Preset,
};
use proptest::prelude::*;

/// A test experiment.
#[derive(Experiment, Debug, Clone, PartialEq)]
#[experiment(presets = presets)]
pub struct Exp {
    /// Width.
    #[experiment(default = 8)]
    pub width: GraphConst<u32>,
    /// Depth.
    pub depth: GraphConst<u8>,
    /// Smoothing.
    pub smoothing: Device<f32>,
    /// Epochs.
    pub epochs: u16,
    /// Name.
    pub name: String,
    /// Flag.
    pub flag: bool,
}

fn presets() -> Vec<Preset> {
    vec![
        Preset::new("small").set("width", 4u32).set("depth", 1u8),
        Preset::new("big")
            .set("width", 512u32)
            .set("smoothing", 0.5f32)
            .set("name", "big".to_string()),
        Preset::new("empty"),
    ]
}

fn field_value() -> impl Strategy<Value = (&'static str, ConfigValue)> {
    prop_oneof![
        any::<u32>().prop_map(|v| ("width", ConfigValue::Int(v.into()))),
        any::<u8>().prop_map(|v| ("depth", ConfigValue::Int(v.into()))),
        (-1e6f32..1e6).prop_map(|v| ("smoothing", ConfigValue::Float(v.into()))),
        any::<u16>().prop_map(|v| ("epochs", ConfigValue::Int(v.into()))),
        "[a-z ]{0,8}".prop_map(|v| ("name", ConfigValue::Str(v))),
        any::<bool>().prop_map(|v| ("flag", ConfigValue::Bool(v))),
    ]
}

fn value() -> impl Strategy<Value = ConfigValue> {
    let leaf = prop_oneof![
        Just(ConfigValue::None),
        any::<bool>().prop_map(ConfigValue::Bool),
        any::<i64>().prop_map(|i| ConfigValue::Int(i.into())),
        (-1e12f64..1e12).prop_map(ConfigValue::Float),
        "[a-zA-Z_ ,:\\[\\]\"]{0,6}".prop_map(ConfigValue::Str),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(ConfigValue::List),
            prop::collection::vec((inner.clone(), inner), 0..3).prop_map(ConfigValue::Map),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn preset_plus_overrides_equals_setting_fields_one_by_one(
        preset in prop::sample::select(vec!["small", "big", "empty"]),
        overrides in prop::collection::vec(field_value(), 0..6),
    ) {
        let refs: Vec<(&str, ConfigValue)> = overrides.clone();
        let recipe = Exp::from_preset(preset, &refs).unwrap();
        let mut by_hand = Exp::defaults();
        let table = presets().into_iter().find(|p| p.name == preset).unwrap();
        for (k, v) in table.values.iter().map(|(k, v)| (k.as_str(), v)).chain(overrides.iter().map(|(k, v)| (*k, v))) {
            by_hand.set_field(k, v).unwrap();
        }
        prop_assert_eq!(recipe.experiment, by_hand);
        prop_assert_eq!(recipe.preset.as_deref(), Some(preset));
    }

    #[test]
    fn unknown_keys_always_error(key in "[a-z_]{1,10}", v in field_value()) {
        prop_assume!(!Exp::field_names().contains(&key.as_str()));
        let err = Exp::from_preset("small", &[v.clone(), (key.as_str(), v.1.clone())]).unwrap_err();
        let names_key = matches!(&err, ConfigError::UnknownField { field, .. } if *field == key);
        prop_assert!(names_key);
        prop_assert!(err.to_string().contains("width, depth, smoothing, epochs, name, flag"));
        let mut e = Exp::defaults();
        let text = format!("{key}=1");
        prop_assert!(e.apply_text_overrides(&[&text]).is_err());
        prop_assert!(e.set_field(&key, &v.1).is_err());
        prop_assert_eq!(e, Exp::defaults());
    }

    #[test]
    fn config_metadata_lists_every_field_once(overrides in prop::collection::vec(field_value(), 0..6)) {
        let e = Exp::from_overrides(&overrides).unwrap().experiment;
        let meta = e.config_metadata();
        let names: Vec<_> = meta.iter().map(|m| m.name).collect();
        prop_assert_eq!(names.as_slice(), Exp::field_names());
        prop_assert_eq!(names.iter().collect::<BTreeSet<_>>().len(), names.len());
        for m in &meta {
            prop_assert_eq!(Some(m.category), Exp::category(m.name));
            prop_assert_eq!(&m.value, &e.get_field(m.name).unwrap());
        }
    }

    #[test]
    fn text_overrides_match_typed_sets(v in field_value()) {
        let mut by_text = Exp::defaults();
        let text = format!("{}={}", v.0, v.1);
        by_text.apply_text_overrides(&[&text]).unwrap();
        let mut typed = Exp::defaults();
        typed.set_field(v.0, &v.1).unwrap();
        prop_assert_eq!(by_text, typed);
    }

    #[test]
    fn display_parses_back(v in value()) {
        let text = v.to_string();
        prop_assert_eq!(ConfigValue::parse(&text), Ok(v.clone()), "{}", text);
    }

    #[test]
    fn parsing_arbitrary_text_never_panics(text in "\\PC{0,40}") {
        let _ = ConfigValue::parse(&text);
        let mut e = Exp::defaults();
        let _ = e.apply_text_overrides(&[&format!("width={text}"), &format!("name={text}")]);
    }

    #[test]
    fn canonical_bytes_are_injective(a in value(), b in value()) {
        prop_assert_eq!(a.canonical_bytes() == b.canonical_bytes(), a == b);
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let text = "[".repeat(10_000);
    assert!(ConfigValue::parse(&text)
        .unwrap_err()
        .contains("nested deeper"));
}
