//! # flumen-python
//!
//! The extension module `flumen._flumen` behind the `flumen` Python package: the facade's
//! `Dataset`, its expressions and its iterators, with batches handed to Python without
//! copies. The pure-Python layer (`python/flumen/`) re-exports these and adds adapters.
//!
//! - [`dataset`]: `Dataset`, its sources and transformations; [`options`]: `Options`.
//! - [`expr`]: expressions built in Python, lowered to the same IR as the Rust builders.
//! - [`iterator`]: iteration outside the GIL, checkpoints; [`interrupt`]: Ctrl-C in `next()`.
//! - [`batch`]: a chunk of elements as the Arrow C data interface and NumPy array views,
//!   [`dlpack`]: its columns as DLPack tensors, [`array_struct`]: as NumPy's C array
//!   interface;
//!   [`convert`]: Python values into Arrow arrays of a declared spec.
//! - [`error`]: flumen's errors as Python exceptions; [`records`]: writing TFRecord files
//!   and `tf.train.Example`s.

use pyo3::prelude::*;

/// The extension's allocator, as the `flumen` binary's (docs/performance-notes.md, "The
/// allocator", has the figures):
/// with glibc's malloc a pass of w2 or w6 spends its time faulting in pages that chunks freed
/// on another thread gave back. The extension is the program here; NumPy and Python keep
/// their own allocators, and Arrow buffers viewed from NumPy are freed by this one, which
/// made them.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod array_struct;
pub mod batch;
pub mod convert;
pub mod dataset;
pub mod dlpack;
pub mod error;
pub mod expr;
pub mod interrupt;
pub mod iterator;
pub mod options;
pub mod records;

/// The extension module.
#[pymodule]
fn _flumen(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<dataset::Dataset>()?;
    m.add_class::<dataset::ArrowStream>()?;
    m.add_class::<options::Options>()?;
    m.add_class::<dataset::WindowProbe>()?;
    m.add_class::<dataset::BatchedWindow>()?;
    m.add_class::<expr::Expr>()?;
    m.add_class::<iterator::Iterator>()?;
    m.add_class::<batch::Batch>()?;
    m.add_class::<batch::Column>()?;
    m.add_function(wrap_pyfunction!(expr::col, m)?)?;
    m.add_function(wrap_pyfunction!(expr::lit, m)?)?;
    m.add_function(wrap_pyfunction!(expr::func, m)?)?;
    m.add_function(wrap_pyfunction!(expr::when, m)?)?;
    m.add_class::<expr::When>()?;
    m.add_function(wrap_pyfunction!(records::write_tfrecord, m)?)?;
    m.add_function(wrap_pyfunction!(records::serialize_example, m)?)?;
    m.add("AUTOTUNE", dataset::AUTOTUNE)?;
    error::register(m)?;
    Ok(())
}
