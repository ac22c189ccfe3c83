//! Stage fusion: a chain of maps and filters over whole chunks runs as one operator whose
//! tasks call the chain's functions one after another on their chunk.
//!
//! Operators hand chunks to each other through their `next_chunk` calls and, when parallel,
//! through the thread pool. Where the functions are cheap (w4's fused kernels take about
//! 20 µs per chunk of 8,192 rows) each hand-off costs as much as the work. A query compiler
//! fuses such operators into one pipeline stage; this module decides which plan nodes form a
//! stage, and `build` runs each as one operator (one parallelism knob, the top node's
//! counters).
//!
//! Fusion changes neither the results, nor their order, nor the errors. Only expression maps
//! and filters evaluated over whole chunks (`vectorized`) fuse: they are pure, and their
//! failures are found by re-running them element by element, so a fused task that fails is
//! re-run element by element and reports the first failing element, and its error, exactly
//! as the chain of operators would. Closures end a stage (see `fusible_map`), except a
//! columnar `parse_example` at the bottom of one (see `parse_member`): the tasks parse their
//! records and run the expressions over what they parsed while it is in the worker's cache;
//! a record that fails to parse fails at its row, as the parse's own operator reports it.
//!
//! Where the stage's maps and filters compose into one selecting kernel
//! (`flumen_udf::kernel::chain`), each task runs that one loop over its chunk first: it
//! reads the input columns once and writes only the rows every filter keeps, with no mask,
//! filtered copy or intermediate column between the members. A chunk the loop hands back (an
//! overflow or other failure on any row, nulls) runs member by member as above, which gives
//! the same values, or the error at its row.
//!
//! A stage's nodes agree on their order (`deterministic`) and are all parallel or all
//! sequential; a parallel stage runs with the widest of their parallelism settings. Its top
//! may also be a `map_and_batch`.
//!
//! `group_by_window` and `bucket_by_sequence_length` also top a stage: of one such filter
//! below them, whatever its parallelism. The grouping evaluates the predicate itself and
//! groups only the rows it keeps, by reference into the input chunk, so the kept rows are not
//! copied into a filtered chunk first (w6's filter copied every token list once before
//! bucketing copied it again into the padded batch). Predicates are cheap next to that copy;
//! errors are reported per element in place, as the filter reports them.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flumen_ir::{MapFn, NamedExpr, Op, Plan, Predicate, Result, Tunable};
use flumen_udf::kernel::chain::{FusedChain, Link};

use crate::build::is_parallel;
use crate::kernels::function::{ChunkFn, Failure};

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
            Op::GroupByWindow { .. } | Op::BucketBySequenceLength { .. } => {
                let filter = plan.input();
                let fuses = matches!(filter.op(), Op::Filter { predicate, vectorized, .. }
                    if fusible_predicate(predicate, *vectorized));
                return fuses.then(|| Stage { members: vec![plan, filter], input: filter.input() });
            }
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
        // A parse under the expressions feeds their loop in the same task, where its output
        // is still in the worker's cache; its tasks must then be cut by chunks, as its own
        // operator's are (a `map_and_batch` without a filter cuts them by batches).
        let by_chunks = !matches!(plan.op(), Op::MapAndBatch { .. }) || members.iter().any(|m| is_filter(m));
        if by_chunks && parse_member(input.op()) == Some((parallel, deterministic)) {
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

    /// The members as the links of one fused loop, bottom first ([`FusedChain`]).
    pub fn links(&self) -> Result<Vec<Link>> {
        let map = |outputs: &[NamedExpr], keep_input: bool, schema| Link::Map {
            outputs: outputs.to_vec(),
            keep_input,
            schema,
        };
        let link = |member: &Plan| {
            Ok(match member.op() {
                Op::Filter { predicate: Predicate::Expr { expr }, .. } => Link::Filter { predicate: expr.clone() },
                Op::Map { func: MapFn::Exprs { outputs, keep_input }, .. } => {
                    map(outputs, *keep_input, member.spec().arrow_schema())
                }
                Op::MapAndBatch { func: MapFn::Exprs { outputs, keep_input }, .. } => {
                    map(outputs, *keep_input, member.spec().unbatched("map_and_batch")?.arrow_schema())
                }
                other => unreachable!("a stage member {}", other.name()),
            })
        };
        self.members.iter().rev().filter(|m| !is_parse(m)).map(|m| link(m)).collect()
    }

    /// The `parse_example` map at the bottom of the stage, if it has one: it runs before
    /// the [`links`](Stage::links), which read its output.
    pub fn parse(&self) -> Option<&'a Plan> {
        self.members.last().copied().filter(|m| is_parse(m))
    }

    /// The schema the links read: the parse's output, or the stage's input.
    pub fn links_input(&self) -> SchemaRef {
        self.parse().unwrap_or(self.input).spec().arrow_schema()
    }

    /// Whether a member below the top drops rows, so that the stage's output rows are not
    /// known from its input rows.
    pub fn filters(&self) -> bool {
        self.members.iter().any(|m| is_filter(m))
    }
}

fn is_filter(plan: &Plan) -> bool {
    matches!(plan.op(), Op::Filter { .. })
}

fn is_parse(plan: &Plan) -> bool {
    parse_member(plan.op()).is_some()
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

/// Whether a columnar `parse_example` map can be the bottom of a stage, and if so whether it
/// is parallel and its order. It is the one function other than expressions that fuses,
/// and only below them: w2's parse, filter and scaling in one task took 3% less time and 5%
/// less CPU than the parse as an operator of its own, pipelined with the stage above it
/// (medians of 60 alternating fresh passes), since the links read the parsed features
/// where the parse wrote them, and a chunk is handed between threads once, not twice.
fn parse_member(op: &Op) -> Option<(bool, Option<bool>)> {
    match op {
        Op::Map { func: MapFn::ParseExample { .. }, vectorized: true, num_parallel_calls, deterministic } => {
            Some((is_parallel(num_parallel_calls), *deterministic))
        }
        _ => None,
    }
}

/// Only expressions fuse (and a parse below them, `parse_member`): a closure works long
/// enough per chunk that running it as an operator of its own, pipelined with its
/// neighbours, can be faster. (An earlier runtime, whose tasks were not yet bounded by their
/// output, ran w2 and w6 2–3% slower with their parses fused, while w4's expression chain
/// ran 8–13% faster fused.)
/// A map whose functions draw random numbers runs as its own operator: its element keys
/// count its own input's elements, which a filter fused below it would not see.
fn fusible_map(func: &MapFn, vectorized: bool) -> bool {
    matches!(func, MapFn::Exprs { .. }) && vectorized && !func.draws_random()
}

fn fusible_predicate(predicate: &Predicate, vectorized: bool) -> bool {
    matches!(predicate, Predicate::Expr { .. }) && vectorized
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

/// `fused` where it computes a chunk, and `links` (the chain run link by link) where it
/// hands the chunk back, which gives the same values, or finds the error and its row.
pub fn one_loop_first(fused: FusedChain, links: ChunkFn) -> ChunkFn {
    Arc::new(move |chunk| match fused.evaluate(chunk) {
        Some(out) => Ok(out),
        None => links(chunk),
    })
}

#[cfg(test)]
mod tests {
    use flumen_ir::{
        BinaryOp, ClosureKind, ClosureRef, DType, ElementSpec, Expr, FieldSpec, NamedExpr, Scalar, SourceDesc,
    };

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

    /// A map calling a row-wise batch closure over `input`.
    fn closure_map(input: &Plan) -> Plan {
        let closure = ClosureRef {
            name: "parse".into(),
            kind: ClosureKind::PerBatchRowwise,
            deterministic: true,
            stateless: true,
            exclusive: false,
            anonymous: false,
        };
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
    fn closures_end_a_stage() {
        let auto = Tunable::Autotune;
        assert_eq!(members(&map(&closure_map(&range()), auto, None, true)), 1);
        let above = map(&map(&closure_map(&range()), auto, None, true), auto, None, true);
        let stage = Stage::of(&above).unwrap();
        assert_eq!(stage.members.len(), 2);
        assert_eq!(stage.input.op().name(), "map");
    }

    /// `filter(value > 2)` over `input`.
    fn filter(input: &Plan, calls: Tunable, vectorized: bool) -> Plan {
        let expr = Expr::binary(BinaryOp::Gt, Expr::col("value"), Expr::Literal(Scalar::Int(2, DType::Int64)));
        let op = Op::Filter {
            predicate: Predicate::Expr { expr },
            vectorized,
            num_parallel_calls: calls,
            deterministic: None,
        };
        Plan::new(op, vec![input.clone()]).unwrap()
    }

    #[test]
    fn a_grouping_takes_in_the_columnar_filter_below_it_whatever_its_parallelism() {
        let window = |input: &Plan| {
            let op = Op::GroupByWindow { key: Expr::col("value"), window_size: 2 };
            Plan::new(op, vec![input.clone()]).unwrap()
        };
        for calls in [Tunable::Default, Tunable::Autotune] {
            let plan = window(&filter(&map(&range(), Tunable::Autotune, None, true), calls, true));
            let stage = Stage::of(&plan).unwrap();
            assert_eq!(stage.members.len(), 2);
            // Only the filter: the map below it stays an operator (of a stage of its own).
            assert_eq!(stage.input.op().name(), "map");
        }
        // A filter called once per element, or none: nothing to take in.
        assert_eq!(members(&window(&filter(&range(), Tunable::Default, false))), 1);
        assert_eq!(members(&window(&range())), 1);
    }
}
