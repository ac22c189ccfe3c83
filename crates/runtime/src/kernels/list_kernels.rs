//! List-building kernels shared by the batching operators (batch, padded_batch, unbatch,
//! window, group_by_window, bucket_by_sequence_length).
//!
//! A field of shape `[d0, d1, ...]` is a column whose rows are nested lists, one level per
//! dimension (`FixedSizeList` for a known size, `List` for an unknown one). The kernels here:
//!
//! - [`wrap`]: group consecutive values into list rows (zero-copy: the values array becomes
//!   the list's child as is);
//! - [`Nest`] / [`outer_level`]: read the extent of each row's outer list level;
//! - [`pad_groups`]: pad groups of ragged rows to a dense shape and batch them, generic over
//!   every leaf type (numbers, bools, strings, bytes) by gathering from the leaf values and a
//!   one-value padding array;
//! - [`gather`]: rows picked from several chunks into one array;
//! - [`pad_value`]: a padding value as a one-element array of a field's type.

use std::sync::Arc;

use arrow::array::{make_array, ArrayData, MutableArrayData, UInt32Array};
use arrow::array::{
    new_empty_array, new_null_array, Array, ArrayRef, AsArray, BinaryArray, BooleanArray, FixedSizeListArray,
    Float64Array, Int64Array, LargeListArray, ListArray, PrimitiveArray, StringArray, UInt64Array,
};
use arrow::buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::compute::{cast_with_options, interleave, take, CastOptions};
use arrow::datatypes::{ArrowPrimitiveType, DataType, Fields, Float32Type, Float64Type, Int32Type, Int64Type};
use flumen_ir::{DType, Error, Result, Scalar};

use crate::conform::conform_array;

/// A run of `count` consecutive list rows holding `len` values each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// Values per row.
    pub len: usize,
    /// Rows.
    pub count: usize,
}

impl Run {
    /// `count` rows of `len` values.
    pub fn new(len: usize, count: usize) -> Self {
        Run { len, count }
    }
}

/// The runs of `rows` values grouped by `size`: whole groups, then a shorter last one.
pub fn uniform_runs(rows: usize, size: usize) -> Vec<Run> {
    let size = size.max(1);
    let (whole, rest) = (rows / size, rows % size);
    let mut runs = Vec::with_capacity(2);
    if whole > 0 {
        runs.push(Run::new(size, whole));
    }
    if rest > 0 {
        runs.push(Run::new(rest, 1));
    }
    runs
}

/// Appends one row of `len` values to `runs`, merging with the last run when equal.
pub fn push_run(runs: &mut Vec<Run>, len: usize) {
    match runs.last_mut() {
        Some(r) if r.len == len => r.count += 1,
        _ => runs.push(Run::new(len, 1)),
    }
}

/// The item type of a list type.
pub fn item_type(dt: &DataType) -> Option<&DataType> {
    match dt {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => Some(f.data_type()),
        _ => None,
    }
}

/// The types of `depth` nested list levels, outermost (`dt` itself) first.
fn level_types(dt: &DataType, depth: usize, field: &str) -> Result<Vec<DataType>> {
    let mut out = Vec::with_capacity(depth);
    let mut cur = dt;
    for _ in 0..depth {
        out.push(cur.clone());
        cur = item_type(cur).ok_or_else(|| {
            Error::execution("batch", format!("field '{field}': type {dt} has fewer than {depth} list levels"))
        })?;
    }
    Ok(out)
}

/// Wraps `values` in one list level of `list_type`: the rows take the values in order,
/// `runs` telling how many each. Zero-copy when `values` already has the item type.
pub fn wrap(list_type: &DataType, values: ArrayRef, runs: &[Run]) -> Result<ArrayRef> {
    let rows: usize = runs.iter().map(|r| r.count).sum();
    let total = runs
        .iter()
        .try_fold(0usize, |acc, r| r.len.checked_mul(r.count).and_then(|n| n.checked_add(acc)))
        .ok_or_else(|| Error::execution("batch", "list sizes overflow"))?;
    if total != values.len() {
        return Err(Error::execution("batch", format!("internal: {} values for lists holding {total}", values.len())));
    }
    match list_type {
        DataType::FixedSizeList(item, size) => {
            let s = *size as usize;
            if let Some(r) = runs.iter().find(|r| r.count > 0 && r.len != s) {
                return Err(Error::execution(
                    "batch",
                    format!("a row of {} values does not fit the fixed size {s}", r.len),
                ));
            }
            let values = conform_array(values, item.data_type())?;
            Ok(Arc::new(FixedSizeListArray::try_new_with_length(item.clone(), *size, values, None, rows)?))
        }
        DataType::List(item) => {
            let mut offsets = Vec::with_capacity(rows + 1);
            offsets.push(0i32);
            let mut acc = 0i32;
            for r in runs {
                let len = i32::try_from(r.len).map_err(|_| too_large(total))?;
                for _ in 0..r.count {
                    acc = acc.checked_add(len).ok_or_else(|| too_large(total))?;
                    offsets.push(acc);
                }
            }
            let values = conform_array(values, item.data_type())?;
            let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
            Ok(Arc::new(ListArray::try_new(item.clone(), offsets, values, None)?))
        }
        DataType::LargeList(item) => {
            let mut offsets = Vec::with_capacity(rows + 1);
            offsets.push(0i64);
            let mut acc = 0i64;
            for r in runs {
                for _ in 0..r.count {
                    acc += r.len as i64;
                    offsets.push(acc);
                }
            }
            let values = conform_array(values, item.data_type())?;
            let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
            Ok(Arc::new(LargeListArray::try_new(item.clone(), offsets, values, None)?))
        }
        DataType::Struct(fields) => wrap_sparse(fields, &values, runs),
        other => Err(Error::execution("batch", format!("cannot batch into type {other}"))),
    }
}

/// Batches sparse elements into sparse tensors of one more dimension, as tf.data batches
/// `SparseTensor`s: each element's coordinates get its position in the batch in front, a
/// batch's values are its elements' values in order (a zero-copy slice, since a batch's
/// elements are consecutive), and its dense shape is the batch's length before the largest of
/// its elements' dense shapes.
fn wrap_sparse(fields: &Fields, values: &ArrayRef, runs: &[Run]) -> Result<ArrayRef> {
    let not_sparse = || Error::execution("batch", format!("cannot batch {} as sparse tensors", values.data_type()));
    let elements = SparseRows::of(values).ok_or_else(not_sparse)?;
    let rank = elements.rank;
    let (DataType::List(value_item), Some(out_rank)) = (fields[1].data_type(), flumen_ir::sparse::rank(fields)) else {
        return Err(not_sparse());
    };
    if out_rank != rank + 1 {
        return Err(Error::execution(
            "batch",
            format!("internal: batching rank-{rank} sparse elements into rank {out_rank}"),
        ));
    }
    let (c_off, v_off) = (elements.coords.value_offsets(), elements.values.value_offsets());
    let mut out = Vec::with_capacity((c_off[c_off.len() - 1] - c_off[0]) as usize * (rank + 1));
    let mut offsets = vec![0i32];
    let mut dense_shapes = Vec::new();
    let mut element = 0;
    for run in runs {
        for _ in 0..run.count {
            let at = dense_shapes.len();
            dense_shapes.push(run.len as i64);
            dense_shapes.extend(std::iter::repeat_n(0, rank));
            for position in 0..run.len {
                let e = element + position;
                let (s, end) = (c_off[e] as usize, c_off[e + 1] as usize);
                if end - s != (v_off[e + 1] - v_off[e]) as usize {
                    return Err(Error::execution(
                        "batch",
                        "a sparse element has more coordinates than values or fewer",
                    ));
                }
                for j in s..end {
                    out.push(position as i64);
                    out.extend_from_slice(&elements.flat[j * rank..(j + 1) * rank]);
                }
                for (d, &size) in elements.dense_shape(e).iter().enumerate() {
                    dense_shapes[at + 1 + d] = dense_shapes[at + 1 + d].max(size);
                }
            }
            element += run.len;
            offsets.push(c_off[element] - c_off[0]);
        }
    }
    let start = v_off[0] as usize;
    let batch_values = elements.values.values().slice(start, (v_off[element] - v_off[0]) as usize);
    let parts = flumen_ir::sparse::SparseParts {
        offsets: OffsetBuffer::new(ScalarBuffer::from(offsets)),
        coords: out,
        values: conform_array(batch_values, value_item.data_type())?,
        dense_shapes,
    };
    Ok(Arc::new(flumen_ir::sparse::build(fields, parts, None)?))
}

/// A column of sparse tensors (see [`flumen_ir::sparse`]), read along its leading dimension
/// for `unbatch` and `batch`.
pub struct SparseRows<'a> {
    coords: &'a ListArray,
    /// Every coordinate of the column, `rank` per point.
    flat: &'a [i64],
    rank: usize,
    values: &'a ListArray,
    /// Every element's dense shape, `rank` per element.
    dense_shapes: &'a [i64],
}

impl<'a> SparseRows<'a> {
    /// The sparse tensors of `column`; `None` when it holds none.
    pub fn of(column: &'a ArrayRef) -> Option<SparseRows<'a>> {
        let elements = column.as_struct_opt().filter(|s| s.num_columns() == 3)?;
        let (coords, values) = (elements.column(0).as_list_opt::<i32>()?, elements.column(1).as_list_opt::<i32>()?);
        let points = coords.values().as_fixed_size_list_opt()?;
        let flat = points.values().as_primitive_opt::<Int64Type>()?.values();
        let shapes = elements.column(2).as_fixed_size_list_opt()?;
        let dense_shapes = shapes.values().as_primitive_opt::<Int64Type>()?.values();
        let rank = points.value_length() as usize;
        Some(SparseRows { coords, flat, rank, values, dense_shapes })
    }

    /// Element `row`'s dense shape.
    pub fn dense_shape(&self, row: usize) -> &'a [i64] {
        let at = row * self.rank;
        &self.dense_shapes[at..at + self.rank]
    }

    /// Row `row`'s points, as a range of point numbers, and the value number of its first.
    fn points(&self, row: usize) -> (usize, usize, usize) {
        let c = self.coords.value_offsets();
        (c[row] as usize, c[row + 1] as usize, self.values.value_offsets()[row] as usize)
    }

    /// Whether row `row` splits into `count` elements: one value per point, a dense shape
    /// `count` long in its leading dimension, and every point's leading coordinate in
    /// `[0, count)`.
    pub fn fits(&self, row: usize, count: usize) -> bool {
        let (start, end, _) = self.points(row);
        let v = self.values.value_offsets();
        end - start == (v[row + 1] - v[row]) as usize
            && self.dense_shape(row).first() == Some(&(count as i64))
            && (start..end).all(|j| usize::try_from(self.flat[j * self.rank]).is_ok_and(|c| c < count))
    }

    /// Rows `rows` (each [`fits`](Self::fits) its `count`) as their elements, in order, a
    /// column of `out_type`: element `e` of a row holds the row's points whose leading
    /// coordinate is `e`, without that coordinate, in the row's order, and the row's dense
    /// shape without its leading dimension, as tf.data slices a batched `SparseTensor`.
    /// Values are a zero-copy slice unless points need reordering.
    pub fn unbatch(
        &self,
        rows: std::ops::Range<usize>,
        count: impl Fn(usize) -> usize,
        out_type: &DataType,
    ) -> Result<ArrayRef> {
        let bad = || Error::execution("unbatch", format!("cannot unbatch sparse tensors into {out_type}"));
        let DataType::Struct(fields) = out_type else { return Err(bad()) };
        let DataType::List(value_item) = fields[1].data_type() else { return Err(bad()) };
        if flumen_ir::sparse::rank(fields).map(|r| r + 1) != Some(self.rank) {
            return Err(bad());
        }
        let r = self.rank;
        let (mut coords, mut order, mut offsets) = (Vec::new(), Vec::new(), vec![0i32]);
        let mut dense_shapes = Vec::new();
        let mut points: Vec<usize> = Vec::new();
        for row in rows {
            let (start, end, first_value) = self.points(row);
            points.clear();
            points.extend(start..end);
            // Stable: points of one element keep their order.
            points.sort_by_key(|&j| self.flat[j * r]);
            let mut at = 0;
            for element in 0..count(row) as i64 {
                while let Some(&j) = points.get(at).filter(|&&j| self.flat[j * r] == element) {
                    coords.extend_from_slice(&self.flat[j * r + 1..(j + 1) * r]);
                    order.push(u32::try_from(first_value + j - start).map_err(|_| too_large(first_value + j))?);
                    at += 1;
                }
                offsets.push(i32::try_from(order.len()).map_err(|_| too_large(order.len()))?);
                dense_shapes.extend_from_slice(&self.dense_shape(row)[1..]);
            }
        }
        let child = self.values.values();
        let values = match order.first() {
            None => child.slice(0, 0),
            Some(&first) if order.windows(2).all(|w| w[1] == w[0] + 1) => child.slice(first as usize, order.len()),
            Some(_) => take(child, &UInt32Array::from(order), None)?,
        };
        let parts = flumen_ir::sparse::SparseParts {
            offsets: OffsetBuffer::new(ScalarBuffer::from(offsets)),
            coords,
            values: conform_array(values, value_item.data_type())?,
            dense_shapes,
        };
        Ok(Arc::new(flumen_ir::sparse::build(fields, parts, None)?))
    }
}

fn too_large(total: usize) -> Error {
    Error::execution("batch", format!("a list column of {total} values exceeds the 2^31 value limit of List"))
}

/// The extent of each row's outer list level: which child values a row holds.
#[derive(Debug, Clone)]
pub enum Nest {
    /// `FixedSizeList(n)`: row `i` holds child values `[i*n, (i+1)*n)`.
    Fixed(usize),
    /// `List`: row `i` holds `[offsets[i], offsets[i+1])`.
    List(ScalarBuffer<i32>),
    /// `LargeList`: row `i` holds `[offsets[i], offsets[i+1])`.
    Large(ScalarBuffer<i64>),
}

impl Nest {
    /// `(start, len)` of row `row`'s values in the child.
    #[inline]
    pub fn range(&self, row: usize) -> (usize, usize) {
        match self {
            Nest::Fixed(n) => (row * n, *n),
            Nest::List(o) => (o[row] as usize, (o[row + 1] - o[row]) as usize),
            Nest::Large(o) => (o[row] as usize, (o[row + 1] - o[row]) as usize),
        }
    }

    /// The number of values row `row` holds.
    #[inline]
    pub fn len(&self, row: usize) -> usize {
        self.range(row).1
    }
}

/// The outer list level of `column`: the row extents and the child array they index.
/// `None` when the column is not a list.
pub fn outer_level(column: &ArrayRef) -> Option<(Nest, ArrayRef)> {
    match column.data_type() {
        DataType::FixedSizeList(_, n) => {
            let a = column.as_fixed_size_list();
            Some((Nest::Fixed(*n as usize), a.values().clone()))
        }
        DataType::List(_) => {
            let a = column.as_list::<i32>();
            Some((Nest::List(a.offsets().inner().clone()), a.values().clone()))
        }
        DataType::LargeList(_) => {
            let a = column.as_list::<i64>();
            Some((Nest::Large(a.offsets().inner().clone()), a.values().clone()))
        }
        _ => None,
    }
}

/// The `depth` outer list levels of `column` and the leaf values under them.
fn decompose(column: &ArrayRef, depth: usize, op: &str, field: &str) -> Result<(Vec<Nest>, ArrayRef)> {
    let mut nests = Vec::with_capacity(depth);
    let mut cur = column.clone();
    for _ in 0..depth {
        let (nest, child) = outer_level(&cur).ok_or_else(|| {
            Error::execution(
                op,
                format!("field '{field}': column of type {} has fewer than {depth} dimensions", column.data_type()),
            )
        })?;
        nests.push(nest);
        cur = child;
    }
    Ok((nests, cur))
}

/// A one-element array holding the padding value of a field of `dtype`: `value` cast to the
/// field's type, or zero / `""` / `false` / empty bytes when absent.
pub fn pad_value(dtype: DType, value: Option<&Scalar>, op: &str, field: &str) -> Result<ArrayRef> {
    let target = dtype.to_arrow();
    let raw: ArrayRef = match value {
        None => match dtype {
            DType::Utf8 => Arc::new(StringArray::from(vec![""])),
            DType::Binary => Arc::new(BinaryArray::from(vec![&b""[..]])),
            DType::Bool => Arc::new(BooleanArray::from(vec![false])),
            _ => Arc::new(Int64Array::from(vec![0i64])),
        },
        Some(Scalar::Null(_)) => return Ok(new_null_array(&target, 1)),
        Some(Scalar::Bool(b)) => Arc::new(BooleanArray::from(vec![*b])),
        Some(Scalar::Int(v, _)) => Arc::new(Int64Array::from(vec![*v])),
        Some(Scalar::UInt64(v)) => Arc::new(UInt64Array::from(vec![*v])),
        Some(Scalar::Float(v, _)) => Arc::new(Float64Array::from(vec![*v])),
        Some(Scalar::Utf8(s)) => Arc::new(StringArray::from(vec![s.as_str()])),
        Some(Scalar::Binary(b)) => Arc::new(BinaryArray::from(vec![b.as_slice()])),
    };
    let options = CastOptions { safe: false, ..Default::default() };
    cast_with_options(&raw, &target, &options).map_err(|e| {
        let shown = value.map(|v| v.to_string()).unwrap_or_default();
        Error::plan(op, format!("padding value {shown} does not fit field '{field}' of type {dtype}: {e}"))
    })
}

/// One group of consecutive rows to pad into one batched row.
#[derive(Debug, Clone, Copy)]
pub struct PadGroup<'a> {
    /// The first row.
    pub start: usize,
    /// The number of rows.
    pub len: usize,
    /// Per element dimension: the padded size, or `None` for the group's longest.
    pub dims: &'a [Option<usize>],
}

/// Pads each group of rows of `column` to a dense shape and batches it into one row of
/// `out_type` (a batch list level over one list level per element dimension). Values beyond
/// a row's length are `pad` (a one-element array of the leaf type). Fails when a row is
/// longer than a fixed padded size.
pub fn pad_groups(
    column: &ArrayRef,
    groups: &[PadGroup<'_>],
    pad: &ArrayRef,
    out_type: &DataType,
    op: &str,
    field: &str,
) -> Result<ArrayRef> {
    let rank = groups.first().map(|g| g.dims.len()).unwrap_or(0);
    let types = level_types(out_type, rank + 1, field)?;
    let (nests, leaf) = decompose(column, rank, op, field)?;
    if let [nest] = nests.as_slice() {
        if groups.iter().any(|g| g.dims.len() != 1 || g.start + g.len > column.len()) {
            return Err(Error::execution(op, format!("internal: bad pad group for field '{field}'")));
        }
        let rows: Vec<(usize, usize)> =
            groups.iter().flat_map(|g| (g.start..g.start + g.len).map(|r| (0, r))).collect();
        let sizes: Vec<(usize, &[Option<usize>])> = groups.iter().map(|g| (g.len, g.dims)).collect();
        let valid = validity(&rows, |_, r| column.is_valid(r));
        return pad_rank1(&[(nest.clone(), leaf)], &rows, &sizes, pad, &types, valid, op, field);
    }
    // The arrays whose outer levels `nests` are, for their null entries.
    let mut levels = vec![column.clone()];
    while levels.len() < rank {
        let (_, child) = outer_level(&levels[levels.len() - 1])
            .ok_or_else(|| Error::execution(op, format!("internal: field '{field}' lost a dimension")))?;
        levels.push(child);
    }
    // Per wrapped level below the batch, which entries are not null (padding entries are
    // valid).
    let mut valid: Vec<Vec<bool>> = vec![Vec::new(); rank + 1];
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); rank + 1];
    let mut indices: Vec<(usize, usize)> = Vec::new();
    let mut cur: Vec<Option<usize>> = Vec::new();
    let mut next: Vec<Option<usize>> = Vec::new();
    for g in groups {
        if g.dims.len() != rank || g.start + g.len > column.len() {
            return Err(Error::execution(op, format!("internal: bad pad group for field '{field}'")));
        }
        runs[0].push(Run::new(g.len, 1));
        cur.clear();
        cur.extend((g.start..g.start + g.len).map(Some));
        for (k, nest) in nests.iter().enumerate() {
            let longest = cur.iter().flatten().map(|&p| nest.len(p)).max().unwrap_or(0);
            let target = match g.dims[k] {
                Some(d) if longest > d => {
                    let dim = if rank > 1 { format!(" in dimension {k}") } else { String::new() };
                    return Err(Error::execution(
                        op,
                        format!("field '{field}' has length {longest} > padded length {d}{dim}"),
                    ));
                }
                Some(d) => d,
                None => longest,
            };
            valid[k + 1].extend(cur.iter().map(|p| p.is_none_or(|p| levels[k].is_valid(p))));
            next.clear();
            next.reserve(cur.len() * target);
            for p in &cur {
                match p {
                    Some(p) => {
                        let (s, l) = nest.range(*p);
                        next.extend((s..s + l).map(Some));
                        next.extend(std::iter::repeat_n(None, target - l));
                    }
                    None => next.extend(std::iter::repeat_n(None, target)),
                }
            }
            push_runs(&mut runs[k + 1], Run::new(target, cur.len()));
            std::mem::swap(&mut cur, &mut next);
        }
        indices.extend(cur.iter().map(|p| match p {
            Some(i) => (0, *i),
            None => (1, 0),
        }));
    }
    let mut values = if indices.is_empty() {
        new_empty_array(leaf.data_type())
    } else if indices.iter().all(|(a, _)| *a == 0) {
        gather(&[leaf.as_ref()], &indices)?
    } else {
        let pad = conform_array(pad.clone(), leaf.data_type())?;
        gather(&[leaf.as_ref(), pad.as_ref()], &indices)?
    };
    for k in (0..=rank).rev() {
        values = wrap(&types[k], values, &runs[k])?;
        if k > 0 && valid[k].contains(&false) {
            values = with_nulls(values, Some(NullBuffer::from(std::mem::take(&mut valid[k]))))?;
        }
    }
    Ok(values)
}

/// Which of `rows` (`(column, row)`) are elements that are not null, by `is_valid`; `None`
/// when all are.
fn validity(rows: &[(usize, usize)], is_valid: impl Fn(usize, usize) -> bool) -> Option<NullBuffer> {
    let valid: Vec<bool> = rows.iter().map(|&(c, r)| is_valid(c, r)).collect();
    valid.contains(&false).then(|| NullBuffer::from(valid))
}

/// `array` with the null elements `nulls` (its values under them are padding): a null
/// element of a padded batch stays null, as `batch` keeps it.
fn with_nulls(array: ArrayRef, nulls: Option<NullBuffer>) -> Result<ArrayRef> {
    let Some(nulls) = nulls else { return Ok(array) };
    let data = array.to_data().into_builder().nulls(Some(nulls)).build()?;
    Ok(make_array(data))
}

/// [`pad_groups`] over rows picked from several chunks' columns, each row copied once
/// straight into the padded batch (rather than gathered into one column first, then copied
/// again with its padding). `rows` are `(column, row)`, every group's rows in turn, and
/// `groups` the number of rows and the padded dimensions of each group. `None` when the field
/// has other than one element dimension: the caller then gathers and calls [`pad_groups`].
pub fn pad_gathered(
    columns: &[&ArrayRef],
    rows: &[(usize, usize)],
    groups: &[(usize, &[Option<usize>])],
    pad: &ArrayRef,
    out_type: &DataType,
    op: &str,
    field: &str,
) -> Result<Option<ArrayRef>> {
    if groups.iter().any(|(_, dims)| dims.len() != 1) || columns.is_empty() {
        return Ok(None);
    }
    let types = level_types(out_type, 2, field)?;
    let sources: Vec<(Nest, ArrayRef)> = columns
        .iter()
        .map(|c| decompose(c, 1, op, field).map(|(mut nests, leaf)| (nests.remove(0), leaf)))
        .collect::<Result<_>>()?;
    if rows.iter().any(|&(c, r)| c >= columns.len() || r >= columns[c].len()) {
        return Err(Error::execution(op, format!("internal: a row to pad is outside its chunk for field '{field}'")));
    }
    let valid = validity(rows, |c, r| columns[c].is_valid(r));
    pad_rank1(&sources, rows, groups, pad, &types, valid, op, field).map(Some)
}

/// Pads groups of rows with one element dimension (padded token lists): a row's values are
/// copied as one range and its padding as one range of a column of pad values, with no
/// index per value. `sources` are the rows' list levels and leaf values, `rows` the
/// `(source, row)` of every group's rows in turn, `groups` each group's row count and dims,
/// `valid` which rows are elements that are not null.
#[allow(clippy::too_many_arguments)]
fn pad_rank1(
    sources: &[(Nest, ArrayRef)],
    rows: &[(usize, usize)],
    groups: &[(usize, &[Option<usize>])],
    pad: &ArrayRef,
    types: &[DataType],
    valid: Option<NullBuffer>,
    op: &str,
    field: &str,
) -> Result<ArrayRef> {
    if groups.iter().map(|(len, _)| len).sum::<usize>() != rows.len() {
        return Err(Error::execution(op, format!("internal: bad pad group for field '{field}'")));
    }
    let row_len = |&(s, r): &(usize, usize)| sources[s].0.len(r);
    let mut runs = [Vec::new(), Vec::new()];
    let mut targets = Vec::with_capacity(groups.len());
    let (mut total, mut at) = (0, 0);
    for &(len, dims) in groups {
        let longest = rows[at..at + len].iter().map(row_len).max().unwrap_or(0);
        at += len;
        let target = match dims.first().copied().flatten() {
            Some(d) if longest > d => {
                return Err(Error::execution(op, format!("field '{field}' has length {longest} > padded length {d}")))
            }
            Some(d) => d,
            None => longest,
        };
        runs[0].push(Run::new(len, 1));
        push_runs(&mut runs[1], Run::new(target, len));
        targets.push(target);
        total += target * len;
    }
    let leaf_type = sources[0].1.data_type();
    let pad = conform_array(pad.clone(), leaf_type)?;
    let shape = Shape { rows, groups, targets: &targets, total };
    let typed = match leaf_type {
        DataType::Int64 => pad_primitive::<Int64Type>(sources, &pad, &shape),
        DataType::Int32 => pad_primitive::<Int32Type>(sources, &pad, &shape),
        DataType::Float32 => pad_primitive::<Float32Type>(sources, &pad, &shape),
        DataType::Float64 => pad_primitive::<Float64Type>(sources, &pad, &shape),
        _ => None,
    };
    let mut values = match typed {
        Some(values) => values,
        None => pad_ranges(sources, &pad, &shape)?,
    };
    values = with_nulls(wrap(&types[1], values, &runs[1])?, valid)?;
    wrap(&types[0], values, &runs[0])
}

/// [`pad_rank1`]'s leaf values for any leaf type: each row's values and its padding copied
/// as ranges, of the row's leaf and of a column of pad values.
fn pad_ranges(sources: &[(Nest, ArrayRef)], pad: &ArrayRef, shape: &Shape) -> Result<ArrayRef> {
    let widest = shape.targets.iter().copied().max().unwrap_or(0);
    let pads = take(pad, &UInt32Array::from(vec![0u32; widest]), None)?.to_data();
    let leaves: Vec<ArrayData> = sources.iter().map(|(_, leaf)| leaf.to_data()).collect();
    let mut inputs: Vec<&ArrayData> = leaves.iter().collect();
    inputs.push(&pads);
    let pads_at = leaves.len();
    let mut out = MutableArrayData::new(inputs, false, shape.total);
    let mut at = 0;
    for (&(len, _), &target) in shape.groups.iter().zip(shape.targets) {
        for &(source, row) in &shape.rows[at..at + len] {
            let (s, l) = sources[source].0.range(row);
            out.try_extend(source, s, s + l)?;
            if target > l {
                out.try_extend(pads_at, 0, target - l)?;
            }
        }
        at += len;
    }
    Ok(make_array(out.freeze()))
}

/// The rows of the groups of a padded batch and how long each group's rows are padded to.
struct Shape<'a> {
    rows: &'a [(usize, usize)],
    groups: &'a [(usize, &'a [Option<usize>])],
    targets: &'a [usize],
    total: usize,
}

/// [`pad_rank1`]'s leaf values for primitive leaves without nulls and a non-null pad: each
/// row's values and its padding appended to one buffer, without the per-range dispatch of
/// `MutableArrayData` (w6 pads 200,000 token lists a pass). `None` otherwise.
fn pad_primitive<T: ArrowPrimitiveType>(
    sources: &[(Nest, ArrayRef)],
    pad: &ArrayRef,
    shape: &Shape,
) -> Option<ArrayRef> {
    let pad = pad.as_primitive_opt::<T>().filter(|p| p.len() == 1 && p.null_count() == 0)?.value(0);
    let leaves: Vec<&[T::Native]> = sources
        .iter()
        .map(|(_, leaf)| leaf.as_primitive_opt::<T>().filter(|l| l.null_count() == 0).map(|l| l.values().as_ref()))
        .collect::<Option<_>>()?;
    let mut out: Vec<T::Native> = Vec::with_capacity(shape.total);
    let mut at = 0;
    for (&(len, _), &target) in shape.groups.iter().zip(shape.targets) {
        for &(source, row) in &shape.rows[at..at + len] {
            let (s, l) = sources[source].0.range(row);
            out.extend_from_slice(&leaves[source][s..s + l]);
            out.resize(out.len() + target - l, pad);
        }
        at += len;
    }
    Some(Arc::new(PrimitiveArray::<T>::new(out.into(), None)))
}

fn push_runs(runs: &mut Vec<Run>, run: Run) {
    match runs.last_mut() {
        Some(r) if r.len == run.len => r.count += run.count,
        _ => runs.push(run),
    }
}

/// The values at `indices` (`(array, row)` pairs) of `arrays`, in order, as one array.
/// A contiguous range of one array is a zero-copy slice.
pub fn gather(arrays: &[&dyn Array], indices: &[(usize, usize)]) -> Result<ArrayRef> {
    let Some(&(a0, r0)) = indices.first() else {
        let dt = arrays.first().map(|a| a.data_type().clone()).unwrap_or(DataType::Null);
        return Ok(new_empty_array(&dt));
    };
    let contiguous = indices.iter().enumerate().all(|(k, &(a, r))| a == a0 && r == r0 + k);
    if contiguous {
        return Ok(arrays[a0].slice(r0, indices.len()));
    }
    Ok(interleave(arrays, indices)?)
}

#[cfg(test)]
pub(crate) mod testing {
    //! Helpers for the batching operators' tests.

    use std::collections::VecDeque;
    use std::sync::Arc;

    use arrow::array::{Array, ArrayRef, AsArray, Int64Array};
    use arrow::datatypes::{Int64Type, SchemaRef};
    use arrow::record_batch::RecordBatch;
    use arrow::util::display::{ArrayFormatter, FormatOptions};
    use flumen_ir::{DType, ElementSpec, FieldSpec, Result};

    use crate::operator::{BoxOperator, Operator};

    /// An operator yielding given results.
    pub struct VecOp(pub VecDeque<Result<RecordBatch>>);

    impl Operator for VecOp {
        fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
            self.0.pop_front().transpose()
        }

        /// Everything not yet returned, as data (a test source has no position of its own).
        fn save(&self, _mode: crate::checkpoint::SaveMode) -> Result<crate::checkpoint::OpState> {
            crate::checkpoint::OpState::new("vec").with_results("items", &self.0)
        }

        fn restore(&mut self, state: crate::checkpoint::OpState) -> Result<()> {
            self.0 = state.expect("vec")?.take_results("items")?;
            Ok(())
        }
    }

    /// An operator yielding `chunks`.
    pub fn source(chunks: Vec<RecordBatch>) -> BoxOperator {
        Box::new(VecOp(chunks.into_iter().map(Ok).collect()))
    }

    /// A scalar int64 field `x`'s spec.
    pub fn int_spec(name: &str) -> ElementSpec {
        ElementSpec::new(vec![FieldSpec::scalar(name, DType::Int64)]).unwrap()
    }

    /// Chunks of one int64 column holding `values`, split into chunks of `splits` rows.
    pub fn int_chunks(name: &str, values: &[i64], splits: &[usize]) -> Vec<RecordBatch> {
        let schema = int_spec(name).arrow_schema();
        let mut out = Vec::new();
        let mut at = 0;
        for &n in splits {
            let col: ArrayRef = Arc::new(Int64Array::from(values[at..at + n].to_vec()));
            out.push(RecordBatch::try_new(schema.clone(), vec![col]).unwrap());
            at += n;
        }
        assert_eq!(at, values.len(), "splits must cover the values");
        out
    }

    /// A chunk of `columns` under `spec`'s schema.
    pub fn chunk(spec: &ElementSpec, columns: Vec<ArrayRef>) -> RecordBatch {
        RecordBatch::try_new(spec.arrow_schema(), columns).unwrap()
    }

    /// Pulls every chunk, checking the operator's invariants (non-empty, exact schema).
    pub fn collect(op: &mut dyn Operator, schema: &SchemaRef) -> Result<Vec<RecordBatch>> {
        let mut out = Vec::new();
        while let Some(c) = op.next_chunk()? {
            assert!(c.num_rows() > 0, "empty chunk");
            assert_eq!(&c.schema(), schema, "chunk schema differs from the output schema");
            out.push(c);
        }
        Ok(out)
    }

    /// The rows of column `name` across `chunks`, formatted (`[0, 1, 2]`).
    pub fn rows(chunks: &[RecordBatch], name: &str) -> Vec<String> {
        let mut out = Vec::new();
        for c in chunks {
            let col = c.column_by_name(name).expect("column");
            out.extend(fmt_array(col.as_ref()));
        }
        out
    }

    /// Each value of `array`, formatted.
    pub fn fmt_array(array: &dyn Array) -> Vec<String> {
        let options = FormatOptions::default().with_null("null");
        let f = ArrayFormatter::try_new(array, &options).unwrap();
        (0..array.len()).map(|i| f.value(i).to_string()).collect()
    }

    /// Strings of `s`.
    /// Every pull until the end: each row as `a,b`, each error as `Err` (bounded, so a
    /// spinning operator fails the test instead of hanging it).
    pub fn drain(op: &mut dyn Operator, schema: &SchemaRef) -> Vec<String> {
        let mut out = Vec::new();
        for _ in 0..1000 {
            match op.next_chunk() {
                Ok(None) => return out,
                Ok(Some(c)) => {
                    assert!(c.num_rows() > 0, "empty chunk");
                    assert_eq!(&c.schema(), schema, "chunk schema differs from the output schema");
                    let cols: Vec<_> = c.columns().iter().map(|a| a.as_primitive::<Int64Type>().clone()).collect();
                    for r in 0..c.num_rows() {
                        out.push(cols.iter().map(|a| a.value(r).to_string()).collect::<Vec<_>>().join(","));
                    }
                }
                Err(_) => out.push("Err".into()),
            }
        }
        panic!("operator did not end: {out:?}");
    }

    pub fn strs(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::fmt_array;
    use super::*;
    use arrow::datatypes::Field;

    fn list_type(inner: DataType, fixed: Option<i32>) -> DataType {
        let item = Arc::new(Field::new("item", inner, true));
        match fixed {
            Some(n) => DataType::FixedSizeList(item, n),
            None => DataType::List(item),
        }
    }

    #[test]
    fn wrap_groups_values_zero_copy() {
        let values: ArrayRef = Arc::new(Int64Array::from((0..7).collect::<Vec<i64>>()));
        let out = wrap(&list_type(DataType::Int64, None), values.clone(), &uniform_runs(7, 3)).unwrap();
        assert_eq!(fmt_array(out.as_ref()), vec!["[0, 1, 2]", "[3, 4, 5]", "[6]"]);
        let child = out.as_list::<i32>().values().clone();
        assert_eq!(child.to_data().buffers()[0].as_ptr(), values.to_data().buffers()[0].as_ptr());
        let fixed = wrap(&list_type(DataType::Int64, Some(3)), values.slice(0, 6), &uniform_runs(6, 3)).unwrap();
        assert_eq!(fmt_array(fixed.as_ref()), vec!["[0, 1, 2]", "[3, 4, 5]"]);
        assert!(wrap(&list_type(DataType::Int64, Some(3)), values, &uniform_runs(7, 3)).is_err());
    }

    #[test]
    fn pad_value_casts_and_defaults() {
        let v = pad_value(DType::Float32, Some(&Scalar::Int(-1, DType::Int64)), "t", "x").unwrap();
        assert_eq!(v.data_type(), &DataType::Float32);
        assert_eq!(fmt_array(v.as_ref()), vec!["-1.0"]);
        assert_eq!(fmt_array(pad_value(DType::Utf8, None, "t", "x").unwrap().as_ref()), vec![""]);
        assert_eq!(fmt_array(pad_value(DType::Bool, None, "t", "x").unwrap().as_ref()), vec!["false"]);
        assert!(pad_value(DType::Int8, Some(&Scalar::Int(1000, DType::Int64)), "t", "x").is_err());
    }

    #[test]
    fn pad_groups_rank1_copies_rows_and_padding_as_ranges() {
        // Rows ["a"], null, ["b", "c", "d"], ["e", "f"]; groups of rows 0..3 and 3..4.
        let values: ArrayRef = Arc::new(StringArray::from(vec!["a", "b", "c", "d", "e", "f"]));
        let item = Arc::new(arrow::datatypes::Field::new("item", DataType::Utf8, true));
        let offsets = OffsetBuffer::new(vec![0, 1, 1, 4, 6].into());
        let nulls = Some(arrow::buffer::NullBuffer::from(vec![true, false, true, true]));
        let column: ArrayRef = Arc::new(ListArray::new(item, offsets, values, nulls));
        let out_type = list_type(column.data_type().clone(), None);
        let pad: ArrayRef = Arc::new(StringArray::from(vec!["_"]));
        let dims = [None];
        let groups = [PadGroup { start: 0, len: 3, dims: &dims }, PadGroup { start: 3, len: 1, dims: &dims }];
        let out = pad_groups(&column.slice(0, 4), &groups, &pad, &out_type, "t", "x").unwrap();
        // The null row stays null (its place holds padding), as `batch` keeps it.
        assert_eq!(fmt_array(out.as_ref()), vec!["[[a, _, _], null, [b, c, d]]", "[[e, f]]"]);
        let fixed = [Some(2)];
        let groups = [PadGroup { start: 0, len: 4, dims: &fixed }];
        let err = pad_groups(&column, &groups, &pad, &out_type, "t", "x").unwrap_err().to_string();
        assert!(err.contains("field 'x' has length 3 > padded length 2"), "{err}");
    }

    #[test]
    fn pad_gathered_copies_rows_of_several_chunks_into_one_padded_batch() {
        // Chunk A rows [1], [2, 3, 4] (a slice of a longer list column); chunk B rows [],
        // [5, 6]; groups: (A1, B1) and (B0, A0, A1).
        let list = |rows: Vec<Vec<i64>>| -> ArrayRef {
            Arc::new(ListArray::from_iter_primitive::<arrow::datatypes::Int64Type, _, _>(
                rows.into_iter().map(|r| Some(r.into_iter().map(Some).collect::<Vec<_>>())),
            ))
        };
        let a = list(vec![vec![9, 9], vec![1], vec![2, 3, 4]]).slice(1, 2);
        let b = list(vec![vec![], vec![5, 6]]);
        let out_type = list_type(a.data_type().clone(), None);
        let pad: ArrayRef = Arc::new(Int64Array::from(vec![0i64]));
        let dims = [None];
        let rows = [(0, 1), (1, 1), (1, 0), (0, 0), (0, 1)];
        let groups = [(2, &dims[..]), (3, &dims[..])];
        let out = pad_gathered(&[&a, &b], &rows, &groups, &pad, &out_type, "t", "x").unwrap().unwrap();
        assert_eq!(fmt_array(out.as_ref()), vec!["[[2, 3, 4], [5, 6, 0]]", "[[0, 0, 0], [1, 0, 0], [2, 3, 4]]"]);
        let fixed = [Some(2)];
        let err = pad_gathered(&[&a, &b], &rows[..2], &[(2, &fixed[..])], &pad, &out_type, "t", "x").unwrap_err();
        assert!(err.to_string().contains("field 'x' has length 3 > padded length 2"), "{err}");
        // Two element dimensions, or a scalar field: the caller gathers first.
        let scalar: ArrayRef = Arc::new(Int64Array::from(vec![1i64, 2]));
        let batch_type = list_type(DataType::Int64, None);
        let none = pad_gathered(&[&scalar], &[(0, 0)], &[(1, &[][..])], &pad, &batch_type, "t", "x").unwrap();
        assert!(none.is_none());
    }

    #[test]
    fn pad_gathered_pads_values_with_nulls_and_other_types_alike() {
        // Rows [1, null] and [3] of int64 (with a null: the general path), then of float32
        // and of strings: padded with the type's pad to the longest, 2.
        let ints: ArrayRef = Arc::new(ListArray::from_iter_primitive::<arrow::datatypes::Int64Type, _, _>(vec![
            Some(vec![Some(1), None]),
            Some(vec![Some(3)]),
        ]));
        let floats: ArrayRef = Arc::new(ListArray::from_iter_primitive::<arrow::datatypes::Float32Type, _, _>(vec![
            Some(vec![Some(1.5), Some(2.5)]),
            Some(vec![Some(3.5)]),
        ]));
        let words = wrap(
            &list_type(DataType::Utf8, None),
            Arc::new(StringArray::from(vec!["a", "b", "c"])),
            &[Run::new(2, 1), Run::new(1, 1)],
        )
        .unwrap();
        let dims = [None];
        let cases: [(&ArrayRef, ArrayRef, [&str; 4]); 3] = [
            (&ints, Arc::new(Int64Array::from(vec![7i64])), ["1", "null", "3", "7"]),
            (&floats, Arc::new(arrow::array::Float32Array::from(vec![-1.0f32])), ["1.5", "2.5", "3.5", "-1.0"]),
            (&words, Arc::new(StringArray::from(vec!["_"])), ["a", "b", "c", "_"]),
        ];
        for (column, pad, expected) in cases {
            let out_type = list_type(list_type(pad.data_type().clone(), None), None);
            let out = pad_gathered(&[column], &[(0, 0), (0, 1)], &[(2, &dims[..])], &pad, &out_type, "t", "x")
                .unwrap()
                .unwrap();
            let flat = out.as_list::<i32>().values().as_list::<i32>().values().clone();
            assert_eq!(fmt_array(flat.as_ref()), expected, "{}", pad.data_type());
        }
    }

    #[test]
    fn pad_groups_rank2() {
        // rows: [[1], [2, 3]], [[4, 5, 6]], []
        let inner = ListArray::from_iter_primitive::<arrow::datatypes::Int64Type, _, _>(vec![
            Some(vec![Some(1)]),
            Some(vec![Some(2), Some(3)]),
            Some(vec![Some(4), Some(5), Some(6)]),
        ]);
        let inner_type = list_type(DataType::Int64, None);
        let inner = conform_array(Arc::new(inner), &inner_type).unwrap();
        let outer_type = list_type(inner_type.clone(), None);
        let column = wrap(&outer_type, inner, &[Run::new(2, 1), Run::new(1, 1), Run::new(0, 1)]).unwrap();
        let out_type = list_type(outer_type.clone(), None);
        let pad: ArrayRef = Arc::new(Int64Array::from(vec![-1]));
        let dims = [None, None];
        let groups = [PadGroup { start: 0, len: 3, dims: &dims }];
        let out = pad_groups(&column, &groups, &pad, &out_type, "t", "x").unwrap();
        assert_eq!(
            fmt_array(out.as_ref()),
            vec!["[[[1, -1, -1], [2, 3, -1]], [[4, 5, 6], [-1, -1, -1]], [[-1, -1, -1], [-1, -1, -1]]]"]
        );
        let fixed = [Some(2), Some(2)];
        let groups = [PadGroup { start: 0, len: 3, dims: &fixed }];
        let err = pad_groups(&column, &groups, &pad, &out_type, "t", "x").unwrap_err().to_string();
        assert!(err.contains("field 'x' has length 3 > padded length 2"), "{err}");
    }
}
