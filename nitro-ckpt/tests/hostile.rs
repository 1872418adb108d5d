//! Damaged and hostile files give errors, never panics: truncations, bit
//! flips, overwritten lengths, garbage indexes (resealed so they pass the
//! checksum and reach the decoder), deep nesting, absurd lengths.

mod common;

use nitro_ckpt::format::{reseal, FOOTER_LEN};
use nitro_ckpt::{decode, encode, Checkpoint, Error, Metadata, Reader, Value};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Mutation {
    Truncate(usize),
    Flip(usize, u8),
    Word(usize, u64),
    Splice(usize, Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), 1u8..=255).prop_map(|(i, x)| Mutation::Flip(i, x)),
        (any::<usize>(), any::<u64>()).prop_map(|(i, w)| Mutation::Word(i, w)),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(i, b)| Mutation::Splice(i, b)),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    let n = bytes.len();
    if n == 0 {
        // An earlier mutation truncated everything: only a splice can act.
        if let Mutation::Splice(_, b) = m {
            bytes.extend_from_slice(b);
        }
        return;
    }
    match m {
        Mutation::Truncate(i) => bytes.truncate(i % n),
        Mutation::Flip(i, x) => bytes[i % n] ^= x,
        Mutation::Word(i, w) => {
            let at = i % n.saturating_sub(8).max(1);
            let end = (at + 8).min(n);
            bytes[at..end].copy_from_slice(&w.to_le_bytes()[..end - at]);
        }
        Mutation::Splice(i, b) => {
            let at = i % n;
            bytes.splice(at..at, b.iter().copied());
        }
    }
}

/// Decodes every way the crate offers; any result is fine, a panic is not.
fn decode_all_ways(bytes: &[u8]) -> Result<Checkpoint, Error> {
    if let Ok(mut r) = Reader::from_bytes(bytes) {
        for name in r.names() {
            let _ = r.tensor(&name);
        }
    }
    decode(bytes)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn mutated_files_never_panic(
        ckpt in common::checkpoint(),
        muts in proptest::collection::vec(mutation(), 1..4),
        resealed in any::<bool>(),
    ) {
        let mut bytes = encode(&ckpt).unwrap();
        let original = bytes.clone();
        for m in &muts {
            apply(&mut bytes, m);
        }
        if resealed {
            reseal(&mut bytes);
        }
        let result = decode_all_ways(&bytes);
        if bytes != original && !resealed {
            // Without resealing, every change is caught by a check.
            prop_assert!(result.is_err(), "mutation {:?} went unnoticed", muts);
        }
    }

    #[test]
    fn every_truncation_is_an_error(ckpt in common::checkpoint(), cut in any::<prop::sample::Index>()) {
        let bytes = encode(&ckpt).unwrap();
        let at = cut.index(bytes.len());
        prop_assert!(decode(&bytes[..at]).is_err());
    }
}

fn nested(depth: usize) -> Value {
    (0..depth).fold(Value::Int(1), |v, _| Value::List(vec![v]))
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let mut c = Checkpoint::default();
    c.meta.user.insert("deep".into(), nested(5000));
    let bytes = encode(&c).unwrap();
    let err = decode(&bytes).unwrap_err().to_string();
    assert!(err.contains("index"), "{err}");
    // Moderate nesting is fine.
    let mut ok = Checkpoint::default();
    ok.meta.user.insert("deep".into(), nested(20));
    assert_eq!(decode(&encode(&ok).unwrap()).unwrap(), ok);
}

/// A file whose index is `index` (any CBOR), with a valid checksum.
fn with_index(index: &[u8]) -> Vec<u8> {
    let mut bytes = b"NITROCKP\x02\0\0\0\0\0\0\0".to_vec();
    bytes.extend_from_slice(index);
    bytes.extend_from_slice(&16u64.to_le_bytes());
    bytes.extend_from_slice(&(index.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&[0; 32]);
    bytes.extend_from_slice(b"NCKPEND\0");
    reseal(&mut bytes);
    bytes
}

fn cbor(v: &ciborium::Value) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::ser::into_writer(v, &mut out).unwrap();
    out
}

fn index_with_entry(dtype: &str, shape: Vec<u64>, offset: u64, len: u64) -> Vec<u8> {
    use ciborium::Value as V;
    let entry = V::Map(vec![
        (V::Text("path".into()), V::Text("w".into())),
        (V::Text("dtype".into()), V::Text(dtype.into())),
        (
            V::Text("shape".into()),
            V::Array(shape.into_iter().map(|d| V::Integer(d.into())).collect()),
        ),
        (V::Text("offset".into()), V::Integer(offset.into())),
        (V::Text("len".into()), V::Integer(len.into())),
        (V::Text("blake3".into()), V::Bytes(vec![0; 32])),
    ]);
    let meta = ciborium::Value::serialized(&Metadata::default()).unwrap();
    cbor(&V::Map(vec![
        (V::Text("meta".into()), meta),
        (
            V::Text("trees".into()),
            V::Map(vec![(V::Text("params".into()), V::Array(vec![entry]))]),
        ),
    ]))
}

#[test]
fn absurd_lengths_and_shapes_are_errors() {
    let cases = [
        // 2^60 bytes claimed in a tiny file.
        index_with_entry("u8", vec![1 << 60], 16, 1 << 60),
        // shape product overflows u64.
        index_with_entry("f64", vec![1 << 40, 1 << 40], 16, 0),
        // dtype x shape does not match len.
        index_with_entry("f32", vec![3], 16, 4),
        // unknown dtype.
        index_with_entry("f128", vec![1], 16, 16),
    ];
    for index in cases {
        let err = decode(&with_index(&index)).unwrap_err();
        assert!(matches!(err, Error::Format { .. }), "{err}");
    }
    // A CBOR array header claiming 2^63 elements, with nothing after it.
    let huge = [0x9b, 0x80, 0, 0, 0, 0, 0, 0, 0];
    assert!(decode(&with_index(&huge)).is_err());
    // An index length pointing outside the file.
    let mut bytes = encode(&Checkpoint::default()).unwrap();
    let f = bytes.len() - FOOTER_LEN as usize;
    bytes[f + 8..f + 16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(decode(&bytes).unwrap_err(), Error::Format { .. }));
}

#[test]
fn damage_is_reported_by_file_and_entry() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.nckpt");
    let ckpt = common::sample(1, 64);
    nitro_ckpt::save(&path, &ckpt).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    // The first tensor's bytes start after the 16-byte header and its head.
    bytes[30] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let err = nitro_ckpt::load(&path).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Checksum { .. }), "{msg}");
    assert!(msg.contains("c.nckpt") && msg.contains("params/w"), "{msg}");
    // The undamaged tensor still reads lazily.
    let mut r = Reader::open(&path).unwrap();
    let names: Vec<String> = r.names();
    let ok = names.iter().filter(|n| r.tensor(n).is_ok()).count();
    assert_eq!(ok, names.len() - 1);

    let meta_flip = {
        let mut b = encode(&ckpt).unwrap();
        let n = b.len();
        b[n - FOOTER_LEN as usize - 3] ^= 1;
        b
    };
    let err = decode(&meta_flip).unwrap_err().to_string();
    assert!(err.contains("entry `index`"), "{err}");
}

#[test]
fn wrong_magic_and_short_files() {
    assert!(decode(b"").is_err());
    assert!(decode(&[0u8; 100])
        .unwrap_err()
        .to_string()
        .contains("magic"));
    let mut bytes = encode(&Checkpoint::default()).unwrap();
    let n = bytes.len();
    bytes[n - 1] = b'X';
    assert!(decode(&bytes)
        .unwrap_err()
        .to_string()
        .contains("truncated"));
}
