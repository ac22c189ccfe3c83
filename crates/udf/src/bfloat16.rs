//! bfloat16 values, which Arrow has no type for: each is its 16 bits in a `UInt16` column
//! ([`flumen_ir::DType::BFloat16`]).
//!
//! A bfloat16 is the top half of a float32, so widening is a shift; narrowing rounds to
//! nearest, ties to even, as TensorFlow, PyTorch and JAX round (a float64 is first
//! narrowed to float32, as they do).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float32Array, UInt16Array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float32Type, UInt16Type};
use flumen_ir::{Error, Result};

/// The bfloat16 nearest `v` (ties to even); a NaN stays a (quiet) NaN.
pub fn from_f32(v: f32) -> u16 {
    let bits = v.to_bits();
    if v.is_nan() {
        return ((bits >> 16) as u16) | 0x0040;
    }
    let round = 0x7FFF + ((bits >> 16) & 1);
    ((bits + round) >> 16) as u16
}

/// The float32 a bfloat16 stands for (exactly).
pub fn to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// `array`, of numbers, as bfloat16 bits.
pub fn narrow(array: &ArrayRef) -> Result<ArrayRef> {
    let floats = cast(array, &DataType::Float32).map_err(|e| Error::Expr(format!("to bfloat16: {e}")))?;
    let floats = floats.as_primitive::<Float32Type>();
    let bits: UInt16Array = floats.unary(from_f32);
    Ok(Arc::new(bits))
}

/// `array`, bfloat16 bits, as values of `to` (a float type).
pub fn widen(array: &ArrayRef, to: &DataType) -> Result<ArrayRef> {
    let bits = array
        .as_primitive_opt::<UInt16Type>()
        .ok_or_else(|| Error::Expr(format!("bfloat16 values are uint16 bits, got {}", array.data_type())))?;
    let floats: Float32Array = bits.unary(to_f32);
    let floats: ArrayRef = Arc::new(floats);
    if to == &DataType::Float32 {
        return Ok(floats);
    }
    cast(&floats, to).map_err(|e| Error::Expr(format!("from bfloat16: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrowing_rounds_to_nearest_even_and_widening_is_exact() {
        // 1 + 2^-8 lies halfway between bfloat16 1.0 and 1 + 2^-7: ties go to the even 1.0.
        assert_eq!(from_f32(1.0 + 1.0 / 256.0), 0x3F80);
        // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
        assert_eq!(from_f32(1.0 + 3.0 / 256.0), 0x3F82);
        assert_eq!(from_f32(1.0 + 1.0 / 256.0 + 1.0 / 65536.0), 0x3F81);
        assert_eq!(from_f32(-2.5), 0xC020);
        assert_eq!(to_f32(0xC020), -2.5);
        assert!(to_f32(from_f32(f32::NAN)).is_nan());
        assert_eq!(to_f32(from_f32(f32::INFINITY)), f32::INFINITY);
        // The largest float32 rounds up to infinity, as in TensorFlow.
        assert_eq!(to_f32(from_f32(f32::MAX)), f32::INFINITY);
        for b in [0u16, 0x0001, 0x3F80, 0x7F7F, 0x8000, 0xFF7F] {
            assert_eq!(from_f32(to_f32(b)), b, "{b:#06x} round-trips");
        }
    }
}
