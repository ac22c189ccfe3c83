//! Iterator checkpoints, from the user's side: save where an iterator is, and continue from
//! there later with a new iterator of the same dataset, in this process or another.
//!
//! ```
//! use flumen::prelude::*;
//!
//! let ds = Dataset::range(0, 100)?.shuffle(10, Some(1))?.batch(8)?;
//! let mut it = ds.iter();
//! let first: Vec<_> = it.by_ref().take(3).collect::<Result<_, _>>()?;
//! let bytes = it.save(SaveMode::Symbolic)?.to_bytes()?; // a few hundred bytes
//!
//! let mut resumed = ds.iter();
//! resumed.restore(&Checkpoint::from_bytes(&bytes)?)?;
//! let rest: Vec<_> = resumed.collect::<Result<_, _>>()?;
//! let all: Vec<_> = ds.iter().collect::<Result<_, _>>()?;
//! assert_eq!([first, rest].concat(), all);
//! # Ok::<(), flumen::Error>(())
//! ```
//!
//! A checkpoint records the dataset's fingerprint; restoring it into another dataset is an
//! error. Closures that keep state or draw random numbers cannot be saved: saving an iterator
//! that calls one fails unless [`Options::external_state`](crate::Options) is
//! [`ExternalState::Ignore`], tf.data's `external_state_policy`. Generators are re-created and
//! advanced to their saved position, which is exact when they yield the same sequence each
//! time they are created.

use flumen_ir::{Error, Plan, Result};
use flumen_runtime::{build, ElementIterator};

pub use flumen_runtime::checkpoint::{Checkpoint, SaveMode, CHECKPOINT_VERSION};

use crate::dataset::{Dataset, DatasetIterator};

/// What saving an iterator does about closures whose state it cannot see (tf.data's
/// `ExternalStatePolicy`, without a warning channel: flumen fails or ignores).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExternalState {
    /// Refuse to save, naming the closures: a restore could not continue them exactly.
    #[default]
    Fail,
    /// Save anyway: stateful or random closures restart from their initial state.
    Ignore,
}

/// The names of the closures in `plan` that keep state or are not deterministic.
fn stateful_closures(plan: &Plan, out: &mut Vec<String>) {
    fn walk(value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                let flag = |k: &str| map.get(k).and_then(|v| v.as_bool());
                if let (Some(name), Some(stateless), Some(deterministic)) =
                    (map.get("name").and_then(|n| n.as_str()), flag("stateless"), flag("deterministic"))
                {
                    if !(stateless && deterministic) && !out.iter().any(|n| n == name) {
                        out.push(name.to_string());
                    }
                }
                map.values().for_each(|v| walk(v, out));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    if let Ok(op) = serde_json::to_value(plan.op()) {
        walk(&op, out);
    }
    plan.inputs().iter().for_each(|i| stateful_closures(i, out));
}

impl DatasetIterator {
    /// The iterator's position, between two elements: everything a new iterator of the same
    /// dataset needs to continue with exactly the elements (and errors) this one would
    /// produce next. See [`SaveMode`] for what each mode stores.
    pub fn save(&self, mode: SaveMode) -> Result<Checkpoint> {
        let (Ok(it), Some(ctx)) = (&self.inner, &self.ctx) else {
            return Err(Error::execution("save", "the pipeline failed to build: there is no iterator state to save"));
        };
        let plan = self.dataset.optimized_plan()?;
        if self.dataset.options().external_state == ExternalState::Fail {
            let mut names = Vec::new();
            stateful_closures(&plan, &mut names);
            if !names.is_empty() {
                return Err(Error::execution(
                    "save",
                    format!(
                        "closures {names:?} keep state or are not deterministic, which a checkpoint cannot capture; \
                         set Options::with_external_state(ExternalState::Ignore) to save anyway"
                    ),
                ));
            }
        }
        Ok(Checkpoint {
            dataset_fingerprint: self.dataset.fingerprint(),
            plan_fingerprint: flumen_ir::fingerprint::fingerprint(&plan),
            mode,
            iteration: ctx.iteration,
            unseeded: ctx.unseeded,
            elements: self.delivered,
            state: it.save(mode)?,
        })
    }

    /// Continues from `checkpoint`: afterwards this iterator produces exactly what the saved
    /// iterator would have produced next. The checkpoint must come from this dataset (the same
    /// plan and seeds) run with the same options.
    pub fn restore(&mut self, checkpoint: &Checkpoint) -> Result<()> {
        let ds = &self.dataset;
        if checkpoint.dataset_fingerprint != ds.fingerprint() {
            return Err(Error::execution(
                "restore",
                format!(
                    "the checkpoint was saved from another dataset (fingerprint {}; this dataset's is {})",
                    checkpoint.dataset_fingerprint,
                    ds.fingerprint()
                ),
            ));
        }
        let plan = ds.optimized_plan()?;
        let plan_print = flumen_ir::fingerprint::fingerprint(&plan);
        if checkpoint.plan_fingerprint != plan_print {
            return Err(Error::execution(
                "restore",
                format!(
                    "the checkpoint's dataset ran as optimized plan {}, this one as {}: its options differ",
                    checkpoint.plan_fingerprint, plan_print
                ),
            ));
        }
        let ctx = ds.context(checkpoint.iteration, Some(checkpoint.unseeded));
        let mut it = ElementIterator::new(build(&plan, &ctx)?, ds.element_spec())?;
        it.restore(checkpoint.state.clone())?;
        if ds.options().symbolic_checkpoint {
            it.record_positions()?;
        }
        self.inner = Ok(it);
        self.ctx = Some(ctx);
        self.delivered = checkpoint.elements;
        Ok(())
    }

    /// Elements delivered so far (errors included; counted from the start of the iteration
    /// across restores).
    pub fn position(&self) -> u64 {
        self.delivered
    }
}

impl Dataset {
    /// A new iterator that continues from `checkpoint` (see [`DatasetIterator::restore`]).
    pub fn iter_from(&self, checkpoint: &Checkpoint) -> Result<DatasetIterator> {
        let mut it = self.iter();
        it.restore(checkpoint)?;
        Ok(it)
    }
}
