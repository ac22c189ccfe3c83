//! Division rounded toward negative infinity and the remainder that goes with it (Python's
//! `//` and `%`, `tf.math.floordiv` and `tf.math.floormod`), over Arrow columns of one type.
//!
//! `a // b` is `floor(a / b)` and `a % b` takes the sign of `b`, so that `a == (a // b) * b +
//! a % b`: `-7 // 2` is -4 and `-7 % 3` is 2, where truncating division (Rust's and SQL's
//! `/` and `%`, flumen's `Expr` operators) gives -3 and -1. Integers fail as `/` does on a
//! zero divisor or an overflow (`i64::MIN // -1`); floats follow TensorFlow: `floor(a / b)`
//! in the type itself, and `fmod(a, b)` moved by `b` where its sign differs from `b`'s.

use std::sync::Arc;

use arrow::array::{downcast_integer, Array, ArrayRef, AsArray};
use arrow::compute::{binary, try_binary};
use arrow::datatypes::{ArrowNativeTypeOp, ArrowPrimitiveType, DataType, Float32Type, Float64Type};
use arrow::error::ArrowError;

/// `a // b` (or, with `modulo`, `a % b`) row by row, over columns of one numeric type.
pub fn evaluate(a: &ArrayRef, b: &ArrayRef, modulo: bool) -> Result<ArrayRef, ArrowError> {
    if a.data_type() != b.data_type() {
        return Err(ArrowError::InvalidArgumentError(format!(
            "floor division of {} by {}",
            a.data_type(),
            b.data_type()
        )));
    }
    macro_rules! float {
        ($t:ty) => {{
            let (x, y) = (a.as_primitive::<$t>(), b.as_primitive::<$t>());
            let out = match modulo {
                false => binary::<_, _, _, $t>(x, y, |x, y| (x / y).floor())?,
                true => binary::<_, _, _, $t>(x, y, |x, y| {
                    let r = x % y;
                    if r != 0.0 && (r < 0.0) != (y < 0.0) {
                        r + y
                    } else {
                        r
                    }
                })?,
            };
            Ok(Arc::new(out) as ArrayRef)
        }};
    }
    match a.data_type() {
        DataType::Float32 => float!(Float32Type),
        DataType::Float64 => float!(Float64Type),
        _ => integers(a, b, modulo),
    }
}

fn integers(a: &ArrayRef, b: &ArrayRef, modulo: bool) -> Result<ArrayRef, ArrowError> {
    fn op<T: ArrowPrimitiveType>(a: &ArrayRef, b: &ArrayRef, modulo: bool) -> Result<ArrayRef, ArrowError> {
        let zero = T::Native::ZERO;
        let out = try_binary::<_, _, _, T>(a.as_primitive::<T>(), b.as_primitive::<T>(), |x, y| {
            let (q, r) = (x.div_checked(y)?, x.mod_checked(y)?);
            // A remainder whose sign differs from the divisor's moves by it (no overflow:
            // |r| < |y| with opposite signs), and the quotient down by one (it is above the
            // most negative value whenever that happens).
            let moves = !r.is_eq(zero) && (r.is_lt(zero) != y.is_lt(zero));
            Ok(match (modulo, moves) {
                (true, true) => r.add_wrapping(y),
                (true, false) => r,
                (false, true) => q.sub_wrapping(T::Native::ONE),
                (false, false) => q,
            })
        })?;
        Ok(Arc::new(out))
    }
    macro_rules! typed {
        ($t:ty) => {
            op::<$t>(a, b, modulo)
        };
    }
    downcast_integer! {
        a.data_type() => (typed),
        other => Err(ArrowError::InvalidArgumentError(format!("floor division of {other}")))
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Float32Array, Float64Array, Int64Array, Int8Array, UInt8Array};

    use super::*;

    fn ints(a: Vec<i64>, b: Vec<i64>, modulo: bool) -> Result<Vec<Option<i64>>, ArrowError> {
        let (a, b): (ArrayRef, ArrayRef) = (Arc::new(Int64Array::from(a)), Arc::new(Int64Array::from(b)));
        Ok(evaluate(&a, &b, modulo)?.as_primitive::<arrow::datatypes::Int64Type>().iter().collect())
    }

    #[test]
    fn integers_round_toward_negative_infinity() {
        // Python: 7 // 2, -7 // 2, 7 // -2, -7 // -2, 6 // 3 and the same with %.
        let (a, b) = (vec![7, -7, 7, -7, 6], vec![2, 2, -2, -2, 3]);
        assert_eq!(ints(a.clone(), b.clone(), false).unwrap(), [Some(3), Some(-4), Some(-4), Some(3), Some(2)]);
        assert_eq!(ints(a, b, true).unwrap(), [Some(1), Some(1), Some(-1), Some(-1), Some(0)]);
        assert_eq!(ints(vec![-7], vec![3], true).unwrap(), [Some(2)]);
        assert!(ints(vec![1], vec![0], false).is_err(), "division by zero");
        assert!(ints(vec![1], vec![0], true).is_err(), "modulo by zero");
        assert!(ints(vec![i64::MIN], vec![-1], false).is_err(), "overflow");
        // Narrow and unsigned types stay in their type.
        let (a, b): (ArrayRef, ArrayRef) = (Arc::new(Int8Array::from(vec![-128])), Arc::new(Int8Array::from(vec![3])));
        assert_eq!(evaluate(&a, &b, false).unwrap().as_primitive::<arrow::datatypes::Int8Type>().value(0), -43);
        let (a, b): (ArrayRef, ArrayRef) = (Arc::new(UInt8Array::from(vec![250])), Arc::new(UInt8Array::from(vec![7])));
        assert_eq!(evaluate(&a, &b, true).unwrap().as_primitive::<arrow::datatypes::UInt8Type>().value(0), 5);
    }

    #[test]
    fn floats_follow_tensorflow() {
        // Python / TensorFlow: -7.5 // 2.0 is -4.0, -7.5 % 2.0 is 0.5, 7.5 % -2.0 is -0.5.
        let a: ArrayRef = Arc::new(Float64Array::from(vec![-7.5, 7.5, 1.0, 5.0]));
        let b: ArrayRef = Arc::new(Float64Array::from(vec![2.0, -2.0, 0.0, 2.5]));
        let q = evaluate(&a, &b, false).unwrap();
        assert_eq!(q.as_primitive::<Float64Type>().values().to_vec(), [-4.0, -4.0, f64::INFINITY, 2.0]);
        let r = evaluate(&a, &b, true).unwrap();
        let r = r.as_primitive::<Float64Type>();
        assert_eq!(r.values()[..2], [0.5, -0.5]);
        assert!(r.value(2).is_nan());
        assert_eq!(r.value(3), 0.0);
        let a: ArrayRef = Arc::new(Float32Array::from(vec![-7.5f32]));
        let b: ArrayRef = Arc::new(Float32Array::from(vec![2.0f32]));
        assert_eq!(evaluate(&a, &b, true).unwrap().as_primitive::<Float32Type>().value(0), 0.5);
    }
}
