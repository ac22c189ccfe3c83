//! `map` and `filter`: a chunk function applied to each chunk, with per-element errors.
//!
//! When a function fails on a chunk, the elements before the failing one are delivered, the
//! error is reported for exactly that element, and the next pull continues after it (see
//! `resume`). That is tf.data's per-element contract, and what lets `ignore_errors` drop
//! only the bad elements. Expressions are located by re-running them element by element;
//! closures say where they failed, so they are never called twice for one element.

use arrow::record_batch::RecordBatch;
use flumen_ir::Result;

use crate::checkpoint::{OpState, SaveMode};
use crate::kernels::function::ChunkFn;
use crate::operator::{BoxOperator, Operator};
use crate::resume::Resumable;
use crate::rows::concat;

/// Applies a [`ChunkFn`] to every chunk of its input; empty results are skipped.
pub struct MapOp {
    input: Resumable,
    func: ChunkFn,
}

impl MapOp {
    /// `func` over `input`.
    pub fn new(input: BoxOperator, func: ChunkFn) -> Self {
        MapOp { input: Resumable::new(input), func }
    }
}

impl Operator for MapOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        while let Some(chunk) = self.input.pull()? {
            let out = match (self.func)(&chunk) {
                Ok(out) => Some(out),
                Err(failure) => {
                    let (done, row, error) = failure.locate(&chunk, &*self.func)?;
                    self.input.fail_at(&chunk, row, error);
                    concat(&done)?
                }
            };
            if let Some(out) = out.filter(|o| o.num_rows() > 0) {
                return Ok(Some(out));
            }
        }
        Ok(None)
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        Ok(OpState::new("map").child(self.input.save(mode)?))
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("map")?;
        self.input.restore(state.take_child()?)
    }
}
