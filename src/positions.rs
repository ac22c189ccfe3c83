//! Element positions for random draws. A map whose functions draw random numbers keys each
//! element's draws by its position (`flumen_udf::image::random`). Over a `shard` or `skip`
//! that position would be the one in the sharded stream, so `shard(n, i).map(f)` would draw
//! other crops than `map(f).shard(n, i)`. The map is given an `Op::ElementPositions` below
//! it instead, saying where its input's elements sit in the dataset below the shards and
//! skips, and draws by that position.

use flumen_ir::{MapFn, Op, Plan, Result};

/// Where element `p` of `plan`'s output sits in the dataset below the `shard`s, `skip`s,
/// `take`s and `prefetch`es at its top: at `offset + stride * p`.
fn positions(plan: &Plan) -> (u64, u64) {
    match plan.op() {
        Op::Shard { num_shards, index } => {
            let (offset, stride) = positions(plan.input());
            (offset.wrapping_add(stride.wrapping_mul(*index)), stride.wrapping_mul(*num_shards))
        }
        Op::Skip { count } if *count >= 0 => {
            let (offset, stride) = positions(plan.input());
            (offset.wrapping_add(stride.wrapping_mul(*count as u64)), stride)
        }
        Op::Take { .. } | Op::Prefetch { .. } => positions(plan.input()),
        _ => (0, 1),
    }
}

/// The input for a map of `func` over `input`: `input` itself, or, when `func` draws random
/// numbers and `input`'s elements are not positions 0, 1, 2, ... of the dataset below its
/// shards and skips, `input` under an `element_positions` saying which they are.
pub(crate) fn positioned(input: &Plan, func: &MapFn) -> Result<Plan> {
    match positions(input) {
        (offset, stride) if func.draws_random() && (offset, stride) != (0, 1) => {
            Plan::new(Op::ElementPositions { offset, stride }, vec![input.clone()])
        }
        _ => Ok(input.clone()),
    }
}
