//! The register file of a fused kernel: chunk-sized registers ([`Reg`]) by
//! class, the operands instructions read ([`Val`]), and input views
//! ([`View`]): a register that is a contiguous read of an input in its own
//! dtype is never filled, its instructions read the input where it lies.
//! What the instructions compute lives in `chunk`.

use crate::backend::cpu::raw::Raw;
use nitro_device::DType;

/// Register classes: storage types compute in their wider class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Class {
    F32,
    F64,
    I32,
    I64,
    Bool,
}

pub(super) fn class_of(d: DType) -> Class {
    match d {
        DType::F32 | DType::F16 | DType::BF16 => Class::F32,
        DType::F64 => Class::F64,
        DType::I32 | DType::U8 => Class::I32,
        DType::I64 => Class::I64,
        DType::Bool => Class::Bool,
    }
}

/// A chunk-sized register.
pub(super) enum Reg {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
}

impl Reg {
    /// The class this register holds.
    pub(super) fn class(&self) -> Class {
        match self {
            Reg::F32(_) => Class::F32,
            Reg::F64(_) => Class::F64,
            Reg::I32(_) => Class::I32,
            Reg::I64(_) => Class::I64,
            Reg::Bool(_) => Class::Bool,
        }
    }

    pub(super) fn new(c: Class) -> Reg {
        let n = super::CHUNK;
        match c {
            Class::F32 => Reg::F32(vec![0.0; n]),
            Class::F64 => Reg::F64(vec![0.0; n]),
            Class::I32 => Reg::I32(vec![0; n]),
            Class::I64 => Reg::I64(vec![0; n]),
            Class::Bool => Reg::Bool(vec![false; n]),
        }
    }
}

/// What an instruction reads: a register's values or an input's, by class.
#[derive(Clone, Copy)]
pub(super) enum Val<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
    I32(&'a [i32]),
    I64(&'a [i64]),
    Bool(&'a [bool]),
}

/// A register read in place from kernel input `input`, group element `i`
/// at element `start + i` (`Access::Contiguous` or `Access::Offset`).
#[derive(Clone, Copy, Debug)]
pub(super) struct View {
    pub input: usize,
    pub start: usize,
}

/// Whether a contiguous read of `d` can be a [`View`]: the register class
/// stores `d` as it is (f16, bf16 and u8 widen, so they are loaded).
pub(super) fn viewable(d: DType) -> bool {
    matches!(
        d,
        DType::F32 | DType::F64 | DType::I32 | DType::I64 | DType::Bool
    )
}

/// Register `r` for elements `at..at + len` of the chunk: the input it
/// views there, else its own values (full chunk length; callers take
/// `..len`).
#[inline(always)]
pub(super) fn operand<'a>(
    regs: &'a [Reg],
    views: &[Option<View>],
    inputs: &[Raw],
    r: usize,
    at: usize,
    len: usize,
) -> Val<'a> {
    if let Some(View { input, start }) = views[r] {
        let (src, o) = (inputs[input], at + start);
        // SAFETY: `src` is a live buffer of its dtype holding the group's
        // range (the fuser's access contract), and the chunk's stores run
        // after its last instruction, so nothing writes these elements
        // while the slice lives (as for the copy a load would make).
        unsafe {
            return match src.dtype {
                DType::F32 => Val::F32(&src.slice::<f32>()[o..o + len]),
                DType::F64 => Val::F64(&src.slice::<f64>()[o..o + len]),
                DType::I32 => Val::I32(&src.slice::<i32>()[o..o + len]),
                DType::I64 => Val::I64(&src.slice::<i64>()[o..o + len]),
                DType::Bool => Val::Bool(&src.slice::<bool>()[o..o + len]),
                dt => unreachable!("no view of {dt}: it is loaded"),
            };
        }
    }
    match &regs[r] {
        Reg::F32(v) => Val::F32(v),
        Reg::F64(v) => Val::F64(v),
        Reg::I32(v) => Val::I32(v),
        Reg::I64(v) => Val::I64(v),
        Reg::Bool(v) => Val::Bool(v),
    }
}

/// Take register `dst` out of the file to write it while reading others
/// (put it back with [`put_back`]). No closure: a closure would be a
/// function of its own, compiled for the baseline instead of inside the
/// caller's `#[target_feature]` build.
#[inline(always)]
pub(super) fn take(regs: &mut [Reg], dst: usize) -> Reg {
    std::mem::replace(&mut regs[dst], Reg::Bool(Vec::new()))
}

#[inline(always)]
pub(super) fn put_back(regs: &mut [Reg], dst: usize, d: Reg) {
    regs[dst] = d;
}
