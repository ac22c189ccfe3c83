//! Fusion: map+map, filter+filter, map+filter (with filter hoisting), map+batch and
//! shuffle+repeat. Functions are composed by substituting field references; a rule that
//! would evaluate a fallible expression on other elements than the unfused plan does (and
//! so hide or invent an error) does not fire.

use flumen_ir::{BinaryOp, Expr, MapFn, Op, Predicate, Tunable};

use super::{builtin, Match, Rule};
use crate::compose::{compose, keeps_fallible_outputs, substitute, Specs};
use crate::language::Node;
use crate::simplify::{fold_map_fn, fold_typed, may_fail, outputs_may_fail};

/// The rules of this module.
pub fn rules() -> Vec<Rule> {
    vec![
        builtin("map-fusion", "(map ?g ?c2 ?d2 (map ?f ?c1 ?d1 ?x))", map_fusion),
        builtin("filter-fusion", "(filter ?q ?c2 ?d2 (filter ?p ?c1 ?d1 ?x))", filter_fusion),
        builtin("filter-hoist", "(filter ?p ?fc ?fd (map ?f ?c ?d ?x))", |m| map_filter(m, true)),
        builtin("map-filter-fusion", "(filter ?p ?fc ?fd (map ?f ?c ?d ?x))", |m| map_filter(m, false)),
        builtin("map-batch-fusion", "(batch ?n ?r ?bc ?bd (map ?f ?c ?d ?x))", map_batch),
        builtin("shuffle-repeat-fusion", "(repeat ?k (shuffle ?n ?s ?r ?x))", shuffle_repeat),
    ]
}

/// The larger of two parallelism settings (autotune above any fixed value).
pub fn wider(a: Tunable, b: Tunable) -> Tunable {
    match (a, b) {
        (Tunable::Autotune, _) | (_, Tunable::Autotune) => Tunable::Autotune,
        (Tunable::Fixed(x), Tunable::Fixed(y)) => Tunable::Fixed(x.max(y)),
        (Tunable::Fixed(x), Tunable::Default) | (Tunable::Default, Tunable::Fixed(x)) => Tunable::Fixed(x),
        (Tunable::Default, Tunable::Default) => Tunable::Default,
    }
}

fn map_fusion(m: &mut Match) -> Option<egg::Id> {
    let ((g, g_pfor), (f, f_pfor)) = (m.func("?g")?, m.func("?f")?);
    if g_pfor != f_pfor {
        return None;
    }
    let x = m.plan("?x")?;
    // g's random draws are keyed by position among the elements its map receives, which
    // do not include f's failures; fused, they would, and every later element would draw
    // another crop.
    if g.draws_random() && matches!(&f, MapFn::Exprs { outputs, .. } if outputs_may_fail(outputs, x.spec())) {
        return None;
    }
    // Nor with a map over an `element_positions`, which places the draws of that map only.
    if g.draws_random() && matches!(x.op(), Op::ElementPositions { .. }) {
        return None;
    }
    let mapped = mapped_spec(m, ["?f", "?c1", "?d1", "?x"])?;
    let composed = fold_map_fn(&compose(&g, &f, Specs { input: x.spec(), output: &mapped })?, x.spec());
    if !keeps_fallible_outputs(&composed, &f, x.spec()) {
        return None;
    }
    let (d1, d2) = (m.optional_bool("?d1")?, m.optional_bool("?d2")?);
    let op = Op::Map {
        func: composed,
        num_parallel_calls: wider(m.tunable("?c1")?, m.tunable("?c2")?),
        deterministic: d1.or(d2),
        vectorized: f_pfor,
    };
    let id = m.id("?x")?;
    m.add(op, &[id])
}

fn filter_fusion(m: &mut Match) -> Option<egg::Id> {
    let ((q, q_pfor), (p, p_pfor)) = (m.predicate("?q")?, m.predicate("?p")?);
    let (Predicate::Expr { expr: q }, Predicate::Expr { expr: p }) = (q, p) else { return None };
    let x = m.plan("?x")?;
    // The fused predicate evaluates q on elements p rejects: q must not fail there.
    if p_pfor != q_pfor || may_fail(&q, x.spec()) {
        return None;
    }
    let both = fold_typed(&Expr::binary(BinaryOp::And, p, q), x.spec());
    let op = Op::Filter {
        predicate: Predicate::Expr { expr: both },
        vectorized: p_pfor,
        num_parallel_calls: wider(m.tunable("?c1")?, m.tunable("?c2")?),
        deterministic: m.optional_bool("?d1")?.or(m.optional_bool("?d2")?),
    };
    let id = m.id("?x")?;
    m.add(op, &[id])
}

/// `map(f).filter(p)` → `filter(p ∘ f).map(f)`: the map runs on fewer elements. Hoisting is
/// the case where `p` reads only fields `f` passes through (`p ∘ f = p`).
fn map_filter(m: &mut Match, hoist: bool) -> Option<egg::Id> {
    let (f, f_pfor) = m.func("?f")?;
    let (Predicate::Expr { expr: p }, p_pfor) = m.predicate("?p")? else { return None };
    let MapFn::Exprs { outputs, .. } = &f else { return None };
    // Random draws are keyed by the position in the map's input, which a filter below the
    // map would change.
    if f.draws_random() {
        return None;
    }
    let x = m.plan("?x")?;
    let reads_computed = p.columns().iter().any(|c| outputs.iter().any(|o| &o.name == c));
    // The map no longer runs on the rejected elements: it must not be able to fail there.
    if hoist == reads_computed || outputs_may_fail(outputs, x.spec()) {
        return None;
    }
    let mapped = mapped_spec(m, ["?f", "?c", "?d", "?x"])?;
    let before = fold_typed(&substitute(&p, &f, Specs { input: x.spec(), output: &mapped })?, x.spec());
    let (c, d) = (m.tunable("?c")?, m.optional_bool("?d")?);
    let (fc, fd) = (m.tunable("?fc")?, m.optional_bool("?fd")?);
    let x_id = m.id("?x")?;
    let filter = Op::Filter {
        predicate: Predicate::Expr { expr: before },
        vectorized: p_pfor,
        num_parallel_calls: fc,
        deterministic: fd,
    };
    let filtered = m.add(filter, &[x_id])?;
    m.add(Op::Map { func: f, num_parallel_calls: c, deterministic: d, vectorized: f_pfor }, &[filtered])
}

/// The spec of the inner map `(map ?f ?c ?d ?x)` a pattern matched, given those variables
/// (the analysis has it; typing the map again took a twentieth of optimizing a plan).
fn mapped_spec(m: &Match, [f, c, d, x]: [&str; 4]) -> Option<flumen_ir::ElementSpec> {
    let map = m.egraph.lookup(Node::Map([m.id(f)?, m.id(c)?, m.id(d)?, m.id(x)?]))?;
    m.egraph[map].data.spec().cloned()
}

fn map_batch(m: &mut Match) -> Option<egg::Id> {
    let (func, vectorized) = m.func("?f")?;
    // The fused operator takes the wider of the two parallelisms: a function whose calls
    // depend on their order (a stateful or random closure) must keep running one element
    // after another, so it stays an unfused map.
    func.is_stateless_and_deterministic().then_some(())?;
    let op = Op::MapAndBatch {
        func,
        batch_size: m.unsigned("?n")?,
        drop_remainder: m.boolean("?r")?,
        num_parallel_calls: wider(m.tunable("?c")?, m.tunable("?bc")?),
        deterministic: m.optional_bool("?d")?.or(m.optional_bool("?bd")?),
        vectorized,
    };
    let id = m.id("?x")?;
    m.add(op, &[id])
}

fn shuffle_repeat(m: &mut Match) -> Option<egg::Id> {
    let op = Op::ShuffleAndRepeat {
        buffer_size: m.unsigned("?n")?,
        seed: m.seed("?s")?,
        reshuffle_each_iteration: m.boolean("?r")?,
        count: m.signed("?k")?,
    };
    let id = m.id("?x")?;
    m.add(op, &[id])
}
