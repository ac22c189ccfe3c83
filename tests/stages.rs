//! Stage fusion (`Options::stage_fusion`): a chain of maps and filters over whole chunks runs
//! as one operator, and gives exactly what the chain of operators gives — the elements, their
//! order, and every error at its place with its message — whatever the chunking and the
//! parallelism.

mod common;

use common::*;
use flumen::prelude::*;
use flumen::Options;

/// map (fails on multiples of 50) → filter → map → filter (fails on multiples of 101) →
/// map → batch, every step with `parallel`: the optimizer makes the last map and the batch
/// one `map_and_batch`, the top of a stage of 5.
fn chain(parallel: Parallel) -> Dataset {
    let with = |name: &str, expr: Expr| MapFunction::with_fields([(name.to_string(), expr)]);
    Dataset::range(0, 400)
        .and_then(|d| d.map_with(with("y", lit(1000i64) / (col("value") % lit(50i64))), parallel))
        .and_then(|d| d.filter_with((col("value") % lit(3i64)).not_eq(lit(0i64)), parallel))
        .and_then(|d| d.map_with(with("z", col("y") * col("y") - col("value")), parallel))
        .and_then(|d| d.filter_with((lit(7777i64) / (col("value") % lit(101i64))).gt(lit(80i64)), parallel))
        .and_then(|d| d.map_with(with("w", col("z") + lit(1i64)), parallel))
        .and_then(|d| d.batch(4))
        .unwrap()
}

#[test]
fn fused_stages_give_the_unfused_sequence_with_errors_in_place() {
    let fixed = Parallel { num_parallel_calls: Tunable::Fixed(3), deterministic: None };
    let autotuned = Parallel { num_parallel_calls: Tunable::Autotune, deterministic: None };
    let sequential = Parallel { num_parallel_calls: Tunable::Default, deterministic: None };
    for chunk_rows in [1, 7, 1000] {
        for parallel in [fixed, autotuned, sequential] {
            let options = Options::default().with_chunk_rows(chunk_rows);
            let fused = chain(parallel).with_options(options.clone());
            assert!(fused.explain().contains("stage of 5 operators"), "{}", fused.explain());
            let unfused = fused.with_options(options.clone().with_stage_fusion(false));
            assert!(!unfused.explain().contains("stage of"), "{}", unfused.explain());
            let expected = item_texts(&unfused, "w");
            assert!(expected.iter().any(|i| i.contains("Err")), "the chain fails on some elements");
            assert!(expected.iter().filter(|i| !i.contains("Err")).count() > 10);
            assert_eq!(item_texts(&fused, "w"), expected, "{parallel:?}, chunks of {chunk_rows}");

            let skipping = |ds: &Dataset| ds.ignore_errors().unwrap();
            let expected = item_texts(&skipping(&unfused), "w");
            assert!(expected.iter().all(|i| !i.contains("Err")));
            assert_eq!(
                item_texts(&skipping(&fused), "w"),
                expected,
                "ignore_errors, {parallel:?}, chunks of {chunk_rows}"
            );
        }
    }
}

#[test]
fn explain_analyze_counts_a_stage_as_its_top_operator() {
    let ds = chain(Parallel { num_parallel_calls: Tunable::Fixed(2), deterministic: None }).ignore_errors().unwrap();
    let analysis = ds.explain_analyze().unwrap();
    let lines: Vec<&str> = analysis.lines().collect();
    let top = lines.iter().position(|l| l.contains("stage of 5 operators")).expect(&analysis);
    assert!(lines[top].contains("rows="), "{analysis}");
    for member in &lines[top + 1..top + 5] {
        assert!(member.ends_with("fused into the stage above"), "{analysis}");
    }
    assert!(lines[top + 5].contains("ReaderOp[range") && lines[top + 5].contains("rows=400"), "{analysis}");
}

#[test]
fn a_checkpoint_restores_only_into_the_same_fusion() {
    let parallel = Parallel { num_parallel_calls: Tunable::Fixed(2), deterministic: None };
    let fused = chain(parallel).ignore_errors().unwrap().with_options(Options::default().with_chunk_rows(7));
    let unfused = fused.with_options(fused.options().clone().with_stage_fusion(false));
    let expected = item_texts(&fused, "w");
    let mut it = fused.iter();
    let first: Vec<String> = it.by_ref().take(5).map(|b| format!("{:?}", column_i64(&b.unwrap(), "w"))).collect();
    let checkpoint = it.save(SaveMode::Symbolic).unwrap();
    let err = unfused.iter_from(&checkpoint).err().expect("another operator tree").to_string();
    assert!(err.contains("options differ"), "{err}");
    let rest: Vec<String> =
        fused.iter_from(&checkpoint).unwrap().map(|b| format!("{:?}", column_i64(&b.unwrap(), "w"))).collect();
    assert_eq!([first, rest].concat(), expected);
}

/// w2's shape over a float32[4] tensor: `select(t := t * w, label)` then `filter(label < 8)`.
/// The optimizer moves the filter below the map (the map cannot fail), the stage runs them
/// as one pass whose tensor kernel reads the kept rows in place, and the batches are those
/// of the unfused chain, whatever the chunking.
#[test]
fn a_filter_under_a_tensor_map_gives_the_unfused_batches() {
    let rows = 300usize;
    use arrow::record_batch::RecordBatch;
    use std::sync::Arc;
    let values = arrow::array::Float32Array::from_iter_values((0..rows * 4).map(|i| i as f32 * 0.25 - 9.0));
    let t = tensors(Arc::new(values), &[4]);
    let w = arrow::array::Float32Array::from_iter_values((0..rows).map(|r| 1.0 + (r % 13) as f32));
    let label = arrow::array::Int64Array::from_iter_values((0..rows).map(|r| (r * 7 % 10) as i64));
    let batch = RecordBatch::try_from_iter([
        ("t", t),
        ("w", Arc::new(w) as arrow::array::ArrayRef),
        ("label", Arc::new(label) as arrow::array::ArrayRef),
    ])
    .unwrap();
    let scale = MapFunction::select([("t", col("t") * col("w")), ("label", col("label"))]);
    for chunk_rows in [1, 7, 64, 1000] {
        let options = Options::default().with_chunk_rows(chunk_rows);
        let ds = Dataset::from_batches(vec![batch.clone()])
            .and_then(|d| d.map(scale.clone()))
            .and_then(|d| d.filter(col("label").lt(lit(8i64))))
            .and_then(|d| d.batch(4))
            .unwrap()
            .with_options(options.clone());
        let explain = ds.explain();
        assert!(explain.contains("stage of 2 operators"), "{explain}");
        let unfused = ds.with_options(options.with_stage_fusion(false));
        let batches = |ds: &Dataset| ds.iter().map(|b| b.unwrap()).collect::<Vec<RecordBatch>>();
        let expected = batches(&unfused);
        assert_eq!(expected.len(), rows * 8 / 10 / 4, "whole batches of the kept rows");
        assert_eq!(batches(&ds), expected, "chunks of {chunk_rows}");
    }
}

/// w4's shape, which the stage runs as one selecting loop (`kernel::chain`):
/// `a := f64(value) · 0.5`, keep `floor(a) % 3 != 0`, then `b := value · (i64::MAX / 350) + 1`,
/// which overflows from value 351 on. Over `0..350` the loop computes every chunk; a chunk
/// with an overflow is handed back to the chain run link by link, which reports each kept
/// row's overflow in place (a dropped row's is no error). The batches and errors are the
/// unfused chain's either way.
#[test]
fn a_chain_run_as_one_loop_gives_the_unfused_batches_and_errors() {
    let chain = |end: i64, parallel: Parallel| {
        let with = |name: &str, expr: Expr| MapFunction::with_fields([(name.to_string(), expr)]);
        let a = cast(col("value"), arrow::datatypes::DataType::Float64) * lit(0.5);
        Dataset::range(0, end)
            .and_then(|d| d.map_with(with("a", a), parallel))
            .and_then(|d| d.filter_with((floor(col("a")) % lit(3.0)).not_eq(lit(0.0)), parallel))
            .and_then(|d| d.map_with(with("b", col("value") * lit(i64::MAX / 350) + lit(1i64)), parallel))
            .and_then(|d| d.batch(4))
            .unwrap()
    };
    let fixed = Parallel { num_parallel_calls: Tunable::Fixed(2), deterministic: None };
    let sequential = Parallel { num_parallel_calls: Tunable::Default, deterministic: None };
    for (end, fails) in [(350, false), (400, true)] {
        for chunk_rows in [7, 1000] {
            for parallel in [fixed, sequential] {
                let options = Options::default().with_chunk_rows(chunk_rows);
                let fused = chain(end, parallel).with_options(options.clone());
                assert!(fused.explain().contains("stage of"), "{}", fused.explain());
                let unfused = fused.with_options(options.with_stage_fusion(false));
                let expected = item_texts(&unfused, "b");
                assert_eq!(expected.iter().any(|i| i.contains("overflow")), fails, "{expected:?}");
                assert_eq!(item_texts(&fused, "b"), expected, "to {end}, {parallel:?}, chunks of {chunk_rows}");
            }
        }
    }
}
