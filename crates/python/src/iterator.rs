//! Iterating a dataset from Python: each `next()` runs the pipeline with the GIL released,
//! and the iterator saves and restores checkpoints as bytes.

use std::sync::Mutex;

use flumen::{CancelHandle, DatasetIterator, SaveMode};
use pyo3::exceptions::{PyStopIteration, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::batch::{Batch, Column};
use crate::error::to_py;

/// An iterator over a dataset's elements: each one row, or the `b` rows of a batch, as a
/// dict of NumPy arrays (views of the Arrow buffers, read-only) or as a `Batch`.
#[pyclass(module = "flumen", frozen)]
pub struct Iterator {
    inner: Mutex<DatasetIterator>,
    /// Elements as dicts of NumPy arrays rather than `Batch`es.
    numpy: bool,
    /// Taken at the start, so that `cancel` need not wait for a `next()` in progress.
    cancel: CancelHandle,
}

impl Iterator {
    /// Iterates `it`, giving dicts of NumPy arrays when `numpy`, `Batch`es otherwise.
    pub fn new(it: DatasetIterator, numpy: bool) -> Self {
        let cancel = it.cancel_handle();
        Iterator { inner: Mutex::new(it), numpy, cancel }
    }
}

#[pymethods]
impl Iterator {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        // The pipeline runs outside the GIL: other Python threads go on meanwhile.
        let next = py.detach(|| self.inner.lock().expect("flumen iterator").next());
        let batch = match next {
            Some(Ok(batch)) => Batch(batch),
            Some(Err(e)) => return Err(to_py(e)),
            None => return Err(PyStopIteration::new_err(())),
        };
        if !self.numpy {
            return Ok(Bound::new(py, batch)?.into_any());
        }
        let asarray = py.import("numpy")?.getattr("asarray")?;
        let out = PyDict::new(py);
        for item in batch.columns(py)?.iter() {
            let (name, column): (String, Bound<'py, PyAny>) = item.extract()?;
            let value = match column.is_instance_of::<Column>() {
                true => asarray.call1((column,))?,
                false => column,
            };
            out.set_item(name, value)?;
        }
        Ok(out.into_any())
    }

    /// The iterator's position as bytes: `mode` `"full"` stores buffered elements,
    /// `"symbolic"` only positions. `Dataset.iter(checkpoint=...)` continues from it.
    #[pyo3(signature = (mode = "full"))]
    fn save<'py>(&self, py: Python<'py>, mode: &str) -> PyResult<Bound<'py, PyBytes>> {
        let mode = match mode {
            "full" => SaveMode::Full,
            "symbolic" => SaveMode::Symbolic,
            other => return Err(PyValueError::new_err(format!("unknown checkpoint mode {other:?}: full or symbolic"))),
        };
        let bytes = py.detach(|| self.inner.lock().expect("flumen iterator").save(mode).and_then(|c| c.to_bytes()));
        Ok(PyBytes::new(py, &bytes.map_err(to_py)?))
    }

    /// Asks the pipeline to stop, from any thread: the next `next()` (or the one waiting
    /// now) raises `CancelledError`, then the iterator ends.
    fn cancel(&self) {
        self.cancel.cancel();
    }

    /// `explain analyze` of this iterator so far.
    fn analyze(&self) -> PyResult<String> {
        self.inner.lock().expect("flumen iterator").analyze().map_err(to_py)
    }
}
