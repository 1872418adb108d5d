//! Property tests of the key invariants, one invariant per test.

use nitro_cache::{Category, Key, KeyBuilder, Unkeyed};
use proptest::prelude::*;
use proptest::sample::Index;
use serde::Serialize;
use std::collections::HashSet;

/// A part value of one of several shapes. Floats are held by their bits so
/// that `Debug` (used to deduplicate lists) is exact.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum PartValue {
    Unsigned(u64),
    Signed(i32),
    Float(u64),
    Text(String),
    List(Vec<u32>),
    Pair(u8, bool),
    Maybe(Option<u16>),
}

type PartList = Vec<(Category, String, PartValue)>;

fn value() -> impl Strategy<Value = PartValue> {
    prop_oneof![
        (0u64..4).prop_map(PartValue::Unsigned),
        any::<u64>().prop_map(PartValue::Unsigned),
        (-2i32..2).prop_map(PartValue::Signed),
        any::<f64>().prop_map(|x| PartValue::Float(x.to_bits())),
        "[ab]{0,3}".prop_map(PartValue::Text),
        prop::collection::vec(0u32..3, 0..4).prop_map(PartValue::List),
        (0u8..2, any::<bool>()).prop_map(|(a, b)| PartValue::Pair(a, b)),
        prop::option::of(0u16..3).prop_map(PartValue::Maybe),
    ]
}

fn category() -> impl Strategy<Value = Category> {
    prop_oneof![
        Just(Category::Part),
        Just(Category::GraphConst),
        Just(Category::Input),
        Just(Category::Structure),
        Just(Category::Config),
        Just(Category::Env),
    ]
}

/// Lists with distinct (category, name) slots, names from a tiny alphabet so
/// that framing mistakes (a byte moving from a name to a value) would show.
fn part_list(max: usize) -> impl Strategy<Value = PartList> {
    prop::collection::vec((category(), "[ab]{0,2}", value()), 0..max).prop_map(|parts| {
        let mut seen = HashSet::new();
        parts
            .into_iter()
            .filter(|(c, n, _)| seen.insert((*c, n.clone())))
            .collect()
    })
}

fn add(builder: KeyBuilder, category: Category, name: &str, value: &PartValue) -> KeyBuilder {
    match value {
        PartValue::Unsigned(v) => builder.with(category, name, v),
        PartValue::Signed(v) => builder.with(category, name, v),
        PartValue::Float(bits) => builder.with(category, name, &f64::from_bits(*bits)),
        PartValue::Text(v) => builder.with(category, name, v),
        PartValue::List(v) => builder.with(category, name, v),
        PartValue::Pair(a, b) => builder.with(category, name, &(a, b)),
        PartValue::Maybe(v) => builder.with(category, name, v),
    }
}

fn key_of(parts: &PartList) -> Key {
    parts
        .iter()
        .fold(KeyBuilder::new(), |b, (c, n, v)| add(b, *c, n, v))
        .finish()
        .expect("distinct slots, canonical values")
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn equal_content_gives_equal_keys(parts in part_list(8)) {
        // Rebuilt from a deep copy: nothing about the allocation enters the key.
        let copy: PartList = parts.iter().map(|(c, n, v)| (*c, n.clone(), v.clone())).collect();
        prop_assert_eq!(key_of(&parts), key_of(&copy));
        prop_assert_eq!(key_of(&parts).hex(), key_of(&copy).hex());
    }

    #[test]
    fn changing_any_one_value_changes_the_key(
        parts in part_list(8).prop_filter("non-empty", |p| !p.is_empty()),
        at in any::<Index>(),
        new in value(),
    ) {
        let i = at.index(parts.len());
        prop_assume!(parts[i].2 != new);
        let mut changed = parts.clone();
        changed[i].2 = new;
        prop_assert_ne!(key_of(&parts), key_of(&changed));
    }

    #[test]
    fn reordering_parts_changes_the_key(
        parts in part_list(8).prop_filter("two parts", |p| p.len() >= 2),
        a in any::<Index>(),
        b in any::<Index>(),
    ) {
        let (i, j) = (a.index(parts.len()), b.index(parts.len()));
        prop_assume!(i != j);
        let mut swapped = parts.clone();
        swapped.swap(i, j);
        prop_assert_ne!(key_of(&parts), key_of(&swapped));
    }

    #[test]
    fn renaming_a_part_changes_the_key(
        parts in part_list(8).prop_filter("non-empty", |p| !p.is_empty()),
        at in any::<Index>(),
        new_name in "[abc]{0,3}",
    ) {
        let i = at.index(parts.len());
        let slot = (parts[i].0, new_name.clone());
        prop_assume!(!parts.iter().any(|(c, n, _)| (*c, n.clone()) == slot));
        let mut renamed = parts.clone();
        renamed[i].1 = new_name;
        prop_assert_ne!(key_of(&parts), key_of(&renamed));
    }

    #[test]
    fn recategorising_a_part_changes_the_key(
        parts in part_list(8).prop_filter("non-empty", |p| !p.is_empty()),
        at in any::<Index>(),
        new_category in category(),
    ) {
        let i = at.index(parts.len());
        let slot = (new_category, parts[i].1.clone());
        prop_assume!(!parts.iter().any(|(c, n, _)| (*c, n.clone()) == slot));
        let mut moved = parts.clone();
        moved[i].0 = new_category;
        prop_assert_ne!(key_of(&parts), key_of(&moved));
    }

    #[test]
    fn a_device_value_cannot_influence_the_key(
        width in 1usize..4096,
        depth in 1u32..16,
        smoothing_a in any::<f32>(),
        smoothing_b in any::<f32>(),
        lr_a in any::<f64>(),
        lr_b in any::<f64>(),
    ) {
        /// An experiment-like config: two GraphConsts, two Device values.
        #[derive(Serialize)]
        struct Exp {
            width: usize,
            smoothing: Unkeyed<f32>,
            depth: u32,
            lr: Unkeyed<f64>,
        }
        let key = |smoothing, lr| {
            KeyBuilder::new()
                .graph_const("exp", &Exp { width, smoothing: Unkeyed(smoothing), depth, lr: Unkeyed(lr) })
                .input_sig("smoothing", "f32[]")
                .finish()
                .unwrap()
        };
        prop_assert_eq!(key(smoothing_a, lr_a), key(smoothing_b, lr_b));
    }
}

proptest! {
    #![proptest_config(config(6))]

    #[test]
    fn no_two_distinct_part_lists_collide(lists in prop::collection::vec(part_list(5), 2000)) {
        let distinct: HashSet<String> = lists.iter().map(|l| format!("{l:?}")).collect();
        let keys: HashSet<[u8; 32]> = lists.iter().map(|l| *key_of(l).digest()).collect();
        prop_assert_eq!(keys.len(), distinct.len());
    }
}

/// Every list of up to three parts over a tiny alphabet, where a byte moving
/// between a name and a value, or between parts, is the only difference.
#[test]
fn exhaustive_small_lists_never_collide() {
    let names = ["", "a", "aa"];
    let values = ["", "a", "aa"];
    let mut parts = Vec::new();
    for category in [Category::Part, Category::Env] {
        for name in names {
            for value in values {
                parts.push((category, name, value));
            }
        }
    }
    let mut lists: Vec<Vec<(Category, &str, &str)>> = vec![vec![]];
    for len in 1..=3 {
        let previous: Vec<_> = lists
            .iter()
            .filter(|l| l.len() == len - 1)
            .cloned()
            .collect();
        for list in previous {
            for part in &parts {
                if !list.iter().any(|(c, n, _)| (*c, *n) == (part.0, part.1)) {
                    let mut longer = list.clone();
                    longer.push(*part);
                    lists.push(longer);
                }
            }
        }
    }
    let keys: HashSet<[u8; 32]> = lists
        .iter()
        .map(|list| {
            let builder = list
                .iter()
                .fold(KeyBuilder::new(), |b, (c, n, v)| b.with(*c, n, *v));
            *builder.finish().unwrap().digest()
        })
        .collect();
    assert_eq!(lists.len(), 1 + 18 + 18 * 15 + 18 * 15 * 12);
    assert_eq!(keys.len(), lists.len());
}
