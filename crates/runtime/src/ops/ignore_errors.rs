//! `ignore_errors`: drop the elements whose computation failed.
//!
//! Operators report a failed element as an `Err` and continue after it when pulled again
//! (see `operator`); a source that cannot resume ends instead, so this loop terminates.
//! A cancelled iterator's error is not a failed element: it is passed on.

use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Result};

use crate::checkpoint::{OpState, SaveMode};
use crate::operator::{BoxOperator, Operator};

/// Skips the elements whose computation failed (`ignore_errors`).
pub struct IgnoreErrorsOp {
    input: BoxOperator,
}

impl IgnoreErrorsOp {
    /// Drops `input`'s errors.
    pub fn new(input: BoxOperator) -> Self {
        IgnoreErrorsOp { input }
    }
}

impl Operator for IgnoreErrorsOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            match self.input.next_chunk() {
                Ok(next) => return Ok(next),
                Err(Error::Cancelled) => return Err(Error::Cancelled),
                Err(_) => {}
            }
        }
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        Ok(OpState::new("ignore_errors").child(self.input.save(mode)?))
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        self.input.restore(state.expect("ignore_errors")?.take_child()?)
    }
}
