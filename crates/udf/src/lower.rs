//! Lowering DataFusion logical expressions into flumen's expression IR.
//!
//! Users write expressions with `datafusion-expr` (`col("x") * lit(2.0)`); plans store
//! [`flumen_ir::Expr`], which is smaller, serializable and typed by the element spec. Lowering
//! is purely structural: it does not type-check (the plan does that against the input spec).

use arrow::array::{Array, AsArray};
use arrow::compute::cast;
use arrow::datatypes::{
    DataType, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type, UInt64Type,
    UInt8Type,
};
use datafusion_expr::expr::{Alias, InList};
use datafusion_expr::{Between, BinaryExpr, Case, Expr as DfExpr, Operator};
use flumen_ir::{BinaryOp, DType, Error, Expr, Func, NamedExpr, Result, Scalar, UnaryOp};

/// Lowers a DataFusion expression to flumen's IR.
///
/// Supported: columns, literals of flumen's dtypes, arithmetic, comparisons, `AND`/`OR`/`NOT`,
/// negation, `IS [NOT] NULL`, `IS [NOT] TRUE/FALSE/UNKNOWN`, `CAST`/`TRY_CAST` to flumen's
/// dtypes, both forms of `CASE`, `BETWEEN`, `IN (...)`, aliases (dropped: naming an output is
/// the caller's business) and the scalar functions of [`crate::functions`] by name.
/// Anything else is an [`Error::Expr`] naming the unsupported variant.
pub fn lower(expr: &DfExpr) -> Result<Expr> {
    match expr {
        DfExpr::Alias(Alias { expr, .. }) => lower(expr),
        // flumen has no relations, so a qualifier can only be part of a dotted field name.
        DfExpr::Column(c) => Ok(Expr::Column(if c.relation.is_some() { c.flat_name() } else { c.name.clone() })),
        DfExpr::Literal(value, _) => {
            if value.data_type() == DataType::Null {
                return Err(Error::Expr(format!(
                    "untyped null literal in {expr}: cast it to a type, e.g. cast(lit(ScalarValue::Null), DataType::Int64)"
                )));
            }
            let array = value.to_array().map_err(|e| Error::Expr(format!("literal {expr}: {e}")))?;
            Ok(Expr::Literal(scalar_from_array(array.as_ref()).map_err(|e| Error::Expr(format!("{e} in {expr}")))?))
        }
        DfExpr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let op = binary_op(*op).ok_or_else(|| unsupported(&format!("operator {op}"), expr))?;
            Ok(Expr::binary(op, lower(left)?, lower(right)?))
        }
        DfExpr::Not(e) => Ok(unary(UnaryOp::Not, lower(e)?)),
        DfExpr::Negative(e) => Ok(unary(UnaryOp::Neg, lower(e)?)),
        DfExpr::IsNull(e) | DfExpr::IsUnknown(e) => Ok(unary(UnaryOp::IsNull, lower(e)?)),
        DfExpr::IsNotNull(e) | DfExpr::IsNotUnknown(e) => Ok(unary(UnaryOp::IsNotNull, lower(e)?)),
        // `IS TRUE` and friends are never null: a null operand counts as neither true nor false.
        DfExpr::IsTrue(e) => Ok(null_as(lower(e)?, false)),
        DfExpr::IsNotTrue(e) => Ok(unary(UnaryOp::Not, null_as(lower(e)?, false))),
        DfExpr::IsFalse(e) => Ok(null_as(unary(UnaryOp::Not, lower(e)?), false)),
        DfExpr::IsNotFalse(e) => Ok(null_as(lower(e)?, true)),
        DfExpr::Between(Between { expr: e, negated, low, high }) => {
            let (e, low, high) = (lower(e)?, lower(low)?, lower(high)?);
            Ok(if *negated {
                Expr::binary(
                    BinaryOp::Or,
                    Expr::binary(BinaryOp::Lt, e.clone(), low),
                    Expr::binary(BinaryOp::Gt, e, high),
                )
            } else {
                Expr::binary(
                    BinaryOp::And,
                    Expr::binary(BinaryOp::GtEq, e.clone(), low),
                    Expr::binary(BinaryOp::LtEq, e, high),
                )
            })
        }
        DfExpr::InList(InList { expr: e, list, negated }) => {
            let e = lower(e)?;
            let (cmp, join) = if *negated { (BinaryOp::NotEq, BinaryOp::And) } else { (BinaryOp::Eq, BinaryOp::Or) };
            let tests = list.iter().map(|v| Ok(Expr::binary(cmp, e.clone(), lower(v)?))).collect::<Result<Vec<_>>>()?;
            // `x IN ()` holds for no x; `x NOT IN ()` for every x.
            Ok(tests
                .into_iter()
                .reduce(|a, b| Expr::binary(join, a, b))
                .unwrap_or(Expr::Literal(Scalar::Bool(*negated))))
        }
        DfExpr::Case(Case { expr: operand, when_then_expr, else_expr }) => {
            let operand = operand.as_deref().map(lower).transpose()?;
            let branches = when_then_expr
                .iter()
                .map(|(when, then)| {
                    let when = lower(when)?;
                    // `CASE x WHEN v THEN ...` is `CASE WHEN x = v THEN ...`.
                    let cond = match &operand {
                        Some(x) => Expr::binary(BinaryOp::Eq, x.clone(), when),
                        None => when,
                    };
                    Ok((cond, lower(then)?))
                })
                .collect::<Result<Vec<_>>>()?;
            let otherwise = else_expr.as_deref().map(lower).transpose()?.map(Box::new);
            Ok(Expr::Case { branches, otherwise })
        }
        DfExpr::Cast(c) => lower_cast(&c.expr, c.field.data_type(), expr),
        DfExpr::TryCast(c) => lower_cast(&c.expr, c.field.data_type(), expr),
        DfExpr::ScalarFunction(f) if f.name() == crate::functions::CAST_BFLOAT16 => match f.args.as_slice() {
            [arg] => Ok(Expr::Cast { arg: Box::new(lower(arg)?), to: DType::BFloat16 }),
            _ => Err(unsupported("cast_bfloat16 takes one argument", expr)),
        },
        DfExpr::ScalarFunction(f) => {
            let func = func_by_name(f.name()).ok_or_else(|| unsupported(&format!("function {}", f.name()), expr))?;
            Ok(Expr::Call { func, args: f.args.iter().map(lower).collect::<Result<Vec<_>>>()? })
        }
        other => Err(unsupported(other.variant_name(), other)),
    }
}

/// Lowers `expr` as the output field `name` of a map.
pub fn lower_named(name: impl Into<String>, expr: &DfExpr) -> Result<NamedExpr> {
    Ok(NamedExpr { name: name.into(), expr: lower(expr)? })
}

fn unsupported(what: &str, expr: &DfExpr) -> Error {
    Error::Expr(format!("unsupported expression ({what}): {expr}"))
}

fn unary(op: UnaryOp, arg: Expr) -> Expr {
    Expr::Unary { op, arg: Box::new(arg) }
}

fn null_as(e: Expr, value: bool) -> Expr {
    Expr::Call { func: Func::Coalesce, args: vec![e, Expr::Literal(Scalar::Bool(value))] }
}

fn lower_cast(inner: &DfExpr, to: &DataType, expr: &DfExpr) -> Result<Expr> {
    // Expressions do not take the temporal and decimal dtypes yet (files read them).
    let to = DType::from_arrow(to)
        .ok()
        .filter(|t| !matches!(t, DType::Date32 | DType::TimeMicros | DType::TimestampMicros | DType::Decimal128 { .. }))
        .ok_or_else(|| unsupported(&format!("cast to {to}"), expr))?;
    // An untyped NULL gets its type from the cast; there is no IR value for it otherwise.
    if let DfExpr::Literal(value, _) = inner {
        if value.data_type() == DataType::Null {
            return Ok(Expr::Literal(Scalar::Null(to)));
        }
    }
    Ok(Expr::Cast { arg: Box::new(lower(inner)?), to })
}

fn binary_op(op: Operator) -> Option<BinaryOp> {
    Some(match op {
        Operator::Plus => BinaryOp::Add,
        Operator::Minus => BinaryOp::Sub,
        Operator::Multiply => BinaryOp::Mul,
        Operator::Divide => BinaryOp::Div,
        Operator::Modulo => BinaryOp::Mod,
        Operator::Eq => BinaryOp::Eq,
        Operator::NotEq => BinaryOp::NotEq,
        Operator::Lt => BinaryOp::Lt,
        Operator::LtEq => BinaryOp::LtEq,
        Operator::Gt => BinaryOp::Gt,
        Operator::GtEq => BinaryOp::GtEq,
        Operator::And => BinaryOp::And,
        Operator::Or => BinaryOp::Or,
        _ => return None,
    })
}

/// flumen's function for a DataFusion function name, accepting DataFusion's aliases.
fn func_by_name(name: &str) -> Option<Func> {
    Some(match name {
        "abs" => Func::Abs,
        "sqrt" => Func::Sqrt,
        "exp" => Func::Exp,
        "ln" => Func::Ln,
        "log2" => Func::Log2,
        "log10" => Func::Log10,
        "floor" => Func::Floor,
        "ceil" => Func::Ceil,
        "round" => Func::Round,
        "trunc" => Func::Trunc,
        "sin" => Func::Sin,
        "cos" => Func::Cos,
        "tan" => Func::Tan,
        "tanh" => Func::Tanh,
        "signum" => Func::Signum,
        "power" | "pow" => Func::Power,
        "atan2" => Func::Atan2,
        "truediv" => Func::TrueDiv,
        "floordiv" => Func::FloorDiv,
        "floormod" => Func::FloorMod,
        "least" => Func::Least,
        "greatest" => Func::Greatest,
        "coalesce" => Func::Coalesce,
        "length" | "character_length" | "char_length" => Func::Length,
        "clip" => Func::Clip,
        "bucketize" => Func::Bucketize,
        "reduce_sum" => Func::ReduceSum,
        "reduce_mean" => Func::ReduceMean,
        "reduce_max" => Func::ReduceMax,
        "reduce_min" => Func::ReduceMin,
        "one_hot" => Func::OneHot,
        "hash_bucket" | "to_hash_bucket_fast" => Func::HashBucket,
        "reduce_sum_axes" => Func::ReduceSumAxes,
        "reduce_mean_axes" => Func::ReduceMeanAxes,
        "reduce_max_axes" => Func::ReduceMaxAxes,
        "reduce_min_axes" => Func::ReduceMinAxes,
        "normalize" => Func::Normalize,
        other => return Func::from_name(other).filter(|f| f.is_image_function() || *f == Func::ReadFile),
    })
}

/// The IR scalar held by a one-element array (how DataFusion literals reach us: flumen cannot
/// name DataFusion's `ScalarValue` without depending on `datafusion-common`).
fn scalar_from_array(array: &dyn Array) -> Result<Scalar> {
    let dtype = DType::from_arrow(array.data_type())?;
    if array.is_null(0) {
        return Ok(Scalar::Null(dtype));
    }
    // Large and view variants become the one physical type flumen uses for the dtype.
    let array = cast(array, &dtype.to_arrow())?;
    let int = |v: i64| Scalar::Int(v, dtype);
    Ok(match dtype {
        DType::Bool => Scalar::Bool(array.as_boolean().value(0)),
        DType::Int8 => int(array.as_primitive::<Int8Type>().value(0).into()),
        DType::Int16 => int(array.as_primitive::<Int16Type>().value(0).into()),
        DType::Int32 => int(array.as_primitive::<Int32Type>().value(0).into()),
        DType::Int64 => int(array.as_primitive::<Int64Type>().value(0)),
        DType::UInt8 => int(array.as_primitive::<UInt8Type>().value(0).into()),
        DType::UInt16 => int(array.as_primitive::<UInt16Type>().value(0).into()),
        DType::UInt32 => int(array.as_primitive::<UInt32Type>().value(0).into()),
        DType::UInt64 => {
            let v = array.as_primitive::<UInt64Type>().value(0);
            i64::try_from(v).map(int).unwrap_or(Scalar::UInt64(v))
        }
        DType::Float32 => Scalar::Float(array.as_primitive::<Float32Type>().value(0).into(), dtype),
        DType::Float64 => Scalar::Float(array.as_primitive::<Float64Type>().value(0), dtype),
        DType::Utf8 => Scalar::Utf8(array.as_string::<i32>().value(0).to_string()),
        DType::Binary => Scalar::Binary(array.as_binary::<i32>().value(0).to_vec()),
        DType::Float16
        | DType::BFloat16
        | DType::Date32
        | DType::TimeMicros
        | DType::TimestampMicros
        | DType::Decimal128 { .. } => {
            return Err(Error::Expr(format!("a literal of dtype {dtype} is not supported yet")))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::functions::*;
    use datafusion_expr::{case, cast, col, lit, not, placeholder, try_cast, when};
    use flumen_ir::build::{c, int};

    /// A typed null literal. DataFusion's `ScalarValue` cannot be named from this crate, so
    /// take its type from a literal and build the null through its `TryFrom<&DataType>`.
    fn typed_null(dt: DataType) -> DfExpr {
        fn null_like<S>(_witness: S, dt: &DataType) -> S
        where
            S: for<'a> TryFrom<&'a DataType>,
            for<'a> <S as TryFrom<&'a DataType>>::Error: std::fmt::Debug,
        {
            S::try_from(dt).expect("a null of a primitive type")
        }
        let DfExpr::Literal(witness, _) = lit(0i64) else { unreachable!("lit makes a literal") };
        DfExpr::Literal(null_like(witness, &dt), None)
    }

    fn l(e: DfExpr) -> Expr {
        lower(&e).unwrap()
    }

    fn bin(op: BinaryOp, a: Expr, b: Expr) -> Expr {
        Expr::binary(op, a, b)
    }

    #[test]
    fn columns_and_literals() {
        assert_eq!(l(col("x")), c("x"));
        assert_eq!(l(col("x").alias("y")), c("x"));
        assert_eq!(l(lit(true)), Expr::Literal(Scalar::Bool(true)));
        assert_eq!(l(lit(-3i8)), Expr::Literal(Scalar::Int(-3, DType::Int8)));
        assert_eq!(l(lit(7i16)), Expr::Literal(Scalar::Int(7, DType::Int16)));
        assert_eq!(l(lit(7i32)), Expr::Literal(Scalar::Int(7, DType::Int32)));
        assert_eq!(l(lit(7i64)), int(7));
        assert_eq!(l(lit(7u8)), Expr::Literal(Scalar::Int(7, DType::UInt8)));
        assert_eq!(l(lit(7u16)), Expr::Literal(Scalar::Int(7, DType::UInt16)));
        assert_eq!(l(lit(7u32)), Expr::Literal(Scalar::Int(7, DType::UInt32)));
        assert_eq!(l(lit(7u64)), Expr::Literal(Scalar::Int(7, DType::UInt64)));
        assert_eq!(l(lit(u64::MAX)), Expr::Literal(Scalar::UInt64(u64::MAX)));
        assert_eq!(l(lit(1.5f32)), Expr::Literal(Scalar::Float(1.5, DType::Float32)));
        assert_eq!(l(lit(2.5f64)), Expr::Literal(Scalar::Float(2.5, DType::Float64)));
        assert_eq!(l(lit("hi")), Expr::Literal(Scalar::Utf8("hi".into())));
        assert_eq!(l(lit(vec![1u8, 2])), Expr::Literal(Scalar::Binary(vec![1, 2])));
        assert_eq!(l(typed_null(DataType::Int32)), Expr::Literal(Scalar::Null(DType::Int32)));
        assert_eq!(l(typed_null(DataType::LargeUtf8)), Expr::Literal(Scalar::Null(DType::Utf8)));
    }

    #[test]
    fn untyped_null_needs_a_cast() {
        let null = typed_null(DataType::Null);
        let err = lower(&null).unwrap_err().to_string();
        assert!(err.contains("untyped null"), "{err}");
        assert_eq!(l(cast(null, DataType::Float32)), Expr::Literal(Scalar::Null(DType::Float32)));
    }

    #[test]
    fn binary_operators() {
        let ops = [
            (col("a") + col("b"), BinaryOp::Add),
            (col("a") - col("b"), BinaryOp::Sub),
            (col("a") * col("b"), BinaryOp::Mul),
            (col("a") / col("b"), BinaryOp::Div),
            (col("a") % col("b"), BinaryOp::Mod),
            (col("a").eq(col("b")), BinaryOp::Eq),
            (col("a").not_eq(col("b")), BinaryOp::NotEq),
            (col("a").lt(col("b")), BinaryOp::Lt),
            (col("a").lt_eq(col("b")), BinaryOp::LtEq),
            (col("a").gt(col("b")), BinaryOp::Gt),
            (col("a").gt_eq(col("b")), BinaryOp::GtEq),
            (col("a").and(col("b")), BinaryOp::And),
            (col("a").or(col("b")), BinaryOp::Or),
        ];
        for (e, op) in ops {
            assert_eq!(l(e), bin(op, c("a"), c("b")));
        }
        let err = lower(&(col("a") & col("b"))).unwrap_err().to_string();
        assert!(err.contains("unsupported expression") && err.contains("operator &"), "{err}");
    }

    #[test]
    fn unary_forms() {
        let not_ = |e| unary(UnaryOp::Not, e);
        let coalesce_ = |e, v| Expr::Call { func: Func::Coalesce, args: vec![e, Expr::Literal(Scalar::Bool(v))] };
        assert_eq!(l(not(col("p"))), not_(c("p")));
        assert_eq!(l(-col("x")), unary(UnaryOp::Neg, c("x")));
        assert_eq!(l(col("x").is_null()), unary(UnaryOp::IsNull, c("x")));
        assert_eq!(l(col("x").is_not_null()), unary(UnaryOp::IsNotNull, c("x")));
        assert_eq!(l(col("p").is_unknown()), unary(UnaryOp::IsNull, c("p")));
        assert_eq!(l(col("p").is_not_unknown()), unary(UnaryOp::IsNotNull, c("p")));
        assert_eq!(l(col("p").is_true()), coalesce_(c("p"), false));
        assert_eq!(l(col("p").is_not_true()), not_(coalesce_(c("p"), false)));
        assert_eq!(l(col("p").is_false()), coalesce_(not_(c("p")), false));
        assert_eq!(l(col("p").is_not_false()), coalesce_(c("p"), true));
    }

    #[test]
    fn casts() {
        let to = |e, t| Expr::Cast { arg: Box::new(e), to: t };
        assert_eq!(l(cast(col("x"), DataType::Float32)), to(c("x"), DType::Float32));
        assert_eq!(l(try_cast(col("x"), DataType::Int16)), to(c("x"), DType::Int16));
        assert_eq!(l(cast(col("s"), DataType::LargeUtf8)), to(c("s"), DType::Utf8));
        let err = lower(&cast(col("x"), DataType::Date32)).unwrap_err().to_string();
        assert!(err.contains("cast to Date32"), "{err}");
    }

    #[test]
    fn case_between_in_list() {
        let searched = when(col("x").gt(lit(0i64)), lit(1i64)).otherwise(lit(-1i64)).unwrap();
        assert_eq!(
            l(searched),
            Expr::Case {
                branches: vec![(bin(BinaryOp::Gt, c("x"), int(0)), int(1))],
                otherwise: Some(Box::new(int(-1)))
            }
        );
        let simple = case(col("x")).when(lit(1i64), lit("one")).when(lit(2i64), lit("two")).end().unwrap();
        let s = |v: &str| Expr::Literal(Scalar::Utf8(v.into()));
        assert_eq!(
            l(simple),
            Expr::Case {
                branches: vec![
                    (bin(BinaryOp::Eq, c("x"), int(1)), s("one")),
                    (bin(BinaryOp::Eq, c("x"), int(2)), s("two"))
                ],
                otherwise: None
            }
        );
        assert_eq!(
            l(col("x").between(lit(1i64), lit(5i64))),
            bin(BinaryOp::And, bin(BinaryOp::GtEq, c("x"), int(1)), bin(BinaryOp::LtEq, c("x"), int(5)))
        );
        assert_eq!(
            l(col("x").not_between(lit(1i64), lit(5i64))),
            bin(BinaryOp::Or, bin(BinaryOp::Lt, c("x"), int(1)), bin(BinaryOp::Gt, c("x"), int(5)))
        );
        assert_eq!(
            l(col("x").in_list(vec![lit(1i64), lit(2i64)], false)),
            bin(BinaryOp::Or, bin(BinaryOp::Eq, c("x"), int(1)), bin(BinaryOp::Eq, c("x"), int(2)))
        );
        assert_eq!(l(col("x").in_list(vec![lit(1i64)], true)), bin(BinaryOp::NotEq, c("x"), int(1)));
        assert_eq!(l(col("x").in_list(vec![], true)), Expr::Literal(Scalar::Bool(true)));
    }

    #[test]
    fn functions_by_name() {
        type Builder = fn(DfExpr) -> DfExpr;
        let unary_fns: Vec<(Builder, Func)> = vec![
            (abs, Func::Abs),
            (sqrt, Func::Sqrt),
            (exp, Func::Exp),
            (ln, Func::Ln),
            (log2, Func::Log2),
            (log10, Func::Log10),
            (floor, Func::Floor),
            (ceil, Func::Ceil),
            (round, Func::Round),
            (trunc, Func::Trunc),
            (sin, Func::Sin),
            (cos, Func::Cos),
            (tan, Func::Tan),
            (tanh, Func::Tanh),
            (signum, Func::Signum),
            (length, Func::Length),
        ];
        for (build, func) in unary_fns {
            assert_eq!(l(build(col("x"))), Expr::Call { func, args: vec![c("x")] });
        }
        let call = |func, args| Expr::Call { func, args };
        assert_eq!(l(power(col("x"), lit(2i64))), call(Func::Power, vec![c("x"), int(2)]));
        assert_eq!(l(atan2(col("y"), col("x"))), call(Func::Atan2, vec![c("y"), c("x")]));
        assert_eq!(l(least(vec![col("a"), col("b")])), call(Func::Least, vec![c("a"), c("b")]));
        assert_eq!(l(greatest(vec![col("a"), col("b")])), call(Func::Greatest, vec![c("a"), c("b")]));
        assert_eq!(l(coalesce(vec![col("a"), lit(0i64)])), call(Func::Coalesce, vec![c("a"), int(0)]));
        // The tensor functions lower with their literal arguments in order.
        let float = |v: f64| Expr::Literal(Scalar::Float(v, DType::Float64));
        assert_eq!(l(one_hot(col("i"), 3)), call(Func::OneHot, vec![c("i"), int(3)]));
        assert_eq!(l(hash_bucket(col("s"), 10)), call(Func::HashBucket, vec![c("s"), int(10)]));
        assert_eq!(l(reduce_sum_axes(col("t"), &[0, -1])), call(Func::ReduceSumAxes, vec![c("t"), int(0), int(-1)]));
        assert_eq!(l(reduce_mean_axes(col("t"), &[1])), call(Func::ReduceMeanAxes, vec![c("t"), int(1)]));
        assert_eq!(l(reduce_max_axes(col("t"), &[])), call(Func::ReduceMaxAxes, vec![c("t")]));
        assert_eq!(l(reduce_min_axes(col("t"), &[2])), call(Func::ReduceMinAxes, vec![c("t"), int(2)]));
        assert_eq!(
            l(normalize(col("t"), &[0.5, 1.0], &[2.0, 4.0])),
            call(Func::Normalize, vec![c("t"), int(2), float(0.5), float(1.0), float(2.0), float(4.0)])
        );
        // Every function lowers by its own name.
        for func in Func::ALL {
            assert_eq!(func_by_name(func.name()), Some(func), "{}", func.name());
        }
        assert_eq!(func_by_name("pow"), Some(Func::Power));
        assert_eq!(func_by_name("character_length"), Some(Func::Length));
        assert_eq!(func_by_name("md5"), None);
    }

    #[test]
    fn nested_expressions_lower_recursively() {
        let e = (col("a") + lit(1i64)) * sqrt(col("b")).alias("ignored");
        assert_eq!(
            l(e),
            bin(BinaryOp::Mul, bin(BinaryOp::Add, c("a"), int(1)), Expr::Call { func: Func::Sqrt, args: vec![c("b")] })
        );
        let named = lower_named("z", &(col("a") * lit(2i64))).unwrap();
        assert_eq!(named.name, "z");
        assert_eq!(named.expr, bin(BinaryOp::Mul, c("a"), int(2)));
    }

    #[test]
    fn unsupported_variants_are_errors() {
        let err = lower(&placeholder("$1")).unwrap_err();
        assert!(matches!(&err, Error::Expr(m) if m.contains("Placeholder") && m.contains("$1")), "{err}");
        let err = lower(&col("s").like(lit("a%"))).unwrap_err().to_string();
        assert!(err.contains("Like"), "{err}");
        // Nested inside a supported node, the inner variant is the one reported.
        let err = lower(&(col("a") + placeholder("$2"))).unwrap_err().to_string();
        assert!(err.contains("Placeholder"), "{err}");
        let err = lower(&cast(lit(1i64), DataType::Decimal128(10, 2)).alias("d")).unwrap_err().to_string();
        assert!(err.contains("cast to Decimal128(10, 2)"), "{err}");
    }
}
