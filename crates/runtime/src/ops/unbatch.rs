//! `unbatch()`: each element's leading dimension becomes separate elements; and
//! `rebatch(n)`, which is `unbatch().batch(n)`.
//!
//! Zero-copy: the rows of consecutive elements of a chunk are contiguous in the columns'
//! list children, so an input chunk becomes one output chunk of child slices.

use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Result};

use super::batch::BatchOp;
use super::list_kernels::{item_type, outer_level, Nest};
use crate::checkpoint::replay::PrePull;
use crate::checkpoint::{OpState, SaveMode};
use crate::conform::{conform_array, make_batch};
use crate::operator::{BoxOperator, Operator};

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
    /// Unbatches `input`; `schema` is the output schema.
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
                    outer_level(c).ok_or_else(|| {
                        Error::execution(
                            "unbatch",
                            format!("field '{}' of type {} has no list dimension to unbatch", f.name(), c.data_type()),
                        )
                    })
                })
                .collect::<Result<Vec<(Nest, _)>>>();
            let levels = match levels {
                Ok(l) => l,
                Err(e) => {
                    self.seen += n as u64;
                    return Err(e);
                }
            };
            // The first element whose fields disagree on their leading length.
            let bad = (from..n).find(|&i| {
                let l0 = levels.first().map(|(nest, _)| nest.len(i));
                levels.iter().any(|(nest, _)| Some(nest.len(i)) != l0)
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
                    .map(|(f, (nest, _))| format!("'{}' has {}", f.name(), nest.len(i)))
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
            let Some((first, _)) = levels.first() else {
                continue;
            };
            let start = first.range(from).0;
            let stop = first.range(end - 1).0 + first.len(end - 1);
            let rows = stop - start;
            if rows == 0 {
                continue;
            }
            let columns = levels
                .iter()
                .zip(self.schema.fields())
                .map(|((nest, child), f)| {
                    let s = nest.range(from).0;
                    conform_array(child.slice(s, rows), f.data_type())
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

/// `rebatch(batch_size, drop_remainder)`: `unbatch()` then `batch(batch_size, drop_remainder)`.
pub struct RebatchOp {
    inner: BatchOp,
}

impl RebatchOp {
    /// Rebatches `input` into batches of `batch_size` (> 0); `schema` is the output schema.
    pub fn new(input: BoxOperator, batch_size: u64, drop_remainder: bool, schema: SchemaRef) -> Result<Self> {
        let fields = schema
            .fields()
            .iter()
            .map(|f| {
                let item = item_type(f.data_type()).ok_or_else(|| {
                    Error::plan(
                        "rebatch",
                        format!("output field '{}' of type {} is not batched", f.name(), f.data_type()),
                    )
                })?;
                Ok(Field::new(f.name(), item.clone(), true))
            })
            .collect::<Result<Vec<_>>>()?;
        let unbatched: SchemaRef = Arc::new(Schema::new(fields));
        let unbatch = UnbatchOp::new(input, unbatched);
        Ok(RebatchOp { inner: BatchOp::new(Box::new(unbatch), batch_size, drop_remainder, schema) })
    }
}

impl Operator for RebatchOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        self.inner.next_chunk()
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        self.inner.save(mode)
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        self.inner.restore(state)
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
    use crate::ops::batch::BatchOp;
    use crate::ops::list_kernels::testing::{chunk, collect, int_chunks, int_spec, rows, source, strs};

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
        let s = super::super::list_kernels::wrap(
            &in_spec.fields[1].arrow_type(),
            s_values,
            &[
                super::super::list_kernels::Run::new(0, 1),
                super::super::list_kernels::Run::new(2, 1),
                super::super::list_kernels::Run::new(0, 1),
                super::super::list_kernels::Run::new(1, 1),
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
        let op = Op::Rebatch { batch_size: 4, drop_remainder: false };
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
}
