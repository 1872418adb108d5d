//! Convolution and pooling over NCHW tensors.
//!
//! conv2d lowers to the im2col primitive: the input is packed once into a
//! patch matrix (padding never materialised) and multiplied by the reshaped
//! kernel in one matmul, so the heavy lifting is gemm; the backward pass is
//! two matmuls and one col2im (the primitive's VJP). The layout
//! (`kernel @ patches`, pixels innermost) keeps every permute a copy of
//! contiguous rows.
//!
//! Pooling with non-overlapping windows that tile the image is a reshape and
//! one reduction; any other window packs the patches of every channel with
//! the same primitive and reduces over the window axis. Either way the
//! max-pool VJP is the reduction's (the gradient goes to the maxima, ties
//! sharing it evenly).

use crate::error::GraphError;
use crate::ir::Window;
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
    let window = Window {
        kernel: [kh, kw],
        stride,
        padding,
    };
    let Some((oh, ow)) = window.output(h, w) else {
        tr.fail(GraphError::shape(
            "conv2d",
            "kernel empty or larger than the padded input",
            &[x.shape(), weight.shape()],
            "",
        ));
        return x.clone();
    };
    let (ckk, pixels) = (c * kh * kw, oh * ow);
    // [c*kh*kw, n*oh*ow]: every sample's patches side by side, so the whole
    // batch is one matmul; the permute that restores NCHW moves whole rows
    // of oh*ow pixels (memcpy speed).
    let patches = x.im2col(window);
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
    let window = Window {
        kernel: [k, k],
        stride,
        padding: 0,
    };
    let Some((oh, ow)) = window.output(h, w) else {
        unreachable!("1 <= k <= h, w was checked above");
    };
    // Every channel as its own one-channel image: rows are window offsets.
    let patches = x.reshape(&[n * c, 1, h, w]).im2col(window);
    let pooled = if max {
        patches.max(&[0])
    } else {
        patches.sum(&[0]) / (k * k) as f64
    };
    pooled.reshape(&[n, c, oh, ow])
}

/// Max pooling with a `k x k` window.
pub fn max_pool2d(x: &Tensor, k: usize, stride: usize) -> Tensor {
    pool(x, k, stride, true)
}

/// Average pooling with a `k x k` window.
pub fn avg_pool2d(x: &Tensor, k: usize, stride: usize) -> Tensor {
    pool(x, k, stride, false)
}
