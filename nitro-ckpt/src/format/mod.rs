//! The file layout (drawn in the crate docs): constants, the CBOR byte-string
//! head, the versioned index, and the streaming writer and bounded reader.

mod cbor_head;
mod index;
mod prescan;
pub(crate) mod read;
pub(crate) mod write;

/// First 8 bytes of every checkpoint.
pub const MAGIC: [u8; 8] = *b"NITROCKP";
/// Last 8 bytes of every complete checkpoint; a file cut short lacks them.
pub const END_MAGIC: [u8; 8] = *b"NCKPEND\0";
/// The version this crate writes.
pub const VERSION: u32 = 2;
/// The oldest version this crate reads (one back, as promised).
pub const OLDEST_READABLE: u32 = 1;
/// Magic, version (u32 LE), reserved flags (u32 LE, zero).
pub const HEADER_LEN: u64 = 16;
/// Index offset (u64 LE), index length (u64 LE), blake3 of header and index
/// (32 bytes), end magic (8 bytes).
pub const FOOTER_LEN: u64 = 8 + 8 + 32 + 8;
/// Largest index (metadata + tensor table) a reader accepts. Real indexes are
/// kilobytes to a few megabytes (a long metrics history); the cap bounds the
/// memory a hostile file can make the decoder spend on structure, which can
/// reach a few dozen times the index size in Rust values.
pub const MAX_INDEX_BYTES: u64 = 64 << 20;
/// Deepest CBOR nesting the index decoder follows. Metadata nests a handful
/// of levels plus user values; 128 leaves room for those while keeping the
/// recursive decoder far from the stack limit of a test thread.
pub const MAX_DEPTH: usize = 128;

/// Recomputes the footer checksum of an encoded checkpoint over whatever
/// header and index it now holds, so that fuzzers and hostile-input tests
/// reach the index decoder instead of stopping at the checksum. Does nothing
/// when the footer does not locate an index inside `bytes`.
#[doc(hidden)]
pub fn reseal(bytes: &mut [u8]) {
    let len = bytes.len() as u64;
    if len < HEADER_LEN + FOOTER_LEN {
        return;
    }
    let f = (len - FOOTER_LEN) as usize;
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let (offset, index_len) = (word(f), word(f + 8));
    let Some(end) = offset.checked_add(index_len) else {
        return;
    };
    if offset < HEADER_LEN || end > len - FOOTER_LEN {
        return;
    }
    let mut hasher = blake3::Hasher::new();
    hasher.update(&bytes[..HEADER_LEN as usize]);
    hasher.update(&bytes[offset as usize..end as usize]);
    let digest = *hasher.finalize().as_bytes();
    bytes[f + 16..f + 48].copy_from_slice(&digest);
}

#[cfg(test)]
mod tests {
    use super::write::write_v1;
    use crate::{decode, Checkpoint, Metadata, TensorEntry, Value};

    fn v2_sample() -> Checkpoint {
        let mut c = Checkpoint::new(Metadata {
            experiment: "Old".into(),
            preset: Some("small".into()),
            step: 7,
            user: [("note".to_string(), Value::Text("hi".into()))].into(),
            ..Metadata::default()
        });
        c.push(
            "params",
            TensorEntry::from_f32("dense.w", vec![2], &[1.0, 2.0]).unwrap(),
        );
        c.push(
            "opt_state",
            TensorEntry::from_i64("count", vec![], &[7]).unwrap(),
        );
        c
    }

    #[test]
    fn reads_version_1_and_migrates() {
        let ckpt = v2_sample();
        let mut bytes = Vec::new();
        write_v1(&mut bytes, &ckpt).unwrap();
        let reader = crate::Reader::from_bytes(&bytes).unwrap();
        assert_eq!(reader.version(), 1);
        let back = decode(&bytes).unwrap();
        // Fields version 1 lacked come back as defaults; the rest is equal.
        let mut expected = ckpt;
        expected.meta.preset = None;
        expected.meta.user.clear();
        assert_eq!(back, expected);
    }

    #[test]
    fn newer_version_is_refused_by_name() {
        let mut bytes = crate::encode(&v2_sample()).unwrap();
        bytes[8] = 3;
        super::reseal(&mut bytes);
        let err = decode(&bytes).unwrap_err().to_string();
        assert!(
            err.contains("format version 3") && err.contains("<memory>"),
            "{err}"
        );
    }
}
