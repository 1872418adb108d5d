//! A structural pass over the index's CBOR before serde sees it. serde
//! pre-allocates collections from their declared lengths (up to 1 MiB per
//! collection, per nesting level), so a 500-byte index claiming huge arrays
//! could make the decoder allocate far more than the file holds. Here every
//! declared length is checked against the bytes that remain (each element
//! takes at least one byte), nesting is capped, and indefinite lengths (which
//! our writer never produces) are refused.

/// Checks that `bytes` is exactly one well-formed CBOR item within limits.
pub(crate) fn prescan(bytes: &[u8], max_depth: usize) -> Result<(), String> {
    let mut scan = Scan { bytes, at: 0 };
    scan.item(max_depth)?;
    if scan.at != bytes.len() {
        return Err(format!(
            "{} stray bytes after the index",
            bytes.len() - scan.at
        ));
    }
    Ok(())
}

struct Scan<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Scan<'_> {
    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.at) as u64
    }

    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| format!("truncated CBOR at byte {}", self.at))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    /// Major type and argument of the next head.
    fn head(&mut self) -> Result<(u8, u64), String> {
        let first = self.take(1)?[0];
        let (major, info) = (first >> 5, first & 0x1f);
        let arg = match info {
            0..=23 => u64::from(info),
            24 => u64::from(self.take(1)?[0]),
            25 => u64::from(u16::from_be_bytes(self.take(2)?.try_into().expect("2"))),
            26 => u64::from(u32::from_be_bytes(self.take(4)?.try_into().expect("4"))),
            27 => u64::from_be_bytes(self.take(8)?.try_into().expect("8")),
            _ => {
                return Err(format!(
                    "indefinite or reserved CBOR length at byte {}",
                    self.at - 1
                ))
            }
        };
        Ok((major, arg))
    }

    fn item(&mut self, depth: usize) -> Result<(), String> {
        if depth == 0 {
            return Err("CBOR nesting deeper than the limit".into());
        }
        let (major, arg) = self.head()?;
        match major {
            0 | 1 | 7 => Ok(()),
            2 | 3 => {
                if arg > self.remaining() {
                    return Err(format!("string of {arg} bytes exceeds the index"));
                }
                self.at += arg as usize;
                Ok(())
            }
            4 | 5 => {
                let per = if major == 5 { 2 } else { 1 };
                if arg.saturating_mul(per) > self.remaining() {
                    return Err(format!("collection of {arg} entries exceeds the index"));
                }
                for _ in 0..arg * per {
                    self.item(depth - 1)?;
                }
                Ok(())
            }
            _ => self.item(depth - 1), // a tag applies to the next item
        }
    }
}

#[cfg(test)]
mod tests {
    use super::prescan;

    #[test]
    fn refuses_lengths_beyond_the_input_and_deep_nesting() {
        assert!(prescan(&[0x9b, 0x80, 0, 0, 0, 0, 0, 0, 0], 8).is_err());
        assert!(prescan(&[0x5a, 0, 1, 0, 0], 8).is_err());
        assert!(prescan(&[0x9f, 0xff], 8).is_err());
        assert!(prescan(
            &[0x81; 10].iter().copied().chain([0]).collect::<Vec<_>>(),
            8
        )
        .is_err());
        assert!(prescan(&[0x82, 0x01, 0x61, b'a'], 8).is_ok());
        assert!(prescan(&[0x01, 0x01], 8).is_err());
    }
}
