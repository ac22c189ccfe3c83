//! The tuner: a background thread per iterator that periodically turns the live counters
//! into a [`Model`], optimizes it and sets the operators' knobs.
//!
//! Each plan node becomes a model node: its self time per element is the time its
//! operator spent delivering minus the time spent in inputs it pulled on the same thread
//! (synchronous operators), or its workers' time in tasks (parallel map and batch), of which
//! the share their threads spent on a CPU (not waiting on a read or a sleep) is what the CPU
//! budget is charged; its ratio is rows in per row out, as measured. The consumer period is the time the consumer
//! spends outside the pipeline per element. Rounds come every 2 ms until every tunable node
//! has produced (its costs are measured), and the period then doubles up to half a second:
//! a pipeline whose pass takes 20 ms (w4) is tuned within its first tenth (a first round at
//! 10 ms left w4's AUTOTUNE at 0.92 of the best fixed setting in some runs, 0.98–1.10 at
//! 2 ms), and a running pipeline's costs change slowly.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use arrow::record_batch::RecordBatch;
use flumen_ir::{Op, Plan, Result};

use super::model::{Kind, Model, Node, NodeId, Tunable};
use super::optimize::{optimize, Budget};
use super::AutotuneOptions;
use crate::checkpoint::{OpState, SaveMode};
use crate::metrics::{Knob, Metrics, OpStats, StatsKey};
use crate::operator::{BoxOperator, Operator};
use crate::stage::operator_inputs;

/// The model of a running pipeline and the knobs its tunable parameters belong to.
pub struct LiveModel {
    /// The model, in seconds.
    pub model: Model,
    /// Each tunable parameter's knob.
    pub knobs: Vec<(NodeId, Arc<Knob>)>,
    /// The plan node (`StatsKey`) of each model node.
    pub keys: Vec<StatsKey>,
}

fn nanos(v: &std::sync::atomic::AtomicU64) -> f64 {
    v.load(Ordering::Relaxed) as f64 * 1e-9
}

fn rows(s: &OpStats) -> f64 {
    s.rows.load(Ordering::Relaxed) as f64
}

/// Whether `op` pulls its inputs on threads of its own (their time is not its caller's).
fn pulls_elsewhere(op: &Op, stats: &OpStats) -> bool {
    matches!(op, Op::Prefetch { .. } | Op::Interleave { .. }) && stats.asynchronous.load(Ordering::Relaxed)
}

/// Builds the model of `plan` from the counters in `metrics` (nodes not built yet are left
/// out). With `fuse`, each stage (`crate::stage`) is one node, its top's.
pub fn live_model(plan: &Plan, metrics: &Metrics, fuse: bool) -> LiveModel {
    let mut live = LiveModel { model: Model::new(), knobs: Vec::new(), keys: Vec::new() };
    if let Some(root) = add(plan, metrics, fuse, &mut live) {
        live.model.set_root(root);
    }
    live
}

fn add(plan: &Plan, metrics: &Metrics, fuse: bool, live: &mut LiveModel) -> Option<NodeId> {
    let stats = metrics.get(StatsKey::Node(plan.node_id()))?;
    let operator_inputs = operator_inputs(plan, fuse);
    let mut inputs: Vec<(NodeId, Arc<OpStats>)> = Vec::new();
    for input in &operator_inputs {
        if let Some(id) = add(input, metrics, fuse, live) {
            inputs.push((id, metrics.get(StatsKey::Node(input.node_id()))?));
        }
    }
    if matches!(plan.op(), Op::Interleave { .. } | Op::FlatMap { .. }) {
        if let Some(opened) = metrics.get(StatsKey::Opened(plan.node_id())) {
            let per_row = nanos(&opened.wall_ns) / rows(&opened).max(1.0);
            let id = live.model.add(Node::new("opened datasets", Kind::Source, per_row));
            live.keys.push(StatsKey::Opened(plan.node_id()));
            // The opened datasets feed the interleave; its element input only opens them.
            inputs = vec![(id, opened)];
        }
    }
    let out = rows(&stats).max(1.0);
    let rows_in: f64 = inputs.iter().map(|(_, s)| rows(s)).sum();
    let ratio = if inputs.is_empty() { 1.0 } else { (rows_in / out).max(1e-9) };
    let asynchronous = stats.asynchronous.load(Ordering::Relaxed);
    let knobs = stats.knobs();
    let kind = match plan.op() {
        // A source that decodes on the pool (Avro) is tuned as a parallel map is.
        _ if inputs.is_empty() && !asynchronous => Kind::Source,
        Op::Interleave { cycle_length, .. } if asynchronous => {
            let cycle = match cycle_length {
                flumen_ir::Tunable::Fixed(n) => *n as f64,
                _ => knobs.iter().find(|k| k.param == super::model::Param::Parallelism).map_or(1.0, |k| k.max as f64),
            };
            Kind::Interleave { cycle_length: cycle.max(1.0) }
        }
        _ if asynchronous => Kind::Async { ratio },
        _ => Kind::Sync { ratio },
    };
    let self_time = match plan.op() {
        Op::Prefetch { .. } | Op::Interleave { .. } if asynchronous => 0.0,
        _ if asynchronous => nanos(&stats.work_ns) / out,
        op => {
            let inner: f64 = if pulls_elsewhere(op, &stats) {
                0.0
            } else {
                operator_inputs
                    .iter()
                    .filter_map(|i| metrics.get(StatsKey::Node(i.node_id())))
                    .map(|s| nanos(&s.wall_ns))
                    .sum()
            };
            (nanos(&stats.wall_ns) - inner).max(0.0) / out
        }
    };
    let mut node = Node::new(plan.op().name(), kind, self_time);
    node.inputs = inputs.iter().map(|(id, _)| *id).collect();
    node.bytes_per_element = stats.bytes.load(Ordering::Relaxed) as f64 / out;
    let (work, cpu) = (nanos(&stats.work_ns), nanos(&stats.cpu_ns));
    if asynchronous && work > 0.0 && cpu > 0.0 {
        node.cpu_share = (cpu / work).min(1.0);
    }
    let mut tuned = Vec::new();
    for knob in knobs {
        let value = knob.get() as f64;
        match knob.param {
            super::model::Param::Parallelism => node.parallelism = value,
            super::model::Param::Buffer => node.buffer = value,
            super::model::Param::CycleLength => {}
        }
        if knob.tunable {
            node.tunables.push(Tunable { param: knob.param, min: knob.min as f64, max: knob.max as f64 });
            tuned.push(knob);
        }
    }
    let id = live.model.add(node);
    live.keys.push(StatsKey::Node(plan.node_id()));
    live.knobs.extend(tuned.into_iter().map(|k| (id, k)));
    Some(id)
}

/// The time the consumer spends outside the pipeline per element of `root`, in seconds.
pub fn consumer_period(plan: &Plan, metrics: &Metrics) -> f64 {
    let Some(stats) = metrics.get(StatsKey::Node(plan.node_id())) else {
        return 0.0;
    };
    let outside = (metrics.elapsed().as_secs_f64() - nanos(&stats.wall_ns)).max(0.0);
    outside / rows(&stats).max(1.0)
}

/// What a round of the tuner did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Round {
    /// Nothing in the pipeline is tunable.
    Nothing,
    /// A node with a knob has not produced yet: nothing was set.
    Waiting,
    /// The knobs were set.
    Tuned,
}

/// One round: model, optimize, set the knobs. `fuse` says whether the operators were built
/// with stage fusion.
pub fn tune_once(plan: &Plan, metrics: &Metrics, options: &AutotuneOptions, fuse: bool) -> Round {
    let mut live = live_model(plan, metrics, fuse);
    if live.knobs.is_empty() || live.model.root().is_none() {
        return Round::Nothing;
    }
    // A node that has not produced yet has no measured cost: a model with it would tune on
    // guesses, so the knobs keep their values until the next round.
    let measured = |id: &NodeId| metrics.get(live.keys[id.0]).is_some_and(|s| rows(&s) > 0.0);
    if !live.knobs.iter().all(|(id, _)| measured(id)) {
        return Round::Waiting;
    }
    let budget =
        Budget { cpu: options.cpu_budget as f64, ram_bytes: crate::budget::buffer_share(options.ram_budget) as f64 };
    let period = consumer_period(plan, metrics);
    let outcome = optimize(&mut live.model, period, &budget, options.algorithm);
    let at = metrics.elapsed();
    for setting in outcome.settings {
        if let Some((_, knob)) = live.knobs.iter().find(|(id, k)| *id == setting.node && k.param == setting.param) {
            knob.set(setting.value.round() as usize, at);
        }
    }
    Round::Tuned
}

struct Stop {
    stopped: Mutex<bool>,
    wake: Condvar,
}

/// The root operator of an autotuned iterator: its input, plus the tuner thread, which is
/// stopped and joined when the iterator is dropped.
pub struct Tuned {
    input: BoxOperator,
    stop: Arc<Stop>,
    thread: Option<JoinHandle<()>>,
}

impl Tuned {
    /// `input` (built for `plan` with `metrics`, with stage fusion when `fuse`), tuned in the
    /// background.
    pub fn new(
        input: BoxOperator,
        plan: Plan,
        metrics: Arc<Metrics>,
        options: AutotuneOptions,
        fuse: bool,
    ) -> Result<Self> {
        let stop = Arc::new(Stop { stopped: Mutex::new(false), wake: Condvar::new() });
        let signal = stop.clone();
        let thread = std::thread::Builder::new()
            .name("flumen-autotune".into())
            .spawn(move || {
                let mut period = Duration::from_millis(2);
                let mut stopped = signal.stopped.lock().expect("tuner stop");
                loop {
                    stopped = signal.wake.wait_timeout(stopped, period).expect("tuner stop").0;
                    if *stopped {
                        return;
                    }
                    // Every 2 ms until the first round that tunes: the first output of a
                    // pipeline of slow elements or large batches comes late, and its first
                    // settings matter most in a short pass.
                    if tune_once(&plan, &metrics, &options, fuse) != Round::Waiting {
                        period = (period * 2).min(Duration::from_millis(500));
                    }
                }
            })
            .map_err(|e| flumen_ir::Error::execution("autotune", format!("cannot start its thread: {e}")))?;
        Ok(Tuned { input, stop, thread: Some(thread) })
    }
}

impl Operator for Tuned {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        self.input.next_chunk()
    }

    fn save(&self, mode: SaveMode) -> Result<OpState> {
        self.input.save(mode)
    }

    fn restore(&mut self, state: OpState) -> Result<()> {
        self.input.restore(state)
    }
}

impl Drop for Tuned {
    fn drop(&mut self) {
        *self.stop.stopped.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.stop.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use flumen_ir::{BinaryOp, Expr, MapFn, NamedExpr, Scalar, SourceDesc};

    use super::*;
    use crate::autotune::model::Param;

    /// `range → map(calls AUTOTUNE) → prefetch(AUTOTUNE)`, with counters as if the map had
    /// spent `map_ms` in its tasks and the source `source_ms` reading 1000 elements.
    fn measured(map_ms: u64, source_ms: u64) -> (Plan, Metrics, Arc<Knob>, Arc<Knob>) {
        measured_using(map_ms, None, source_ms)
    }

    /// [`measured`], the map's threads having used `map_cpu_ms` of CPU in its tasks (when
    /// measured).
    fn measured_using(map_ms: u64, map_cpu_ms: Option<u64>, source_ms: u64) -> (Plan, Metrics, Arc<Knob>, Arc<Knob>) {
        let source = Plan::new(Op::Source(SourceDesc::Range { start: 0, stop: 1000, step: 1 }), vec![]).unwrap();
        let expr =
            Expr::binary(BinaryOp::Mul, Expr::col("value"), Expr::Literal(Scalar::Int(2, flumen_ir::DType::Int64)));
        let func = MapFn::Exprs { outputs: vec![NamedExpr { name: "value".into(), expr }], keep_input: true };
        let map = Plan::new(
            Op::Map { func, num_parallel_calls: flumen_ir::Tunable::Autotune, deterministic: None, vectorized: false },
            vec![source.clone()],
        )
        .unwrap();
        let prefetch =
            Plan::new(Op::Prefetch { buffer_size: flumen_ir::Tunable::Autotune }, vec![map.clone()]).unwrap();
        let metrics = Metrics::default();
        let ms = 1_000_000;
        let count = |key, wall_ms: u64, work_ms: u64, asynchronous: bool| {
            let s = metrics.stats(StatsKey::Node(key));
            s.rows.store(1000, Ordering::Relaxed);
            s.wall_ns.store(wall_ms * ms, Ordering::Relaxed);
            s.work_ns.store(work_ms * ms, Ordering::Relaxed);
            s.asynchronous.store(asynchronous, Ordering::Relaxed);
            s
        };
        count(source.node_id(), source_ms, 0, false);
        let m = count(map.node_id(), map_ms + source_ms, map_ms, true);
        if let Some(cpu) = map_cpu_ms {
            m.cpu_ns.store(cpu * ms, Ordering::Relaxed);
        }
        let p = count(prefetch.node_id(), map_ms + source_ms, map_ms + source_ms, true);
        let parallelism = m.knob(Param::Parallelism, || Knob::new(Param::Parallelism, 1, true, 1, 16));
        let buffer = p.knob(Param::Buffer, || Knob::new(Param::Buffer, 1, true, 1, 64));
        (prefetch, metrics, parallelism, buffer)
    }

    fn options(cpu: usize) -> AutotuneOptions {
        AutotuneOptions { cpu_budget: cpu, ram_budget: 1 << 30, ..AutotuneOptions::default() }
    }

    #[test]
    fn a_slow_map_gets_the_cpu_budget() {
        let (plan, metrics, parallelism, _) = measured(100, 1);
        assert_eq!(tune_once(&plan, &metrics, &options(4), true), Round::Tuned);
        // Raised while under the budget of 4 cores, so the last step reaches one past it.
        assert_eq!(parallelism.get(), 5);
        assert_eq!(parallelism.history().last().map(|(_, v)| *v), Some(5));
    }

    #[test]
    fn a_map_that_waits_goes_past_the_cpu_budget() {
        // 100 ms in tasks, of which 2 ms on a CPU (the rest reads or sleeps): more calls
        // cost no core, so they are added while they lower the latency, up to the knob's
        // 16, not stopped at one past the budget of 4 as a computing map is.
        let (plan, metrics, parallelism, _) = measured_using(100, Some(2), 1);
        assert_eq!(tune_once(&plan, &metrics, &options(4), true), Round::Tuned);
        assert!(parallelism.get() > 8, "parallelism {}", parallelism.get());
        let (plan, metrics, parallelism, _) = measured_using(100, Some(100), 1);
        tune_once(&plan, &metrics, &options(4), true);
        assert_eq!(parallelism.get(), 5);
    }

    #[test]
    fn a_slow_source_keeps_the_map_narrow() {
        // The source takes 100 ms, the map 1 ms: past a few calls, each more gains under
        // the optimizer's threshold (0.1% of the latency), far below the budget of 16.
        let (plan, metrics, parallelism, _) = measured(1, 100);
        tune_once(&plan, &metrics, &options(16), true);
        assert!(parallelism.get() <= 3, "parallelism {}", parallelism.get());
    }

    #[test]
    fn the_model_mirrors_the_plan() {
        let (plan, metrics, _, _) = measured(100, 10);
        let live = live_model(&plan, &metrics, true);
        let names: Vec<&str> = live.model.nodes().iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["range", "map", "prefetch"]);
        // The map's own time is its workers' compute time per element: 100 ms / 1000.
        assert!((live.model.nodes()[1].self_time - 1e-4).abs() < 1e-9);
        // The source's is its wall time per element.
        assert!((live.model.nodes()[0].self_time - 1e-5).abs() < 1e-9);
        assert_eq!(live.knobs.len(), 2);
    }
}
