//! Defects found by running the same pipelines in flumen and in the libraries people compare
//! it with (tf.data 2.21 above all), one test each. Every expected value is tf.data's (or
//! NumPy's, which agrees), worked out from its documented semantics and checked in
//! TensorFlow by hand; none is taken from a flumen run. Each pipeline runs on every
//! evaluation path: as written (per element, the Arrow evaluation), optimized (fused
//! kernels, compiled to native code where they can be, interpreted where they cannot), and
//! over chunks of one and of seven rows.

mod common;

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float64Array, Int64Array, UInt8Array};
use arrow::datatypes::{DataType, Float64Type};
use common::pipelines::{items, Item};
use flumen::prelude::*;
use flumen::{FieldKind, Options};

/// The option sets every test runs under.
fn every_path() -> Vec<Options> {
    vec![
        Options::default().without_optimizations(),
        Options::default(),
        Options::default().with_chunk_rows(1),
        Options::default().with_chunk_rows(7),
        Options::default().with_stage_fusion(false),
    ]
}

/// The float64 values of `field` in every element of `ds` (one per element), as bits, so
/// that NaN and the sign of zero compare exactly.
fn float_bits(ds: &Dataset, field: &str) -> Vec<u64> {
    let mut out = Vec::new();
    for chunk in ds.iter_chunks() {
        let chunk = chunk.unwrap_or_else(|e| panic!("{e}\n{}", ds.explain()));
        let column = arrow::compute::cast(chunk.column_by_name(field).expect("field"), &DataType::Float64).unwrap();
        out.extend(column.as_primitive::<Float64Type>().values().iter().map(|v| v.to_bits()));
    }
    out
}

/// The bool values of `field`, one per element.
fn bools(ds: &Dataset, field: &str) -> Vec<bool> {
    let mut out = Vec::new();
    for chunk in ds.iter_chunks() {
        let chunk = chunk.unwrap_or_else(|e| panic!("{e}\n{}", ds.explain()));
        let column = chunk.column_by_name(field).expect("field").as_boolean().clone();
        assert_eq!(column.null_count(), 0);
        out.extend(column.values().iter());
    }
    out
}

/// x and y of six elements: both kinds of NaN (x86's 0/0 has the sign bit set), zeros of
/// both signs, infinities.
fn floats() -> Dataset {
    let nan = f64::NAN;
    let x = Float64Array::from(vec![nan, -nan, -0.0, 1.0, f64::NEG_INFINITY, 2.0]);
    let y = Float64Array::from(vec![nan, 1.0, 0.0, nan, f64::NEG_INFINITY, 1.0]);
    Dataset::from_arrays([("x", Arc::new(x) as ArrayRef), ("y", Arc::new(y) as ArrayRef)]).expect("arrays")
}

#[test]
fn float_comparisons_follow_ieee_754_on_every_path() {
    // NumPy / tf: NaN is unordered (only != holds for it), -0.0 == 0.0.
    let expected: [(&str, [bool; 6]); 6] = [
        ("eq", [false, false, true, false, true, false]),
        ("ne", [true, true, false, true, false, true]),
        ("lt", [false, false, false, false, false, false]),
        ("le", [false, false, true, false, true, false]),
        ("gt", [false, false, false, false, false, true]),
        ("ge", [false, false, true, false, true, true]),
    ];
    let comparisons = |x: Expr, y: Expr| {
        vec![
            ("eq", x.clone().eq(y.clone())),
            ("ne", x.clone().not_eq(y.clone())),
            ("lt", x.clone().lt(y.clone())),
            ("le", x.clone().lt_eq(y.clone())),
            ("gt", x.clone().gt(y.clone())),
            ("ge", x.gt_eq(y)),
        ]
    };
    let f32 = |name: &str| cast(col(name), DataType::Float32);
    // float64 and float32; alone (compiled to native code) and beside `ln`, which keeps the
    // program in the interpreter.
    for (x, y) in [(col("x"), col("y")), (f32("x"), f32("y"))] {
        for interpreted in [false, true] {
            let mut fields = comparisons(x.clone(), y.clone());
            if interpreted {
                fields.push(("log", ln(col("x"))));
            }
            let ds = floats().map(MapFunction::with_fields(fields)).expect("map");
            for options in every_path() {
                let ds = ds.with_options(options.clone());
                for (name, want) in &expected {
                    assert_eq!(bools(&ds, name), want, "{name} under {options:?}, {x} vs {y}\n{}", ds.explain());
                }
            }
        }
    }
}

#[test]
fn a_filter_keeps_the_nans_that_x_not_equal_x_selects() {
    // tf.data: `filter(lambda e: e["x"] != e["x"])` keeps exactly the NaNs.
    for options in every_path() {
        let nans = floats().filter(col("x").not_eq(col("x"))).expect("filter").with_options(options.clone());
        assert_eq!(float_bits(&nans, "y"), [f64::NAN.to_bits(), 1f64.to_bits()], "{options:?}");
        let rest = floats().filter(col("x").eq(col("x"))).expect("filter").with_options(options.clone());
        assert_eq!(float_bits(&rest, "y").len(), 4, "{options:?}");
    }
}

#[test]
fn a_nan_compared_with_a_cast_literal_is_false_optimized_or_not() {
    // The fuzzer's case: `f4 := f1 < cast(-4.0 as int64)` with f1 NaN was true as written
    // (a NaN with the sign bit set sorts below -inf in Arrow's total order) and false
    // optimized.
    let ds =
        floats().map(MapFunction::with_fields([("f4", col("x").lt(cast(lit(-4.0), DataType::Int64)))])).expect("map");
    for options in every_path() {
        assert_eq!(bools(&ds.with_options(options.clone()), "f4")[..2], [false, false], "{options:?}");
    }
}

#[test]
fn least_greatest_and_clip_propagate_nan() {
    // tf.minimum / tf.maximum give NaN when either side is NaN; tf.clip_by_value(x, lo, hi)
    // is minimum(maximum(x, lo), hi), NaN where x, lo or hi is.
    let nan = f64::NAN;
    let ds = floats()
        .map(MapFunction::with_fields([
            ("least", least(vec![col("x"), col("y")])),
            ("greatest", greatest(vec![col("x"), col("y")])),
            ("clipped", clip(col("x"), lit(0.0), lit(1.5))),
            ("nan_bound", clip(col("y"), lit(0.0), lit(nan))),
        ]))
        .expect("map");
    let bits = |v: &[f64]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    // Neither a NaN's sign nor a tie's zero sign is part of the contract (tf.minimum of
    // -0.0 and 0.0 may give either): compare NaNs as one value, zeros as one value.
    let canonical = |v: Vec<u64>| {
        v.into_iter()
            .map(|b| match f64::from_bits(b) {
                v if v.is_nan() => nan.to_bits(),
                0.0 => 0f64.to_bits(),
                _ => b,
            })
            .collect::<Vec<_>>()
    };
    for options in every_path() {
        let ds = ds.with_options(options.clone());
        assert_eq!(canonical(float_bits(&ds, "least")), bits(&[nan, nan, 0.0, nan, f64::NEG_INFINITY, 1.0]));
        assert_eq!(canonical(float_bits(&ds, "greatest")), bits(&[nan, nan, 0.0, nan, f64::NEG_INFINITY, 2.0]));
        assert_eq!(canonical(float_bits(&ds, "clipped")), bits(&[nan, nan, 0.0, 1.0, 0.0, 1.5]), "{options:?}");
        assert_eq!(canonical(float_bits(&ds, "nan_bound")), bits(&[nan; 6]), "{options:?}");
    }
}

/// Each item of `ds` as text: an element's fields formatted by Arrow (`[[1, 2], [3, 4]]`),
/// or `Err` for an error.
fn item_rows(ds: &Dataset) -> Vec<String> {
    items(ds)
        .iter()
        .map(|item| match item {
            Item::Err(_) => "Err".to_string(),
            Item::Ok(batch) => {
                let options = arrow::util::display::FormatOptions::default();
                let fields: Vec<String> = batch
                    .schema()
                    .fields()
                    .iter()
                    .zip(batch.columns())
                    .map(|(f, c)| {
                        let format = arrow::util::display::ArrayFormatter::try_new(c.as_ref(), &options).unwrap();
                        let rows: Vec<String> = (0..c.len()).map(|i| format.value(i).to_string()).collect();
                        format!("{}: {}", f.name(), rows.join(" | "))
                    })
                    .collect();
                fields.join(", ")
            }
        })
        .collect()
}

/// `item_rows` under every option set, which must agree; the rows.
fn rows_on_every_path(ds: &Dataset) -> Vec<String> {
    let plain = item_rows(&ds.with_options(Options::default().without_optimizations()));
    for options in every_path() {
        let got = item_rows(&ds.with_options(options.clone()));
        assert_eq!(got, plain, "{options:?}\n{}", ds.with_options(options.clone()).explain());
    }
    plain
}

#[test]
fn a_field_that_fails_is_evaluated_even_when_a_later_map_drops_it() {
    // `f := case when u != a then u else -1 end` with u: uint8 was an error where u == a as
    // written (-1 cast to uint8) and, optimized, not computed at all once a later map
    // dropped `f`. A literal that cannot hold the type it is cast to is now refused when the
    // map is built, as in a binary operation (and as TensorFlow refuses converting -1 to
    // uint8).
    let u = || Arc::new(UInt8Array::from(vec![1, 2, 3, 4])) as ArrayRef;
    let a = || Arc::new(UInt8Array::from(vec![1, 0, 3, 0])) as ArrayRef;
    let source = || Dataset::from_arrays([("u", u()), ("a", a())]).expect("arrays");
    let minus_one = when(col("u").not_eq(col("a")), col("u")).otherwise(lit(-1i64)).unwrap();
    let refused = source().map(MapFunction::with_fields([("f", minus_one)])).map(|_| ()).unwrap_err();
    assert!(refused.to_string().contains("does not fit in uint8"), "{refused}");
    // A value that is not a literal fails where it does not fit, and that failure is the
    // element's whether a later map reads `f` or not: `cast(-1.0 as int64)` in uint8.
    let not_literal = when(col("u").not_eq(col("a")), col("u")).otherwise(cast(lit(-1.0), DataType::Int64)).unwrap();
    let ds = source()
        .map(MapFunction::with_fields([("f", not_literal)]))
        .and_then(|d| d.map(MapFunction::select([("u", col("u"))])))
        .expect("pipeline");
    assert_eq!(rows_on_every_path(&ds), ["Err", "u: 2", "Err", "u: 4"]);
    // So does a column cast to a common type: a uint64 compared with an int64 is compared
    // as int64, which u64::MAX is not.
    let big = Arc::new(arrow::array::UInt64Array::from(vec![1, u64::MAX, 3])) as ArrayRef;
    let small = Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef;
    let ds = Dataset::from_arrays([("big", big), ("small", small)])
        .and_then(|d| d.map(MapFunction::with_fields([("same", col("big").eq(col("small")))])))
        .and_then(|d| d.map(MapFunction::select([("small", col("small"))])))
        .expect("pipeline");
    assert_eq!(rows_on_every_path(&ds), ["small: 1", "Err", "small: 3"]);
}

#[test]
fn grouping_by_a_constant_key_needs_no_scalar_field() {
    // tf.data: from_tensor_slices({"t": [[1, 2], [3, 4], [5, 6]]}).group_by_window(
    //   lambda x: 0, lambda k, w: w.batch(2), 2) -> [[1, 2], [3, 4]], [[5, 6]]
    let pairs = || {
        let values = Int64Array::from(vec![1, 2, 3, 4, 5, 6]);
        let item = Arc::new(arrow::datatypes::Field::new("item", DataType::Int64, true));
        let t = arrow::array::FixedSizeListArray::new(item, 2, Arc::new(values), None);
        Dataset::from_arrays([("value", Arc::new(t) as ArrayRef)]).expect("pairs")
    };
    let grouped = pairs().group_by_window(lit(0i64), 2).expect("group");
    assert_eq!(rows_on_every_path(&grouped), ["value: [1, 2] | [3, 4]", "value: [5, 6]"]);
    // bucket_by_sequence_length with a constant length: one bucket.
    let bucketed =
        pairs().bucket_by_sequence_length(lit(1i64), vec![5], vec![2, 2], BucketOptions::default()).expect("bucket");
    assert_eq!(rows_on_every_path(&bucketed), ["value: [1, 2] | [3, 4]", "value: [5, 6]"]);
}

#[test]
fn unbatch_after_a_padded_batch_of_batches() {
    // tf.data: from_tensor_slices({"a": [1, 2, 3], "b": [4, 5, 6]}).batch(2)
    //   .padded_batch(1, padded_shapes={"a": [None], "b": [4]}).unbatch()
    //   -> {a: [1, 2], b: [4, 5, 0, 0]}, {a: [3], b: [6, 0, 0, 0]}
    let a = Int64Array::from(vec![1, 2, 3]);
    let b = Int64Array::from(vec![4, 5, 6]);
    let options = PaddedBatchOptions {
        padded_shapes: [("b".to_string(), vec![4])].into_iter().collect(),
        ..PaddedBatchOptions::default()
    };
    let ds = Dataset::from_arrays([("a", Arc::new(a) as ArrayRef), ("b", Arc::new(b) as ArrayRef)])
        .and_then(|d| d.batch(2))
        .and_then(|d| d.padded_batch(1, options))
        .and_then(|d| d.unbatch())
        .expect("pipeline");
    assert_eq!(rows_on_every_path(&ds), ["a: [1, 2], b: [4, 5, 0, 0]", "a: [3], b: [6, 0, 0, 0]"]);
}

#[test]
fn concatenate_matches_fields_by_name() {
    // tf.data: from_tensors({"x": 1, "y": 2.0}).concatenate(from_tensors({"y": 3.0, "x": 4}))
    //   -> {x: 1, y: 2.0}, {x: 4, y: 3.0}, in the first dataset's field order.
    let first = Dataset::from_arrays([
        ("x", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
        ("y", Arc::new(Float64Array::from(vec![2.0])) as ArrayRef),
    ])
    .expect("first");
    let second = Dataset::from_arrays([
        ("y", Arc::new(Float64Array::from(vec![3.0])) as ArrayRef),
        ("x", Arc::new(Int64Array::from(vec![4])) as ArrayRef),
    ])
    .expect("second");
    let both = first.concatenate(&second).expect("concatenate by name");
    assert_eq!(rows_on_every_path(&both), ["x: 1, y: 2.0", "x: 4, y: 3.0"]);
    // Fields that differ in name are still refused, naming them.
    let other = Dataset::range(0, 2).expect("range");
    let refused = first.concatenate(&other).map(|_| ()).unwrap_err().to_string();
    assert!(refused.contains("'x'") && refused.contains("value"), "{refused}");
    // tf.data concatenates range(2) with range(3).batch(2) into elements of unknown rank (0,
    // 1, [0, 1], [2]); flumen's elements have ranks, so that is refused when the pipeline is
    // built, saying what to do instead.
    let batched = Dataset::range(0, 3).and_then(|d| d.batch(2)).expect("batched");
    let refused = other.concatenate(&batched).map(|_| ()).unwrap_err().to_string();
    assert!(refused.contains("unknown rank") && refused.contains("int64[?]"), "{refused}");
}

/// A generator of one dense int64 field `x` of unknown length: the elements `rows`.
fn lists(rows: Vec<Vec<i64>>) -> Dataset {
    let spec =
        ElementSpec::new(vec![FieldSpec { kind: FieldKind::Dense, ..FieldSpec::ragged("x", DType::Int64, vec![-1]) }])
            .expect("spec");
    let schema = spec.arrow_schema();
    Dataset::from_generator(Some("lists"), spec, move || {
        let schema = schema.clone();
        let rows = rows.clone();
        let column = arrow::array::ListArray::from_iter_primitive::<arrow::datatypes::Int64Type, _, _>(
            rows.into_iter().map(|r| Some(r.into_iter().map(Some))),
        );
        let chunk = arrow::record_batch::RecordBatch::try_new(schema, vec![Arc::new(column) as ArrayRef]);
        Box::new(std::iter::once(chunk.map_err(Into::into)))
    })
    .expect("generator")
}

#[test]
fn batching_elements_of_other_shapes_is_an_error_and_ragged_batch_batches_them() {
    // tf.data: from_generator(lambda: iter([[1, 2], [3, 4], [5], [6, 7, 8]]), output_shapes
    // [None]).batch(2): [[1, 2], [3, 4]], then "Cannot batch tensors with different shapes"
    // for [5] and [6, 7, 8]; ragged_batch(2) gives both batches, the second ragged.
    let ds = lists(vec![vec![1, 2], vec![3, 4], vec![5], vec![6, 7, 8]]);
    let batched = ds.batch(2).expect("batch");
    let items: Vec<Result<String, String>> = batched
        .iter_chunks()
        .map(|c| c.map(|c| format!("{:?}", c.column(0).as_list::<i32>().value(0))).map_err(|e| e.to_string()))
        .collect();
    assert_eq!(items.len(), 2, "{items:?}");
    assert!(items[0].is_ok(), "{items:?}");
    let error = items[1].as_ref().unwrap_err();
    assert!(error.contains("Cannot batch tensors with different shapes in field 'x'"), "{error}");
    assert!(error.contains("[1]") && error.contains("[3]"), "{error}");
    assert!(batched.explain().contains("each batch's x of one shape"), "{}", batched.explain());
    // The same in every batching operator that makes batches of elements.
    for (what, ds) in [
        ("window", ds.window(2, 2, 1, false).expect("window")),
        ("rebatch", ds.batch(1).and_then(|d| d.rebatch(2, false)).expect("rebatch")),
        (
            "parallel batch",
            ds.batch_parallel(2, false, Parallel { num_parallel_calls: Tunable::Fixed(2), deterministic: None })
                .expect("batch"),
        ),
    ] {
        let outcomes: Vec<bool> = ds.iter_chunks().map(|c| c.is_ok()).collect();
        assert_eq!(outcomes, [true, false], "{what}");
    }
    let ragged = ds.ragged_batch(2, false).expect("ragged_batch");
    assert_eq!(ragged.element_spec().to_string(), "{x: ragged int64[?, ?]}");
    let rows: Vec<String> = item_rows(&ragged);
    assert_eq!(rows, ["x: [1, 2] | [3, 4]", "x: [5] | [6, 7, 8]"]);
}
