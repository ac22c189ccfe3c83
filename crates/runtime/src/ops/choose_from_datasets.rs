//! `choose_from_datasets`: each element from the input a choice dataset names.

use arrow::array::{Array, AsArray};
use arrow::datatypes::{Int64Type, SchemaRef};
use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Location, Result};

use crate::checkpoint::{OpState, SaveMode};
use crate::conform::relabel;
use crate::operator::{BoxOperator, Operator};
use crate::rows::{concat, RowReader};

/// `choose_from_datasets`: for each element `i` of the choice input, the next element of
/// input `i` of the datasets.
pub struct ChooseOp {
    choices: RowReader,
    inputs: Vec<RowReader>,
    /// Inputs not yet found ended (only consulted when ended inputs are skipped).
    live: Vec<bool>,
    stop_on_empty: bool,
    chunk_rows: usize,
    schema: SchemaRef,
    done: bool,
    /// An error met after rows of the chunk being built, delivered on the next pull.
    error: Option<Error>,
}

impl ChooseOp {
    /// Chooses from `inputs[1..]` by the int64 choices of `inputs[0]`.
    pub fn new(inputs: Vec<BoxOperator>, stop_on_empty: bool, chunk_rows: usize, schema: SchemaRef) -> Self {
        let mut readers = inputs.into_iter().map(RowReader::new);
        let choices = readers.next().expect("a choice input, type-checked");
        let inputs: Vec<RowReader> = readers.collect();
        ChooseOp {
            choices,
            live: vec![true; inputs.len()],
            inputs,
            stop_on_empty,
            chunk_rows: chunk_rows.max(1),
            schema,
            done: false,
            error: None,
        }
    }

    /// The next choice: the input's index, or the error the choice is.
    fn next_choice(&mut self) -> Result<Option<usize>> {
        let Some(row) = self.choices.next_slice(1)? else { return Ok(None) };
        let choice = row.column(0).as_primitive::<Int64Type>();
        let n = self.inputs.len();
        match choice.is_valid(0).then(|| choice.value(0)) {
            Some(i) if (0..n as i64).contains(&i) => Ok(Some(i as usize)),
            Some(i) => {
                Err(Error::data(Location::source("choose_from_datasets"), format!("choice {i} is outside [0, {n})")))
            }
            None => Err(Error::data(Location::source("choose_from_datasets"), "a choice is null")),
        }
    }
}

impl Operator for ChooseOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let mut rows = Vec::new();
        while !self.done && rows.len() < self.chunk_rows {
            let row = match self.next_choice() {
                Ok(None) => {
                    self.done = true;
                    break;
                }
                Ok(Some(i)) if !self.live[i] => continue,
                Ok(Some(i)) => match self.inputs[i].next_slice(1) {
                    Ok(Some(row)) => Ok(row),
                    Ok(None) => {
                        self.live[i] = false;
                        // As tf.data: the end when asked, or when nothing is left to choose.
                        self.done = self.stop_on_empty || !self.live.contains(&true);
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
                    self.error = Some(e);
                    break;
                }
            }
        }
        concat(&rows)
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        let mut state = OpState::new("choose_from_datasets").with("live", &self.live)?.with("done", self.done)?;
        if let Some(e) = &self.error {
            state = state.with_error(e);
        }
        state = state.child(self.choices.save(mode)?);
        for input in &self.inputs {
            state = state.child(input.save(mode)?);
        }
        Ok(state)
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("choose_from_datasets")?;
        let live: Vec<bool> = state.get("live")?;
        if live.len() != self.inputs.len() {
            return Err(crate::checkpoint::state::mismatch("choose_from_datasets: another number of inputs"));
        }
        self.live = live;
        self.done = state.get("done")?;
        self.error = state.take_error();
        self.choices.restore(state.take_child()?)?;
        for input in &mut self.inputs {
            input.restore(state.take_child()?)?;
        }
        Ok(())
    }
}
