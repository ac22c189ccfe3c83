//! flumen's typed expression IR: what expression UDFs are lowered into.
//!
//! Expressions are elementwise over an element's fields. They are small trees with no
//! lambdas, so the optimizer can compose two maps by substituting column references.
//! Typing follows Arrow's numeric promotion with one ML-friendly exception: a literal
//! adopts the type of the column it meets when that loses nothing that matters
//! (`x_f32 * 2.0` stays `float32`, as NumPy and JAX treat Python scalars).

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::spec::ElementSpec;

/// A constant value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scalar {
    /// A null of the given type.
    Null(DType),
    /// A boolean.
    Bool(bool),
    /// An integer of the given integer type.
    Int(i64, DType),
    /// An unsigned 64-bit integer too large for `Int`.
    UInt64(u64),
    /// A float of the given float type (in JSON, a number, or `"NaN"`, `"inf"`, `"-inf"`).
    Float(#[serde(with = "float_text")] f64, DType),
    /// A string.
    Utf8(String),
    /// Bytes.
    Binary(Vec<u8>),
}

/// Floats as JSON numbers, and those JSON has no number for as the strings `"NaN"`, `"inf"`
/// and `"-inf"`: serde_json writes them as `null`, which does not read back as a float, so
/// a plan holding one serialized but did not deserialize.
mod float_text {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> std::result::Result<S::Ok, S::Error> {
        match *v {
            v if v.is_finite() => s.serialize_f64(v),
            v if v.is_nan() => s.serialize_str("NaN"),
            v if v > 0.0 => s.serialize_str("inf"),
            _ => s.serialize_str("-inf"),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<f64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Text {
            Number(f64),
            Word(String),
        }
        match Text::deserialize(d)? {
            Text::Number(v) => Ok(v),
            Text::Word(w) => match w.as_str() {
                "NaN" => Ok(f64::NAN),
                "inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                other => {
                    Err(D::Error::custom(format!("expected a float, \"NaN\", \"inf\" or \"-inf\", got {other:?}")))
                }
            },
        }
    }
}

impl Scalar {
    /// The scalar's type.
    pub fn dtype(&self) -> DType {
        match self {
            Scalar::Null(t) | Scalar::Int(_, t) | Scalar::Float(_, t) => *t,
            Scalar::Bool(_) => DType::Bool,
            Scalar::UInt64(_) => DType::UInt64,
            Scalar::Utf8(_) => DType::Utf8,
            Scalar::Binary(_) => DType::Binary,
        }
    }

    /// True for a null.
    pub fn is_null(&self) -> bool {
        matches!(self, Scalar::Null(_))
    }

    /// The value as f64 when it is numeric.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Scalar::Int(v, _) => Some(*v as f64),
            Scalar::UInt64(v) => Some(*v as f64),
            Scalar::Float(v, _) => Some(*v),
            _ => None,
        }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Null(t) => write!(f, "null::{t}"),
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Int(v, DType::Int64) => write!(f, "{v}"),
            Scalar::Int(v, t) => write!(f, "{v}::{t}"),
            Scalar::UInt64(v) => write!(f, "{v}::uint64"),
            Scalar::Float(v, DType::Float64) => write!(f, "{v:?}"),
            Scalar::Float(v, t) => write!(f, "{v:?}::{t}"),
            Scalar::Utf8(s) => write!(f, "{s:?}"),
            Scalar::Binary(b) => write!(f, "bytes[{}]", b.len()),
        }
    }
}

/// Operators with one argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnaryOp {
    /// Boolean not.
    Not,
    /// Arithmetic negation.
    Neg,
    /// True where the value is null.
    IsNull,
    /// True where the value is not null.
    IsNotNull,
}

/// Operators with two arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BinaryOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/` (integer division truncates; division by zero is an error for integers)
    Div,
    /// `%`
    Mod,
    /// `==`
    Eq,
    /// `!=`
    NotEq,
    /// `<`
    Lt,
    /// `<=`
    LtEq,
    /// `>`
    Gt,
    /// `>=`
    GtEq,
    /// Boolean and (Kleene logic for nulls).
    And,
    /// Boolean or (Kleene logic for nulls).
    Or,
}

impl BinaryOp {
    /// The operator's symbol.
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Mod => "%",
            BinaryOp::Eq => "==",
            BinaryOp::NotEq => "!=",
            BinaryOp::Lt => "<",
            BinaryOp::LtEq => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::GtEq => ">=",
            BinaryOp::And => "and",
            BinaryOp::Or => "or",
        }
    }

    /// True for `+ - * / %`.
    pub fn is_arithmetic(self) -> bool {
        matches!(self, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Mod)
    }

    /// True for comparisons.
    pub fn is_comparison(self) -> bool {
        matches!(self, BinaryOp::Eq | BinaryOp::NotEq | BinaryOp::Lt | BinaryOp::LtEq | BinaryOp::Gt | BinaryOp::GtEq)
    }
}

/// Built-in scalar functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Func {
    /// Absolute value.
    Abs,
    /// Square root.
    Sqrt,
    /// e^x.
    Exp,
    /// Natural logarithm.
    Ln,
    /// Base-2 logarithm.
    Log2,
    /// Base-10 logarithm.
    Log10,
    /// Round down.
    Floor,
    /// Round up.
    Ceil,
    /// Round half to even (as `tf.round` and NumPy's `round`; 2.5 is 2.0, 3.5 is 4.0).
    Round,
    /// Round toward zero.
    Trunc,
    /// Sine.
    Sin,
    /// Cosine.
    Cos,
    /// Tangent.
    Tan,
    /// Hyperbolic tangent.
    Tanh,
    /// -1, 0 or 1.
    Signum,
    /// `power(base, exponent)`.
    Power,
    /// `atan2(y, x)`.
    Atan2,
    /// `truediv(a, b)`: division whose result is a float (Python's and `tf.math.truediv`'s
    /// `/`): integers are divided as float64, floats in their common type.
    #[serde(rename = "truediv")]
    TrueDiv,
    /// `floordiv(a, b)`: division rounded toward negative infinity (Python's `//`,
    /// `tf.math.floordiv`): `-7 // 2` is -4; floats give `floor(a / b)`.
    #[serde(rename = "floordiv")]
    FloorDiv,
    /// `floormod(a, b)`: the remainder with the divisor's sign (Python's `%`,
    /// `tf.math.floormod`): `-7 % 3` is 2, `-7.5 % 2.0` is 0.5.
    #[serde(rename = "floormod")]
    FloorMod,
    /// The smaller argument (`least`).
    Least,
    /// The larger argument (`greatest`).
    Greatest,
    /// The first non-null argument.
    Coalesce,
    /// Length in characters of a string, or of a ragged/list field's leading dimension.
    Length,
    /// `clip(x, lo, hi)`: `lo` where `x < lo`, `hi` where `x > hi`, else `x` (tf.clip_by_value;
    /// a NaN stays NaN).
    Clip,
    /// `bucketize(x, b1, b2, ...)` over sorted literal boundaries: the index of the first
    /// boundary greater than `x`, as int32 (tf's Bucketize: values below `b1` are in bucket 0,
    /// NaN in the last).
    Bucketize,
    /// The sum of a tensor's values, one per element (tf.reduce_sum over every dim).
    ReduceSum,
    /// The mean of a tensor's values, as a float (tf.reduce_mean over every dim).
    ReduceMean,
    /// The largest of a tensor's values (tf.reduce_max over every dim; NaN if one is).
    ReduceMax,
    /// The smallest of a tensor's values (tf.reduce_min over every dim; NaN if one is).
    ReduceMin,
    /// `one_hot(indices, depth)` (tf.one_hot, on 1.0, off 0.0): for integer indices of shape
    /// `[d0..dk]` (`[]` for a scalar), the float32 tensor `[d0..dk, depth]` with a 1 at each
    /// index; an index outside `[0, depth)` gives a row of zeros. `depth` is a positive
    /// integer literal.
    OneHot,
    /// `hash_bucket(s, num_buckets)` (tf.strings.to_hash_bucket_fast): FarmHash
    /// `Fingerprint64` of a string's UTF-8 bytes modulo `num_buckets` (a positive integer
    /// literal), as int64. Elementwise.
    HashBucket,
    /// `reduce_sum_axes(t, a1, a2, ...)`: tf.reduce_sum(t, axis=[a1, a2, ...]) over integer
    /// literal axes of each element's tensor (negative counting from the last dim, no
    /// duplicates); the remaining dims are the result's shape (a scalar when none remain).
    ReduceSumAxes,
    /// `reduce_mean_axes(t, axes...)`: as [`Func::ReduceSumAxes`] for the mean, a float
    /// (float32 stays float32, other types give float64).
    ReduceMeanAxes,
    /// `reduce_max_axes(t, axes...)`: as [`Func::ReduceSumAxes`] for the largest value (NaN
    /// if one of the reduced values is).
    ReduceMaxAxes,
    /// `reduce_min_axes(t, axes...)`: as [`Func::ReduceSumAxes`] for the smallest value (NaN
    /// if one of the reduced values is).
    ReduceMinAxes,
    /// `normalize(t, n, mean_1..mean_n, std_1..std_n)`: `(t[..., c] - mean_c) / std_c` along
    /// the last dim of a float tensor, whose size must be `n` (`n` = 1 for a scalar); float32
    /// stays float32. `n` and the means and standard deviations are number literals.
    Normalize,
    /// `decode_jpeg(bytes, channels)`: a JPEG's pixels as a uint8 `[height, width,
    /// channels]` tensor (tf.io.decode_jpeg); `channels` is 1, 3 or 4, an integer literal.
    /// Height and width vary per element. See `crate::image` for all image functions.
    DecodeJpeg,
    /// `decode_png(bytes, channels)`: as [`Func::DecodeJpeg`] for a PNG (8 or 16 bits per
    /// sample; 16-bit samples keep their high byte).
    DecodePng,
    /// `decode_image(bytes, channels)`: JPEG or PNG, told apart by their magic bytes.
    DecodeImage,
    /// `decode_jpeg_rows(bytes, channels)`: [`Func::DecodeJpeg`] that a crop over it may
    /// decode only the rows it keeps of (the optimizer's `jpeg-row-decode` writes it).
    DecodeJpegRows,
    /// `resize(image, height, width, method)`: a uint8 image resized (`method`: "nearest",
    /// "bilinear", "bicubic", "area" or "lanczos3"; convolution filters antialias).
    Resize,
    /// `crop(image, top, left, height, width)` (tf.image.crop_to_bounding_box).
    Crop,
    /// `central_crop(image, fraction)` (tf.image.central_crop).
    CentralCrop,
    /// `random_crop(image, height, width, seed)` (tf.image.random_crop).
    RandomCrop,
    /// `random_resized_crop(image, height, width, seed, scale_lo, scale_hi, ratio_lo,
    /// ratio_hi)`: torchvision's RandomResizedCrop, bilinear, on a uint8 image.
    RandomResizedCrop,
    /// `flip_left_right(image)`.
    FlipLeftRight,
    /// `flip_up_down(image)`.
    FlipUpDown,
    /// `random_flip_left_right(image, seed)`: mirrored with probability 1/2.
    RandomFlipLeftRight,
    /// `random_flip_up_down(image, seed)`: flipped upside down with probability 1/2.
    RandomFlipUpDown,
    /// `hwc_to_chw(image)`: `[h, w, c]` to `[c, h, w]`.
    HwcToChw,
    /// `convert_image_dtype(image, "float32")`: uint8 to float32 in `[0, 1]` (`x / 255`).
    ConvertImageDtype,
    /// `random_brightness(image, max_delta, seed)`: a float image plus one uniform
    /// `[-max_delta, max_delta)` draw.
    RandomBrightness,
    /// `random_contrast(image, lower, upper, seed)`: each channel's distance from its mean
    /// scaled by one uniform `[lower, upper)` draw (tf.image.random_contrast).
    RandomContrast,
    /// `random_saturation(image, lower, upper, seed)`: an RGB float image blended with its
    /// grayscale by one uniform `[lower, upper)` draw (torchvision's adjust_saturation).
    RandomSaturation,
    /// `read_file(path)` (tf.io.read_file): the bytes of the file at a string path; a file
    /// that cannot be read is an error naming it.
    ReadFile,
}

impl Func {
    /// The function's name as written in expressions.
    pub fn name(self) -> &'static str {
        match self {
            Func::Abs => "abs",
            Func::Sqrt => "sqrt",
            Func::Exp => "exp",
            Func::Ln => "ln",
            Func::Log2 => "log2",
            Func::Log10 => "log10",
            Func::Floor => "floor",
            Func::Ceil => "ceil",
            Func::Round => "round",
            Func::Trunc => "trunc",
            Func::Sin => "sin",
            Func::Cos => "cos",
            Func::Tan => "tan",
            Func::Tanh => "tanh",
            Func::Signum => "signum",
            Func::Power => "power",
            Func::Atan2 => "atan2",
            Func::TrueDiv => "truediv",
            Func::FloorDiv => "floordiv",
            Func::FloorMod => "floormod",
            Func::Least => "least",
            Func::Greatest => "greatest",
            Func::Coalesce => "coalesce",
            Func::Length => "length",
            Func::Clip => "clip",
            Func::Bucketize => "bucketize",
            Func::ReduceSum => "reduce_sum",
            Func::ReduceMean => "reduce_mean",
            Func::ReduceMax => "reduce_max",
            Func::ReduceMin => "reduce_min",
            Func::OneHot => "one_hot",
            Func::HashBucket => "hash_bucket",
            Func::ReduceSumAxes => "reduce_sum_axes",
            Func::ReduceMeanAxes => "reduce_mean_axes",
            Func::ReduceMaxAxes => "reduce_max_axes",
            Func::ReduceMinAxes => "reduce_min_axes",
            Func::Normalize => "normalize",
            Func::DecodeJpeg => "decode_jpeg",
            Func::DecodePng => "decode_png",
            Func::DecodeImage => "decode_image",
            Func::DecodeJpegRows => "decode_jpeg_rows",
            Func::Resize => "resize",
            Func::Crop => "crop",
            Func::CentralCrop => "central_crop",
            Func::RandomCrop => "random_crop",
            Func::RandomResizedCrop => "random_resized_crop",
            Func::FlipLeftRight => "flip_left_right",
            Func::FlipUpDown => "flip_up_down",
            Func::RandomFlipLeftRight => "random_flip_left_right",
            Func::RandomFlipUpDown => "random_flip_up_down",
            Func::HwcToChw => "hwc_to_chw",
            Func::ConvertImageDtype => "convert_image_dtype",
            Func::RandomBrightness => "random_brightness",
            Func::RandomContrast => "random_contrast",
            Func::RandomSaturation => "random_saturation",
            Func::ReadFile => "read_file",
        }
    }

    /// Every function, in declaration order.
    pub const ALL: [Func; 56] = [
        Func::Abs,
        Func::Sqrt,
        Func::Exp,
        Func::Ln,
        Func::Log2,
        Func::Log10,
        Func::Floor,
        Func::Ceil,
        Func::Round,
        Func::Trunc,
        Func::Sin,
        Func::Cos,
        Func::Tan,
        Func::Tanh,
        Func::Signum,
        Func::Power,
        Func::Atan2,
        Func::TrueDiv,
        Func::FloorDiv,
        Func::FloorMod,
        Func::Least,
        Func::Greatest,
        Func::Coalesce,
        Func::Length,
        Func::Clip,
        Func::Bucketize,
        Func::ReduceSum,
        Func::ReduceMean,
        Func::ReduceMax,
        Func::ReduceMin,
        Func::OneHot,
        Func::HashBucket,
        Func::ReduceSumAxes,
        Func::ReduceMeanAxes,
        Func::ReduceMaxAxes,
        Func::ReduceMinAxes,
        Func::Normalize,
        Func::DecodeJpeg,
        Func::DecodePng,
        Func::DecodeImage,
        Func::DecodeJpegRows,
        Func::Resize,
        Func::Crop,
        Func::CentralCrop,
        Func::RandomCrop,
        Func::RandomResizedCrop,
        Func::FlipLeftRight,
        Func::FlipUpDown,
        Func::RandomFlipLeftRight,
        Func::RandomFlipUpDown,
        Func::HwcToChw,
        Func::ConvertImageDtype,
        Func::RandomBrightness,
        Func::RandomContrast,
        Func::RandomSaturation,
        Func::ReadFile,
    ];

    /// True for the reductions of a tensor to one value per element.
    pub fn is_reduction(self) -> bool {
        matches!(self, Func::ReduceSum | Func::ReduceMean | Func::ReduceMax | Func::ReduceMin)
    }

    /// True for the reductions over chosen dims (`reduce_sum_axes`, ...).
    pub fn is_axis_reduction(self) -> bool {
        matches!(self, Func::ReduceSumAxes | Func::ReduceMeanAxes | Func::ReduceMaxAxes | Func::ReduceMinAxes)
    }

    /// The reduction over every dim that an axis reduction is when it reduces them all
    /// (`reduce_sum` for `reduce_sum_axes`, ...).
    pub fn whole_reduction(self) -> Option<Func> {
        Some(match self {
            Func::ReduceSumAxes => Func::ReduceSum,
            Func::ReduceMeanAxes => Func::ReduceMean,
            Func::ReduceMaxAxes => Func::ReduceMax,
            Func::ReduceMinAxes => Func::ReduceMin,
            _ => return None,
        })
    }

    /// True for the functions of each element's whole tensor whose value may have another
    /// shape than their argument, or depends on a value's position in it: `one_hot`, the
    /// axis reductions and `normalize`. Like the reductions, they are computed first, over
    /// the whole chunk, and an expression around them sees a field of their shape.
    pub fn is_tensor_function(self) -> bool {
        self.is_axis_reduction()
            || self.is_image_function()
            || matches!(self, Func::OneHot | Func::Normalize | Func::ReadFile)
    }

    /// True for the image functions (decoders, geometry, pixel operations: `crate::image`).
    pub fn is_image_function(self) -> bool {
        matches!(
            self,
            Func::DecodeJpeg
                | Func::DecodePng
                | Func::DecodeImage
                | Func::DecodeJpegRows
                | Func::Resize
                | Func::Crop
                | Func::CentralCrop
                | Func::HwcToChw
                | Func::FlipLeftRight
                | Func::FlipUpDown
                | Func::ConvertImageDtype
        ) || self.draws_random()
    }

    /// True for the functions that draw random numbers. Their draws are keyed by the seed
    /// literal, the epoch and the element's position in the map's input (see
    /// `crate::image`), so they are functions of the element like any other.
    pub fn draws_random(self) -> bool {
        matches!(
            self,
            Func::RandomCrop
                | Func::RandomResizedCrop
                | Func::RandomFlipLeftRight
                | Func::RandomFlipUpDown
                | Func::RandomBrightness
                | Func::RandomContrast
                | Func::RandomSaturation
        )
    }

    /// True for the functions an expression evaluation computes before the rest of the
    /// expression: reductions and tensor functions ([`Func::is_tensor_function`]).
    pub fn is_computed_first(self) -> bool {
        self.is_reduction() || self.is_tensor_function()
    }

    /// The function named `name` (as [`Func::name`] writes it).
    pub fn from_name(name: &str) -> Option<Func> {
        Func::ALL.into_iter().find(|f| f.name() == name)
    }

    /// True for the float-valued unary math functions.
    pub fn is_unary_math(self) -> bool {
        matches!(
            self,
            Func::Sqrt
                | Func::Exp
                | Func::Ln
                | Func::Log2
                | Func::Log10
                | Func::Sin
                | Func::Cos
                | Func::Tan
                | Func::Tanh
        )
    }
}

/// A typed expression over an element's fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expr {
    /// The value of a field.
    Column(String),
    /// A constant.
    Literal(Scalar),
    /// A unary operator.
    Unary {
        /// The operator.
        op: UnaryOp,
        /// Its argument.
        arg: Box<Expr>,
    },
    /// A binary operator.
    Binary {
        /// The operator.
        op: BinaryOp,
        /// Left argument.
        left: Box<Expr>,
        /// Right argument.
        right: Box<Expr>,
    },
    /// A conversion to another type.
    Cast {
        /// The value.
        arg: Box<Expr>,
        /// The target type.
        to: DType,
    },
    /// `CASE WHEN c1 THEN v1 ... ELSE e END`.
    Case {
        /// `(condition, value)` pairs, tried in order.
        branches: Vec<(Expr, Expr)>,
        /// The value when no condition holds (null when absent).
        otherwise: Option<Box<Expr>>,
    },
    /// A built-in function.
    Call {
        /// The function.
        func: Func,
        /// Its arguments.
        args: Vec<Expr>,
    },
}

impl Expr {
    /// A reference to field `name`.
    pub fn col(name: impl Into<String>) -> Expr {
        Expr::Column(name.into())
    }

    /// A binary expression.
    pub fn binary(op: BinaryOp, left: Expr, right: Expr) -> Expr {
        Expr::Binary { op, left: Box::new(left), right: Box::new(right) }
    }

    /// The fields this expression reads, sorted.
    pub fn columns(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        self.visit(&mut |e| {
            if let Expr::Column(c) = e {
                out.insert(c.clone());
            }
        });
        out
    }

    /// The fields this expression reads other than through a reduction or `length(field)`
    /// (whose value is one per element whatever the field's shape), sorted.
    pub fn columns_outside_reductions(&self) -> BTreeSet<String> {
        fn walk(e: &Expr, out: &mut BTreeSet<String>) {
            match e {
                Expr::Column(c) => {
                    out.insert(c.clone());
                }
                Expr::Call { func, .. } if func.is_reduction() => {}
                Expr::Call { func: Func::Length, args } if matches!(args[..], [Expr::Column(_)]) => {}
                _ => e.children().into_iter().for_each(|c| walk(c, out)),
            }
        }
        let mut out = BTreeSet::new();
        walk(self, &mut out);
        out
    }

    /// The direct sub-expressions, in order.
    pub fn children(&self) -> Vec<&Expr> {
        match self {
            Expr::Column(_) | Expr::Literal(_) => Vec::new(),
            Expr::Unary { arg, .. } | Expr::Cast { arg, .. } => vec![arg],
            Expr::Binary { left, right, .. } => vec![left, right],
            Expr::Case { branches, otherwise } => {
                branches.iter().flat_map(|(c, v)| [c, v]).chain(otherwise.as_deref()).collect()
            }
            Expr::Call { args, .. } => args.iter().collect(),
        }
    }

    /// Calls `f` on this expression and every sub-expression, parents first.
    pub fn visit(&self, f: &mut impl FnMut(&Expr)) {
        f(self);
        self.children().into_iter().for_each(|c| c.visit(f));
    }

    /// The expression with every column reference replaced by `f(name)`
    /// (how the optimizer composes `map(g) ∘ map(f)`).
    pub fn substitute(&self, f: &impl Fn(&str) -> Option<Expr>) -> Expr {
        let sub = |e: &Expr| Box::new(e.substitute(f));
        match self {
            Expr::Column(c) => f(c).unwrap_or_else(|| self.clone()),
            Expr::Literal(_) => self.clone(),
            Expr::Unary { op, arg } => Expr::Unary { op: *op, arg: sub(arg) },
            Expr::Cast { arg, to } => Expr::Cast { arg: sub(arg), to: *to },
            Expr::Binary { op, left, right } => Expr::Binary { op: *op, left: sub(left), right: sub(right) },
            Expr::Case { branches, otherwise } => Expr::Case {
                branches: branches.iter().map(|(c, v)| (c.substitute(f), v.substitute(f))).collect(),
                otherwise: otherwise.as_ref().map(|o| sub(o)),
            },
            Expr::Call { func, args } => {
                Expr::Call { func: *func, args: args.iter().map(|a| a.substitute(f)).collect() }
            }
        }
    }

    /// Whether the expression calls a function that draws random numbers
    /// ([`Func::draws_random`]).
    pub fn draws_random(&self) -> bool {
        let mut found = false;
        self.visit(&mut |e| found |= matches!(e, Expr::Call { func, .. } if func.draws_random()));
        found
    }

    /// Whether the expression calls a tensor function (`one_hot`, `normalize`, axis
    /// reductions, image functions).
    pub fn has_tensor_function(&self) -> bool {
        let mut found = false;
        self.visit(&mut |e| found |= matches!(e, Expr::Call { func, .. } if func.is_tensor_function()));
        found
    }

    /// The type and tensor shape of this expression as a `map` output: besides scalar
    /// fields it may read tensor fields of unbatched elements, and then applies elementwise
    /// over the tensor's values, a scalar (a per-element field or a literal) standing for
    /// every value (`features * weight`). The shapes of the fixed-shape tensor fields (every
    /// dim known) it reads broadcast together as NumPy's do ([`crate::broadcast`]: `[33]`
    /// with `[1]`, `[4, 1]` with `[3]`), and that shape is the result's; tensor fields of
    /// unknown dims (ragged, variable-length: `t * 3` over `int64[?]`) must all have one
    /// shape, which is the result's; it is empty otherwise.
    ///
    /// A tensor function ([`Func::is_tensor_function`]: `one_hot`, an axis reduction,
    /// `normalize`) counts as a tensor field of the shape it gives (`one_hot(k, 3) * w` has
    /// shape `[3]`), as its evaluation computes it first into such a field.
    pub fn value_type(&self, spec: &ElementSpec) -> Result<(DType, Vec<i64>)> {
        if self.has_tensor_function() {
            let mut with_fields = spec.clone();
            let expr = self.tensor_functions_as_fields(spec, &mut with_fields)?;
            // Elementwise operations need every element's shape: an image of unknown size
            // (a decode's) must be cropped or resized first.
            let added = &with_fields.fields[spec.fields.len()..];
            if let Expr::Column(name) = &expr {
                if let Some(f) = added.iter().find(|f| &f.name == name && !f.is_static()) {
                    return Ok((f.dtype, f.shape.clone()));
                }
            } else {
                if let Some(f) = added.iter().find(|f| !f.is_static()) {
                    return Err(Error::Expr(format!(
                        "{} has no fixed shape ({f}): crop or resize it before elementwise operations, in {self}",
                        f.name
                    )));
                }
            }
            return expr.value_type(&with_fields);
        }
        let mut shape: Option<(String, Vec<i64>)> = None;
        let mut variable: Option<(String, Vec<i64>)> = None;
        let mut elements = spec.clone();
        for name in self.columns_outside_reductions() {
            let Some(i) = spec.fields.iter().position(|f| f.name == name) else { continue };
            let field = &spec.fields[i];
            if field.kind != crate::spec::FieldKind::Sparse && spec.batch_dims == 0 && !field.is_static() {
                // A tensor of unknown dims (a ragged or variable-length field): elementwise
                // over its values when every such field it reads has the same shape; each
                // element's values must then agree in number, which evaluation checks.
                match &variable {
                    Some((other, dims)) if *dims != field.shape => {
                        return Err(Error::Expr(format!(
                            "fields '{other}' {dims:?} and '{name}' {:?} have different shapes; elementwise \
                             operations over tensors of unknown dims take fields of one shape, in {self}",
                            field.shape
                        )))
                    }
                    Some(_) => {}
                    None => variable = Some((name.clone(), field.shape.clone())),
                }
                elements.fields[i].shape = Vec::new();
                continue;
            }
            if !field.is_fixed_tensor(spec.batch_dims) {
                continue;
            }
            if spec.batch_dims > 0 {
                return Err(Error::Expr(format!(
                    "field '{name}' is a tensor ({field}) of a batched element; tensor expressions \
                     take unbatched elements (map before batch)"
                )));
            }
            shape = Some(match shape {
                None => (name.clone(), field.shape.clone()),
                Some((other, dims)) => match crate::broadcast::broadcast_shape(&dims, &field.shape) {
                    Some(joint) => (other, joint),
                    None => {
                        return Err(Error::Expr(format!(
                            "tensor fields '{other}' {dims:?} and '{name}' {:?} have different shapes that do \
                             not broadcast (each dim, counted from the last, must be equal or 1) in {self}",
                            field.shape
                        )))
                    }
                },
            });
            // Typed as one of its values.
            elements.fields[i].shape = Vec::new();
        }
        if let (Some((fixed, dims)), Some((other, unknown))) = (&shape, &variable) {
            return Err(Error::Expr(format!(
                "tensor fields '{fixed}' {dims:?} and '{other}' {unknown:?}: a fixed-shape tensor does not \
                 broadcast with one of unknown dims, in {self}"
            )));
        }
        let dims = variable.or(shape).map(|(_, dims)| dims).unwrap_or_default();
        Ok((self.data_type(&elements)?, dims))
    }

    /// This expression with each outermost tensor function replaced by a field of its type
    /// and shape, added to `fields` and named as the call is written (so messages read the
    /// same).
    fn tensor_functions_as_fields(&self, spec: &ElementSpec, fields: &mut ElementSpec) -> Result<Expr> {
        if let Expr::Call { func, args } = self {
            if func.is_tensor_function() {
                let (dtype, shape) = self.tensor_call_type(*func, args, spec)?;
                let mut name = self.to_string();
                while fields.field(&name).is_some() {
                    name.push('\u{1}');
                }
                fields.fields.push(crate::spec::FieldSpec::tensor(name.clone(), dtype, shape));
                return Ok(Expr::Column(name));
            }
        }
        let mut sub = |e: &Expr| e.tensor_functions_as_fields(spec, fields);
        Ok(match self {
            Expr::Column(_) | Expr::Literal(_) => self.clone(),
            Expr::Unary { op, arg } => Expr::Unary { op: *op, arg: Box::new(sub(arg)?) },
            Expr::Cast { arg, to } => Expr::Cast { arg: Box::new(sub(arg)?), to: *to },
            Expr::Binary { op, left, right } => {
                let left = sub(left)?;
                Expr::Binary { op: *op, left: Box::new(left), right: Box::new(sub(right)?) }
            }
            Expr::Case { branches, otherwise } => {
                let branches = branches.iter().map(|(c, v)| Ok((sub(c)?, sub(v)?))).collect::<Result<Vec<_>>>()?;
                let otherwise = otherwise.as_ref().map(|o| sub(o).map(Box::new)).transpose()?;
                Expr::Case { branches, otherwise }
            }
            Expr::Call { func, args } => Expr::Call { func: *func, args: args.iter().map(sub).collect::<Result<_>>()? },
        })
    }

    /// The type of this expression over elements of `spec`, or why it is ill-typed.
    ///
    /// Fields must be scalars per element, or fields whose every dim comes from batching
    /// (then the expression applies elementwise across the batch, as tf.data's map over a
    /// batched dataset does).
    pub fn data_type(&self, spec: &ElementSpec) -> Result<DType> {
        Ok(self.typed(spec)?.0)
    }

    /// The casts evaluating this expression over elements of `spec` applies to its operands
    /// besides the ones written: each as (whether the operand is a literal, its type, the
    /// type it is cast to). Both sides of an arithmetic operation or a comparison are cast
    /// to their common type, a `case`'s values to the `case`'s type, the arguments of
    /// `least`, `greatest`, `coalesce` and `clip` to the call's type. Each is (whether the
    /// operand is a literal that fits the type, so the cast cannot fail; its type; the type
    /// it is cast to). A literal that does not fit is refused where it is typed, except as a
    /// bound of `clip`, which fails only where it is the result; any other operand's cast
    /// fails where its value does not fit (a uint64 compared with an int64 is cast to
    /// int64), which the optimizer must know.
    pub fn implicit_casts(&self, spec: &ElementSpec) -> Result<Vec<(bool, DType, DType)>> {
        let mut casts = Vec::new();
        self.typed_noting(spec, &mut |operand, from, to| {
            if from != to {
                casts.push((matches!(operand, Expr::Literal(v) if literal_fits(v, to)), from, to));
            }
        })?;
        Ok(casts)
    }

    /// The casts this node applies to its own operands (not those inside them), as
    /// [`Expr::implicit_casts`] gives them, operand by operand.
    pub fn own_casts(&self, spec: &ElementSpec) -> Result<Vec<(bool, DType, DType)>> {
        let children = self.children();
        let mut casts = Vec::new();
        self.typed_noting(spec, &mut |operand, from, to| {
            if children.iter().any(|c| std::ptr::eq(*c, operand)) {
                casts.push((matches!(operand, Expr::Literal(v) if literal_fits(v, to)), from, to));
            }
        })?;
        Ok(casts)
    }

    /// The type, and whether the value is a per-element literal (no column involved).
    fn typed(&self, spec: &ElementSpec) -> Result<(DType, bool)> {
        self.typed_noting(spec, &mut |_, _, _| {})
    }

    /// [`Expr::typed`], telling `cast` each operand evaluation casts (the operand, its type
    /// and the type it is cast to, maybe the same).
    fn typed_noting(&self, spec: &ElementSpec, cast: &mut dyn FnMut(&Expr, DType, DType)) -> Result<(DType, bool)> {
        match self {
            Expr::Column(name) => {
                let field = spec.field(name).ok_or_else(|| {
                    Error::Expr(format!("unknown field '{name}' (the element has: {})", spec.field_names().join(", ")))
                })?;
                if field.kind == crate::spec::FieldKind::Sparse {
                    return Err(Error::Expr(format!("field '{name}' is sparse; expressions take dense fields")));
                }
                if field.shape.len() > spec.batch_dims {
                    return Err(Error::Expr(format!(
                        "field '{name}' is a tensor ({field}); expressions work on scalar fields \
                         (tensor kernels are not available yet)"
                    )));
                }
                Ok((field.dtype, false))
            }
            Expr::Literal(s) => Ok((s.dtype(), true)),
            Expr::Unary { op, arg } => {
                let (t, lit) = arg.typed_noting(spec, cast)?;
                match op {
                    UnaryOp::Not if t != DType::Bool => {
                        Err(Error::Expr(format!("'not' takes a bool, got {t} in {self}")))
                    }
                    UnaryOp::Neg if !t.is_numeric() || t.is_unsigned() => {
                        Err(Error::Expr(format!("negation takes a signed number, got {t} in {self}")))
                    }
                    UnaryOp::Not | UnaryOp::Neg => Ok((t, lit)),
                    UnaryOp::IsNull | UnaryOp::IsNotNull => Ok((DType::Bool, lit)),
                }
            }
            Expr::Binary { op, left, right } => {
                let (lt, llit) = left.typed_noting(spec, cast)?;
                let (rt, rlit) = right.typed_noting(spec, cast)?;
                let lit = llit && rlit;
                if matches!(op, BinaryOp::And | BinaryOp::Or) {
                    if lt != DType::Bool || rt != DType::Bool {
                        return Err(Error::Expr(format!("'{}' takes bools, got {lt} and {rt} in {self}", op.symbol())));
                    }
                    return Ok((DType::Bool, lit));
                }
                if lt.is_half() || rt.is_half() {
                    let half = if lt.is_half() { lt } else { rt };
                    return Err(Error::Expr(format!(
                        "'{}' does not take {half}, a storage type: cast it to float32 first in {self}",
                        op.symbol()
                    )));
                }
                let common = common_type(lt, llit, rt, rlit)
                    .ok_or_else(|| Error::Expr(format!("'{}' cannot combine {lt} and {rt} in {self}", op.symbol())))?;
                for (side, t) in [(left, lt), (right, rt)] {
                    check_literal_fits(side, common, self)?;
                    cast(side, t, common);
                }
                if op.is_arithmetic() && !common.is_numeric() {
                    return Err(Error::Expr(format!("'{}' takes numbers, got {common} in {self}", op.symbol())));
                }
                Ok((if op.is_comparison() { DType::Bool } else { common }, lit))
            }
            Expr::Cast { arg, to } => {
                let (t, lit) = arg.typed_noting(spec, cast)?;
                // The 16-bit floats are storage: made from numbers, read back as floats.
                let ok = t == *to
                    || (t.is_numeric() || t == DType::Bool)
                        && (to.is_numeric() || *to == DType::Bool || *to == DType::Utf8)
                    || t == DType::Utf8 && (to.is_numeric() || *to == DType::Bool || *to == DType::Binary)
                    || t.is_numeric() && to.is_half()
                    || t.is_half() && (to.is_float() || to.is_half());
                if !ok {
                    return Err(Error::Expr(format!("cannot cast {t} to {to} in {self}")));
                }
                Ok((*to, lit))
            }
            Expr::Case { branches, otherwise } => {
                if branches.is_empty() {
                    return Err(Error::Expr("case needs at least one branch".into()));
                }
                let mut acc: Option<(DType, bool)> = None;
                let mut all_lit = true;
                let mut values = Vec::with_capacity(branches.len() + 1);
                for (c, v) in branches {
                    let (ct, clit) = c.typed_noting(spec, cast)?;
                    if ct != DType::Bool {
                        return Err(Error::Expr(format!("case condition must be bool, got {ct} in {self}")));
                    }
                    all_lit &= clit;
                    let typed = v.typed_noting(spec, cast)?;
                    values.push((v, typed.0));
                    acc = Some(join_branch(acc, typed, self)?);
                }
                if let Some(o) = otherwise {
                    let typed = o.typed_noting(spec, cast)?;
                    values.push((o.as_ref(), typed.0));
                    acc = Some(join_branch(acc, typed, self)?);
                }
                let (t, lit) = acc.expect("at least one branch");
                // Every value is cast to the case's type, a literal among them too.
                for (v, vt) in values {
                    check_literal_fits(v, t, self)?;
                    cast(v, vt, t);
                }
                Ok((t, lit && all_lit))
            }
            Expr::Call { func, args } => self.typed_call(*func, args, spec, cast),
        }
    }

    fn typed_call(
        &self,
        func: Func,
        args: &[Expr],
        spec: &ElementSpec,
        cast: &mut dyn FnMut(&Expr, DType, DType),
    ) -> Result<(DType, bool)> {
        if func == Func::Length {
            return self.typed_length(args, spec, cast);
        }
        if func.is_reduction() {
            if spec.batch_dims > 0 {
                return Err(Error::Expr(format!(
                    "{} takes unbatched elements (reduce before batch) in {self}",
                    func.name()
                )));
            }
            // The argument is typed as a tensor expression: it may read tensor fields.
            let [arg] = args else {
                return Err(Error::Expr(format!("{} takes 1 argument, got {} in {self}", func.name(), args.len())));
            };
            let (t, _) = arg.value_type(spec)?;
            if !t.is_numeric() {
                return Err(Error::Expr(format!("{} takes numbers, got {t} in {self}", func.name())));
            }
            let t = match (func, t) {
                (Func::ReduceMean, DType::Float32) => DType::Float32,
                (Func::ReduceMean, _) => DType::Float64,
                _ => t,
            };
            // Computed first into a column, it never adopts another operand's type.
            return Ok((t, false));
        }
        if func.is_tensor_function() {
            let (t, shape) = self.tensor_call_type(func, args, spec)?;
            if !shape.is_empty() {
                return Err(Error::Expr(format!(
                    "{self} is a tensor of shape {shape:?}: {} gives a tensor there, which only a map output \
                     can be (filters and keys take scalars)",
                    func.name()
                )));
            }
            return Ok((t, false));
        }
        let typed = args.iter().map(|a| a.typed_noting(spec, cast)).collect::<Result<Vec<_>>>()?;
        let lit = typed.iter().all(|(_, l)| *l);
        let arity = |n: usize| -> Result<()> {
            if typed.len() != n {
                return Err(Error::Expr(format!(
                    "{} takes {n} argument(s), got {} in {self}",
                    func.name(),
                    typed.len()
                )));
            }
            Ok(())
        };
        let numeric = |t: DType| -> Result<DType> {
            if t.is_numeric() {
                Ok(t)
            } else {
                Err(Error::Expr(format!("{} takes a number, got {t} in {self}", func.name())))
            }
        };
        let float_of = |t: DType| if t == DType::Float32 { DType::Float32 } else { DType::Float64 };
        let out = match func {
            Func::Abs | Func::Signum => {
                arity(1)?;
                numeric(typed[0].0)?
            }
            Func::Floor | Func::Ceil | Func::Round | Func::Trunc => {
                arity(1)?;
                numeric(typed[0].0)?
            }
            f if f.is_unary_math() => {
                arity(1)?;
                float_of(numeric(typed[0].0)?)
            }
            Func::Power | Func::Atan2 => {
                arity(2)?;
                let t = common_type(typed[0].0, typed[0].1, typed[1].0, typed[1].1)
                    .ok_or_else(|| Error::Expr(format!("{} cannot combine its arguments in {self}", func.name())))?;
                float_of(numeric(t)?)
            }
            Func::TrueDiv | Func::FloorDiv | Func::FloorMod => {
                arity(2)?;
                let t = common_type(typed[0].0, typed[0].1, typed[1].0, typed[1].1)
                    .ok_or_else(|| Error::Expr(format!("{} cannot combine its arguments in {self}", func.name())))?;
                let t = numeric(t)?;
                cast_arguments(args, &typed, t, self, cast)?;
                match func {
                    // Integers divide as float64, as NumPy's and TensorFlow's `/` do.
                    Func::TrueDiv if !t.is_float() => DType::Float64,
                    _ => t,
                }
            }
            Func::Clip => {
                arity(3)?;
                let mut acc = typed[0];
                for t in &typed[1..] {
                    let c = common_type(acc.0, acc.1, t.0, t.1)
                        .ok_or_else(|| Error::Expr(format!("clip cannot combine {} and {} in {self}", acc.0, t.0)))?;
                    acc = (c, acc.1 && t.1);
                }
                // Clip computes in a wide type and casts the result back, so a bound outside
                // the type fails only where it is the result: told as a cast that may fail,
                // not refused (`clip(u8, -1, 4)` is fine).
                for (arg, (t, _)) in args.iter().zip(&typed) {
                    cast(arg, *t, acc.0);
                }
                numeric(acc.0)?
            }
            Func::Bucketize => {
                if typed.len() < 2 {
                    return Err(Error::Expr(format!("bucketize takes a value and boundaries in {self}")));
                }
                numeric(typed[0].0)?;
                let mut last = f64::NEG_INFINITY;
                for b in &args[1..] {
                    let value = match b {
                        Expr::Literal(Scalar::Float(v, _)) => *v,
                        Expr::Literal(Scalar::Int(v, _)) => *v as f64,
                        other => {
                            return Err(Error::Expr(format!(
                                "bucketize boundaries must be number literals, got {other} in {self}"
                            )))
                        }
                    };
                    if value < last || value.is_nan() {
                        return Err(Error::Expr(format!("bucketize boundaries must be sorted in {self}")));
                    }
                    last = value;
                }
                DType::Int32
            }
            Func::HashBucket => {
                arity(2)?;
                if typed[0].0 != DType::Utf8 {
                    return Err(Error::Expr(format!("hash_bucket takes strings, got {} in {self}", typed[0].0)));
                }
                if int_literal(&args[1]).is_none_or(|n| n <= 0) {
                    return Err(Error::Expr(format!(
                        "hash_bucket's bucket count must be a positive integer literal, got {} in {self}",
                        args[1]
                    )));
                }
                DType::Int64
            }
            Func::Least | Func::Greatest | Func::Coalesce => {
                if typed.is_empty() {
                    return Err(Error::Expr(format!("{} needs arguments", func.name())));
                }
                let mut acc = typed[0];
                for t in &typed[1..] {
                    let c = common_type(acc.0, acc.1, t.0, t.1).ok_or_else(|| {
                        Error::Expr(format!("{} cannot combine {} and {} in {self}", func.name(), acc.0, t.0))
                    })?;
                    acc = (c, acc.1 && t.1);
                }
                cast_arguments(args, &typed, acc.0, self, cast)?;
                acc.0
            }
            _ => unreachable!("every function is typed above"),
        };
        Ok((out, lit))
    }
}

impl Expr {
    /// The type and shape per element of a tensor function's value
    /// ([`Func::is_tensor_function`]), its argument typed as a tensor expression.
    fn tensor_call_type(&self, func: Func, args: &[Expr], spec: &ElementSpec) -> Result<(DType, Vec<i64>)> {
        let name = func.name();
        let fail = |message: String| Err(Error::Expr(format!("{message} in {self}")));
        if spec.batch_dims > 0 {
            return fail(format!("{name} takes unbatched elements (map before batch)"));
        }
        let Some((arg, rest)) = args.split_first() else {
            return fail(format!("{name} takes a tensor and literal arguments, got none"));
        };
        // An image field of unknown height and width (a decode's output read back, or a
        // ragged field) is typed by its spec: elementwise typing would refuse it.
        let field = match arg {
            Expr::Column(name) if func.is_image_function() => spec.field(name).filter(|f| f.shape.len() == 3),
            _ => None,
        };
        let (t, mut shape) = match field {
            Some(f) if f.kind != crate::spec::FieldKind::Sparse => (f.dtype, f.shape.clone()),
            _ => arg.value_type(spec)?,
        };
        if func == Func::ReadFile {
            if t != DType::Utf8 || !shape.is_empty() || !rest.is_empty() {
                return fail(format!("read_file takes one scalar string (a path), got {t}{shape:?}"));
            }
            return Ok((DType::Binary, shape));
        }
        if func.is_image_function() {
            return crate::image::call_type(func, (t, shape), rest).map_err(|m| Error::Expr(format!("{m} in {self}")));
        }
        match func {
            Func::OneHot => {
                if !t.is_integer() {
                    return fail(format!("one_hot takes integer indices, got {t}"));
                }
                let [depth] = rest else {
                    return fail(format!("one_hot takes indices and a depth, got {} argument(s)", args.len()));
                };
                match int_literal(depth) {
                    Some(d) if d > 0 && d <= i64::from(i32::MAX) => shape.push(d),
                    _ => return fail(format!("one_hot's depth must be a positive integer literal, got {depth}")),
                }
                Ok((DType::Float32, shape))
            }
            Func::Normalize => {
                if !t.is_float() {
                    return fail(format!("normalize takes a float tensor, got {t} (cast it to float32 or float64)"));
                }
                let Some((n, values)) = rest.split_first() else {
                    return fail("normalize takes a tensor, a channel count, means and standard deviations".into());
                };
                let n = match int_literal(n) {
                    Some(n) if n > 0 => n,
                    _ => return fail(format!("normalize's channel count must be a positive integer literal, got {n}")),
                };
                if values.len() as i64 != 2 * n {
                    return fail(format!(
                        "normalize takes as many standard deviations as means ({n}), got {} values in all",
                        values.len()
                    ));
                }
                if let Some(bad) = values.iter().find(|v| number_literal(v).is_none()) {
                    return fail(format!(
                        "normalize's means and standard deviations must be number literals, got {bad}"
                    ));
                }
                let channels = shape.last().copied().unwrap_or(1);
                if channels != n {
                    return fail(format!(
                        "normalize has {n} means and standard deviations but {arg} has {channels} channel(s) \
                         (its last dim, 1 for a scalar): shape {shape:?}"
                    ));
                }
                Ok((t, shape))
            }
            _ => {
                if !t.is_numeric() {
                    return fail(format!("{name} takes numbers, got {t}"));
                }
                let axes = reduced_axes(rest, shape.len())
                    .map_err(|m| Error::Expr(format!("{name}: {m} (shape {shape:?}) in {self}")))?;
                let kept = shape.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, d)| *d).collect();
                let t = match (func, t) {
                    (Func::ReduceMeanAxes, DType::Float32) => DType::Float32,
                    (Func::ReduceMeanAxes, _) => DType::Float64,
                    _ => t,
                };
                Ok((t, kept))
            }
        }
    }

    /// `length(x)`: characters of a string, or the leading dimension of a rank-1 field
    /// (the tokens of a ragged sequence), which is why it looks at the field before typing.
    fn typed_length(
        &self,
        args: &[Expr],
        spec: &ElementSpec,
        cast: &mut dyn FnMut(&Expr, DType, DType),
    ) -> Result<(DType, bool)> {
        let [arg] = args else {
            return Err(Error::Expr(format!("length takes 1 argument, got {} in {self}", args.len())));
        };
        if let Expr::Column(name) = arg {
            let field = spec.require(name, "length").map_err(|e| Error::Expr(e.to_string()))?;
            if field.shape.len() == spec.batch_dims + 1 && field.kind != crate::spec::FieldKind::Sparse {
                return Ok((DType::Int64, false));
            }
        }
        let (t, lit) = arg.typed_noting(spec, cast)?;
        if t != DType::Utf8 {
            return Err(Error::Expr(format!("length takes a string or a rank-1 field, got {t} in {self}")));
        }
        Ok((DType::Int64, lit))
    }
}

/// The value of an integer literal.
pub fn int_literal(e: &Expr) -> Option<i64> {
    match e {
        Expr::Literal(Scalar::Int(v, _)) => Some(*v),
        _ => None,
    }
}

/// The value of a number literal (integer or float), as f64.
pub fn number_literal(e: &Expr) -> Option<f64> {
    match e {
        Expr::Literal(s @ (Scalar::Int(..) | Scalar::UInt64(_) | Scalar::Float(..))) => s.as_f64(),
        _ => None,
    }
}

/// The dims an axis reduction over a tensor of `rank` dims reduces, sorted: `axes` are
/// integer literals in `[-rank, rank)`, a negative one counting from the last dim (as in
/// tf), and no dim may be named twice. The message says what is wrong otherwise.
pub fn reduced_axes(axes: &[Expr], rank: usize) -> std::result::Result<Vec<usize>, String> {
    let mut out = Vec::with_capacity(axes.len());
    for a in axes {
        let Some(v) = int_literal(a) else {
            return Err(format!("axes must be integer literals, got {a}"));
        };
        let r = rank as i64;
        if v < -r || v >= r {
            return Err(format!("axis {v} is out of range for a tensor of {rank} dim(s)"));
        }
        let dim = if v < 0 { v + r } else { v } as usize;
        if out.contains(&dim) {
            return Err(format!("dim {dim} is reduced twice (axis {v})"));
        }
        out.push(dim);
    }
    out.sort_unstable();
    Ok(out)
}

/// The arguments of a call cast to its type `to` (`least`, `greatest`, `coalesce`): each
/// literal checked to fit, each cast told.
fn cast_arguments(
    args: &[Expr],
    typed: &[(DType, bool)],
    to: DType,
    whole: &Expr,
    cast: &mut dyn FnMut(&Expr, DType, DType),
) -> Result<()> {
    for (arg, (t, _)) in args.iter().zip(typed) {
        check_literal_fits(arg, to, whole)?;
        cast(arg, *t, to);
    }
    Ok(())
}

/// A literal that adopts a narrower column type must hold its value exactly
/// (`x_int8 + 300` is a type error, not a run-time cast failure).
fn check_literal_fits(side: &Expr, to: DType, whole: &Expr) -> Result<()> {
    match side {
        Expr::Literal(value) if !literal_fits(value, to) => {
            Err(Error::Expr(format!("literal {value} does not fit in {to} in {whole}")))
        }
        _ => Ok(()),
    }
}

/// Whether the literal `value` can be cast to `to` (an integer within its range; anything
/// else a literal adopts).
fn literal_fits(value: &Scalar, to: DType) -> bool {
    match (value, to) {
        (Scalar::Int(v, _), t) if t.is_integer() => match t.int_range() {
            Some((lo, hi)) => i128::from(*v) >= lo && i128::from(*v) <= hi,
            None => true,
        },
        (Scalar::UInt64(v), t) if t.is_integer() => t.int_range().is_none_or(|(_, hi)| i128::from(*v) <= hi),
        _ => true,
    }
}

fn join_branch(acc: Option<(DType, bool)>, next: (DType, bool), e: &Expr) -> Result<(DType, bool)> {
    match acc {
        None => Ok(next),
        Some((t, l)) => common_type(t, l, next.0, next.1)
            .map(|c| (c, l && next.1))
            .ok_or_else(|| Error::Expr(format!("case branches have types {t} and {} in {e}", next.0))),
    }
}

/// The type two operands are promoted to, or `None` when they do not mix.
///
/// A literal side adopts the other side's type when both are integers, both are floats, or
/// the literal is an integer and the other side a float.
pub fn common_type(a: DType, a_lit: bool, b: DType, b_lit: bool) -> Option<DType> {
    if a == b {
        return Some(a);
    }
    if a_lit != b_lit {
        let (col, lit) = if a_lit { (b, a) } else { (a, b) };
        let adopt = (col.is_integer() && lit.is_integer())
            || (col.is_float() && lit.is_float())
            || (col.is_float() && lit.is_integer());
        if adopt {
            return Some(col);
        }
    }
    if !(a.is_numeric() && b.is_numeric()) {
        return None;
    }
    if a.is_float() || b.is_float() {
        let f32_ok = |t: DType| matches!(t, DType::Float32 | DType::Int8 | DType::Int16 | DType::UInt8 | DType::UInt16);
        return Some(if f32_ok(a) && f32_ok(b) { DType::Float32 } else { DType::Float64 });
    }
    let signed = |t: DType| matches!(t, DType::Int8 | DType::Int16 | DType::Int32 | DType::Int64);
    let width = |t: DType| match t {
        DType::Int8 | DType::UInt8 => 8,
        DType::Int16 | DType::UInt16 => 16,
        DType::Int32 | DType::UInt32 => 32,
        _ => 64,
    };
    let w = width(a).max(width(b));
    Some(match (signed(a) || signed(b), signed(a) && signed(b)) {
        (false, _) => match w {
            8 => DType::UInt8,
            16 => DType::UInt16,
            32 => DType::UInt32,
            _ => DType::UInt64,
        },
        (true, true) => match w {
            8 => DType::Int8,
            16 => DType::Int16,
            32 => DType::Int32,
            _ => DType::Int64,
        },
        // Mixed signedness: the next signed width up that holds both, capped at int64.
        (true, false) => match w {
            8 => DType::Int16,
            16 => DType::Int32,
            _ => DType::Int64,
        },
    })
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Column(c) => write!(f, "{c}"),
            Expr::Literal(s) => write!(f, "{s}"),
            Expr::Unary { op: UnaryOp::Not, arg } => write!(f, "not({arg})"),
            Expr::Unary { op: UnaryOp::Neg, arg } => write!(f, "-({arg})"),
            Expr::Unary { op: UnaryOp::IsNull, arg } => write!(f, "is_null({arg})"),
            Expr::Unary { op: UnaryOp::IsNotNull, arg } => write!(f, "is_not_null({arg})"),
            Expr::Binary { op, left, right } => write!(f, "({left} {} {right})", op.symbol()),
            Expr::Cast { arg, to } => write!(f, "cast({arg} as {to})"),
            Expr::Case { branches, otherwise } => {
                f.write_str("case")?;
                for (c, v) in branches {
                    write!(f, " when {c} then {v}")?;
                }
                if let Some(o) = otherwise {
                    write!(f, " else {o}")?;
                }
                f.write_str(" end")
            }
            Expr::Call { func, args } => {
                let a: Vec<String> = args.iter().map(|x| x.to_string()).collect();
                write!(f, "{}({})", func.name(), a.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{c, call, float, int};
    use crate::spec::FieldSpec;

    /// k: int32, w: float32, s: utf8, words: utf8[2], idx: int64[2], t: float32[2, 3],
    /// u: float64[2, 3], n: int64[2, 3].
    fn spec() -> ElementSpec {
        ElementSpec::new(vec![
            FieldSpec::scalar("k", DType::Int32),
            FieldSpec::scalar("w", DType::Float32),
            FieldSpec::scalar("s", DType::Utf8),
            FieldSpec::tensor("words", DType::Utf8, vec![2]),
            FieldSpec::tensor("idx", DType::Int64, vec![2]),
            FieldSpec::tensor("t", DType::Float32, vec![2, 3]),
            FieldSpec::tensor("u", DType::Float64, vec![2, 3]),
            FieldSpec::tensor("n", DType::Int64, vec![2, 3]),
        ])
        .unwrap()
    }

    fn normalize(arg: Expr, mean: &[f64], std: &[f64]) -> Expr {
        let values = mean.iter().chain(std).map(|v| float(*v));
        call(Func::Normalize, [arg, int(mean.len() as i64)].into_iter().chain(values).collect())
    }

    fn axes(func: Func, arg: Expr, axes: &[i64]) -> Expr {
        call(func, std::iter::once(arg).chain(axes.iter().map(|a| int(*a))).collect())
    }

    #[test]
    fn tensors_of_unknown_dims_type_elementwise_when_their_shapes_agree() {
        let spec = ElementSpec::new(vec![
            FieldSpec::scalar("w", DType::Float32),
            FieldSpec::ragged("r", DType::Int64, vec![-1]),
            FieldSpec::ragged("q", DType::Int64, vec![-1]),
            FieldSpec::tensor("v", DType::Int32, vec![-1, 2]),
            FieldSpec::tensor("t", DType::Float32, vec![2]),
        ])
        .unwrap();
        let typed = |e: Expr| e.value_type(&spec);
        let mul = |a, b| Expr::binary(BinaryOp::Mul, a, b);
        assert_eq!(typed(mul(c("r"), int(3))).unwrap(), (DType::Int64, vec![-1]));
        assert_eq!(typed(mul(c("r"), c("q"))).unwrap(), (DType::Int64, vec![-1]));
        // A per-element scalar stands for every value, in the joint type.
        assert_eq!(typed(mul(c("r"), c("w"))).unwrap(), (DType::Float64, vec![-1]));
        assert_eq!(typed(mul(c("v"), int(2))).unwrap(), (DType::Int32, vec![-1, 2]));
        let msg = typed(mul(c("r"), c("v"))).unwrap_err().to_string();
        assert!(msg.contains("have different shapes") && msg.contains("one shape"), "{msg}");
        let msg = typed(mul(c("r"), c("t"))).unwrap_err().to_string();
        assert!(msg.contains("does not broadcast with one of unknown dims"), "{msg}");
        // Only as map outputs: a filter or key still takes scalars.
        assert!(Expr::binary(BinaryOp::Gt, c("r"), int(0)).data_type(&spec).is_err());
        // Batched elements keep their batch dims as the elementwise ones.
        let batched = ElementSpec { batch_dims: 1, ..spec.clone() };
        assert!(typed(mul(c("v"), int(2))).is_ok() && mul(c("v"), int(2)).value_type(&batched).is_err());
    }

    #[test]
    fn tensor_functions_type_with_their_shapes() {
        let spec = spec();
        let typed = |e: Expr| e.value_type(&spec).unwrap_or_else(|err| panic!("{e}: {err}"));
        // one_hot appends the depth to the indices' shape.
        assert_eq!(typed(call(Func::OneHot, vec![c("k"), int(3)])), (DType::Float32, vec![3]));
        assert_eq!(typed(call(Func::OneHot, vec![c("idx"), int(4)])), (DType::Float32, vec![2, 4]));
        // Axis reductions keep the other dims, negative axes counting from the last.
        assert_eq!(typed(axes(Func::ReduceSumAxes, c("t"), &[0])), (DType::Float32, vec![3]));
        assert_eq!(typed(axes(Func::ReduceMaxAxes, c("n"), &[-1])), (DType::Int64, vec![2]));
        assert_eq!(typed(axes(Func::ReduceMinAxes, c("u"), &[-1, 0])), (DType::Float64, vec![]));
        assert_eq!(typed(axes(Func::ReduceSumAxes, c("n"), &[])), (DType::Int64, vec![2, 3]));
        assert_eq!(typed(axes(Func::ReduceMeanAxes, c("n"), &[1])), (DType::Float64, vec![2]));
        assert_eq!(typed(axes(Func::ReduceMeanAxes, c("t"), &[1])), (DType::Float32, vec![2]));
        // normalize keeps its argument's type and shape.
        assert_eq!(typed(normalize(c("t"), &[0.0, 1.0, 2.0], &[1.0, 1.0, 1.0])), (DType::Float32, vec![2, 3]));
        assert_eq!(typed(normalize(c("u"), &[0.0, 1.0, 2.0], &[1.0, 1.0, 1.0])), (DType::Float64, vec![2, 3]));
        assert_eq!(typed(normalize(c("w"), &[0.5], &[2.0])), (DType::Float32, vec![]));
        // hash_bucket is elementwise.
        assert_eq!(typed(call(Func::HashBucket, vec![c("s"), int(10)])), (DType::Int64, vec![]));
        assert_eq!(typed(call(Func::HashBucket, vec![c("words"), int(10)])), (DType::Int64, vec![2]));
        // Around them, a tensor function is a tensor field of its shape.
        let weighted = Expr::binary(BinaryOp::Mul, call(Func::OneHot, vec![c("k"), int(3)]), c("w"));
        assert_eq!(typed(weighted), (DType::Float32, vec![3]));
        let counts = axes(Func::ReduceSumAxes, call(Func::OneHot, vec![c("idx"), int(5)]), &[0]);
        assert_eq!(typed(counts.clone()), (DType::Float32, vec![5]));
        let centred = Expr::binary(BinaryOp::Sub, axes(Func::ReduceSumAxes, c("u"), &[0]), float(1.0));
        assert_eq!(typed(centred), (DType::Float64, vec![3]));
        // A whole reduction of a tensor function is one value per element.
        let total = call(Func::ReduceSum, vec![counts]);
        assert_eq!(typed(total.clone()), (DType::Float32, vec![]));
        assert_eq!(total.data_type(&spec).unwrap(), DType::Float32);
        // A reduction over every dim is a scalar anywhere, filters included.
        assert_eq!(axes(Func::ReduceMaxAxes, c("t"), &[0, 1]).data_type(&spec).unwrap(), DType::Float32);
    }

    #[test]
    fn tensor_function_misuse_is_a_type_error_naming_the_function() {
        let spec = spec();
        let err = |e: Expr| match e.value_type(&spec) {
            Ok(t) => panic!("{e} typed as {t:?}"),
            Err(err) => err.to_string(),
        };
        let cases = vec![
            (call(Func::OneHot, vec![c("k"), int(0)]), "one_hot's depth must be a positive integer literal"),
            (call(Func::OneHot, vec![c("k"), int(-2)]), "one_hot's depth"),
            (call(Func::OneHot, vec![c("k"), c("k")]), "one_hot's depth"),
            (call(Func::OneHot, vec![c("k"), float(3.0)]), "one_hot's depth"),
            (call(Func::OneHot, vec![c("k")]), "one_hot takes indices and a depth"),
            (call(Func::OneHot, vec![c("w"), int(3)]), "one_hot takes integer indices, got float32"),
            (call(Func::HashBucket, vec![c("k"), int(3)]), "hash_bucket takes strings, got int32"),
            (call(Func::HashBucket, vec![c("s"), int(0)]), "hash_bucket's bucket count"),
            (call(Func::HashBucket, vec![c("s"), c("k")]), "hash_bucket's bucket count"),
            (call(Func::HashBucket, vec![c("s")]), "hash_bucket takes 2 argument(s)"),
            (axes(Func::ReduceSumAxes, c("t"), &[2]), "reduce_sum_axes: axis 2 is out of range"),
            (axes(Func::ReduceMeanAxes, c("t"), &[-3]), "reduce_mean_axes: axis -3 is out of range"),
            (axes(Func::ReduceMaxAxes, c("t"), &[1, -1]), "reduce_max_axes: dim 1 is reduced twice"),
            (call(Func::ReduceMinAxes, vec![c("t"), c("k")]), "reduce_min_axes: axes must be integer literals"),
            (axes(Func::ReduceSumAxes, c("s"), &[]), "reduce_sum_axes takes numbers, got string"),
            (axes(Func::ReduceSumAxes, c("k"), &[0]), "axis 0 is out of range for a tensor of 0 dim(s)"),
            (normalize(c("n"), &[0.0, 0.0, 0.0], &[1.0, 1.0, 1.0]), "normalize takes a float tensor, got int64"),
            (normalize(c("t"), &[0.0, 0.0], &[1.0, 1.0]), "normalize has 2 means and standard deviations but t"),
            (normalize(c("w"), &[0.0, 0.0], &[1.0, 1.0]), "1 for a scalar"),
            (normalize(c("t"), &[0.0, 0.0, 0.0], &[1.0, 1.0]), "normalize takes as many standard deviations"),
            (
                call(Func::Normalize, vec![c("t"), int(3), c("w"), int(0), int(0), int(1), int(1), int(1)]),
                "number literals",
            ),
            (call(Func::Normalize, vec![c("t")]), "normalize takes a tensor, a channel count"),
            (
                Expr::binary(BinaryOp::Mul, call(Func::OneHot, vec![c("idx"), int(4)]), c("t")),
                "'one_hot(idx, 4)' [2, 4] and 't' [2, 3] have different shapes",
            ),
        ];
        for (e, want) in cases {
            let msg = err(e.clone());
            assert!(msg.contains(want), "{e}: {msg}");
        }
        // A tensor-valued call is no scalar: filters and keys refuse it.
        let msg = axes(Func::ReduceSumAxes, c("t"), &[0]).data_type(&spec).unwrap_err().to_string();
        assert!(msg.contains("reduce_sum_axes gives a tensor") && msg.contains("[3]"), "{msg}");
        let msg = call(Func::OneHot, vec![c("k"), int(3)]).data_type(&spec).unwrap_err().to_string();
        assert!(msg.contains("one_hot gives a tensor"), "{msg}");
        // Batched elements are refused, as for the whole reductions.
        let batched = ElementSpec {
            batch_dims: 1,
            ..ElementSpec::new(vec![FieldSpec::tensor("t", DType::Float32, vec![4, 3])]).unwrap()
        };
        for e in [axes(Func::ReduceSumAxes, c("t"), &[0]), normalize(c("t"), &[0.0; 3], &[1.0; 3])] {
            let msg = e.value_type(&batched).unwrap_err().to_string();
            assert!(msg.contains("unbatched"), "{msg}");
        }
    }
}
