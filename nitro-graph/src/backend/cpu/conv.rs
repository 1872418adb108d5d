//! Direct convolution (stride 1, f32): `out = kernel @ im2col(x)` computed
//! from the image itself, never writing the patch matrix (which for LeNet's
//! first layer is 25 times the image and took a quarter of its predict
//! time to write and read back). The fuser decides which products come
//! here (`fusion::direct_convs`); the output is the matmul's, `[o,
//! n*oh*ow]`, so the rest of the program is unchanged.
//!
//! The trick that makes it a GEMM microkernel: with stride 1, output pixel
//! `(y, x)` of one sample reads padded-image element
//! `(y + i) * wp + (x + j)` for window offset `(i, j)` of channel `ci`,
//! i.e. `q + off[p]` with `q = y * wp + x` and `off[p]` a per-offset
//! constant. Computing the output over the padded width (`q` in
//! `0..oh*wp`, the `wp - ow` extra columns per row discarded) makes 16
//! consecutive `q` read 16 consecutive image elements for every `p`, so a
//! 6-channel x 16-pixel tile is the `sgemm` microkernel with its B panel
//! read straight from the (L1/L2-resident) padded image.
//!
//! Each output element is one sum over `p` in order, the same on every
//! thread count; it rounds differently from the gemm route (a different
//! order), as any two gemm blockings do.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::raw::Raw;
use crate::ir::Window;
use rayon::prelude::*;

/// Output channels per tile.
const OB: usize = 6;
/// Pixels per tile (two 8-lane vectors).
const QB: usize = 16;

/// `out [o, n*oh*ow] = kernel [o, c*kh*kw] @ im2col(x)`, for images `x` of
/// shape `image` `[n, c, h, w]` under a stride-1 `win`.
pub fn direct_conv(kernel: Raw, x: Raw, out: Raw, image: &[usize], o: usize, win: Window) {
    let [n, c, h, w] = image[..] else {
        unreachable!("im2col images are rank 4 (checked at trace time)")
    };
    let (Some((oh, ow)), 1) = (win.output(h, w), win.stride) else {
        unreachable!("the fuser sends only stride-1 windows that fit")
    };
    let [kh, kw] = win.kernel;
    let pad = win.padding;
    let (hp, wp) = (h + 2 * pad, w + 2 * pad);
    let ckk = c * kh * kw;
    // SAFETY: the plan gives the kernel o*ckk, the images n*c*h*w and the
    // output o*n*oh*ow f32 elements (the fuser checked every dtype).
    let (kernel, x) = unsafe {
        (
            std::slice::from_raw_parts(kernel.ptr::<f32>(), o * ckk),
            std::slice::from_raw_parts(x.ptr::<f32>(), n * c * h * w),
        )
    };
    let offsets: Vec<usize> = (0..c)
        .flat_map(|ci| (0..kh).flat_map(move |i| (0..kw).map(move |j| (ci * hp + i) * wp + j)))
        .collect();
    // The kernel as OB-tall panels: for each p, OB weights (zero past o).
    let blocks = o.div_ceil(OB);
    let mut packed = vec![0.0f32; blocks * ckk * OB];
    for (r, row) in kernel.chunks(ckk).enumerate() {
        let (b, i) = (r / OB, r % OB);
        for (p, &v) in row.iter().enumerate() {
            packed[(b * ckk + p) * OB + i] = v;
        }
    }
    let virt = oh * wp;
    let tiles = virt.div_ceil(QB);
    // The last tile reads up to QB - 1 past the last virtual pixel.
    let image_len = (c * hp * wp).max(offsets[ckk - 1] + tiles * QB);
    let plane = n * oh * ow;
    let dst = out;
    // `simd::avx2` checks FMA too: what the tile kernel needs.
    let wide = super::simd::avx2();
    let sample = |s: usize| {
        let mut img = vec![0.0f32; image_len];
        for ci in 0..c {
            for y in 0..h {
                let src = &x[((s * c + ci) * h + y) * w..][..w];
                copy_short(src, &mut img[(ci * hp + y + pad) * wp + pad..][..w]);
            }
        }
        let mut tile = [0.0f32; OB * QB];
        for b in 0..blocks {
            let panel = &packed[b * ckk * OB..(b + 1) * ckk * OB];
            let rows = OB.min(o - b * OB);
            for t in 0..tiles {
                let q0 = t * QB;
                compute_tile(&img[q0..], &offsets, panel, &mut tile, wide);
                // Copy the live pixels: each output row met by the tile is
                // one contiguous run of it.
                let mut y = q0 / wp;
                while y * wp < (q0 + QB).min(virt) {
                    let lo = q0.max(y * wp);
                    let hi = (q0 + QB).min(y * wp + ow);
                    if lo < hi {
                        for r in 0..rows {
                            let at = (b * OB + r) * plane + s * oh * ow + y * ow + (lo - y * wp);
                            let run = &tile[r * QB + (lo - q0)..r * QB + (hi - q0)];
                            // SAFETY: channel b*OB+r < o, pixel (y, lo-y*wp..hi-y*wp)
                            // of sample s: inside the output, and only this
                            // task writes sample s's columns.
                            let out = unsafe {
                                std::slice::from_raw_parts_mut(dst.ptr::<f32>().add(at), run.len())
                            };
                            copy_short(run, out);
                        }
                    }
                    y += 1;
                }
            }
        }
    };
    if n > 1 && o * ckk * virt * n >= 1 << 18 {
        (0..n).into_par_iter().for_each(sample);
    } else {
        (0..n).for_each(sample);
    }
}

/// `dst = src` for the short runs here (an image row, a tile row's live
/// pixels): eight at a time by fixed-size copies, then one by one, so no
/// call into `memcpy` (which cost 9% of LeNet's predict on runs of a few
/// dozen bytes).
#[inline(always)]
fn copy_short(src: &[f32], dst: &mut [f32]) {
    let mut d = dst.chunks_exact_mut(8);
    let mut s = src.chunks_exact(8);
    for (d, s) in (&mut d).zip(&mut s) {
        let s: &[f32; 8] = s.try_into().expect("chunks of 8");
        d.copy_from_slice(s);
    }
    for (d, &s) in d.into_remainder().iter_mut().zip(s.remainder()) {
        // A volatile write keeps the compiler from turning this loop of
        // at most seven elements back into a `memcpy` call.
        // SAFETY: `d` is a valid, exclusive element of `dst`.
        unsafe { std::ptr::write_volatile(d, s) };
    }
}

/// `tile[i][l] = sum_p panel[p][i] * img[offsets[p] + l]` for the OB x QB
/// tile whose first pixel is `img[0]`.
/// `wide`: the CPU has AVX2 and FMA ([`super::simd::avx2`], asked once per call).
fn compute_tile(
    img: &[f32],
    offsets: &[usize],
    panel: &[f32],
    tile: &mut [f32; OB * QB],
    wide: bool,
) {
    let last = offsets.last().map_or(0, |&o| o + QB);
    assert!(img.len() >= last && panel.len() >= offsets.len() * OB);
    #[cfg(target_arch = "x86_64")]
    if wide {
        // SAFETY: AVX2 and FMA are present; the assert above bounds every
        // read (offsets[p] + QB <= img.len(), OB weights per p).
        return unsafe { tile_avx2(img.as_ptr(), offsets, panel.as_ptr(), tile) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = wide;
    tile.fill(0.0);
    for (p, &off) in offsets.iter().enumerate() {
        for i in 0..OB {
            let a = panel[p * OB + i];
            for l in 0..QB {
                tile[i * QB + l] += a * img[off + l];
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2(
    img: *const f32,
    offsets: &[usize],
    panel: *const f32,
    tile: &mut [f32; OB * QB],
) {
    // SAFETY: the caller bounds every read (see `compute_tile`).
    unsafe {
        let z = _mm256_setzero_ps();
        let (mut c00, mut c01, mut c10, mut c11, mut c20, mut c21) = (z, z, z, z, z, z);
        let (mut c30, mut c31, mut c40, mut c41, mut c50, mut c51) = (z, z, z, z, z, z);
        let mut ap = panel;
        for &off in offsets {
            let src = img.add(off);
            let b0 = _mm256_loadu_ps(src);
            let b1 = _mm256_loadu_ps(src.add(8));
            // Output channel `i` of the tile: its weight times both pixel
            // vectors. One broadcast live at a time: 12 accumulators, two
            // pixel vectors and one weight fill the 16 registers exactly
            // (two weights at once made LLVM spill accumulators).
            macro_rules! channel {
                ($i:expr, $lo:ident, $hi:ident) => {
                    let a = _mm256_broadcast_ss(&*ap.add($i));
                    $lo = _mm256_fmadd_ps(a, b0, $lo);
                    $hi = _mm256_fmadd_ps(a, b1, $hi);
                };
            }
            channel!(0, c00, c01);
            channel!(1, c10, c11);
            channel!(2, c20, c21);
            channel!(3, c30, c31);
            channel!(4, c40, c41);
            channel!(5, c50, c51);
            ap = ap.add(OB);
        }
        let t = tile.as_mut_ptr();
        for (i, (lo, hi)) in [
            (c00, c01),
            (c10, c11),
            (c20, c21),
            (c30, c31),
            (c40, c41),
            (c50, c51),
        ]
        .into_iter()
        .enumerate()
        {
            _mm256_storeu_ps(t.add(i * QB), lo);
            _mm256_storeu_ps(t.add(i * QB + 8), hi);
        }
    }
}
