//! [`Array`]: a concrete value (shape + host buffer) that programs consume
//! and produce.

use crate::error::{GraphError, Result};
use crate::ir::TensorSpec;
use nitro_device::{DType, HostBuffer};

/// A concrete tensor: a spec and a buffer of exactly `spec.numel()` elements.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    spec: TensorSpec,
    data: HostBuffer,
}

impl Array {
    /// An array of `shape` over `data`; the element count must match.
    pub fn new(shape: &[usize], data: impl Into<HostBuffer>) -> Result<Array> {
        let data = data.into();
        let expected: usize = shape.iter().product();
        if data.len() != expected {
            return Err(GraphError::Array(format!(
                "shape {shape:?} needs {expected} elements, the buffer has {}",
                data.len()
            )));
        }
        Ok(Array {
            spec: TensorSpec::new(data.dtype(), shape),
            data,
        })
    }

    /// Zeros of `spec`.
    pub fn zeros(spec: &TensorSpec) -> Array {
        Array {
            spec: spec.clone(),
            data: HostBuffer::zeros(spec.dtype, spec.numel()),
        }
    }

    /// An f32 scalar.
    pub fn scalar_f32(value: f32) -> Array {
        Array {
            spec: TensorSpec::f32(&[]),
            data: HostBuffer::F32(vec![value]),
        }
    }

    /// An f64 scalar.
    pub fn scalar_f64(value: f64) -> Array {
        Array {
            spec: TensorSpec::new(DType::F64, &[]),
            data: HostBuffer::F64(vec![value]),
        }
    }

    /// An i32 scalar (e.g. an RNG key).
    pub fn scalar_i32(value: i32) -> Array {
        Array {
            spec: TensorSpec::new(DType::I32, &[]),
            data: HostBuffer::I32(vec![value]),
        }
    }

    /// Shape and dtype.
    pub fn spec(&self) -> &TensorSpec {
        &self.spec
    }

    /// Shape.
    pub fn shape(&self) -> &[usize] {
        &self.spec.shape
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.spec.dtype
    }

    /// The buffer.
    pub fn data(&self) -> &HostBuffer {
        &self.data
    }

    /// The buffer, mutably (its length cannot change).
    pub fn data_mut(&mut self) -> &mut HostBuffer {
        &mut self.data
    }

    /// Take the buffer.
    pub fn into_data(self) -> HostBuffer {
        self.data
    }

    /// Swap buffers with another array of the same spec (used to hand a
    /// freshly computed value back in place without copying).
    pub(crate) fn swap_data(&mut self, other: &mut HostBuffer) {
        std::mem::swap(&mut self.data, other);
    }

    /// Same elements, another shape.
    pub fn reshape(mut self, shape: &[usize]) -> Result<Array> {
        if shape.iter().product::<usize>() != self.spec.numel() {
            return Err(GraphError::Array(format!(
                "cannot reshape {} to {shape:?}",
                self.spec
            )));
        }
        self.spec.shape = shape.to_vec();
        Ok(self)
    }

    /// Every element as f64.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        self.data.to_f64_vec()
    }

    /// Every element as f32 (converting).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        match &self.data {
            HostBuffer::F32(v) => v.clone(),
            other => other.to_f64_vec().into_iter().map(|x| x as f32).collect(),
        }
    }

    /// The single element of a one-element array, as f64.
    pub fn item(&self) -> Result<f64> {
        if self.spec.numel() != 1 {
            return Err(GraphError::Array(format!(
                "item() of {} which is not one element",
                self.spec
            )));
        }
        Ok(self.data.to_f64_vec()[0])
    }

    /// Convert to another dtype.
    pub fn cast(&self, dtype: DType) -> Array {
        Array {
            spec: TensorSpec::new(dtype, &self.spec.shape),
            data: self.data.cast(dtype),
        }
    }
}
