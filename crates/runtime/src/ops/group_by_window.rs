//! `group_by_window(key, window_size)`: elements grouped by an int64 key; a group is emitted
//! batched (a `List` row per field) as soon as it holds `window_size` elements, and the
//! remaining groups at the end of the input in ascending key order. The grouping itself is
//! shared with `bucket_by_sequence_length` (the `grouping` module).

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Expr, Result};

use crate::checkpoint::{OpState, SaveMode};
use crate::conform::make_batch;
use crate::kernels::function::MaskFn;
use crate::kernels::grouping::{Group, Grouper};
use crate::kernels::list_kernels::{push_run, wrap, Run};
use crate::operator::{BoxOperator, Operator};

/// `group_by_window(key, window_size)`.
pub struct GroupByWindowOp {
    window_size: usize,
    schema: SchemaRef,
    grouper: Grouper,
}

impl GroupByWindowOp {
    /// Groups `input` by the int64 `key`, `window_size` (> 0) elements per group batch;
    /// `schema` is the output schema.
    pub fn new(input: BoxOperator, key: Expr, window_size: u64, schema: SchemaRef) -> Self {
        GroupByWindowOp {
            window_size: usize::try_from(window_size).unwrap_or(usize::MAX).max(1),
            schema,
            grouper: Grouper::new(input, key, "group_by_window", false),
        }
    }

    /// Groups only the rows `keep` holds true for: a filter fused into this operator (see
    /// `crate::stage`); all of them with `None`.
    pub fn keeping(mut self, keep: Option<MaskFn>) -> Self {
        self.grouper = self.grouper.keeping(keep);
        self
    }

    fn build(&mut self, groups: &[Group]) -> Result<RecordBatch> {
        let columns = self.grouper.gather(groups, self.schema.fields().len())?;
        let mut runs: Vec<Run> = Vec::new();
        for (_, g) in groups {
            push_run(&mut runs, g.len());
        }
        let columns = columns
            .into_iter()
            .zip(self.schema.fields())
            .map(|(c, f)| wrap(f.data_type(), c, &runs))
            .collect::<Result<Vec<_>>>()?;
        make_batch(&self.schema, columns, groups.len())
    }
}

impl Operator for GroupByWindowOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        let window = self.window_size;
        let classify = |k: Option<i64>| {
            k.map(|k| (k, window)).ok_or_else(|| Error::execution("group_by_window", "the key is null"))
        };
        match self.grouper.next_groups(classify)? {
            Some(groups) => self.build(&groups).map(Some),
            None => Ok(None),
        }
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        Ok(OpState::new("group_by_window").child(self.grouper.save(mode)?))
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("group_by_window")?;
        self.grouper.restore(state.take_child()?)
    }
}

#[cfg(test)]
mod tests {
    use flumen_ir::{BinaryOp, DType, Op, Scalar};

    use super::*;
    use crate::kernels::list_kernels::testing::{collect, int_chunks, int_spec, rows, source, strs};

    fn run(values: &[i64], splits: &[usize], modulus: i64, window: u64) -> (Vec<String>, GroupByWindowOp) {
        let key = Expr::binary(BinaryOp::Mod, Expr::col("x"), Expr::Literal(Scalar::Int(modulus, DType::Int64)));
        let op = Op::GroupByWindow { key: key.clone(), window_size: window };
        let schema = op.output_spec(&[&int_spec("x")]).unwrap().arrow_schema();
        let mut g = GroupByWindowOp::new(source(int_chunks("x", values, splits)), key, window, schema.clone());
        let out = collect(&mut g, &schema).unwrap();
        (rows(&out, "x"), g)
    }

    #[test]
    fn groups_by_parity_in_windows_of_two() {
        // tf: range(7).group_by_window(key=x % 2, window_size=2, reduce=batch(2))
        let values: Vec<i64> = (0..7).collect();
        let expected = strs(&["[0, 2]", "[1, 3]", "[4, 6]", "[5]"]);
        let (out, g) = run(&values, &[7], 2, 2);
        assert_eq!(out, expected);
        assert_eq!(g.grouper.retained(), 0);
        let (out, _) = run(&values, &[3, 1, 2, 1], 2, 2);
        assert_eq!(out, expected);
    }

    #[test]
    fn flushes_remaining_groups_in_key_order() {
        // Keys 2, 1, 0 arrive in that order; none completes a window of 3.
        let (out, g) = run(&[5, 4, 3, 8], &[1, 3], 3, 3);
        assert_eq!(out, strs(&["[3]", "[4]", "[5, 8]"]));
        assert_eq!(g.grouper.retained(), 0);
    }

    #[test]
    fn a_failing_key_is_an_error_for_its_element_only() {
        // tf: range(8).group_by_window(key=10 // (x - 3), window_size=10): element 3 is an
        // error (integer division by zero), the others are grouped (keys truncate: -3, -5,
        // -10, _, 10, 5, 3, 2) and flushed in key order at the end.
        let three = Expr::Literal(Scalar::Int(3, DType::Int64));
        let ten = Expr::Literal(Scalar::Int(10, DType::Int64));
        let key = Expr::binary(BinaryOp::Div, ten, Expr::binary(BinaryOp::Sub, Expr::col("x"), three));
        let op = Op::GroupByWindow { key: key.clone(), window_size: 10 };
        let schema = op.output_spec(&[&int_spec("x")]).unwrap().arrow_schema();
        let values: Vec<i64> = (0..8).collect();
        for splits in [&[8][..], &[2, 3, 3], &[4, 4]] {
            let mut g = GroupByWindowOp::new(source(int_chunks("x", &values, splits)), key.clone(), 10, schema.clone());
            let (mut out, mut errors) = (Vec::new(), 0);
            loop {
                match g.next_chunk() {
                    Ok(Some(c)) => out.push(c),
                    Ok(None) => break,
                    Err(e) => {
                        assert!(out.is_empty(), "the error comes before the flushed groups");
                        assert!(e.to_string().to_lowercase().contains("zero"), "{e}");
                        errors += 1;
                    }
                }
            }
            assert_eq!(errors, 1, "{splits:?}");
            assert_eq!(rows(&out, "x"), strs(&["[2]", "[1]", "[0]", "[7]", "[6]", "[5]", "[4]"]), "{splits:?}");
            assert_eq!(g.grouper.retained(), 0);
        }
    }

    #[test]
    fn completion_order() {
        // window 1: every element is its own group, in input order.
        let (out, _) = run(&[3, 2, 1], &[2, 1], 2, 1);
        assert_eq!(out, strs(&["[3]", "[2]", "[1]"]));
    }
}
