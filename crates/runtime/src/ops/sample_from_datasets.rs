//! `sample_from_datasets`: each element from an input drawn at random by weight.

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::checkpoint::rng::RngState;
use crate::checkpoint::{OpState, SaveMode};
use crate::conform::relabel;
use crate::operator::{BoxOperator, Operator};
use crate::rows::{concat, RowReader};

/// `sample_from_datasets`: each element from an input drawn at random by weight.
pub struct SampleOp {
    inputs: Vec<RowReader>,
    weights: Vec<f64>,
    live: Vec<bool>,
    stop_on_empty: bool,
    rng: ChaCha8Rng,
    chunk_rows: usize,
    schema: SchemaRef,
    done: bool,
    error: Option<Error>,
}

impl SampleOp {
    /// Samples `inputs` with `weights`, seeded by `seed`.
    pub fn new(
        inputs: Vec<BoxOperator>,
        weights: Vec<f64>,
        seed: u64,
        stop_on_empty: bool,
        chunk_rows: usize,
        schema: SchemaRef,
    ) -> Self {
        let live = vec![true; inputs.len()];
        SampleOp {
            inputs: inputs.into_iter().map(RowReader::new).collect(),
            weights,
            live,
            stop_on_empty,
            rng: ChaCha8Rng::seed_from_u64(seed),
            chunk_rows,
            schema,
            done: false,
            error: None,
        }
    }

    /// The index of the next input to draw from, among the live ones with weight > 0.
    fn draw(&mut self) -> Option<usize> {
        let total: f64 = self.weights.iter().zip(&self.live).filter(|(_, l)| **l).map(|(w, _)| w).sum();
        if total <= 0.0 {
            return None;
        }
        let mut x = self.rng.random::<f64>() * total;
        let mut last = None;
        for (i, w) in self.weights.iter().enumerate() {
            if !self.live[i] || *w <= 0.0 {
                continue;
            }
            last = Some(i);
            if x < *w {
                return Some(i);
            }
            x -= w;
        }
        last
    }
}

impl Operator for SampleOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let mut rows = Vec::new();
        while !self.done && rows.len() < self.chunk_rows {
            let Some(i) = self.draw() else {
                self.done = true;
                break;
            };
            match self.inputs[i].next_slice(1) {
                Ok(Some(row)) => rows.push(relabel(row, &self.schema)?),
                Ok(None) => {
                    self.live[i] = false;
                    self.done = self.stop_on_empty;
                }
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
        let mut state = OpState::new("sample_from_datasets")
            .with("live", &self.live)?
            .with("done", self.done)?
            .with("rng", RngState::of(&self.rng))?;
        if let Some(e) = &self.error {
            state = state.with_error(e);
        }
        for input in &self.inputs {
            state = state.child(input.save(mode)?);
        }
        Ok(state)
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("sample_from_datasets")?;
        let live: Vec<bool> = state.get("live")?;
        if live.len() != self.inputs.len() {
            return Err(crate::checkpoint::state::mismatch("sample_from_datasets: another number of inputs"));
        }
        self.live = live;
        self.done = state.get("done")?;
        self.rng = state.get::<RngState>("rng")?.rng()?;
        self.error = state.take_error();
        for input in &mut self.inputs {
            input.restore(state.take_child()?)?;
        }
        Ok(())
    }
}
