//! Unit tests of the checkpoint conversion (dtypes stored as themselves).

use super::*;

/// Every dtype with bits a lossy path changes, through a checkpoint file.
#[test]
fn every_dtype_is_stored_as_itself() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.nckpt");
    let arrays: Vec<Array> = DType::ALL
        .into_iter()
        .map(|dtype| {
            let bytes: Vec<u8> = (0..3 * dtype.size_of())
                .map(|i| {
                    if dtype == DType::Bool {
                        (i % 2) as u8
                    } else {
                        (i * 89 + 201) as u8
                    }
                })
                .collect();
            Array::from_le_bytes(dtype, &[3], &bytes).unwrap()
        })
        .collect();
    let mut ckpt = Checkpoint::new(Metadata::default());
    for (i, a) in arrays.iter().enumerate() {
        ckpt.push("params", entry(&format!("p{i}"), a).unwrap());
    }
    nitro_ckpt::save(&file, &ckpt).unwrap();
    let back = nitro_ckpt::load(&file).unwrap();
    for (i, a) in arrays.iter().enumerate() {
        let e = back.tensor(&format!("params/p{i}")).unwrap();
        let got = array(&file, e, a.spec()).unwrap();
        assert_eq!(got.dtype(), a.dtype());
        assert_eq!(
            got.data().to_le_bytes(),
            a.data().to_le_bytes(),
            "{}",
            a.dtype()
        );
    }
}

#[test]
fn another_dtype_or_shape_is_refused_and_legacy_f32_is_read() {
    let file = Path::new("c.nckpt");
    let stored = entry("w", &Array::new(&[2], vec![1.5f32, -2.0]).unwrap()).unwrap();
    let err = array(file, &stored, &TensorSpec::new(DType::F64, &[2]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`w`") && err.contains("f32[2]") && err.contains("f64[2]"),
        "{err}"
    );
    assert!(array(file, &stored, &TensorSpec::f32(&[1, 2])).is_err());
    // Checkpoints from before every dtype was stored as itself held
    // f16 as f32: they still resume.
    let legacy = array(file, &stored, &TensorSpec::new(DType::F16, &[2])).unwrap();
    assert_eq!(legacy.dtype(), DType::F16);
    assert_eq!(legacy.to_f32_vec(), [1.5, -2.0]);
}
