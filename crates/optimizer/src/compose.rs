//! Composing functions by substituting field references: `g ∘ f` for two expression maps,
//! and `p ∘ f` for a predicate over a map's output.

use std::collections::HashMap;

use flumen_ir::{ElementSpec, Expr, MapFn, NamedExpr};

/// The expression of each field of `f`'s output, over `f`'s input: a field `f` assigns is
/// its expression; a field `f` keeps is the input column itself.
fn substitution(f_outputs: &[NamedExpr]) -> HashMap<&str, &Expr> {
    f_outputs.iter().map(|o| (o.name.as_str(), &o.expr)).collect()
}

/// The types of `f`'s input and output elements, which substitution must preserve.
#[derive(Clone, Copy)]
pub struct Specs<'a> {
    /// The spec of `f`'s input.
    pub input: &'a ElementSpec,
    /// The spec of `f`'s output.
    pub output: &'a ElementSpec,
}

/// `expr` over `f`'s output, rewritten over `f`'s input. `None` when `expr` reads a field
/// that `f` drops (cannot happen for well-typed plans), or when the rewritten expression
/// would compute anything in another type.
///
/// A field computed from columns types like the column it replaces. One computed from
/// literals alone does not: a literal adopts the type of the column it meets
/// (`x_f32 * 2.0` is float32) and a field does not, so `f0 := cast(-4 as float32)` then
/// `clip(f0, -2.0, 3.5)` is float32, while `clip(cast(-4 as float32), -2.0, 3.5)` would be
/// float64. Such a substitution is kept only where every sub-expression that reads the
/// field types as before.
pub fn substitute(expr: &Expr, f: &MapFn, specs: Specs) -> Option<Expr> {
    let MapFn::Exprs { outputs, keep_input } = f else { return None };
    let sub = substitution(outputs);
    let read = expr.columns();
    if !keep_input && read.iter().any(|c| !sub.contains_key(c.as_str())) {
        return None;
    }
    let rewritten = expr.substitute(&|c| sub.get(c).map(|e| (*e).clone()));
    let constant = read.iter().any(|c| sub.get(c.as_str()).is_some_and(|e| e.columns().is_empty()));
    if constant && !same_types(expr, specs.output, &rewritten, specs.input) {
        return None;
    }
    Some(rewritten)
}

/// True when every sub-expression of `before` (over `before_spec`) that is not a column
/// types as its counterpart in `after` (over `after_spec`), where `after` is `before` with
/// some columns replaced, and casts its operands as it did: a literal-like expression put
/// in a column's place no longer adopts the other operand's type (`index == cast(4e9 as
/// int64)` compares in int32, failing, where `cast(6.0 as int32) == ...` compares in int64).
fn same_types(before: &Expr, before_spec: &ElementSpec, after: &Expr, after_spec: &ElementSpec) -> bool {
    if matches!(before, Expr::Column(_)) {
        return true;
    }
    if before.value_type(before_spec).ok() != after.value_type(after_spec).ok() {
        return false;
    }
    if before.own_casts(before_spec).ok() != after.own_casts(after_spec).ok() {
        return false;
    }
    let (b, a) = (before.children(), after.children());
    b.len() == a.len() && b.iter().zip(&a).all(|(b, a)| same_types(b, before_spec, a, after_spec))
}

/// The single expression map equal to `f` then `g`, with the same output fields in the same
/// order; `None` unless both are expression maps. Outputs of `f` that `g` drops are not
/// computed (dead-field elimination). `specs` are `f`'s input and output specs: `None` when
/// substituting would change a type (see [`substitute`]).
pub fn compose(g: &MapFn, f: &MapFn, specs: Specs) -> Option<MapFn> {
    let (MapFn::Exprs { outputs: g_out, keep_input: g_keep }, MapFn::Exprs { outputs: f_out, keep_input: f_keep }) =
        (g, f)
    else {
        return None;
    };
    let over_input = |o: &NamedExpr| substitute(&o.expr, f, specs).map(|expr| NamedExpr { name: o.name.clone(), expr });
    if !g_keep {
        let outputs = g_out.iter().map(over_input).collect::<Option<Vec<_>>>()?;
        return Some(MapFn::Exprs { outputs, keep_input: false });
    }
    // g keeps its input (f's output): f's fields stay in place, g's assignments replace
    // theirs, and g's new fields come after f's.
    let g_by_name: HashMap<&str, &NamedExpr> = g_out.iter().map(|o| (o.name.as_str(), o)).collect();
    let mut outputs = Vec::with_capacity(f_out.len() + g_out.len());
    for o in f_out {
        match g_by_name.get(o.name.as_str()) {
            Some(g_o) => outputs.push(over_input(g_o)?),
            None => outputs.push(o.clone()),
        }
    }
    for o in g_out {
        if !f_out.iter().any(|f_o| f_o.name == o.name) {
            outputs.push(over_input(o)?);
        }
    }
    Some(MapFn::Exprs { outputs, keep_input: *f_keep })
}

/// True when every output of `f` that may fail over `input` is still computed, as it was,
/// by `composed` — so fusing cannot hide an error the unfused plan reports.
pub fn keeps_fallible_outputs(composed: &MapFn, f: &MapFn, input: &flumen_ir::ElementSpec) -> bool {
    let (MapFn::Exprs { outputs: c_out, .. }, MapFn::Exprs { outputs: f_out, .. }) = (composed, f) else {
        return false;
    };
    f_out
        .iter()
        .filter(|o| crate::simplify::may_fail(&o.expr, input))
        .all(|o| c_out.iter().any(|c| c.name == o.name && c.expr == o.expr))
}
