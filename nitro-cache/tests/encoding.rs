//! The canonical encoding: pinned bytes, a golden key, type tags, refusal of
//! unordered maps.

use std::collections::{BTreeMap, HashMap};

use nitro_cache::{Category, EncodeError, KeyBuilder, KeyError};
use serde::Serialize;

#[derive(Serialize)]
enum Optimizer {
    Adam {
        lr: f64,
        betas: (f64, f64),
    },
    #[allow(dead_code)]
    Sgd(f32),
}

fn golden_key() -> nitro_cache::Key {
    KeyBuilder::new()
        .part("program", "train_step")
        .part("experiment", "Mnist")
        .graph_const("width", &128usize)
        .graph_const("dropout", &0.1f64)
        .graph_const("layers", &vec![512u32, 512, 10])
        .graph_const("activation", &Some('r'))
        .input_sig("img", "f32[256,784]")
        .structure("params", &vec![("dense1.weight", vec![784u64, 512])])
        .config(
            "optimizer",
            &Optimizer::Adam {
                lr: 1e-3,
                betas: (0.9, 0.999),
            },
        )
        .env("backend", "cpu")
        .finish()
        .unwrap()
}

/// Pins the encoding across processes, platforms and releases: if this hex
/// changes, every persisted key changes, so bump `FORMAT_VERSION` on purpose.
#[test]
fn golden_key_hex_is_pinned() {
    assert_eq!(
        golden_key().hex(),
        "21ba42560deff769016663ac801f77b38dec350b25a5f7bcfeb11d4517d8cdb2"
    );
    assert_eq!(golden_key().to_string(), golden_key().hex()[..16]);
}

/// The exact stream of a one-part key, byte by byte, as the docs describe it.
#[test]
fn stream_layout_is_as_documented() {
    let key = KeyBuilder::new()
        .graph_const("w", &300u16)
        .finish()
        .unwrap();
    let mut expected = b"nitro-cache key v1\n".to_vec();
    expected.push(2); // category: graph_const
    expected.extend_from_slice(&1u64.to_le_bytes()); // name length
    expected.extend_from_slice(b"w");
    expected.extend_from_slice(&3u64.to_le_bytes()); // value length
    expected.extend_from_slice(&[0x11, 0x2c, 0x01]); // u16 tag, 300 little-endian
    assert_eq!(key.stream(), &expected[..]);
    assert_eq!(key.digest(), blake3::hash(&expected).as_bytes());
}

fn digest_of<T: Serialize + ?Sized>(value: &T) -> [u8; 32] {
    *KeyBuilder::new()
        .graph_const("v", value)
        .finish()
        .unwrap()
        .digest()
}

#[test]
fn types_are_tagged() {
    assert_ne!(digest_of(&5u8), digest_of(&5u64));
    assert_ne!(digest_of(&5u32), digest_of(&5i32));
    assert_ne!(digest_of(&()), digest_of(&None::<u8>));
    assert_ne!(digest_of(&0.0f64), digest_of(&-0.0f64));
    assert_ne!(digest_of(&"1"), digest_of(&'1'));
    assert_ne!(digest_of(&vec![1u8, 2]), digest_of(&(1u8, 2u8)));
}

#[test]
fn a_vec_hashes_by_its_elements() {
    let a = vec![1usize, 2, 3];
    let b: Vec<usize> = (1..=3).collect();
    assert_eq!(digest_of(&a), digest_of(&b));
    assert_eq!(digest_of(&a), digest_of(&[1usize, 2, 3][..]));
    assert_ne!(digest_of(&a), digest_of(&vec![1usize, 2, 4]));
}

#[test]
fn ordered_maps_hash_by_content() {
    let mut a = BTreeMap::new();
    let mut b = BTreeMap::new();
    for k in [256u32, 1, 70000] {
        a.insert(k, k * 2);
    }
    for k in [70000u32, 256, 1] {
        b.insert(k, k * 2);
    }
    assert_eq!(digest_of(&a), digest_of(&b));
    let mut names = BTreeMap::new();
    names.insert("beta".to_owned(), 1);
    names.insert("alpha".to_owned(), 2);
    names.insert("alphabet".to_owned(), 3);
    digest_of(&names);
}

#[test]
fn unordered_maps_are_refused() {
    let map: HashMap<String, u32> = (0..32).map(|i| (format!("field{i}"), i)).collect();
    let error = KeyBuilder::new()
        .part("program", "train_step")
        .graph_const("sizes", &map)
        .finish()
        .unwrap_err();
    match &error {
        KeyError::NotCanonical {
            category,
            name,
            source: EncodeError::UnorderedMap { .. },
        } => {
            assert_eq!((*category, name.as_str()), (Category::GraphConst, "sizes"));
        }
        other => panic!("expected an unordered-map refusal, got {other:?}"),
    }
    let message = error.to_string();
    assert!(message.starts_with("key part graph_const `sizes` cannot be hashed by content"));
    assert!(message.contains("Use a BTreeMap"), "{message}");
}

#[test]
fn a_duplicate_part_is_refused() {
    let error = KeyBuilder::new()
        .graph_const("width", &1u8)
        .input_sig("width", "f32[]")
        .graph_const("width", &2u8)
        .finish()
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "key part graph_const `width` was added twice; give each part a distinct name"
    );
}

#[test]
fn parts_render_for_humans() {
    let key = golden_key();
    let rendered: Vec<String> = key.parts().map(|p| format!("{p:?}")).collect();
    assert_eq!(
        rendered,
        [
            "part `program` train_step",
            "part `experiment` Mnist",
            "graph_const `width` 128",
            "graph_const `dropout` 0.1",
            "graph_const `layers` [512, 512, 10]",
            "graph_const `activation` Some('r')",
            "input `img` f32[256,784]",
            "structure `params` [(\"dense1.weight\", [784, 512])]",
            "config `optimizer` Adam { lr: 0.001, betas: (0.9, 0.999) }",
            "env `backend` cpu",
        ]
    );
}

#[test]
fn skipped_fields_do_not_enter_the_key() {
    #[derive(Serialize)]
    struct Cfg {
        width: usize,
        #[serde(skip)]
        #[allow(dead_code)]
        cache_dir: String,
    }
    let a = Cfg {
        width: 8,
        cache_dir: "/a".into(),
    };
    let b = Cfg {
        width: 8,
        cache_dir: "/b".into(),
    };
    assert_eq!(digest_of(&a), digest_of(&b));
}
