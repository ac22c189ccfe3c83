//! Element data types and their Arrow equivalents.

use std::fmt;

use arrow::datatypes::DataType;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The scalar type of a field's values (tf.data's `dtype`).
///
/// Pipeline JSON, specs, `explain` and error messages all spell a dtype as
/// [`DType::name`] does (`uint8`, `string`, `bytes`); JSON written before these names were
/// unified (`u_int8`, `utf8`, `binary`) still reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DType {
    /// Boolean.
    Bool,
    /// Signed 8-bit integer.
    Int8,
    /// Signed 16-bit integer.
    Int16,
    /// Signed 32-bit integer.
    Int32,
    /// Signed 64-bit integer.
    Int64,
    /// Unsigned 8-bit integer.
    #[serde(rename = "uint8", alias = "u_int8")]
    UInt8,
    /// Unsigned 16-bit integer.
    #[serde(rename = "uint16", alias = "u_int16")]
    UInt16,
    /// Unsigned 32-bit integer.
    #[serde(rename = "uint32", alias = "u_int32")]
    UInt32,
    /// Unsigned 64-bit integer.
    #[serde(rename = "uint64", alias = "u_int64")]
    UInt64,
    /// 16-bit IEEE float (half precision; Arrow's `Float16`, NumPy's `float16`). A storage
    /// type for feeding accelerators: made by `cast` and `convert_image_dtype`, cast back
    /// to `float32` for arithmetic.
    Float16,
    /// bfloat16: a float32's sign, exponent and top 7 mantissa bits, the accelerators' 16-bit
    /// float. Arrow has no bfloat16 type, so its values travel as their 16 bits in a `UInt16`
    /// column; specs say `bfloat16`, and the Python package hands them out as bfloat16
    /// arrays. A storage type like [`DType::Float16`].
    #[serde(rename = "bfloat16")]
    BFloat16,
    /// 32-bit float.
    Float32,
    /// 64-bit float.
    Float64,
    /// UTF-8 string (tf.string holding text).
    #[serde(rename = "string", alias = "utf8")]
    Utf8,
    /// Bytes (tf.string holding binary data).
    #[serde(rename = "bytes", alias = "binary")]
    Binary,
    /// A calendar date: days since 1970-01-01 (Arrow's `Date32`).
    Date32,
    /// A time of day: microseconds after midnight (Arrow's `Time64(Microsecond)`).
    #[serde(rename = "time64_us")]
    TimeMicros,
    /// An instant: microseconds since 1970-01-01T00:00:00 UTC (Arrow's
    /// `Timestamp(Microsecond, "UTC")`, NumPy's `datetime64[us]`).
    #[serde(rename = "timestamp_us")]
    TimestampMicros,
    /// A decimal number: an unscaled 128-bit integer of at most `precision` digits, of
    /// which `scale` are after the point (Arrow's `Decimal128(precision, scale)`). Written
    /// `decimal128(precision, scale)`.
    Decimal128 {
        /// Digits in all (1 to 38).
        precision: u8,
        /// Digits after the point.
        scale: i8,
    },
}

impl DType {
    /// The Arrow type of one value.
    pub fn to_arrow(self) -> DataType {
        match self {
            DType::Bool => DataType::Boolean,
            DType::Int8 => DataType::Int8,
            DType::Int16 => DataType::Int16,
            DType::Int32 => DataType::Int32,
            DType::Int64 => DataType::Int64,
            DType::UInt8 => DataType::UInt8,
            DType::UInt16 => DataType::UInt16,
            DType::UInt32 => DataType::UInt32,
            DType::UInt64 => DataType::UInt64,
            DType::Float16 => DataType::Float16,
            DType::BFloat16 => DataType::UInt16,
            DType::Float32 => DataType::Float32,
            DType::Float64 => DataType::Float64,
            DType::Utf8 => DataType::Utf8,
            DType::Binary => DataType::Binary,
            DType::Date32 => DataType::Date32,
            DType::TimeMicros => DataType::Time64(arrow::datatypes::TimeUnit::Microsecond),
            DType::TimestampMicros => DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into())),
            DType::Decimal128 { precision, scale } => DataType::Decimal128(precision, scale),
        }
    }

    /// The dtype of an Arrow primitive, string or binary type.
    pub fn from_arrow(dt: &DataType) -> Result<DType> {
        Ok(match dt {
            DataType::Boolean => DType::Bool,
            DataType::Int8 => DType::Int8,
            DataType::Int16 => DType::Int16,
            DataType::Int32 => DType::Int32,
            DataType::Int64 => DType::Int64,
            DataType::UInt8 => DType::UInt8,
            DataType::UInt16 => DType::UInt16,
            DataType::UInt32 => DType::UInt32,
            DataType::UInt64 => DType::UInt64,
            DataType::Float16 => DType::Float16,
            DataType::Float32 => DType::Float32,
            DataType::Float64 => DType::Float64,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DType::Utf8,
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView => DType::Binary,
            DataType::Date32 => DType::Date32,
            DataType::Time64(arrow::datatypes::TimeUnit::Microsecond) => DType::TimeMicros,
            DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some(zone)) if zone.as_ref() == "UTC" => {
                DType::TimestampMicros
            }
            DataType::Decimal128(precision, scale) => DType::Decimal128 { precision: *precision, scale: *scale },
            other => return Err(Error::Expr(format!("arrow type {other} has no flumen dtype"))),
        })
    }

    /// True for integer and float types.
    pub fn is_numeric(self) -> bool {
        self.is_integer() || self.is_float()
    }

    /// True for signed and unsigned integers.
    pub fn is_integer(self) -> bool {
        matches!(
            self,
            DType::Int8
                | DType::Int16
                | DType::Int32
                | DType::Int64
                | DType::UInt8
                | DType::UInt16
                | DType::UInt32
                | DType::UInt64
        )
    }

    /// True for unsigned integers.
    pub fn is_unsigned(self) -> bool {
        matches!(self, DType::UInt8 | DType::UInt16 | DType::UInt32 | DType::UInt64)
    }

    /// The smallest and largest value of an integer type (`None` for other types).
    pub fn int_range(self) -> Option<(i128, i128)> {
        Some(match self {
            DType::Int8 => (i8::MIN.into(), i8::MAX.into()),
            DType::Int16 => (i16::MIN.into(), i16::MAX.into()),
            DType::Int32 => (i32::MIN.into(), i32::MAX.into()),
            DType::Int64 => (i64::MIN.into(), i64::MAX.into()),
            DType::UInt8 => (0, u8::MAX.into()),
            DType::UInt16 => (0, u16::MAX.into()),
            DType::UInt32 => (0, u32::MAX.into()),
            DType::UInt64 => (0, u64::MAX.into()),
            _ => return None,
        })
    }

    /// True for float types.
    pub fn is_float(self) -> bool {
        matches!(self, DType::Float32 | DType::Float64)
    }

    /// True for the 16-bit storage floats ([`DType::Float16`], [`DType::BFloat16`]): no
    /// arithmetic, cast to and from the other floats only.
    pub fn is_half(self) -> bool {
        matches!(self, DType::Float16 | DType::BFloat16)
    }

    /// The lower-case name used in specs and JSON (`int64`, `float32`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::Int8 => "int8",
            DType::Int16 => "int16",
            DType::Int32 => "int32",
            DType::Int64 => "int64",
            DType::UInt8 => "uint8",
            DType::UInt16 => "uint16",
            DType::UInt32 => "uint32",
            DType::UInt64 => "uint64",
            DType::Float16 => "float16",
            DType::BFloat16 => "bfloat16",
            DType::Float32 => "float32",
            DType::Float64 => "float64",
            DType::Utf8 => "string",
            DType::Binary => "bytes",
            DType::Date32 => "date32",
            DType::TimeMicros => "time64_us",
            DType::TimestampMicros => "timestamp_us",
            DType::Decimal128 { .. } => "decimal128",
        }
    }
}

impl DType {
    /// Every dtype without parameters, in declaration order (all but `decimal128`).
    pub const ALL: [DType; 18] = [
        DType::Bool,
        DType::Int8,
        DType::Int16,
        DType::Int32,
        DType::Int64,
        DType::UInt8,
        DType::UInt16,
        DType::UInt32,
        DType::UInt64,
        DType::Float16,
        DType::BFloat16,
        DType::Float32,
        DType::Float64,
        DType::Utf8,
        DType::Binary,
        DType::Date32,
        DType::TimeMicros,
        DType::TimestampMicros,
    ];

    /// The dtype named `name` (as [`DType::name`] writes it, or `decimal128(p, s)`).
    pub fn from_name(name: &str) -> Option<DType> {
        if let Some(args) = name.strip_prefix("decimal128(").and_then(|rest| rest.strip_suffix(')')) {
            let (precision, scale) = args.split_once(',')?;
            let precision: u8 = precision.trim().parse().ok().filter(|p| (1..=38).contains(p))?;
            return Some(DType::Decimal128 { precision, scale: scale.trim().parse().ok()? });
        }
        DType::ALL.into_iter().find(|t| t.name() == name)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DType::Decimal128 { precision, scale } => write!(f, "decimal128({precision}, {scale})"),
            _ => f.write_str(self.name()),
        }
    }
}
