//! Scalar op semantics: the one table of what every elementwise primitive
//! computes on one element, per register class.
//!
//! Constant folding (the `ConstantFold` pass) evaluates through
//! [`Scalar`], the CPU fused kernels call the same scalar functions in their
//! loops ([`float_unary`], [`int_binary`], ... dispatched with a constant
//! op by [`each_float_unary!`](crate::each_float_unary) and friends, so each loop still inlines and
//! vectorises), the CUDA code generator renders the same rows as C, and the
//! conformance tests use this module as their oracle. Shape rules live in
//! [`crate::ir::infer`]; which ops exist on integers is decided here
//! ([`UnaryOp::on_integers`], [`BinaryOp::on_integers`]), and `infer` asks.
//!
//! Register classes: f16 and bf16 compute in f32, u8 in i32; the result is
//! rounded to the storage type when stored ([`Scalar::stored`]).
//!
//! | op | floats | integers (wrapping, two's complement) |
//! |---|---|---|
//! | neg, abs | IEEE (sign bit) | wrapping: `-MIN == MIN`, `abs(MIN) == MIN` |
//! | sign | 1 for x > 0, -1 for x < 0, else x itself: ±0 keep their sign and NaN stays NaN (NumPy, JAX/XLA) | -1, 0, 1 |
//! | exp, tanh | f32: branch-free, evaluated in f64: a polynomial ([`exp`]; the correctly rounded value, one ulp off on about 2 inputs in 10⁴), and tanh from its core ([`tanh`]; one ulp off on under 1 in 10³); f64: the platform libm | refused at trace time |
//! | log, sqrt, sin, cos, floor | the platform libm of the register type | refused at trace time |
//! | sigmoid | `1 / (1 + exp(-x))` | refused |
//! | erf | f32: a rational minimax fit evaluated in f64, absolute error below 1.2e-7 ([`erf`]); f64: the libm `erf` (under 1 ulp) | refused |
//! | gelu | `x * 0.5 * (1 + erf(x * (1/√2)))`, with the erf above | refused |
//! | gelu_grad | `(erf(x * (1/√2)) + 1) * 0.5 + x * (exp(x * x * -0.5) * (1/√(2π)))`: GELU's derivative | refused |
//! | recip | `1 / x` | refused |
//! | stop_gradient | `x` (its adjoint is zero) | refused at trace time: the method passes integers through unrecorded |
//! | add, sub, mul | IEEE | wrapping |
//! | div | IEEE (x/0 is ±inf or NaN) | truncating; x/0 == 0; MIN/-1 == MIN |
//! | max, min | a NaN operand yields the other one; ties (±0 included) give the first | ordinary |
//! | pow | `powf` | refused |
//! | compare | IEEE (NaN compares unequal to everything) | ordinary; bool: false < true |
//!
//! Adding an op is a compile error until every table has its row: every
//! match here, in `backend/cpu/fused.rs` and in `backend/cuda/codegen.rs` is
//! exhaustive over the op enum (integer kernels over [`IntUnary`] /
//! [`IntBinary`]), with no wildcard arm.

use crate::ir::{BinaryOp, CmpOp, UnaryOp};

/// The unary ops defined on integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IntUnary {
    /// Wrapping negation.
    Neg,
    /// Wrapping absolute value.
    Abs,
    /// -1, 0 or 1.
    Sign,
}

/// The binary ops defined on integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IntBinary {
    /// Wrapping sum.
    Add,
    /// Wrapping difference.
    Sub,
    /// Wrapping product.
    Mul,
    /// Truncating quotient; 0 for a zero divisor.
    Div,
    /// Larger operand.
    Max,
    /// Smaller operand.
    Min,
}

impl UnaryOp {
    /// The integer form of this op, or `None` where it is float-only (the
    /// tracer then refuses an integer operand).
    pub fn on_integers(self) -> Option<IntUnary> {
        match self {
            UnaryOp::Neg => Some(IntUnary::Neg),
            UnaryOp::Abs => Some(IntUnary::Abs),
            UnaryOp::Sign => Some(IntUnary::Sign),
            UnaryOp::Exp
            | UnaryOp::Log
            | UnaryOp::Sqrt
            | UnaryOp::Tanh
            | UnaryOp::Sigmoid
            | UnaryOp::Sin
            | UnaryOp::Cos
            | UnaryOp::Recip
            | UnaryOp::Floor
            | UnaryOp::Erf
            | UnaryOp::Gelu
            | UnaryOp::GeluGrad
            | UnaryOp::StopGradient => None,
        }
    }

    /// Every unary op (for tests and listings).
    pub const ALL: [UnaryOp; 16] = [
        UnaryOp::Neg,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Abs,
        UnaryOp::Recip,
        UnaryOp::Sign,
        UnaryOp::Floor,
        UnaryOp::Erf,
        UnaryOp::Gelu,
        UnaryOp::GeluGrad,
        UnaryOp::StopGradient,
    ];
}

impl BinaryOp {
    /// The integer form of this op, or `None` where it is float-only.
    pub fn on_integers(self) -> Option<IntBinary> {
        match self {
            BinaryOp::Add => Some(IntBinary::Add),
            BinaryOp::Sub => Some(IntBinary::Sub),
            BinaryOp::Mul => Some(IntBinary::Mul),
            BinaryOp::Div => Some(IntBinary::Div),
            BinaryOp::Max => Some(IntBinary::Max),
            BinaryOp::Min => Some(IntBinary::Min),
            BinaryOp::Pow => None,
        }
    }

    /// Every binary op (for tests and listings).
    pub const ALL: [BinaryOp; 7] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::Pow,
    ];
}

impl CmpOp {
    /// Every comparison (for tests and listings).
    pub const ALL: [CmpOp; 6] = [
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
    ];
}

/// A float register type (f32, f64): the libm functions the table uses.
pub trait FloatElem:
    Copy
    + PartialOrd
    + std::ops::Neg<Output = Self>
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
{
    /// 0
    const ZERO: Self;
    /// 1
    const ONE: Self;
    /// 1/2
    const HALF: Self;
    /// 1/√2
    const FRAC_1_SQRT_2: Self;
    /// 1/√(2π), computed as (1/2)(2/√π)(1/√2) in f64 and rounded once
    const FRAC_1_SQRT_2PI: Self;
    /// e^x
    fn exp(self) -> Self;
    /// ln x
    fn ln(self) -> Self;
    /// √x
    fn sqrt(self) -> Self;
    /// tanh x
    fn tanh(self) -> Self;
    /// sin x
    fn sin(self) -> Self;
    /// cos x
    fn cos(self) -> Self;
    /// |x|
    fn abs(self) -> Self;
    /// ⌊x⌋
    fn floor(self) -> Self;
    /// erf x, as the table's row says per type.
    fn erf(self) -> Self;
    /// x^y
    fn powf(self, y: Self) -> Self;
    /// Whether x is NaN.
    fn is_nan(self) -> bool;
}

macro_rules! float_elem {
    ($t:ty, $exp:path, $erf:path, $tanh:path) => {
        impl FloatElem for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const HALF: Self = 0.5;
            const FRAC_1_SQRT_2: Self = std::f64::consts::FRAC_1_SQRT_2 as $t;
            const FRAC_1_SQRT_2PI: Self =
                (0.5 * std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2) as $t;
            #[inline(always)]
            fn exp(self) -> Self {
                $exp(self)
            }
            #[inline(always)]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn tanh(self) -> Self {
                $tanh(self)
            }
            #[inline(always)]
            fn sin(self) -> Self {
                <$t>::sin(self)
            }
            #[inline(always)]
            fn cos(self) -> Self {
                <$t>::cos(self)
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline(always)]
            fn floor(self) -> Self {
                <$t>::floor(self)
            }
            #[inline(always)]
            fn erf(self) -> Self {
                $erf(self)
            }
            #[inline(always)]
            fn powf(self, y: Self) -> Self {
                <$t>::powf(self, y)
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
        }
    };
}
float_elem!(f32, exp::exp_f32, erf::erf_f32, tanh::tanh_f32);
float_elem!(f64, f64::exp, erf::erf_f64, f64::tanh);

/// An integer register type (i32, i64): wrapping arithmetic.
pub trait IntElem: Copy + Ord {
    /// 0
    const ZERO: Self;
    /// -x, wrapping.
    fn wrapping_neg(self) -> Self;
    /// |x|, wrapping.
    fn wrapping_abs(self) -> Self;
    /// -1, 0, 1.
    fn signum(self) -> Self;
    /// x + y, wrapping.
    fn wrapping_add(self, y: Self) -> Self;
    /// x - y, wrapping.
    fn wrapping_sub(self, y: Self) -> Self;
    /// x * y, wrapping.
    fn wrapping_mul(self, y: Self) -> Self;
    /// x / y truncating, wrapping (MIN / -1 == MIN); y != 0.
    fn wrapping_div(self, y: Self) -> Self;
}

macro_rules! int_elem {
    ($t:ty) => {
        impl IntElem for $t {
            const ZERO: Self = 0;
            #[inline(always)]
            fn wrapping_neg(self) -> Self {
                <$t>::wrapping_neg(self)
            }
            #[inline(always)]
            fn wrapping_abs(self) -> Self {
                <$t>::wrapping_abs(self)
            }
            #[inline(always)]
            fn signum(self) -> Self {
                <$t>::signum(self)
            }
            #[inline(always)]
            fn wrapping_add(self, y: Self) -> Self {
                <$t>::wrapping_add(self, y)
            }
            #[inline(always)]
            fn wrapping_sub(self, y: Self) -> Self {
                <$t>::wrapping_sub(self, y)
            }
            #[inline(always)]
            fn wrapping_mul(self, y: Self) -> Self {
                <$t>::wrapping_mul(self, y)
            }
            #[inline(always)]
            fn wrapping_div(self, y: Self) -> Self {
                <$t>::wrapping_div(self, y)
            }
        }
    };
}
int_elem!(i32);
int_elem!(i64);

/// erf(x / √2), the term exact GELU and its derivative share.
#[inline(always)]
pub fn gelu_erf<T: FloatElem>(x: T) -> T {
    (x * T::FRAC_1_SQRT_2).erf()
}

/// GELU(x) = x/2 (1 + erf(x/√2)), from `e` = [`gelu_erf`]`(x)`.
#[inline(always)]
pub fn gelu_from_erf<T: FloatElem>(x: T, e: T) -> T {
    x * T::HALF * (T::ONE + e)
}

/// GELU'(x) = Φ(x) + x φ(x), term by term as the composite wrote it, from
/// `e` = [`gelu_erf`]`(x)`. A kernel that needs both GELU and its
/// derivative of one value (the forward of a training step) evaluates the
/// erf once and passes it to both, with the same bits as the two ops.
#[inline(always)]
pub fn gelu_grad_from_erf<T: FloatElem>(x: T, e: T) -> T {
    let cdf = (e + T::ONE) * T::HALF;
    let pdf = (x * x * -T::HALF).exp() * T::FRAC_1_SQRT_2PI;
    cdf + x * pdf
}

/// A unary op on one float element.
#[inline(always)]
pub fn float_unary<T: FloatElem>(op: UnaryOp, x: T) -> T {
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => T::ONE / (T::ONE + (-x).exp()),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Abs => x.abs(),
        UnaryOp::Recip => T::ONE / x,
        // ±0 and NaN are their own sign.
        UnaryOp::Sign => {
            if x > T::ZERO {
                T::ONE
            } else if x < T::ZERO {
                -T::ONE
            } else {
                x
            }
        }
        UnaryOp::Floor => x.floor(),
        UnaryOp::Erf => x.erf(),
        UnaryOp::Gelu => gelu_from_erf(x, gelu_erf(x)),
        UnaryOp::GeluGrad => gelu_grad_from_erf(x, gelu_erf(x)),
        UnaryOp::StopGradient => x,
    }
}

/// A binary op on float elements.
#[inline(always)]
pub fn float_binary<T: FloatElem>(op: BinaryOp, x: T, y: T) -> T {
    match op {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
        BinaryOp::Max => {
            if x >= y || y.is_nan() {
                x
            } else {
                y
            }
        }
        BinaryOp::Min => {
            if x <= y || y.is_nan() {
                x
            } else {
                y
            }
        }
        BinaryOp::Pow => x.powf(y),
    }
}

/// A unary op on one integer element.
#[inline(always)]
pub fn int_unary<T: IntElem>(op: IntUnary, x: T) -> T {
    match op {
        IntUnary::Neg => x.wrapping_neg(),
        IntUnary::Abs => x.wrapping_abs(),
        IntUnary::Sign => x.signum(),
    }
}

/// A binary op on integer elements.
#[inline(always)]
pub fn int_binary<T: IntElem>(op: IntBinary, x: T, y: T) -> T {
    match op {
        IntBinary::Add => x.wrapping_add(y),
        IntBinary::Sub => x.wrapping_sub(y),
        IntBinary::Mul => x.wrapping_mul(y),
        IntBinary::Div => {
            if y == T::ZERO {
                T::ZERO
            } else {
                x.wrapping_div(y)
            }
        }
        IntBinary::Max => x.max(y),
        IntBinary::Min => x.min(y),
    }
}

/// A comparison of two elements of one register type.
#[inline(always)]
pub fn compare<T: PartialOrd>(op: CmpOp, x: T, y: T) -> bool {
    match op {
        CmpOp::Eq => x == y,
        CmpOp::Ne => x != y,
        CmpOp::Lt => x < y,
        CmpOp::Le => x <= y,
        CmpOp::Gt => x > y,
        CmpOp::Ge => x >= y,
    }
}

mod dispatch;
pub mod erf;
pub mod exp;
mod scalar;
pub mod tanh;
pub use scalar::Scalar;
