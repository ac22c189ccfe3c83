//! Builders for the scalar functions flumen evaluates: `sqrt(col("x"))`, `power(a, b)`, ...
//!
//! `datafusion-expr` on its own has no math or string functions (they live in
//! `datafusion-functions`, which flumen does not depend on). These builders make
//! `Expr::ScalarFunction` nodes whose function name is flumen's name for it, which is all
//! [`crate::lower::lower`] looks at; the same names from `datafusion-functions` lower too.

use std::sync::Arc;

use arrow::datatypes::DataType;
use arrow::error::ArrowError;
use datafusion_expr::{
    ColumnarValue, Expr, PartitionEvaluatorFactory, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use flumen_ir::Func;

/// Projects the error type out of a fallible factory's signature.
///
/// `datafusion-expr` returns `datafusion_common::Result` from its traits without re-exporting
/// it, and flumen may not depend on `datafusion-common` directly; a public alias that mentions
/// the type is the only way to spell it.
trait FallibleFactory {
    type Error;
}

impl<T, E> FallibleFactory for Arc<dyn Fn() -> std::result::Result<T, E> + Send + Sync> {
    type Error = E;
}

/// `datafusion_common::Result`.
type DataFusionResult<T> = std::result::Result<T, <PartitionEvaluatorFactory as FallibleFactory>::Error>;

/// A flumen built-in as a DataFusion scalar function: a name and an arity, no kernel.
///
/// flumen never executes these through DataFusion: expressions are lowered to flumen's IR
/// and evaluated by [`crate::eval`], so [`ScalarUDFImpl::invoke_with_args`] only reports that.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Builtin {
    func: Func,
    signature: Signature,
}

impl ScalarUDFImpl for Builtin {
    fn name(&self) -> &str {
        self.func.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> DataFusionResult<DataType> {
        let first = arg_types.first().cloned().unwrap_or(DataType::Null);
        Ok(match self.func {
            Func::Length => DataType::Int64,
            Func::Bucketize => DataType::Int32,
            Func::OneHot => DataType::Float32,
            Func::HashBucket => DataType::Int64,
            Func::DecodeJpeg | Func::DecodePng | Func::DecodeImage | Func::DecodeJpegRows => DataType::UInt8,
            Func::ConvertImageDtype => DataType::Float32,
            Func::ReadFile => DataType::Binary,
            Func::ReduceMean | Func::ReduceMeanAxes if first != DataType::Float32 => DataType::Float64,
            Func::TrueDiv if !matches!(first, DataType::Float32 | DataType::Float64) => DataType::Float64,
            f if f.is_unary_math() || matches!(f, Func::Power | Func::Atan2) => {
                if first == DataType::Float32 {
                    DataType::Float32
                } else {
                    DataType::Float64
                }
            }
            _ => first,
        })
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DataFusionResult<ColumnarValue> {
        Err(ArrowError::NotYetImplemented(format!(
            "{} is a flumen function: lower the expression with flumen_udf::lower and evaluate it with flumen",
            self.func.name()
        ))
        .into())
    }
}

/// The name of [`cast_bfloat16`]'s function, which [`crate::lower::lower`] lowers to a
/// cast: Arrow has no bfloat16 type for a DataFusion cast to name.
pub const CAST_BFLOAT16: &str = "cast_bfloat16";

/// `cast(e as bfloat16)` as a DataFusion function call.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CastBFloat16 {
    signature: Signature,
}

impl ScalarUDFImpl for CastBFloat16 {
    fn name(&self) -> &str {
        CAST_BFLOAT16
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DataFusionResult<DataType> {
        // bfloat16 values travel as their bits (`DType::BFloat16`).
        Ok(DataType::UInt16)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DataFusionResult<ColumnarValue> {
        Err(ArrowError::NotYetImplemented(format!("{CAST_BFLOAT16} is a flumen cast: lower it with flumen_udf::lower"))
            .into())
    }
}

/// `e` cast to bfloat16 (rounded to nearest even; a float64 through float32). The 16-bit
/// floats are storage types: cast them back to float32 for arithmetic. For float16, use
/// DataFusion's `cast(e, DataType::Float16)`.
pub fn cast_bfloat16(e: Expr) -> Expr {
    ScalarUDF::new_from_impl(CastBFloat16 { signature: Signature::any(1, Volatility::Immutable) }).call(vec![e])
}

fn call(func: Func, args: Vec<Expr>) -> Expr {
    let signature = match func {
        Func::Least | Func::Greatest | Func::Coalesce | Func::Bucketize | Func::Normalize => {
            Signature::variadic_any(Volatility::Immutable)
        }
        f if f.is_axis_reduction() || f.is_image_function() => Signature::variadic_any(Volatility::Immutable),
        Func::Clip => Signature::any(3, Volatility::Immutable),
        Func::Power
        | Func::Atan2
        | Func::TrueDiv
        | Func::FloorDiv
        | Func::FloorMod
        | Func::OneHot
        | Func::HashBucket => Signature::any(2, Volatility::Immutable),
        _ => Signature::any(1, Volatility::Immutable),
    };
    ScalarUDF::new_from_impl(Builtin { func, signature }).call(args)
}

/// `|e|`.
pub fn abs(e: Expr) -> Expr {
    call(Func::Abs, vec![e])
}

/// The square root of `e` (a float; integers become float64).
pub fn sqrt(e: Expr) -> Expr {
    call(Func::Sqrt, vec![e])
}

/// `exp(e)`.
pub fn exp(e: Expr) -> Expr {
    call(Func::Exp, vec![e])
}

/// The natural logarithm of `e`.
pub fn ln(e: Expr) -> Expr {
    call(Func::Ln, vec![e])
}

/// The base-2 logarithm of `e`.
pub fn log2(e: Expr) -> Expr {
    call(Func::Log2, vec![e])
}

/// The base-10 logarithm of `e`.
pub fn log10(e: Expr) -> Expr {
    call(Func::Log10, vec![e])
}

/// `e` rounded down (integers are unchanged).
pub fn floor(e: Expr) -> Expr {
    call(Func::Floor, vec![e])
}

/// `e` rounded up (integers are unchanged).
pub fn ceil(e: Expr) -> Expr {
    call(Func::Ceil, vec![e])
}

/// `e` rounded half to even, as `tf.round` and NumPy (2.5 is 2.0; integers are unchanged).
pub fn round(e: Expr) -> Expr {
    call(Func::Round, vec![e])
}

/// `e` rounded toward zero (integers are unchanged).
pub fn trunc(e: Expr) -> Expr {
    call(Func::Trunc, vec![e])
}

/// The sine of `e` (radians).
pub fn sin(e: Expr) -> Expr {
    call(Func::Sin, vec![e])
}

/// The cosine of `e` (radians).
pub fn cos(e: Expr) -> Expr {
    call(Func::Cos, vec![e])
}

/// The tangent of `e` (radians).
pub fn tan(e: Expr) -> Expr {
    call(Func::Tan, vec![e])
}

/// The hyperbolic tangent of `e`.
pub fn tanh(e: Expr) -> Expr {
    call(Func::Tanh, vec![e])
}

/// -1, 0 or 1 by the sign of `e`, in `e`'s type.
pub fn signum(e: Expr) -> Expr {
    call(Func::Signum, vec![e])
}

/// `base` raised to `exponent` (a float).
pub fn power(base: Expr, exponent: Expr) -> Expr {
    call(Func::Power, vec![base, exponent])
}

/// The angle of the point `(x, y)` in radians, `atan(y / x)` with the quadrant resolved.
pub fn atan2(y: Expr, x: Expr) -> Expr {
    call(Func::Atan2, vec![y, x])
}

/// `a / b` as Python and TensorFlow divide (`tf.math.truediv`): integers as float64, so
/// `7 / 2` is 3.5 (where `a / b` of two integer expressions truncates, as in SQL).
pub fn truediv(a: Expr, b: Expr) -> Expr {
    call(Func::TrueDiv, vec![a, b])
}

/// `a // b`: division rounded toward negative infinity (Python's `//`, `tf.math.floordiv`):
/// `-7 // 2` is -4 (where `a / b` truncates to -3).
pub fn floordiv(a: Expr, b: Expr) -> Expr {
    call(Func::FloorDiv, vec![a, b])
}

/// `a % b` with the divisor's sign (Python's `%`, `tf.math.floormod`): `-7 % 3` is 2 (where
/// `a % b` keeps the dividend's sign, -1).
pub fn floormod(a: Expr, b: Expr) -> Expr {
    call(Func::FloorMod, vec![a, b])
}

/// The smallest of `args`, ignoring nulls.
pub fn least(args: Vec<Expr>) -> Expr {
    call(Func::Least, args)
}

/// The largest of `args`, ignoring nulls.
pub fn greatest(args: Vec<Expr>) -> Expr {
    call(Func::Greatest, args)
}

/// The first of `args` that is not null.
pub fn coalesce(args: Vec<Expr>) -> Expr {
    call(Func::Coalesce, args)
}

/// The number of characters of a string, or the number of items of a rank-1 field
/// (the tokens of a ragged sequence).
pub fn length(e: Expr) -> Expr {
    call(Func::Length, vec![e])
}

/// `e` limited to `[lo, hi]`, as tf.clip_by_value: `lo` where `e < lo`, `hi` where `e > hi`,
/// `e` otherwise (a NaN stays NaN). Elementwise over a tensor field.
pub fn clip(e: Expr, lo: Expr, hi: Expr) -> Expr {
    call(Func::Clip, vec![e, lo, hi])
}

/// The bucket of `e` among sorted `boundaries`, as tf's Bucketize: the index of the first
/// boundary greater than `e` (0 below the first, `boundaries.len()` from the last on, and
/// for NaN), as int32. Elementwise over a tensor field.
pub fn bucketize(e: Expr, boundaries: &[f64]) -> Expr {
    let args = std::iter::once(e).chain(boundaries.iter().map(|b| datafusion_expr::lit(*b))).collect();
    call(Func::Bucketize, args)
}

/// The sum of the values of `e`, a tensor (field or expression), one per element.
pub fn reduce_sum(e: Expr) -> Expr {
    call(Func::ReduceSum, vec![e])
}

/// The mean of the values of `e`, a tensor, as a float (float32 stays float32).
pub fn reduce_mean(e: Expr) -> Expr {
    call(Func::ReduceMean, vec![e])
}

/// The largest value of `e`, a tensor (NaN if one of them is).
pub fn reduce_max(e: Expr) -> Expr {
    call(Func::ReduceMax, vec![e])
}

/// The smallest value of `e`, a tensor (NaN if one of them is).
pub fn reduce_min(e: Expr) -> Expr {
    call(Func::ReduceMin, vec![e])
}

/// tf.one_hot(indices, depth) with on 1.0 and off 0.0: for integer `indices` of shape
/// `[d0..dk]` per element (`[]` for a scalar field), the float32 tensor `[d0..dk, depth]`
/// holding a 1 at each index. An index outside `[0, depth)` (negative included) gives a row
/// of zeros; a null index makes the element null. `depth` must be positive.
pub fn one_hot(indices: Expr, depth: i64) -> Expr {
    call(Func::OneHot, vec![indices, datafusion_expr::lit(depth)])
}

/// tf.strings.to_hash_bucket_fast(strings, num_buckets): the FarmHash `Fingerprint64` of each
/// string's UTF-8 bytes modulo `num_buckets` (positive), as int64; the buckets TensorFlow
/// gives. Elementwise over a tensor of strings; a null string gives null.
pub fn hash_bucket(strings: Expr, num_buckets: i64) -> Expr {
    call(Func::HashBucket, vec![strings, datafusion_expr::lit(num_buckets)])
}

fn axis_reduction(func: Func, e: Expr, axes: &[i64]) -> Expr {
    let args = std::iter::once(e).chain(axes.iter().map(|a| datafusion_expr::lit(*a))).collect();
    call(func, args)
}

/// tf.reduce_sum(e, axis=axes) per element: the sum of `e`, a tensor of shape `[d0..dk]`,
/// over the dims `axes` (negative ones count from the last; none twice). The result has the
/// remaining dims as its shape, or is one value per element when every dim is reduced (then
/// it is [`reduce_sum`]). An empty `axes` reduces nothing.
pub fn reduce_sum_axes(e: Expr, axes: &[i64]) -> Expr {
    axis_reduction(Func::ReduceSumAxes, e, axes)
}

/// tf.reduce_mean(e, axis=axes) per element, as a float (float32 stays float32, integers give
/// float64); see [`reduce_sum_axes`] for the axes.
pub fn reduce_mean_axes(e: Expr, axes: &[i64]) -> Expr {
    axis_reduction(Func::ReduceMeanAxes, e, axes)
}

/// tf.reduce_max(e, axis=axes) per element (NaN where a reduced value is NaN); see
/// [`reduce_sum_axes`] for the axes.
pub fn reduce_max_axes(e: Expr, axes: &[i64]) -> Expr {
    axis_reduction(Func::ReduceMaxAxes, e, axes)
}

/// tf.reduce_min(e, axis=axes) per element (NaN where a reduced value is NaN); see
/// [`reduce_sum_axes`] for the axes.
pub fn reduce_min_axes(e: Expr, axes: &[i64]) -> Expr {
    axis_reduction(Func::ReduceMinAxes, e, axes)
}

/// Per-channel normalization along the last dim of a float tensor `e`:
/// `(e[..., c] - mean[c]) / std[c]`, in float32 for float32 and float64 for float64 (as
/// TensorFlow computes `(x - mean) / std` with broadcasting). `mean` and `std` must have as
/// many values as the last dim (one each for a scalar). Null values stay null.
pub fn normalize(e: Expr, mean: &[f64], std: &[f64]) -> Expr {
    let values = mean.iter().chain(std).map(|v| datafusion_expr::lit(*v));
    let args = [e, datafusion_expr::lit(mean.len() as i64)].into_iter().chain(values).collect();
    call(Func::Normalize, args)
}

/// `read_file(path)` (tf.io.read_file): the bytes of the file whose path is string `e`.
pub fn read_file(e: Expr) -> Expr {
    call(Func::ReadFile, vec![e])
}

/// `decode_jpeg(bytes, channels)` (tf.io.decode_jpeg): a JPEG in bytes field `e` decoded to
/// a uint8 `[height, width, channels]` image; `channels` is 1 (gray), 3 (RGB) or 4 (RGBA).
/// Height and width vary per element until a crop or resize fixes them.
pub fn decode_jpeg(e: Expr, channels: i64) -> Expr {
    call(Func::DecodeJpeg, vec![e, datafusion_expr::lit(channels)])
}

/// `decode_png(bytes, channels)`: as [`decode_jpeg`] for a PNG.
pub fn decode_png(e: Expr, channels: i64) -> Expr {
    call(Func::DecodePng, vec![e, datafusion_expr::lit(channels)])
}

/// `decode_image(bytes, channels)`: a JPEG or a PNG, told apart by its first bytes.
pub fn decode_image(e: Expr, channels: i64) -> Expr {
    call(Func::DecodeImage, vec![e, datafusion_expr::lit(channels)])
}

/// `resize(image, height, width, method)` of a uint8 image, `method` one of
/// [`flumen_ir::image::RESIZE_METHODS`].
pub fn resize(image: Expr, height: i64, width: i64, method: &str) -> Expr {
    let args = vec![image, datafusion_expr::lit(height), datafusion_expr::lit(width), datafusion_expr::lit(method)];
    call(Func::Resize, args)
}

/// `crop(image, top, left, height, width)` (tf.image.crop_to_bounding_box).
pub fn crop(image: Expr, top: i64, left: i64, height: i64, width: i64) -> Expr {
    let args = [top, left, height, width].map(datafusion_expr::lit);
    call(Func::Crop, std::iter::once(image).chain(args).collect())
}

/// `central_crop(image, fraction)` (tf.image.central_crop): the central `fraction` of each
/// of the height and the width.
pub fn central_crop(image: Expr, fraction: f64) -> Expr {
    call(Func::CentralCrop, vec![image, datafusion_expr::lit(fraction)])
}

/// `random_crop(image, height, width, seed)` (tf.image.random_crop): a window of that size
/// at a uniformly drawn position.
pub fn random_crop(image: Expr, height: i64, width: i64, seed: i64) -> Expr {
    call(
        Func::RandomCrop,
        vec![image, datafusion_expr::lit(height), datafusion_expr::lit(width), datafusion_expr::lit(seed)],
    )
}

/// `random_resized_crop(image, height, width, seed, scale, ratio)`: torchvision's
/// RandomResizedCrop of a uint8 image (a window of area fraction in `scale` and aspect
/// ratio in `ratio`, 10 attempts, then the central fallback), resized bilinearly.
pub fn random_resized_crop(
    image: Expr,
    height: i64,
    width: i64,
    seed: i64,
    scale: (f64, f64),
    ratio: (f64, f64),
) -> Expr {
    let sizes = [height, width, seed].map(datafusion_expr::lit);
    let ranges = [scale.0, scale.1, ratio.0, ratio.1].map(datafusion_expr::lit);
    call(Func::RandomResizedCrop, std::iter::once(image).chain(sizes).chain(ranges).collect())
}

/// `flip_left_right(image)`: mirrored.
pub fn flip_left_right(image: Expr) -> Expr {
    call(Func::FlipLeftRight, vec![image])
}

/// `flip_up_down(image)`: upside down.
pub fn flip_up_down(image: Expr) -> Expr {
    call(Func::FlipUpDown, vec![image])
}

/// `random_flip_left_right(image, seed)`: mirrored with probability 1/2.
pub fn random_flip_left_right(image: Expr, seed: i64) -> Expr {
    call(Func::RandomFlipLeftRight, vec![image, datafusion_expr::lit(seed)])
}

/// `random_flip_up_down(image, seed)`: upside down with probability 1/2.
pub fn random_flip_up_down(image: Expr, seed: i64) -> Expr {
    call(Func::RandomFlipUpDown, vec![image, datafusion_expr::lit(seed)])
}

/// `hwc_to_chw(image)`: `[height, width, channels]` to `[channels, height, width]`.
pub fn hwc_to_chw(image: Expr) -> Expr {
    call(Func::HwcToChw, vec![image])
}

/// `convert_image_dtype(image, "float32")`: a uint8 image as float32 in `[0, 1]`.
pub fn convert_image_dtype(image: Expr) -> Expr {
    convert_image_dtype_to(image, "float32")
}

/// `convert_image_dtype(image, dtype)`: a uint8 image as `dtype` (`"float32"`, `"float16"`
/// or `"bfloat16"`) in `[0, 1]`; the 16-bit values are the float32 ones rounded to nearest
/// even.
pub fn convert_image_dtype_to(image: Expr, dtype: &str) -> Expr {
    call(Func::ConvertImageDtype, vec![image, datafusion_expr::lit(dtype)])
}

/// `random_brightness(image, max_delta, seed)` of a float32 image.
pub fn random_brightness(image: Expr, max_delta: f64, seed: i64) -> Expr {
    call(Func::RandomBrightness, vec![image, datafusion_expr::lit(max_delta), datafusion_expr::lit(seed)])
}

/// `random_contrast(image, lower, upper, seed)` of a float32 image.
pub fn random_contrast(image: Expr, lower: f64, upper: f64, seed: i64) -> Expr {
    let args = vec![image, datafusion_expr::lit(lower), datafusion_expr::lit(upper), datafusion_expr::lit(seed)];
    call(Func::RandomContrast, args)
}

/// `random_saturation(image, lower, upper, seed)` of a float32 RGB image.
pub fn random_saturation(image: Expr, lower: f64, upper: f64, seed: i64) -> Expr {
    let args = vec![image, datafusion_expr::lit(lower), datafusion_expr::lit(upper), datafusion_expr::lit(seed)];
    call(Func::RandomSaturation, args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_expr::col;

    #[test]
    fn builders_name_their_function() {
        let cases: Vec<(Expr, &str, usize)> = vec![
            (sqrt(col("x")), "sqrt", 1),
            (power(col("x"), col("y")), "power", 2),
            (atan2(col("y"), col("x")), "atan2", 2),
            (least(vec![col("a"), col("b"), col("c")]), "least", 3),
            (length(col("s")), "length", 1),
            (one_hot(col("i"), 4), "one_hot", 2),
            (hash_bucket(col("s"), 100), "hash_bucket", 2),
            (reduce_sum_axes(col("t"), &[0, -1]), "reduce_sum_axes", 3),
            (reduce_mean_axes(col("t"), &[1]), "reduce_mean_axes", 2),
            (reduce_max_axes(col("t"), &[]), "reduce_max_axes", 1),
            (reduce_min_axes(col("t"), &[0]), "reduce_min_axes", 2),
            (normalize(col("t"), &[0.5, 1.0], &[2.0, 4.0]), "normalize", 6),
        ];
        for (e, name, arity) in cases {
            match e {
                Expr::ScalarFunction(f) => {
                    assert_eq!(f.name(), name);
                    assert_eq!(f.args.len(), arity);
                }
                other => panic!("not a function call: {other}"),
            }
        }
        assert_eq!(sqrt(col("x")).to_string(), "sqrt(x)");
    }

    #[test]
    fn builtins_report_return_types() {
        let b = Builtin { func: Func::Sqrt, signature: Signature::any(1, Volatility::Immutable) };
        assert_eq!(b.return_type(&[DataType::Float32]).unwrap(), DataType::Float32);
        assert_eq!(b.return_type(&[DataType::Int32]).unwrap(), DataType::Float64);
        let l = Builtin { func: Func::Length, signature: Signature::any(1, Volatility::Immutable) };
        assert_eq!(l.return_type(&[DataType::Utf8]).unwrap(), DataType::Int64);
        let g = Builtin { func: Func::Greatest, signature: Signature::variadic_any(Volatility::Immutable) };
        assert_eq!(g.return_type(&[DataType::Int16, DataType::Int16]).unwrap(), DataType::Int16);
        let h = Builtin { func: Func::HashBucket, signature: Signature::any(2, Volatility::Immutable) };
        assert_eq!(h.return_type(&[DataType::Utf8, DataType::Int64]).unwrap(), DataType::Int64);
        let o = Builtin { func: Func::OneHot, signature: Signature::any(2, Volatility::Immutable) };
        assert_eq!(o.return_type(&[DataType::Int32, DataType::Int64]).unwrap(), DataType::Float32);
        let m = Builtin { func: Func::ReduceMeanAxes, signature: Signature::variadic_any(Volatility::Immutable) };
        assert_eq!(m.return_type(&[DataType::Int32, DataType::Int64]).unwrap(), DataType::Float64);
    }
}
