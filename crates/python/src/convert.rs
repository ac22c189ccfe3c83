//! Python values into Arrow arrays of a declared type: what Python functions return and what
//! `from_numpy` and generators give. NumPy arrays are copied once into Arrow buffers (from
//! the array interface's pointer); strings and bytes come from Python sequences.

use std::sync::Arc;

use arrow::array::{ArrayRef, BinaryBuilder, BooleanArray, FixedSizeListArray, PrimitiveArray, StringBuilder};
use arrow::buffer::{Buffer, ScalarBuffer};
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, Field, Float16Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type,
    Int8Type, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use flumen::{DType, ElementSpec, FieldKind, FieldSpec};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

/// The NumPy dtype name of a primitive flumen dtype: flumen's own name (`int64`,
/// `float32`, `bool`), which NumPy shares; none for strings and bytes.
fn numpy_dtype(dtype: DType) -> Option<&'static str> {
    match dtype {
        DType::Utf8 | DType::Binary => None,
        // NumPy has no bfloat16 of its own: values come in as float32 and are rounded here.
        DType::BFloat16 => Some("float32"),
        _ => Some(dtype.name()),
    }
}

/// A declared spec: `{name: dtype}` or `{name: (dtype, shape)}`, a shape a list of sizes
/// (`None` or -1 for one that varies).
pub fn spec_of(declared: &Bound<'_, PyDict>) -> PyResult<ElementSpec> {
    let mut fields = Vec::with_capacity(declared.len());
    for (name, value) in declared.iter() {
        let name: String = name.extract()?;
        // `dtype`, `(dtype, shape)`, or `(dtype, shape, "sparse")` for a sparse tensor.
        let (dtype, shape, kind): (String, Vec<Option<i64>>, Option<String>) = match value.extract::<String>() {
            Ok(dtype) => (dtype, vec![], None),
            Err(_) => match value.extract::<(String, Vec<Option<i64>>)>() {
                Ok((dtype, shape)) => (dtype, shape, None),
                Err(_) => value.extract::<(String, Vec<Option<i64>>, String)>().map(|(d, s, k)| (d, s, Some(k)))?,
            },
        };
        let dtype =
            DType::from_name(&dtype).ok_or_else(|| PyValueError::new_err(format!("unknown dtype {dtype:?}")))?;
        let shape: Vec<i64> = shape.into_iter().map(|d| d.unwrap_or(-1)).collect();
        fields.push(match (kind.as_deref(), shape.is_empty()) {
            (Some("sparse"), _) => FieldSpec::sparse(name, dtype, shape),
            (Some(other), _) => {
                return Err(PyValueError::new_err(format!("field {name:?}: unknown kind {other:?} (only \"sparse\")")))
            }
            (None, true) => FieldSpec::scalar(name, dtype),
            (None, false) => FieldSpec::tensor(name, dtype, shape),
        });
    }
    ElementSpec::new(fields).map_err(crate::error::to_py)
}

fn primitive<T: ArrowPrimitiveType>(bytes: &[u8]) -> ArrayRef {
    let values = ScalarBuffer::<T::Native>::from(Buffer::from_slice_ref(bytes));
    Arc::new(PrimitiveArray::<T>::new(values, None))
}

/// `value` (anything NumPy can make an array of) as `rows` elements of `field`: an array of
/// `rows` values, or of `rows` fixed-size tensors.
pub fn array_of(value: &Bound<'_, PyAny>, field: &FieldSpec, rows: Option<usize>) -> PyResult<ArrayRef> {
    let py = value.py();
    if field.kind == FieldKind::Sparse {
        return sparse(value, field, rows);
    }
    let text = matches!(field.dtype, DType::Utf8 | DType::Binary);
    if text && field.is_fixed_tensor(0) {
        // A tensor of strings: NumPy gives its shape and its values in order.
        let np = py.import("numpy")?;
        let array = np.call_method1("asarray", (value, "object"))?;
        let shape: Vec<usize> = array.getattr("shape")?.extract()?;
        let flat = array.call_method1("reshape", (-1,))?.call_method0("tolist")?;
        let values = array_of(&flat, &FieldSpec::scalar(field.name.clone(), field.dtype), None)?;
        return wrap_fixed(values, field, &shape, rows);
    }
    match field.dtype {
        DType::Utf8 if field.shape.is_empty() => {
            let mut b = StringBuilder::new();
            for item in value.try_iter()? {
                let item = item?;
                if item.is_none() {
                    b.append_null();
                } else {
                    b.append_value(item.extract::<String>()?);
                }
            }
            return Ok(Arc::new(b.finish()));
        }
        DType::Binary if field.shape.is_empty() => {
            let mut b = BinaryBuilder::new();
            for item in value.try_iter()? {
                let item = item?;
                if item.is_none() {
                    b.append_null();
                } else {
                    b.append_value(item.extract::<Vec<u8>>()?);
                }
            }
            return Ok(Arc::new(b.finish()));
        }
        _ => {}
    }
    if let DataType::List(item) = field.arrow_type() {
        if field.shape.len() == 1 {
            return ragged(value, field, item);
        }
    }
    let dtype = numpy_dtype(field.dtype).ok_or_else(|| {
        PyTypeError::new_err(format!("field {:?}: {} from Python is not supported yet", field.name, field.dtype.name()))
    })?;
    let np = py.import("numpy")?;
    let array = np.call_method1("ascontiguousarray", (value, dtype))?;
    let interface = array.getattr("__array_interface__")?;
    let shape: Vec<usize> = interface.get_item("shape")?.extract()?;
    let (address, _): (usize, bool) = interface.get_item("data")?.extract()?;
    let n = shape.first().copied().unwrap_or(1);
    if let Some(rows) = rows {
        if n != rows {
            return Err(PyValueError::new_err(format!("field {:?}: {n} values for {rows} elements", field.name)));
        }
    }
    check_shape(field, &shape)?;
    let count: usize = shape.iter().product();
    let width = match field.dtype {
        DType::BFloat16 => 4,
        dtype => dtype.to_arrow().primitive_width().unwrap_or(1),
    };
    // SAFETY: NumPy's array interface says `count` contiguous values of `width` bytes start
    // at `address`; `array` keeps them alive while they are copied.
    let bytes = unsafe { std::slice::from_raw_parts(address as *const u8, count * width) };
    let values: ArrayRef = match field.dtype {
        DType::Bool => Arc::new(BooleanArray::from(bytes.iter().map(|&b| b != 0).collect::<Vec<bool>>())),
        DType::Int8 => primitive::<Int8Type>(bytes),
        DType::Int16 => primitive::<Int16Type>(bytes),
        DType::Int32 => primitive::<Int32Type>(bytes),
        DType::Int64 => primitive::<Int64Type>(bytes),
        DType::UInt8 => primitive::<UInt8Type>(bytes),
        DType::UInt16 => primitive::<UInt16Type>(bytes),
        DType::UInt32 => primitive::<UInt32Type>(bytes),
        DType::UInt64 => primitive::<UInt64Type>(bytes),
        DType::Float32 => primitive::<Float32Type>(bytes),
        DType::Float64 => primitive::<Float64Type>(bytes),
        DType::Float16 => primitive::<Float16Type>(bytes),
        DType::BFloat16 => {
            flumen::crates::udf::bfloat16::narrow(&primitive::<Float32Type>(bytes)).map_err(crate::error::to_py)?
        }
        other => {
            return Err(PyTypeError::new_err(format!(
                "field {:?}: {} from Python is not supported yet",
                field.name,
                other.name()
            )))
        }
    };
    drop(array);
    wrap_fixed(values, field, &shape, None)
}

/// Whether values of NumPy `shape` (the elements' count first) fit `field`'s shape.
fn check_shape(field: &FieldSpec, shape: &[usize]) -> PyResult<()> {
    let inner = &shape[1.min(shape.len())..];
    let declared = &field.shape;
    let fits = inner.len() == declared.len() && inner.iter().zip(declared).all(|(&a, &d)| d < 0 || a as i64 == d);
    if !fits {
        return Err(PyValueError::new_err(format!(
            "field {:?}: values of shape {inner:?}, declared {declared:?}",
            field.name
        )));
    }
    Ok(())
}

/// `values`, every value of a NumPy array of `shape` (the elements' count first, `rows` when
/// given) in order, as the column of `field`'s fixed-size tensors.
fn wrap_fixed(mut values: ArrayRef, field: &FieldSpec, shape: &[usize], rows: Option<usize>) -> PyResult<ArrayRef> {
    check_shape(field, shape)?;
    let n = shape.first().copied().unwrap_or(1);
    if rows.is_some_and(|rows| rows != n) {
        return Err(PyValueError::new_err(format!(
            "field {:?}: {n} values for {} elements",
            field.name,
            rows.unwrap_or(0)
        )));
    }
    let inner = &shape[1.min(shape.len())..];
    // The declared list fields, outermost first; wrapped innermost first: [n, a, b] is n
    // lists of a lists of b values.
    let mut items: Vec<Arc<Field>> = Vec::new();
    let mut declared_type = field.arrow_type();
    while let DataType::FixedSizeList(item, _) = declared_type {
        declared_type = item.data_type().clone();
        items.push(item);
    }
    for (d, item) in items.iter().enumerate().rev().take(inner.len()) {
        // The list count is the product of the outer dims, which a zero-size list cannot
        // tell from its values (a `[5, 0]` tensor has no values).
        let lists = shape[..=d].iter().product();
        let list = FixedSizeListArray::try_new_with_length(item.clone(), inner[d] as i32, values, None, lists)
            .map_err(|e| {
                PyValueError::new_err(format!("field {:?} does not fit its declared shape: {e}", field.name))
            })?;
        values = Arc::new(list);
    }
    if *values.data_type() != field.arrow_type() {
        return Err(PyValueError::new_err(format!(
            "field {:?}: made {}, declared {}",
            field.name,
            values.data_type(),
            field.arrow_type()
        )));
    }
    Ok(values)
}

/// A dict of columns (`{name: values}`) as a chunk of `spec`, every column `rows` long when
/// given.
pub fn chunk_of(
    columns: &Bound<'_, PyAny>,
    spec: &ElementSpec,
    rows: Option<usize>,
) -> PyResult<arrow::array::RecordBatch> {
    let columns = columns.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!(
            "expected a dict of columns, got {}",
            columns.get_type().name().map(|n| n.to_string()).unwrap_or_default()
        ))
    })?;
    let mut arrays = Vec::with_capacity(spec.fields.len());
    let mut rows = rows;
    for field in &spec.fields {
        let value = columns.get_item(&field.name)?.ok_or_else(|| {
            PyValueError::new_err(format!("no column {:?} (declared in the output spec)", field.name))
        })?;
        let array = array_of(&value, field, rows)?;
        rows = Some(arrow::array::Array::len(&array));
        arrays.push(array);
    }
    let options = arrow::array::RecordBatchOptions::new().with_row_count(rows);
    arrow::array::RecordBatch::try_new_with_options(spec.arrow_schema(), arrays, &options)
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// What a generator yielded, `item`, as a chunk of `spec`: one element when every field's
/// value has the field's own dimensions (tf.data's `from_generator`: `{"x": 3.0}`,
/// `{"v": np.arange(n)}` for a ragged `v`, `{"s": "text"}`, a `SparseTensor` for a sparse
/// field), otherwise a dict of columns of one or more elements each (`{"x": [1.0, 2.0]}`),
/// as `chunk_of` reads them.
pub fn yielded(item: &Bound<'_, PyAny>, spec: &ElementSpec) -> PyResult<arrow::array::RecordBatch> {
    let py = item.py();
    let Ok(fields) = item.cast::<PyDict>() else { return chunk_of(item, spec, None) };
    let ndim = py.import("numpy")?.getattr("ndim")?;
    let one = PyDict::new(py);
    for field in &spec.fields {
        let Some(value) = fields.get_item(&field.name)? else { return chunk_of(item, spec, None) };
        let text = matches!(field.dtype, DType::Utf8 | DType::Binary) && field.shape.is_empty();
        let element = match text {
            _ if field.kind == FieldKind::Sparse => is_sparse_value(&value)?,
            true => value.is_instance_of::<PyString>() || value.is_instance_of::<PyBytes>() || value.is_none(),
            false => ndim.call1((&value,))?.extract::<usize>()? == field.shape.len(),
        };
        if !element {
            return chunk_of(item, spec, None);
        }
        one.set_item(&field.name, PyList::new(py, [value])?)?;
    }
    chunk_of(one.as_any(), spec, Some(1))
}

/// The Python exception `e` with its traceback, as text.
pub fn traceback(py: Python<'_>, e: &PyErr) -> String {
    let formatted = py
        .import("traceback")
        .and_then(|tb| tb.call_method1("format_exception", (e.value(py),)))
        .and_then(|lines| lines.extract::<Vec<String>>());
    match formatted {
        Ok(lines) => lines.concat().trim_end().to_string(),
        Err(_) => e.to_string(),
    }
}

/// `value`, a sequence of sequences, as a list array of `field`'s values (a ragged field of
/// one dimension).
fn ragged(value: &Bound<'_, PyAny>, field: &FieldSpec, item: Arc<Field>) -> PyResult<ArrayRef> {
    let flat = FieldSpec::scalar(field.name.clone(), field.dtype);
    let ndim = value.py().import("numpy")?.getattr("ndim")?;
    let mut parts = Vec::new();
    let mut lengths = Vec::new();
    for (i, row) in value.try_iter()?.enumerate() {
        let row = row?;
        if ndim.call1((&row,))?.extract::<usize>()? != 1 {
            return Err(PyValueError::new_err(format!(
                "field {:?}: element {i} is not a sequence of values (a ragged field's column is a \
                 sequence of sequences)",
                field.name
            )));
        }
        let part = array_of(&row, &flat, None)?;
        lengths.push(arrow::array::Array::len(&part));
        parts.push(part);
    }
    let refs: Vec<&dyn arrow::array::Array> = parts.iter().map(|p| p.as_ref()).collect();
    let values = match refs.is_empty() {
        true => arrow::array::new_empty_array(item.data_type()),
        false => arrow::compute::concat(&refs).map_err(|e| PyValueError::new_err(e.to_string()))?,
    };
    let offsets = arrow::buffer::OffsetBuffer::from_lengths(lengths);
    let list = arrow::array::ListArray::try_new(item, offsets, values, None)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(Arc::new(list))
}

/// The parts of one sparse tensor value: a `flumen.SparseTensor` or anything else with
/// `indices`, `values` and `dense_shape` (TensorFlow's `SparseTensor`).
fn sparse_parts<'py>(value: &Bound<'py, PyAny>) -> PyResult<[Bound<'py, PyAny>; 3]> {
    Ok([value.getattr("indices")?, value.getattr("values")?, value.getattr("dense_shape")?])
}

/// Whether `value` is one sparse tensor (rather than a column of them).
pub fn is_sparse_value(value: &Bound<'_, PyAny>) -> PyResult<bool> {
    value.hasattr("dense_shape")
}

/// `value`, a sequence of sparse tensors (see `sparse_parts`), as a column of the sparse
/// `field` (see `flumen_ir::sparse`).
fn sparse(value: &Bound<'_, PyAny>, field: &FieldSpec, rows: Option<usize>) -> PyResult<ArrayRef> {
    let py = value.py();
    let np = py.import("numpy")?;
    let name = &field.name;
    let rank = field.shape.len();
    if rank == 0 {
        return Err(PyValueError::new_err(format!("field {name:?}: a sparse tensor has rank 1 or more")));
    }
    let bad = |i: usize, what: String| PyValueError::new_err(format!("field {name:?}: sparse tensor {i}: {what}"));
    let scalar = FieldSpec::scalar(name.clone(), field.dtype);
    let (mut coords, mut parts, mut offsets, mut dense_shapes) = (Vec::new(), Vec::new(), vec![0i32], Vec::new());
    for (i, item) in value.try_iter()?.enumerate() {
        let [indices, values, dense_shape] = sparse_parts(&item?).map_err(|_| {
            PyTypeError::new_err(format!(
                "field {name:?}: a sparse field takes flumen.SparseTensor values (indices, values, dense_shape)"
            ))
        })?;
        let dense: Vec<i64> = np.call_method1("asarray", (dense_shape, "int64"))?.call_method0("tolist")?.extract()?;
        if dense.len() != rank {
            return Err(bad(i, format!("dense_shape {dense:?} has rank {}, declared {:?}", dense.len(), field.shape)));
        }
        if dense.iter().zip(&field.shape).any(|(&size, &declared)| size < 0 || (declared >= 0 && size != declared)) {
            return Err(bad(i, format!("dense_shape {dense:?}, declared {:?}", field.shape)));
        }
        let indices = np.call_method1("asarray", (indices, "int64"))?;
        let flat: Vec<i64> = indices.call_method1("reshape", (-1,))?.call_method0("tolist")?.extract()?;
        let values = array_of(&np.call_method1("ravel", (values,))?, &scalar, None)?;
        let nnz = arrow::array::Array::len(&values);
        if flat.len() != nnz * rank {
            return Err(bad(i, format!("{} coordinates for {nnz} values of rank {rank}", flat.len())));
        }
        for (d, &size) in dense.iter().enumerate() {
            if flat.iter().skip(d).step_by(rank).any(|&c| c < 0 || c >= size) {
                return Err(bad(i, format!("an index in dimension {d} is outside dense_shape {dense:?}")));
            }
        }
        coords.extend_from_slice(&flat);
        dense_shapes.extend_from_slice(&dense);
        parts.push(values);
        offsets.push(i32::try_from(coords.len() / rank).map_err(|_| bad(i, "too many entries".into()))?);
    }
    let count = offsets.len() - 1;
    if let Some(rows) = rows.filter(|&rows| rows != count) {
        return Err(PyValueError::new_err(format!("field {name:?}: {count} values for {rows} elements")));
    }
    let DataType::Struct(fields) = field.arrow_type() else { unreachable!("a sparse field is a struct") };
    let DataType::List(value_item) = fields[1].data_type() else { unreachable!("a sparse field's values") };
    let to_py = |e: arrow::error::ArrowError| PyValueError::new_err(format!("field {name:?}: {e}"));
    let refs: Vec<&dyn arrow::array::Array> = parts.iter().map(|p: &ArrayRef| p.as_ref()).collect();
    let values = match refs.is_empty() {
        true => arrow::array::new_empty_array(value_item.data_type()),
        false => arrow::compute::concat(&refs).map_err(to_py)?,
    };
    let parts = flumen::crates::ir::sparse::SparseParts {
        offsets: arrow::buffer::OffsetBuffer::new(ScalarBuffer::from(offsets)),
        coords,
        values,
        dense_shapes,
    };
    Ok(Arc::new(flumen::crates::ir::sparse::build(&fields, parts, None).map_err(to_py)?))
}
