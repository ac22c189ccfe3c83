//! `padded_batch(b, padded_shapes, padding_values)`: batch, padding each field's unknown
//! dimensions to the longest in the batch (or to a fixed padded size).
//!
//! A dimension that stays unknown in the output spec remains a `List` (with the same length
//! in every row of a batch); a fixed padded size becomes a `FixedSizeList`. Fields with a
//! static shape that needs no padding are batched zero-copy, as `batch` does.

use std::collections::{BTreeMap, VecDeque};

use arrow::array::ArrayRef;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flumen_ir::{ElementSpec, Error, FieldKind, Result, Scalar};

use super::batch::Batcher;
use crate::checkpoint::{OpState, SaveMode};
use crate::conform::make_batch;
use crate::kernels::list_kernels::{pad_groups, pad_value, uniform_runs, wrap, PadGroup};
use crate::operator::{BoxOperator, Operator};

/// How one field is batched.
pub(crate) struct FieldPadding {
    /// The field's name.
    pub(crate) name: String,
    /// Per element dimension: the padded size, or `None` for the batch's longest.
    pub(crate) dims: Vec<Option<usize>>,
    /// The padding value, a one-element array of the field's type.
    pub(crate) pad: ArrayRef,
    /// True when the field needs no padding (static shape equal to its target).
    pub(crate) zero_copy: bool,
}

/// `padded_batch(batch_size, padded_shapes, padding_values, drop_remainder)`.
pub struct PaddedBatchOp {
    batcher: Batcher,
    fields: Vec<FieldPadding>,
    schema: SchemaRef,
    /// Results computed ahead (one per batch after a failed multi-batch chunk).
    ready: VecDeque<Result<RecordBatch>>,
}

impl PaddedBatchOp {
    /// Pads and batches `input` (elements of `input_spec`) by `batch_size` (> 0);
    /// `output_spec` is the op's output spec (its `arrow_schema()` is the output schema).
    pub fn new(
        input: BoxOperator,
        batch_size: u64,
        padded_shapes: BTreeMap<String, Vec<i64>>,
        padding_values: BTreeMap<String, Scalar>,
        drop_remainder: bool,
        input_spec: &ElementSpec,
        output_spec: &ElementSpec,
    ) -> Result<Self> {
        const OP: &str = "padded_batch";
        if input_spec.fields.len() != output_spec.fields.len() {
            return Err(Error::plan(OP, format!("output spec {output_spec} does not match input spec {input_spec}")));
        }
        let mut fields = Vec::with_capacity(input_spec.fields.len());
        for (f, out) in input_spec.fields.iter().zip(&output_spec.fields) {
            if f.kind == FieldKind::Sparse {
                return Err(Error::plan(OP, format!("cannot pad sparse field '{}'", f.name)));
            }
            let target = padded_shapes.get(&f.name).unwrap_or(&f.shape);
            if target.len() != f.shape.len() || out.shape.len() != f.shape.len() + 1 {
                return Err(Error::plan(OP, format!("padded shape {target:?} does not fit field {f}")));
            }
            let dims = target.iter().map(|&d| usize::try_from(d).ok()).collect();
            fields.push(FieldPadding {
                name: f.name.clone(),
                dims,
                pad: pad_value(f.dtype, padding_values.get(&f.name), OP, &f.name)?,
                zero_copy: f.is_static() && target == &f.shape,
            });
        }
        Ok(PaddedBatchOp {
            batcher: Batcher::new(input, batch_size, drop_remainder),
            fields,
            schema: output_spec.arrow_schema(),
            ready: VecDeque::new(),
        })
    }

    /// Pads and batches `rows`, consecutive batches of the batch size (the last maybe shorter).
    fn build(&self, rows: &RecordBatch) -> Result<RecordBatch> {
        let b = self.batcher.batch_size();
        let n = rows.num_rows();
        let runs = uniform_runs(n, b);
        let mut columns = Vec::with_capacity(self.fields.len());
        for ((field, column), out) in self.fields.iter().zip(rows.columns()).zip(self.schema.fields()) {
            if field.zero_copy {
                columns.push(wrap(out.data_type(), column.clone(), &runs)?);
            } else {
                let groups: Vec<PadGroup<'_>> = (0..n)
                    .step_by(b)
                    .map(|start| PadGroup { start, len: b.min(n - start), dims: &field.dims })
                    .collect();
                columns.push(pad_groups(column, &groups, &field.pad, out.data_type(), "padded_batch", &field.name)?);
            }
        }
        make_batch(&self.schema, columns, n.div_ceil(b))
    }
}

impl Operator for PaddedBatchOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        if let Some(r) = self.ready.pop_front() {
            return r.map(Some);
        }
        let Some(rows) = self.batcher.next_rows()? else {
            return Ok(None);
        };
        let b = self.batcher.batch_size();
        match self.build(&rows) {
            Ok(out) => Ok(Some(out)),
            Err(e) if rows.num_rows() <= b => Err(e),
            Err(_) => {
                // Redo batch by batch so that only the failing batches are errors.
                let n = rows.num_rows();
                for start in (0..n).step_by(b) {
                    let r = self.build(&rows.slice(start, b.min(n - start)));
                    self.ready.push_back(r);
                }
                self.ready.pop_front().transpose()
            }
        }
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        Ok(OpState::new("padded_batch").with_results("ready", &self.ready)?.child(self.batcher.save(mode)?))
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("padded_batch")?;
        self.batcher.restore(state.take_child()?)?;
        self.ready = state.take_results("ready")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Array, ArrayRef, AsArray, ListArray, StringArray};
    use arrow::datatypes::{DataType, Int64Type};
    use flumen_ir::{DType, FieldSpec, Op};

    use super::*;
    use crate::conform::conform_array;
    use crate::kernels::list_kernels::testing::{chunk, collect, rows, source, strs};
    use crate::kernels::list_kernels::Run;

    fn ints(rows: &[&[i64]], dt: &DataType) -> ArrayRef {
        let a = ListArray::from_iter_primitive::<Int64Type, _, _>(
            rows.iter().map(|r| Some(r.iter().map(|v| Some(*v)).collect::<Vec<_>>())),
        );
        conform_array(Arc::new(a), dt).unwrap()
    }

    fn words(rows: &[&[&str]], dt: &DataType) -> ArrayRef {
        let values: ArrayRef =
            Arc::new(StringArray::from(rows.iter().flat_map(|r| r.iter().copied()).collect::<Vec<_>>()));
        let runs: Vec<Run> = rows.iter().map(|r| Run::new(r.len(), 1)).collect();
        wrap(dt, values, &runs).unwrap()
    }

    fn spec() -> ElementSpec {
        ElementSpec::new(vec![
            FieldSpec::ragged("tok", DType::Int64, vec![-1]),
            FieldSpec::tensor("w", DType::Utf8, vec![-1]),
            FieldSpec::scalar("id", DType::Int64),
        ])
        .unwrap()
    }

    fn input() -> Vec<RecordBatch> {
        let s = spec();
        let tok = ints(&[&[1], &[2, 3, 4], &[], &[5, 6], &[7]], &s.fields[0].arrow_type());
        let w = words(&[&["a"], &["b", "c"], &[], &["d", "e", "f"], &[]], &s.fields[1].arrow_type());
        let id: ArrayRef = Arc::new(arrow::array::Int64Array::from(vec![0, 1, 2, 3, 4]));
        let c = chunk(&s, vec![tok, w, id]);
        vec![c.slice(0, 1), c.slice(1, 3), c.slice(4, 1)]
    }

    fn run(
        shapes: BTreeMap<String, Vec<i64>>,
        values: BTreeMap<String, Scalar>,
        b: u64,
        drop: bool,
    ) -> (Result<Vec<RecordBatch>>, SchemaRef) {
        let s = spec();
        let op = Op::PaddedBatch {
            batch_size: b,
            padded_shapes: shapes.clone(),
            padding_values: values.clone(),
            drop_remainder: drop,
        };
        let out_spec = op.output_spec(&[&s]).unwrap();
        let schema = out_spec.arrow_schema();
        let mut p = PaddedBatchOp::new(source(input()), b, shapes, values, drop, &s, &out_spec).unwrap();
        (collect(&mut p, &schema), schema)
    }

    #[test]
    fn pads_to_longest_with_defaults() {
        let (out, _) = run(BTreeMap::new(), BTreeMap::new(), 2, false);
        let out = out.unwrap();
        assert_eq!(rows(&out, "tok"), strs(&["[[1, 0, 0], [2, 3, 4]]", "[[0, 0], [5, 6]]", "[[7]]"]));
        assert_eq!(rows(&out, "w"), strs(&["[[a, ], [b, c]]", "[[, , ], [d, e, f]]", "[[]]"]));
        assert_eq!(rows(&out, "id"), strs(&["[0, 1]", "[2, 3]", "[4]"]));
    }

    #[test]
    fn custom_padding_values_and_drop_remainder() {
        let values = BTreeMap::from([
            ("tok".to_string(), Scalar::Int(-1, DType::Int64)),
            ("w".to_string(), Scalar::Utf8("<pad>".into())),
        ]);
        let (out, schema) = run(BTreeMap::new(), values, 2, true);
        let out = out.unwrap();
        assert_eq!(rows(&out, "tok"), strs(&["[[1, -1, -1], [2, 3, 4]]", "[[-1, -1], [5, 6]]"]));
        assert_eq!(rows(&out, "w"), strs(&["[[a, <pad>], [b, c]]", "[[<pad>, <pad>, <pad>], [d, e, f]]"]));
        assert!(matches!(schema.field(0).data_type(), DataType::FixedSizeList(_, 2)));
        // The padded dimension stays a List (unknown in the spec).
        let DataType::FixedSizeList(item, _) = schema.field(0).data_type() else { unreachable!() };
        assert!(matches!(item.data_type(), DataType::List(_)));
    }

    #[test]
    fn fixed_padded_shape_becomes_fixed_size_list() {
        let shapes = BTreeMap::from([("tok".to_string(), vec![4])]);
        let (out, schema) = run(shapes, BTreeMap::new(), 5, false);
        let out = out.unwrap();
        let DataType::List(item) = schema.field(0).data_type() else { unreachable!() };
        assert!(matches!(item.data_type(), DataType::FixedSizeList(_, 4)));
        assert_eq!(
            rows(&out, "tok"),
            strs(&["[[1, 0, 0, 0], [2, 3, 4, 0], [0, 0, 0, 0], [5, 6, 0, 0], [7, 0, 0, 0]]"])
        );
    }

    #[test]
    fn too_long_for_padded_shape_is_an_error_for_that_batch_only() {
        let shapes = BTreeMap::from([("tok".to_string(), vec![2])]);
        let s = spec();
        let op = Op::PaddedBatch {
            batch_size: 1,
            padded_shapes: shapes.clone(),
            padding_values: BTreeMap::new(),
            drop_remainder: false,
        };
        let out_spec = op.output_spec(&[&s]).unwrap();
        let schema = out_spec.arrow_schema();
        let mut p = PaddedBatchOp::new(source(input()), 1, shapes, BTreeMap::new(), false, &s, &out_spec).unwrap();
        let mut got = Vec::new();
        let mut errors = Vec::new();
        loop {
            match p.next_chunk() {
                Ok(Some(c)) => {
                    assert_eq!(c.schema(), schema);
                    got.push(c)
                }
                Ok(None) => break,
                Err(e) => errors.push(e.to_string()),
            }
        }
        assert_eq!(errors.len(), 1);
        assert!(errors[0].contains("field 'tok' has length 3 > padded length 2"), "{}", errors[0]);
        assert_eq!(rows(&got, "tok"), strs(&["[[1, 0]]", "[[0, 0]]", "[[5, 6]]", "[[7, 0]]"]));
    }

    #[test]
    fn rank2_ragged_field() {
        let s = ElementSpec::new(vec![FieldSpec::ragged("m", DType::Float32, vec![-1, -1])]).unwrap();
        let dt = s.fields[0].arrow_type();
        let inner = DataType::List(Arc::new(arrow::datatypes::Field::new("item", DataType::Float32, true)));
        let leaf: ArrayRef = Arc::new(arrow::array::Float32Array::from(vec![1.0, 2.0, 3.0, 4.0]));
        let rows_inner = wrap(&inner, leaf, &[Run::new(1, 1), Run::new(2, 1), Run::new(1, 1)]).unwrap();
        let col = wrap(&dt, rows_inner, &[Run::new(2, 1), Run::new(1, 1)]).unwrap();
        let op = Op::PaddedBatch {
            batch_size: 2,
            padded_shapes: BTreeMap::new(),
            padding_values: BTreeMap::new(),
            drop_remainder: false,
        };
        let out_spec = op.output_spec(&[&s]).unwrap();
        let schema = out_spec.arrow_schema();
        let mut p = PaddedBatchOp::new(
            source(vec![chunk(&s, vec![col])]),
            2,
            BTreeMap::new(),
            BTreeMap::new(),
            false,
            &s,
            &out_spec,
        )
        .unwrap();
        let out = collect(&mut p, &schema).unwrap();
        assert_eq!(rows(&out, "m"), strs(&["[[[1.0, 0.0], [2.0, 3.0]], [[4.0, 0.0], [0.0, 0.0]]]"]));
        let col = out[0].column(0).as_list::<i32>();
        assert_eq!(col.value(0).len(), 2);
    }
}
