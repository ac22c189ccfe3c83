//! Native code kept per process (`kernel::code_cache`), alone in its test binary so that no
//! other test's programs fill or empty the cache meanwhile.

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, Float64Array, RecordBatch};
use arrow::datatypes::Float64Type;
use flumen_ir::{BinaryOp, DType, Expr, Scalar};
use flumen_udf::kernel::Kernel;

fn times(k: f64) -> Expr {
    Expr::binary(BinaryOp::Mul, Expr::col("a"), Expr::Literal(Scalar::Float(k, DType::Float64)))
}

/// Kernels of the same program share its native code, compiled once; kernels of programs
/// that differ in anything the code depends on (a constant's bits, selecting or not) each
/// get their own and compute their own values; and past the cache's size the program used
/// least recently is the one recompiled.
#[test]
fn kernels_of_one_program_share_its_code() {
    let a = Float64Array::from_iter_values((0..100).map(|i| f64::from(i) * 0.75 - 20.0));
    let batch = RecordBatch::try_from_iter([("a", Arc::new(a.clone()) as ArrayRef)]).unwrap();
    let schema = batch.schema();
    let compile = |k: f64| Kernel::compile(&[&times(k)], &schema).unwrap();
    let first = compile(2.0);
    assert!(first.is_native());
    assert!(first.shares_code_with(&compile(2.0)));
    for other in [compile(-0.0), compile(0.0), compile(3.0)] {
        assert!(!first.shares_code_with(&other));
    }
    assert!(!compile(0.0).shares_code_with(&compile(-0.0)));
    let keep = Expr::binary(BinaryOp::Gt, Expr::col("a"), Expr::Literal(Scalar::Float(0.0, DType::Float64)));
    let selecting = Kernel::compile_selecting(&[&keep, &times(2.0)], &schema).unwrap();
    assert!(!selecting.shares_code_with(&Kernel::compile(&[&keep, &times(2.0)], &schema).unwrap()));
    for k in [2.0, 3.0, -0.0] {
        let out = compile(k).run(&batch).unwrap();
        let expected: Vec<f64> = a.values().iter().map(|a| a * k).collect();
        assert_eq!(out[0].as_primitive::<Float64Type>().values().to_vec(), expected, "a * {k}");
    }
    // 2.0's kernel stays in use while 100 other programs are compiled once each: it is
    // kept, and the first of the others is not.
    let first_other = compile(1000.0);
    for k in 1001..1100 {
        compile(f64::from(k));
        assert!(first.shares_code_with(&compile(2.0)));
    }
    assert!(!first_other.shares_code_with(&compile(1000.0)));
}
