//! Parallelization (applied only when autotuning is on): stateless, deterministic maps and
//! filters are marked `num_parallel_calls = AUTOTUNE` (tf.data's map_parallelization and
//! filter_parallelization), and an output whose last operator is synchronous gets a
//! `prefetch(AUTOTUNE)` (tf.data's inject_prefetch) so production overlaps consumption.
//! Order is kept: the map's `deterministic` setting is left as it was. A function whose calls
//! take a process-wide lock (a Python function and the GIL) gets neither: its calls on other
//! threads would wait for the lock the consumer holds (measured in docs/performance-notes.md,
//! "Prefetch and parallelism").
//!
//! Neither reads ahead of a plan whose results depend on how far it is read
//! (`Plan::depends_on_demand`: a closure that keeps state, a stateful generator, a cache, a
//! snapshot): a parallel
//! operator pulls its input ahead of its consumer, so the closure would be called for
//! elements a later `take` or an early-stopping consumer never asks for, or the cache would
//! complete where the written plan leaves it incomplete, and the next pass would differ.
//! A parallel operator or a prefetch the user wrote there stays.
//!
//! As in tf.data, an output that already runs ahead of its consumer (a parallel map,
//! filter, `map_and_batch`, batch or interleave, a prefetch, or an operator this stage
//! parallelizes) gets no prefetch: its workers already overlap the consumer, and a prefetch
//! would hand every element across one more thread (on w4 it cost more than a quarter of
//! the throughput). A written prefetch stays, and the guard counts only on the
//! parallelizations that are switched on.

use egg::Id;
use flumen_ir::{Op, Tunable};

use super::{builtin, Match, Rule};
use crate::analysis::Graph;
use crate::cost::parallel;
use crate::language::Node;
use crate::leaf::OpaqueValue;
use crate::value::{tunable, Value};

/// Which of this module's parallelizations run: the prefetch's guard counts on only these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parallelized {
    /// `map-parallelization`.
    pub maps: bool,
    /// `filter-parallelization`.
    pub filters: bool,
    /// `map-and-batch-parallelization`.
    pub maps_and_batches: bool,
}

impl Parallelized {
    /// Every parallelization on.
    pub const ALL: Parallelized = Parallelized { maps: true, filters: true, maps_and_batches: true };
}

/// The rules of this module, every parallelization on.
pub fn rules() -> Vec<Rule> {
    rules_for(Parallelized::ALL)
}

/// The rules of this module, with the prefetch's guard counting on the parallelizations of
/// `parallelized` only (switching one off by name must not also take the prefetch away from
/// the operator it would have parallelized).
pub fn rules_for(parallelized: Parallelized) -> Vec<Rule> {
    vec![
        builtin("map-parallelization", "(map ?f default ?d ?x)", |m| {
            let (func, vectorized) = m.func("?f")?;
            (func.is_stateless_and_deterministic() && !func.is_exclusive()).then_some(())?;
            reads_ahead_safely(m)?;
            let op = Op::Map {
                func,
                num_parallel_calls: Tunable::Autotune,
                deterministic: m.optional_bool("?d")?,
                vectorized,
            };
            let x = m.id("?x")?;
            m.add(op, &[x])
        }),
        // tf.data's filter_parallelization: a stateless predicate runs like a parallel map.
        builtin("filter-parallelization", "(filter ?p default ?d ?x)", |m| {
            let (predicate, vectorized) = m.predicate("?p")?;
            (predicate.is_stateless_and_deterministic() && !predicate.is_exclusive()).then_some(())?;
            reads_ahead_safely(m)?;
            let op = Op::Filter {
                predicate,
                vectorized,
                num_parallel_calls: Tunable::Autotune,
                deterministic: m.optional_bool("?d")?,
            };
            let x = m.id("?x")?;
            m.add(op, &[x])
        }),
        builtin("map-and-batch-parallelization", "(map_and_batch ?f ?n ?r default ?d ?x)", |m| {
            let (func, vectorized) = m.func("?f")?;
            (func.is_stateless_and_deterministic() && !func.is_exclusive()).then_some(())?;
            reads_ahead_safely(m)?;
            let op = Op::MapAndBatch {
                func,
                batch_size: m.unsigned("?n")?,
                drop_remainder: m.boolean("?r")?,
                num_parallel_calls: Tunable::Autotune,
                deterministic: m.optional_bool("?d")?,
                vectorized,
            };
            let x = m.id("?x")?;
            m.add(op, &[x])
        }),
        builtin("inject-prefetch", "(sink ?x)", move |m| {
            reads_ahead_safely(m)?;
            let x = m.id("?x")?;
            if m.egraph[x].nodes.iter().any(|n| runs_ahead(m.egraph, n, parallelized) || exclusive(m.egraph, n)) {
                return None;
            }
            let prefetched = m.add(Op::Prefetch { buffer_size: Tunable::Autotune }, &[x])?;
            Some(m.egraph.add(Node::Sink(prefetched)))
        }),
    ]
}

/// `Some` when reading the plan bound to `?x` ahead of its consumer changes nothing.
fn reads_ahead_safely(m: &Match) -> Option<()> {
    (!m.plan("?x")?.depends_on_demand()).then_some(())
}

/// Whether the plan term `node` calls a function whose calls take a process-wide lock: a
/// prefetch after it would run it on a producer thread that waits for the lock while the
/// consumer holds it (a Python consumer holds the GIL between `next()` calls).
fn exclusive(egraph: &Graph, node: &Node) -> bool {
    match node {
        Node::Map([f, ..]) | Node::Filter([f, ..]) | Node::MapAndBatch([f, ..]) => egraph[*f].data.exclusive(),
        // An operator no rule rewrites (a scan function, a dataset function) holds its
        // closure in the operator.
        Node::Other(_, children) => match children.first().map(|a| &egraph[*a].data.value) {
            Some(Value::Opaque(OpaqueValue::Op(op))) => op.closure().is_some_and(|c| c.exclusive),
            _ => false,
        },
        _ => false,
    }
}

/// Whether the plan term `node` runs ahead of its consumer on threads of its own, or will
/// once this stage's rules of `parallelized` parallelize it (a stateless, deterministic
/// function with default calls, as their guards ask).
fn runs_ahead(egraph: &Graph, node: &Node, parallelized: Parallelized) -> bool {
    let calls = |c: Id| tunable(&egraph[c].data.value).ok();
    let runs = |c: Id, f: Id, on: bool| match calls(c) {
        Some(Tunable::Default) => on && egraph[f].data.pure() == Some(true) && !egraph[f].data.exclusive(),
        Some(t) => parallel(&t),
        None => false,
    };
    match node {
        Node::Prefetch(_) => true,
        Node::Map([f, c, _, _]) => runs(*c, *f, parallelized.maps),
        Node::Filter([f, c, _, _]) => runs(*c, *f, parallelized.filters),
        Node::MapAndBatch([f, _, _, c, _, _]) => runs(*c, *f, parallelized.maps_and_batches),
        Node::Batch([_, _, c, _, _]) => calls(*c).is_some_and(|t| parallel(&t)),
        Node::Other(_, children) => match children.first().map(|a| &egraph[*a].data.value) {
            Some(Value::Opaque(OpaqueValue::Op(Op::Interleave { num_parallel_calls, .. }))) => {
                parallel(num_parallel_calls)
            }
            _ => false,
        },
        _ => false,
    }
}
