//! CUDA C for the patch primitives (im2col, col2im): one thread per output
//! element, each a pure gather, so neither needs atomics and col2im sums
//! its overlapping windows in the same order as the CPU kernel (window row,
//! then column), giving the same bits.

use crate::ir::Window;

/// Kernel body shared by both: the geometry as constants.
fn geometry(image: &[usize], win: Window) -> String {
    let [kh, kw] = win.kernel;
    let (oh, ow) = win
        .output(image[2], image[3])
        .expect("checked at trace time");
    format!(
        "    const long long C = {c}LL, H = {h}LL, W = {w}LL, KH = {kh}LL, KW = {kw}LL, S = {s}LL, P = {p}LL, OH = {oh}LL, OW = {ow}LL, COLS = {cols}LL;\n",
        c = image[1],
        h = image[2],
        w = image[3],
        s = win.stride,
        p = win.padding,
        cols = image[0] * oh * ow,
    )
}

/// Body of `dst[i] = im2col(src)[i]` over the `[C*KH*KW, COLS]` output,
/// moving elements as `bits` words (zero bits are +0.0).
pub fn im2col_body(image: &[usize], win: Window) -> String {
    geometry(image, win)
        + "    const long long r = i / COLS, col = i % COLS;\n\
           \x20   const long long ci = r / (KH * KW), ki = (r / KW) % KH, kj = r % KW;\n\
           \x20   const long long b = col / (OH * OW), y = (col / OW) % OH, x = col % OW;\n\
           \x20   const long long iy = y * S + ki - P, ix = x * S + kj - P;\n\
           \x20   dst[i] = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? src[((b * C + ci) * H + iy) * W + ix] : 0;\n"
}

/// Body of `dst[i] = col2im(src)[i]` over the `[N, C, H, W]` output,
/// summing in the register type `ty`.
pub fn col2im_body(image: &[usize], win: Window, ty: &str) -> String {
    geometry(image, win)
        + &format!(
            "    const long long ix = i % W, iy = (i / W) % H, ci = (i / (W * H)) % C, b = i / (W * H * C);\n\
             \x20   {ty} acc = 0;\n\
             \x20   for (long long ki = 0; ki < KH; ++ki) {{\n\
             \x20     const long long ty = iy + P - ki;\n\
             \x20     if (ty < 0 || ty % S != 0 || ty / S >= OH) continue;\n\
             \x20     for (long long kj = 0; kj < KW; ++kj) {{\n\
             \x20       const long long tx = ix + P - kj;\n\
             \x20       if (tx < 0 || tx % S != 0 || tx / S >= OW) continue;\n\
             \x20       acc += src[((ci * KH + ki) * KW + kj) * COLS + b * OH * OW + (ty / S) * OW + tx / S];\n\
             \x20     }}\n\
             \x20   }}\n\
             \x20   dst[i] = acc;\n"
        )
}
