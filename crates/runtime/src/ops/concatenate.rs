//! `concatenate`: every element of each input in turn.

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flumen_ir::Result;

use crate::checkpoint::{OpState, SaveMode};
use crate::conform::relabel;
use crate::operator::{BoxOperator, Operator};

/// `concatenate`: every element of each input in turn.
pub struct ConcatenateOp {
    inputs: Vec<BoxOperator>,
    current: usize,
    schema: SchemaRef,
}

impl ConcatenateOp {
    /// `inputs` one after another, chunks relabelled to `schema` (their most specific
    /// common spec).
    pub fn new(inputs: Vec<BoxOperator>, schema: SchemaRef) -> Self {
        ConcatenateOp { inputs, current: 0, schema }
    }
}

impl Operator for ConcatenateOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        while self.current < self.inputs.len() {
            match self.inputs[self.current].next_chunk()? {
                Some(chunk) => return relabel(chunk, &self.schema).map(Some),
                None => self.current += 1,
            }
        }
        Ok(None)
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        let mut state = OpState::new("concatenate").with("current", self.current)?;
        for input in &self.inputs {
            state = state.child(input.save(mode)?);
        }
        Ok(state)
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("concatenate")?;
        self.current = state.get("current")?;
        for input in &mut self.inputs {
            input.restore(state.take_child()?)?;
        }
        Ok(())
    }
}
