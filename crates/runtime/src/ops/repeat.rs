//! `repeat(count)`: re-instantiate the input for every epoch.

use arrow::record_batch::RecordBatch;
use flumen_ir::{Plan, Result};

use crate::build::build;
use crate::checkpoint::{OpState, SaveMode};
use crate::context::ExecContext;
use crate::operator::{BoxOperator, Operator};

/// Runs its input plan `count` times (`None`: forever), each epoch with its own seed salt.
pub struct RepeatOp {
    plan: Plan,
    ctx: ExecContext,
    count: Option<u64>,
    epoch: u64,
    current: Option<BoxOperator>,
    produced_this_epoch: bool,
    failed: bool,
}

impl RepeatOp {
    /// Repeats `plan` `count` times (`-1`: forever).
    pub fn new(plan: Plan, ctx: ExecContext, count: i64) -> Self {
        RepeatOp {
            plan,
            ctx,
            count: (count >= 0).then_some(count as u64),
            epoch: 0,
            current: None,
            produced_this_epoch: false,
            failed: false,
        }
    }
}

impl Operator for RepeatOp {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            if self.current.is_none() {
                if self.failed || self.count.is_some_and(|c| self.epoch >= c) {
                    return Ok(None);
                }
                // An input that cannot be built will not build next time either: report it
                // once and end, so `ignore_errors` downstream cannot spin on it.
                let built = build(&self.plan, &self.ctx.for_epoch(self.epoch));
                self.failed = built.is_err();
                self.current = Some(built?);
                self.produced_this_epoch = false;
            }
            let op = self.current.as_mut().expect("just built");
            match op.next_chunk()? {
                Some(chunk) => {
                    self.produced_this_epoch = true;
                    return Ok(Some(chunk));
                }
                None => {
                    self.current = None;
                    self.epoch += 1;
                    // An epoch with no elements ends an infinite repeat, as in tf.data
                    // (otherwise `repeat()` of an empty dataset would spin forever).
                    if self.count.is_none() && !self.produced_this_epoch {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// The epoch and the current epoch's input state (rebuilt with that epoch's salt).
    fn save(&self, mode: SaveMode) -> Result<OpState> {
        let current = self.current.as_ref().map(|op| op.save(mode)).transpose()?;
        Ok(OpState::new("repeat")
            .with("epoch", self.epoch)?
            .with("produced_this_epoch", self.produced_this_epoch)?
            .with("failed", self.failed)?
            .maybe_child(current))
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        let mut state = state.expect("repeat")?;
        self.epoch = state.get("epoch")?;
        self.produced_this_epoch = state.get("produced_this_epoch")?;
        self.failed = state.get("failed")?;
        self.current = match state.next_child()? {
            Some(input_state) => {
                let mut op = build(&self.plan, &self.ctx.for_epoch(self.epoch))?;
                op.restore(input_state)?;
                Some(op)
            }
            None => None,
        };
        Ok(())
    }
}
