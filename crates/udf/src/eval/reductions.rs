//! Reductions and tensor functions, computed first over the whole chunk and put into
//! columns that the rest of the expression reads ([`with_reductions`]).

use super::*;

/// The prefix of the names of the columns [`with_reductions`] adds.
pub(super) const LIFTED: &str = "\u{1}reduced ";

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

pub(super) fn lift_reductions(expr: &Expr, batch: &mut RecordBatch) -> Result<Expr> {
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
pub(super) fn add_column(batch: &mut RecordBatch, value: ArrayRef, expr: &Expr) -> Result<String> {
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
pub(super) fn reduce(func: Func, arg: &Expr, batch: &RecordBatch) -> Result<ArrayRef> {
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
