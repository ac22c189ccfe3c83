//! The element count an in-memory cache completes at (`Op::Cache`'s `count`), recorded from
//! the plan as written: the optimizer may make its input's count known (dropping a filter
//! that keeps everything) or unknown, and when a cache completes must not change with it,
//! since a later pass can tell (a closure that keeps state is called again where the cache
//! did not complete, a reshuffle draws again).

use std::collections::HashMap;

use flumen_ir::cardinality::INFINITE;
use flumen_ir::{Op, Plan};

/// The count a cache over `input` completes at: `input`'s element count, when known and
/// finite.
pub(crate) fn written_count(input: &Plan) -> Option<u64> {
    input.cardinality().filter(|n| *n != INFINITE)
}

/// `plan`, a plan as written, with its count recorded on each in-memory cache that has none
/// (a plan read from JSON that predates counts, or built by hand).
pub(crate) fn recorded(plan: &Plan) -> Plan {
    fn walk(plan: &Plan, done: &mut HashMap<usize, Plan>) -> Plan {
        if let Some(p) = done.get(&plan.node_id()) {
            return p.clone();
        }
        let inputs: Vec<Plan> = plan.inputs().iter().map(|i| walk(i, done)).collect();
        let op = match plan.op() {
            Op::Cache { path: None, count: None } => Op::Cache { path: None, count: written_count(&inputs[0]) },
            op => op.clone(),
        };
        let same = op == *plan.op() && inputs.iter().zip(plan.inputs()).all(|(a, b)| a.node_id() == b.node_id());
        // Rebuilding a node that was built already with the same types cannot fail; if it
        // did, the node as it was is still a valid plan.
        let out = if same { plan.clone() } else { Plan::new(op, inputs).unwrap_or_else(|_| plan.clone()) };
        done.insert(plan.node_id(), out.clone());
        out
    }
    walk(plan, &mut HashMap::new())
}
