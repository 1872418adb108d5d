//! The generated `ExperimentFields` on structs with all three categories,
//! generics, docs, defaults; and the hand-written path.
// Some fields are undocumented on purpose: their metadata doc is empty.
#![allow(missing_docs)]

use std::collections::BTreeMap;

use nitro_markers::{
    Category, ConfigError, ConfigField, ConfigValue, ContentHash, Device, DeviceData, DeviceValue,
    Experiment, ExperimentFields, GraphConst, Host, Preset,
};

/// An experiment with every kind of field.
#[nitro_markers::marker_table]
#[derive(Experiment, Debug, Clone, PartialEq)]
#[experiment(presets = presets)]
pub struct MyExp {
    /// Structural: bakes.
    #[experiment(default = 128)]
    pub width: GraphConst<usize>,
    /// Layer sizes, also structural.
    #[experiment(default = vec![4, 8])]
    pub layers: GraphConst<Vec<u32>>,
    /// A traced input.
    #[experiment(default = 0.05)]
    pub smoothing: Device<f32>,
    /// Class weights, traced.
    pub class_weights: Device<Vec<f32>>,
    /// Driver-only.
    #[experiment(default = 20)]
    pub max_epochs: usize,
    /// Host, said out loud.
    #[experiment(default = "runs/x".to_string())]
    pub run_dir: Host<String>,
    pub tags: BTreeMap<String, i64>,
    /// Dataset-sized state: not a config value.
    #[experiment(opaque)]
    pub images: Frames,
}

/// Stands in for dataset-sized state with no config form.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Frames(Vec<u8>);

impl Frames {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn presets() -> Vec<Preset> {
    vec![
        Preset::new("reference_v1")
            .set("width", 128usize)
            .set("smoothing", 0.0f32),
        Preset::new("current")
            .set("width", 256usize)
            .set("smoothing", 0.05f32),
    ]
}

#[test]
fn field_lists_follow_the_markers() {
    assert_eq!(
        MyExp::field_names(),
        [
            "width",
            "layers",
            "smoothing",
            "class_weights",
            "max_epochs",
            "run_dir",
            "tags",
            "images"
        ]
    );
    assert_eq!(MyExp::device_fields(), ["smoothing", "class_weights"]);
    assert_eq!(
        MyExp::host_fields(),
        ["max_epochs", "run_dir", "tags", "images"]
    );
    assert_eq!(MyExp::graph_const_fields(), ["width", "layers"]);
    assert_eq!(MyExp::category("run_dir"), Some(Category::Host));
    assert_eq!(MyExp::category("nope"), None);
    MyExp::validate().unwrap();
}

#[test]
fn defaults_come_from_attributes_or_default() {
    let e = MyExp::defaults();
    assert_eq!(
        (*e.width, e.layers.0.clone(), *e.smoothing, e.max_epochs),
        (128, vec![4, 8], 0.05, 20)
    );
    assert_eq!(*e.run_dir, "runs/x");
    assert!(e.class_weights.is_empty() && e.tags.is_empty() && e.images.is_empty());
}

#[test]
fn config_metadata_has_types_values_and_docs() {
    let mut e = MyExp::defaults();
    e.tags.insert("team".into(), 3);
    let meta = e.config_metadata();
    assert_eq!(meta.len(), MyExp::field_names().len());
    let row = |n: &str| meta.iter().find(|m| m.name == n).unwrap().clone();
    assert_eq!(row("width").category, Category::GraphConst);
    assert_eq!(row("width").type_name, "usize");
    assert_eq!(row("width").doc, "Structural: bakes.");
    // A non-scalar value renders its contents, not its type name.
    assert_eq!(row("layers").value.to_string(), "[4, 8]");
    assert_eq!(row("tags").value.to_string(), "{team: 3}");
    assert_eq!(row("tags").doc, "");
    assert_eq!(row("images").value.kind(), "opaque");
    assert_eq!(row("run_dir").type_name, "String");
}

#[test]
fn get_and_set_by_name_with_typed_errors() {
    let mut e = MyExp::defaults();
    e.set_field("width", &ConfigValue::Int(64)).unwrap();
    assert_eq!(*e.width, 64);
    assert_eq!(
        e.get_field("smoothing").unwrap(),
        ConfigValue::Float(0.05f32 as f64)
    );
    let err = e
        .set_field("width", &ConfigValue::Str("wide".into()))
        .unwrap_err();
    assert!(
        matches!(err, ConfigError::BadValue { ref field, .. } if field == "width"),
        "{err}"
    );
    let err = e
        .set_field("width", &ConfigValue::Int(-1))
        .unwrap_err()
        .to_string();
    assert!(err.contains("width") && err.contains("usize"), "{err}");
    let err = e
        .set_field("widht", &ConfigValue::Int(1))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`widht`") && err.contains("width, layers, smoothing"),
        "{err}"
    );
    let err = e
        .set_field("images", &ConfigValue::List(vec![]))
        .unwrap_err();
    assert!(matches!(err, ConfigError::NotConfigurable { .. }), "{err}");
}

#[test]
fn text_overrides_parse_by_field_type() {
    let mut e = MyExp::defaults();
    let applied = e
        .apply_text_overrides(&[
            "width=512",
            "layers=[1, 2, 3]",
            "run_dir=out/a b",
            "tags={a: 1}",
            "smoothing=1",
        ])
        .unwrap();
    assert_eq!(applied.len(), 5);
    assert_eq!(
        (
            *e.width,
            e.layers.0.clone(),
            e.run_dir.0.as_str(),
            *e.smoothing
        ),
        (512, vec![1, 2, 3], "out/a b", 1.0)
    );
    assert_eq!(e.tags.get("a"), Some(&1));
    let err = e
        .apply_text_overrides(&["width=0.5"])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`width`") && err.contains("0.5") && err.contains("usize"),
        "{err}"
    );
    let err = e.apply_text_overrides(&["width"]).unwrap_err();
    assert!(matches!(err, ConfigError::MalformedOverride { .. }));
    let err = e.apply_text_overrides(&["depth=3"]).unwrap_err();
    assert!(matches!(err, ConfigError::UnknownField { .. }));
}

#[test]
fn presets_and_overrides() {
    let r = MyExp::from_preset(
        "current",
        &[
            ("max_epochs", ConfigValue::Int(40)),
            ("width", ConfigValue::Int(1)),
        ],
    )
    .unwrap();
    assert_eq!(
        (
            *r.experiment.width,
            *r.experiment.smoothing,
            r.experiment.max_epochs
        ),
        (1, 0.05, 40)
    );
    assert_eq!(r.preset.as_deref(), Some("current"));
    let err = MyExp::from_preset("newest", &[]).unwrap_err().to_string();
    assert!(
        err.contains("`newest`") && err.contains("reference_v1, current"),
        "{err}"
    );
    let plain = MyExp::from_overrides(&[]).unwrap();
    assert_eq!((plain.experiment, plain.preset), (MyExp::defaults(), None));
}

#[test]
fn device_values_are_dtype_tagged_and_settable() {
    let mut e = MyExp::defaults();
    e.class_weights.0 = vec![1.0, 2.0];
    let vals = e.device_values();
    assert_eq!(
        vals[0],
        (
            "smoothing",
            DeviceValue {
                shape: vec![],
                data: DeviceData::F32(vec![0.05])
            }
        )
    );
    assert_eq!(vals[1].1.shape, vec![2]);
    e.set_device_value(
        "smoothing",
        &DeviceValue {
            shape: vec![],
            data: DeviceData::F32(vec![0.5]),
        },
    )
    .unwrap();
    assert_eq!(*e.smoothing, 0.5);
    let wrong = DeviceValue {
        shape: vec![],
        data: DeviceData::I32(vec![1]),
    };
    assert!(e.set_device_value("smoothing", &wrong).is_err());
    let err = e.set_device_value("width", &wrong).unwrap_err().to_string();
    assert!(
        err.contains("GraphConst") && err.contains("new run"),
        "{err}"
    );
    let err = e
        .set_device_value("max_epochs", &wrong)
        .unwrap_err()
        .to_string();
    assert!(err.contains("Host") && err.contains("no trace"), "{err}");
}

#[test]
fn compile_view_keeps_graph_consts_traces_devices_strips_host() {
    let e = MyExp::defaults();
    let mut asked = Vec::new();
    let view: MyExpView<u32> = e.compile_view(|name| {
        asked.push(name);
        asked.len() as u32
    });
    assert_eq!(asked, ["smoothing", "class_weights"]);
    assert_eq!(
        (
            view.width,
            view.layers.clone(),
            view.smoothing,
            view.class_weights
        ),
        (128, vec![4, 8], 1, 2)
    );
    assert_eq!(view.images.field_name(), "images");
    assert_eq!(format!("{:?}", view.max_epochs), "StrippedHost(max_epochs)");
    assert_eq!(
        e.graph_const_values(),
        vec![
            ("width", ConfigValue::Int(128)),
            ("layers", e.layers.to_config())
        ]
    );
}

/// Generic over a GraphConst type and a Host type.
#[derive(Experiment, Debug, Clone, PartialEq)]
pub struct Generic<A: ContentHash + Clone, H: ConfigField + Default, const N: usize> {
    /// Generic structural knob.
    pub knob: GraphConst<A>,
    #[experiment(default = [1.0; N])]
    pub scale: Device<[f32; N]>,
    pub note: H,
}

#[test]
fn generic_experiments_work() {
    type G = Generic<(u8, bool), String, 2>;
    let mut g = G::defaults();
    g.set_field("knob", &ConfigValue::parse("[3, true]").unwrap())
        .unwrap();
    g.set_field_text("note", "hello").unwrap();
    assert_eq!((g.knob.0, g.note.as_str()), ((3, true), "hello"));
    let view = g.compile_view(|_| "t");
    assert_eq!((view.knob, view.scale), ((3, true), "t"));
    assert_eq!(g.config_metadata()[1].type_name, "[f32; 2]");
    assert_eq!(g.device_values()[0].1.shape, vec![2]);
}

/// No macro: the traits by hand, as the seed promises.
#[derive(Debug, Default, PartialEq)]
struct Manual {
    depth: GraphConst<u32>,
    temperature: Device<f32>,
    seed: u64,
}

/// The hand-written view.
struct ManualView<T> {
    depth: u32,
    temperature: T,
}

impl ExperimentFields for Manual {
    type View<T> = ManualView<T>;
    fn experiment_name() -> &'static str {
        "Manual"
    }
    fn field_names() -> &'static [&'static str] {
        &["depth", "temperature", "seed"]
    }
    fn device_fields() -> &'static [&'static str] {
        &["temperature"]
    }
    fn host_fields() -> &'static [&'static str] {
        &["seed"]
    }
    fn defaults() -> Self {
        Manual::default()
    }
    fn get_field(&self, name: &str) -> Result<ConfigValue, ConfigError> {
        match name {
            "depth" => Ok(self.depth.to_config()),
            "temperature" => Ok(self.temperature.to_config()),
            "seed" => Ok(self.seed.to_config()),
            _ => Err(nitro_markers::unknown_field::<Self>(name)),
        }
    }
    fn set_field(&mut self, name: &str, value: &ConfigValue) -> Result<(), ConfigError> {
        let bad = |e| ConfigError::bad_value(name, value, e);
        match name {
            "depth" => self.depth = ConfigField::from_config(value).map_err(bad)?,
            "temperature" => self.temperature = ConfigField::from_config(value).map_err(bad)?,
            "seed" => self.seed = ConfigField::from_config(value).map_err(bad)?,
            _ => return Err(nitro_markers::unknown_field::<Self>(name)),
        }
        Ok(())
    }
    fn device_values(&self) -> Vec<(&'static str, DeviceValue)> {
        vec![(
            "temperature",
            nitro_markers::DeviceInput::to_device_value(&self.temperature.0),
        )]
    }
    fn set_device_value(&mut self, name: &str, value: &DeviceValue) -> Result<(), ConfigError> {
        match name {
            "temperature" => {
                self.temperature.0 =
                    nitro_markers::DeviceInput::from_device_value(value).map_err(|e| {
                        ConfigError::bad_value(name, &ConfigValue::Str(format!("{value:?}")), e)
                    })?;
                Ok(())
            }
            other => Err(ConfigError::not_device(
                other,
                Self::category(other).unwrap_or(Category::Host),
            )),
        }
    }
    fn compile_view<T>(&self, mut device: impl FnMut(&'static str) -> T) -> ManualView<T> {
        ManualView {
            depth: *self.depth,
            temperature: device("temperature"),
        }
    }
}

#[test]
fn hand_written_impl_gets_the_fallbacks() {
    Manual::validate().unwrap();
    assert_eq!(Manual::graph_const_fields(), ["depth"]);
    let r = Manual::from_overrides(&[("depth", ConfigValue::Int(3))]).unwrap();
    assert_eq!(*r.experiment.depth, 3);
    let mut m = r.experiment;
    m.apply_text_overrides(&["seed=7", "temperature=0.5"])
        .unwrap();
    assert_eq!((m.seed, *m.temperature), (7, 0.5));
    let meta = m.config_metadata();
    assert_eq!(
        meta.iter().map(|r| r.name).collect::<Vec<_>>(),
        ["depth", "temperature", "seed"]
    );
    assert_eq!(meta[2].category, Category::Host);
    let view = m.compile_view(|n| n.len());
    assert_eq!((view.depth, view.temperature), (3, 11));
    assert!(Manual::from_preset("any", &[]).is_err());
}

/// A hand-written impl that lists a field in two categories is caught.
struct Broken;
impl ExperimentFields for Broken {
    type View<T> = ();
    fn experiment_name() -> &'static str {
        "Broken"
    }
    fn field_names() -> &'static [&'static str] {
        &["a"]
    }
    fn device_fields() -> &'static [&'static str] {
        &["a"]
    }
    fn host_fields() -> &'static [&'static str] {
        &["a"]
    }
    fn defaults() -> Self {
        Broken
    }
    fn get_field(&self, name: &str) -> Result<ConfigValue, ConfigError> {
        Err(nitro_markers::unknown_field::<Self>(name))
    }
    fn set_field(&mut self, name: &str, _: &ConfigValue) -> Result<(), ConfigError> {
        Err(nitro_markers::unknown_field::<Self>(name))
    }
    fn device_values(&self) -> Vec<(&'static str, DeviceValue)> {
        Vec::new()
    }
    fn set_device_value(&mut self, name: &str, _: &DeviceValue) -> Result<(), ConfigError> {
        Err(nitro_markers::unknown_field::<Self>(name))
    }
    fn compile_view<T>(&self, _: impl FnMut(&'static str) -> T) {}
}

#[test]
fn validate_catches_inconsistent_hand_written_lists() {
    let err = Broken::validate().unwrap_err().to_string();
    assert!(err.contains("both Device and Host"), "{err}");
}

/// Declared ranges: checked on construction from presets and overrides and
/// on `--set` text, each refusal naming the field, the value and the range.
#[derive(Experiment, Debug, Clone, PartialEq)]
#[experiment(presets = ranged_presets)]
pub struct Ranged {
    #[experiment(default = 256, range = 1..=65536)]
    pub width: GraphConst<usize>,
    #[experiment(default = 0.1, range = 0.0..1.0)]
    pub smoothing: Device<f32>,
    #[experiment(default = 8, range = 1..)]
    pub n_eval: usize,
    pub free: usize,
}

fn ranged_presets() -> Vec<Preset> {
    vec![
        Preset::new("ok").set("width", 2usize),
        Preset::new("zero").set("width", 0usize),
    ]
}

#[test]
fn declared_ranges_are_checked_with_the_field_value_and_range_named() {
    assert!(Ranged::defaults().check_ranges().is_ok());
    assert!(Ranged::from_preset("ok", &[]).is_ok());
    let err = Ranged::from_preset("zero", &[]).unwrap_err().to_string();
    assert_eq!(err, "field `width`: 0 is outside its valid range 1..=65536");
    let err = Ranged::from_overrides(&[("smoothing", ConfigValue::Float(5.0))])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`smoothing`") && err.contains("5") && err.contains("0.0..1.0"),
        "{err}"
    );
    let mut e = Ranged::defaults();
    let err = e
        .apply_text_overrides(&["n_eval=0"])
        .unwrap_err()
        .to_string();
    assert_eq!(err, "field `n_eval`: 0 is outside its valid range 1..");
    let err = e
        .apply_text_overrides(&["width=100000000"])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("100000000") && err.contains("1..=65536"),
        "{err}"
    );
    // Edges are inside; unranged fields take anything.
    assert!(e
        .apply_text_overrides(&["width=65536", "n_eval=1", "free=0"])
        .is_ok());
}
