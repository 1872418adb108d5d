//! Strategies and builders shared by the behaviour tests.
#![allow(dead_code)]

use std::collections::BTreeMap;

use nitro_ckpt::{Checkpoint, ConfigValue, DType, Metadata, MetricsRow, TensorEntry, Value};
use proptest::prelude::*;

pub fn dtype() -> impl Strategy<Value = DType> {
    proptest::sample::select(DType::ALL.to_vec())
}

/// A tensor of any dtype with arbitrary bytes (NaN payloads, subnormals,
/// non-0/1 bools: all must survive bit-exact).
pub fn tensor(path: String) -> impl Strategy<Value = TensorEntry> {
    (dtype(), proptest::collection::vec(0u64..4, 0..4)).prop_flat_map(move |(dtype, shape)| {
        let n = shape.iter().product::<u64>() as usize * dtype.size_of();
        let path = path.clone();
        proptest::collection::vec(any::<u8>(), n).prop_map(move |bytes| {
            TensorEntry::new(path.clone(), dtype, shape.clone(), bytes).unwrap()
        })
    })
}

pub fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::Int),
        any::<u64>().prop_map(Value::UInt),
        any::<f64>().prop_map(Value::Float),
        ".{0,8}".prop_map(Value::Text),
        proptest::collection::vec(any::<u8>(), 0..16).prop_map(Value::Bytes),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::List),
            proptest::collection::btree_map("[a-z]{1,4}", inner, 0..4).prop_map(Value::Map),
        ]
    })
}

pub fn metadata() -> impl Strategy<Value = Metadata> {
    let config = proptest::collection::vec(
        ("[a-z_]{1,8}", "graph_const|device|host", value()).prop_map(|(name, category, value)| {
            ConfigValue {
                name,
                category,
                value,
            }
        }),
        0..4,
    );
    let rows = proptest::collection::vec(
        (
            any::<u64>(),
            proptest::collection::btree_map("[a-z]{1,6}", any::<f64>(), 0..3),
        )
            .prop_map(|(step, values)| MetricsRow { step, values }),
        0..4,
    );
    (
        (
            ".{0,12}",
            proptest::option::of("[a-z]{0,6}"),
            config,
            ".{0,16}",
        ),
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()),
        proptest::collection::btree_map(
            "[a-z]{1,6}",
            proptest::collection::vec(any::<u8>(), 0..40),
            0..3,
        ),
        proptest::collection::btree_map("[a-z]{1,6}", value(), 0..3),
        rows,
        any::<f64>(),
        proptest::collection::btree_map(".{0,6}", value(), 0..3),
    )
        .prop_map(
            |(
                (experiment, preset, config, fingerprint),
                (step, epoch, pos, seed),
                rng,
                schedule,
                rows,
                wall,
                user,
            )| Metadata {
                experiment,
                preset,
                config,
                fingerprint,
                step,
                epoch,
                position_in_epoch: pos,
                data_seed: seed,
                rng_states: rng,
                schedule,
                metrics_history: rows,
                wall_time_s: wall,
                user,
            },
        )
}

pub fn checkpoint() -> impl Strategy<Value = Checkpoint> {
    let tree = proptest::collection::btree_set("[a-z.]{1,6}", 0..5)
        .prop_flat_map(|paths| paths.into_iter().map(tensor).collect::<Vec<_>>());
    (
        metadata(),
        proptest::collection::btree_map("[a-z_]{1,8}", tree, 0..4),
    )
        .prop_map(|(meta, trees)| Checkpoint { meta, trees })
}

/// A small deterministic checkpoint whose contents follow from `step`.
pub fn sample(step: u64, floats: usize) -> Checkpoint {
    let w: Vec<f32> = (0..floats)
        .map(|i| (i as u64 * 31 + step) as f32 * 0.5)
        .collect();
    let mut c = Checkpoint::new(Metadata {
        experiment: "Sample".into(),
        fingerprint: "fp-1".into(),
        step,
        rng_states: BTreeMap::from([("data".into(), step.to_le_bytes().to_vec())]),
        ..Metadata::default()
    });
    c.push(
        "params",
        TensorEntry::from_f32("w", vec![floats as u64], &w).unwrap(),
    );
    c.push(
        "opt_state",
        TensorEntry::from_i64("count", vec![], &[step as i64]).unwrap(),
    );
    c
}

/// A checkpoint a `Store` wrote, loaded, without the record the store adds
/// (`STORE_METRICS`): equal to what was saved.
pub fn load_stored(path: &std::path::Path) -> nitro_ckpt::Result<Checkpoint> {
    let mut ckpt = nitro_ckpt::load(path)?;
    ckpt.meta.user.remove(nitro_ckpt::STORE_METRICS);
    Ok(ckpt)
}
