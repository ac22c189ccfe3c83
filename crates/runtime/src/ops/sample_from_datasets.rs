//! `sample_from_datasets`: each element from an input drawn at random by weight.

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flumen_ir::Result;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::checkpoint::rng::RngState;
use crate::checkpoint::{OpState, SaveMode};
use crate::conform::relabel;
use crate::kernels::drawn_inputs::DrawnInputs;
use crate::operator::{BoxOperator, Operator};
use crate::rows::concat;

/// `sample_from_datasets`: each element from an input drawn at random by weight.
pub struct SampleOp {
    inputs: DrawnInputs,
    weights: Vec<f64>,
    stop_on_empty: bool,
    rng: ChaCha8Rng,
    chunk_rows: usize,
    schema: SchemaRef,
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
        SampleOp {
            inputs: DrawnInputs::new(inputs),
            weights,
            stop_on_empty,
            rng: ChaCha8Rng::seed_from_u64(seed),
            chunk_rows,
            schema,
        }
    }

    /// The index of the next input to draw from, among the live ones with weight > 0.
    fn draw(&mut self) -> Option<usize> {
        let live = self.inputs.live();
        let total: f64 = self.weights.iter().zip(live).filter(|(_, l)| **l).map(|(w, _)| w).sum();
        if total <= 0.0 {
            return None;
        }
        let mut x = self.rng.random::<f64>() * total;
        let mut last = None;
        for (i, w) in self.weights.iter().enumerate() {
            if !live[i] || *w <= 0.0 {
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
        if let Some(e) = self.inputs.error.take() {
            return Err(e);
        }
        let mut rows = Vec::new();
        while !self.inputs.done && rows.len() < self.chunk_rows {
            let Some(i) = self.draw() else {
                self.inputs.done = true;
                break;
            };
            match self.inputs.next(i) {
                Ok(Some(row)) => rows.push(relabel(row, &self.schema)?),
                Ok(None) => self.inputs.done = self.stop_on_empty,
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
        let state = OpState::new("sample_from_datasets").with("rng", RngState::of(&self.rng))?;
        self.inputs.save(state, mode)
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("sample_from_datasets")?;
        self.rng = state.get::<RngState>("rng")?.rng()?;
        self.inputs.restore(&mut state, "sample_from_datasets")
    }
}
