//! Iterators handed to users: chunks of elements, or one element at a time.

use arrow::array::{Array, ArrayRef, FixedSizeListArray, ListArray};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flumen_ir::{ElementSpec, Error, Result};

use crate::checkpoint::replay::{PrePull, Rewind};
use crate::checkpoint::{OpState, SaveMode};
use crate::operator::{BoxOperator, Operator};

/// The output chunks of a pipeline: each `RecordBatch` row is one element.
pub struct ChunkIterator {
    root: BoxOperator,
    done: bool,
}

impl ChunkIterator {
    /// Iterates the chunks of `root`.
    pub fn new(root: BoxOperator) -> Self {
        ChunkIterator { root, done: false }
    }
}

impl ChunkIterator {
    /// The state of the iterator and its operators, between two items.
    pub fn save(&self, mode: SaveMode) -> Result<OpState> {
        Ok(OpState::new("chunks").with("done", self.done)?.child(self.root.save(mode)?))
    }

    /// Restores a state saved by [`ChunkIterator::save`] into a new iterator of the same
    /// plan.
    pub fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("chunks")?;
        self.done = state.get("done")?;
        self.root.restore(state.take_child()?)
    }
}

impl Rewind for ChunkIterator {
    fn rewind(&mut self, state: OpState) -> Result<()> {
        self.restore(state)
    }

    fn pull(&mut self) -> Result<Option<RecordBatch>> {
        self.next().transpose()
    }
}

impl Iterator for ChunkIterator {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.root.next_chunk() {
            Ok(Some(chunk)) => Some(Ok(chunk)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => Some(Err(e)),
        }
    }
}

/// The elements of a pipeline, one `RecordBatch` each: an unbatched element is a one-row
/// batch; a batched element is a batch of its `b` rows (zero-copy views of the list
/// children), as a tf.data user receives a batch of tensors. A batched element with a
/// sparse field stays one row, its fields' lists whole: a sparse tensor's entries carry
/// their element's position as their first coordinate and would not say how many rows
/// there are (the elements at the end of a batch may have no entries).
pub struct ElementIterator {
    chunks: ChunkIterator,
    current: Option<RecordBatch>,
    row: usize,
    element_schema: Option<SchemaRef>,
    /// The chunk iterator's state before `current` was pulled, and the rows between that
    /// state and `current`'s first row (for symbolic checkpoints).
    before: PrePull,
    base: usize,
}

impl ElementIterator {
    /// Iterates the elements of `root`, whose output spec is `spec`.
    pub fn new(root: BoxOperator, spec: &ElementSpec) -> Result<Self> {
        let sparse = spec.fields.iter().any(|f| f.kind == flumen_ir::FieldKind::Sparse);
        let element_schema =
            if spec.batch_dims > 0 && !sparse { Some(spec.unbatched("iter")?.arrow_schema()) } else { None };
        Ok(ElementIterator {
            chunks: ChunkIterator::new(root),
            current: None,
            row: 0,
            element_schema,
            before: PrePull::default(),
            base: 0,
        })
    }
}

impl ElementIterator {
    /// The state of the iterator and its operators, between two elements. The unread rest of
    /// the current output chunk is stored as data (full mode), or as the state before it and
    /// the elements read from it (symbolic mode, once recording: see
    /// [`replay`](crate::checkpoint::replay)).
    pub fn save(&self, mode: SaveMode) -> Result<OpState> {
        if let Some(replay) = self.before.replay(mode, self.current.is_some(), self.base + self.row)? {
            return Ok(OpState::new("elements").child(replay));
        }
        let rest = self
            .current
            .as_ref()
            .filter(|c| self.row < c.num_rows())
            .map(|c| c.slice(self.row, c.num_rows() - self.row));
        Ok(OpState::new("elements").with_chunks(rest).child(self.chunks.save(mode)?))
    }

    /// Starts recording what symbolic checkpoints need from the first element on (instead of
    /// from the first symbolic checkpoint on), so that every symbolic checkpoint holds no
    /// element; it costs one symbolic save of the operator tree per chunk.
    pub fn record_positions(&mut self) -> Result<()> {
        self.save(SaveMode::Symbolic).map(drop)
    }

    /// Restores a state saved by [`ElementIterator::save`] into a new iterator of the same
    /// plan.
    pub fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("elements")?;
        let child = state.take_child()?;
        self.row = 0;
        (self.current, self.base) = match self.before.restore(&mut self.chunks, child)? {
            Some(replayed) => replayed,
            None => (state.chunks.pop(), 0),
        };
        Ok(())
    }
}

/// Row `row` of a list column: the element's values along its outer dimension.
fn list_row(column: &ArrayRef, row: usize) -> Result<ArrayRef> {
    if let Some(l) = column.as_any().downcast_ref::<FixedSizeListArray>() {
        return Ok(l.value(row));
    }
    if let Some(l) = column.as_any().downcast_ref::<ListArray>() {
        return Ok(l.value(row));
    }
    Err(Error::execution("iter", format!("a batched field has the non-list type {}", column.data_type())))
}

impl Iterator for ElementIterator {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(chunk) = &self.current {
                if self.row < chunk.num_rows() {
                    let row = self.row;
                    self.row += 1;
                    let Some(schema) = &self.element_schema else {
                        return Some(Ok(chunk.slice(row, 1)));
                    };
                    let element = chunk
                        .columns()
                        .iter()
                        .map(|c| list_row(c, row))
                        .collect::<Result<Vec<_>>>()
                        .and_then(|cols| RecordBatch::try_new(schema.clone(), cols).map_err(Error::from));
                    return Some(element);
                }
            }
            // No current chunk while pulling: after a failed pull the state to save is the
            // iterator's own, not a replay of a chunk already read.
            self.current = None;
            let chunks = &self.chunks;
            self.before.before_pull(|| chunks.save(SaveMode::Symbolic));
            self.base = 0;
            match self.chunks.next()? {
                Ok(chunk) => {
                    self.current = Some(chunk);
                    self.row = 0;
                }
                Err(e) => return Some(Err(e)),
            }
        }
    }
}
