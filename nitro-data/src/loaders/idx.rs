//! IDX, the MNIST file format, gzipped or not.
//!
//! ```text
//! offset  size      field
//! 0       2         0x00 0x00
//! 2       1         element type: 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64
//! 3       1         rank n
//! 4       4*n       dims, big-endian u32 each
//! 4+4n    ...       elements, big-endian, row-major (product of dims of them)
//! ```
//! A gzipped file (starting 0x1f 0x8b) is decompressed first.

use std::io::Read;
use std::path::Path;

use flate2::read::GzDecoder;
use flate2::write::GzEncoder;

use super::error::At;
use super::{read_file, write_file, LoadError};
use crate::dataset::InMemory;
use crate::error::DataError;
use crate::fields::Fields;
use nitro_device::{DType, HostArray, HostBuffer};

fn elem_size(code: u8) -> Option<usize> {
    Some(match code {
        0x08 | 0x09 => 1,
        0x0B => 2,
        0x0C | 0x0D => 4,
        0x0E => 8,
        _ => return None,
    })
}

/// Decompress if gzipped. Growth follows the data actually produced, and
/// stops one byte past what the header promises.
fn inflate(bytes: &[u8], at: &At<'_>) -> Result<Vec<u8>, LoadError> {
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(bytes.to_vec());
    }
    let mut dec = GzDecoder::new(bytes);
    let mut head = [0u8; 4];
    let gz_err = |e: std::io::Error| at.err(0, "a valid gzip stream", e.to_string());
    dec.read_exact(&mut head).map_err(gz_err)?;
    let rank = head[3] as usize;
    let mut dims = vec![0u8; 4 * rank];
    dec.read_exact(&mut dims).map_err(gz_err)?;
    let count = dims.chunks(4).try_fold(1u64, |acc, d| {
        acc.checked_mul(u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as u64)
    });
    let size = elem_size(head[2]).unwrap_or(1) as u64;
    let limit = count.and_then(|c| c.checked_mul(size)).unwrap_or(u64::MAX);
    let mut out = head.to_vec();
    out.extend_from_slice(&dims);
    dec.take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(gz_err)?;
    Ok(out)
}

/// Decode IDX bytes (gzipped or not). `name` is used in errors.
pub fn decode_idx(bytes: &[u8], name: &str) -> Result<HostArray, LoadError> {
    let at = At(name);
    let data = inflate(bytes, &at)?;
    if data.len() < 4 {
        return Err(at.err(0, "a 4-byte IDX header", format!("{} bytes", data.len())));
    }
    if data[0] != 0 || data[1] != 0 {
        return Err(at.err(
            0,
            "magic 0x00 0x00",
            format!("0x{:02x} 0x{:02x}", data[0], data[1]),
        ));
    }
    let code = data[2];
    let size = elem_size(code).ok_or_else(|| {
        at.err(
            2,
            "element type 0x08, 0x09, 0x0B, 0x0C, 0x0D or 0x0E",
            format!("0x{code:02x}"),
        )
    })?;
    let rank = data[3] as usize;
    if rank == 0 {
        return Err(at.err(3, "rank at least 1", "0"));
    }
    let body = 4 + 4 * rank;
    if data.len() < body {
        return Err(at.err(
            4,
            format!("{rank} big-endian u32 dims"),
            format!("{} bytes", data.len() - 4),
        ));
    }
    let shape: Vec<usize> = data[4..body]
        .chunks(4)
        .map(|d| u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize)
        .collect();
    let count = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    let want = count.and_then(|c| c.checked_mul(size));
    let have = data.len() - body;
    if want != Some(have) {
        return Err(at.err(
            body as u64,
            format!(
                "{} bytes of data for shape {shape:?}",
                want.map_or("too many".into(), |w| w.to_string())
            ),
            format!("{have} bytes"),
        ));
    }
    let e = &data[body..];
    let arr = match code {
        0x08 => HostArray::new(&shape, e.to_vec()),
        0x09 => HostArray::new(
            &shape,
            e.iter().map(|&b| b as i8 as i32).collect::<Vec<_>>(),
        ),
        0x0B => HostArray::new(
            &shape,
            e.chunks(2)
                .map(|c| i16::from_be_bytes([c[0], c[1]]) as i32)
                .collect::<Vec<_>>(),
        ),
        0x0C => HostArray::new(
            &shape,
            e.chunks(4)
                .map(|c| i32::from_be_bytes(c.try_into().unwrap()))
                .collect::<Vec<_>>(),
        ),
        0x0D => HostArray::new(
            &shape,
            e.chunks(4)
                .map(|c| f32::from_be_bytes(c.try_into().unwrap()))
                .collect::<Vec<_>>(),
        ),
        _ => HostArray::new(
            &shape,
            e.chunks(8)
                .map(|c| f64::from_be_bytes(c.try_into().unwrap()))
                .collect::<Vec<_>>(),
        ),
    };
    arr.map_err(|e| at.err(body as u64, "elements matching the dims", e.to_string()))
}

/// Encode as (uncompressed) IDX: u8, i32, f32 and f64 arrays.
pub fn encode_idx(array: &HostArray) -> Result<Vec<u8>, LoadError> {
    let unsupported = |dt: DType| LoadError::Unsupported {
        file: "<idx>".into(),
        message: format!("IDX has no {dt} element type; convert to u8, i32, f32 or f64"),
    };
    let shape = array.shape();
    if shape.is_empty() || shape.len() > 255 || shape.iter().any(|&d| d > u32::MAX as usize) {
        return Err(LoadError::Unsupported {
            file: "<idx>".into(),
            message: format!("shape {shape:?} needs rank 1..=255 and dims below 2^32"),
        });
    }
    let code = match array.dtype() {
        DType::U8 => 0x08,
        DType::I32 => 0x0C,
        DType::F32 => 0x0D,
        DType::F64 => 0x0E,
        dt => return Err(unsupported(dt)),
    };
    let mut out = vec![0, 0, code, shape.len() as u8];
    for &d in shape {
        out.extend_from_slice(&(d as u32).to_be_bytes());
    }
    match array.data() {
        HostBuffer::U8(a) => out.extend(a),
        HostBuffer::I32(a) => a
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_be_bytes())),
        HostBuffer::F32(a) => a
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_be_bytes())),
        HostBuffer::F64(a) => a
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_be_bytes())),
        other => return Err(unsupported(other.dtype())),
    }
    Ok(out)
}

/// Read an IDX file (gzipped or not).
pub fn read_idx(path: impl AsRef<Path>) -> Result<HostArray, LoadError> {
    let path = path.as_ref();
    decode_idx(&read_file(path)?, &path.display().to_string())
}

/// Write an IDX file, gzipped when the path ends in `.gz`.
pub fn write_idx(path: impl AsRef<Path>, array: &HostArray) -> Result<(), LoadError> {
    use std::io::Write;
    let path = path.as_ref();
    let mut bytes = encode_idx(array)?;
    if path.extension().is_some_and(|e| e == "gz") {
        let mut enc = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&bytes).expect("writing to a Vec cannot fail");
        bytes = enc.finish().expect("writing to a Vec cannot fail");
    }
    write_file(path, &bytes)
}

/// Read an MNIST-style pair (u8 images `[n, h, w]`, u8 labels `[n]`) into
/// fields `image` (f32 in [0, 1], `[n, h, w]`) and `label` (i32, `[n]`),
/// the same fields as the built-in digits dataset.
pub fn read_idx_pair(
    images: impl AsRef<Path>,
    labels: impl AsRef<Path>,
) -> Result<InMemory, LoadError> {
    let (ip, lp) = (images.as_ref(), labels.as_ref());
    let img = read_idx(ip)?;
    let lab = read_idx(lp)?;
    let (Some(pixels), Some(classes)) = (img.as_slice::<u8>(), lab.as_slice::<u8>()) else {
        return Err(LoadError::Unsupported {
            file: format!("{} / {}", ip.display(), lp.display()),
            message: "expected u8 images and u8 labels (element type 0x08)".into(),
        });
    };
    if lab.shape().len() != 1 || img.shape().len() < 2 || img.rows() != lab.rows() {
        return Err(LoadError::Unsupported {
            file: format!("{} / {}", ip.display(), lp.display()),
            message: format!(
                "expected images [n, ...] and labels [n], found {:?} and {:?}",
                img.shape(),
                lab.shape()
            ),
        });
    }
    let image: Vec<f32> = pixels.iter().map(|&v| v as f32 / 255.0).collect();
    let label: Vec<i32> = classes.iter().map(|&v| v as i32).collect();
    let mut f = Fields::new();
    HostArray::new(img.shape(), image)
        .map_err(DataError::from)
        .and_then(|image| f.insert("image", image))
        .and_then(|_| f.insert("label", HostArray::new(lab.shape(), label)?))
        .map_err(|e| LoadError::Unsupported {
            file: ip.display().to_string(),
            message: e.to_string(),
        })?;
    Ok(InMemory::new(f))
}
