//! Expression simplification and the fallibility guard.
//!
//! Folding works on the IR (never as rewrite rules in the plan e-graph), and a folded
//! function is kept only when it types exactly as before: a folded literal could otherwise
//! adopt another type than the expression it replaces.

use flumen_ir::{BinaryOp, DType, ElementSpec, Expr, Func, MapFn, NamedExpr, Scalar, UnaryOp};

/// True when evaluating `expr` over elements of `spec` may fail for some element: integer
/// arithmetic (overflow, division or remainder by zero), integer negation, `abs` and
/// powers, and casts that can lose the value (to a narrower integer, from strings...).
/// Rules that would evaluate an expression on other elements than the unoptimized plan
/// does (dropping it, or filtering before it) require it not to.
///
/// An expression over fixed-shape tensor fields (`features * weight`) applies to every
/// value, and its shapes were checked when the map was typed, so it may fail exactly where
/// the same expression over one value may. Tensor functions (`one_hot`, `normalize`, axis
/// reductions) are not looked into: an expression holding one is typed over the tensor
/// fields as they are, where an operation whose type cannot be told counts as one that may
/// fail.
pub fn may_fail(expr: &Expr, spec: &ElementSpec) -> bool {
    let values;
    let spec = if expr.has_tensor_function() || !spec.fields.iter().any(|f| f.is_fixed_tensor(spec.batch_dims)) {
        spec
    } else {
        values = spec.values_of_tensors();
        &values
    };
    let mut fails = false;
    expr.visit(&mut |e| {
        let integer = || e.data_type(spec).map(|t| t.is_integer()).unwrap_or(true);
        fails |= match e {
            Expr::Binary {
                op: BinaryOp::Div | BinaryOp::Mod | BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul, ..
            } => integer(),
            Expr::Unary { op: UnaryOp::Neg, .. } => integer(),
            Expr::Call { func: Func::Abs | Func::Power, .. } => integer(),
            Expr::Cast { arg, to } => arg.data_type(spec).map_or(true, |from| cast_may_fail(from, *to)),
            _ => false,
        };
    });
    fails
}

/// True when casting a `from` value to `to` can fail: only widening casts, casts to floats
/// and to strings always succeed.
pub fn cast_may_fail(from: DType, to: DType) -> bool {
    let widens = match (from.int_range(), to.int_range()) {
        (Some((lo, hi)), Some((to_lo, to_hi))) => to_lo <= lo && hi <= to_hi,
        _ => false,
    };
    !(from == to
        || widens
        || (to.is_float() && (from.is_numeric() || from == DType::Bool))
        || (to == DType::Utf8 && (from.is_numeric() || from == DType::Bool)))
}

/// True when any output of the expression map may fail over `spec`.
pub fn outputs_may_fail(outputs: &[NamedExpr], spec: &ElementSpec) -> bool {
    outputs.iter().any(|o| may_fail(&o.expr, spec))
}

/// Folds constant sub-expressions and boolean identities.
pub fn fold(expr: &Expr) -> Expr {
    match expr {
        Expr::Unary { op, arg } => {
            let arg = fold(arg);
            match (op, &arg) {
                (UnaryOp::Not, Expr::Literal(Scalar::Bool(b))) => Expr::Literal(Scalar::Bool(!b)),
                (UnaryOp::Not, Expr::Unary { op: UnaryOp::Not, arg: inner }) => (**inner).clone(),
                _ => Expr::Unary { op: *op, arg: Box::new(arg) },
            }
        }
        Expr::Binary { op, left, right } => {
            let (l, r) = (fold(left), fold(right));
            fold_binary(*op, &l, &r).unwrap_or_else(|| Expr::binary(*op, l, r))
        }
        Expr::Cast { arg, to } => Expr::Cast { arg: Box::new(fold(arg)), to: *to },
        Expr::Case { branches, otherwise } => Expr::Case {
            branches: branches.iter().map(|(c, v)| (fold(c), fold(v))).collect(),
            otherwise: otherwise.as_ref().map(|e| Box::new(fold(e))),
        },
        Expr::Call { func, args } => Expr::Call { func: *func, args: args.iter().map(fold).collect() },
        Expr::Column(_) | Expr::Literal(_) => expr.clone(),
    }
}

fn fold_binary(op: BinaryOp, l: &Expr, r: &Expr) -> Option<Expr> {
    use BinaryOp::*;
    let lit = |s: Scalar| Some(Expr::Literal(s));
    match (op, l, r) {
        // Kleene logic: these hold for null operands too.
        (And, Expr::Literal(Scalar::Bool(true)), x) | (And, x, Expr::Literal(Scalar::Bool(true))) => Some(x.clone()),
        (Or, Expr::Literal(Scalar::Bool(false)), x) | (Or, x, Expr::Literal(Scalar::Bool(false))) => Some(x.clone()),
        (And, Expr::Literal(Scalar::Bool(false)), _) | (And, _, Expr::Literal(Scalar::Bool(false))) => {
            lit(Scalar::Bool(false))
        }
        (Or, Expr::Literal(Scalar::Bool(true)), _) | (Or, _, Expr::Literal(Scalar::Bool(true))) => {
            lit(Scalar::Bool(true))
        }
        (_, Expr::Literal(Scalar::Int(a, ta)), Expr::Literal(Scalar::Int(b, tb))) if ta == tb => {
            let (a, b, t) = (*a, *b, *ta);
            let fits = |v: i64| t.int_range().is_some_and(|(lo, hi)| (lo..=hi).contains(&(v as i128)));
            let int = |v: Option<i64>| v.filter(|v| fits(*v)).map(|v| Expr::Literal(Scalar::Int(v, t)));
            match op {
                Add => int(a.checked_add(b)),
                Sub => int(a.checked_sub(b)),
                Mul => int(a.checked_mul(b)),
                _ => compare(op, a.partial_cmp(&b)?),
            }
        }
        (_, Expr::Literal(Scalar::Float(a, ta)), Expr::Literal(Scalar::Float(b, tb))) if ta == tb => {
            let (a, b, t) = (*a, *b, *ta);
            let float = |v: f64| {
                let v = if t == DType::Float32 { v as f32 as f64 } else { v };
                Some(Expr::Literal(Scalar::Float(v, t)))
            };
            match op {
                Add => float(a + b),
                Sub => float(a - b),
                Mul => float(a * b),
                Div => float(a / b),
                _ => compare(op, a.partial_cmp(&b)?),
            }
        }
        _ => None,
    }
}

fn compare(op: BinaryOp, ord: std::cmp::Ordering) -> Option<Expr> {
    use std::cmp::Ordering::*;
    use BinaryOp::*;
    let v = match op {
        Eq => ord == Equal,
        NotEq => ord != Equal,
        Lt => ord == Less,
        LtEq => ord != Greater,
        Gt => ord == Greater,
        GtEq => ord != Less,
        _ => return None,
    };
    Some(Expr::Literal(Scalar::Bool(v)))
}

/// `func` with its expressions folded, when that types exactly as `func` over `input`.
pub fn fold_map_fn(func: &MapFn, input: &ElementSpec) -> MapFn {
    let MapFn::Exprs { outputs, keep_input } = func else {
        return func.clone();
    };
    let folded: Vec<NamedExpr> =
        outputs.iter().map(|o| NamedExpr { name: o.name.clone(), expr: fold(&o.expr) }).collect();
    if outputs.iter().zip(&folded).all(|(a, b)| a.expr.data_type(input).ok() == b.expr.data_type(input).ok()) {
        MapFn::Exprs { outputs: folded, keep_input: *keep_input }
    } else {
        func.clone()
    }
}

/// `expr` folded, when that types exactly as `expr` over `input`.
pub fn fold_typed(expr: &Expr, input: &ElementSpec) -> Expr {
    let folded = fold(expr);
    if folded.data_type(input).ok() == expr.data_type(input).ok() {
        folded
    } else {
        expr.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flumen_ir::FieldSpec;

    fn spec() -> ElementSpec {
        ElementSpec::new(vec![FieldSpec::scalar("i", DType::Int32), FieldSpec::scalar("f", DType::Float64)]).unwrap()
    }

    fn int(v: i64) -> Expr {
        Expr::Literal(Scalar::Int(v, DType::Int64))
    }

    #[test]
    fn integer_division_may_fail_float_division_may_not() {
        assert!(may_fail(&Expr::binary(BinaryOp::Div, Expr::col("i"), int(2)), &spec()));
        assert!(!may_fail(&Expr::binary(BinaryOp::Div, Expr::col("f"), int(2)), &spec()));
        assert!(may_fail(&Expr::binary(BinaryOp::Mul, Expr::col("i"), int(2)), &spec()), "integers overflow");
        assert!(!may_fail(&Expr::binary(BinaryOp::Mul, Expr::col("f"), int(2)), &spec()));
        let to_float = Expr::Cast { arg: Box::new(Expr::col("i")), to: DType::Float64 };
        assert!(!may_fail(&to_float, &spec()));
        let narrowing = Expr::Cast { arg: Box::new(Expr::col("i")), to: DType::Int8 };
        assert!(may_fail(&narrowing, &spec()));
    }

    #[test]
    fn tensor_expressions_may_fail_as_their_values_do() {
        let spec = ElementSpec::new(vec![
            FieldSpec::tensor("x", DType::Float32, vec![4]),
            FieldSpec::tensor("n", DType::Int64, vec![4]),
            FieldSpec::scalar("w", DType::Float32),
        ])
        .unwrap();
        assert!(!may_fail(&Expr::binary(BinaryOp::Mul, Expr::col("x"), Expr::col("w")), &spec));
        assert!(may_fail(&Expr::binary(BinaryOp::Add, Expr::col("n"), int(1)), &spec), "integers overflow");
        let one_hot = Expr::Call { func: flumen_ir::Func::OneHot, args: vec![Expr::col("n"), int(3)] };
        let scaled = Expr::binary(BinaryOp::Mul, one_hot, Expr::col("w"));
        assert!(may_fail(&scaled, &spec), "arithmetic over tensor functions is not looked into");
    }

    #[test]
    fn folding_keeps_types_and_kleene_identities() {
        let e = Expr::binary(BinaryOp::Add, Expr::col("i"), Expr::binary(BinaryOp::Mul, int(2), int(3)));
        let folded = fold_typed(&e, &spec());
        assert_eq!(folded.data_type(&spec()).unwrap(), e.data_type(&spec()).unwrap());
        let t = Expr::binary(
            BinaryOp::And,
            Expr::Literal(Scalar::Bool(true)),
            Expr::binary(BinaryOp::Gt, Expr::col("f"), int(1)),
        );
        assert_eq!(fold(&t), Expr::binary(BinaryOp::Gt, Expr::col("f"), int(1)));
        assert_eq!(fold(&Expr::binary(BinaryOp::Lt, int(1), int(2))), Expr::Literal(Scalar::Bool(true)));
        assert_eq!(
            fold(&Expr::binary(BinaryOp::Add, int(i64::MAX), int(1))),
            Expr::binary(BinaryOp::Add, int(i64::MAX), int(1))
        );
    }
}
