//! Matrix products through the `gemm` crate (pure Rust, runtime-dispatched
//! AVX2/FMA microkernels, rayon-parallel). Transposed operands are passed as
//! strides, never copied.

use super::raw::Raw;
use nitro_device::{DType, HostBuffer};

/// Below this many multiply-adds the threading overhead outweighs the gain.
const PARALLEL_MIN_FLOPS: usize = 1 << 18;

/// `out[b] = op(a[b]) @ op(b[b])` for every batch index; shapes as in the IR.
/// f16/bf16 operands (mixed precision) are widened to f32 first, exactly,
/// and multiplied with f32 accumulation into the f32 result.
pub fn matmul(a: Raw, b: Raw, out: Raw, a_shape: &[usize], b_shape: &[usize], ta: bool, tb: bool) {
    if matches!(a.dtype, DType::F16 | DType::BF16) {
        let (mut wa, mut wb) = (widen(a), widen(b));
        return matmul(
            Raw::of(&mut wa),
            Raw::of(&mut wb),
            out,
            a_shape,
            b_shape,
            ta,
            tb,
        );
    }
    let r = a_shape.len();
    let batch: usize = a_shape[..r - 2].iter().product();
    let (ar, ac) = (a_shape[r - 2], a_shape[r - 1]);
    let (br, bc) = (b_shape[r - 2], b_shape[r - 1]);
    let (m, k) = if ta { (ac, ar) } else { (ar, ac) };
    let n = if tb { br } else { bc };
    // Row-major a[ar, ac]: element (i, j) at i*ac + j. op(a)(i, p):
    // untransposed (rs = ac, cs = 1); transposed (rs = 1, cs = ac).
    let (a_rs, a_cs) = if ta {
        (1, ac as isize)
    } else {
        (ac as isize, 1)
    };
    let (b_rs, b_cs) = if tb {
        (1, bc as isize)
    } else {
        (bc as isize, 1)
    };
    let par = if m * n * k >= PARALLEL_MIN_FLOPS {
        gemm::Parallelism::Rayon(0)
    } else {
        gemm::Parallelism::None
    };
    macro_rules! run {
        ($t:ty, $zero:expr, $one:expr) => {{
            for bi in 0..batch {
                // SAFETY: the pointers address batch `bi` of buffers of the
                // shapes above; `out` does not overlap `a` or `b`.
                unsafe {
                    let ap = a.ptr::<$t>().add(bi * ar * ac);
                    let bp = b.ptr::<$t>().add(bi * br * bc);
                    let op = out.ptr::<$t>().add(bi * m * n);
                    if k == 0 {
                        std::slice::from_raw_parts_mut(op, m * n).fill($zero);
                        continue;
                    }
                    gemm::gemm(
                        m, n, k, op, 1, n as isize, false, ap, a_cs, a_rs, bp, b_cs, b_rs, $zero,
                        $one, false, false, false, par,
                    );
                }
            }
        }};
    }
    match out.dtype {
        DType::F32 => run!(f32, 0.0f32, 1.0f32),
        DType::F64 => run!(f64, 0.0f64, 1.0f64),
        other => unreachable!("matmul on {other} is refused at trace time"),
    }
}

/// An f16/bf16 operand as f32 (every value is exactly representable).
fn widen(x: Raw) -> HostBuffer {
    // SAFETY: the dtype says which 16-bit type the buffer holds.
    HostBuffer::F32(unsafe {
        match x.dtype {
            DType::F16 => x.slice::<half::f16>().iter().map(|v| v.to_f32()).collect(),
            _ => x.slice::<half::bf16>().iter().map(|v| v.to_f32()).collect(),
        }
    })
}
