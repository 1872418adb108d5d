//! The row-major product nitro asks for maps onto the column-major cuBLAS
//! call it makes: the call's parameters ([`GemmShape::column_major`]),
//! applied by the BLAS definition of `gemmStridedBatched` to the operands'
//! row-major bytes, give the row-major product, for every transpose pair,
//! shape and batch. Host only: this checks the mapping, not cuBLAS.
#![cfg(feature = "cuda")]

use nitro_device::cuda::{ColumnMajorCall, GemmShape};
use proptest::prelude::*;

/// `C = op(X) @ op(Y)` column-major by the BLAS definition, for each batch:
/// `op(X)(i, p)` is `X[p + i*ld]` when transposed, else `X[i + p*ld]`.
fn blas_strided_batched(call: &ColumnMajorCall, batch: usize, x: &[f64], y: &[f64]) -> Vec<f64> {
    let (sx, sy, sc) = call.strides;
    let mut c = vec![f64::NAN; batch * sc];
    for b in 0..batch {
        for i in 0..call.rows {
            for j in 0..call.cols {
                let mut acc = 0.0;
                for p in 0..call.depth {
                    let xv = if call.trans_first {
                        x[b * sx + p + i * call.ld_first]
                    } else {
                        x[b * sx + i + p * call.ld_first]
                    };
                    let yv = if call.trans_second {
                        y[b * sy + j + p * call.ld_second]
                    } else {
                        y[b * sy + p + j * call.ld_second]
                    };
                    acc += xv * yv;
                }
                c[b * sc + i + j * call.ld_result] = acc;
            }
        }
    }
    c
}

proptest! {
    #[test]
    fn the_cublas_call_computes_the_row_major_product(
        batch in 1usize..4, m in 1usize..7, n in 1usize..7, k in 1usize..7,
        ta: bool, tb: bool, seed in 0u64..1000,
    ) {
        let value = |i: usize, salt: u64| ((i as u64 * 2654435761 + salt * 97 + seed) % 17) as f64 - 8.0;
        // Row-major storage: A is [m,k] (or [k,m] when ta), B is [k,n] (or [n,k] when tb).
        let a: Vec<f64> = (0..batch * m * k).map(|i| value(i, 1)).collect();
        let b: Vec<f64> = (0..batch * k * n).map(|i| value(i, 2)).collect();
        let at = |bi: usize, i: usize, p: usize| if ta { a[bi * m * k + p * m + i] } else { a[bi * m * k + i * k + p] };
        let bt = |bi: usize, p: usize, j: usize| if tb { b[bi * k * n + j * k + p] } else { b[bi * k * n + p * n + j] };
        let shape = GemmShape { batch, m, n, k, ta, tb };
        // cuBLAS is handed B first, then A (see nitro-device's blas module).
        let got = blas_strided_batched(&shape.column_major(), batch, &b, &a);
        for bi in 0..batch {
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k).map(|p| at(bi, i, p) * bt(bi, p, j)).sum();
                    prop_assert_eq!(got[bi * m * n + i * n + j], want, "C[{}][{},{}] of {:?}", bi, i, j, shape);
                }
            }
        }
    }
}
