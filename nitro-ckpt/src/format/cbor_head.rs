//! The head of a definite-length CBOR byte string (major type 2), written
//! and checked by hand so tensor bytes stream straight from the caller's
//! buffer to the file without an intermediate copy.

/// The minimal head for a byte string of `len` bytes, and its length.
pub(crate) fn bstr_head(len: u64) -> ([u8; 9], usize) {
    const MAJOR: u8 = 2 << 5;
    let mut h = [0u8; 9];
    let n = if len < 24 {
        h[0] = MAJOR | len as u8;
        1
    } else if len <= u8::MAX as u64 {
        h[0] = MAJOR | 24;
        h[1] = len as u8;
        2
    } else if len <= u16::MAX as u64 {
        h[0] = MAJOR | 25;
        h[1..3].copy_from_slice(&(len as u16).to_be_bytes());
        3
    } else if len <= u32::MAX as u64 {
        h[0] = MAJOR | 26;
        h[1..5].copy_from_slice(&(len as u32).to_be_bytes());
        5
    } else {
        h[0] = MAJOR | 27;
        h[1..9].copy_from_slice(&len.to_be_bytes());
        9
    };
    (h, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_agree_with_ciborium() {
        for len in [0u64, 1, 23, 24, 255, 256, 65535, 65536, 1 << 20] {
            let (h, n) = bstr_head(len);
            let mut want = Vec::new();
            ciborium::ser::into_writer(&ciborium::Value::Bytes(vec![7; len as usize]), &mut want)
                .unwrap();
            assert_eq!(&h[..n], &want[..n], "len {len}");
            assert_eq!(want.len(), n + len as usize);
        }
    }
}
