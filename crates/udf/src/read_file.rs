//! `read_file(path)`: each element's file, whole, as bytes (tf.io.read_file).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BinaryBuilder};
use arrow::compute::cast;
use arrow::datatypes::DataType;
use flumen_ir::{Error, Result};

/// The contents of the files at `paths` (strings; a null path gives a null).
pub fn read_files(paths: &ArrayRef) -> Result<ArrayRef> {
    let paths = cast(paths, &DataType::Utf8).map_err(|e| Error::Expr(format!("read_file: {e}")))?;
    let paths = paths.as_string::<i32>();
    let mut out = BinaryBuilder::with_capacity(paths.len(), 0);
    for r in 0..paths.len() {
        if paths.is_null(r) {
            out.append_null();
            continue;
        }
        let path = paths.value(r);
        let bytes = std::fs::read(path).map_err(|e| Error::Expr(format!("read_file: {path}: {e}")))?;
        out.append_value(bytes);
    }
    Ok(Arc::new(out.finish()))
}
