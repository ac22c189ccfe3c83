//! Iterating a dataset from Python: each `next()` runs the pipeline with the GIL released
//! (and stops on Ctrl-C), hands the chunk over as a `Batch`, a dict of NumPy arrays or
//! framework tensors, or a pyarrow batch, and the iterator saves and restores checkpoints as
//! bytes.

use std::sync::Mutex;

use flumen::{CancelHandle, DatasetIterator, SaveMode};
use pyo3::exceptions::{PyStopIteration, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::batch::{element_dict, Batch};
use crate::error::to_py;
use crate::interrupt;

/// What each chunk becomes in Python.
pub enum Output {
    /// A `Batch`.
    Batch,
    /// A dict of fields, each viewable column passed through the callable (`numpy.asarray`,
    /// `torch.from_dlpack`, ...).
    Fields(Py<PyAny>),
    /// The `Batch` passed through the callable (`pyarrow.record_batch`).
    Whole(Py<PyAny>),
}

/// An iterator over a dataset's elements, each as a dict of NumPy arrays (views of the Arrow
/// buffers, read-only) or of framework tensors in the element's shapes, or as the chunk that
/// holds it: a pyarrow `RecordBatch` or a `Batch` (one row, or the `b` rows of a batch).
#[pyclass(module = "flumen", frozen)]
pub struct Iterator {
    /// `None` once dropped.
    inner: Mutex<Option<DatasetIterator>>,
    output: Output,
    /// The element spec: the shapes `Output::Fields` gives.
    element: flumen::ElementSpec,
    /// Taken at the start, so that `cancel` need not wait for a `next()` in progress.
    cancel: CancelHandle,
}

impl Iterator {
    /// Iterates `it`, whose elements have the spec `element`, giving each as `output` says.
    pub fn new(it: DatasetIterator, element: &flumen::ElementSpec, output: Output) -> Self {
        let cancel = it.cancel_handle();
        Iterator { inner: Mutex::new(Some(it)), output, element: element.clone(), cancel }
    }
}

#[pymethods]
impl Iterator {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let watch = interrupt::watch(&self.cancel);
        // The pipeline runs outside the GIL: other Python threads go on meanwhile.
        let next = py.detach(|| self.inner.lock().expect("flumen iterator").as_mut().and_then(|it| it.next()));
        if let Some(watch) = watch {
            drop(watch);
            // A SIGINT that came meanwhile runs Python's handler now, which raises
            // `KeyboardInterrupt` (the watcher has cancelled the iterator).
            py.check_signals()?;
        }
        let batch = match next {
            Some(Ok(batch)) => Batch(batch),
            Some(Err(e)) => return Err(to_py(e)),
            // A cancelled (or interrupted) iterator keeps saying so rather than ending as
            // if its elements were all delivered.
            None if self.cancel.is_cancelled() => return Err(to_py(flumen::Error::Cancelled)),
            None => return Err(PyStopIteration::new_err(())),
        };
        match &self.output {
            Output::Batch => Ok(Bound::new(py, batch)?.into_any()),
            Output::Fields(convert) => Ok(element_dict(py, &batch.0, &self.element, convert.bind(py))?.into_any()),
            Output::Whole(convert) => convert.bind(py).call1((Bound::new(py, batch)?,)),
        }
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
        let bytes = py.detach(|| match self.inner.lock().expect("flumen iterator").as_ref() {
            Some(it) => it.save(mode).and_then(|c| c.to_bytes()),
            None => Err(flumen::Error::execution("save", "the iterator is closed")),
        });
        Ok(PyBytes::new(py, &bytes.map_err(to_py)?))
    }

    /// Asks the pipeline to stop, from any thread: the `next()` waiting now, and every one
    /// after it, raises `CancelledError`.
    fn cancel(&self) {
        self.cancel.cancel();
    }

    /// `explain analyze` of this iterator so far.
    fn analyze(&self) -> PyResult<String> {
        match self.inner.lock().expect("flumen iterator").as_ref() {
            Some(it) => it.analyze().map_err(to_py),
            None => Err(to_py(flumen::Error::execution("analyze", "the iterator is closed"))),
        }
    }
}

impl Drop for Iterator {
    fn drop(&mut self) {
        // Dropping joins the pipeline's threads, which may be waiting for the GIL to run a
        // Python function: it is released meanwhile.
        let Some(it) = self.inner.get_mut().ok().and_then(Option::take) else { return };
        // Where Python is gone (the interpreter finalizing) the closure is dropped unrun,
        // and the iterator with it.
        let _ = Python::try_attach(|py| py.detach(move || drop(it)));
    }
}
