//! One chunk of a fused kernel: the register instructions ([`Instr`]) and
//! their loops over the register file (`regs`). Every loop here is
//! `#[inline(always)]`, so it is compiled again inside each `#[target_feature]`
//! entry point of [`super::FusedKernel`] and vectorises at the width the CPU
//! offers (the crate itself is built for the architecture's baseline).

use super::regs::{operand, put_back, take, Reg, Val, View};
use crate::backend::cpu::raw::Raw;
use crate::fusion::Access;
use crate::ir::{BinaryOp, CmpOp, UnaryOp};
use crate::semantics as sem;
use crate::{each_compare, each_float_binary, each_float_unary, each_int_binary, each_int_unary};
use nitro_device::{bf16, f16, DType};

/// One register instruction over a chunk.
#[derive(Clone, Debug)]
pub(super) enum Instr {
    Load {
        dst: usize,
        input: usize,
        access: Access,
    },
    Fill {
        dst: usize,
        value: f64,
    },
    Iota {
        dst: usize,
        div: usize,
        dim: usize,
    },
    Random {
        dst: usize,
        key: usize,
        salt: u64,
    },
    Unary {
        dst: usize,
        op: UnaryOp,
        a: usize,
    },
    Binary {
        dst: usize,
        op: BinaryOp,
        a: usize,
        b: usize,
    },
    /// Two binary ops in one pass: `outer(inner(a, b), c)`, or
    /// `outer(c, inner(a, b))` with `swap` (see `pairs`).
    Pair {
        dst: usize,
        inner: BinaryOp,
        outer: BinaryOp,
        a: usize,
        b: usize,
        c: usize,
        swap: bool,
    },
    Compare {
        dst: usize,
        op: CmpOp,
        a: usize,
        b: usize,
    },
    Select {
        dst: usize,
        c: usize,
        a: usize,
        b: usize,
    },
    Cast {
        dst: usize,
        a: usize,
        to: DType,
    },
    /// Exact GELU and its derivative of one float register in one pass,
    /// one erf for both (see `gelu_pairs`).
    GeluBoth {
        gelu: usize,
        grad: usize,
        a: usize,
    },
}

/// What one instruction reads besides its own fields: the kernel's inputs,
/// and which registers view one of them in place (`None`: the register's
/// own values).
#[derive(Clone, Copy)]
pub(super) struct Reads<'a> {
    pub inputs: &'a [Raw],
    pub views: &'a [Option<View>],
}

#[inline(always)]
pub(super) fn exec(instr: &Instr, regs: &mut [Reg], reads: Reads<'_>, at: usize, len: usize) {
    let Reads { inputs, views } = reads;
    // Operand `r` of this chunk (`regs` minus the destination taken out).
    macro_rules! arg {
        ($regs:expr, $r:expr) => {
            operand($regs, views, inputs, *$r, at, len)
        };
    }
    match instr {
        Instr::Load { dst, input, access } => {
            load(&mut regs[*dst], inputs[*input], access, at, len)
        }
        Instr::Fill { dst, value } => fill(&mut regs[*dst], *value, len),
        Instr::Iota { dst, div, dim } => {
            let idx = |i: usize| ((at + i) / div) % dim;
            match &mut regs[*dst] {
                Reg::F32(d) => d[..len]
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, x)| *x = idx(i) as f32),
                Reg::F64(d) => d[..len]
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, x)| *x = idx(i) as f64),
                Reg::I32(d) => d[..len]
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, x)| *x = idx(i) as i32),
                Reg::I64(d) => d[..len]
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, x)| *x = idx(i) as i64),
                Reg::Bool(d) => d[..len]
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, x)| *x = idx(i) != 0),
            }
        }
        Instr::Random { dst, key, salt } => {
            let Val::I32(k) = arg!(regs, key) else {
                unreachable!("i32 key")
            };
            let key = k[0];
            match &mut regs[*dst] {
                Reg::F32(d) => d[..len]
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, x)| *x = uniform(key, *salt, at + i) as f32),
                Reg::F64(d) => d[..len]
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, x)| *x = uniform(key, *salt, at + i)),
                _ => unreachable!("float random"),
            }
        }
        Instr::Unary { dst, op, a } => {
            let mut d = take(regs, *dst);
            unary(*op, &mut d, arg!(regs, a), len);
            put_back(regs, *dst, d);
        }
        Instr::Binary { dst, op, a, b } => {
            let mut d = take(regs, *dst);
            binary(*op, &mut d, arg!(regs, a), arg!(regs, b), len);
            put_back(regs, *dst, d);
        }
        Instr::Pair {
            dst,
            inner,
            outer,
            a,
            b,
            c,
            swap,
        } => {
            let mut d = take(regs, *dst);
            let (a, b, c) = (arg!(regs, a), arg!(regs, b), arg!(regs, c));
            super::pairs::pair(*inner, *outer, *swap, &mut d, [a, b, c], len);
            put_back(regs, *dst, d);
        }
        Instr::Compare { dst, op, a, b } => {
            let mut d = take(regs, *dst);
            compare(*op, &mut d, arg!(regs, a), arg!(regs, b), len);
            put_back(regs, *dst, d);
        }
        Instr::Select { dst, c, a, b } => {
            let mut d = take(regs, *dst);
            select(&mut d, arg!(regs, c), arg!(regs, a), arg!(regs, b), len);
            put_back(regs, *dst, d);
        }
        Instr::GeluBoth { gelu, grad, a } => {
            let (mut g, mut d) = (take(regs, *gelu), take(regs, *grad));
            gelu_both(&mut g, &mut d, arg!(regs, a), len);
            put_back(regs, *gelu, g);
            put_back(regs, *grad, d);
        }
        Instr::Cast { dst, a, to } => {
            let mut d = take(regs, *dst);
            cast(&mut d, arg!(regs, a), *to, len);
            put_back(regs, *dst, d);
        }
    }
}

/// The counter-based generator: a uniform in [0, 1) from (key, salt, index)
/// by two rounds of the SplitMix64 finaliser. Pure integer arithmetic, so
/// every backend draws the same stream.
pub fn uniform(key: i32, salt: u64, index: usize) -> f64 {
    fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    let stream = mix((key as u32 as u64) ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let bits = mix(stream.wrapping_add((index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    (bits >> 40) as f64 / (1u64 << 24) as f64
}

#[inline(always)]
fn fill(d: &mut Reg, v: f64, len: usize) {
    match d {
        Reg::F32(d) => d[..len].fill(v as f32),
        Reg::F64(d) => d[..len].fill(v),
        Reg::I32(d) => d[..len].fill(v as i32),
        Reg::I64(d) => d[..len].fill(v as i64),
        Reg::Bool(d) => d[..len].fill(v != 0.0),
    }
}

/// Walk `len` group elements starting at `at` as runs along the last axis:
/// `f(position in chunk, source offset, run length, source step)`. The
/// multi-index carry is paid once per run, and each run is then a plain
/// copy (step 1), a splat (step 0, a broadcast axis) or a strided read.
#[inline(always)]
fn for_each_run(
    shape: &[usize],
    strides: &[usize],
    at: usize,
    len: usize,
    mut f: impl FnMut(usize, usize, usize, usize),
) {
    let r = shape.len();
    // On the stack for every rank a program reaches in practice: this runs
    // once per strided input per chunk, and a heap index here cost more
    // than the copy it steers (calloc and free were 3% of a GPT step).
    let (mut small, mut large) = ([0usize; 8], Vec::new());
    let idx: &mut [usize] = if r <= small.len() {
        &mut small[..r]
    } else {
        large.resize(r, 0);
        &mut large
    };
    let mut rem = at;
    for d in (0..r).rev() {
        idx[d] = rem % shape[d];
        rem /= shape[d];
    }
    let mut off: usize = (0..r).map(|d| idx[d] * strides[d]).sum();
    let (last, step) = (shape[r - 1], strides[r - 1]);
    let mut filled = 0;
    while filled < len {
        let run = (last - idx[r - 1]).min(len - filled);
        f(filled, off, run, step);
        filled += run;
        // Advance the multi-index by `run` along the last axis, carrying.
        idx[r - 1] += run;
        off += run * step;
        let mut d = r - 1;
        while idx[d] == shape[d] && d > 0 {
            off -= strides[d] * idx[d];
            idx[d] = 0;
            d -= 1;
            idx[d] += 1;
            off += strides[d];
        }
    }
}

macro_rules! load_as {
    ($d:expr, $src:expr, $access:expr, $at:expr, $len:expr, $conv:expr) => {{
        let src = $src;
        let conv = $conv;
        match $access {
            Access::Contiguous | Access::Offset(_) => {
                let o = $at + $access.start();
                for (x, s) in $d[..$len].iter_mut().zip(&src[o..o + $len]) {
                    *x = conv(*s);
                }
            }
            Access::Scalar => {
                let v = conv(src[0]);
                $d[..$len].fill(v);
            }
            Access::Strided { shape, strides } => {
                let d = &mut $d[..$len];
                let r = shape.len();
                let rep = shape[r - 1];
                if r >= 2 && strides[r - 1] == 0 && rep > 1 && $at % rep == 0 && $len % rep == 0 {
                    // The last axis is a broadcast (a pooling window's
                    // column): walk the axes above it, each source element
                    // written `rep` times, so a run is a row of windows,
                    // not one window.
                    let (outer, os) = (&shape[..r - 1], &strides[..r - 1]);
                    for_each_run(outer, os, $at / rep, $len / rep, |pos, off, run, step| {
                        let out = &mut d[pos * rep..(pos + run) * rep];
                        for (i, o) in out.chunks_exact_mut(rep).enumerate() {
                            o.fill(conv(src[off + i * step]));
                        }
                    });
                } else {
                    for_each_run(shape, strides, $at, $len, |pos, off, run, step| {
                        let out = &mut d[pos..pos + run];
                        match step {
                            0 => out.fill(conv(src[off])),
                            1 => {
                                for (x, s) in out.iter_mut().zip(&src[off..off + run]) {
                                    *x = conv(*s);
                                }
                            }
                            _ => {
                                for (i, x) in out.iter_mut().enumerate() {
                                    *x = conv(src[off + i * step]);
                                }
                            }
                        }
                    });
                }
            }
        }
    }};
}

#[inline(always)]
fn load(d: &mut Reg, src: Raw, access: &Access, at: usize, len: usize) {
    // SAFETY: `src` is a live buffer of its dtype; within this chunk no
    // store to the same elements happens before the load completes.
    unsafe {
        match (d, src.dtype) {
            (Reg::F32(d), DType::F32) => {
                load_as!(d, src.slice::<f32>(), access, at, len, |x: f32| x)
            }
            (Reg::F32(d), DType::F16) => {
                load_as!(d, src.slice::<f16>(), access, at, len, |x: f16| x.to_f32())
            }
            (Reg::F32(d), DType::BF16) => {
                load_as!(d, src.slice::<bf16>(), access, at, len, |x: bf16| x
                    .to_f32())
            }
            (Reg::F64(d), DType::F64) => {
                load_as!(d, src.slice::<f64>(), access, at, len, |x: f64| x)
            }
            (Reg::I32(d), DType::I32) => {
                load_as!(d, src.slice::<i32>(), access, at, len, |x: i32| x)
            }
            (Reg::I32(d), DType::U8) => {
                load_as!(d, src.slice::<u8>(), access, at, len, |x: u8| x as i32)
            }
            (Reg::I64(d), DType::I64) => {
                load_as!(d, src.slice::<i64>(), access, at, len, |x: i64| x)
            }
            (Reg::Bool(d), DType::Bool) => {
                load_as!(d, src.slice::<bool>(), access, at, len, |x: bool| x)
            }
            (_, dt) => unreachable!("register class mismatch loading {dt}"),
        }
    }
}

#[inline(always)]
pub(super) fn store(r: Val<'_>, out: Raw, at: usize, len: usize) {
    // SAFETY: each task writes a disjoint range [at, at+len) of `out`.
    unsafe {
        macro_rules! put {
            ($t:ty, $src:expr, $conv:expr) => {{
                let p = out.ptr::<$t>().add(at);
                for (i, &x) in $src[..len].iter().enumerate() {
                    *p.add(i) = $conv(x);
                }
            }};
        }
        match (r, out.dtype) {
            (Val::F32(s), DType::F32) => put!(f32, s, |x: f32| x),
            (Val::F32(s), DType::F16) => put!(f16, s, f16::from_f32),
            (Val::F32(s), DType::BF16) => put!(bf16, s, bf16::from_f32),
            (Val::F64(s), DType::F64) => put!(f64, s, |x: f64| x),
            (Val::I32(s), DType::I32) => put!(i32, s, |x: i32| x),
            (Val::I32(s), DType::U8) => put!(u8, s, |x: i32| x as u8),
            (Val::I64(s), DType::I64) => put!(i64, s, |x: i64| x),
            (Val::Bool(s), DType::Bool) => put!(bool, s, |x: bool| x),
            (_, dt) => unreachable!("register class mismatch storing {dt}"),
        }
    }
}

/// `d[i] = f(a[i])` over one chunk; one loop per op so each inlines and
/// vectorises (a function pointer per element would do neither).
macro_rules! map1 {
    ($d:expr, $a:expr, |$x:ident| $e:expr) => {{
        for (o, &$x) in $d.iter_mut().zip($a.iter()) {
            *o = $e;
        }
    }};
}

// The scalar functions are the table in `crate::semantics`, shared with
// constant folding and mirrored by the CUDA codegen; each arm of the
// `each_*!` dispatch is one loop with a constant op, so it inlines and
// vectorises. An op float-only by the table never reaches an integer
// register: `ir::infer` refuses it through the same table.

/// GELU into `g` and its derivative into `d`, sharing one erf per element.
#[inline(always)]
fn gelu_both(g: &mut Reg, d: &mut Reg, a: Val<'_>, len: usize) {
    macro_rules! both {
        ($g:expr, $d:expr, $a:expr) => {
            for ((g, d), &x) in $g[..len].iter_mut().zip(&mut $d[..len]).zip(&$a[..len]) {
                let e = sem::gelu_erf(x);
                *g = sem::gelu_from_erf(x, e);
                *d = sem::gelu_grad_from_erf(x, e);
            }
        };
    }
    match (g, d, a) {
        (Reg::F32(g), Reg::F32(d), Val::F32(a)) => both!(g, d, a),
        (Reg::F64(g), Reg::F64(d), Val::F64(a)) => both!(g, d, a),
        _ => unreachable!("GELU on float registers of one class"),
    }
}

#[inline(always)]
fn unary(op: UnaryOp, d: &mut Reg, a: Val<'_>, len: usize) {
    match (d, a) {
        (Reg::F32(d), Val::F32(a)) => {
            each_float_unary!(op, OP => map1!(d[..len], &a[..len], |x| sem::float_unary(OP, x)))
        }
        (Reg::F64(d), Val::F64(a)) => {
            each_float_unary!(op, OP => map1!(d[..len], &a[..len], |x| sem::float_unary(OP, x)))
        }
        (Reg::I32(d), Val::I32(a)) => int_unary(op, &mut d[..len], &a[..len]),
        (Reg::I64(d), Val::I64(a)) => int_unary(op, &mut d[..len], &a[..len]),
        _ => unreachable!("unary on mismatched registers"),
    }
}

#[inline(always)]
fn int_unary<T: sem::IntElem>(op: UnaryOp, d: &mut [T], a: &[T]) {
    let Some(op) = op.on_integers() else {
        unreachable!("{op:?} is float-only; ir::infer refuses it on integers")
    };
    each_int_unary!(op, OP => map1!(d, a, |x| sem::int_unary(OP, x)))
}

macro_rules! zip2 {
    ($d:expr, $a:expr, $b:expr, $len:expr, |$x:ident, $y:ident| $e:expr) => {{
        for ((o, &$x), &$y) in $d[..$len].iter_mut().zip(&$a[..$len]).zip(&$b[..$len]) {
            *o = $e;
        }
    }};
}

#[inline(always)]
fn binary(op: BinaryOp, d: &mut Reg, a: Val<'_>, b: Val<'_>, len: usize) {
    match (d, a, b) {
        (Reg::F32(d), Val::F32(a), Val::F32(b)) => {
            each_float_binary!(op, OP => zip2!(d, a, b, len, |x, y| sem::float_binary(OP, x, y)))
        }
        (Reg::F64(d), Val::F64(a), Val::F64(b)) => {
            each_float_binary!(op, OP => zip2!(d, a, b, len, |x, y| sem::float_binary(OP, x, y)))
        }
        (Reg::I32(d), Val::I32(a), Val::I32(b)) => int_binary(op, d, a, b, len),
        (Reg::I64(d), Val::I64(a), Val::I64(b)) => int_binary(op, d, a, b, len),
        _ => unreachable!("binary on mismatched registers"),
    }
}

#[inline(always)]
fn int_binary<T: sem::IntElem>(op: BinaryOp, d: &mut [T], a: &[T], b: &[T], len: usize) {
    let Some(op) = op.on_integers() else {
        unreachable!("{op:?} is float-only; ir::infer refuses it on integers")
    };
    each_int_binary!(op, OP => zip2!(d, a, b, len, |x, y| sem::int_binary(OP, x, y)))
}

#[inline(always)]
fn compare(op: CmpOp, d: &mut Reg, a: Val<'_>, b: Val<'_>, len: usize) {
    let Reg::Bool(d) = d else {
        unreachable!("compare writes bool")
    };
    match (a, b) {
        (Val::F32(a), Val::F32(b)) => cmp_into(op, d, a, b, len),
        (Val::F64(a), Val::F64(b)) => cmp_into(op, d, a, b, len),
        (Val::I32(a), Val::I32(b)) => cmp_into(op, d, a, b, len),
        (Val::I64(a), Val::I64(b)) => cmp_into(op, d, a, b, len),
        (Val::Bool(a), Val::Bool(b)) => cmp_into(op, d, a, b, len),
        _ => unreachable!("compare on mismatched registers"),
    }
}

#[inline(always)]
fn cmp_into<T: PartialOrd + Copy>(op: CmpOp, d: &mut [bool], a: &[T], b: &[T], len: usize) {
    each_compare!(op, OP => zip2!(d, a, b, len, |x, y| sem::compare(OP, x, y)))
}

#[inline(always)]
fn select(d: &mut Reg, c: Val<'_>, a: Val<'_>, b: Val<'_>, len: usize) {
    let Val::Bool(c) = c else {
        unreachable!("bool condition")
    };
    // Branch-free: blend the bit patterns under an all-ones/all-zeros mask,
    // so the loop vectorises (a branch per element would not).
    macro_rules! sel {
        ($d:expr, $a:expr, $b:expr, $bits:ty, $to:expr, $from:expr) => {
            for (((o, &c), &x), &y) in $d[..len]
                .iter_mut()
                .zip(&c[..len])
                .zip(&$a[..len])
                .zip(&$b[..len])
            {
                let mask = (0 as $bits).wrapping_sub(c as $bits);
                *o = $from(($to(x) & mask) | ($to(y) & !mask));
            }
        };
    }
    match (d, a, b) {
        (Reg::F32(d), Val::F32(a), Val::F32(b)) => sel!(d, a, b, u32, f32::to_bits, f32::from_bits),
        (Reg::F64(d), Val::F64(a), Val::F64(b)) => sel!(d, a, b, u64, f64::to_bits, f64::from_bits),
        (Reg::I32(d), Val::I32(a), Val::I32(b)) => sel!(d, a, b, i32, |v| v, |v| v),
        (Reg::I64(d), Val::I64(a), Val::I64(b)) => sel!(d, a, b, i64, |v| v, |v| v),
        (Reg::Bool(d), Val::Bool(a), Val::Bool(b)) => {
            for (((o, &c), &x), &y) in d[..len]
                .iter_mut()
                .zip(&c[..len])
                .zip(&a[..len])
                .zip(&b[..len])
            {
                *o = (c & x) | (!c & y);
            }
        }
        _ => unreachable!("select on mismatched registers"),
    }
}

#[inline(always)]
fn cast(d: &mut Reg, a: Val<'_>, to: DType, len: usize) {
    macro_rules! conv {
        ($d:expr, $a:expr, $f:expr) => {
            for (x, &y) in $d[..len].iter_mut().zip(&$a[..len]) {
                *x = $f(y);
            }
        };
    }
    match (d, a) {
        (Reg::F32(d), Val::F32(a)) => match to {
            DType::F16 => conv!(d, a, |x: f32| f16::from_f32(x).to_f32()),
            DType::BF16 => conv!(d, a, |x: f32| bf16::from_f32(x).to_f32()),
            _ => conv!(d, a, |x: f32| x),
        },
        (Reg::F32(d), Val::F64(a)) => match to {
            DType::F16 => conv!(d, a, |x: f64| f16::from_f64(x).to_f32()),
            DType::BF16 => conv!(d, a, |x: f64| bf16::from_f64(x).to_f32()),
            _ => conv!(d, a, |x: f64| x as f32),
        },
        (Reg::F32(d), Val::I32(a)) => conv!(d, a, |x: i32| x as f32),
        (Reg::F32(d), Val::I64(a)) => conv!(d, a, |x: i64| x as f32),
        (Reg::F32(d), Val::Bool(a)) => conv!(d, a, |x: bool| x as u8 as f32),
        (Reg::F64(d), Val::F32(a)) => conv!(d, a, |x: f32| x as f64),
        (Reg::F64(d), Val::F64(a)) => conv!(d, a, |x: f64| x),
        (Reg::F64(d), Val::I32(a)) => conv!(d, a, |x: i32| x as f64),
        (Reg::F64(d), Val::I64(a)) => conv!(d, a, |x: i64| x as f64),
        (Reg::F64(d), Val::Bool(a)) => conv!(d, a, |x: bool| x as u8 as f64),
        (Reg::I32(d), Val::F32(a)) => conv!(d, a, |x: f32| if to == DType::U8 {
            x as u8 as i32
        } else {
            x as i32
        }),
        (Reg::I32(d), Val::F64(a)) => conv!(d, a, |x: f64| if to == DType::U8 {
            x as u8 as i32
        } else {
            x as i32
        }),
        (Reg::I32(d), Val::I32(a)) => conv!(d, a, |x: i32| if to == DType::U8 {
            x as u8 as i32
        } else {
            x
        }),
        (Reg::I32(d), Val::I64(a)) => conv!(d, a, |x: i64| if to == DType::U8 {
            x as u8 as i32
        } else {
            x as i32
        }),
        (Reg::I32(d), Val::Bool(a)) => conv!(d, a, |x: bool| x as i32),
        (Reg::I64(d), Val::F32(a)) => conv!(d, a, |x: f32| x as i64),
        (Reg::I64(d), Val::F64(a)) => conv!(d, a, |x: f64| x as i64),
        (Reg::I64(d), Val::I32(a)) => conv!(d, a, |x: i32| x as i64),
        (Reg::I64(d), Val::I64(a)) => conv!(d, a, |x: i64| x),
        (Reg::I64(d), Val::Bool(a)) => conv!(d, a, |x: bool| x as i64),
        (Reg::Bool(d), Val::F32(a)) => conv!(d, a, |x: f32| x != 0.0),
        (Reg::Bool(d), Val::F64(a)) => conv!(d, a, |x: f64| x != 0.0),
        (Reg::Bool(d), Val::I32(a)) => conv!(d, a, |x: i32| x != 0),
        (Reg::Bool(d), Val::I64(a)) => conv!(d, a, |x: i64| x != 0),
        (Reg::Bool(d), Val::Bool(a)) => conv!(d, a, |x: bool| x),
    }
}
