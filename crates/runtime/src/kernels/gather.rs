//! Rows picked from several chunks in any order, copied into one chunk: what a shuffle
//! delivers.
//!
//! Arrow's `interleave` reads the picked rows in output order. A shuffle's picks are random
//! rows of every chunk that still holds a buffered row (w1: about ten chunks of 18 columns,
//! 12 MB), so nearly every read missed the cache, and the copy took 56% of a shuffle's
//! time. Here each primitive column is read in the order the rows lie in their chunks (to
//! within a run of 64 rows, by a counting sort) and written to the output positions
//! instead: the reads go forward through memory, and the writes land in the output column,
//! which stays in the cache.

use std::sync::Arc;

use arrow::array::{downcast_primitive_array, Array, ArrayRef, ArrowPrimitiveType, AsArray, PrimitiveArray};
use arrow::compute::interleave;
use arrow::record_batch::RecordBatch;
use flumen_ir::Result;

/// The rows `picked` (each a source index and a row of that source) of `sources`, in that
/// order, as one chunk of the sources' schema.
///
/// The schema is the first source's. Panics where a pick names no source or no row of it.
pub fn gather(sources: &[&RecordBatch], picked: &[(usize, usize)]) -> Result<RecordBatch> {
    let schema = sources.first().map_or_else(|| Arc::new(arrow::datatypes::Schema::empty()), |s| s.schema());
    let columns: Vec<Vec<&ArrayRef>> =
        (0..schema.fields().len()).map(|c| sources.iter().map(|s| s.column(c)).collect()).collect();
    // Positions are kept as u32: past that, every column goes through `interleave`.
    let fits = picked.len() <= u32::MAX as usize && sources.iter().all(|s| s.num_rows() <= u32::MAX as usize);
    let in_order: Vec<bool> = columns.iter().map(|c| fits && copied_in_order(c)).collect();
    let order = in_order.contains(&true).then(|| source_order(sources, picked));
    let columns = columns
        .iter()
        .zip(in_order)
        .map(|(column, in_order)| {
            let order = order.as_ref().filter(|_| in_order);
            match order.and_then(|order| gather_primitive(column, order)) {
                Some(gathered) => Ok(gathered),
                None => {
                    let arrays: Vec<&dyn Array> = column.iter().map(|c| c.as_ref()).collect();
                    Ok(interleave(&arrays, picked)?)
                }
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let options = arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(picked.len()));
    Ok(RecordBatch::try_new_with_options(schema, columns, &options)?)
}

/// Whether a column is copied in the sources' order: primitive, of one type in every source,
/// without nulls.
fn copied_in_order(column: &[&ArrayRef]) -> bool {
    let Some(first) = column.first() else { return false };
    first.data_type().is_primitive() && column.iter().all(|c| c.data_type() == first.data_type() && c.null_count() == 0)
}

/// Rows a run of the sources' order spans: 64 values of 8 bytes are 8 cache lines, read
/// together whatever their order within the run.
const RUN: usize = 64;

/// The picks as (source, row, output position), ordered by source and by run of [`RUN`]
/// rows within it: a counting sort where the sources' runs are not many more than the
/// picks, a sort otherwise (one chunk of millions of rows, say).
fn source_order(sources: &[&RecordBatch], picked: &[(usize, usize)]) -> Vec<(u32, u32, u32)> {
    let mut order: Vec<(u32, u32, u32)> =
        picked.iter().enumerate().map(|(at, (source, row))| (*source as u32, *row as u32, at as u32)).collect();
    let mut first_run = Vec::with_capacity(sources.len() + 1);
    first_run.push(0);
    for s in sources {
        first_run.push(first_run.last().expect("pushed") + s.num_rows().div_ceil(RUN));
    }
    let runs = *first_run.last().expect("pushed");
    if runs > 4 * picked.len() {
        order.sort_unstable();
        return order;
    }
    let run = |(source, row, _): (u32, u32, u32)| first_run[source as usize] + row as usize / RUN;
    let mut starts = vec![0usize; runs + 1];
    for p in &order {
        starts[run(*p) + 1] += 1;
    }
    for r in 1..starts.len() {
        starts[r] += starts[r - 1];
    }
    let mut sorted = vec![(0, 0, 0); order.len()];
    for p in order {
        let slot = &mut starts[run(p)];
        sorted[*slot] = p;
        *slot += 1;
    }
    sorted
}

/// The values of `column` (primitive arrays of one type, without nulls) at the picks of
/// `order`, each written to its output position; `None` for a type Arrow's primitive
/// arrays do not cover.
fn gather_primitive(column: &[&ArrayRef], order: &[(u32, u32, u32)]) -> Option<ArrayRef> {
    fn typed<T: ArrowPrimitiveType>(
        first: &PrimitiveArray<T>,
        column: &[&ArrayRef],
        order: &[(u32, u32, u32)],
    ) -> ArrayRef {
        let values: Vec<&[T::Native]> = column.iter().map(|c| c.as_primitive::<T>().values().as_ref()).collect();
        let mut out = vec![T::Native::default(); order.len()];
        for &(source, row, at) in order {
            out[at as usize] = values[source as usize][row as usize];
        }
        Arc::new(PrimitiveArray::<T>::new(out.into(), None).with_data_type(first.data_type().clone()))
    }
    let first = column.first()?;
    downcast_primitive_array!(
        first => Some(typed(first, column, order)),
        _ => None
    )
}

#[cfg(test)]
mod tests {
    use arrow::array::{Decimal128Array, Float64Array, Int32Array, StringArray, TimestampMillisecondArray};
    use arrow::datatypes::Float64Type;

    use super::*;

    /// `rows` rows from `from`: an int32 column with a null at `null_at`, a float64, a
    /// timestamp with a time zone, a decimal and a string column.
    fn chunk(from: i32, rows: i32, null_at: Option<i32>) -> RecordBatch {
        let range = from..from + rows;
        let ints: Int32Array = range.clone().map(|i| (Some(i) != null_at).then_some(i)).collect();
        let floats = Float64Array::from_iter_values(range.clone().map(|i| f64::from(i) / 4.0));
        let times = TimestampMillisecondArray::from_iter_values(range.clone().map(i64::from)).with_timezone("UTC");
        let decimals =
            Decimal128Array::from_iter_values(range.clone().map(i128::from)).with_precision_and_scale(10, 2).unwrap();
        let names = StringArray::from_iter_values(range.map(|i| format!("r{i}")));
        RecordBatch::try_from_iter_with_nullable([
            ("i", Arc::new(ints) as ArrayRef, true),
            ("f", Arc::new(floats) as ArrayRef, false),
            ("t", Arc::new(times) as ArrayRef, false),
            ("d", Arc::new(decimals) as ArrayRef, false),
            ("s", Arc::new(names) as ArrayRef, false),
        ])
        .unwrap()
    }

    /// `n` picks of `sources`, drawn from a fixed LCG, none from the source at `skipped`.
    fn picks(sources: &[&RecordBatch], n: usize, skipped: usize) -> Vec<(usize, usize)> {
        let mut x: u64 = 7;
        let mut picked = vec![];
        while picked.len() < n {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let source = (x >> 40) as usize % sources.len();
            if source != skipped {
                picked.push((source, (x >> 20) as usize % sources[source].num_rows()));
            }
        }
        picked
    }

    /// Every column equals Arrow's `interleave` of the same picks, types and their
    /// parameters kept: primitive ones copied in the sources' order over sources of several
    /// runs (one a slice, one never picked), the column with a null and the strings by
    /// `interleave` itself.
    #[test]
    fn gathers_what_interleave_gives() {
        let (a, b, c, d) =
            (chunk(0, 300, None), chunk(1000, 200, Some(1017)), chunk(2000, 500, None), chunk(3000, 5, None));
        let c = c.slice(7, 400);
        let sources = [&a, &b, &c, &d];
        let picked = picks(&sources, 700, 3);
        let got = gather(&sources, &picked).unwrap();
        let expected = arrow::compute::interleave_record_batch(&sources, &picked).unwrap();
        assert_eq!(got, expected);
        assert_eq!(got.schema(), a.schema());
        assert_eq!(got.column(0).null_count(), picked.iter().filter(|p| **p == (1, 17)).count());
        let f = got.column(1).as_primitive::<Float64Type>();
        for (k, (source, row)) in picked.iter().enumerate() {
            let first = [0, 1000, 2007, 3000][*source];
            assert_eq!(f.value(k), f64::from(first + *row as i32) / 4.0);
        }
        assert_eq!(gather(&sources, &[]).unwrap().num_rows(), 0);
    }

    /// A few picks of one long chunk are sorted rather than counted over its runs, with the
    /// same result.
    #[test]
    fn few_picks_of_a_long_chunk_are_sorted() {
        let long = chunk(0, 20_000, None);
        let sources = [&long];
        let picked = picks(&sources, 30, usize::MAX);
        let order = source_order(&sources, &picked);
        assert!(order.windows(2).all(|w| w[0] < w[1]), "in the sources' order");
        let got = gather(&sources, &picked).unwrap();
        assert_eq!(got, arrow::compute::interleave_record_batch(&sources, &picked).unwrap());
    }
}
