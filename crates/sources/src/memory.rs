//! Arrow data held in memory.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Location, Result};
use serde::{Deserialize, Serialize};

use crate::conform::with_schema;
use crate::position::{decode, encode};
use crate::reader::{ChunkReader, ReaderPosition};

/// Where a [`MemoryReader`] is: the rows delivered (a bad batch's rows count as delivered
/// with its error), out of `rows`. Rows rather than a batch index, so that a position holds
/// when the data is cut into other chunks (a list of files is cut by the chunk size).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemoryPosition {
    rows: usize,
    row: usize,
}

/// Reads in-memory batches in order, skipping the empty ones.
#[derive(Debug)]
pub struct MemoryReader {
    batches: Arc<Vec<RecordBatch>>,
    schema: SchemaRef,
    /// The index of the next batch, and the rows of it already delivered (after a seek).
    next: usize,
    skip: usize,
    /// The rows delivered, and the rows of all batches.
    row: usize,
    rows: usize,
}

impl MemoryReader {
    /// A reader of `batches`, each yielded with exactly `schema` (their column types must be
    /// those of `schema`; field names, nullability and metadata are taken from it).
    pub fn new(batches: Arc<Vec<RecordBatch>>, schema: SchemaRef) -> Self {
        let rows = batches.iter().map(RecordBatch::num_rows).sum();
        MemoryReader { batches, schema, next: 0, skip: 0, row: 0, rows }
    }
}

impl ChunkReader for MemoryReader {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        while let Some(batch) = self.batches.get(self.next) {
            let index = self.next;
            let skip = std::mem::take(&mut self.skip);
            let rows = batch.num_rows() - skip;
            self.next += 1;
            self.row += rows;
            if rows == 0 {
                continue;
            }
            let batch = batch.slice(skip, rows);
            if batch.schema_ref() == &self.schema {
                return Ok(Some(batch));
            }
            return with_schema(self.schema.clone(), batch.columns().to_vec(), rows)
                .map(Some)
                .map_err(|e| Error::data(Location::new("in_memory", format!("batch {index}")), e.to_string()));
        }
        Ok(None)
    }

    fn position(&self) -> Result<ReaderPosition> {
        encode("memory", &MemoryPosition { rows: self.rows, row: self.row })
    }

    fn seek(&mut self, position: &ReaderPosition) -> Result<()> {
        let at: MemoryPosition = decode("memory", position)?;
        if at.rows != self.rows || at.row > at.rows {
            return Err(Error::execution(
                "seek",
                format!("{position} is not a position in in-memory data of {} rows", self.rows),
            ));
        }
        // The batch that holds row `at.row`, past the empty ones; none at the end.
        let (mut next, mut first) = (0, 0);
        while let Some(batch) = self.batches.get(next) {
            if at.row < first + batch.num_rows() {
                break;
            }
            first += batch.num_rows();
            next += 1;
        }
        (self.next, self.skip, self.row) = (next, at.row - first, at.row);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{AsArray, Int32Array};
    use arrow::datatypes::{DataType, Field, Int32Type, Schema};

    use super::*;
    use crate::reader::testing::{check_resume, seek_error, Outcome};
    use crate::reader::BoxReader;

    fn batch(schema: &SchemaRef, values: Vec<i32>) -> RecordBatch {
        RecordBatch::try_new(schema.clone(), vec![Arc::new(Int32Array::from(values))]).unwrap()
    }

    #[test]
    fn yields_non_empty_batches_in_order() {
        let file_schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int32, false)]));
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int32, true)]));
        let batches = vec![
            batch(&file_schema, vec![]),
            batch(&file_schema, vec![1, 2]),
            batch(&schema, vec![]),
            batch(&schema, vec![3]),
        ];
        let mut reader = MemoryReader::new(Arc::new(batches), schema.clone());
        let mut values = vec![];
        while let Some(chunk) = reader.next_chunk().unwrap() {
            assert_eq!(chunk.schema(), schema);
            assert!(chunk.num_rows() > 0);
            values.extend(chunk.column(0).as_primitive::<Int32Type>().values().iter().copied());
        }
        assert_eq!(values, vec![1, 2, 3]);
        assert!(reader.next_chunk().unwrap().is_none());
    }

    #[test]
    fn pulling_after_a_bad_batch_reads_the_next_one() {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int32, true)]));
        let other = Arc::new(Schema::new(vec![Field::new("x", DataType::Utf8, true)]));
        let bad = RecordBatch::try_new(other, vec![Arc::new(arrow::array::StringArray::from(vec!["a"]))]).unwrap();
        let batches = vec![batch(&schema, vec![1]), bad, batch(&schema, vec![2])];
        let mut reader = MemoryReader::new(Arc::new(batches), schema);
        assert_eq!(reader.next_chunk().unwrap().unwrap().num_rows(), 1);
        assert!(reader.next_chunk().unwrap_err().to_string().contains("batch 1"));
        assert_eq!(reader.next_chunk().unwrap().unwrap().column(0).as_primitive::<Int32Type>().value(0), 2);
        assert!(reader.next_chunk().unwrap().is_none());
    }

    #[test]
    fn positions_resume_exactly() {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int32, true)]));
        let other = Arc::new(Schema::new(vec![Field::new("x", DataType::Utf8, true)]));
        let bad = RecordBatch::try_new(other, vec![Arc::new(arrow::array::StringArray::from(vec!["a"]))]).unwrap();
        let batches = Arc::new(vec![
            batch(&schema, vec![1, 2]),
            batch(&schema, vec![]),
            bad,
            batch(&schema, vec![3]),
            batch(&schema, vec![]),
        ]);
        let outcomes = check_resume(1, |_| Box::new(MemoryReader::new(batches.clone(), schema.clone())));
        assert!(matches!(outcomes.as_slice(), [Outcome::Rows(_), Outcome::Error(_), Outcome::Rows(_)]));
        let open = || Box::new(MemoryReader::new(batches.clone(), schema.clone())) as BoxReader;
        let position = serde_json::json!({"reader": "memory", "rows": 5, "row": 0});
        assert!(seek_error(open, position).contains("not a position in in-memory data of 4 rows"));
        let position = serde_json::json!({"reader": "memory", "rows": 4, "row": 5});
        assert!(seek_error(open, position).contains("not a position in in-memory data of 4 rows"));
    }

    #[test]
    fn a_batch_of_another_type_is_an_error() {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true)]));
        let other = Arc::new(Schema::new(vec![Field::new("x", DataType::Int32, true)]));
        let mut reader = MemoryReader::new(Arc::new(vec![batch(&other, vec![1])]), schema);
        let err = reader.next_chunk().unwrap_err();
        assert!(err.to_string().contains("batch 0"), "{err}");
        assert!(reader.next_chunk().unwrap().is_none());
    }
}
