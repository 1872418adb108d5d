//! The patch kernels: im2col (images to the patch matrix a convolution
//! multiplies) and col2im (its adjoint, summing patches back into images).
//!
//! Each writes its output exactly once in disjoint parallel blocks (rows of
//! the patch matrix; image planes for col2im), so they are deterministic
//! and need no atomics. Zero padding is never materialised: the range of
//! output positions whose source lies inside the image is computed per
//! window offset, the rest is zero (im2col) or contributes nothing (col2im).

use super::raw::Raw;
use crate::ir::Window;
use nitro_device::DType;
use rayon::prelude::*;
use std::ops::AddAssign;

/// Below this many output elements a patch kernel runs on one thread.
const PARALLEL_MIN: usize = 64 * 1024;

/// Output positions `o < len_out` whose source `o*stride + offset - pad`
/// lies in `0..len_in`, as a half-open range.
fn inside(
    offset: usize,
    pad: usize,
    stride: usize,
    len_in: usize,
    len_out: usize,
) -> (usize, usize) {
    let lo = pad.saturating_sub(offset).div_ceil(stride);
    let hi = (len_in + pad)
        .saturating_sub(offset)
        .div_ceil(stride)
        .min(len_out);
    (lo.min(hi), hi)
}

/// The geometry of one call: images `[n, c, h, w]`, output `oh x ow`.
#[derive(Clone, Copy)]
struct Geometry {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    win: Window,
}

impl Geometry {
    fn new(image: &[usize], win: Window) -> Geometry {
        let (oh, ow) = win
            .output(image[2], image[3])
            .expect("checked at trace time");
        Geometry {
            n: image[0],
            c: image[1],
            h: image[2],
            w: image[3],
            oh,
            ow,
            win,
        }
    }
}

fn im2col_t<T: Copy + Default + Send + Sync>(src: &[T], dst: &mut [T], g: Geometry) {
    let [kh, kw] = g.win.kernel;
    let (s, p) = (g.win.stride, g.win.padding);
    let pixels = g.oh * g.ow;
    let cols = g.n * pixels;
    if cols == 0 {
        return;
    }
    let row = |r: usize, out: &mut [T]| {
        let (ci, i, j) = (r / (kh * kw), (r / kw) % kh, r % kw);
        let (y0, y1) = inside(i, p, s, g.h, g.oh);
        let (x0, x1) = inside(j, p, s, g.w, g.ow);
        for b in 0..g.n {
            let plane = &src[(b * g.c + ci) * g.h * g.w..][..g.h * g.w];
            let block = &mut out[b * pixels..][..pixels];
            block[..y0 * g.ow].fill(T::default());
            block[y1 * g.ow..].fill(T::default());
            for y in y0..y1 {
                let line = &mut block[y * g.ow..][..g.ow];
                let sy = (y * s + i - p) * g.w;
                line[..x0].fill(T::default());
                line[x1..].fill(T::default());
                if s == 1 {
                    let sx = x0 + j - p;
                    // An inline loop, not `copy_from_slice`: lines are short
                    // (LeNet: 24 and 8 pixels), and a memcpy call per line
                    // cost more than the copy.
                    for (d, &v) in line[x0..x1].iter_mut().zip(&plane[sy + sx..]) {
                        *d = v;
                    }
                } else {
                    for (x, v) in line[x0..x1].iter_mut().enumerate() {
                        *v = plane[sy + (x0 + x) * s + j - p];
                    }
                }
            }
        }
    };
    if dst.len() >= PARALLEL_MIN {
        dst.par_chunks_mut(cols)
            .enumerate()
            .for_each(|(r, out)| row(r, out));
    } else {
        dst.chunks_mut(cols)
            .enumerate()
            .for_each(|(r, out)| row(r, out));
    }
}

fn col2im_t<T: Copy + Default + AddAssign + Send + Sync>(src: &[T], dst: &mut [T], g: Geometry) {
    let [kh, kw] = g.win.kernel;
    let (s, p) = (g.win.stride, g.win.padding);
    let pixels = g.oh * g.ow;
    let cols = g.n * pixels;
    let plane_len = g.h * g.w;
    if plane_len == 0 {
        return;
    }
    let plane = |q: usize, out: &mut [T]| {
        out.fill(T::default());
        let (b, ci) = (q / g.c, q % g.c);
        for i in 0..kh {
            let (y0, y1) = inside(i, p, s, g.h, g.oh);
            for j in 0..kw {
                let (x0, x1) = inside(j, p, s, g.w, g.ow);
                let r = (ci * kh + i) * kw + j;
                let patch = &src[r * cols + b * pixels..][..pixels];
                for y in y0..y1 {
                    let line = &patch[y * g.ow..][..g.ow];
                    let dy = (y * s + i - p) * g.w;
                    if s == 1 {
                        // Distinct slices: the compiler vectorises the adds
                        // (each element still sums in the same order).
                        let at = dy + x0 + j - p;
                        for (o, &v) in out[at..at + (x1 - x0)].iter_mut().zip(&line[x0..x1]) {
                            *o += v;
                        }
                    } else {
                        for (x, &v) in line.iter().enumerate().take(x1).skip(x0) {
                            out[dy + x * s + j - p] += v;
                        }
                    }
                }
            }
        }
    };
    if dst.len() >= PARALLEL_MIN {
        dst.par_chunks_mut(plane_len)
            .enumerate()
            .for_each(|(q, out)| plane(q, out));
    } else {
        dst.chunks_mut(plane_len)
            .enumerate()
            .for_each(|(q, out)| plane(q, out));
    }
}

/// `out = im2col(x)` for images `x` of shape `image` (see `Op::Im2Col`).
pub fn im2col(x: Raw, out: Raw, image: &[usize], win: Window) {
    let g = Geometry::new(image, win);
    // SAFETY: the dtype says the element type; `out` does not overlap `x`.
    unsafe {
        match x.dtype {
            DType::F32 => im2col_t(x.slice::<f32>(), out.slice_mut::<f32>(), g),
            DType::F64 => im2col_t(x.slice::<f64>(), out.slice_mut::<f64>(), g),
            other => unreachable!("im2col on {other} is refused at trace time"),
        }
    }
}

/// `out = col2im(cols)` into images of shape `image` (see `Op::Col2Im`).
pub fn col2im(cols: Raw, out: Raw, image: &[usize], win: Window) {
    let g = Geometry::new(image, win);
    // SAFETY: as in `im2col`.
    unsafe {
        match cols.dtype {
            DType::F32 => col2im_t(cols.slice::<f32>(), out.slice_mut::<f32>(), g),
            DType::F64 => col2im_t(cols.slice::<f64>(), out.slice_mut::<f64>(), g),
            other => unreachable!("col2im on {other} is refused at trace time"),
        }
    }
}
