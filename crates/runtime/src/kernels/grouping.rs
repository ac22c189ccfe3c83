//! Grouping an input's elements by an int64 key, the part `group_by_window` and
//! `bucket_by_sequence_length` share: a group is complete as soon as it holds its window of
//! rows, and the groups still open at the end of the input are flushed in ascending key order
//! (tf.data keeps its groups in an ordered map).
//!
//! Groups hold row references into retained input chunks; a chunk is released once none of
//! its rows is waiting in a group.

use std::collections::{BTreeMap, HashMap, VecDeque};

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use arrow::datatypes::{DataType, Int64Type};
use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Expr, Result};

use super::list_kernels::gather;
use crate::checkpoint::{OpState, SaveMode};
use crate::kernels::function::{concat_masks, MaskFn};
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
    /// The predicate of a filter fused into the grouping: rows it drops are never grouped,
    /// so the filter does not copy the rows it keeps.
    keep: Option<MaskFn>,
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
            keep: None,
        }
    }

    /// Groups only the rows `keep` holds true for, as a filter below would (see
    /// `crate::stage`); all of them with `None`.
    pub(crate) fn keeping(mut self, keep: Option<MaskFn>) -> Self {
        self.keep = keep;
        self
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
                Some(chunk) => self.take(chunk, &mut classify),
            }
        }
    }

    /// Feeds the rows of `chunk` that the filter keeps (all of them without one). A row the
    /// filter fails on is an error in its place, and the rows after it are filtered on; a
    /// chunk the filter fails on as a whole is one error, as the filter operator reports it.
    fn take(&mut self, chunk: RecordBatch, classify: &mut impl FnMut(Option<i64>) -> Result<(i64, usize)>) {
        let n = chunk.num_rows();
        let id = self.add_chunk(chunk.clone());
        let mut start = 0;
        while start < n {
            let rows = chunk.slice(start, n - start);
            let (mask, failed) = match &self.keep {
                None => (None, None),
                Some(keep) => match keep(&rows) {
                    Ok(mask) => (Some(mask), None),
                    Err(failure) => match failure.locate(&rows, &**keep) {
                        Ok((done, row, error)) => (Some(concat_masks(&done)), Some((row, error))),
                        Err(error) => {
                            self.pending.push_back(Err(error));
                            break;
                        }
                    },
                },
            };
            let len = failed.as_ref().map_or(rows.num_rows(), |(row, _)| *row);
            if let Err(error) = self.feed(id, &rows.slice(0, len), start, mask.as_ref(), classify) {
                self.pending.push_back(Err(error));
                break;
            }
            let Some((row, error)) = failed else { break };
            self.pending.push_back(Err(error));
            start += row + 1;
        }
        self.release_if_unused(id);
    }

    /// Feeds `rows` (rows `start..` of retained chunk `id`) that `mask` keeps (all without
    /// one) with their keys, queueing the groups completed by a run of rows, or the error of
    /// a row whose key fails or that `classify` rejects. Keys are evaluated over all of
    /// `rows` at once; where that fails, element by element over the kept rows only, so that
    /// a row the filter drops is never an error.
    fn feed(
        &mut self,
        id: u64,
        rows: &RecordBatch,
        start: usize,
        mask: Option<&BooleanArray>,
        classify: &mut impl FnMut(Option<i64>) -> Result<(i64, usize)>,
    ) -> Result<()> {
        let n = rows.num_rows();
        if mask.is_some_and(|m| m.len() < n) {
            return Err(Error::execution(self.op, "internal: the filter gave fewer values than elements"));
        }
        let kept = |row: usize| mask.is_none_or(|m| m.is_valid(row) && m.value(row));
        let keys = eval_keys(&self.key, rows, self.op).ok().map(|k| k.as_primitive::<Int64Type>().clone());
        let (key, op) = (&self.key, self.op);
        let key_of = |row: usize| -> Result<Option<i64>> {
            match &keys {
                Some(keys) => Ok((!keys.is_null(row)).then(|| keys.value(row))),
                None => {
                    // The key failed somewhere in the chunk: evaluate it element by element,
                    // so that only the failing elements are errors (tf.data's contract).
                    let keys = eval_keys(key, &rows.slice(row, 1), op)?;
                    let keys = keys.as_primitive::<Int64Type>();
                    Ok((!keys.is_null(0)).then(|| keys.value(0)))
                }
            }
        };
        let mut done: Vec<Group> = Vec::new();
        let mut pushed = 0;
        for row in (0..n).filter(|&row| kept(row)) {
            match key_of(row).and_then(&mut *classify) {
                Ok((key, window)) => {
                    pushed += 1;
                    let group = self.groups.entry(key).or_default();
                    group.push((id, start + row));
                    if group.len() >= window {
                        done.extend(self.groups.remove(&key).map(|g| (key, g)));
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
        if let Some((_, refs)) = self.chunks.get_mut(&id) {
            *refs += pushed;
        }
        if !done.is_empty() {
            self.pending.push_back(Ok(done));
        }
        Ok(())
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
        // Consecutive rows mostly lie in one chunk: its index is looked up once per run.
        let mut last: Option<(u64, usize)> = None;
        for &(id, row) in groups.iter().flat_map(|(_, g)| g) {
            let at = match last {
                Some((last_id, at)) if last_id == id => at,
                _ => match local.get(&id) {
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
                },
            };
            last = Some((id, at));
            rows.push((at, row));
        }
        Ok((chunks, rows))
    }

    /// Lets go of the rows of `groups`, releasing chunks none of whose rows still wait.
    pub(crate) fn release(&mut self, groups: &[Group]) {
        let mut runs: Vec<(u64, usize)> = Vec::new();
        for &(id, _) in groups.iter().flat_map(|(_, g)| g) {
            match runs.last_mut() {
                Some((last, count)) if *last == id => *count += 1,
                _ => runs.push((id, 1)),
            }
        }
        for (id, count) in runs {
            if let Some((_, refs)) = self.chunks.get_mut(&id) {
                *refs = refs.saturating_sub(count);
            }
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
    let keys = flumen_udf::eval::evaluate_with_batch_dims(expr, chunk, 0).map_err(|e| e.in_data_of(op))?;
    let keys = arrow::compute::cast(&keys, &DataType::Int64)?;
    if keys.len() != chunk.num_rows() {
        return Err(Error::execution(
            op,
            format!("{expr} gave {} values for {} elements", keys.len(), chunk.num_rows()),
        ));
    }
    Ok(keys)
}
