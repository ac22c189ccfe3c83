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

/// w2's shape over TFRecord files: interleave → `parse_example` → a map → keep
/// `label != 4 and label < 25` → batches of 2, the map scaling the tensor `x` by `label`
/// (links run one by one, as w2's) or computing `z := 3 · label + 1` (the links as one
/// loop). The stage takes the parse in (its tasks parse, then run the links over what they
/// parsed), and gives the unfused pipeline's batches with each record's parse error in its
/// place, with or without `ignore_errors`, whatever the chunking and the parallelism.
#[test]
fn a_parse_fused_under_expressions_gives_the_unfused_batches_and_errors() {
    use arrow::array::AsArray;
    use arrow::record_batch::RecordBatch;
    let dir = tempfile::tempdir().unwrap();
    let paths = example_files(&dir);
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    let scale = ("x", col("x") * cast(col("label"), arrow::datatypes::DataType::Float32));
    let affine = ("z", col("label") * lit(3i64) + lit(1i64));
    // An element as its label and the map's output, flattened.
    let text = |b: &RecordBatch, out: &str| {
        let values = b.column_by_name(out).unwrap();
        let values = match values.data_type() {
            arrow::datatypes::DataType::FixedSizeList(..) => values.as_fixed_size_list().values().clone(),
            _ => values.clone(),
        };
        let flat = RecordBatch::try_from_iter([(out, values)]).unwrap();
        format!("{:?} {:?}", column_i64(b, "label"), column_f64(&flat, out))
    };
    let fixed = Parallel { num_parallel_calls: Tunable::Fixed(2), deterministic: None };
    let sequential = Parallel { num_parallel_calls: Tunable::Default, deterministic: None };
    for (out, expr) in [scale, affine] {
        for calls in [fixed, sequential] {
            let ds = parsed(&paths, calls, calls)
                .and_then(|d| d.map_with(MapFunction::with_fields([(out.to_string(), expr.clone())]), calls))
                .and_then(|d| d.filter_with(col("label").not_eq(lit(4i64)).and(col("label").lt(lit(25i64))), calls))
                .and_then(|d| d.batch(2))
                .unwrap();
            for chunk_rows in [1, 3, 1000] {
                let options = Options::default().with_chunk_rows(chunk_rows);
                let fused = ds.with_options(options.clone());
                let explain = fused.explain();
                assert!(explain.contains("parse_example of 'record'] fused into"), "{explain}");
                let unfused = ds.with_options(options.with_stage_fusion(false));
                let texts = |ds: &Dataset| -> Vec<String> {
                    let item = |item: flumen::Result<RecordBatch>| {
                        item.map_or_else(|e| format!("Err: {e}"), |b| text(&b, out))
                    };
                    ds.iter().map(item).collect()
                };
                let expected = texts(&unfused);
                let missing = expected.iter().filter(|t| t.contains("required feature 'label' is missing")).count();
                assert_eq!(missing, 3, "{expected:?}");
                assert!(expected.iter().filter(|t| !t.starts_with("Err")).count() >= 5, "{expected:?}");
                assert_eq!(texts(&fused), expected, "{out}, {calls:?}, chunks of {chunk_rows}");
                let skipping = |ds: &Dataset| ds.ignore_errors().unwrap();
                assert_eq!(texts(&skipping(&fused)), texts(&skipping(&unfused)), "ignore_errors, {out}, {calls:?}");
            }
        }
    }
}

/// Three TFRecord files of 9, 4 and 7 Examples (`example`): record `i` of file `f` has label
/// `10f + i` and `x = [i, f + 0.5]`, except that every fifth record of file 0 (from the
/// second) and file 2's fourth lack their label, which `parsed` requires.
fn example_files(dir: &tempfile::TempDir) -> Vec<String> {
    let mut paths = vec![];
    for (f, n) in [9usize, 4, 7].into_iter().enumerate() {
        let path = dir.path().join(format!("p{f}.tfrecord")).to_str().unwrap().to_string();
        let label = |i: usize| (!(f == 0 && i % 5 == 1 || (f, i) == (2, 3))).then_some(10 * f as i64 + i as i64);
        write_tfrecords(&path, (0..n).map(|i| example(label(i), [i as f32, f as f32 + 0.5])));
        paths.push(path);
    }
    paths
}

/// The files interleaved (cycle 3, block 1, `read` parallelism) and parsed (`label`, `x`,
/// with `parse` parallelism).
fn parsed(paths: &[&str], read: Parallel, parse: Parallel) -> flumen::Result<Dataset> {
    let file = FileRead::TfRecord(RecordCompression::None);
    let features =
        vec![FeatureSpec::fixed("label", DType::Int64, vec![]), FeatureSpec::fixed("x", DType::Float32, vec![2])];
    Dataset::splits(paths, file.clone())?
        .interleave_with(DatasetFunction::ReadSplit(file), Tunable::Fixed(3), 1, read)?
        .map_with(MapFunction::parse_example("record", features)?, parse)
}

/// The parse joins only a stage whose tasks are cut by chunks and that agrees with it on
/// parallelism: under a `map_and_batch` without a filter (tasks of whole batches), or where
/// it runs sequentially under parallel expressions, it stays an operator of its own.
#[test]
fn a_parse_joins_only_a_stage_cut_by_chunks_and_of_its_parallelism() {
    let dir = tempfile::tempdir().unwrap();
    let paths = example_files(&dir);
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    let fixed = Parallel { num_parallel_calls: Tunable::Fixed(2), deterministic: None };
    let sequential = Parallel { num_parallel_calls: Tunable::Default, deterministic: None };
    let z = || MapFunction::with_fields([("z".to_string(), col("label") + lit(1i64))]);
    let own_operator = "ParallelMapOp[columnar parse_example of 'record']";
    // map_and_batch (the map and the batch fused by the optimizer), no filter.
    let batched = parsed(&paths, fixed, fixed).and_then(|d| d.map_with(z(), fixed)).and_then(|d| d.batch(2)).unwrap();
    let explain = batched.explain();
    assert!(explain.contains("MapAndBatchOp") && explain.contains(own_operator), "{explain}");
    // With a filter under it, the same map_and_batch takes the parse in.
    let filtered = parsed(&paths, fixed, fixed)
        .and_then(|d| d.map_with(z(), fixed))
        .and_then(|d| d.filter_with(col("z").gt(lit(3i64)), fixed))
        .and_then(|d| d.batch(2))
        .unwrap();
    let explain = filtered.explain();
    assert!(explain.contains("stage of 3 operators") && !explain.contains(own_operator), "{explain}");
    // A sequential parse under parallel expressions (which the optimizer would otherwise
    // make parallel).
    let mixed = parsed(&paths, fixed, sequential)
        .and_then(|d| d.map_with(z(), fixed))
        .and_then(|d| d.filter_with(col("z").gt(lit(3i64)), fixed))
        .unwrap();
    let mixed = mixed.with_options(Options::default().with_optimization_rule("map-parallelization", false));
    let explain = mixed.explain();
    assert!(explain.contains("MapOp[columnar parse_example of 'record']"), "{explain}");
    assert!(!explain.contains("parse_example of 'record'] fused"), "{explain}");
    // All three give what they give unfused.
    for ds in [batched, filtered, mixed] {
        let unfused = ds.with_options(ds.options().clone().with_stage_fusion(false));
        assert_eq!(item_texts(&ds, "z"), item_texts(&unfused, "z"));
    }
}
