//! Arbitrary tensor sets and metadata survive save/load bit-exact, for every
//! dtype, through a file, through memory, and through the lazy reader.

mod common;

use nitro_ckpt::{decode, encode, load, save, Checkpoint, DType, Reader, TensorEntry};
use proptest::prelude::*;

/// Equality that treats floats by their bits: the metadata's encoding is
/// compared, so NaN payloads and -0.0 count.
fn assert_bit_exact(a: &Checkpoint, b: &Checkpoint) {
    assert_eq!(a.trees, b.trees, "tensors differ");
    let enc = |c: &Checkpoint| {
        let mut out = Vec::new();
        ciborium::ser::into_writer(&serde_meta(c), &mut out).unwrap();
        out
    };
    assert_eq!(enc(a), enc(b), "metadata differs");
}

fn serde_meta(c: &Checkpoint) -> ciborium::Value {
    // Round through ciborium::Value so floats are compared by encoding.
    ciborium::Value::serialized(&c.meta).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn memory_round_trip_is_bit_exact(ckpt in common::checkpoint()) {
        let bytes = encode(&ckpt).unwrap();
        let back = decode(&bytes).unwrap();
        assert_bit_exact(&ckpt, &back);
        // Encoding is deterministic: the same checkpoint, the same bytes.
        prop_assert_eq!(encode(&back).unwrap(), bytes);
    }

    #[test]
    fn lazy_reader_returns_each_tensor(ckpt in common::checkpoint()) {
        let bytes = encode(&ckpt).unwrap();
        let mut reader = Reader::from_bytes(&bytes).unwrap();
        for (tree, tensors) in &ckpt.trees {
            for t in tensors {
                let name = format!("{tree}/{}", t.path);
                prop_assert_eq!(&reader.tensor(&name).unwrap(), t);
                let info = reader.info(&name).unwrap();
                prop_assert_eq!(info.shape, t.shape.clone());
            }
        }
    }
}

#[test]
fn file_round_trip_every_dtype() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("all.nckpt");
    let mut ckpt = common::sample(3, 10);
    for dtype in DType::ALL {
        let bytes: Vec<u8> = (0..6 * dtype.size_of())
            .map(|i| (i * 37 + 1) as u8)
            .collect();
        ckpt.push(
            "all",
            TensorEntry::new(dtype.name(), dtype, vec![2, 3], bytes).unwrap(),
        );
    }
    save(&path, &ckpt).unwrap();
    let back = load(&path).unwrap();
    assert_bit_exact(&ckpt, &back);
}

#[test]
fn typed_accessors_round_trip() {
    let t = TensorEntry::from_f32("w", vec![3], &[1.5, f32::NAN, -0.0]).unwrap();
    let v = t.to_f32().unwrap();
    assert_eq!(v[0], 1.5);
    assert!(v[1].is_nan());
    assert_eq!(v[2].to_bits(), (-0.0f32).to_bits());
    assert!(t.to_i32().is_err());
    let h: Vec<u16> = [1.0f32, -2.5]
        .iter()
        .map(|&x| half::bf16::from_f32(x).to_bits())
        .collect();
    let b = TensorEntry::from_bits16("h", DType::BF16, vec![2], &h).unwrap();
    assert_eq!(b.bytes.len(), 4);
    assert!(TensorEntry::from_bits16("h", DType::I32, vec![2], &h).is_err());
    assert_eq!(
        TensorEntry::from_bool("m", vec![2], &[true, false])
            .unwrap()
            .bytes,
        vec![1, 0]
    );
    assert!(TensorEntry::new("x", DType::F64, vec![2], vec![0; 15]).is_err());
}
