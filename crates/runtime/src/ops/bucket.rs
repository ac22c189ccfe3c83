//! `bucket_by_sequence_length(length, boundaries, batch_sizes, ...)`, as tf.data builds it:
//! `group_by_window` keyed by bucket, each bucket padded-batched by its batch size.
//!
//! Bucket `i` holds lengths in `[boundaries[i-1], boundaries[i])` (unbounded at both ends).
//! A bucket's batch is emitted when full; at the end of the input the non-empty buckets are
//! flushed in ascending bucket order (dropped with `drop_remainder`). Unknown dimensions are
//! padded to the batch's longest, or with `pad_to_bucket_boundary` to `boundaries[i] - 1`
//! (an element of the last bucket is then an error, as in tf.data).
//!
//! The operator's own thread groups the rows; the padding, which copies every token of
//! every row, runs on the iterator's pool when it has more than one worker, the batches
//! still handed out in the order their groups were completed (`crate::kernels::in_order`).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flumen_ir::{ElementSpec, Error, Expr, FieldKind, Result, Scalar};

use crate::checkpoint::{OpState, SaveMode};
use crate::conform::make_batch;
use crate::kernels::function::MaskFn;
use crate::kernels::grouping::{Group, Grouper};
use crate::kernels::in_order::{InOrder, Outputs};
use crate::kernels::list_kernels::{gather, pad_gathered, pad_groups, pad_value, PadGroup};
use crate::operator::{BoxOperator, Operator};
use crate::pool::ThreadPool;

const OP: &str = "bucket_by_sequence_length";

/// How one field is padded.
struct BucketField {
    name: String,
    /// Per bucket, per element dimension: the padded size or `None` for the batch's longest.
    dims: Vec<Vec<Option<usize>>>,
    pad: ArrayRef,
}

/// `bucket_by_sequence_length(length, bucket_boundaries, bucket_batch_sizes, padding_values,
/// pad_to_bucket_boundary, drop_remainder)`.
pub struct BucketBySequenceLengthOp {
    boundaries: Vec<i64>,
    batch_sizes: Vec<usize>,
    pad_to_bucket_boundary: bool,
    padder: Arc<Padder>,
    grouper: Grouper,
    /// The padded batches of completed groups, made or being made, in order; a save waits
    /// for those being made (hence the cell: saving takes `&self`).
    batches: RefCell<InOrder>,
}

/// How a bucket's rows become a padded batch.
struct Padder {
    fields: Vec<BucketField>,
    schema: SchemaRef,
}

impl BucketBySequenceLengthOp {
    /// Buckets `input` by the int64 `length`; `output_spec` is the op's output spec (its
    /// `arrow_schema()` is the output schema).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        input: BoxOperator,
        length: Expr,
        bucket_boundaries: Vec<i64>,
        bucket_batch_sizes: Vec<u64>,
        padding_values: BTreeMap<String, Scalar>,
        pad_to_bucket_boundary: bool,
        drop_remainder: bool,
        output_spec: &ElementSpec,
    ) -> Result<Self> {
        if bucket_batch_sizes.len() != bucket_boundaries.len() + 1 {
            return Err(Error::plan(
                OP,
                format!(
                    "needs {} batch sizes for {} boundaries, got {}",
                    bucket_boundaries.len() + 1,
                    bucket_boundaries.len(),
                    bucket_batch_sizes.len()
                ),
            ));
        }
        let buckets = bucket_batch_sizes.len();
        let mut fields = Vec::with_capacity(output_spec.fields.len());
        for f in &output_spec.fields {
            if f.kind == FieldKind::Sparse || f.shape.is_empty() {
                return Err(Error::plan(OP, format!("output field {f} is not a padded batch")));
            }
            let dims = (0..buckets)
                .map(|b| {
                    f.shape[1..]
                        .iter()
                        .map(|&d| match usize::try_from(d) {
                            Ok(d) => Some(d),
                            Err(_) if pad_to_bucket_boundary => {
                                bucket_boundaries.get(b).map(|&bound| usize::try_from(bound - 1).unwrap_or(0))
                            }
                            Err(_) => None,
                        })
                        .collect()
                })
                .collect();
            fields.push(BucketField {
                name: f.name.clone(),
                dims,
                pad: pad_value(f.dtype, padding_values.get(&f.name), OP, &f.name)?,
            });
        }
        Ok(BucketBySequenceLengthOp {
            boundaries: bucket_boundaries,
            batch_sizes: bucket_batch_sizes.iter().map(|&b| usize::try_from(b).unwrap_or(usize::MAX).max(1)).collect(),
            pad_to_bucket_boundary,
            padder: Arc::new(Padder { fields, schema: output_spec.arrow_schema() }),
            grouper: Grouper::new(input, length, OP, drop_remainder),
            batches: RefCell::new(InOrder::new(None, OP)),
        })
    }

    /// Groups only the rows `keep` holds true for: a filter fused into this operator (see
    /// `crate::stage`); all of them with `None`.
    pub fn keeping(mut self, keep: Option<MaskFn>) -> Self {
        self.grouper = self.grouper.keeping(keep);
        self
    }

    /// Pads on `pool`'s workers; on the operator's thread with `None` (the default).
    pub fn padding_on(mut self, pool: Option<Arc<ThreadPool>>) -> Self {
        self.batches = RefCell::new(InOrder::new(pool, OP));
        self
    }

    /// Starts padding `groups` into their batches. With `pad_to_bucket_boundary`, a batch of
    /// the bucket past the last boundary (elements too long for any) is an error in its
    /// place, as tf.data's padding of that window fails: the batches before it come first.
    fn build(&mut self, groups: &[Group]) {
        let last = self.boundaries.len() as i64;
        if self.pad_to_bucket_boundary && groups.iter().any(|(bucket, _)| *bucket == last) {
            for run in groups.chunk_by(|a, b| (a.0 == last) == (b.0 == last)) {
                match run[0].0 == last {
                    true => {
                        for _ in run {
                            let max = self.boundaries.last().copied().unwrap_or(0);
                            let message = format!(
                                "with pad_to_bucket_boundary, elements must have length < max(bucket_boundaries) = {max}"
                            );
                            self.batches.get_mut().push_made(Err(Error::execution(OP, message)));
                        }
                        self.grouper.release(run);
                    }
                    false => self.build(run),
                }
            }
            return;
        }
        let batches = self.batches.get_mut();
        match self.grouper.sources(groups) {
            Ok((chunks, rows)) => {
                let sizes: Vec<(usize, usize)> =
                    groups.iter().map(|(bucket, rows)| (*bucket as usize, rows.len())).collect();
                let padder = self.padder.clone();
                batches.push(move || padder.build(&chunks, &rows, &sizes));
            }
            Err(e) => batches.push_made(Err(e)),
        }
        // The job holds the chunks its rows lie in for as long as it needs them.
        self.grouper.release(groups);
    }

    /// The next groups completed (or flushed at the end), keyed by bucket.
    fn next_groups(&mut self) -> Result<Option<Vec<Group>>> {
        let (boundaries, sizes) = (&self.boundaries, &self.batch_sizes);
        let classify = |len: Option<i64>| {
            let len = len.ok_or_else(|| Error::execution(OP, "the element's length is null"))?;
            let b = boundaries.partition_point(|&b| b <= len);
            Ok((b as i64, sizes[b]))
        };
        self.grouper.next_groups(classify)
    }
}

impl Padder {
    /// Pads `groups` (each a bucket and a number of rows) into one chunk: their rows are
    /// `rows`, in turn, as `(index in chunks, row)`. A field with one element dimension copies
    /// each row once, straight into the padded batch; others are gathered first.
    fn pad(&self, chunks: &[RecordBatch], rows: &[(usize, usize)], groups: &[(usize, usize)]) -> Result<RecordBatch> {
        let mut out = Vec::with_capacity(self.fields.len());
        for (c, (field, f)) in self.fields.iter().zip(self.schema.fields()).enumerate() {
            let columns: Vec<&ArrayRef> = chunks.iter().map(|chunk| chunk.column(c)).collect();
            let sizes: Vec<(usize, &[Option<usize>])> =
                groups.iter().map(|&(bucket, len)| (len, field.dims[bucket].as_slice())).collect();
            let padded = pad_gathered(&columns, rows, &sizes, &field.pad, f.data_type(), OP, &field.name)?;
            let column = match padded {
                Some(column) => column,
                None => {
                    let arrays: Vec<&dyn Array> = columns.iter().map(|c| c.as_ref()).collect();
                    let gathered = gather(&arrays, rows)?;
                    let mut start = 0;
                    let pads: Vec<PadGroup<'_>> = sizes
                        .iter()
                        .map(|&(len, dims)| {
                            start += len;
                            PadGroup { start: start - len, len, dims }
                        })
                        .collect();
                    pad_groups(&gathered, &pads, &field.pad, f.data_type(), OP, &field.name)?
                }
            };
            out.push(column);
        }
        make_batch(&self.schema, out, groups.len())
    }

    /// The padded batches of `groups`: one chunk, or one result per group when a group
    /// fails, so that only the failing groups are errors.
    fn build(&self, chunks: &[RecordBatch], rows: &[(usize, usize)], groups: &[(usize, usize)]) -> Outputs {
        match self.pad(chunks, rows, groups) {
            Ok(batch) => vec![Ok(batch)],
            Err(e) if groups.len() == 1 => vec![Err(e)],
            Err(_) => {
                let mut at = 0;
                let mut each = Vec::with_capacity(groups.len());
                for &(bucket, len) in groups {
                    each.push(self.pad(chunks, &rows[at..at + len], &[(bucket, len)]));
                    at += len;
                }
                each
            }
        }
    }
}

impl Operator for BucketBySequenceLengthOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            if let Some(batch) = self.batches.get_mut().next(false) {
                return batch.map(Some);
            }
            match self.next_groups() {
                Ok(Some(groups)) => self.build(&groups),
                Ok(None) => return self.batches.get_mut().next(true).transpose(),
                // After the batches of the groups completed before it, which are waited
                // for rather than read past.
                Err(e) => {
                    let batches = self.batches.get_mut();
                    batches.push_made(Err(e));
                    return batches.next(true).transpose();
                }
            }
        }
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        let mut batches = self.batches.borrow_mut();
        batches.finish();
        Ok(OpState::new("bucket_by_sequence_length")
            .with_results("ready", batches.made())?
            .child(self.grouper.save(mode)?))
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("bucket_by_sequence_length")?;
        self.grouper.restore(state.take_child()?)?;
        self.batches.get_mut().restore(state.take_results("ready")?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, ListArray};
    use arrow::datatypes::{DataType, Int64Type};
    use flumen_ir::{BinaryOp, DType, FieldSpec, Func, Op, Predicate};
    use flumen_udf::registry::Registry;

    use super::*;
    use crate::conform::conform_array;
    use crate::kernels::function::{filter_fn, mask_fn};
    use crate::kernels::list_kernels::testing::{chunk, rows, source, strs};
    use crate::ops::map::MapOp;

    fn spec() -> ElementSpec {
        ElementSpec::new(vec![FieldSpec::ragged("tok", DType::Int64, vec![-1]), FieldSpec::scalar("id", DType::Int64)])
            .unwrap()
    }

    fn input() -> Vec<RecordBatch> {
        let s = spec();
        let toks: Vec<Vec<i64>> = vec![
            vec![1],                // len 1, bucket 0
            vec![1, 2, 3],          // len 3, bucket 1
            vec![1, 2, 3, 4, 5, 6], // len 6, bucket 2
            vec![4, 5],             // len 2, bucket 0 -> bucket 0 full
            vec![7, 8, 9, 10],      // len 4, bucket 1 -> bucket 1 full
            vec![9],                // bucket 0
            vec![5, 5, 5],          // bucket 1
        ];
        let tok = ListArray::from_iter_primitive::<Int64Type, _, _>(
            toks.iter().map(|t| Some(t.iter().map(|v| Some(*v)).collect::<Vec<_>>())),
        );
        let tok = conform_array(Arc::new(tok), &s.fields[0].arrow_type()).unwrap();
        let id = Arc::new(Int64Array::from((0..7).collect::<Vec<i64>>()));
        let c = chunk(&s, vec![tok, id]);
        vec![c.slice(0, 2), c.slice(2, 3), c.slice(5, 2)]
    }

    fn run(pad_to_boundary: bool, drop: bool, padding: BTreeMap<String, Scalar>) -> (Vec<RecordBatch>, Vec<String>) {
        let length = Expr::Call { func: Func::Length, args: vec![Expr::col("tok")] };
        run_with(length, pad_to_boundary, drop, padding)
    }

    fn run_with(
        length: Expr,
        pad_to_boundary: bool,
        drop: bool,
        padding: BTreeMap<String, Scalar>,
    ) -> (Vec<RecordBatch>, Vec<String>) {
        run_over(|| source(input()), || None, length, pad_to_boundary, drop, padding)
    }

    /// Buckets `input` padding on the operator's thread, and again (`input` made anew)
    /// padding on a pool of two workers; both give the same batches and errors.
    fn run_over(
        input: impl Fn() -> BoxOperator,
        keep: impl Fn() -> Option<MaskFn>,
        length: Expr,
        pad_to_boundary: bool,
        drop: bool,
        padding: BTreeMap<String, Scalar>,
    ) -> (Vec<RecordBatch>, Vec<String>) {
        let inline = run_padding_on(None, input(), keep(), length.clone(), pad_to_boundary, drop, padding.clone());
        let pool = Some(Arc::new(ThreadPool::new(2)));
        let pooled = run_padding_on(pool, input(), keep(), length, pad_to_boundary, drop, padding);
        assert_eq!(rows(&pooled.0, "tok"), rows(&inline.0, "tok"));
        // The batches' rows and the errors, in the order they came.
        assert_eq!(pooled.2, inline.2);
        (inline.0, inline.1)
    }

    #[allow(clippy::too_many_arguments)]
    fn run_padding_on(
        pool: Option<Arc<ThreadPool>>,
        input: BoxOperator,
        keep: Option<MaskFn>,
        length: Expr,
        pad_to_boundary: bool,
        drop: bool,
        padding: BTreeMap<String, Scalar>,
    ) -> (Vec<RecordBatch>, Vec<String>, Vec<String>) {
        let op = Op::BucketBySequenceLength {
            length: length.clone(),
            bucket_boundaries: vec![3, 5],
            bucket_batch_sizes: vec![2, 2, 2],
            padding_values: padding.clone(),
            pad_to_bucket_boundary: pad_to_boundary,
            drop_remainder: drop,
        };
        let out_spec = op.output_spec(&[&spec()]).unwrap();
        let schema = out_spec.arrow_schema();
        let mut b = BucketBySequenceLengthOp::new(
            input,
            length,
            vec![3, 5],
            vec![2, 2, 2],
            padding,
            pad_to_boundary,
            drop,
            &out_spec,
        )
        .unwrap()
        .keeping(keep)
        .padding_on(pool);
        let (mut out, mut errors, mut order) = (Vec::new(), Vec::new(), Vec::new());
        loop {
            match b.next_chunk() {
                Ok(Some(c)) => {
                    assert!(c.num_rows() > 0);
                    assert_eq!(c.schema(), schema);
                    order.extend(rows(std::slice::from_ref(&c), "id"));
                    out.push(c);
                }
                Ok(None) => break,
                Err(e) => {
                    order.push(e.to_string());
                    errors.push(e.to_string());
                }
            }
        }
        assert_eq!(b.grouper.retained(), 0);
        (out, errors, order)
    }

    /// The ids of each batch `op` gives from now on, or the error's text.
    fn rest(op: &mut BucketBySequenceLengthOp) -> Vec<String> {
        let mut got = Vec::new();
        loop {
            match op.next_chunk() {
                Ok(Some(c)) => got.extend(rows(std::slice::from_ref(&c), "id")),
                Ok(None) => return got,
                Err(e) => got.push(e.to_string()),
            }
        }
    }

    #[test]
    fn a_save_waits_for_the_batches_being_padded() {
        let length = Expr::Call { func: Func::Length, args: vec![Expr::col("tok")] };
        let op = Op::BucketBySequenceLength {
            length: length.clone(),
            bucket_boundaries: vec![3, 5],
            bucket_batch_sizes: vec![2, 2, 2],
            padding_values: BTreeMap::new(),
            pad_to_bucket_boundary: false,
            drop_remainder: false,
        };
        let out_spec = op.output_spec(&[&spec()]).unwrap();
        let make = |pool| {
            BucketBySequenceLengthOp::new(
                source(input()),
                length.clone(),
                vec![3, 5],
                vec![2, 2, 2],
                BTreeMap::new(),
                false,
                false,
                &out_spec,
            )
            .unwrap()
            .padding_on(pool)
        };
        // The pool's one worker waits until the test lets it go, so the two padding jobs
        // (the groups the second chunk completes, then those flushed at the end) are
        // still queued when the save begins.
        let pool = Arc::new(ThreadPool::new(1));
        let (go, wait) = std::sync::mpsc::channel::<()>();
        pool.spawn(move || {
            let _ = wait.recv();
        });
        let mut b = make(Some(pool));
        for _ in 0..2 {
            let groups = b.next_groups().unwrap().expect("groups");
            b.build(&groups);
        }
        assert!(b.next_groups().unwrap().is_none());
        let saving = std::thread::spawn(move || {
            let state = b.save(SaveMode::Full).unwrap();
            (b, state)
        });
        go.send(()).unwrap();
        let (mut b, state) = saving.join().unwrap();
        let mut restored = make(None);
        restored.restore(state).unwrap();
        let expected = strs(&["[0, 3]", "[1, 4]", "[5]", "[6]", "[2]"]);
        assert_eq!(rest(&mut restored), expected);
        assert_eq!(rest(&mut b), expected);
    }

    #[test]
    fn buckets_pad_to_longest_and_flush_in_bucket_order() {
        let (out, errors) = run(false, false, BTreeMap::new());
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            rows(&out, "tok"),
            strs(&[
                "[[1, 0], [4, 5]]",
                "[[1, 2, 3, 0], [7, 8, 9, 10]]",
                "[[9]]",
                "[[5, 5, 5]]",
                "[[1, 2, 3, 4, 5, 6]]",
            ])
        );
        assert_eq!(rows(&out, "id"), strs(&["[0, 3]", "[1, 4]", "[5]", "[6]", "[2]"]));
        assert!(matches!(out[0].schema().field(0).data_type(), DataType::List(_)));
    }

    #[test]
    fn drop_remainder_keeps_only_full_batches() {
        let padding = BTreeMap::from([("tok".to_string(), Scalar::Int(-1, DType::Int64))]);
        let (out, errors) = run(false, true, padding);
        assert!(errors.is_empty());
        assert_eq!(rows(&out, "tok"), strs(&["[[1, -1], [4, 5]]", "[[1, 2, 3, -1], [7, 8, 9, 10]]"]));
    }

    #[test]
    fn pad_to_bucket_boundary() {
        let (out, errors) = run(true, false, BTreeMap::new());
        assert_eq!(
            rows(&out, "tok"),
            strs(&["[[1, 0], [4, 5]]", "[[1, 2, 3, 0], [7, 8, 9, 10]]", "[[9, 0]]", "[[5, 5, 5, 0]]"])
        );
        // The element of length 6 has no bucket: its bucket's batch, flushed last, is the error.
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("length < max(bucket_boundaries) = 5"), "{}", errors[0]);
    }

    #[test]
    fn a_failing_length_is_an_error_for_its_element_only() {
        // length = len(tok) + 0 * (1 // (id - 3)): element 3 fails (division by zero); the
        // others are bucketed by their length as usual.
        let int = |v| Expr::Literal(Scalar::Int(v, DType::Int64));
        let fails_at_3 = Expr::binary(BinaryOp::Div, int(1), Expr::binary(BinaryOp::Sub, Expr::col("id"), int(3)));
        let length = Expr::binary(
            BinaryOp::Add,
            Expr::Call { func: Func::Length, args: vec![Expr::col("tok")] },
            Expr::binary(BinaryOp::Mul, int(0), fails_at_3),
        );
        let (out, errors) = run_with(length, false, false, BTreeMap::new());
        assert_eq!(errors.len(), 1, "{errors:?}");
        // Bucket 1 fills at element 4, bucket 0 at element 5 (element 3 is missing from it);
        // buckets 1 and 2 are flushed at the end.
        assert_eq!(rows(&out, "id"), strs(&["[1, 4]", "[0, 5]", "[6]", "[2]"]));
        assert_eq!(
            rows(&out, "tok"),
            strs(&["[[1, 2, 3, 0], [7, 8, 9, 10]]", "[[1], [9]]", "[[5, 5, 5]]", "[[1, 2, 3, 4, 5, 6]]"])
        );
    }

    #[test]
    fn a_fused_filter_buckets_and_fails_exactly_as_the_filter_operator_before_it() {
        let int = |v| Expr::Literal(Scalar::Int(v, DType::Int64));
        let id = || Expr::col("id");
        // Drops element 2; fails at element 3 (1 / 0); keeps the others.
        let keep = Expr::binary(
            BinaryOp::And,
            Expr::binary(BinaryOp::NotEq, id(), int(2)),
            Expr::binary(
                BinaryOp::Gt,
                Expr::binary(BinaryOp::Div, int(1), Expr::binary(BinaryOp::Sub, id(), int(3))),
                int(-10),
            ),
        );
        // Fails only for element 2, which the filter drops: never an error.
        let length = Expr::binary(
            BinaryOp::Add,
            Expr::Call { func: Func::Length, args: vec![Expr::col("tok")] },
            Expr::binary(
                BinaryOp::Mul,
                int(0),
                Expr::binary(BinaryOp::Div, int(1), Expr::binary(BinaryOp::Sub, id(), int(2))),
            ),
        );
        let predicate = Predicate::Expr { expr: keep };
        let registry = Registry::default();
        let filter = || -> BoxOperator {
            Box::new(MapOp::new(source(input()), filter_fn(&predicate, &registry, true).unwrap()))
        };
        let (unfused, unfused_errors) = run_over(filter, || None, length.clone(), false, false, BTreeMap::new());
        let mask = || Some(mask_fn(&predicate, "filter", &registry, true).unwrap());
        let (fused, fused_errors) = run_over(|| source(input()), mask, length, false, false, BTreeMap::new());
        assert_eq!(rows(&fused, "id"), rows(&unfused, "id"));
        assert_eq!(rows(&fused, "tok"), rows(&unfused, "tok"));
        assert_eq!(fused_errors, unfused_errors);
        // Element 3 is the one error; 2 is dropped, so bucket 2 (element 2 alone) is gone:
        // bucket 1 fills at element 4, bucket 0 at 5, and 6 is flushed at the end.
        assert_eq!(fused_errors.len(), 1, "{fused_errors:?}");
        assert!(fused_errors[0].contains("Divide by zero"), "{}", fused_errors[0]);
        assert_eq!(rows(&fused, "id"), strs(&["[1, 4]", "[0, 5]", "[6]"]));
    }
}
