//! Float comparisons as IEEE 754 defines them, over Arrow arrays: the meaning of `==`, `!=`,
//! `<`, `<=`, `>`, `>=`, `least` and `greatest` on every evaluation path.
//!
//! Arrow's comparison kernels order floats totally (`-0.0 < 0.0`, `NaN` equal to itself and
//! above `+inf`, a negative `NaN` below `-inf`), which suits sorting but not arithmetic:
//! NumPy and TensorFlow say `NaN != NaN`, `x < NaN` is false, `-0.0 == 0.0`, and
//! `tf.minimum(NaN, 0.0)` is `NaN`. A port of a tf.data filter such as `x != x` (keep the
//! `NaN`s) must mean the same here, so float operands never reach Arrow's kernels; other
//! types (integers, strings, bools) are totally ordered anyway and do.

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Datum, PrimitiveArray};
use arrow::buffer::{BooleanBuffer, NullBuffer};
use arrow::compute::kernels::cmp;
use arrow::datatypes::{ArrowPrimitiveType, DataType, Float16Type, Float32Type, Float64Type};
use arrow::error::ArrowError;
use flumen_ir::BinaryOp;

/// `l op r` for a comparison `op`, row by row (a scalar datum stands for every row); null
/// where either side is null.
pub fn compare(op: BinaryOp, l: &dyn Datum, r: &dyn Datum) -> Result<BooleanArray, ArrowError> {
    let (left, _) = l.get();
    match left.data_type() {
        DataType::Float64 => floats::<Float64Type>(op, l, r),
        DataType::Float32 => floats::<Float32Type>(op, l, r),
        DataType::Float16 => floats::<Float16Type>(op, l, r),
        _ => match op {
            BinaryOp::Eq => cmp::eq(l, r),
            BinaryOp::NotEq => cmp::neq(l, r),
            BinaryOp::Lt => cmp::lt(l, r),
            BinaryOp::LtEq => cmp::lt_eq(l, r),
            BinaryOp::Gt => cmp::gt(l, r),
            BinaryOp::GtEq => cmp::gt_eq(l, r),
            other => Err(ArrowError::InvalidArgumentError(format!("{other:?} is not a comparison"))),
        },
    }
}

/// Where `least` (or, with `least` false, `greatest`) of `a` and `acc` is `a`'s value: where
/// `a` is `NaN` and `acc` is not (`NaN` propagates, as in `tf.minimum`), or `a` is strictly
/// smaller (larger), so that on ties and on `NaN` in `acc` the earlier argument stays. Null
/// where either is null; the caller decides what a null means.
pub fn prefer(a: &ArrayRef, acc: &ArrayRef, least: bool) -> Result<BooleanArray, ArrowError> {
    let op = if least { BinaryOp::Lt } else { BinaryOp::Gt };
    let better = compare(op, a, acc)?;
    let (Some(a_nan), Some(acc_nan)) = (nans(a), nans(acc)) else {
        return Ok(better);
    };
    let takes_nan = &a_nan & &!&acc_nan;
    Ok(BooleanArray::new(better.values() | &takes_nan, better.nulls().cloned()))
}

/// Where a float array holds `NaN` (`None` for other types, which have none).
fn nans(array: &ArrayRef) -> Option<BooleanBuffer> {
    fn of<T: ArrowPrimitiveType>(a: &PrimitiveArray<T>) -> BooleanBuffer
    where
        T::Native: PartialOrd,
    {
        #[allow(clippy::eq_op)] // `v != v` is the NaN test of any float width.
        BooleanBuffer::collect_bool(a.len(), |i| a.values()[i] != a.values()[i])
    }
    match array.data_type() {
        DataType::Float64 => Some(of(array.as_primitive::<Float64Type>())),
        DataType::Float32 => Some(of(array.as_primitive::<Float32Type>())),
        DataType::Float16 => Some(of(array.as_primitive::<Float16Type>())),
        _ => None,
    }
}

fn floats<T: ArrowPrimitiveType>(op: BinaryOp, l: &dyn Datum, r: &dyn Datum) -> Result<BooleanArray, ArrowError>
where
    T::Native: PartialOrd,
{
    match op {
        BinaryOp::Eq => zip_with::<T>(l, r, |x, y| x == y),
        BinaryOp::NotEq => zip_with::<T>(l, r, |x, y| x != y),
        BinaryOp::Lt => zip_with::<T>(l, r, |x, y| x < y),
        BinaryOp::LtEq => zip_with::<T>(l, r, |x, y| x <= y),
        BinaryOp::Gt => zip_with::<T>(l, r, |x, y| x > y),
        BinaryOp::GtEq => zip_with::<T>(l, r, |x, y| x >= y),
        other => Err(ArrowError::InvalidArgumentError(format!("{other:?} is not a comparison"))),
    }
}

/// `f` over the rows of two float datums of one type (a scalar repeated), nulls outside the
/// loop.
fn zip_with<T: ArrowPrimitiveType>(
    l: &dyn Datum,
    r: &dyn Datum,
    f: impl Fn(T::Native, T::Native) -> bool,
) -> Result<BooleanArray, ArrowError> {
    let ((la, l_scalar), (ra, r_scalar)) = (l.get(), r.get());
    if la.data_type() != ra.data_type() {
        return Err(ArrowError::InvalidArgumentError(format!(
            "cannot compare {} with {}",
            la.data_type(),
            ra.data_type()
        )));
    }
    let (la, ra) = (la.as_primitive::<T>(), ra.as_primitive::<T>());
    let len = match (l_scalar, r_scalar) {
        (true, false) => ra.len(),
        (false, true) | (true, true) => la.len(),
        (false, false) if la.len() == ra.len() => la.len(),
        (false, false) => {
            return Err(ArrowError::InvalidArgumentError(format!(
                "cannot compare arrays of {} and {} rows",
                la.len(),
                ra.len()
            )))
        }
    };
    let null_of = |a: &PrimitiveArray<T>, scalar: bool| match scalar {
        true if a.is_null(0) => Some(NullBuffer::new_null(len)),
        true => None,
        false => a.nulls().cloned(),
    };
    let (lv, rv) = (la.values(), ra.values());
    let values = match (l_scalar, r_scalar) {
        (false, false) => BooleanBuffer::collect_bool(len, |i| f(lv[i], rv[i])),
        (true, false) => BooleanBuffer::collect_bool(len, |i| f(lv[0], rv[i])),
        (false, true) => BooleanBuffer::collect_bool(len, |i| f(lv[i], rv[0])),
        (true, true) => BooleanBuffer::collect_bool(len, |_| f(lv[0], rv[0])),
    };
    let nulls = NullBuffer::union(null_of(la, l_scalar).as_ref(), null_of(ra, r_scalar).as_ref());
    Ok(BooleanArray::new(values, nulls))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Float32Array, Float64Array, Int64Array, Scalar};

    use super::*;

    fn rows(a: &BooleanArray) -> Vec<Option<bool>> {
        a.iter().collect()
    }

    #[test]
    fn nan_is_unordered_and_zeros_are_equal() {
        let x = Float64Array::from(vec![f64::NAN, -0.0, 1.0, f64::NAN]);
        let y = Float64Array::from(vec![f64::NAN, 0.0, f64::NAN, 1.0]);
        let t = |op| rows(&compare(op, &x, &y).unwrap());
        assert_eq!(t(BinaryOp::Eq), [Some(false), Some(true), Some(false), Some(false)]);
        assert_eq!(t(BinaryOp::NotEq), [Some(true), Some(false), Some(true), Some(true)]);
        assert_eq!(t(BinaryOp::Lt), [Some(false), Some(false), Some(false), Some(false)]);
        assert_eq!(t(BinaryOp::LtEq), [Some(false), Some(true), Some(false), Some(false)]);
        assert_eq!(t(BinaryOp::Gt), [Some(false), Some(false), Some(false), Some(false)]);
        assert_eq!(t(BinaryOp::GtEq), [Some(false), Some(true), Some(false), Some(false)]);
        // A NaN with the sign bit set (x86's 0/0) is as unordered as any other.
        let neg_nan = Float32Array::from(vec![-f32::NAN]);
        let low = Scalar::new(Float32Array::from(vec![f32::NEG_INFINITY]));
        assert_eq!(rows(&compare(BinaryOp::Lt, &neg_nan, &low).unwrap()), [Some(false)]);
        assert_eq!(rows(&compare(BinaryOp::GtEq, &neg_nan, &low).unwrap()), [Some(false)]);
    }

    #[test]
    fn scalars_and_nulls() {
        let x = Float64Array::from(vec![Some(1.0), None, Some(3.0)]);
        let two = Scalar::new(Float64Array::from(vec![2.0]));
        assert_eq!(rows(&compare(BinaryOp::Lt, &x, &two).unwrap()), [Some(true), None, Some(false)]);
        assert_eq!(rows(&compare(BinaryOp::Lt, &two, &x).unwrap()), [Some(false), None, Some(true)]);
        let null = Scalar::new(Float64Array::from(vec![None::<f64>]));
        assert_eq!(rows(&compare(BinaryOp::Eq, &x, &null).unwrap()), [None, None, None]);
        // Integers keep Arrow's kernels.
        let i = Int64Array::from(vec![1, 2]);
        assert_eq!(
            rows(&compare(BinaryOp::GtEq, &i, &Int64Array::from(vec![2, 2])).unwrap()),
            [Some(false), Some(true)]
        );
    }

    #[test]
    fn least_and_greatest_propagate_nan_and_keep_the_earlier_on_ties() {
        let a: ArrayRef = Arc::new(Float64Array::from(vec![f64::NAN, 0.0, 1.0, 5.0, -0.0]));
        let acc: ArrayRef = Arc::new(Float64Array::from(vec![0.0, f64::NAN, 2.0, 2.0, 0.0]));
        assert_eq!(
            rows(&prefer(&a, &acc, true).unwrap()),
            [Some(true), Some(false), Some(true), Some(false), Some(false)]
        );
        assert_eq!(
            rows(&prefer(&a, &acc, false).unwrap()),
            [Some(true), Some(false), Some(false), Some(true), Some(false)]
        );
    }
}
