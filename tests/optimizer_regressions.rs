//! Hand-written optimizer-equivalence tests: the rule interactions that matter most, and the
//! bugs the random-pipeline fuzzer (`optimizer_equivalence`) found, each named after its bug.
//! Each builds a pipeline twice from scratch and runs it
//! with the optimizer on and off; the items must be the same.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array};
use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;
use common::pipelines::*;
use flumen::prelude::*;
use flumen::Options;

/// Where the two sequences first differ: elements must be equal (schema and values), errors
/// need only be errors at the same position (per-row and columnar evaluation may word the
/// same failure differently).
fn first_difference(optimized: &[Item], plain: &[Item]) -> Option<String> {
    for i in 0..optimized.len().max(plain.len()) {
        match (optimized.get(i), plain.get(i)) {
            (Some(Item::Ok(a)), Some(Item::Ok(b))) if a == b => {}
            (Some(Item::Err(_)), Some(Item::Err(_))) => {}
            (a, b) => {
                return Some(format!(
                    "item {i} of {} (optimized) / {} (unoptimized) differs:\noptimized: {}\nunoptimized: {}",
                    optimized.len(),
                    plain.len(),
                    show(a),
                    show(b)
                ))
            }
        }
    }
    None
}

// ----------------------------------------------------------------------------------------
// Hand-written cases: the most important rule interactions, and the bugs found.
// ----------------------------------------------------------------------------------------

/// Builds the pipeline twice (fresh closure state each time), runs it optimized and
/// unoptimized, asserts that the items are the same, and returns them (unoptimized run).
fn assert_equivalent(make: impl Fn() -> flumen::Result<Dataset>) -> Vec<Item> {
    let optimized = make().expect("builds").with_options(Options::default());
    let plain = make().expect("builds").with_options(Options::default().without_optimizations());
    let (a, b) = (items(&optimized), items(&plain));
    if let Some(diff) = first_difference(&a, &b) {
        panic!("{diff}\n\n{}", optimized.explain());
    }
    b
}

/// The rules that fired when optimizing `ds` under default options.
fn fired(ds: &Dataset) -> Vec<String> {
    let report = ds.with_options(Options::default()).optimization_report().expect("optimizes");
    report.stages.iter().flat_map(|s| s.rules_fired.keys().cloned()).collect()
}

/// Items as `Some(values of field)` per element, `None` per error.
fn values(items: &[Item], field: &str) -> Vec<Option<Vec<i64>>> {
    items
        .iter()
        .map(|i| match i {
            Item::Ok(b) => Some(int_values(b.column_by_name(field).expect("field").as_ref())),
            Item::Err(_) => None,
        })
        .collect()
}

fn range(a: i64, b: i64) -> Dataset {
    Dataset::range(a, b).expect("range")
}

#[test]
fn map_chain_filter_and_batch_match_unoptimized() {
    // The three maps fuse into one (the dead `f` is not computed: int-to-float casts and
    // float arithmetic cannot fail), the filter stays after the fallible `w` (hoisting it
    // would hide the error of element 7), and batch fuses with the map; element 7's error
    // discards its partial batch in both runs.
    let make = || {
        range(0, 20)
            .map(MapFunction::with_fields([("f", cast(col("value"), DataType::Float64) * lit(0.5))]))?
            .map(MapFunction::with_fields([("g", col("f") + lit(1.0))]))?
            .map(MapFunction::select([
                ("value", col("value")),
                ("g", col("g")),
                ("w", lit(10i64) / (col("value") - lit(7i64))),
            ]))?
            .filter((col("value") % lit(3i64)).not_eq(lit(0i64)))?
            .batch(4)
    };
    let rules = fired(&make().unwrap());
    assert!(rules.iter().any(|r| r == "map-fusion"), "{rules:?}");
    let got = assert_equivalent(make);
    let kept: Vec<i64> = (0..20).filter(|v| v % 3 != 0).collect();
    // 1 2 4 5 | 7 fails: the batch gathered so far ([]) is discarded | 8 10 11 13 | 14 16 17 19
    let expected = vec![Some(kept[0..4].to_vec()), None, Some(kept[5..9].to_vec()), Some(kept[9..].to_vec())];
    assert_eq!(values(&got, "value"), expected);
    // A filter that does not read what an infallible map computes is hoisted above it.
    let hoisted = || {
        range(0, 20)
            .map(MapFunction::with_fields([("y", cast(col("value"), DataType::Float64) * lit(3.0))]))?
            .filter((col("value") % lit(3i64)).not_eq(lit(0i64)))?
            .map(MapFunction::with_fields([("z", col("y") + lit(1.0))]))?
            .batch_with(4, true)
    };
    let rules = fired(&hoisted().unwrap());
    assert!(rules.iter().any(|r| r == "filter-hoist"), "{rules:?}");
    let got = assert_equivalent(hoisted);
    assert_eq!(
        values(&got, "value"),
        vec![Some(kept[0..4].to_vec()), Some(kept[4..8].to_vec()), Some(kept[8..12].to_vec())]
    );
}

/// A per-element closure that adds field `c`: its call number (stateful) or a seeded random
/// number of its call number (non-deterministic). Each closure counts its own calls from 0;
/// `total` counts the calls of all of them.
fn counting_closure(name: &str, spec: &ElementSpec, random: bool, total: Arc<AtomicU64>) -> MapFunction {
    let mut fields = spec.fields.clone();
    fields.push(FieldSpec::scalar("c", DType::Int64));
    let out = ElementSpec { fields, batch_dims: spec.batch_dims };
    let schema = out.arrow_schema();
    let calls = AtomicU64::new(0);
    let f = MapFunction::element(Some(name), out, move |row| {
        total.fetch_add(1, Ordering::SeqCst);
        let n = calls.fetch_add(1, Ordering::SeqCst);
        let c = if random { (splitmix(7 ^ n) % 1000) as i64 } else { n as i64 };
        let mut columns = row.columns().to_vec();
        columns.push(Arc::new(Int64Array::from(vec![c])));
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    });
    // A random stream drawn per call depends on the calls before: stateful as well.
    if random {
        f.nondeterministic().stateful()
    } else {
        f.stateful()
    }
}

#[test]
fn stateful_and_random_closures_between_expression_maps_keep_their_call_order() {
    for random in [false, true] {
        let calls = Arc::new(AtomicU64::new(0));
        let make = || {
            let mapped = range(0, 12).map(MapFunction::with_fields([("y", col("value") * lit(2i64))]))?;
            let spec = mapped.element_spec().clone();
            mapped
                .map(counting_closure("counter", &spec, random, calls.clone()))?
                .map(MapFunction::with_fields([("y", col("y") + col("c"))]))?
                .filter((col("y") % lit(2i64)).eq(lit(0i64)))?
                .map(MapFunction::with_fields([("q", lit(100i64) / (col("c") - lit(5i64)))]))?
                .batch(3)
        };
        let got = assert_equivalent(make);
        // Two builds, each calling the closure once per element: the optimizer neither
        // skipped elements (by filtering before it) nor called it twice.
        assert_eq!(calls.load(Ordering::SeqCst), 24, "random: {random}");
        if !random {
            // y = 2v + v is even for even v; c = v; q fails for c = 5 (odd, filtered out).
            let expected = vec![Some(vec![0, 2, 4]), Some(vec![6, 8, 10])];
            assert_eq!(values(&got, "value"), expected);
        }
    }
}

#[test]
fn a_failing_predicate_guarded_by_an_earlier_filter_never_fails() {
    // filter(v != 0).filter(10 / v > 1): fusing them into one conjunction would evaluate
    // 10 / 0 (the evaluator has no short-circuit), so the second filter must stay behind
    // the first, also after a map that computes the divisor.
    let guarded =
        || range(-5, 6).filter(col("value").not_eq(lit(0i64)))?.filter((lit(10i64) / col("value")).gt(lit(1i64)));
    let got = assert_equivalent(guarded);
    assert_eq!(values(&got, "value"), vec![Some(vec![1]), Some(vec![2]), Some(vec![3]), Some(vec![4]), Some(vec![5])]);
    let after_map = || {
        range(0, 10)
            .map(MapFunction::with_fields([("d", col("value") - lit(4i64))]))?
            .filter(col("d").not_eq(lit(0i64)))?
            .filter((lit(8i64) / col("d")).gt(lit(1i64)))?
            .batch(2)
    };
    let got = assert_equivalent(after_map);
    assert_eq!(values(&got, "value"), vec![Some(vec![5, 6]), Some(vec![7, 8])]);
    // Unguarded, the predicate fails for exactly that element in both runs.
    let unguarded = || range(-2, 3).filter((lit(10i64) / col("value")).gt(lit(1i64)))?.batch(2);
    let got = assert_equivalent(unguarded);
    assert_eq!(values(&got, "value"), vec![None, Some(vec![1, 2])]);
}

// ----- bugs found by the property test -----

/// Found by the property test: `may_fail` treated integer `+`, `-`, `*` as infallible, but
/// they fail on overflow (fixed in df7920b, "integer arithmetic ... are fallible").
#[test]
fn integer_overflow_errors_are_dropped_by_dead_field_elimination() {
    let a = || Dataset::from_arrays([("a", Arc::new(Int64Array::from(vec![1, i64::MAX / 2, 3])) as ArrayRef)]);
    // map-fusion composes the two maps and drops `y`, which nobody reads: element 1's
    // overflow error disappears (unoptimized: Ok, Err, Ok; optimized: Ok, Ok, Ok).
    assert_equivalent(|| {
        a()?.map(MapFunction::with_fields([("y", col("a") * lit(4i64))]))?.map(MapFunction::select([("a", col("a"))]))
    });
    // filter-hoist moves the filter above the map: the overflowing element is dropped before
    // the map computes `y` (unoptimized: Ok, Err; optimized: Ok).
    assert_equivalent(|| {
        a()?.map(MapFunction::with_fields([("y", col("a") * lit(4i64))]))?.filter(col("a").lt(lit(5i64)))
    });
}

#[test]
fn noop_repeat_changes_the_order_of_a_reshuffling_shuffle() {
    // The runtime salts each repeat epoch's seeds (`ExecContext::for_epoch(0)` != the
    // context itself), so repeat(1) over a reshuffling shuffle is not the identity.
    assert_equivalent(|| range(0, 10).shuffle(10, Some(1))?.repeat(Some(1)));
}

/// A Parquet file of `rows` (row groups of 3 rows) in `dir`, read whole.
fn parquet_of(dir: &Path, rows: &[Row]) -> Dataset {
    let paths = write_files(dir, rows, true, 1, None);
    Dataset::parquet(&[paths[0].as_str()], None).expect("parquet")
}

#[test]
fn predicate_pushdown_hides_the_errors_of_row_groups_that_statistics_prune() {
    let dir = tempfile::tempdir().unwrap();
    let rows: Vec<Row> =
        [(1, 0), (2, 1), (3, 2), (10, 0), (11, 1), (12, 1)].iter().map(|&(a, b)| (Some(a), b, Some(0.0))).collect();
    // Row group 0 (a <= 3) cannot pass `a > 5`, so the reader skips it, and with it the
    // division by zero of row 0 (unoptimized: Err, Err, Ok, Ok; optimized: Err, Ok, Ok).
    assert_equivalent(|| {
        parquet_of(dir.path(), &rows).filter(col("a").gt(lit(5i64)).and((lit(6i64) / col("b")).gt(lit(0i64))))
    });
}

#[test]
fn predicate_pushdown_evaluates_a_fallible_predicate_on_rows_an_earlier_filter_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let rows: Vec<Row> = vec![(Some(0), 0, Some(1.0)), (Some(1), 0, Some(-1.5)), (Some(2), 0, Some(-1.5))];
    // Row 0 is dropped by `x < 0`, so `6 / a` never sees its zero; the pushed-down
    // `(x < 0) and (6 / a > 0)` evaluates both sides on every row (unoptimized: Ok, Ok;
    // optimized: Err, Ok, Ok). filter-fusion refuses exactly this (`may_fail(q)`).
    assert_equivalent(|| {
        parquet_of(dir.path(), &rows).filter(col("x").lt(lit(0.0)))?.filter((lit(6i64) / col("a")).gt(lit(0i64)))
    });
}

#[test]
fn noop_take_removes_a_take_that_stops_errors() {
    // skip(-1) has cardinality 0, so take(0) looks like a no-op; but skip passes its input's
    // errors through, and take(0) is what stops them (unoptimized: nothing; optimized: Err).
    assert_equivalent(|| {
        range(0, 1).map(MapFunction::with_fields([("q", lit(1i64) / col("value"))]))?.skip(-1)?.take(0)
    });
}

/// Found by the property test: `EnumerateOp` computed `i64::MAX - next`, which overflows for
/// a negative start (a panic in debug builds).
#[test]
fn enumerate_with_a_negative_start_counts_from_it() {
    let got = assert_equivalent(|| range(0, 2).enumerate(-1));
    assert_eq!(values(&got, "index"), vec![Some(vec![-1]), Some(vec![0])]);
}
