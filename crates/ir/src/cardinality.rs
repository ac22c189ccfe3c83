//! Static cardinality: how many elements a plan yields, when that is known without running.

use crate::op::Op;
use crate::plan::Plan;

/// An infinite dataset.
pub const INFINITE: u64 = u64::MAX;

/// The number of elements of `plan` (`Some(INFINITE)` for infinite, `None` for unknown).
pub fn cardinality(plan: &Plan) -> Option<u64> {
    let input = || cardinality(plan.input());
    match plan.op() {
        Op::Source(s) => s.cardinality(),
        Op::Map { .. }
        | Op::Prefetch { .. }
        | Op::ElementPositions { .. }
        | Op::Enumerate { .. }
        | Op::Cache { .. }
        | Op::Snapshot { .. }
        | Op::Scan { .. } => input(),
        Op::Shuffle { .. } => input(),
        Op::Reduce { .. } => Some(1),
        Op::Batch { batch_size, drop_remainder, .. }
        | Op::RaggedBatch { batch_size, drop_remainder }
        | Op::PaddedBatch { batch_size, drop_remainder, .. }
        | Op::MapAndBatch { batch_size, drop_remainder, .. } => input().map(|n| {
            if n == INFINITE {
                INFINITE
            } else if *drop_remainder {
                n / batch_size
            } else {
                n.div_ceil(*batch_size)
            }
        }),
        Op::Repeat { count } | Op::ShuffleAndRepeat { count, .. } => input().map(|n| match (*count, n) {
            (_, 0) => 0,
            (-1, _) | (_, INFINITE) => INFINITE,
            (c, n) => n.saturating_mul(c as u64),
        }),
        Op::Take { count } => match (*count, input()) {
            (-1, n) => n,
            (c, Some(n)) => Some(n.min(c as u64)),
            (c, None) => (c == 0).then_some(0),
        },
        Op::Skip { count } => match (*count, input()) {
            (-1, Some(INFINITE)) => None,
            (-1, _) => Some(0),
            (_, Some(INFINITE)) => Some(INFINITE),
            (c, Some(n)) => Some(n.saturating_sub(c as u64)),
            (_, None) => None,
        },
        Op::Shard { num_shards, index } => {
            input().map(|n| if n == INFINITE { INFINITE } else { n / num_shards + u64::from(n % num_shards > *index) })
        }
        Op::Zip => plan.inputs().iter().map(cardinality).try_fold(INFINITE, |acc, c| c.map(|c| acc.min(c))),
        Op::Concatenate => {
            let (a, b) = (cardinality(&plan.inputs()[0])?, cardinality(&plan.inputs()[1])?);
            Some(a.saturating_add(b))
        }
        Op::Filter { .. }
        | Op::FlatMap { .. }
        | Op::Interleave { .. }
        | Op::Unbatch
        | Op::Rebatch { .. }
        | Op::Window { .. }
        | Op::TakeWhile { .. }
        | Op::IgnoreErrors
        | Op::Unique
        | Op::SampleFromDatasets { .. }
        | Op::ChooseFromDatasets { .. }
        | Op::GroupByWindow { .. }
        | Op::BucketBySequenceLength { .. } => match input() {
            // As tf.data counts them: these go on as long as an infinite input does.
            Some(INFINITE)
                if matches!(
                    plan.op(),
                    Op::Unbatch
                        | Op::Rebatch { .. }
                        | Op::Window { .. }
                        | Op::GroupByWindow { .. }
                        | Op::BucketBySequenceLength { .. }
                ) =>
            {
                Some(INFINITE)
            }
            _ => None,
        },
    }
}
