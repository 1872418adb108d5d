//! NPZ: a ZIP archive of `.npy` members (`numpy.savez`, stored, and
//! `numpy.savez_compressed`, deflated). A minimal ZIP reader: end of central
//! directory (with the ZIP64 variant numpy writes for large arrays), central
//! directory entries, local headers; CRC-32 checked.
//!
//! ```text
//! [local header 30 B + name + extra][member data] ...
//! [central directory: 46 B + name + extra + comment per member]
//! [zip64 end record + locator, optional][end of central directory 22 B + comment]
//! ```

use std::io::Read;
use std::path::Path;

use flate2::read::DeflateDecoder;

use super::error::At;
use super::npy::decode_npy;
use super::{read_file, LoadError};
use nitro_device::HostArray;

/// Bounds-checked little-endian reads at absolute offsets.
struct Bytes<'a> {
    b: &'a [u8],
    at: At<'a>,
}

impl Bytes<'_> {
    fn slice(&self, off: u64, len: u64, what: &str) -> Result<&[u8], LoadError> {
        let end = off.checked_add(len).filter(|&e| e <= self.b.len() as u64);
        match end {
            Some(e) => Ok(&self.b[off as usize..e as usize]),
            None => Err(self.at.err(
                off,
                format!("{len} bytes of {what}"),
                format!("end of file at byte {}", self.b.len()),
            )),
        }
    }
    fn u16(&self, off: u64) -> Result<u16, LoadError> {
        Ok(u16::from_le_bytes(
            self.slice(off, 2, "a u16 field")?
                .try_into()
                .expect("2 bytes"),
        ))
    }
    fn u32(&self, off: u64) -> Result<u32, LoadError> {
        Ok(u32::from_le_bytes(
            self.slice(off, 4, "a u32 field")?
                .try_into()
                .expect("4 bytes"),
        ))
    }
    fn u64(&self, off: u64) -> Result<u64, LoadError> {
        Ok(u64::from_le_bytes(
            self.slice(off, 8, "a u64 field")?
                .try_into()
                .expect("8 bytes"),
        ))
    }
    fn sig(&self, off: u64, sig: u32, what: &str) -> Result<(), LoadError> {
        let found = self.u32(off)?;
        if found != sig {
            return Err(self.at.err(
                off,
                format!("{what} signature 0x{sig:08x}"),
                format!("0x{found:08x}"),
            ));
        }
        Ok(())
    }
}

const EOCD: u32 = 0x0605_4b50;
const EOCD64: u32 = 0x0606_4b50;
const LOCATOR64: u32 = 0x0706_4b50;
const CENTRAL: u32 = 0x0201_4b50;
const LOCAL: u32 = 0x0403_4b50;

/// Decode NPZ bytes into `(name, array)` pairs in archive order, names
/// without the `.npy` suffix. `name` is used in errors.
pub fn decode_npz(bytes: &[u8], name: &str) -> Result<Vec<(String, HostArray)>, LoadError> {
    let z = Bytes {
        b: bytes,
        at: At(name),
    };
    // The end record sits in the last 22 + 65535 bytes.
    let lo = bytes.len().saturating_sub(22 + 0xFFFF);
    let eocd = (lo..bytes.len().saturating_sub(21))
        .rev()
        .find(|&i| bytes[i..i + 4] == EOCD.to_le_bytes())
        .ok_or_else(|| {
            z.at.err(
                bytes.len() as u64,
                "a ZIP end-of-central-directory record",
                "none (not a ZIP/NPZ file, or truncated)",
            )
        })? as u64;
    let mut entries = z.u16(eocd + 10)? as u64;
    let mut cd_off = z.u32(eocd + 16)? as u64;
    if (entries == 0xFFFF || cd_off == 0xFFFF_FFFF) && eocd >= 20 {
        z.sig(eocd - 20, LOCATOR64, "ZIP64 locator")?;
        let rec = z.u64(eocd - 20 + 8)?;
        z.sig(rec, EOCD64, "ZIP64 end record")?;
        entries = z.u64(rec + 32)?;
        cd_off = z.u64(rec + 48)?;
    }
    let mut out = Vec::new();
    let mut p = cd_off;
    for _ in 0..entries {
        z.sig(p, CENTRAL, "central directory entry")?;
        let method = z.u16(p + 10)?;
        let crc = z.u32(p + 16)?;
        let mut csize = z.u32(p + 20)? as u64;
        let mut usize_ = z.u32(p + 24)? as u64;
        let (nlen, elen, clen) = (
            z.u16(p + 28)? as u64,
            z.u16(p + 30)? as u64,
            z.u16(p + 32)? as u64,
        );
        let mut local = z.u32(p + 42)? as u64;
        let member = String::from_utf8_lossy(z.slice(p + 46, nlen, "member name")?).into_owned();
        // ZIP64 extra field: 64-bit values for the fields saturated above.
        let extra = z.slice(p + 46 + nlen, elen, "extra field")?;
        let mut e = 0;
        while e + 4 <= extra.len() {
            let id = u16::from_le_bytes([extra[e], extra[e + 1]]);
            let len = u16::from_le_bytes([extra[e + 2], extra[e + 3]]) as usize;
            let body = extra.get(e + 4..e + 4 + len).unwrap_or(&[]);
            if id == 1 {
                let mut vals = body
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")));
                for field in [&mut usize_, &mut csize, &mut local] {
                    if *field == 0xFFFF_FFFF {
                        *field = vals.next().unwrap_or(*field);
                    }
                }
            }
            e += 4 + len;
        }
        z.sig(local, LOCAL, &format!("local header of `{member}`"))?;
        let data_off = local + 30 + z.u16(local + 26)? as u64 + z.u16(local + 28)? as u64;
        let raw = z.slice(data_off, csize, &format!("member `{member}`"))?;
        let member_name = format!("{name}:{member}");
        let data = match method {
            0 => raw.to_vec(),
            8 => {
                let mut v = Vec::new();
                DeflateDecoder::new(raw)
                    .take(usize_.saturating_add(1))
                    .read_to_end(&mut v)
                    .map_err(|err| {
                        z.at.err(
                            data_off,
                            format!("a deflate stream for `{member}`"),
                            err.to_string(),
                        )
                    })?;
                v
            }
            m => {
                return Err(z.at.err(
                    p + 10,
                    "compression method 0 (stored) or 8 (deflate)",
                    format!("method {m} for `{member}`"),
                ))
            }
        };
        if data.len() as u64 != usize_ {
            return Err(z.at.err(
                data_off,
                format!("{usize_} bytes for `{member}`"),
                format!("{} bytes", data.len()),
            ));
        }
        let mut h = flate2::Crc::new();
        h.update(&data);
        if h.sum() != crc {
            return Err(z.at.err(
                data_off,
                format!("CRC-32 0x{crc:08x} for `{member}`"),
                format!("0x{:08x}", h.sum()),
            ));
        }
        let array = decode_npy(&data, &member_name)?;
        out.push((
            member.strip_suffix(".npy").unwrap_or(&member).to_string(),
            array,
        ));
        p += 46 + nlen + elen + clen;
    }
    Ok(out)
}

/// Read an NPZ file.
pub fn read_npz(path: impl AsRef<Path>) -> Result<Vec<(String, HostArray)>, LoadError> {
    let path = path.as_ref();
    decode_npz(&read_file(path)?, &path.display().to_string())
}
