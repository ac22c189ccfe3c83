//! The inputs of an operator that takes each element from an input it picks
//! (`sample_from_datasets`, `choose_from_datasets`): their readers, which have not ended,
//! whether the picking is over, and an error met after rows of the chunk being built. Saved
//! and restored as one, so both operators keep the same checkpoint fields.

use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Result};

use crate::checkpoint::{OpState, SaveMode};
use crate::operator::{BoxOperator, Operator};
use crate::rows::RowReader;

/// See the module.
pub(crate) struct DrawnInputs {
    readers: Vec<RowReader>,
    live: Vec<bool>,
    /// No element is picked any more.
    pub(crate) done: bool,
    /// Delivered on the next pull, after the rows gathered before it.
    pub(crate) error: Option<Error>,
}

impl DrawnInputs {
    pub(crate) fn new(inputs: Vec<BoxOperator>) -> Self {
        DrawnInputs {
            live: vec![true; inputs.len()],
            readers: inputs.into_iter().map(RowReader::new).collect(),
            done: false,
            error: None,
        }
    }

    /// How many inputs there are.
    pub(crate) fn len(&self) -> usize {
        self.readers.len()
    }

    /// Which inputs have not ended.
    pub(crate) fn live(&self) -> &[bool] {
        &self.live
    }

    /// The next element of input `i`; `None` when it has ended, which it is then marked.
    pub(crate) fn next(&mut self, i: usize) -> Result<Option<RecordBatch>> {
        let row = self.readers[i].next_slice(1)?;
        if row.is_none() {
            self.live[i] = false;
        }
        Ok(row)
    }

    /// `state` with the inputs' fields and, after `children`, one child per input.
    pub(crate) fn save(&self, mut state: OpState, mode: SaveMode) -> Result<OpState> {
        state = state.with("live", &self.live)?.with("done", self.done)?;
        if let Some(e) = &self.error {
            state = state.with_error(e);
        }
        for reader in &self.readers {
            state = state.child(reader.save(mode)?);
        }
        Ok(state)
    }

    /// Restores what [`DrawnInputs::save`] put in `state` (its remaining children).
    pub(crate) fn restore(&mut self, state: &mut OpState, operator: &str) -> Result<()> {
        let live: Vec<bool> = state.get("live")?;
        if live.len() != self.readers.len() {
            return Err(crate::checkpoint::state::mismatch(format!("{operator}: another number of inputs")));
        }
        self.live = live;
        self.done = state.get("done")?;
        self.error = state.take_error();
        for reader in &mut self.readers {
            reader.restore(state.take_child()?)?;
        }
        Ok(())
    }
}
