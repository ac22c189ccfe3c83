//! Pipeline options (tf.data's `tf.data.Options`): how a dataset runs, not what it computes.

use std::sync::Arc;

pub use flumen_optimizer::{Optimizer, OptimizerConfig};
pub use flumen_runtime::autotune::{Algorithm, AutotuneOptions};

use crate::checkpoint::ExternalState;

/// Options of a pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Keep element order exactly as written even where an operator is parallel (tf.data's
    /// `deterministic`, default true).
    pub deterministic: bool,
    /// Rows per chunk the executor aims for; larger chunks amortize per-chunk overhead.
    pub chunk_rows: usize,
    /// The optimizer's rules and limits (tf.data's `experimental_optimization`); its
    /// `autotune` flag is tf.data's `autotune.enabled`.
    pub optimization: OptimizerConfig,
    /// The optimizer whose stages and cost model run under `optimization`, when not
    /// flumen's own ([`Options::with_optimizer`]).
    pub optimizer: Option<CustomOptimizer>,
    /// What saving an iterator does when the pipeline calls closures that keep state or are
    /// not deterministic (tf.data's `external_state_policy`; default: fail).
    pub external_state: ExternalState,
    /// Record, from the first element on, what symbolic checkpoints need to hold no element
    /// at all (tf.data's `experimental_symbolic_checkpoint`): one symbolic save of the
    /// operators' states per chunk pulled. Without it, the first symbolic checkpoint of an
    /// iterator also stores the unread rest of the chunks being read (at most one per
    /// operator), and later ones do not.
    pub symbolic_checkpoint: bool,
    /// Workers of each iterator's thread pool, where parallel maps and batches compute
    /// (tf.data's `threading.private_threadpool_size`; default: the cores).
    pub threads: usize,
    /// The autotuner's algorithm and budgets (tf.data's `autotune`). Whether it runs is
    /// `optimization.autotune`, which also decides whether the optimizer makes maps
    /// parallel and prefetches the output.
    pub autotune: AutotuneOptions,
    /// Run each chain of maps and filters over whole chunks as one operator, its functions
    /// called one after another in each task (default on; off with the optimizer). Results,
    /// order and errors are the same either way; fusion saves the hand-offs between
    /// operators (see `flumen_runtime::stage`).
    pub stage_fusion: bool,
    /// Map uncompressed TFRecord files into memory rather than read them (default on). It
    /// saves copying every byte into fresh memory (w2 runs about a fifth faster in one
    /// process, a ninth in a fresh one), at one risk: a file that another program cuts
    /// shorter or rewrites in place while it is mapped stops the process or changes bytes
    /// after their checksum was checked, where reading would have returned an error. Turn it
    /// off for files written while a pipeline reads them.
    pub map_files: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            deterministic: true,
            chunk_rows: flumen_sources::reader::DEFAULT_CHUNK_ROWS,
            optimization: OptimizerConfig::default(),
            optimizer: None,
            external_state: ExternalState::default(),
            symbolic_checkpoint: false,
            threads: flumen_runtime::context::cores(),
            autotune: AutotuneOptions::default(),
            stage_fusion: true,
            map_files: true,
        }
    }
}

impl Options {
    /// The same options with `deterministic` set.
    pub fn with_deterministic(mut self, deterministic: bool) -> Self {
        self.deterministic = deterministic;
        self
    }

    /// The same options with the optimizer off: the plan runs exactly as written, one
    /// operator per plan node, and every expression function is called once per element.
    pub fn without_optimizations(mut self) -> Self {
        self.optimization.enabled = false;
        self.stage_fusion = false;
        self
    }

    /// The same options with file mapping on or off (see [`Options::map_files`]).
    pub fn with_map_files(mut self, on: bool) -> Self {
        self.map_files = on;
        self
    }

    /// The same options with stage fusion on or off (see [`Options::stage_fusion`]).
    pub fn with_stage_fusion(mut self, on: bool) -> Self {
        self.stage_fusion = on;
        self
    }

    /// The same options running `optimizer` (its stages, including rules of your own, and its
    /// cost model) instead of flumen's own: `iter`, `explain`, `explain_analyze`, the
    /// optimization report and checkpoints all use what it makes of the plan. Its
    /// configuration becomes `optimization`, which later calls (`with_optimization_rule`,
    /// `with_autotune`, `without_optimizations`) change as usual: flumen's default stages
    /// follow them, stages given with `Optimizer::with_stages` do not.
    pub fn with_optimizer(mut self, optimizer: Optimizer) -> Self {
        self.optimization = optimizer.config().clone();
        self.optimizer = Some(CustomOptimizer(Arc::new(optimizer)));
        self
    }

    /// The same options with optimizer rule `name` switched on or off (see
    /// `flumen_optimizer::rule_names`).
    pub fn with_optimization_rule(mut self, name: &str, on: bool) -> Self {
        self.optimization = self.optimization.with_rule(name, on);
        self
    }

    /// The same options with autotuning on or off (off: no map parallelization, no
    /// injected prefetch, and `AUTOTUNE` parameters written by the user take tf.data's
    /// untuned values: the cores for a map's parallelism, the cycle length for an
    /// interleave's, 2 for buffers).
    pub fn with_autotune(mut self, on: bool) -> Self {
        self.optimization.autotune = on;
        self
    }

    /// The same options with the external-state policy of checkpoints set.
    pub fn with_external_state(mut self, policy: ExternalState) -> Self {
        self.external_state = policy;
        self
    }

    /// The same options with `symbolic_checkpoint` set.
    pub fn with_symbolic_checkpoint(mut self, on: bool) -> Self {
        self.symbolic_checkpoint = on;
        self
    }

    /// The same options with the pool size set (at least 1).
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    /// The same options with the autotuner's search algorithm set.
    pub fn with_autotune_algorithm(mut self, algorithm: Algorithm) -> Self {
        self.autotune.algorithm = algorithm;
        self
    }

    /// The same options with the autotuner's CPU budget set: the most parallelism it hands
    /// out in total (at least 1).
    pub fn with_cpu_budget(mut self, cores: usize) -> Self {
        self.autotune.cpu_budget = cores.max(1);
        self
    }

    /// The same options with the RAM budget set: the most bytes the iterator's buffers may
    /// hold (prefetch buffers, parallel results, interleave read-ahead), tuned or not.
    pub fn with_ram_budget(mut self, bytes: u64) -> Self {
        self.autotune.ram_budget = bytes;
        self
    }

    /// The same options with `chunk_rows` set (at least 1).
    pub fn with_chunk_rows(mut self, chunk_rows: usize) -> Self {
        self.chunk_rows = chunk_rows.max(1);
        self
    }
}

/// An optimizer of the user's, shared by the clones of the options that carry it. Two are
/// equal when they are the same optimizer (its rules are code, which cannot be compared).
#[derive(Clone)]
pub struct CustomOptimizer(pub Arc<Optimizer>);

impl PartialEq for CustomOptimizer {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for CustomOptimizer {}

impl std::fmt::Debug for CustomOptimizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let stages: Vec<String> = self.0.stages().into_iter().map(|s| s.name).collect();
        write!(f, "CustomOptimizer(stages: {})", stages.join(", "))
    }
}
