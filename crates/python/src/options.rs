//! `flumen.Options`: how a dataset runs, read into the facade's [`flumen::Options`].

use pyo3::prelude::*;

/// How a dataset runs (tf.data's `Options`).
#[pyclass(module = "flumen", frozen)]
pub struct Options(pub flumen::Options);

#[pymethods]
impl Options {
    /// Options, each left at its default when `None`: `threads` (the pool's size),
    /// `ram_budget` (bytes), `autotune`, `deterministic`, `optimize`, `chunk_rows`.
    #[new]
    #[pyo3(signature = (threads = None, ram_budget = None, autotune = None, deterministic = None, optimize = None, chunk_rows = None))]
    fn new(
        threads: Option<usize>,
        ram_budget: Option<u64>,
        autotune: Option<bool>,
        deterministic: Option<bool>,
        optimize: Option<bool>,
        chunk_rows: Option<usize>,
    ) -> Options {
        let mut o = flumen::Options::default();
        if let Some(t) = threads {
            o = o.with_threads(t);
        }
        if let Some(b) = ram_budget {
            o = o.with_ram_budget(b);
        }
        if let Some(a) = autotune {
            o = o.with_autotune(a);
        }
        if let Some(d) = deterministic {
            o = o.with_deterministic(d);
        }
        if optimize == Some(false) {
            o = o.without_optimizations();
        }
        if let Some(c) = chunk_rows {
            o = o.with_chunk_rows(c);
        }
        Options(o)
    }
}
