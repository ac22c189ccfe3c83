//! Fused expression kernels against Arrow's compute kernels composing the same expression
//! (flumen's Arrow evaluation) and against a hand-written scalar Rust loop.
//!
//! Each case evaluates one expression over a chunk of `ROWS` rows; criterion reports time
//! per chunk and rows/s. The ways compute the same values (checked before timing). The
//! kernels run as native code (`kernel::native`); `fused kernel, interpreted` is the same
//! program by the tile interpreter.
//!
//! - `w4 map`: `v*v + 1` with `v = sqrt(f64(x)*3 + 1) * 0.5`, as map fusion writes w4's
//!   three maps (7 operations once common sub-expressions are shared; the Arrow evaluation
//!   computes `v` twice).
//! - `w4 integer map`: `f64(x*3 + 1)` over int64, w4's first map as the workload writes it;
//!   its checked integer arithmetic, a lane at a time with the overflow flag.
//! - `affine`: `(a*2.5 + b) / (a - 1.5)`, 4 operations over two float64 columns.
//! - `w4 filter`: `floor(v) % 3 != 0` over a float64 column, 3 operations to a mask. Also
//!   against the loop a single-purpose program writes knowing `floor(v)` is a whole number
//!   (the remainder as `f - 3·floor(f/3)`, exact there, without libm's fmod).
//! - `w4 stage`: w4's whole `map → filter → map` over int64 `x`, as one selecting kernel
//!   (`kernel::chain`) against the links run one after another (the stage before it) and
//!   the hand-written loop.
//! - `w2 scale`: w2's `features * weight` over 8,192 elements, a float32[64] tensor times a
//!   per-element scalar: the fused map reads `weight` once per element (flattened tensors,
//!   the scalar repeated per tile), the Arrow evaluation repeats it into a column first.
//! - `w2 filter then scale`: the same map over the 80% of the rows a filter keeps, reading
//!   them through the filter's selection (`FusedMap::evaluate_selected`) against filtering a
//!   copy of the chunk first and mapping that.

use std::hint::black_box;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, BooleanArray, FixedSizeListArray, Float32Array, Float64Array, Int64Array};
use arrow::datatypes::{DataType, Field, Float32Type, Float64Type, Schema};
use arrow::record_batch::RecordBatch;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use flumen::prelude::*;
use flumen_ir::{Expr, NamedExpr};
use flumen_udf::eval::{evaluate, evaluate_map, evaluate_predicate};
use flumen_udf::kernel::chain::{FusedChain, Link};
use flumen_udf::kernel::{FusedMap, FusedPredicate, Kernel};

const ROWS: usize = 1 << 16;

/// The IR of `e`, typed over `chunk` (literals adopting their column's type).
fn ir(e: datafusion_expr::Expr, chunk: &RecordBatch) -> Expr {
    let spec = flumen_ir::ElementSpec::from_arrow_schema(&chunk.schema()).expect("a spec");
    let e = flumen_udf::lower(&e).expect("lowers");
    e.data_type(&spec).expect("types");
    e
}

fn chunk() -> RecordBatch {
    let x = Int64Array::from_iter_values(0..ROWS as i64);
    let a = Float64Array::from_iter_values((0..ROWS).map(|i| i as f64 * 0.37 - 900.0));
    let b = Float64Array::from_iter_values((0..ROWS).map(|i| (i % 97) as f64 * 1.5));
    let v = Float64Array::from_iter_values((0..ROWS).map(|i| ((i * 3 + 1) as f64).sqrt() * 0.5));
    let columns: Vec<(&str, ArrayRef)> =
        vec![("x", Arc::new(x)), ("a", Arc::new(a)), ("b", Arc::new(b)), ("v", Arc::new(v))];
    RecordBatch::try_from_iter(columns).expect("a chunk")
}

fn floats(a: &ArrayRef) -> &[f64] {
    a.as_primitive::<Float64Type>().values()
}

fn w4_map_by_hand(x: &[i64]) -> Vec<f64> {
    x.iter()
        .map(|x| {
            let v = ((*x as f64) * 3.0 + 1.0).sqrt() * 0.5;
            v * v + 1.0
        })
        .collect()
}

fn affine_by_hand(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(a, b)| (a * 2.5 + b) / (a - 1.5)).collect()
}

fn w4_filter_by_hand(v: &[f64]) -> BooleanArray {
    v.iter().map(|v| Some(v.floor() % 3.0 != 0.0)).collect()
}

/// [`w4_filter_by_hand`] as one writes it knowing `floor(v)` is a whole number below 2^51:
/// `f - 3·floor(f/3)` is then fmod's value exactly, without the library call.
fn w4_filter_by_hand_without_fmod(v: &[f64]) -> BooleanArray {
    v.iter()
        .map(|v| {
            let f = v.floor();
            Some(f - 3.0 * (f / 3.0).floor() != 0.0)
        })
        .collect()
}

fn compare_values(c: &mut Criterion, name: &str, expr: &Expr, chunk: &RecordBatch, hand: impl Fn() -> Vec<f64>) {
    let kernel = Kernel::compile(&[expr], &chunk.schema()).expect("compiles");
    let interpreted = Kernel::interpreted(&[expr], &chunk.schema()).expect("compiles");
    let fused = kernel.run(chunk).expect("runs");
    let arrow = evaluate(expr, chunk).expect("evaluates");
    assert!(kernel.is_native(), "{name} runs as native code");
    assert_eq!(floats(&fused[0]), floats(&arrow));
    assert_eq!(floats(&fused[0]), hand().as_slice());
    assert_eq!(floats(&interpreted.run(chunk).expect("runs")[0]), hand().as_slice());
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(ROWS as u64));
    g.bench_function("fused kernel", |b| b.iter(|| black_box(kernel.run(chunk))));
    g.bench_function("fused kernel, interpreted", |b| b.iter(|| black_box(interpreted.run(chunk))));
    g.bench_function("composed arrow kernels", |b| b.iter(|| black_box(evaluate(expr, chunk))));
    g.bench_function("hand-written loop", |b| b.iter(|| black_box(hand())));
    g.finish();
}

fn benches(c: &mut Criterion) {
    let chunk = chunk();
    let v = sqrt(cast(col("x"), DataType::Float64) * lit(3.0) + lit(1.0)) * lit(0.5);
    let w4_map = ir(v.clone() * v + lit(1.0), &chunk);
    let x = chunk.column(0).as_primitive::<arrow::datatypes::Int64Type>().values().to_vec();
    compare_values(c, "w4 map", &w4_map, &chunk, || w4_map_by_hand(&x));

    // w4's first map as the workload writes it: checked int64 arithmetic.
    let int_map = ir(cast(col("x") * lit(3i64) + lit(1i64), DataType::Float64), &chunk);
    let kernel = Kernel::compile(&[&int_map], &chunk.schema()).expect("compiles");
    let interpreted = Kernel::interpreted(&[&int_map], &chunk.schema()).expect("compiles");
    assert!(kernel.is_native(), "checked integer arithmetic by constants runs as native code");
    let by_hand = || -> Vec<f64> {
        x.iter().map(|x| x.checked_mul(3).and_then(|y| y.checked_add(1)).expect("fits") as f64).collect()
    };
    assert_eq!(floats(&kernel.run(&chunk).expect("runs")[0]), by_hand().as_slice());
    assert_eq!(floats(&interpreted.run(&chunk).expect("runs")[0]), by_hand().as_slice());
    assert_eq!(floats(&evaluate(&int_map, &chunk).expect("evaluates")), by_hand().as_slice());
    let mut g = c.benchmark_group("w4 integer map");
    g.throughput(Throughput::Elements(ROWS as u64));
    g.bench_function("fused kernel", |b| b.iter(|| black_box(kernel.run(&chunk))));
    g.bench_function("fused kernel, interpreted", |b| b.iter(|| black_box(interpreted.run(&chunk))));
    g.bench_function("composed arrow kernels", |b| b.iter(|| black_box(evaluate(&int_map, &chunk))));
    g.bench_function("hand-written loop", |b| b.iter(|| black_box(by_hand())));
    g.finish();

    let affine = ir((col("a") * lit(2.5) + col("b")) / (col("a") - lit(1.5)), &chunk);
    let (a, b) = (floats(chunk.column(1)).to_vec(), floats(chunk.column(2)).to_vec());
    compare_values(c, "affine", &affine, &chunk, || affine_by_hand(&a, &b));

    let filter = ir((floor(col("v")) % lit(3.0)).not_eq(lit(0.0)), &chunk);
    assert!(Kernel::compile(&[&filter], &chunk.schema()).expect("compiles").is_native());
    let predicate = FusedPredicate::new(filter.clone());
    let v = floats(chunk.column(3)).to_vec();
    assert_eq!(predicate.evaluate(&chunk).expect("runs"), w4_filter_by_hand(&v));
    assert_eq!(evaluate_predicate(&filter, &chunk).expect("runs"), w4_filter_by_hand(&v));
    assert_eq!(w4_filter_by_hand_without_fmod(&v), w4_filter_by_hand(&v));
    let mut g = c.benchmark_group("w4 filter");
    g.throughput(Throughput::Elements(ROWS as u64));
    g.bench_function("fused kernel", |b| b.iter(|| black_box(predicate.evaluate(&chunk))));
    g.bench_function("composed arrow kernels", |b| b.iter(|| black_box(evaluate_predicate(&filter, &chunk))));
    g.bench_function("hand-written loop", |b| b.iter(|| black_box(w4_filter_by_hand(&v))));
    g.bench_function("hand-written loop without fmod", |b| b.iter(|| black_box(w4_filter_by_hand_without_fmod(&v))));
    g.finish();
    w4_stage(c, &chunk);
}

/// w4's stage as its loop: `v = sqrt(f64(x*3 + 1))·0.5`, keeping `floor(v) mod 3 ≠ 0`,
/// giving `v·v + 1`; as the limit program computes it.
fn w4_stage_by_hand(x: &[i64]) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for x in x {
        let v = ((x.checked_mul(3).and_then(|y| y.checked_add(1)).expect("fits")) as f64).sqrt() * 0.5;
        let f = v.floor();
        if f - 3.0 * (f / 3.0).floor() != 0.0 {
            out.push(v * v + 1.0);
        }
    }
    out
}

/// `w4 stage`: w4's `map → filter → map` as the optimizer leaves it (the first map, then a
/// filter and a map with the middle map inlined into both), over the `x` column: one
/// selecting kernel ([`FusedChain`]) against the links one after another (a map kernel, a
/// predicate kernel, Arrow's filter, a map kernel, as the stage ran them before) and the
/// hand-written loop.
fn w4_stage(c: &mut Criterion, chunk: &RecordBatch) {
    let input = chunk.project(&[0]).expect("x");
    let x = input.column(0).as_primitive::<arrow::datatypes::Int64Type>().values().to_vec();
    let v_schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Float64, false)]));
    let first = ir(cast(col("x") * lit(3i64) + lit(1i64), DataType::Float64), &input);
    let v = sqrt(col("v")) * lit(0.5);
    let v_chunk = RecordBatch::try_new(v_schema.clone(), vec![Arc::new(Float64Array::from(vec![0.0]))]).expect("v");
    let keep = ir((floor(v.clone()) % lit(3.0)).not_eq(lit(0.0)), &v_chunk);
    let last = ir(v.clone() * v + lit(1.0), &v_chunk);
    let map = |expr: &Expr| Link::Map {
        outputs: vec![NamedExpr { name: "v".into(), expr: expr.clone() }],
        keep_input: false,
        schema: v_schema.clone(),
    };
    let links = [map(&first), Link::Filter { predicate: keep.clone() }, map(&last)];
    let chain = FusedChain::new(&input.schema(), &links).expect("composes");
    let named = |expr: &Expr| vec![NamedExpr { name: "v".into(), expr: expr.clone() }];
    let (first_map, last_map) =
        (FusedMap::new(named(&first), false, v_schema.clone()), FusedMap::new(named(&last), false, v_schema.clone()));
    let predicate = FusedPredicate::new(keep);
    let one_by_one = || -> RecordBatch {
        let v = first_map.evaluate(&input).expect("maps");
        let kept = arrow::compute::filter_record_batch(&v, &predicate.evaluate(&v).expect("keeps")).expect("filters");
        last_map.evaluate(&kept).expect("maps")
    };
    let fused = chain.evaluate(&input).expect("runs as one selecting kernel");
    assert_eq!(floats(fused.column(0)), w4_stage_by_hand(&x).as_slice());
    assert_eq!(floats(one_by_one().column(0)), w4_stage_by_hand(&x).as_slice());
    let mut g = c.benchmark_group("w4 stage");
    g.throughput(Throughput::Elements(ROWS as u64));
    g.bench_function("one selecting kernel", |b| b.iter(|| black_box(chain.evaluate(&input))));
    g.bench_function("links one by one", |b| b.iter(|| black_box(one_by_one())));
    g.bench_function("hand-written loop", |b| b.iter(|| black_box(w4_stage_by_hand(&x))));
    g.finish();
}

/// 8,192 elements of `features` float32[64] and `weight` float32.
fn w2_chunk() -> RecordBatch {
    let spec = ElementSpec::new(vec![
        FieldSpec::tensor("features", DType::Float32, vec![64]),
        FieldSpec::scalar("weight", DType::Float32),
    ])
    .expect("a spec");
    let schema = spec.arrow_schema();
    let DataType::FixedSizeList(item, 64) = schema.field(0).data_type() else { unreachable!("a [64] tensor") };
    let values = Float32Array::from_iter_values((0..W2_ROWS * 64).map(|i| (i % 1000) as f32 * 0.001 - 0.5));
    let features = FixedSizeListArray::new(item.clone(), 64, Arc::new(values), None);
    let weight = Float32Array::from_iter_values((0..W2_ROWS).map(|r| 0.5 + (r % 100) as f32 * 0.01));
    RecordBatch::try_new(schema, vec![Arc::new(features), Arc::new(weight)]).expect("a chunk")
}

const W2_ROWS: usize = 8192;

fn w2_scale_by_hand(chunk: &RecordBatch) -> Vec<f32> {
    let features = chunk.column(0).as_fixed_size_list().values().as_primitive::<Float32Type>().values();
    let weight = chunk.column(1).as_primitive::<Float32Type>().values();
    let mut out = Vec::with_capacity(features.len());
    for (row, w) in features.chunks_exact(64).zip(weight) {
        out.extend(row.iter().map(|f| f * w));
    }
    out
}

fn w2_bench(c: &mut Criterion) {
    let chunk = w2_chunk();
    let spec = flumen_ir::ElementSpec::from_arrow_schema(&chunk.schema()).expect("a spec");
    let expr = flumen_udf::lower(&(col("features") * col("weight"))).expect("lowers");
    expr.value_type(&spec).expect("a [64] tensor");
    let outputs = vec![NamedExpr { name: "features".into(), expr }];
    let out =
        ElementSpec::new(vec![FieldSpec::tensor("features", DType::Float32, vec![64])]).expect("a spec").arrow_schema();
    let fused = FusedMap::new(outputs.clone(), false, out.clone());
    let values =
        |b: &RecordBatch| b.column(0).as_fixed_size_list().values().as_primitive::<Float32Type>().values().to_vec();
    assert_eq!(values(&fused.evaluate(&chunk).expect("runs")), w2_scale_by_hand(&chunk));
    assert_eq!(values(&evaluate_map(&outputs, false, &chunk, &out).expect("runs")), w2_scale_by_hand(&chunk));
    let mut g = c.benchmark_group("w2 scale");
    g.throughput(Throughput::Elements((W2_ROWS * 64) as u64));
    g.bench_function("fused kernel", |b| b.iter(|| black_box(fused.evaluate(&chunk))));
    g.bench_function("composed arrow kernels", |b| b.iter(|| black_box(evaluate_map(&outputs, false, &chunk, &out))));
    g.bench_function("hand-written loop", |b| b.iter(|| black_box(w2_scale_by_hand(&chunk))));
    g.finish();

    // w2's filter below the map: 80% of the rows kept in short runs, as `label < 8` keeps
    // them. The selection read in place against filtering first and mapping the copy.
    let mask: BooleanArray = (0..W2_ROWS).map(|r| Some((r * 7919) % 10 < 8)).collect();
    let filter_first = || fused.evaluate(&arrow::compute::filter_record_batch(&chunk, &mask).expect("filters"));
    assert_eq!(fused.evaluate_selected(&chunk, &mask).expect("runs"), filter_first().expect("runs"));
    let mut g = c.benchmark_group("w2 filter then scale");
    g.throughput(Throughput::Elements((W2_ROWS * 64) as u64));
    g.bench_function("selection read in place", |b| b.iter(|| black_box(fused.evaluate_selected(&chunk, &mask))));
    g.bench_function("filtered copy, then map", |b| b.iter(|| black_box(filter_first())));
    g.finish();
}

criterion_group!(kernels, benches, w2_bench);
criterion_main!(kernels);
