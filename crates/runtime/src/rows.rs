//! Row-level access to a chunk stream, for operators that count elements
//! (take, skip, batch, zip, interleave blocks, ...).

use arrow::record_batch::RecordBatch;
use flumen_ir::Result;

use crate::checkpoint::replay::PrePull;
use crate::checkpoint::{OpState, SaveMode};
use crate::operator::{BoxOperator, Operator};

/// Reads an operator's output as rows while keeping whole slices of chunks (zero-copy).
pub struct RowReader {
    input: BoxOperator,
    current: Option<RecordBatch>,
    offset: usize,
    done: bool,
    /// The input's state before `current` was pulled (for symbolic checkpoints), and the
    /// rows between that state and `current`'s first row (non-zero after a replay).
    before: PrePull,
    base: usize,
    /// Counts the chunks pulled: tells a caller holding `(generation, row)` pairs which
    /// chunk they point into.
    generation: u64,
}

impl RowReader {
    /// A reader over `input`.
    pub fn new(input: BoxOperator) -> Self {
        RowReader { input, current: None, offset: 0, done: false, before: PrePull::default(), base: 0, generation: 0 }
    }

    /// Ensures a current chunk with unread rows; `false` at the end of the input.
    fn fill(&mut self) -> Result<bool> {
        while self.current.as_ref().is_none_or(|c| self.offset >= c.num_rows()) {
            if self.done {
                return Ok(false);
            }
            // No current chunk while pulling: after a failed pull the state to save is the
            // input's own, not a replay of a chunk already read.
            self.current = None;
            self.before.before_pull(|| self.input.save(SaveMode::Symbolic));
            self.base = 0;
            match self.input.next_chunk()? {
                Some(c) => {
                    self.current = Some(c);
                    self.offset = 0;
                    self.generation += 1;
                }
                None => {
                    self.done = true;
                    self.current = None;
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// Whether rows of a pulled chunk are left to read (a read would not pull the input).
    pub fn has_rows(&self) -> bool {
        self.current.as_ref().is_some_and(|c| self.offset < c.num_rows())
    }

    /// The rows of the pulled chunk left to read (a read of up to this many would not pull
    /// the input).
    pub fn buffered_rows(&self) -> usize {
        self.current.as_ref().map_or(0, |c| c.num_rows().saturating_sub(self.offset))
    }

    /// Up to `max` next rows as one zero-copy slice of a single input chunk (so possibly
    /// fewer than `max` even before the end); `None` at the end.
    pub fn next_slice(&mut self, max: usize) -> Result<Option<RecordBatch>> {
        let Some((offset, n)) = self.next_range(max)? else { return Ok(None) };
        Ok(Some(self.current.as_ref().expect("filled").slice(offset, n)))
    }

    /// Like [`RowReader::next_slice`], but as the range `(offset, rows)` of the current
    /// chunk ([`RowReader::current`]) instead of a slice: a caller taking a few rows at a
    /// time from many readers gathers them in one pass rather than concatenating slices.
    pub fn next_range(&mut self, max: usize) -> Result<Option<(usize, usize)>> {
        if max == 0 || !self.fill()? {
            return Ok(None);
        }
        let chunk = self.current.as_ref().expect("filled");
        let n = max.min(chunk.num_rows() - self.offset);
        let offset = self.offset;
        self.offset += n;
        Ok(Some((offset, n)))
    }

    /// The chunk the last range was read from.
    pub fn current(&self) -> Option<&RecordBatch> {
        self.current.as_ref()
    }

    /// Which pulled chunk [`RowReader::current`] is (changes with every pull).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The next `n` rows as slices (fewer only at the end of the input); empty at the end.
    /// An error is returned as soon as the input fails; rows read before it are lost to the
    /// caller only if it drops them, so callers that must not lose rows use `next_slice`.
    pub fn next_rows(&mut self, n: usize) -> Result<Vec<RecordBatch>> {
        let mut out = Vec::new();
        let mut need = n;
        while need > 0 {
            match self.next_slice(need)? {
                Some(s) => {
                    need -= s.num_rows();
                    out.push(s);
                }
                None => break,
            }
        }
        Ok(out)
    }

    /// The rest of the current chunk, if any rows are buffered (no pull from the input).
    pub fn take_buffered(&mut self) -> Option<RecordBatch> {
        let chunk = self.current.take()?;
        if self.offset >= chunk.num_rows() {
            return None;
        }
        let out = chunk.slice(self.offset, chunk.num_rows() - self.offset);
        self.offset = 0;
        Some(out)
    }

    /// Skips up to `*left` rows without copying, counting them off `*left` as it goes, so
    /// that when the input fails part way the rows skipped before the error stay counted.
    /// `*left` is zero afterwards unless the input ended first.
    pub fn skip(&mut self, left: &mut u64) -> Result<()> {
        while *left > 0 && self.fill()? {
            let chunk = self.current.as_ref().expect("filled");
            let k = (*left as usize).min(chunk.num_rows() - self.offset);
            self.offset += k;
            *left -= k as u64;
        }
        Ok(())
    }

    /// True once the input has ended and nothing is buffered.
    pub fn is_exhausted(&mut self) -> Result<bool> {
        Ok(!self.fill()?)
    }
}

impl Operator for RowReader {
    /// The rest of the stream, chunk by chunk (a partly read chunk first).
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        if let Some(rest) = self.take_buffered() {
            return Ok(Some(rest));
        }
        if self.done {
            return Ok(None);
        }
        let next = self.input.next_chunk()?;
        if next.is_none() {
            self.done = true;
        }
        Ok(next)
    }

    /// The unread rest of the current chunk: as data (full mode), or as the input's state
    /// before the chunk and the rows read from it (symbolic mode, once recording).
    fn save(&self, mode: SaveMode) -> Result<OpState> {
        let state = OpState::new("rows").with("done", self.done)?;
        if let Some(replay) = self.before.replay(mode, self.current.is_some(), self.base + self.offset)? {
            return Ok(state.child(replay));
        }
        let rest = self.current.as_ref().filter(|c| self.offset < c.num_rows());
        let rest = rest.map(|c| c.slice(self.offset, c.num_rows() - self.offset));
        Ok(state.with_chunks(rest).child(self.input.save(mode)?))
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("rows")?;
        self.done = state.get("done")?;
        let child = state.take_child()?;
        self.offset = 0;
        (self.current, self.base) = match self.before.restore(&mut self.input, child)? {
            Some(replayed) => replayed,
            None => (state.chunks.pop(), 0),
        };
        self.generation += 1;
        Ok(())
    }
}

/// Concatenates slices that share a schema into one chunk (no copy for a single slice).
pub fn concat(slices: &[RecordBatch]) -> Result<Option<RecordBatch>> {
    match slices {
        [] => Ok(None),
        [one] => Ok(Some(one.clone())),
        many => Ok(Some(arrow::compute::concat_batches(&many[0].schema(), many)?)),
    }
}

/// Its input one element at a time: each pull hands out one row, and pulls the input only
/// when the rows already read are used up. Below a function that keeps state, it makes the
/// function run for exactly the elements its consumer asks for, however large the chunks
/// its input reads.
pub struct OneRow(RowReader);

impl OneRow {
    /// One row at a time of `input`.
    pub fn new(input: BoxOperator) -> Self {
        OneRow(RowReader::new(input))
    }
}

impl Operator for OneRow {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        self.0.next_slice(1)
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        self.0.save(mode)
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        self.0.restore(state)
    }
}
