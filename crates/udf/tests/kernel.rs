//! Fused kernels against the Arrow evaluation: random expressions over random columns
//! (zeros of both signs, NaN, infinities, integer extremes, nulls) must give the same
//! values bit for bit, and a kernel must never succeed where the Arrow evaluation fails.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Float32Array, Float64Array, Int32Array, Int64Array, PrimitiveArray,
};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{ArrowNativeType, ArrowPrimitiveType, DataType, Float32Type, Float64Type, Int32Type, Int64Type};
use arrow::record_batch::RecordBatch;
use flumen_ir::{BinaryOp, DType, ElementSpec, Expr, FieldSpec, Func, NamedExpr, Scalar, UnaryOp};
use flumen_udf::eval::{evaluate, evaluate_map, evaluate_predicate, FlatColumn, Tensors};
use flumen_udf::kernel::{FusedMap, FusedPredicate, Kernel};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A seeded generator (ChaCha8: the same draws on every platform).
struct Rng(ChaCha8Rng);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(ChaCha8Rng::seed_from_u64(seed))
    }

    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len() as u64) as usize]
    }
}

const ROWS: usize = 1200;

fn float(rng: &mut Rng) -> f64 {
    match rng.below(12) {
        0 => 0.0,
        1 => -0.0,
        2 => f64::NAN,
        3 => f64::INFINITY,
        4 => f64::NEG_INFINITY,
        5 => 1e300,
        6 => (rng.below(20) as f64) - 10.0,
        _ => (rng.next() as f64 / u64::MAX as f64 - 0.5) * 200.0,
    }
}

fn int(rng: &mut Rng) -> i64 {
    match rng.below(10) {
        0 => 0,
        1 => i64::MIN,
        2 => i64::MAX,
        3 => -1,
        _ => rng.below(2000) as i64 - 1000,
    }
}

/// Columns a, b (float64), c (float32), i (int64), j (int32), p (bool); with `nulls`, some
/// rows of each are null.
fn chunk(rng: &mut Rng, nulls: bool) -> RecordBatch {
    let valid = |rng: &mut Rng| !nulls || rng.below(7) != 0;
    let a: Float64Array = (0..ROWS).map(|_| valid(rng).then(|| float(rng))).collect();
    let b: Float64Array = (0..ROWS).map(|_| valid(rng).then(|| float(rng))).collect();
    let c: Float32Array = (0..ROWS).map(|_| valid(rng).then(|| float(rng) as f32)).collect();
    let i: Int64Array = (0..ROWS).map(|_| valid(rng).then(|| int(rng))).collect();
    let j: Int32Array = (0..ROWS).map(|_| valid(rng).then(|| int(rng) as i32)).collect();
    let p: BooleanArray = (0..ROWS).map(|_| valid(rng).then(|| rng.below(2) == 0)).collect();
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("a", Arc::new(a)),
        ("b", Arc::new(b)),
        ("c", Arc::new(c)),
        ("i", Arc::new(i)),
        ("j", Arc::new(j)),
        ("p", Arc::new(p)),
    ];
    RecordBatch::try_from_iter(columns).unwrap()
}

fn spec() -> ElementSpec {
    ElementSpec::new(vec![
        FieldSpec::scalar("a", DType::Float64),
        FieldSpec::scalar("b", DType::Float64),
        FieldSpec::scalar("c", DType::Float32),
        FieldSpec::scalar("i", DType::Int64),
        FieldSpec::scalar("j", DType::Int32),
        FieldSpec::scalar("p", DType::Bool),
    ])
    .unwrap()
}

fn numeric(rng: &mut Rng, depth: u32) -> Expr {
    let leaf = depth == 0 || rng.below(4) == 0;
    if leaf {
        return match rng.below(6) {
            0 => Expr::Literal(Scalar::Float(float(rng), DType::Float64)),
            1 => Expr::Literal(Scalar::Int(rng.below(7) as i64 - 3, DType::Int64)),
            _ => Expr::col(rng.pick(&["a", "b", "c", "i", "j"])),
        };
    }
    match rng.below(5) {
        0 | 1 => {
            let op = rng.pick(&[BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Mod]);
            Expr::binary(op, numeric(rng, depth - 1), numeric(rng, depth - 1))
        }
        2 => Expr::Unary { op: UnaryOp::Neg, arg: Box::new(numeric(rng, depth - 1)) },
        3 => {
            let func = rng.pick(&[
                Func::Sqrt,
                Func::Floor,
                Func::Ceil,
                Func::Trunc,
                Func::Round,
                Func::Abs,
                Func::Signum,
                Func::Exp,
                Func::Ln,
                Func::Sin,
                Func::Tanh,
            ]);
            Expr::Call { func, args: vec![numeric(rng, depth - 1)] }
        }
        _ => {
            let to = rng.pick(&[DType::Float64, DType::Float32, DType::Int64, DType::Int32]);
            Expr::Cast { arg: Box::new(numeric(rng, depth - 1)), to }
        }
    }
}

fn boolean(rng: &mut Rng, depth: u32) -> Expr {
    match rng.below(if depth == 0 { 2 } else { 5 }) {
        0 => Expr::col("p"),
        1 => {
            let op =
                rng.pick(&[BinaryOp::Eq, BinaryOp::NotEq, BinaryOp::Lt, BinaryOp::LtEq, BinaryOp::Gt, BinaryOp::GtEq]);
            Expr::binary(op, numeric(rng, depth.min(2)), numeric(rng, depth.min(2)))
        }
        2 => Expr::binary(rng.pick(&[BinaryOp::And, BinaryOp::Or]), boolean(rng, depth - 1), boolean(rng, depth - 1)),
        3 => Expr::Unary { op: UnaryOp::Not, arg: Box::new(boolean(rng, depth - 1)) },
        _ => Expr::Cast { arg: Box::new(numeric(rng, depth - 1)), to: DType::Bool },
    }
}

/// Whether `a` and `b` hold the same values (bits, for floats) wherever `a` is valid, and
/// the same validity (a validity buffer without nulls counting as none).
fn same(a: &ArrayRef, b: &ArrayRef) -> bool {
    if a.data_type() != b.data_type() || a.len() != b.len() || (0..a.len()).any(|i| a.is_valid(i) != b.is_valid(i)) {
        return false;
    }
    let valid = |i: usize| a.is_valid(i);
    let all = |eq: &dyn Fn(usize) -> bool| (0..a.len()).filter(|i| valid(*i)).all(eq);
    match a.data_type() {
        DataType::Float64 => {
            let (x, y) = (a.as_primitive::<Float64Type>(), b.as_primitive::<Float64Type>());
            all(&|i| x.value(i).to_bits() == y.value(i).to_bits() || x.value(i).is_nan() && y.value(i).is_nan())
        }
        DataType::Float32 => {
            let (x, y) = (a.as_primitive::<Float32Type>(), b.as_primitive::<Float32Type>());
            all(&|i| x.value(i).to_bits() == y.value(i).to_bits() || x.value(i).is_nan() && y.value(i).is_nan())
        }
        DataType::Int64 => all(&|i| a.as_primitive::<Int64Type>().value(i) == b.as_primitive::<Int64Type>().value(i)),
        DataType::Int32 => all(&|i| a.as_primitive::<Int32Type>().value(i) == b.as_primitive::<Int32Type>().value(i)),
        DataType::Boolean => all(&|i| a.as_boolean().value(i) == b.as_boolean().value(i)),
        other => panic!("unexpected output type {other}"),
    }
}

#[test]
fn kernels_compute_what_the_arrow_evaluation_computes() {
    let mut rng = Rng::new(7);
    let spec = spec();
    let (mut ran, mut handed_back, mut failed) = (0, 0, 0);
    for case in 0..600 {
        let nulls = case % 3 == 0;
        let batch = chunk(&mut rng, nulls);
        let expr = if case % 2 == 0 { numeric(&mut rng, 4) } else { boolean(&mut rng, 3) };
        if expr.data_type(&spec).is_err() {
            continue;
        }
        let kernel = Kernel::compile(&[&expr], &batch.schema()).unwrap_or_else(|| panic!("{expr} compiles"));
        let arrow = evaluate(&expr, &batch);
        match (kernel.run(&batch), arrow) {
            (Some(values), Ok(expected)) => {
                assert!(same(&values[0], &expected), "{expr}: kernel {:?}\nArrow {:?}", values[0], expected);
                ran += 1;
            }
            (Some(_), Err(e)) => panic!("{expr}: the kernel succeeded where Arrow failed with {e}"),
            (None, Ok(_)) => handed_back += 1,
            (None, Err(_)) => failed += 1,
        }
    }
    // Most expressions run in the kernel; the rest are chunks it rightly hands back (nulls
    // under and/or, overflows met on null rows) or that fail in Arrow too.
    assert!(ran > 300, "ran {ran}, handed back {handed_back}, failing {failed}");
}

#[test]
fn a_failing_chunk_falls_back_to_the_arrow_error() {
    let mut rng = Rng::new(11);
    let batch = chunk(&mut rng, false);
    // i has i64::MIN and i64::MAX rows: doubling overflows.
    let twice = Expr::binary(BinaryOp::Mul, Expr::col("i"), Expr::Literal(Scalar::Int(2, DType::Int64)));
    let outputs = vec![NamedExpr { name: "x".into(), expr: twice }];
    let schema = ElementSpec::new(vec![FieldSpec::scalar("x", DType::Int64)]).unwrap().arrow_schema();
    let fused = FusedMap::new(outputs.clone(), false, schema.clone()).evaluate(&batch).unwrap_err();
    let arrow = evaluate_map(&outputs, false, &batch, &schema).unwrap_err();
    assert_eq!(fused.to_string(), arrow.to_string());
    assert!(fused.to_string().contains("overflow"), "{fused}");
}

#[test]
fn fused_maps_and_predicates_equal_the_arrow_evaluation() {
    let mut rng = Rng::new(3);
    let spec = spec();
    for case in 0..100 {
        let batch = chunk(&mut rng, case % 2 == 0).slice(5, ROWS - 10);
        let x = numeric(&mut rng, 3);
        let keep = case % 3 == 0;
        let Ok(xt) = x.data_type(&spec) else { continue };
        let outputs = vec![
            NamedExpr { name: "x".into(), expr: x.clone() },
            NamedExpr { name: "a".into(), expr: Expr::col("b") },
            NamedExpr { name: "k".into(), expr: Expr::Literal(Scalar::Int(4, DType::Int64)) },
        ];
        let schema = if keep {
            let mut f = vec![];
            for n in ["a", "b", "c", "i", "j", "p"] {
                f.push(if n == "a" { FieldSpec::scalar("a", DType::Float64) } else { spec.field(n).unwrap().clone() });
            }
            f.push(FieldSpec::scalar("x", xt));
            f.push(FieldSpec::scalar("k", DType::Int64));
            ElementSpec::new(f).unwrap().arrow_schema()
        } else {
            let f = vec![
                FieldSpec::scalar("x", xt),
                FieldSpec::scalar("a", DType::Float64),
                FieldSpec::scalar("k", DType::Int64),
            ];
            ElementSpec::new(f).unwrap().arrow_schema()
        };
        let fused = FusedMap::new(outputs.clone(), keep, schema.clone()).evaluate(&batch);
        let arrow = evaluate_map(&outputs, keep, &batch, &schema);
        match (fused, arrow) {
            (Ok(f), Ok(a)) => {
                assert_eq!(f.schema(), a.schema());
                for (x, y) in f.columns().iter().zip(a.columns()) {
                    assert!(same(x, y), "{x:?} vs {y:?}");
                }
            }
            (Err(f), Err(a)) => assert_eq!(f.to_string(), a.to_string()),
            (f, a) => panic!("{x}: fused {f:?}, Arrow {a:?}"),
        }
        let p = boolean(&mut rng, 3);
        if p.data_type(&spec).is_err() {
            continue;
        }
        let fused = FusedPredicate::new(p.clone()).evaluate(&batch);
        let arrow = evaluate_predicate(&p, &batch);
        match (fused, arrow) {
            (Ok(f), Ok(a)) => assert_eq!(f, a, "{p}"),
            (Err(f), Err(a)) => assert_eq!(f.to_string(), a.to_string()),
            (f, a) => panic!("{p}: fused {f:?}, Arrow {a:?}"),
        }
    }
}

/// A chunk of `rows` elements: `t` float32[4, 3], `u` float32[4, 3], `w` float32, `k` int64.
fn tensor_chunk(rows: usize) -> (RecordBatch, ElementSpec) {
    let spec = ElementSpec::new(vec![
        FieldSpec::tensor("t", DType::Float32, vec![4, 3]),
        FieldSpec::tensor("u", DType::Float32, vec![4, 3]),
        FieldSpec::scalar("w", DType::Float32),
        FieldSpec::scalar("k", DType::Int64),
    ])
    .unwrap();
    let schema = spec.arrow_schema();
    let tensor = |f: &dyn Fn(usize) -> f32| {
        let DataType::FixedSizeList(outer, 4) = schema.field(0).data_type() else { unreachable!() };
        let DataType::FixedSizeList(inner, 3) = outer.data_type() else { unreachable!() };
        let values = Arc::new(Float32Array::from_iter_values((0..rows * 12).map(f)));
        let rows3 = arrow::array::FixedSizeListArray::new(inner.clone(), 3, values, None);
        Arc::new(arrow::array::FixedSizeListArray::new(outer.clone(), 4, Arc::new(rows3), None)) as ArrayRef
    };
    let columns = vec![
        tensor(&|i| i as f32 * 0.5 - 7.0),
        tensor(&|i| (i % 5) as f32),
        Arc::new(Float32Array::from_iter_values((0..rows).map(|r| 1.0 + r as f32))) as ArrayRef,
        Arc::new(Int64Array::from_iter_values((0..rows).map(|r| r as i64 * 3))) as ArrayRef,
    ];
    (RecordBatch::try_new(schema, columns).unwrap(), spec)
}

#[test]
fn tensor_outputs_apply_elementwise_with_per_row_scalars_broadcast() {
    // 30 rows are one tile of 360 values; 150 rows, 1800 values in four tiles whose bounds
    // fall inside a row's tensor (512 is no multiple of 12).
    for rows in [30, 150] {
        tensor_output_over(rows);
    }
}

/// `t * w + (u - f32(k))` over a slice of `rows` rows starting at row 7: the fused map, the
/// Arrow evaluation and a loop agree, and the kernel (not the Arrow fallback) computed it,
/// reading the per-row scalars `w` and `k` per row.
fn tensor_output_over(rows: usize) {
    let (whole, spec) = tensor_chunk(rows + 20);
    // A slice, so that the tensors' values start at an offset.
    let batch = whole.slice(7, rows);
    let t = || Expr::col("t");
    let expr = Expr::binary(
        BinaryOp::Add,
        Expr::binary(BinaryOp::Mul, t(), Expr::col("w")),
        Expr::binary(BinaryOp::Sub, Expr::col("u"), Expr::Cast { arg: Box::new(Expr::col("k")), to: DType::Float32 }),
    );
    let (dtype, shape) = expr.value_type(&spec).unwrap();
    assert_eq!((dtype, shape.clone()), (DType::Float32, vec![4, 3]));
    let out = ElementSpec::new(vec![FieldSpec::tensor("y", DType::Float32, shape)]).unwrap().arrow_schema();
    let outputs = vec![NamedExpr { name: "y".into(), expr }];
    let fused = FusedMap::new(outputs.clone(), false, out.clone()).evaluate(&batch).unwrap();
    let arrow = evaluate_map(&outputs, false, &batch, &out).unwrap();
    assert_eq!(fused, arrow);
    let flat = Tensors::flatten(&outputs[0].expr, &batch, 2).unwrap().unwrap();
    assert!(flat.columns().iter().any(|c| matches!(c, FlatColumn::Repeated(_))));
    let kernel = Kernel::compile_flat(&[&outputs[0].expr], &flat).expect("the expression compiles");
    let values = kernel.run_flat(&flat).expect("the kernel runs over repeated scalars");
    let values = flat.wrap(values[0].clone(), &outputs[0].expr).unwrap();
    assert_eq!(&values, fused.column(0));
    // Against a loop over the rows of the slice.
    let y = fused.column(0).as_fixed_size_list();
    for row in 0..rows {
        let r = row + 7;
        let matrix = y.value(row);
        let matrix = matrix.as_fixed_size_list();
        for i in 0..4 {
            let values = matrix.value(i);
            for (j, v) in values.as_primitive::<Float32Type>().values().iter().enumerate() {
                let at = r * 12 + i * 3 + j;
                let want = (at as f32 * 0.5 - 7.0) * (1.0 + r as f32) + ((at % 5) as f32 - (r * 3) as f32);
                assert_eq!(*v, want, "row {row} [{i}, {j}]");
            }
        }
    }
}

/// `and` and `or` are computed by the kernel over a slice whose column has a validity but
/// no null in the slice (the null lies outside it): only an actual null is handed back.
#[test]
fn kleene_operators_run_over_a_slice_without_nulls() {
    let x = Float64Array::from(vec![Some(1.0), Some(-2.0), Some(3.0), None]);
    let batch = RecordBatch::try_from_iter([("x", Arc::new(x) as ArrayRef)]).unwrap();
    let float = |v: f64| Expr::Literal(Scalar::Float(v, DType::Float64));
    let either = Expr::binary(
        BinaryOp::Or,
        Expr::binary(BinaryOp::Gt, Expr::col("x"), float(2.0)),
        Expr::binary(BinaryOp::Lt, Expr::col("x"), float(0.0)),
    );
    let kernel = Kernel::compile(&[&either], &batch.schema()).expect("compiles");
    let part = batch.slice(0, 3);
    assert!(part.column(0).nulls().is_some() && part.column(0).null_count() == 0);
    let values = kernel.run(&part).expect("no null in the slice: the kernel computes it");
    assert_eq!(values[0].as_boolean(), &BooleanArray::from(vec![false, true, true]));
    assert!(same(&values[0], &evaluate(&either, &part).unwrap()));
    assert!(kernel.run(&batch).is_none(), "a null under `or` is handed back");
}

#[test]
fn a_repeated_scalar_with_nulls_is_handed_back_to_arrow() {
    let (batch, _) = tensor_chunk(10);
    let mut columns = batch.columns().to_vec();
    columns[2] = Arc::new(Float32Array::from_iter((0..10).map(|r| (r != 4).then_some(r as f32))));
    let batch = RecordBatch::try_new(batch.schema(), columns).unwrap();
    let expr = Expr::binary(BinaryOp::Mul, Expr::col("t"), Expr::col("w"));
    let flat = Tensors::flatten(&expr, &batch, 2).unwrap().unwrap();
    let kernel = Kernel::compile_flat(&[&expr], &flat).expect("the expression compiles");
    assert!(kernel.is_native());
    assert!(kernel.run_flat(&flat).is_none());
    let out = evaluate(&expr, flat.batch(&expr).unwrap()).unwrap();
    assert_eq!(out.null_count(), 12, "row 4's twelve values");
}

#[test]
fn tensor_expressions_are_typed_by_their_shapes() {
    let (_, spec) = tensor_chunk(1);
    let other = ElementSpec::new(vec![
        FieldSpec::tensor("t", DType::Float32, vec![4, 3]),
        FieldSpec::tensor("v", DType::Float32, vec![12]),
    ])
    .unwrap();
    let mixed = Expr::binary(BinaryOp::Add, Expr::col("t"), Expr::col("v"));
    let err = mixed.value_type(&other).unwrap_err().to_string();
    assert!(err.contains("different shapes"), "{err}");
    // Scalar-only expressions keep an empty shape; plain typing still rejects tensors.
    assert_eq!(Expr::col("w").value_type(&spec).unwrap(), (DType::Float32, vec![]));
    assert!(Expr::col("t").data_type(&spec).is_err());
    let batched = ElementSpec {
        batch_dims: 1,
        ..ElementSpec::new(vec![FieldSpec::tensor("t", DType::Float32, vec![8, 4])]).unwrap()
    };
    let err = Expr::col("t").value_type(&batched).unwrap_err().to_string();
    assert!(err.contains("batched element"), "{err}");
}

/// A map over the rows a mask keeps, its tensor output read through the selection
/// (`evaluate_selected`), equals the Arrow evaluation of the map over the filtered chunk:
/// with the input's fields kept or not, the tensor output replacing its input or beside it,
/// masks keeping runs that cross tiles and tensors, none, all, and with nulls in the mask,
/// over a slice (values at an offset).
#[test]
fn a_map_over_a_selection_equals_the_map_over_the_filtered_chunk() {
    let (whole, spec) = tensor_chunk(260);
    let batch = whole.slice(5, 240);
    let scaled = Expr::binary(
        BinaryOp::Mul,
        Expr::col("t"),
        Expr::binary(BinaryOp::Add, Expr::col("w"), Expr::Literal(Scalar::Float(0.5, DType::Float32))),
    );
    let doubled_k = Expr::binary(BinaryOp::Mul, Expr::col("k"), Expr::Literal(Scalar::Int(2, DType::Int64)));
    let maps: Vec<(Vec<NamedExpr>, bool)> = vec![
        // w2's shape: the tensor replaced, scalars passed through, the input dropped.
        (vec![named("t", scaled.clone()), named("k", Expr::col("k"))], false),
        // The input kept: `t` replaced in its place, a scalar output added.
        (vec![named("t", scaled.clone()), named("k2", doubled_k.clone())], true),
        // A new tensor beside the kept input, and one output that is an input as is.
        (vec![named("y", scaled), named("u", Expr::col("u"))], true),
    ];
    let mut rng = Rng::new(11);
    let masks: Vec<BooleanArray> = vec![
        (0..240).map(|i| Some(i % 7 != 3 && !(40..90).contains(&i))).collect(),
        (0..240).map(|_| Some(rng.below(10) < 8)).collect(),
        (0..240).map(|i| if i % 5 == 0 { None } else { Some(i % 3 != 0) }).collect(),
        (0..240).map(|_| Some(false)).collect(),
        (0..240).map(|_| Some(true)).collect(),
    ];
    for (outputs, keep_input) in &maps {
        let mut fields: Vec<FieldSpec> = if *keep_input { spec.fields.clone() } else { Vec::new() };
        for o in outputs {
            let (dtype, shape) = o.expr.value_type(&spec).unwrap();
            let field = FieldSpec::tensor(o.name.clone(), dtype, shape);
            match fields.iter_mut().find(|f| f.name == o.name) {
                Some(slot) => *slot = field,
                None => fields.push(field),
            }
        }
        let out = ElementSpec::new(fields).unwrap().arrow_schema();
        let map = FusedMap::new(outputs.clone(), *keep_input, out.clone());
        for mask in &masks {
            let filtered = arrow::compute::filter_record_batch(&batch, mask).unwrap();
            let expected = evaluate_map(outputs, *keep_input, &filtered, &out).unwrap();
            let selected = map.evaluate_selected(&batch, mask).unwrap();
            assert_eq!(selected, expected, "{outputs:?} keeping the input: {keep_input}");
        }
    }
}

fn named(name: &str, expr: Expr) -> NamedExpr {
    NamedExpr { name: name.into(), expr }
}

/// The kernel over row runs computes exactly the runs' rows of the kernel over the whole.
#[test]
fn a_kernel_over_row_runs_computes_those_rows() {
    let (batch, _) = tensor_chunk(100);
    let expr = Expr::binary(BinaryOp::Sub, Expr::col("u"), Expr::binary(BinaryOp::Mul, Expr::col("t"), Expr::col("w")));
    let flat = Tensors::flatten(&expr, &batch, 2).unwrap().unwrap();
    let kernel = Kernel::compile_flat(&[&expr], &flat).expect("compiles");
    let all = kernel.run_flat(&flat).unwrap().pop().unwrap();
    let all = all.as_primitive::<Float32Type>().values();
    let runs = [(0, 1), (3, 50), (60, 2), (99, 1)];
    let some = kernel.run_flat_selected(&flat, &runs).unwrap().pop().unwrap();
    let expected: Vec<f32> = runs.iter().flat_map(|(s, n)| all[s * 12..(s + n) * 12].iter().copied()).collect();
    assert_eq!(some.as_primitive::<Float32Type>().values().to_vec(), expected);
    // Native code (reading the per-row scalar once per row) and the interpreter (repeating
    // it into tiles) agree, over the runs and over the whole.
    assert!(kernel.is_native());
    let interpreted = Kernel::interpreted(&[&expr], flat.schema()).expect("compiles");
    let by_tiles = interpreted.run_flat_selected(&flat, &runs).unwrap().pop().unwrap();
    assert_eq!(some.as_primitive::<Float32Type>().values(), by_tiles.as_primitive::<Float32Type>().values());
    let by_tiles = interpreted.run_flat(&flat).unwrap().pop().unwrap();
    assert_eq!(all, by_tiles.as_primitive::<Float32Type>().values());
}

/// A validity buffer without nulls (a reader may give one) is no null: the kernel still
/// reads the selected runs in place, and its outputs have no validity.
#[test]
fn a_validity_without_nulls_keeps_a_kernel_over_row_runs() {
    let (batch, _) = tensor_chunk(40);
    // Arrow drops such a buffer when it builds an array from `ArrayData`, not in `new`.
    let all_valid = |column: &ArrayRef| -> ArrayRef {
        let values = column.as_primitive::<Float32Type>().values().clone();
        let array = Float32Array::new(values, Some(NullBuffer::new_valid(column.len())));
        assert!(array.nulls().is_some());
        Arc::new(array)
    };
    // Each tensor's values and the per-row scalar carry a validity of all ones.
    let tensor = |c: usize| -> ArrayRef {
        let rows = batch.column(c).as_fixed_size_list();
        let cells = rows.values().as_fixed_size_list();
        let DataType::FixedSizeList(inner, 3) = rows.value_type() else { unreachable!() };
        let cells = arrow::array::FixedSizeListArray::new(inner, 3, all_valid(cells.values()), None);
        let DataType::FixedSizeList(outer, 4) = batch.schema().field(c).data_type().clone() else { unreachable!() };
        Arc::new(arrow::array::FixedSizeListArray::new(outer, 4, Arc::new(cells), None))
    };
    let columns = vec![tensor(0), tensor(1), all_valid(batch.column(2)), batch.column(3).clone()];
    let valid = RecordBatch::try_new(batch.schema(), columns).unwrap();
    let expr = Expr::binary(BinaryOp::Sub, Expr::col("u"), Expr::binary(BinaryOp::Mul, Expr::col("t"), Expr::col("w")));
    let runs = [(0, 1), (3, 20), (39, 1)];
    let over = |batch: &RecordBatch| {
        let flat = Tensors::flatten(&expr, batch, 2).unwrap().unwrap();
        let kernel = Kernel::compile_flat(&[&expr], &flat).expect("compiles");
        kernel.run_flat_selected(&flat, &runs).map(|mut out| out.pop().unwrap())
    };
    let plain = over(&batch).expect("runs in place");
    let some = over(&valid).expect("a validity without nulls runs in place too");
    assert_eq!(some.null_count(), 0);
    assert!(some.nulls().is_none());
    assert_eq!(some.as_primitive::<Float32Type>().values(), plain.as_primitive::<Float32Type>().values());
}

/// The types of a native program's values: its floats, and the integers of their width.
#[derive(Clone, Copy)]
struct Width {
    floats: &'static [&'static str],
    float: DType,
    int_column: &'static str,
    int: DType,
}

const WIDE: Width = Width { floats: &["a", "b"], float: DType::Float64, int_column: "i", int: DType::Int64 };
const NARROW: Width = Width { floats: &["c"], float: DType::Float32, int_column: "j", int: DType::Int32 };

/// An expression of only the operations native code compiles (see `kernel::native`): float
/// arithmetic and functions, a remainder by a whole constant, integer arithmetic cast to
/// float, all of `w`'s width.
fn native_numeric(rng: &mut Rng, depth: u32, w: Width) -> Expr {
    if depth == 0 || rng.below(4) == 0 {
        return match rng.below(5) {
            0 => Expr::Literal(Scalar::Float(literal(rng, w.float), w.float)),
            1 => Expr::Cast { arg: Box::new(native_int(rng, 2, w)), to: w.float },
            _ => Expr::col(rng.pick(w.floats)),
        };
    }
    let arg = |rng: &mut Rng| native_numeric(rng, depth - 1, w);
    match rng.below(5) {
        0 | 1 => {
            let op = rng.pick(&[BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div]);
            Expr::binary(op, arg(rng), arg(rng))
        }
        2 => Expr::Unary { op: UnaryOp::Neg, arg: Box::new(arg(rng)) },
        3 => {
            let func = rng.pick(&[Func::Sqrt, Func::Floor, Func::Ceil, Func::Trunc, Func::Abs]);
            Expr::Call { func, args: vec![arg(rng)] }
        }
        _ => {
            // Whole dividends (after floor) are computed natively, others handed back.
            let whole = Expr::Call { func: Func::Floor, args: vec![arg(rng)] };
            let k = rng.pick(&[3.0, -7.0, 1.0, 1e6]);
            Expr::binary(BinaryOp::Mod, whole, Expr::Literal(Scalar::Float(k, w.float)))
        }
    }
}

/// Integer `+`, `-` and `*` over `w`'s integer column (int32 multiplied by constants only).
fn native_int(rng: &mut Rng, depth: u32, w: Width) -> Expr {
    let literal = |rng: &mut Rng| {
        let v = int(rng);
        Expr::Literal(Scalar::Int(if w.int == DType::Int32 { i64::from(v as i32) } else { v }, w.int))
    };
    if depth == 0 || rng.below(3) == 0 {
        return if rng.below(3) == 0 { literal(rng) } else { Expr::col(w.int_column) };
    }
    let op = rng.pick(&[BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul]);
    let left = native_int(rng, depth - 1, w);
    let right = if op == BinaryOp::Mul && w.int == DType::Int32 { literal(rng) } else { native_int(rng, depth - 1, w) };
    Expr::binary(op, left, right)
}

/// A predicate native code compiles: comparisons of floats or integers of `w`'s width, and
/// `and`, `or` and `not` of them.
fn native_boolean(rng: &mut Rng, depth: u32, w: Width) -> Expr {
    let choice = rng.below(if depth == 0 { 2 } else { 5 });
    match choice {
        0 | 1 => {
            let op =
                rng.pick(&[BinaryOp::Eq, BinaryOp::NotEq, BinaryOp::Lt, BinaryOp::LtEq, BinaryOp::Gt, BinaryOp::GtEq]);
            if choice == 0 {
                Expr::binary(op, native_numeric(rng, 2, w), native_numeric(rng, 2, w))
            } else {
                Expr::binary(op, native_int(rng, 2, w), native_int(rng, 2, w))
            }
        }
        2 | 3 => {
            let op = rng.pick(&[BinaryOp::And, BinaryOp::Or]);
            Expr::binary(op, native_boolean(rng, depth - 1, w), native_boolean(rng, depth - 1, w))
        }
        _ => Expr::Unary { op: UnaryOp::Not, arg: Box::new(native_boolean(rng, depth - 1, w)) },
    }
}

/// A literal as `ty` holds it (so that it is exact in float32 too).
fn literal(rng: &mut Rng, ty: DType) -> f64 {
    let v = float(rng);
    if ty == DType::Float32 {
        f64::from(v as f32)
    } else {
        v
    }
}

/// `batch` with its integer columns' values between -1000 and 1000, where integer arithmetic
/// seldom overflows, and its floats whole, where remainders are computed natively.
fn mild(rng: &mut Rng, batch: &RecordBatch) -> RecordBatch {
    let rows = batch.num_rows();
    let small = |rng: &mut Rng| rng.below(2001) as i64 - 1000;
    let a: Float64Array = (0..rows).map(|_| small(rng) as f64).collect();
    let c: Float32Array = (0..rows).map(|_| small(rng) as f32).collect();
    let i: Int64Array = (0..rows).map(|_| small(rng)).collect();
    let j: Int32Array = (0..rows).map(|_| small(rng) as i32).collect();
    let mut columns = batch.columns().to_vec();
    for (k, column) in [(0, Arc::new(a) as ArrayRef), (2, Arc::new(c)), (3, Arc::new(i)), (4, Arc::new(j))] {
        columns[k] = column;
    }
    RecordBatch::try_new(batch.schema(), columns).unwrap()
}

/// Native code gives the interpreter's values bit for bit (and so Arrow's), over every
/// tail length of its vector loop and inputs that start anywhere in their buffers, and
/// hands a chunk back exactly where the interpreter fails. Compiled selecting, it gives
/// the values for the rows a predicate keeps.
#[test]
fn native_kernels_compute_what_the_interpreter_computes() {
    let mut rng = Rng::new(19);
    let (mut native, mut cases, mut selected) = (0, 0, 0);
    for case in 0..400 {
        let batch = chunk(&mut rng, case % 4 == 0);
        let batch = if case % 3 == 0 { batch } else { mild(&mut rng, &batch) };
        let w = if case % 2 == 0 { WIDE } else { NARROW };
        let expr = if case % 5 == 0 { native_boolean(&mut rng, 3, w) } else { native_numeric(&mut rng, 4, w) };
        if expr.columns().is_empty() {
            continue;
        }
        // A column alone computes nothing: it has no code to compile.
        let computes = !matches!(expr, Expr::Column(_));
        cases += usize::from(computes);
        let kernel = Kernel::compile(&[&expr], &batch.schema()).unwrap_or_else(|| panic!("{expr} compiles"));
        let interpreted = Kernel::interpreted(&[&expr], &batch.schema()).expect("compiles");
        assert!(!interpreted.is_native());
        assert!(computes || !kernel.is_native(), "{expr} has no code");
        native += usize::from(computes && kernel.is_native());
        let (offset, len) = (case % 7, [0, 1, 2, 3, 5, 8, 17, 37, ROWS - 7][case % 9]);
        let part = batch.slice(offset, len);
        let arrow = evaluate(&expr, &part);
        match (kernel.run(&part), interpreted.run(&part)) {
            (Some(values), Some(expected)) => {
                let (values, expected) = (&values[0], &expected[0]);
                assert!(same(values, expected), "{expr} over {len} rows from {offset}: {values:?}\nvs {expected:?}");
                let arrow = arrow.expect("evaluates");
                assert!(same(values, &arrow), "{expr}: {values:?}\nvs Arrow {arrow:?}");
            }
            // Kernels hand columns with validity under `and` and `or` back to Arrow too.
            (None, None) => assert!(
                arrow.is_err() || part.columns().iter().any(|c| c.nulls().is_some()),
                "{expr} over {len} rows from {offset} fails only in kernels"
            ),
            (values, expected) => panic!("{expr}: native {values:?} but interpreted {expected:?}"),
        }
        // Selecting: the values of the rows a predicate keeps, one after another.
        let keep = native_boolean(&mut rng, 2, w);
        let both = Kernel::compile_selecting(&[&keep, &expr], &part.schema()).expect("compiles selecting");
        if let Some(values) = both.run_selecting(&part) {
            // No row, nothing computed: a constant that overflows fails no row either.
            if len == 0 {
                assert_eq!(values[0].len(), 0);
                continue;
            }
            let mask = evaluate_predicate(&keep, &part).expect("evaluates");
            let all = arrow::compute::filter(&evaluate(&expr, &part).expect("evaluates"), &mask).unwrap();
            assert!(same(&values[0], &all), "{expr} where {keep}: {:?}\nvs {all:?}", values[0]);
            selected += 1;
        }
    }
    // Every expression that computes on a column compiles natively (where the host has a
    // backend), and
    // many chunks run selecting natively (the others have nulls, overflow, or take the
    // remainder of a fraction, on some row).
    assert_eq!(native, cases, "{native} of {cases} native");
    assert!(selected * 3 > cases, "{selected} of {cases} ran selecting");
}

/// Programs native code does not compute stay interpreted: a remainder by a column or by a
/// fraction, integer division, an int32 product of columns, float32 mixed with int64, other
/// math functions, bool columns.
#[test]
fn programs_with_other_operations_are_interpreted() {
    let mut rng = Rng::new(23);
    let batch = chunk(&mut rng, false);
    let schema = batch.schema();
    let float = |v: f64| Expr::Literal(Scalar::Float(v, DType::Float64));
    let native = |e: &Expr| Kernel::compile(&[e], &schema).expect("compiles").is_native();
    let (a, b, i, j) = (Expr::col("a"), Expr::col("b"), Expr::col("i"), Expr::col("j"));
    assert!(native(&Expr::binary(BinaryOp::Div, a.clone(), b.clone())));
    assert!(native(&Expr::binary(BinaryOp::Mod, a.clone(), float(3.0))));
    assert!(native(&Expr::binary(BinaryOp::Lt, a.clone(), b.clone())));
    assert!(native(&Expr::binary(BinaryOp::Mul, i.clone(), i.clone())));
    assert!(!native(&Expr::binary(BinaryOp::Mod, a.clone(), b.clone())));
    assert!(!native(&Expr::binary(BinaryOp::Mod, a.clone(), float(2.5))));
    assert!(!native(&Expr::binary(BinaryOp::Div, i.clone(), Expr::Literal(Scalar::Int(2, DType::Int64)))));
    assert!(!native(&Expr::binary(BinaryOp::Mul, j.clone(), j)));
    let c_plus_i = Expr::binary(BinaryOp::Add, Expr::col("c"), Expr::Cast { arg: Box::new(i), to: DType::Float32 });
    assert!(!native(&c_plus_i));
    assert!(!native(&Expr::Call { func: Func::Exp, args: vec![a.clone()] }));
    assert!(!native(&Expr::binary(BinaryOp::And, Expr::col("p"), Expr::binary(BinaryOp::Lt, a, b))));
}

/// Integer `+`, `-` and `*` near the extremes, of two columns and of a column and a
/// constant: a kernel hands a chunk back exactly when an operation overflows (Rust's
/// checked operation fails) and otherwise gives its values. A kernel that missed an overflow
/// would return a wrapped value where Arrow fails; one that saw an overflow where there is
/// none would only be slower, which a selecting kernel shows (it gives `None`). Each pair
/// runs alone, in a chunk of rows that do not overflow, at a place that moves through the
/// lanes of the vector loops and their tail.
#[test]
fn integer_overflow_is_found_exactly_at_the_extremes() {
    /// Rust's checked operation, the reference.
    type Checked<N> = fn(N, N) -> Option<N>;
    fn check<T: ArrowPrimitiveType>(values: &[T::Native], checked: [Checked<T::Native>; 3], minus_one: T::Native) {
        const ROWS: usize = 37;
        let dtype = DType::from_arrow(&T::DATA_TYPE).unwrap();
        let spec = ElementSpec::new(vec![FieldSpec::scalar("x", dtype), FieldSpec::scalar("y", dtype)]).unwrap();
        let schema = spec.arrow_schema();
        let zero = T::Native::default();
        let mut place = 0;
        // A predicate keeping every row.
        let all = Expr::binary(BinaryOp::Eq, Expr::col("x"), Expr::col("x"));
        let kernels = |expr: &Expr| {
            let selecting = Kernel::compile_selecting(&[&all, expr], &schema);
            // Only an int32 product of columns has no native code.
            let int32_product = dtype == DType::Int32
                && matches!(expr, Expr::Binary { op: BinaryOp::Mul, right, .. }
                if matches!(**right, Expr::Column(_)));
            assert_eq!(selecting.is_some(), !int32_product, "{expr}");
            (Kernel::compile(&[expr], &schema).unwrap(), selecting)
        };
        for (op, checked) in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul].into_iter().zip(checked) {
            // `filler op y` never overflows, whatever y.
            let filler = if op == BinaryOp::Sub { minus_one } else { zero };
            let of_columns = kernels(&Expr::binary(op, Expr::col("x"), Expr::col("y")));
            for &y in values {
                let by_constant =
                    kernels(&Expr::binary(op, Expr::col("x"), Expr::Literal(Scalar::Int(y.to_i64().unwrap(), dtype))));
                for &x in values {
                    place = (place + 5) % ROWS;
                    let column = |at: T::Native, other: T::Native| {
                        let values = (0..ROWS).map(|r| if r == place { at } else { other });
                        Arc::new(PrimitiveArray::<T>::from_iter_values(values)) as ArrayRef
                    };
                    let batch = RecordBatch::try_new(schema.clone(), vec![column(x, filler), column(y, zero)]).unwrap();
                    for ((kernel, selecting), other_y) in [(&of_columns, zero), (&by_constant, y)] {
                        let expected = checked(x, y).map(|v| {
                            let other = checked(filler, other_y).unwrap();
                            (0..ROWS).map(|r| if r == place { v } else { other }).collect::<Vec<_>>()
                        });
                        let values = |out: Vec<ArrayRef>| out[0].as_primitive::<T>().values().to_vec();
                        assert_eq!(kernel.run(&batch).map(values), expected, "{x:?} {op:?} {y:?} at row {place}");
                        if let Some(selecting) = selecting {
                            let selected = selecting.run_selecting(&batch).map(values);
                            assert_eq!(selected, expected, "{x:?} {op:?} {y:?} at row {place}, selecting");
                        }
                    }
                }
            }
        }
    }
    // Zero, one, two, the bounds of products by 2, -2 and each other and just past them,
    // the extremes: each of either sign.
    let both_signs =
        |positive: &[i64], min: i64| positive.iter().flat_map(|p| [*p, -p]).chain([min]).collect::<Vec<_>>();
    let i64s =
        both_signs(&[0, 1, 2, 3_037_000_499, 3_037_000_500, (1 << 62) - 1, 1 << 62, (1 << 62) + 1, i64::MAX], i64::MIN);
    check::<Int64Type>(&i64s, [i64::checked_add, i64::checked_sub, i64::checked_mul], -1);
    let i32s: Vec<i32> =
        both_signs(&[0, 1, 2, 46_340, 46_341, (1 << 30) - 1, 1 << 30, (1 << 30) + 1, i32::MAX.into()], i32::MIN.into())
            .into_iter()
            .map(|v| v as i32)
            .collect();
    check::<Int32Type>(&i32s, [i32::checked_add, i32::checked_sub, i32::checked_mul], -1);
}

/// Chains of int64 `+ − ×` by constants on one column, which native code checks against an
/// interval of the column's values rather than operation by operation: a chunk is handed
/// back exactly when some operation of some row overflows. Each chain runs with the value
/// at each end of the interval where it fits, and one past it, found here by bisection over
/// Rust's checked operations, at a place moving through the vector loops' lanes and tail.
#[test]
fn int64_chains_by_constants_overflow_exactly_where_one_operation_does() {
    use BinaryOp::{Add, Mul, Sub};
    type Chain = (Vec<(BinaryOp, i64, bool)>, &'static str);
    const ROWS: usize = 37;
    let x = || Expr::col("x");
    let lit = |k: i64| Expr::Literal(Scalar::Int(k, DType::Int64));
    // Each link: the operation, its constant, and whether the constant comes first.
    let chains: Vec<Chain> = vec![
        (vec![(Mul, 3, false), (Add, 1, false)], "x*3+1"),
        (vec![(Sub, 5, true), (Mul, -7, false)], "(5-x)*-7"),
        (vec![(Mul, 2, false), (Mul, 2, true), (Mul, 2, false), (Sub, 9, false)], "2*(x*2)*2-9"),
        (vec![(Add, 1, false), (Mul, 3, false), (Sub, i64::MAX, false)], "(x+1)*3-MAX"),
        (vec![(Mul, -1, false), (Sub, i64::MIN, true)], "MIN-(x*-1)"),
        (vec![(Mul, i64::MAX, false), (Add, i64::MIN, false)], "x*MAX+MIN"),
    ];
    let spec = ElementSpec::new(vec![FieldSpec::scalar("x", DType::Int64)]).unwrap();
    let schema = spec.arrow_schema();
    let all = Expr::binary(BinaryOp::Eq, x(), x());
    let mut place = 0;
    for (links, name) in chains {
        let checked = |v: i64| {
            links.iter().try_fold(v, |v, &(op, k, first)| {
                let (a, b) = if first { (k, v) } else { (v, k) };
                match op {
                    Add => a.checked_add(b),
                    Sub => a.checked_sub(b),
                    _ => a.checked_mul(b),
                }
            })
        };
        let expr = links.iter().fold(x(), |e, &(op, k, first)| match first {
            true => Expr::binary(op, lit(k), e),
            false => Expr::binary(op, e, lit(k)),
        });
        // The chain ends as a float, as w4's first map does.
        let expr = Expr::Cast { arg: Box::new(expr), to: DType::Float64 };
        let kernel = Kernel::compile(&[&expr], &schema).unwrap();
        assert!(kernel.is_native(), "{name}");
        let selecting = Kernel::compile_selecting(&[&all, &expr], &schema).expect("compiles natively");
        // The least and greatest x that fit: the chain fits for 0 in each of these, and the
        // values that fit are one interval, so bisection finds its ends.
        assert!(checked(0).is_some(), "{name}");
        let end = |toward: i64| {
            let (mut fits, mut beyond) = (0i128, i128::from(toward) + toward.signum() as i128);
            while (beyond - fits).abs() > 1 {
                let mid = (fits + beyond) / 2;
                match checked(mid as i64) {
                    Some(_) => fits = mid,
                    None => beyond = mid,
                }
            }
            [fits, beyond].map(|v| i64::try_from(v).ok())
        };
        let [lo, below] = end(i64::MIN);
        let [hi, above] = end(i64::MAX);
        for v in [lo, below, hi, above, Some(0), Some(i64::MIN), Some(i64::MAX)].into_iter().flatten() {
            place = (place + 5) % ROWS;
            let values = (0..ROWS).map(|r| if r == place { v } else { 0 });
            let column = Arc::new(Int64Array::from_iter_values(values)) as ArrayRef;
            let batch = RecordBatch::try_new(schema.clone(), vec![column]).unwrap();
            let expected = checked(v).map(|at| {
                let other = checked(0).unwrap() as f64;
                (0..ROWS).map(|r| if r == place { at as f64 } else { other }).collect::<Vec<_>>()
            });
            let floats = |out: Vec<ArrayRef>| out[0].as_primitive::<Float64Type>().values().to_vec();
            assert_eq!(kernel.run(&batch).map(floats), expected, "{name} at x = {v}, row {place}");
            assert_eq!(selecting.run_selecting(&batch).map(floats), expected, "{name} at x = {v}, selecting");
        }
    }
}

/// A float remainder by a whole constant is computed natively, and exactly (as Rust's `%`),
/// for whole dividends of either sign below the bound (2^51 in float64, 2^22 in float32),
/// including dividends and divisors right at it; a dividend at the bound is handed back
/// (a selecting kernel gives `None`) and computed by the interpreter, exactly too.
#[test]
fn remainders_by_whole_constants_are_exact_up_to_the_bound() {
    fn check<T: ArrowPrimitiveType>(bound: f64, of: fn(f64) -> T::Native)
    where
        T::Native: std::ops::Rem<Output = T::Native>,
    {
        let dtype = DType::from_arrow(&T::DATA_TYPE).unwrap();
        let schema = ElementSpec::new(vec![FieldSpec::scalar("x", dtype)]).unwrap().arrow_schema();
        let below =
            [0.0, 1.0, 2.0, 3.0, 6.0, 7.0, 999_999.0, 1e6, 1e6 + 1.0, bound / 2.0 + 1.0, bound - 3.0, bound - 1.0];
        let mut xs: Vec<f64> = below.iter().flat_map(|x| [*x, -x]).collect();
        // One more, negative, for the loop's tail of single values.
        xs.push(-5.0);
        let column =
            |xs: &[f64]| Arc::new(PrimitiveArray::<T>::from_iter_values(xs.iter().map(|x| of(*x)))) as ArrayRef;
        let batch = RecordBatch::try_new(schema.clone(), vec![column(&xs)]).unwrap();
        let at_bound = RecordBatch::try_new(schema.clone(), vec![column(&[bound, 5.0])]).unwrap();
        let all = Expr::binary(BinaryOp::Eq, Expr::col("x"), Expr::col("x"));
        let values = |out: Vec<ArrayRef>| out[0].as_primitive::<T>().values().to_vec();
        for k in [1.0, 3.0, -7.0, 1e6, 1_048_577.0, bound / 2.0 + 1.0, -(bound - 1.0)] {
            let rem = Expr::binary(BinaryOp::Mod, Expr::col("x"), Expr::Literal(Scalar::Float(k, dtype)));
            let expected = |xs: &[f64]| xs.iter().map(|x| of(*x) % of(k)).collect::<Vec<_>>();
            let native = Kernel::compile(&[&rem], &schema).unwrap();
            assert!(native.is_native(), "{rem}");
            let interpreted = Kernel::interpreted(&[&rem], &schema).unwrap();
            let selecting = Kernel::compile_selecting(&[&all, &rem], &schema).unwrap();
            // Bitwise, so that the sign of a zero counts.
            let bits = |v: Option<Vec<T::Native>>| v.map(|v| v.iter().map(|x| format!("{x:?}")).collect::<Vec<_>>());
            let want = bits(Some(expected(&xs)));
            assert_eq!(bits(native.run(&batch).map(values)), want, "{rem}");
            assert_eq!(bits(interpreted.run(&batch).map(values)), want, "{rem} interpreted");
            assert_eq!(bits(selecting.run_selecting(&batch).map(values)), want, "{rem} selecting");
            assert_eq!(selecting.run_selecting(&at_bound).map(values), None, "{rem} at the bound");
            assert_eq!(
                bits(native.run(&at_bound).map(values)),
                bits(Some(expected(&[bound, 5.0]))),
                "{rem} at the bound"
            );
        }
    }
    check::<Float64Type>(2f64.powi(51), |v| v);
    check::<Float32Type>(2f64.powi(22), |v| v as f32);
}
