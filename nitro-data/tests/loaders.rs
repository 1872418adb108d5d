//! Loaders against hand-built bytes, and malformed or truncated files that
//! must error (never panic).

use nitro_data::loaders::{
    decode_idx, decode_npy, decode_npz, encode_idx, encode_npy, read_csv, read_idx, read_idx_pair,
    read_npy, read_npz, write_idx, CsvOptions, LabelColumn, LoadError,
};
use nitro_data::{Dataset, HostArray};
use proptest::prelude::*;

/// IDX by hand: u8 [2, 3].
fn idx_u8() -> Vec<u8> {
    let mut b = vec![0, 0, 0x08, 2, 0, 0, 0, 2, 0, 0, 0, 3];
    b.extend([1, 2, 3, 4, 5, 6]);
    b
}

/// NPY 1.0 by hand: '<f4' shape (2, 2) in Fortran order.
fn npy_f4_fortran() -> Vec<u8> {
    let mut header = b"{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }".to_vec();
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(b' ');
    }
    header.push(b'\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend((header.len() as u16).to_le_bytes());
    b.extend(header);
    for v in [1.0f32, 3.0, 2.0, 4.0] {
        b.extend(v.to_le_bytes()); // column-major [[1, 2], [3, 4]]
    }
    b
}

/// A stored (uncompressed) ZIP with the given members, by hand.
fn zip_stored(members: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in members {
        let mut crc = flate2::Crc::new();
        crc.update(data);
        let off = out.len() as u32;
        let common = |b: &mut Vec<u8>| {
            b.extend(20u16.to_le_bytes()); // version needed
            b.extend(0u16.to_le_bytes()); // flags
            b.extend(0u16.to_le_bytes()); // stored
            b.extend([0u8; 4]); // time, date
            b.extend(crc.sum().to_le_bytes());
            b.extend((data.len() as u32).to_le_bytes());
            b.extend((data.len() as u32).to_le_bytes());
            b.extend((name.len() as u16).to_le_bytes());
            b.extend(0u16.to_le_bytes()); // extra
        };
        out.extend(0x0403_4b50u32.to_le_bytes());
        common(&mut out);
        out.extend(name.as_bytes());
        out.extend(data);
        central.extend(0x0201_4b50u32.to_le_bytes());
        central.extend(20u16.to_le_bytes()); // version made by
        common(&mut central);
        central.extend([0u8; 10]); // comment len, disk, internal attr (2 each), external attr (4)
        central.extend(off.to_le_bytes());
        central.extend(name.as_bytes());
    }
    let cd_off = out.len() as u32;
    out.extend(&central);
    out.extend(0x0605_4b50u32.to_le_bytes());
    out.extend([0u8; 4]);
    out.extend((members.len() as u16).to_le_bytes());
    out.extend((members.len() as u16).to_le_bytes());
    out.extend((central.len() as u32).to_le_bytes());
    out.extend(cd_off.to_le_bytes());
    out.extend(0u16.to_le_bytes());
    out
}

#[test]
fn idx_round_trips_plain_and_gzipped() {
    let dir = tempfile::tempdir().unwrap();
    let want = HostArray::from_vec(&[2, 3], vec![1u8, 2, 3, 4, 5, 6]).unwrap();
    assert_eq!(decode_idx(&idx_u8(), "x").unwrap(), want);
    assert_eq!(encode_idx(&want).unwrap(), idx_u8());
    let gz = dir.path().join("a.idx.gz");
    write_idx(&gz, &want).unwrap();
    assert_eq!(std::fs::read(&gz).unwrap()[..2], [0x1f, 0x8b]);
    assert_eq!(read_idx(&gz).unwrap(), want);
    // Big-endian floats and i32.
    let mut f = vec![0, 0, 0x0D, 1, 0, 0, 0, 2];
    f.extend(1.5f32.to_be_bytes());
    f.extend((-2.0f32).to_be_bytes());
    assert_eq!(
        decode_idx(&f, "f").unwrap(),
        HostArray::from_vec(&[2], vec![1.5f32, -2.0]).unwrap()
    );
    let a = HostArray::from_vec(&[3], vec![-1i32, 0, 70000]).unwrap();
    assert_eq!(decode_idx(&encode_idx(&a).unwrap(), "i").unwrap(), a);
}

#[test]
fn idx_pair_gives_image_and_label_fields() {
    let dir = tempfile::tempdir().unwrap();
    let (i, l) = (dir.path().join("i"), dir.path().join("l"));
    write_idx(
        &i,
        &HostArray::from_vec(&[2, 1, 2], vec![0u8, 255, 51, 102]).unwrap(),
    )
    .unwrap();
    write_idx(&l, &HostArray::from_vec(&[2], vec![3u8, 9]).unwrap()).unwrap();
    let d = read_idx_pair(&i, &l).unwrap();
    assert_eq!(d.len(), 2);
    let f = d.as_fields();
    assert_eq!(
        f.get("label").unwrap(),
        &HostArray::from_vec(&[2], vec![3i32, 9]).unwrap()
    );
    assert_eq!(f.get("image").unwrap().as_slice::<f32>().unwrap()[1], 1.0); // [0, 0, 1]
    write_idx(&l, &HostArray::from_vec(&[3], vec![3u8, 9, 1]).unwrap()).unwrap();
    assert!(read_idx_pair(&i, &l).is_err());
}

#[test]
fn idx_errors_name_file_offset_and_expectation() {
    let mut b = idx_u8();
    b.pop();
    let err = decode_idx(&b, "train.idx").unwrap_err();
    assert_eq!(
        err.to_string(),
        "train.idx: at byte 12: expected 6 bytes of data for shape [2, 3], found 5 bytes"
    );
    let mut b = idx_u8();
    b[2] = 0x42;
    assert_eq!(
        decode_idx(&b, "t").unwrap_err().to_string(),
        "t: at byte 2: expected element type 0x08, 0x09, 0x0B, 0x0C, 0x0D or 0x0E, found 0x42"
    );
    let mut b = idx_u8();
    b[0] = 1;
    assert!(matches!(
        decode_idx(&b, "t"),
        Err(LoadError::Format { offset: 0, .. })
    ));
    // Dims whose product overflows must not allocate.
    let b = vec![
        0, 0, 0x0E, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    ];
    assert!(decode_idx(&b, "t").is_err());
    assert!(matches!(
        read_idx("/nonexistent/x.idx"),
        Err(LoadError::Io { .. })
    ));
}

#[test]
fn npy_reads_hand_built_fortran_and_round_trips() {
    let a = decode_npy(&npy_f4_fortran(), "a.npy").unwrap();
    assert_eq!(
        a,
        HostArray::from_vec(&[2, 2], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap()
    );
    let dir = tempfile::tempdir().unwrap();
    for arr in [
        HostArray::from_vec(&[3], vec![1i64, -2, 3]).unwrap(),
        HostArray::from_vec(&[2, 1, 2], vec![true, false, false, true]).unwrap(),
        HostArray::from_vec(&[1, 2], vec![1.25f64, -0.5]).unwrap(),
        HostArray::from_vec(&[4], vec![0u8, 1, 2, 255]).unwrap(),
        HostArray::from_vec(&[0, 3], Vec::<i32>::new()).unwrap(),
    ] {
        let p = dir.path().join("x.npy");
        nitro_data::loaders::write_npy(&p, &arr).unwrap();
        assert_eq!(read_npy(&p).unwrap(), arr);
        assert_eq!(
            encode_npy(&arr).len() % 64,
            (arr.byte_len() % 64),
            "64-byte aligned data"
        );
    }
    // Big-endian i4, scalar-free 1-D shape "(3,)".
    let header = b"{'descr': '>i4', 'fortran_order': False, 'shape': (3,), }\n";
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend((header.len() as u16).to_le_bytes());
    b.extend(header);
    for v in [1i32, -1, 256] {
        b.extend(v.to_be_bytes());
    }
    assert_eq!(
        decode_npy(&b, "be").unwrap(),
        HostArray::from_vec(&[3], vec![1i32, -1, 256]).unwrap()
    );
}

#[test]
fn npy_errors() {
    let good = npy_f4_fortran();
    let err = decode_npy(&good[..good.len() - 1], "w.npy").unwrap_err();
    assert_eq!(
        err.to_string(),
        "w.npy: at byte 128: expected 16 data bytes for '<f4' shape [2, 2], found 15 bytes"
    );
    assert!(decode_npy(b"NOTNUMPY", "x")
        .unwrap_err()
        .to_string()
        .contains("magic"));
    let mut b = good.clone();
    let pos = b.windows(3).position(|w| w == b"<f4").unwrap();
    b[pos + 1..pos + 3].copy_from_slice(b"c8");
    assert!(matches!(
        decode_npy(&b, "x"),
        Err(LoadError::Unsupported { .. })
    ));
    let mut b = good;
    b[8] = 0xff; // header length past the end
    assert!(matches!(
        decode_npy(&b, "x"),
        Err(LoadError::Format { offset: 10, .. })
    ));
}

#[test]
fn npz_stored_and_deflated() {
    let a = HostArray::from_vec(&[2, 3], vec![1i64, 2, 3, 4, 5, 6]).unwrap();
    let zip = zip_stored(&[("x.npy", npy_f4_fortran()), ("y.npy", encode_npy(&a))]);
    let got = decode_npz(&zip, "d.npz").unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].0, "x");
    assert_eq!(got[1], ("y".to_string(), a));
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("d.npz");
    std::fs::write(&p, &zip).unwrap();
    assert_eq!(read_npz(&p).unwrap(), got);

    // Corrupt a data byte: the CRC catches it.
    let mut bad = zip.clone();
    let i = bad.windows(6).position(|w| w == b"\x93NUMPY").unwrap() + 20;
    bad[i] ^= 1;
    assert!(decode_npz(&bad, "d.npz")
        .unwrap_err()
        .to_string()
        .contains("CRC-32"));
    // Truncated anywhere: an error, never a panic.
    for cut in 0..zip.len() {
        assert!(decode_npz(&zip[..cut], "d.npz").is_err(), "cut {cut}");
    }
}

#[test]
fn npz_deflated_member() {
    use std::io::Write;
    let npy = encode_npy(&HostArray::from_vec(&[2], vec![7i32, 8]).unwrap());
    let mut enc = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(&npy).unwrap();
    let deflated = enc.finish().unwrap();
    let mut zip = zip_stored(&[("z.npy", deflated.clone())]);
    // Patch method (8), CRC and uncompressed size in both headers.
    let mut crc = flate2::Crc::new();
    crc.update(&npy);
    for sig in [0x0403_4b50u32, 0x0201_4b50] {
        let at = zip.windows(4).position(|w| w == sig.to_le_bytes()).unwrap();
        let base = if sig == 0x0403_4b50 { at + 8 } else { at + 10 };
        zip[base..base + 2].copy_from_slice(&8u16.to_le_bytes());
        zip[base + 6..base + 10].copy_from_slice(&crc.sum().to_le_bytes());
        zip[base + 14..base + 18].copy_from_slice(&(npy.len() as u32).to_le_bytes());
    }
    let got = decode_npz(&zip, "c.npz").unwrap();
    assert_eq!(got[0].1, HostArray::from_vec(&[2], vec![7i32, 8]).unwrap());
}

#[test]
fn csv_with_label_column() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("d.csv");
    std::fs::write(&p, "a,label,b\n1.5,3,2\n\n-1,0,0.25\r\n").unwrap();
    let opts = CsvOptions {
        label: LabelColumn::Name("label".into()),
        ..Default::default()
    };
    let d = read_csv(&p, &opts).unwrap();
    let f = d.as_fields();
    assert_eq!(
        f.get("features").unwrap(),
        &HostArray::from_vec(&[2, 2], vec![1.5f32, 2.0, -1.0, 0.25]).unwrap()
    );
    assert_eq!(
        f.get("label").unwrap(),
        &HostArray::from_vec(&[2], vec![3i32, 0]).unwrap()
    );

    std::fs::write(&p, "a,label,b\n1.5,3,2\n1,x,2\n").unwrap();
    let err = read_csv(&p, &opts).unwrap_err().to_string();
    assert!(
        err.ends_with("d.csv: line 3: expected an integer label in column 1, found \"x\""),
        "{err}"
    );
    std::fs::write(&p, "a,label,b\n1.5,3\n").unwrap();
    let err = read_csv(&p, &opts).unwrap_err().to_string();
    assert!(
        err.ends_with("line 2: expected 3 columns, found 2 columns"),
        "{err}"
    );
    let no_label = CsvOptions {
        label: LabelColumn::Name("y".into()),
        ..Default::default()
    };
    assert!(read_csv(&p, &no_label)
        .unwrap_err()
        .to_string()
        .contains("expected a label column `y`"));
    std::fs::write(&p, "7,0.5\n").unwrap();
    let d = read_csv(
        &p,
        &CsvOptions {
            header: false,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(d.len(), 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any byte flip or truncation of valid files gives Ok or Err, never a panic.
    #[test]
    fn corrupt_files_never_panic(cut in 0usize..200, flip in 0usize..200, bit in 0u8..8) {
        let npz = zip_stored(&[("a.npy", npy_f4_fortran())]);
        for good in [idx_u8(), npy_f4_fortran(), npz] {
            let mut b = good.clone();
            if flip < b.len() { b[flip] ^= 1 << bit; }
            let _ = decode_idx(&b, "f");
            let _ = decode_npy(&b, "f");
            let _ = decode_npz(&b, "f");
            let t = &good[..cut.min(good.len())];
            let _ = decode_idx(t, "f");
            let _ = decode_npy(t, "f");
            let _ = decode_npz(t, "f");
        }
    }
}
