//! `unique`: the elements not seen before.
//!
//! Elements are compared as Arrow's row format encodes them (one byte string per element,
//! equal exactly when every field is), kept in a set that grows with the distinct elements,
//! as tf.data's does. A checkpoint holds them as one chunk.

use std::collections::HashSet;

use arrow::array::BooleanArray;
use arrow::compute::filter_record_batch;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow::row::{OwnedRow, RowConverter, SortField};
use flumen_ir::Result;

use crate::checkpoint::{OpState, SaveMode};
use crate::operator::{BoxOperator, Operator};

/// `unique()`.
pub struct UniqueOp {
    input: BoxOperator,
    converter: RowConverter,
    seen: HashSet<OwnedRow>,
    schema: SchemaRef,
}

impl UniqueOp {
    /// The first of each distinct element of `input` (output `schema`, the input's).
    pub fn new(input: BoxOperator, schema: SchemaRef) -> Result<Self> {
        let fields = schema.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect();
        Ok(UniqueOp { input, converter: RowConverter::new(fields)?, seen: HashSet::new(), schema })
    }
}

impl Operator for UniqueOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        while let Some(chunk) = self.input.next_chunk()? {
            let rows = self.converter.convert_columns(chunk.columns())?;
            let keep: BooleanArray = rows.iter().map(|row| Some(self.seen.insert(row.owned()))).collect();
            if keep.true_count() == chunk.num_rows() {
                return Ok(Some(chunk));
            }
            if keep.true_count() > 0 {
                return Ok(Some(filter_record_batch(&chunk, &keep)?));
            }
        }
        Ok(None)
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        let columns = self.converter.convert_rows(self.seen.iter().map(|r| r.row()))?;
        let seen = RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(self.seen.len())),
        )?;
        Ok(OpState::new("unique").with_chunks([seen]).child(self.input.save(mode)?))
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("unique")?;
        let seen = state.chunks.pop().ok_or_else(|| crate::checkpoint::state::mismatch("unique lacks its elements"))?;
        if seen.schema().fields() != self.schema.fields() {
            return Err(crate::checkpoint::state::mismatch("unique's saved elements have another schema"));
        }
        let rows = self.converter.convert_columns(seen.columns())?;
        self.seen = rows.iter().map(|r| r.owned()).collect();
        self.input.restore(state.take_child()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::list_kernels::testing::{drain, int_chunks, int_spec, source, strs};

    #[test]
    fn keeps_the_first_of_each_value_across_chunks_and_resumes() {
        let schema = int_spec("x").arrow_schema();
        let values = [3, 1, 3, 2, 1, 5, 2, 3, 6];
        for splits in [&[9][..], &[2, 3, 4], &[1, 1, 1, 1, 1, 1, 1, 1, 1]] {
            let mut op = UniqueOp::new(source(int_chunks("x", &values, splits)), schema.clone()).unwrap();
            assert_eq!(drain(&mut op, &schema), strs(&["3", "1", "2", "5", "6"]), "{splits:?}");
        }
        // Saved after the first chunk, a fresh operator restored from it goes on as the first.
        let mut first = UniqueOp::new(source(int_chunks("x", &values, &[4, 5])), schema.clone()).unwrap();
        first.next_chunk().unwrap();
        let state = first.save(SaveMode::Full).unwrap();
        let mut second = UniqueOp::new(source(int_chunks("x", &values, &[4, 5])), schema.clone()).unwrap();
        second.restore(state).unwrap();
        assert_eq!(drain(&mut second, &schema), strs(&["5", "6"]));
    }
}
