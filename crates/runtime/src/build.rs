//! Lowering a typed plan to physical operators.
//!
//! Plans run as written (the optimizer, when present, rewrites them before this step).
//! Each node becomes one operator, wrapped in a [`Metered`] counter of its plan node;
//! `repeat` keeps its input plan to rebuild it per epoch. A `num_parallel_calls` or a
//! prefetch turns into an asynchronous operator whose parameters are [`Knob`]s: fixed when
//! the plan gives a number, tuned live when it says `AUTOTUNE` (see `autotune`). A chain of
//! maps and filters over whole chunks becomes one operator, counted as its top node, when
//! stage fusion is on (see `crate::stage`).

use std::sync::Arc;

use flumen_ir::{Error, Expr, MapFn, NamedExpr, Op, Plan, Predicate, Result, Tunable};

use crate::autotune::tuner::Tuned;
use crate::context::ExecContext;
use crate::kernels::function::{filter_fn, filter_map_fn, map_fn, mask_fn, MaskFn};
use crate::metrics::{Knob, Metered, Param, StatsKey};
use crate::operator::BoxOperator;
use crate::ops::batch::BatchOp;
use crate::ops::bucket::BucketBySequenceLengthOp;
use crate::ops::cache::CacheOp;
use crate::ops::choose_from_datasets::ChooseOp;
use crate::ops::concatenate::ConcatenateOp;
use crate::ops::count::{EnumerateOp, ShardOp, SkipOp, TakeOp, TakeWhileOp};
use crate::ops::element_key::ElementKeyOp;
use crate::ops::file_cache::FileCacheOp;
use crate::ops::fold::{ReduceOp, ScanOp};
use crate::ops::group_by_window::GroupByWindowOp;
use crate::ops::ignore_errors::IgnoreErrorsOp;
use crate::ops::map::MapOp;
use crate::ops::nested::{ElementDatasets, FlatMapOp, InterleaveOp, ParallelReads};
use crate::ops::padded_batch::PaddedBatchOp;
use crate::ops::parallel_map::{ParallelMapOp, TaskSize};
use crate::ops::prefetch::{Permits, PrefetchOp};
use crate::ops::repeat::RepeatOp;
use crate::ops::sample_from_datasets::SampleOp;
use crate::ops::shuffle::ShuffleOp;
use crate::ops::snapshot::SnapshotOp;
use crate::ops::source::{avro_source, build_source, is_avro_source};
use crate::ops::unbatch::{RebatchOp, UnbatchOp};
use crate::ops::unique::UniqueOp;
use crate::ops::window::WindowOp;
use crate::ops::zip::ZipOp;
use crate::rows::OneRow;
use crate::stage::{chain, one_loop_first, Stage};
use flumen_udf::kernel::chain::FusedChain;

/// The operator tree of an iterator over `plan`: [`build`], under the tuner when autotuning
/// is on and the plan has `AUTOTUNE` parameters.
pub fn build_root(plan: &Plan, ctx: &ExecContext) -> Result<BoxOperator> {
    let root = build(plan, ctx)?;
    if !ctx.options.autotune.enabled || !has_autotune(plan) {
        return Ok(root);
    }
    Ok(Box::new(Tuned::new(root, plan.clone(), ctx.metrics.clone(), ctx.options.autotune, ctx.options.stage_fusion)?))
}

fn has_autotune(plan: &Plan) -> bool {
    let tuned = match plan.op() {
        Op::Map { num_parallel_calls, .. }
        | Op::MapAndBatch { num_parallel_calls, .. }
        | Op::Batch { num_parallel_calls, .. } => *num_parallel_calls == Tunable::Autotune,
        Op::Prefetch { buffer_size } => matches!(buffer_size, Tunable::Autotune | Tunable::Default),
        Op::Interleave { num_parallel_calls, .. } => is_parallel(num_parallel_calls),
        _ => false,
    };
    tuned || plan.inputs().iter().any(has_autotune)
}

/// The physical operator tree of `plan` for one iterator.
pub fn build(plan: &Plan, ctx: &ExecContext) -> Result<BoxOperator> {
    Ok(metered(plan, ctx, uniform_batches(plan, build_node(plan, ctx)?)))
}

/// The batches `op` (the operator of `plan`) makes, checked to hold elements of one shape
/// where a dense field has an unknown dimension (tf.data's batching rule,
/// [`crate::ops::uniform_shapes`]); `op` itself for any other operator.
fn uniform_batches(plan: &Plan, op: BoxOperator) -> BoxOperator {
    match crate::ops::uniform_shapes::checks(plan) {
        Some((operator, fields)) => Box::new(crate::ops::uniform_shapes::UniformShapesOp::new(op, fields, operator)),
        None => op,
    }
}

/// The input of the batch `plan`: an Avro source right below it cuts its runs to whole
/// batches (the read-and-batch fusion), which the batch wraps without copying.
fn batch_input(plan: &Plan, batch_size: u64, ctx: &ExecContext) -> Result<BoxOperator> {
    let input = plan.input();
    let Op::Source(desc) = input.op() else { return build(input, ctx) };
    if !is_avro_source(input) {
        return build(input, ctx);
    }
    let rows = usize::try_from(batch_size).unwrap_or(usize::MAX);
    let source = avro_source(input, desc, input.spec().arrow_schema(), ctx)?;
    let source = source.in_batches_of(rows, ctx.options.read().chunk_rows);
    Ok(metered(input, ctx, Box::new(source)))
}

/// `op`, the operator of `plan`, counted as that plan node.
fn metered(plan: &Plan, ctx: &ExecContext, op: BoxOperator) -> BoxOperator {
    Box::new(Metered::new(op, ctx.metrics.stats(StatsKey::Node(plan.node_id()))))
}

/// The knob of `param` for `plan`'s operator: fixed, or tunable from `start`, the value
/// tf.data starts an `AUTOTUNE` parameter at (and runs with when the tuner is off).
pub(crate) fn knob(
    plan: &Plan,
    ctx: &ExecContext,
    param: Param,
    value: Tunable,
    start: usize,
    max: usize,
) -> Arc<Knob> {
    let stats = ctx.metrics.stats(StatsKey::Node(plan.node_id()));
    let max = max.max(1);
    stats.knob(param, || match value {
        Tunable::Fixed(n) => Knob::new(param, n as usize, false, 1, (n as usize).max(1)),
        Tunable::Default | Tunable::Autotune => Knob::new(param, start.min(max), ctx.options.autotune.enabled, 1, max),
    })
}

/// Where tf.data starts a buffer size it tunes.
const BUFFER_START: usize = 2;

/// How a parallel `map_and_batch` cuts its tasks. A vectorized function maps one batch's
/// rows a task, into one chunk the batch wraps without copying. A per-element function in
/// order gets a parallel map's per-element tasks instead, dispatched as its rows arrive,
/// as tf.data's `map_and_batch` starts each element's call as soon as its input is there:
/// a batch-sized task waits for the batch's last input row before its first call starts, so
/// over a slow input (the tf.data paper's Figure 4, reads of 5 ms) the last batch's calls
/// all ran after the reads ended, a tenth of that pipeline's time. Unordered, a task stays
/// a whole batch, since only whole batches may be handed out of order.
fn map_and_batch_tasks(plan: &Plan, ctx: &ExecContext) -> TaskSize {
    let Op::MapAndBatch { batch_size, vectorized, deterministic, .. } = plan.op() else {
        unreachable!("map_and_batch_tasks of {}", plan.op().name())
    };
    let ordered = deterministic.unwrap_or(ctx.options.deterministic);
    match (*vectorized, ordered) {
        (false, true) => TaskSize::Split,
        _ => TaskSize::Rows(usize::try_from(*batch_size).unwrap_or(usize::MAX)),
    }
}

/// Whether `calls` asks for parallel execution.
pub(crate) fn is_parallel(calls: &Tunable) -> bool {
    matches!(calls, Tunable::Autotune | Tunable::Fixed(2..))
}

/// A map of `func` over `input` with `calls` parallel calls, cutting tasks by `size`.
fn parallel_map(
    plan: &Plan,
    ctx: &ExecContext,
    input: BoxOperator,
    func: crate::kernels::function::ChunkFn,
    calls: Tunable,
    deterministic: Option<bool>,
    size: TaskSize,
) -> BoxOperator {
    // tf.data starts a tuned map's parallelism at the number of cores; here, at what the
    // pool can run at once, which is the cores unless the user sized the pool otherwise.
    // A pool larger than the cores is there for calls that wait, which the tuner would
    // otherwise reach only after its first round, late in a short pass.
    let max = ctx.options.autotune.cpu_budget.max(ctx.options.threads);
    let knob = knob(plan, ctx, Param::Parallelism, calls, ctx.options.threads, max);
    let stats = ctx.metrics.stats(StatsKey::Node(plan.node_id()));
    let ordered = deterministic.unwrap_or(ctx.options.deterministic);
    let map = ParallelMapOp::new(
        input,
        func,
        ctx.pool.clone(),
        knob,
        size,
        ordered,
        stats,
        ctx.budget.clone(),
        ctx.cancel.clone(),
    );
    // A map_and_batch's map makes elements; the batch above wraps them.
    let row_bytes = match plan.op() {
        Op::MapAndBatch { .. } => plan.spec().unbatched("map_and_batch").ok().and_then(|s| s.fixed_row_bytes()),
        _ => plan.spec().fixed_row_bytes(),
    };
    Box::new(map.with_output_row_bytes(row_bytes))
}

/// The operator of a stage (see `crate::stage`): its members' functions chained in each task,
/// counted as its top node. A `map_and_batch` top batches the chain's output; its tasks gather
/// whole batches' rows unless a filter below makes the output rows unknown.
fn build_stage(plan: &Plan, stage: &Stage, ctx: &ExecContext) -> Result<BoxOperator> {
    if let Op::GroupByWindow { .. } | Op::BucketBySequenceLength { .. } = plan.op() {
        let Op::Filter { predicate, vectorized, .. } = stage.members[1].op() else {
            unreachable!("a grouping stage fuses a filter")
        };
        let keep = mask_fn(predicate, "filter", &ctx.registry, *vectorized)?;
        return build_grouping(plan, build(stage.input, ctx)?, Some(keep), ctx);
    }
    let mut fns = Vec::with_capacity(stage.members.len());
    let mut out_schema = plan.spec().arrow_schema();
    let mut members = stage.members.iter().rev().peekable();
    while let Some(member) = members.next() {
        out_schema = member.spec().arrow_schema();
        // A filter and the expression map above it share one pass: the map reads the
        // kept rows through the filter's selection.
        if let Some((predicate, map, outputs, keep_input)) = filter_then_map(member, members.peek().map(|m| **m)) {
            members.next();
            out_schema = match map.op() {
                Op::MapAndBatch { .. } => map.spec().unbatched("map_and_batch")?.arrow_schema(),
                _ => map.spec().arrow_schema(),
            };
            fns.push(filter_map_fn(predicate, outputs, keep_input, out_schema.clone()));
            continue;
        }
        fns.push(match member.op() {
            Op::Map { func, vectorized, .. } => map_fn(func, out_schema.clone(), &ctx.registry, *vectorized)?,
            Op::Filter { predicate, vectorized, .. } => filter_fn(predicate, &ctx.registry, *vectorized)?,
            Op::MapAndBatch { func, vectorized, .. } => {
                out_schema = member.spec().unbatched("map_and_batch")?.arrow_schema();
                map_fn(func, out_schema.clone(), &ctx.registry, *vectorized)?
            }
            other => unreachable!("a stage member {}", other.name()),
        });
    }
    let func = match FusedChain::new(&stage.links_input(), &stage.links()?) {
        // The parse (`fns[0]`, bottom first) runs before the loop, which reads its output.
        Some(fused) if stage.parse().is_some() => {
            let parse = fns.remove(0);
            chain(vec![parse, one_loop_first(fused, chain(fns, out_schema.clone()))], out_schema)
        }
        Some(fused) => one_loop_first(fused, chain(fns, out_schema)),
        None => chain(fns, out_schema),
    };
    let input = match stage.parse() {
        Some(parse) => map_input(parse, ctx)?,
        None => build(stage.input, ctx)?,
    };
    let calls = stage.calls();
    let parallel = is_parallel(&calls);
    Ok(match plan.op() {
        Op::MapAndBatch { batch_size, drop_remainder, deterministic, .. } => {
            let map: BoxOperator = if !parallel {
                Box::new(MapOp::new(input, func))
            } else if stage.filters() {
                parallel_map(plan, ctx, input, func, calls, *deterministic, TaskSize::Chunk)
            } else {
                let size = map_and_batch_tasks(plan, ctx);
                parallel_map(plan, ctx, input, func, calls, *deterministic, size)
            };
            Box::new(
                BatchOp::new(map, *batch_size, *drop_remainder, plan.spec().arrow_schema())
                    .holding_in(ctx.budget.clone()),
            )
        }
        Op::Map { deterministic, .. } | Op::Filter { deterministic, .. } if parallel => {
            parallel_map(plan, ctx, input, func, calls, *deterministic, TaskSize::Chunk)
        }
        _ => Box::new(MapOp::new(input, func)),
    })
}

/// `filter` and `above` when they are a vectorized expression filter under a vectorized
/// expression map (or `map_and_batch`): the predicate, the map node, its outputs and whether
/// it keeps its input's fields.
fn filter_then_map<'p>(
    filter: &'p Plan,
    above: Option<&'p Plan>,
) -> Option<(&'p Expr, &'p Plan, &'p [NamedExpr], bool)> {
    let Op::Filter { predicate: Predicate::Expr { expr }, vectorized: true, .. } = filter.op() else { return None };
    let above = above?;
    match above.op() {
        Op::Map { func: MapFn::Exprs { outputs, keep_input }, vectorized: true, .. }
        | Op::MapAndBatch { func: MapFn::Exprs { outputs, keep_input }, vectorized: true, .. } => {
            Some((expr, above, outputs.as_slice(), *keep_input))
        }
        _ => None,
    }
}

/// Whether `plan` is a `parse_example` map over an interleave, which hands it the records as
/// views of its readers' windows (see [`InterleaveOp::handing_on_views`]): the parse reads
/// them where they were read, and the bytes are not gathered into a copy first.
pub(crate) fn parses_in_place(plan: &Plan) -> bool {
    matches!(plan.op(), Op::Map { func: MapFn::ParseExample { .. }, .. })
        && plan.inputs().first().is_some_and(|input| matches!(input.op(), Op::Interleave { .. }))
}

/// The input operator of the map `plan` (see [`parses_in_place`]).
fn map_input(plan: &Plan, ctx: &ExecContext) -> Result<BoxOperator> {
    let input = plan.input();
    if !parses_in_place(plan) {
        return Ok(keyed(plan, ctx, build(input, ctx)?));
    }
    Ok(keyed(plan, ctx, metered(input, ctx, Box::new(interleave(input, ctx)?.handing_on_views()))))
}

/// `input` with element keys added when `plan` is a map whose functions draw random
/// numbers ([`ElementKeyOp`]), at the positions an `element_positions` below it says.
fn keyed(plan: &Plan, ctx: &ExecContext, input: BoxOperator) -> BoxOperator {
    match plan.op() {
        Op::Map { func, .. } | Op::MapAndBatch { func, .. } if func.draws_random() => {
            let (offset, stride) = positions_below(plan.input());
            Box::new(ElementKeyOp::new(input, ctx.salt).at_positions(offset, stride))
        }
        _ => input,
    }
}

/// The `(offset, stride)` of the `element_positions` at `plan`, through prefetches;
/// `(0, 1)` (positions in `plan` itself) when there is none.
fn positions_below(plan: &Plan) -> (u64, u64) {
    match plan.op() {
        Op::ElementPositions { offset, stride } => (*offset, *stride),
        Op::Prefetch { .. } => positions_below(plan.input()),
        _ => (0, 1),
    }
}

/// The operator of an `interleave` node. A cycle length of AUTOTUNE is the number of cores,
/// fixed at the start as in tf.data: changing it while running would change the element
/// order.
fn interleave(plan: &Plan, ctx: &ExecContext) -> Result<InterleaveOp> {
    let Op::Interleave { func, cycle_length, block_length, num_parallel_calls, deterministic } = plan.op() else {
        unreachable!("an interleave node")
    };
    let cycle = match cycle_length {
        Tunable::Fixed(n) => *n as usize,
        Tunable::Default | Tunable::Autotune => ctx.options.cores,
    };
    let opened = ctx.metrics.stats(StatsKey::Opened(plan.node_id()));
    let datasets = ElementDatasets::new(func, ctx, plan.spec().arrow_schema())?.counted(opened);
    let op = InterleaveOp::new(build(plan.input(), ctx)?, datasets, cycle, *block_length, gathered_rows(plan, ctx));
    if !is_parallel(num_parallel_calls) {
        return Ok(op);
    }
    let reads = ParallelReads {
        // tf.data starts a tuned parallel interleave at its cycle length: every input read
        // ahead from the first element on.
        permits: Permits::new(
            knob(plan, ctx, Param::Parallelism, *num_parallel_calls, cycle, cycle),
            ctx.cancel.clone(),
        ),
        buffer: knob(plan, ctx, Param::Buffer, Tunable::Autotune, BUFFER_START, MAX_BUFFER),
        stats: ctx.metrics.stats(StatsKey::Node(plan.node_id())),
        deterministic: deterministic.unwrap_or(ctx.options.deterministic),
    };
    Ok(op.with_parallel_reads(reads))
}

/// How many rows an operator that gathers its output chunks row by row from its inputs
/// (shuffle, interleave, `sample_from_datasets`; zip, for its first input) puts in one: the
/// chunk size, or one where [`reads_on_demand`]. A larger chunk would read such an input
/// ahead of what is asked for, by as much as the chunk size: a shuffle refills its buffer
/// once per row it hands out, and a zip reads its other inputs as far as its first.
fn gathered_rows(plan: &Plan, ctx: &ExecContext) -> usize {
    if reads_on_demand(plan) {
        1
    } else {
        ctx.options.chunk_rows
    }
}

/// Whether how far `plan`'s operator reads its inputs changes results: an input depends on
/// demand (`Plan::depends_on_demand`), or the operator's own dataset function keeps state.
fn reads_on_demand(plan: &Plan) -> bool {
    plan.inputs().iter().any(Plan::depends_on_demand) || plan.op().closure().is_some_and(|c| c.keeps_state())
}

/// Whether `op` calls a closure that keeps state as its function (a map, filter,
/// `map_and_batch` or `take_while`): it then runs as [`build_one_at_a_time`] builds it.
pub(crate) fn runs_one_at_a_time(op: &Op) -> bool {
    matches!(op, Op::Map { .. } | Op::Filter { .. } | Op::MapAndBatch { .. } | Op::TakeWhile { .. })
        && op.closure().is_some_and(|c| c.keeps_state())
}

/// The operator of a map, filter, `map_and_batch` or `take_while` whose closure keeps state:
/// called once per element, in element order, on the iterator's thread, and only when its
/// consumer pulls, its input read one element at a time ([`OneRow`]), whatever parallelism
/// the plan asks for. What it returns may depend on the calls before it, so neither the
/// chunk size, the threads nor a parallel call may change which elements it sees, or when.
fn build_one_at_a_time(plan: &Plan, ctx: &ExecContext) -> Result<BoxOperator> {
    let input: BoxOperator = Box::new(OneRow::new(keyed(plan, ctx, build(plan.input(), ctx)?)));
    let schema = plan.spec().arrow_schema();
    Ok(match plan.op() {
        Op::Map { func, vectorized, .. } => {
            Box::new(MapOp::new(input, map_fn(func, schema, &ctx.registry, *vectorized)?))
        }
        Op::Filter { predicate, vectorized, .. } => {
            Box::new(MapOp::new(input, filter_fn(predicate, &ctx.registry, *vectorized)?))
        }
        Op::MapAndBatch { func, batch_size, drop_remainder, vectorized, .. } => {
            let mapped = plan.spec().unbatched("map_and_batch")?.arrow_schema();
            let map = Box::new(MapOp::new(input, map_fn(func, mapped, &ctx.registry, *vectorized)?));
            Box::new(BatchOp::new(map, *batch_size, *drop_remainder, schema).holding_in(ctx.budget.clone()))
        }
        Op::TakeWhile { predicate } => {
            Box::new(TakeWhileOp::new(input, mask_fn(predicate, "take_while", &ctx.registry, true)?))
        }
        other => unreachable!("{} calls no function of its own", other.name()),
    })
}

fn build_node(plan: &Plan, ctx: &ExecContext) -> Result<BoxOperator> {
    if runs_one_at_a_time(plan.op()) {
        return build_one_at_a_time(plan, ctx);
    }
    if ctx.options.stage_fusion {
        if let Some(stage) = Stage::of(plan) {
            return build_stage(plan, &stage, ctx);
        }
    }
    let schema = plan.spec().arrow_schema();
    let input = || build(plan.input(), ctx);
    let chunk_rows = gathered_rows(plan, ctx);
    Ok(match plan.op() {
        Op::Source(desc) => build_source(plan, desc, schema, ctx)?,
        Op::Map { func, vectorized, num_parallel_calls, deterministic } if is_parallel(num_parallel_calls) => {
            let input = map_input(plan, ctx)?;
            let func = map_fn(func, schema, &ctx.registry, *vectorized)?;
            let size = if *vectorized { TaskSize::Chunk } else { TaskSize::Split };
            parallel_map(plan, ctx, input, func, *num_parallel_calls, *deterministic, size)
        }
        Op::Map { func, vectorized, .. } => {
            Box::new(MapOp::new(map_input(plan, ctx)?, map_fn(func, schema, &ctx.registry, *vectorized)?))
        }
        // A parallel filter is a parallel map whose function drops rows: tasks keep their
        // input positions, so order, errors and checkpoints work the same way.
        Op::Filter { predicate, vectorized, num_parallel_calls, deterministic } if is_parallel(num_parallel_calls) => {
            let func = filter_fn(predicate, &ctx.registry, *vectorized)?;
            let size = if *vectorized { TaskSize::Chunk } else { TaskSize::Split };
            parallel_map(plan, ctx, input()?, func, *num_parallel_calls, *deterministic, size)
        }
        Op::Filter { predicate, vectorized, .. } => {
            Box::new(MapOp::new(input()?, filter_fn(predicate, &ctx.registry, *vectorized)?))
        }
        // Parallel: tasks as `map_and_batch_tasks` cuts them; sequential: map then batch.
        Op::MapAndBatch { func, batch_size, drop_remainder, vectorized, num_parallel_calls, deterministic } => {
            let mapped_spec = plan.spec().unbatched("map_and_batch")?;
            let func = map_fn(func, mapped_spec.arrow_schema(), &ctx.registry, *vectorized)?;
            let input = keyed(plan, ctx, input()?);
            let map: BoxOperator = if is_parallel(num_parallel_calls) {
                let size = map_and_batch_tasks(plan, ctx);
                parallel_map(plan, ctx, input, func, *num_parallel_calls, *deterministic, size)
            } else {
                Box::new(MapOp::new(input, func))
            };
            Box::new(BatchOp::new(map, *batch_size, *drop_remainder, schema).holding_in(ctx.budget.clone()))
        }
        // Shuffle then repeat, each epoch reshuffled exactly as the unfused pair would be.
        Op::ShuffleAndRepeat { buffer_size, seed, reshuffle_each_iteration, count } => {
            let base = ctx.seed(plan, *seed, false);
            let shuffle = Plan::new(
                Op::Shuffle {
                    buffer_size: *buffer_size,
                    seed: Some(base),
                    reshuffle_each_iteration: *reshuffle_each_iteration,
                },
                vec![plan.input().clone()],
            )?;
            Box::new(RepeatOp::new(shuffle, ctx.clone(), *count))
        }
        Op::TakeWhile { predicate } => {
            Box::new(TakeWhileOp::new(input()?, mask_fn(predicate, "take_while", &ctx.registry, true)?))
        }
        Op::FlatMap { func } => {
            let opened = ctx.metrics.stats(StatsKey::Opened(plan.node_id()));
            Box::new(FlatMapOp::new(input()?, ElementDatasets::new(func, ctx, schema)?.counted(opened)))
        }
        Op::Interleave { .. } => Box::new(interleave(plan, ctx)?),
        // Parallel: workers gather each batch's rows into one chunk (the copy of a batch
        // that straddles input chunks), which the batch wraps without copying.
        Op::Batch { batch_size, drop_remainder, num_parallel_calls, deterministic }
            if is_parallel(num_parallel_calls) =>
        {
            let gather: crate::kernels::function::ChunkFn = Arc::new(|chunk| Ok(chunk.clone()));
            let size = TaskSize::Rows(usize::try_from(*batch_size).unwrap_or(usize::MAX));
            let rows = batch_input(plan, *batch_size, ctx)?;
            let rows = parallel_map(plan, ctx, rows, gather, *num_parallel_calls, *deterministic, size);
            Box::new(BatchOp::new(rows, *batch_size, *drop_remainder, schema).holding_in(ctx.budget.clone()))
        }
        Op::Batch { batch_size, drop_remainder, .. } | Op::RaggedBatch { batch_size, drop_remainder } => {
            let rows = batch_input(plan, *batch_size, ctx)?;
            Box::new(BatchOp::new(rows, *batch_size, *drop_remainder, schema).holding_in(ctx.budget.clone()))
        }
        Op::PaddedBatch { batch_size, padded_shapes, padding_values, drop_remainder } => Box::new(PaddedBatchOp::new(
            input()?,
            *batch_size,
            padded_shapes.clone(),
            padding_values.clone(),
            *drop_remainder,
            plan.input().spec(),
            plan.spec(),
        )?),
        Op::Unbatch => Box::new(UnbatchOp::new(input()?, schema)),
        Op::Rebatch { batch_size, drop_remainder, batch_sizes } if batch_sizes.is_empty() => {
            Box::new(RebatchOp::new(input()?, *batch_size, *drop_remainder, schema)?)
        }
        Op::Rebatch { drop_remainder, batch_sizes, .. } => {
            Box::new(RebatchOp::cycling(input()?, batch_sizes, *drop_remainder, schema)?)
        }
        Op::Shuffle { buffer_size, seed, reshuffle_each_iteration } => {
            let seed = ctx.seed(plan, *seed, *reshuffle_each_iteration);
            Box::new(ShuffleOp::new(input()?, *buffer_size, seed, chunk_rows).holding_in(ctx.budget.clone()))
        }
        Op::Repeat { count } => Box::new(RepeatOp::new(plan.input().clone(), ctx.clone(), *count)),
        Op::Take { count } => Box::new(TakeOp::new(input()?, *count)),
        Op::Skip { count } => Box::new(SkipOp::new(input()?, *count)),
        Op::Shard { num_shards, index } => Box::new(ShardOp::new(input()?, *num_shards, *index)),
        Op::Enumerate { start, .. } => Box::new(EnumerateOp::new(input()?, *start, schema)),
        Op::Zip => {
            let step = if reads_on_demand(plan) { 1 } else { usize::MAX };
            Box::new(ZipOp::new(build_all(plan, ctx)?, schema).reading_at_most(step))
        }
        Op::Concatenate => Box::new(ConcatenateOp::new(build_all(plan, ctx)?, schema)),
        Op::Prefetch { buffer_size } => {
            let knob = knob(plan, ctx, Param::Buffer, *buffer_size, BUFFER_START, MAX_BUFFER);
            let stats = ctx.metrics.stats(StatsKey::Node(plan.node_id()));
            Box::new(PrefetchOp::new(input()?, knob, ctx.budget.clone(), ctx.cancel.clone(), stats, None))
        }
        Op::Cache { path: Some(path), .. } => Box::new(FileCacheOp::new(plan, path, ctx)?),
        Op::Snapshot { path, options } => Box::new(SnapshotOp::new(plan, path, options, ctx)?),
        Op::Cache { path: None, .. } => Box::new(CacheOp::new(plan, ctx)?),
        Op::Reduce { initial, update } => Box::new(ReduceOp::new(input()?, initial, update)?),
        Op::Scan { initial, function: Some(MapFn::Closure { closure, .. }), .. } => Box::new(ScanOp::with_closure(
            input()?,
            initial,
            ctx.registry.element_fn(&closure.name)?,
            &closure.name,
            schema,
        )?),
        Op::Scan { function: Some(_), .. } => {
            return Err(Error::plan("scan", "a scan function is a per-element closure"));
        }
        Op::Scan { initial, update, output, function: None } => {
            Box::new(ScanOp::new(input()?, initial, update, output, schema)?)
        }
        Op::Window { size, shift, stride, drop_remainder } => {
            Box::new(WindowOp::new(input()?, *size, *shift, *stride, *drop_remainder, schema))
        }
        Op::IgnoreErrors => Box::new(IgnoreErrorsOp::new(input()?)),
        Op::Unique => Box::new(UniqueOp::new(input()?, schema)?),
        // Read by the map above it (`keyed`); the elements pass as they are.
        Op::ElementPositions { .. } => input()?,
        Op::SampleFromDatasets { weights, seed, stop_on_empty_dataset } => Box::new(SampleOp::new(
            build_all(plan, ctx)?,
            weights.clone(),
            ctx.seed(plan, *seed, false),
            *stop_on_empty_dataset,
            chunk_rows,
            schema,
        )),
        Op::ChooseFromDatasets { stop_on_empty_dataset } => {
            Box::new(ChooseOp::new(build_all(plan, ctx)?, *stop_on_empty_dataset, chunk_rows, schema))
        }
        Op::GroupByWindow { .. } | Op::BucketBySequenceLength { .. } => build_grouping(plan, input()?, None, ctx)?,
    })
}

/// The operator of a `group_by_window` or `bucket_by_sequence_length` plan node over
/// `input`, grouping only the rows `keep` holds true for when a filter is fused into it.
fn build_grouping(plan: &Plan, input: BoxOperator, keep: Option<MaskFn>, ctx: &ExecContext) -> Result<BoxOperator> {
    Ok(match plan.op() {
        Op::GroupByWindow { key, window_size } => {
            Box::new(GroupByWindowOp::new(input, key.clone(), *window_size, plan.spec().arrow_schema()).keeping(keep))
        }
        Op::BucketBySequenceLength {
            length,
            bucket_boundaries,
            bucket_batch_sizes,
            padding_values,
            pad_to_bucket_boundary,
            drop_remainder,
        } => Box::new(
            BucketBySequenceLengthOp::new(
                input,
                length.clone(),
                bucket_boundaries.clone(),
                bucket_batch_sizes.clone(),
                padding_values.clone(),
                *pad_to_bucket_boundary,
                *drop_remainder,
                plan.spec(),
            )?
            .keeping(keep)
            .padding_on(padding_pool(plan, ctx)),
        ),
        other => unreachable!("{} is not a grouping", other.name()),
    })
}

/// Where a `bucket_by_sequence_length` pads its batches: on the pool's workers when it has
/// more than one, while the operator goes on grouping its input. That reads the input ahead
/// of what is asked for, by as much as the workers are slow, so not where how far the input
/// is read changes results (`Plan::depends_on_demand`): there it pads inline, on the
/// iterator's thread.
fn padding_pool(plan: &Plan, ctx: &ExecContext) -> Option<Arc<crate::pool::ThreadPool>> {
    (ctx.pool.size() > 1 && !plan.depends_on_demand()).then(|| ctx.pool.clone())
}

/// The largest buffer, in elements, the tuner may choose; the RAM budget bounds bytes.
pub(crate) const MAX_BUFFER: usize = 1 << 16;

fn build_all(plan: &Plan, ctx: &ExecContext) -> Result<Vec<BoxOperator>> {
    plan.inputs().iter().map(|p| build(p, ctx)).collect()
}
