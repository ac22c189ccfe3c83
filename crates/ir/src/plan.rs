//! Plans: DAGs of typed operators.
//!
//! A [`Plan`] is an immutable, cheaply cloned handle to a node; inputs are shared, so one
//! sub-plan can feed several operators (a DAG). Building a node type-checks it.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Weak};

use petgraph::graph::{DiGraph, NodeIndex};

use crate::error::Result;
use crate::op::Op;
use crate::spec::ElementSpec;

/// One node: an operator, its inputs and its output spec.
#[derive(Debug, PartialEq)]
pub struct PlanNode {
    op: Op,
    inputs: Vec<Plan>,
    spec: ElementSpec,
    /// [`Plan::depends_on_demand`], worked out once: optimizer guards ask it of every match.
    demand: bool,
}

/// A typed plan: a handle to its output node.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan(Arc<PlanNode>);

impl Plan {
    /// A node applying `op` to `inputs`; fails when the node is ill-typed.
    pub fn new(op: Op, inputs: Vec<Plan>) -> Result<Plan> {
        let specs: Vec<&ElementSpec> = inputs.iter().map(|p| p.spec()).collect();
        let spec = op.output_spec(&specs)?;
        let own = match &op {
            Op::Cache { .. } | Op::Snapshot { .. } => true,
            Op::Source(crate::SourceDesc::Generator { stateful, .. }) => *stateful,
            op => op.closure().is_some_and(|c| c.keeps_state()),
        };
        let demand = own || inputs.iter().any(Plan::depends_on_demand);
        Ok(Plan(Arc::new(PlanNode { op, inputs, spec, demand })))
    }

    /// The operator of the output node.
    pub fn op(&self) -> &Op {
        &self.0.op
    }

    /// The inputs of the output node.
    pub fn inputs(&self) -> &[Plan] {
        &self.0.inputs
    }

    /// The element spec of the output.
    pub fn spec(&self) -> &ElementSpec {
        &self.0.spec
    }

    /// The first input (for single-input operators).
    pub fn input(&self) -> &Plan {
        &self.0.inputs[0]
    }

    /// A stable identity for this node while it is alive (shared sub-plans share it). The
    /// address may be reused once the node is dropped: state that outlives a plan is keyed
    /// by [`Plan::downgrade`] instead.
    pub fn node_id(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    /// A handle to this node that does not keep it alive.
    pub fn downgrade(&self) -> WeakPlan {
        WeakPlan(Arc::downgrade(&self.0))
    }

    /// The nodes of the DAG, each once, inputs before the nodes that use them.
    pub fn nodes_topological(&self) -> Vec<Plan> {
        fn visit(p: &Plan, seen: &mut HashMap<usize, ()>, out: &mut Vec<Plan>) {
            if seen.contains_key(&p.node_id()) {
                return;
            }
            for i in p.inputs() {
                visit(i, seen, out);
            }
            seen.insert(p.node_id(), ());
            out.push(p.clone());
        }
        let mut out = Vec::new();
        visit(self, &mut HashMap::new(), &mut out);
        out
    }

    /// The plan as a petgraph graph (edges point from input to consumer), with the index of
    /// each node in the order of [`Plan::nodes_topological`].
    pub fn to_graph(&self) -> (DiGraph<Plan, usize>, Vec<NodeIndex>) {
        let nodes = self.nodes_topological();
        let mut graph = DiGraph::new();
        let mut index: HashMap<usize, NodeIndex> = HashMap::new();
        let mut order = Vec::with_capacity(nodes.len());
        for n in &nodes {
            let ix = graph.add_node(n.clone());
            for (slot, input) in n.inputs().iter().enumerate() {
                graph.add_edge(index[&input.node_id()], ix, slot);
            }
            index.insert(n.node_id(), ix);
            order.push(ix);
        }
        (graph, order)
    }

    /// A Graphviz DOT rendering: one box per node with its operator and spec.
    pub fn to_dot(&self) -> String {
        let (graph, _) = self.to_graph();
        let mut out = String::from("digraph plan {\n  rankdir=BT;\n  node [shape=box, fontname=\"monospace\"];\n");
        for ix in graph.node_indices() {
            let p = &graph[ix];
            let label = format!("{}\\n{}", crate::display::describe(p.op()), p.spec());
            out.push_str(&format!("  n{} [label=\"{}\"];\n", ix.index(), label.replace('"', "\\\"")));
        }
        for e in graph.edge_indices() {
            let (a, b) = graph.edge_endpoints(e).expect("edge exists");
            out.push_str(&format!("  n{} -> n{};\n", a.index(), b.index()));
        }
        out.push_str("}\n");
        out
    }

    /// True when how far this plan's output is read changes what it or a later pass yields:
    /// it or a plan below it calls a closure that keeps state
    /// ([`crate::ClosureRef::keeps_state`]: each call sees the calls before it), reads a
    /// generator declared stateful, or holds a
    /// `cache` or `snapshot`, which completes only once it is read to the end of its input
    /// (a completed cache replays its first pass in later ones, without its errors, where an
    /// incomplete one computes them again). Nothing may read ahead of what the consumer asks
    /// for above such a plan, except operators the user wrote to do so.
    pub fn depends_on_demand(&self) -> bool {
        self.0.demand
    }

    /// The number of elements, when known without running (`None`: unknown;
    /// `Some(u64::MAX)`: infinite).
    pub fn cardinality(&self) -> Option<u64> {
        crate::cardinality::cardinality(self)
    }
}

/// A non-owning handle to a plan node (see [`Plan::downgrade`]).
#[derive(Debug, Clone)]
pub struct WeakPlan(Weak<PlanNode>);

impl WeakPlan {
    /// True while the node is alive and is `plan`'s node.
    pub fn refers_to(&self, plan: &Plan) -> bool {
        self.0.upgrade().is_some_and(|node| Arc::ptr_eq(&node, &plan.0))
    }

    /// The node, while it is alive.
    pub fn upgrade(&self) -> Option<Plan> {
        self.0.upgrade().map(Plan)
    }

    /// True while the node is alive.
    pub fn is_alive(&self) -> bool {
        self.0.strong_count() > 0
    }
}

impl fmt::Display for Plan {
    /// The plan as an indented tree, output first, one node per line with its spec.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::display::tree(self))
    }
}
