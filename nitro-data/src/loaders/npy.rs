//! NPY, numpy's single-array format (versions 1.0, 2.0, 3.0).
//!
//! ```text
//! offset  size   field
//! 0       6      magic "\x93NUMPY"
//! 6       2      version major, minor
//! 8       2|4    header length H, little-endian (u16 in 1.0, u32 in 2.0/3.0)
//! 10|12   H      ASCII dict: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
//! ...            elements in `descr` byte order, C order unless fortran_order
//! ```

use std::path::Path;

use super::error::At;
use super::{read_file, write_file, LoadError};
use nitro_device::{f16, DType, HostArray};

const MAGIC: &[u8] = b"\x93NUMPY";

/// The quoted or bare value after `'key':` in a header dict.
fn dict_value<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let k = header.find(&format!("'{key}'"))?;
    let rest = header[k + key.len() + 2..]
        .trim_start()
        .strip_prefix(':')?
        .trim_start();
    if let Some(q) = rest.strip_prefix('\'') {
        return q.find('\'').map(|e| &q[..e]);
    }
    if rest.starts_with('(') {
        return rest.find(')').map(|e| &rest[..=e]);
    }
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim())
}

fn parse_shape(s: &str) -> Option<Vec<usize>> {
    let inner = s.strip_prefix('(')?.strip_suffix(')')?;
    inner
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| p.trim_end_matches('L').parse().ok())
        .collect()
}

/// Decode NPY bytes. `name` is used in errors.
pub fn decode_npy(bytes: &[u8], name: &str) -> Result<HostArray, LoadError> {
    let at = At(name);
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        let found = bytes.get(..6.min(bytes.len())).unwrap_or(&[]);
        return Err(at.err(
            0,
            "magic \\x93NUMPY and a header",
            format!("{found:?} ({} bytes)", bytes.len()),
        ));
    }
    let (hlen, start): (usize, usize) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize,
            12,
        ),
        v => {
            return Err(at.err(
                6,
                "format version 1, 2 or 3 and a complete header length",
                format!("version {v} in {} bytes", bytes.len()),
            ))
        }
    };
    let end = start
        .checked_add(hlen)
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| {
            at.err(
                start as u64,
                format!("a {hlen}-byte header"),
                format!("{} bytes", bytes.len() - start),
            )
        })?;
    let header = std::str::from_utf8(&bytes[start..end])
        .map_err(|_| at.err(start as u64, "an ASCII/UTF-8 header dict", "invalid UTF-8"))?;
    let bad_header = |what: &str| {
        at.err(
            start as u64,
            what.to_string(),
            format!("header {:?}", header.trim_end()),
        )
    };
    let descr = dict_value(header, "descr").ok_or_else(|| bad_header("a 'descr' entry"))?;
    let fortran = match dict_value(header, "fortran_order") {
        Some("True") => true,
        Some("False") => false,
        _ => return Err(bad_header("'fortran_order': True or False")),
    };
    let shape = dict_value(header, "shape")
        .and_then(parse_shape)
        .ok_or_else(|| bad_header("'shape': a tuple of integers"))?;
    let (order, kind) = descr.split_at(descr.len().min(1));
    let big = match order {
        "<" | "|" | "=" => false,
        ">" => true,
        _ => return Err(bad_header("a 'descr' like '<f4'")),
    };
    let size: usize = match kind {
        "f4" | "i4" | "u4" => 4,
        "f8" | "i8" => 8,
        "f2" | "i2" | "u2" => 2,
        "u1" | "i1" | "b1" => 1,
        _ => {
            return Err(LoadError::Unsupported {
                file: name.to_string(),
                message: format!(
                "dtype '{descr}' is not supported (f2, f4, f8, i1, i2, i4, i8, u1, u2, u4, b1 are)"
            ),
            })
        }
    };
    let count = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    let want = count.and_then(|c| c.checked_mul(size));
    let data = &bytes[end..];
    if want != Some(data.len()) {
        return Err(at.err(
            end as u64,
            format!(
                "{} data bytes for '{descr}' shape {shape:?}",
                want.map_or("too many".into(), |w| w.to_string())
            ),
            format!("{} bytes", data.len()),
        ));
    }
    macro_rules! num {
        ($t:ty, $n:expr, $conv:expr) => {{
            let v: Vec<_> = data
                .chunks_exact($n)
                .map(|c| {
                    let b: [u8; $n] = c.try_into().expect("chunks_exact");
                    $conv(if big {
                        <$t>::from_be_bytes(b)
                    } else {
                        <$t>::from_le_bytes(b)
                    })
                })
                .collect();
            HostArray::new(&shape, c_order(&shape, fortran, v))
        }};
    }
    let array = match kind {
        "f2" => num!(f16, 2, |x| x),
        "f4" => num!(f32, 4, |x| x),
        "f8" => num!(f64, 8, |x| x),
        "i4" => num!(i32, 4, |x| x),
        "i8" => num!(i64, 8, |x| x),
        "i2" => num!(i16, 2, i32::from),
        "u2" => num!(u16, 2, i32::from),
        "u4" => num!(u32, 4, i64::from),
        "i1" => num!(i8, 1, i32::from),
        "u1" => HostArray::new(&shape, c_order(&shape, fortran, data.to_vec())),
        _ => {
            if let Some(p) = data.iter().position(|&b| b > 1) {
                return Err(at.err((end + p) as u64, "bool byte 0 or 1", data[p].to_string()));
            }
            let v = data.iter().map(|&b| b == 1).collect();
            HostArray::new(&shape, c_order(&shape, fortran, v))
        }
    };
    array.map_err(|e| at.err(end as u64, "elements matching the shape", e.to_string()))
}

/// Values in C order from values in C or Fortran order (length already
/// checked). Fortran order is the C order of the reversed shape, so each
/// C-order index is read at its Fortran offset.
fn c_order<T: Copy>(shape: &[usize], fortran: bool, v: Vec<T>) -> Vec<T> {
    if !fortran || shape.iter().filter(|&&d| d > 1).count() < 2 {
        return v;
    }
    let rank = shape.len();
    let mut stride = vec![1usize; rank];
    for d in 1..rank {
        stride[d] = stride[d - 1] * shape[d - 1];
    }
    let mut index = vec![0usize; rank];
    let mut out = Vec::with_capacity(v.len());
    for _ in 0..v.len() {
        out.push(v[index.iter().zip(&stride).map(|(i, s)| i * s).sum::<usize>()]);
        for d in (0..rank).rev() {
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
    out
}

/// Encode as NPY 1.0, little-endian, C order. numpy has no bfloat16, so a
/// bf16 array is written as f32 (every bf16 value is exactly an f32).
pub fn encode_npy(array: &HostArray) -> Vec<u8> {
    let widened;
    let array = if array.dtype() == DType::BF16 {
        widened = array.cast(DType::F32);
        &widened
    } else {
        array
    };
    let descr = match array.dtype() {
        DType::F16 => "<f2",
        DType::F32 | DType::BF16 => "<f4",
        DType::F64 => "<f8",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::U8 => "|u1",
        DType::Bool => "|b1",
    };
    let shape = array.shape();
    let dims = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {dims}, }}");
    // Pad so the data starts on a 64-byte boundary, as numpy does.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    // NPY's little-endian layout is the buffer's own (bool as one byte 0/1).
    out.extend_from_slice(&array.data().to_le_bytes());
    out
}

/// Read an NPY file.
pub fn read_npy(path: impl AsRef<Path>) -> Result<HostArray, LoadError> {
    let path = path.as_ref();
    decode_npy(&read_file(path)?, &path.display().to_string())
}

/// Write an NPY file.
pub fn write_npy(path: impl AsRef<Path>, array: &HostArray) -> Result<(), LoadError> {
    write_file(path.as_ref(), &encode_npy(array))
}
