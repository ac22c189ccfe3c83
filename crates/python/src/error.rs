//! flumen's errors as Python exceptions: `flumen.Error` and one subclass per kind, with
//! the Rust message unchanged.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(flumen, Error, PyException, "Every error flumen raises.");
create_exception!(flumen, PlanError, Error, "A plan that cannot be built: ill-typed, unknown field, bad argument.");
create_exception!(flumen, DataError, Error, "Bad input data: corrupt file, unparsable value, wrong field count.");
create_exception!(flumen, IoError, Error, "An I/O failure on a file.");
create_exception!(flumen, UdfError, Error, "A user function failed while running.");
create_exception!(flumen, CancelledError, Error, "The iterator was asked to stop.");

/// The Python exception for `e`, its message the Rust one.
pub fn to_py(e: flumen::Error) -> PyErr {
    use flumen::Error as E;
    let message = e.to_string();
    match e {
        E::Plan { .. } | E::Expr(_) | E::Serde(_) => PlanError::new_err(message),
        E::Data { .. } => DataError::new_err(message),
        E::Io { .. } => IoError::new_err(message),
        E::Udf { .. } => UdfError::new_err(message),
        E::Cancelled => CancelledError::new_err(message),
        _ => Error::new_err(message),
    }
}

/// Adds the exceptions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("PlanError", py.get_type::<PlanError>())?;
    m.add("DataError", py.get_type::<DataError>())?;
    m.add("IoError", py.get_type::<IoError>())?;
    m.add("UdfError", py.get_type::<UdfError>())?;
    m.add("CancelledError", py.get_type::<CancelledError>())?;
    Ok(())
}
