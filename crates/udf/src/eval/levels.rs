//! The list levels of batched and tensor columns: peeling them off to the leaf values,
//! checking that columns agree on them, and wrapping a result in them again.

use super::*;

/// How many `List`/`FixedSizeList` levels wrap the values of a column of type `dt`.
pub(crate) fn list_depth(dt: &DataType) -> usize {
    match dt {
        DataType::List(item) | DataType::FixedSizeList(item, _) => 1 + list_depth(item.data_type()),
        _ => 0,
    }
}

/// One list level of a batched column, with offsets rebased to its leaf values.
#[derive(Debug)]
pub(super) enum Level {
    List { offsets: OffsetBuffer<i32>, nulls: Option<NullBuffer> },
    Fixed { size: i32, len: usize, nulls: Option<NullBuffer> },
}

/// Strips `dims` list levels off `array`: the levels, outermost first, and the values below.
pub(super) fn peel(array: &ArrayRef, dims: usize) -> Option<(Vec<Level>, ArrayRef)> {
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
pub(super) fn same_levels(a: &[Level], b: &[Level]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|pair| match pair {
            (Level::List { offsets: x, .. }, Level::List { offsets: y, .. }) => x[..] == y[..],
            (Level::Fixed { size: x, len: m, .. }, Level::Fixed { size: y, len: n, .. }) => x == y && m == n,
            _ => false,
        })
}

/// For each of the `leaves` values below `levels` (peeled off a column of `rows` rows), the
/// row it belongs to.
pub(super) fn leaf_owners(levels: &[Level], rows: usize, leaves: usize) -> Result<Vec<u32>, String> {
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
pub(super) fn rewrap(levels: &[Level], leaf: ArrayRef) -> Result<ArrayRef, ArrowError> {
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
pub(super) fn list_lengths(array: &ArrayRef) -> Option<(ArrayRef, DataType)> {
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
