//! The defects that differential testing found (random pipelines compared element by element
//! with their unoptimized runs, and across chunk sizes and thread counts), one test each.
//! Every test failed before its fix; the values they expect are worked out by hand from the
//! written pipeline, not taken from a run.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, StringArray};
use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;
use common::pipelines::{items, show, Item};
use common::{column_f64, column_i64};
use flumen::prelude::*;
use flumen::Options;

fn range(a: i64, b: i64) -> Dataset {
    Dataset::range(a, b).expect("range")
}

/// Per item: `Some(values of int field)`, or `None` for an error.
fn values(ds: &Dataset, field: &str) -> Vec<Option<Vec<i64>>> {
    ds.iter().map(|item| item.ok().map(|b| column_i64(&b, field))).collect()
}

/// Asserts that `ds` yields the same items under every option set in `runs` as with the
/// optimizer off, and returns those items.
fn same_under(ds: &Dataset, runs: &[Options]) -> Vec<Item> {
    let plain = items(&ds.with_options(Options::default().without_optimizations()));
    for options in runs {
        let got = items(&ds.with_options(options.clone()));
        assert_eq!(got.len(), plain.len(), "{options:?}:\n{}", ds.with_options(options.clone()).explain());
        for (i, (a, b)) in got.iter().zip(&plain).enumerate() {
            let same = match (a, b) {
                (Item::Ok(a), Item::Ok(b)) => a == b,
                (Item::Err(_), Item::Err(_)) => true,
                _ => false,
            };
            assert!(same, "item {i} under {options:?}: {} against {}", show(Some(a)), show(Some(b)));
        }
    }
    plain
}

/// `range(0, 10)` whose element 1 fails (`q := 1 / (value - 1)`).
fn failing_at_one() -> Dataset {
    range(0, 10).map(MapFunction::with_fields([("q", lit(1i64) / (col("value") - lit(1i64)))])).expect("map")
}

#[test]
fn a_filter_made_a_no_op_does_not_make_fusion_loop() {
    // map-filter-fusion turns the filter into `filter(-3 > -4)`, a no-op, and the filter
    // became a term of the map's own class; filter-fusion then fused it with itself without
    // end (18 s and 2.4 GB, stopped by the node limit).
    let ds = range(0, 10)
        .map(MapFunction::with_fields([("f1", lit(-3i64))]))
        .and_then(|d| d.filter(col("f1").gt(lit(-4i64))))
        .expect("pipeline");
    let report = ds.optimization_report().expect("optimizes");
    for stage in &report.stages {
        assert_eq!(stage.stop_reason, "saturated", "stage {}", stage.name);
        assert!(stage.egraph_nodes < 100, "stage {}: {} nodes", stage.name, stage.egraph_nodes);
    }
    let got = same_under(&ds, &[Options::default()]);
    assert_eq!(got.len(), 10);
}

#[test]
fn and_or_keep_the_errors_of_an_operand_a_literal_decides() {
    // `and`/`or` evaluate both operands (tf.logical_or does): "x" fails to cast, and folding
    // `true or ...` to `true` had dropped that element's error.
    let strings =
        || Dataset::from_arrays([("s", Arc::new(StringArray::from(vec!["1", "x", "2"])) as ArrayRef)]).expect("arrays");
    let fails = || cast(col("s"), DataType::Float64).gt(lit(0.0));
    for predicate in [lit(true).or(fails()), fails().or(lit(true)), !lit(false).and(fails())] {
        let ds = strings().filter(predicate.clone()).expect("filter");
        let got = same_under(&ds, &[Options::default(), Options::default().with_chunk_rows(1)]);
        let errors: Vec<bool> = got.iter().map(|i| matches!(i, Item::Err(_))).collect();
        assert_eq!(errors, vec![false, true, false], "{predicate}");
    }
}

#[test]
fn map_fusion_keeps_the_type_of_a_field_computed_from_literals() {
    // `clip(f0, -2.0, 3.5)` over the float32 field f0 is float32 (its literals adopt f0's
    // type); substituting `cast(-4 as float32)` for f0 gave a clip of literals, float64.
    let ds = range(0, 3)
        .map(MapFunction::with_fields([("f0", cast(lit(-4i64), DataType::Float32))]))
        .and_then(|d| d.map(MapFunction::select([("g", clip(col("f0"), lit(-2.0), lit(3.5)))])))
        .expect("pipeline");
    assert_eq!(ds.element_spec().to_string(), "{g: float32[]}");
    for options in [Options::default(), Options::default().without_optimizations()] {
        for item in ds.with_options(options).iter() {
            let batch = item.expect("element");
            assert_eq!(batch.column(0).data_type(), &DataType::Float32);
            assert_eq!(column_f64(&batch, "g"), vec![-2.0]);
        }
    }
}

/// A per-element closure adding field `c`, its call number, declared stateful; `calls`
/// counts its calls.
fn call_numbers(spec: &ElementSpec, calls: Arc<AtomicU64>) -> MapFunction {
    let mut fields = spec.fields.clone();
    fields.push(FieldSpec::scalar("c", DType::Int64));
    let out = ElementSpec { fields, batch_dims: spec.batch_dims };
    let schema = out.arrow_schema();
    MapFunction::element(Some("call_numbers"), out, move |row| {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        let mut columns = row.columns().to_vec();
        columns.push(Arc::new(Int64Array::from(vec![n as i64])));
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    })
    .stateful()
}

#[test]
fn a_stateful_closure_runs_in_element_order_under_parallel_operators() {
    // map-batch-fusion made the closure's map a parallel map_and_batch (the batch asked for
    // 4 calls), and about half of 3,000 elements got another element's call number.
    let four = Parallel { num_parallel_calls: Tunable::Fixed(4), deterministic: None };
    for written_parallel in [false, true] {
        let calls = Arc::new(AtomicU64::new(0));
        let base = range(0, 3000);
        let f = call_numbers(base.element_spec(), calls.clone());
        // Written parallel, the closure still runs one element after another.
        let mapped = if written_parallel { base.map_with(f, four) } else { base.map(f) }.expect("map");
        let ds = mapped.batch_parallel(2, false, four).expect("batch");
        for options in [Options::default(), Options::default().with_threads(1), Options::default().with_chunk_rows(7)] {
            calls.store(0, Ordering::SeqCst);
            let mut seen = 0;
            for batch in ds.with_options(options.clone()).iter() {
                let batch = batch.expect("batch");
                assert_eq!(column_i64(&batch, "value"), column_i64(&batch, "c"), "{options:?}");
                seen += batch.num_rows();
            }
            assert_eq!(seen, 3000);
        }
    }
}

#[test]
fn a_failing_constant_fails_only_the_elements_that_reach_it() {
    // With the filter and the map fused into one pass, the map's constant failed for the
    // rows the filter drops too: 5 errors instead of 2.
    let ds = range(0, 5)
        .filter(col("value").gt(lit(2i64)))
        .and_then(|d| d.map(MapFunction::with_fields([("f", cast(lit(1e300), DataType::UInt8))])))
        .expect("pipeline");
    let got = same_under(&ds, &[Options::default(), Options::default().with_chunk_rows(2)]);
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|i| matches!(i, Item::Err(_))));
}

#[test]
fn a_stateful_closure_is_called_only_for_the_elements_asked_for_whatever_the_chunk_size() {
    // A map reads its input a chunk at a time: under `take(6)` of 7 elements, the closure was
    // called 7 times in chunks of 4 or more rows. tf.data calls it 6 times.
    for chunk_rows in [1, 2, 3, 4, 7, 64, 1024] {
        for optimize in [true, false] {
            let calls = Arc::new(AtomicU64::new(0));
            let base = range(0, 7);
            let ds = base.map(call_numbers(base.element_spec(), calls.clone())).and_then(|d| d.take(6)).expect("take");
            let options = Options::default().with_chunk_rows(chunk_rows);
            let options = if optimize { options } else { options.without_optimizations() };
            let got = values(&ds.with_options(options), "c");
            assert_eq!(got, (0..6).map(|c| Some(vec![c])).collect::<Vec<_>>());
            assert_eq!(calls.load(Ordering::SeqCst), 6, "chunk_rows {chunk_rows}, optimized {optimize}");
        }
    }
}

#[test]
fn a_cache_cut_short_by_take_completes_alike_for_every_chunk_size() {
    // The cache of a reshuffling shuffle completes once it has handed out all 7 elements.
    // take(6) stops before: the second epoch shuffles anew. Under chunks of 7 or more rows,
    // the cache saw all 7 in one chunk and completed, and the second epoch replayed it.
    let epochs = |take: i64, chunk_rows: usize| {
        let ds = range(0, 7)
            .shuffle_with(7, Some(5), true)
            .and_then(|d| d.cache())
            .and_then(|d| d.take(take))
            .and_then(|d| d.repeat(Some(2)))
            .expect("pipeline")
            .with_options(Options::default().with_chunk_rows(chunk_rows));
        let all = common::ints(&ds, "value");
        let (first, second) = all.split_at(take as usize);
        (first.to_vec(), second.to_vec())
    };
    for chunk_rows in [1, 3, 7, 1024] {
        let (first, second) = epochs(6, chunk_rows);
        assert_ne!(first, second, "chunk_rows {chunk_rows}: an incomplete cache is not replayed");
        assert_eq!((first, second), epochs(6, 1), "chunk_rows {chunk_rows}");
        // take(7) hands out the last element: the cache completes and is replayed.
        let (first, second) = epochs(7, chunk_rows);
        assert_eq!(first, second, "chunk_rows {chunk_rows}");
    }
}

#[test]
fn counts_go_on_across_errors() {
    // An error is not an element: skip, take, shard and enumerate count elements, pass each
    // error through in its place, and keep counting after it. skip(3) restarted its count
    // after the error (Err, 5..9) where skip(1).skip(2) gave Err, 4..9.
    let err = None;
    let some = |v: &[i64]| v.iter().map(|v| Some(vec![*v])).collect::<Vec<_>>();
    let with_error = |after: usize, rest: &[i64]| {
        let mut out = some(rest);
        out.insert(after, err.clone());
        out
    };
    let cases: Vec<(Dataset, Vec<Option<Vec<i64>>>)> = vec![
        (failing_at_one().skip(3).unwrap(), with_error(0, &[4, 5, 6, 7, 8, 9])),
        (failing_at_one().skip(1).unwrap().skip(2).unwrap(), with_error(0, &[4, 5, 6, 7, 8, 9])),
        (failing_at_one().take(3).unwrap(), with_error(1, &[0, 2, 3])),
        (failing_at_one().take(5).unwrap().take(3).unwrap(), with_error(1, &[0, 2, 3])),
        // Elements 0, 2, 3, ... are the 0th, 1st, 2nd, ... : shard 0 of 2 takes 0, 3, 5, 7, 9.
        (failing_at_one().shard(2, 0).unwrap(), with_error(1, &[0, 3, 5, 7, 9])),
        (failing_at_one().shard(2, 1).unwrap(), with_error(0, &[2, 4, 6, 8])),
        (failing_at_one().shard(2, 0).unwrap().shard(2, 1).unwrap(), with_error(0, &[3, 7])),
        (failing_at_one().shard(4, 2).unwrap(), with_error(0, &[3, 7])),
    ];
    for (ds, expected) in cases {
        for options in
            [Options::default(), Options::default().with_chunk_rows(1), Options::default().with_chunk_rows(4)]
        {
            assert_eq!(values(&ds.with_options(options.clone()), "value"), expected, "{}", ds.plan());
        }
        same_under(&ds, &[Options::default()]);
    }
    let enumerated = failing_at_one().enumerate(10).unwrap();
    let indices = values(&enumerated, "index");
    assert_eq!(indices, with_error(1, &[10, 11, 12, 13, 14, 15, 16, 17, 18]));
}

#[test]
fn a_stage_computes_the_map_outputs_a_later_map_drops() {
    // A filter with maps around it runs as one selecting kernel over the composed outputs.
    // `b := cast(x / x as int64)` fails for x = 0 (NaN), and the select above drops `b`
    // unread: the kernel did not compute it, and the element's error was lost.
    let ds = Dataset::from_arrays([
        ("a", Arc::new(Int64Array::from(vec![3, 4, 5])) as ArrayRef),
        ("x", Arc::new(arrow::array::Float64Array::from(vec![1.0, 0.0, 2.0])) as ArrayRef),
    ])
    .and_then(|d| d.map(MapFunction::with_fields([("b", cast(col("x") / col("x"), DataType::Int64))])))
    .and_then(|d| d.filter(col("a").gt(lit(0i64))))
    .and_then(|d| d.map(MapFunction::select([("f", col("a") - lit(1i64))])))
    .expect("pipeline");
    let got = same_under(&ds, &[Options::default(), Options::default().with_chunk_rows(2)]);
    let errors: Vec<bool> = got.iter().map(|i| matches!(i, Item::Err(_))).collect();
    assert_eq!(errors, vec![false, true, false]);
}

#[test]
fn bucketing_does_not_read_ahead_of_a_stateful_closure() {
    // bucket_by_sequence_length pads its batches on the pool's workers while it goes on
    // grouping, which read the input ahead of what was asked for: the closure below it was
    // called for elements a take above never took, by as much as the workers were slow.
    for threads in [1, 2, 4] {
        let calls = Arc::new(AtomicU64::new(0));
        let base = range(0, 200);
        let options = BucketOptions::default();
        let ds = base
            .map(call_numbers(base.element_spec(), calls.clone()))
            .and_then(|d| d.bucket_by_sequence_length(col("value") % lit(5i64), vec![2, 4], vec![1, 1, 1], options))
            .and_then(|d| d.take(3))
            .expect("pipeline")
            .with_options(Options::default().with_threads(threads));
        assert_eq!(ds.iter().count(), 3);
        assert_eq!(calls.load(Ordering::SeqCst), 3, "threads {threads}");
    }
}

#[test]
fn operators_that_gather_rows_read_a_stateful_input_only_as_far_as_asked() {
    // A shuffle hands out a chunk of picks at a time, and refills its buffer once per pick:
    // over a closure that keeps state, a chunk of 1,024 picks called it for the whole
    // input. Element by element (tf.data), take(3) of shuffle(4) takes 4 + 3 calls.
    for chunk_rows in [1, 3, 1024] {
        let calls = Arc::new(AtomicU64::new(0));
        let base = range(0, 100);
        let ds = base
            .map(call_numbers(base.element_spec(), calls.clone()))
            .and_then(|d| d.shuffle_with(4, Some(9), false))
            .and_then(|d| d.take(3))
            .expect("pipeline")
            .with_options(Options::default().with_chunk_rows(chunk_rows));
        assert_eq!(ds.iter().count(), 3);
        assert_eq!(calls.load(Ordering::SeqCst), 7, "chunk_rows {chunk_rows}");
    }
}

#[test]
fn a_stateful_generator_is_read_only_as_far_as_asked() {
    // Each iterator of the generator is numbered; a repeat makes one per epoch. Gathering a
    // chunk of 1,024 rows, sample_from_datasets read epochs ahead of what the zip above it
    // took, so how many iterators a pass made depended on the chunk size.
    let made = |chunk_rows: usize| {
        let passes = Arc::new(AtomicU64::new(0));
        let counter = passes.clone();
        let spec = ElementSpec::new(vec![FieldSpec::scalar("value", DType::Int64)]).expect("spec");
        let schema = spec.arrow_schema();
        let ds = Dataset::from_stateful_generator(Some("numbered"), spec, move || {
            let n = counter.fetch_add(1, Ordering::SeqCst) as i64;
            let chunk = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![n]))]);
            Box::new(std::iter::once(chunk.map_err(flumen::Error::from))) as flumen::crates::udf::closure::ChunkIter
        })
        .and_then(|d| d.repeat(None))
        .and_then(|d| d.take(10))
        .and_then(|d| {
            let other = d.skip(0)?;
            Dataset::sample_from_datasets(&[&d, &other], vec![0.25, 0.75], Some(0), false)
        })
        .and_then(|d| Dataset::zip(&[&d, &range(0, 2).map(MapFunction::select([("z", col("value"))]))?]))
        .expect("pipeline")
        .with_options(Options::default().with_chunk_rows(chunk_rows));
        let first = values(&ds, "value");
        (first, passes.load(Ordering::SeqCst))
    };
    let one = made(1);
    assert_eq!(one.0.len(), 2);
    for chunk_rows in [3, 1024] {
        assert_eq!(made(chunk_rows), one, "chunk_rows {chunk_rows}");
    }
}

#[test]
fn zip_reads_its_later_inputs_only_as_far_as_asked() {
    // A zip reads its later inputs as far as its first: a chunk of 1,024 rows of the first
    // called a closure that keeps state in the second for 100 elements under take(1).
    for chunk_rows in [1, 1024] {
        let calls = Arc::new(AtomicU64::new(0));
        let base = range(0, 100);
        let stateful = base.map(call_numbers(base.element_spec(), calls.clone())).expect("map");
        let first = range(0, 100).map(MapFunction::select([("first", col("value"))])).expect("map");
        let ds = Dataset::zip(&[&first, &stateful])
            .and_then(|d| d.take(1))
            .expect("pipeline")
            .with_options(Options::default().with_chunk_rows(chunk_rows));
        assert_eq!(ds.iter().count(), 1);
        assert_eq!(calls.load(Ordering::SeqCst), 1, "chunk_rows {chunk_rows}");
    }
}

#[test]
fn map_fusion_keeps_the_type_a_literal_adopts() {
    // `index := cast(6.0 as int32)` then `f := index == cast(4e9 as int64)`: as written the
    // int64 literal-like value meets the int32 field and is cast to int32, which 4e9 is not
    // (an error per element); fused, `cast(6.0 as int32) == cast(4e9 as int64)` compared two
    // literal-like values in int64 (false). Found by the fuzzer's implicit-cast family.
    let ds = range(0, 3)
        .map(MapFunction::with_fields([("index", cast(lit(6.0), DataType::Int32))]))
        .and_then(|d| {
            d.map(MapFunction::with_fields([("f", col("index").eq(cast(lit(4_000_000_000.0), DataType::Int64)))]))
        })
        .expect("pipeline");
    let got = same_under(&ds, &[Options::default(), Options::default().with_chunk_rows(1)]);
    assert!(got.iter().all(|i| matches!(i, Item::Err(_))), "{}", got.len());
}
