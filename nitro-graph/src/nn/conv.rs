//! Convolution and pooling over NCHW tensors.
//!
//! conv2d lowers to im2col: the padded input is cut into `kh*kw` strided
//! windows (slices), stacked into a patch matrix and multiplied by the
//! reshaped kernel in one matmul, so the heavy lifting is gemm and autodiff
//! needs no convolution rule of its own. The layout (`kernel @ patches`,
//! pixels innermost) keeps every permute a copy of contiguous rows.

use crate::error::GraphError;
use crate::trace::Tensor;

/// 2-D convolution: `x [n, c, h, w]`, `weight [o, c, kh, kw]`, optional
/// `bias [o]`, equal stride and zero padding on both spatial axes.
pub fn conv2d(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stride: usize,
    padding: usize,
) -> Tensor {
    let tr = x.tracer();
    if x.rank() != 4 || weight.rank() != 4 || x.shape()[1] != weight.shape()[1] || stride == 0 {
        tr.fail(GraphError::shape(
            "conv2d",
            "expects x [n,c,h,w] and weight [o,c,kh,kw] with equal c and stride >= 1",
            &[x.shape(), weight.shape()],
            "",
        ));
        return x.clone();
    }
    let (n, c, h, w) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
    let (o, kh, kw) = (weight.shape()[0], weight.shape()[2], weight.shape()[3]);
    if h + 2 * padding < kh || w + 2 * padding < kw {
        tr.fail(GraphError::shape(
            "conv2d",
            "kernel larger than the padded input",
            &[x.shape(), weight.shape()],
            "",
        ));
        return x.clone();
    }
    let oh = (h + 2 * padding - kh) / stride + 1;
    let ow = (w + 2 * padding - kw) / stride + 1;
    let xp = if padding > 0 {
        x.pad(&[0, 0, padding, padding], &[0, 0, padding, padding], 0.0)
    } else {
        x.clone()
    };
    let mut windows = Vec::with_capacity(kh * kw);
    for i in 0..kh {
        for j in 0..kw {
            let win = xp.slice(
                &[0, 0, i, j],
                &[n, c, i + (oh - 1) * stride + 1, j + (ow - 1) * stride + 1],
                &[1, 1, stride, stride],
            );
            windows.push(win.reshape(&[n, c, 1, oh, ow]));
        }
    }
    // [n, c, kh*kw, oh, ow] = per sample a [c*kh*kw, oh*ow] patch matrix.
    let Ok(stacked) = Tensor::concat(&windows, 2) else {
        return x.clone();
    };
    let (ckk, pixels) = (c * kh * kw, oh * ow);
    // Put the samples side by side: [c*kh*kw, n*oh*ow]. The permute moves
    // whole rows of oh*ow pixels, so it runs at memcpy speed, and so does
    // the one that restores NCHW after the single large matmul.
    let patches = stacked
        .reshape(&[n, ckk, pixels])
        .permute(&[1, 0, 2])
        .reshape(&[ckk, n * pixels]);
    let kernel = weight.reshape(&[o, ckk]);
    let out = kernel
        .matmul(&patches)
        .reshape(&[o, n, pixels])
        .permute(&[1, 0, 2])
        .reshape(&[n, o, oh, ow]);
    match bias {
        Some(b) => out + b.reshape(&[1, o, 1, 1]),
        None => out,
    }
}

fn pool(x: &Tensor, k: usize, stride: usize, max: bool) -> Tensor {
    let tr = x.tracer();
    if x.rank() != 4 || k == 0 || stride == 0 || x.shape()[2] < k || x.shape()[3] < k {
        tr.fail(GraphError::shape(
            "pool2d",
            "expects x [n,c,h,w] with h, w >= kernel >= 1",
            &[x.shape()],
            "",
        ));
        return x.clone();
    }
    let (n, c, h, w) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
    if k == stride && h % k == 0 && w % k == 0 {
        // Non-overlapping windows: a reshape exposes them as axes 3 and 5.
        let r = x.reshape(&[n, c, h / k, k, w / k, k]);
        return if max {
            r.max(&[3, 5])
        } else {
            r.sum(&[3, 5]) / (k * k) as f64
        };
    }
    let (oh, ow) = ((h - k) / stride + 1, (w - k) / stride + 1);
    let mut acc: Option<Tensor> = None;
    for i in 0..k {
        for j in 0..k {
            let win = x.slice(
                &[0, 0, i, j],
                &[n, c, i + (oh - 1) * stride + 1, j + (ow - 1) * stride + 1],
                &[1, 1, stride, stride],
            );
            acc = Some(match acc {
                None => win,
                Some(a) if max => a.maximum(&win),
                Some(a) => a + win,
            });
        }
    }
    let acc = acc.expect("k >= 1");
    if max {
        acc
    } else {
        acc / (k * k) as f64
    }
}

/// Max pooling with a `k x k` window.
pub fn max_pool2d(x: &Tensor, k: usize, stride: usize) -> Tensor {
    pool(x, k, stride, true)
}

/// Average pooling with a `k x k` window.
pub fn avg_pool2d(x: &Tensor, k: usize, stride: usize) -> Tensor {
    pool(x, k, stride, false)
}
