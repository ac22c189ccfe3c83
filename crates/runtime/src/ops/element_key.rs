//! Element keys under a map whose functions draw random numbers (the image augmentations):
//! each chunk gets the hidden column `flumen_ir::image::ELEMENT_KEY`, one key per element
//! mixed from the iteration's and epoch's seed salt and the element's position in the
//! map's input.
//!
//! Keys are given here, in input order, before any parallel dispatch, so an element's
//! draws do not depend on the threads, the chunking or the order tasks finish in; the
//! position and salt are saved in checkpoints, so a restored iterator draws the same.
//! Under an `element_positions` (a shard or skip below the map, as written), input element
//! `p` is keyed at position `offset + stride * p` of the dataset below them, so it draws
//! what it draws unsharded.

use arrow::record_batch::RecordBatch;
use flumen_ir::Result;
use flumen_udf::image::random::with_element_keys;

use crate::checkpoint::{OpState, SaveMode};
use crate::operator::{BoxOperator, Operator};

/// Adds element keys to its input's chunks.
pub struct ElementKeyOp {
    input: BoxOperator,
    salt: u64,
    /// Input elements keyed so far.
    next: u64,
    offset: u64,
    stride: u64,
}

impl ElementKeyOp {
    /// Keys for `input`'s elements under seed salt `salt`, at positions 0, 1, 2, ...
    pub fn new(input: BoxOperator, salt: u64) -> Self {
        ElementKeyOp { input, salt, next: 0, offset: 0, stride: 1 }
    }

    /// Keys input element `p` at position `offset + stride * p` instead.
    pub fn at_positions(self, offset: u64, stride: u64) -> Self {
        ElementKeyOp { offset, stride, ..self }
    }
}

impl Operator for ElementKeyOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        let Some(chunk) = self.input.next_chunk()? else { return Ok(None) };
        let first = self.offset.wrapping_add(self.stride.wrapping_mul(self.next));
        let keyed = with_element_keys(&chunk, self.salt, first, self.stride)?;
        self.next += chunk.num_rows() as u64;
        Ok(Some(keyed))
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        Ok(OpState::new("element_key").with("salt", self.salt)?.with("next", self.next)?.child(self.input.save(mode)?))
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("element_key")?;
        self.salt = state.get("salt")?;
        self.next = state.get("next")?;
        self.input.restore(state.take_child()?)
    }
}
