//! Resuming after a failed element: how operators that work element by element keep tf.data's
//! per-element error contract while executing chunk by chunk.
//!
//! When element `row` of a chunk fails, the operator delivers the results before it, then
//! the element's error on the next pull, then continues with the rest of the chunk.

use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Result};

use crate::checkpoint::replay::PrePull;
use crate::checkpoint::{OpState, SaveMode};
use crate::operator::{BoxOperator, Operator};

/// An operator's input, with the error of a failed element and the rest of its chunk.
pub struct Resumable {
    input: BoxOperator,
    pending: Option<RecordBatch>,
    error: Option<Error>,
    /// The input's state before the chunk `pending` is the rest of, and the rows of that
    /// chunk before `pending` (for symbolic checkpoints).
    before: PrePull,
    pending_from: usize,
    /// Rows of the chunk being processed that precede it (set when it is a pending rest).
    current_from: usize,
}

impl Resumable {
    /// Wraps `input`.
    pub fn new(input: BoxOperator) -> Self {
        Resumable { input, pending: None, error: None, before: PrePull::default(), pending_from: 0, current_from: 0 }
    }

    /// What to process next: the error of a failed element, else the rest of its chunk,
    /// else the input's next chunk.
    pub fn pull(&mut self) -> Result<Option<RecordBatch>> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        match self.pending.take() {
            Some(rest) => {
                self.current_from = self.pending_from;
                Ok(Some(rest))
            }
            None => {
                self.before.before_pull(|| self.input.save(SaveMode::Symbolic));
                self.current_from = 0;
                self.input.next_chunk()
            }
        }
    }

    /// Element `row` of `chunk` failed with `error`: report it on the next pull, then
    /// continue after it.
    pub fn fail_at(&mut self, chunk: &RecordBatch, row: usize, error: Error) {
        let n = chunk.num_rows();
        self.pending = (row + 1 < n).then(|| chunk.slice(row + 1, n - row - 1));
        self.pending_from = self.current_from + row + 1;
        self.error = Some(error);
    }

    /// The pending error, the rest of its chunk (as data, or in symbolic mode once recording
    /// as the input's state before that chunk and the rows to skip), and the input's state.
    pub fn save(&self, mode: SaveMode) -> Result<OpState> {
        let mut state = OpState::new("resume");
        if let Some(e) = &self.error {
            state = state.with_error(e);
        }
        if let Some(replay) = self.before.replay(mode, self.pending.is_some(), self.pending_from)? {
            return Ok(state.child(replay));
        }
        Ok(state.with_chunks(self.pending.clone()).child(self.input.save(mode)?))
    }

    /// Restores a state saved by [`Resumable::save`].
    pub fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("resume")?;
        self.error = state.take_error();
        let child = state.take_child()?;
        (self.pending, self.pending_from) = match self.before.restore(&mut self.input, child)? {
            Some(replayed) => replayed,
            None => (state.chunks.pop(), 0),
        };
        Ok(())
    }
}
