//! The column layout of sparse fields ([`FieldKind::Sparse`](crate::FieldKind::Sparse)), kept
//! in one place for every crate that builds or reads one.
//!
//! A sparse field's column has a row per element, a struct of the parts of a
//! `tf.SparseTensor`: `indices` (a list of rank-long int64 coordinates), `values` (a list, one
//! per coordinate) and `dense_shape` (rank int64 sizes). `dense_shape` is stored per element,
//! not taken from the field's spec, because a spec may leave a dimension unknown and a tensor's
//! size there is not implied by its entries (a batch of three whose last element is empty is
//! still three long).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, FixedSizeListArray, Int64Array, ListArray, StructArray};
use arrow::buffer::{NullBuffer, OffsetBuffer};
use arrow::datatypes::{DataType, Fields};
use arrow::error::ArrowError;

/// The parts of a sparse column for [`build`]: per element `offsets` into the points, every
/// point's coordinates (`rank` each), the values (one per point), and every element's
/// `dense_shape` (`rank` each).
pub struct SparseParts {
    /// Point offsets per element (`elements + 1` entries, starting at 0).
    pub offsets: OffsetBuffer<i32>,
    /// Coordinates, `rank` per point.
    pub coords: Vec<i64>,
    /// One value per point, of the field's value type.
    pub values: ArrayRef,
    /// Dense shapes, `rank` per element.
    pub dense_shapes: Vec<i64>,
}

/// The rank of sparse tensors of the struct `fields` (a sparse field's Arrow type).
pub fn rank(fields: &Fields) -> Option<usize> {
    let DataType::List(coord) = fields.first()?.data_type() else { return None };
    let DataType::FixedSizeList(_, rank) = coord.data_type() else { return None };
    usize::try_from(*rank).ok()
}

/// A sparse column of the struct type `fields` from its parts; `nulls` marks null elements.
pub fn build(fields: &Fields, parts: SparseParts, nulls: Option<NullBuffer>) -> Result<StructArray, ArrowError> {
    let bad = || ArrowError::InvalidArgumentError(format!("not a sparse layout: {fields:?}"));
    let [indices, values, dense_shape] = &fields.iter().collect::<Vec<_>>()[..] else { return Err(bad()) };
    let (DataType::List(coord_item), DataType::List(value_item)) = (indices.data_type(), values.data_type()) else {
        return Err(bad());
    };
    let (DataType::FixedSizeList(index_item, rank), DataType::FixedSizeList(size_item, _)) =
        (coord_item.data_type(), dense_shape.data_type())
    else {
        return Err(bad());
    };
    let elements = parts.offsets.len() - 1;
    let points = parts.coords.len().checked_div(*rank as usize).unwrap_or(parts.values.len());
    let coords = FixedSizeListArray::try_new_with_length(
        index_item.clone(),
        *rank,
        Arc::new(Int64Array::from(parts.coords)),
        None,
        points,
    )?;
    let shapes = FixedSizeListArray::try_new_with_length(
        size_item.clone(),
        *rank,
        Arc::new(Int64Array::from(parts.dense_shapes)),
        None,
        elements,
    )?;
    let columns: Vec<ArrayRef> = vec![
        Arc::new(ListArray::try_new(coord_item.clone(), parts.offsets.clone(), Arc::new(coords), None)?),
        Arc::new(ListArray::try_new(value_item.clone(), parts.offsets, parts.values, None)?),
        Arc::new(shapes),
    ];
    StructArray::try_new(fields.clone(), columns, nulls)
}

/// Every element's dense shape where it is not recorded: `declared` where known, else the
/// smallest that holds the element's points (`offsets` into `coords`, `rank` per point).
pub fn smallest_dense_shapes(declared: &[i64], offsets: &[i32], coords: &[i64]) -> Vec<i64> {
    let rank = declared.len();
    let mut shapes = Vec::with_capacity(offsets.len().saturating_sub(1) * rank);
    for w in offsets.windows(2) {
        let at = shapes.len();
        shapes.extend(declared.iter().map(|&d| d.max(0)));
        for point in coords[w[0] as usize * rank..w[1] as usize * rank].chunks_exact(rank.max(1)) {
            for (d, &c) in point.iter().enumerate() {
                if declared[d] < 0 {
                    shapes[at + d] = shapes[at + d].max(c + 1);
                }
            }
        }
    }
    shapes
}

/// Element `row`'s dense shape in the sparse column `column`; `None` where `column` is not one.
pub fn dense_shape(column: &StructArray, row: usize) -> Option<Vec<i64>> {
    let shapes = column.column_by_name("dense_shape")?.as_any().downcast_ref::<FixedSizeListArray>()?;
    let sizes = shapes.value(row);
    Some(sizes.as_any().downcast_ref::<Int64Array>()?.values().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, FieldSpec};

    #[test]
    fn an_unrecorded_dense_shape_is_the_declared_one_or_the_smallest_that_holds_the_points() {
        // Two elements of rank 2, the first dimension unknown: points (0, 1), (2, 0) and none.
        let shapes = smallest_dense_shapes(&[-1, 4], &[0, 2, 2], &[0, 1, 2, 0]);
        assert_eq!(shapes, vec![3, 4, 0, 4]);
    }

    #[test]
    fn a_built_column_reads_back_its_parts() {
        let field = FieldSpec::sparse("s", DType::Float32, vec![-1, 3]);
        let DataType::Struct(fields) = field.arrow_type() else { panic!("a sparse field is a struct") };
        assert_eq!(rank(&fields), Some(2));
        let parts = SparseParts {
            offsets: OffsetBuffer::from_lengths([1, 0]),
            coords: vec![4, 2],
            values: Arc::new(arrow::array::Float32Array::from(vec![1.5])),
            dense_shapes: vec![6, 3, 2, 3],
        };
        let column = build(&fields, parts, None).unwrap();
        assert_eq!(column.len(), 2);
        assert_eq!(dense_shape(&column, 0), Some(vec![6, 3]));
        assert_eq!(dense_shape(&column, 1), Some(vec![2, 3]));
        let wrong = SparseParts {
            offsets: OffsetBuffer::from_lengths([1]),
            coords: vec![4, 2],
            values: Arc::new(arrow::array::Float32Array::from(vec![1.5])),
            dense_shapes: vec![6],
        };
        assert!(build(&fields, wrong, None).is_err(), "a dense shape of the wrong rank is refused");
    }
}
