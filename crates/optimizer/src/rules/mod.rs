//! The rewrite rules, in small modules by concern. Every rule is a named egg [`Rewrite`]
//! whose applier works in IR terms: it reads the IR meaning of the matched classes from the
//! analysis, builds the rewritten operator, type-checks it against the inputs' specs, and
//! only then adds it to the e-graph on top of the existing input classes. A rule whose
//! guard fails adds nothing.

pub mod eliminate;
pub mod fusion;
pub mod image;
pub mod parallelize;
pub mod pushdown;
pub mod vectorize;

use std::cell::RefCell;
use std::sync::LazyLock;

use egg::{Applier, ENodeOrVar, Id, Language, Pattern, PatternAst, Rewrite, Subst, Symbol, Var};
use flumen_ir::{Error, MapFn, Op, Plan, Predicate, Result, Scalar, Tunable};

use crate::analysis::{Graph, PlanAnalysis};
use crate::language::Node;
use crate::lower::lower_op;
use crate::value::{self, Value};

/// A rewrite of flumen's language.
pub type Rule = Rewrite<Node, PlanAnalysis>;

/// What a rule's applier sees: the e-graph, the matched class and the pattern's bindings.
///
/// Every accessor takes a pattern variable (`"?x"`) and gives `None` when the class bound to
/// it is not of the kind asked for, so an applier reads its match with `?` and a guard that
/// fails adds nothing. Asking for a variable the pattern does not bind also gives `None`, and
/// makes [`crate::Optimizer::optimize`] fail naming the rule and the variable.
pub struct Match<'a> {
    /// The e-graph.
    pub egraph: &'a mut Graph,
    /// The class the pattern matched.
    pub class: Id,
    subst: &'a Subst,
    /// Variables asked for that the pattern does not bind.
    unbound: RefCell<Vec<String>>,
}

/// The value of a variable the pattern does not bind: no accessor accepts it.
static UNBOUND: LazyLock<Value> = LazyLock::new(|| Value::Invalid("an unbound pattern variable".into()));

impl Match<'_> {
    /// The class bound to `var` (`"?x"`).
    pub fn id(&self, var: &str) -> Option<Id> {
        let bound = var.parse::<Var>().ok().and_then(|v| self.subst.get(v).copied());
        if bound.is_none() {
            self.unbound.borrow_mut().push(var.to_string());
        }
        bound
    }

    /// The IR meaning of the class bound to `var`.
    pub fn value(&self, var: &str) -> &Value {
        match self.id(var) {
            Some(id) => &self.egraph[id].data.value,
            None => &UNBOUND,
        }
    }

    /// The plan bound to `var`.
    pub fn plan(&self, var: &str) -> Option<Plan> {
        self.value(var).plan().cloned()
    }

    /// The map function bound to `var`, with its pfor flag.
    pub fn func(&self, var: &str) -> Option<(MapFn, bool)> {
        self.value(var).func().map(|(f, p)| (f.clone(), p))
    }

    /// The predicate bound to `var`, with its pfor flag.
    pub fn predicate(&self, var: &str) -> Option<(Predicate, bool)> {
        self.value(var).predicate()
    }

    /// The literal bound to `var`.
    pub fn lit(&self, var: &str) -> Option<Scalar> {
        match self.value(var) {
            Value::Lit(s) => Some(s.clone()),
            _ => None,
        }
    }

    /// The non-negative integer bound to `var`.
    pub fn unsigned(&self, var: &str) -> Option<u64> {
        value::unsigned(self.value(var)).ok()
    }

    /// The integer bound to `var`.
    pub fn signed(&self, var: &str) -> Option<i64> {
        value::signed(self.value(var)).ok()
    }

    /// The bool bound to `var`.
    pub fn boolean(&self, var: &str) -> Option<bool> {
        value::boolean(self.value(var)).ok()
    }

    /// The parallelism bound to `var`.
    pub fn tunable(&self, var: &str) -> Option<Tunable> {
        value::tunable(self.value(var)).ok()
    }

    /// The optional bool bound to `var`.
    pub fn optional_bool(&self, var: &str) -> Option<Option<bool>> {
        value::optional_bool(self.value(var)).ok()
    }

    /// The optional seed bound to `var`.
    pub fn seed(&self, var: &str) -> Option<Option<u64>> {
        value::seed(self.value(var)).ok()
    }

    /// The matched `(map ?f ?c ?d ?x)`, or `(map_and_batch ?f ?n ?r ?c ?d ?x)` when
    /// `batched`, with `func` (pfor when `vectorized`) in place of its function: for rules
    /// that rewrite a map's function and keep the rest.
    pub fn map_with(&self, func: MapFn, vectorized: bool, batched: bool) -> Option<Op> {
        let (num_parallel_calls, deterministic) = (self.tunable("?c")?, self.optional_bool("?d")?);
        Some(if batched {
            Op::MapAndBatch {
                func,
                batch_size: self.unsigned("?n")?,
                drop_remainder: self.boolean("?r")?,
                num_parallel_calls,
                deterministic,
                vectorized,
            }
        } else {
            Op::Map { func, num_parallel_calls, deterministic, vectorized }
        })
    }

    /// Adds `op` over the input classes `inputs` when it type-checks; its class id.
    pub fn add(&mut self, op: Op, inputs: &[Id]) -> Option<Id> {
        let plans = inputs.iter().map(|i| self.egraph[*i].data.value.plan().cloned()).collect::<Option<Vec<_>>>()?;
        Plan::new(op.clone(), plans).ok()?;
        Some(lower_op(self.egraph, &op, inputs))
    }
}

/// An applier written as a function of the match: it returns the class of the rewritten
/// term, which is then merged with the matched class.
struct Apply<F> {
    /// The rule's pattern, to find the classes of the operators a match runs through.
    pattern: PatternAst<Node>,
    apply: F,
}

impl<F> Applier<Node, PlanAnalysis> for Apply<F>
where
    F: Fn(&mut Match) -> Option<Id> + Send + Sync,
{
    fn apply_one(
        &self,
        egraph: &mut Graph,
        class: Id,
        subst: &Subst,
        _: Option<&PatternAst<Node>>,
        rule: Symbol,
    ) -> Vec<Id> {
        if through_noop(egraph, &self.pattern, subst) {
            return vec![];
        }
        let mut m = Match { egraph, class, subst, unbound: RefCell::default() };
        let new = (self.apply)(&mut m);
        let unbound = m.unbound.into_inner();
        let notes = &mut egraph.analysis.notes;
        for var in unbound {
            let error = format!("rule {rule} asks for {var}, which its pattern does not bind");
            if !notes.errors.contains(&error) {
                notes.errors.push(error);
            }
        }
        let Some(new) = new else { return vec![] };
        let (matched, rewritten) = (egraph[class].data.spec(), egraph[new].data.spec());
        if matched != rewritten {
            // The analysis keeps one spec per class: a merge would give a plan another type.
            debug_assert!(
                false,
                "rule {rule} rewrote a plan of spec {matched:?} into one of spec {rewritten:?}:\n{}\n{}",
                show(&egraph[class].data.value),
                show(&egraph[new].data.value),
            );
            *egraph.analysis.notes.spec_changes.entry(rule.to_string()).or_default() += 1;
            return vec![];
        }
        if egraph.union(class, new) {
            vec![new]
        } else {
            vec![]
        }
    }
}

fn show(value: &Value) -> String {
    match value.plan() {
        Some(p) => p.to_string(),
        None => format!("{value:?}"),
    }
}

/// True when the match runs through a no-op: a plan operator of the pattern in the same
/// class as one of its own inputs (an operator the e-graph already knows leaves its input
/// unchanged, such as `filter(true)`). Such a match rewrites nothing the input's own terms
/// do not give, and through a class that contains itself it matches without end:
/// `map(f1 := -3).filter(f1 > -4)` made `filter(f1 > -4, M)` a term of the map's class
/// `M`, and filter-fusion then built `filter(p and p, M)`, `filter(p and (p and p), M)`, …
/// until the node limit (18 s and 2.4 GB).
fn through_noop(egraph: &Graph, pattern: &PatternAst<Node>, subst: &Subst) -> bool {
    let mut classes: Vec<Option<Id>> = Vec::with_capacity(pattern.as_ref().len());
    for node in pattern.as_ref() {
        let class = match node {
            ENodeOrVar::Var(v) => subst.get(*v).map(|id| egraph.find(*id)),
            ENodeOrVar::ENode(n) => {
                let mut missing = false;
                let mut term = n.clone().map_children(|c| {
                    classes[usize::from(c)].unwrap_or_else(|| {
                        missing = true;
                        c
                    })
                });
                // Looking a term up canonicalizes its children in place.
                let class = if missing { None } else { egraph.lookup(&mut term) };
                if let Some(c) = class {
                    if term.is_plan() && term.children().contains(&c) {
                        return true;
                    }
                }
                class
            }
        };
        classes.push(class);
    }
    false
}

/// A rule named `name` that rewrites matches of `pattern` with `apply`, or why `pattern` is
/// not a pattern of flumen's language (see `docs/optimizer-rules.md` for each operator's
/// term shape).
///
/// The applier returns the class of the rewritten plan (usually from [`Match::add`]), which
/// is merged with the matched class, or `None` to leave the match alone. Whatever it
/// returns must mean exactly what the matched plan means (see the error semantics in
/// `docs/optimizer-rules.md`); a rewritten plan whose element spec differs from the
/// matched one's is refused (debug builds panic, naming the rule).
pub fn rule(
    name: &str,
    pattern: &str,
    apply: impl Fn(&mut Match) -> Option<Id> + Send + Sync + 'static,
) -> Result<Rule> {
    let parsed: Pattern<Node> =
        pattern.parse().map_err(|e| Error::plan("optimizer", format!("rule {name}: bad pattern {pattern}: {e}")))?;
    let applier = Apply { pattern: parsed.ast.clone(), apply };
    Rewrite::new(name, parsed, applier).map_err(|e| Error::plan("optimizer", format!("rule {name}: {e}")))
}

/// A built-in rule: its pattern is fixed and parsed by every test run, so a bad one is a
/// bug in flumen, not an input.
pub(crate) fn builtin(
    name: &str,
    pattern: &str,
    apply: impl Fn(&mut Match) -> Option<Id> + Send + Sync + 'static,
) -> Rule {
    rule(name, pattern, apply).unwrap_or_else(|e| panic!("built-in {e}"))
}
