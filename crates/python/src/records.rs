//! Writing what flumen reads, from Python: TFRecord files and `tf.train.Example` records
//! (for tests, sample data, and users without TensorFlow).

use flumen::{serialize_example as serialize, FeatureValues, TfRecordWriter};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::error::to_py;

/// Writes `records` (bytes) to the TFRecord file `path` (`compression`: `""`, `"GZIP"` or
/// `"ZLIB"`).
#[pyfunction]
#[pyo3(signature = (path, records, compression = ""))]
pub fn write_tfrecord(path: &str, records: Vec<Vec<u8>>, compression: &str) -> PyResult<()> {
    let compression = crate::dataset::compression_of(compression)?;
    let mut writer = TfRecordWriter::create(path, compression).map_err(to_py)?;
    for record in &records {
        writer.write(record).map_err(to_py)?;
    }
    writer.finish().map_err(to_py)
}

/// One feature's values, owned.
enum Values {
    Int64(Vec<i64>),
    Float32(Vec<f32>),
    Bytes(Vec<Vec<u8>>),
}

/// A serialized `tf.train.Example` of `features`: `{"name": values}`, a list of ints
/// (`Int64List`), of floats (`FloatList`) or of bytes or str (`BytesList`).
#[pyfunction]
pub fn serialize_example<'py>(py: Python<'py>, features: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyBytes>> {
    let mut owned = Vec::with_capacity(features.len());
    for (name, value) in features.iter() {
        let name: String = name.extract()?;
        let items: Vec<Bound<'py, PyAny>> = value.try_iter()?.collect::<PyResult<_>>()?;
        let values = match items.first() {
            None => Values::Int64(vec![]),
            Some(first) if first.extract::<i64>().is_ok() && !first.is_instance_of::<pyo3::types::PyFloat>() => {
                Values::Int64(items.iter().map(|v| v.extract()).collect::<PyResult<_>>()?)
            }
            Some(first) if first.extract::<f64>().is_ok() => {
                Values::Float32(items.iter().map(|v| v.extract::<f64>().map(|f| f as f32)).collect::<PyResult<_>>()?)
            }
            Some(first) if first.extract::<Vec<u8>>().is_ok() || first.extract::<String>().is_ok() => Values::Bytes(
                items
                    .iter()
                    .map(|v| v.extract::<String>().map(String::into_bytes).or_else(|_| v.extract::<Vec<u8>>()))
                    .collect::<PyResult<_>>()?,
            ),
            Some(first) => {
                return Err(PyTypeError::new_err(format!(
                    "feature {name:?}: values of {} are not ints, floats or bytes",
                    first.get_type().name()?
                )))
            }
        };
        owned.push((name, values));
    }
    let slices: Vec<Vec<&[u8]>> = owned
        .iter()
        .map(|(_, v)| match v {
            Values::Bytes(b) => b.iter().map(Vec::as_slice).collect(),
            _ => vec![],
        })
        .collect();
    let borrowed: Vec<(&str, FeatureValues<'_>)> = owned
        .iter()
        .zip(&slices)
        .map(|((name, v), bytes)| {
            let values = match v {
                Values::Int64(i) => FeatureValues::Int64(i),
                Values::Float32(f) => FeatureValues::Float32(f),
                Values::Bytes(_) => FeatureValues::Bytes(bytes),
            };
            (name.as_str(), values)
        })
        .collect();
    Ok(PyBytes::new(py, &serialize(&borrowed)))
}
