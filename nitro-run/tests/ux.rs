//! Interop and serving on the library API: safetensors params (a file
//! built by hand here, byte by byte, imports; every name, dtype and shape
//! mismatch is reported; malformed files are refused), and an export that
//! predicts what the handle predicts, Device values included.

mod common;

use std::collections::BTreeMap;

use common::{dataset, tiny};
use nitro_data::Dataset;
use nitro_run::safetensors::{self, Mismatch, SafetensorsError};
use nitro_run::{Exported, Nitro};

fn quiet() {
    nitro_run::set_config_report(false);
}

/// A safetensors file from (name, dtype, shape, little-endian bytes),
/// written without nitro's writer: length, JSON header, data.
fn hand_built(tensors: &[(&str, &str, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let mut header = String::from("{\"__metadata__\":{\"format\":\"pt\"}");
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let shape: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        header += &format!(
            ",\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
            shape.join(","),
            data.len(),
            data.len() + bytes.len()
        );
        data.extend_from_slice(bytes);
    }
    header.push('}');
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend_from_slice(&data);
    file
}

fn f32_bytes(values: impl IntoIterator<Item = f32>) -> Vec<u8> {
    values.into_iter().flat_map(f32::to_le_bytes).collect()
}

#[test]
fn params_round_trip_through_safetensors() {
    quiet();
    let d = tempfile::tempdir().unwrap();
    let mut trained = Nitro::new(tiny(&d.path().join("a"))).unwrap();
    trained.train().unwrap();
    let path = d.path().join("params.safetensors");
    trained.save_safetensors(&path).unwrap();

    let file = safetensors::read(&path).unwrap();
    assert_eq!(file.tensors, trained.params());
    assert_eq!(file.metadata["nitro.experiment"], "Tiny");

    let mut fresh = Nitro::new(tiny(&d.path().join("b"))).unwrap();
    assert_ne!(fresh.params(), trained.params());
    fresh.load_safetensors(&path).unwrap();
    assert_eq!(fresh.params(), trained.params());
    let batch = dataset(7, 5)
        .gather(&(0..7).collect::<Vec<_>>(), &["x"])
        .unwrap();
    assert_eq!(
        fresh.predict(&batch).unwrap(),
        trained.predict(&batch).unwrap()
    );
}

#[test]
fn a_hand_built_file_imports_by_name() {
    quiet();
    let d = tempfile::tempdir().unwrap();
    let mut n = Nitro::new(tiny(d.path())).unwrap();
    let params = n.params();
    let mut tensors = Vec::new();
    let mut expected = BTreeMap::new();
    for (k, (name, a)) in params.iter().enumerate() {
        let values: Vec<f32> = (0..a.to_f32_vec().len())
            .map(|i| (k * 1000 + i) as f32 * 0.001)
            .collect();
        tensors.push((
            name.as_str(),
            "F32",
            a.shape().to_vec(),
            f32_bytes(values.clone()),
        ));
        expected.insert(name.clone(), values);
    }
    let path = d.path().join("hand.safetensors");
    std::fs::write(&path, hand_built(&tensors)).unwrap();
    n.load_safetensors(&path).unwrap();
    for (name, a) in n.params() {
        assert_eq!(a.to_f32_vec(), expected[&name], "{name}");
    }
}

#[test]
fn every_mismatch_is_reported_and_nothing_is_loaded() {
    quiet();
    let d = tempfile::tempdir().unwrap();
    let mut n = Nitro::new(tiny(d.path())).unwrap();
    let before = n.params();
    let names: Vec<&String> = before.keys().collect();
    let shape = |i: usize| before[names[i]].shape().to_vec();
    let numel = |i: usize| shape(i).iter().product::<usize>();
    // names[0]: fine; names[1]: f64; names[2]: a transposed shape;
    // names[3]: missing; plus a tensor the model does not have.
    let mut wrong = shape(2);
    wrong.reverse();
    if wrong == shape(2) {
        wrong = vec![numel(2), 1];
    }
    let tensors = vec![
        (
            names[0].as_str(),
            "F32",
            shape(0),
            f32_bytes(vec![0.0; numel(0)]),
        ),
        (names[1].as_str(), "F64", shape(1), vec![0u8; 8 * numel(1)]),
        (
            names[2].as_str(),
            "F32",
            wrong.clone(),
            f32_bytes(vec![0.0; numel(2)]),
        ),
        ("head.extra", "F32", vec![2], f32_bytes([1.0, 2.0])),
    ];
    let path = d.path().join("bad.safetensors");
    std::fs::write(&path, hand_built(&tensors)).unwrap();
    let err = n.load_safetensors(&path).unwrap_err();
    let SafetensorsError::Mismatch { mismatches, .. } = &err else {
        panic!("expected a mismatch error, got {err}");
    };
    let expected = vec![
        Mismatch::Dtype {
            name: names[1].clone(),
            expected: "F32".into(),
            found: "F64".into(),
        },
        Mismatch::Shape {
            name: names[2].clone(),
            expected: shape(2),
            found: wrong,
        },
        Mismatch::Missing {
            name: names[3].clone(),
        },
        Mismatch::Unexpected {
            name: "head.extra".into(),
        },
    ];
    assert_eq!(mismatches, &expected);
    let text = err.to_string();
    assert!(text.contains("4 mismatches"), "{text}");
    for name in [names[1], names[2], names[3]] {
        assert!(text.contains(name.as_str()), "{name} missing from: {text}");
    }
    assert_eq!(n.params(), before, "a failed import changed the params");
}

#[test]
fn malformed_files_are_refused_with_a_reason() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("x.safetensors");
    let check = |bytes: Vec<u8>, needle: &str| {
        std::fs::write(&path, bytes).unwrap();
        let err = safetensors::read(&path).unwrap_err().to_string();
        assert!(err.contains(needle), "`{needle}` missing from: {err}");
    };
    check(vec![1, 2, 3], "shorter than the 8-byte header length");
    check(u64::MAX.to_le_bytes().to_vec(), "does not fit");
    let good = hand_built(&[("a", "F32", vec![2], f32_bytes([1.0, 2.0]))]);
    check(good[..good.len() - 1].to_vec(), "do not hold");
    let mut extra = good.clone();
    extra.push(0);
    check(extra, "after the last tensor");
    check(hand_built(&[("a", "F8_E4M3", vec![1], vec![0])]), "F8_E4M3");
    let mut overlap = hand_built(&[
        ("a", "F32", vec![1], f32_bytes([1.0])),
        ("b", "F32", vec![1], f32_bytes([2.0])),
    ]);
    // Point `b` at `a`'s bytes: an overlap, and 4 bytes nothing covers.
    let at = overlap.windows(5).position(|w| w == b"[4,8]").unwrap();
    overlap[at..at + 5].copy_from_slice(b"[0,4]");
    check(overlap, "gap or an overlap");
}

#[test]
fn export_matches_predict_with_device_values_and_padding() {
    quiet();
    let d = tempfile::tempdir().unwrap();
    let mut n = Nitro::new(tiny(d.path())).unwrap();
    n.train().unwrap();
    n.set_device("temperature", 2.5f32).unwrap();
    let rows = 11; // width 4: two full batches and a short one
    let batch = dataset(rows, 8)
        .gather(&(0..rows).collect::<Vec<_>>(), &["x", "y", "unused"])
        .unwrap();
    let expected = n.predict(&batch).unwrap();
    let path = d.path().join("tiny.nexp");
    n.export(&path).unwrap();
    let model = Exported::load(&path).unwrap();
    assert_eq!(model.inputs().len(), 1, "only forward's fields are inputs");
    assert_eq!(model.inputs()[0].0, "x");
    assert_eq!(model.predict(&batch).unwrap(), expected);

    // On a GPU (feature `cuda` and a driver): the same outputs, to float
    // tolerance; without the feature, an error that names it.
    match Exported::load_on(&path, nitro_graph::Device::Cuda(0)) {
        Ok(gpu) => {
            let got = gpu.predict(&batch).unwrap()["output"].to_f32_vec();
            let want = expected["output"].to_f32_vec();
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                    "cuda {g} vs cpu {w}"
                );
            }
        }
        Err(e) if cfg!(feature = "cuda") => eprintln!("skipping the CUDA export check: {e}"),
        Err(e) => {
            let err = e.to_string();
            assert!(err.contains("cuda") && err.contains("feature"), "{err}");
        }
    }

    // Not an export: a checkpoint is refused by name.
    let ckpt = n.resume().unwrap().expect("train saved one");
    let err = Exported::load(&ckpt).unwrap_err().to_string();
    assert!(err.contains("not a nitro export"), "{err}");
}
