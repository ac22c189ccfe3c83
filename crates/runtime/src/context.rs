//! What physical operators need besides their inputs: the closure registry, execution
//! settings, state shared by all iterators of one dataset, and the seed salt of the
//! current iteration and epoch.

use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, OnceLock};

use arrow::record_batch::RecordBatch;
use flumen_ir::{Plan, WeakPlan};
use flumen_udf::registry::Registry;

use crate::autotune::AutotuneOptions;
use crate::budget::MemoryBudget;
use crate::cancel::Cancel;
use crate::metrics::Metrics;
use crate::pool::ThreadPool;

/// The cores this process may run on (`std::thread::available_parallelism`: its CPU
/// affinity and cgroup quota), read once per process. Reading them takes 40–100 µs of
/// cgroup files on Linux, and each dataset and iterator asked for them four times, about a
/// fortieth of a fresh w4 pass.
pub fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Execution settings that operators read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOptions {
    /// Rows per chunk that sources aim for.
    pub chunk_rows: usize,
    /// The number of cores, used where tf.data defaults to it (interleave's cycle length).
    pub cores: usize,
    /// Keep input order in parallel operators that do not say (tf.data's `deterministic`).
    pub deterministic: bool,
    /// Workers of the iterator's thread pool (default: the cores).
    pub threads: usize,
    /// Autotuning of `AUTOTUNE` parameters.
    pub autotune: AutotuneOptions,
    /// Run chains of maps and filters over whole chunks as one operator (`crate::stage`).
    pub stage_fusion: bool,
    /// Map uncompressed TFRecord files rather than read them (`ReadOptions::map_files`).
    pub map_files: bool,
}

impl Default for ExecOptions {
    fn default() -> Self {
        let cores = cores();
        ExecOptions {
            chunk_rows: flumen_sources::reader::DEFAULT_CHUNK_ROWS,
            cores,
            deterministic: true,
            threads: cores,
            autotune: AutotuneOptions::default(),
            stage_fusion: true,
            map_files: true,
        }
    }
}

impl ExecOptions {
    /// How sources read.
    pub fn read(&self) -> flumen_sources::reader::ReadOptions {
        flumen_sources::reader::ReadOptions { chunk_rows: self.chunk_rows, map_files: self.map_files }
    }
}

/// Equal operators; in-memory data is compared by identity, never element by element.
fn same_op(a: &flumen_ir::Op, b: &flumen_ir::Op) -> bool {
    use flumen_ir::{Op, SourceDesc};
    match (a, b) {
        (Op::Source(SourceDesc::InMemory { data: x, .. }), Op::Source(SourceDesc::InMemory { data: y, .. })) => {
            Arc::ptr_eq(&x.batches, &y.batches)
        }
        _ => a == b,
    }
}

/// A completed pass of an in-memory cache: its chunks, and the seed salt of the context that
/// filled it (what a restore in another process replays the input with).
#[derive(Debug)]
pub struct CachedPass {
    /// The pass's chunks, in order.
    pub chunks: Vec<RecordBatch>,
    /// The salt of the filling context.
    pub salt: u64,
}

/// The contents of an in-memory cache once a pass over its input completed.
pub type CachedChunks = Arc<CachedPass>;

/// State that outlives one iterator: what every iterator of the same dataset shares.
#[derive(Debug)]
pub struct SharedState {
    /// Completed caches, keyed by their plan node without keeping it alive (a dropped node's
    /// address may be reused by another node, which must not see this cache).
    caches: Mutex<Vec<(WeakPlan, CachedChunks)>>,
    iterations: Mutex<u64>,
    /// Plan nodes handed out by [`SharedState::intern`], without keeping them alive.
    interned: Mutex<Vec<WeakPlan>>,
    /// Fingerprints of unseeded random nodes, computed once (in-memory data makes them costly).
    prints: Mutex<Vec<(WeakPlan, u64)>>,
    /// Drawn once per dataset: what unseeded random operators derive their seed from, so an
    /// unseeded shuffle without reshuffling repeats its order, as in tf.data.
    unseeded: u64,
    /// The dataset's state when this is a restored iterator's view of it (see
    /// [`SharedState::view_of`]): the caches completed here are completed there too.
    parent: Option<Arc<SharedState>>,
}

impl Default for SharedState {
    fn default() -> Self {
        SharedState {
            caches: Mutex::default(),
            iterations: Mutex::default(),
            interned: Mutex::default(),
            prints: Mutex::default(),
            // Drawn from std's per-thread hashing keys (taken from the OS once per thread,
            // then counted up per `RandomState`): `rand::random` first seeds a thread's
            // ChaCha generator from the OS, about 40 µs of a fresh process's first dataset.
            unseeded: std::hash::RandomState::new().hash_one(0u64),
            parent: None,
        }
    }
}

impl SharedState {
    /// The state a restored iterator runs in: it reads only the caches completed in it (those
    /// that were complete when the checkpoint was saved, and those it completes), not the ones
    /// other iterators of the dataset completed since, which the saved iterator would have
    /// recorded itself; what it completes is completed in `parent` too.
    pub fn view_of(parent: Arc<SharedState>) -> Self {
        SharedState { unseeded: parent.unseeded, parent: Some(parent), ..SharedState::default() }
    }

    /// A stable 64-bit hash of `node` (from its fingerprint), computed once per node.
    pub fn node_print(&self, node: &Plan) -> u64 {
        let mut prints = self.prints.lock().expect("prints lock");
        if let Some((_, print)) = prints.iter().find(|(key, _)| key.refers_to(node)) {
            return *print;
        }
        prints.retain(|(key, _)| key.is_alive());
        let text = flumen_ir::fingerprint::fingerprint(node);
        let print = u64::from_str_radix(&text[..16], 16).unwrap_or(0);
        prints.push((node.downgrade(), print));
        print
    }

    /// The completed in-memory cache of `node`, if a pass has completed.
    pub fn cached(&self, node: &Plan) -> Option<CachedChunks> {
        let caches = self.caches.lock().expect("cache lock");
        caches.iter().find(|(key, _)| key.refers_to(node)).map(|(_, chunks)| chunks.clone())
    }

    /// Records a completed pass of `node` filled under seed salt `salt` (the first completed
    /// pass wins), forgetting the caches of nodes that no longer exist; the pass recorded.
    pub fn complete_cache(&self, node: &Plan, chunks: Vec<RecordBatch>, salt: u64) -> CachedChunks {
        let mut caches = self.caches.lock().expect("cache lock");
        caches.retain(|(key, _)| key.is_alive());
        if let Some((_, pass)) = caches.iter().find(|(key, _)| key.refers_to(node)) {
            return pass.clone();
        }
        if let Some(parent) = &self.parent {
            parent.complete_cache(node, chunks.clone(), salt);
        }
        let pass = Arc::new(CachedPass { chunks, salt });
        caches.push((node.downgrade(), pass.clone()));
        pass
    }

    /// `plan` with every node replaced by an equal node handed out before, if one is still
    /// alive. Datasets derived from one another are optimized separately, so equal sub-plans
    /// come back as distinct nodes; interning makes them one node again, and per-node state
    /// (in-memory caches, unseeded seeds) is shared between them as in the written plan.
    pub fn intern(&self, plan: &Plan) -> flumen_ir::Result<Plan> {
        let inputs = plan.inputs().iter().map(|i| self.intern(i)).collect::<flumen_ir::Result<Vec<_>>>()?;
        let same_inputs = inputs.iter().zip(plan.inputs()).all(|(a, b)| a.node_id() == b.node_id());
        let node = if same_inputs { plan.clone() } else { Plan::new(plan.op().clone(), inputs)? };
        let mut interned = self.interned.lock().expect("intern lock");
        interned.retain(|w| w.is_alive());
        let equal = |p: &Plan| {
            same_op(p.op(), node.op())
                && p.inputs().len() == node.inputs().len()
                && p.inputs().iter().zip(node.inputs()).all(|(a, b)| a.node_id() == b.node_id())
        };
        if let Some(existing) = interned.iter().filter_map(|w| w.upgrade()).find(equal) {
            return Ok(existing);
        }
        interned.push(node.downgrade());
        Ok(node)
    }

    /// The base seed of the dataset's unseeded random operators: random, drawn once.
    pub fn unseeded(&self) -> u64 {
        self.unseeded
    }

    /// The index of the next iterator over the dataset (0, 1, 2, ...).
    pub fn next_iteration(&self) -> u64 {
        let mut n = self.iterations.lock().expect("iteration lock");
        let this = *n;
        *n += 1;
        this
    }
}

/// Everything needed to instantiate physical operators for one iterator.
#[derive(Debug, Clone)]
pub struct ExecContext {
    /// Named closures and generators.
    pub registry: Registry,
    /// Settings.
    pub options: Arc<ExecOptions>,
    /// State shared by the dataset's iterators.
    pub shared: Arc<SharedState>,
    /// Distinguishes iterations and repeat epochs, for operators that re-randomize
    /// (`shuffle` with `reshuffle_each_iteration`, shuffled `list_files`).
    pub salt: u64,
    /// The base seed unseeded random operators derive theirs from (the dataset's, or the one
    /// a restored checkpoint recorded).
    pub unseeded: u64,
    /// The iteration index this context was made for.
    pub iteration: u64,
    /// The iterator's thread pool, shared by its parallel operators.
    pub pool: Arc<ThreadPool>,
    /// The iterator's operator counters and knobs.
    pub metrics: Arc<Metrics>,
    /// The bytes the iterator's buffers may hold.
    pub budget: Arc<MemoryBudget>,
    /// The iterator's stop request.
    pub cancel: Arc<Cancel>,
}

impl ExecContext {
    /// A context for iteration number `iteration`.
    pub fn new(registry: Registry, options: Arc<ExecOptions>, shared: Arc<SharedState>, iteration: u64) -> Self {
        let unseeded = shared.unseeded();
        ExecContext {
            pool: Arc::new(ThreadPool::new(options.threads)),
            metrics: Arc::default(),
            budget: Arc::new(MemoryBudget::new(options.autotune.ram_budget)),
            cancel: Cancel::new(),
            registry,
            options,
            shared,
            salt: mix(0x666c_756d_656e, iteration),
            unseeded,
            iteration,
        }
    }

    /// The context of epoch `epoch` of a `repeat` running in this context.
    pub fn for_epoch(&self, epoch: u64) -> ExecContext {
        ExecContext { salt: mix(self.salt, epoch), ..self.clone() }
    }
}

/// Mixes two 64-bit values into a well-spread seed (SplitMix64 finalizer).
pub fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_add(0x9e37_79b9_7f4a_7c15).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl ExecContext {
    /// The seed a random operator at `node` uses: the given one, or (unseeded) one drawn
    /// once for the dataset as tf.data does; mixed with the iteration and epoch salt when
    /// it re-randomizes each iteration.
    ///
    /// An unseeded operator's seed mixes the dataset's base with the node's fingerprint (not
    /// its address), so a checkpoint that records the base restores it in another process.
    pub fn seed(&self, node: &Plan, seed: Option<u64>, reshuffle: bool) -> u64 {
        let base = seed.unwrap_or_else(|| mix(self.unseeded, self.shared.node_print(node)));
        if reshuffle {
            mix(base, self.salt)
        } else {
            base
        }
    }
}
