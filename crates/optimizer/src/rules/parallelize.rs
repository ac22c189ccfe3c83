//! Parallelization (applied only when autotuning is on): stateless, deterministic maps and
//! filters are marked `num_parallel_calls = AUTOTUNE` (tf.data's map_parallelization and
//! filter_parallelization), and the output
//! gets a `prefetch(AUTOTUNE)` (tf.data's inject_prefetch) so production overlaps
//! consumption. Order is kept: the map's `deterministic` setting is left as it was.

use flumen_ir::{Op, Tunable};

use super::{rule, Rule};
use crate::language::Node;

/// The rules of this module.
pub fn rules() -> Vec<Rule> {
    vec![
        rule("map-parallelization", "(map ?f default ?d ?x)", |m| {
            let (func, vectorized) = m.func("?f")?;
            func.is_stateless_and_deterministic().then_some(())?;
            let op = Op::Map {
                func,
                num_parallel_calls: Tunable::Autotune,
                deterministic: m.optional_bool("?d")?,
                vectorized,
            };
            let x = m.id("?x");
            m.add(op, &[x])
        }),
        // tf.data's filter_parallelization: a stateless predicate runs like a parallel map.
        rule("filter-parallelization", "(filter ?p default ?d ?x)", |m| {
            let (predicate, vectorized) = m.predicate("?p")?;
            predicate.is_stateless_and_deterministic().then_some(())?;
            let op = Op::Filter {
                predicate,
                vectorized,
                num_parallel_calls: Tunable::Autotune,
                deterministic: m.optional_bool("?d")?,
            };
            let x = m.id("?x");
            m.add(op, &[x])
        }),
        rule("map-and-batch-parallelization", "(map_and_batch ?f ?n ?r default ?d ?x)", |m| {
            let (func, vectorized) = m.func("?f")?;
            func.is_stateless_and_deterministic().then_some(())?;
            let op = Op::MapAndBatch {
                func,
                batch_size: m.unsigned("?n")?,
                drop_remainder: m.boolean("?r")?,
                num_parallel_calls: Tunable::Autotune,
                deterministic: m.optional_bool("?d")?,
                vectorized,
            };
            let x = m.id("?x");
            m.add(op, &[x])
        }),
        rule("inject-prefetch", "(sink ?x)", |m| {
            let x = m.id("?x");
            if m.egraph[x].nodes.iter().any(|n| matches!(n, Node::Prefetch(_))) {
                return None;
            }
            let prefetched = m.add(Op::Prefetch { buffer_size: Tunable::Autotune }, &[x])?;
            Some(m.egraph.add(Node::Sink(prefetched)))
        }),
    ]
}
