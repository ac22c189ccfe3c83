//! The expression and predicate families only the full generator draws (recipe kinds from
//! [`FIRST_EXPR_FAMILY`] and [`FIRST_PRED_FAMILY`] on): casts of literals, constants that
//! fail, `AND`/`OR` with a fallible operand, math over NaN and infinities, integer overflow
//! near the limits, narrow (int32, float32) fields meeting wider literals, fixed-shape tensor
//! fields, and strings that do or do not parse. Each kind belongs to a named family (the
//! coverage statistics count them).

use arrow::datatypes::DataType;
use flumen::prelude::*;
use flumen::FieldKind;

use super::{pick, ExprRecipe, PredRecipe};

/// The first expression kind of the families (kinds below are the base generator's).
pub const FIRST_EXPR_FAMILY: u8 = 18;
/// One past the last expression kind.
pub const END_EXPR_FAMILY: u8 = 38;
/// The first predicate kind of the families.
pub const FIRST_PRED_FAMILY: u8 = 9;
/// One past the last predicate kind.
pub const END_PRED_FAMILY: u8 = 17;

/// The family of expression kind `kind`.
pub fn expr_family(kind: u8) -> &'static str {
    match kind {
        0..FIRST_EXPR_FAMILY => "base arithmetic",
        18 | 19 | 32 => "cast of a literal",
        20 => "constant that fails",
        21..=23 | 31 | 33 => "math over NaN/inf",
        24 => "int64 overflow",
        25 => "int32 (narrow)",
        26 => "float32 (narrow)",
        27 | 28 => "tensor field",
        29 => "string cast",
        30 => "AND/OR with a fallible operand",
        34 => "IEEE comparison (NaN, -0.0, inf)",
        35 => "least/greatest/clip over NaN",
        36 => "implicit cast that can fail",
        37 => "Python division (truediv, floordiv, floormod)",
        _ => "other",
    }
}

/// The family of predicate kind `kind`.
pub fn pred_family(kind: u8) -> &'static str {
    match kind {
        0..FIRST_PRED_FAMILY => "base predicate",
        9 => "AND/OR with a fallible operand",
        10 => "math over NaN/inf",
        11 => "narrow field vs literal",
        12 => "string cast",
        13 => "tensor field",
        14 => "constant (may fail)",
        15 => "int64 overflow",
        16 => "IEEE comparison (NaN, -0.0, inf)",
        _ => "other",
    }
}

/// The fields of `spec` of one of `dtypes` shaped like the element's batch (so an
/// expression over them keeps the batch shape).
pub fn fields_of(spec: &ElementSpec, dtypes: &[DType]) -> Vec<String> {
    spec.fields
        .iter()
        .filter(|f| dtypes.contains(&f.dtype) && f.shape.len() == spec.batch_dims && f.kind == FieldKind::Dense)
        .map(|f| f.name.clone())
        .collect()
}

/// The fixed-shape tensor fields of `spec` (one known dimension past the batch's) of `dtypes`.
pub fn tensors_of(spec: &ElementSpec, dtypes: &[DType]) -> Vec<String> {
    spec.fields
        .iter()
        .filter(|f| {
            dtypes.contains(&f.dtype)
                && f.shape.len() == spec.batch_dims + 1
                && f.shape.last().is_some_and(|&d| d > 0)
                && f.kind == FieldKind::Dense
        })
        .map(|f| f.name.clone())
        .collect()
}

const INTS: &[DType] = &[DType::Int64, DType::Int32];
const FLOATS: &[DType] = &[DType::Float64, DType::Float32];

/// `f` and-ed or or-ed with the literal that decides the result whatever `f` gives (`k`
/// picks which and on which side): both operands are evaluated, so `f`'s errors remain.
fn decided_by_a_literal(f: Expr, k: i64) -> Expr {
    match k.rem_euclid(4) {
        0 => lit(true).or(f),
        1 => f.or(lit(true)),
        2 => lit(false).and(f),
        _ => f.and(lit(false)),
    }
}

/// A fallible boolean over `spec`: a string field cast to float (bad strings fail), else a
/// division by an int field (zeros fail).
fn fallible_bool(spec: &ElementSpec, i: u8, k: i64) -> Option<Expr> {
    if let Some(s) = pick(&fields_of(spec, &[DType::Utf8]), i) {
        return Some(cast(col(s), DataType::Float64).gt(lit(0.0)));
    }
    let n = pick(&fields_of(spec, &[DType::Int64]), i)?;
    Some((lit(6i64) / col(n)).gt(lit(k)))
}

/// The expression of family kind `r.kind` over `spec`, if it has the fields it needs.
pub fn expression(spec: &ElementSpec, r: &ExprRecipe) -> Option<Expr> {
    let (i, j, k) = (r.i, r.j, r.k);
    let int = |i| pick(&fields_of(spec, INTS), i).map(col);
    let int64 = |i| pick(&fields_of(spec, &[DType::Int64]), i).map(col);
    let float = |i| pick(&fields_of(spec, FLOATS), i).map(col);
    let e = match r.kind {
        18 => match k.rem_euclid(3) {
            0 => cast(lit(k), DataType::Float32),
            1 => cast(lit(k), DataType::Int32),
            _ => cast(lit(k as f64 * 0.75), DataType::Float32),
        },
        19 => cast(lit(k as f64 * 1.5), DataType::Int32),
        20 => match k.rem_euclid(4) {
            0 => cast(lit(1e300), DataType::UInt8),
            1 => cast(lit(-1i64), DataType::UInt8),
            2 => lit(1i64) / lit(0i64),
            _ => cast(lit(f64::NAN), DataType::Int64),
        },
        21 => match k.rem_euclid(3) {
            0 => clip(float(i)?, lit(-2.0), lit(3.5)),
            1 => clip(int(i)?, lit(-1i64), lit(4i64)),
            _ => clip(float(i)?, lit(0.0), lit(f64::INFINITY)),
        },
        22 => match k.rem_euclid(6) {
            0 => sqrt(float(i)?),
            1 => ln(float(i)?),
            2 => exp(float(i)?),
            3 => floor(float(i)?),
            4 => power(float(i)?, lit(k as f64)),
            _ => ceil(float(i)?) + round(float(j)?),
        },
        23 => when(float(i)?.gt(lit(k as f64)), sqrt(float(i)?)).otherwise(ln(float(j)?)).ok()?,
        24 => match k.rem_euclid(5) {
            0 => int64(i)? * lit(i64::MAX / 2),
            1 => int64(i)? + lit(i64::MAX - 2),
            2 => lit(i64::MIN + 1) - int64(i)?,
            3 => abs(int64(i)?) + lit(1i64),
            _ => int64(i)? * int64(j)?,
        },
        25 => {
            let n = pick(&fields_of(spec, &[DType::Int32]), i).map(col)?;
            match k.rem_euclid(4) {
                0 => n + lit(k),
                1 => n.clone() * n,
                2 => n / lit(if k == 0 { 2 } else { k }),
                _ => cast(n, DataType::Int64) * lit(3i64),
            }
        }
        26 => {
            let h = pick(&fields_of(spec, &[DType::Float32]), i).map(col);
            match (k.rem_euclid(4), h) {
                (0, Some(h)) => h * lit(0.5),
                (1, Some(h)) => h + lit(k as f64),
                (2, Some(h)) => cast(h, DataType::Int32),
                _ => cast(pick(&fields_of(spec, &[DType::Float64]), i).map(col)?, DataType::Float32),
            }
        }
        27 => {
            let t = pick(&tensors_of(spec, FLOATS), i).map(col)?;
            match k.rem_euclid(4) {
                0 => t * pick(&fields_of(spec, &[DType::Float32]), j).map(col)?,
                1 => t + lit(1.0),
                2 => clip(t, lit(-1.0), lit(1.0)),
                _ => t * lit(k as f64),
            }
        }
        28 => {
            let t = pick(&tensors_of(spec, FLOATS), i).map(col)?;
            match k.rem_euclid(4) {
                0 => reduce_sum(t),
                1 => reduce_max(t),
                2 => reduce_mean(t),
                _ => reduce_min(t) + lit(1.0),
            }
        }
        29 => {
            let s = pick(&fields_of(spec, &[DType::Utf8]), i).map(col)?;
            match k.rem_euclid(3) {
                0 => cast(s, DataType::Float64),
                1 => length(s),
                _ => cast(s, DataType::Int64) + lit(1i64),
            }
        }
        30 => decided_by_a_literal(fallible_bool(spec, i, k)?, k),
        31 => match k.rem_euclid(3) {
            0 => greatest(vec![float(i)?, lit(0.0)]),
            1 => signum(float(i)?) * trunc(float(j)?),
            _ => atan2(float(i)?, float(j)?),
        },
        32 => match k.rem_euclid(2) {
            0 => cast(lit(k), DataType::Int32) + pick(&fields_of(spec, &[DType::Int32]), i).map(col)?,
            _ => pick(&fields_of(spec, &[DType::Float32]), i).map(col)? - cast(lit(k), DataType::Float32),
        },
        33 => cast(floor(float(i)?), DataType::Int64),
        34 => ieee_comparison(float(i)?, float(j), k),
        35 => {
            let special = lit(special_float(k));
            match k.rem_euclid(4) {
                0 => least(vec![float(i)?, float(j).unwrap_or(special)]),
                1 => greatest(vec![special, float(i)?]),
                2 => clip(float(i)?, special, lit(4.0)),
                _ => clip(float(i)?, lit(-1.0), special),
            }
        }
        37 => match k.rem_euclid(4) {
            0 => floordiv(int(i)?, int(j)?),
            1 => floormod(int(i)?, lit(k)),
            2 => floormod(float(i)?, lit(k as f64 - 0.5)),
            _ => truediv(int(i)?, int(j)?),
        },
        // A value cast to a narrower type than its own to meet another operand: literal-like
        // (`cast(... as int64)` meeting an int32 field) or a uint64-int64 comparison.
        _ => {
            let n = pick(&fields_of(spec, &[DType::Int32]), i).map(col)?;
            let wide = cast(lit(k as f64 * 1e9), DataType::Int64);
            match k.rem_euclid(3) {
                0 => when(n.clone().gt(lit(0i64)), n).otherwise(wide).ok()?,
                1 => n.eq(wide).and(lit(true)),
                _ => least(vec![n, wide]),
            }
        }
    };
    Some(e)
}

/// The special float of `k`: NaN, -0.0, 0.0, +inf, -inf, 1.5.
fn special_float(k: i64) -> f64 {
    [f64::NAN, -0.0, 0.0, f64::INFINITY, f64::NEG_INFINITY, 1.5][k.rem_euclid(6) as usize]
}

/// A comparison picked by `k` between `x` and `y` (a float field), or a special float
/// (NaN, either zero, an infinity) where there is no `y`; negated for some `k` (a negated
/// comparison is not its complement when NaN is involved).
fn ieee_comparison(x: Expr, y: Option<Expr>, k: i64) -> Expr {
    let y = y.filter(|_| k % 2 == 0).unwrap_or_else(|| lit(special_float(k)));
    let e = match k.rem_euclid(6) {
        0 => x.eq(y),
        1 => x.not_eq(y),
        2 => x.lt(y),
        3 => x.lt_eq(y),
        4 => x.gt(y),
        _ => x.gt_eq(y),
    };
    if k < 0 {
        !e
    } else {
        e
    }
}

/// The predicate of family kind `r.kind` over `spec` (unbatched), if it has the fields.
pub fn predicate(spec: &ElementSpec, r: &PredRecipe) -> Option<Expr> {
    if spec.batch_dims > 0 {
        return None;
    }
    let (i, j, k) = (r.i, r.j, r.k);
    let float = |i| pick(&fields_of(spec, FLOATS), i).map(col);
    let e = match r.kind {
        9 => decided_by_a_literal(fallible_bool(spec, i, k)?, k),
        10 => match k.rem_euclid(3) {
            0 => float(i)?.gt(lit(k as f64 * 0.5)),
            1 => sqrt(float(i)?).lt(lit(2.0)),
            _ => float(i)?.not_eq(float(i)?),
        },
        11 => match (pick(&fields_of(spec, &[DType::Int32]), i), pick(&fields_of(spec, &[DType::Float32]), j)) {
            (Some(n), _) if k % 2 == 0 => col(n).gt(lit(k)),
            (_, Some(h)) => col(h).lt(lit(0.5)),
            (Some(n), None) => col(n).lt_eq(lit(k)),
            (None, None) => return None,
        },
        12 => {
            let s = pick(&fields_of(spec, &[DType::Utf8]), i).map(col)?;
            match k.rem_euclid(2) {
                0 => length(s).gt(lit(1i64)),
                _ => (cast(s, DataType::Int64) % lit(2i64)).eq(lit(0i64)),
            }
        }
        13 => reduce_sum(pick(&tensors_of(spec, FLOATS), i).map(col)?).gt(lit(k as f64)),
        14 => match k.rem_euclid(3) {
            0 => lit(k > 0),
            1 => cast(lit(1e300), DataType::UInt8).gt(lit(0i64)),
            _ => cast(lit(k), DataType::Float32).lt(lit(2.0)),
        },
        15 => (pick(&fields_of(spec, &[DType::Int64]), i).map(col)? * lit(4i64)).gt(lit(k)),
        _ => ieee_comparison(float(i)?, float(j), k),
    };
    Some(e)
}
