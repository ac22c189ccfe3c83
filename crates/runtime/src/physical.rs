//! The physical plan as text: which operators [`build`](crate::build::build) creates for a
//! plan, and how they run.
//!
//! [`describe`] renders the operator tree in the style of the logical tree
//! (`flumen_ir::display::tree`): the output first, one node per line, inputs indented by two
//! spaces below their consumer, each line numbered `#n` and ending with ` -> <element spec>`.
//! Where the logical tree names plan operators (`map`, `filter`), this one names the physical
//! operator and its execution strategy:
//!
//! - functions: `columnar expressions` (evaluated over whole chunks, the plan's `vectorized`
//!   flag), `per-row fallback: expressions` (the same expressions re-run one element at a time),
//!   `per-row fallback: closure 'f'` (a per-element closure) and `per-batch closure 'f'`;
//! - `filter` runs as a `MapOp` whose function drops rows; it is shown as `FilterOp[...]`;
//! - `map_and_batch` runs as a map (a `ParallelMapOp` whose workers each produce one batch's
//!   rows, when parallel) feeding a `BatchOp`; it is
//!   shown as one `MapAndBatchOp[...] -> batch b` node;
//! - `shuffle_and_repeat` and `repeat` rebuild their input each epoch (a new operator tree per
//!   epoch, reshuffled with the epoch's seed);
//! - a map, filter, `map_and_batch` or `take_while` whose closure keeps state ends `; one
//!   element at a time (a closure that keeps state)`: it runs sequentially whatever calls
//!   the plan asks for, its input read one element per pull;
//! - a parallel `map` is a `ParallelMapOp` on the iterator's thread pool, with its number of
//!   calls (or "autotuned") and its order; `prefetch` is a `PrefetchOp` with a producer thread;
//! - sources are `ReaderOp[...]` with what is pushed into the reader (projected columns, a
//!   Parquet predicate), or `GeneratorOp[...]`; Avro files are a `ParallelReadOp[...]`, whose
//!   blocks are inflated and decoded on the pool, and a `batch` right above it says that it
//!   wraps the reader's runs, cut to whole batches;
//! - a `parse_example` map straight over an interleave ends `; records read in place from
//!   the interleave's readers`: the interleave hands it the records as views of its readers'
//!   windows instead of copying them into one buffer (also where the parse is fused into
//!   a stage, after `fused into #n`);
//! - a stage (maps and filters fused into one operator, and a parse below them,
//!   `crate::stage`) is its top's operator, ending `; stage of k operators`, with the fused
//!   nodes below it shown as `map[...] fused into #n` or `filter[...] fused into #n`.
//!
//! A sub-plan used by several consumers is printed once and referenced afterwards as
//! `(see #n, built again)`: [`build`](crate::build::build) lowers each use separately, so every
//! consumer pulls from operators of its own.

use std::collections::HashMap;

use crate::build::{is_parallel, parses_in_place, runs_one_at_a_time};
use crate::ops::source::is_avro_source;
use crate::stage::Stage;
use flumen_ir::{ClosureKind, ClosureRef, DatasetFn, FileFormat, MapFn, Op, Plan, Predicate, SourceDesc, Tunable};

/// The physical operator tree that [`build`](crate::build::build) creates for `plan` (with
/// stage fusion when `fuse`), one operator per line, output first, inputs indented by two
/// spaces, each line ending with ` -> <element spec>`. See the [module documentation](self)
/// for the notation.
pub fn describe(plan: &Plan, fuse: bool) -> String {
    let mut out = String::new();
    let mut seen = HashMap::new();
    render(plan, 0, fuse, &mut out, &mut seen);
    out
}

fn render(plan: &Plan, depth: usize, fuse: bool, out: &mut String, seen: &mut HashMap<usize, usize>) {
    let indent = "  ".repeat(depth);
    if let Some(n) = seen.get(&plan.node_id()) {
        out.push_str(&format!("{indent}(see #{n}, built again)\n"));
        return;
    }
    let n = seen.len();
    seen.insert(plan.node_id(), n);
    let Some(stage) = Stage::of(plan).filter(|_| fuse) else {
        out.push_str(&format!("{indent}#{n} {} -> {}\n", node_operator(plan), plan.spec()));
        for input in plan.inputs() {
            render(input, depth + 1, fuse, out, seen);
        }
        return;
    };
    out.push_str(&format!("{indent}#{n} {} -> {}\n", stage_top(&stage), plan.spec()));
    for (depth, member) in (depth + 1..).zip(&stage.members[1..]) {
        let m = seen.len();
        seen.insert(member.node_id(), m);
        let indent = "  ".repeat(depth);
        let (what, spec) = (fused_member(member.op()), member.spec());
        out.push_str(&format!("{indent}#{m} {what} fused into #{n}{} -> {spec}\n", in_place(member)));
    }
    render(stage.input, depth + stage.members.len(), fuse, out, seen);
}

/// The operator that runs `stage`: its top's, with the stage's parallelism and the number
/// of operators fused into its tasks.
pub fn stage_top(stage: &Stage) -> String {
    let mut top = stage.members[0].op().clone();
    if let Op::Map { num_parallel_calls, .. }
    | Op::Filter { num_parallel_calls, .. }
    | Op::MapAndBatch { num_parallel_calls, .. } = &mut top
    {
        *num_parallel_calls = stage.calls();
    }
    format!("{}; stage of {} operators", operator(&top), stage.members.len())
}

/// A stage member below its top: what it computes in the top's tasks.
pub fn fused_member(op: &Op) -> String {
    match op {
        Op::Map { func, vectorized, .. } => format!("map[{}]", map_strategy(func, *vectorized)),
        Op::Filter { predicate, vectorized, .. } => format!("filter[{}]", predicate_strategy(predicate, *vectorized)),
        other => other.name().to_string(),
    }
}

/// [`operator`] of `plan`'s node, saying where a `parse_example` reads the records of the
/// interleave below it in place (the interleave hands them on as views of its readers'
/// windows instead of copying them), and where a `batch` wraps an Avro reader's runs.
pub fn node_operator(plan: &Plan) -> String {
    let batches_runs = matches!(plan.op(), Op::Batch { .. }) && is_avro_source(plan.input());
    let runs = if batches_runs { "; wraps the reader's runs, cut to whole batches" } else { "" };
    let checked = match crate::ops::uniform_shapes::checks(plan) {
        Some((_, fields)) => {
            let names: Vec<&str> = fields.iter().map(|(_, n)| n.as_str()).collect();
            format!("; each batch's {} of one shape", names.join(", "))
        }
        None => String::new(),
    };
    format!("{}{}{runs}{checked}", operator(plan.op()), in_place(plan))
}

/// What ends the line of a `parse_example` map (an operator or a stage member) that reads
/// the records of the interleave below it in place; nothing for any other node.
pub fn in_place(plan: &Plan) -> &'static str {
    match parses_in_place(plan) {
        true => "; records read in place from the interleave's readers",
        false => "",
    }
}

/// The operator of a function whose closure keeps state: sequential, whatever calls the
/// plan asks for, and fed one element at a time.
fn one_at_a_time(op: &Op) -> String {
    let mut sequential = op.clone();
    if let Op::Map { num_parallel_calls, .. }
    | Op::Filter { num_parallel_calls, .. }
    | Op::MapAndBatch { num_parallel_calls, .. } = &mut sequential
    {
        *num_parallel_calls = Tunable::Default;
    }
    format!("{}; one element at a time (a closure that keeps state)", as_written(&sequential))
}

/// The physical operator of one plan operator, with its arguments and execution strategy
/// (one line, without the element spec), e.g. `MapOp[columnar expressions]` or
/// `BatchOp(32, drop_remainder)`.
pub fn operator(op: &Op) -> String {
    if runs_one_at_a_time(op) {
        return one_at_a_time(op);
    }
    as_written(op)
}

/// [`operator`] of an operator that runs as the plan describes it.
fn as_written(op: &Op) -> String {
    match op {
        Op::Source(desc) => source(desc),
        Op::Map { func, vectorized, num_parallel_calls, deterministic } if is_parallel(num_parallel_calls) => {
            format!("ParallelMapOp[{}]{}", map_strategy(func, *vectorized), calls(num_parallel_calls, *deterministic))
        }
        Op::Map { func, vectorized, .. } => format!("MapOp[{}]", map_strategy(func, *vectorized)),
        Op::Filter { predicate, vectorized, num_parallel_calls, deterministic } if is_parallel(num_parallel_calls) => {
            let strategy = predicate_strategy(predicate, *vectorized);
            format!("ParallelFilterOp[{strategy}]{}", calls(num_parallel_calls, *deterministic))
        }
        Op::Filter { predicate, vectorized, .. } => format!("FilterOp[{}]", predicate_strategy(predicate, *vectorized)),
        Op::MapAndBatch { func, batch_size, drop_remainder, vectorized, num_parallel_calls, deterministic } => format!(
            "MapAndBatchOp[{}] -> batch {batch_size}{}{}",
            map_strategy(func, *vectorized),
            drop(*drop_remainder),
            calls(num_parallel_calls, *deterministic)
        ),
        Op::ShuffleAndRepeat { buffer_size, seed, reshuffle_each_iteration, count } => format!(
            "ShuffleAndRepeatOp({}, count {}) rebuilds its input each epoch",
            shuffle(*buffer_size, *seed, *reshuffle_each_iteration),
            repetitions(*count)
        ),
        // Expression predicates of take_while always run over whole chunks.
        Op::TakeWhile { predicate } => format!("TakeWhileOp[{}]", predicate_strategy(predicate, true)),
        Op::FlatMap { func } => format!("FlatMapOp[{}]", dataset_strategy(func)),
        Op::Interleave { func, cycle_length, block_length, num_parallel_calls, deterministic } => {
            let cycle = match cycle_length {
                Tunable::Fixed(n) => n.to_string(),
                Tunable::Default | Tunable::Autotune => "number of cores".to_string(),
            };
            let reads = if is_parallel(num_parallel_calls) {
                format!(", each input read ahead by its own producer{}", calls(num_parallel_calls, *deterministic))
            } else {
                String::new()
            };
            format!("InterleaveOp[{}; cycle {cycle}, block {block_length}{reads}]", dataset_strategy(func))
        }
        Op::Batch { batch_size, drop_remainder, num_parallel_calls, deterministic }
            if is_parallel(num_parallel_calls) =>
        {
            format!(
                "BatchOp({batch_size}{}) over workers gathering whole batches{}",
                drop(*drop_remainder),
                calls(num_parallel_calls, *deterministic)
            )
        }
        Op::Batch { batch_size, drop_remainder, .. } => format!("BatchOp({batch_size}{})", drop(*drop_remainder)),
        Op::RaggedBatch { batch_size, drop_remainder } => {
            format!("BatchOp({batch_size}{}) as ragged", drop(*drop_remainder))
        }
        Op::PaddedBatch { batch_size, drop_remainder, .. } => {
            format!("PaddedBatchOp({batch_size}{})", drop(*drop_remainder))
        }
        Op::Unbatch => "UnbatchOp".to_string(),
        Op::Rebatch { batch_sizes, drop_remainder, .. } if !batch_sizes.is_empty() => {
            format!("RebatchOp(sizes {batch_sizes:?}{})", drop(*drop_remainder))
        }
        Op::Rebatch { batch_size, drop_remainder, .. } => format!("RebatchOp({batch_size}{})", drop(*drop_remainder)),
        Op::Shuffle { buffer_size, seed, reshuffle_each_iteration } => {
            format!("ShuffleOp({})", shuffle(*buffer_size, *seed, *reshuffle_each_iteration))
        }
        Op::Repeat { count } => format!("RepeatOp({}) rebuilds its input each epoch", repetitions(*count)),
        Op::Take { count } => format!("TakeOp({})", all_or(*count)),
        Op::Skip { count } => format!("SkipOp({})", all_or(*count)),
        Op::Shard { num_shards, index } => format!("ShardOp({num_shards}, index {index})"),
        Op::Enumerate { start, field } => format!("EnumerateOp({field} from {start})"),
        Op::Zip => "ZipOp".to_string(),
        Op::Concatenate => "ConcatenateOp".to_string(),
        Op::Prefetch { buffer_size } => match buffer_size {
            Tunable::Fixed(n) => format!("PrefetchOp(buffer {n}) on a producer thread"),
            Tunable::Default | Tunable::Autotune => "PrefetchOp(buffer autotuned) on a producer thread".to_string(),
        },
        Op::Cache { path: Some(path), .. } => {
            format!("FileCacheOp[{path:?}] (writes the first complete pass, reads it after)")
        }
        Op::Cache { path: None, .. } => {
            "CacheOp[memory] (records the first complete pass, replays it after)".to_string()
        }
        Op::Snapshot { path, options } => {
            format!("SnapshotOp[{path:?}, {} shards] (read, write or pass through, decided each pass)", options.shards)
        }
        Op::Reduce { .. } => "ReduceOp[per-row expressions]".to_string(),
        Op::Scan { function: Some(_), .. } => "ScanOp[per-row closure]".to_string(),
        Op::Scan { .. } => "ScanOp[per-row expressions]".to_string(),
        Op::Window { size, shift, stride, drop_remainder } => {
            format!("WindowOp(size {size}, shift {shift}, stride {stride}{})", drop(*drop_remainder))
        }
        Op::IgnoreErrors => "IgnoreErrorsOp".to_string(),
        Op::Unique => "UniqueOp(remembers every distinct element)".to_string(),
        Op::ElementPositions { offset, stride } => {
            format!("(passes elements; the map above keys its draws at {offset} + {stride} * position)")
        }
        Op::SampleFromDatasets { weights, seed, stop_on_empty_dataset } => format!(
            "SampleOp(weights {weights:?}, seed {}{})",
            seed_text(*seed),
            if *stop_on_empty_dataset { ", stop on empty dataset" } else { "" }
        ),
        Op::ChooseFromDatasets { stop_on_empty_dataset } => format!(
            "ChooseOp(by the first input{})",
            if *stop_on_empty_dataset { ", stop on empty dataset" } else { "" }
        ),
        Op::GroupByWindow { key, window_size } => format!("GroupByWindowOp(key {key}, window {window_size})"),
        Op::BucketBySequenceLength {
            length,
            bucket_boundaries,
            bucket_batch_sizes,
            pad_to_bucket_boundary,
            drop_remainder,
            ..
        } => format!(
            "BucketBySequenceLengthOp(length {length}, boundaries {bucket_boundaries:?}, batch sizes \
             {bucket_batch_sizes:?}{}{})",
            if *pad_to_bucket_boundary { ", pad to bucket boundary" } else { "" },
            drop(*drop_remainder)
        ),
    }
}

/// `, N parallel calls, in order` and the like; empty when sequential.
fn calls(calls: &Tunable, deterministic: Option<bool>) -> String {
    let n = match calls {
        Tunable::Fixed(n) if *n >= 2 => n.to_string(),
        Tunable::Autotune => "autotuned".to_string(),
        _ => return String::new(),
    };
    let order = match deterministic {
        Some(false) => "as finished",
        Some(true) => "in order",
        None => "order per options",
    };
    format!(", {n} parallel calls, {order}")
}

/// The reader of a source, with what is pushed into it.
fn source(desc: &SourceDesc) -> String {
    match desc {
        SourceDesc::Range { start, stop, step } => format!("ReaderOp[range: {start}, {stop}, step {step}]"),
        SourceDesc::InMemory { data, .. } => format!(
            "ReaderOp[in_memory: {} rows in {} chunks]",
            data.batches.iter().map(|b| b.num_rows()).sum::<usize>(),
            data.batches.len()
        ),
        SourceDesc::Generator { name, stateful: false, .. } => format!("GeneratorOp['{name}']"),
        SourceDesc::Generator { name, stateful: true, .. } => format!("GeneratorOp['{name}', stateful]"),
        SourceDesc::ListFiles { pattern, files, shuffle, seed } => format!(
            "ReaderOp[list_files {pattern:?}: {} files{}]",
            files.len(),
            if *shuffle { format!(", shuffled each iteration (seed {})", seed_text(*seed)) } else { String::new() }
        ),
        SourceDesc::Files { files, format: format @ FileFormat::Avro(avro) } => {
            let pushed = format.pushdown();
            let pushed = if pushed.is_empty() { pushed } else { format!(", {pushed}") };
            let order = match avro.shuffle_blocks {
                Some(order) => format!("; blocks in a random order each iteration (seed {})", seed_text(order.seed)),
                None => String::new(),
            };
            format!(
                "ParallelReadOp[avro: {} files{pushed}{order}; blocks inflated and decoded on the pool]",
                files.len()
            )
        }
        SourceDesc::Files { files, format } | SourceDesc::Splits { files, format } => {
            let pushed = format.pushdown();
            format!(
                "ReaderOp[{}: {} files{}{pushed}]",
                desc.name(),
                files.len(),
                if pushed.is_empty() { "" } else { ", " }
            )
        }
    }
}

/// How a map function runs.
fn map_strategy(func: &MapFn, vectorized: bool) -> String {
    match func {
        MapFn::Exprs { outputs, .. } => {
            let mut how = if vectorized { "columnar expressions" } else { "per-row fallback: expressions" }.to_string();
            if func.draws_random() {
                how.push_str("; element keys for random draws");
            }
            if outputs.iter().any(|o| flumen_udf::image::fused::has_one_pass(&o.expr)) {
                how.push_str("; crop-mirror-normalize in one pass");
            }
            how
        }
        MapFn::ParseExample { field, .. } if vectorized => format!("columnar parse_example of '{field}'"),
        MapFn::ParseExample { field, .. } => format!("per-row fallback: parse_example of '{field}'"),
        MapFn::Closure { closure, .. } => closure_strategy(closure),
    }
}

/// How a predicate runs.
fn predicate_strategy(predicate: &Predicate, vectorized: bool) -> String {
    match predicate {
        Predicate::Expr { .. } if vectorized => "columnar expression".to_string(),
        Predicate::Expr { .. } => "per-row fallback: expression".to_string(),
        Predicate::Closure { closure } => closure_strategy(closure),
    }
}

/// How a closure is called: once per element or once per chunk.
fn closure_strategy(closure: &ClosureRef) -> String {
    match closure.kind {
        ClosureKind::PerElement => format!("per-row fallback: closure '{}'", closure.name),
        ClosureKind::PerBatch => format!("per-batch closure '{}'", closure.name),
        ClosureKind::PerBatchRowwise => format!("per-batch row-wise closure '{}'", closure.name),
    }
}

/// What `flat_map` and `interleave` build for each input element.
fn dataset_strategy(func: &DatasetFn) -> String {
    let pushed = |format: &flumen_ir::FileFormat| {
        let p = format.pushdown();
        if p.is_empty() {
            p
        } else {
            format!(", {p}")
        }
    };
    match func {
        DatasetFn::ReadFile { field, format } => {
            format!("per element: ReaderOp[{} file named by '{field}'{}]", format.name(), pushed(format))
        }
        DatasetFn::ReadSplit { format } => {
            format!("per element: ReaderOp[{} split{}]", format.name(), pushed(format))
        }
        DatasetFn::FromTensorSlices => "per element: UnbatchOp of the element".to_string(),
        DatasetFn::Closure { closure, .. } => format!("per element: the plan closure '{}' returns", closure.name),
    }
}

fn drop(drop_remainder: bool) -> &'static str {
    if drop_remainder {
        ", drop_remainder"
    } else {
        ""
    }
}

fn seed_text(seed: Option<u64>) -> String {
    seed.map_or_else(|| "random".to_string(), |s| s.to_string())
}

fn shuffle(buffer_size: u64, seed: Option<u64>, reshuffle: bool) -> String {
    format!(
        "buffer {buffer_size}, seed {}{}",
        seed_text(seed),
        if reshuffle { ", reshuffle each iteration" } else { "" }
    )
}

fn repetitions(count: i64) -> String {
    if count == -1 {
        "forever".to_string()
    } else {
        count.to_string()
    }
}

fn all_or(count: i64) -> String {
    if count == -1 {
        "all".to_string()
    } else {
        count.to_string()
    }
}

#[cfg(test)]
mod tests {
    use flumen_ir::{BinaryOp, DType, ElementSpec, Expr, FieldSpec, FileFormat, NamedExpr, ParquetFormat};

    use super::*;
    use flumen_ir::build::int;

    fn range(stop: i64) -> Plan {
        Plan::new(Op::Source(SourceDesc::Range { start: 0, stop, step: 1 }), vec![]).unwrap()
    }

    /// `map(name := value + 1)`, keeping the input or not.
    fn map(input: &Plan, name: &str, keep_input: bool, vectorized: bool) -> Plan {
        let expr = Expr::binary(BinaryOp::Add, Expr::col("value"), int(1));
        let func = MapFn::Exprs { outputs: vec![NamedExpr { name: name.into(), expr }], keep_input };
        let op = Op::Map { func, num_parallel_calls: Tunable::Default, deterministic: None, vectorized };
        Plan::new(op, vec![input.clone()]).unwrap()
    }

    fn closure(name: &str, kind: ClosureKind) -> ClosureRef {
        ClosureRef { name: name.into(), kind, deterministic: true, stateless: true, exclusive: false, anonymous: false }
    }

    fn closure_map(input: &Plan, kind: ClosureKind) -> Plan {
        let output = ElementSpec::new(vec![FieldSpec::scalar("value", DType::Float32)]).unwrap();
        let func = MapFn::Closure { closure: closure("normalize", kind), output };
        let op = Op::Map { func, num_parallel_calls: Tunable::Default, deterministic: None, vectorized: false };
        Plan::new(op, vec![input.clone()]).unwrap()
    }

    fn filter(input: &Plan, predicate: Predicate, vectorized: bool) -> Plan {
        let op = Op::Filter { predicate, vectorized, num_parallel_calls: Tunable::Default, deterministic: None };
        Plan::new(op, vec![input.clone()]).unwrap()
    }

    #[test]
    fn vectorized_and_per_row_maps() {
        let columnar = map(&range(10), "y", true, true);
        assert_eq!(
            describe(&columnar, true),
            "#0 MapOp[columnar expressions] -> {value: int64[], y: int64[]}\n\
             \x20 #1 ReaderOp[range: 0, 10, step 1] -> {value: int64[]}\n"
        );
        let per_row = map(&range(10), "y", false, false);
        assert_eq!(
            describe(&per_row, true),
            "#0 MapOp[per-row fallback: expressions] -> {y: int64[]}\n\
             \x20 #1 ReaderOp[range: 0, 10, step 1] -> {value: int64[]}\n"
        );
        let positive = Predicate::Expr { expr: Expr::binary(BinaryOp::Gt, Expr::col("value"), int(0)) };
        assert_eq!(operator(filter(&range(3), positive.clone(), true).op()), "FilterOp[columnar expression]");
        assert_eq!(operator(filter(&range(3), positive, false).op()), "FilterOp[per-row fallback: expression]");
    }

    #[test]
    fn closure_maps_and_filters() {
        assert_eq!(
            describe(&closure_map(&range(4), ClosureKind::PerElement), true),
            "#0 MapOp[per-row fallback: closure 'normalize'] -> {value: float32[]}\n\
             \x20 #1 ReaderOp[range: 0, 4, step 1] -> {value: int64[]}\n"
        );
        assert_eq!(
            operator(closure_map(&range(4), ClosureKind::PerBatch).op()),
            "MapOp[per-batch closure 'normalize']"
        );
        let keep = Predicate::Closure { closure: closure("keep", ClosureKind::PerBatch) };
        assert_eq!(operator(filter(&range(4), keep, false).op()), "FilterOp[per-batch closure 'keep']");
        let keep = Predicate::Closure { closure: closure("keep", ClosureKind::PerElement) };
        assert_eq!(operator(filter(&range(4), keep, true).op()), "FilterOp[per-row fallback: closure 'keep']");
    }

    #[test]
    fn shared_sub_plan_is_printed_once() {
        let source = range(5);
        let left = map(&source, "x", false, true);
        let right = map(&source, "y", false, true);
        let zip = Plan::new(Op::Zip, vec![left, right]).unwrap();
        assert_eq!(
            describe(&zip, true),
            "#0 ZipOp -> {x: int64[], y: int64[]}\n\
             \x20 #1 MapOp[columnar expressions] -> {x: int64[]}\n\
             \x20   #2 ReaderOp[range: 0, 5, step 1] -> {value: int64[]}\n\
             \x20 #3 MapOp[columnar expressions] -> {y: int64[]}\n\
             \x20   (see #2, built again)\n"
        );
        let twice = Plan::new(Op::Concatenate, vec![source.clone(), source]).unwrap();
        assert_eq!(
            describe(&twice, true),
            "#0 ConcatenateOp -> {value: int64[]}\n\
             \x20 #1 ReaderOp[range: 0, 5, step 1] -> {value: int64[]}\n\
             \x20 (see #1, built again)\n"
        );
    }

    #[test]
    fn parquet_source_with_pushdown() {
        let schema = ElementSpec::new(vec![
            FieldSpec::scalar("a", DType::Int64),
            FieldSpec::scalar("b", DType::Utf8),
            FieldSpec::scalar("x", DType::Float32),
        ])
        .unwrap();
        let format = FileFormat::Parquet(ParquetFormat {
            schema,
            columns: Some(vec!["a".into(), "b".into()]),
            predicate: Some(Expr::binary(BinaryOp::Gt, Expr::col("x"), int(1))),
        });
        let files = (0..4).map(|i| format!("part-{i}.parquet")).collect();
        let source = Plan::new(Op::Source(SourceDesc::Files { files, format }), vec![]).unwrap();
        let batch = Plan::new(
            Op::Batch {
                batch_size: 1024,
                drop_remainder: false,
                num_parallel_calls: Tunable::Default,
                deterministic: None,
            },
            vec![source],
        )
        .unwrap();
        let prefetch = Plan::new(Op::Prefetch { buffer_size: Tunable::Autotune }, vec![batch]).unwrap();
        assert_eq!(
            describe(&prefetch, true),
            "#0 PrefetchOp(buffer autotuned) on a producer thread -> {a: int64[?], b: string[?]}\n\
             \x20 #1 BatchOp(1024) -> {a: int64[?], b: string[?]}\n\
             \x20   #2 ReaderOp[parquet: 4 files, columns [a, b], where (x > 1)] -> {a: int64[], b: string[]}\n"
        );
    }

    #[test]
    fn fused_and_epoch_operators() {
        let expr = Expr::binary(BinaryOp::Mul, Expr::col("value"), int(2));
        let func = MapFn::Exprs { outputs: vec![NamedExpr { name: "value".into(), expr }], keep_input: true };
        let shuffled = Plan::new(
            Op::ShuffleAndRepeat { buffer_size: 100, seed: Some(7), reshuffle_each_iteration: true, count: -1 },
            vec![range(1000)],
        )
        .unwrap();
        let mapped = Plan::new(
            Op::MapAndBatch {
                func,
                batch_size: 256,
                drop_remainder: true,
                num_parallel_calls: Tunable::Autotune,
                deterministic: None,
                vectorized: true,
            },
            vec![shuffled],
        )
        .unwrap();
        let repeated = Plan::new(Op::Repeat { count: 2 }, vec![mapped]).unwrap();
        assert_eq!(
            describe(&repeated, true),
            "#0 RepeatOp(2) rebuilds its input each epoch -> {value: int64[256]}\n\
             \x20 #1 MapAndBatchOp[columnar expressions] -> batch 256, drop_remainder, autotuned parallel calls, order \
             per options -> {value: int64[256]}\n\
             \x20   #2 ShuffleAndRepeatOp(buffer 100, seed 7, reshuffle each iteration, count forever) rebuilds \
             its input each epoch -> {value: int64[]}\n\
             \x20     #3 ReaderOp[range: 0, 1000, step 1] -> {value: int64[]}\n"
        );
    }
}
