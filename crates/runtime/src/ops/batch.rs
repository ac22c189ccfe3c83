//! `batch(b)`: groups of `b` consecutive elements become one element whose fields gain a
//! leading dimension (`FixedSizeList(b)` with `drop_remainder`, `List` otherwise).
//!
//! Zero-copy: the whole batches inside one input chunk become one output chunk whose list
//! children are slices of the input columns; only a batch that straddles input chunks is
//! concatenated.
//!
//! The rows of a batch that straddles input chunks wait in the batcher until it is whole;
//! the chunks they keep alive count against the iterator's RAM budget meanwhile.
//!
//! Input errors, as in tf.data's `batch_dataset_op.cc`: the error is returned at once and
//! the elements already gathered for the batch it interrupts are discarded; the next batch
//! starts after the failed element. Batches completed before it are delivered.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Result};

use crate::budget::{HeldBuffers, MemoryBudget};
use crate::checkpoint::{OpState, SaveMode};
use crate::conform::make_batch;
use crate::kernels::list_kernels::{uniform_runs, wrap};
use crate::operator::{BoxOperator, Operator};
use crate::rows::{concat, RowReader};

/// Cuts an input stream into rows to batch: each returned chunk holds consecutive whole
/// batches of `batch_size` rows, or (at the end of the input, unless `drop_remainder`) the
/// remainder, fewer than `batch_size` rows forming one last batch.
pub(crate) struct Batcher {
    reader: RowReader,
    batch_size: usize,
    drop_remainder: bool,
    /// Whether an input error takes a slot of its batch, which is then that error (`window`'s
    /// rule), rather than ending the batch at once and discarding its rows (`batch`'s).
    error_slots: bool,
    pending: Vec<RecordBatch>,
    /// The slots of the incomplete batch that are filled (rows in `pending`, or errors).
    pending_rows: usize,
    /// The first error of the incomplete batch (`error_slots` only).
    failed: Option<Error>,
    /// For symbolic checkpoints, once asked for one: the reader's state before the slice the
    /// incomplete batch began in, and the rows of that slice before it.
    tracking: std::cell::Cell<bool>,
    partial_start: Option<(OpState, usize)>,
    /// Where the pending rows' chunks are counted, and what they keep alive there.
    budget: Option<Arc<MemoryBudget>>,
    pending_held: Option<HeldBuffers>,
}

impl Batcher {
    /// A batcher of `input` by `batch_size` (> 0).
    pub(crate) fn new(input: BoxOperator, batch_size: u64, drop_remainder: bool) -> Self {
        Batcher {
            reader: RowReader::new(input),
            batch_size: usize::try_from(batch_size).unwrap_or(usize::MAX).max(1),
            drop_remainder,
            error_slots: false,
            pending: Vec::new(),
            pending_rows: 0,
            failed: None,
            tracking: std::cell::Cell::new(false),
            partial_start: None,
            budget: None,
            pending_held: None,
        }
    }

    /// A batcher of `input` into windows of `size` (> 0) by `window`'s rule: an input error
    /// takes a slot of its window, which is returned as that error.
    pub(crate) fn windows(input: BoxOperator, size: u64, drop_remainder: bool) -> Self {
        Batcher { error_slots: true, ..Batcher::new(input, size, drop_remainder) }
    }

    /// The batch size.
    pub(crate) fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// The next rows: a non-empty chunk of whole batches (zero-copy slice of one input chunk,
    /// or one batch concatenated across chunk boundaries), or the last partial batch;
    /// `None` at the end.
    pub(crate) fn next_rows(&mut self) -> Result<Option<RecordBatch>> {
        let rows = self.gather();
        self.count_pending();
        rows
    }

    /// Counts what the pending rows keep alive (whole allocations: a slice keeps them all).
    fn count_pending(&mut self) {
        self.pending_held = None;
        if let (Some(budget), false) = (&self.budget, self.pending.is_empty()) {
            let mut held = HeldBuffers::new(budget);
            self.pending.iter().for_each(|c| held.add(c));
            self.pending_held = Some(held);
        }
    }

    /// [`Batcher::next_rows`], before the pending rows are counted.
    fn gather(&mut self) -> Result<Option<RecordBatch>> {
        let b = self.batch_size;
        loop {
            if self.pending_rows > 0 {
                match self.reader.next_slice(b - self.pending_rows) {
                    Err(e) => {
                        if !self.fail(e)? {
                            return self.take_pending();
                        }
                    }
                    Ok(Some(s)) => {
                        self.pending_rows += s.num_rows();
                        if self.failed.is_none() {
                            self.pending.push(s);
                        }
                        if self.pending_rows == b {
                            return self.take_pending();
                        }
                    }
                    Ok(None) => {
                        if self.drop_remainder {
                            self.pending.clear();
                            self.pending_rows = 0;
                            self.failed = None;
                            return Ok(None);
                        }
                        return self.take_pending();
                    }
                }
            } else {
                let start = match self.tracking.get() {
                    true => self.reader.save(SaveMode::Symbolic).ok(),
                    false => None,
                };
                let s = match self.reader.next_slice(usize::MAX) {
                    Ok(Some(s)) => s,
                    Ok(None) => return Ok(None),
                    Err(e) => {
                        if !self.fail(e)? {
                            return self.take_pending();
                        }
                        continue;
                    }
                };
                let n = s.num_rows();
                let whole = n / b * b;
                if whole < n {
                    self.pending.push(s.slice(whole, n - whole));
                    self.pending_rows = n - whole;
                    self.partial_start = start.map(|state| (state, whole));
                }
                if whole > 0 {
                    return Ok(Some(s.slice(0, whole)));
                }
            }
        }
    }

    /// An input error in the incomplete batch. By `batch`'s rule the batch's rows are
    /// discarded and the error returned. By `window`'s, it takes a slot (only the first error
    /// is kept, its rows are dropped); `Ok(false)` once the batch is full.
    fn fail(&mut self, e: Error) -> Result<bool> {
        self.pending.clear();
        if !self.error_slots {
            self.pending_rows = 0;
            return Err(e);
        }
        self.failed.get_or_insert(e);
        self.pending_rows += 1;
        Ok(self.pending_rows < self.batch_size)
    }

    /// The incomplete batch and the input. Its rows are data (full mode), or in symbolic mode
    /// (once recording) the reader's state where the batch began and the rows to skip there.
    pub(crate) fn save(&self, mode: SaveMode) -> Result<OpState> {
        let mut state = OpState::new("batcher").with("pending_rows", self.pending_rows)?;
        if let Some(e) = &self.failed {
            state = state.with_error(e);
        }
        if mode == SaveMode::Symbolic {
            self.tracking.set(true);
            if let (Some((start, skip)), false) = (&self.partial_start, self.pending.is_empty()) {
                return Ok(state.with("partial_skip", skip)?.child(start.clone()));
            }
        }
        Ok(state.with_chunks(self.pending.clone()).child(self.reader.save(mode)?))
    }

    /// Restores a state saved by [`Batcher::save`].
    pub(crate) fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("batcher")?;
        self.pending_rows = state.get("pending_rows")?;
        self.failed = state.take_error();
        let child = state.take_child()?;
        match state.fields.contains_key("partial_skip").then(|| state.get::<usize>("partial_skip")).transpose()? {
            Some(skip) => {
                let start = child;
                self.reader.restore(start.clone())?;
                let mut left = skip as u64;
                self.reader.skip(&mut left)?;
                if left > 0 {
                    return Err(crate::checkpoint::state::mismatch("batch: the input ended before the saved batch"));
                }
                self.pending = self.reader.next_rows(self.pending_rows)?;
                if self.pending.iter().map(|p| p.num_rows()).sum::<usize>() != self.pending_rows {
                    return Err(crate::checkpoint::state::mismatch("batch: the input ended inside the saved batch"));
                }
                self.partial_start = Some((start, skip));
                self.tracking.set(true);
            }
            None => {
                self.reader.restore(child)?;
                self.pending = std::mem::take(&mut state.chunks);
            }
        }
        self.count_pending();
        Ok(())
    }

    /// The incomplete batch's rows, or its error; it is then empty.
    fn take_pending(&mut self) -> Result<Option<RecordBatch>> {
        self.pending_rows = 0;
        if let Some(e) = self.failed.take() {
            self.pending.clear();
            return Err(e);
        }
        let out = concat(&self.pending);
        self.pending.clear();
        out
    }
}

/// `batch(batch_size, drop_remainder)`.
pub struct BatchOp {
    batcher: Batcher,
    schema: SchemaRef,
}

impl BatchOp {
    /// Batches `input` by `batch_size` (> 0); `schema` is the output schema.
    pub fn new(input: BoxOperator, batch_size: u64, drop_remainder: bool, schema: SchemaRef) -> Self {
        BatchOp { batcher: Batcher::new(input, batch_size, drop_remainder), schema }
    }

    /// The same batch counting the rows it holds between pulls in `budget`.
    pub fn holding_in(mut self, budget: Arc<MemoryBudget>) -> Self {
        self.batcher.budget = Some(budget);
        self
    }

    /// `window(size, shift = size)` of `input`: like `batch`, but an input error takes a slot
    /// of its window, which is returned as that error.
    pub(crate) fn windows(input: BoxOperator, size: u64, drop_remainder: bool, schema: SchemaRef) -> Self {
        BatchOp { batcher: Batcher::windows(input, size, drop_remainder), schema }
    }
}

impl Operator for BatchOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        let Some(rows) = self.batcher.next_rows()? else {
            return Ok(None);
        };
        let runs = uniform_runs(rows.num_rows(), self.batcher.batch_size());
        let columns = self
            .schema
            .fields()
            .iter()
            .zip(rows.columns())
            .map(|(f, c)| wrap(f.data_type(), c.clone(), &runs))
            .collect::<Result<Vec<_>>>()?;
        let n = runs.iter().map(|r| r.count).sum();
        make_batch(&self.schema, columns, n).map(Some)
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        Ok(OpState::new("batch").child(self.batcher.save(mode)?))
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("batch")?;
        self.batcher.restore(state.take_child()?)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Arc;

    use arrow::array::{ArrayRef, AsArray, StringArray};
    use arrow::datatypes::Int64Type;
    use flumen_ir::{DType, ElementSpec, Error, FieldSpec, Op};

    use super::*;
    use crate::kernels::list_kernels::testing::{chunk, collect, int_chunks, int_spec, rows, source, strs, VecOp};

    fn batch_op(chunks: Vec<RecordBatch>, b: u64, drop: bool) -> (BatchOp, SchemaRef) {
        let op = Op::Batch {
            batch_size: b,
            drop_remainder: drop,
            num_parallel_calls: Default::default(),
            deterministic: None,
        };
        let schema = op.output_spec(&[&int_spec("x")]).unwrap().arrow_schema();
        (BatchOp::new(source(chunks), b, drop, schema.clone()), schema)
    }

    #[test]
    fn keeps_remainder_across_awkward_chunks() {
        let values: Vec<i64> = (0..9).collect();
        let (mut op, schema) = batch_op(int_chunks("x", &values, &[3, 5, 1]), 4, false);
        let out = collect(&mut op, &schema).unwrap();
        assert_eq!(rows(&out, "x"), strs(&["[0, 1, 2, 3]", "[4, 5, 6, 7]", "[8]"]));
    }

    #[test]
    fn rows_waiting_for_their_batch_count_in_the_budget() {
        let values: Vec<i64> = (0..9).collect();
        let chunks = int_chunks("x", &values, &[5, 4]);
        let first = chunks[0].column(0).to_data().buffers()[0].capacity() as u64;
        let (op, _) = batch_op(chunks, 4, false);
        let budget = Arc::new(MemoryBudget::new(u64::MAX));
        let mut op = op.holding_in(budget.clone());
        // [0..3]; row 4 waits for its batch, keeping the first chunk's values alive.
        op.next_chunk().unwrap().unwrap();
        assert_eq!(budget.used(), first);
        // [4..7]; row 8 is read with the end of the input and batched at once.
        op.next_chunk().unwrap().unwrap();
        assert_eq!(budget.used(), 0);
        op.next_chunk().unwrap().unwrap();
        assert_eq!(budget.used(), 0);
        assert!(op.next_chunk().unwrap().is_none());
    }

    #[test]
    fn drops_remainder() {
        let values: Vec<i64> = (0..9).collect();
        let (mut op, schema) = batch_op(int_chunks("x", &values, &[3, 5, 1]), 4, true);
        let out = collect(&mut op, &schema).unwrap();
        assert_eq!(rows(&out, "x"), strs(&["[0, 1, 2, 3]", "[4, 5, 6, 7]"]));
        assert!(matches!(schema.field(0).data_type(), arrow::datatypes::DataType::FixedSizeList(_, 4)));
        let (mut op, schema) = batch_op(int_chunks("x", &[1, 2], &[1, 1]), 3, true);
        assert!(collect(&mut op, &schema).unwrap().is_empty());
    }

    #[test]
    fn batch_of_one_and_batch_larger_than_input() {
        let (mut op, schema) = batch_op(int_chunks("x", &[5, 6, 7], &[2, 1]), 1, false);
        assert_eq!(rows(&collect(&mut op, &schema).unwrap(), "x"), strs(&["[5]", "[6]", "[7]"]));
        let (mut op, schema) = batch_op(int_chunks("x", &[5, 6, 7], &[2, 1]), 10, false);
        assert_eq!(rows(&collect(&mut op, &schema).unwrap(), "x"), strs(&["[5, 6, 7]"]));
    }

    #[test]
    fn in_chunk_batches_are_zero_copy() {
        let values: Vec<i64> = (0..250).collect();
        let input = int_chunks("x", &values, &[250]);
        let input_ptr = input[0].column(0).as_primitive::<Int64Type>().values().as_ptr();
        let tail_ptr = input[0].column(0).slice(200, 50).as_primitive::<Int64Type>().values().as_ptr();
        let (mut op, schema) = batch_op(input, 100, false);
        let first = op.next_chunk().unwrap().unwrap();
        assert_eq!(first.num_rows(), 2, "two whole batches in one output chunk");
        let list = first.column(0).as_list::<i32>();
        assert_eq!(list.values().as_primitive::<Int64Type>().values().as_ptr(), input_ptr);
        assert_eq!(list.value_offsets(), &[0, 100, 200]);
        let rest = collect(&mut op, &schema).unwrap();
        assert_eq!(rest.len(), 1);
        let last = rest[0].column(0).as_list::<i32>();
        assert_eq!(last.value_length(0), 50);
        // The remainder is a slice of the same input too.
        assert_eq!(last.values().as_primitive::<Int64Type>().values().as_ptr(), tail_ptr);
    }

    #[test]
    fn large_chunks_give_whole_batches_then_one_straddling_batch() {
        let values: Vec<i64> = (0..16384).collect();
        let (mut op, schema) = batch_op(int_chunks("x", &values, &[8192, 8192]), 100, false);
        let out = collect(&mut op, &schema).unwrap();
        let sizes: Vec<usize> = out.iter().map(|c| c.num_rows()).collect();
        // 81 whole batches, the batch straddling the chunks, 81 more, then the remainder of 84.
        assert_eq!(sizes, vec![81, 1, 81, 1]);
        let last = out[3].column(0).as_list::<i32>();
        assert_eq!(last.value_length(0), 84);
        assert_eq!(last.value(0).as_primitive::<Int64Type>().value(0), 16300);
    }

    #[test]
    fn batches_tensor_and_string_fields() {
        let spec =
            ElementSpec::new(vec![FieldSpec::tensor("v", DType::Int64, vec![2]), FieldSpec::scalar("s", DType::Utf8)])
                .unwrap();
        let v_type = spec.fields[0].arrow_type();
        let v = arrow::compute::cast(
            &(Arc::new(arrow::array::FixedSizeListArray::from_iter_primitive::<Int64Type, _, _>(
                vec![Some(vec![Some(1), Some(2)]), Some(vec![Some(3), Some(4)]), Some(vec![Some(5), Some(6)])],
                2,
            )) as ArrayRef),
            &v_type,
        )
        .unwrap();
        let s: ArrayRef = Arc::new(StringArray::from(vec!["a", "b", "c"]));
        let input = chunk(&spec, vec![v, s]);
        let out_spec = spec.batched(2);
        let schema = out_spec.arrow_schema();
        let mut op = BatchOp::new(source(vec![input]), 2, true, schema.clone());
        let out = collect(&mut op, &schema).unwrap();
        assert_eq!(rows(&out, "v"), strs(&["[[1, 2], [3, 4]]"]));
        assert_eq!(rows(&out, "s"), strs(&["[a, b]"]));
    }

    /// Pulls `op` to the end, noting each error as `Err`.
    fn pull_all(op: &mut dyn Operator, schema: &SchemaRef) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            match op.next_chunk() {
                Ok(Some(c)) => {
                    assert!(c.num_rows() > 0, "empty chunk");
                    assert_eq!(&c.schema(), schema);
                    out.extend(rows(&[c], "x"));
                }
                Ok(None) => return out,
                Err(_) => out.push("Err".to_string()),
            }
        }
    }

    /// `chunks` of `values` (split by `splits`) with an input error before chunk `i` for each
    /// `i` in `errors_before` (repeated for several errors; `splits.len()` for the end).
    fn failing(values: &[i64], splits: &[usize], errors_before: &[usize]) -> BoxOperator {
        let mut q: VecDeque<_> = VecDeque::new();
        for (i, c) in int_chunks("x", values, splits).into_iter().map(Some).chain([None]).enumerate() {
            for _ in errors_before.iter().filter(|&&j| j == i) {
                q.push_back(Err(Error::execution("test", "boom")));
            }
            q.extend(c.map(Ok));
        }
        Box::new(VecOp(q))
    }

    #[test]
    fn input_errors_propagate_and_batching_resumes() {
        // tf.data: the error discards the element gathered for its batch ([1]).
        let schema = int_spec("x").batched(-1).arrow_schema();
        let mut op = BatchOp::new(failing(&[1, 2, 3], &[1, 2], &[1]), 2, false, schema.clone());
        assert_eq!(pull_all(&mut op, &schema), strs(&["Err", "[2, 3]"]));
    }

    #[test]
    fn an_error_discards_its_incomplete_batch_only() {
        // tf: range(10).map(fails at 5).batch(4) -> [0, 1, 2, 3], error, [6, 7, 8, 9]: element
        // 4, gathered for the interrupted batch, is discarded.
        let schema = int_spec("x").batched(-1).arrow_schema();
        let values = [0, 1, 2, 3, 4, 6, 7, 8, 9];
        for splits in [&[5, 4][..], &[1, 2, 2, 4], &[3, 2, 1, 3]] {
            let at = splits.iter().scan(0, |n, s| Some(std::mem::replace(n, *n + s))).position(|n| n == 5);
            let mut op = BatchOp::new(failing(&values, splits, &[at.unwrap()]), 4, false, schema.clone());
            assert_eq!(pull_all(&mut op, &schema), strs(&["[0, 1, 2, 3]", "Err", "[6, 7, 8, 9]"]), "{splits:?}");
        }
        // Whole batches before the error are delivered; an error at a batch boundary
        // discards nothing; the remainder after it is batched as usual.
        let mut op = BatchOp::new(failing(&[0, 1, 2, 3, 4, 5, 6], &[4, 3], &[1]), 2, false, schema.clone());
        assert_eq!(pull_all(&mut op, &schema), strs(&["[0, 1]", "[2, 3]", "Err", "[4, 5]", "[6]"]));
        let schema = int_spec("x").batched(2).arrow_schema();
        let mut op = BatchOp::new(failing(&[0, 1, 2, 3, 4], &[3, 2], &[1]), 2, true, schema.clone());
        assert_eq!(pull_all(&mut op, &schema), strs(&["[0, 1]", "Err", "[3, 4]"]));
    }

    #[test]
    fn window_errors_take_a_slot() {
        // tf: range(6) with element 2 an error, .window(3) -> error (for [0, 1, 2]), [3, 4, 5].
        let schema = int_spec("x").batched(-1).arrow_schema();
        let mut op = BatchOp::windows(failing(&[0, 1, 3, 4, 5], &[2, 3], &[1]), 3, false, schema.clone());
        assert_eq!(pull_all(&mut op, &schema), strs(&["Err", "[3, 4, 5]"]));
        // Element 3 an error: [0, 1, 2], error (for [3, 4, 5]), [6].
        let mut op = BatchOp::windows(failing(&[0, 1, 2, 4, 5, 6], &[3, 3], &[1]), 3, false, schema.clone());
        assert_eq!(pull_all(&mut op, &schema), strs(&["[0, 1, 2]", "Err", "[6]"]));
        // Two errors in one window are one error; the element after an error shares its window.
        let mut op = BatchOp::windows(failing(&[3, 4], &[2], &[0, 0]), 2, false, schema.clone());
        assert_eq!(pull_all(&mut op, &schema), strs(&["Err", "[3, 4]"]));
        let mut op = BatchOp::windows(failing(&[0, 1, 2], &[2, 1], &[1]), 2, false, schema.clone());
        assert_eq!(pull_all(&mut op, &schema), strs(&["[0, 1]", "Err"]));
        // A truncated last window with an error is that error, dropped with drop_remainder.
        let mut op = BatchOp::windows(failing(&[0, 1, 2], &[3], &[1]), 3, false, schema.clone());
        assert_eq!(pull_all(&mut op, &schema), strs(&["[0, 1, 2]", "Err"]));
        let schema = int_spec("x").batched(3).arrow_schema();
        let mut op = BatchOp::windows(failing(&[0, 1, 2], &[3], &[1]), 3, true, schema.clone());
        assert_eq!(pull_all(&mut op, &schema), strs(&["[0, 1, 2]"]));
    }
}
