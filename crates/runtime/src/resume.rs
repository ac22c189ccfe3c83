//! Resuming after a failed element: how operators that work element by element keep tf.data's
//! per-element error contract while executing chunk by chunk.
//!
//! When element `row` of a chunk fails, the operator delivers the results before it, then
//! the element's error on the next pull, then continues with the rest of the chunk.

use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Result};

use crate::checkpoint::{OpState, SaveMode};
use crate::operator::{BoxOperator, Operator};

/// An operator's input, with the error of a failed element and the rest of its chunk.
pub struct Resumable {
    input: BoxOperator,
    pending: Option<RecordBatch>,
    error: Option<Error>,
}

impl Resumable {
    /// Wraps `input`.
    pub fn new(input: BoxOperator) -> Self {
        Resumable { input, pending: None, error: None }
    }

    /// What to process next: the error of a failed element, else the rest of its chunk,
    /// else the input's next chunk.
    pub fn pull(&mut self) -> Result<Option<RecordBatch>> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        match self.pending.take() {
            Some(rest) => Ok(Some(rest)),
            None => self.input.next_chunk(),
        }
    }

    /// Element `row` of `chunk` failed with `error`: report it on the next pull, then
    /// continue after it.
    pub fn fail_at(&mut self, chunk: &RecordBatch, row: usize, error: Error) {
        let n = chunk.num_rows();
        self.pending = (row + 1 < n).then(|| chunk.slice(row + 1, n - row - 1));
        self.error = Some(error);
    }

    /// The pending error and rest of a chunk (at most one chunk), and the input's state.
    pub fn save(&self, mode: SaveMode) -> Result<OpState> {
        let mut state = OpState::new("resume").with_chunks(self.pending.clone());
        if let Some(e) = &self.error {
            state = state.with_error(e);
        }
        Ok(state.child(self.input.save(mode)?))
    }

    /// Restores a state saved by [`Resumable::save`].
    pub fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("resume")?;
        self.input.restore(state.take_child()?)?;
        self.error = state.take_error();
        self.pending = state.chunks.pop();
        Ok(())
    }
}
