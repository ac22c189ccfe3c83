//! `range(start, stop, step)`: the integers of Python's `range`, as field `value` (int64).

use std::sync::Arc;

use arrow::array::Int64Array;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Result, SourceDesc};
use serde::{Deserialize, Serialize};

use crate::position::{decode, encode};
use crate::reader::{ChunkReader, Deferred, ReaderPosition};

/// Reads `start, start + step, ...` up to `stop` (exclusive), like Python's `range`.
#[derive(Debug)]
pub struct RangeReader {
    schema: SchemaRef,
    start: i64,
    /// The next value.
    next: i64,
    step: i64,
    /// How many values there are, and how many are left.
    len: u64,
    remaining: u64,
    chunk_rows: usize,
}

/// Where a [`RangeReader`] is: the values delivered, with the range they belong to (so that a
/// position of another range is refused).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RangePosition {
    start: i64,
    step: i64,
    len: u64,
    delivered: u64,
}

impl RangeReader {
    /// A reader of `range(start, stop, step)` in chunks of `chunk_rows` rows; fails when
    /// `step` is zero.
    pub fn new(start: i64, stop: i64, step: i64, chunk_rows: usize) -> Result<Self> {
        let schema = SourceDesc::Range { start, stop, step }.output_spec()?.arrow_schema();
        let len = range_len(start, stop, step)?;
        Ok(RangeReader { schema, start, next: start, step, len, remaining: len, chunk_rows: chunk_rows.max(1) })
    }
}

/// The number of values of `range(start, stop, step)`.
fn range_len(start: i64, stop: i64, step: i64) -> Result<u64> {
    if step == 0 {
        return Err(Error::plan("range", "step must not be zero"));
    }
    let (start, stop, step) = (i128::from(start), i128::from(stop), i128::from(step));
    let span = if step > 0 { stop - start } else { start - stop };
    let step = step.abs();
    // At most 2^64 - 1 values: the span of two i64.
    Ok(if span <= 0 { 0 } else { ((span + step - 1) / step) as u64 })
}

impl RangeReader {
    /// The next chunk's rows, moving the reader past them; `None` at the end.
    fn next_rows(&mut self) -> Option<RangeRows> {
        if self.remaining == 0 {
            return None;
        }
        let n = self.remaining.min(self.chunk_rows as u64) as usize;
        let rows = RangeRows { schema: self.schema.clone(), first: self.next, step: self.step, rows: n };
        self.next = self.next.wrapping_add((n as i64).wrapping_mul(self.step));
        self.remaining -= n as u64;
        Some(rows)
    }
}

/// `rows` values of a range from `first` by `step`: a chunk described ([`Deferred`]).
#[derive(Debug, Clone)]
struct RangeRows {
    schema: SchemaRef,
    first: i64,
    step: i64,
    rows: usize,
}

impl Deferred for RangeRows {
    fn num_rows(&self) -> usize {
        self.rows
    }

    fn slice(&self, offset: usize, len: usize) -> Arc<dyn Deferred> {
        let first = self.first.wrapping_add((offset as i64).wrapping_mul(self.step));
        Arc::new(RangeRows { first, rows: len.min(self.rows.saturating_sub(offset)), ..self.clone() })
    }

    fn bytes(&self) -> u64 {
        8 * self.rows as u64
    }

    fn make(&self) -> Result<RecordBatch> {
        // Every value produced lies between start and stop, so wrapping arithmetic is exact;
        // only the value after the last one may wrap, and it is never produced. Each value is
        // the last plus `step`, which vectorizes into vector adds; `first + k * step` did
        // too, but without AVX2 a 64-bit multiply is ten instructions per two values (a
        // chunk took 5 µs rather than 1.4).
        let mut values = Vec::with_capacity(self.rows);
        let mut next = self.first;
        values.extend((0..self.rows).map(|_| {
            let value = next;
            next = next.wrapping_add(self.step);
            value
        }));
        Ok(RecordBatch::try_new(self.schema.clone(), vec![Arc::new(Int64Array::from(values))])?)
    }
}

impl ChunkReader for RangeReader {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        self.next_rows().map(|rows| rows.make()).transpose()
    }

    /// A range's values are cheaper to compute than to move between cores: described, the
    /// worker that runs a parallel map's task makes them where it reads them.
    fn defers(&self) -> bool {
        true
    }

    fn next_deferred(&mut self) -> Result<Option<Arc<dyn Deferred>>> {
        Ok(self.next_rows().map(|rows| Arc::new(rows) as Arc<dyn Deferred>))
    }

    fn position(&self) -> Result<ReaderPosition> {
        let (start, step, len) = (self.start, self.step, self.len);
        encode("range", &RangePosition { start, step, len, delivered: len - self.remaining })
    }

    fn seek(&mut self, position: &ReaderPosition) -> Result<()> {
        let at: RangePosition = decode("range", position)?;
        if (at.start, at.step, at.len) != (self.start, self.step, self.len) || at.delivered > at.len {
            return Err(Error::execution(
                "seek",
                format!(
                    "{position} is not a position in the range of {} values from {} by {}",
                    self.len, self.start, self.step
                ),
            ));
        }
        // Exact as in `next_chunk`: the true value lies between start and stop.
        self.next = self.start.wrapping_add((at.delivered as i64).wrapping_mul(self.step));
        self.remaining = self.len - at.delivered;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::AsArray;
    use arrow::datatypes::Int64Type;

    use super::*;
    use crate::reader::testing::{check_resume, seek_error};
    use crate::reader::BoxReader;

    fn collect(start: i64, stop: i64, step: i64, chunk_rows: usize) -> (Vec<i64>, Vec<usize>) {
        let mut reader = RangeReader::new(start, stop, step, chunk_rows).unwrap();
        let (mut values, mut sizes) = (vec![], vec![]);
        while let Some(chunk) = reader.next_chunk().unwrap() {
            assert_eq!(chunk.schema(), reader.schema);
            assert_eq!(chunk.schema().field(0).name(), "value");
            sizes.push(chunk.num_rows());
            values.extend(chunk.column(0).as_primitive::<Int64Type>().values().iter().copied());
        }
        (values, sizes)
    }

    #[test]
    fn matches_python_range() {
        let cases: &[(i64, i64, i64)] =
            &[(0, 10, 1), (0, 10, 3), (10, 0, -1), (10, 0, -3), (-5, 5, 2), (5, -5, -4), (3, 4, 10), (0, 1, 1)];
        for &(start, stop, step) in cases {
            let mut expected = vec![];
            let mut v = start;
            while (step > 0 && v < stop) || (step < 0 && v > stop) {
                expected.push(v);
                v += step;
            }
            assert_eq!(collect(start, stop, step, 4).0, expected, "range({start}, {stop}, {step})");
        }
    }

    #[test]
    fn empty_ranges_yield_no_chunks() {
        for (start, stop, step) in [(0, 0, 1), (5, 0, 1), (0, 5, -1), (3, 3, -2)] {
            assert_eq!(collect(start, stop, step, 4), (vec![], vec![]), "range({start}, {stop}, {step})");
        }
    }

    #[test]
    fn chunks_have_at_most_chunk_rows() {
        assert_eq!(collect(0, 10, 1, 4).1, vec![4, 4, 2]);
        assert_eq!(collect(0, 3, 1, 0).1, vec![1, 1, 1]);
    }

    #[test]
    fn extreme_bounds_do_not_overflow() {
        let (values, _) = collect(i64::MAX - 2, i64::MAX, 1, 8);
        assert_eq!(values, vec![i64::MAX - 2, i64::MAX - 1]);
        let (values, _) = collect(i64::MIN + 2, i64::MIN, -1, 8);
        assert_eq!(values, vec![i64::MIN + 2, i64::MIN + 1]);
        let (values, _) = collect(i64::MIN, i64::MAX, i64::MAX, 8);
        assert_eq!(values, vec![i64::MIN, -1, i64::MAX - 1]);
        assert_eq!(range_len(i64::MIN, i64::MAX, 1).unwrap(), u64::MAX);
    }

    #[test]
    fn pulling_after_the_end_stays_at_the_end() {
        // A range reader has no error after it is made: pulling past the end gives `Ok(None)`.
        let mut reader = RangeReader::new(0, 3, 1, 2).unwrap();
        assert_eq!((0..5).filter(|_| reader.next_chunk().unwrap().is_some()).count(), 2);
    }

    #[test]
    fn positions_resume_exactly() {
        for (start, stop, step) in [(0, 10, 3), (10, -5, -4), (0, 0, 1), (i64::MAX - 2, i64::MAX, 1)] {
            check_resume(2, |rows| Box::new(RangeReader::new(start, stop, step, rows).unwrap()));
        }
    }

    #[test]
    fn a_position_in_another_range_is_an_error() {
        let mut reader = RangeReader::new(0, 10, 1, 4).unwrap();
        reader.next_chunk().unwrap();
        let position = reader.position().unwrap();
        assert_eq!(position, serde_json::json!({"reader": "range", "start": 0, "step": 1, "len": 10, "delivered": 4}));
        let open = || Box::new(RangeReader::new(0, 11, 1, 4).unwrap()) as BoxReader;
        assert!(seek_error(open, position).contains("not a position in the range"));
        let open = || Box::new(RangeReader::new(0, 10, 1, 4).unwrap()) as BoxReader;
        let past = serde_json::json!({"reader": "range", "start": 0, "step": 1, "len": 10, "delivered": 11});
        assert!(seek_error(open, past).contains("not a position in the range"));
        let memory = serde_json::json!({"reader": "memory", "rows": 10, "row": 0});
        assert!(seek_error(open, memory).contains("not a position of a range reader"));
    }

    #[test]
    fn described_chunks_and_their_slices_make_what_the_reader_reads() {
        // Near i64's ends with a negative step, so that wrapping arithmetic is exercised.
        let (start, stop, step) = (i64::MAX - 5, i64::MIN + 10, -(1 << 61));
        let mut read = RangeReader::new(start, stop, step, 3).unwrap();
        let mut described = RangeReader::new(start, stop, step, 3).unwrap();
        assert!(described.defers());
        while let Some(chunk) = read.next_chunk().unwrap() {
            let rows = described.next_deferred().unwrap().expect("as many chunks");
            assert_eq!((rows.num_rows(), rows.bytes()), (chunk.num_rows(), 8 * chunk.num_rows() as u64));
            assert_eq!(rows.make().unwrap(), chunk);
            for offset in 0..chunk.num_rows() {
                for len in 0..=chunk.num_rows() - offset {
                    assert_eq!(rows.slice(offset, len).make().unwrap(), chunk.slice(offset, len));
                }
            }
            assert_eq!(read.position().unwrap(), described.position().unwrap());
        }
        assert!(described.next_deferred().unwrap().is_none());
    }

    #[test]
    fn zero_step_is_an_error() {
        assert!(matches!(RangeReader::new(0, 10, 0, 4), Err(Error::Plan { .. })));
    }
}
