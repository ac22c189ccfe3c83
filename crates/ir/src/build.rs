//! Short expression builders, for tests and examples: `c("x")`, `int(3)`, `float(0.5)`,
//! `text("a")`, `call(Func::Sqrt, vec![c("x")])`.

use crate::dtype::DType;
use crate::expr::{Expr, Func, Scalar};

/// Field `name`.
pub fn c(name: &str) -> Expr {
    Expr::col(name)
}

/// An int64 literal.
pub fn int(v: i64) -> Expr {
    Expr::Literal(Scalar::Int(v, DType::Int64))
}

/// A float64 literal.
pub fn float(v: f64) -> Expr {
    Expr::Literal(Scalar::Float(v, DType::Float64))
}

/// A string literal.
pub fn text(v: &str) -> Expr {
    Expr::Literal(Scalar::Utf8(v.into()))
}

/// `func` called on `args`.
pub fn call(func: Func, args: Vec<Expr>) -> Expr {
    Expr::Call { func, args }
}
