//! `reduce` and `scan`: a state threaded through the elements by expressions, or for `scan`
//! by a closure (tf.data's `scan_func`).
//!
//! Each step evaluates the update expressions (or calls the closure) over a one-row batch
//! holding the state fields followed by the element's fields, which is exactly the scope the
//! plan type-checked.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef};
use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use flumen_ir::{ElementSpec, FieldSpec, NamedExpr, Result, Scalar};
use flumen_udf::closure::{guarded, ElementFn};
use flumen_udf::eval::{evaluate, scalar_array};

use crate::checkpoint::{OpState, SaveMode};
use crate::operator::{BoxOperator, Operator};
use crate::resume::Resumable;
use crate::rows::concat;

/// The running state of a fold.
struct State {
    schema: SchemaRef,
    values: Vec<ArrayRef>,
    update: Vec<(usize, NamedExpr)>,
    /// `reduce` or `scan`, which an update failing on an element's values is bad input of.
    operator: &'static str,
}

impl State {
    fn new(initial: &[(String, Scalar)], update: &[NamedExpr], operator: &'static str) -> Result<Self> {
        let spec = ElementSpec {
            fields: initial.iter().map(|(n, v)| FieldSpec::scalar(n.clone(), v.dtype())).collect(),
            batch_dims: 0,
        };
        let values = initial.iter().map(|(_, v)| scalar_array(v).map_err(Into::into)).collect::<Result<Vec<_>>>()?;
        let update =
            update.iter().map(|u| (spec.index_of(&u.name).expect("type-checked state field"), u.clone())).collect();
        Ok(State { schema: spec.arrow_schema(), values, update, operator })
    }

    /// The one-row scope batch: state fields then the element's fields.
    fn scope(&self, element: &RecordBatch) -> Result<RecordBatch> {
        let fields: Vec<_> = self.schema.fields().iter().chain(element.schema().fields().iter()).cloned().collect();
        let columns: Vec<ArrayRef> = self.values.iter().chain(element.columns()).cloned().collect();
        Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?)
    }

    /// The state values as a one-row chunk.
    fn saved(&self) -> Result<RecordBatch> {
        Ok(RecordBatch::try_new(self.schema.clone(), self.values.clone())?)
    }

    /// Takes the values back from a chunk made by [`State::saved`].
    fn restore(&mut self, state: &mut OpState) -> Result<()> {
        let chunk =
            state.chunks.pop().ok_or_else(|| crate::checkpoint::state::mismatch("a fold state lacks its values"))?;
        if chunk.schema() != self.schema {
            return Err(crate::checkpoint::state::mismatch("a fold state's values have another schema"));
        }
        self.values = chunk.columns().to_vec();
        Ok(())
    }

    fn step(&mut self, scope: &RecordBatch) -> Result<()> {
        let new = self
            .update
            .iter()
            .map(|(i, u)| Ok((*i, evaluate(&u.expr, scope).map_err(|e| e.in_data_of(self.operator))?)))
            .collect::<Result<Vec<_>>>()?;
        for (i, v) in new {
            self.values[i] = v;
        }
        Ok(())
    }
}

/// `reduce`: one element, the final state.
pub struct ReduceOp {
    input: Option<BoxOperator>,
    state: State,
}

impl ReduceOp {
    /// Folds `input` from `initial` with `update`.
    pub fn new(input: BoxOperator, initial: &[(String, Scalar)], update: &[NamedExpr]) -> Result<Self> {
        Ok(ReduceOp { input: Some(input), state: State::new(initial, update, "reduce")? })
    }
}

impl Operator for ReduceOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        let Some(mut input) = self.input.take() else {
            return Ok(None);
        };
        while let Some(chunk) = input.next_chunk()? {
            for i in 0..chunk.num_rows() {
                let scope = self.state.scope(&chunk.slice(i, 1))?;
                self.state.step(&scope)?;
            }
        }
        Ok(Some(RecordBatch::try_new(self.state.schema.clone(), self.state.values.clone())?))
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        let input = self.input.as_ref().map(|i| i.save(mode)).transpose()?;
        Ok(OpState::new("reduce").with_chunks([self.state.saved()?]).maybe_child(input))
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("reduce")?;
        self.state.restore(&mut state)?;
        match (state.next_child()?, &mut self.input) {
            (Some(input_state), Some(input)) => input.restore(input_state),
            (None, input) => {
                *input = None;
                Ok(())
            }
            (Some(_), None) => Err(crate::checkpoint::state::mismatch("reduce has no input to restore")),
        }
    }
}

/// `scan`: after each element, an output element computed from the new state.
///
/// An element whose update or output fails is reported as an error with the state left as
/// it was before it (tf.data applies the scan function's new state only when it succeeds):
/// the outputs of the elements before it are delivered first, and the next pull continues
/// after it.
pub struct ScanOp {
    input: Resumable,
    state: State,
    step: ScanStep,
    schema: SchemaRef,
}

/// How a scan computes a step.
enum ScanStep {
    /// Output expressions over the new state and the element (the state by `State::update`).
    Exprs(Vec<NamedExpr>),
    /// A closure returning the new state's fields then the output's, as one row of `returns`.
    Closure { f: ElementFn, operator: String, returns: SchemaRef },
}

impl ScanOp {
    /// Scans `input` from `initial` with `update`, emitting `output` (output `schema`).
    pub fn new(
        input: BoxOperator,
        initial: &[(String, Scalar)],
        update: &[NamedExpr],
        output: &[NamedExpr],
        schema: SchemaRef,
    ) -> Result<Self> {
        Ok(ScanOp {
            input: Resumable::new(input),
            state: State::new(initial, update, "scan")?,
            step: ScanStep::Exprs(output.to_vec()),
            schema,
        })
    }

    /// Scans `input` from `initial` with the closure `f` (named `name` in errors), which
    /// takes the state's fields then the element's and returns the new state's fields then
    /// the output element's (output `schema`).
    pub fn with_closure(
        input: BoxOperator,
        initial: &[(String, Scalar)],
        f: ElementFn,
        name: &str,
        schema: SchemaRef,
    ) -> Result<Self> {
        let state = State::new(initial, &[], "scan")?;
        let fields: Vec<_> = state.schema.fields().iter().chain(schema.fields().iter()).cloned().collect();
        let returns = Arc::new(Schema::new(fields));
        let operator = format!("scan(closure '{name}')");
        Ok(ScanOp { input: Resumable::new(input), state, step: ScanStep::Closure { f, operator, returns }, schema })
    }

    /// Steps the state over one element and computes its output; on failure the state is
    /// left as it was.
    fn element(&mut self, element: &RecordBatch) -> Result<RecordBatch> {
        let before = self.state.values.clone();
        let out = self.step_and_output(element);
        if out.is_err() {
            self.state.values = before;
        }
        out
    }

    fn step_and_output(&mut self, element: &RecordBatch) -> Result<RecordBatch> {
        let output = match &self.step {
            ScanStep::Exprs(output) => output,
            ScanStep::Closure { f, operator, returns } => {
                let scope = self.state.scope(element)?;
                let out = guarded(operator, || f(&scope))?;
                crate::kernels::function::check_rows(operator, &out, 1)?;
                let out = crate::conform::conform_chunk(out, returns)
                    .map_err(|e| crate::kernels::function::mismatch(operator, e))?;
                let width = self.state.values.len();
                self.state.values = out.columns()[..width].to_vec();
                return Ok(RecordBatch::try_new(self.schema.clone(), out.columns()[width..].to_vec())?);
            }
        };
        self.state.step(&self.state.scope(element)?)?;
        let scope = self.state.scope(element)?;
        let columns = output
            .iter()
            .map(|o| evaluate(&o.expr, &scope).map_err(|e| e.in_data_of("scan")))
            .collect::<Result<Vec<_>>>()?;
        let fields = output
            .iter()
            .zip(&columns)
            .map(|(o, c)| arrow::datatypes::Field::new(&o.name, c.data_type().clone(), true))
            .collect::<Vec<_>>();
        crate::conform::conform_chunk(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?, &self.schema)
    }
}

impl Operator for ScanOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        while let Some(chunk) = self.input.pull()? {
            let mut rows = Vec::with_capacity(chunk.num_rows());
            for i in 0..chunk.num_rows() {
                match self.element(&chunk.slice(i, 1)) {
                    Ok(row) => rows.push(row),
                    Err(e) => {
                        self.input.fail_at(&chunk, i, e);
                        break;
                    }
                }
            }
            if let Some(out) = concat(&rows)? {
                return Ok(Some(out));
            }
        }
        Ok(None)
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        Ok(OpState::new("scan").with_chunks([self.state.saved()?]).child(self.input.save(mode)?))
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("scan")?;
        self.state.restore(&mut state)?;
        self.input.restore(state.take_child()?)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use flumen_ir::{BinaryOp, DType, Expr};

    use super::*;
    use crate::kernels::list_kernels::testing::{drain, int_chunks, int_spec, source, strs, VecOp};

    fn lit(v: i64) -> Expr {
        Expr::Literal(Scalar::Int(v, DType::Int64))
    }

    fn bin(op: BinaryOp, l: Expr, r: Expr) -> Expr {
        Expr::binary(op, l, r)
    }

    fn named(name: &str, expr: Expr) -> NamedExpr {
        NamedExpr { name: name.into(), expr }
    }

    fn initial() -> Vec<(String, Scalar)> {
        vec![("s".to_string(), Scalar::Int(0, DType::Int64))]
    }

    /// `s := s + 100 / (x - 5)`: fails for x = 5.
    fn update_div() -> Vec<NamedExpr> {
        let div = bin(BinaryOp::Div, lit(100), bin(BinaryOp::Sub, Expr::col("x"), lit(5)));
        vec![named("s", bin(BinaryOp::Add, Expr::col("s"), div))]
    }

    fn range(n: i64, splits: &[usize]) -> BoxOperator {
        source(int_chunks("x", &(0..n).collect::<Vec<_>>(), splits))
    }

    const SPLITS: [&[usize]; 5] = [&[10], &[3, 4, 3], &[5, 5], &[6, 4], &[1, 1, 1, 1, 1, 1, 1, 1, 1, 1]];

    #[test]
    fn scan_error_keeps_earlier_outputs_and_continues_after_the_failed_element() {
        let schema = int_spec("out").arrow_schema();
        let expected = strs(&["-20", "-45", "-78", "-128", "-228", "Err", "-128", "-78", "-45", "-20"]);
        for splits in SPLITS {
            let output = [named("out", Expr::col("s"))];
            let mut scan = ScanOp::new(range(10, splits), &initial(), &update_div(), &output, schema.clone()).unwrap();
            assert_eq!(drain(&mut scan, &schema), expected, "{splits:?}");
        }
    }

    #[test]
    fn scan_output_error_leaves_the_state_as_before_the_element() {
        // s := s + x; out := s / (x - 2): the element x = 2 fails after its update, which
        // must not be kept (tf.data keeps the new state only when the function succeeds).
        let schema = int_spec("out").arrow_schema();
        let update = [named("s", bin(BinaryOp::Add, Expr::col("s"), Expr::col("x")))];
        let output = [named("out", bin(BinaryOp::Div, Expr::col("s"), bin(BinaryOp::Sub, Expr::col("x"), lit(2))))];
        for splits in [&[5][..], &[2, 3], &[3, 2], &[1, 1, 1, 1, 1]] {
            let mut scan = ScanOp::new(range(5, splits), &initial(), &update, &output, schema.clone()).unwrap();
            assert_eq!(drain(&mut scan, &schema), strs(&["0", "-1", "Err", "4", "4"]), "{splits:?}");
        }
    }

    #[test]
    fn scan_passes_input_errors_and_continues() {
        let schema = int_spec("out").arrow_schema();
        let update = [named("s", bin(BinaryOp::Add, Expr::col("s"), Expr::col("x")))];
        let output = [named("out", Expr::col("s"))];
        let mut items: VecDeque<Result<RecordBatch>> =
            int_chunks("x", &[0, 1, 2, 3, 4], &[3, 2]).into_iter().map(Ok).collect();
        items.insert(1, Err(flumen_ir::Error::execution("test", "bad element")));
        let mut scan = ScanOp::new(Box::new(VecOp(items)), &initial(), &update, &output, schema.clone()).unwrap();
        assert_eq!(drain(&mut scan, &schema), strs(&["0", "1", "3", "Err", "6", "10"]));
    }

    #[test]
    fn reduce_sums_and_fails_without_panicking() {
        let schema = int_spec("s").arrow_schema();
        let update = [named("s", bin(BinaryOp::Add, Expr::col("s"), Expr::col("x")))];
        let mut reduce = ReduceOp::new(range(10, &[3, 7]), &initial(), &update).unwrap();
        assert_eq!(drain(&mut reduce, &schema), strs(&["45"]));
        for splits in SPLITS {
            let mut reduce = ReduceOp::new(range(10, splits), &initial(), &update_div()).unwrap();
            assert_eq!(drain(&mut reduce, &schema), strs(&["Err"]), "{splits:?}");
        }
    }
}
