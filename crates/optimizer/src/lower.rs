//! Lowering IR into the language: plans, functions and expressions become nodes.
//!
//! Lowering writes into any [`NodeSink`] — a `RecExpr` for tests and dumps, or an e-graph
//! for optimization and for rules that add rewritten operators on top of existing classes.

use std::collections::HashMap;

use egg::{Analysis, EGraph, Id, RecExpr, Symbol};
use flumen_ir::{DType, Expr, MapFn, Op, Plan, Predicate, Scalar, Tunable, UnaryOp};

use crate::language::Node;
use crate::leaf::{Lit, Name, Opaque, OpaqueValue};

/// Somewhere nodes can be added: a `RecExpr` or an e-graph.
pub trait NodeSink {
    /// Adds `node` (its children already added) and returns its id.
    fn add_node(&mut self, node: Node) -> Id;
}

impl NodeSink for RecExpr<Node> {
    fn add_node(&mut self, node: Node) -> Id {
        self.add(node)
    }
}

impl<N: Analysis<Node>> NodeSink for EGraph<Node, N> {
    fn add_node(&mut self, node: Node) -> Id {
        self.add(node)
    }
}

fn name(sink: &mut impl NodeSink, s: &str) -> Id {
    sink.add_node(Node::Name(Name(s.to_string())))
}

fn lit(sink: &mut impl NodeSink, v: Scalar) -> Id {
    sink.add_node(Node::Lit(Lit::new(v)))
}

fn opaque(sink: &mut impl NodeSink, v: OpaqueValue) -> Id {
    sink.add_node(Node::Opaque(Opaque::new(v)))
}

/// A non-negative count or size (u64 above `i64::MAX` stays exact).
pub fn unsigned(v: u64) -> Scalar {
    match i64::try_from(v) {
        Ok(i) => Scalar::Int(i, DType::Int64),
        Err(_) => Scalar::UInt64(v),
    }
}

fn tunable(sink: &mut impl NodeSink, t: Tunable) -> Id {
    match t {
        Tunable::Default => name(sink, "default"),
        Tunable::Autotune => name(sink, "autotune"),
        Tunable::Fixed(n) => lit(sink, Scalar::Int(n.into(), DType::Int64)),
    }
}

fn optional_bool(sink: &mut impl NodeSink, v: Option<bool>) -> Id {
    match v {
        None => name(sink, "none"),
        Some(b) => lit(sink, Scalar::Bool(b)),
    }
}

fn seed(sink: &mut impl NodeSink, v: Option<u64>) -> Id {
    match v {
        None => name(sink, "none"),
        Some(s) => lit(sink, unsigned(s)),
    }
}

/// Lowers an expression.
pub fn lower_expr(sink: &mut impl NodeSink, expr: &Expr) -> Id {
    match expr {
        Expr::Column(c) => {
            let n = name(sink, c);
            sink.add_node(Node::Col(n))
        }
        Expr::Literal(v) => lit(sink, v.clone()),
        Expr::Unary { op, arg } => {
            let a = lower_expr(sink, arg);
            sink.add_node(match op {
                UnaryOp::Not => Node::Not(a),
                UnaryOp::Neg => Node::Neg(a),
                UnaryOp::IsNull => Node::IsNull(a),
                UnaryOp::IsNotNull => Node::IsNotNull(a),
            })
        }
        Expr::Binary { op, left, right } => {
            let l = lower_expr(sink, left);
            let r = lower_expr(sink, right);
            sink.add_node(Node::binary(*op, [l, r]))
        }
        Expr::Cast { arg, to } => {
            let a = lower_expr(sink, arg);
            let t = name(sink, to.name());
            sink.add_node(Node::Cast([a, t]))
        }
        Expr::Case { branches, otherwise } => {
            let mut children = Vec::new();
            for (c, v) in branches {
                children.push(lower_expr(sink, c));
                children.push(lower_expr(sink, v));
            }
            if let Some(e) = otherwise {
                children.push(lower_expr(sink, e));
            }
            sink.add_node(Node::Case(children.into()))
        }
        Expr::Call { func, args } => {
            let mut children = vec![name(sink, func.name())];
            children.extend(args.iter().map(|a| lower_expr(sink, a)));
            sink.add_node(Node::Call(children.into()))
        }
    }
}

/// Lowers the function of a map (wrapped in `pfor` when `vectorized`).
pub fn lower_map_fn(sink: &mut impl NodeSink, func: &MapFn, vectorized: bool) -> Id {
    let id = match func {
        MapFn::Exprs { outputs, keep_input } => {
            let mut children = vec![name(sink, if *keep_input { "keep" } else { "only" })];
            for o in outputs {
                let n = name(sink, &o.name);
                let e = lower_expr(sink, &o.expr);
                children.push(sink.add_node(Node::Out([n, e])));
            }
            sink.add_node(Node::Exprs(children.into()))
        }
        MapFn::Closure { closure, output } => {
            let c = opaque(sink, OpaqueValue::Closure(closure.clone()));
            let s = opaque(sink, OpaqueValue::Spec(output.clone()));
            sink.add_node(Node::ClosureFn([c, s]))
        }
        MapFn::ParseExample { field, features } => {
            let args = opaque(sink, OpaqueValue::ParseExample(field.clone(), features.clone()));
            sink.add_node(Node::ParseFn(args))
        }
    };
    if vectorized {
        sink.add_node(Node::Pfor(id))
    } else {
        id
    }
}

/// Lowers a predicate (wrapped in `pfor` when `vectorized`): an expression predicate is
/// the expression itself.
pub fn lower_predicate(sink: &mut impl NodeSink, predicate: &Predicate, vectorized: bool) -> Id {
    let id = match predicate {
        Predicate::Expr { expr } => lower_expr(sink, expr),
        Predicate::Closure { closure } => {
            let c = opaque(sink, OpaqueValue::Closure(closure.clone()));
            sink.add_node(Node::ClosurePred(c))
        }
    };
    if vectorized {
        sink.add_node(Node::Pfor(id))
    } else {
        id
    }
}

/// Lowers one operator over already-lowered inputs.
pub fn lower_op(sink: &mut impl NodeSink, op: &Op, inputs: &[Id]) -> Id {
    let input = || inputs[0];
    match op {
        Op::Source(s) => {
            let s = opaque(sink, OpaqueValue::Source(s.clone()));
            sink.add_node(Node::Source(s))
        }
        Op::Map { func, num_parallel_calls, deterministic, vectorized } => {
            let f = lower_map_fn(sink, func, *vectorized);
            let c = tunable(sink, *num_parallel_calls);
            let d = optional_bool(sink, *deterministic);
            sink.add_node(Node::Map([f, c, d, input()]))
        }
        Op::Filter { predicate, vectorized, num_parallel_calls, deterministic } => {
            let p = lower_predicate(sink, predicate, *vectorized);
            let c = tunable(sink, *num_parallel_calls);
            let d = optional_bool(sink, *deterministic);
            sink.add_node(Node::Filter([p, c, d, input()]))
        }
        Op::MapAndBatch { func, batch_size, drop_remainder, num_parallel_calls, deterministic, vectorized } => {
            let f = lower_map_fn(sink, func, *vectorized);
            let n = lit(sink, unsigned(*batch_size));
            let r = lit(sink, Scalar::Bool(*drop_remainder));
            let c = tunable(sink, *num_parallel_calls);
            let d = optional_bool(sink, *deterministic);
            sink.add_node(Node::MapAndBatch([f, n, r, c, d, input()]))
        }
        Op::Batch { batch_size, drop_remainder, num_parallel_calls, deterministic } => {
            let n = lit(sink, unsigned(*batch_size));
            let r = lit(sink, Scalar::Bool(*drop_remainder));
            let c = tunable(sink, *num_parallel_calls);
            let d = optional_bool(sink, *deterministic);
            sink.add_node(Node::Batch([n, r, c, d, input()]))
        }
        Op::Shuffle { buffer_size, seed: s, reshuffle_each_iteration } => {
            let n = lit(sink, unsigned(*buffer_size));
            let s = seed(sink, *s);
            let r = lit(sink, Scalar::Bool(*reshuffle_each_iteration));
            sink.add_node(Node::Shuffle([n, s, r, input()]))
        }
        Op::ShuffleAndRepeat { buffer_size, seed: s, reshuffle_each_iteration, count } => {
            let n = lit(sink, unsigned(*buffer_size));
            let s = seed(sink, *s);
            let r = lit(sink, Scalar::Bool(*reshuffle_each_iteration));
            let c = lit(sink, Scalar::Int(*count, DType::Int64));
            sink.add_node(Node::ShuffleAndRepeat([n, s, r, c, input()]))
        }
        Op::Repeat { count } | Op::Take { count } | Op::Skip { count } => {
            let c = lit(sink, Scalar::Int(*count, DType::Int64));
            sink.add_node(match op {
                Op::Repeat { .. } => Node::Repeat([c, input()]),
                Op::Take { .. } => Node::Take([c, input()]),
                _ => Node::Skip([c, input()]),
            })
        }
        Op::Shard { num_shards, index } => {
            let n = lit(sink, unsigned(*num_shards));
            let i = lit(sink, unsigned(*index));
            sink.add_node(Node::Shard([n, i, input()]))
        }
        Op::Prefetch { buffer_size } => {
            let b = tunable(sink, *buffer_size);
            sink.add_node(Node::Prefetch([b, input()]))
        }
        other => {
            let mut children = vec![opaque(sink, OpaqueValue::Op(other.clone()))];
            children.extend_from_slice(inputs);
            sink.add_node(Node::Other(Symbol::from(other.name()), children))
        }
    }
}

/// Lowers a whole plan (a shared sub-plan is lowered once) and returns its root's id.
pub fn lower_plan(sink: &mut impl NodeSink, plan: &Plan) -> Id {
    let mut ids: HashMap<usize, Id> = HashMap::new();
    for node in plan.nodes_topological() {
        let inputs: Vec<Id> = node.inputs().iter().map(|i| ids[&i.node_id()]).collect();
        let id = lower_op(sink, node.op(), &inputs);
        ids.insert(node.node_id(), id);
    }
    ids[&plan.node_id()]
}

/// The plan as a term of the language.
pub fn to_rec_expr(plan: &Plan) -> RecExpr<Node> {
    let mut expr = RecExpr::default();
    lower_plan(&mut expr, plan);
    expr
}
