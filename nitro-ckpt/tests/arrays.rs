//! Host arrays in and out of checkpoints and export containers: every dtype
//! is stored as itself and comes back bit for bit.

mod common;

use nitro_ckpt::export::Export;
use nitro_ckpt::{decode, encode, Checkpoint, Error, Metadata, TensorEntry};
use nitro_device::{DType, HostArray, TensorSpec};
use proptest::prelude::*;

/// An array of any dtype and small shape with arbitrary bits (NaN payloads,
/// negative zeros, subnormals); bools are 0 or 1, the only bool bytes.
fn array() -> impl Strategy<Value = HostArray> {
    (common::dtype(), proptest::collection::vec(0usize..4, 0..4)).prop_flat_map(|(dtype, shape)| {
        let n = shape.iter().product::<usize>() * dtype.size_of();
        proptest::collection::vec(any::<u8>(), n).prop_map(move |mut bytes| {
            if dtype == DType::Bool {
                bytes.iter_mut().for_each(|b| *b &= 1);
            }
            HostArray::from_le_bytes(dtype, &shape, &bytes).unwrap()
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn arrays_survive_a_checkpoint_bit_for_bit(arrays in proptest::collection::vec(array(), 1..6)) {
        let mut ckpt = Checkpoint::new(Metadata::default());
        for (i, a) in arrays.iter().enumerate() {
            ckpt.push("state", TensorEntry::from_array(format!("a{i}"), a).unwrap());
        }
        let back = decode(&encode(&ckpt).unwrap()).unwrap();
        for (i, a) in arrays.iter().enumerate() {
            let got = back.tensor(&format!("state/a{i}")).unwrap().to_array().unwrap();
            prop_assert_eq!(got.spec(), a.spec());
            prop_assert_eq!(got.data().to_le_bytes(), a.data().to_le_bytes());
        }
    }
}

#[test]
fn a_bool_byte_other_than_0_or_1_is_refused() {
    let e = TensorEntry::new("flags", DType::Bool, vec![2], vec![1, 7]).unwrap();
    let err = e.to_array().unwrap_err().to_string();
    assert!(
        err.contains("flags") && err.contains("bool byte 7"),
        "{err}"
    );
}

fn export() -> Export {
    let mut x = Export::new("Tiny", 4, vec![1, 2, 3]);
    x.preset = Some("small".into());
    x.fingerprint = "abc".into();
    x.step = 9;
    x.epoch = 2;
    x.inputs = vec![
        ("x".into(), TensorSpec::f32(&[4])),
        ("mask".into(), TensorSpec::new(DType::Bool, &[])),
    ];
    x.outputs = vec!["logits".into()];
    for (i, dtype) in DType::ALL.into_iter().enumerate() {
        let a = HostArray::new(&[2], vec![1.0f64, 0.0]).unwrap().cast(dtype);
        x.params.insert(format!("p{i}"), a);
    }
    x.state.insert("s".into(), HostArray::scalar_i32(-3));
    x.device
        .insert("temperature".into(), HostArray::scalar_f32(2.5));
    x
}

#[test]
fn an_export_container_round_trips_every_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.nexp");
    let x = export();
    x.save(&path).unwrap();
    assert_eq!(Export::load(&path).unwrap(), x);
}

#[test]
fn a_checkpoint_or_another_version_is_not_an_export() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.nckpt");
    nitro_ckpt::save(&path, &Checkpoint::new(Metadata::default())).unwrap();
    let err = Export::load(&path).unwrap_err();
    assert!(matches!(err, Error::NotExport { .. }), "{err}");
    assert!(err.to_string().contains("not a nitro export"), "{err}");

    let mut ckpt = export().to_checkpoint().unwrap();
    ckpt.meta
        .user
        .insert("version".into(), nitro_ckpt::Value::UInt(99));
    let err = Export::from_checkpoint(&path, &ckpt)
        .unwrap_err()
        .to_string();
    assert!(err.contains("version") && err.contains("99"), "{err}");

    let mut ckpt = export().to_checkpoint().unwrap();
    ckpt.trees.remove("program");
    let err = Export::from_checkpoint(&path, &ckpt)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no program"), "{err}");
}
