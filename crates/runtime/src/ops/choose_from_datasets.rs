//! `choose_from_datasets`: each element from the input a choice dataset names.

use arrow::array::{Array, AsArray};
use arrow::datatypes::{Int64Type, SchemaRef};
use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Location, Result};

use crate::checkpoint::{OpState, SaveMode};
use crate::conform::relabel;
use crate::kernels::drawn_inputs::DrawnInputs;
use crate::operator::{BoxOperator, Operator};
use crate::rows::{concat, RowReader};

/// `choose_from_datasets`: for each element `i` of the choice input, the next element of
/// input `i` of the datasets.
pub struct ChooseOp {
    choices: RowReader,
    inputs: DrawnInputs,
    stop_on_empty: bool,
    chunk_rows: usize,
    schema: SchemaRef,
}

impl ChooseOp {
    /// Chooses from `inputs[1..]` by the int64 choices of `inputs[0]`.
    pub fn new(inputs: Vec<BoxOperator>, stop_on_empty: bool, chunk_rows: usize, schema: SchemaRef) -> Self {
        let mut inputs = inputs.into_iter();
        let choices = RowReader::new(inputs.next().expect("a choice input, type-checked"));
        let inputs = DrawnInputs::new(inputs.collect());
        ChooseOp { choices, inputs, stop_on_empty, chunk_rows: chunk_rows.max(1), schema }
    }

    /// The next choice: the input's index, or the error the choice is.
    fn next_choice(&mut self) -> Result<Option<usize>> {
        let Some(row) = self.choices.next_slice(1)? else { return Ok(None) };
        let choice = row.column(0).as_primitive::<Int64Type>();
        let n = self.inputs.len();
        let bad = |what: String| Error::data(Location::source("choose_from_datasets"), what);
        match choice.is_valid(0).then(|| choice.value(0)) {
            Some(i) if (0..n as i64).contains(&i) => Ok(Some(i as usize)),
            Some(i) => Err(bad(format!("choice {i} is outside [0, {n})"))),
            None => Err(bad("a choice is null".into())),
        }
    }
}

impl Operator for ChooseOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        if let Some(e) = self.inputs.error.take() {
            return Err(e);
        }
        let mut rows = Vec::new();
        while !self.inputs.done && rows.len() < self.chunk_rows {
            let row = match self.next_choice() {
                Ok(None) => {
                    self.inputs.done = true;
                    break;
                }
                Ok(Some(i)) if !self.inputs.live()[i] => continue,
                Ok(Some(i)) => match self.inputs.next(i) {
                    Ok(Some(row)) => Ok(row),
                    Ok(None) => {
                        // As tf.data: the end when asked, or when nothing is left to choose.
                        self.inputs.done = self.stop_on_empty || !self.inputs.live().contains(&true);
                        continue;
                    }
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            };
            match row {
                Ok(row) => rows.push(relabel(row, &self.schema)?),
                Err(e) if rows.is_empty() => return Err(e),
                Err(e) => {
                    self.inputs.error = Some(e);
                    break;
                }
            }
        }
        concat(&rows)
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        let state = OpState::new("choose_from_datasets").child(self.choices.save(mode)?);
        self.inputs.save(state, mode)
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("choose_from_datasets")?;
        self.choices.restore(state.take_child()?)?;
        self.inputs.restore(&mut state, "choose_from_datasets")
    }
}
