//! The dispatch macros of the semantics table: each expands a body once
//! per op of one enum with the op bound as a constant, so the CPU loops
//! that call [`super::float_unary`] and friends specialise (and vectorise)
//! per op. Owns only the expansion; what each op computes is the table's.
//!
//! Every macro lists its enum's variants in full and the match has no
//! wildcard arm, so a new op is a compile error here until it is listed.

/// The shared expansion: `match $op` over the listed variants of enum
/// `$E` (an alias in scope), each arm binding `$OP` to its variant as a
/// constant before `$body`.
#[doc(hidden)]
#[macro_export]
macro_rules! each_variant {
    ($op:expr, $E:ident, $OP:ident => $body:expr; $($v:ident),+ $(,)?) => {
        match $op {
            $($E::$v => {
                const $OP: $E = $E::$v;
                $body
            })+
        }
    };
}

/// Expand `$body` once per unary op with `$OP` bound to that op as a
/// constant, so a loop over `float_unary($OP, x)` specialises per op.
#[macro_export]
macro_rules! each_float_unary {
    ($op:expr, $OP:ident => $body:expr) => {{
        use $crate::ir::UnaryOp as U;
        $crate::each_variant!($op, U, $OP => $body;
            Neg, Exp, Log, Sqrt, Tanh, Sigmoid, Sin, Cos, Abs, Recip, Sign,
            Floor, Erf, Gelu, GeluGrad, StopGradient)
    }};
}

/// [`each_float_unary!`](crate::each_float_unary) for float binary ops.
#[macro_export]
macro_rules! each_float_binary {
    ($op:expr, $OP:ident => $body:expr) => {{
        use $crate::ir::BinaryOp as B;
        $crate::each_variant!($op, B, $OP => $body; Add, Sub, Mul, Div, Max, Min, Pow)
    }};
}

/// [`each_float_unary!`](crate::each_float_unary) for integer unary ops.
#[macro_export]
macro_rules! each_int_unary {
    ($op:expr, $OP:ident => $body:expr) => {{
        use $crate::semantics::IntUnary as U;
        $crate::each_variant!($op, U, $OP => $body; Neg, Abs, Sign)
    }};
}

/// [`each_float_unary!`](crate::each_float_unary) for integer binary ops.
#[macro_export]
macro_rules! each_int_binary {
    ($op:expr, $OP:ident => $body:expr) => {{
        use $crate::semantics::IntBinary as B;
        $crate::each_variant!($op, B, $OP => $body; Add, Sub, Mul, Div, Max, Min)
    }};
}

/// [`each_float_unary!`](crate::each_float_unary) for comparisons.
#[macro_export]
macro_rules! each_compare {
    ($op:expr, $OP:ident => $body:expr) => {{
        use $crate::ir::CmpOp as C;
        $crate::each_variant!($op, C, $OP => $body; Eq, Ne, Lt, Le, Gt, Ge)
    }};
}
