//! The tensor functions of the Arrow path: `one_hot`, the reductions over chosen dims and
//! `normalize` ([`Func::is_tensor_function`]), which [`crate::eval::with_reductions`] computes
//! per element over its whole tensor before the expression around them, and the elementwise
//! `hash_bucket`.
//!
//! A chunk's tensors arrive flat ([`TensorArg`]: the rows' values one after the other, each
//! row's in row-major order), and each function is a loop over those value slices.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, FixedSizeListArray, Float32Array, Float64Array, Int64Array};
use arrow::buffer::{BooleanBuffer, NullBuffer};
use arrow::compute::cast_with_options;
use arrow::compute::CastOptions;
use arrow::datatypes::{DataType, Field, Float32Type, Float64Type, Int64Type, UInt64Type};
use arrow::record_batch::RecordBatch;
use arrow::util::display::FormatOptions;
use flumen_ir::expr::{int_literal, number_literal, reduced_axes};
use flumen_ir::{DType, Error, Expr, Func, Result};

use crate::eval::{at, reduce_whole, tensor_arg};
use crate::fingerprint64::fingerprint64;

/// A tensor function's argument over a chunk: `rows` tensors of `shape`, flat.
#[derive(Debug)]
pub(crate) struct TensorArg {
    /// `rows × width` values, row after row.
    pub values: ArrayRef,
    /// The dims of each row's tensor (`[]` for a scalar per element).
    pub shape: Vec<usize>,
    /// The number of rows (elements).
    pub rows: usize,
    /// Which rows are null tensors, if any is.
    pub nulls: Option<NullBuffer>,
}

impl TensorArg {
    /// The number of values of one row's tensor.
    pub fn width(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether a row that is not null holds a null value.
    pub fn null_values_in_valid_rows(&self) -> bool {
        let Some(values) = self.values.nulls().filter(|n| n.null_count() > 0) else {
            return false;
        };
        let width = self.width();
        values
            .iter()
            .enumerate()
            .any(|(i, valid)| !valid && self.nulls.as_ref().is_none_or(|rows| rows.is_valid(i / width)))
    }

    /// The rows that are null tensors or hold a null value.
    fn rows_with_nulls(&self) -> Option<NullBuffer> {
        let values = self.values.nulls().filter(|n| n.null_count() > 0);
        let Some(values) = values else {
            return self.nulls.clone();
        };
        let width = self.width();
        let valid = BooleanBuffer::collect_bool(self.rows, |r| {
            self.nulls.as_ref().is_none_or(|n| n.is_valid(r))
                && (r * width..(r + 1) * width).all(|i| values.is_valid(i))
        });
        Some(NullBuffer::new(valid))
    }
}

/// The value of tensor function `func` (`expr`) over `batch`, its arguments already free of
/// reductions and tensor functions: a column of fixed-size lists of the shape the function
/// gives, or a plain column when that shape is `[]`.
pub(crate) fn evaluate(func: Func, args: &[Expr], batch: &RecordBatch, expr: &Expr) -> Result<ArrayRef> {
    let Some((arg, rest)) = args.split_first() else {
        return Err(at(format!("{} needs arguments", func.name()), expr));
    };
    let arg = tensor_arg(arg, batch)?;
    match func {
        Func::OneHot => {
            let depth = match rest {
                [d] => int_literal(d).filter(|d| *d > 0).and_then(|d| usize::try_from(d).ok()),
                _ => None,
            };
            let depth = depth.ok_or_else(|| at("one_hot takes indices and a positive integer literal depth", expr))?;
            one_hot(&arg, depth).map_err(|e| at(e, expr))
        }
        Func::Normalize => {
            let params = rest.split_first().and_then(|(n, values)| {
                let n = usize::try_from(int_literal(n)?).ok().filter(|n| *n > 0 && values.len() == 2 * n)?;
                let values = values.iter().map(number_literal).collect::<Option<Vec<f64>>>()?;
                Some((values[..n].to_vec(), values[n..].to_vec()))
            });
            let (mean, std) = params.ok_or_else(|| {
                at("normalize takes a tensor, a channel count n, n mean and n std number literals", expr)
            })?;
            normalize(&arg, &mean, &std).map_err(|e| at(e, expr))
        }
        _ => {
            let whole =
                func.whole_reduction().ok_or_else(|| at(format!("{} is no tensor function", func.name()), expr))?;
            let axes = reduced_axes(rest, arg.shape.len()).map_err(|e| at(format!("{}: {e}", func.name()), expr))?;
            if axes.len() == arg.shape.len() {
                return reduce_whole(whole, &arg).map_err(|e| at(e, expr));
            }
            reduce_axes(func, &arg, &axes).map_err(|e| at(e, expr))
        }
    }
}

/// `values` (`rows × product(shape)` of them) as fixed-size lists of `shape`, the outermost
/// level null where `nulls` says; `values` itself when `shape` is `[]`.
fn fixed_tensor(values: ArrayRef, rows: usize, shape: &[usize], nulls: Option<NullBuffer>) -> Result<ArrayRef> {
    if shape.is_empty() {
        return Ok(values);
    }
    let mut array = values;
    for k in (0..shape.len()).rev() {
        let size = i32::try_from(shape[k]).map_err(|_| Error::Expr(format!("dim {} is too large", shape[k])))?;
        let len = shape[..k].iter().product::<usize>() * rows;
        let item = Arc::new(Field::new("item", array.data_type().clone(), true));
        let level_nulls = if k == 0 { nulls.clone() } else { None };
        array = Arc::new(FixedSizeListArray::try_new_with_length(item, size, array, level_nulls, len)?);
    }
    Ok(array)
}

/// A zeroed buffer of `len` values, or an error when it cannot be had.
fn zeroed<T: Clone + Default>(len: Option<usize>) -> Result<Vec<T>, String> {
    let len = len.ok_or("the result is too large")?;
    let mut out = Vec::new();
    out.try_reserve_exact(len).map_err(|e| format!("the result of {len} values does not fit in memory: {e}"))?;
    out.resize(len, T::default());
    Ok(out)
}

fn strict() -> CastOptions<'static> {
    CastOptions { safe: false, format_options: FormatOptions::new() }
}

/// tf.one_hot: a `depth`-long float32 row per index, 1.0 at the index and 0.0 elsewhere (all
/// zeros for an index outside `[0, depth)`); a row whose indices include a null is null.
fn one_hot(arg: &TensorArg, depth: usize) -> Result<ArrayRef, String> {
    let values = &arg.values;
    // Indices as i64; a uint64 index beyond i64 is out of range like a negative one.
    let indices: Vec<i64> = match values.data_type() {
        DataType::UInt64 => {
            values.as_primitive::<UInt64Type>().values().iter().map(|v| i64::try_from(*v).unwrap_or(-1)).collect()
        }
        t if t.is_integer() => {
            let wide = cast_with_options(values, &DataType::Int64, &strict()).map_err(|e| e.to_string())?;
            wide.as_primitive::<Int64Type>().values().to_vec()
        }
        other => return Err(format!("one_hot takes integer indices, got {other}")),
    };
    let mut out: Vec<f32> = zeroed(indices.len().checked_mul(depth))?;
    for (row, index) in out.chunks_exact_mut(depth).zip(&indices) {
        if let Ok(i) = usize::try_from(*index) {
            if let Some(slot) = row.get_mut(i) {
                *slot = 1.0;
            }
        }
    }
    let mut shape = arg.shape.clone();
    shape.push(depth);
    let flat = Arc::new(Float32Array::from(out)) as ArrayRef;
    fixed_tensor(flat, arg.rows, &shape, arg.rows_with_nulls()).map_err(|e| e.to_string())
}

/// For each position of a row-major tensor of `shape`, the position its value goes to in the
/// tensor of the dims not in `axes` (sorted); and that tensor's number of values.
fn reduction_targets(shape: &[usize], axes: &[usize]) -> (Vec<usize>, usize) {
    // The stride of each dim in the output (0 for a reduced dim).
    let mut strides = vec![0; shape.len()];
    let mut out_width = 1;
    for k in (0..shape.len()).rev() {
        if !axes.contains(&k) {
            strides[k] = out_width;
            out_width *= shape[k];
        }
    }
    let width: usize = shape.iter().product();
    let mut targets = Vec::with_capacity(width);
    let mut index = vec![0usize; shape.len()];
    let mut target = 0;
    for _ in 0..width {
        targets.push(target);
        // Advance the multi-index like an odometer, the last dim fastest.
        for k in (0..shape.len()).rev() {
            index[k] += 1;
            target += strides[k];
            if index[k] < shape[k] {
                break;
            }
            target -= strides[k] * index[k];
            index[k] = 0;
        }
    }
    (targets, out_width)
}

/// tf.reduce_sum (mean, max, min) over `axes` (sorted, not every dim) of each row's tensor:
/// rows of the remaining dims. Floats and means are computed in float64 (float32 is rounded
/// back), integers in int64 with overflow checked, as the whole-tensor reductions are. A null
/// tensor gives a null one; a null value in another is an error.
fn reduce_axes(func: Func, arg: &TensorArg, axes: &[usize]) -> Result<ArrayRef> {
    let name = func.name();
    let values = &arg.values;
    if !values.data_type().is_numeric() {
        return Err(Error::Expr(format!("{name} takes numbers, got {}", values.data_type())));
    }
    if arg.null_values_in_valid_rows() {
        return Err(Error::Expr(format!("{name} over null values")));
    }
    let (targets, out_width) = reduction_targets(&arg.shape, axes);
    let width = targets.len();
    let count = axes.iter().map(|k| arg.shape[*k]).product::<usize>();
    let skip = |r: usize| arg.nulls.as_ref().is_some_and(|n| n.is_null(r));
    let out_len = arg.rows.checked_mul(out_width);
    let out: ArrayRef = if values.data_type().is_floating() || func == Func::ReduceMeanAxes {
        let wide = cast_with_options(values, &DataType::Float64, &strict())?;
        let wide = wide.as_primitive::<Float64Type>().values();
        let init = match func {
            Func::ReduceMaxAxes => f64::NEG_INFINITY,
            Func::ReduceMinAxes => f64::INFINITY,
            _ => 0.0,
        };
        let mut out: Vec<f64> = zeroed(out_len).map_err(Error::Expr)?;
        out.fill(init);
        for (r, (row, acc)) in wide.chunks_exact(width.max(1)).zip(out.chunks_exact_mut(out_width.max(1))).enumerate() {
            if skip(r) {
                acc.fill(0.0);
                continue;
            }
            match func {
                Func::ReduceMaxAxes => {
                    for (v, t) in row.iter().zip(&targets) {
                        let m = &mut acc[*t];
                        *m = if v.is_nan() || m.is_nan() { f64::NAN } else { m.max(*v) };
                    }
                }
                Func::ReduceMinAxes => {
                    for (v, t) in row.iter().zip(&targets) {
                        let m = &mut acc[*t];
                        *m = if v.is_nan() || m.is_nan() { f64::NAN } else { m.min(*v) };
                    }
                }
                _ => {
                    for (v, t) in row.iter().zip(&targets) {
                        acc[*t] += v;
                    }
                }
            }
        }
        if func == Func::ReduceMeanAxes {
            let n = count as f64;
            out.iter_mut().for_each(|v| *v /= n);
        }
        let out = Arc::new(Float64Array::from(out)) as ArrayRef;
        if values.data_type() == &DataType::Float32 {
            cast_with_options(&out, &DataType::Float32, &strict())?
        } else {
            out
        }
    } else {
        let wide = cast_with_options(values, &DataType::Int64, &strict())?;
        let wide = wide.as_primitive::<Int64Type>().values();
        // Over no values, max and min are the type's lowest and highest value, as in tf.
        let dtype = DType::from_arrow(values.data_type())?;
        let (lowest, highest) = dtype.int_range().map_or((i64::MIN, i64::MAX), |(lo, hi)| {
            (lo.clamp(i64::MIN.into(), i64::MAX.into()) as i64, hi.clamp(i64::MIN.into(), i64::MAX.into()) as i64)
        });
        let init = match func {
            Func::ReduceMaxAxes => lowest,
            Func::ReduceMinAxes => highest,
            _ => 0,
        };
        let mut out: Vec<i64> = zeroed(out_len).map_err(Error::Expr)?;
        out.fill(init);
        for (r, (row, acc)) in wide.chunks_exact(width.max(1)).zip(out.chunks_exact_mut(out_width.max(1))).enumerate() {
            if skip(r) {
                acc.fill(0);
                continue;
            }
            match func {
                Func::ReduceMaxAxes => row.iter().zip(&targets).for_each(|(v, t)| acc[*t] = acc[*t].max(*v)),
                Func::ReduceMinAxes => row.iter().zip(&targets).for_each(|(v, t)| acc[*t] = acc[*t].min(*v)),
                _ => {
                    for (v, t) in row.iter().zip(&targets) {
                        acc[*t] = acc[*t]
                            .checked_add(*v)
                            .ok_or_else(|| Error::Expr(format!("{name} overflows at row {r}")))?;
                    }
                }
            }
        }
        let out = Arc::new(Int64Array::from(out)) as ArrayRef;
        cast_with_options(&out, values.data_type(), &strict())?
    };
    let kept: Vec<usize> = (0..arg.shape.len()).filter(|k| !axes.contains(k)).map(|k| arg.shape[k]).collect();
    fixed_tensor(out, arg.rows, &kept, arg.nulls.clone())
}

/// `(x - mean[c]) / std[c]` for each value `x` of channel `c` (its index in the last dim), in
/// the values' own float type, as TensorFlow computes the broadcast expression.
fn normalize(arg: &TensorArg, mean: &[f64], std: &[f64]) -> Result<ArrayRef, String> {
    let channels = arg.shape.last().copied().unwrap_or(1);
    if channels != mean.len() || channels != std.len() {
        return Err(format!(
            "normalize has {} means and {} standard deviations for {channels} channel(s) (shape {:?})",
            mean.len(),
            std.len(),
            arg.shape
        ));
    }
    let values = &arg.values;
    let out: ArrayRef = match values.data_type() {
        DataType::Float32 => {
            let (mean, std): (Vec<f32>, Vec<f32>) =
                (mean.iter().map(|m| *m as f32).collect(), std.iter().map(|s| *s as f32).collect());
            let x = values.as_primitive::<Float32Type>();
            Arc::new(Float32Array::new(per_channel(x.values(), &mean, &std).into(), x.nulls().cloned()))
        }
        DataType::Float64 => {
            let x = values.as_primitive::<Float64Type>();
            Arc::new(Float64Array::new(per_channel(x.values(), mean, std).into(), x.nulls().cloned()))
        }
        other => return Err(format!("normalize takes a float tensor, got {other}")),
    };
    fixed_tensor(out, arg.rows, &arg.shape, arg.nulls.clone()).map_err(|e| e.to_string())
}

/// `(x - mean[c]) / std[c]` over `values` whose channel is their index modulo the channel
/// count.
fn per_channel<T>(values: &[T], mean: &[T], std: &[T]) -> Vec<T>
where
    T: Copy + std::ops::Sub<Output = T> + std::ops::Div<Output = T>,
{
    let mut out = Vec::with_capacity(values.len());
    for group in values.chunks_exact(mean.len()) {
        out.extend(group.iter().zip(mean).zip(std).map(|((x, m), s)| (*x - *m) / *s));
    }
    out
}

/// tf.strings.to_hash_bucket_fast: `Fingerprint64(s) % num_buckets` for each string of
/// `strings` (Utf8, LargeUtf8 or Utf8View), null for null.
pub(crate) fn hash_buckets(strings: &ArrayRef, num_buckets: u64) -> Result<ArrayRef, String> {
    if num_buckets == 0 {
        return Err("hash_bucket needs at least one bucket".into());
    }
    let bucket = |s: &str| (fingerprint64(s.as_bytes()) % num_buckets) as i64;
    let values: Vec<i64> = match strings.data_type() {
        DataType::Utf8 => {
            let a = strings.as_string::<i32>();
            (0..a.len()).map(|i| bucket(a.value(i))).collect()
        }
        DataType::LargeUtf8 => {
            let a = strings.as_string::<i64>();
            (0..a.len()).map(|i| bucket(a.value(i))).collect()
        }
        DataType::Utf8View => {
            let a = strings.as_string_view();
            (0..a.len()).map(|i| bucket(a.value(i))).collect()
        }
        other => return Err(format!("hash_bucket takes strings, got {other}")),
    };
    Ok(Arc::new(Int64Array::new(values.into(), strings.nulls().cloned())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::{evaluate, evaluate_map, evaluate_predicate};
    use crate::kernel::{FusedMap, Kernel};
    use arrow::array::{BooleanArray, Int32Array, LargeStringArray, StringArray, UInt64Array};
    use flumen_ir::build::{c, call, float, int};
    use flumen_ir::{BinaryOp, ElementSpec, FieldSpec, NamedExpr, Scalar};

    fn axes(func: Func, arg: Expr, axes: &[i64]) -> Expr {
        call(func, std::iter::once(arg).chain(axes.iter().map(|a| int(*a))).collect())
    }

    fn normalize_call(arg: Expr, mean: &[f64], std: &[f64]) -> Expr {
        let values = mean.iter().chain(std).map(|v| float(*v));
        call(Func::Normalize, [arg, int(mean.len() as i64)].into_iter().chain(values).collect())
    }

    /// `rows` tensors of `dims` over the flat `values`, built level by level.
    fn nest(values: ArrayRef, rows: usize, dims: &[i32]) -> ArrayRef {
        let mut array = values;
        for k in (0..dims.len()).rev() {
            let len = rows * dims[..k].iter().product::<i32>() as usize;
            let item = Arc::new(Field::new("item", array.data_type().clone(), true));
            array = Arc::new(FixedSizeListArray::try_new_with_length(item, dims[k], array, None, len).unwrap());
        }
        array
    }

    fn chunk(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
        RecordBatch::try_from_iter(columns).unwrap()
    }

    /// `expr` as the only output of a map over `batch`, typed by the plan's rule; checked to
    /// give the same through the Arrow evaluation and the fused map (which hands these
    /// functions back to Arrow).
    fn output(expr: &Expr, batch: &RecordBatch) -> ArrayRef {
        let spec = ElementSpec::from_arrow_schema(&batch.schema()).unwrap();
        let (dtype, shape) = expr.value_type(&spec).unwrap_or_else(|e| panic!("{expr}: {e}"));
        let schema = ElementSpec::new(vec![FieldSpec::tensor("out", dtype, shape)]).unwrap().arrow_schema();
        let outputs = vec![NamedExpr { name: "out".into(), expr: expr.clone() }];
        let out = evaluate_map(&outputs, false, batch, &schema).unwrap_or_else(|e| panic!("{expr}: {e}"));
        let fused = FusedMap::new(outputs, false, schema.clone()).evaluate(batch).unwrap();
        assert_eq!(fused, out, "{expr}: fused and Arrow evaluations differ");
        out.column(0).clone()
    }

    fn output_err(expr: &Expr, batch: &RecordBatch) -> String {
        let spec = ElementSpec::from_arrow_schema(&batch.schema()).unwrap();
        let (dtype, shape) = expr.value_type(&spec).unwrap();
        let schema = ElementSpec::new(vec![FieldSpec::tensor("out", dtype, shape)]).unwrap().arrow_schema();
        let outputs = vec![NamedExpr { name: "out".into(), expr: expr.clone() }];
        evaluate_map(&outputs, false, batch, &schema).unwrap_err().to_string()
    }

    /// The leaf values of a tensor column, and its dims below the rows.
    fn leaves(array: &ArrayRef) -> (ArrayRef, Vec<i32>) {
        let mut dims = vec![];
        let mut values = array.clone();
        while let DataType::FixedSizeList(_, n) = values.data_type() {
            dims.push(*n);
            let list = values.as_fixed_size_list().clone();
            values = list.values().slice(0, list.len() * *n as usize);
        }
        (values, dims)
    }

    fn f32s(array: &ArrayRef) -> (Vec<f32>, Vec<i32>) {
        let (values, dims) = leaves(array);
        (values.as_primitive::<Float32Type>().values().to_vec(), dims)
    }

    fn f64s(array: &ArrayRef) -> (Vec<f64>, Vec<i32>) {
        let (values, dims) = leaves(array);
        (values.as_primitive::<Float64Type>().values().to_vec(), dims)
    }

    fn i64s(array: &ArrayRef) -> (Vec<i64>, Vec<i32>) {
        let (values, dims) = leaves(array);
        (values.as_primitive::<Int64Type>().values().to_vec(), dims)
    }

    /// Equal values, NaN equal to NaN.
    fn same(got: &[f64], want: &[f64]) -> bool {
        got.len() == want.len() && got.iter().zip(want).all(|(g, w)| g == w || g.is_nan() && w.is_nan())
    }

    #[test]
    fn one_hot_follows_tensorflow() {
        // tf.one_hot([0, 2, -1, 3, 1], 3) in TensorFlow 2.21, plus a null index.
        let k = Arc::new(Int64Array::from(vec![Some(0), Some(2), Some(-1), Some(3), Some(1), None])) as ArrayRef;
        let out = output(&call(Func::OneHot, vec![c("k"), int(3)]), &chunk(vec![("k", k)]));
        let (values, dims) = f32s(&out);
        assert_eq!(dims, [3]);
        let want = [[1., 0., 0.], [0., 0., 1.], [0., 0., 0.], [0., 0., 0.], [0., 1., 0.]];
        assert_eq!(values[..15], want.concat()[..]);
        assert_eq!((0..6).map(|r| out.is_null(r)).collect::<Vec<_>>(), [false, false, false, false, false, true]);
        // tf.one_hot(tf.constant([[0, 5], [-2, 1]], tf.int32), 4): two elements of shape [2].
        let idx = nest(Arc::new(Int32Array::from(vec![0, 5, -2, 1])), 2, &[2]);
        let out = output(&call(Func::OneHot, vec![c("idx"), int(4)]), &chunk(vec![("idx", idx)]));
        let (values, dims) = f32s(&out);
        assert_eq!(dims, [2, 4]);
        let want = [[1., 0., 0., 0.], [0., 0., 0., 0.], [0., 0., 0., 0.], [0., 1., 0., 0.]];
        assert_eq!(values, want.concat());
        assert_eq!(out.null_count(), 0);
        // A uint64 index too large for int64 is out of range, not an error.
        let big = Arc::new(UInt64Array::from(vec![u64::MAX, 1])) as ArrayRef;
        let (values, _) = f32s(&output(&call(Func::OneHot, vec![c("b"), int(2)]), &chunk(vec![("b", big)])));
        assert_eq!(values, [0., 0., 0., 1.]);
    }

    /// `tf.strings.to_hash_bucket_fast(s, 1000)` in TensorFlow 2.21 for a few strings (the
    /// first n bytes of the text in `fingerprint64`'s tests and two others).
    fn hash_reference() -> Vec<(String, i64)> {
        let text = "The quick brown fox jumps over the lazy dog; ".repeat(4);
        let mut out: Vec<(String, i64)> = [(0, 263), (1, 306), (17, 765), (33, 638), (64, 88), (80, 503)]
            .map(|(n, b)| (text[..n].to_string(), b))
            .to_vec();
        out.push(("hello".into(), 296));
        out.push(("héllo wörld".into(), 627));
        out
    }

    #[test]
    fn hash_bucket_follows_tensorflow() {
        let reference = hash_reference();
        let strings: Vec<Option<&str>> = reference.iter().map(|(s, _)| Some(s.as_str())).chain([None]).collect();
        let want: Vec<Option<i64>> = reference.iter().map(|(_, b)| Some(*b)).chain([None]).collect();
        let e = call(Func::HashBucket, vec![c("s"), int(1000)]);
        for column in [
            Arc::new(StringArray::from(strings.clone())) as ArrayRef,
            Arc::new(LargeStringArray::from(strings.clone())) as ArrayRef,
        ] {
            let out = evaluate(&e, &chunk(vec![("s", column)])).unwrap();
            assert_eq!(out.as_primitive::<Int64Type>().iter().collect::<Vec<_>>(), want);
        }
        // Elementwise over a tensor of strings: two elements of shape [4].
        let values: Vec<&str> = reference.iter().map(|(s, _)| s.as_str()).collect();
        let words = nest(Arc::new(StringArray::from(values)), 2, &[4]);
        let (buckets, dims) = i64s(&output(&e.clone(), &chunk(vec![("s", words)])));
        assert_eq!(dims, [4]);
        assert_eq!(buckets, reference.iter().map(|(_, b)| *b).collect::<Vec<_>>());
        // A literal string hashes once.
        let k = Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef;
        let lit = call(Func::HashBucket, vec![Expr::Literal(Scalar::Utf8("hello".into())), int(1000)]);
        let out = evaluate(&Expr::binary(BinaryOp::Add, lit, c("k")), &chunk(vec![("k", k)])).unwrap();
        assert_eq!(out.as_primitive::<Int64Type>().values()[..], [297, 298]);
    }

    /// A reduction, its axes, and the dims and values it gives.
    type Case<T> = (Func, &'static [i64], Vec<i32>, Vec<T>);

    /// Two elements of float64[2, 3]: [[1, 2, 3], [4, 5, 6]] and [[-1, 0.5, NaN], [2, 8, -3]].
    fn floats() -> RecordBatch {
        let values = Float64Array::from(vec![1., 2., 3., 4., 5., 6., -1., 0.5, f64::NAN, 2., 8., -3.]);
        chunk(vec![("t", nest(Arc::new(values), 2, &[2, 3]))])
    }

    #[test]
    fn axis_reductions_follow_tensorflow() {
        let nan = f64::NAN;
        // tf.reduce_*(t[i], axis=...) in TensorFlow 2.21, per element, flattened.
        let cases: Vec<Case<f64>> = vec![
            (Func::ReduceSumAxes, &[0], vec![3], vec![5., 7., 9., 1., 8.5, nan]),
            (Func::ReduceSumAxes, &[-1], vec![2], vec![6., 15., nan, 7.]),
            (Func::ReduceSumAxes, &[1], vec![2], vec![6., 15., nan, 7.]),
            (Func::ReduceMeanAxes, &[0], vec![3], vec![2.5, 3.5, 4.5, 0.5, 4.25, nan]),
            (Func::ReduceMeanAxes, &[-1], vec![2], vec![2., 5., nan, 2.3333333333333335]),
            (Func::ReduceMaxAxes, &[0], vec![3], vec![4., 5., 6., 2., 8., nan]),
            (Func::ReduceMaxAxes, &[-1], vec![2], vec![3., 6., nan, 8.]),
            (Func::ReduceMinAxes, &[0], vec![3], vec![1., 2., 3., -1., 0.5, nan]),
            (Func::ReduceMinAxes, &[-1], vec![2], vec![1., 4., nan, -3.]),
            // No axes: nothing reduced.
            (Func::ReduceSumAxes, &[], vec![2, 3], vec![1., 2., 3., 4., 5., 6., -1., 0.5, nan, 2., 8., -3.]),
        ];
        let batch = floats();
        for (func, ax, dims, want) in cases {
            let e = axes(func, c("t"), ax);
            let (got, got_dims) = f64s(&output(&e, &batch));
            assert_eq!(got_dims, dims, "{e}");
            assert!(same(&got, &want), "{e}: {got:?} != {want:?}");
        }
        // Every dim reduced: one value per element, the whole-tensor reduction's.
        for (func, whole, want) in [
            (Func::ReduceSumAxes, Func::ReduceSum, [21., nan]),
            (Func::ReduceMeanAxes, Func::ReduceMean, [3.5, nan]),
            (Func::ReduceMaxAxes, Func::ReduceMax, [6., nan]),
            (Func::ReduceMinAxes, Func::ReduceMin, [1., nan]),
        ] {
            for ax in [&[0, 1][..], &[-2, -1], &[1, 0]] {
                let e = axes(func, c("t"), ax);
                let got = output(&e, &batch);
                assert!(same(got.as_primitive::<Float64Type>().values(), &want), "{e}: {got:?}");
                assert_eq!(got.as_ref(), evaluate(&call(whole, vec![c("t")]), &batch).unwrap().as_ref());
            }
        }
    }

    #[test]
    fn integer_axis_reductions_follow_tensorflow() {
        // Two elements of int64[2, 2, 2]; tf.reduce_*(t[i], axis=...) in TensorFlow 2.21.
        let values = Int64Array::from(vec![1, 2, 3, 4, 5, 6, 7, 8, -1, 0, 9, -9, 2, 2, 3, 100]);
        let batch = chunk(vec![("t", nest(Arc::new(values), 2, &[2, 2, 2]))]);
        let cases: Vec<Case<i64>> = vec![
            (Func::ReduceSumAxes, &[0, 2], vec![2], vec![14, 22, 3, 103]),
            (Func::ReduceSumAxes, &[-1, 0], vec![2], vec![14, 22, 3, 103]),
            (Func::ReduceSumAxes, &[1], vec![2, 2], vec![4, 6, 12, 14, 8, -9, 5, 102]),
            (Func::ReduceMaxAxes, &[0, 2], vec![2], vec![6, 8, 2, 100]),
            (Func::ReduceMaxAxes, &[1], vec![2, 2], vec![3, 4, 7, 8, 9, 0, 3, 100]),
            (Func::ReduceMinAxes, &[0, 2], vec![2], vec![1, 3, -1, -9]),
            (Func::ReduceMinAxes, &[1], vec![2, 2], vec![1, 2, 5, 6, -1, -9, 2, 2]),
        ];
        for (func, ax, dims, want) in cases {
            let e = axes(func, c("t"), ax);
            assert_eq!(i64s(&output(&e, &batch)), (want, dims), "{e}");
        }
        // The mean of integers is a float64 here (tf's integer mean truncates: [3, 5], [0, 25]):
        // (1 + 2 + 5 + 6) / 4, (3 + 4 + 7 + 8) / 4, (-1 + 0 + 2 + 2) / 4, (9 - 9 + 3 + 100) / 4.
        let (mean, dims) = f64s(&output(&axes(Func::ReduceMeanAxes, c("t"), &[0, 2]), &batch));
        assert_eq!((mean, dims), (vec![3.5, 5.5, 0.75, 25.75], vec![2]));
        // int32 sums stay int32, and overflow is an error.
        let big = nest(Arc::new(Int32Array::from(vec![i32::MAX, 1, 1, 0])), 1, &[2, 2]);
        let e = axes(Func::ReduceSumAxes, c("t"), &[0]);
        let msg = output_err(&e, &chunk(vec![("t", big)]));
        assert!(msg.contains("reduce_sum_axes(t, 0)"), "{msg}");
        let small = nest(Arc::new(Int32Array::from(vec![1, 2, 3, 4])), 1, &[2, 2]);
        let out = output(&e, &chunk(vec![("t", small)]));
        assert_eq!(leaves(&out).0.as_primitive::<arrow::datatypes::Int32Type>().values()[..], [4, 6]);
    }

    #[test]
    fn axis_reductions_of_null_tensors_and_values() {
        // Two elements of float64[2, 2], the second null: a null element gives a null element.
        let rows = nest(Arc::new(Float64Array::from(vec![1., 2., 3., 4., 5., 6., 7., 8.])), 4, &[2]);
        let item = Arc::new(Field::new("item", rows.data_type().clone(), true));
        let nulls = NullBuffer::from(vec![true, false]);
        let t: ArrayRef = Arc::new(FixedSizeListArray::new(item, 2, rows, Some(nulls)));
        let batch = chunk(vec![("t", t)]);
        for ax in [&[0][..], &[0, 1]] {
            let out = output(&axes(Func::ReduceMaxAxes, c("t"), ax), &batch);
            assert_eq!((out.is_null(0), out.is_null(1)), (false, true), "{out:?}");
        }
        let out = output(&axes(Func::ReduceSumAxes, c("t"), &[1]), &batch);
        assert_eq!(out.as_fixed_size_list().value(0).as_primitive::<Float64Type>().values()[..], [3., 7.]);
        let out = output(&normalize_call(c("t"), &[1.0, 2.0], &[1.0, 2.0]), &batch);
        assert_eq!((out.is_null(0), out.is_null(1)), (false, true));
        // A null value in an element that is not null is an error, as for whole reductions.
        let with_null = nest(Arc::new(Float64Array::from(vec![Some(1.), None, Some(3.), Some(4.)])), 2, &[2]);
        let e = axes(Func::ReduceSumAxes, c("t"), &[0]);
        let msg = evaluate(&e, &chunk(vec![("t", with_null)])).unwrap_err().to_string();
        assert!(msg.contains("over null values"), "{msg}");
    }

    #[test]
    fn normalize_follows_tensorflow() {
        // (x - [0.5, 1, 2]) / [0.25, 2, 0.1] in float32 and float64, TensorFlow 2.21, for
        // x = [[0.1, 1.5, 2.25], [-3, 7, 2.05]] (float32: TensorFlow printed the last value as
        // 0x1.ffffep-2, the float32 nearest 0.499_999_52); a second element worked out by hand.
        let x = [0.1, 1.5, 2.25, -3.0, 7.0, 2.05, 0.5, 1.0, 2.0, 0.75, 3.0, 2.0];
        let (mean, std) = ([0.5, 1.0, 2.0], [0.25, 2.0, 0.1]);
        let f32_batch =
            chunk(vec![("t", nest(Arc::new(Float32Array::from(x.map(|v| v as f32).to_vec())), 2, &[2, 3]))]);
        let (got, dims) = f32s(&output(&normalize_call(c("t"), &mean, &std), &f32_batch));
        assert_eq!(dims, [2, 3]);
        let want: [f32; 12] = [-1.6, 0.25, 2.5, -14.0, 3.0, 0.499_999_52, 0., 0., 0., 1., 1., 0.];
        assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want.map(f32::to_bits));
        let f64_batch = chunk(vec![("t", nest(Arc::new(Float64Array::from(x.to_vec())), 2, &[2, 3]))]);
        let (got, _) = f64s(&output(&normalize_call(c("t"), &mean, &std), &f64_batch));
        let want = [-1.6, 0.25, 2.5, -14.0, 3.0, 0.4999999999999982, 0., 0., 0., 1., 1., 0.];
        assert_eq!(got, want);
        // A scalar per element with one mean and std; nulls stay null.
        let w = Arc::new(Float32Array::from(vec![Some(3.0), None, Some(-1.0)])) as ArrayRef;
        let out = output(&normalize_call(c("w"), &[1.0], &[0.5]), &chunk(vec![("w", w)]));
        assert_eq!(out.as_primitive::<Float32Type>().iter().collect::<Vec<_>>(), [Some(4.0), None, Some(-4.0)]);
    }

    #[test]
    fn tensor_functions_compose() {
        // k, w per element; idx: int32[3] per element.
        let batch = chunk(vec![
            ("k", Arc::new(Int64Array::from(vec![2, 0])) as ArrayRef),
            ("w", Arc::new(Float32Array::from(vec![0.5, 2.0]))),
            ("idx", nest(Arc::new(Int32Array::from(vec![1, 1, 3, 0, 7, -1])), 2, &[3])),
        ]);
        // A one-hot row scaled by a scalar.
        let weighted = Expr::binary(BinaryOp::Mul, call(Func::OneHot, vec![c("k"), int(3)]), c("w"));
        assert_eq!(f32s(&output(&weighted, &batch)), (vec![0., 0., 0.5, 2., 0., 0.], vec![3]));
        // Counts of each index: [1, 1, 3] -> [0, 2, 0, 1]; [0, 7, -1] -> [1, 0, 0, 0].
        let counts = axes(Func::ReduceSumAxes, call(Func::OneHot, vec![c("idx"), int(4)]), &[0]);
        assert_eq!(f32s(&output(&counts, &batch)), (vec![0., 2., 0., 1., 1., 0., 0., 0.], vec![4]));
        // Whole reductions of tensor functions are scalars, filters included: in-range counts.
        let in_range = call(Func::ReduceSum, vec![call(Func::OneHot, vec![c("idx"), int(4)])]);
        let out = evaluate(&in_range, &batch).unwrap();
        assert_eq!(out.as_primitive::<Float32Type>().values()[..], [3., 1.]);
        let keep = evaluate_predicate(&Expr::binary(BinaryOp::Gt, in_range, float(2.0)), &batch).unwrap();
        assert_eq!(keep, BooleanArray::from(vec![true, false]));
        // A tensor function inside another's argument, and next to a reduction.
        let t = floats();
        let e = normalize_call(axes(Func::ReduceSumAxes, c("t"), &[0]), &[1.0, 1.0, 1.0], &[2.0, 2.0, 4.0]);
        let (got, dims) = f64s(&output(&e, &t));
        assert_eq!(dims, [3]);
        assert!(same(&got, &[2., 3., 2., 0., 3.75, f64::NAN]), "{got:?}");
        let e =
            Expr::binary(BinaryOp::Sub, axes(Func::ReduceMaxAxes, c("t"), &[1]), call(Func::ReduceMin, vec![c("t")]));
        let (got, _) = f64s(&output(&e, &t));
        assert!(same(&got, &[2., 5., f64::NAN, f64::NAN]), "{got:?}");
    }

    #[test]
    fn kernels_hand_tensor_functions_back() {
        let batch = chunk(vec![
            ("k", Arc::new(Int64Array::from(vec![2, 0])) as ArrayRef),
            ("s", Arc::new(StringArray::from(vec!["a", "b"]))),
            ("w", Arc::new(Float64Array::from(vec![0.5, 2.0]))),
        ]);
        let schema = batch.schema();
        for e in [
            call(Func::OneHot, vec![c("k"), int(3)]),
            call(Func::HashBucket, vec![c("s"), int(3)]),
            axes(Func::ReduceSumAxes, c("w"), &[]),
            axes(Func::ReduceMeanAxes, c("w"), &[]),
            axes(Func::ReduceMaxAxes, c("w"), &[]),
            axes(Func::ReduceMinAxes, c("w"), &[]),
            normalize_call(c("w"), &[1.0], &[2.0]),
        ] {
            assert!(Kernel::compile(&[&e], &schema).is_none(), "{e} compiled");
        }
    }
}
