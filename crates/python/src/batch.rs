//! A chunk of elements handed to Python without copies: through the Arrow PyCapsule
//! interface (`__arrow_c_array__`: pyarrow, polars, duckdb and others import it in place)
//! as NumPy array views (`__array_interface__` over the Arrow buffers, read-only; the
//! array keeps the buffer alive) and as DLPack tensors for PyTorch and JAX.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int32Array, RecordBatch, StructArray};
use arrow::datatypes::{
    DataType, Float16Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use arrow::ffi::{FFI_ArrowArray, FFI_ArrowSchema};
use flumen::{DType, ElementSpec, FieldKind};
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict, PyList, PyTuple};

/// A chunk of elements: each row an element, each column a field.
#[pyclass(module = "flumen", frozen)]
pub struct Batch(pub RecordBatch);

#[pymethods]
impl Batch {
    /// The number of elements (rows).
    #[getter]
    fn num_rows(&self) -> usize {
        self.0.num_rows()
    }

    /// The field names, in order.
    #[getter]
    fn column_names(&self) -> Vec<String> {
        self.0.schema().fields().iter().map(|f| f.name().clone()).collect()
    }

    fn __len__(&self) -> usize {
        self.0.num_rows()
    }

    /// The Arrow PyCapsule interface: the chunk as a struct array, exported without a
    /// copy. `requested_schema` is not supported (the chunk keeps its own types).
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        if requested_schema.is_some_and(|s| !s.is_none()) {
            return Err(PyValueError::new_err("flumen batches are exported in their own schema"));
        }
        let array = StructArray::from(self.0.clone());
        let schema = FFI_ArrowSchema::try_from(&DataType::Struct(self.0.schema().fields().clone()))
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let array = FFI_ArrowArray::new(&array.to_data());
        let schema = PyCapsule::new_with_value(py, schema, c"arrow_schema")?;
        let array = PyCapsule::new_with_value(py, array, c"arrow_array")?;
        PyTuple::new(py, [schema.into_any(), array.into_any()])
    }

    /// Each field as `(name, column)`: a `Column` NumPy views without a copy where the
    /// field is a primitive without nulls (batched fixed-size fields as 2-D and more), a
    /// list of Python values otherwise (strings, bytes, ragged fields, nulls). Iterating
    /// the dataset gives ragged fields as `(values, offsets)` views instead.
    pub fn columns<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for (field, array) in self.0.schema().fields().iter().zip(self.0.columns()) {
            let column: Bound<'py, PyAny> = match Column::view(array) {
                Some(c) => Bound::new(py, c)?.into_any(),
                None => values(py, array)?,
            };
            out.append((field.name(), column))?;
        }
        Ok(out)
    }

    fn __repr__(&self) -> String {
        format!("Batch({} rows: {})", self.0.num_rows(), self.column_names().join(", "))
    }
}

/// `chunk` as a dict of NumPy arrays: views where `Column::view` allows; a ragged field of
/// primitives without nulls as `(values, offsets)`, two views, row `i` being
/// `values[offsets[i]:offsets[i + 1]]`; Python lists otherwise.
pub fn numpy_dict<'py>(py: Python<'py>, chunk: &RecordBatch) -> PyResult<Bound<'py, PyDict>> {
    field_dict(py, chunk, &py.import("numpy")?.getattr("asarray")?)
}

/// `chunk` as a dict of fields, each viewable column passed through `convert` (NumPy's
/// `asarray`, a framework's `from_dlpack`), ragged fields as a `(values, offsets)` pair of
/// converted columns, the rest as Python lists.
pub fn field_dict<'py>(
    py: Python<'py>,
    chunk: &RecordBatch,
    convert: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    for (field, array) in chunk.schema().fields().iter().zip(chunk.columns()) {
        out.set_item(field.name(), one_field(py, array, convert)?)?;
    }
    Ok(out)
}

/// One element (`chunk` as the dataset iterator gives it) as a dict of its fields with the
/// shapes of the element spec `element`, as tf.data's iterators give them: a scalar field
/// as a 0-d array (a `str`/`bytes`/`None` for text and nulls), a `[d0, ..]` field as an
/// array of that shape, a ragged field of one element as a 1-D array, a sparse field as a
/// `flumen.SparseTensor` (the COO triplet `(indices, values, dense_shape)`). A batch the
/// runtime holds as rows (`batch` of scalars: `b` rows of a `[b]` field) is already in that
/// shape and is given as `field_dict` gives it.
pub fn element_dict<'py>(
    py: Python<'py>,
    chunk: &RecordBatch,
    element: &ElementSpec,
    convert: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyDict>> {
    let one_row = chunk.num_rows() == 1;
    let out = PyDict::new(py);
    for ((field, array), declared) in chunk.schema().fields().iter().zip(chunk.columns()).zip(&element.fields) {
        // A dense field of unknown dims batched: its elements share their shape (`batch`
        // checks it, `padded_batch` pads to it), so the batch is one array, as in tf.data.
        let batch_rows = !(one_row && declared.arrow_type() == *array.data_type());
        let dense = (batch_rows && declared.kind == FieldKind::Dense).then(|| Column::dense(array)).flatten();
        let value = if let Some(c) = dense {
            convert.call1((Bound::new(py, c)?,))?
        } else if batch_rows {
            one_field(py, array, convert)?
        } else if declared.kind == FieldKind::Sparse {
            sparse_element(py, array, convert)?
        } else if let Some(mut c) = Column::view(array) {
            c.shape.remove(0);
            convert.call1((Bound::new(py, c)?,))?
        } else if let (DataType::List(_), 0) = (array.data_type(), array.null_count()) {
            let row = array.as_list::<i32>().value(0);
            one_field(py, &row, convert)?
        } else {
            self::values(py, array)?.get_item(0)?
        };
        // bfloat16 values come as uint16 bits (Arrow has no bfloat16): viewed as the
        // array library's bfloat16 where it has one.
        let value = match declared.dtype {
            DType::BFloat16 => py.import("flumen._bfloat16")?.call_method1("view", (value,))?,
            _ => value,
        };
        out.set_item(field.name(), value)?;
    }
    Ok(out)
}

/// The sparse column `array` (one row, see `flumen_ir::sparse`) as a `flumen.SparseTensor`:
/// `[nnz, rank]` int64 coordinates and `[nnz]` values viewed in place, and its dense shape.
fn sparse_element<'py>(py: Python<'py>, array: &ArrayRef, convert: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let parts = array.as_struct();
    let indices = parts.column(0).as_list::<i32>().value(0);
    let values = parts.column(1).as_list::<i32>().value(0);
    let (Some(coords), Some(vals), Some(dense)) =
        (Column::view(&indices), Column::view(&values), flumen::crates::ir::sparse::dense_shape(parts, 0))
    else {
        return self::values(py, array)?.get_item(0);
    };
    let dense = py.import("numpy")?.call_method1("array", (dense, "int64"))?;
    let triplet = [
        convert.call1((Bound::new(py, coords)?,))?,
        convert.call1((Bound::new(py, vals)?,))?,
        convert.call1((dense,))?,
    ];
    sparse_tensor(py, triplet)
}

/// `flumen.SparseTensor(indices, values, dense_shape)`.
fn sparse_tensor<'py>(py: Python<'py>, triplet: [Bound<'py, PyAny>; 3]) -> PyResult<Bound<'py, PyAny>> {
    py.import("flumen")?.getattr("SparseTensor")?.call1(PyTuple::new(py, triplet)?)
}

/// A column as `field_dict` gives it.
fn one_field<'py>(py: Python<'py>, array: &ArrayRef, convert: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    if let Some(c) = Column::view(array) {
        return convert.call1((Bound::new(py, c)?,));
    }
    if let Some((values, offsets)) = Column::ragged(array) {
        let values = convert.call1((Bound::new(py, values)?,))?;
        let offsets = convert.call1((Bound::new(py, offsets)?,))?;
        return Ok(PyTuple::new(py, [values, offsets])?.into_any());
    }
    if let Some(triplet) = sparse_rows(py, array, convert)? {
        return Ok(triplet);
    }
    self::values(py, array)
}

/// A sparse column of several elements as one COO triplet with the element's position as
/// the first coordinate and the largest of the elements' dense shapes after the count (as
/// tf.data batches `SparseTensor`s): a copy. `None` where `array`
/// is not a sparse column of int64 coordinates and primitive values.
fn sparse_rows<'py>(
    py: Python<'py>,
    array: &ArrayRef,
    convert: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let DataType::Struct(parts) = array.data_type() else { return Ok(None) };
    if parts.len() != 3 || parts[0].name() != "indices" || parts[1].name() != "values" || array.null_count() > 0 {
        return Ok(None);
    }
    let parts = array.as_struct();
    let (indices, values) = (parts.column(0).as_list::<i32>(), parts.column(1).as_list::<i32>());
    let DataType::FixedSizeList(_, rank) = indices.value_type() else { return Ok(None) };
    let rank = rank as usize;
    let mut coords: Vec<i64> = Vec::new();
    let mut dense = vec![0i64; rank + 1];
    dense[0] = array.len() as i64;
    for row in 0..array.len() {
        let tuples = indices.value(row);
        let tuples = tuples.as_fixed_size_list();
        let flat = tuples.values().slice(tuples.offset() * rank, tuples.len() * rank);
        for tuple in flat.as_primitive::<Int64Type>().values().chunks(rank.max(1)).take(tuples.len()) {
            coords.push(row as i64);
            coords.extend_from_slice(tuple);
        }
        let Some(shape) = flumen::crates::ir::sparse::dense_shape(parts, row) else { return Ok(None) };
        for (d, size) in shape.into_iter().enumerate() {
            dense[d + 1] = dense[d + 1].max(size);
        }
    }
    let starts = values.value_offsets();
    let values = values.values().slice(starts[0] as usize, (starts[array.len()] - starts[0]) as usize);
    let Some(values) = Column::view(&values) else { return Ok(None) };
    let np = py.import("numpy")?;
    let entries = coords.len() / (rank + 1);
    let coords = np.call_method1("array", (coords, "int64"))?.call_method1("reshape", ((entries, rank + 1),))?;
    let triplet = [
        convert.call1((coords,))?,
        convert.call1((Bound::new(py, values)?,))?,
        convert.call1((np.call_method1("array", (dense, "int64"))?,))?,
    ];
    Ok(Some(sparse_tensor(py, triplet)?))
}

/// A column NumPy can view in place (`numpy.asarray(column)`).
#[pyclass(module = "flumen", frozen)]
pub struct Column {
    /// The Arrow array whose values buffer is viewed; kept alive by the view.
    values: ArrayRef,
    shape: Vec<usize>,
    typestr: &'static str,
}

impl Column {
    /// A view of `array` when it is primitive without nulls, or fixed-size lists of such.
    fn view(array: &ArrayRef) -> Option<Column> {
        Column::viewed(array, false)
    }

    /// [`Column::view`], also through variable-size lists whose rows all have one length
    /// (a dense field's batch: its elements share their shape), as an array of that shape.
    fn dense(array: &ArrayRef) -> Option<Column> {
        Column::viewed(array, true)
    }

    fn viewed(array: &ArrayRef, uniform_lists: bool) -> Option<Column> {
        let mut shape = vec![array.len()];
        let mut values = array.clone();
        loop {
            if values.null_count() > 0 {
                break;
            }
            let (child, n) = match values.data_type() {
                DataType::FixedSizeList(_, n) => {
                    let list = values.as_fixed_size_list();
                    // The child of a sliced list starts at its own offset.
                    (list.values().slice(list.offset() * *n as usize, list.len() * *n as usize), *n as usize)
                }
                DataType::List(_) if uniform_lists => {
                    let list = values.as_list::<i32>();
                    let offsets = list.value_offsets();
                    let n = offsets.get(1).map_or(0, |end| end - offsets[0]);
                    if offsets.windows(2).any(|w| w[1] - w[0] != n) {
                        return None;
                    }
                    let (first, last) = (offsets[0] as usize, offsets[list.len()] as usize);
                    (list.values().slice(first, last - first), n as usize)
                }
                _ => break,
            };
            shape.push(n);
            values = child;
        }
        if let Some((values, typestr)) = unpacked(&values) {
            return Some(Column { values, shape, typestr });
        }
        let typestr = typestr(values.data_type())?;
        (values.null_count() == 0).then_some(Column { values, shape, typestr })
    }
}

/// A column whose values NumPy cannot view as Arrow lays them out, as values it can, with
/// their NumPy type: bools (bits in Arrow) as a byte each, dates and times as NumPy's 64-bit
/// `datetime64` / `timedelta64` with their unit (dates, Arrow's 32-bit days, widened to
/// `datetime64[D]`; a null as `NaT`). `None` for other types, and for bools with nulls. A
/// date or time column that needs neither widening nor `NaT` is given as it is.
fn unpacked(values: &ArrayRef) -> Option<(ArrayRef, &'static str)> {
    use arrow::datatypes::{Date32Type, Time64MicrosecondType, TimeUnit, TimestampMicrosecondType};
    if let (DataType::Boolean, 0) = (values.data_type(), values.null_count()) {
        let bytes: Vec<u8> = values.as_boolean().values().iter().map(u8::from).collect();
        return Some((Arc::new(arrow::array::UInt8Array::from(bytes)), "|b1"));
    }
    let (days, typestr) = match values.data_type() {
        DataType::Date32 => (true, "<M8[D]"),
        DataType::Timestamp(TimeUnit::Microsecond, _) => (false, "<M8[us]"),
        DataType::Time64(TimeUnit::Microsecond) => (false, "<m8[us]"),
        _ => return None,
    };
    if !days && values.null_count() == 0 {
        return Some((values.clone(), typestr));
    }
    // NumPy's NaT is the smallest int64.
    let ticks: Vec<i64> = match values.data_type() {
        DataType::Date32 => values.as_primitive::<Date32Type>().iter().map(|v| v.map_or(i64::MIN, i64::from)).collect(),
        DataType::Timestamp(..) => {
            values.as_primitive::<TimestampMicrosecondType>().iter().map(|v| v.unwrap_or(i64::MIN)).collect()
        }
        _ => values.as_primitive::<Time64MicrosecondType>().iter().map(|v| v.unwrap_or(i64::MIN)).collect(),
    };
    Some((Arc::new(arrow::array::Int64Array::from(ticks)), typestr))
}

impl Column {
    /// A list column of primitives without nulls as views of its values and offsets.
    fn ragged(array: &ArrayRef) -> Option<(Column, Column)> {
        let DataType::List(_) = array.data_type() else { return None };
        let list = array.as_list::<i32>();
        if list.null_count() > 0 {
            return None;
        }
        let values = Column::view(list.values()).filter(|v| v.shape.len() == 1)?;
        let offsets: ArrayRef = Arc::new(Int32Array::new(list.offsets().inner().clone(), None));
        Some((values, Column::view(&offsets)?))
    }
}

/// NumPy's type string of a primitive Arrow type (little-endian).
fn typestr(dt: &DataType) -> Option<&'static str> {
    Some(match dt {
        DataType::Int8 => "|i1",
        DataType::Int16 => "<i2",
        DataType::Int32 => "<i4",
        DataType::Int64 => "<i8",
        DataType::UInt8 => "|u1",
        DataType::UInt16 => "<u2",
        DataType::UInt32 => "<u4",
        DataType::UInt64 => "<u8",
        DataType::Float16 => "<f2",
        DataType::Float32 => "<f4",
        DataType::Float64 => "<f8",
        _ => return None,
    })
}

#[pymethods]
impl Column {
    /// NumPy's array interface: the values buffer, read-only.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let data = self.values.to_data();
        let width = data.data_type().primitive_width().expect("a primitive column");
        let address = data.buffers()[0].as_ptr() as usize + data.offset() * width;
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", PyTuple::new(py, &self.shape)?)?;
        d.set_item("typestr", self.typestr)?;
        d.set_item("data", (address, true))?;
        Ok(d)
    }

    /// NumPy's array interface as a C structure (what `numpy.asarray` reads first, and
    /// fastest): the values buffer, read-only.
    #[getter]
    fn __array_struct__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        crate::array_struct::capsule(py, &self.values, &self.shape, self.typestr)
    }

    /// The DLPack protocol (`torch.from_dlpack`, `jax.numpy.from_dlpack`,
    /// `numpy.from_dlpack`): the values buffer without a copy, read-only where the consumer
    /// speaks DLPack 1.0. Only CPU tensors are made: `dl_device` must be the CPU's and
    /// `copy=True` is refused (the consumer copies, if it must, after import).
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if stream.is_some_and(|s| !s.is_none()) {
            return Err(PyBufferError::new_err("flumen columns live on the CPU: no stream applies"));
        }
        if dl_device.is_some_and(|d| d != (1, 0)) {
            return Err(PyBufferError::new_err("flumen columns live on the CPU (device (1, 0))"));
        }
        if copy == Some(true) {
            return Err(PyBufferError::new_err("flumen exports its buffers without a copy; copy after import"));
        }
        if self.typestr.contains('[') {
            // DLPack (so PyTorch and JAX) has no date or time type; NumPy and pyarrow keep
            // the unit.
            return Err(PyBufferError::new_err(format!(
                "a {} column has no DLPack type (DLPack, PyTorch and JAX have no dates or times): read it \
                 through NumPy or pyarrow, or cast it to int64 first",
                &self.typestr[1..]
            )));
        }
        let versioned = max_version.is_some_and(|(major, _)| major >= 1);
        crate::dlpack::capsule(py, &self.values, &self.shape, versioned, self.typestr == "|b1")
    }

    /// The DLPack device: `(kDLCPU, 0)`.
    fn __dlpack_device__(&self) -> (i32, i32) {
        (1, 0)
    }
}

/// `array`'s values as a Python list (a copy): for what NumPy cannot view.
fn values<'py>(py: Python<'py>, array: &ArrayRef) -> PyResult<Bound<'py, PyAny>> {
    let out = PyList::empty(py);
    for i in 0..array.len() {
        if array.is_null(i) {
            out.append(py.None())?;
            continue;
        }
        match array.data_type() {
            DataType::Utf8 => out.append(array.as_string::<i32>().value(i))?,
            DataType::LargeUtf8 => out.append(array.as_string::<i64>().value(i))?,
            DataType::Utf8View => out.append(array.as_string_view().value(i))?,
            DataType::Binary => out.append(pyo3::types::PyBytes::new(py, array.as_binary::<i32>().value(i)))?,
            DataType::LargeBinary => out.append(pyo3::types::PyBytes::new(py, array.as_binary::<i64>().value(i)))?,
            DataType::BinaryView => out.append(pyo3::types::PyBytes::new(py, array.as_binary_view().value(i)))?,
            DataType::Boolean => out.append(array.as_boolean().value(i))?,
            DataType::List(_) => out.append(values(py, &array.as_list::<i32>().value(i))?)?,
            DataType::LargeList(_) => out.append(values(py, &array.as_list::<i64>().value(i))?)?,
            DataType::FixedSizeList(..) => out.append(values(py, &array.as_fixed_size_list().value(i))?)?,
            DataType::Int8 => out.append(array.as_primitive::<Int8Type>().value(i))?,
            DataType::Int16 => out.append(array.as_primitive::<Int16Type>().value(i))?,
            DataType::Int32 => out.append(array.as_primitive::<Int32Type>().value(i))?,
            DataType::Int64 => out.append(array.as_primitive::<Int64Type>().value(i))?,
            DataType::UInt8 => out.append(array.as_primitive::<UInt8Type>().value(i))?,
            DataType::UInt16 => out.append(array.as_primitive::<UInt16Type>().value(i))?,
            DataType::UInt32 => out.append(array.as_primitive::<UInt32Type>().value(i))?,
            DataType::UInt64 => out.append(array.as_primitive::<UInt64Type>().value(i))?,
            DataType::Float16 => out.append(array.as_primitive::<Float16Type>().value(i).to_f32())?,
            DataType::Float32 => out.append(array.as_primitive::<Float32Type>().value(i))?,
            DataType::Float64 => out.append(array.as_primitive::<Float64Type>().value(i))?,
            // Dates, times, decimals: as Arrow prints them.
            _ => out.append(
                arrow::util::display::array_value_to_string(array, i)
                    .map_err(|e| PyValueError::new_err(e.to_string()))?,
            )?,
        }
    }
    Ok(out.into_any())
}
