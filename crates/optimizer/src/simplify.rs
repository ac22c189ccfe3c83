//! Expression simplification and the fallibility guard.
//!
//! Folding works on the IR (never as rewrite rules in the plan e-graph), and a folded
//! function is kept only when it types exactly as before: a folded literal could otherwise
//! adopt another type than the expression it replaces.

use flumen_ir::{BinaryOp, DType, ElementSpec, Expr, Func, MapFn, NamedExpr, Scalar, UnaryOp};

/// True when evaluating `expr` over elements of `spec` may fail for some element: integer
/// arithmetic (overflow, division or remainder by zero), integer negation, `abs` and
/// powers, and casts that can lose the value (to a narrower integer, from strings...),
/// those written and those evaluation adds to bring operands to one type
/// ([`Expr::implicit_casts`]).
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
    // An operand cast to another type than its own (a uint64 compared with an int64, a
    // `case` value of a wider type than the case) fails where its value does not fit; a
    // literal was checked to fit when the expression was typed.
    let mut fails = expr
        .implicit_casts(spec)
        .map_or(true, |casts| casts.iter().any(|(literal, from, to)| !literal && cast_may_fail(*from, *to)));
    expr.visit(&mut |e| {
        let integer = || e.data_type(spec).map(|t| t.is_integer()).unwrap_or(true);
        fails |= match e {
            Expr::Binary {
                op: BinaryOp::Div | BinaryOp::Mod | BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul, ..
            } => integer(),
            Expr::Unary { op: UnaryOp::Neg, .. } => integer(),
            Expr::Call { func: Func::Abs | Func::Power | Func::FloorDiv | Func::FloorMod, .. } => integer(),
            // Reading a file, decoding it, and cropping or resizing an image to a size it may
            // not have can fail; flips and pixel operations of a well-typed image cannot.
            Expr::Call {
                func:
                    Func::ReadFile
                    | Func::DecodeJpeg
                    | Func::DecodePng
                    | Func::DecodeImage
                    | Func::DecodeJpegRows
                    | Func::Crop
                    | Func::CentralCrop
                    | Func::RandomCrop
                    | Func::RandomResizedCrop
                    | Func::Resize,
                ..
            } => true,
            Expr::Cast { arg, to } => arg.data_type(spec).map_or(true, |from| cast_may_fail(from, *to)),
            _ => false,
        };
    });
    fails
}

/// True when casting a `from` value to `to` can fail: only widening casts, casts to floats
/// (16-bit ones included: too large a value becomes infinite) and to strings always
/// succeed.
pub fn cast_may_fail(from: DType, to: DType) -> bool {
    let widens = match (from.int_range(), to.int_range()) {
        (Some((lo, hi)), Some((to_lo, to_hi))) => to_lo <= lo && hi <= to_hi,
        _ => false,
    };
    !(from == to
        || widens
        || (to.is_float() && (from.is_numeric() || from == DType::Bool || from.is_half()))
        || (to.is_half() && from.is_numeric())
        || (to == DType::Utf8 && (from.is_numeric() || from == DType::Bool)))
}

/// True when any output of the expression map may fail over `spec`.
pub fn outputs_may_fail(outputs: &[NamedExpr], spec: &ElementSpec) -> bool {
    outputs.iter().any(|o| may_fail(&o.expr, spec))
}

/// Folds constant sub-expressions and boolean identities over elements of `spec`.
///
/// `and` and `or` evaluate both operands, as `tf.logical_and` / `tf.logical_or` do: an
/// element for which either operand fails is an error, whatever the other gives. So
/// `true or x` and `false and x` fold to the literal only where `x` cannot fail
/// ([`may_fail`]); where it may, dropping `x` would drop its errors, and the operation stays.
/// Repeated operands of a chain of one of them are dropped (`p and q and p` is `p and q`):
/// each is still evaluated once.
pub fn fold(expr: &Expr, spec: &ElementSpec) -> Expr {
    match expr {
        Expr::Unary { op, arg } => {
            let arg = fold(arg, spec);
            match (op, &arg) {
                (UnaryOp::Not, Expr::Literal(Scalar::Bool(b))) => Expr::Literal(Scalar::Bool(!b)),
                (UnaryOp::Not, Expr::Unary { op: UnaryOp::Not, arg: inner }) => (**inner).clone(),
                _ => Expr::Unary { op: *op, arg: Box::new(arg) },
            }
        }
        Expr::Binary { op: op @ (BinaryOp::And | BinaryOp::Or), .. } => fold_logical(*op, expr, spec),
        Expr::Binary { op, left, right } => {
            let (l, r) = (fold(left, spec), fold(right, spec));
            fold_binary(*op, &l, &r).unwrap_or_else(|| Expr::binary(*op, l, r))
        }
        Expr::Cast { arg, to } => Expr::Cast { arg: Box::new(fold(arg, spec)), to: *to },
        Expr::Case { branches, otherwise } => Expr::Case {
            branches: branches.iter().map(|(c, v)| (fold(c, spec), fold(v, spec))).collect(),
            otherwise: otherwise.as_ref().map(|e| Box::new(fold(e, spec))),
        },
        Expr::Call { func, args } => Expr::Call { func: *func, args: args.iter().map(|a| fold(a, spec)).collect() },
        Expr::Column(_) | Expr::Literal(_) => expr.clone(),
    }
}

/// Folds a chain of `op` (`and` or `or`): its operands folded, repeats dropped, the
/// identity literal dropped, and the whole chain the absorbing literal when one operand is
/// that literal and no other may fail. Kleene logic: each step holds for null operands too.
fn fold_logical(op: BinaryOp, expr: &Expr, spec: &ElementSpec) -> Expr {
    let (identity, absorbing) = match op {
        BinaryOp::And => (true, false),
        _ => (false, true),
    };
    let mut operands: Vec<Expr> = Vec::new();
    for operand in chain_of(op, expr) {
        let folded = fold(operand, spec);
        // A folded operand may be a chain of the same operator: flatten it too.
        for part in chain_of(op, &folded) {
            if !operands.contains(part) {
                operands.push(part.clone());
            }
        }
    }
    let absorbed = operands.contains(&Expr::Literal(Scalar::Bool(absorbing)));
    if absorbed && !operands.iter().any(|e| may_fail(e, spec)) {
        return Expr::Literal(Scalar::Bool(absorbing));
    }
    operands.retain(|e| *e != Expr::Literal(Scalar::Bool(identity)));
    let mut parts = operands.into_iter();
    let Some(first) = parts.next() else {
        return Expr::Literal(Scalar::Bool(identity));
    };
    parts.fold(first, |acc, e| Expr::binary(op, acc, e))
}

/// The operands of a left- or right-nested chain of `op`, in order (`expr` itself when it is
/// not an `op`).
fn chain_of(op: BinaryOp, expr: &Expr) -> Vec<&Expr> {
    match expr {
        Expr::Binary { op: o, left, right } if *o == op => {
            let mut out = chain_of(op, left);
            out.extend(chain_of(op, right));
            out
        }
        _ => vec![expr],
    }
}

fn fold_binary(op: BinaryOp, l: &Expr, r: &Expr) -> Option<Expr> {
    use BinaryOp::*;
    match (op, l, r) {
        (_, Expr::Literal(Scalar::Int(a, ta)), Expr::Literal(Scalar::Int(b, tb))) if ta == tb => {
            let (a, b, t) = (*a, *b, *ta);
            let fits = |v: i64| t.int_range().is_some_and(|(lo, hi)| (lo..=hi).contains(&(v as i128)));
            let int = |v: Option<i64>| v.filter(|v| fits(*v)).map(|v| Expr::Literal(Scalar::Int(v, t)));
            match op {
                Add => int(a.checked_add(b)),
                Sub => int(a.checked_sub(b)),
                Mul => int(a.checked_mul(b)),
                _ => compare(op, Some(a.cmp(&b))),
            }
        }
        (_, Expr::Literal(Scalar::Float(a, ta)), Expr::Literal(Scalar::Float(b, tb))) if ta == tb => {
            let (a, b, t) = (*a, *b, *ta);
            // Computed in f64 and rounded once: exactly the float32 result for + - × ÷.
            let float = |v: f64| {
                let v = if t == DType::Float32 { v as f32 as f64 } else { v };
                Some(Expr::Literal(Scalar::Float(v, t)))
            };
            match op {
                Add => float(a + b),
                Sub => float(a - b),
                Mul => float(a * b),
                Div => float(a / b),
                // IEEE 754, as every evaluation path compares floats: NaN is unordered.
                _ => compare(op, a.partial_cmp(&b)),
            }
        }
        _ => None,
    }
}

/// The comparison `op` of two values ordered `ord` (`None`: unordered, a NaN).
fn compare(op: BinaryOp, ord: Option<std::cmp::Ordering>) -> Option<Expr> {
    use std::cmp::Ordering::*;
    use BinaryOp::*;
    let v = match op {
        Eq => ord == Some(Equal),
        NotEq => ord != Some(Equal),
        Lt => ord == Some(Less),
        LtEq => matches!(ord, Some(Less | Equal)),
        Gt => ord == Some(Greater),
        GtEq => matches!(ord, Some(Greater | Equal)),
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
        outputs.iter().map(|o| NamedExpr { name: o.name.clone(), expr: fold(&o.expr, input) }).collect();
    if outputs.iter().zip(&folded).all(|(a, b)| a.expr.data_type(input).ok() == b.expr.data_type(input).ok()) {
        MapFn::Exprs { outputs: folded, keep_input: *keep_input }
    } else {
        func.clone()
    }
}

/// `expr` folded, when that types exactly as `expr` over `input`.
pub fn fold_typed(expr: &Expr, input: &ElementSpec) -> Expr {
    let folded = fold(expr, input);
    if folded.data_type(input).ok() == expr.data_type(input).ok() {
        folded
    } else {
        expr.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flumen_ir::build::int;
    use flumen_ir::FieldSpec;

    fn spec() -> ElementSpec {
        ElementSpec::new(vec![FieldSpec::scalar("i", DType::Int32), FieldSpec::scalar("f", DType::Float64)]).unwrap()
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
        assert_eq!(fold(&t, &spec()), Expr::binary(BinaryOp::Gt, Expr::col("f"), int(1)));
        assert_eq!(fold(&Expr::binary(BinaryOp::Lt, int(1), int(2)), &spec()), Expr::Literal(Scalar::Bool(true)));
        assert_eq!(
            fold(&Expr::binary(BinaryOp::Add, int(i64::MAX), int(1)), &spec()),
            Expr::binary(BinaryOp::Add, int(i64::MAX), int(1))
        );
    }

    fn bool_lit(b: bool) -> Expr {
        Expr::Literal(Scalar::Bool(b))
    }

    #[test]
    fn absorbing_literals_keep_operands_that_may_fail() {
        // `true or (i / 2 > 1)`: the division may fail, and `or` evaluates both operands.
        let fallible = Expr::binary(BinaryOp::Gt, Expr::binary(BinaryOp::Div, Expr::col("i"), int(2)), int(1));
        for (op, absorbing) in [(BinaryOp::Or, true), (BinaryOp::And, false)] {
            let left = Expr::binary(op, bool_lit(absorbing), fallible.clone());
            assert_eq!(fold(&left, &spec()), left, "{left}");
            let right = Expr::binary(op, fallible.clone(), bool_lit(absorbing));
            assert_eq!(fold(&right, &spec()), right, "{right}");
        }
        // An operand that cannot fail is dropped.
        let safe = Expr::binary(BinaryOp::Gt, Expr::col("f"), int(1));
        assert_eq!(fold(&Expr::binary(BinaryOp::Or, safe.clone(), bool_lit(true)), &spec()), bool_lit(true));
        assert_eq!(fold(&Expr::binary(BinaryOp::And, bool_lit(false), safe), &spec()), bool_lit(false));
    }

    #[test]
    fn repeated_operands_of_a_chain_are_dropped() {
        let p = Expr::binary(BinaryOp::Gt, Expr::col("f"), int(1));
        let q = Expr::binary(BinaryOp::Lt, Expr::col("i"), int(3));
        let pp = Expr::binary(BinaryOp::And, p.clone(), p.clone());
        assert_eq!(fold(&pp, &spec()), p);
        let chain = Expr::binary(BinaryOp::And, Expr::binary(BinaryOp::And, p.clone(), q.clone()), pp);
        assert_eq!(fold(&chain, &spec()), Expr::binary(BinaryOp::And, p.clone(), q.clone()));
        let with_identity =
            Expr::binary(BinaryOp::Or, bool_lit(false), Expr::binary(BinaryOp::Or, q.clone(), q.clone()));
        assert_eq!(fold(&with_identity, &spec()), q);
    }

    #[test]
    fn float_comparisons_fold_as_ieee_754_says() {
        let float = |v: f64| Expr::Literal(Scalar::Float(v, DType::Float64));
        let cmp = |op, a: f64, b: f64| fold(&Expr::binary(op, float(a), float(b)), &spec());
        assert_eq!(cmp(BinaryOp::Lt, -0.0, 0.0), bool_lit(false), "-0 == +0");
        assert_eq!(cmp(BinaryOp::Eq, -0.0, 0.0), bool_lit(true));
        for op in [BinaryOp::Lt, BinaryOp::LtEq, BinaryOp::Gt, BinaryOp::GtEq, BinaryOp::Eq] {
            assert_eq!(cmp(op, 1.0, f64::NAN), bool_lit(false), "{op:?} with NaN");
            assert_eq!(cmp(op, f64::NAN, f64::NAN), bool_lit(false), "{op:?} of NaNs");
        }
        assert_eq!(cmp(BinaryOp::NotEq, f64::NAN, f64::NAN), bool_lit(true));
    }
}
