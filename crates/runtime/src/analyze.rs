//! `explain analyze`: the physical plan annotated with what each operator did while running.
//!
//! Per plan node: elements (rows) and chunks delivered, errors, bytes, wall time spent in
//! its `next_chunk` by its consumer, its own time (its workers' compute time for parallel
//! operators; wall time minus its same-thread inputs' otherwise), the mean occupancy of its
//! buffer, and each parameter with the values the tuner gave it over time. The bottleneck
//! is the node with the largest own time per unit of parallelism: the one whose speed
//! bounds the pipeline's, unless the consumer spent longer outside the pipeline than that
//! node worked and than it waited inside it, in which case the consumer is named instead.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use flumen_ir::Plan;

use crate::autotune::tuner::live_model;
use crate::budget::MemoryBudget;
use crate::metrics::{Metrics, StatsKey};
use crate::physical::{fused_member, in_place, node_operator, stage_top};
use crate::stage::Stage;

/// Renders the analysis of `plan` as run with `metrics` and `budget` (built with stage
/// fusion when `fuse`).
pub fn analyze(plan: &Plan, metrics: &Metrics, budget: &MemoryBudget, fuse: bool) -> String {
    let live = live_model(plan, metrics, fuse);
    // Own time per parallel worker, per model node: the busiest node is the bottleneck.
    let busy: Vec<f64> = live
        .model
        .nodes()
        .iter()
        .zip(&live.keys)
        .map(|(node, key)| {
            let rows = metrics.get(*key).map_or(0.0, |s| s.rows.load(Ordering::Relaxed) as f64);
            node.self_time * rows / node.parallelism.max(1.0)
        })
        .collect();
    let busiest = busy.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1));
    let mut out = String::new();
    let elapsed = metrics.elapsed().as_secs_f64();
    let _ = writeln!(
        out,
        "elapsed {:.3} s, buffers held at most {:.1} MiB of a {:.1} MiB budget ({:.1} MiB for buffers)",
        elapsed,
        budget.peak() as f64 / 1048576.0,
        budget.limit() as f64 / 1048576.0,
        budget.buffer_limit() as f64 / 1048576.0
    );
    // The consumer's own time (outside `next`) against the busiest node's and against its
    // waits in `next`: a consumer that works longer than it waits, and longer than any
    // operator, is what bounds the pipeline, and no operator is marked then.
    let waited =
        metrics.get(StatsKey::Node(plan.node_id())).map_or(0.0, |s| s.wall_ns.load(Ordering::Relaxed) as f64 * 1e-9);
    let consumer = (elapsed - waited).max(0.0);
    let bottleneck = match busiest {
        Some((_, busy)) if consumer > *busy && consumer > waited => {
            let _ = writeln!(
                out,
                "the consumer is the bottleneck: {consumer:.3} s outside next(), waiting {waited:.3} s in it"
            );
            None
        }
        found => found.map(|(i, _)| live.keys[i]),
    };
    let mut view = View { metrics, bottleneck, live: &live, fuse, out: &mut out };
    view.render(plan, 0);
    out
}

/// What rendering reads, and the text so far.
struct View<'a> {
    metrics: &'a Metrics,
    bottleneck: Option<StatsKey>,
    live: &'a crate::autotune::tuner::LiveModel,
    fuse: bool,
    out: &'a mut String,
}

impl View<'_> {
    fn render(&mut self, plan: &Plan, depth: usize) {
        let indent = "  ".repeat(depth);
        let key = StatsKey::Node(plan.node_id());
        let stage = Stage::of(plan).filter(|_| self.fuse);
        let _ = match &stage {
            Some(stage) => write!(self.out, "{indent}{}", stage_top(stage)),
            None => write!(self.out, "{indent}{}", node_operator(plan)),
        };
        line(key, self.metrics, self.bottleneck, self.live, self.out);
        if self.metrics.get(StatsKey::Opened(plan.node_id())).is_some() {
            let _ = write!(self.out, "{indent}  (opened datasets)");
            line(StatsKey::Opened(plan.node_id()), self.metrics, self.bottleneck, self.live, self.out);
        }
        let Some(stage) = stage else {
            for input in plan.inputs() {
                self.render(input, depth + 1);
            }
            return;
        };
        // The fused members have no counters of their own: the top counts the stage.
        for (depth, member) in (depth + 1..).zip(&stage.members[1..]) {
            let (indent, what) = ("  ".repeat(depth), fused_member(member.op()));
            let _ = writeln!(self.out, "{indent}{what} fused into the stage above{}", in_place(member));
        }
        self.render(stage.input, depth + stage.members.len());
    }
}

fn line(
    key: StatsKey,
    metrics: &Metrics,
    bottleneck: Option<StatsKey>,
    live: &crate::autotune::tuner::LiveModel,
    out: &mut String,
) {
    let Some(s) = metrics.get(key) else {
        let _ = writeln!(out, "  [not run]");
        return;
    };
    let ms = |ns: u64| ns as f64 / 1e6;
    let own = live.keys.iter().position(|k| *k == key).map(|i| &live.model.nodes()[i]);
    let rows = s.rows.load(Ordering::Relaxed);
    let _ = write!(
        out,
        "  rows={} chunks={} errors={} bytes={} wall={:.1}ms",
        rows,
        s.chunks.load(Ordering::Relaxed),
        s.errors.load(Ordering::Relaxed),
        s.bytes.load(Ordering::Relaxed),
        ms(s.wall_ns.load(Ordering::Relaxed)),
    );
    if let Some(node) = own {
        let _ = write!(out, " own={:.1}ms", node.self_time * rows as f64 * 1e3);
    }
    if s.asynchronous.load(Ordering::Relaxed) {
        let _ = write!(out, " work={:.1}ms", ms(s.work_ns.load(Ordering::Relaxed)));
        if let Some(mean) = s.mean_occupancy() {
            let _ = write!(out, " mean_buffered={mean:.1}");
        }
    }
    for knob in s.knobs() {
        let history: Vec<String> = knob.history().iter().map(|(at, v)| format!("{v}@{at}ms")).collect();
        let how = if knob.tunable { "autotuned" } else { "fixed" };
        let _ = write!(out, " {}={} ({how}: {})", knob.param.name(), knob.get(), history.join(" "));
    }
    if bottleneck == Some(key) {
        let _ = write!(out, "  <- bottleneck");
    }
    out.push('\n');
}
