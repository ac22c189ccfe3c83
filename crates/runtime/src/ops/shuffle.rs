//! `shuffle(buffer_size, seed)`: tf.data's buffered shuffle.
//!
//! The buffer holds up to `buffer_size` elements; each output picks a uniformly random
//! buffered element and its slot is refilled with the next input element (or removed once
//! the input is exhausted). Buffered elements stay inside the chunks they arrived in and are
//! referenced by `(chunk, row)`; output chunks are gathered from them ([`gather`]).
//!
//! An output chunk is `chunk_rows` picks, or fewer once it holds about [`TASK_BYTES`]: a
//! chunk of 1,024 picks of 1 MiB elements was a gigabyte copied out of a buffer that size.
//!
//! The chunks the buffer holds count against the iterator's RAM budget (the capacities of
//! the allocations they keep alive, each once: [`HeldBuffers`]), so that the producers below hold back while the buffer is large; the buffer
//! itself never waits for room, as its size is part of what the pipeline means. A buffer
//! larger than the budget leaves every producer below one chunk at a time.
//!
//! Checkpoints. Full mode stores the buffered chunks. Symbolic mode stores no element: every
//! input row has an index, and the operator keeps *marks*, the input's symbolic state taken
//! at an input chunk boundary every `buffer_size / 2` rows or so. A symbolic checkpoint holds
//! the newest mark at or before the oldest buffered row, each slot's input index relative to
//! it, and the random stream's position; a restore rewinds the input to the mark and replays
//! it up to where the saved operator had read, keeping the rows the slots name. A checkpoint
//! of `shuffle(100000)` is then about 400 KB of slot indices, whatever the elements weigh;
//! the restore reads the input again from the mark (typically `buffer_size · ln buffer_size`
//! rows back: that many rows survive in a buffer so long).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use arrow::array::{Array, UInt32Array, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use flumen_ir::Result;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::budget::{HeldBuffers, MemoryBudget};
use crate::checkpoint::rng::RngState;
use crate::checkpoint::state::mismatch;
use crate::checkpoint::{OpState, SaveMode};
use crate::kernels::gather::gather;
use crate::operator::{BoxOperator, Operator};
use crate::ops::parallel_map::TASK_BYTES;
use crate::rows::concat;

/// An input chunk some of whose rows are buffered or still to be placed.
struct Held {
    chunk: RecordBatch,
    /// Buffered rows of it.
    live: usize,
    /// The input index of its first row.
    start: u64,
    /// Its bytes per row, on average.
    row_bytes: u64,
}

/// The buffered shuffle operator.
pub struct ShuffleOp {
    input: BoxOperator,
    input_done: bool,
    buffer_size: usize,
    chunk_rows: usize,
    rng: ChaCha8Rng,
    /// Chunks that still have buffered rows (or are being placed), by id.
    chunks: BTreeMap<u64, Held>,
    next_chunk_id: u64,
    /// The buffered elements.
    buffer: Vec<(u64, u32)>,
    /// Input rows read but not yet placed in the buffer: (chunk id, next row).
    incoming: Option<(u64, usize)>,
    /// An input error met while filling an output chunk, returned on the next pull.
    error: Option<flumen_ir::Error>,
    /// Input rows pulled so far: the index of the next input chunk's first row.
    pulled: u64,
    /// Errors the input reported after its last chunk: a symbolic restore, which replays the
    /// input up to `pulled` rows, must pull them again too (else they are reported twice).
    errors_after_pulled: u64,
    /// The input's symbolic state at some chunk boundaries, by input index, oldest first.
    marks: VecDeque<(u64, OpState)>,
    mark_every: u64,
    /// Why the input could not be marked: symbolic checkpoints are then refused with it.
    mark_error: Option<String>,
    /// What the held chunks keep alive, in the iterator's budget.
    holding: HeldBuffers,
}

impl ShuffleOp {
    /// Shuffles `input` with a buffer of `buffer_size` elements, drawing from `seed`.
    pub fn new(input: BoxOperator, buffer_size: u64, seed: u64, chunk_rows: usize) -> Self {
        let buffer_size = buffer_size.min(usize::MAX as u64) as usize;
        ShuffleOp {
            input,
            input_done: false,
            buffer_size,
            chunk_rows,
            rng: ChaCha8Rng::seed_from_u64(seed),
            chunks: BTreeMap::new(),
            next_chunk_id: 0,
            buffer: Vec::new(),
            incoming: None,
            error: None,
            pulled: 0,
            errors_after_pulled: 0,
            marks: VecDeque::new(),
            mark_every: (buffer_size as u64 / 2).max(chunk_rows as u64).max(1),
            mark_error: None,
            holding: HeldBuffers::new(&Arc::new(MemoryBudget::new(u64::MAX))),
        }
    }

    /// The same shuffle counting the chunks it holds in `budget`.
    pub fn holding_in(mut self, budget: Arc<MemoryBudget>) -> Self {
        self.holding = HeldBuffers::new(&budget);
        self
    }

    /// Holds `chunk` as chunk `id`, from the input index `start`, with `live` rows buffered.
    fn hold(&mut self, id: u64, chunk: RecordBatch, start: u64, live: usize) {
        self.holding.add(&chunk);
        let row_bytes = crate::budget::slice_bytes(&chunk) / chunk.num_rows().max(1) as u64;
        self.chunks.insert(id, Held { chunk, live, start, row_bytes });
    }

    /// Lets go of every held chunk (before a restore fills them again).
    fn let_go_all(&mut self) {
        for (_, held) in std::mem::take(&mut self.chunks) {
            self.holding.remove(&held.chunk);
        }
    }

    /// The next input element, registering its chunk; `None` at the end of the input.
    fn next_input(&mut self) -> Result<Option<(u64, u32)>> {
        loop {
            if let Some((id, row)) = self.incoming {
                let held = self.chunks.get_mut(&id).expect("registered");
                if row < held.chunk.num_rows() {
                    self.incoming = Some((id, row + 1));
                    held.live += 1;
                    return Ok(Some((id, row as u32)));
                }
                self.incoming = None;
                self.release_if_dead(id);
            }
            if self.input_done {
                return Ok(None);
            }
            self.mark();
            match self.input.next_chunk().inspect_err(|_| self.errors_after_pulled += 1)? {
                Some(chunk) => self.register(chunk),
                None => self.input_done = true,
            }
        }
    }

    /// Registers a chunk just read from the input as the one being placed.
    fn register(&mut self, chunk: RecordBatch) {
        let id = self.next_chunk_id;
        self.next_chunk_id += 1;
        let rows = chunk.num_rows() as u64;
        self.hold(id, chunk, self.pulled, 0);
        self.pulled += rows;
        self.errors_after_pulled = 0;
        self.incoming = Some((id, 0));
    }

    /// Takes a mark before the next input pull when the last is `mark_every` rows old, and
    /// forgets marks no symbolic checkpoint can need any more.
    fn mark(&mut self) {
        if self.mark_error.is_some() || self.marks.back().is_some_and(|(at, _)| self.pulled - at < self.mark_every) {
            return;
        }
        match self.input.save(SaveMode::Symbolic) {
            Ok(state) => self.marks.push_back((self.pulled, state)),
            // Iteration goes on; only a symbolic checkpoint needs marks.
            Err(e) => {
                self.mark_error = Some(e.to_string());
                self.marks.clear();
                return;
            }
        }
        let oldest = self.oldest_needed();
        while self.marks.len() > 1 && self.marks[1].0 <= oldest {
            self.marks.pop_front();
        }
    }

    /// The input index of the oldest row a restore must read again.
    fn oldest_needed(&self) -> u64 {
        self.chunks.values().map(|h| h.start).min().unwrap_or(self.pulled)
    }

    fn release_if_dead(&mut self, id: u64) {
        let reading = self.incoming.is_some_and(|(c, _)| c == id);
        if !reading && self.chunks.get(&id).is_some_and(|h| h.live == 0) {
            if let Some(held) = self.chunks.remove(&id) {
                self.holding.remove(&held.chunk);
            }
        }
    }

    /// The number of input chunks held (with buffered rows, or being placed).
    #[cfg(test)]
    fn held_chunks(&self) -> usize {
        self.chunks.len()
    }

    /// The scalar parts of the state, common to both modes.
    fn base_state(&self) -> Result<OpState> {
        let mut state = OpState::new("shuffle")
            .with("input_done", self.input_done)?
            .with("pulled", self.pulled)?
            .with("errors_after_pulled", self.errors_after_pulled)?
            .with("rng", RngState::of(&self.rng))?;
        if let Some(e) = &self.error {
            state = state.with_error(e);
        }
        Ok(state)
    }

    fn save_full(&self) -> Result<OpState> {
        let ids: Vec<u64> = self.chunks.keys().copied().collect();
        let at: HashMap<u64, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
        let slots: Vec<(usize, u32)> = self.buffer.iter().map(|(id, row)| (at[id], *row)).collect();
        let starts: Vec<u64> = self.chunks.values().map(|h| h.start).collect();
        let incoming = self.incoming.map(|(id, row)| (at[&id], row));
        let mark_at: Vec<u64> = self.marks.iter().map(|(i, _)| *i).collect();
        let mut state = self
            .base_state()?
            .with("mode", SaveMode::Full)?
            .with("starts", starts)?
            .with("slots", slots)?
            .with("incoming", incoming)?
            .with("marks", mark_at)?
            .with_chunks(self.chunks.values().map(|h| h.chunk.clone()))
            .child(self.input.save(SaveMode::Full)?);
        for (_, mark) in &self.marks {
            state = state.child(mark.clone());
        }
        Ok(state)
    }

    fn save_symbolic(&self) -> Result<OpState> {
        if let Some(e) = &self.mark_error {
            return Err(flumen_ir::Error::execution("shuffle", format!("no symbolic checkpoint: {e}")));
        }
        let oldest = self.oldest_needed();
        let (mark_at, mark) = match self.marks.iter().rev().find(|(at, _)| *at <= oldest) {
            Some((at, mark)) => (*at, mark.clone()),
            // Never pulled: nothing is buffered.
            None if self.pulled == 0 => (0, self.input.save(SaveMode::Symbolic)?),
            None => return Err(flumen_ir::Error::execution("shuffle", "no input mark before the oldest buffered row")),
        };
        let index = |(id, row): (u64, u32)| self.chunks[&id].start + row as u64 - mark_at;
        let slots: Vec<u64> = self.buffer.iter().map(|s| index(*s)).collect();
        let incoming = self.incoming.map(|(id, row)| self.chunks[&id].start + row as u64);
        Ok(self
            .base_state()?
            .with("mode", SaveMode::Symbolic)?
            .with("mark", mark_at)?
            .with("incoming", incoming)?
            .with_chunks([index_chunk(&slots)?])
            .child(mark))
    }

    fn restore_full(&mut self, mut state: OpState) -> Result<()> {
        self.input.restore(state.take_child()?)?;
        let starts: Vec<u64> = state.get("starts")?;
        let chunks = std::mem::take(&mut state.chunks);
        if chunks.len() != starts.len() {
            return Err(mismatch("shuffle: the saved chunks and their starts differ in number"));
        }
        self.let_go_all();
        for (i, (chunk, start)) in chunks.into_iter().zip(starts).enumerate() {
            self.hold(i as u64, chunk, start, 0);
        }
        self.next_chunk_id = self.chunks.len() as u64;
        let slots: Vec<(u64, u32)> = state.get("slots")?;
        for (id, row) in &slots {
            let held = self.chunks.get_mut(id).filter(|h| (*row as usize) < h.chunk.num_rows());
            held.ok_or_else(|| mismatch("shuffle: a slot names no saved row"))?.live += 1;
        }
        self.buffer = slots;
        self.incoming = state.get("incoming")?;
        if let Some((id, row)) = self.incoming {
            if self.chunks.get(&id).is_none_or(|h| row > h.chunk.num_rows()) {
                return Err(mismatch("shuffle: the saved incoming row names no saved chunk"));
            }
        }
        let mark_at: Vec<u64> = state.get("marks")?;
        self.marks = mark_at.into_iter().map(|at| Ok((at, state.take_child()?))).collect::<Result<_>>()?;
        Ok(())
    }

    fn restore_symbolic(&mut self, mut state: OpState) -> Result<()> {
        let mark_at: u64 = state.get("mark")?;
        let incoming: Option<u64> = state.get("incoming")?;
        let slots = slot_indices(state.chunks.first().ok_or_else(|| mismatch("shuffle: no slot indices"))?)?;
        let mark = state.take_child()?;
        self.input.restore(mark.clone())?;
        self.marks = VecDeque::from([(mark_at, mark)]);
        // Replay the input from the mark to where the saved operator had read.
        let mut replayed: Vec<(u64, RecordBatch)> = Vec::new();
        let mut at = mark_at;
        while at < self.pulled {
            match self.input.next_chunk() {
                Ok(Some(chunk)) => {
                    let n = chunk.num_rows() as u64;
                    replayed.push((at, chunk));
                    at += n;
                }
                Ok(None) => {
                    return Err(mismatch(format!(
                        "shuffle: the input ended at row {at} while replaying to row {}",
                        self.pulled
                    )))
                }
                // Errors were reported before the checkpoint; they hold no buffer slot.
                Err(_) => continue,
            }
        }
        // The errors after the last chunk pulled were reported before the checkpoint too. A
        // replay that reads a cache the saved input was recording has none (a cache records
        // no error): what it reads instead is the input's next rows.
        for _ in 0..self.errors_after_pulled {
            match self.input.next_chunk() {
                Err(_) => {}
                Ok(Some(chunk)) => {
                    let n = chunk.num_rows() as u64;
                    replayed.push((at, chunk));
                    at += n;
                    break;
                }
                Ok(None) => {
                    self.input_done = true;
                    break;
                }
            }
        }
        let start_of = |i: usize| replayed[i].0;
        let find = |index: u64| -> Result<(usize, u32)> {
            let i = replayed
                .partition_point(|(s, _)| *s <= index)
                .checked_sub(1)
                .ok_or_else(|| mismatch("shuffle slot"))?;
            if index - start_of(i) >= replayed[i].1.num_rows() as u64 {
                return Err(mismatch("shuffle: a saved slot lies beyond the replayed rows"));
            }
            Ok((i, (index - start_of(i)) as u32))
        };
        let mut live = vec![0usize; replayed.len()];
        let mut buffer = Vec::with_capacity(slots.len());
        for s in &slots {
            let (i, row) = find(mark_at + s)?;
            live[i] += 1;
            buffer.push((i as u64, row));
        }
        // Rows read but not placed (and any the replay read past `pulled`) become one chunk
        // being placed, as the input's next rows.
        let place_from = incoming.unwrap_or(self.pulled);
        let mut pending = Vec::new();
        for (start, chunk) in &replayed {
            let end = start + chunk.num_rows() as u64;
            if end > place_from {
                let from = place_from.saturating_sub(*start) as usize;
                pending.push(chunk.slice(from, chunk.num_rows() - from));
            }
        }
        let replayed_chunks = replayed.len() as u64;
        self.let_go_all();
        for (i, ((start, chunk), live)) in replayed.into_iter().zip(live).enumerate() {
            if live > 0 {
                self.hold(i as u64, chunk, start, live);
            }
        }
        self.buffer = buffer;
        self.next_chunk_id = replayed_chunks;
        self.pulled = at;
        self.incoming = None;
        if let Some(chunk) = concat(&pending)? {
            let id = self.next_chunk_id;
            self.next_chunk_id += 1;
            self.hold(id, chunk, place_from, 0);
            self.incoming = Some((id, 0));
        }
        Ok(())
    }
}

/// Slot indices as a one-column chunk (u32 when they fit: half the bytes).
fn index_chunk(slots: &[u64]) -> Result<RecordBatch> {
    let array: Arc<dyn Array> = match slots.iter().all(|s| *s <= u32::MAX as u64) {
        true => Arc::new(UInt32Array::from_iter_values(slots.iter().map(|s| *s as u32))),
        false => Arc::new(UInt64Array::from(slots.to_vec())),
    };
    let schema = Schema::new(vec![Field::new("slot", array.data_type().clone(), false)]);
    Ok(RecordBatch::try_new(Arc::new(schema), vec![array])?)
}

fn slot_indices(chunk: &RecordBatch) -> Result<Vec<u64>> {
    let column = chunk.column(0);
    match column.data_type() {
        DataType::UInt32 => {
            Ok(column.as_any().downcast_ref::<UInt32Array>().expect("u32").values().iter().map(|v| *v as u64).collect())
        }
        DataType::UInt64 => Ok(column.as_any().downcast_ref::<UInt64Array>().expect("u64").values().to_vec()),
        other => Err(mismatch(format!("shuffle: slot indices of type {other}"))),
    }
}

impl Operator for ShuffleOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        while self.buffer.len() < self.buffer_size {
            match self.next_input()? {
                Some(e) => self.buffer.push(e),
                None => break,
            }
        }
        let mut picked: Vec<(u64, u32)> = Vec::with_capacity(self.chunk_rows.min(self.buffer.len()));
        let mut bytes = 0;
        // The draws do not depend on where chunks are cut: the order is the same either way.
        while picked.len() < self.chunk_rows && bytes < TASK_BYTES && !self.buffer.is_empty() {
            let i = self.rng.random_range(0..self.buffer.len());
            picked.push(self.buffer[i]);
            bytes += self.chunks[&self.buffer[i].0].row_bytes;
            match self.next_input() {
                Ok(Some(e)) => self.buffer[i] = e,
                Ok(None) => {
                    self.buffer.swap_remove(i);
                }
                // Deliver what was picked; the failed element is reported on the next pull
                // and its slot is refilled then.
                Err(e) => {
                    self.buffer.swap_remove(i);
                    self.error = Some(e);
                    break;
                }
            }
        }
        if picked.is_empty() {
            return Ok(None);
        }
        // The held chunks picked from are the sources, in id order.
        let held: Vec<u64> = self.chunks.keys().copied().collect();
        let at: Vec<usize> =
            picked.iter().map(|(c, _)| held.binary_search(c).expect("a picked chunk is held")).collect();
        let mut delivered = vec![0; held.len()];
        for a in &at {
            delivered[*a] += 1;
        }
        let mut source_of = vec![usize::MAX; held.len()];
        let mut sources: Vec<&RecordBatch> = Vec::new();
        for (k, h) in self.chunks.values().enumerate() {
            if delivered[k] > 0 {
                source_of[k] = sources.len();
                sources.push(&h.chunk);
            }
        }
        let indices: Vec<(usize, usize)> =
            picked.iter().zip(&at).map(|((_, r), a)| (source_of[*a], *r as usize)).collect();
        let out = gather(&sources, &indices);
        // The picks have left the buffer, delivered or not.
        for (c, n) in held.into_iter().zip(delivered).filter(|(_, n)| *n > 0) {
            self.chunks.get_mut(&c).expect("held").live -= n;
            self.release_if_dead(c);
        }
        Ok(Some(out?))
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        match mode {
            SaveMode::Full => self.save_full(),
            SaveMode::Symbolic => self.save_symbolic(),
        }
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let state = state.expect("shuffle")?;
        self.input_done = state.get("input_done")?;
        self.pulled = state.get("pulled")?;
        self.errors_after_pulled = state.get("errors_after_pulled")?;
        self.rng = state.get::<RngState>("rng")?.rng()?;
        let mut state = state;
        self.error = state.take_error();
        match state.get::<SaveMode>("mode")? {
            SaveMode::Full => self.restore_full(state),
            SaveMode::Symbolic => self.restore_symbolic(state),
        }
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::AsArray;
    use arrow::datatypes::Int64Type;

    use super::*;
    use crate::kernels::list_kernels::testing::{int_chunks, source};

    /// Every input row comes out once, and the shuffle holds only chunks that still have
    /// buffered rows: a chunk whose rows are all delivered is let go (one-row chunks, so
    /// that a held chunk per buffered row is all a leak would need to show).
    #[test]
    fn delivered_chunks_are_let_go() {
        let values: Vec<i64> = (0..2000).collect();
        let budget = Arc::new(MemoryBudget::new(u64::MAX));
        // One-row slices of one 16,000-byte array: held once, whatever the slices held.
        let all = int_chunks("x", &values, &[2000]).remove(0);
        let chunks: Vec<RecordBatch> = (0..2000).map(|i| all.slice(i, 1)).collect();
        drop(all);
        let mut shuffle = ShuffleOp::new(source(chunks), 50, 7, 64).holding_in(budget.clone());
        let mut out = Vec::new();
        while let Some(chunk) = shuffle.next_chunk().unwrap() {
            out.extend(chunk.column(0).as_primitive::<Int64Type>().values().iter().copied());
            // The buffer's 50 rows, at most one chunk each, and the chunk being placed.
            assert!(shuffle.held_chunks() <= 51, "{} chunks held", shuffle.held_chunks());
            assert!(budget.used() <= 16_000 + 64, "{} bytes counted", budget.used());
        }
        assert_eq!(shuffle.held_chunks(), 0);
        assert_eq!(budget.used(), 0);
        assert!(budget.peak() >= 16_000);
        assert_ne!(out, values, "shuffled");
        out.sort_unstable();
        assert_eq!(out, values);
    }
}
