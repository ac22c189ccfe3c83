//! The physical operator interface.
//!
//! Every physical operator is a pull iterator of chunks: Arrow `RecordBatch`es in which each
//! row is one element (a batched element is one row whose columns are lists). Element
//! semantics are tf.data's; execution is chunked.
//!
//! Invariants every operator keeps: chunks are never empty, and a chunk's schema is exactly
//! the operator's `ElementSpec::arrow_schema()`. After an `Err`, an operator may be pulled
//! again: it continues after the failed element where it can (what `ignore_errors` relies
//! on) and otherwise ends.

use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use flumen_ir::Result;
pub use flumen_sources::reader::Deferred;

use crate::checkpoint::{OpState, SaveMode};

/// A physical operator: a pull iterator of non-empty chunks of elements.
pub trait Operator: Send {
    /// The next chunk, `Ok(None)` at the end.
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>>;

    /// The operator's state now, between two pulls, with its inputs' states as children.
    fn save(&self, mode: SaveMode) -> Result<OpState>;

    /// Puts a freshly built operator (never pulled) of the same plan in the state `state`,
    /// saved by [`Operator::save`]: afterwards it produces exactly the elements and errors
    /// the saved operator would have produced next.
    fn restore(&mut self, state: OpState) -> Result<()>;

    /// Whether the operator can describe its next chunks rather than make them
    /// ([`Operator::next_deferred`]): a reader whose reader can (a `range`).
    fn defers(&self) -> bool {
        false
    }

    /// The next chunk described, for a parallel map's worker to make on its own thread
    /// ([`Deferred::make`]); `Ok(None)` at the end. It moves the operator on exactly as
    /// [`Operator::next_chunk`] does. Only for operators that [`defer`](Operator::defers).
    fn next_deferred(&mut self) -> Result<Option<Arc<dyn Deferred>>> {
        Err(flumen_ir::Error::execution("pull", "this operator makes its chunks and describes none"))
    }
}

/// An owned physical operator.
pub type BoxOperator = Box<dyn Operator>;

impl Operator for BoxOperator {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        (**self).next_chunk()
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        (**self).save(mode)
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        (**self).restore(state)
    }

    fn defers(&self) -> bool {
        (**self).defers()
    }

    fn next_deferred(&mut self) -> Result<Option<Arc<dyn Deferred>>> {
        (**self).next_deferred()
    }
}
