//! Chains of maps and filters fused into one selecting kernel, against the chain run link
//! by link with the Arrow evaluation: the same rows and values where the kernel computes a
//! chunk, and the chunk handed back (`None`) wherever it cannot give exactly those.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Float64Array, Int64Array, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use flumen_ir::{BinaryOp, DType, Expr, Func, NamedExpr, Result, Scalar};
use flumen_udf::eval::{evaluate_map, evaluate_predicate};
use flumen_udf::kernel::chain::{FusedChain, Link};

fn schema(fields: &[(&str, DataType)]) -> SchemaRef {
    Arc::new(Schema::new(fields.iter().map(|(n, t)| Field::new(*n, t.clone(), true)).collect::<Vec<_>>()))
}

fn float(v: f64) -> Expr {
    Expr::Literal(Scalar::Float(v, DType::Float64))
}

fn int(v: i64) -> Expr {
    Expr::Literal(Scalar::Int(v, DType::Int64))
}

fn call(func: Func, arg: Expr) -> Expr {
    Expr::Call { func, args: vec![arg] }
}

fn map(outputs: Vec<(&str, Expr)>, keep_input: bool, schema: SchemaRef) -> Link {
    let outputs = outputs.into_iter().map(|(name, expr)| NamedExpr { name: name.into(), expr }).collect();
    Link::Map { outputs, keep_input, schema }
}

/// The chain run link by link, as the runtime's operators run it.
fn one_by_one(links: &[Link], chunk: &RecordBatch) -> Result<RecordBatch> {
    let mut current = chunk.clone();
    for link in links {
        current = match link {
            Link::Map { outputs, keep_input, schema } => evaluate_map(outputs, *keep_input, &current, schema)?,
            Link::Filter { predicate } => {
                filter_record_batch(&current, &evaluate_predicate(predicate, &current)?).unwrap()
            }
        };
    }
    Ok(current)
}

/// w4's chain: `v = f64(value * 3 + 1)`, keep `floor(sqrt(v) / 2) % 3 != 0`, then
/// `v = (sqrt(v) / 2)^2 + 1`.
fn w4() -> (SchemaRef, Vec<Link>) {
    let input = schema(&[("value", DataType::Int64)]);
    let v = schema(&[("v", DataType::Float64)]);
    let scaled = Expr::binary(BinaryOp::Add, Expr::binary(BinaryOp::Mul, Expr::col("value"), int(3)), int(1));
    let half_root = || Expr::binary(BinaryOp::Mul, call(Func::Sqrt, Expr::col("v")), float(0.5));
    let keep = Expr::binary(
        BinaryOp::NotEq,
        Expr::binary(BinaryOp::Mod, call(Func::Floor, half_root()), float(3.0)),
        float(0.0),
    );
    let out = Expr::binary(BinaryOp::Add, Expr::binary(BinaryOp::Mul, half_root(), half_root()), float(1.0));
    let links = vec![
        map(vec![("v", Expr::Cast { arg: Box::new(scaled), to: DType::Float64 })], false, v.clone()),
        Link::Filter { predicate: keep },
        map(vec![("v", out)], false, v),
    ];
    (input, links)
}

#[test]
fn a_fused_chain_equals_its_links_run_one_by_one() {
    let (input, links) = w4();
    let fused = FusedChain::new(&input, &links).expect("w4's chain fuses");
    // w4's values are row numbers (a negative one has a NaN root, which hands the chunk back).
    let values = Int64Array::from_iter_values((0..20_000).map(|i| i * 7));
    let chunk = RecordBatch::try_new(input, vec![Arc::new(values)]).unwrap();
    // Every tail length of the loop's vectors, and chunks that start inside a buffer.
    for (offset, len) in [(0, 0), (0, 1), (1, 2), (5, 3), (3, 17), (0, 64), (11, 8191), (0, 20_000)] {
        let part = chunk.slice(offset, len);
        let expected = one_by_one(&links, &part).unwrap();
        assert!(len < 64 || expected.num_rows() < len, "the filter drops rows");
        assert_eq!(fused.evaluate(&part), Some(expected), "{len} rows from {offset}");
    }
}

/// Maps that keep their input's fields, replace one and add another, and two filters over
/// fields of different maps.
#[test]
fn kept_fields_and_filters_on_several_fields_fuse() {
    let input = schema(&[("a", DataType::Float64), ("n", DataType::Int64)]);
    let widened = schema(&[("a", DataType::Float64), ("n", DataType::Int64), ("b", DataType::Float64)]);
    let links = vec![
        map(vec![("b", Expr::binary(BinaryOp::Mul, Expr::col("a"), float(2.5)))], true, widened.clone()),
        Link::Filter { predicate: Expr::binary(BinaryOp::Gt, Expr::col("b"), float(10.0)) },
        map(vec![("n", Expr::binary(BinaryOp::Sub, Expr::col("n"), int(4)))], true, widened),
        Link::Filter {
            predicate: Expr::binary(BinaryOp::Lt, Expr::col("n"), Expr::binary(BinaryOp::Mul, Expr::col("n"), int(2))),
        },
    ];
    let fused = FusedChain::new(&input, &links).expect("fuses");
    let a = Float64Array::from_iter_values((0..1000).map(|i| f64::from(i % 13) - 2.0));
    let n = Int64Array::from_iter_values((0..1000).map(|i| i % 29 - 14));
    let chunk = RecordBatch::try_new(input, vec![Arc::new(a), Arc::new(n)]).unwrap();
    let expected = one_by_one(&links, &chunk).unwrap();
    assert!(expected.num_rows() > 0 && expected.num_rows() < 1000);
    assert_eq!(fused.evaluate(&chunk), Some(expected));
}

/// The loop computes every row, so an overflow on a row an earlier filter drops, the
/// remainder of a fraction, or a null hands the chunk back, though link by link the chain
/// succeeds.
#[test]
fn chunks_the_loop_cannot_compute_exactly_are_handed_back() {
    let input = schema(&[("x", DataType::Int64)]);
    let out = schema(&[("y", DataType::Int64)]);
    let links = vec![
        Link::Filter { predicate: Expr::binary(BinaryOp::Gt, Expr::col("x"), int(0)) },
        map(vec![("y", Expr::binary(BinaryOp::Mul, Expr::col("x"), int(2)))], false, out),
    ];
    let fused = FusedChain::new(&input, &links).expect("fuses");
    let run = |values: Int64Array| {
        let chunk = RecordBatch::try_new(input.clone(), vec![Arc::new(values) as ArrayRef]).unwrap();
        (fused.evaluate(&chunk), one_by_one(&links, &chunk).unwrap())
    };
    let (got, expected) = run(Int64Array::from(vec![1, -5, 7]));
    assert_eq!(got, Some(expected));
    // i64::MIN is dropped before it is doubled.
    let (got, expected) = run(Int64Array::from(vec![1, i64::MIN, 7]));
    assert_eq!((got, expected.num_rows()), (None, 2));
    let (got, expected) = run(Int64Array::from(vec![Some(1), None, Some(7)]));
    assert_eq!((got, expected.num_rows()), (None, 2));

    let input = schema(&[("v", DataType::Float64)]);
    let links = vec![Link::Filter {
        predicate: Expr::binary(BinaryOp::Eq, Expr::binary(BinaryOp::Mod, Expr::col("v"), float(3.0)), float(1.0)),
    }];
    let fused = FusedChain::new(&input, &links).expect("fuses");
    let chunk =
        |v: Vec<f64>| RecordBatch::try_new(input.clone(), vec![Arc::new(Float64Array::from(v)) as ArrayRef]).unwrap();
    let whole = chunk(vec![1.0, 2.0, 4.0, -2.0]);
    assert_eq!(fused.evaluate(&whole), Some(one_by_one(&links, &whole).unwrap()));
    let fraction = chunk(vec![1.0, 2.5, 4.0]);
    assert_eq!((fused.evaluate(&fraction), one_by_one(&links, &fraction).unwrap().num_rows()), (None, 2));
}

/// A chain fuses only where composing it changes no type: a map whose output the kernel
/// would compute in another type than the map declares, an output of literals only (whose
/// type comes from what it meets), a chain without a filter, and fields kernels do not
/// compute all stay links.
#[test]
fn chains_whose_composition_changes_a_type_stay_links() {
    let input = schema(&[("x", DataType::Int64), ("s", DataType::Utf8)]);
    let floats = schema(&[("y", DataType::Float64)]);
    let keep = Link::Filter { predicate: Expr::binary(BinaryOp::Gt, Expr::col("y"), float(0.0)) };
    let declared_float = map(vec![("y", Expr::binary(BinaryOp::Add, Expr::col("x"), int(1)))], false, floats.clone());
    assert!(FusedChain::new(&input, &[declared_float, keep.clone()]).is_none());
    let literal = map(vec![("y", float(1.0))], false, floats.clone());
    assert!(FusedChain::new(&input, &[literal, keep.clone()]).is_none());
    let cast = map(vec![("y", Expr::Cast { arg: Box::new(Expr::col("x")), to: DType::Float64 })], false, floats);
    assert!(FusedChain::new(&input, std::slice::from_ref(&cast)).is_none(), "no filter");
    let fused = FusedChain::new(&input, &[cast, keep]).expect("fuses");
    // The string field is not read; a kernel over the chunk still computes.
    let chunk = RecordBatch::try_new(
        input,
        vec![Arc::new(Int64Array::from(vec![-1, 2])), Arc::new(arrow::array::StringArray::from(vec!["a", "b"]))],
    )
    .unwrap();
    let out = fused.evaluate(&chunk).expect("computes");
    assert_eq!(out.column(0).as_ref(), &Float64Array::from(vec![2.0]) as &dyn Array);
}
