//! Operators that count elements: take, skip, shard, enumerate, take_while.
//!
//! An error is not an element: `take`, `skip`, `shard` and `enumerate` count the elements
//! they see, and each error passes through in its place without being counted (`take(n)`
//! passes the errors met before its `n`-th element, `skip(n)` those met while skipping,
//! every shard its input's errors, and `enumerate` gives an error no index). A count goes
//! on across errors, so `skip(1).skip(2)` is `skip(3)` and `take(3).take(2)` is `take(2)`
//! whatever fails, which is what lets the optimizer compose them. tf.data's `take` counts
//! the same way; its `skip` and `shard` skip through `Iterator::Skip`, which forgets the
//! elements it skipped in a call that meets an error, and its `enumerate` is a `zip` with a
//! counter, which uses an index up on a failed element.

use std::sync::Arc;

use arrow::array::{Array, Int64Array, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flumen_ir::Result;

use crate::checkpoint::{OpState, SaveMode};
use crate::kernels::function::{concat_masks, MaskFn};
use crate::operator::{BoxOperator, Operator};
use crate::resume::Resumable;
use crate::rows::RowReader;

/// `take(n)`: the first `n` elements (`None`: all).
pub struct TakeOp {
    input: RowReader,
    remaining: Option<u64>,
}

impl TakeOp {
    /// The first `count` elements of `input` (`-1`: all).
    pub fn new(input: BoxOperator, count: i64) -> Self {
        TakeOp { input: RowReader::new(input), remaining: (count >= 0).then_some(count as u64) }
    }
}

impl Operator for TakeOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        match self.remaining {
            None => self.input.next_chunk(),
            Some(0) => Ok(None),
            Some(n) => {
                let slice = self.input.next_slice(n.min(usize::MAX as u64) as usize)?;
                if let Some(s) = &slice {
                    self.remaining = Some(n - s.num_rows() as u64);
                }
                Ok(slice)
            }
        }
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        Ok(OpState::new("take").with("remaining", self.remaining)?.child(self.input.save(mode)?))
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("take")?;
        self.remaining = state.get("remaining")?;
        self.input.restore(state.take_child()?)
    }
}

/// `skip(n)`: all but the first `n` elements (`-1`: skip everything).
pub struct SkipOp {
    input: RowReader,
    to_skip: Option<u64>,
}

impl SkipOp {
    /// Skips `count` elements of `input` (`-1`: all).
    pub fn new(input: BoxOperator, count: i64) -> Self {
        SkipOp { input: RowReader::new(input), to_skip: (count >= 0).then_some(count as u64) }
    }
}

impl Operator for SkipOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        match self.to_skip {
            // Skipping everything still pulls the input, as tf.data does (side effects, errors).
            None => {
                while self.input.next_chunk()?.is_some() {}
                Ok(None)
            }
            Some(0) => self.input.next_chunk(),
            Some(n) => {
                let mut left = n;
                let skipped = self.input.skip(&mut left);
                self.to_skip = Some(left);
                skipped?;
                if left > 0 {
                    return Ok(None);
                }
                self.input.next_chunk()
            }
        }
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        Ok(OpState::new("skip").with("to_skip", self.to_skip)?.child(self.input.save(mode)?))
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("skip")?;
        self.to_skip = state.get("to_skip")?;
        self.input.restore(state.take_child()?)
    }
}

/// `shard(n, i)`: the elements whose index is `i` modulo `n`.
pub struct ShardOp {
    input: BoxOperator,
    num_shards: u64,
    index: u64,
    seen: u64,
}

impl ShardOp {
    /// Shard `index` of `num_shards` of `input`.
    pub fn new(input: BoxOperator, num_shards: u64, index: u64) -> Self {
        ShardOp { input, num_shards, index, seen: 0 }
    }
}

impl Operator for ShardOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        while let Some(chunk) = self.input.next_chunk()? {
            let n = chunk.num_rows() as u64;
            let first = (self.index + self.num_shards - self.seen % self.num_shards) % self.num_shards;
            self.seen += n;
            if self.num_shards == 1 {
                return Ok(Some(chunk));
            }
            let rows: Vec<u32> = (first..n).step_by(self.num_shards as usize).map(|r| r as u32).collect();
            if !rows.is_empty() {
                return Ok(Some(take_record_batch(&chunk, &UInt32Array::from(rows))?));
            }
        }
        Ok(None)
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        Ok(OpState::new("shard").with("seen", self.seen)?.child(self.input.save(mode)?))
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("shard")?;
        self.seen = state.get("seen")?;
        self.input.restore(state.take_child()?)
    }
}

/// `enumerate(start)`: a counter field before the element's fields, counting elements (an
/// error passes through without an index; see the module docs). The counter ends the
/// dataset when it reaches `i64::MAX`.
pub struct EnumerateOp {
    input: BoxOperator,
    next: i64,
    schema: SchemaRef,
}

impl EnumerateOp {
    /// Counts `input`'s elements from `start`; `schema` is the output schema.
    pub fn new(input: BoxOperator, start: i64, schema: SchemaRef) -> Self {
        EnumerateOp { input, next: start, schema }
    }
}

impl Operator for EnumerateOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        if self.next == i64::MAX {
            return Ok(None);
        }
        let Some(chunk) = self.input.next_chunk()? else { return Ok(None) };
        // In i128: from a negative start, `i64::MAX - next` overflows.
        let left = usize::try_from(i128::from(i64::MAX) - i128::from(self.next)).unwrap_or(usize::MAX);
        let chunk = if chunk.num_rows() > left { chunk.slice(0, left) } else { chunk };
        let n = chunk.num_rows() as i64;
        let counter = Int64Array::from_iter_values(self.next..self.next + n);
        self.next += n;
        let mut columns = vec![Arc::new(counter) as Arc<dyn Array>];
        columns.extend(chunk.columns().iter().cloned());
        Ok(Some(RecordBatch::try_new(self.schema.clone(), columns)?))
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        Ok(OpState::new("enumerate").with("next", self.next)?.child(self.input.save(mode)?))
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("enumerate")?;
        self.next = state.get("next")?;
        self.input.restore(state.take_child()?)
    }
}

/// `take_while(p)`: elements until the first for which `p` is false. A predicate that fails
/// on an element is that element's error; taking continues after it, as in tf.data.
pub struct TakeWhileOp {
    input: Resumable,
    predicate: MaskFn,
    done: bool,
}

impl TakeWhileOp {
    /// Takes from `input` while `predicate` holds.
    pub fn new(input: BoxOperator, predicate: MaskFn) -> Self {
        TakeWhileOp { input: Resumable::new(input), predicate, done: false }
    }
}

impl Operator for TakeWhileOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        while !self.done {
            let Some(chunk) = self.input.pull()? else {
                return Ok(None);
            };
            let (mask, failed) = match (self.predicate)(&chunk) {
                Ok(mask) => (mask, None),
                Err(failure) => {
                    let (done, row, error) = failure.locate(&chunk, &*self.predicate)?;
                    (concat_masks(&done), Some((row, error)))
                }
            };
            let keep = (0..mask.len()).position(|i| !mask.value(i)).unwrap_or(mask.len());
            self.done = keep < mask.len();
            if let Some((row, error)) = failed.filter(|_| !self.done) {
                // Every element before the failing one held: report it, continue after it.
                self.input.fail_at(&chunk, row, error);
            }
            if keep > 0 {
                return Ok(Some(chunk.slice(0, keep)));
            }
        }
        Ok(None)
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        Ok(OpState::new("take_while").with("done", self.done)?.child(self.input.save(mode)?))
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("take_while")?;
        self.done = state.get("done")?;
        self.input.restore(state.take_child()?)
    }
}
