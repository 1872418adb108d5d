//! The fixed reduction order, independent of the transport.
//!
//! A buffer of `n` elements is cut into `world` contiguous chunks
//! ([`chunk_range`]); rank `c` *owns* chunk `c`. Every rank sends chunk `c`
//! of its buffer to owner `c`; the owner adds the `world` contributions in
//! rank order, starting from rank 0's value ([`sum_into_own`]):
//!
//! ```text
//! out[i] = ((x_0[i] + x_1[i]) + x_2[i]) + ... + x_{world-1}[i]
//! ```
//!
//! and sends its summed chunk to every rank. Each element is computed by
//! exactly one rank and shipped as bytes, so every rank holds bitwise the
//! same result, and that result is the sequential left fold a test can
//! write in one line, whatever the message timing. Starting from rank 0's
//! value rather than from zero keeps the sign of `-0.0`.
//!
//! Why owners rather than one root: a root would receive `(world-1) * n`
//! elements and sum them all while the others wait; owners share both the
//! traffic (`(world-1) * n / world` in and out per rank, as a ring
//! all-reduce) and the additions. Why not a ring: a ring's partial sums
//! start at a different rank for each chunk, so the order differs per
//! element and no simple sequential sum reproduces it. And every pair of
//! ranks exchanges a message in each phase, so a rank that never answers is
//! seen, and named, by every other rank.

use std::ops::Range;

/// Elements `start..end` of chunk `owner` of a buffer of `n` elements cut
/// into `world` chunks whose lengths differ by at most one.
pub fn chunk_range(n: usize, world: usize, owner: usize) -> Range<usize> {
    let (base, extra) = (n / world, n % world);
    let start = owner * base + owner.min(extra);
    start..start + base + usize::from(owner < extra)
}

/// The element types a collective can sum.
pub trait Summable: Copy + Default + Send + 'static {
    /// `self + other` (wrapping for integers, so no rank panics).
    fn add(self, other: Self) -> Self;
}

impl Summable for f32 {
    fn add(self, other: f32) -> f32 {
        self + other
    }
}
impl Summable for f64 {
    fn add(self, other: f64) -> f64 {
        self + other
    }
}
impl Summable for i32 {
    fn add(self, other: i32) -> i32 {
        self.wrapping_add(other)
    }
}
impl Summable for i64 {
    fn add(self, other: i64) -> i64 {
        self.wrapping_add(other)
    }
}

/// `own[i] = parts[0][i] + parts[1][i] + ...`, added in the order of
/// `parts` (rank order), where the owner's own part is `own` itself (its
/// entry in `parts` is `None`) and is overwritten by the sum. Every other
/// part has `own.len()` elements.
///
/// Summed a block at a time through a small accumulator, so the fold reads
/// each part once and needs no chunk-sized scratch buffer, whichever rank
/// the owner is. Two parts take one pass with no accumulator, and with
/// more the first two are added in one pass: this runs on every
/// all-reduce of a training step.
pub fn sum_into_own<T: Summable>(parts: &[Option<&[T]>], own: &mut [T]) {
    // Two ranks, the common case on one machine: one pass, no accumulator.
    match parts {
        [Some(a), Some(b)] => {
            for ((o, &x), &y) in own.iter_mut().zip(*a).zip(*b) {
                *o = x.add(y);
            }
            return;
        }
        [None, Some(b)] => {
            for (o, &y) in own.iter_mut().zip(*b) {
                *o = o.add(y);
            }
            return;
        }
        [Some(a), None] => {
            for (o, &x) in own.iter_mut().zip(*a) {
                *o = x.add(*o);
            }
            return;
        }
        _ => {}
    }
    const BLOCK: usize = 512;
    let mut acc = [T::default(); BLOCK];
    for (b, block) in own.chunks_mut(BLOCK).enumerate() {
        let (at, len) = (b * BLOCK, block.len());
        let acc = &mut acc[..len];
        match parts.len() {
            0 => continue,
            1 => acc.copy_from_slice(pick(parts[0], block, at)),
            _ => {
                for ((a, &x), &y) in acc
                    .iter_mut()
                    .zip(pick(parts[0], block, at))
                    .zip(pick(parts[1], block, at))
                {
                    *a = x.add(y);
                }
            }
        }
        for &part in parts.iter().skip(2) {
            for (a, &x) in acc.iter_mut().zip(pick(part, block, at)) {
                *a = a.add(x);
            }
        }
        block.copy_from_slice(acc);
    }
}

/// Part `q`'s elements at `at..at + block.len()`, or the owner's own
/// `block` where the part is the owner's (`None`).
fn pick<'a, T>(part: Option<&'a [T]>, block: &'a [T], at: usize) -> &'a [T] {
    part.map_or(block, |p| &p[at..at + block.len()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn chunks_tile_the_buffer(n in 0usize..1000, world in 1usize..17) {
            let mut next = 0;
            for owner in 0..world {
                let r = chunk_range(n, world, owner);
                prop_assert_eq!(r.start, next);
                prop_assert!(r.len() == n / world || r.len() == n / world + 1);
                next = r.end;
            }
            prop_assert_eq!(next, n);
        }

        /// Whichever rank owns the chunk, across block boundaries, and
        /// with the owner's part elsewhere too (`me == world`: every part
        /// given, `own` only written, as the shared window sums).
        #[test]
        fn sum_is_the_left_fold(
            xs in (1usize..6, 0usize..600).prop_flat_map(|(world, n)| (
                proptest::collection::vec(proptest::collection::vec(-1e30f32..1e30, n), world),
                0..=world,
            ))
        ) {
            let (xs, me) = xs;
            let n = xs[0].len();
            let mut own = xs.get(me).cloned().unwrap_or_else(|| vec![f32::NAN; n]);
            let parts: Vec<Option<&[f32]>> = xs
                .iter()
                .enumerate()
                .map(|(q, v)| (q != me).then_some(v.as_slice()))
                .collect();
            sum_into_own(&parts, &mut own);
            for i in 0..n {
                let mut s = xs[0][i];
                for x in &xs[1..] {
                    s += x[i];
                }
                prop_assert_eq!(own[i].to_bits(), s.to_bits());
            }
        }
    }

    #[test]
    fn negative_zero_survives() {
        // Owned by rank 1: rank 0's value starts the sum, not zero.
        let a = [-0.0f64];
        let mut own = [-0.0f64];
        sum_into_own(&[Some(&a), None], &mut own);
        assert!(own[0] == 0.0 && own[0].is_sign_negative());
    }
}
