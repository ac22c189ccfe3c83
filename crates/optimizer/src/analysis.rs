//! The e-graph analysis: what every class means, and the facts the guards and the cost
//! model read from it.
//!
//! Each class carries the IR value of one of its terms (a typed plan with its element spec,
//! a function, an expression), from which the properties follow: whether a function is
//! stateless, deterministic and vectorizable, which fields it reads, and a plan's known
//! cardinality. Terms of one class are equivalent, so any representative will do; merging
//! two plan classes whose specs differ means a rule was wrong, and fails loudly in debug
//! builds.

use std::collections::BTreeMap;

use egg::{Analysis, DidMerge, EGraph, Id};
use flumen_ir::{ElementSpec, Expr, MapFn, Plan, Predicate, Scalar, Tunable};

use crate::language::Node;
use crate::value::{decode, Value};

/// The facts of one e-class.
#[derive(Debug, Clone)]
pub struct Facts {
    /// The IR meaning of the class.
    pub value: Value,
    /// The plan's number of elements when known (joined across the class's terms).
    pub cardinality: Option<u64>,
}

impl Facts {
    /// The element spec, for plan classes.
    pub fn spec(&self) -> Option<&ElementSpec> {
        self.value.plan().map(|p| p.spec())
    }

    /// The typed plan, for plan classes (a plan with its operator, inputs and spec).
    pub fn plan(&self) -> Option<&Plan> {
        self.value.plan()
    }

    /// The literal, for literal classes (operator arguments such as a batch size are
    /// literals too).
    pub fn literal(&self) -> Option<&Scalar> {
        match &self.value {
            Value::Lit(s) => Some(s),
            _ => None,
        }
    }

    /// The integer, for integer literal classes.
    pub fn integer(&self) -> Option<i64> {
        crate::value::signed(&self.value).ok()
    }

    /// The parallelism, for `num_parallel_calls` and buffer-size classes.
    pub fn tunable(&self) -> Option<Tunable> {
        crate::value::tunable(&self.value).ok()
    }

    /// The expression, for expression and literal classes.
    pub fn expr(&self) -> Option<Expr> {
        match &self.value {
            Value::Expr(e) => Some(e.clone()),
            Value::Lit(s) => Some(Expr::Literal(s.clone())),
            _ => None,
        }
    }

    /// The map function and whether it runs over whole chunks (pfor), for function classes.
    pub fn function(&self) -> Option<(&MapFn, bool)> {
        self.value.func()
    }

    /// The predicate and whether it runs over whole chunks (pfor), for classes used as
    /// filter predicates (expressions and literals included).
    pub fn predicate(&self) -> Option<(Predicate, bool)> {
        self.value.predicate()
    }

    /// Whether the class is a function whose calls take a process-wide lock
    /// ([`flumen_ir::ClosureRef::exclusive`]): more threads would only wait for it.
    pub fn exclusive(&self) -> bool {
        match &self.value {
            Value::Func { func, .. } => func.is_exclusive(),
            Value::Pred { predicate, .. } => predicate.is_exclusive(),
            _ => false,
        }
    }

    /// For function and predicate classes: the function keeps no state between calls and
    /// returns the same output for the same input (expressions always; closures as declared).
    pub fn pure(&self) -> Option<bool> {
        match &self.value {
            Value::Func { func, .. } => Some(func.is_stateless_and_deterministic()),
            Value::Pred { predicate: flumen_ir::Predicate::Closure { closure }, .. } => {
                Some(closure.stateless && closure.deterministic)
            }
            Value::Pred { .. } | Value::Expr(_) | Value::Lit(_) => Some(true),
            _ => None,
        }
    }

    /// For function and predicate classes: it can run over many elements at once (pfor).
    pub fn vectorizable(&self) -> Option<bool> {
        match &self.value {
            Value::Func { func, .. } => Some(crate::rules::vectorize::vectorizable(func)),
            Value::Pred { predicate, .. } => Some(matches!(predicate, flumen_ir::Predicate::Expr { .. })),
            Value::Expr(_) | Value::Lit(_) => Some(true),
            _ => None,
        }
    }

    /// The fields a function, predicate or expression reads (`None`: all of them, for
    /// closures; or not a function).
    pub fn fields_used(&self) -> Option<std::collections::BTreeSet<String>> {
        match &self.value {
            Value::Expr(e) => Some(e.columns()),
            Value::Lit(_) => Some(Default::default()),
            Value::Out(o) => Some(o.expr.columns()),
            Value::Func { func: flumen_ir::MapFn::Exprs { outputs, keep_input: false }, .. } => {
                Some(outputs.iter().flat_map(|o| o.expr.columns()).collect())
            }
            Value::Pred { predicate: flumen_ir::Predicate::Expr { expr }, .. } => Some(expr.columns()),
            Value::Func { func: flumen_ir::MapFn::ParseExample { field, .. }, .. } => Some([field.clone()].into()),
            _ => None,
        }
    }
}

/// flumen's analysis (see the module docs). Besides the facts of each class, it keeps what
/// the rules' appliers noted while a stage ran ([`Notes`]): rewrites refused because they
/// would have changed a plan's element spec, and rules that asked for a pattern variable
/// their pattern does not bind.
#[derive(Debug, Default, Clone)]
pub struct PlanAnalysis {
    /// What the appliers noted during the current run.
    pub notes: Notes,
}

/// What the rules' appliers noted while a stage ran.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Notes {
    /// Per rule, the rewrites refused because the rewritten plan's element spec differs
    /// from the matched one's (a bug in the rule: debug builds panic instead).
    pub spec_changes: BTreeMap<String, usize>,
    /// Rule-authoring errors, such as a rule asking for a `?var` its pattern does not bind.
    pub errors: Vec<String>,
}

/// The e-graph flumen's rules run on.
pub type Graph = EGraph<Node, PlanAnalysis>;

impl Analysis<Node> for PlanAnalysis {
    type Data = Facts;

    fn make(egraph: &mut Graph, enode: &Node, _id: Id) -> Facts {
        let graph: &Graph = egraph;
        let value = decode(enode, &|id| &graph[id].data.value);
        debug_assert!(!matches!(value, Value::Invalid(_)), "a rule built an ill-typed term {enode:?}: {value:?}");
        let cardinality = value.plan().and_then(|p| p.cardinality());
        Facts { value, cardinality }
    }

    fn merge(&mut self, a: &mut Facts, b: Facts) -> DidMerge {
        // Rules never reach this with different specs (the applier refuses such a rewrite);
        // congruence could, only after a rule merged two different plans: a bug either way.
        let mut changed_a = false;
        if let (Some(pa), Some(pb)) = (a.value.plan(), b.value.plan()) {
            debug_assert_eq!(pa.spec(), pb.spec(), "merged two plans with different element specs:\n{pa}\n{pb}");
        }
        if matches!(a.value, Value::Invalid(_)) && !matches!(b.value, Value::Invalid(_)) {
            a.value = b.value.clone();
            changed_a = true;
        }
        let changed_b = a.cardinality.is_some() && b.cardinality.is_none();
        if a.cardinality.is_none() && b.cardinality.is_some() {
            a.cardinality = b.cardinality;
            changed_a = true;
        }
        DidMerge(changed_a, changed_b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(term: &str) -> Facts {
        let mut egraph = Graph::default();
        let id = egraph.add_expr(&term.parse().unwrap());
        egraph[id].data.clone()
    }

    const RANGE: &str = "(source #{'source':{'source':'range','start':0,'stop':10,'step':1}})";

    #[test]
    fn plan_classes_know_their_spec_and_cardinality() {
        let f = facts(&format!("(batch 4 true default none {RANGE})"));
        assert_eq!(f.spec().unwrap().to_string(), "{value: int64[4]}");
        assert_eq!(f.cardinality, Some(2));
        assert_eq!(facts(&format!("(filter (> (col value) 2) default none {RANGE})")).cardinality, None);
    }

    #[test]
    fn function_classes_know_purity_vectorizability_and_fields() {
        let f = facts("(exprs only (out y (* (col a) (col b))))");
        assert_eq!((f.pure(), f.vectorizable()), (Some(true), Some(true)));
        assert_eq!(f.fields_used().unwrap().into_iter().collect::<Vec<_>>(), ["a", "b"]);
        let closure = "#{'closure':{'name':'f','kind':'per_element','deterministic':false,'stateless':true}}";
        let spec = "#{'spec':{'fields':[],'batch_dims':0}}";
        let c = facts(&format!("(closure {closure} {spec})"));
        assert_eq!((c.pure(), c.vectorizable(), c.fields_used()), (Some(false), Some(false), None));
    }
}
