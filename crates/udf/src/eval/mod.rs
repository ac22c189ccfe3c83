//! Evaluation of typed IR expressions over whole Arrow columns.
//!
//! An expression is evaluated once per chunk with Arrow's compute kernels, never per row.
//! Sub-expressions without columns are computed once, as one-element scalars, and broadcast
//! only when a kernel needs a full column. Types follow [`Expr::data_type`] exactly: operands
//! are cast to [`common_type`] before a kernel runs, so a result always has the Arrow type of
//! the expression's dtype.
//!
//! Batched elements are list-wrapped columns (see `flumen_ir::spec`). An expression over them
//! applies elementwise: the leaf values of the referenced columns are evaluated as flat
//! columns and the result is wrapped again in the batch's list structure.
//!
//! This module holds the entry points and the elementwise evaluation over list levels; its
//! parts: `levels` (peeling list levels off and wrapping results in them), `reductions`
//! (reductions and tensor functions computed first, into columns), `tensors` (fixed-shape
//! tensor expressions over a flattened chunk) and `values` (scalar evaluation: the column
//! environment and each operator's and function's kernel).

use std::collections::HashMap;
use std::fmt::Display;
use std::sync::{Arc, OnceLock};

use arrow::array::{
    downcast_integer, downcast_primitive_array, new_null_array, Array, ArrayRef, AsArray, BinaryArray, BooleanArray,
    Datum, FixedSizeListArray, Float64Array, Int64Array, ListArray, PrimitiveArray, RecordBatch, RecordBatchOptions,
    StringArray, UInt32Array, UInt64Array,
};
use arrow::buffer::{NullBuffer, OffsetBuffer};
use arrow::compute::kernels::zip::zip;
use arrow::compute::kernels::{boolean, numeric};
use arrow::compute::{
    binary, cast_with_options, filter, interleave, prep_null_mask_filter, take, try_unary, unary, CastOptions,
};
use arrow::datatypes::{
    ArrowNativeTypeOp, ArrowPrimitiveType, DataType, Field, Float32Type, Float64Type, Int64Type, SchemaRef, UInt32Type,
    UInt64Type,
};
use arrow::error::ArrowError;
use arrow::util::display::FormatOptions;
use flumen_ir::broadcast::broadcast_shape;
use flumen_ir::expr::common_type;
use flumen_ir::spec::tagged_dtype;
use flumen_ir::UNKNOWN;
use flumen_ir::{BinaryOp, DType, ElementSpec, Error, Expr, FieldSpec, Func, NamedExpr, Result, Scalar, UnaryOp};

use crate::tensor_ops::TensorArg;

/// Evaluates `expr` over `batch`: one value per row, or per leaf value when the referenced
/// columns are batched (list-wrapped), with the result wrapped like the first of them.
///
/// How many list levels are batch dimensions is inferred from the columns: a column used as
/// a value has exactly that many, a column whose `length` is taken has one more (so
/// `length(tokens)` counts the tokens of each row). A literal-only expression broadcasts over
/// the shallowest column of the batch. When the element spec is at hand, prefer
/// [`evaluate_with_batch_dims`], which cannot guess wrong.
pub fn evaluate(expr: &Expr, batch: &RecordBatch) -> Result<ArrayRef> {
    evaluate_at(expr, batch, None)
}

/// Evaluates `expr` over `batch` whose elements have `batch_dims` batch dimensions (the
/// spec's `batch_dims`): every column must be wrapped in that many list levels, one more for
/// a rank-1 field whose `length` is taken.
pub fn evaluate_with_batch_dims(expr: &Expr, batch: &RecordBatch, batch_dims: usize) -> Result<ArrayRef> {
    evaluate_at(expr, batch, Some(batch_dims))
}

/// Evaluates a boolean `expr` as a filter mask: one bool per row of `batch`, with null
/// counting as false (SQL filter semantics; tf.data itself has no nulls).
pub fn evaluate_predicate(expr: &Expr, batch: &RecordBatch) -> Result<BooleanArray> {
    let out = evaluate_at(expr, batch, Some(0))?;
    let mask = out
        .as_boolean_opt()
        .ok_or_else(|| Error::Expr(format!("a predicate must be bool, got {} in {expr}", out.data_type())))?;
    Ok(null_as_false(mask))
}

/// Computes the output chunk of an expression `map` over `batch`.
///
/// With `keep_input` the input columns are kept in order, an output named like an input
/// replaces it in place and the other outputs are appended; without it the chunk is exactly
/// the outputs. Every output is computed from the input chunk. The result has `out_schema`
/// (the `arrow_schema` of the map's output spec), whose column types also say how many batch
/// dimensions each output has.
pub fn evaluate_map(
    outputs: &[NamedExpr],
    keep_input: bool,
    batch: &RecordBatch,
    out_schema: &SchemaRef,
) -> Result<RecordBatch> {
    let mut values = Vec::with_capacity(outputs.len());
    for out in outputs {
        let dims = list_depth(out_field(out, out_schema)?.data_type());
        values.push(evaluate_output(&out.expr, batch, dims, |e, flat| evaluate_with_batch_dims(e, flat.batch(e)?, 0))?);
    }
    assemble_map(outputs, kept_columns(batch, keep_input), batch.num_rows(), out_schema, values)
}

/// One map output over `batch`, `dims` list levels deep in the output schema: reductions
/// computed first ([`with_reductions`]), then a tensor expression evaluated by `flat` over
/// the flattened chunk ([`Tensors`]: the Arrow evaluation here, a kernel in
/// [`crate::kernel::FusedMap`]) and shaped again, anything else evaluated directly.
pub fn evaluate_output(
    expr: &Expr,
    batch: &RecordBatch,
    dims: usize,
    flat: impl Fn(&Expr, &Tensors) -> Result<ArrayRef>,
) -> Result<ArrayRef> {
    let lifted = with_reductions(expr, batch)?;
    let (expr, chunk) = lifted.as_ref().map_or((expr, batch), |(e, b)| (e, b));
    // An output that is a reduction or a tensor function is the column computed for it.
    if let (Some(_), Expr::Column(name)) = (&lifted, expr) {
        if let Some(column) = chunk.column_by_name(name).filter(|_| name.starts_with(LIFTED)) {
            if list_depth(column.data_type()) == dims {
                return Ok(column.clone());
            }
        }
    }
    match Tensors::flatten(expr, chunk, dims)? {
        Some(tensors) => tensors.wrap(flat(expr, &tensors)?, expr),
        None => evaluate_with_batch_dims(expr, chunk, dims),
    }
}

mod levels;
mod reductions;
mod tensors;
mod values;

pub(crate) use levels::*;
pub use reductions::*;
pub use tensors::*;
pub use values::*;

/// The field of `out_schema` that map output `out` fills.
fn out_field<'a>(out: &NamedExpr, out_schema: &'a SchemaRef) -> Result<&'a Field> {
    out_schema.field_with_name(&out.name).map_err(|_| {
        let expected: Vec<&str> = out_schema.fields().iter().map(|f| f.name().as_str()).collect();
        Error::Expr(format!(
            "map output '{}' = {} is not in the output schema [{}]",
            out.name,
            out.expr,
            expected.join(", ")
        ))
    })
}

/// The input columns a map keeps (all of `batch`'s when `keep_input`, else none), by name.
/// The element keys the runtime adds for random functions are never kept.
pub fn kept_columns(batch: &RecordBatch, keep_input: bool) -> Vec<(String, ArrayRef)> {
    if !keep_input {
        return Vec::new();
    }
    let schema = batch.schema();
    let names = schema.fields().iter().map(|f| f.name().clone());
    names.zip(batch.columns().iter().cloned()).filter(|(n, _)| n != flumen_ir::image::ELEMENT_KEY).collect()
}

/// The output chunk of `rows` elements of a map whose outputs' `values` (one per output, in
/// order) are computed, after the input columns it keeps (`kept`, by name; an output of the
/// same name takes its place), as [`evaluate_map`] describes.
pub fn assemble_map(
    outputs: &[NamedExpr],
    kept: Vec<(String, ArrayRef)>,
    rows: usize,
    out_schema: &SchemaRef,
    values: Vec<ArrayRef>,
) -> Result<RecordBatch> {
    let mut columns = kept;
    let expected: Vec<&str> = out_schema.fields().iter().map(|f| f.name().as_str()).collect();
    for (out, value) in outputs.iter().zip(values) {
        out_field(out, out_schema)?;
        match columns.iter_mut().find(|(name, _)| *name == out.name) {
            Some(slot) => slot.1 = value,
            None => columns.push((out.name.clone(), value)),
        }
    }
    let names: Vec<&str> = columns.iter().map(|(n, _)| n.as_str()).collect();
    if names != expected {
        return Err(Error::Expr(format!(
            "map computes fields [{}] but its output schema has [{}]",
            names.join(", "),
            expected.join(", ")
        )));
    }
    let arrays = columns
        .iter()
        .zip(out_schema.fields())
        .map(|((name, array), field)| {
            conform(array, field.data_type()).map_err(|e| {
                let source = outputs.iter().find(|o| o.name == *name).map(|o| format!(" = {}", o.expr));
                Error::Expr(format!("map output '{name}'{}: {e}", source.unwrap_or_default()))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    Ok(RecordBatch::try_new_with_options(out_schema.clone(), arrays, &options)?)
}

/// An error about `expr`, keeping the cause's text.
pub(crate) fn at(cause: impl Display, expr: &Expr) -> Error {
    Error::Expr(format!("{cause} in {expr}"))
}

/// Casts fail instead of producing nulls: a silent null (an overflowing literal, an
/// unparsable string) would only surface far downstream, in a pipeline that has no nulls.
fn strict() -> CastOptions<'static> {
    CastOptions { safe: false, format_options: FormatOptions::new() }
}

fn evaluate_at(expr: &Expr, batch: &RecordBatch, batch_dims: Option<usize>) -> Result<ArrayRef> {
    if let Some((expr, batch)) = with_reductions(expr, batch)? {
        return evaluate_at(&expr, &batch, batch_dims);
    }
    let refs = column_refs(expr)
        .into_iter()
        .map(|(name, counted)| {
            let array = batch.column_by_name(name).ok_or_else(|| {
                let names: Vec<String> = batch.schema().fields().iter().map(|f| f.name().clone()).collect();
                Error::Expr(format!("unknown field '{name}' (the chunk has: {}) in {expr}", names.join(", ")))
            })?;
            Ok((name, counted, array))
        })
        .collect::<Result<Vec<_>>>()?;
    let dims = batch_dims.unwrap_or_else(|| {
        if let Some((_, _, array)) = refs.iter().find(|(_, counted, _)| !counted) {
            list_depth(array.data_type())
        } else if let Some((_, _, array)) = refs.first() {
            list_depth(array.data_type()).saturating_sub(1)
        } else {
            batch.columns().iter().map(|c| list_depth(c.data_type())).min().unwrap_or(0)
        }
    });

    let mut structure: Option<(&str, Vec<Level>, usize)> = None;
    let mut columns = HashMap::new();
    let mut lengths = HashMap::new();
    let mut fields = Vec::new();
    // Per-element scalars beside tensors of unknown dims (`t * weight`, unbatched elements):
    // each value stands for every value of its element's tensor, repeated once the tensors'
    // structure is known.
    let mut broadcast: Vec<&str> = Vec::new();
    for (name, counted, array) in &refs {
        if dims > 0 && !counted && list_depth(array.data_type()) == 0 {
            broadcast.push(name);
            continue;
        }
        let (levels, leaf) = peel(array, dims).ok_or_else(|| {
            Error::Expr(format!(
                "field '{name}' has type {} with fewer than {dims} batch dimension(s) in {expr}",
                array.data_type()
            ))
        })?;
        match &structure {
            None => structure = Some((*name, levels, leaf.len())),
            Some((first, s, _)) if !same_levels(s, &levels) => {
                return Err(Error::Expr(format!(
                    "fields '{first}' and '{name}' differ in shape (their list lengths differ; elementwise \
                     operations over batches and tensors of unknown dims take values of one shape) in {expr}"
                )))
            }
            Some(_) => {}
        }
        match list_depth(leaf.data_type()) {
            0 => {
                let mut dtype =
                    DType::from_arrow(leaf.data_type()).map_err(|e| at(format!("field '{name}': {e}"), expr))?;
                // bfloat16 bits are uint16 to Arrow; the field's metadata says which.
                if dtype == DType::UInt16 {
                    if let Ok(field) = batch.schema().field_with_name(name) {
                        dtype = tagged_dtype(dtype, field);
                    }
                }
                // Large and view layouts become the one layout kernels and the spec agree on.
                let leaf = if leaf.data_type() == &dtype.to_arrow() {
                    leaf
                } else {
                    cast_with_options(&leaf, &dtype.to_arrow(), &strict()).map_err(|e| at(e, expr))?
                };
                fields.push(FieldSpec::scalar(*name, dtype));
                columns.insert(name.to_string(), leaf);
            }
            1 if *counted => {
                let (counts, item) =
                    list_lengths(&leaf).ok_or_else(|| at(format!("field '{name}' is not a list"), expr))?;
                let dtype = DType::from_arrow(&item).map_err(|e| at(format!("field '{name}': {e}"), expr))?;
                fields.push(FieldSpec::ragged(*name, dtype, vec![UNKNOWN]));
                lengths.insert(name.to_string(), counts);
            }
            _ => {
                return Err(Error::Expr(format!(
                    "field '{name}' has type {}: beyond its {dims} batch dimension(s) it is a tensor, and \
                     expressions work on scalar fields (tensor kernels are not available yet) in {expr}",
                    array.data_type()
                )))
            }
        }
    }
    if !broadcast.is_empty() {
        let Some((_, levels, len)) = &structure else {
            return Err(Error::Expr(format!("no field of {expr} has {dims} dimension(s) to broadcast over")));
        };
        let index = UInt32Array::from(leaf_owners(levels, batch.num_rows(), *len).map_err(|e| at(e, expr))?);
        for name in broadcast {
            let array = batch.column_by_name(name).expect("a column the expression reads");
            let dtype = DType::from_arrow(array.data_type()).map_err(|e| at(format!("field '{name}': {e}"), expr))?;
            let dtype = batch.schema().field_with_name(name).map_or(dtype, |f| tagged_dtype(dtype, f));
            let array = cast_with_options(array, &dtype.to_arrow(), &strict()).map_err(|e| at(e, expr))?;
            fields.push(FieldSpec::scalar(name, dtype));
            columns.insert(name.to_string(), take(&array, &index, None).map_err(|e| at(e, expr))?);
        }
    }
    let (levels, len) = match structure {
        Some((_, levels, len)) => (levels, len),
        None if dims == 0 => (Vec::new(), batch.num_rows()),
        None => {
            let (levels, leaf) = batch.columns().iter().find_map(|c| peel(c, dims)).ok_or_else(|| {
                Error::Expr(format!("no column of the chunk has {dims} batch dimension(s) to broadcast {expr} over"))
            })?;
            (levels, leaf.len())
        }
    };

    let spec = ElementSpec::new(fields)?;
    let dtype = expr.data_type(&spec)?;
    let env = Env { columns, lengths, len, spec: Arc::new(spec), literal: false };
    let out = env.eval(expr)?.into_array(len)?;
    if out.data_type() != &dtype.to_arrow() {
        return Err(Error::Expr(format!("{expr} evaluated to {} but is typed {dtype}", out.data_type())));
    }
    rewrap(&levels, out).map_err(|e| at(e, expr))
}

/// The columns `expr` reads, in order of first use, each with whether it is only read through
/// `length(column)` (which looks at a rank-1 field's list rather than its values).
fn column_refs(expr: &Expr) -> Vec<(&str, bool)> {
    fn walk<'a>(e: &'a Expr, out: &mut Vec<(&'a str, bool)>) {
        let mut note = |name: &'a str, counted: bool| match out.iter_mut().find(|(n, _)| *n == name) {
            Some(entry) => entry.1 &= counted,
            None => out.push((name, counted)),
        };
        match e {
            Expr::Column(c) => note(c, false),
            Expr::Call { func: Func::Length, args } => match args.as_slice() {
                [Expr::Column(c)] => note(c, true),
                _ => args.iter().for_each(|a| walk(a, out)),
            },
            other => other.children().into_iter().for_each(|a| walk(a, out)),
        }
    }
    let mut out = Vec::new();
    walk(expr, &mut out);
    out
}

fn has_columns(expr: &Expr) -> bool {
    let mut found = false;
    expr.visit(&mut |e| found |= matches!(e, Expr::Column(_)));
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float32Array, Int16Array, Int32Array, Int8Array, UInt8Array};
    use arrow::datatypes::{Int64Type, Schema};
    use flumen_ir::build::{c, call};
    use flumen_ir::build::{float as f, int as i, text as s};
    use flumen_ir::FieldKind;

    fn chunk(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
        RecordBatch::try_from_iter(columns).unwrap()
    }

    /// Evaluates over an unbatched chunk and checks the result has the type the plan assigns.
    fn eval(expr: &Expr, batch: &RecordBatch) -> ArrayRef {
        let out = evaluate(expr, batch).unwrap_or_else(|e| panic!("{expr}: {e}"));
        let spec = ElementSpec::from_arrow_schema(&batch.schema()).unwrap();
        assert_eq!(out.data_type(), &expr.data_type(&spec).unwrap().to_arrow(), "type of {expr}");
        assert_eq!(out.len(), batch.num_rows());
        out
    }

    /// Evaluates over a chunk of elements batched once (every column has one leading batch
    /// dimension) and checks the result is the batched type the plan assigns.
    fn eval_batched(expr: &Expr, batch: &RecordBatch) -> ArrayRef {
        let out = evaluate(expr, batch).unwrap_or_else(|e| panic!("{expr}: {e}"));
        let mut spec = ElementSpec::from_arrow_schema(&batch.schema()).unwrap();
        spec.batch_dims = 1;
        let dtype = expr.data_type(&spec).unwrap();
        let batch_dim = spec.fields.iter().find(|f| expr.columns().contains(&f.name)).map_or(2, |f| f.shape[0]);
        let expected = FieldSpec::scalar("out", dtype).batched(batch_dim).arrow_type();
        assert_eq!(out.data_type(), &expected, "type of {expr}");
        assert_eq!(evaluate_with_batch_dims(expr, batch, 1).unwrap().as_ref(), out.as_ref());
        out
    }

    fn err(expr: &Expr, batch: &RecordBatch) -> String {
        match evaluate(expr, batch) {
            Ok(out) => panic!("{expr} evaluated to {out:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn bin(op: BinaryOp, a: Expr, b: Expr) -> Expr {
        Expr::binary(op, a, b)
    }

    fn un(op: UnaryOp, a: Expr) -> Expr {
        Expr::Unary { op, arg: Box::new(a) }
    }

    fn ints(out: &ArrayRef) -> Vec<Option<i64>> {
        out.as_primitive::<Int64Type>().iter().collect()
    }

    fn floats(out: &ArrayRef) -> Vec<Option<f64>> {
        out.as_primitive::<Float64Type>().iter().collect()
    }

    fn bools(out: &ArrayRef) -> Vec<Option<bool>> {
        out.as_boolean().iter().collect()
    }

    fn ab() -> RecordBatch {
        chunk(vec![
            ("a", Arc::new(Int64Array::from(vec![Some(1), Some(2), Some(3), None])) as ArrayRef),
            ("b", Arc::new(Int64Array::from(vec![10, 20, 30, 40]))),
        ])
    }

    #[test]
    fn integer_arithmetic() {
        let batch = ab();
        assert_eq!(ints(&eval(&bin(BinaryOp::Add, c("a"), c("b")), &batch)), vec![Some(11), Some(22), Some(33), None]);
        assert_eq!(ints(&eval(&bin(BinaryOp::Sub, c("b"), c("a")), &batch)), vec![Some(9), Some(18), Some(27), None]);
        assert_eq!(ints(&eval(&bin(BinaryOp::Mul, c("a"), i(2)), &batch)), vec![Some(2), Some(4), Some(6), None]);
        assert_eq!(ints(&eval(&bin(BinaryOp::Div, c("b"), i(3)), &batch)), vec![Some(3), Some(6), Some(10), Some(13)]);
        assert_eq!(ints(&eval(&bin(BinaryOp::Mod, c("b"), i(3)), &batch)), vec![Some(1), Some(2), Some(0), Some(1)]);
        assert_eq!(ints(&eval(&un(UnaryOp::Neg, c("a")), &batch)), vec![Some(-1), Some(-2), Some(-3), None]);
    }

    #[test]
    fn integer_division_by_zero_is_an_error() {
        let batch = ab();
        for op in [BinaryOp::Div, BinaryOp::Mod] {
            let e = bin(op, c("b"), bin(BinaryOp::Sub, c("a"), i(2)));
            let msg = err(&e, &batch);
            assert!(msg.contains("ivide by zero") && msg.contains(&e.to_string()), "{msg}");
        }
        // Floats follow IEEE 754 instead.
        let x = chunk(vec![("x", Arc::new(Float64Array::from(vec![1.0, -1.0])) as ArrayRef)]);
        assert_eq!(
            floats(&eval(&bin(BinaryOp::Div, c("x"), f(0.0)), &x)),
            vec![Some(f64::INFINITY), Some(f64::NEG_INFINITY)]
        );
    }

    #[test]
    fn literals_adopt_the_column_type() {
        let batch = chunk(vec![
            ("x", Arc::new(Float32Array::from(vec![1.5, -2.0])) as ArrayRef),
            ("n", Arc::new(Int32Array::from(vec![1, 2]))),
            ("small", Arc::new(Int8Array::from(vec![100, -100]))),
            ("u", Arc::new(UInt8Array::from(vec![200, 7]))),
            ("h", Arc::new(Int16Array::from(vec![-3, 3]))),
        ]);
        let out = eval(&bin(BinaryOp::Mul, c("x"), f(2.0)), &batch);
        assert_eq!(out.as_primitive::<Float32Type>(), &Float32Array::from(vec![3.0, -4.0]));
        let out = eval(&bin(BinaryOp::Add, c("x"), i(1)), &batch);
        assert_eq!(out.as_primitive::<Float32Type>(), &Float32Array::from(vec![2.5, -1.0]));
        // An int column meeting a float literal becomes float64.
        assert_eq!(floats(&eval(&bin(BinaryOp::Add, c("n"), f(1.5)), &batch)), vec![Some(2.5), Some(3.5)]);
        let out = eval(&bin(BinaryOp::Add, c("n"), i(1)), &batch);
        assert_eq!(out.as_primitive::<arrow::datatypes::Int32Type>(), &Int32Array::from(vec![2, 3]));
        // Two columns promote: uint8 and int8 meet in int16, int8 and float32 in float32.
        let out = eval(&bin(BinaryOp::Add, c("u"), c("small")), &batch);
        assert_eq!(out.as_primitive::<arrow::datatypes::Int16Type>(), &Int16Array::from(vec![300, -93]));
        let out = eval(&bin(BinaryOp::Mul, c("small"), c("x")), &batch);
        assert_eq!(out.as_primitive::<Float32Type>(), &Float32Array::from(vec![150.0, 200.0]));
        // A literal that does not fit the column's type is an error, not a silent null.
        let msg = err(&bin(BinaryOp::Add, c("small"), i(300)), &batch);
        assert!(msg.contains("(small + 300)"), "{msg}");
        // So is overflow.
        assert!(evaluate(&bin(BinaryOp::Add, c("small"), i(100)), &batch).is_err());
        // Mixed comparison of an int8 column with a float64 literal compares as float64.
        assert_eq!(bools(&eval(&bin(BinaryOp::Lt, c("h"), f(0.5)), &batch)), vec![Some(true), Some(false)]);
    }

    #[test]
    fn comparisons_logic_and_nulls() {
        let batch = chunk(vec![
            ("p", Arc::new(BooleanArray::from(vec![Some(true), Some(false), None])) as ArrayRef),
            ("q", Arc::new(BooleanArray::from(vec![None, None, None]))),
            ("s", Arc::new(StringArray::from(vec![Some("a"), Some("b"), None]))),
        ]);
        assert_eq!(bools(&eval(&bin(BinaryOp::And, c("p"), c("q")), &batch)), vec![None, Some(false), None]);
        assert_eq!(bools(&eval(&bin(BinaryOp::Or, c("p"), c("q")), &batch)), vec![Some(true), None, None]);
        let lit_true = Expr::Literal(Scalar::Bool(true));
        assert_eq!(
            bools(&eval(&bin(BinaryOp::And, c("p"), lit_true.clone()), &batch)),
            vec![Some(true), Some(false), None]
        );
        assert_eq!(bools(&eval(&bin(BinaryOp::Or, lit_true, c("q")), &batch)), vec![Some(true); 3]);
        assert_eq!(bools(&eval(&un(UnaryOp::Not, c("p")), &batch)), vec![Some(false), Some(true), None]);
        assert_eq!(bools(&eval(&un(UnaryOp::IsNull, c("s")), &batch)), vec![Some(false), Some(false), Some(true)]);
        assert_eq!(bools(&eval(&un(UnaryOp::IsNotNull, c("s")), &batch)), vec![Some(true), Some(true), Some(false)]);
        assert_eq!(bools(&eval(&bin(BinaryOp::Eq, c("s"), s("b")), &batch)), vec![Some(false), Some(true), None]);
        assert_eq!(bools(&eval(&bin(BinaryOp::NotEq, c("s"), s("b")), &batch)), vec![Some(true), Some(false), None]);
        assert_eq!(bools(&eval(&bin(BinaryOp::GtEq, c("s"), s("b")), &batch)), vec![Some(false), Some(true), None]);
        let n = ab();
        assert_eq!(
            bools(&eval(&bin(BinaryOp::Lt, c("a"), i(2)), &n)),
            vec![Some(true), Some(false), Some(false), None]
        );
        assert_eq!(
            bools(&eval(&bin(BinaryOp::LtEq, c("a"), i(2)), &n)),
            vec![Some(true), Some(true), Some(false), None]
        );
        assert_eq!(
            bools(&eval(&bin(BinaryOp::Gt, c("b"), c("a")), &n)),
            vec![Some(true), Some(true), Some(true), None]
        );
    }

    #[test]
    fn literal_only_expressions_broadcast() {
        let batch = ab();
        assert_eq!(ints(&eval(&bin(BinaryOp::Add, i(1), i(2)), &batch)), vec![Some(3); 4]);
        let null = Expr::Literal(Scalar::Null(DType::Float32));
        let out = eval(&null, &batch);
        assert_eq!(out.data_type(), &DataType::Float32);
        assert_eq!(out.null_count(), 4);
        // Integer division by zero among literals is an error too.
        assert!(err(&bin(BinaryOp::Div, i(1), i(0)), &batch).contains("(1 / 0)"));
    }

    #[test]
    fn case_when() {
        let batch = ab();
        // case when a >= 2 then a * 10 when b > 35 then 0 else -1 end
        let e = Expr::Case {
            branches: vec![
                (bin(BinaryOp::GtEq, c("a"), i(2)), bin(BinaryOp::Mul, c("a"), i(10))),
                (bin(BinaryOp::Gt, c("b"), i(35)), i(0)),
            ],
            otherwise: Some(Box::new(i(-1))),
        };
        assert_eq!(ints(&eval(&e, &batch)), vec![Some(-1), Some(20), Some(30), Some(0)]);
        // Without else, unmatched rows are null; literal branches adopt the column type.
        let e = Expr::Case { branches: vec![(bin(BinaryOp::Lt, c("b"), i(25)), f(0.5))], otherwise: None };
        assert_eq!(floats(&eval(&e, &batch)), vec![Some(0.5), Some(0.5), None, None]);
        let x = chunk(vec![("x", Arc::new(Float32Array::from(vec![-1.0, 4.0])) as ArrayRef)]);
        let e =
            Expr::Case { branches: vec![(bin(BinaryOp::Lt, c("x"), i(0)), i(0))], otherwise: Some(Box::new(c("x"))) };
        assert_eq!(eval(&e, &x).as_primitive::<Float32Type>(), &Float32Array::from(vec![0.0, 4.0]));
    }

    #[test]
    fn case_guards_its_branches() {
        let batch = chunk(vec![
            ("n", Arc::new(Int64Array::from(vec![7, 8, 9])) as ArrayRef),
            ("d", Arc::new(Int64Array::from(vec![2, 0, 3]))),
        ]);
        let e = Expr::Case {
            branches: vec![(bin(BinaryOp::NotEq, c("d"), i(0)), bin(BinaryOp::Div, c("n"), c("d")))],
            otherwise: Some(Box::new(i(0))),
        };
        assert_eq!(ints(&eval(&e, &batch)), vec![Some(3), Some(0), Some(3)]);
    }

    #[test]
    fn literal_case_is_a_scalar() {
        let e = Expr::Case {
            branches: vec![(Expr::Literal(Scalar::Bool(false)), i(1)), (Expr::Literal(Scalar::Bool(true)), i(2))],
            otherwise: None,
        };
        assert_eq!(ints(&eval(&bin(BinaryOp::Add, c("b"), e), &ab())), vec![Some(12), Some(22), Some(32), Some(42)]);
        // Every row takes the first branch, so the literal else branch is never evaluated.
        let inner = Expr::Case { branches: vec![(Expr::Literal(Scalar::Bool(false)), i(1))], otherwise: None };
        let e = Expr::Case {
            branches: vec![(Expr::Literal(Scalar::Bool(true)), i(5))],
            otherwise: Some(Box::new(bin(BinaryOp::Add, inner, i(1)))),
        };
        assert_eq!(ints(&eval(&e, &ab())), vec![Some(5); 4]);
    }

    #[test]
    fn casts() {
        let batch = chunk(vec![
            ("x", Arc::new(Float64Array::from(vec![1.7, -1.7])) as ArrayRef),
            ("s", Arc::new(StringArray::from(vec!["12", "-3"]))),
            ("bad", Arc::new(StringArray::from(vec!["12", "x"]))),
        ]);
        let cast = |e, to| Expr::Cast { arg: Box::new(e), to };
        let out = eval(&cast(c("x"), DType::Int32), &batch);
        assert_eq!(out.as_primitive::<arrow::datatypes::Int32Type>(), &Int32Array::from(vec![1, -1]));
        assert_eq!(ints(&eval(&cast(c("s"), DType::Int64), &batch)), vec![Some(12), Some(-3)]);
        let out = eval(&cast(c("x"), DType::Utf8), &batch);
        assert_eq!(out.as_string::<i32>(), &StringArray::from(vec!["1.7", "-1.7"]));
        let msg = err(&cast(c("bad"), DType::Int64), &batch);
        assert!(msg.contains("cast(bad as int64)"), "{msg}");
    }

    #[test]
    fn reductions_give_one_value_per_element() {
        // Rows [1, 2, 3], [-4, 5, 6] as int64[3]; k = 10, 20.
        let item = Arc::new(Field::new("item", DataType::Int64, true));
        let values = Arc::new(Int64Array::from(vec![1, 2, 3, -4, 5, 6]));
        let t: ArrayRef = Arc::new(FixedSizeListArray::new(item, 3, values, None));
        let x = chunk(vec![("t", t), ("k", Arc::new(Int64Array::from(vec![10, 20])))]);
        let red = |func| call(func, vec![c("t")]);
        assert_eq!(ints(&evaluate(&red(Func::ReduceSum), &x).unwrap()), [Some(6), Some(7)]);
        assert_eq!(ints(&evaluate(&red(Func::ReduceMax), &x).unwrap()), [Some(3), Some(6)]);
        assert_eq!(ints(&evaluate(&red(Func::ReduceMin), &x).unwrap()), [Some(1), Some(-4)]);
        assert_eq!(floats(&evaluate(&red(Func::ReduceMean), &x).unwrap()), [Some(2.0), Some(7.0 / 3.0)]);
        // Inside a scalar expression, and a reduction of a reduction's expression.
        let e = bin(BinaryOp::Add, c("k"), red(Func::ReduceSum));
        assert_eq!(ints(&evaluate(&e, &x).unwrap()), [Some(16), Some(27)]);
        let nested = call(Func::ReduceSum, vec![bin(BinaryOp::Sub, c("t"), red(Func::ReduceMin))]);
        assert_eq!(ints(&evaluate(&nested, &x).unwrap()), [Some(3), Some(19)]);
        // Typed as one value per element; batched elements are refused.
        let spec = ElementSpec::new(vec![FieldSpec::tensor("t", DType::Int64, vec![3])]).unwrap();
        assert_eq!(red(Func::ReduceSum).data_type(&spec).unwrap(), DType::Int64);
        assert_eq!(red(Func::ReduceMean).data_type(&spec).unwrap(), DType::Float64);
        let batched = ElementSpec {
            batch_dims: 1,
            ..ElementSpec::new(vec![FieldSpec::tensor("t", DType::Int64, vec![4, 3])]).unwrap()
        };
        assert!(red(Func::ReduceSum).data_type(&batched).unwrap_err().to_string().contains("unbatched"));
    }

    #[test]
    fn clip_and_bucketize_follow_tensorflow() {
        let x = chunk(vec![
            (
                "d",
                Arc::new(Float64Array::from(vec![Some(-3.0), Some(0.5), Some(9.0), Some(f64::NAN), None])) as ArrayRef,
            ),
            ("f", Arc::new(Float32Array::from(vec![-3.0, 0.5, 9.0, 2.0, 1.0]))),
            ("i", Arc::new(Int64Array::from(vec![-3, 0, 9, 2, 1]))),
            ("lo", Arc::new(Int64Array::from(vec![0, 1, 0, 0, 0]))),
        ]);
        // Literal bounds adopt the column's type; NaN and nulls pass through.
        let out = floats(&eval(&call(Func::Clip, vec![c("d"), f(0.0), f(1.0)]), &x));
        assert_eq!(out[..3], [Some(0.0), Some(0.5), Some(1.0)]);
        assert!(out[3].unwrap().is_nan() && out[4].is_none());
        let out = eval(&call(Func::Clip, vec![c("f"), f(0.0), f(1.0)]), &x);
        assert_eq!(out.as_primitive::<Float32Type>().values()[..], [0.0, 0.5, 1.0, 1.0, 1.0]);
        // A bound may be a column.
        assert_eq!(ints(&eval(&call(Func::Clip, vec![c("i"), c("lo"), i(5)]), &x)), [0, 1, 5, 2, 1].map(Some));
        // tf's upper bound: the first boundary greater than the value; NaN in the last bucket.
        let b = eval(&call(Func::Bucketize, vec![c("d"), f(0.0), f(0.5), f(10.0)]), &x);
        assert_eq!(
            b.as_primitive::<arrow::datatypes::Int32Type>().iter().collect::<Vec<_>>(),
            [Some(0), Some(2), Some(2), Some(3), None]
        );
        let b = eval(&call(Func::Bucketize, vec![c("i"), i(0), i(2)]), &x);
        assert_eq!(b.as_primitive::<arrow::datatypes::Int32Type>().values()[..], [0, 1, 2, 2, 1]);
        // Boundaries must be sorted literals; clip takes three numbers.
        let spec = ElementSpec::from_arrow_schema(&x.schema()).unwrap();
        for bad in [
            call(Func::Bucketize, vec![c("d"), f(1.0), f(0.0)]),
            call(Func::Bucketize, vec![c("d"), c("i")]),
            call(Func::Bucketize, vec![c("d")]),
            call(Func::Clip, vec![c("d"), f(0.0)]),
        ] {
            assert!(bad.data_type(&spec).is_err(), "{bad}");
        }
    }

    #[test]
    fn math_functions() {
        let x = chunk(vec![
            ("i", Arc::new(Int64Array::from(vec![4, 9, -8])) as ArrayRef),
            ("f", Arc::new(Float32Array::from(vec![4.0, 0.25, -1.5]))),
            ("d", Arc::new(Float64Array::from(vec![-1.5, 2.5, 0.0]))),
            ("z", Arc::new(Float64Array::from(vec![0.0, 0.0, 0.0]))),
        ]);
        let one = |func, col: &str| call(func, vec![c(col)]);
        assert_eq!(floats(&eval(&call(Func::Sqrt, vec![c("i")]), &x))[..2], [Some(2.0), Some(3.0)]);
        assert!(floats(&eval(&one(Func::Sqrt, "i"), &x))[2].unwrap().is_nan());
        assert_eq!(eval(&one(Func::Sqrt, "f"), &x).as_primitive::<Float32Type>().value(0), 2.0);
        assert_eq!(floats(&eval(&one(Func::Floor, "d"), &x)), vec![Some(-2.0), Some(2.0), Some(0.0)]);
        assert_eq!(floats(&eval(&one(Func::Ceil, "d"), &x)), vec![Some(-1.0), Some(3.0), Some(0.0)]);
        // Half to even, as tf.round: -1.5 to -2, 2.5 to 2.
        assert_eq!(floats(&eval(&one(Func::Round, "d"), &x)), vec![Some(-2.0), Some(2.0), Some(0.0)]);
        assert_eq!(floats(&eval(&one(Func::Trunc, "d"), &x)), vec![Some(-1.0), Some(2.0), Some(0.0)]);
        assert_eq!(floats(&eval(&one(Func::Abs, "d"), &x)), vec![Some(1.5), Some(2.5), Some(0.0)]);
        assert_eq!(floats(&eval(&one(Func::Signum, "d"), &x)), vec![Some(-1.0), Some(1.0), Some(0.0)]);
        assert_eq!(
            eval(&one(Func::Abs, "f"), &x).as_primitive::<Float32Type>(),
            &Float32Array::from(vec![4.0, 0.25, 1.5])
        );
        // Integer rounding keeps the integers; abs and signum stay integers.
        assert_eq!(ints(&eval(&one(Func::Floor, "i"), &x)), vec![Some(4), Some(9), Some(-8)]);
        assert_eq!(ints(&eval(&one(Func::Abs, "i"), &x)), vec![Some(4), Some(9), Some(8)]);
        assert_eq!(ints(&eval(&one(Func::Signum, "i"), &x)), vec![Some(1), Some(1), Some(-1)]);
        assert_eq!(floats(&eval(&one(Func::Exp, "z"), &x)), vec![Some(1.0); 3]);
        assert_eq!(floats(&eval(&one(Func::Cos, "z"), &x)), vec![Some(1.0); 3]);
        for func in [Func::Sin, Func::Tan, Func::Tanh] {
            assert_eq!(floats(&eval(&one(func, "z"), &x)), vec![Some(0.0); 3]);
        }
        let p = chunk(vec![("v", Arc::new(Int64Array::from(vec![1, 8, 1000])) as ArrayRef)]);
        let close = |out: Vec<Option<f64>>, want: [f64; 3]| {
            for (o, w) in out.iter().zip(want) {
                assert!((o.unwrap() - w).abs() < 1e-12, "{out:?} != {want:?}");
            }
        };
        close(floats(&eval(&one(Func::Ln, "v"), &p)), [0.0, 8f64.ln(), 1000f64.ln()]);
        close(floats(&eval(&one(Func::Log2, "v"), &p)), [0.0, 3.0, 1000f64.log2()]);
        close(floats(&eval(&one(Func::Log10, "v"), &p)), [0.0, 8f64.log10(), 3.0]);
        close(floats(&eval(&call(Func::Power, vec![c("v"), i(2)]), &p)), [1.0, 64.0, 1e6]);
        close(floats(&eval(&call(Func::Atan2, vec![c("v"), c("v")]), &p)), [std::f64::consts::FRAC_PI_4; 3]);
        // Power of a float32 column stays float32.
        let out = eval(&call(Func::Power, vec![c("f"), f(2.0)]), &x);
        assert_eq!(out.as_primitive::<Float32Type>(), &Float32Array::from(vec![16.0, 0.0625, 2.25]));
        // abs of the most negative integer does not fit: an error, not a panic.
        let m = chunk(vec![("m", Arc::new(Int8Array::from(vec![-128])) as ArrayRef)]);
        assert!(err(&one(Func::Abs, "m"), &m).contains("abs(m)"));
    }

    #[test]
    fn least_greatest_coalesce() {
        let batch = chunk(vec![
            ("a", Arc::new(Int64Array::from(vec![Some(1), None, Some(5), None])) as ArrayRef),
            ("b", Arc::new(Int64Array::from(vec![Some(3), Some(2), None, None]))),
        ]);
        let ab = vec![c("a"), c("b")];
        assert_eq!(ints(&eval(&call(Func::Least, ab.clone()), &batch)), vec![Some(1), Some(2), Some(5), None]);
        assert_eq!(ints(&eval(&call(Func::Greatest, ab.clone()), &batch)), vec![Some(3), Some(2), Some(5), None]);
        assert_eq!(ints(&eval(&call(Func::Coalesce, ab), &batch)), vec![Some(1), Some(2), Some(5), None]);
        let with_default = vec![c("a"), c("b"), i(0)];
        assert_eq!(ints(&eval(&call(Func::Coalesce, with_default), &batch)), vec![Some(1), Some(2), Some(5), Some(0)]);
        assert_eq!(
            floats(&eval(&call(Func::Greatest, vec![c("a"), f(2.5)]), &batch)),
            vec![Some(2.5), Some(2.5), Some(5.0), Some(2.5)]
        );
    }

    #[test]
    fn scalars_broadcast_over_tensors_of_unknown_dims() {
        let r = ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
            Some(vec![Some(1), Some(2)]),
            Some(vec![]),
            None,
            Some(vec![Some(4), Some(5), Some(6)]),
        ]);
        let batch = chunk(vec![
            ("r", Arc::new(r) as ArrayRef),
            ("w", Arc::new(Int64Array::from(vec![Some(10), Some(20), Some(30), None]))),
        ]);
        let out = evaluate_with_batch_dims(&bin(BinaryOp::Mul, c("r"), c("w")), &batch, 1).unwrap();
        let rows: Vec<Option<Vec<Option<i64>>>> = out
            .as_list::<i32>()
            .iter()
            .map(|row| row.map(|v| v.as_primitive::<Int64Type>().iter().collect()))
            .collect();
        // A null list stays null; a null scalar makes its element's values null.
        assert_eq!(rows, vec![Some(vec![Some(10), Some(20)]), Some(vec![]), None, Some(vec![None, None, None])]);
    }

    #[test]
    fn length_of_strings_and_lists() {
        let tokens = ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
            Some(vec![Some(1), Some(2), Some(3)]),
            Some(vec![]),
            None,
            Some(vec![Some(4)]),
        ]);
        let batch = chunk(vec![
            ("s", Arc::new(StringArray::from(vec![Some("héllo"), Some(""), None, Some("ab")])) as ArrayRef),
            ("tokens", Arc::new(tokens)),
        ]);
        assert_eq!(ints(&eval(&call(Func::Length, vec![c("s")]), &batch)), vec![Some(5), Some(0), None, Some(2)]);
        assert_eq!(ints(&eval(&call(Func::Length, vec![c("tokens")]), &batch)), vec![Some(3), Some(0), None, Some(1)]);
        let longer = bin(BinaryOp::Gt, call(Func::Length, vec![c("tokens")]), call(Func::Length, vec![c("s")]));
        assert_eq!(evaluate_predicate(&longer, &batch).unwrap(), BooleanArray::from(vec![false, false, false, false]));
        // Unbatched, the tokens are a tensor per element: no elementwise kernel applies.
        let msg = evaluate_with_batch_dims(&bin(BinaryOp::Add, c("tokens"), i(1)), &batch, 0).unwrap_err().to_string();
        assert!(msg.contains("'tokens'") && msg.contains("tensor"), "{msg}");
    }

    #[test]
    fn predicates_treat_null_as_false() {
        let mask = evaluate_predicate(&bin(BinaryOp::Gt, c("a"), i(1)), &ab()).unwrap();
        assert_eq!(mask, BooleanArray::from(vec![false, true, true, false]));
        let msg = evaluate_predicate(&c("a"), &ab()).unwrap_err().to_string();
        assert!(msg.contains("bool"), "{msg}");
    }

    #[test]
    fn errors_name_the_expression() {
        let batch = ab();
        let msg = err(&bin(BinaryOp::Add, c("a"), c("missing")), &batch);
        assert!(msg.contains("missing") && msg.contains("a, b"), "{msg}");
        let msg = err(&bin(BinaryOp::Add, c("a"), s("x")), &batch);
        assert!(msg.contains("(a + \"x\")"), "{msg}");
    }

    fn fixed(values: Vec<[f32; 2]>) -> ArrayRef {
        Arc::new(FixedSizeListArray::from_iter_primitive::<Float32Type, _, _>(
            values.into_iter().map(|v| Some(v.map(Some))),
            2,
        ))
    }

    fn list(values: Vec<Vec<i64>>) -> ListArray {
        ListArray::from_iter_primitive::<Int64Type, _, _>(values.into_iter().map(|v| Some(v.into_iter().map(Some))))
    }

    #[test]
    fn batched_fixed_size_lists() {
        let batch = chunk(vec![
            ("x", fixed(vec![[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])),
            ("y", fixed(vec![[1.0, 1.0], [0.0, 2.0], [1.0, 0.5]])),
        ]);
        let out = eval_batched(&bin(BinaryOp::Mul, c("x"), f(2.0)), &batch);
        assert_eq!(out.as_ref(), fixed(vec![[2.0, 4.0], [6.0, 8.0], [10.0, 12.0]]).as_ref());
        let out = eval_batched(&bin(BinaryOp::Sub, c("x"), c("y")), &batch);
        assert_eq!(out.as_ref(), fixed(vec![[0.0, 1.0], [3.0, 2.0], [4.0, 5.5]]).as_ref());
        let out = eval_batched(&bin(BinaryOp::Gt, c("x"), c("y")), &batch);
        let flags = out.as_fixed_size_list().values().as_boolean().iter().collect::<Vec<_>>();
        assert_eq!(flags, [false, true, true, true, true, true].map(Some));
        // A literal over a batched chunk broadcasts to every value of every element.
        let out = eval_batched(&i(7), &batch);
        assert_eq!(out.as_fixed_size_list().values().as_primitive::<Int64Type>().values().to_vec(), vec![7; 6]);
        // A sliced chunk keeps its own elements only.
        let out = eval_batched(&bin(BinaryOp::Add, c("x"), c("y")), &batch.slice(1, 2));
        assert_eq!(out.as_ref(), fixed(vec![[3.0, 6.0], [6.0, 6.5]]).as_ref());
    }

    #[test]
    fn batched_lists() {
        let batch = chunk(vec![
            ("x", Arc::new(list(vec![vec![1, 2], vec![], vec![3]])) as ArrayRef),
            ("y", Arc::new(list(vec![vec![10, 20], vec![], vec![30]]))),
            ("z", Arc::new(list(vec![vec![1], vec![2], vec![3]]))),
        ]);
        let out = eval_batched(&bin(BinaryOp::Add, c("x"), c("y")), &batch);
        assert_eq!(out.as_list::<i32>(), &list(vec![vec![11, 22], vec![], vec![33]]));
        // Offsets of a sliced chunk are rebased.
        let sliced = batch.slice(1, 2);
        let out = eval_batched(&bin(BinaryOp::Mul, c("y"), i(2)), &sliced);
        assert_eq!(out.as_list::<i32>(), &list(vec![vec![], vec![60]]));
        let msg = err(&bin(BinaryOp::Add, c("x"), c("z")), &batch);
        assert!(msg.contains("differ in shape") && msg.contains("(x + z)"), "{msg}");
    }

    #[test]
    fn length_of_batched_ragged_fields() {
        // Two elements of a batch of 2, each a ragged row of tokens: shape [2, -1].
        let rows = list(vec![vec![1, 2, 3], vec![], vec![4], vec![5, 6]]);
        let tokens = FixedSizeListArray::try_new(
            Arc::new(Field::new("item", rows.data_type().clone(), true)),
            2,
            Arc::new(rows),
            None,
        )
        .unwrap();
        let batch = chunk(vec![
            ("tokens", Arc::new(tokens) as ArrayRef),
            (
                "w",
                Arc::new(FixedSizeListArray::from_iter_primitive::<Int64Type, _, _>(
                    vec![Some(vec![Some(1), Some(2)]), Some(vec![Some(3), Some(4)])],
                    2,
                )),
            ),
        ]);
        let e = bin(BinaryOp::Mul, call(Func::Length, vec![c("tokens")]), c("w"));
        let out = evaluate_with_batch_dims(&e, &batch, 1).unwrap();
        let expected = FieldSpec::scalar("out", DType::Int64).batched(2).arrow_type();
        assert_eq!(out.data_type(), &expected);
        assert_eq!(out.as_fixed_size_list().values().as_primitive::<Int64Type>().values().to_vec(), vec![3, 0, 3, 8]);
        // Inferred from `w` without being told.
        assert_eq!(evaluate(&e, &batch).unwrap().as_ref(), out.as_ref());
        let lengths = evaluate(&call(Func::Length, vec![c("tokens")]), &batch).unwrap();
        assert_eq!(
            lengths.as_fixed_size_list().values().as_primitive::<Int64Type>().values().to_vec(),
            vec![3, 0, 1, 2]
        );
    }

    fn spec(fields: Vec<FieldSpec>) -> SchemaRef {
        ElementSpec::new(fields).unwrap().arrow_schema()
    }

    #[test]
    fn map_keeps_replaces_and_appends() {
        let batch = ab();
        let outputs = vec![
            NamedExpr { name: "b".into(), expr: bin(BinaryOp::Mul, c("b"), i(2)) },
            NamedExpr { name: "ratio".into(), expr: bin(BinaryOp::Div, c("b"), f(4.0)) },
        ];
        let schema = spec(vec![
            FieldSpec::scalar("a", DType::Int64),
            FieldSpec::scalar("b", DType::Int64),
            FieldSpec::scalar("ratio", DType::Float64),
        ]);
        let out = evaluate_map(&outputs, true, &batch, &schema).unwrap();
        assert_eq!(out.schema(), schema);
        assert_eq!(out.column(0).as_ref(), batch.column(0).as_ref());
        assert_eq!(ints(out.column(1)), vec![Some(20), Some(40), Some(60), Some(80)]);
        assert_eq!(floats(out.column(2)), vec![Some(2.5), Some(5.0), Some(7.5), Some(10.0)]);

        let only = spec(vec![FieldSpec::scalar("ratio", DType::Float64)]);
        let out = evaluate_map(&outputs[1..], false, &batch, &only).unwrap();
        assert_eq!(out.num_columns(), 1);
        assert_eq!(out.num_rows(), 4);

        // No outputs at all still has the chunk's rows.
        let empty = Arc::new(Schema::empty());
        assert_eq!(evaluate_map(&[], false, &batch, &empty).unwrap().num_rows(), 4);
    }

    #[test]
    fn map_checks_the_output_schema() {
        let batch = ab();
        let outputs = vec![NamedExpr { name: "c".into(), expr: bin(BinaryOp::Add, c("a"), c("b")) }];
        let wrong_type = spec(vec![FieldSpec::scalar("c", DType::Int32)]);
        let msg = evaluate_map(&outputs, false, &batch, &wrong_type).unwrap_err().to_string();
        assert!(msg.contains("'c'") && msg.contains("(a + b)") && msg.contains("Int32"), "{msg}");
        let wrong_fields = spec(vec![FieldSpec::scalar("a", DType::Int64), FieldSpec::scalar("c", DType::Int64)]);
        assert!(evaluate_map(&outputs, false, &batch, &wrong_fields).is_err());
        let missing = spec(vec![FieldSpec::scalar("d", DType::Int64)]);
        assert!(evaluate_map(&outputs, false, &batch, &missing).unwrap_err().to_string().contains("'c'"));
    }

    #[test]
    fn map_over_batched_elements_conforms_nested_fields() {
        // Kept input whose list item is named differently from the spec layout.
        let values = Int64Array::from(vec![1, 2, 3, 4]);
        let odd = FixedSizeListArray::try_new(
            Arc::new(Field::new("element", DataType::Int64, false)),
            2,
            Arc::new(values),
            None,
        )
        .unwrap();
        let batch = chunk(vec![("x", Arc::new(odd) as ArrayRef)]);
        let outputs = vec![NamedExpr { name: "y".into(), expr: bin(BinaryOp::Add, c("x"), i(1)) }];
        let out_spec = ElementSpec {
            fields: vec![
                FieldSpec::scalar("x", DType::Int64).batched(2),
                FieldSpec::scalar("y", DType::Int64).batched(2),
            ],
            batch_dims: 1,
        };
        let schema = out_spec.arrow_schema();
        let out = evaluate_map(&outputs, true, &batch, &schema).unwrap();
        assert_eq!(out.schema(), schema);
        assert_eq!(
            out.column(0).as_fixed_size_list().values().as_primitive::<Int64Type>().values().to_vec(),
            vec![1, 2, 3, 4]
        );
        assert_eq!(
            out.column(1).as_fixed_size_list().values().as_primitive::<Int64Type>().values().to_vec(),
            vec![2, 3, 4, 5]
        );
        assert_eq!(out_spec.fields[1].kind, FieldKind::Dense);
    }
}
