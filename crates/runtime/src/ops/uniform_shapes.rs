//! tf.data's batching rule: the elements of one batch have one shape. A batch (of `batch`,
//! `map_and_batch`, `window`, `group_by_window`, `rebatch`) whose elements' dense fields
//! differ in an unknown dimension is an error, "Cannot batch tensors with different shapes",
//! as tf.data reports it; `ragged_batch` batches such elements as ragged.
//!
//! The check runs over the batching operator's output, batch by batch, so every way a batch
//! is made (sequential, parallel, fused with a read) is checked alike: a failing batch is
//! reported in its place and the batches around it are delivered.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;
use flumen_ir::{ElementSpec, Error, FieldKind, Location, Op, Plan, Result, UNKNOWN};

use crate::checkpoint::{OpState, SaveMode};
use crate::operator::{BoxOperator, Operator};
use crate::resume::Resumable;
use crate::rows::concat;

/// Whether the batches of `plan` are checked, and which fields: the batching operator's name
/// and the fields of its batches whose elements must share a shape (dense ones with an unknown
/// dimension below the batch's). What `build` wraps and `explain` shows.
pub fn checks(plan: &Plan) -> Option<(&'static str, Vec<(usize, String)>)> {
    let operator = match plan.op() {
        Op::Batch { .. } => "batch",
        Op::MapAndBatch { .. } => "map_and_batch",
        Op::Rebatch { .. } => "rebatch",
        Op::Window { .. } => "window",
        Op::GroupByWindow { .. } => "group_by_window",
        _ => return None,
    };
    let fields: Vec<(usize, String)> = fields_to_check(plan.spec());
    (!fields.is_empty()).then_some((operator, fields))
}

fn fields_to_check(spec: &ElementSpec) -> Vec<(usize, String)> {
    spec.fields
        .iter()
        .enumerate()
        .filter(|(_, f)| f.kind == FieldKind::Dense && f.shape.iter().skip(1).any(|d| *d == UNKNOWN))
        .map(|(i, f)| (i, f.name.clone()))
        .collect()
}

/// Checks that the elements of each batch `input` makes share their shapes in `fields`
/// (column index and name); `operator` names the batching operator in errors.
pub struct UniformShapesOp {
    input: Resumable,
    fields: Vec<(usize, String)>,
    operator: &'static str,
}

impl UniformShapesOp {
    /// Checks the batches of `input` in `fields` (see [`checks`]).
    pub fn new(input: BoxOperator, fields: Vec<(usize, String)>, operator: &'static str) -> Self {
        UniformShapesOp { input: Resumable::new(input), fields, operator }
    }

    /// The first batch of `chunk` whose elements differ in shape, and the error saying how.
    fn first_mixed(&self, chunk: &RecordBatch) -> Option<(usize, Error)> {
        for (column, name) in &self.fields {
            let batches = chunk.column(*column);
            let Some((elements, ranges)) = batch_ranges(batches) else { continue };
            for (batch, (start, end)) in ranges.into_iter().enumerate() {
                if batches.is_null(batch) || end <= start {
                    continue;
                }
                let first = shape(&elements, start);
                if let Some(k) = (start + 1..end).find(|&e| shape(&elements, e) != first) {
                    let message = format!(
                        "Cannot batch tensors with different shapes in field '{name}': element 0 has shape {:?} \
                         and element {} has shape {:?} (ragged_batch batches them as ragged, padded_batch pads them)",
                        first,
                        k - start,
                        shape(&elements, k)
                    );
                    return Some((batch, Error::data(Location::source(self.operator), message)));
                }
            }
        }
        None
    }
}

impl Operator for UniformShapesOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        while let Some(chunk) = self.input.pull()? {
            let out = match self.first_mixed(&chunk) {
                None => Some(chunk),
                Some((row, error)) => {
                    let before = chunk.slice(0, row);
                    self.input.fail_at(&chunk, row, error);
                    concat(&[before])?
                }
            };
            if let Some(out) = out.filter(|o| o.num_rows() > 0) {
                return Ok(Some(out));
            }
        }
        Ok(None)
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        Ok(OpState::new("uniform_shapes").child(self.input.save(mode)?))
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("uniform_shapes")?;
        self.input.restore(state.take_child()?)
    }
}

/// A batched column's elements and each batch's range of them.
fn batch_ranges(batches: &ArrayRef) -> Option<(ArrayRef, Vec<(usize, usize)>)> {
    match batches.data_type() {
        DataType::List(_) => {
            let list = batches.as_list::<i32>();
            let offsets = list.offsets();
            let ranges = offsets.windows(2).map(|w| (w[0] as usize, w[1] as usize)).collect();
            Some((list.values().clone(), ranges))
        }
        DataType::FixedSizeList(_, n) => {
            let list = batches.as_fixed_size_list();
            let n = *n as usize;
            let first = list.offset() * n;
            Some((list.values().clone(), (0..list.len()).map(|b| (first + b * n, first + (b + 1) * n)).collect()))
        }
        _ => None,
    }
}

/// The lengths of an element's variable dimensions, outermost first (a dense element's rows
/// share theirs, so the first row's stand for all).
fn shape(values: &ArrayRef, row: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let (mut array, mut row) = (values.clone(), row);
    loop {
        let next = match array.data_type() {
            DataType::List(_) => {
                let list = array.as_list::<i32>();
                let (start, end) = (list.value_offsets()[row] as usize, list.value_offsets()[row + 1] as usize);
                out.push(end - start);
                (end > start).then(|| (list.values().clone(), start))
            }
            DataType::FixedSizeList(_, n) => {
                let list = array.as_fixed_size_list();
                (*n > 0).then(|| (list.values().clone(), (list.offset() + row) * *n as usize))
            }
            _ => None,
        };
        match next {
            Some((child, at)) => (array, row) = (child, at),
            None => return out,
        }
    }
}
