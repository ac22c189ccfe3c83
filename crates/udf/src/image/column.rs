//! Images as Arrow columns: reading a `[h, w, c]` field's rows as pixel slices, and building
//! the columns image functions return.
//!
//! A fixed-size image is three nested `FixedSizeList`s over one primitive buffer; a decoded
//! image of varying size is `List<List<FixedSizeList<c>>>` (rows, then pixels, then
//! channels), as `FieldSpec::arrow_type` lays out a dense field with unknown dims. Either
//! way each element's pixels are one contiguous run of the leaf buffer, in HWC order.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, FixedSizeListArray, ListArray, PrimitiveArray};
use arrow::buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{ArrowPrimitiveType, DataType, Field};
use flumen_ir::{Error, Result};

/// One element's image: where its pixels start in the leaf buffer, and its dims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    /// Index of the first value in the leaf buffer.
    pub start: usize,
    /// Height in pixels.
    pub height: usize,
    /// Width in pixels.
    pub width: usize,
    /// Channels per pixel.
    pub channels: usize,
}

impl Dims {
    /// The number of values.
    pub fn len(&self) -> usize {
        self.height * self.width * self.channels
    }

    /// Whether the image has no pixels.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The rows of an image column: each row's [`Dims`] (`None` for a null image) over the leaf
/// values.
pub struct Images<T: ArrowPrimitiveType> {
    /// The leaf values, every image's pixels.
    pub values: ScalarBuffer<T::Native>,
    /// Each row's image.
    pub rows: Vec<Option<Dims>>,
}

impl<T: ArrowPrimitiveType> Images<T> {
    /// Reads `column`, a `[h, w, c]` field of `T` values; `what` names the function for errors.
    pub fn read(column: &ArrayRef, what: &str) -> Result<Self> {
        let bad = || Error::Expr(format!("{what} takes a [height, width, channels] image, got {}", column.data_type()));
        let outer = Level::of(column.as_ref()).ok_or_else(bad)?;
        let middle = Level::of(outer.child.as_ref()).ok_or_else(bad)?;
        let inner = Level::of(middle.child.as_ref()).ok_or_else(bad)?;
        let Level { kind: Kind::Fixed(channels), .. } = inner else { return Err(bad()) };
        let values = inner.child.as_primitive_opt::<T>().ok_or_else(bad)?.values().clone();
        let nulls = column.logical_nulls();
        let mut rows = Vec::with_capacity(column.len());
        for r in 0..column.len() {
            if nulls.as_ref().is_some_and(|n| n.is_null(r)) {
                rows.push(None);
                continue;
            }
            let (a, b) = outer.range(r);
            let height = b - a;
            let (p0, p1) = if height == 0 { (0, 0) } else { middle.range(a) };
            let width = p1 - p0;
            // Rows of one image have one width, and follow each other in the leaf buffer.
            if let Kind::List(offsets) = &middle.kind {
                let o = &offsets[a..=b];
                if o.windows(2).any(|w| (w[1] - w[0]) as usize != width) {
                    return Err(Error::Expr(format!("{what}: the image's rows have different widths")));
                }
            }
            let start = if height == 0 || width == 0 { 0 } else { inner.range(p0).0 };
            if height > 0 && width > 0 {
                let (_, last) = middle.range(b - 1);
                if inner.range(last - 1).1 - start != height * width * channels {
                    return Err(Error::Expr(format!("{what}: the image's pixels are not contiguous")));
                }
            }
            rows.push(Some(Dims { start, height, width, channels }));
        }
        Ok(Images { values, rows })
    }

    /// The values of an image.
    pub fn pixels(&self, dims: &Dims) -> &[T::Native] {
        &self.values[dims.start..dims.start + dims.len()]
    }
}

/// One list level of an image column.
struct Level {
    kind: Kind,
    child: ArrayRef,
}

enum Kind {
    /// Item `i`'s children are `offsets[i]..offsets[i + 1]`.
    List(ScalarBuffer<i32>),
    /// Item `i`'s children are `i * n..(i + 1) * n` (arrow slices the child with the list).
    Fixed(usize),
}

impl Level {
    fn of(array: &dyn Array) -> Option<Level> {
        if let Some(list) = array.as_list_opt::<i32>() {
            return Some(Level { kind: Kind::List(list.offsets().inner().clone()), child: list.values().clone() });
        }
        let fixed = array.as_fixed_size_list_opt()?;
        let n = fixed.value_length() as usize;
        Some(Level { kind: Kind::Fixed(n), child: fixed.values().clone() })
    }

    fn range(&self, i: usize) -> (usize, usize) {
        match &self.kind {
            Kind::List(o) => (o[i] as usize, o[i + 1] as usize),
            Kind::Fixed(n) => (i * n, (i + 1) * n),
        }
    }
}

fn item(data_type: DataType) -> Arc<Field> {
    Arc::new(Field::new("item", data_type, true))
}

/// A column of fixed-size images: `rows` images of `[h, w, c]` in `values`, row after row
/// (a null row's values are zeros).
pub fn fixed<T: ArrowPrimitiveType>(
    values: Vec<T::Native>,
    [h, w, c]: [usize; 3],
    nulls: Option<NullBuffer>,
) -> ArrayRef {
    let leaf: ArrayRef = Arc::new(PrimitiveArray::<T>::new(ScalarBuffer::from(values), None));
    let channels = FixedSizeListArray::new(item(T::DATA_TYPE), c as i32, leaf, None);
    let pixels = FixedSizeListArray::new(item(channels.data_type().clone()), w as i32, Arc::new(channels), None);
    let rows = FixedSizeListArray::new(item(pixels.data_type().clone()), h as i32, Arc::new(pixels), nulls);
    Arc::new(rows)
}

/// A column of images of varying size: `dims[r]` (`(h, w)`) of row `r`'s image, whose
/// values follow each other in `values`; `c` channels each.
pub fn varying<T: ArrowPrimitiveType>(
    values: Vec<T::Native>,
    dims: &[(usize, usize)],
    c: usize,
    nulls: Option<NullBuffer>,
) -> Result<ArrayRef> {
    let pixel_count: usize = dims.iter().map(|&(h, w)| h * w).sum();
    if pixel_count > i32::MAX as usize {
        return Err(Error::Expr("images too large for one chunk (32-bit offsets)".into()));
    }
    let leaf: ArrayRef = Arc::new(PrimitiveArray::<T>::new(ScalarBuffer::from(values), None));
    let channels = FixedSizeListArray::new(item(T::DATA_TYPE), c as i32, leaf, None);
    let widths = dims.iter().flat_map(|&(h, w)| std::iter::repeat_n(w, h));
    let overflow = |_| Error::Expr("images too large for one chunk (32-bit offsets)".into());
    let pixels = ListArray::try_new(
        item(channels.data_type().clone()),
        OffsetBuffer::<i32>::from_lengths(widths),
        Arc::new(channels),
        None,
    )
    .map_err(overflow)?;
    let rows = ListArray::try_new(
        item(pixels.data_type().clone()),
        OffsetBuffer::<i32>::from_lengths(dims.iter().map(|d| d.0)),
        Arc::new(pixels),
        nulls,
    )
    .map_err(overflow)?;
    Ok(Arc::new(rows))
}
