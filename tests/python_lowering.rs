//! The plans the Rust builders make for the pipelines `crates/python/tests/test_lowering.py`
//! builds in Python. Both tests compare against the same files in
//! `crates/python/tests/plans/`, so a Python pipeline serializes to exactly the JSON of its
//! Rust counterpart (and gets the same optimizer rewrites and kernels); Python's `%` is
//! `floormod` (the divisor's sign), the Rust `Expr`'s `%` SQL's. `FLUMEN_BLESS=1`
//! rewrites the files from the Rust builders.

use std::path::PathBuf;

use flumen::prelude::*;
use flumen::Result;

/// The pipelines, by file name.
fn pipelines() -> Result<Vec<(&'static str, Dataset)>> {
    let arithmetic = Dataset::range(0, 100)?
        .map(MapFunction::with_fields([("y", col("value") * lit(2i64) + lit(1i64))]))?
        .filter(binary(floormod(col("y"), lit(3i64)), datafusion_expr::Operator::NotEq, lit(0i64)))?
        .batch(32)?;
    let functions = Dataset::range(0, 10)?.map(MapFunction::select([
        ("f", cast(col("value"), arrow::datatypes::DataType::Float32) * lit(0.5f64)),
        ("s", sqrt(abs(col("value")))),
        ("c", when(col("value").gt(lit(5i64)), lit(1i64)).otherwise(lit(0i64)).expect("a case")),
        ("k", clip(col("value"), lit(2i64), lit(7i64))),
        ("b", bucketize(cast(col("value"), arrow::datatypes::DataType::Float64), &[2.0, 4.0])),
        ("o", one_hot(floormod(col("value"), lit(3i64)), 3)),
        ("p", power(col("value"), lit(2i64))),
        ("l", col("value").lt_eq(lit(3i64)).and(col("value").gt_eq(lit(1i64)).or(!col("value").eq(lit(9i64))))),
    ]))?;
    let shuffled =
        Dataset::range(0, 1000)?.shuffle(64, Some(7))?.repeat(Some(2))?.take(100)?.prefetch(Tunable::Autotune)?;
    let examples = Dataset::tfrecord(&["examples.tfrecord"], RecordCompression::None)?
        .map(MapFunction::parse_example(
            "record",
            vec![FeatureSpec::fixed("label", DType::Int64, vec![1]), FeatureSpec::var_len("tokens", DType::Int64)],
        )?)?
        .padded_batch(8, PaddedBatchOptions::default())?;
    Ok(vec![
        ("arithmetic.json", arithmetic),
        ("functions.json", functions),
        ("shuffled.json", shuffled),
        ("examples.json", examples),
    ])
}

fn binary(l: Expr, op: datafusion_expr::Operator, r: Expr) -> Expr {
    datafusion_expr::binary_expr(l, op, r)
}

#[test]
fn the_rust_builders_make_the_plans_the_python_tests_expect() -> Result<()> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crates/python/tests/plans");
    let bless = std::env::var_os("FLUMEN_BLESS").is_some();
    for (name, dataset) in pipelines()? {
        let json = dataset.serialize()?;
        let path = dir.join(name);
        if bless {
            std::fs::create_dir_all(&dir).expect("plans directory");
            std::fs::write(&path, format!("{json}\n")).expect("write plan");
            continue;
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(json.trim_end(), expected.trim_end(), "{name}: the Rust builders' plan differs from the file");
    }
    Ok(())
}
