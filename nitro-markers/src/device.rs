//! Host values of Device fields in dtype-tagged form, for the integrator to
//! turn into device buffers.

use half::{bf16, f16};

use crate::ValueError;

/// The flat element data of a Device value, tagged by dtype.
#[derive(Debug, Clone, PartialEq)]
pub enum DeviceData {
    /// 32-bit floats.
    F32(Vec<f32>),
    /// IEEE half floats.
    F16(Vec<f16>),
    /// bfloat16.
    Bf16(Vec<bf16>),
    /// 32-bit integers.
    I32(Vec<i32>),
}

impl DeviceData {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            DeviceData::F32(v) => v.len(),
            DeviceData::F16(v) => v.len(),
            DeviceData::Bf16(v) => v.len(),
            DeviceData::I32(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The dtype's name (`f32`, `f16`, `bf16`, `i32`).
    pub fn dtype(&self) -> &'static str {
        match self {
            DeviceData::F32(_) => "f32",
            DeviceData::F16(_) => "f16",
            DeviceData::Bf16(_) => "bf16",
            DeviceData::I32(_) => "i32",
        }
    }
}

/// A Device field's host value: row-major data plus its shape (`[]` for a
/// scalar). Its dtype and shape are the traced input's signature.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceValue {
    /// Dimensions, outermost first; empty for a scalar.
    pub shape: Vec<usize>,
    /// Elements in row-major order.
    pub data: DeviceData,
}

/// A scalar element type a Device field may hold.
pub trait DeviceElement: Copy {
    /// Wraps flat elements of this type.
    fn wrap(data: Vec<Self>) -> DeviceData;
    /// Unwraps flat elements, if the dtype matches.
    fn unwrap(data: &DeviceData) -> Option<&[Self]>;
}

macro_rules! elements {
    ($($t:ty => $v:ident),*) => {$(
        impl DeviceElement for $t {
            fn wrap(data: Vec<Self>) -> DeviceData { DeviceData::$v(data) }
            fn unwrap(data: &DeviceData) -> Option<&[Self]> {
                match data { DeviceData::$v(v) => Some(v), _ => None }
            }
        }
    )*};
}
elements!(f32 => F32, f16 => F16, bf16 => Bf16, i32 => I32);

/// A type a [`Device`](crate::Device) field may hold: a scalar, `Vec` or
/// array (up to two dimensions) of f32/f16/bf16/i32.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a Device field",
    note = "a Device field is a traced input: a scalar, Vec or array of f32, f16, bf16 or i32"
)]
pub trait DeviceInput: Sized {
    /// The value in dtype-tagged form.
    fn to_device_value(&self) -> DeviceValue;
    /// Reads a value back (as `device_value` does); errors if the dtype or
    /// shape differs.
    fn from_device_value(value: &DeviceValue) -> Result<Self, ValueError>;
}

fn wrong(expected: &str, value: &DeviceValue) -> ValueError {
    ValueError {
        expected: expected.into(),
        found: format!("{} array of shape {:?}", value.data.dtype(), value.shape),
    }
}

fn elements<E: DeviceElement>(value: &DeviceValue, shape: &[usize]) -> Option<Vec<E>> {
    (value.shape == shape)
        .then(|| E::unwrap(&value.data).map(<[E]>::to_vec))
        .flatten()
}

macro_rules! scalar_inputs {
    ($($t:ty),*) => {$(
        impl DeviceInput for $t {
            fn to_device_value(&self) -> DeviceValue {
                DeviceValue { shape: vec![], data: <$t>::wrap(vec![*self]) }
            }
            fn from_device_value(value: &DeviceValue) -> Result<Self, ValueError> {
                elements::<$t>(value, &[]).map(|v| v[0]).ok_or_else(|| wrong("a scalar", value))
            }
        }
    )*};
}
scalar_inputs!(f32, f16, bf16, i32);

impl<E: DeviceElement> DeviceInput for Vec<E> {
    fn to_device_value(&self) -> DeviceValue {
        DeviceValue {
            shape: vec![self.len()],
            data: E::wrap(self.clone()),
        }
    }
    fn from_device_value(value: &DeviceValue) -> Result<Self, ValueError> {
        match value.shape.as_slice() {
            [n] => elements(value, &[*n]),
            _ => None,
        }
        .ok_or_else(|| wrong("a vector", value))
    }
}

impl<E: DeviceElement, const N: usize> DeviceInput for [E; N] {
    fn to_device_value(&self) -> DeviceValue {
        DeviceValue {
            shape: vec![N],
            data: E::wrap(self.to_vec()),
        }
    }
    fn from_device_value(value: &DeviceValue) -> Result<Self, ValueError> {
        elements(value, &[N])
            .and_then(|v| v.try_into().ok())
            .ok_or_else(|| wrong(&format!("an array of {N}"), value))
    }
}

impl<E: DeviceElement, const N: usize, const M: usize> DeviceInput for [[E; N]; M] {
    fn to_device_value(&self) -> DeviceValue {
        let flat = self.iter().flatten().copied().collect();
        DeviceValue {
            shape: vec![M, N],
            data: E::wrap(flat),
        }
    }
    fn from_device_value(value: &DeviceValue) -> Result<Self, ValueError> {
        let rows = elements::<E>(value, &[M, N]).map(|flat| {
            flat.chunks(N.max(1))
                .map(|row| <[E; N]>::try_from(row).ok())
                .collect::<Option<Vec<_>>>()
        });
        rows.flatten()
            .and_then(|r| r.try_into().ok())
            .ok_or_else(|| wrong(&format!("a {M}x{N} array"), value))
    }
}
