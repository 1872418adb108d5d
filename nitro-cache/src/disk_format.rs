//! The layout of one persistent-tier entry file, and its verification.
//!
//! ```text
//! offset  size  field
//! 0       8     magic b"NCACHE\r\n" (the CR LF catches text-mode mangling)
//! 8       4     format version, u32 LE
//! 12      32    fingerprint digest: crate version, format version,
//!               rustc version, target, caller's extra fingerprint
//! 44      32    entry id: blake3 over (fingerprint, program kind, key digest)
//! 76      8     payload length n, u64 LE
//! 84      n     payload
//! 84+n    32    blake3 of bytes 0 .. 84+n
//! ```
//!
//! A file is trusted only if every field matches what the reader expects and
//! the checksum verifies; anything else is a [`RejectReason`].

use std::fmt;

/// Bumped whenever the layout above or the key encoding changes.
pub const FORMAT_VERSION: u32 = 1;

const MAGIC: &[u8; 8] = b"NCACHE\r\n";
const HEADER_LEN: usize = 84;
const CHECKSUM_LEN: usize = 32;

/// Why an entry file was not trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    /// Shorter than a header and checksum, or shorter than its stated length.
    Truncated,
    /// Longer than its stated length.
    TrailingBytes,
    /// Larger than the store's size cap.
    TooLarge,
    /// Not an entry file at all.
    BadMagic,
    /// Written by another format version.
    FormatVersion(u32),
    /// Written by another crate version, toolchain or configuration.
    ForeignFingerprint,
    /// An entry for another kind or key (a renamed or copied file).
    WrongEntry,
    /// The checksum does not match the contents.
    Checksum,
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RejectReason::Truncated => f.write_str("truncated"),
            RejectReason::TrailingBytes => f.write_str("trailing bytes after the checksum"),
            RejectReason::TooLarge => f.write_str("larger than the store's size cap"),
            RejectReason::BadMagic => f.write_str("not a nitro-cache entry (bad magic)"),
            RejectReason::FormatVersion(v) => {
                write!(f, "format version {v}, expected {FORMAT_VERSION}")
            }
            RejectReason::ForeignFingerprint => {
                f.write_str("written by another crate version, toolchain or configuration")
            }
            RejectReason::WrongEntry => f.write_str("holds another kind or key"),
            RejectReason::Checksum => f.write_str("checksum mismatch"),
        }
    }
}

/// The entry file for `payload`.
pub(crate) fn encode(fingerprint: &[u8; 32], entry_id: &[u8; 32], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len() + CHECKSUM_LEN);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(fingerprint);
    out.extend_from_slice(entry_id);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(payload);
    let checksum = blake3::hash(&out);
    out.extend_from_slice(checksum.as_bytes());
    out
}

/// The payload of `file`, if it is a sound entry for `entry_id` under `fingerprint`.
pub(crate) fn decode<'a>(
    file: &'a [u8],
    fingerprint: &[u8; 32],
    entry_id: &[u8; 32],
) -> Result<&'a [u8], RejectReason> {
    if file.len() < HEADER_LEN + CHECKSUM_LEN {
        return Err(if file.len() >= 8 && &file[..8] != MAGIC {
            RejectReason::BadMagic
        } else {
            RejectReason::Truncated
        });
    }
    if &file[..8] != MAGIC {
        return Err(RejectReason::BadMagic);
    }
    let version = u32::from_le_bytes(file[8..12].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION {
        return Err(RejectReason::FormatVersion(version));
    }
    let stated = u64::from_le_bytes(file[76..84].try_into().expect("8 bytes"));
    let available = (file.len() - HEADER_LEN - CHECKSUM_LEN) as u64;
    if stated > available {
        return Err(RejectReason::Truncated);
    }
    if stated < available {
        return Err(RejectReason::TrailingBytes);
    }
    let body_end = file.len() - CHECKSUM_LEN;
    if blake3::hash(&file[..body_end]).as_bytes() != &file[body_end..] {
        return Err(RejectReason::Checksum);
    }
    if &file[12..44] != fingerprint {
        return Err(RejectReason::ForeignFingerprint);
    }
    if &file[44..76] != entry_id {
        return Err(RejectReason::WrongEntry);
    }
    Ok(&file[HEADER_LEN..body_end])
}
