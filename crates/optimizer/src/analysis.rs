//! The e-graph analysis: what every class means, and the facts the guards and the cost
//! model read from it.
//!
//! Each class carries the IR value of one of its terms (a typed plan with its element spec,
//! a function, an expression), from which the properties follow: whether a function is
//! stateless, deterministic and vectorizable, which fields it reads, and a plan's known
//! cardinality. Terms of one class are equivalent, so any representative will do; merging
//! two plan classes whose specs differ means a rule was wrong, and fails loudly in debug
//! builds.

use egg::{Analysis, DidMerge, EGraph, Id};

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

/// flumen's analysis (see the module docs).
#[derive(Debug, Default, Clone)]
pub struct PlanAnalysis;

/// The e-graph flumen's rules run on.
pub type Graph = EGraph<Node, PlanAnalysis>;

impl Analysis<Node> for PlanAnalysis {
    type Data = Facts;

    fn make(egraph: &mut Graph, enode: &Node, _id: Id) -> Facts {
        let value = decode(enode, &|id| egraph[id].data.value.clone());
        debug_assert!(!matches!(value, Value::Invalid(_)), "a rule built an ill-typed term {enode:?}: {value:?}");
        let cardinality = value.plan().and_then(|p| p.cardinality());
        Facts { value, cardinality }
    }

    fn merge(&mut self, a: &mut Facts, b: Facts) -> DidMerge {
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
