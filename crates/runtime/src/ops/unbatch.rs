//! `unbatch()`: each element's leading dimension becomes separate elements; and
//! `rebatch(n)`, which is `unbatch().batch(n)`.
//!
//! Zero-copy: the rows of consecutive elements of a chunk are contiguous in the columns'
//! list children, so an input chunk becomes one output chunk of child slices.

use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Result};

use super::batch::BatchOp;
use crate::checkpoint::replay::PrePull;
use crate::checkpoint::{OpState, SaveMode};
use crate::conform::{conform_array, make_batch};
use crate::kernels::list_kernels::{item_type, outer_level, Nest, SparseRows};
use crate::operator::{BoxOperator, Operator};
use crate::rows::{concat, RowReader};

/// A field's leading dimension in a chunk.
enum Leading<'a> {
    /// A dense or ragged field: its outer list level and that level's child.
    List(Nest, ArrayRef),
    /// A sparse field: its elements are the slices of its tensors.
    Sparse(SparseRows<'a>),
}

/// `unbatch()`.
pub struct UnbatchOp {
    input: BoxOperator,
    schema: SchemaRef,
    /// A chunk being read and the first element not yet unbatched.
    pending: Option<(RecordBatch, usize)>,
    /// Input elements before the current chunk (for error messages).
    seen: u64,
    /// The input's state before the pending chunk, and the rows between it and the chunk's
    /// first row (for symbolic checkpoints).
    before: PrePull,
    base: usize,
}

impl UnbatchOp {
    /// Unbatches `input`, of elements of `input_spec`; `schema` is the output schema.
    pub fn new(input: BoxOperator, schema: SchemaRef) -> Self {
        UnbatchOp { input, schema, pending: None, seen: 0, before: PrePull::default(), base: 0 }
    }
}

impl Operator for UnbatchOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            let (chunk, from) = match self.pending.take() {
                Some(p) => p,
                None => {
                    self.before.before_pull(|| self.input.save(SaveMode::Symbolic));
                    self.base = 0;
                    match self.input.next_chunk()? {
                        Some(c) => (c, 0),
                        None => return Ok(None),
                    }
                }
            };
            let n = chunk.num_rows();
            let levels = chunk
                .columns()
                .iter()
                .zip(self.schema.fields())
                .map(|(c, f)| {
                    if let Some(sparse) = SparseRows::of(c) {
                        return Ok(Leading::Sparse(sparse));
                    }
                    outer_level(c).map(|(nest, child)| Leading::List(nest, child)).ok_or_else(|| {
                        Error::execution(
                            "unbatch",
                            format!("field '{}' of type {} has no list dimension to unbatch", f.name(), c.data_type()),
                        )
                    })
                })
                .collect::<Result<Vec<Leading>>>();
            let levels = match levels {
                Ok(l) => l,
                Err(e) => {
                    self.seen += n as u64;
                    return Err(e);
                }
            };
            let lists: Vec<&Nest> = levels
                .iter()
                .filter_map(|l| match l {
                    Leading::List(nest, _) => Some(nest),
                    Leading::Sparse(_) => None,
                })
                .collect();
            let sparse = levels.iter().find_map(|l| match l {
                Leading::Sparse(sparse) => Some(sparse),
                Leading::List(..) => None,
            });
            // Elements per input element: a list field's length, else a sparse field's leading
            // dense dimension.
            let count = |i: usize| {
                let sparse_count = || sparse.and_then(|s| s.dense_shape(i).first().map(|&d| d.max(0) as usize));
                lists.first().map(|nest| nest.len(i)).or_else(sparse_count).unwrap_or(0)
            };
            // The first element whose fields disagree on their leading length.
            let bad = (from..n).find(|&i| {
                levels.iter().any(|l| match l {
                    Leading::List(nest, _) => nest.len(i) != count(i),
                    Leading::Sparse(sparse) => !sparse.fits(i, count(i)),
                })
            });
            let end = bad.unwrap_or(n);
            if bad == Some(from) {
                let i = from;
                if i + 1 < n {
                    self.pending = Some((chunk.clone(), i + 1));
                } else {
                    self.seen += n as u64;
                }
                let lengths: Vec<String> = self
                    .schema
                    .fields()
                    .iter()
                    .zip(&levels)
                    .map(|(f, l)| match l {
                        Leading::List(nest, _) => format!("'{}' has {}", f.name(), nest.len(i)),
                        Leading::Sparse(sparse) if sparse.fits(i, count(i)) => {
                            format!("'{}' splits into {}", f.name(), count(i))
                        }
                        Leading::Sparse(sparse) => format!(
                            "sparse '{}' does not split into {} (dense_shape {:?}; or a point's leading index \
                             is outside [0, {}), or its values do not match its points)",
                            f.name(),
                            count(i),
                            sparse.dense_shape(i),
                            count(i)
                        ),
                    })
                    .collect();
                return Err(Error::execution(
                    "unbatch",
                    format!(
                        "element {}: fields must have the same leading dimension, but {}",
                        self.seen + i as u64,
                        lengths.join(", ")
                    ),
                ));
            }
            if end < n {
                self.pending = Some((chunk.clone(), end));
            } else {
                self.seen += n as u64;
            }
            let rows: usize = (from..end).map(count).sum();
            if rows == 0 {
                continue;
            }
            let columns = levels
                .iter()
                .zip(self.schema.fields())
                .map(|(l, f)| match l {
                    Leading::List(nest, child) => conform_array(child.slice(nest.range(from).0, rows), f.data_type()),
                    Leading::Sparse(sparse) => sparse.unbatch(from..end, count, f.data_type()),
                })
                .collect::<Result<Vec<_>>>()?;
            return make_batch(&self.schema, columns, rows).map(Some);
        }
    }

    /// The rest of the chunk being unbatched: as data, or in symbolic mode (once recording)
    /// as the input's state before that chunk and the rows to skip.
    fn save(&self, mode: SaveMode) -> Result<OpState> {
        let (rest, seen) = match &self.pending {
            Some((chunk, from)) => (Some(chunk.slice(*from, chunk.num_rows() - from)), self.seen + *from as u64),
            None => (None, self.seen),
        };
        let state = OpState::new("unbatch").with("seen", seen)?;
        let from = self.pending.as_ref().map(|(_, from)| *from);
        if let Some(replay) = self.before.replay(mode, from.is_some(), self.base + from.unwrap_or(0))? {
            return Ok(state.child(replay));
        }
        Ok(state.with_chunks(rest).child(self.input.save(mode)?))
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("unbatch")?;
        self.seen = state.get("seen")?;
        let child = state.take_child()?;
        let (rest, base) = match self.before.restore(&mut self.input, child)? {
            Some(replayed) => replayed,
            None => (state.chunks.pop(), 0),
        };
        self.pending = rest.map(|c| (c, 0));
        self.base = base;
        Ok(())
    }
}

/// `rebatch(batch_size, drop_remainder)`: `unbatch()` then `batch(batch_size, drop_remainder)`;
/// with a list of sizes, batches of those sizes in turn.
pub struct RebatchOp {
    inner: Rebatching,
}

enum Rebatching {
    Uniform(BatchOp),
    Cycling(CyclingBatches),
}

/// The unbatched schema of the batched `schema` (each field's item type).
fn unbatched_schema(schema: &SchemaRef) -> Result<SchemaRef> {
    let fields = schema
        .fields()
        .iter()
        .map(|f| {
            let item = item_type(f.data_type()).ok_or_else(|| {
                Error::plan("rebatch", format!("output field '{}' of type {} is not batched", f.name(), f.data_type()))
            })?;
            Ok(Field::new(f.name(), item.clone(), true))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(Schema::new(fields)))
}

impl RebatchOp {
    /// Rebatches `input` into batches of `batch_size` (> 0); `schema` is the output schema.
    pub fn new(input: BoxOperator, batch_size: u64, drop_remainder: bool, schema: SchemaRef) -> Result<Self> {
        let unbatch = UnbatchOp::new(input, unbatched_schema(&schema)?);
        let batch = BatchOp::new(Box::new(unbatch), batch_size, drop_remainder, schema);
        Ok(RebatchOp { inner: Rebatching::Uniform(batch) })
    }

    /// Rebatches `input` into batches of `sizes` in turn, cycling (a 0 is an empty batch);
    /// `schema` is the output schema.
    pub fn cycling(input: BoxOperator, sizes: &[u64], drop_remainder: bool, schema: SchemaRef) -> Result<Self> {
        let unbatched = unbatched_schema(&schema)?;
        let rows = RowReader::new(Box::new(UnbatchOp::new(input, unbatched.clone())));
        let sizes = sizes.iter().map(|&s| usize::try_from(s).unwrap_or(usize::MAX)).collect();
        let cycling =
            CyclingBatches { rows, sizes, at: 0, drop_remainder, unbatched, schema, done: false, error: None };
        Ok(RebatchOp { inner: Rebatching::Cycling(cycling) })
    }
}

impl Operator for RebatchOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        match &mut self.inner {
            Rebatching::Uniform(batch) => batch.next_chunk(),
            Rebatching::Cycling(cycling) => cycling.next_chunk(),
        }
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        match &self.inner {
            Rebatching::Uniform(batch) => batch.save(mode),
            Rebatching::Cycling(cycling) => {
                let mut state = OpState::new("rebatch_sizes").with("at", cycling.at)?.with("done", cycling.done)?;
                if let Some(e) = &cycling.error {
                    state = state.with_error(e);
                }
                Ok(state.child(cycling.rows.save(mode)?))
            }
        }
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        match &mut self.inner {
            Rebatching::Uniform(batch) => batch.restore(state),
            Rebatching::Cycling(cycling) => {
                let mut state = state.expect("rebatch_sizes")?;
                cycling.at = state.get("at")?;
                cycling.done = state.get("done")?;
                cycling.error = state.take_error();
                cycling.rows.restore(state.take_child()?)
            }
        }
    }
}

/// Batches of the unbatched rows in `sizes` in turn. A batch's rows are read within one pull,
/// so between pulls only the position in the cycle is state; an input error ends the batch it
/// falls in, which is that error (`batch`'s rule).
struct CyclingBatches {
    rows: RowReader,
    sizes: Vec<usize>,
    at: usize,
    drop_remainder: bool,
    unbatched: SchemaRef,
    schema: SchemaRef,
    done: bool,
    /// An input error met after batches of the chunk being built, the next pull's.
    error: Option<Error>,
}

/// Batches a pull gathers at most (each an output element).
const CYCLING_BATCHES_PER_CHUNK: usize = 64;

impl CyclingBatches {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let (mut parts, mut runs) = (Vec::new(), Vec::new());
        while !self.done && runs.len() < CYCLING_BATCHES_PER_CHUNK {
            let size = self.sizes[self.at];
            let batch = match self.rows.next_rows(size) {
                Ok(batch) => batch,
                // The error takes its batch's place; batches gathered before it go first.
                Err(e) => {
                    self.at = (self.at + 1) % self.sizes.len();
                    if runs.is_empty() {
                        return Err(e);
                    }
                    self.error = Some(e);
                    break;
                }
            };
            let n: usize = batch.iter().map(|b| b.num_rows()).sum();
            if n < size {
                self.done = true;
                if n == 0 || self.drop_remainder {
                    break;
                }
            }
            self.at = (self.at + 1) % self.sizes.len();
            parts.extend(batch);
            runs.push(crate::kernels::list_kernels::Run::new(n, 1));
        }
        if runs.is_empty() {
            return Ok(None);
        }
        let rows = concat(&parts)?.unwrap_or_else(|| RecordBatch::new_empty(self.unbatched.clone()));
        let columns = self
            .schema
            .fields()
            .iter()
            .zip(rows.columns())
            .map(|(f, c)| crate::kernels::list_kernels::wrap(f.data_type(), c.clone(), &runs))
            .collect::<Result<Vec<_>>>()?;
        make_batch(&self.schema, columns, runs.len()).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Array, ArrayRef, AsArray, ListArray, StringArray};
    use arrow::datatypes::Int64Type;
    use flumen_ir::{DType, ElementSpec, FieldSpec, Op};

    use super::*;
    use crate::conform::conform_array;
    use crate::kernels::list_kernels::testing::{chunk, collect, int_chunks, int_spec, rows, source, strs};
    use crate::ops::batch::BatchOp;

    fn list_col(rows: Vec<Option<Vec<i64>>>, dt: &arrow::datatypes::DataType) -> ArrayRef {
        let a = ListArray::from_iter_primitive::<Int64Type, _, _>(
            rows.into_iter().map(|r| r.map(|v| v.into_iter().map(Some).collect::<Vec<_>>())),
        );
        conform_array(Arc::new(a), dt).unwrap()
    }

    #[test]
    fn unbatches_fixed_size_lists_zero_copy() {
        let values: Vec<i64> = (0..10).collect();
        let batched_schema = int_spec("x").batched(2).arrow_schema();
        let mut batch = BatchOp::new(source(int_chunks("x", &values, &[10])), 2, true, batched_schema.clone());
        let batched = collect(&mut batch, &batched_schema).unwrap();
        let child_ptr =
            batched[0].column(0).as_fixed_size_list().values().as_primitive::<Int64Type>().values().as_ptr();
        let schema = int_spec("x").arrow_schema();
        let mut op = UnbatchOp::new(source(batched), schema.clone());
        let out = collect(&mut op, &schema).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].column(0).as_primitive::<Int64Type>().values().as_ptr(), child_ptr);
        assert_eq!(rows(&out, "x"), strs(&["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"]));
    }

    #[test]
    fn unbatches_lists_with_empty_rows() {
        let in_spec = ElementSpec::new(vec![
            FieldSpec::ragged("x", DType::Int64, vec![-1]),
            FieldSpec::tensor("s", DType::Utf8, vec![-1]),
        ])
        .unwrap();
        let x = list_col(
            vec![Some(vec![]), Some(vec![1, 2]), Some(vec![]), Some(vec![3])],
            &in_spec.fields[0].arrow_type(),
        );
        let s_values: ArrayRef = Arc::new(StringArray::from(vec!["a", "b", "c"]));
        let s = crate::kernels::list_kernels::wrap(
            &in_spec.fields[1].arrow_type(),
            s_values,
            &[
                crate::kernels::list_kernels::Run::new(0, 1),
                crate::kernels::list_kernels::Run::new(2, 1),
                crate::kernels::list_kernels::Run::new(0, 1),
                crate::kernels::list_kernels::Run::new(1, 1),
            ],
        )
        .unwrap();
        let c = chunk(&in_spec, vec![x, s]);
        // An all-empty chunk produces nothing, and never an empty chunk.
        let empty = c.slice(0, 1);
        let out_spec = Op::Unbatch.output_spec(&[&in_spec]).unwrap();
        let schema = out_spec.arrow_schema();
        let mut op = UnbatchOp::new(source(vec![empty, c.slice(1, 2), c.slice(3, 1)]), schema.clone());
        let out = collect(&mut op, &schema).unwrap();
        assert_eq!(rows(&out, "x"), strs(&["1", "2", "3"]));
        assert_eq!(rows(&out, "s"), strs(&["a", "b", "c"]));
    }

    #[test]
    fn mismatched_leading_lengths_are_an_error_and_skipped() {
        let spec = ElementSpec::new(vec![
            FieldSpec::tensor("a", DType::Int64, vec![-1]),
            FieldSpec::tensor("b", DType::Int64, vec![-1]),
        ])
        .unwrap();
        let a = list_col(vec![Some(vec![1]), Some(vec![2, 3]), Some(vec![4])], &spec.fields[0].arrow_type());
        let b = list_col(vec![Some(vec![10]), Some(vec![20]), Some(vec![40])], &spec.fields[1].arrow_type());
        let schema = spec.unbatched("unbatch").unwrap().arrow_schema();
        let mut op = UnbatchOp::new(source(vec![chunk(&spec, vec![a, b])]), schema.clone());
        let first = op.next_chunk().unwrap().unwrap();
        assert_eq!(rows(&[first], "a"), strs(&["1"]));
        let err = op.next_chunk().unwrap_err().to_string();
        assert!(err.contains("unbatch") && err.contains("'a' has 2, 'b' has 1") && err.contains("element 1"), "{err}");
        let rest = collect(&mut op, &schema).unwrap();
        assert_eq!(rows(&rest, "a"), strs(&["4"]));
        assert_eq!(rows(&rest, "b"), strs(&["40"]));
    }

    #[test]
    fn rebatch_is_unbatch_then_batch() {
        let values: Vec<i64> = (0..10).collect();
        let batched_schema = int_spec("x").batched(-1).arrow_schema();
        let batch = BatchOp::new(source(int_chunks("x", &values, &[3, 5, 2])), 3, false, batched_schema.clone());
        let op = Op::Rebatch { batch_size: 4, drop_remainder: false, batch_sizes: vec![] };
        let schema = op.output_spec(&[&int_spec("x").batched(-1)]).unwrap().arrow_schema();
        let mut rebatch = RebatchOp::new(Box::new(batch), 4, false, schema.clone()).unwrap();
        let out = collect(&mut rebatch, &schema).unwrap();
        assert_eq!(rows(&out, "x"), strs(&["[0, 1, 2, 3]", "[4, 5, 6, 7]", "[8, 9]"]));

        let batch = BatchOp::new(source(int_chunks("x", &values, &[3, 5, 2])), 3, false, batched_schema);
        let schema = int_spec("x").batched(4).arrow_schema();
        let mut rebatch = RebatchOp::new(Box::new(batch), 4, true, schema.clone()).unwrap();
        let out = collect(&mut rebatch, &schema).unwrap();
        assert_eq!(rows(&out, "x"), strs(&["[0, 1, 2, 3]", "[4, 5, 6, 7]"]));
        assert_eq!(out[0].column(0).len(), out[0].num_rows());
    }

    /// A sparse tensor's points: `rank` coordinates and a value each.
    type Points = Vec<(Vec<i64>, i64)>;

    /// A column of sparse tensors of `spec`'s field `f`: per row, its points with their
    /// values, and its dense shape.
    fn sparse_col(spec: &ElementSpec, f: usize, rows: &[(Points, Vec<i64>)]) -> ArrayRef {
        use arrow::array::Int64Array;
        use arrow::buffer::OffsetBuffer;
        let arrow::datatypes::DataType::Struct(fields) = spec.fields[f].arrow_type() else { unreachable!() };
        let parts = flumen_ir::sparse::SparseParts {
            offsets: OffsetBuffer::from_lengths(rows.iter().map(|(points, _)| points.len())),
            coords: rows.iter().flat_map(|(points, _)| points.iter().flat_map(|(c, _)| c.clone())).collect(),
            values: Arc::new(Int64Array::from_iter_values(rows.iter().flat_map(|(p, _)| p.iter().map(|(_, v)| *v)))),
            dense_shapes: rows.iter().flat_map(|(_, shape)| shape.clone()).collect(),
        };
        Arc::new(flumen_ir::sparse::build(&fields, parts, None).unwrap())
    }

    /// Each element's dense shape of sparse field `name`.
    fn dense_shapes(chunks: &[RecordBatch], name: &str) -> Vec<Vec<i64>> {
        let column = |c: &RecordBatch| c.column_by_name(name).unwrap().as_struct().clone();
        chunks
            .iter()
            .flat_map(|c| (0..c.num_rows()).map(move |r| flumen_ir::sparse::dense_shape(&column(c), r).unwrap()))
            .collect()
    }

    /// Each element's points of sparse field `name` as `(coordinates, value)`.
    fn sparse_rows(chunks: &[RecordBatch], name: &str) -> Vec<Points> {
        let mut out = Vec::new();
        for c in chunks {
            let s = c.column_by_name(name).unwrap().as_struct();
            let (coords, values) = (s.column(0).as_list::<i32>(), s.column(1).as_list::<i32>());
            for r in 0..c.num_rows() {
                let points = coords.value(r);
                let points = points.as_fixed_size_list();
                let values = values.value(r);
                let values = values.as_primitive::<Int64Type>();
                out.push(
                    (0..points.len())
                        .map(|p| (points.value(p).as_primitive::<Int64Type>().values().to_vec(), values.value(p)))
                        .collect(),
                );
            }
        }
        out
    }

    #[test]
    fn sparse_tensors_unbatch_into_their_slices_along_the_leading_dimension() {
        let spec = ElementSpec::new(vec![
            FieldSpec::tensor("id", DType::Int64, vec![-1]),
            FieldSpec::sparse("s", DType::Int64, vec![-1, -1]),
        ])
        .unwrap();
        // Row 0 holds 3 elements, its points out of order; row 1 two empty ones; row 2 one
        // element with a point at leading index 1, outside [0, 1); row 3 one element.
        let ids = list_col(
            vec![Some(vec![7, 8, 9]), Some(vec![5, 6]), Some(vec![4]), Some(vec![3])],
            &spec.fields[0].arrow_type(),
        );
        let s = sparse_col(
            &spec,
            1,
            &[
                (vec![(vec![1, 0], 10), (vec![0, 2], 20), (vec![2, 1], 30), (vec![0, 0], 40)], vec![3, 4]),
                (vec![], vec![2, 5]),
                (vec![(vec![1, 3], 50)], vec![1, 4]),
                (vec![(vec![0, 3], 60)], vec![1, 4]),
            ],
        );
        let out_spec = Op::Unbatch.output_spec(&[&spec]).unwrap();
        assert_eq!(out_spec.to_string(), "{id: int64[], s: sparse int64[?]}");
        let schema = out_spec.arrow_schema();
        let mut op = UnbatchOp::new(source(vec![chunk(&spec, vec![ids, s])]), schema.clone());
        let first = op.next_chunk().unwrap().unwrap();
        assert_eq!(rows(std::slice::from_ref(&first), "id"), strs(&["7", "8", "9", "5", "6"]));
        // Element e of a row holds the points with leading index e, in the row's order, and
        // the row's dense shape after its leading dimension.
        let expected: Vec<Points> =
            vec![vec![(vec![2], 20), (vec![0], 40)], vec![(vec![0], 10)], vec![(vec![1], 30)], vec![], vec![]];
        assert_eq!(sparse_rows(std::slice::from_ref(&first), "s"), expected);
        assert_eq!(dense_shapes(&[first], "s"), vec![vec![4], vec![4], vec![4], vec![5], vec![5]]);
        let err = op.next_chunk().unwrap_err().to_string();
        assert!(err.contains("element 2") && err.contains("sparse 's' does not split into 1"), "{err}");
        let rest = collect(&mut op, &schema).unwrap();
        assert_eq!(rows(&rest, "id"), strs(&["3"]));
        assert_eq!(sparse_rows(&rest, "s"), vec![vec![(vec![3], 60)]]);
    }

    #[test]
    fn sparse_fields_alone_unbatch_into_as_many_elements_as_their_dense_shape_says() {
        let alone = ElementSpec::new(vec![FieldSpec::sparse("s", DType::Int64, vec![-1, 4])]).unwrap();
        let out_spec = Op::Unbatch.output_spec(&[&alone]).unwrap();
        // Two tensors of 2 and 3 slices, the last slices empty: tf.data's dense_shape[0].
        let s = sparse_col(&alone, 0, &[(vec![(vec![0, 2], 10)], vec![2, 4]), (vec![(vec![1, 1], 20)], vec![3, 4])]);
        let schema = out_spec.arrow_schema();
        let mut op = UnbatchOp::new(source(vec![chunk(&alone, vec![s])]), schema.clone());
        let out = collect(&mut op, &schema).unwrap();
        let expected = vec![vec![(vec![2], 10)], vec![], vec![], vec![(vec![1], 20)], vec![]];
        assert_eq!(sparse_rows(&out, "s"), expected);
        assert_eq!(dense_shapes(&out, "s"), vec![vec![4]; 5]);
        let rank1 = ElementSpec::new(vec![FieldSpec::sparse("s", DType::Int64, vec![4])]).unwrap();
        let err = Op::Unbatch.output_spec(&[&rank1]).unwrap_err().to_string();
        assert!(err.contains("has rank 1"), "{err}");
    }
}
