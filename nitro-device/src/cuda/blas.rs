//! Matrix products through cuBLAS, in nitro's row-major convention.
//!
//! cuBLAS is column-major. A row-major `C[m,n] = op(A) @ op(B)` is the
//! column-major `C^T[n,m] = op(B)^T @ op(A)^T`, and a row-major matrix read
//! column-major *is* its transpose; so the call swaps the operands, keeps
//! each operand's transpose flag, and uses the stored row length as the
//! leading dimension. Every product goes through
//! `cublasGemmStridedBatchedEx`, which also gives the mixed-precision entry
//! points: bf16 or f16 inputs with f32 accumulation and an f32 result.

use super::{cuda_err, CudaDevice};
use crate::DeviceError;
use cudarc::cublas::{
    result as blas,
    sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType},
    CudaBlas,
};
use cudarc::driver::CudaStream;
use std::ffi::c_void;
use std::sync::Arc;

/// Element types of a product: inputs, output, accumulation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmTypes {
    /// f32 in, f32 out, f32 accumulation (exact IEEE, no TF32).
    F32,
    /// f64 in, f64 out, f64 accumulation.
    F64,
    /// bf16 in, f32 out, f32 accumulation (tensor cores).
    BF16,
    /// f16 in, f32 out, f32 accumulation (tensor cores).
    F16,
}

/// The shape of a (batched) row-major product `C[b] = op(A[b]) @ op(B[b])`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmShape {
    /// Number of independent products (contiguous, one after the other).
    pub batch: usize,
    /// Rows of `op(A)` and `C`.
    pub m: usize,
    /// Columns of `op(B)` and `C`.
    pub n: usize,
    /// The contracted dimension.
    pub k: usize,
    /// `A` is stored `[k, m]` and used transposed.
    pub ta: bool,
    /// `B` is stored `[n, k]` and used transposed.
    pub tb: bool,
}

/// The column-major cuBLAS call that computes a row-major [`GemmShape`]:
/// operands swapped (`B` first), each keeping its transpose flag, leading
/// dimensions the stored row lengths. Pure, so the mapping is tested on the
/// host against the BLAS definition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnMajorCall {
    /// Transpose the first operand (the row-major `B`).
    pub trans_first: bool,
    /// Transpose the second operand (the row-major `A`).
    pub trans_second: bool,
    /// Rows of the column-major result (`n`).
    pub rows: usize,
    /// Columns of the column-major result (`m`).
    pub cols: usize,
    /// The contracted dimension.
    pub depth: usize,
    /// Leading dimension of the first operand.
    pub ld_first: usize,
    /// Leading dimension of the second operand.
    pub ld_second: usize,
    /// Leading dimension of the result.
    pub ld_result: usize,
    /// Elements between consecutive products of the first operand, second, result.
    pub strides: (usize, usize, usize),
}

impl GemmShape {
    /// The cuBLAS call for this row-major product.
    pub fn column_major(self) -> ColumnMajorCall {
        let GemmShape {
            m, n, k, ta, tb, ..
        } = self;
        ColumnMajorCall {
            trans_first: tb,
            trans_second: ta,
            rows: n,
            cols: m,
            depth: k,
            // Leading dimension = the stored row length.
            ld_first: if tb { k } else { n },
            ld_second: if ta { m } else { k },
            ld_result: n,
            strides: (k * n, m * k, m * n),
        }
    }
}

pub(crate) struct Blas {
    handle: CudaBlas,
}

// SAFETY: the handle is only used with the device's single stream, and
// cuBLAS handles may be shared between host threads when calls do not race
// (every call goes through `&Blas` under the caller's program lock).
unsafe impl Send for Blas {}
unsafe impl Sync for Blas {}

impl Blas {
    pub(crate) fn new(stream: Arc<CudaStream>) -> Result<Blas, DeviceError> {
        let handle = CudaBlas::new(stream).map_err(|e| cuda_err("cublasCreate", e))?;
        Ok(Blas { handle })
    }
}

impl CudaDevice {
    /// Queue `C = op(A) @ op(B)` on the device's stream.
    ///
    /// # Safety
    /// `a`, `b`, `c` must be live device addresses on this device holding
    /// at least `batch*m*k`, `batch*k*n` and `batch*m*n` elements of the
    /// types `types` names, and `c` must not overlap `a` or `b`.
    pub unsafe fn gemm(
        &self,
        types: GemmTypes,
        shape: GemmShape,
        a: u64,
        b: u64,
        c: u64,
    ) -> Result<(), DeviceError> {
        let GemmShape { batch, m, n, .. } = shape;
        if batch == 0 || m == 0 || n == 0 {
            return Ok(());
        }
        let blas_handle = self.blas()?;
        let int = |v: usize, what: &str| {
            i32::try_from(v).map_err(|_| DeviceError::Cuda {
                op: "gemm".into(),
                detail: format!("{what} = {v} does not fit cuBLAS's 32-bit sizes"),
            })
        };
        let call = shape.column_major();
        let op = |t: bool| {
            if t {
                cublasOperation_t::CUBLAS_OP_T
            } else {
                cublasOperation_t::CUBLAS_OP_N
            }
        };
        let (in_type, out_type, compute) = match types {
            GemmTypes::F32 => (
                cudaDataType::CUDA_R_32F,
                cudaDataType::CUDA_R_32F,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
            ),
            GemmTypes::F64 => (
                cudaDataType::CUDA_R_64F,
                cudaDataType::CUDA_R_64F,
                cublasComputeType_t::CUBLAS_COMPUTE_64F,
            ),
            GemmTypes::BF16 => (
                cudaDataType::CUDA_R_16BF,
                cudaDataType::CUDA_R_32F,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
            ),
            GemmTypes::F16 => (
                cudaDataType::CUDA_R_16F,
                cudaDataType::CUDA_R_32F,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
            ),
        };
        let (one32, zero32, one64, zero64) = (1.0f32, 0.0f32, 1.0f64, 0.0f64);
        let (alpha, beta): (*const c_void, *const c_void) = if types == GemmTypes::F64 {
            (&one64 as *const f64 as _, &zero64 as *const f64 as _)
        } else {
            (&one32 as *const f32 as _, &zero32 as *const f32 as _)
        };
        self.context()
            .bind_to_thread()
            .map_err(|e| cuda_err("bind context", e))?;
        // SAFETY: the caller guarantees the addresses and sizes; alpha/beta
        // live on this stack frame for the duration of the (host-pointer
        // mode) call, which reads them before returning.
        unsafe {
            blas::gemm_strided_batched_ex(
                *blas_handle.handle.handle(),
                op(call.trans_first),
                op(call.trans_second),
                int(call.rows, "n")?,
                int(call.cols, "m")?,
                int(call.depth, "k")?,
                alpha,
                b as *const c_void,
                in_type,
                int(call.ld_first, "ldb")?,
                call.strides.0 as i64,
                a as *const c_void,
                in_type,
                int(call.ld_second, "lda")?,
                call.strides.1 as i64,
                beta,
                c as *mut c_void,
                out_type,
                int(call.ld_result, "ldc")?,
                call.strides.2 as i64,
                int(batch, "batch")?,
                compute,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| cuda_err(format!("cublasGemmStridedBatchedEx {types:?} {shape:?}"), e))
    }
}
