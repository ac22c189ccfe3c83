//! Lowering a typed plan to physical operators.
//!
//! Plans run as written (the optimizer, when present, rewrites them before this step).
//! Each node becomes one operator; `repeat` keeps its input plan to rebuild it per epoch.

use flumen_ir::{Op, Plan, Result, Tunable};

use crate::context::ExecContext;
use crate::operator::BoxOperator;
use crate::ops::batch::BatchOp;
use crate::ops::bucket::BucketBySequenceLengthOp;
use crate::ops::cache::CacheOp;
use crate::ops::concatenate::ConcatenateOp;
use crate::ops::count::{EnumerateOp, ShardOp, SkipOp, TakeOp, TakeWhileOp};
use crate::ops::file_cache::FileCacheOp;
use crate::ops::fold::{ReduceOp, ScanOp};
use crate::ops::function::{filter_fn, map_fn, mask_fn};
use crate::ops::group_by_window::GroupByWindowOp;
use crate::ops::ignore_errors::IgnoreErrorsOp;
use crate::ops::map::MapOp;
use crate::ops::nested::{ElementDatasets, FlatMapOp, InterleaveOp};
use crate::ops::padded_batch::PaddedBatchOp;
use crate::ops::repeat::RepeatOp;
use crate::ops::sample_from_datasets::SampleOp;
use crate::ops::shuffle::ShuffleOp;
use crate::ops::snapshot::SnapshotOp;
use crate::ops::source::build_source;
use crate::ops::unbatch::{RebatchOp, UnbatchOp};
use crate::ops::window::WindowOp;
use crate::ops::zip::ZipOp;

/// The physical operator tree of `plan` for one iterator.
pub fn build(plan: &Plan, ctx: &ExecContext) -> Result<BoxOperator> {
    let schema = plan.spec().arrow_schema();
    let input = || build(plan.input(), ctx);
    let chunk_rows = ctx.options.chunk_rows;
    Ok(match plan.op() {
        Op::Source(desc) => build_source(plan, desc, schema, ctx)?,
        Op::Map { func, vectorized, .. } => {
            Box::new(MapOp::new(input()?, map_fn(func, schema, &ctx.registry, *vectorized)?))
        }
        Op::Filter { predicate, vectorized } => {
            Box::new(MapOp::new(input()?, filter_fn(predicate, &ctx.registry, *vectorized)?))
        }
        // Runs as map then batch until the parallel runtime fills whole batches per worker.
        Op::MapAndBatch { func, batch_size, drop_remainder, vectorized, .. } => {
            let mapped_spec = plan.spec().unbatched("map_and_batch")?;
            let map = MapOp::new(input()?, map_fn(func, mapped_spec.arrow_schema(), &ctx.registry, *vectorized)?);
            Box::new(BatchOp::new(Box::new(map), *batch_size, *drop_remainder, schema))
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
        Op::FlatMap { func } => Box::new(FlatMapOp::new(input()?, ElementDatasets::new(func, ctx, schema)?)),
        Op::Interleave { func, cycle_length, block_length, .. } => {
            let cycle = match cycle_length {
                Tunable::Fixed(n) => *n as usize,
                Tunable::Default | Tunable::Autotune => ctx.options.cores,
            };
            let datasets = ElementDatasets::new(func, ctx, schema)?;
            Box::new(InterleaveOp::new(input()?, datasets, cycle, *block_length, chunk_rows))
        }
        Op::Batch { batch_size, drop_remainder, .. } => {
            Box::new(BatchOp::new(input()?, *batch_size, *drop_remainder, schema))
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
        Op::Rebatch { batch_size, drop_remainder } => {
            Box::new(RebatchOp::new(input()?, *batch_size, *drop_remainder, schema)?)
        }
        Op::Shuffle { buffer_size, seed, reshuffle_each_iteration } => {
            let seed = ctx.seed(plan, *seed, *reshuffle_each_iteration);
            Box::new(ShuffleOp::new(input()?, *buffer_size, seed, chunk_rows))
        }
        Op::Repeat { count } => Box::new(RepeatOp::new(plan.input().clone(), ctx.clone(), *count)),
        Op::Take { count } => Box::new(TakeOp::new(input()?, *count)),
        Op::Skip { count } => Box::new(SkipOp::new(input()?, *count)),
        Op::Shard { num_shards, index } => Box::new(ShardOp::new(input()?, *num_shards, *index)),
        Op::Enumerate { start, .. } => Box::new(EnumerateOp::new(input()?, *start, schema)),
        Op::Zip => Box::new(ZipOp::new(build_all(plan, ctx)?, schema)),
        Op::Concatenate => Box::new(ConcatenateOp::new(build_all(plan, ctx)?, schema)),
        Op::Prefetch { .. } => input()?,
        Op::Cache { path: Some(path) } => Box::new(FileCacheOp::new(plan, path, ctx)?),
        Op::Snapshot { path, options } => Box::new(SnapshotOp::new(plan, path, options, ctx)?),
        Op::Cache { path: None } => Box::new(CacheOp::new(plan, ctx)?),
        Op::Reduce { initial, update } => Box::new(ReduceOp::new(input()?, initial, update)?),
        Op::Scan { initial, update, output } => Box::new(ScanOp::new(input()?, initial, update, output, schema)?),
        Op::Window { size, shift, stride, drop_remainder } => {
            Box::new(WindowOp::new(input()?, *size, *shift, *stride, *drop_remainder, schema))
        }
        Op::IgnoreErrors => Box::new(IgnoreErrorsOp::new(input()?)),
        Op::SampleFromDatasets { weights, seed, stop_on_empty_dataset } => Box::new(SampleOp::new(
            build_all(plan, ctx)?,
            weights.clone(),
            ctx.seed(plan, *seed, false),
            *stop_on_empty_dataset,
            chunk_rows,
            schema,
        )),
        Op::GroupByWindow { key, window_size } => {
            Box::new(GroupByWindowOp::new(input()?, key.clone(), *window_size, schema))
        }
        Op::BucketBySequenceLength {
            length,
            bucket_boundaries,
            bucket_batch_sizes,
            padding_values,
            pad_to_bucket_boundary,
            drop_remainder,
        } => Box::new(BucketBySequenceLengthOp::new(
            input()?,
            length.clone(),
            bucket_boundaries.clone(),
            bucket_batch_sizes.clone(),
            padding_values.clone(),
            *pad_to_bucket_boundary,
            *drop_remainder,
            plan.spec(),
        )?),
    })
}

fn build_all(plan: &Plan, ctx: &ExecContext) -> Result<Vec<BoxOperator>> {
    plan.inputs().iter().map(|p| build(p, ctx)).collect()
}
