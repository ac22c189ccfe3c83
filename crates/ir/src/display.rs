//! Human-readable rendering of operators and plans (the text `explain` prints).

use crate::function::{DatasetFn, MapFn, Predicate};
use crate::op::{Op, Tunable};
use crate::plan::Plan;
use crate::source::{FileFormat, SourceDesc};

fn tunable(t: &Tunable) -> String {
    match t {
        Tunable::Default => "default".into(),
        Tunable::Fixed(n) => n.to_string(),
        Tunable::Autotune => "autotune".into(),
    }
}

/// The prefix of a function run over whole chunks (pfor).
fn pfor(vectorized: bool) -> &'static str {
    if vectorized {
        "pfor "
    } else {
        ""
    }
}

fn parallel(t: &Tunable) -> String {
    if *t == Tunable::Default {
        String::new()
    } else {
        format!("; parallel {}", tunable(t))
    }
}

fn map_fn(f: &MapFn) -> String {
    match f {
        MapFn::Exprs { outputs, keep_input } => {
            let outs: Vec<String> = outputs.iter().map(|o| format!("{} := {}", o.name, o.expr)).collect();
            format!("{}{}", outs.join(", "), if *keep_input { "" } else { " (only these)" })
        }
        MapFn::Closure { closure, .. } => format!("closure '{}' ({:?})", closure.name, closure.kind),
        MapFn::ParseExample { field, features } => parse_example(field, features),
    }
}

/// How explain shows a `parse_example` map: `parse_example(record -> features: float32[64], ...)`.
fn parse_example(field: &str, features: &[crate::example::FeatureSpec]) -> String {
    let features: Vec<String> = features.iter().map(|f| f.field().to_string()).collect();
    format!("parse_example({field} -> {})", features.join(", "))
}

fn predicate(p: &Predicate) -> String {
    match p {
        Predicate::Expr { expr } => expr.to_string(),
        Predicate::Closure { closure } => format!("closure '{}'", closure.name),
    }
}

fn pushed(format: &FileFormat) -> String {
    let p = format.pushdown();
    if p.is_empty() {
        p
    } else {
        format!(" ({p})")
    }
}

fn dataset_fn(f: &DatasetFn) -> String {
    match f {
        DatasetFn::ReadFile { field, format } => {
            format!("read {} files named by '{field}'{}", format.name(), pushed(format))
        }
        DatasetFn::ReadSplit { format } => format!("read {} splits{}", format.name(), pushed(format)),
        DatasetFn::FromTensorSlices => "from_tensor_slices".into(),
        DatasetFn::Closure { closure, .. } => format!("closure '{}'", closure.name),
    }
}

/// One line describing an operator and its arguments.
pub fn describe(op: &Op) -> String {
    let args = match op {
        Op::Source(s) => match s {
            SourceDesc::Range { start, stop, step } => format!("{start}, {stop}, step {step}"),
            SourceDesc::InMemory { data, .. } => {
                format!(
                    "{} rows in {} chunks",
                    data.batches.iter().map(|b| b.num_rows()).sum::<usize>(),
                    data.batches.len()
                )
            }
            SourceDesc::Generator { name, .. } => format!("'{name}'"),
            SourceDesc::ListFiles { pattern, files, shuffle, seed } => format!(
                "{pattern:?}: {} files{}",
                files.len(),
                if *shuffle {
                    format!(", shuffled (seed {})", seed.map_or("random".to_string(), |s| s.to_string()))
                } else {
                    String::new()
                }
            ),
            SourceDesc::Files { files, format } | SourceDesc::Splits { files, format } => {
                let pushed = format.pushdown();
                format!("{} files{}{pushed}", files.len(), if pushed.is_empty() { "" } else { ", " })
            }
        },
        Op::Map { func, num_parallel_calls, vectorized, .. } => {
            format!("{}{}{}", pfor(*vectorized), map_fn(func), parallel(num_parallel_calls))
        }
        Op::MapAndBatch { func, batch_size, drop_remainder, num_parallel_calls, vectorized, .. } => format!(
            "{}{}; batch {batch_size}{}{}",
            pfor(*vectorized),
            map_fn(func),
            if *drop_remainder { ", drop_remainder" } else { "" },
            parallel(num_parallel_calls)
        ),
        Op::Filter { predicate: p, vectorized, num_parallel_calls, .. } => {
            format!("{}{}{}", pfor(*vectorized), predicate(p), parallel(num_parallel_calls))
        }
        Op::TakeWhile { predicate: p } => predicate(p),
        Op::FlatMap { func } => dataset_fn(func),
        Op::Interleave { func, cycle_length, block_length, .. } => {
            format!("{}; cycle {}, block {block_length}", dataset_fn(func), tunable(cycle_length))
        }
        Op::Rebatch { batch_sizes, drop_remainder, .. } if !batch_sizes.is_empty() => {
            format!("sizes {batch_sizes:?}{}", if *drop_remainder { ", drop_remainder" } else { "" })
        }
        Op::Batch { batch_size, drop_remainder, .. }
        | Op::RaggedBatch { batch_size, drop_remainder }
        | Op::Rebatch { batch_size, drop_remainder, .. } => {
            format!("{batch_size}{}", if *drop_remainder { ", drop_remainder" } else { "" })
        }
        Op::PaddedBatch { batch_size, drop_remainder, padded_shapes, .. } => format!(
            "{batch_size}{}{}",
            if padded_shapes.is_empty() { String::new() } else { format!(", shapes {padded_shapes:?}") },
            if *drop_remainder { ", drop_remainder" } else { "" }
        ),
        Op::Unbatch | Op::Zip | Op::Concatenate | Op::IgnoreErrors | Op::Unique => String::new(),
        Op::ElementPositions { offset, stride } => format!("{offset} + {stride} * position"),
        Op::Shuffle { buffer_size, seed, reshuffle_each_iteration } => format!(
            "buffer {buffer_size}, seed {}{}",
            seed.map_or("random".to_string(), |s| s.to_string()),
            if *reshuffle_each_iteration { ", reshuffle each iteration" } else { "" }
        ),
        Op::ShuffleAndRepeat { buffer_size, seed, reshuffle_each_iteration, count } => format!(
            "buffer {buffer_size}, seed {}{}, count {count}",
            seed.map_or("random".to_string(), |s| s.to_string()),
            if *reshuffle_each_iteration { ", reshuffle each iteration" } else { "" }
        ),
        Op::Repeat { count } | Op::Take { count } | Op::Skip { count } => count.to_string(),
        Op::Shard { num_shards, index } => format!("{num_shards}, index {index}"),
        Op::Enumerate { start, field } => format!("{field} from {start}"),
        Op::Prefetch { buffer_size } => tunable(buffer_size),
        Op::Cache { path, .. } => path.clone().unwrap_or_else(|| "memory".into()),
        Op::Snapshot { path, options } => format!(
            "{path}, {:?}, {} shards{}{}",
            options.compression,
            options.shards,
            options.shuffle_on_read.map_or(String::new(), |s| format!(", shuffle on read seed {s}")),
            options.fingerprint.as_ref().map_or(String::new(), |f| format!(", fingerprint {f}"))
        )
        .to_lowercase(),
        Op::Reduce { update, .. } => {
            update.iter().map(|u| format!("{} := {}", u.name, u.expr)).collect::<Vec<_>>().join(", ")
        }
        Op::Scan { initial, function: Some(MapFn::Closure { closure, .. }), .. } => format!(
            "state {}; closure '{}'",
            initial.iter().map(|(n, v)| format!("{n} = {v}")).collect::<Vec<_>>().join(", "),
            closure.name
        ),
        Op::Scan { update, output, .. } => format!(
            "state {}; out {}",
            update.iter().map(|u| format!("{} := {}", u.name, u.expr)).collect::<Vec<_>>().join(", "),
            output.iter().map(|u| format!("{} := {}", u.name, u.expr)).collect::<Vec<_>>().join(", ")
        ),
        Op::Window { size, shift, stride, drop_remainder } => format!(
            "size {size}, shift {shift}, stride {stride}{}",
            if *drop_remainder { ", drop_remainder" } else { "" }
        ),
        Op::SampleFromDatasets { weights, seed, .. } => {
            format!("weights {weights:?}, seed {}", seed.map_or("random".to_string(), |s| s.to_string()))
        }
        Op::ChooseFromDatasets { stop_on_empty_dataset } => {
            format!("by the first input{}", if *stop_on_empty_dataset { ", stop on empty dataset" } else { "" })
        }
        Op::GroupByWindow { key, window_size } => format!("key {key}, window {window_size}"),
        Op::BucketBySequenceLength { length, bucket_boundaries, bucket_batch_sizes, .. } => {
            format!("length {length}, boundaries {bucket_boundaries:?}, batch sizes {bucket_batch_sizes:?}")
        }
    };
    if args.is_empty() {
        op.name()
    } else {
        format!("{}({args})", op.name())
    }
}

/// The plan as an indented tree, output first: `name(args) -> spec`, inputs indented below.
/// A sub-plan used twice is printed once and referenced as `(see #n)` afterwards.
pub fn tree(plan: &Plan) -> String {
    let mut out = String::new();
    let mut seen = std::collections::HashMap::new();
    fn go(p: &Plan, depth: usize, out: &mut String, seen: &mut std::collections::HashMap<usize, usize>) {
        let indent = "  ".repeat(depth);
        if let Some(n) = seen.get(&p.node_id()) {
            out.push_str(&format!("{indent}(see #{n})\n"));
            return;
        }
        let n = seen.len();
        seen.insert(p.node_id(), n);
        out.push_str(&format!("{indent}#{n} {} -> {}\n", describe(p.op()), p.spec()));
        for i in p.inputs() {
            go(i, depth + 1, out, seen);
        }
    }
    go(plan, 0, &mut out, &mut seen);
    out
}
