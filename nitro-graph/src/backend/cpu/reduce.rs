//! Sum and max reductions. Two fast layouts cover what networks do
//! (reducing trailing axes: softmax rows, losses; reducing leading axes:
//! bias gradients over the batch); anything else is first permuted into the
//! trailing layout.

use super::movement;
use super::raw::Raw;
use crate::fusion::strides_of;
use nitro_device::{DType, HostBuffer};
use rayon::prelude::*;

/// Which reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    /// Σ
    Sum,
    /// max
    Max,
}

const PARALLEL_MIN: usize = 64 * 1024;
/// Interleaved reductions over at most this many elements per output (a
/// pooling window) read the window in place instead of permuting first.
const SMALL_WINDOW: usize = 64;

trait Elem: Copy + Send + Sync + PartialOrd + std::ops::Add<Output = Self> {
    const ZERO: Self;
    const LOWEST: Self;
}
macro_rules! elem {
    ($($t:ty => $lowest:expr),*) => {$(impl Elem for $t {
        const ZERO: Self = 0 as $t;
        const LOWEST: Self = $lowest;
    })*};
}
elem!(f32 => f32::NEG_INFINITY, f64 => f64::NEG_INFINITY, i32 => i32::MIN, i64 => i64::MIN);

fn combine<T: Elem>(kind: Reduction, a: T, b: T) -> T {
    match kind {
        Reduction::Sum => a + b,
        // NaN propagates: a max over a row holding NaN is NaN.
        Reduction::Max => {
            #[allow(clippy::eq_op)] // b != b is the NaN test for a generic element
            let b_is_nan = b != b;
            if b > a || b_is_nan {
                b
            } else {
                a
            }
        }
    }
}

fn init<T: Elem>(kind: Reduction) -> T {
    match kind {
        Reduction::Sum => T::ZERO,
        Reduction::Max => T::LOWEST,
    }
}

/// out[o] = reduce(src[o*inner .. (o+1)*inner])
fn trailing<T: Elem>(kind: Reduction, src: &[T], dst: &mut [T], inner: usize) {
    let f = |(o, out): (usize, &mut T)| {
        *out = src[o * inner..(o + 1) * inner]
            .iter()
            .fold(init(kind), |a, &b| combine(kind, a, b));
    };
    if src.len() >= PARALLEL_MIN {
        dst.par_iter_mut().enumerate().for_each(f);
    } else {
        dst.iter_mut().enumerate().for_each(f);
    }
}

/// out[j] = reduce_i(src[i*inner + j])
fn leading<T: Elem>(kind: Reduction, src: &[T], dst: &mut [T], inner: usize) {
    const COLS: usize = 1024;
    let f = |(c, out): (usize, &mut [T])| {
        out.fill(init(kind));
        let j0 = c * COLS;
        let width = out.len();
        for row in src.chunks(inner) {
            for (o, &v) in out.iter_mut().zip(&row[j0..j0 + width]) {
                *o = combine(kind, *o, v);
            }
        }
    };
    if src.len() >= PARALLEL_MIN {
        dst.par_chunks_mut(COLS).enumerate().for_each(f);
    } else {
        dst.chunks_mut(COLS).enumerate().for_each(f);
    }
}

/// Reduce `src` of `shape` over `axes` into `dst`.
pub fn reduce(kind: Reduction, src: Raw, dst: Raw, shape: &[usize], axes: &[usize]) {
    let r = shape.len();
    let kept: Vec<usize> = (0..r).filter(|a| !axes.contains(a)).collect();
    // Axes of size 1 do not change the layout; ignore them when classifying.
    let real = |a: &usize| shape[*a] != 1;
    let red_real: Vec<usize> = axes.iter().copied().filter(real).collect();
    let kept_real: Vec<usize> = kept.iter().copied().filter(real).collect();
    let reduced: usize = axes.iter().map(|&a| shape[a]).product();
    let out_n: usize = kept.iter().map(|&a| shape[a]).product();
    let is_trailing = kept_real.iter().all(|k| red_real.iter().all(|a| k < a));
    let is_leading = red_real.iter().all(|a| kept_real.iter().all(|k| a < k));
    if out_n == 0 {
        return;
    }
    if reduced == 0 {
        movement::fill(
            dst,
            if kind == Reduction::Sum {
                0.0
            } else {
                f64::NEG_INFINITY
            },
        );
        return;
    }
    if !is_trailing && !is_leading && reduced <= SMALL_WINDOW {
        return reduce_windows(kind, src, dst, shape, axes);
    }
    if !is_trailing && !is_leading {
        // Permute to [kept..., reduced...] and reduce the trailing block.
        let perm: Vec<usize> = kept.iter().chain(axes).copied().collect();
        let base = strides_of(shape);
        let pshape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
        let pstrides: Vec<usize> = perm.iter().map(|&p| base[p]).collect();
        let mut tmp = HostBuffer::zeros(src.dtype, src.len);
        let t = Raw::of(&mut tmp);
        movement::gather(src, t, &pshape, &pstrides, 0);
        return reduce_layout(kind, t, dst, reduced, true);
    }
    reduce_layout(
        kind,
        src,
        dst,
        if is_trailing { reduced } else { out_n },
        is_trailing,
    )
}

fn reduce_layout(kind: Reduction, src: Raw, dst: Raw, inner: usize, is_trailing: bool) {
    macro_rules! go {
        ($t:ty) => {{
            // SAFETY: distinct live buffers of dtype $t.
            let (s, d) = unsafe { (src.slice::<$t>(), dst.slice_mut::<$t>()) };
            if is_trailing {
                trailing(kind, s, d, inner)
            } else {
                leading(kind, s, d, inner)
            }
        }};
    }
    match src.dtype {
        DType::F32 => go!(f32),
        DType::F64 => go!(f64),
        DType::I32 => go!(i32),
        DType::I64 => go!(i64),
        other => unreachable!("reduction over {other} is refused at trace time"),
    }
}

/// out[o] = reduce over a small window of offsets around base(o): the
/// pooling layout (`[n, c, h, k, w, k]` reduced over the two `k` axes).
fn reduce_windows(kind: Reduction, src: Raw, dst: Raw, shape: &[usize], axes: &[usize]) {
    let base = strides_of(shape);
    let kept: Vec<usize> = (0..shape.len()).filter(|a| !axes.contains(a)).collect();
    let kept_shape: Vec<usize> = kept.iter().map(|&a| shape[a]).collect();
    let kept_strides: Vec<usize> = kept.iter().map(|&a| base[a]).collect();
    let mut window = vec![0usize];
    for &a in axes {
        let (len, stride) = (shape[a], base[a]);
        window = window
            .iter()
            .flat_map(|&w| (0..len).map(move |i| w + i * stride))
            .collect();
    }
    // Outputs go row by row along the last kept axis: one multi-index
    // decomposition per row, then a fixed step per output.
    let r = kept_shape.len();
    let (row_len, row_step) = match r {
        0 => (1, 0),
        _ => (kept_shape[r - 1], kept_strides[r - 1]),
    };
    let outer = &kept_shape[..r.saturating_sub(1)];
    let outer_strides = &kept_strides[..r.saturating_sub(1)];
    macro_rules! go {
        ($t:ty) => {{
            // SAFETY: distinct live buffers of dtype $t.
            let (s, d) = unsafe { (src.slice::<$t>(), dst.slice_mut::<$t>()) };
            let f = |(row, out): (usize, &mut [$t])| {
                let b = movement::row_offset(row, outer, outer_strides);
                for (j, o) in out.iter_mut().enumerate() {
                    let at = b + j * row_step;
                    *o = window
                        .iter()
                        .fold(init(kind), |acc, &w| combine(kind, acc, s[at + w]));
                }
            };
            if d.len() >= PARALLEL_MIN / 4 {
                d.par_chunks_mut(row_len).enumerate().for_each(f);
            } else {
                d.chunks_mut(row_len).enumerate().for_each(f);
            }
        }};
    }
    match src.dtype {
        DType::F32 => go!(f32),
        DType::F64 => go!(f64),
        DType::I32 => go!(i32),
        DType::I64 => go!(i64),
        other => unreachable!("reduction over {other} is refused at trace time"),
    }
}
