//! pfor vectorization: a per-element expression function runs over many elements at once.
//!
//! `map(f).batch(b) → batch(b).map(pfor f)` (tf.data's map_vectorization) when `f` is an
//! expression map over scalar fields — stateless, deterministic and with a static output
//! spec — and, because flumen moves elements in chunks anyway, `map(f) → map(pfor f)` and
//! `filter(p) → filter(pfor p)` over the chunk; `map(parse_example) → map(pfor parse_example)`
//! parses each chunk's records in one call. Closures are opaque and never vectorized:
//! a per-element closure stays a per-row operator, and explain names it as such.

use flumen_ir::{MapFn, Op, Plan, Predicate, Tunable};

use super::{builtin, Match, Rule};
use crate::rules::fusion::wider;

/// The rules of this module.
pub fn rules() -> Vec<Rule> {
    vec![
        builtin("pfor-batch", "(batch ?n ?r ?bc ?bd (map ?f ?c ?d ?x))", |m| {
            let (c, d, bc, bd) = (m.tunable("?c")?, m.optional_bool("?d")?, m.tunable("?bc")?, m.optional_bool("?bd")?);
            batch_then_map(m, (c, d), (bc, bd))
        }),
        builtin("pfor-map-and-batch", "(map_and_batch ?f ?n ?r ?c ?d ?x)", |m| {
            let (c, d) = (m.tunable("?c")?, m.optional_bool("?d")?);
            batch_then_map(m, (c, d), (Tunable::Default, None))
        }),
        builtin("pfor-map", "(map ?f ?c ?d ?x)", |m| {
            let (f, false) = m.func("?f")? else { return None };
            let (c, d) = (m.tunable("?c")?, m.optional_bool("?d")?);
            vectorizable(&f).then_some(())?;
            let x = m.id("?x")?;
            m.add(Op::Map { func: f, num_parallel_calls: c, deterministic: d, vectorized: true }, &[x])
        }),
        builtin("pfor-filter", "(filter ?p ?c ?d ?x)", |m| {
            let (p @ Predicate::Expr { .. }, false) = m.predicate("?p")? else { return None };
            let (c, d) = (m.tunable("?c")?, m.optional_bool("?d")?);
            let x = m.id("?x")?;
            m.add(Op::Filter { predicate: p, vectorized: true, num_parallel_calls: c, deterministic: d }, &[x])
        }),
    ]
}

/// True for functions that can run over many elements at once with the same results:
/// expression maps (stateless and deterministic by construction) and `parse_example`, which
/// parses a chunk's records in one call (tf.data's batched `parse_example`).
pub fn vectorizable(f: &MapFn) -> bool {
    matches!(f, MapFn::Exprs { .. } | MapFn::ParseExample { .. })
}

/// True when `f` over elements of `x` has a static output spec after batching (it reads
/// only scalar fields of unbatched elements) and cannot fail: an element that fails before
/// batching is reported alone and the batch continues after it, while after batching the
/// whole batch would fail.
fn batchable(f: &MapFn, x: &Plan) -> bool {
    let MapFn::Exprs { outputs, .. } = f else { return false };
    let spec = x.spec();
    spec.batch_dims == 0
        && !spec.fields.is_empty()
        && !crate::simplify::outputs_may_fail(outputs, spec)
        && outputs.iter().flat_map(|o| o.expr.columns()).all(|c| spec.field(&c).is_some_and(|f| f.is_scalar()))
}

fn batch_then_map(m: &mut Match, map: (Tunable, Option<bool>), batch: (Tunable, Option<bool>)) -> Option<egg::Id> {
    let (f, _) = m.func("?f")?;
    let x = m.plan("?x")?;
    if !vectorizable(&f) || !batchable(&f, &x) {
        return None;
    }
    let op = Op::Batch {
        batch_size: m.unsigned("?n")?,
        drop_remainder: m.boolean("?r")?,
        num_parallel_calls: batch.0,
        deterministic: batch.1,
    };
    let x_id = m.id("?x")?;
    let batched = m.add(op, &[x_id])?;
    let map =
        Op::Map { func: f, num_parallel_calls: wider(map.0, Tunable::Default), deterministic: map.1, vectorized: true };
    m.add(map, &[batched])
}
