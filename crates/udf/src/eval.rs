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

/// The prefix of the names of the columns [`with_reductions`] adds.
const LIFTED: &str = "\u{1}reduced ";

/// Whether `expr` holds a reduction or a tensor function, which [`with_reductions`] computes
/// first over the whole chunk.
pub fn computes_first(expr: &Expr) -> bool {
    let mut found = false;
    expr.visit(&mut |e| found |= matches!(e, Expr::Call { func, .. } if func.is_computed_first()));
    found
}

/// `expr` with every reduction (`reduce_sum(t)`, ...) and tensor function (`one_hot`,
/// `reduce_sum_axes`, `normalize`: [`Func::is_tensor_function`]) computed first, over the
/// whole chunk, as a column added to `batch` and read in its place; `None` when there is none.
///
/// A reduction's value is one per element, so the rest of the expression sees a scalar
/// field, which is broadcast if the expression is itself over a tensor (`t / reduce_sum(t)`).
/// A tensor function's value is a tensor field of the shape it gives (`one_hot(k, 3)` a
/// `[3]` one). Those inside another's argument are computed before it.
pub fn with_reductions(expr: &Expr, batch: &RecordBatch) -> Result<Option<(Expr, RecordBatch)>> {
    if !computes_first(expr) {
        return Ok(None);
    }
    let mut batch = batch.clone();
    let expr = lift_reductions(expr, &mut batch)?;
    Ok(Some((expr, batch)))
}

fn lift_reductions(expr: &Expr, batch: &mut RecordBatch) -> Result<Expr> {
    let mut lift = |e: &Expr| lift_reductions(e, batch);
    Ok(match expr {
        Expr::Column(_) | Expr::Literal(_) => expr.clone(),
        Expr::Unary { op, arg } => Expr::Unary { op: *op, arg: Box::new(lift(arg)?) },
        Expr::Cast { arg, to } => Expr::Cast { arg: Box::new(lift(arg)?), to: *to },
        Expr::Binary { op, left, right } => {
            let left = lift(left)?;
            Expr::Binary { op: *op, left: Box::new(left), right: Box::new(lift(right)?) }
        }
        Expr::Case { branches, otherwise } => {
            let branches = branches.iter().map(|(c, v)| Ok((lift(c)?, lift(v)?))).collect::<Result<Vec<_>>>()?;
            let otherwise = otherwise.as_ref().map(|o| lift(o).map(Box::new)).transpose()?;
            Expr::Case { branches, otherwise }
        }
        Expr::Call { func, args } if func.is_reduction() => {
            let [arg] = args.as_slice() else {
                return Err(at(format!("{} takes 1 argument", func.name()), expr));
            };
            let arg = lift(arg)?;
            let value = reduce(*func, &arg, batch).map_err(|e| at(e, expr))?;
            Expr::Column(add_column(batch, value, expr)?)
        }
        // Image functions evaluate their own arguments: a crop looks at whether its image is
        // still encoded (`decode_jpeg_rows`) before anything is decoded.
        Expr::Call { func: Func::ReadFile, args } => {
            let [path] = args.as_slice() else { return Err(at("read_file takes a path", expr)) };
            let paths = crate::image::value(path, batch, 0)?;
            let value = crate::read_file::read_files(&paths).map_err(|e| at(e, expr))?;
            Expr::Column(add_column(batch, value, expr)?)
        }
        Expr::Call { func, args } if func.is_image_function() => {
            let value = crate::image::evaluate(*func, args, batch, expr)?;
            Expr::Column(add_column(batch, value, expr)?)
        }
        Expr::Call { func, args } if func.is_tensor_function() => {
            // `normalize` of a uint8 image converted to float may run as one pass.
            let value = match crate::image::fused::evaluate(expr, batch)? {
                Some(value) => value,
                None => {
                    let args = args.iter().map(|a| lift_reductions(a, batch)).collect::<Result<Vec<_>>>()?;
                    crate::tensor_ops::evaluate(*func, &args, batch, expr)?
                }
            };
            Expr::Column(add_column(batch, value, expr)?)
        }
        Expr::Call { func, args } => Expr::Call { func: *func, args: args.iter().map(lift).collect::<Result<_>>()? },
    })
}

/// `batch` with `value` added as a column of its own; the column's name.
fn add_column(batch: &mut RecordBatch, value: ArrayRef, expr: &Expr) -> Result<String> {
    let name = format!("{LIFTED}{}", batch.num_columns());
    let mut fields: Vec<Field> = batch.schema().fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(&name, value.data_type().clone(), true));
    let mut columns = batch.columns().to_vec();
    columns.push(value);
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    *batch = RecordBatch::try_new_with_options(Arc::new(arrow::datatypes::Schema::new(fields)), columns, &options)
        .map_err(|e| at(e, expr))?;
    Ok(name)
}

/// The values `arg` takes on each row's tensors over `batch`, flat ([`TensorArg`]); a scalar
/// per element is a tensor of shape `[]`.
pub(crate) fn tensor_arg(arg: &Expr, batch: &RecordBatch) -> Result<TensorArg> {
    let rows = batch.num_rows();
    let dims = arg.columns().iter().filter_map(|c| batch.column_by_name(c)).map(|c| list_depth(c.data_type())).max();
    let arg_value = match Tensors::flatten(arg, batch, dims.unwrap_or(0))? {
        Some(flat) => {
            let shape = flat
                .levels
                .iter()
                .map(|l| match l {
                    Level::Fixed { size, .. } => Ok(*size as usize),
                    Level::List { .. } => Err(at("a ragged list is not a tensor", arg)),
                })
                .collect::<Result<Vec<_>>>()?;
            let nulls = match flat.levels.first() {
                Some(Level::Fixed { nulls, .. }) => nulls.clone(),
                _ => None,
            };
            TensorArg { values: evaluate_with_batch_dims(arg, flat.batch(arg)?, 0)?, shape, rows, nulls }
        }
        None => TensorArg { values: evaluate_with_batch_dims(arg, batch, 0)?, shape: Vec::new(), rows, nulls: None },
    };
    if Some(arg_value.values.len()) != arg_value.width().checked_mul(rows) {
        return Err(at(
            format!("{} values for {rows} tensors of shape {:?}", arg_value.values.len(), arg_value.shape),
            arg,
        ));
    }
    Ok(arg_value)
}

/// One value per row of `batch`: `func` over the values `arg` takes on each row's tensors.
fn reduce(func: Func, arg: &Expr, batch: &RecordBatch) -> Result<ArrayRef> {
    reduce_whole(func, &tensor_arg(arg, batch)?)
}

/// One value per row of `arg`: `func`, a reduction over every dim, over the row's values. A
/// null tensor gives null; a null value in another is an error.
pub(crate) fn reduce_whole(func: Func, arg: &TensorArg) -> Result<ArrayRef> {
    let (rows, width) = (arg.rows, arg.width());
    let values = &arg.values;
    if arg.null_values_in_valid_rows() {
        return Err(Error::Expr(format!("{} over null values", func.name())));
    }
    let float32 = values.data_type() == &DataType::Float32;
    let out: ArrayRef = if values.data_type().is_floating() || func == Func::ReduceMean {
        let values = cast_with_options(&values, &DataType::Float64, &strict())?;
        let values = values.as_primitive::<Float64Type>().values();
        let per_row = (0..rows).map(|r| {
            let row = &values[r * width..(r + 1) * width];
            match func {
                Func::ReduceSum => row.iter().sum(),
                Func::ReduceMean => row.iter().sum::<f64>() / width as f64,
                Func::ReduceMax => {
                    row.iter()
                        .fold(f64::NEG_INFINITY, |m, v| if v.is_nan() || m.is_nan() { f64::NAN } else { m.max(*v) })
                }
                _ => row.iter().fold(f64::INFINITY, |m, v| if v.is_nan() || m.is_nan() { f64::NAN } else { m.min(*v) }),
            }
        });
        let out = Arc::new(Float64Array::new(per_row.collect(), arg.nulls.clone())) as ArrayRef;
        if float32 {
            cast_with_options(&out, &DataType::Float32, &strict())?
        } else {
            out
        }
    } else {
        let original = values.data_type().clone();
        let values = cast_with_options(&values, &DataType::Int64, &strict())?;
        let values = values.as_primitive::<Int64Type>().values();
        let mut per_row = Vec::with_capacity(rows);
        for r in 0..rows {
            let row = &values[r * width..(r + 1) * width];
            if arg.nulls.as_ref().is_some_and(|n| n.is_null(r)) {
                per_row.push(0);
                continue;
            }
            per_row.push(match func {
                Func::ReduceSum => row
                    .iter()
                    .try_fold(0i64, |s, v| s.checked_add(*v))
                    .ok_or_else(|| Error::Expr(format!("reduce_sum overflows at row {r}")))?,
                Func::ReduceMax => row.iter().copied().max().unwrap_or(i64::MIN),
                _ => row.iter().copied().min().unwrap_or(i64::MAX),
            });
        }
        let out = Arc::new(Int64Array::new(per_row.into(), arg.nulls.clone())) as ArrayRef;
        cast_with_options(&out, &original, &strict())?
    };
    Ok(out)
}

/// A tensor expression's chunk made flat: each tensor column replaced by its values, each
/// per-row scalar column standing for its value repeated once per value of its row's
/// tensors, so that the expression runs elementwise over plain columns; [`Tensors::wrap`]
/// puts the tensor shape back on the result. A kernel reads the scalars per row
/// ([`FlatColumn::Repeated`]); the Arrow evaluation reads [`Tensors::batch`], where they are
/// repeated into columns of their own.
#[derive(Debug)]
pub struct Tensors {
    schema: SchemaRef,
    columns: Vec<FlatColumn>,
    /// Values per row's tensor.
    width: usize,
    rows: usize,
    batch: OnceLock<RecordBatch>,
    levels: Vec<Level>,
}

/// A column of a flat chunk ([`Tensors`]).
#[derive(Debug, Clone)]
pub enum FlatColumn {
    /// A tensor field's values.
    Values(ArrayRef),
    /// A per-row scalar, standing for each of its values repeated `width` times.
    Repeated(ArrayRef),
}

impl Tensors {
    /// The flat form of `batch` for `expr` when its value is a tensor of `dims` dimensions
    /// (fixed-size lists) and it reads at least one tensor field; `None` otherwise (scalar
    /// outputs, batched elements with ragged lists, `length`), for the other evaluation.
    pub fn flatten(expr: &Expr, batch: &RecordBatch, dims: usize) -> Result<Option<Tensors>> {
        if dims == 0 {
            return Ok(None);
        }
        let refs = column_refs(expr);
        if refs.iter().any(|(_, counted)| *counted) {
            return Ok(None);
        }
        let mut tensors: Vec<(&str, Vec<Level>, ArrayRef, Vec<usize>)> = Vec::new();
        let mut scalars: Vec<(&str, FlatColumn)> = Vec::new();
        for (name, _) in &refs {
            let Some(array) = batch.column_by_name(name) else {
                return Ok(None);
            };
            match list_depth(array.data_type()) {
                0 => scalars.push((name, FlatColumn::Repeated(array.clone()))),
                d if d <= dims && fixed_only(array.data_type()) => {
                    let (levels, values) = peel(array, d).expect("a fixed-size list of that depth");
                    let shape = fixed_sizes(&levels);
                    tensors.push((name, levels, values, shape));
                }
                _ => return Ok(None),
            }
        }
        let mut joint: Vec<i64> = Vec::new();
        for (_, _, _, shape) in &tensors {
            let shape: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
            joint = broadcast_shape(&joint, &shape)
                .ok_or_else(|| Error::Expr(format!("tensor fields of different shapes in {expr}")))?;
        }
        if tensors.is_empty() || joint.len() != dims {
            return Ok(None);
        }
        let joint: Vec<usize> = joint.into_iter().map(|d| d as usize).collect();
        let rows = batch.num_rows();
        // The result takes the levels (and so the null tensors) of a field of its shape; when
        // none has it (`[4, 1] * [3]`), plain levels of that shape.
        let levels = match tensors.iter_mut().find(|t| t.3 == joint) {
            Some(t) => std::mem::take(&mut t.1),
            None => joint_levels(&joint, rows),
        };
        let width: usize = joint.iter().product();
        let mut columns: Vec<(&str, FlatColumn)> = Vec::with_capacity(tensors.len() + scalars.len());
        for (name, own, values, shape) in tensors {
            let values = if shape == joint {
                values
            } else {
                stretch(&values, &own, &shape, &joint, rows).map_err(|e| at(e, expr))?
            };
            columns.push((name, FlatColumn::Values(values)));
        }
        columns.extend(scalars);
        let fields: Vec<Field> = columns
            .iter()
            .map(|(name, c)| {
                let (FlatColumn::Values(a) | FlatColumn::Repeated(a)) = c;
                Field::new(*name, a.data_type().clone(), true)
            })
            .collect();
        let columns = columns.into_iter().map(|(_, c)| c).collect();
        let schema = Arc::new(arrow::datatypes::Schema::new(fields));
        Ok(Some(Tensors { schema, columns, width, rows, batch: OnceLock::new(), levels }))
    }

    /// The flat chunk's schema: a column per field the expression reads.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The flat chunk's columns, in the schema's order.
    pub fn columns(&self) -> &[FlatColumn] {
        &self.columns
    }

    /// The values of each row's tensors: how often a repeated column repeats each value.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The flat chunk's rows: every value of every row's tensors.
    pub fn len(&self) -> usize {
        self.rows * self.width
    }

    /// Whether the flat chunk has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The flat chunk with the repeated columns made (once, on first use).
    pub fn batch(&self, expr: &Expr) -> Result<&RecordBatch> {
        if let Some(batch) = self.batch.get() {
            return Ok(batch);
        }
        let columns = self
            .columns
            .iter()
            .map(|c| match c {
                FlatColumn::Values(a) => Ok(a.clone()),
                FlatColumn::Repeated(a) => repeat_each(a, self.rows, self.width),
            })
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| at(e, expr))?;
        let batch = RecordBatch::try_new(self.schema.clone(), columns).map_err(|e| at(e, expr))?;
        Ok(self.batch.get_or_init(|| batch))
    }

    /// The flat result `values` of the expression, shaped as its tensors again.
    pub fn wrap(&self, values: ArrayRef, expr: &Expr) -> Result<ArrayRef> {
        rewrap(&self.levels, values).map_err(|e| at(e, expr))
    }

    /// Whether no tensor level has nulls: a selection of rows then needs no validity of
    /// its own ([`wrap_rows`](Self::wrap_rows)).
    pub fn levels_valid(&self) -> bool {
        self.levels.iter().all(|l| matches!(l, Level::Fixed { nulls: None, .. }))
    }

    /// The flat result `values` over `rows` of the chunk's rows (a selection of them),
    /// shaped as its tensors again; the levels must have no nulls ([`Self::levels_valid`]).
    pub fn wrap_rows(&self, values: ArrayRef, rows: usize, expr: &Expr) -> Result<ArrayRef> {
        let levels: Vec<Level> = self
            .levels
            .iter()
            .map(|l| match l {
                // Each level holds a fixed number of values per row.
                Level::Fixed { size, len, .. } => {
                    Level::Fixed { size: *size, len: len / self.rows.max(1) * rows, nulls: None }
                }
                Level::List { .. } => unreachable!("fixed-size levels only"),
            })
            .collect();
        rewrap(&levels, values).map_err(|e| at(e, expr))
    }
}

/// Each of the first `rows` values of `array` `width` times in a row: a per-element scalar
/// beside each value of the element's tensor. Numbers without nulls are repeated straight
/// into the output; anything else is gathered by index.
pub(crate) fn repeat_each(array: &ArrayRef, rows: usize, width: usize) -> std::result::Result<ArrayRef, ArrowError> {
    fn repeat<T: ArrowPrimitiveType>(array: &PrimitiveArray<T>, rows: usize, width: usize) -> ArrayRef {
        let mut values = Vec::with_capacity(rows * width);
        for v in &array.values()[..rows] {
            values.extend(std::iter::repeat_n(*v, width));
        }
        Arc::new(PrimitiveArray::<T>::new(values.into(), None).with_data_type(array.data_type().clone()))
    }
    if array.null_count() == 0 {
        downcast_primitive_array!(
            array => return Ok(repeat(array, rows, width)),
            _ => {}
        )
    }
    let mut index = Vec::with_capacity(rows * width);
    for r in 0..rows as u32 {
        index.extend(std::iter::repeat_n(r, width));
    }
    take(array, &UInt32Array::from(index), None)
}

/// Whether every list level of `dt` has a fixed size (a tensor's, not a ragged batch's).
fn fixed_only(dt: &DataType) -> bool {
    match dt {
        DataType::FixedSizeList(item, _) => fixed_only(item.data_type()),
        DataType::List(_) => false,
        _ => true,
    }
}

/// The sizes of fixed-size list levels: a tensor's shape.
fn fixed_sizes(levels: &[Level]) -> Vec<usize> {
    levels
        .iter()
        .map(|l| match l {
            Level::Fixed { size, .. } => *size as usize,
            Level::List { .. } => unreachable!("fixed-size levels only"),
        })
        .collect()
}

/// Fixed-size levels of `shape` over `rows` rows, with no null tensors.
fn joint_levels(shape: &[usize], rows: usize) -> Vec<Level> {
    let mut len = rows;
    shape
        .iter()
        .map(|&size| {
            let level = Level::Fixed { size: size as i32, len, nulls: None };
            len *= size;
            level
        })
        .collect()
}

/// The flat `values` of tensors of `shape` (levels `levels`, one tensor per row) broadcast
/// to `joint`: each value repeated along the dims where `shape` has 1 or lacks the dim. A
/// value under a null tensor (at any level) comes out null.
fn stretch(
    values: &ArrayRef,
    levels: &[Level],
    shape: &[usize],
    joint: &[usize],
    rows: usize,
) -> std::result::Result<ArrayRef, ArrowError> {
    let width: usize = shape.iter().product();
    let joint_width: usize = joint.iter().product();
    // How far one step along each joint dim moves in a tensor of `shape`: 0 where it stretches.
    let mut strides = vec![0usize; joint.len()];
    let mut stride = 1;
    for (i, &size) in shape.iter().enumerate().rev() {
        if size != 1 {
            strides[i + joint.len() - shape.len()] = stride;
        }
        stride *= size;
    }
    // Where each value of one joint tensor comes from in one tensor of `shape`.
    let mut within = vec![0usize; joint_width];
    for (o, from) in within.iter_mut().enumerate() {
        let mut rest = o;
        for k in (0..joint.len()).rev() {
            *from += rest % joint[k] * strides[k];
            rest /= joint[k];
        }
    }
    // The null slots of each level, with how many values lie below one slot.
    let nulls: Vec<(&NullBuffer, usize)> = levels
        .iter()
        .enumerate()
        .filter_map(|(j, l)| match l {
            Level::Fixed { nulls: Some(n), .. } if n.null_count() > 0 => {
                Some((n, shape[j..].iter().product::<usize>().max(1)))
            }
            _ => None,
        })
        .collect();
    let mut index = Vec::with_capacity(rows * joint_width);
    for row in 0..rows {
        let base = row * width;
        index.extend(within.iter().map(|&from| {
            let at = base + from;
            nulls.iter().all(|(n, below)| n.is_valid(at / below)).then_some(at as u64)
        }));
    }
    take(values, &UInt64Array::from(index), None)
}

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

/// How many `List`/`FixedSizeList` levels wrap the values of a column of type `dt`.
pub(crate) fn list_depth(dt: &DataType) -> usize {
    match dt {
        DataType::List(item) | DataType::FixedSizeList(item, _) => 1 + list_depth(item.data_type()),
        _ => 0,
    }
}

/// One list level of a batched column, with offsets rebased to its leaf values.
#[derive(Debug)]
enum Level {
    List { offsets: OffsetBuffer<i32>, nulls: Option<NullBuffer> },
    Fixed { size: i32, len: usize, nulls: Option<NullBuffer> },
}

/// Strips `dims` list levels off `array`: the levels, outermost first, and the values below.
fn peel(array: &ArrayRef, dims: usize) -> Option<(Vec<Level>, ArrayRef)> {
    let mut levels = Vec::with_capacity(dims);
    let mut values = array.clone();
    for _ in 0..dims {
        let (level, inner) = match values.data_type() {
            DataType::List(_) => {
                let list = values.as_list::<i32>();
                let offsets = list.offsets();
                let (start, end) = (offsets[0], offsets[offsets.len() - 1]);
                // A sliced list still points into its whole values array; keep only its part.
                let inner = list.values().slice(start as usize, (end - start) as usize);
                let offsets = if start == 0 {
                    offsets.clone()
                } else {
                    OffsetBuffer::new(offsets.iter().map(|o| o - start).collect())
                };
                (Level::List { offsets, nulls: list.nulls().cloned() }, inner)
            }
            DataType::FixedSizeList(_, size) => {
                let list = values.as_fixed_size_list();
                let inner = list.values().slice(0, list.len() * *size as usize);
                (Level::Fixed { size: *size, len: list.len(), nulls: list.nulls().cloned() }, inner)
            }
            _ => return None,
        };
        levels.push(level);
        values = inner;
    }
    Some((levels, values))
}

/// Same list kinds, sizes and offsets: the columns hold the same number of values per element.
fn same_levels(a: &[Level], b: &[Level]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|pair| match pair {
            (Level::List { offsets: x, .. }, Level::List { offsets: y, .. }) => x[..] == y[..],
            (Level::Fixed { size: x, len: m, .. }, Level::Fixed { size: y, len: n, .. }) => x == y && m == n,
            _ => false,
        })
}

/// For each of the `leaves` values below `levels` (peeled off a column of `rows` rows), the
/// row it belongs to.
fn leaf_owners(levels: &[Level], rows: usize, leaves: usize) -> Result<Vec<u32>, String> {
    let mut ranges: Vec<(usize, usize)> = (0..rows).map(|r| (r, r + 1)).collect();
    for level in levels {
        for range in &mut ranges {
            *range = match level {
                Level::List { offsets, .. } => (offsets[range.0] as usize, offsets[range.1] as usize),
                Level::Fixed { size, .. } => (range.0 * *size as usize, range.1 * *size as usize),
            };
        }
    }
    let mut owners = Vec::with_capacity(leaves);
    for (row, (start, end)) in ranges.into_iter().enumerate() {
        let row = u32::try_from(row).map_err(|_| "a chunk of more than 2^32 rows".to_string())?;
        owners.extend(std::iter::repeat_n(row, end - start));
    }
    Ok(owners)
}

/// Wraps `leaf` in `levels` again, with the item fields the spec layout uses.
fn rewrap(levels: &[Level], leaf: ArrayRef) -> Result<ArrayRef, ArrowError> {
    levels.iter().rev().try_fold(leaf, |values, level| {
        let item = Arc::new(Field::new("item", values.data_type().clone(), true));
        Ok(match level {
            Level::List { offsets, nulls } => {
                Arc::new(ListArray::try_new(item, offsets.clone(), values, nulls.clone())?) as ArrayRef
            }
            Level::Fixed { size, len, nulls } => {
                Arc::new(FixedSizeListArray::try_new_with_length(item, *size, values, nulls.clone(), *len)?)
            }
        })
    })
}

/// The number of items in each row of a list column, and the type of its items.
fn list_lengths(array: &ArrayRef) -> Option<(ArrayRef, DataType)> {
    let counts = match array.data_type() {
        DataType::List(item) => {
            let list = array.as_list::<i32>();
            let counts: Vec<i64> = list.offsets().windows(2).map(|w| i64::from(w[1] - w[0])).collect();
            (Int64Array::new(counts.into(), list.nulls().cloned()), item.data_type().clone())
        }
        DataType::FixedSizeList(item, size) => (
            Int64Array::new(vec![i64::from(*size); array.len()].into(), array.nulls().cloned()),
            item.data_type().clone(),
        ),
        _ => return None,
    };
    Some((Arc::new(counts.0), counts.1))
}

/// Makes `array` have exactly type `target` when the two differ only in nested field names or
/// nullability (a kernel names list items its own way); other differences are errors.
fn conform(array: &ArrayRef, target: &DataType) -> Result<ArrayRef, ArrowError> {
    if array.data_type() == target {
        return Ok(array.clone());
    }
    match (array.data_type(), target) {
        (DataType::List(_), DataType::List(item)) => {
            let list = array.as_list::<i32>();
            let values = conform(list.values(), item.data_type())?;
            Ok(Arc::new(ListArray::try_new(item.clone(), list.offsets().clone(), values, list.nulls().cloned())?))
        }
        (DataType::FixedSizeList(_, n), DataType::FixedSizeList(item, m)) if n == m => {
            let list = array.as_fixed_size_list();
            let values = conform(list.values(), item.data_type())?;
            Ok(Arc::new(FixedSizeListArray::try_new_with_length(
                item.clone(),
                *n,
                values,
                list.nulls().cloned(),
                list.len(),
            )?))
        }
        (have, want) => Err(ArrowError::SchemaError(format!("computed as {have} but the output schema says {want}"))),
    }
}

/// A one-row array holding `value`, in the value's own type.
pub fn scalar_array(value: &Scalar) -> Result<ArrayRef, ArrowError> {
    let array: ArrayRef = match value {
        Scalar::Null(t) => return Ok(new_null_array(&t.to_arrow(), 1)),
        Scalar::Bool(b) => Arc::new(BooleanArray::from(vec![*b])),
        Scalar::Int(v, t) => return cast_with_options(&Int64Array::from(vec![*v]), &t.to_arrow(), &strict()),
        Scalar::UInt64(v) => Arc::new(UInt64Array::from(vec![*v])),
        Scalar::Float(v, t) => return cast_with_options(&Float64Array::from(vec![*v]), &t.to_arrow(), &strict()),
        Scalar::Utf8(s) => Arc::new(StringArray::from(vec![s.as_str()])),
        Scalar::Binary(b) => Arc::new(BinaryArray::from_vec(vec![b.as_slice()])),
    };
    Ok(array)
}

/// An evaluated sub-expression. `lit` marks a value computed from literals alone: it is one
/// element that stands for every row (a scalar [`Datum`] to Arrow's kernels), and it adopts
/// the type of the column it meets ([`common_type`]).
#[derive(Debug, Clone)]
struct Value {
    array: ArrayRef,
    lit: bool,
}

impl Datum for Value {
    fn get(&self) -> (&dyn Array, bool) {
        (self.array.as_ref(), self.lit)
    }
}

impl Value {
    fn column(array: ArrayRef) -> Value {
        Value { array, lit: false }
    }

    fn dtype(&self, expr: &Expr) -> Result<DType> {
        DType::from_arrow(self.array.data_type()).map_err(|e| at(e, expr))
    }

    fn cast(self, to: DType, expr: &Expr) -> Result<Value> {
        let to = to.to_arrow();
        if self.array.data_type() == &to {
            return Ok(self);
        }
        let array = cast_with_options(&self.array, &to, &strict()).map_err(|e| at(e, expr))?;
        Ok(Value { array, lit: self.lit })
    }

    /// The value as a column of `len` rows.
    fn into_array(self, len: usize) -> Result<ArrayRef> {
        if self.lit && self.array.len() != len {
            let zeros = UInt32Array::from(vec![0u32; len]);
            return Ok(take(self.array.as_ref(), &zeros, None)?);
        }
        Ok(self.array)
    }
}

/// The columns an expression is evaluated over: leaf values of the referenced fields (and
/// the per-row list lengths of fields read through `length`), all `len` long.
#[derive(Clone)]
struct Env {
    columns: HashMap<String, ArrayRef>,
    lengths: HashMap<String, ArrayRef>,
    len: usize,
    /// The scalar spec of the leaf columns, to type sub-expressions exactly as the plan did.
    spec: Arc<ElementSpec>,
    /// True when evaluating literal-only sub-expressions, on one row.
    literal: bool,
}

impl Env {
    fn eval(&self, expr: &Expr) -> Result<Value> {
        if !self.literal && !has_columns(expr) {
            let one_row = Env {
                columns: HashMap::new(),
                lengths: HashMap::new(),
                len: 1,
                spec: self.spec.clone(),
                literal: true,
            };
            return Ok(Value { array: one_row.eval(expr)?.array, lit: true });
        }
        match expr {
            Expr::Column(name) => self
                .columns
                .get(name)
                .cloned()
                .map(Value::column)
                .ok_or_else(|| Error::Expr(format!("field '{name}' is not a scalar column here in {expr}"))),
            Expr::Literal(s) => Ok(Value { array: scalar_array(s).map_err(|e| at(e, expr))?, lit: true }),
            Expr::Unary { op, arg } => {
                let v = self.eval(arg)?;
                let array: ArrayRef = match op {
                    UnaryOp::Not => Arc::new(boolean::not(as_bool(&v.array, expr)?).map_err(|e| at(e, expr))?),
                    UnaryOp::Neg => numeric::neg(&v.array).map_err(|e| at(e, expr))?,
                    UnaryOp::IsNull => Arc::new(boolean::is_null(&v.array).map_err(|e| at(e, expr))?),
                    UnaryOp::IsNotNull => Arc::new(boolean::is_not_null(&v.array).map_err(|e| at(e, expr))?),
                };
                Ok(Value { array, lit: v.lit })
            }
            Expr::Binary { op, left, right } => self.eval_binary(expr, *op, left, right),
            Expr::Cast { arg, to } => {
                // bfloat16 travels as uint16 bits: only the plan's types tell them apart, and
                // only a uint16 value needs asking.
                let value = self.eval(arg)?;
                let bfloat16 =
                    value.array.data_type() == &DataType::UInt16 && arg.data_type(&self.spec)? == DType::BFloat16;
                match (bfloat16, *to) {
                    (true, DType::BFloat16) => Ok(value),
                    (true, to) => {
                        let array = crate::bfloat16::widen(&value.array, &to.to_arrow()).map_err(|e| at(e, expr))?;
                        Ok(Value { array, lit: value.lit })
                    }
                    (false, DType::BFloat16) => {
                        let array = crate::bfloat16::narrow(&value.array).map_err(|e| at(e, expr))?;
                        Ok(Value { array, lit: value.lit })
                    }
                    _ => value.cast(*to, expr),
                }
            }
            Expr::Case { branches, otherwise } => self.eval_case(expr, branches, otherwise.as_deref()),
            Expr::Call { func, args } => self.eval_call(expr, *func, args),
        }
    }

    fn eval_binary(&self, expr: &Expr, op: BinaryOp, left: &Expr, right: &Expr) -> Result<Value> {
        let (l, r) = (self.eval(left)?, self.eval(right)?);
        let lit = l.lit && r.lit;
        let array: ArrayRef = match binary_kernel(op) {
            Kernel::Logic(f) => {
                let (l, r) = (l.into_array(self.len)?, r.into_array(self.len)?);
                Arc::new(f(as_bool(&l, expr)?, as_bool(&r, expr)?).map_err(|e| at(e, expr))?)
            }
            Kernel::Numeric(f) => {
                let (l, r) = promote(l, r, op, expr)?;
                f(&l, &r).map_err(|e| at(e, expr))?
            }
            Kernel::Compare => {
                let (l, r) = promote(l, r, op, expr)?;
                Arc::new(crate::ieee::compare(op, &l, &r).map_err(|e| at(e, expr))?)
            }
        };
        Ok(Value { array, lit })
    }

    /// `CASE` evaluates each branch's value only on the rows that take it, so that a guard
    /// such as `CASE WHEN d != 0 THEN n / d END` protects the division as it reads.
    fn eval_case(&self, expr: &Expr, branches: &[(Expr, Expr)], otherwise: Option<&Expr>) -> Result<Value> {
        let out_type = expr.data_type(&self.spec)?;
        let mut rest = self.clone();
        let mut rows: ArrayRef = Arc::new(UInt32Array::from_iter_values(0..self.len as u32));
        let mut pieces: Vec<ArrayRef> = Vec::new();
        let mut picks = vec![(0usize, 0usize); self.len];
        let mut place = |piece: ArrayRef, rows: &ArrayRef| {
            for (i, row) in rows.as_primitive::<UInt32Type>().values().iter().enumerate() {
                picks[*row as usize] = (pieces.len(), i);
            }
            pieces.push(piece);
        };
        for (cond, value) in branches {
            if rest.len == 0 {
                break;
            }
            let taken = rest.eval(cond)?.into_array(rest.len)?;
            let taken = null_as_false(as_bool(&taken, cond)?);
            if taken.true_count() > 0 {
                let env = rest.filter(&taken, expr)?;
                let v = env.eval(value)?.cast(out_type, expr)?.into_array(env.len)?;
                place(v, &filter(&rows, &taken).map_err(|e| at(e, expr))?);
            }
            let others = boolean::not(&taken).map_err(|e| at(e, expr))?;
            rest = rest.filter(&others, expr)?;
            rows = filter(&rows, &others).map_err(|e| at(e, expr))?;
        }
        // An empty remainder is not evaluated: literal sub-expressions assume at least one row.
        let tail = match otherwise {
            Some(o) if rest.len > 0 => rest.eval(o)?.cast(out_type, expr)?.into_array(rest.len)?,
            _ => new_null_array(&out_type.to_arrow(), rest.len),
        };
        place(tail, &rows);
        let pieces: Vec<&dyn Array> = pieces.iter().map(|p| p.as_ref()).collect();
        Ok(Value { array: interleave(&pieces, &picks).map_err(|e| at(e, expr))?, lit: self.literal })
    }

    fn filter(&self, mask: &BooleanArray, expr: &Expr) -> Result<Env> {
        let apply = |m: &HashMap<String, ArrayRef>| -> Result<HashMap<String, ArrayRef>> {
            m.iter().map(|(k, v)| Ok((k.clone(), filter(v, mask).map_err(|e| at(e, expr))?))).collect::<Result<_>>()
        };
        Ok(Env {
            columns: apply(&self.columns)?,
            lengths: apply(&self.lengths)?,
            len: mask.true_count(),
            spec: self.spec.clone(),
            literal: self.literal,
        })
    }

    fn eval_call(&self, expr: &Expr, func: Func, args: &[Expr]) -> Result<Value> {
        match (func, args) {
            (Func::Length, [arg]) => self.eval_length(expr, arg),
            (Func::Least | Func::Greatest | Func::Coalesce, [first, rest @ ..]) => {
                self.eval_variadic(expr, func, first, rest)
            }
            (Func::Clip, [x, lo, hi]) => self.eval_clip(expr, x, lo, hi),
            (Func::HashBucket, [strings, n]) => {
                let n = flumen_ir::expr::int_literal(n)
                    .and_then(|n| u64::try_from(n).ok())
                    .filter(|n| *n > 0)
                    .ok_or_else(|| at("hash_bucket's bucket count must be a positive integer literal", expr))?;
                let v = self.eval(strings)?;
                let array = crate::tensor_ops::hash_buckets(&v.array, n).map_err(|e| at(e, expr))?;
                Ok(Value { array, lit: v.lit })
            }
            (Func::Bucketize, [x, boundaries @ ..]) if !boundaries.is_empty() => {
                self.eval_bucketize(expr, x, boundaries)
            }
            (Func::Power | Func::Atan2, [a, b]) => {
                let (a, b) = (self.eval(a)?, self.eval(b)?);
                let (at_, bt) = (a.dtype(expr)?, b.dtype(expr)?);
                let common = common_type(at_, a.lit, bt, b.lit)
                    .filter(|t| t.is_numeric())
                    .ok_or_else(|| at(format!("{} cannot combine {at_} and {bt}", func.name()), expr))?;
                let t = float_of(common);
                let lit = a.lit && b.lit;
                let (a, b) = (a.cast(t, expr)?.into_array(self.len)?, b.cast(t, expr)?.into_array(self.len)?);
                let f: fn(f64, f64) -> f64 = if func == Func::Power { f64::powf } else { f64::atan2 };
                Ok(Value { array: float_binary(&a, &b, f).map_err(|e| at(e, expr))?, lit })
            }
            (Func::TrueDiv | Func::FloorDiv | Func::FloorMod, [a, b]) => {
                let (a, b) = (self.eval(a)?, self.eval(b)?);
                let lit = a.lit && b.lit;
                let (l, r) = (a.dtype(expr)?, b.dtype(expr)?);
                let common = common_type(l, a.lit, r, b.lit)
                    .filter(|t| t.is_numeric())
                    .ok_or_else(|| at(format!("{} cannot combine {l} and {r}", func.name()), expr))?;
                // Python's `/` divides integers as float64 (and NumPy's, and TensorFlow's).
                let t = match func {
                    Func::TrueDiv if !common.is_float() => DType::Float64,
                    _ => common,
                };
                let (a, b) = (a.cast(t, expr)?.into_array(self.len)?, b.cast(t, expr)?.into_array(self.len)?);
                let out = match func {
                    Func::TrueDiv => numeric::div(&a, &b),
                    _ => crate::floor_division::evaluate(&a, &b, func == Func::FloorMod),
                };
                Ok(Value { array: out.map_err(|e| at(e, expr))?, lit })
            }
            (_, [arg]) => {
                let Some(f) = float_fn(func) else {
                    return Err(at(format!("{} cannot take 1 argument", func.name()), expr));
                };
                let v = self.eval(arg)?;
                let t = v.dtype(expr)?;
                if !t.is_numeric() {
                    return Err(at(format!("{} takes a number, got {t}", func.name()), expr));
                }
                let lit = v.lit;
                let array = if func.is_unary_math() || t.is_float() {
                    let v = v.cast(float_of(t), expr)?;
                    map_float(&v.array, f)
                } else {
                    match func {
                        Func::Abs => int_abs(&v.array),
                        Func::Signum => int_signum(&v.array),
                        // Integers are already whole: floor, ceil, round and trunc keep them.
                        _ => Ok(v.array),
                    }
                };
                Ok(Value { array: array.map_err(|e| at(e, expr))?, lit })
            }
            _ => Err(at(format!("{} cannot take {} argument(s)", func.name(), args.len()), expr)),
        }
    }

    fn eval_length(&self, expr: &Expr, arg: &Expr) -> Result<Value> {
        if let Expr::Column(name) = arg {
            if let Some(counts) = self.lengths.get(name) {
                return Ok(Value::column(counts.clone()));
            }
        }
        let v = self.eval(arg)?;
        let strings = v
            .array
            .as_string_opt::<i32>()
            .ok_or_else(|| at(format!("length takes a string or a rank-1 field, got {}", v.array.data_type()), expr))?;
        let counts: Int64Array = strings.iter().map(|s| s.map(|s| s.chars().count() as i64)).collect();
        Ok(Value { array: Arc::new(counts), lit: v.lit })
    }

    fn eval_clip(&self, expr: &Expr, x: &Expr, lo: &Expr, hi: &Expr) -> Result<Value> {
        let values = [self.eval(x)?, self.eval(lo)?, self.eval(hi)?];
        let (mut t, mut lit) = (values[0].dtype(expr)?, values[0].lit);
        for v in &values[1..] {
            let vt = v.dtype(expr)?;
            t = common_type(t, lit, vt, v.lit)
                .filter(|c| c.is_numeric())
                .ok_or_else(|| at(format!("clip cannot combine {t} and {vt}"), expr))?;
            lit &= v.lit;
        }
        // Computed in float64 or int64 (uint64 for uint64), which hold every value of `t`
        // exactly, and cast back: the result is always one of the three inputs.
        let wide = if t.is_float() {
            DType::Float64
        } else if t == DType::UInt64 {
            DType::UInt64
        } else {
            DType::Int64
        };
        let [x, lo, hi] = values.map(|v| v.cast(wide, expr)?.into_array(self.len));
        let (x, lo, hi) = (x?, lo?, hi?);
        let nulls = NullBuffer::union(NullBuffer::union(x.nulls(), lo.nulls()).as_ref(), hi.nulls());
        let out: ArrayRef = match wide {
            DType::Float64 => {
                let [x, lo, hi] = [&x, &lo, &hi].map(|a| a.as_primitive::<Float64Type>().values());
                Arc::new(Float64Array::new(clip_values(x, lo, hi).into(), nulls))
            }
            DType::UInt64 => {
                let [x, lo, hi] = [&x, &lo, &hi].map(|a| a.as_primitive::<UInt64Type>().values());
                Arc::new(UInt64Array::new(clip_values(x, lo, hi).into(), nulls))
            }
            _ => {
                let [x, lo, hi] = [&x, &lo, &hi].map(|a| a.as_primitive::<Int64Type>().values());
                Arc::new(Int64Array::new(clip_values(x, lo, hi).into(), nulls))
            }
        };
        Value { array: out, lit }.cast(t, expr)
    }

    fn eval_bucketize(&self, expr: &Expr, x: &Expr, boundaries: &[Expr]) -> Result<Value> {
        let bounds = boundaries
            .iter()
            .map(|b| match b {
                Expr::Literal(Scalar::Float(v, _)) => Ok(*v),
                Expr::Literal(Scalar::Int(v, _)) => Ok(*v as f64),
                other => Err(at(format!("bucketize boundaries must be number literals, got {other}"), expr)),
            })
            .collect::<Result<Vec<f64>>>()?;
        let v = self.eval(x)?;
        let lit = v.lit;
        let x = v.cast(DType::Float64, expr)?.into_array(self.len)?;
        let x = x.as_primitive::<Float64Type>();
        // tf's upper_bound: the first boundary `b` with `x < b` (none for NaN).
        let below = |v: f64, b: f64| v.partial_cmp(&b) == Some(std::cmp::Ordering::Less);
        let buckets: Vec<i32> = x.values().iter().map(|v| bounds.partition_point(|b| !below(*v, *b)) as i32).collect();
        Ok(Value { array: Arc::new(arrow::array::Int32Array::new(buckets.into(), x.nulls().cloned())), lit })
    }

    fn eval_variadic(&self, expr: &Expr, func: Func, first: &Expr, rest: &[Expr]) -> Result<Value> {
        let first = self.eval(first)?;
        let rest = rest.iter().map(|a| self.eval(a)).collect::<Result<Vec<_>>>()?;
        // Folded left to right with literal adoption, exactly as the type checker does.
        let (mut t, mut lit) = (first.dtype(expr)?, first.lit);
        for v in &rest {
            let vt = v.dtype(expr)?;
            t = common_type(t, lit, vt, v.lit)
                .ok_or_else(|| at(format!("{} cannot combine {t} and {vt}", func.name()), expr))?;
            lit &= v.lit;
        }
        let first = first.cast(t, expr)?.into_array(self.len)?;
        let rest = rest.into_iter().map(|v| v.cast(t, expr)?.into_array(self.len)).collect::<Result<Vec<_>>>()?;
        let out = if func == Func::Coalesce {
            // The first non-null wins: fill from the last argument backwards.
            match rest.split_last() {
                None => Ok(first),
                Some((last, init)) => std::iter::once(&first)
                    .chain(init)
                    .rev()
                    .try_fold(last.clone(), |acc, a| zip(&boolean::is_not_null(a)?, a, &acc)),
            }
        } else {
            rest.iter().try_fold(first, |acc, a| {
                let better = crate::ieee::prefer(a, &acc, func == Func::Least)?;
                // Nulls are skipped: a value replaces a null, a null never replaces a value.
                let take_a = null_as_false(&boolean::or_kleene(&better, &boolean::is_null(&acc)?)?);
                zip(&take_a, a, &acc)
            })
        };
        Ok(Value { array: out.map_err(|e| at(e, expr))?, lit })
    }
}

/// `x` clipped to `[lo, hi]` row by row, as `tf.clip_by_value` (`minimum(maximum(x, lo),
/// hi)`): `lo` where `x < lo`, `hi` where `x > hi`, else `x`, and `NaN` where any of the
/// three is (IEEE comparisons with it are false, so it is picked out first).
fn clip_values<T: Copy + PartialOrd>(x: &[T], lo: &[T], hi: &[T]) -> Vec<T> {
    #[allow(clippy::eq_op)] // `v != v` is the NaN test, and never true for integers.
    let nan = |v: &T| v != v;
    x.iter()
        .zip(lo)
        .zip(hi)
        .map(|((x, lo), hi)| {
            if nan(lo) {
                *lo
            } else if nan(hi) {
                *hi
            } else if x < lo {
                *lo
            } else if x > hi {
                *hi
            } else {
                *x
            }
        })
        .collect()
}

/// The kernel family of a binary operator.
enum Kernel {
    Numeric(fn(&dyn Datum, &dyn Datum) -> Result<ArrayRef, ArrowError>),
    /// IEEE 754's comparisons for floats ([`crate::ieee`]), Arrow's for the rest.
    Compare,
    Logic(fn(&BooleanArray, &BooleanArray) -> Result<BooleanArray, ArrowError>),
}

fn binary_kernel(op: BinaryOp) -> Kernel {
    match op {
        BinaryOp::Add => Kernel::Numeric(numeric::add),
        BinaryOp::Sub => Kernel::Numeric(numeric::sub),
        BinaryOp::Mul => Kernel::Numeric(numeric::mul),
        BinaryOp::Div => Kernel::Numeric(numeric::div),
        BinaryOp::Mod => Kernel::Numeric(numeric::rem),
        BinaryOp::Eq | BinaryOp::NotEq | BinaryOp::Lt | BinaryOp::LtEq | BinaryOp::Gt | BinaryOp::GtEq => {
            Kernel::Compare
        }
        // Kleene logic: `false and null` is false, `true or null` is true, as in SQL.
        BinaryOp::And => Kernel::Logic(boolean::and_kleene),
        BinaryOp::Or => Kernel::Logic(boolean::or_kleene),
    }
}

/// Both operands cast to their [`common_type`], as the type checker typed them.
fn promote(l: Value, r: Value, op: BinaryOp, expr: &Expr) -> Result<(Value, Value)> {
    let (lt, rt) = (l.dtype(expr)?, r.dtype(expr)?);
    let common = common_type(lt, l.lit, rt, r.lit)
        .ok_or_else(|| at(format!("'{}' cannot combine {lt} and {rt}", op.symbol()), expr))?;
    Ok((l.cast(common, expr)?, r.cast(common, expr)?))
}

/// A mask with null read as false, as filters and `CASE` conditions read it.
fn null_as_false(mask: &BooleanArray) -> BooleanArray {
    if mask.null_count() == 0 {
        mask.clone()
    } else {
        prep_null_mask_filter(mask)
    }
}

fn as_bool<'a>(array: &'a ArrayRef, expr: &Expr) -> Result<&'a BooleanArray> {
    array.as_boolean_opt().ok_or_else(|| at(format!("expected bool, got {}", array.data_type()), expr))
}

/// The float type math on `t` computes in: float32 stays float32, everything else is float64.
fn float_of(t: DType) -> DType {
    if t == DType::Float32 {
        DType::Float32
    } else {
        DType::Float64
    }
}

/// The float kernel of a one-argument function (all of them but `length`).
pub(crate) fn float_fn(func: Func) -> Option<fn(f64) -> f64> {
    Some(match func {
        Func::Abs => f64::abs,
        Func::Signum => |v: f64| if v == 0.0 { v } else { v.signum() },
        Func::Floor => f64::floor,
        Func::Ceil => f64::ceil,
        Func::Round => f64::round_ties_even,
        Func::Trunc => f64::trunc,
        Func::Sqrt => f64::sqrt,
        Func::Exp => f64::exp,
        Func::Ln => f64::ln,
        Func::Log2 => f64::log2,
        Func::Log10 => f64::log10,
        Func::Sin => f64::sin,
        Func::Cos => f64::cos,
        Func::Tan => f64::tan,
        Func::Tanh => f64::tanh,
        _ => return None,
    })
}

/// Applies `f` to a float column; float32 is computed in f64 and rounded back.
fn map_float(array: &ArrayRef, f: fn(f64) -> f64) -> Result<ArrayRef, ArrowError> {
    match array.data_type() {
        DataType::Float32 => {
            Ok(Arc::new(unary::<_, _, Float32Type>(array.as_primitive::<Float32Type>(), |v| f(f64::from(v)) as f32)))
        }
        DataType::Float64 => Ok(Arc::new(unary::<_, _, Float64Type>(array.as_primitive::<Float64Type>(), f))),
        other => Err(ArrowError::InvalidArgumentError(format!("expected a float column, got {other}"))),
    }
}

fn float_binary(a: &ArrayRef, b: &ArrayRef, f: fn(f64, f64) -> f64) -> Result<ArrayRef, ArrowError> {
    match (a.data_type(), b.data_type()) {
        (DataType::Float32, DataType::Float32) => Ok(Arc::new(binary::<_, _, _, Float32Type>(
            a.as_primitive::<Float32Type>(),
            b.as_primitive::<Float32Type>(),
            |x, y| f(f64::from(x), f64::from(y)) as f32,
        )?)),
        (DataType::Float64, DataType::Float64) => Ok(Arc::new(binary::<_, _, _, Float64Type>(
            a.as_primitive::<Float64Type>(),
            b.as_primitive::<Float64Type>(),
            f,
        )?)),
        (x, y) => Err(ArrowError::InvalidArgumentError(format!("expected float columns, got {x} and {y}"))),
    }
}

macro_rules! int_kernel {
    ($t:ty, $f:ident, $a:ident) => {
        $f::<$t>($a)
    };
}

fn int_abs(array: &ArrayRef) -> Result<ArrayRef, ArrowError> {
    fn abs<T: ArrowPrimitiveType>(a: &ArrayRef) -> Result<ArrayRef, ArrowError> {
        let zero = T::Native::ZERO;
        // Checked: the most negative integer has no absolute value in its type.
        let out = try_unary::<T, _, T>(a.as_primitive::<T>(), |v| if v.is_lt(zero) { v.neg_checked() } else { Ok(v) })?;
        Ok(Arc::new(out))
    }
    downcast_integer! {
        array.data_type() => (int_kernel, abs, array),
        other => Err(ArrowError::InvalidArgumentError(format!("expected an integer column, got {other}")))
    }
}

fn int_signum(array: &ArrayRef) -> Result<ArrayRef, ArrowError> {
    fn signum<T: ArrowPrimitiveType>(a: &ArrayRef) -> Result<ArrayRef, ArrowError> {
        let (zero, one) = (T::Native::ZERO, T::Native::ONE);
        let minus_one = zero.sub_wrapping(one);
        let out = unary::<T, _, T>(a.as_primitive::<T>(), |v| {
            if v.is_lt(zero) {
                minus_one
            } else if v.is_zero() {
                zero
            } else {
                one
            }
        });
        Ok(Arc::new(out))
    }
    downcast_integer! {
        array.data_type() => (int_kernel, signum, array),
        other => Err(ArrowError::InvalidArgumentError(format!("expected an integer column, got {other}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float32Array, Int16Array, Int32Array, Int8Array, UInt8Array};
    use arrow::datatypes::{Int64Type, Schema};
    use flumen_ir::build::{c, call};
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

    fn i(v: i64) -> Expr {
        Expr::Literal(Scalar::Int(v, DType::Int64))
    }

    fn f(v: f64) -> Expr {
        Expr::Literal(Scalar::Float(v, DType::Float64))
    }

    fn s(v: &str) -> Expr {
        Expr::Literal(Scalar::Utf8(v.into()))
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
