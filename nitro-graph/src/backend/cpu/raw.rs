//! Raw views of buffers, so one call can read some buffers while writing
//! others (and, for donated inputs, write the buffer it reads). The memory
//! plan guarantees that a kernel's outputs never overlap its inputs except in
//! that elementwise in-place case, where each chunk is read before written.
//! Also the one place half-precision buffers are widened for kernels that
//! compute in f32 (`widen`, `in_register_type`).

use nitro_device::{DType, HostBuffer};

/// A pointer to a buffer's elements, with its dtype and length.
#[derive(Clone, Copy, Debug)]
pub struct Raw {
    ptr: *mut u8,
    /// Element type.
    pub dtype: DType,
    /// Element count.
    pub len: usize,
}

// SAFETY: a Raw is only dereferenced inside one program call, while the
// buffers it points into are exclusively borrowed by that call; disjointness
// of concurrent writes is guaranteed by the kernels (disjoint index ranges).
unsafe impl Send for Raw {}
unsafe impl Sync for Raw {}

impl Raw {
    /// View of `buf` (derived from a unique borrow, so writes are allowed).
    pub fn of(buf: &mut HostBuffer) -> Raw {
        let (ptr, len) = match buf {
            HostBuffer::F32(v) => (v.as_mut_ptr() as *mut u8, v.len()),
            HostBuffer::F64(v) => (v.as_mut_ptr() as *mut u8, v.len()),
            HostBuffer::F16(v) => (v.as_mut_ptr() as *mut u8, v.len()),
            HostBuffer::BF16(v) => (v.as_mut_ptr() as *mut u8, v.len()),
            HostBuffer::I32(v) => (v.as_mut_ptr() as *mut u8, v.len()),
            HostBuffer::I64(v) => (v.as_mut_ptr() as *mut u8, v.len()),
            HostBuffer::U8(v) => (v.as_mut_ptr(), v.len()),
            HostBuffer::Bool(v) => (v.as_mut_ptr() as *mut u8, v.len()),
        };
        Raw {
            ptr,
            dtype: buf.dtype(),
            len,
        }
    }

    /// View of a scratch slice whose elements are of type `dtype`.
    pub fn of_slice<T>(s: &mut [T], dtype: DType) -> Raw {
        debug_assert_eq!(std::mem::size_of::<T>(), dtype.size_of());
        Raw {
            ptr: s.as_mut_ptr() as *mut u8,
            dtype,
            len: s.len(),
        }
    }

    /// The elements as `&[T]`.
    ///
    /// # Safety
    /// `T` must be the dtype's element type (or a same-size plain type), and
    /// no write to the same range may happen while the slice lives.
    pub unsafe fn slice<'a, T>(self) -> &'a [T] {
        debug_assert_eq!(std::mem::size_of::<T>(), self.dtype.size_of());
        // SAFETY: the caller upholds the contract above.
        unsafe { std::slice::from_raw_parts(self.ptr as *const T, self.len) }
    }

    /// The elements as `&mut [T]`.
    ///
    /// # Safety
    /// As [`Raw::slice`], and no other slice of the buffer may be alive.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut<'a, T>(self) -> &'a mut [T] {
        debug_assert_eq!(std::mem::size_of::<T>(), self.dtype.size_of());
        // SAFETY: the caller upholds the contract above.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut T, self.len) }
    }

    /// A view of `len` elements of `dtype` at `ptr`.
    ///
    /// # Safety
    /// `ptr` must point to `len` elements of `dtype` that stay valid for
    /// the program call the view is used in.
    pub unsafe fn from_ptr(ptr: *mut u8, dtype: DType, len: usize) -> Raw {
        Raw { ptr, dtype, len }
    }

    /// Pointer to element `i` as `*mut T`.
    pub fn ptr<T>(self) -> *mut T {
        self.ptr as *mut T
    }
}

impl Raw {
    /// Elements `start..start+len` as their own view.
    pub fn sub(self, start: usize, len: usize) -> Raw {
        debug_assert!(start + len <= self.len);
        let ptr = self.ptr.wrapping_add(start * self.dtype.size_of());
        Raw {
            ptr,
            dtype: self.dtype,
            len,
        }
    }
}

/// An f16/bf16 buffer as f32 (every value is exactly representable).
pub(super) fn widen(x: Raw) -> HostBuffer {
    // SAFETY: the dtype says which 16-bit type the buffer holds.
    HostBuffer::F32(unsafe {
        match x.dtype {
            DType::F16 => x.slice::<half::f16>().iter().map(|v| v.to_f32()).collect(),
            _ => x.slice::<half::bf16>().iter().map(|v| v.to_f32()).collect(),
        }
    })
}

/// `f` on f32/f64 buffers: the arguments themselves, or f16/bf16 ones
/// widened to f32 (exactly) with the f32 result rounded into `out`.
pub(super) fn in_register_type(ins: &[Raw], out: Raw, f: impl FnOnce(&[Raw], Raw)) {
    if !matches!(out.dtype, DType::F16 | DType::BF16) {
        return f(ins, out);
    }
    let mut wide: Vec<HostBuffer> = ins.iter().map(|&x| widen(x)).collect();
    let mut result = HostBuffer::zeros(DType::F32, out.len);
    let raws: Vec<Raw> = wide.iter_mut().map(Raw::of).collect();
    f(&raws, Raw::of(&mut result));
    let HostBuffer::F32(r) = result else {
        unreachable!("made as f32 above")
    };
    // SAFETY: `out` holds `len` elements of its 16-bit dtype.
    unsafe {
        match out.dtype {
            DType::F16 => out
                .slice_mut::<half::f16>()
                .iter_mut()
                .zip(&r)
                .for_each(|(o, &x)| *o = half::f16::from_f32(x)),
            _ => out
                .slice_mut::<half::bf16>()
                .iter_mut()
                .zip(&r)
                .for_each(|(o, &x)| *o = half::bf16::from_f32(x)),
        }
    }
}
