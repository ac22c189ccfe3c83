//! Live counters of a running pipeline: what `explain analyze` reports and the autotuner's
//! model is built from.
//!
//! Every operator [`build`](crate::build::build) creates is wrapped in a [`Metered`] operator
//! that counts the chunks, rows and bytes it delivers and the wall time spent in its
//! `next_chunk`. Operators built again for the same plan node (a `repeat`'s epochs, an
//! interleave's input datasets) add to the same [`OpStats`], so the numbers describe the
//! plan node, as a user reads the plan. Asynchronous operators also report the time their
//! workers spend computing and their buffer occupancy, and expose their tunable parameters
//! as [`Knob`]s. All counters are relaxed atomics: a few per chunk, never per row.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use flumen_ir::Result;

pub use crate::autotune::model::Param;

use crate::checkpoint::{OpState, SaveMode};
use crate::operator::{BoxOperator, Operator};

/// What a counter set belongs to: a plan node, or the datasets an interleave or flat_map
/// node opens (reported as that node's input).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StatsKey {
    /// The operator of a plan node (by `Plan::node_id`).
    Node(usize),
    /// The datasets opened by a plan node's function.
    Opened(usize),
}

/// A parameter's live value: fixed by the plan, or set by the autotuner while running.
#[derive(Debug)]
pub struct Knob {
    /// Which parameter.
    pub param: Param,
    /// Whether the autotuner may change it (the plan said `AUTOTUNE`).
    pub tunable: bool,
    /// The smallest and largest values the tuner may choose.
    pub min: usize,
    /// See `min`.
    pub max: usize,
    value: AtomicUsize,
    /// Every change: milliseconds since the iterator started, and the new value.
    history: Mutex<Vec<(u64, usize)>>,
}

impl Knob {
    /// A knob starting at `value`.
    pub fn new(param: Param, value: usize, tunable: bool, min: usize, max: usize) -> Arc<Knob> {
        let value = value.clamp(min, max.max(min));
        Arc::new(Knob {
            param,
            tunable,
            min,
            max,
            value: AtomicUsize::new(value),
            history: Mutex::new(vec![(0, value)]),
        })
    }

    /// The current value.
    pub fn get(&self) -> usize {
        self.value.load(Ordering::Relaxed)
    }

    /// Sets the value (clamped to `[min, max]`) at `at` since the start; records changes.
    pub fn set(&self, value: usize, at: Duration) {
        let value = value.clamp(self.min, self.max.max(self.min));
        if self.value.swap(value, Ordering::Relaxed) != value {
            self.history.lock().expect("knob history").push((at.as_millis() as u64, value));
        }
    }

    /// The values it took, with when (milliseconds since the start).
    pub fn history(&self) -> Vec<(u64, usize)> {
        self.history.lock().expect("knob history").clone()
    }
}

/// The counters of one plan node.
#[derive(Debug, Default)]
pub struct OpStats {
    /// Chunks delivered.
    pub chunks: AtomicU64,
    /// Rows (elements) delivered.
    pub rows: AtomicU64,
    /// Errors delivered.
    pub errors: AtomicU64,
    /// Bytes of the chunks delivered (Arrow memory size).
    pub bytes: AtomicU64,
    /// Nanoseconds spent in `next_chunk` by its callers.
    pub wall_ns: AtomicU64,
    /// Nanoseconds its workers spent computing (asynchronous operators).
    pub work_ns: AtomicU64,
    /// Nanoseconds of CPU its workers' threads used in that time (parallel map and batch;
    /// 0 where not measured): less than `work_ns` by what the calls spent waiting.
    pub cpu_ns: AtomicU64,
    /// Whether the operator runs asynchronously (prefetch, parallel map or interleave).
    pub asynchronous: AtomicBool,
    /// Rows buffered now, and the sum and count of samples of it (the mean occupancy).
    pub buffered: AtomicU64,
    /// Bytes buffered now.
    pub buffered_bytes: AtomicU64,
    occupancy_sum: AtomicU64,
    occupancy_samples: AtomicU64,
    knobs: Mutex<Vec<Arc<Knob>>>,
}

impl OpStats {
    /// Records a sample of the buffer occupancy (called once per delivered chunk).
    pub fn sample_occupancy(&self, rows: u64) {
        self.occupancy_sum.fetch_add(rows, Ordering::Relaxed);
        self.occupancy_samples.fetch_add(1, Ordering::Relaxed);
    }

    /// The mean buffered rows over the samples, if any.
    pub fn mean_occupancy(&self) -> Option<f64> {
        let n = self.occupancy_samples.load(Ordering::Relaxed);
        (n > 0).then(|| self.occupancy_sum.load(Ordering::Relaxed) as f64 / n as f64)
    }

    /// The knob of `param`: the first operator built for the node creates it with `make`,
    /// later ones (another epoch) share it, so tuning carries over.
    pub fn knob(&self, param: Param, make: impl FnOnce() -> Arc<Knob>) -> Arc<Knob> {
        let mut knobs = self.knobs.lock().expect("knobs");
        if let Some(k) = knobs.iter().find(|k| k.param == param) {
            return k.clone();
        }
        let knob = make();
        knobs.push(knob.clone());
        knob
    }

    /// The node's knobs.
    pub fn knobs(&self) -> Vec<Arc<Knob>> {
        self.knobs.lock().expect("knobs").clone()
    }

    /// Adds `d` to the workers' compute time.
    pub fn add_work(&self, d: Duration) {
        self.work_ns.fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Adds `d` to the CPU time the workers used.
    pub fn add_cpu(&self, d: Duration) {
        self.cpu_ns.fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Sets the current buffer content (rows and bytes).
    pub fn set_buffered(&self, rows: usize, bytes: usize) {
        self.buffered.store(rows as u64, Ordering::Relaxed);
        self.buffered_bytes.store(bytes as u64, Ordering::Relaxed);
    }
}

/// The counters of one iterator's operators, by plan node.
#[derive(Debug)]
pub struct Metrics {
    start: Instant,
    nodes: Mutex<Vec<(StatsKey, Arc<OpStats>)>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics { start: Instant::now(), nodes: Mutex::default() }
    }
}

impl Metrics {
    /// The counters of `key`, created on first use.
    pub fn stats(&self, key: StatsKey) -> Arc<OpStats> {
        let mut nodes = self.nodes.lock().expect("metrics");
        if let Some((_, s)) = nodes.iter().find(|(k, _)| *k == key) {
            return s.clone();
        }
        let stats = Arc::new(OpStats::default());
        nodes.push((key, stats.clone()));
        stats
    }

    /// The counters of `key`, if an operator was built for it.
    pub fn get(&self, key: StatsKey) -> Option<Arc<OpStats>> {
        self.nodes.lock().expect("metrics").iter().find(|(k, _)| *k == key).map(|(_, s)| s.clone())
    }

    /// Time since the iterator started.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }
}

/// An operator with its counters: what every built operator is wrapped in.
pub struct Metered {
    inner: BoxOperator,
    stats: Arc<OpStats>,
}

impl Metered {
    /// `inner`, counted in `stats`.
    pub fn new(inner: BoxOperator, stats: Arc<OpStats>) -> Self {
        Metered { inner, stats }
    }
}

impl Metered {
    /// Counts one pull: a chunk of `(rows, bytes)`, the end, or an error.
    fn count(&self, pulled: std::result::Result<Option<(usize, u64)>, &flumen_ir::Error>) {
        let s = &self.stats;
        match pulled {
            Ok(Some((rows, bytes))) => {
                s.chunks.fetch_add(1, Ordering::Relaxed);
                s.rows.fetch_add(rows as u64, Ordering::Relaxed);
                s.bytes.fetch_add(bytes, Ordering::Relaxed);
            }
            Ok(None) => {}
            Err(_) => {
                s.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl Operator for Metered {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        let start = Instant::now();
        let out = self.inner.next_chunk();
        self.stats.wall_ns.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.count(out.as_ref().map(|c| c.as_ref().map(|c| (c.num_rows(), c.get_array_memory_size() as u64))));
        out
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        self.inner.save(mode)
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        self.inner.restore(state)
    }

    fn defers(&self) -> bool {
        self.inner.defers()
    }

    /// Counted as the chunk it describes, made: its rows and bytes, no time (the worker
    /// that makes it counts that as its task's work).
    fn next_deferred(&mut self) -> Result<Option<std::sync::Arc<dyn crate::operator::Deferred>>> {
        let out = self.inner.next_deferred();
        self.count(out.as_ref().map(|d| d.as_ref().map(|d| (d.num_rows(), d.bytes()))));
        out
    }
}
