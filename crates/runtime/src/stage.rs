//! Stage fusion: a chain of maps and filters over whole chunks runs as one operator whose
//! tasks call the chain's functions one after another on their chunk.
//!
//! Operators hand chunks to each other through their `next_chunk` calls and, when parallel,
//! through the thread pool: every parallel operator costs two thread wake-ups per chunk.
//! Where the functions are cheap (w4's fused kernels take about 20 µs per chunk of 8,192
//! rows) the hand-offs cost more than the work, so a chain of three parallel operators ran
//! slower than one thread would. A query compiler fuses such operators into one pipeline
//! stage; this module decides which plan nodes form a stage, and `build` runs each as one
//! operator (one parallelism knob, the top node's counters).
//!
//! Fusion changes neither the results, nor their order, nor the errors. Only functions that
//! are pure and whose failures are found by re-running them element by element are fused:
//! expression maps and filters evaluated over whole chunks (`vectorized`) and row-wise
//! per-batch closures that are deterministic and keep no state (a failure later in the
//! stage calls them again, element by element, on the failing chunk). A fused task that fails is re-run element by element, so it reports
//! the first failing element, and its error, exactly as the chain of operators would.
//! Per-element closures (which say themselves where they failed) and per-batch closures that
//! are not row-wise (whose result depends on the chunk) end a stage.
//!
//! A stage's nodes agree on their order (`deterministic`) and are all parallel or all
//! sequential; a parallel stage runs with the widest of their parallelism settings. Its top
//! may also be a `map_and_batch`.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flumen_ir::{ClosureKind, ClosureRef, MapFn, Op, Plan, Predicate, Tunable};

use crate::build::is_parallel;
use crate::ops::function::{ChunkFn, Failure};

/// Plan nodes that run as one operator: `members[0]` is the top (the node the operator is
/// counted as), each next member the input of the one before, and `input` the input of the
/// last member.
#[derive(Debug)]
pub struct Stage<'a> {
    /// The fused nodes, top first.
    pub members: Vec<&'a Plan>,
    /// What the bottom member reads.
    pub input: &'a Plan,
}

impl<'a> Stage<'a> {
    /// The stage topped by `plan`, when `plan` and at least its input fuse.
    pub fn of(plan: &'a Plan) -> Option<Stage<'a>> {
        let (parallel, deterministic) = match plan.op() {
            Op::MapAndBatch { func, vectorized, num_parallel_calls, deterministic, .. } => {
                fusible_map(func, *vectorized).then_some((is_parallel(num_parallel_calls), *deterministic))?
            }
            op => member(op)?,
        };
        let mut members = vec![plan];
        let mut input = plan.input();
        while let Some((p, d)) = member(input.op()) {
            if p != parallel || d != deterministic {
                break;
            }
            members.push(input);
            input = input.input();
        }
        (members.len() > 1).then_some(Stage { members, input })
    }

    /// The stage's parallelism setting: the widest of its members' (`AUTOTUNE` above any
    /// fixed number).
    pub fn calls(&self) -> Tunable {
        self.members.iter().filter_map(|m| calls(m.op())).fold(Tunable::Default, |a, b| match (a, b) {
            (Tunable::Autotune, _) | (_, Tunable::Autotune) => Tunable::Autotune,
            (Tunable::Fixed(x), Tunable::Fixed(y)) => Tunable::Fixed(x.max(y)),
            (Tunable::Fixed(x), Tunable::Default) | (Tunable::Default, Tunable::Fixed(x)) => Tunable::Fixed(x),
            (Tunable::Default, Tunable::Default) => Tunable::Default,
        })
    }

    /// Whether a member below the top drops rows, so that the stage's output rows are not
    /// known from its input rows.
    pub fn filters(&self) -> bool {
        self.members.iter().any(|m| matches!(m.op(), Op::Filter { .. }))
    }
}

/// The plan nodes whose operators feed `plan`'s: the input of its stage when `fuse` and
/// `plan` tops one, its plan inputs otherwise.
pub fn operator_inputs(plan: &Plan, fuse: bool) -> Vec<&Plan> {
    match Stage::of(plan).filter(|_| fuse) {
        Some(stage) => vec![stage.input],
        None => plan.inputs().iter().collect(),
    }
}

/// Whether `op` can be a stage member, and if so whether it is parallel and its order.
fn member(op: &Op) -> Option<(bool, Option<bool>)> {
    match op {
        Op::Map { func, vectorized, num_parallel_calls, deterministic } if fusible_map(func, *vectorized) => {
            Some((is_parallel(num_parallel_calls), *deterministic))
        }
        Op::Filter { predicate, vectorized, num_parallel_calls, deterministic }
            if fusible_predicate(predicate, *vectorized) =>
        {
            Some((is_parallel(num_parallel_calls), *deterministic))
        }
        _ => None,
    }
}

fn calls(op: &Op) -> Option<Tunable> {
    match op {
        Op::Map { num_parallel_calls, .. }
        | Op::Filter { num_parallel_calls, .. }
        | Op::MapAndBatch { num_parallel_calls, .. } => Some(*num_parallel_calls),
        _ => None,
    }
}

fn fusible_map(func: &MapFn, vectorized: bool) -> bool {
    match func {
        MapFn::Exprs { .. } => vectorized,
        MapFn::Closure { closure, .. } => fusible_closure(closure),
    }
}

fn fusible_predicate(predicate: &Predicate, vectorized: bool) -> bool {
    match predicate {
        Predicate::Expr { .. } => vectorized,
        Predicate::Closure { closure } => fusible_closure(closure),
    }
}

/// A failure later in the stage re-runs the closure on the chunk's elements one by one: it
/// must give the same result however often and however chunked it is called.
fn fusible_closure(closure: &ClosureRef) -> bool {
    closure.kind == ClosureKind::PerBatchRowwise && closure.deterministic && closure.stateless
}

/// The functions `fns` (bottom member first) as one chunk function with output `schema`.
/// A chunk a filter empties skips the functions above it. A failure is reported as one of
/// the chunk (`Failure::Pure`), which the operator locates by re-running the chain element
/// by element; a member's own `Whole` failure stays whole.
pub fn chain(fns: Vec<ChunkFn>, schema: SchemaRef) -> ChunkFn {
    Arc::new(move |chunk| {
        let mut current = chunk.clone();
        for f in &fns {
            if current.num_rows() == 0 {
                return Ok(RecordBatch::new_empty(schema.clone()));
            }
            current = f(&current).map_err(|failure| match failure {
                Failure::Whole(e) => Failure::Whole(e),
                other => Failure::Pure(other.into_error()),
            })?;
        }
        Ok(current)
    })
}

#[cfg(test)]
mod tests {
    use flumen_ir::{BinaryOp, DType, ElementSpec, Expr, FieldSpec, NamedExpr, Scalar, SourceDesc};

    use super::*;

    fn range() -> Plan {
        Plan::new(Op::Source(SourceDesc::Range { start: 0, stop: 10, step: 1 }), vec![]).unwrap()
    }

    /// `map(value := value + 1)` over `input`.
    fn map(input: &Plan, calls: Tunable, deterministic: Option<bool>, vectorized: bool) -> Plan {
        let expr = Expr::binary(BinaryOp::Add, Expr::col("value"), Expr::Literal(Scalar::Int(1, DType::Int64)));
        let func = MapFn::Exprs { outputs: vec![NamedExpr { name: "value".into(), expr }], keep_input: true };
        Plan::new(Op::Map { func, num_parallel_calls: calls, deterministic, vectorized }, vec![input.clone()]).unwrap()
    }

    /// A map calling a closure of `kind` over `input`, with its purity flags.
    fn closure_map(input: &Plan, kind: ClosureKind, deterministic: bool, stateless: bool) -> Plan {
        let closure = ClosureRef { name: "f".into(), kind, deterministic, stateless, anonymous: false };
        let output = ElementSpec::new(vec![FieldSpec::scalar("value", DType::Int64)]).unwrap();
        let func = MapFn::Closure { closure, output };
        let op = Op::Map { func, num_parallel_calls: Tunable::Autotune, deterministic: None, vectorized: true };
        Plan::new(op, vec![input.clone()]).unwrap()
    }

    /// The number of members of the stage `plan` tops (1: none).
    fn members(plan: &Plan) -> usize {
        Stage::of(plan).map_or(1, |s| s.members.len())
    }

    #[test]
    fn columnar_maps_fuse_with_the_widest_parallelism() {
        let plan = map(
            &map(&map(&range(), Tunable::Fixed(2), None, true), Tunable::Autotune, None, true),
            Tunable::Fixed(8),
            None,
            true,
        );
        let stage = Stage::of(&plan).unwrap();
        assert_eq!(stage.members.len(), 3);
        assert_eq!(stage.input.op().name(), "range");
        assert_eq!(stage.calls(), Tunable::Autotune);
        let fixed = map(&map(&range(), Tunable::Fixed(2), None, true), Tunable::Fixed(8), None, true);
        assert_eq!(Stage::of(&fixed).unwrap().calls(), Tunable::Fixed(8));
        assert_eq!(operator_inputs(&plan, true)[0].op().name(), "range");
        assert_eq!(operator_inputs(&plan, false)[0].op().name(), "map");
    }

    #[test]
    fn a_stage_keeps_one_order_and_one_kind_of_execution() {
        let auto = Tunable::Autotune;
        assert_eq!(members(&map(&map(&range(), auto, Some(false), true), auto, None, true)), 1);
        assert_eq!(members(&map(&map(&range(), auto, Some(true), true), auto, Some(true), true)), 2);
        assert_eq!(members(&map(&map(&range(), Tunable::Default, None, true), auto, None, true)), 1);
        assert_eq!(members(&map(&map(&range(), Tunable::Default, None, true), Tunable::Fixed(1), None, true)), 2);
        // Expressions called once per element say where they failed: not fused.
        assert_eq!(members(&map(&map(&range(), auto, None, false), auto, None, true)), 1);
        assert_eq!(members(&map(&range(), auto, None, true)), 1);
    }

    #[test]
    fn only_pure_row_wise_closures_fuse() {
        let auto = Tunable::Autotune;
        let over = |closure: Plan| members(&map(&closure, auto, None, true));
        assert_eq!(over(closure_map(&range(), ClosureKind::PerBatchRowwise, true, true)), 2);
        assert_eq!(over(closure_map(&range(), ClosureKind::PerBatchRowwise, false, true)), 1);
        assert_eq!(over(closure_map(&range(), ClosureKind::PerBatchRowwise, true, false)), 1);
        assert_eq!(over(closure_map(&range(), ClosureKind::PerBatch, true, true)), 1);
        assert_eq!(over(closure_map(&range(), ClosureKind::PerElement, true, true)), 1);
    }
}
