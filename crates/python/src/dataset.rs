//! `flumen.Dataset`: the facade's dataset with tf.data's names, its sources and
//! transformations.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{AsArray, BooleanArray, RecordBatch, StructArray};
use arrow::ffi::{from_ffi, FFI_ArrowArray, FFI_ArrowSchema};
use arrow::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use flumen::prelude::{Compression, DatasetFunction, FileRead, MapFunction, PredicateFunction, SnapshotOptions};
use flumen::{
    BucketOptions, Checkpoint, CsvOptions, DatasetIterator, FeatureSpec, FieldSpec, PaddedBatchOptions, Parallel,
    RecordCompression, Registry, Tunable,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict, PyList};

use crate::batch::{element_dict, numpy_dict};
use crate::convert::{array_of, chunk_of, spec_of, traceback, yielded};
use crate::error::to_py;
use crate::expr::Expr;
use crate::iterator::{Iterator, Output};
use crate::options::Options;

/// `AUTOTUNE`: let the tuner choose (as `tf.data.AUTOTUNE`).
pub const AUTOTUNE: i64 = -1;

/// A pipeline: where elements come from and what happens to them.
#[pyclass(module = "flumen", frozen)]
pub struct Dataset(pub flumen::Dataset);

/// Literal padding values by field (`{"name": value}`).
fn literals(values: Option<&Bound<'_, PyDict>>) -> PyResult<BTreeMap<String, datafusion_expr::Expr>> {
    let mut out = BTreeMap::new();
    for (name, value) in values.into_iter().flat_map(|d| d.iter()) {
        out.insert(name.extract::<String>()?, crate::expr::expr_of(&value)?);
    }
    Ok(out)
}

/// A TFRecord compression by tf.data's name: `""` (or `"NONE"`), `"GZIP"`, `"ZLIB"`.
pub fn compression_of(name: &str) -> PyResult<RecordCompression> {
    match name.to_ascii_uppercase().as_str() {
        "" | "NONE" => Ok(RecordCompression::None),
        "GZIP" => Ok(RecordCompression::Gzip),
        "ZLIB" => Ok(RecordCompression::Zlib),
        other => Err(PyValueError::new_err(format!("unknown compression {other:?}"))),
    }
}

/// A file format by name.
fn file_read(format: &str) -> PyResult<FileRead> {
    Ok(match format {
        "csv" => FileRead::Csv(CsvOptions::default()),
        "parquet" => FileRead::Parquet { columns: None },
        "ipc" => FileRead::IpcFile,
        "text" => FileRead::TextLines,
        "tfrecord" => FileRead::TfRecord(RecordCompression::None),
        "tfrecord-gzip" => FileRead::TfRecord(RecordCompression::Gzip),
        "tfrecord-zlib" => FileRead::TfRecord(RecordCompression::Zlib),
        "avro" => FileRead::Avro(flumen::AvroOptions::default()),
        other => return Err(PyValueError::new_err(format!("unknown file format {other:?}"))),
    })
}

/// A Python function's name for errors (its `__name__`), and the name it is registered
/// under in the plan, shown by `explain`: the same with a number of its own, since two
/// functions of one pipeline may share a `__name__` (every lambda is `<lambda>`).
fn function_name(f: &Bound<'_, PyAny>) -> (String, String) {
    static REGISTERED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let name = f.getattr("__name__").and_then(|n| n.extract()).unwrap_or_else(|_| "function".to_string());
    let n = REGISTERED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (format!("{name}#{n}"), name)
}

/// A `flumen.SparseFeature` (tf.io.SparseFeature's fields) as the feature `name`.
fn sparse_feature(name: String, value: &Bound<'_, PyAny>) -> PyResult<FeatureSpec> {
    let dtype: String = value.getattr("dtype")?.extract()?;
    let dtype =
        flumen::DType::from_name(&dtype).ok_or_else(|| PyValueError::new_err(format!("unknown dtype {dtype:?}")))?;
    let index = value.getattr("index_key")?;
    let index_keys = match index.extract::<String>() {
        Ok(one) => vec![one],
        Err(_) => index.extract::<Vec<String>>()?,
    };
    let size = value.getattr("size")?;
    let size = match size.extract::<usize>() {
        Ok(one) => vec![one],
        Err(_) => size.extract::<Vec<usize>>()?,
    };
    let value_key: String = value.getattr("value_key")?.extract()?;
    let mut spec = FeatureSpec::sparse(name, dtype, index_keys, value_key, size);
    if value.getattr("already_sorted")?.extract::<bool>()? {
        spec = spec.already_sorted();
    }
    Ok(spec)
}

/// A dataset's chunks as an Arrow record batch reader (`Dataset.__arrow_c_stream__`).
struct ChunkStream {
    chunks: flumen::ChunkIter,
    schema: arrow::datatypes::SchemaRef,
}

impl std::iter::Iterator for ChunkStream {
    type Item = Result<RecordBatch, arrow::error::ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        // The consumer may read on a thread that holds the GIL (pyarrow does) while the
        // pipeline's Python functions need it on flumen's threads: the pull runs with it
        // released. Without an interpreter (it is shutting down) there is no GIL to release.
        let chunks = &mut self.chunks;
        let pulled = match Python::try_attach(|py| py.detach(|| chunks.next())) {
            Some(pulled) => pulled,
            None => self.chunks.next(),
        };
        pulled.map(|chunk| chunk.map_err(|e| arrow::error::ArrowError::ExternalError(Box::new(e))))
    }
}

impl arrow::record_batch::RecordBatchReader for ChunkStream {
    fn schema(&self) -> arrow::datatypes::SchemaRef {
        self.schema.clone()
    }
}

/// A dataset's chunks, once, as an Arrow C stream (`Dataset.arrow_stream`).
#[pyclass(module = "flumen")]
pub struct ArrowStream(std::sync::Mutex<Option<ChunkStream>>);

#[pymethods]
impl ArrowStream {
    /// The Arrow PyCapsule stream interface; the stream can be exported once.
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        if requested_schema.is_some_and(|s| !s.is_none()) {
            return Err(PyValueError::new_err("flumen datasets are exported in their own schema"));
        }
        let taken = self.0.lock().map_err(|_| PyValueError::new_err("the stream's lock is poisoned"))?.take();
        let stream = taken.ok_or_else(|| PyValueError::new_err("this stream was already exported"))?;
        PyCapsule::new_with_value(py, FFI_ArrowArrayStream::new(Box::new(stream)), c"arrow_array_stream")
    }
}

/// `{"name": expr or literal}` as named expressions, in the dict's order.
fn named_exprs(fields: &Bound<'_, PyDict>) -> PyResult<Vec<(String, datafusion_expr::Expr)>> {
    fields.iter().map(|(name, e)| Ok((name.extract::<String>()?, crate::expr::expr_of(&e)?))).collect()
}

/// A Python function from one element of spec `input` (a dict of its fields, shaped as
/// iteration gives them) to a `Dataset` of the declared `output` spec, as a dataset function
/// (`flat_map`, `interleave`).
fn dataset_function(
    f: &Bound<'_, PyAny>,
    output: &Bound<'_, PyDict>,
    input: &flumen::ElementSpec,
) -> PyResult<DatasetFunction> {
    let input = input.clone();
    if !f.is_callable() {
        return Err(PyTypeError::new_err("expected a function returning a flumen.Dataset"));
    }
    let spec = spec_of(output)?;
    let (registered, name) = function_name(f);
    let func: Py<PyAny> = f.clone().unbind();
    let operator = format!("dataset function (python '{name}')");
    Ok(DatasetFunction::closure(Some(&registered), spec, move |row| {
        Python::attach(|py| {
            let call = || -> PyResult<flumen::Dataset> {
                let asarray = py.import("numpy")?.getattr("asarray")?;
                let result = func.call1(py, (element_dict(py, row, &input, &asarray)?,))?;
                let dataset = result.bind(py).cast::<Dataset>().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "the function returned {}, not a flumen.Dataset",
                        result.bind(py).get_type().name().map(|n| n.to_string()).unwrap_or_default()
                    ))
                })?;
                Ok(dataset.get().0.clone())
            };
            call().map_err(|e| flumen::Error::Udf { operator: operator.clone(), message: traceback(py, &e) })
        })
    }))
}

/// A scan's initial state as `(name, literal)` fields and their spec: the dict's entries, or
/// one field `state` for a bare scalar.
fn scan_state(initial: &Bound<'_, PyAny>) -> PyResult<(Vec<(String, datafusion_expr::Expr)>, flumen::ElementSpec)> {
    let entries: Vec<(String, Bound<'_, PyAny>)> = match initial.cast::<PyDict>() {
        Ok(d) => d.iter().map(|(k, v)| Ok((k.extract::<String>()?, v))).collect::<PyResult<_>>()?,
        Err(_) => vec![("state".to_string(), initial.clone())],
    };
    let mut fields = Vec::with_capacity(entries.len());
    let mut literals = Vec::with_capacity(entries.len());
    for (name, value) in entries {
        // As `expr::literal` reads a Python value: bool, then int, float, str.
        let dtype = if value.extract::<bool>().is_ok() {
            flumen::DType::Bool
        } else if value.extract::<i64>().is_ok() {
            flumen::DType::Int64
        } else if value.extract::<f64>().is_ok() {
            flumen::DType::Float64
        } else if value.extract::<String>().is_ok() {
            flumen::DType::Utf8
        } else {
            return Err(PyTypeError::new_err(format!(
                "scan state '{name}' is a {}: a scan function's state fields are bool, int, float or str scalars",
                value.get_type().name()?
            )));
        };
        fields.push(FieldSpec::scalar(name.clone(), dtype));
        literals.push((name, crate::expr::expr_of(&value)?));
    }
    Ok((literals, flumen::ElementSpec::new(fields).map_err(to_py)?))
}

/// tf.data's `scan_func(state, element) -> (new_state, output)` as a scan closure: called
/// with the state's fields then the element's, it returns the new state's then the output's.
fn scan_function(
    f: &Bound<'_, PyAny>,
    initial: &Bound<'_, PyAny>,
    output: &Bound<'_, PyDict>,
    input: &Dataset,
) -> PyResult<MapFunction> {
    let (_, state) = scan_state(initial)?;
    let bare_state = initial.cast::<PyDict>().is_err();
    let out = spec_of(output)?;
    let scope = flumen::ElementSpec::new(state.fields.iter().chain(&input.0.element_spec().fields).cloned().collect())
        .map_err(|_| PyValueError::new_err("scan state names must differ from the element's field names"))?;
    let returns = flumen::ElementSpec::new(state.fields.iter().chain(&out.fields).cloned().collect())
        .map_err(|_| PyValueError::new_err("scan output names must differ from its state names"))?;
    let (registered, name) = function_name(f);
    let func: Py<PyAny> = f.clone().unbind();
    let operator = format!("scan(python '{name}')");
    let state_names: Vec<String> = state.fields.iter().map(|f| f.name.clone()).collect();
    let single_output = (out.fields.len() == 1).then(|| out.fields[0].name.clone());
    Ok(MapFunction::element(Some(&registered), out, move |row| {
        Python::attach(|py| {
            let call = || -> PyResult<RecordBatch> {
                let asarray = py.import("numpy")?.getattr("asarray")?;
                let fields = element_dict(py, row, &scope, &asarray)?;
                let state = PyDict::new(py);
                for name in &state_names {
                    let value = fields.get_item(name)?.expect("a state field of the scope");
                    let value = if value.hasattr("item")? { value.call_method0("item")? } else { value };
                    state.set_item(name, value)?;
                    fields.del_item(name)?;
                }
                let state_arg = match bare_state {
                    true => state.get_item("state")?.expect("the bare state's field"),
                    false => state.into_any(),
                };
                let result = func.call1(py, (state_arg, fields))?;
                let (new_state, output) = result
                    .extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>(py)
                    .map_err(|_| PyTypeError::new_err("a scan function returns (new_state, output)"))?;
                let both = PyDict::new(py);
                match new_state.cast::<PyDict>() {
                    Ok(d) if !bare_state => both.update(d.as_mapping())?,
                    _ if bare_state => both.set_item("state", new_state)?,
                    _ => return Err(PyTypeError::new_err("the new state is a dict of the initial state's fields")),
                }
                match (output.cast::<PyDict>(), &single_output) {
                    (Ok(d), _) => both.update(d.as_mapping())?,
                    (Err(_), Some(name)) => both.set_item(name, output)?,
                    (Err(_), None) => return Err(PyTypeError::new_err("the output is a dict of the declared fields")),
                }
                one_element(both.as_any(), &returns)
            };
            call().map_err(|e| flumen::Error::Udf { operator: operator.clone(), message: traceback(py, &e) })
        })
    })
    .exclusive())
}

/// The flumen dtype of a NumPy array's values: text for str and object arrays, bytes for
/// bytes arrays, otherwise the dtype of NumPy's name.
fn numpy_dtype(array: &Bound<'_, PyAny>) -> PyResult<flumen::DType> {
    let kind: String = array.getattr("dtype")?.getattr("kind")?.extract()?;
    Ok(match kind.as_str() {
        "U" | "O" => flumen::DType::Utf8,
        "S" => flumen::DType::Binary,
        _ => {
            let name: String = array.getattr("dtype")?.getattr("name")?.extract()?;
            flumen::DType::from_name(&name)
                .ok_or_else(|| PyTypeError::new_err(format!("NumPy dtype {name} has no flumen dtype")))?
        }
    })
}

/// The field `name` whose column is the NumPy array `column`: its rows' shape and dtype.
fn numpy_field(name: String, column: &Bound<'_, PyAny>) -> PyResult<FieldSpec> {
    let shape: Vec<i64> = column.getattr("shape")?.extract::<Vec<i64>>()?.into_iter().skip(1).collect();
    let dtype = numpy_dtype(column)?;
    Ok(match shape.is_empty() {
        true => FieldSpec::scalar(name, dtype),
        false => FieldSpec::tensor(name, dtype, shape),
    })
}

/// A Python function's result for one element (a dict of the declared `output` fields) as a
/// one-row chunk.
fn one_element(result: &Bound<'_, PyAny>, output: &flumen::ElementSpec) -> PyResult<RecordBatch> {
    let chunk = yielded(result, output)?;
    match chunk.num_rows() {
        1 => Ok(chunk),
        n => Err(PyValueError::new_err(format!(
            "the function returned {n} elements for one: return the element's fields (map(..., batched=True) \
             takes columns)"
        ))),
    }
}

/// A Python predicate of one element (a dict of its fields, of spec `input`) for `operator`.
fn element_predicate(f: &Bound<'_, PyAny>, operator: &str, input: &flumen::ElementSpec) -> PredicateFunction {
    let (registered, name) = function_name(f);
    let func: Py<PyAny> = f.clone().unbind();
    let operator = format!("{operator}(python '{name}')");
    let input = input.clone();
    PredicateFunction::element(Some(&registered), move |row| {
        Python::attach(|py| {
            let call = || -> PyResult<bool> {
                let asarray = py.import("numpy")?.getattr("asarray")?;
                func.call1(py, (element_dict(py, row, &input, &asarray)?,))?.bind(py).is_truthy()
            };
            call().map_err(|e| flumen::Error::Udf { operator: operator.clone(), message: traceback(py, &e) })
        })
    })
}

/// A Python predicate of a chunk's columns returning one bool per element.
fn chunk_predicate(f: &Bound<'_, PyAny>) -> PredicateFunction {
    let (registered, name) = function_name(f);
    let func: Py<PyAny> = f.clone().unbind();
    let keep = FieldSpec::scalar("keep", flumen::DType::Bool);
    let operator = format!("filter(python '{name}')");
    PredicateFunction::batch(Some(&registered), move |chunk| {
        Python::attach(|py| {
            let call = || -> PyResult<BooleanArray> {
                let result = func.call1(py, (numpy_dict(py, chunk)?,))?;
                let array = array_of(result.bind(py), &keep, Some(chunk.num_rows()))?;
                Ok(array.as_boolean().clone())
            };
            call().map_err(|e| flumen::Error::Udf { operator: operator.clone(), message: traceback(py, &e) })
        })
    })
}

fn py_none(py: Python<'_>) -> Bound<'_, PyAny> {
    py.None().into_bound(py)
}

/// The window `group_by_window` hands its `reduce_func` to learn what it does: only
/// `window.batch(n)` is understood.
#[pyclass(module = "flumen", frozen)]
pub struct WindowProbe;

#[pymethods]
impl WindowProbe {
    /// The window batched whole.
    #[pyo3(signature = (batch_size, drop_remainder = false))]
    fn batch(&self, batch_size: u64, drop_remainder: bool) -> PyResult<BatchedWindow> {
        if drop_remainder {
            return Err(PyValueError::new_err("a group_by_window window's batch keeps its remainder"));
        }
        Ok(BatchedWindow { batch_size })
    }
}

/// What `WindowProbe.batch` returns: the batch size the reducer asked for.
#[pyclass(module = "flumen", frozen)]
pub struct BatchedWindow {
    batch_size: u64,
}

/// `None` (the default), `AUTOTUNE` or a number.
fn tunable(value: Option<i64>) -> PyResult<Tunable> {
    match value {
        None => Ok(Tunable::Default),
        Some(AUTOTUNE) => Ok(Tunable::Autotune),
        Some(n) if n > 0 => Ok(Tunable::Fixed(u32::try_from(n).map_err(|_| PyValueError::new_err("too large"))?)),
        Some(n) => Err(PyValueError::new_err(format!("{n} is not a count: a positive number or AUTOTUNE"))),
    }
}

fn parallel(num_parallel_calls: Option<i64>, deterministic: Option<bool>) -> PyResult<Parallel> {
    Ok(Parallel { num_parallel_calls: tunable(num_parallel_calls)?, deterministic })
}

fn ok(ds: flumen::Result<flumen::Dataset>) -> PyResult<Dataset> {
    ds.map(Dataset).map_err(to_py)
}

/// One path or a list of them.
fn paths(value: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if let Ok(one) = value.extract::<String>() {
        return Ok(vec![one]);
    }
    value.extract::<Vec<String>>()
}

fn refs(paths: &[String]) -> Vec<&str> {
    paths.iter().map(String::as_str).collect()
}

/// The chunks of an object with the Arrow PyCapsule interface: a stream
/// (`__arrow_c_stream__`: pyarrow tables and readers, polars frames) or one array of
/// structs (`__arrow_c_array__`: a record batch).
fn import_arrow(obj: &Bound<'_, PyAny>) -> PyResult<Vec<RecordBatch>> {
    let err = |e: arrow::error::ArrowError| PyValueError::new_err(e.to_string());
    if obj.hasattr("__arrow_c_stream__")? {
        let capsule = obj.call_method0("__arrow_c_stream__")?;
        let capsule = capsule.cast::<PyCapsule>()?;
        let pointer = capsule.pointer_checked(Some(c"arrow_array_stream"))?.cast::<FFI_ArrowArrayStream>();
        // SAFETY: the capsule holds an ArrowArrayStream; it is moved out, leaving a released
        // one for the capsule's destructor.
        let stream = unsafe { FFI_ArrowArrayStream::from_raw(pointer.as_ptr()) };
        let reader = ArrowArrayStreamReader::try_new(stream).map_err(err)?;
        return reader.collect::<Result<Vec<_>, _>>().map_err(err);
    }
    if obj.hasattr("__arrow_c_array__")? {
        let pair = obj.call_method0("__arrow_c_array__")?;
        let (schema, array): (Bound<'_, PyCapsule>, Bound<'_, PyCapsule>) = pair.extract()?;
        let schema = schema.pointer_checked(Some(c"arrow_schema"))?.cast::<FFI_ArrowSchema>();
        let array = array.pointer_checked(Some(c"arrow_array"))?.cast::<FFI_ArrowArray>();
        // SAFETY: the capsules hold an ArrowSchema and an ArrowArray; the array is moved out
        // (its capsule keeps a released one), the schema only read.
        let data = unsafe { from_ffi(FFI_ArrowArray::from_raw(array.as_ptr()), schema.as_ref()) }.map_err(err)?;
        return Ok(vec![RecordBatch::from(StructArray::from(data))]);
    }
    Err(PyTypeError::new_err(format!(
        "{} has no Arrow data: expected __arrow_c_stream__ or __arrow_c_array__ (a pyarrow table or batch)",
        obj.get_type().name()?
    )))
}

#[pymethods]
impl Dataset {
    /// `range(stop)`, `range(start, stop)` or `range(start, stop, step)`: int64 elements in a
    /// field `value`.
    /// `output_type` casts the values (tf.data's `output_type`, `"int64"` by default).
    #[staticmethod]
    #[pyo3(signature = (start, stop = None, step = 1, output_type = "int64"))]
    fn range(start: i64, stop: Option<i64>, step: i64, output_type: &str) -> PyResult<Dataset> {
        let (start, stop) = match stop {
            Some(stop) => (start, stop),
            None => (0, start),
        };
        let range = flumen::Dataset::range_step(start, stop, step).map_err(to_py)?;
        match output_type {
            "int64" => Ok(Dataset(range)),
            other => {
                let to = crate::expr::Expr(flumen::prelude::col("value")).cast(other)?;
                ok(range.map(MapFunction::with_fields([("value", to.0)])))
            }
        }
    }

    /// tf.data's `counter`: `start`, `start + step`, ... forever (infinite cardinality), in
    /// field `value` of `dtype`.
    #[staticmethod]
    #[pyo3(signature = (start = 0, step = 1, dtype = "int64"))]
    fn counter(start: i64, step: i64, dtype: &str) -> PyResult<Dataset> {
        use flumen::prelude::{col, lit};
        // Numbers of an endless enumerate, whose cardinality (infinite) is tf.data's.
        let counts =
            flumen::Dataset::range(0, 1024).and_then(|r| r.repeat(None)).and_then(|r| r.enumerate(0)).map_err(to_py)?;
        let value = crate::expr::Expr(lit(start) + col("index") * lit(step));
        let value = match dtype {
            "int64" => value,
            other => value.cast(other)?,
        };
        ok(counts.map(MapFunction::select([("value", value.0)])))
    }

    /// One element whose fields are the given values (`{"name": array-like}`), as tf.data's
    /// `from_tensors`: each field has the value's whole shape; a `SparseTensor` value makes
    /// a sparse field of its `dense_shape`.
    #[staticmethod]
    fn from_tensors(tensors: &Bound<'_, PyDict>) -> PyResult<Dataset> {
        let py = tensors.py();
        let np = py.import("numpy")?;
        let (one, mut fields) = (PyDict::new(py), Vec::with_capacity(tensors.len()));
        for (name, value) in tensors.iter() {
            let name: String = name.extract()?;
            if crate::convert::is_sparse_value(&value)? {
                let values = np.call_method1("asarray", (value.getattr("values")?,))?;
                let dense_shape = np.call_method1("asarray", (value.getattr("dense_shape")?, "int64"))?;
                fields.push(FieldSpec::sparse(
                    &name,
                    numpy_dtype(&values)?,
                    dense_shape.call_method0("tolist")?.extract()?,
                ));
                one.set_item(&name, PyList::new(py, [value])?)?;
            } else {
                let column = np.call_method1("expand_dims", (np.call_method1("asarray", (value,))?, 0))?;
                fields.push(numpy_field(name.clone(), &column)?);
                one.set_item(&name, column)?;
            }
        }
        let spec = flumen::ElementSpec::new(fields).map_err(to_py)?;
        ok(flumen::Dataset::from_batches_with_spec(vec![chunk_of(one.as_any(), &spec, Some(1))?], spec))
    }

    /// The rows of Arrow data (a pyarrow `Table` or `RecordBatch`, or anything with the
    /// Arrow PyCapsule interface), each an element.
    #[staticmethod]
    fn from_arrow(data: &Bound<'_, PyAny>) -> PyResult<Dataset> {
        ok(flumen::Dataset::from_batches(import_arrow(data)?))
    }

    /// The rows of NumPy arrays (`{"name": array}`, all of one length; a field's shape is
    /// the arrays' trailing dimensions), each an element. The values are copied once.
    #[staticmethod]
    fn from_numpy(columns: &Bound<'_, PyDict>) -> PyResult<Dataset> {
        let np = columns.py().import("numpy")?;
        let mut fields = Vec::with_capacity(columns.len());
        for (name, value) in columns.iter() {
            fields.push(numpy_field(name.extract()?, &np.call_method1("asarray", (value,))?)?);
        }
        let spec = flumen::ElementSpec::new(fields).map_err(to_py)?;
        ok(flumen::Dataset::from_batches_with_spec(vec![chunk_of(columns.as_any(), &spec, None)?], spec))
    }

    /// The elements a Python generator yields: `generator()` is called for each pass and
    /// yields dicts of the declared `output` spec (`{"name": dtype}` or
    /// `{"name": (dtype, shape)}`): one element each, as in tf.data (`{"x": 1.5,
    /// "v": np.arange(n)}`), or columns of several elements at once where a field's value
    /// has one more dimension than the field (`{"x": [1.5, 2.5], "v": [[0], [0, 1]]}`), which
    /// is faster.
    #[staticmethod]
    fn from_generator(generator: &Bound<'_, PyAny>, output: &Bound<'_, PyDict>) -> PyResult<Dataset> {
        if !generator.is_callable() {
            return Err(PyTypeError::new_err("from_generator takes a function returning an iterator"));
        }
        let spec = spec_of(output)?;
        let (registered, name) = function_name(generator);
        let factory: Arc<Py<PyAny>> = Arc::new(generator.clone().unbind());
        let out = spec.clone();
        let operator = format!("from_generator(python '{name}')");
        ok(flumen::Dataset::from_generator(Some(&registered), spec, move || {
            let (factory, out, operator) = (factory.clone(), out.clone(), operator.clone());
            let error = move |py: Python<'_>, e: PyErr| flumen::Error::Udf {
                operator: operator.clone(),
                message: traceback(py, &e),
            };
            let started = Python::attach(|py| {
                factory.call0(py).and_then(|g| g.bind(py).try_iter().map(|i| i.unbind())).map_err(|e| error(py, e))
            });
            let iterator: Box<dyn std::iter::Iterator<Item = flumen::Result<RecordBatch>> + Send> = match started {
                Err(e) => Box::new(std::iter::once(Err(e))),
                Ok(it) => Box::new(std::iter::from_fn(move || {
                    Python::attach(|py| match it.bind(py).clone().next() {
                        None => None,
                        Some(Err(e)) => Some(Err(error(py, e))),
                        Some(Ok(item)) => Some(yielded(&item, &out).map_err(|e| error(py, e))),
                    })
                })),
            };
            iterator
        }))
    }

    /// The elements of the files `paths` in `format` (as `interleave_files` names them),
    /// split into parts (files, Parquet row groups) read `cycle_length` at once, in
    /// parallel by default: tf.data's `interleave` of file readers.
    #[staticmethod]
    #[pyo3(signature = (paths, format, cycle_length = None, block_length = 1, num_parallel_calls = AUTOTUNE, deterministic = None))]
    fn read_files(
        paths: &Bound<'_, PyAny>,
        format: &str,
        cycle_length: Option<i64>,
        block_length: u64,
        num_parallel_calls: Option<i64>,
        deterministic: Option<bool>,
    ) -> PyResult<Dataset> {
        let paths = self::paths(paths)?;
        let read = file_read(format)?;
        let splits = flumen::Dataset::splits(&refs(&paths), read.clone()).map_err(to_py)?;
        let parallel = parallel(num_parallel_calls, deterministic)?;
        ok(splits.interleave_with(DatasetFunction::ReadSplit(read), tunable(cycle_length)?, block_length, parallel))
    }

    /// The files matching a glob `pattern` as elements of a field `filename`.
    #[staticmethod]
    #[pyo3(signature = (pattern, shuffle = false, seed = None))]
    fn list_files(pattern: &str, shuffle: bool, seed: Option<u64>) -> PyResult<Dataset> {
        ok(flumen::Dataset::list_files(pattern, shuffle, seed))
    }

    /// The rows of CSV files; `columns` reads only those.
    #[staticmethod]
    #[pyo3(signature = (paths, header = true, delimiter = ',', columns = None))]
    fn csv(paths: &Bound<'_, PyAny>, header: bool, delimiter: char, columns: Option<Vec<String>>) -> PyResult<Dataset> {
        let paths = self::paths(paths)?;
        let options = CsvOptions { header, delimiter, schema: None, columns };
        ok(flumen::Dataset::csv(&refs(&paths), options))
    }

    /// The rows of Parquet files; `columns` reads only those.
    #[staticmethod]
    #[pyo3(signature = (paths, columns = None))]
    fn parquet(paths: &Bound<'_, PyAny>, columns: Option<Vec<String>>) -> PyResult<Dataset> {
        ok(flumen::Dataset::parquet(&refs(&self::paths(paths)?), columns))
    }

    /// The records of Avro container files (codecs null, deflate, snappy, zstandard), the
    /// writer schema read from the first file; `columns` reads only those fields.
    /// `features` reads fields as ATDS's feature specs say: `{"name": (dtype, shape)}` a
    /// dense tensor from (nested) arrays, every length checked (`None` dims: any length),
    /// `{"name": (dtype, shape, "sparse")}` a sparse tensor from a record of `indices0..` and
    /// `values` arrays. `shuffle_blocks` reads the blocks of all the files in a random order
    /// drawn from `seed` (the pipeline's seed when `None`), another each iteration; records
    /// keep their order within a block, so follow with `shuffle(buffer)` to mix them too.
    /// `reader_schema` (JSON text) reads every file as that schema says, whatever schema it
    /// was written with: fields by name or alias, promoted types, defaults where a file
    /// lacks a field.
    #[staticmethod]
    #[pyo3(signature = (paths, columns = None, features = None, shuffle_blocks = false, seed = None, reader_schema = None))]
    fn avro(
        paths: &Bound<'_, PyAny>,
        columns: Option<Vec<String>>,
        features: Option<&Bound<'_, PyDict>>,
        shuffle_blocks: bool,
        seed: Option<u64>,
        reader_schema: Option<String>,
    ) -> PyResult<Dataset> {
        let features = features.map(spec_of).transpose()?;
        let shuffle_blocks = shuffle_blocks.then_some(flumen::BlockShuffle { seed });
        let options = flumen::AvroOptions { columns, features, shuffle_blocks, reader_schema };
        ok(flumen::Dataset::avro(&refs(&self::paths(paths)?), options))
    }

    /// The rows of Arrow IPC files.
    #[staticmethod]
    fn ipc_file(paths: &Bound<'_, PyAny>) -> PyResult<Dataset> {
        ok(flumen::Dataset::ipc_file(&refs(&self::paths(paths)?)))
    }

    /// The lines of text files, in a field `line`.
    #[staticmethod]
    fn text_lines(paths: &Bound<'_, PyAny>) -> PyResult<Dataset> {
        ok(flumen::Dataset::text_lines(&refs(&self::paths(paths)?)))
    }

    /// The records of TFRecord files (`compression`: `""`, `"GZIP"` or `"ZLIB"`), in a field
    /// `record`.
    #[staticmethod]
    #[pyo3(signature = (paths, compression = ""))]
    fn tfrecord(paths: &Bound<'_, PyAny>, compression: &str) -> PyResult<Dataset> {
        let compression = compression_of(compression)?;
        ok(flumen::Dataset::tfrecord(&refs(&self::paths(paths)?), compression))
    }

    /// A dataset from its serialized form (`serialize()`).
    #[staticmethod]
    fn deserialize(json: &str) -> PyResult<Dataset> {
        ok(flumen::Dataset::deserialize(json, Registry::default()))
    }

    /// Fields computed per element: from expressions (`{"name": expr}`), added to the
    /// element's fields or, with `keep=False`, replacing them; or by a Python function whose
    /// output fields `output` declares (`{"name": dtype}` or `{"name": (dtype, shape)}`).
    /// The function receives one element, a dict of its fields as the iterator gives them,
    /// and returns the element's new fields, as in tf.data; with `batched=True` it receives
    /// the columns of a chunk of elements (dicts of NumPy arrays, a row per element) and
    /// returns columns: one call per chunk, much faster where NumPy does the work.
    /// A Python function runs under the GIL on flumen's threads, one call at a time unless
    /// `num_parallel_calls` asks for more (which pays off only where it spends its time in
    /// NumPy or I/O that releases the GIL); an exception is an error of the elements of that
    /// call, with the traceback in its message.
    #[pyo3(signature = (f, output = None, keep = true, num_parallel_calls = None, deterministic = None, batched = false))]
    fn map(
        &self,
        f: &Bound<'_, PyAny>,
        output: Option<&Bound<'_, PyDict>>,
        keep: bool,
        num_parallel_calls: Option<i64>,
        deterministic: Option<bool>,
        batched: bool,
    ) -> PyResult<Dataset> {
        let parallel = parallel(num_parallel_calls, deterministic)?;
        if let Ok(fields) = f.cast::<PyDict>() {
            let mut exprs = Vec::with_capacity(fields.len());
            for (name, expr) in fields.iter() {
                exprs.push((name.extract::<String>()?, crate::expr::expr_of(&expr)?));
            }
            let f = match keep {
                true => MapFunction::with_fields(exprs),
                false => MapFunction::select(exprs),
            };
            return ok(self.0.map_with(f, parallel));
        }
        if !f.is_callable() {
            return Err(PyTypeError::new_err("map takes a dict of expressions or a function"));
        }
        let output = output.ok_or_else(|| PyValueError::new_err("a Python function's map needs its output spec"))?;
        let spec = spec_of(output)?;
        let (registered, name) = function_name(f);
        let func: Py<PyAny> = f.clone().unbind();
        let out = spec.clone();
        let operator = format!("map(python '{name}')");
        let f = match batched {
            true => MapFunction::batch(Some(&registered), spec, move |chunk| {
                Python::attach(|py| {
                    let call = || -> PyResult<RecordBatch> {
                        let result = func.call1(py, (numpy_dict(py, chunk)?,))?;
                        chunk_of(result.bind(py), &out, Some(chunk.num_rows()))
                    };
                    call().map_err(|e| flumen::Error::Udf { operator: operator.clone(), message: traceback(py, &e) })
                })
            }),
            false => {
                let input = self.0.element_spec().clone();
                MapFunction::element(Some(&registered), spec, move |row| {
                    Python::attach(|py| {
                        let call = || -> PyResult<RecordBatch> {
                            let asarray = py.import("numpy")?.getattr("asarray")?;
                            let result = func.call1(py, (element_dict(py, row, &input, &asarray)?,))?;
                            one_element(result.bind(py), &out)
                        };
                        call()
                            .map_err(|e| flumen::Error::Udf { operator: operator.clone(), message: traceback(py, &e) })
                    })
                })
            }
        };
        // Its calls hold the GIL: the optimizer adds no threads around it.
        ok(self.0.map_with(f.exclusive(), parallel))
    }

    /// The elements for which `predicate` is true: an expression, or a Python function of
    /// one element (a dict of its fields) returning a bool, as in tf.data; with
    /// `batched=True`, of a chunk's columns (dicts of NumPy arrays) returning one bool per
    /// element.
    #[pyo3(signature = (predicate, num_parallel_calls = None, deterministic = None, batched = false))]
    fn filter(
        &self,
        predicate: &Bound<'_, PyAny>,
        num_parallel_calls: Option<i64>,
        deterministic: Option<bool>,
        batched: bool,
    ) -> PyResult<Dataset> {
        let parallel = parallel(num_parallel_calls, deterministic)?;
        if let Ok(e) = predicate.cast::<Expr>() {
            return ok(self.0.filter_with(e.get().0.clone(), parallel));
        }
        if !predicate.is_callable() {
            return Err(PyTypeError::new_err("filter takes an expression or a function"));
        }
        let f = match batched {
            true => chunk_predicate(predicate),
            false => element_predicate(predicate, "filter", self.0.element_spec()),
        };
        ok(self.0.filter_with(f.exclusive(), parallel))
    }

    /// The elements up to (not including) the first for which `predicate` is false: an
    /// expression, or a Python function of one element returning a bool.
    fn take_while(&self, predicate: &Bound<'_, PyAny>) -> PyResult<Dataset> {
        if let Ok(e) = predicate.cast::<Expr>() {
            return ok(self.0.take_while(e.get().0.clone()));
        }
        if !predicate.is_callable() {
            return Err(PyTypeError::new_err("take_while takes an expression or a function"));
        }
        ok(self.0.take_while(element_predicate(predicate, "take_while", self.0.element_spec()).exclusive()))
    }

    /// Elements grouped by the int64 expression `key_func`: each group is batched, a batch
    /// emitted every `window_size` elements of that key and the rest at the end. tf.data's
    /// `group_by_window(key_func, reduce_func, window_size)` with the reducer that batches a
    /// window (`lambda key, window: window.batch(window_size)`, the default); another
    /// reducer, or `window_size_func`, is refused, saying what flumen runs.
    #[pyo3(signature = (key_func, reduce_func = None, window_size = None, window_size_func = None))]
    fn group_by_window(
        &self,
        key_func: &Bound<'_, PyAny>,
        reduce_func: Option<&Bound<'_, PyAny>>,
        window_size: Option<u64>,
        window_size_func: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Dataset> {
        let key = key_func.cast::<Expr>().map_err(|_| {
            PyTypeError::new_err(
                "group_by_window's key_func is an int64 expression (flumen.col(...) % 2), not a function",
            )
        })?;
        if window_size_func.is_some_and(|f| !f.is_none()) {
            return Err(PyValueError::new_err("window_size_func is not supported: give window_size"));
        }
        let window_size = window_size.ok_or_else(|| PyValueError::new_err("group_by_window needs window_size"))?;
        if let Some(reduce) = reduce_func.filter(|f| !f.is_none()) {
            let batched = reduce.call1((py_none(reduce.py()), WindowProbe))?;
            let batch_size = batched.cast::<BatchedWindow>().map(|b| b.get().batch_size);
            if batch_size.ok() != Some(window_size) {
                return Err(PyValueError::new_err(format!(
                    "group_by_window runs the reducer that batches each window whole (lambda key, window: \
                     window.batch({window_size})); this reduce_func is not that one"
                )));
            }
        }
        ok(self.0.group_by_window(key.get().0.clone(), window_size))
    }

    /// A running state, as tf.data's `scan`. With a function, tf.data's signature:
    /// `scan_func(state, element)` returns `(new_state, output)`, where `initial_state` is a
    /// scalar (bool, int, float or str) or a dict of them, `state` and `new_state` have its
    /// form, the element is a dict of its fields and `output` a dict of the fields `output`
    /// declares (a single declared field may be returned bare). With expressions,
    /// `initial_state` is a dict of literals, `scan_func` a dict giving each state field's
    /// next value (`{"name": expr}` over the state and the element's fields), and `output`
    /// a dict of the fields each element becomes, computed from the new state.
    #[pyo3(signature = (initial_state, scan_func, output = None))]
    fn scan(
        &self,
        initial_state: &Bound<'_, PyAny>,
        scan_func: &Bound<'_, PyAny>,
        output: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Dataset> {
        if let Ok(update) = scan_func.cast::<PyDict>() {
            let initial = initial_state.cast::<PyDict>().map_err(|_| {
                PyTypeError::new_err("a scan of expressions takes its initial state as a dict of literals")
            })?;
            let output =
                output.ok_or_else(|| PyTypeError::new_err("a scan of expressions needs its output expressions"))?;
            return ok(self.0.scan(&named_exprs(initial)?, &named_exprs(update)?, &named_exprs(output)?));
        }
        if !scan_func.is_callable() {
            return Err(PyTypeError::new_err("scan takes a function (state, element) -> (state, output)"));
        }
        let output = output.ok_or_else(|| PyValueError::new_err("a Python function's scan needs its output spec"))?;
        ok(self.0.scan_with(&scan_state(initial_state)?.0, scan_function(scan_func, initial_state, output, self)?))
    }

    /// Folds every element into a state and returns the final state (tf.data's `reduce`).
    /// With a function, tf.data's signature: `reduce_func(state, element)` returns the new
    /// state, starting from `initial_state` (any Python value); the elements are dicts of
    /// their fields, as iteration gives them. With expressions (`initial_state` a dict of
    /// literals, `reduce_func` a dict of update expressions, as in `scan`), the final state
    /// is a dict of NumPy arrays in the fields' shapes.
    fn reduce<'py>(
        slf: &Bound<'py, Self>,
        initial_state: &Bound<'py, PyAny>,
        reduce_func: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let Ok(update) = reduce_func.cast::<PyDict>() else {
            if !reduce_func.is_callable() {
                return Err(PyTypeError::new_err("reduce takes a function (state, element) -> state"));
            }
            let mut state = initial_state.clone();
            for element in slf.as_any().try_iter()? {
                state = reduce_func.call1((state, element?))?;
            }
            return Ok(state);
        };
        let initial = initial_state.cast::<PyDict>().map_err(|_| {
            PyTypeError::new_err("a reduce of expressions takes its initial state as a dict of literals")
        })?;
        let this = slf.get();
        let (initial, update) = (named_exprs(initial)?, named_exprs(update)?);
        let state = py.detach(|| this.0.reduce(&initial, &update)).map_err(to_py)?;
        let spec = flumen::ElementSpec::from_arrow_schema(&state.schema()).map_err(to_py)?;
        Ok(element_dict(py, &state, &spec, &py.import("numpy")?.getattr("asarray")?)?.into_any())
    }

    /// Groups of `batch_size` consecutive elements, each one element whose fields gain a
    /// leading dimension. The elements of a batch must share their shapes, as in tf.data
    /// ("Cannot batch tensors with different shapes"; `ragged_batch` or `padded_batch` batch
    /// others).
    #[pyo3(signature = (batch_size, drop_remainder = false, num_parallel_calls = None, deterministic = None))]
    fn batch(
        &self,
        batch_size: u64,
        drop_remainder: bool,
        num_parallel_calls: Option<i64>,
        deterministic: Option<bool>,
    ) -> PyResult<Dataset> {
        ok(self.0.batch_parallel(batch_size, drop_remainder, parallel(num_parallel_calls, deterministic)?))
    }

    /// Groups of `batch_size` consecutive elements whose fields of unknown dimensions may
    /// differ in shape: those fields become ragged (tf.data's `ragged_batch`).
    #[pyo3(signature = (batch_size, drop_remainder = false))]
    fn ragged_batch(&self, batch_size: u64, drop_remainder: bool) -> PyResult<Dataset> {
        ok(self.0.ragged_batch(batch_size, drop_remainder))
    }

    /// The elements of each batch, one by one.
    fn unbatch(&self) -> PyResult<Dataset> {
        ok(self.0.unbatch())
    }

    /// The same elements in batches of `batch_size`, or with a list (tf.data's per-replica
    /// form) in batches of its sizes in turn, cycling; a size of 0 is an empty batch.
    #[pyo3(signature = (batch_size, drop_remainder = false))]
    fn rebatch(&self, batch_size: &Bound<'_, PyAny>, drop_remainder: bool) -> PyResult<Dataset> {
        match batch_size.extract::<u64>() {
            Ok(size) => ok(self.0.rebatch(size, drop_remainder)),
            Err(_) => ok(self.0.rebatch_sizes(batch_size.extract::<Vec<u64>>()?, drop_remainder)),
        }
    }

    /// Batches whose variable-size fields are padded: to `padded_shapes[field]` (-1: the
    /// batch's longest) or the longest, with `padding_values[field]` or zero.
    #[pyo3(signature = (batch_size, padded_shapes = None, padding_values = None, drop_remainder = false))]
    fn padded_batch(
        &self,
        batch_size: u64,
        padded_shapes: Option<BTreeMap<String, Vec<Option<i64>>>>,
        padding_values: Option<&Bound<'_, PyDict>>,
        drop_remainder: bool,
    ) -> PyResult<Dataset> {
        // `None` (tf.data's unknown dimension) or -1: the batch's longest.
        let padded_shapes = padded_shapes
            .unwrap_or_default()
            .into_iter()
            .map(|(name, shape)| (name, shape.into_iter().map(|d| d.unwrap_or(-1)).collect()))
            .collect();
        let options = PaddedBatchOptions { padded_shapes, padding_values: literals(padding_values)?, drop_remainder };
        ok(self.0.padded_batch(batch_size, options))
    }

    /// Windows of `size` elements every `shift` (default `size`), taking every `stride`-th.
    #[pyo3(signature = (size, shift = None, stride = 1, drop_remainder = false))]
    fn window(&self, size: u64, shift: Option<u64>, stride: u64, drop_remainder: bool) -> PyResult<Dataset> {
        ok(self.0.window(size, shift.unwrap_or(size), stride, drop_remainder))
    }

    /// Elements grouped by length (`element_length_func`, an int64 expression such as
    /// `flumen.length(col("tokens"))`) into buckets with the given `bucket_boundaries`, each
    /// batched by its `bucket_batch_sizes` entry and padded: tf.data's signature and defaults.
    /// `padded_shapes` and `no_padding=True` are refused, saying what flumen pads to.
    #[pyo3(signature = (element_length_func, bucket_boundaries, bucket_batch_sizes, padded_shapes = None, padding_values = None, pad_to_bucket_boundary = false, no_padding = false, drop_remainder = false))]
    #[allow(clippy::too_many_arguments)]
    fn bucket_by_sequence_length(
        &self,
        element_length_func: &Bound<'_, PyAny>,
        bucket_boundaries: Vec<i64>,
        bucket_batch_sizes: Vec<u64>,
        padded_shapes: Option<&Bound<'_, PyAny>>,
        padding_values: Option<&Bound<'_, PyDict>>,
        pad_to_bucket_boundary: bool,
        no_padding: bool,
        drop_remainder: bool,
    ) -> PyResult<Dataset> {
        let length = element_length_func.cast::<Expr>().map_err(|_| {
            PyTypeError::new_err(
                "element_length_func is an int64 expression (flumen.length(col(\"tokens\"))), not a function",
            )
        })?;
        if padded_shapes.is_some_and(|p| !p.is_none()) || no_padding {
            return Err(PyValueError::new_err(
                "padded_shapes and no_padding are not supported: each batch pads to its longest element, or to \
                 its bucket's boundary with pad_to_bucket_boundary=True",
            ));
        }
        let options =
            BucketOptions { padding_values: literals(padding_values)?, pad_to_bucket_boundary, drop_remainder };
        ok(self.0.bucket_by_sequence_length(length.get().0.clone(), bucket_boundaries, bucket_batch_sizes, options))
    }

    /// The files named by field `field` of each element, read as `format` (`"csv"`,
    /// `"parquet"`, `"ipc"`, `"text"`, `"tfrecord"`, `"tfrecord-gzip"`, `"tfrecord-zlib"`,
    /// `"avro"`),
    /// `cycle_length` at once, `block_length` elements from each in turn.
    #[pyo3(signature = (field, format, cycle_length = None, block_length = 1, num_parallel_calls = None, deterministic = None))]
    fn interleave_files(
        &self,
        field: &str,
        format: &str,
        cycle_length: Option<i64>,
        block_length: u64,
        num_parallel_calls: Option<i64>,
        deterministic: Option<bool>,
    ) -> PyResult<Dataset> {
        let read = DatasetFunction::read_file(field, file_read(format)?);
        let parallel = parallel(num_parallel_calls, deterministic)?;
        ok(self.0.interleave_with(read, tunable(cycle_length)?, block_length, parallel))
    }

    /// The datasets `f(element)` returns, one after another: `f` takes one element (a dict
    /// of its fields as NumPy arrays, as iteration gives them) and returns a `Dataset` whose elements `output` declares
    /// (`{"name": dtype}` or `{"name": (dtype, shape)}`). tf.data's `flat_map`.
    fn flat_map(&self, f: &Bound<'_, PyAny>, output: &Bound<'_, PyDict>) -> PyResult<Dataset> {
        ok(self.0.flat_map(dataset_function(f, output, self.0.element_spec())?))
    }

    /// The datasets `f(element)` returns (as `flat_map`), `cycle_length` open at once and
    /// `block_length` elements taken from each in turn; opened in parallel with
    /// `num_parallel_calls`. tf.data's `interleave`.
    #[pyo3(signature = (f, output, cycle_length = None, block_length = 1, num_parallel_calls = None, deterministic = None))]
    fn interleave(
        &self,
        f: &Bound<'_, PyAny>,
        output: &Bound<'_, PyDict>,
        cycle_length: Option<i64>,
        block_length: u64,
        num_parallel_calls: Option<i64>,
        deterministic: Option<bool>,
    ) -> PyResult<Dataset> {
        let f = dataset_function(f, output, self.0.element_spec())?;
        let parallel = parallel(num_parallel_calls, deterministic)?;
        ok(self.0.interleave_with(f, tunable(cycle_length)?, block_length, parallel))
    }

    /// `tf.io.parse_example` of the serialized `tf.train.Example`s in bytes field `field`:
    /// one field per feature of `features`, `{"name": (dtype, shape)}` for a required
    /// fixed-length feature, `{"name": (dtype, None)}` for a variable-length one (dtype
    /// `int64`, `float32` or `bytes`), or `{"name": flumen.SparseFeature(...)}` for a
    /// sparse one (iterated as a `flumen.SparseTensor`). The plan function the optimizer
    /// vectorizes and fuses.
    #[pyo3(signature = (field, features, num_parallel_calls = None, deterministic = None))]
    fn parse_example(
        &self,
        field: &str,
        features: &Bound<'_, PyDict>,
        num_parallel_calls: Option<i64>,
        deterministic: Option<bool>,
    ) -> PyResult<Dataset> {
        let mut specs = Vec::with_capacity(features.len());
        for (name, value) in features.iter() {
            let name: String = name.extract()?;
            if value.hasattr("value_key")? {
                specs.push(sparse_feature(name, &value)?);
                continue;
            }
            let (dtype, shape): (String, Option<Vec<usize>>) = value.extract()?;
            let dtype = flumen::DType::from_name(&dtype)
                .ok_or_else(|| PyValueError::new_err(format!("unknown dtype {dtype:?}")))?;
            specs.push(match shape {
                Some(shape) => FeatureSpec::fixed(name, dtype, shape),
                None => FeatureSpec::var_len(name, dtype),
            });
        }
        let f = MapFunction::parse_example(field, specs).map_err(to_py)?;
        ok(self.0.map_with(f, parallel(num_parallel_calls, deterministic)?))
    }

    /// Each element drawn from one of `datasets` at random by `weights` (equal by default),
    /// from `seed`; with `stop_on_empty_dataset` the result ends when the drawn dataset has
    /// run out, otherwise it goes on with the others (tf.data's `sample_from_datasets`).
    #[staticmethod]
    #[pyo3(signature = (datasets, weights = None, seed = None, stop_on_empty_dataset = false))]
    fn sample_from_datasets(
        datasets: Vec<PyRef<'_, Dataset>>,
        weights: Option<Vec<f64>>,
        seed: Option<u64>,
        stop_on_empty_dataset: bool,
    ) -> PyResult<Dataset> {
        let weights = weights.unwrap_or_else(|| vec![1.0 / datasets.len().max(1) as f64; datasets.len()]);
        let refs: Vec<&flumen::Dataset> = datasets.iter().map(|d| &d.0).collect();
        ok(flumen::Dataset::sample_from_datasets(&refs, weights, seed, stop_on_empty_dataset))
    }

    /// tf.data's `choose_from_datasets`: for each element `i` of `choice_dataset` (one int64
    /// field), the next element of `datasets[i]`. With `stop_on_empty_dataset` (the default)
    /// the result ends when a chosen dataset has ended; otherwise that choice is skipped. A
    /// choice outside `datasets` is a `DataError` in its place.
    #[staticmethod]
    #[pyo3(signature = (datasets, choice_dataset, stop_on_empty_dataset = true))]
    fn choose_from_datasets(
        datasets: Vec<PyRef<'_, Dataset>>,
        choice_dataset: &Dataset,
        stop_on_empty_dataset: bool,
    ) -> PyResult<Dataset> {
        let refs: Vec<&flumen::Dataset> = datasets.iter().map(|d| &d.0).collect();
        ok(flumen::Dataset::choose_from_datasets(&refs, &choice_dataset.0, stop_on_empty_dataset))
    }

    /// Elements of several datasets side by side: their fields together (names must
    /// differ), as many as the shortest has.
    #[staticmethod]
    fn zip(datasets: Vec<PyRef<'_, Dataset>>) -> PyResult<Dataset> {
        let inner: Vec<&flumen::Dataset> = datasets.iter().map(|d| &d.0).collect();
        ok(flumen::Dataset::zip(&inner))
    }

    /// tf.data's buffered shuffle.
    #[pyo3(signature = (buffer_size, seed = None, reshuffle_each_iteration = true))]
    fn shuffle(&self, buffer_size: u64, seed: Option<u64>, reshuffle_each_iteration: bool) -> PyResult<Dataset> {
        ok(self.0.shuffle_with(buffer_size, seed, reshuffle_each_iteration))
    }

    /// The elements `count` times (forever when `None` or negative, as tf.data's -1).
    #[pyo3(signature = (count = None))]
    fn repeat(&self, count: Option<i64>) -> PyResult<Dataset> {
        ok(self.0.repeat(count.and_then(|n| u64::try_from(n).ok())))
    }

    /// The first `count` elements (all when -1).
    fn take(&self, count: i64) -> PyResult<Dataset> {
        ok(self.0.take(count))
    }

    /// All but the first `count` elements.
    fn skip(&self, count: i64) -> PyResult<Dataset> {
        ok(self.0.skip(count))
    }

    /// Every `num_shards`-th element from the `index`-th.
    fn shard(&self, num_shards: u64, index: u64) -> PyResult<Dataset> {
        ok(self.0.shard(num_shards, index))
    }

    /// The part of this dataset that worker `index` of `num_workers` runs, and where the
    /// shard went (`"sources"`, or `"output (...)"` naming the operator that needs every
    /// element): the parts of all workers hold every element exactly once. `seed` seeds what
    /// the pipeline leaves unseeded and must be the same for every worker.
    #[pyo3(signature = (num_workers, index, seed = 0))]
    fn split_for_worker(&self, num_workers: u64, index: u64, seed: u64) -> PyResult<(Dataset, String)> {
        let split = self.0.split_for_worker(num_workers, index, seed).map_err(to_py)?;
        Ok((Dataset(split.dataset), split.policy.to_string()))
    }

    /// How many workers the sources split among by whole units (files, a range's values)
    /// before `split_for_worker` shards records instead; `None` when unbounded or when the
    /// output is sharded anyway.
    #[getter]
    fn split_units(&self) -> Option<u64> {
        self.0.split_units()
    }

    /// Each element with its index from `start`.
    #[pyo3(signature = (start = 0))]
    fn enumerate(&self, start: i64) -> PyResult<Dataset> {
        ok(self.0.enumerate(start))
    }

    /// tf.data's `unique`: the elements not seen before, in order, for elements of scalar
    /// integer, string or bool fields. It remembers every distinct element.
    fn unique(&self) -> PyResult<Dataset> {
        ok(self.0.unique())
    }

    /// This dataset's elements, then `other`'s.
    fn concatenate(&self, other: &Dataset) -> PyResult<Dataset> {
        ok(self.0.concatenate(&other.0))
    }

    /// Elements computed ahead of the consumer, up to `buffer_size` (or `AUTOTUNE`).
    #[pyo3(signature = (buffer_size = AUTOTUNE))]
    fn prefetch(&self, buffer_size: i64) -> PyResult<Dataset> {
        ok(self.0.prefetch(tunable(Some(buffer_size))?))
    }

    /// The elements of the first complete pass kept for later passes: in memory, or in the
    /// file `filename` where given, which later runs of the same pipeline (in any process)
    /// read instead of computing them. The file appears only when a pass completes.
    #[pyo3(signature = (filename = None))]
    fn cache(&self, filename: Option<&str>) -> PyResult<Dataset> {
        match filename {
            None | Some("") => ok(self.0.cache()),
            Some(path) => ok(self.0.cache_to(path)),
        }
    }

    /// Persists the elements under directory `path` and reads them back in later runs of
    /// the same pipeline (tf.data's `snapshot`): `compression` `"lz4"` (default), `"zstd"`
    /// or `"none"`; `shards` files written in parallel; `shuffle_on_read_seed` reads shards
    /// and chunks in a seeded random order; `name` keys the snapshot by a name instead of
    /// the pipeline's fingerprint.
    #[pyo3(signature = (path, compression = "lz4", shards = None, shuffle_on_read_seed = None, name = None))]
    fn snapshot(
        &self,
        path: &str,
        compression: &str,
        shards: Option<u64>,
        shuffle_on_read_seed: Option<u64>,
        name: Option<&str>,
    ) -> PyResult<Dataset> {
        let compression = match compression {
            "lz4" => Compression::Lz4,
            "zstd" => Compression::Zstd,
            "none" | "" => Compression::None,
            other => {
                return Err(PyValueError::new_err(format!("unknown snapshot compression {other:?}: lz4, zstd or none")))
            }
        };
        let mut options = SnapshotOptions::default().with_compression(compression);
        if let Some(shards) = shards {
            options = options.with_shards(shards);
        }
        if let Some(seed) = shuffle_on_read_seed {
            options = options.with_shuffle_on_read(seed);
        }
        if let Some(name) = name {
            options = options.with_snapshot_fingerprint(name);
        }
        ok(self.0.snapshot(path, options))
    }

    /// The elements whose computation did not fail.
    fn ignore_errors(&self) -> PyResult<Dataset> {
        ok(self.0.ignore_errors())
    }

    /// The same dataset run with `options`.
    fn with_options(&self, options: &Options) -> Dataset {
        Dataset(self.0.with_options(options.0.clone()))
    }

    /// The fields of an element: `(name, dtype, shape)`, a dimension of `None` varying.
    #[getter]
    fn element_spec(&self) -> Vec<(String, String, Vec<Option<u64>>)> {
        let dims = |shape: &[i64]| shape.iter().map(|&d| u64::try_from(d).ok()).collect();
        self.0
            .element_spec()
            .fields
            .iter()
            .map(|f| (f.name.clone(), f.dtype.name().to_string(), dims(&f.shape)))
            .collect()
    }

    /// The files the pipeline's file sources read (file lists, splits and record files), in
    /// plan order: what planners size a read by.
    #[getter]
    fn source_files(&self) -> Vec<String> {
        use flumen::crates::ir::{Op, SourceDesc};
        let mut files = Vec::new();
        for node in self.0.plan().nodes_topological() {
            if let Op::Source(
                SourceDesc::ListFiles { files: listed, .. }
                | SourceDesc::Splits { files: listed, .. }
                | SourceDesc::Files { files: listed, .. },
            ) = node.op()
            {
                files.extend(listed.iter().cloned());
            }
        }
        files
    }

    /// The number of elements: -1 when infinite (tf.data's `INFINITE_CARDINALITY`), `None`
    /// when unknown.
    #[getter]
    fn cardinality(&self) -> Option<i64> {
        self.0.cardinality().map(|n| i64::try_from(n).unwrap_or(-1))
    }

    /// The typed plan, as optimized.
    fn explain(&self) -> String {
        self.0.explain()
    }

    /// One full pass, then each operator's counters and what the tuner chose.
    fn explain_analyze(&self, py: Python<'_>) -> PyResult<String> {
        py.detach(|| self.0.explain_analyze()).map_err(to_py)
    }

    /// The dataset as JSON (`Dataset.deserialize` reads it back).
    fn serialize(&self) -> PyResult<String> {
        self.0.serialize().map_err(to_py)
    }

    /// The Arrow PyCapsule stream interface: the dataset's elements as a stream of record
    /// batches, one per chunk (each row an element; a batched dataset's batches as rows of
    /// list fields), which `pyarrow.table(ds)`, `pyarrow.RecordBatchReader.from_stream(ds)`,
    /// polars and duckdb read without copies. Each chunk is pulled as the consumer asks.
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        self.arrow_stream(None).__arrow_c_stream__(py, requested_schema)
    }

    /// The elements of iteration number `iteration` (as `iter`'s; the next iteration when
    /// `None`) as an Arrow stream of record batches, one per chunk, for
    /// `pyarrow.RecordBatchReader.from_stream`: `__arrow_c_stream__` with an iteration.
    #[pyo3(signature = (iteration = None))]
    fn arrow_stream(&self, iteration: Option<u64>) -> ArrowStream {
        let chunks = match iteration {
            Some(iteration) => self.0.iter_chunks_at(iteration),
            None => self.0.iter_chunks(),
        };
        let stream = ChunkStream { chunks, schema: self.0.element_spec().arrow_schema() };
        ArrowStream(std::sync::Mutex::new(Some(stream)))
    }

    /// Pickling (e.g. into a `DataLoader` worker process) goes through `serialize`, so a
    /// plan holding Python functions cannot be pickled; build it in the worker instead.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, (String,))> {
        use flumen::crates::ir::{Op, SourceDesc};
        let python = slf.get().0.plan().nodes_topological().into_iter().find(|node| {
            node.op().closure().is_some() || matches!(node.op(), Op::Source(SourceDesc::Generator { .. }))
        });
        if let Some(node) = python {
            return Err(PyTypeError::new_err(format!(
                "a dataset whose {} runs a Python function cannot be pickled: build it where it runs",
                node.op().name()
            )));
        }
        let json = slf.get().0.serialize().map_err(to_py)?;
        Ok((slf.get_type().getattr("deserialize")?, (json,)))
    }

    /// A stable fingerprint of the pipeline.
    fn fingerprint(&self) -> String {
        self.0.fingerprint()
    }

    /// A new iterator of dicts of NumPy arrays (`as_batches`: of `Batch`es, which pyarrow
    /// and others import without a copy), continuing from `checkpoint` (bytes from
    /// `Iterator.save`) when given. `iteration` makes it iteration number `iteration` of
    /// the dataset (from 0), with that iteration's reshuffles and random draws, in whatever
    /// process: how workers that rebuild a dataset agree on an epoch.
    #[pyo3(signature = (checkpoint = None, as_batches = false, iteration = None))]
    fn iter(
        &self,
        py: Python<'_>,
        checkpoint: Option<&[u8]>,
        as_batches: bool,
        iteration: Option<u64>,
    ) -> PyResult<Iterator> {
        let output = match as_batches {
            true => Output::Batch,
            false => Output::Fields(py.import("numpy")?.getattr("asarray")?.unbind()),
        };
        Ok(Iterator::new(self.start(py, checkpoint, iteration)?, self.0.element_spec(), output))
    }

    /// Dicts of NumPy arrays, as `iter()` (tf.data's name).
    fn as_numpy_iterator(&self, py: Python<'_>) -> PyResult<Iterator> {
        self.iter(py, None, false, None)
    }

    /// pyarrow `RecordBatch`es, imported without a copy (needs pyarrow); `checkpoint` and
    /// `iteration` as for `iter`.
    #[pyo3(signature = (checkpoint = None, iteration = None))]
    fn iter_arrow(&self, py: Python<'_>, checkpoint: Option<&[u8]>, iteration: Option<u64>) -> PyResult<Iterator> {
        let convert = py.import("pyarrow")?.getattr("record_batch")?.unbind();
        Ok(Iterator::new(self.start(py, checkpoint, iteration)?, self.0.element_spec(), Output::Whole(convert)))
    }

    /// Dicts of `torch.Tensor`s made through DLPack without a copy (read-only memory:
    /// do not write them in place), then moved to `device` when given; ragged fields as
    /// `(values, offsets)` tensors, strings and nullable fields as lists. Needs torch.
    #[pyo3(signature = (device = None, checkpoint = None))]
    fn iter_torch(
        &self,
        py: Python<'_>,
        device: Option<Bound<'_, PyAny>>,
        checkpoint: Option<&[u8]>,
    ) -> PyResult<Iterator> {
        self.iter_framework(py, "torch_converter", device, checkpoint)
    }

    /// Dicts of `jax.Array`s made through DLPack (JAX copies where its CPU backend needs
    /// other alignment), placed on `device` when given; otherwise as `iter_torch`. Needs jax.
    #[pyo3(signature = (device = None, checkpoint = None))]
    fn iter_jax(
        &self,
        py: Python<'_>,
        device: Option<Bound<'_, PyAny>>,
        checkpoint: Option<&[u8]>,
    ) -> PyResult<Iterator> {
        self.iter_framework(py, "jax_converter", device, checkpoint)
    }

    /// Dicts of NumPy arrays, as `iter()`.
    fn __iter__(&self, py: Python<'_>) -> PyResult<Iterator> {
        self.iter(py, None, false, None)
    }

    fn __repr__(&self) -> String {
        format!("Dataset({})", self.0.element_spec())
    }
}

impl Dataset {
    /// An iterator whose columns pass through the converter `flumen._frameworks.<name>`
    /// makes for `device`.
    fn iter_framework(
        &self,
        py: Python<'_>,
        converter: &str,
        device: Option<Bound<'_, PyAny>>,
        checkpoint: Option<&[u8]>,
    ) -> PyResult<Iterator> {
        let convert = py.import("flumen._frameworks")?.getattr(converter)?.call1((device,))?;
        Ok(Iterator::new(self.start(py, checkpoint, None)?, self.0.element_spec(), Output::Fields(convert.unbind())))
    }

    /// A new iterator, continuing from `checkpoint` when given.
    fn start(&self, py: Python<'_>, checkpoint: Option<&[u8]>, iteration: Option<u64>) -> PyResult<DatasetIterator> {
        match (checkpoint, iteration) {
            (Some(_), Some(_)) => Err(PyValueError::new_err("give a checkpoint or an iteration, not both")),
            (None, None) => Ok(self.0.iter()),
            (None, Some(iteration)) => Ok(self.0.iter_at(iteration)),
            (Some(bytes), None) => {
                let checkpoint = Checkpoint::from_bytes(bytes).map_err(to_py)?;
                py.detach(|| self.0.iter_from(&checkpoint)).map_err(to_py)
            }
        }
    }
}
