//! The dispatch macros of the semantics table: each expands a body once
//! per op of one enum with the op bound as a constant, so the CPU loops
//! that call [`super::float_unary`] and friends specialise (and vectorise)
//! per op. Owns only the expansion; what each op computes is the table's.

/// Expand `$body` once per unary op with `$OP` bound to that op as a
/// constant, so a loop over `float_unary($OP, x)` specialises per op.
#[macro_export]
macro_rules! each_float_unary {
    ($op:expr, $OP:ident => $body:expr) => {{
        use $crate::ir::UnaryOp as U;
        match $op {
            U::Neg => {
                const $OP: U = U::Neg;
                $body
            }
            U::Exp => {
                const $OP: U = U::Exp;
                $body
            }
            U::Log => {
                const $OP: U = U::Log;
                $body
            }
            U::Sqrt => {
                const $OP: U = U::Sqrt;
                $body
            }
            U::Tanh => {
                const $OP: U = U::Tanh;
                $body
            }
            U::Sigmoid => {
                const $OP: U = U::Sigmoid;
                $body
            }
            U::Sin => {
                const $OP: U = U::Sin;
                $body
            }
            U::Cos => {
                const $OP: U = U::Cos;
                $body
            }
            U::Abs => {
                const $OP: U = U::Abs;
                $body
            }
            U::Recip => {
                const $OP: U = U::Recip;
                $body
            }
            U::Sign => {
                const $OP: U = U::Sign;
                $body
            }
            U::Floor => {
                const $OP: U = U::Floor;
                $body
            }
            U::Erf => {
                const $OP: U = U::Erf;
                $body
            }
            U::Gelu => {
                const $OP: U = U::Gelu;
                $body
            }
            U::GeluGrad => {
                const $OP: U = U::GeluGrad;
                $body
            }
            U::StopGradient => {
                const $OP: U = U::StopGradient;
                $body
            }
        }
    }};
}

/// [`each_float_unary!`](crate::each_float_unary) for float binary ops.
#[macro_export]
macro_rules! each_float_binary {
    ($op:expr, $OP:ident => $body:expr) => {{
        use $crate::ir::BinaryOp as B;
        match $op {
            B::Add => {
                const $OP: B = B::Add;
                $body
            }
            B::Sub => {
                const $OP: B = B::Sub;
                $body
            }
            B::Mul => {
                const $OP: B = B::Mul;
                $body
            }
            B::Div => {
                const $OP: B = B::Div;
                $body
            }
            B::Max => {
                const $OP: B = B::Max;
                $body
            }
            B::Min => {
                const $OP: B = B::Min;
                $body
            }
            B::Pow => {
                const $OP: B = B::Pow;
                $body
            }
        }
    }};
}

/// [`each_float_unary!`](crate::each_float_unary) for integer unary ops.
#[macro_export]
macro_rules! each_int_unary {
    ($op:expr, $OP:ident => $body:expr) => {{
        use $crate::semantics::IntUnary as U;
        match $op {
            U::Neg => {
                const $OP: U = U::Neg;
                $body
            }
            U::Abs => {
                const $OP: U = U::Abs;
                $body
            }
            U::Sign => {
                const $OP: U = U::Sign;
                $body
            }
        }
    }};
}

/// [`each_float_unary!`](crate::each_float_unary) for integer binary ops.
#[macro_export]
macro_rules! each_int_binary {
    ($op:expr, $OP:ident => $body:expr) => {{
        use $crate::semantics::IntBinary as B;
        match $op {
            B::Add => {
                const $OP: B = B::Add;
                $body
            }
            B::Sub => {
                const $OP: B = B::Sub;
                $body
            }
            B::Mul => {
                const $OP: B = B::Mul;
                $body
            }
            B::Div => {
                const $OP: B = B::Div;
                $body
            }
            B::Max => {
                const $OP: B = B::Max;
                $body
            }
            B::Min => {
                const $OP: B = B::Min;
                $body
            }
        }
    }};
}

/// [`each_float_unary!`](crate::each_float_unary) for comparisons.
#[macro_export]
macro_rules! each_compare {
    ($op:expr, $OP:ident => $body:expr) => {{
        use $crate::ir::CmpOp as C;
        match $op {
            C::Eq => {
                const $OP: C = C::Eq;
                $body
            }
            C::Ne => {
                const $OP: C = C::Ne;
                $body
            }
            C::Lt => {
                const $OP: C = C::Lt;
                $body
            }
            C::Le => {
                const $OP: C = C::Le;
                $body
            }
            C::Gt => {
                const $OP: C = C::Gt;
                $body
            }
            C::Ge => {
                const $OP: C = C::Ge;
                $body
            }
        }
    }};
}
