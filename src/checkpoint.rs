//! Iterator checkpoints, from the user's side: save where an iterator is, and continue from
//! there later with a new iterator of the same dataset, in this process or another.
//!
//! ```
//! use flumen::prelude::*;
//!
//! let ds = Dataset::range(0, 100)?.shuffle(10, Some(1))?.batch(8)?;
//! let mut it = ds.iter();
//! let first: Vec<_> = it.by_ref().take(3).collect::<Result<_, _>>()?;
//! let bytes = it.save(SaveMode::Symbolic)?.to_bytes()?; // a few kilobytes
//!
//! // Later, perhaps in another process: a new iterator continues where `it` was.
//! let resumed: Vec<_> = ds.iter_from(&Checkpoint::from_bytes(&bytes)?)?.collect::<Result<_, _>>()?;
//! let rest: Vec<_> = it.collect::<Result<_, _>>()?;
//! assert_eq!(resumed, rest);
//! assert_eq!(first.len() + rest.len(), 13);
//! # Ok::<(), flumen::Error>(())
//! ```
//!
//! A checkpoint records the dataset's fingerprint; restoring it into another dataset is an
//! error. Closures that keep state or draw random numbers cannot be saved: saving an iterator
//! that calls one fails unless [`Options::external_state`](crate::Options) is
//! [`ExternalState::Ignore`], tf.data's `external_state_policy`. Generators are re-created and
//! advanced to their saved position, which is exact when they yield the same sequence each
//! time they are created.
//!
//! Besides the operators' states, a checkpoint lists the in-memory caches that were complete
//! when it was saved (their chunks in full mode; in symbolic mode, the seed salt their pass
//! ran under, to run it again). An operator the restored iterator builds later, such as a
//! cache in the next epoch of a `repeat`, reads exactly those, as the saved iterator would
//! have: the same passes in a process that lacks them, and in this process not the caches
//! other iterators completed since (the saved iterator would have recorded them itself, and
//! reported the errors a cache does not record).

use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Op, Plan, Result};
use flumen_runtime::checkpoint::state::mismatch;
use flumen_runtime::checkpoint::OpState;
use flumen_runtime::{build_root, BoxOperator, ChunkIterator, ElementIterator, ExecContext, SharedState};

pub use flumen_runtime::checkpoint::{Checkpoint, SaveMode, CHECKPOINT_VERSION};

use crate::dataset::{ChunkIter, Dataset, DatasetIterator, Iter};

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

/// The names of the closures in `plan` that keep state or are not deterministic, and of the
/// generators declared stateful.
fn stateful_closures(plan: &Plan, out: &mut Vec<String>) {
    let name = match plan.op() {
        flumen_ir::Op::Source(flumen_ir::SourceDesc::Generator { name, stateful: true, .. }) => Some(name),
        op => op.closure().filter(|c| !(c.stateless && c.deterministic)).map(|c| &c.name),
    };
    if let Some(name) = name.filter(|n| !out.contains(n)) {
        out.push(name.clone());
    }
    plan.inputs().iter().for_each(|i| stateful_closures(i, out));
}

/// The in-memory cache nodes of `plan`, in pre-order: a checkpoint names a cache by its index.
fn memory_caches(plan: &Plan, out: &mut Vec<Plan>) {
    if matches!(plan.op(), Op::Cache { path: None, .. }) {
        out.push(plan.clone());
    }
    plan.inputs().iter().for_each(|i| memory_caches(i, out));
}

/// The in-memory caches completed in `ctx`'s shared state. The operators reading a cache save
/// their position in it, but operators built later (the next epoch of a `repeat`) look the
/// cache up in the shared state, which a restore must reproduce.
fn save_caches(plan: &Plan, ctx: &ExecContext, mode: SaveMode) -> Result<OpState> {
    let mut nodes = Vec::new();
    memory_caches(plan, &mut nodes);
    let mut state = OpState::new("caches");
    for (i, node) in nodes.iter().enumerate() {
        if let Some(pass) = ctx.shared.cached(node) {
            let stored = mode == SaveMode::Full;
            let saved = OpState::new("cache_pass").with("node", i)?.with("salt", pass.salt)?.with("stored", stored)?;
            state = state.child(if stored { saved.with_chunks(pass.chunks.iter().cloned()) } else { saved });
        }
    }
    Ok(state)
}

/// Completes in `ctx`'s shared state, a view of `dataset`'s, the caches saved by
/// [`save_caches`]: with the dataset's pass when it has the same one (same salt), else the
/// saved chunks, else by running the cache's input again as it ran when the pass was
/// recorded: under the salt of that pass, with no cache complete (the caches inside the input
/// recorded in the same pass: reading them instead would drop the errors they do not record,
/// which the operators between may react to).
fn restore_caches(plan: &Plan, ctx: &ExecContext, dataset: &SharedState, state: OpState) -> Result<()> {
    let mut nodes = Vec::new();
    memory_caches(plan, &mut nodes);
    for saved in state.expect("caches")?.children.into_iter().flatten() {
        let mut saved = saved.expect("cache_pass")?;
        let node = nodes.get(saved.get::<usize>("node")?).ok_or_else(|| mismatch("a saved cache names no cache"))?;
        let salt: u64 = saved.get("salt")?;
        let chunks = match dataset.cached(node) {
            Some(pass) if pass.salt == salt => pass.chunks.clone(),
            _ if saved.get::<bool>("stored")? => std::mem::take(&mut saved.chunks),
            _ => replay(node.input(), &ExecContext { salt, shared: Arc::default(), ..ctx.clone() })?,
        };
        ctx.shared.complete_cache(node, chunks, salt);
    }
    Ok(())
}

/// Every chunk of a new instance of `plan` in `ctx`, errors skipped (a cache records none).
fn replay(plan: &Plan, ctx: &ExecContext) -> Result<Vec<RecordBatch>> {
    let mut input = build_root(plan, ctx)?;
    let mut chunks = Vec::new();
    loop {
        match input.next_chunk() {
            Ok(Some(chunk)) => chunks.push(chunk),
            Ok(None) => return Ok(chunks),
            Err(_) => continue,
        }
    }
}

/// What an iterator over a dataset walks: elements ([`ElementIterator`]) or chunks
/// ([`ChunkIterator`]); implemented by those two only.
pub trait Cursor: Iterator<Item = Result<RecordBatch>> + Sized {
    /// A cursor over `root`, the operator tree of `dataset`.
    fn over(root: BoxOperator, dataset: &Dataset) -> Result<Self>;
    /// The state of the cursor and its operators.
    fn save_state(&self, mode: SaveMode) -> Result<OpState>;
    /// Restores a state saved by [`Cursor::save_state`] into a new cursor of the same plan.
    fn restore_state(&mut self, state: OpState) -> Result<()>;
    /// Starts recording what symbolic checkpoints need to hold no element.
    fn record_positions(&mut self) -> Result<()>;
}

impl Cursor for ElementIterator {
    fn over(root: BoxOperator, dataset: &Dataset) -> Result<Self> {
        ElementIterator::new(root, dataset.element_spec())
    }

    fn save_state(&self, mode: SaveMode) -> Result<OpState> {
        self.save(mode)
    }

    fn restore_state(&mut self, state: OpState) -> Result<()> {
        self.restore(state)
    }

    fn record_positions(&mut self) -> Result<()> {
        ElementIterator::record_positions(self)
    }
}

impl Cursor for ChunkIterator {
    fn over(root: BoxOperator, _dataset: &Dataset) -> Result<Self> {
        Ok(ChunkIterator::new(root))
    }

    fn save_state(&self, mode: SaveMode) -> Result<OpState> {
        self.save(mode)
    }

    fn restore_state(&mut self, state: OpState) -> Result<()> {
        self.restore(state)
    }

    /// A chunk iterator holds no partial chunk; one symbolic save starts the operators'
    /// recording.
    fn record_positions(&mut self) -> Result<()> {
        self.save(SaveMode::Symbolic).map(drop)
    }
}

impl<C: Cursor> Iter<C> {
    /// The iterator's position, between two items: everything a new iterator of the same
    /// dataset needs to continue with exactly the items (elements or chunks, and errors)
    /// this one would produce next. See [`SaveMode`] for what each mode stores. An element
    /// iterator's checkpoint restores only into an element iterator, a chunk iterator's only
    /// into a chunk iterator. A cancelled iterator cannot be saved ([`Error::Cancelled`]).
    pub fn save(&self, mode: SaveMode) -> Result<Checkpoint> {
        let (Ok(it), Some(ctx)) = (&self.inner, &self.ctx) else {
            return Err(Error::execution("save", "the pipeline failed to build: there is no iterator state to save"));
        };
        // Cancelled producers leave work undone that no state records.
        ctx.cancel.check()?;
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
            plan_fingerprint: self.dataset.optimized_fingerprint()?,
            mode,
            iteration: ctx.iteration,
            unseeded: ctx.unseeded,
            elements: self.delivered,
            state: OpState::new("dataset").child(it.save_state(mode)?).child(save_caches(&plan, ctx, mode)?),
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
        let plan_print = ds.optimized_fingerprint()?;
        if checkpoint.plan_fingerprint != plan_print {
            return Err(Error::execution(
                "restore",
                format!(
                    "the checkpoint's dataset ran as optimized plan {}, this one as {}: its options differ",
                    checkpoint.plan_fingerprint, plan_print
                ),
            ));
        }
        let mut ctx = ds.context(checkpoint.iteration, Some(checkpoint.unseeded));
        // A cancel handle taken before the restore still reaches the rebuilt operators.
        if let Some(old) = &self.ctx {
            ctx.cancel = old.cancel.clone();
        }
        let dataset = ctx.shared.clone();
        ctx.shared = Arc::new(SharedState::view_of(dataset.clone()));
        let mut state = checkpoint.state.clone().expect("dataset")?;
        let iterator = state.take_child()?;
        restore_caches(&plan, &ctx, &dataset, state.take_child()?)?;
        let mut it = C::over(build_root(&plan, &ctx)?, ds)?;
        it.restore_state(iterator)?;
        if ds.options().symbolic_checkpoint {
            it.record_positions()?;
        }
        self.inner = Ok(it);
        self.ctx = Some(ctx);
        self.delivered = checkpoint.elements;
        Ok(())
    }

    /// Items delivered so far (errors included; counted from the start of the iteration
    /// across restores).
    pub fn position(&self) -> u64 {
        self.delivered
    }
}

impl Dataset {
    /// A new element iterator that continues from `checkpoint` (see [`Iter::restore`]).
    pub fn iter_from(&self, checkpoint: &Checkpoint) -> Result<DatasetIterator> {
        let mut it = self.iter();
        it.restore(checkpoint)?;
        Ok(it)
    }

    /// A new chunk iterator that continues from `checkpoint`, saved by a chunk iterator.
    pub fn iter_chunks_from(&self, checkpoint: &Checkpoint) -> Result<ChunkIter> {
        let mut it = self.iter_chunks();
        it.restore(checkpoint)?;
        Ok(it)
    }
}
