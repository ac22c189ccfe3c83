//! Tensor expressions over fixed shapes: the chunk made flat ([`Tensors`]), the
//! expression run over plain columns, the shape put back.

use super::*;

/// A tensor expression's chunk made flat: each tensor column replaced by its values, each
/// per-row scalar column standing for its value repeated once per value of its row's
/// tensors, so that the expression runs elementwise over plain columns; [`Tensors::wrap`]
/// puts the tensor shape back on the result. A kernel reads the scalars per row
/// ([`FlatColumn::Repeated`]); the Arrow evaluation reads [`Tensors::batch`], where they are
/// repeated into columns of their own.
#[derive(Debug)]
pub struct Tensors {
    pub(super) schema: SchemaRef,
    pub(super) columns: Vec<FlatColumn>,
    /// Values per row's tensor.
    pub(super) width: usize,
    pub(super) rows: usize,
    pub(super) batch: OnceLock<RecordBatch>,
    pub(super) levels: Vec<Level>,
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
pub(super) fn fixed_only(dt: &DataType) -> bool {
    match dt {
        DataType::FixedSizeList(item, _) => fixed_only(item.data_type()),
        DataType::List(_) => false,
        _ => true,
    }
}

/// The sizes of fixed-size list levels: a tensor's shape.
pub(super) fn fixed_sizes(levels: &[Level]) -> Vec<usize> {
    levels
        .iter()
        .map(|l| match l {
            Level::Fixed { size, .. } => *size as usize,
            Level::List { .. } => unreachable!("fixed-size levels only"),
        })
        .collect()
}

/// Fixed-size levels of `shape` over `rows` rows, with no null tensors.
pub(super) fn joint_levels(shape: &[usize], rows: usize) -> Vec<Level> {
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
pub(super) fn stretch(
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
