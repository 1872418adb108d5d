//! The geometry of a sliding window over NCHW images, shared by the
//! patch primitives ([`super::Op::Im2Col`], [`super::Op::Col2Im`]), their
//! shape rule and every backend's kernels, so they agree on one formula.

use serde::{Deserialize, Serialize};

/// A `kh x kw` window moved by `stride` over images zero-padded by
/// `padding` on every side (the geometry of [`super::Op::Im2Col`] and [`super::Op::Col2Im`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Window {
    /// Window height and width.
    pub kernel: [usize; 2],
    /// Step between window positions (>= 1), equal on both axes.
    pub stride: usize,
    /// Zero rows/columns added on each side, equal on both axes.
    pub padding: usize,
}

impl Window {
    /// Output height and width over an `h x w` image, or `None` when the
    /// window does not fit the padded image or the stride is zero.
    pub fn output(&self, h: usize, w: usize) -> Option<(usize, usize)> {
        let [kh, kw] = self.kernel;
        let (ph, pw) = (h + 2 * self.padding, w + 2 * self.padding);
        if self.stride == 0 || kh == 0 || kw == 0 || ph < kh || pw < kw {
            return None;
        }
        Some(((ph - kh) / self.stride + 1, (pw - kw) / self.stride + 1))
    }

    /// The patch-matrix shape `[c*kh*kw, n*oh*ow]` of images `[n, c, h, w]`.
    pub fn patches_shape(&self, image: &[usize]) -> Option<Vec<usize>> {
        let [n, c, h, w] = *image else { return None };
        let (oh, ow) = self.output(h, w)?;
        Some(vec![c * self.kernel[0] * self.kernel[1], n * oh * ow])
    }
}
