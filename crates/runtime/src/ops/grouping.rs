//! Grouping an input's elements by an int64 key, the part `group_by_window` and
//! `bucket_by_sequence_length` share: a group is complete as soon as it holds its window of
//! rows, and the groups still open at the end of the input are flushed in ascending key order
//! (tf.data keeps its groups in an ordered map).
//!
//! Groups hold row references into retained input chunks; a chunk is released once none of
//! its rows is waiting in a group.

use std::collections::{BTreeMap, HashMap, VecDeque};

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Int64Type};
use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Expr, Result};

use super::list_kernels::gather;
use crate::checkpoint::{OpState, SaveMode};
use crate::operator::BoxOperator;

/// A row of a retained chunk: `(chunk id, row)`.
pub(crate) type RowRef = (u64, usize);

/// A group's key and rows.
pub(crate) type Group = (i64, Vec<RowRef>);

/// Where grouped rows lie: the chunks holding them, and each row as `(index in those chunks,
/// row)`.
pub(crate) type RowSources = (Vec<RecordBatch>, Vec<(usize, usize)>);

/// Pulls an input's chunks and groups their rows by key, keeping the chunks alive only while
/// rows are waiting.
pub(crate) struct Grouper {
    input: BoxOperator,
    /// The int64 expression each row is grouped by, and the operator its errors name.
    key: Expr,
    op: &'static str,
    /// Whether the groups still open at the end of the input are dropped.
    drop_remainder: bool,
    /// Retained chunks and how many of their rows wait in groups.
    chunks: HashMap<u64, (RecordBatch, usize)>,
    next_id: u64,
    groups: BTreeMap<i64, Vec<RowRef>>,
    /// Completed groups (or the errors of rows that have none) not yet returned, in order.
    pending: VecDeque<Result<Vec<Group>>>,
    finished: bool,
}

impl Grouper {
    /// Groups the rows of `input` by the int64 `key` (errors name `op`); with
    /// `drop_remainder`, the groups still open at the end of the input are dropped.
    pub(crate) fn new(input: BoxOperator, key: Expr, op: &'static str, drop_remainder: bool) -> Self {
        Grouper {
            input,
            key,
            op,
            drop_remainder,
            chunks: HashMap::new(),
            next_id: 0,
            groups: BTreeMap::new(),
            pending: VecDeque::new(),
            finished: false,
        }
    }

    /// The next groups to build: those completed by a run of rows, then the ones still open
    /// at the end of the input; `None` once there are no more. `classify` gives a row's group
    /// key and window from its key (`None` when null), or the row's error, which is returned
    /// in its place among the groups.
    pub(crate) fn next_groups(
        &mut self,
        mut classify: impl FnMut(Option<i64>) -> Result<(i64, usize)>,
    ) -> Result<Option<Vec<Group>>> {
        loop {
            if let Some(groups) = self.pending.pop_front() {
                return groups.map(Some);
            }
            if self.finished {
                return Ok(None);
            }
            match self.input.next_chunk()? {
                None => {
                    self.finished = true;
                    let rest: Vec<Group> = std::mem::take(&mut self.groups).into_iter().collect();
                    if !rest.is_empty() && !self.drop_remainder {
                        self.pending.push_back(Ok(rest));
                    } else if !rest.is_empty() {
                        // Release the dropped rows' chunks.
                        self.chunks.clear();
                    }
                }
                Some(chunk) => match eval_keys(&self.key, &chunk, self.op) {
                    Ok(keys) => {
                        let keys = keys.as_primitive::<Int64Type>().clone();
                        self.feed(chunk, |row| Ok((!keys.is_null(row)).then(|| keys.value(row))), &mut classify);
                    }
                    Err(_) => {
                        // The key failed somewhere in the chunk: evaluate it element by element,
                        // so that only the failing elements are errors (tf.data's contract).
                        let (key, op, rows) = (self.key.clone(), self.op, chunk.clone());
                        let key_of = |row: usize| {
                            let keys = eval_keys(&key, &rows.slice(row, 1), op)?;
                            let keys = keys.as_primitive::<Int64Type>();
                            Ok((!keys.is_null(0)).then(|| keys.value(0)))
                        };
                        self.feed(chunk, key_of, &mut classify);
                    }
                },
            }
        }
    }

    /// Feeds one chunk's rows with their keys (`key_of(row)`, `None` when null), queueing the
    /// groups completed by a run of rows, or the error of a row whose key fails or that
    /// `classify` rejects.
    fn feed(
        &mut self,
        chunk: RecordBatch,
        key_of: impl Fn(usize) -> Result<Option<i64>>,
        mut classify: impl FnMut(Option<i64>) -> Result<(i64, usize)>,
    ) {
        let n = chunk.num_rows();
        let id = self.add_chunk(chunk);
        let mut done: Vec<Group> = Vec::new();
        for row in 0..n {
            match key_of(row).and_then(&mut classify) {
                Ok((key, window)) => {
                    if let Some(g) = self.push(key, id, row, window) {
                        done.push(g);
                    }
                }
                Err(e) => {
                    if !done.is_empty() {
                        self.pending.push_back(Ok(std::mem::take(&mut done)));
                    }
                    self.pending.push_back(Err(e));
                }
            }
        }
        if !done.is_empty() {
            self.pending.push_back(Ok(done));
        }
        self.release_if_unused(id);
    }

    /// Retains `chunk` for rows to be pushed; returns its id.
    fn add_chunk(&mut self, chunk: RecordBatch) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.chunks.insert(id, (chunk, 0));
        id
    }

    /// Drops chunk `id` if none of its rows waits in a group.
    fn release_if_unused(&mut self, id: u64) {
        if self.chunks.get(&id).is_some_and(|(_, refs)| *refs == 0) {
            self.chunks.remove(&id);
        }
    }

    /// Adds row `row` of chunk `id` to group `key`; returns the group when it reaches `window`
    /// rows (the group is then removed).
    fn push(&mut self, key: i64, id: u64, row: usize, window: usize) -> Option<Group> {
        if let Some((_, refs)) = self.chunks.get_mut(&id) {
            *refs += 1;
        }
        let group = self.groups.entry(key).or_default();
        group.push((id, row));
        if group.len() >= window {
            return self.groups.remove(&key).map(|g| (key, g));
        }
        None
    }

    /// The rows of `groups`, concatenated in order, one array per column; releases them.
    pub(crate) fn gather(&mut self, groups: &[Group], num_columns: usize) -> Result<Vec<ArrayRef>> {
        let (chunks, rows) = self.sources(groups)?;
        let mut columns = Vec::with_capacity(num_columns);
        for c in 0..num_columns {
            let arrays: Vec<&dyn Array> = chunks.iter().map(|chunk| chunk.column(c).as_ref()).collect();
            columns.push(gather(&arrays, &rows)?);
        }
        self.release(groups);
        Ok(columns)
    }

    /// Where the rows of `groups` lie, for a caller that copies them itself: the chunks that
    /// hold them, and every row of every group in order as `(index in those chunks, row)`.
    /// The rows stay retained until [`release`](Self::release).
    pub(crate) fn sources(&self, groups: &[Group]) -> Result<RowSources> {
        let mut chunks: Vec<RecordBatch> = Vec::new();
        let mut local: HashMap<u64, usize> = HashMap::new();
        let mut rows = Vec::with_capacity(groups.iter().map(|(_, g)| g.len()).sum());
        for &(id, row) in groups.iter().flat_map(|(_, g)| g) {
            let at = match local.get(&id) {
                Some(at) => *at,
                None => {
                    let (chunk, _) = self
                        .chunks
                        .get(&id)
                        .ok_or_else(|| Error::execution(self.op, "internal: a grouped row's chunk was released"))?;
                    chunks.push(chunk.clone());
                    local.insert(id, chunks.len() - 1);
                    chunks.len() - 1
                }
            };
            rows.push((at, row));
        }
        Ok((chunks, rows))
    }

    /// Lets go of the rows of `groups`, releasing chunks none of whose rows still wait.
    pub(crate) fn release(&mut self, groups: &[Group]) {
        let mut ids: Vec<u64> = Vec::new();
        for &(id, _) in groups.iter().flat_map(|(_, g)| g) {
            if let Some((_, refs)) = self.chunks.get_mut(&id) {
                *refs = refs.saturating_sub(1);
            }
            if ids.last() != Some(&id) {
                ids.push(id);
            }
        }
        for id in ids {
            self.release_if_unused(id);
        }
    }

    /// The partial groups with the chunks their rows lie in, the groups and errors waiting
    /// to be returned, and the input's state. Partial groups are data in both modes.
    pub(crate) fn save(&self, mode: SaveMode) -> Result<OpState> {
        let mut ids: Vec<u64> = self.chunks.keys().copied().collect();
        ids.sort_unstable();
        let refs: Vec<usize> = ids.iter().map(|id| self.chunks[id].1).collect();
        let groups_saved: Vec<(i64, &Vec<RowRef>)> = self.groups.iter().map(|(k, g)| (*k, g)).collect();
        let pending: Vec<Option<&Vec<Group>>> = self.pending.iter().map(|p| p.as_ref().ok()).collect();
        let mut state = OpState::new("grouper")
            .with("chunk_ids", &ids)?
            .with("refs", &refs)?
            .with("next_id", self.next_id)?
            .with("groups", &groups_saved)?
            .with("pending", &pending)?
            .with("finished", self.finished)?
            .with_chunks(ids.iter().map(|id| self.chunks[id].0.clone()));
        for e in self.pending.iter().filter_map(|p| p.as_ref().err()) {
            state = state.with_error(e);
        }
        Ok(state.child(self.input.save(mode)?))
    }

    /// Restores a state saved by [`Grouper::save`].
    pub(crate) fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("grouper")?;
        self.input.restore(state.take_child()?)?;
        let ids: Vec<u64> = state.get("chunk_ids")?;
        let refs: Vec<usize> = state.get("refs")?;
        let chunks = std::mem::take(&mut state.chunks);
        self.chunks = ids.into_iter().zip(chunks.into_iter().zip(refs)).collect();
        self.next_id = state.get("next_id")?;
        self.groups = state.get::<Vec<(i64, Vec<RowRef>)>>("groups")?.into_iter().collect();
        let mut errors = state.take_errors().into_iter();
        let pending: Vec<Option<Vec<Group>>> = state.get("pending")?;
        self.pending = pending
            .into_iter()
            .map(|p| {
                p.ok_or_else(|| errors.next().unwrap_or_else(|| crate::checkpoint::state::mismatch("grouper error")))
            })
            .collect();
        self.finished = state.get("finished")?;
        Ok(())
    }

    /// The number of retained chunks (for tests).
    #[cfg(test)]
    pub(crate) fn retained(&self) -> usize {
        self.chunks.len()
    }
}

/// Evaluates the int64 `expr` over `chunk` (one value per row).
fn eval_keys(expr: &Expr, chunk: &RecordBatch, op: &str) -> Result<ArrayRef> {
    let keys = flumen_udf::eval::evaluate(expr, chunk)?;
    let keys = arrow::compute::cast(&keys, &DataType::Int64)?;
    if keys.len() != chunk.num_rows() {
        return Err(Error::execution(
            op,
            format!("{expr} gave {} values for {} elements", keys.len(), chunk.num_rows()),
        ));
    }
    Ok(keys)
}
