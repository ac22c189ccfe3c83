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
use crate::operator::{BoxOperator, Operator};

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

/// An input that can be rewound to a saved state and pulled: an operator, or the chunk
/// iterator at the root.
pub trait Rewind {
    /// Restores the input to `state`.
    fn rewind(&mut self, state: OpState) -> Result<()>;
    /// Pulls the next chunk.
    fn pull(&mut self) -> Result<Option<RecordBatch>>;
}

impl Rewind for BoxOperator {
    fn rewind(&mut self, state: OpState) -> Result<()> {
        self.restore(state)
    }

    fn pull(&mut self) -> Result<Option<RecordBatch>> {
        self.next_chunk()
    }
}

impl PrePull {
    /// In a symbolic save, once recording (which the save starts): the state "rewind the
    /// input to the recorded state, then skip `skip` rows", if a state was recorded and the
    /// operator holds rows of the chunk pulled after it (`holding`).
    pub fn replay(&self, mode: SaveMode, holding: bool, skip: usize) -> Result<Option<OpState>> {
        if mode != SaveMode::Symbolic {
            return Ok(None);
        }
        self.enable();
        match (self.state(), holding) {
            (Some(before), true) => Ok(Some(OpState::new("replay").with("replay", skip)?.child(before.clone()))),
            _ => Ok(None),
        }
    }

    /// Restores `input` from `child`, a state of the input or one made by
    /// [`PrePull::replay`]. For the latter, the input is rewound and the rows skipped again;
    /// returns the rest of the chunk where they end and the rows skipped (which, after a
    /// replay, lie between the recorded state and that rest).
    pub fn restore<I: Rewind + ?Sized>(
        &mut self,
        input: &mut I,
        child: OpState,
    ) -> Result<Option<(Option<RecordBatch>, usize)>> {
        let Some(skip) = child.fields.get("replay").map(|_| child.get::<usize>("replay")).transpose()? else {
            input.rewind(child)?;
            return Ok(None);
        };
        let mut child = child.expect("replay")?;
        let before = child.take_child()?;
        input.rewind(before.clone())?;
        let rest = skip_rows(|| input.pull(), skip)?;
        self.restored(Some(before));
        Ok(Some((rest, skip)))
    }
}
