//! Reduction kernels (`reduce_sum`, `reduce_max` over any axes): one
//! thread per output when the reduced extent is short, otherwise one block
//! per output with a strided loop, warp shuffles and one shared-memory
//! pass. Owns the combination order of a reduction on the GPU.

use super::types::storage_type;
use super::{decompose, Grid, BLOCK, BLOCK_REDUCE_MIN};
use crate::fusion::strides_of;
use nitro_device::DType;
use std::fmt::Write;

/// A reduction kernel: `dst[o] = ⊕_r src[base(o) + off(r)]`.
pub(super) fn reduce(
    name: &str,
    d: DType,
    is_max: bool,
    shape: &[usize],
    axes: &[usize],
) -> (String, Grid) {
    let ty = storage_type(d);
    let strides = strides_of(shape);
    let kept: Vec<usize> = (0..shape.len()).filter(|a| !axes.contains(a)).collect();
    let pick = |list: &[usize]| -> (Vec<usize>, Vec<usize>) {
        (
            list.iter().map(|&a| shape[a]).collect(),
            list.iter().map(|&a| strides[a]).collect(),
        )
    };
    let (kshape, kstrides) = pick(&kept);
    let (rshape, rstrides) = pick(axes);
    let out_n: usize = kshape.iter().product();
    let red_n: usize = rshape.iter().product();
    let init = if is_max {
        match d {
            DType::F32 => "__int_as_float(0xff800000)".to_string(),
            DType::F64 => "__longlong_as_double(0xfff0000000000000LL)".to_string(),
            DType::I32 => "(-2147483647 - 1)".to_string(),
            _ => "(-9223372036854775807LL - 1)".to_string(),
        }
    } else {
        format!("({ty})0")
    };
    // NaN propagates through max, whatever the order of combination.
    let combine = |a: &str, b: &str| {
        if is_max {
            format!("(({b} > {a} || {b} != {b}) ? {b} : {a})")
        } else {
            format!("{a} + {b}")
        }
    };
    let params = [format!("const {ty}* src"), format!("{ty}* dst")];
    let base = decompose("o", &kshape, &kstrides, "base", "    ");
    let off = decompose("r", &rshape, &rstrides, "off", "      ");
    let mut code = format!(
        "// {} over axes {axes:?} of {shape:?}: {out_n} outputs of {red_n} elements\n",
        if is_max { "max" } else { "sum" }
    );
    if red_n < BLOCK_REDUCE_MIN {
        let _ = write!(
            code,
            "extern \"C\" __global__ void {name}({}) {{\n  const long long n = {out_n}LL;\n  for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < n; o += (long long)gridDim.x * blockDim.x) {{\n    long long base = 0;\n{base}    {ty} acc = {init};\n    for (long long r = 0; r < {red_n}LL; ++r) {{\n      long long off = base;\n{off}      acc = {};\n    }}\n    dst[o] = acc;\n  }}\n}}\n",
            params.join(", "),
            combine("acc", "src[off]"),
        );
        (code, Grid::PerElement(out_n))
    } else {
        let _ = write!(
            code,
            "extern \"C\" __global__ void {name}({}) {{\n  __shared__ {ty} part[{warps}];\n  for (long long o = blockIdx.x; o < {out_n}LL; o += gridDim.x) {{\n    long long base = 0;\n{base}    {ty} acc = {init};\n    for (long long r = threadIdx.x; r < {red_n}LL; r += blockDim.x) {{\n      long long off = base;\n{off}      acc = {};\n    }}\n    for (int s = 16; s > 0; s >>= 1) {{ const {ty} other = __shfl_down_sync(0xffffffffu, acc, s); acc = {}; }}\n    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;\n    __syncthreads();\n    if (threadIdx.x < 32) {{\n      acc = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : {init};\n      for (int s = 16; s > 0; s >>= 1) {{ const {ty} other = __shfl_down_sync(0xffffffffu, acc, s); acc = {}; }}\n      if (threadIdx.x == 0) dst[o] = acc;\n    }}\n    __syncthreads();\n  }}\n}}\n",
            params.join(", "),
            combine("acc", "src[off]"),
            combine("acc", "other"),
            combine("acc", "other"),
            warps = BLOCK / 32,
        );
        (code, Grid::PerBlock(out_n))
    }
}
