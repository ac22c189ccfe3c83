//! Replaying instead of storing: how symbolic checkpoints avoid holding the unread rest of a
//! chunk. An operator that keeps part of an input chunk between pulls (a row reader, the
//! rest after a failed element, a partial batch) records its input's symbolic state before
//! each pull ([`PrePull`]); a symbolic checkpoint then holds that state and a row count, and
//! a restore rewinds the input to it and skips the rows again ([`skip_rows`]).
//!
//! Recording costs one symbolic save of the input subtree per pull, so it starts only once
//! the operator has been asked for a symbolic checkpoint (the first such checkpoint stores
//! the rest of the chunk as data); `Options::symbolic_checkpoint` starts it with the iterator.

use std::cell::Cell;

use arrow::record_batch::RecordBatch;
use flumen_ir::Result;

use crate::checkpoint::state::mismatch;
use crate::checkpoint::{OpState, SaveMode};

/// An input's symbolic state before the pull of the chunk an operator is reading.
#[derive(Default)]
pub struct PrePull {
    tracking: Cell<bool>,
    state: Option<OpState>,
}

impl PrePull {
    /// Starts recording (called by a symbolic save; `save` takes `&self`).
    pub fn enable(&self) {
        self.tracking.set(true);
    }

    /// Whether states are recorded.
    pub fn is_tracking(&self) -> bool {
        self.tracking.get()
    }

    /// Call right before pulling the input: records its state when tracking. A state that
    /// cannot be saved is not recorded, and a later save stores data instead.
    pub fn before_pull(&mut self, save: impl FnOnce() -> Result<OpState>) {
        if self.tracking.get() {
            self.state = save().ok();
        }
    }

    /// The recorded state, if recording was on at the last pull.
    pub fn state(&self) -> Option<&OpState> {
        if self.tracking.get() {
            self.state.as_ref()
        } else {
            None
        }
    }

    /// After a restore from `state`: recording is on and `state` is the pre-pull state.
    pub fn restored(&mut self, state: Option<OpState>) {
        self.tracking.set(true);
        self.state = state;
    }
}

/// Pulls an input just restored to a pre-pull state (`pull` is its `next_chunk`) and drops
/// its first `n` rows; the rest of the chunk where they end, if any rows are left in it.
pub fn skip_rows(mut pull: impl FnMut() -> Result<Option<RecordBatch>>, n: usize) -> Result<Option<RecordBatch>> {
    let mut left = n;
    loop {
        let chunk = pull()
            .map_err(|e| mismatch(format!("replaying {n} rows met an error the saved run had not: {e}")))?
            .ok_or_else(|| mismatch(format!("replaying {n} rows: the input ended {left} rows short")))?;
        if chunk.num_rows() > left {
            return Ok(Some(chunk.slice(left, chunk.num_rows() - left)));
        }
        left -= chunk.num_rows();
        if left == 0 {
            return Ok(None);
        }
    }
}

/// A state that says "rewind the input to `before`, then skip `skip` rows".
pub fn replay_state(kind: &str, before: &OpState, skip: usize) -> Result<OpState> {
    Ok(OpState::new(kind).with("replay", skip)?.child(before.clone()))
}

/// The row count of a state made by [`replay_state`], if it is one.
pub fn replay_skip(state: &OpState) -> Result<Option<usize>> {
    match state.fields.get("replay") {
        Some(_) => state.get("replay").map(Some),
        None => Ok(None),
    }
}

/// Whether `mode` asks for replay (symbolic).
pub fn symbolic(mode: SaveMode) -> bool {
    mode == SaveMode::Symbolic
}
