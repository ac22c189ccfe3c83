//! One pipeline split among workers (Ray read tasks, Ray Train ranks): each worker runs its
//! own part, and the parts together hold every element of the whole exactly once.
//!
//! Sharding the output (`shard(n, i)` at the end, tf.data's `DATA` auto-shard policy) is
//! always right but makes every worker read and compute everything. So where every operator
//! between the output and the sources only transforms, filters, expands, reorders or groups
//! elements (never counts them, pairs them up or drops a remainder), the shard goes down to
//! the sources instead (tf.data's `FILE` policy): each worker reads only its files, Parquet
//! row groups or Avro blocks. A source with fewer units than workers is sharded by element
//! instead, just above the `interleave` that reads it, so no worker is left idle.
//!
//! Both forms pin what would otherwise differ between workers or between attempts: an
//! unseeded shuffle, file-list shuffle or sampler gets a seed derived from the caller's one
//! (all workers share it, so their shards stay disjoint), and every operator keeps its order
//! (Ray replays a failed read task and needs the same output again).

use flumen_ir::{DatasetFn, FileFormat, Op, Plan, Result, SourceDesc, Tunable};
use std::collections::HashMap;

use crate::Dataset;

/// Where a split put the shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SplitPolicy {
    /// Each worker reads its own part of the sources.
    Sources,
    /// Each worker runs the whole pipeline and keeps every `n`-th output element: `reason`
    /// names the operator that needs to see all elements.
    Output {
        /// Why the shard could not go further down.
        reason: String,
    },
}

impl std::fmt::Display for SplitPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SplitPolicy::Sources => write!(f, "sources"),
            SplitPolicy::Output { reason } => write!(f, "output ({reason})"),
        }
    }
}

/// One worker's part of a dataset ([`Dataset::split_for_worker`]).
#[derive(Clone)]
pub struct WorkerSplit {
    /// The part to run.
    pub dataset: Dataset,
    /// Where the shard went.
    pub policy: SplitPolicy,
}

impl Dataset {
    /// The part of this dataset that worker `index` of `num_workers` runs: the parts of all
    /// workers together hold every element exactly once (see the module docs for where the
    /// shard goes and what is pinned). `seed` seeds whatever the pipeline leaves unseeded; it
    /// must be the same for all workers.
    pub fn split_for_worker(&self, num_workers: u64, index: u64, seed: u64) -> Result<WorkerSplit> {
        if num_workers == 0 || index >= num_workers {
            return Err(flumen_ir::Error::plan(
                "split_for_worker",
                format!("worker {index} of {num_workers}: needs 0 <= index < num_workers"),
            ));
        }
        let pinned = Pin { seed, next: 0, done: HashMap::new() }.plan(self.plan())?;
        let (plan, policy) = match unsplittable(&pinned) {
            Some(reason) => (Plan::new(shard(num_workers, index), vec![pinned])?, SplitPolicy::Output { reason }),
            None => {
                let mut split = Split { num_workers, index, done: HashMap::new() };
                (split.plan(&pinned)?, SplitPolicy::Sources)
            }
        };
        let options = self.options().clone().with_deterministic(true);
        let dataset = Dataset::from_plan(plan, self.registry().clone()).with_options(options);
        Ok(WorkerSplit { dataset, policy })
    }
}

impl Dataset {
    /// How many workers the sources can be split among by whole units (files, list entries,
    /// a range's values) before [`Dataset::split_for_worker`] has to shard records instead:
    /// the fewest over the sources. `None` when there is no such bound to respect: the
    /// sources split further than files (Parquet row groups, Avro blocks) or count unknown
    /// elements (a generator), or the split shards the output anyway.
    pub fn split_units(&self) -> Option<u64> {
        if unsplittable(self.plan()).is_some() {
            return None;
        }
        let units = |node: &Plan| match node.op() {
            Op::Source(SourceDesc::ListFiles { files, .. }) => Some(files.len() as u64),
            Op::Source(SourceDesc::Splits { files, format } | SourceDesc::Files { files, format }) => {
                (!matches!(format, FileFormat::Parquet(_) | FileFormat::Avro(_))).then_some(files.len() as u64)
            }
            Op::Source(_) => node.cardinality(),
            _ => None,
        };
        self.plan().nodes_topological().iter().filter_map(units).min()
    }
}

fn shard(num_shards: u64, index: u64) -> Op {
    Op::Shard { num_shards, index }
}

/// The first operator (from the output down) that needs to see every element of the whole
/// dataset, described; `None` when the shard can go down to the sources.
fn unsplittable(plan: &Plan) -> Option<String> {
    plan.nodes_topological().into_iter().find_map(|node| {
        let why = match node.op() {
            Op::Take { .. } | Op::Skip { .. } | Op::TakeWhile { .. } => "counts or stops the stream",
            Op::Enumerate { .. } | Op::Scan { .. } | Op::Reduce { .. } | Op::Unique => "depends on elements before it",
            Op::Window { .. } | Op::Shard { .. } => "picks elements by position",
            Op::Zip | Op::ChooseFromDatasets { .. } => "pairs elements by position",
            Op::Batch { drop_remainder: true, .. }
            | Op::RaggedBatch { drop_remainder: true, .. }
            | Op::PaddedBatch { drop_remainder: true, .. }
            | Op::Rebatch { drop_remainder: true, .. }
            | Op::MapAndBatch { drop_remainder: true, .. }
            | Op::BucketBySequenceLength { drop_remainder: true, .. } => "drops a remainder",
            Op::SampleFromDatasets { stop_on_empty_dataset: true, .. } => "stops when one input ends",
            Op::Cache { path: Some(_), .. } | Op::Snapshot { .. } => "writes files of all elements",
            _ => return None,
        };
        Some(format!("{} {why}", node.op().name()))
    })
}

/// Seeds the unseeded random operators and drops per-operator non-determinism.
struct Pin {
    seed: u64,
    next: u64,
    done: HashMap<usize, Plan>,
}

impl Pin {
    fn plan(&mut self, plan: &Plan) -> Result<Plan> {
        if let Some(done) = self.done.get(&plan.node_id()) {
            return Ok(done.clone());
        }
        let inputs = plan.inputs().iter().map(|i| self.plan(i)).collect::<Result<Vec<_>>>()?;
        let mut op = plan.op().clone();
        // Derived seeds differ between operators (two unseeded shuffles would otherwise
        // draw the same permutation) and are the same in every worker: the walk is the same.
        let mut fresh = || {
            self.next += 1;
            Some(self.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(self.next))
        };
        match &mut op {
            Op::Shuffle { seed, .. } | Op::ShuffleAndRepeat { seed, .. } | Op::SampleFromDatasets { seed, .. }
                if seed.is_none() =>
            {
                *seed = fresh()
            }
            Op::Source(SourceDesc::ListFiles { shuffle: true, seed, .. }) if seed.is_none() => *seed = fresh(),
            Op::Map { deterministic, .. }
            | Op::Filter { deterministic, .. }
            | Op::MapAndBatch { deterministic, .. }
            | Op::Interleave { deterministic, .. }
            | Op::Batch { deterministic, .. } => *deterministic = None,
            _ => {}
        }
        let pinned = if op == *plan.op() && inputs.iter().zip(plan.inputs()).all(|(a, b)| a.node_id() == b.node_id()) {
            plan.clone()
        } else {
            Plan::new(op, inputs)?
        };
        self.done.insert(plan.node_id(), pinned.clone());
        Ok(pinned)
    }
}

/// Puts the shard at the sources of a plan that [`unsplittable`] accepted.
struct Split {
    num_workers: u64,
    index: u64,
    done: HashMap<usize, Plan>,
}

impl Split {
    fn plan(&mut self, plan: &Plan) -> Result<Plan> {
        if let Some(done) = self.done.get(&plan.node_id()) {
            return Ok(done.clone());
        }
        let split = match plan.op() {
            Op::Source(desc) => self.source(plan, desc)?,
            // A reader of too few units: shard the records it reads instead of the units.
            Op::Interleave { .. } | Op::FlatMap { .. } if self.too_few_units(plan.input()) => {
                Plan::new(shard(self.num_workers, self.index), vec![plan.clone()])?
            }
            // A map drawing random numbers over a shard placed at its source draws by the
            // unsplit positions (`crate::positions`), as in the whole pipeline.
            Op::Map { func, .. } | Op::MapAndBatch { func, .. } => {
                let input = crate::positions::positioned(&self.plan(plan.input())?, func)?;
                Plan::new(plan.op().clone(), vec![input])?
            }
            _ => {
                let inputs = plan.inputs().iter().map(|i| self.plan(i)).collect::<Result<Vec<_>>>()?;
                Plan::new(plan.op().clone(), inputs)?
            }
        };
        self.done.insert(plan.node_id(), split.clone());
        Ok(split)
    }

    fn source(&self, plan: &Plan, desc: &SourceDesc) -> Result<Plan> {
        let sharded = |input: Plan| Plan::new(shard(self.num_workers, self.index), vec![input]);
        match desc {
            // Each worker reads its own splits, one after another as the files source would.
            SourceDesc::Files { files, format } if self.enough(files.len(), format) => {
                let splits =
                    Plan::new(Op::Source(SourceDesc::Splits { files: files.clone(), format: format.clone() }), vec![])?;
                let read = Op::Interleave {
                    func: DatasetFn::ReadSplit { format: format.clone() },
                    cycle_length: Tunable::Fixed(1),
                    block_length: 1,
                    num_parallel_calls: Tunable::Default,
                    deterministic: None,
                };
                Plan::new(read, vec![sharded(splits)?])
            }
            _ => sharded(plan.clone()),
        }
    }

    /// Whether `files` in `format` make at least one unit per worker: Parquet row groups and
    /// Avro blocks split files further, so those are assumed to.
    fn enough(&self, files: usize, format: &FileFormat) -> bool {
        matches!(format, FileFormat::Parquet(_) | FileFormat::Avro(_)) || files as u64 >= self.num_workers
    }

    /// Whether `plan` is (through maps and filters) a list of fewer files than workers.
    fn too_few_units(&self, plan: &Plan) -> bool {
        match plan.op() {
            Op::Source(SourceDesc::ListFiles { files, .. }) => (files.len() as u64) < self.num_workers,
            Op::Source(SourceDesc::Splits { files, format }) => !self.enough(files.len(), format),
            Op::Map { .. } | Op::Filter { .. } | Op::Prefetch { .. } | Op::Shuffle { .. } | Op::IgnoreErrors => {
                self.too_few_units(plan.input())
            }
            _ => false,
        }
    }
}
