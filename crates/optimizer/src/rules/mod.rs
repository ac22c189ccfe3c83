//! The rewrite rules, in small modules by concern. Every rule is a named egg [`Rewrite`]
//! whose applier works in IR terms: it reads the IR meaning of the matched classes from the
//! analysis, builds the rewritten operator, type-checks it against the inputs' specs, and
//! only then adds it to the e-graph on top of the existing input classes. A rule whose
//! guard fails adds nothing.

pub mod eliminate;
pub mod fusion;
pub mod parallelize;
pub mod pushdown;
pub mod vectorize;

use egg::{Applier, Id, Pattern, PatternAst, Rewrite, Subst, Symbol, Var};
use flumen_ir::{MapFn, Op, Plan, Predicate, Scalar, Tunable};

use crate::analysis::{Graph, PlanAnalysis};
use crate::language::Node;
use crate::lower::lower_op;
use crate::value::{self, Value};

/// A rewrite of flumen's language.
pub type Rule = Rewrite<Node, PlanAnalysis>;

/// What a rule's applier sees: the e-graph, the matched class and the pattern's bindings.
pub struct Match<'a> {
    /// The e-graph.
    pub egraph: &'a mut Graph,
    /// The class the pattern matched.
    pub class: Id,
    subst: &'a Subst,
}

impl Match<'_> {
    /// The class bound to `var` (`"?x"`).
    pub fn id(&self, var: &str) -> Id {
        let v: Var = var.parse().expect("a pattern variable");
        self.subst[v]
    }

    /// The IR meaning of the class bound to `var`.
    pub fn value(&self, var: &str) -> &Value {
        &self.egraph[self.id(var)].data.value
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

    /// Adds `op` over the input classes `inputs` when it type-checks; its class id.
    pub fn add(&mut self, op: Op, inputs: &[Id]) -> Option<Id> {
        let plans = inputs.iter().map(|i| self.egraph[*i].data.value.plan().cloned()).collect::<Option<Vec<_>>>()?;
        Plan::new(op.clone(), plans).ok()?;
        Some(lower_op(self.egraph, &op, inputs))
    }
}

/// An applier written as a function of the match: it returns the class of the rewritten
/// term, which is then merged with the matched class.
struct Apply<F>(F);

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
        _: Symbol,
    ) -> Vec<Id> {
        let mut m = Match { egraph, class, subst };
        match (self.0)(&mut m) {
            Some(new) if m.egraph.union(class, new) => vec![new],
            _ => vec![],
        }
    }
}

/// A rule named `name` that rewrites matches of `pattern` with `apply`.
pub fn rule(name: &str, pattern: &str, apply: impl Fn(&mut Match) -> Option<Id> + Send + Sync + 'static) -> Rule {
    let pattern: Pattern<Node> = pattern.parse().unwrap_or_else(|e| panic!("rule {name}: bad pattern {pattern}: {e}"));
    Rewrite::new(name, pattern, Apply(apply)).unwrap_or_else(|e| panic!("rule {name}: {e}"))
}
