//! The counter-based random draws of the image functions.
//!
//! A draw is a pure function of (the element's key, the call's seed, which function draws,
//! the draw's number), so it does not matter which thread evaluates an element, in which
//! chunk, or whether the element is evaluated again after a restore. The runtime computes
//! each element's key from the seed salt of the iteration and epoch and the element's
//! position in the map's input ([`element_keys`]), and adds it as the hidden column
//! [`ELEMENT_KEY`].

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, RecordBatch, RecordBatchOptions, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, UInt64Type};
use flumen_ir::image::ELEMENT_KEY;
use flumen_ir::{Error, Func, Result};

/// SplitMix64's finalizer: a bijection that spreads every input bit over the output.
pub fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_add(0x9e37_79b9_7f4a_7c15).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The keys of `rows` elements at positions `first`, `first + stride`, ... under seed
/// salt `salt`.
pub fn element_keys(salt: u64, first: u64, stride: u64, rows: usize) -> ArrayRef {
    let position = |i: u64| first.wrapping_add(stride.wrapping_mul(i));
    Arc::new(UInt64Array::from_iter_values((0..rows as u64).map(|i| mix(salt, position(i)))))
}

/// `batch` with the element keys of positions `first`, `first + stride`, ... appended as
/// [`ELEMENT_KEY`].
pub fn with_element_keys(batch: &RecordBatch, salt: u64, first: u64, stride: u64) -> Result<RecordBatch> {
    let mut fields: Vec<Field> = batch.schema().fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(ELEMENT_KEY, DataType::UInt64, false));
    let mut columns = batch.columns().to_vec();
    columns.push(element_keys(salt, first, stride, batch.num_rows()));
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), columns, &options)
        .map_err(|e| Error::Expr(format!("adding element keys: {e}")))
}

/// The element keys of `batch`, or an error naming `func` when the runtime added none.
pub fn keys(batch: &RecordBatch, func: Func) -> Result<&[u64]> {
    let column = batch.column_by_name(ELEMENT_KEY).ok_or_else(|| {
        Error::Expr(format!(
            "{} draws random numbers keyed by element: evaluate it in a map (the runtime adds each element's key)",
            func.name()
        ))
    })?;
    Ok(column.as_primitive::<UInt64Type>().values())
}

/// The draws of one call on one element.
#[derive(Debug, Clone, Copy)]
pub struct Draws {
    stream: u64,
    next: u64,
}

impl Draws {
    /// The draws of `func` with `seed` on the element of `key`.
    pub fn new(key: u64, seed: i64, func: Func) -> Self {
        Draws { stream: mix(mix(key, seed as u64), func as u64), next: 0 }
    }

    /// The next draw, uniform in `[0, 1)`.
    pub fn uniform(&mut self) -> f64 {
        self.next += 1;
        (mix(self.stream, self.next) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// The next draw, uniform in `[lo, hi)`.
    pub fn between(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }

    /// The next draw, an integer uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.uniform() * n as f64) as usize).min(n - 1)
    }
}
