//! No-op elimination and simplification: operators that provably leave the element
//! sequence unchanged are merged with their input (`take(-1)`, `skip(0)`, `shard(1, 0)`,
//! `prefetch(0)`, identity maps, `filter(true)`), and functions get their constant
//! sub-expressions folded. `repeat(1)` stays: each epoch salts reshuffling seeds.

use flumen_ir::{Expr, MapFn, Op, Predicate, Scalar, Tunable};

use super::{builtin, Rule};
use crate::simplify::{fold_map_fn, fold_typed};

/// The rules of this module.
pub fn rules() -> Vec<Rule> {
    vec![
        // Only take(-1): a take(n) under a known cardinality of at most n elements can still
        // stop errors (an error is not an element, but a skip(-1) below yields nothing
        // while its input's errors pass through).
        builtin("noop-take", "(take -1 ?x)", |m| m.id("?x")),
        builtin("noop-skip", "(skip 0 ?x)", |m| m.id("?x")),
        builtin("noop-shard", "(shard 1 0 ?x)", |m| m.id("?x")),
        builtin("noop-prefetch", "(prefetch ?b ?x)", |m| {
            (m.tunable("?b")? == Tunable::Fixed(0)).then_some(())?;
            m.id("?x")
        }),
        builtin("noop-map", "(map ?f ?c ?d ?x)", |m| {
            let (f, _) = m.func("?f")?;
            let x = m.plan("?x")?;
            is_identity(&f, &x.spec().field_names()).then_some(())?;
            m.id("?x")
        }),
        builtin("fold-map", "(map ?f ?c ?d ?x)", |m| {
            let (func, vectorized) = m.func("?f")?;
            let x = m.plan("?x")?;
            let folded = fold_map_fn(&func, x.spec());
            if folded == func {
                return None;
            }
            let op = Op::Map {
                func: folded,
                num_parallel_calls: m.tunable("?c")?,
                deterministic: m.optional_bool("?d")?,
                vectorized,
            };
            let x = m.id("?x")?;
            m.add(op, &[x])
        }),
        builtin("fold-filter", "(filter ?p ?c ?d ?x)", |m| {
            let (Predicate::Expr { expr }, vectorized) = m.predicate("?p")? else { return None };
            let x = m.plan("?x")?;
            let folded = fold_typed(&expr, x.spec());
            if folded == expr {
                return None;
            }
            let (c, d) = (m.tunable("?c")?, m.optional_bool("?d")?);
            let x = m.id("?x")?;
            let op = Op::Filter {
                predicate: Predicate::Expr { expr: folded },
                vectorized,
                num_parallel_calls: c,
                deterministic: d,
            };
            m.add(op, &[x])
        }),
        builtin("noop-filter", "(filter ?p ?c ?d ?x)", |m| {
            let (p, _) = m.predicate("?p")?;
            matches!(p, flumen_ir::Predicate::Expr { expr: Expr::Literal(Scalar::Bool(true)) }).then_some(())?;
            m.id("?x")
        }),
    ]
}

/// True when the map returns its input element unchanged.
fn is_identity(f: &MapFn, fields: &[String]) -> bool {
    let MapFn::Exprs { outputs, keep_input } = f else { return false };
    let copies = |o: &flumen_ir::NamedExpr| o.expr == Expr::Column(o.name.clone());
    if *keep_input {
        outputs.iter().all(|o| copies(o) && fields.contains(&o.name))
    } else {
        outputs.len() == fields.len() && outputs.iter().zip(fields).all(|(o, f)| copies(o) && &o.name == f)
    }
}
