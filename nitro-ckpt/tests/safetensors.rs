//! The safetensors codec: every dtype round-trips bit for bit, a damaged or
//! hostile file is an error (never a panic or a huge allocation), and an
//! import that does not fit lists every difference.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use nitro_ckpt::safetensors::{compare, decode, encode, Mismatch, SafetensorsError};
use nitro_device::{DType, HostArray};
use proptest::prelude::*;

fn tensors() -> impl Strategy<Value = BTreeMap<String, HostArray>> {
    let one = (common::dtype(), proptest::collection::vec(0usize..4, 0..3)).prop_flat_map(
        |(dtype, shape)| {
            let n = shape.iter().product::<usize>() * dtype.size_of();
            proptest::collection::vec(any::<u8>(), n).prop_map(move |mut bytes| {
                if dtype == DType::Bool {
                    bytes.iter_mut().for_each(|b| *b &= 1);
                }
                HostArray::from_le_bytes(dtype, &shape, &bytes).unwrap()
            })
        },
    );
    proptest::collection::btree_map("[a-z.]{1,8}", one, 0..5)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn every_dtype_round_trips(t in tensors(), meta in proptest::collection::btree_map("[a-z]{1,4}", ".{0,6}", 0..3)) {
        let bytes = encode(&t, &meta);
        let back = decode(Path::new("t.safetensors"), &bytes).unwrap();
        prop_assert_eq!(back.metadata, meta);
        prop_assert_eq!(back.tensors.len(), t.len());
        for (name, a) in &t {
            let got = &back.tensors[name];
            prop_assert_eq!(got.spec(), a.spec());
            prop_assert_eq!(got.data().to_le_bytes(), a.data().to_le_bytes());
        }
    }

    #[test]
    fn damaged_files_are_errors_not_panics(t in tensors(), cut in any::<usize>(), at in any::<usize>(), x in 1u8..=255) {
        let bytes = encode(&t, &BTreeMap::new());
        let cut = cut % (bytes.len() + 1);
        if cut < bytes.len() {
            prop_assert!(decode(Path::new("t"), &bytes[..cut]).is_err());
        }
        let mut flipped = bytes.clone();
        let i = at % flipped.len();
        flipped[i] ^= x;
        // Any outcome but a panic: a flip inside the data is still a file.
        let _ = decode(Path::new("t"), &flipped);
    }
}

#[test]
fn a_hostile_header_length_allocates_nothing() {
    let mut bytes = u64::MAX.to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}");
    let err = decode(Path::new("h"), &bytes).unwrap_err();
    assert!(matches!(err, SafetensorsError::Format { .. }), "{err}");
}

#[test]
fn gaps_overlaps_and_wrong_sizes_are_refused() {
    let header = |json: &str, data: usize| {
        let mut b = (json.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(json.as_bytes());
        b.resize(b.len() + data, 0u8);
        b
    };
    let cases = [
        (
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#,
            4,
            "do not hold",
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
            8,
            "gap",
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
            8,
            "after the last",
        ),
        (
            r#"{"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}}"#,
            1,
            "F8_E4M3",
        ),
        (r#"[1, 2]"#, 0, "JSON object"),
    ];
    for (json, data, needle) in cases {
        let err = decode(Path::new("x"), &header(json, data))
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "{json}: {err}");
    }
}

#[test]
fn compare_lists_every_difference() {
    let a = |dtype: DType, shape: &[usize]| {
        HostArray::zeros(&nitro_device::TensorSpec::new(dtype, shape))
    };
    let expected = BTreeMap::from([
        ("w".to_string(), a(DType::F32, &[2, 2])),
        ("b".to_string(), a(DType::F32, &[2])),
        ("gone".to_string(), a(DType::F32, &[1])),
    ]);
    let found = BTreeMap::from([
        ("w".to_string(), a(DType::BF16, &[2, 3])),
        ("b".to_string(), a(DType::F32, &[2])),
        ("extra".to_string(), a(DType::U8, &[1])),
    ]);
    assert_eq!(
        compare(&expected, &found),
        vec![
            Mismatch::Missing {
                name: "gone".into()
            },
            Mismatch::Dtype {
                name: "w".into(),
                expected: "F32".into(),
                found: "BF16".into()
            },
            Mismatch::Shape {
                name: "w".into(),
                expected: vec![2, 2],
                found: vec![2, 3]
            },
            Mismatch::Unexpected {
                name: "extra".into()
            },
        ]
    );
}
