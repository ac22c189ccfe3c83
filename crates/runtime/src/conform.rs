//! Making chunks and arrays match the schema a plan declares.
//!
//! Arrow kernels, user closures and generators build types their own way: list items named
//! `item` or `element`, nullability, a fixed dimension where the plan's is unknown. Operators
//! must emit chunks with exactly their output schema, so every such fit goes through here.

use arrow::array::{make_array, Array, ArrayRef};
use arrow::compute::cast;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use flumen_ir::{Error, Result};

/// `chunk` with exactly `schema` (same column types; field names and nullability may differ).
pub fn conform_chunk(chunk: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if chunk.schema().fields() == schema.fields() {
        return Ok(chunk);
    }
    if chunk.num_columns() != schema.fields().len() {
        return Err(Error::execution(
            "schema",
            format!("{} columns where {} were declared", chunk.num_columns(), schema.fields().len()),
        ));
    }
    let columns = chunk
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| {
            if c.data_type() == f.data_type() {
                Ok(c.clone())
            } else if c.data_type().equals_datatype(f.data_type()) {
                // Only names and nullability differ: relabel the same buffers.
                Ok(make_array(c.to_data().into_builder().data_type(f.data_type().clone()).build()?))
            } else {
                Err(Error::execution(
                    "schema",
                    format!("column '{}' is {} where {} was declared", f.name(), c.data_type(), f.data_type()),
                ))
            }
        })
        .collect::<Result<Vec<_>>>()?;
    make_batch(schema, columns, chunk.num_rows())
}

/// `chunk` under `schema` where a fixed dim became unknown (FixedSizeList → List): such
/// columns are cast, the others relabelled as by [`conform_chunk`].
///
/// Columns are matched by name where the chunk has every field of `schema` (`concatenate`
/// of datasets whose fields come in another order, as tf.data matches a dict's keys), by
/// position otherwise.
pub fn relabel(chunk: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if chunk.schema().fields() == schema.fields() {
        return Ok(chunk);
    }
    let by_name: Option<Vec<ArrayRef>> = (chunk.num_columns() == schema.fields().len())
        .then(|| schema.fields().iter().map(|f| chunk.column_by_name(f.name()).cloned()).collect())
        .flatten();
    let columns = by_name
        .as_deref()
        .unwrap_or(chunk.columns())
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| {
            if c.data_type().equals_datatype(f.data_type()) {
                Ok(c.clone())
            } else {
                cast(c, f.data_type()).map_err(Error::from)
            }
        })
        .collect::<Result<Vec<_>>>()?;
    conform_chunk(make_batch(schema, columns, chunk.num_rows())?, schema)
}

/// `array` as type `dt`: itself when it already is, otherwise cast.
pub fn conform_array(array: ArrayRef, dt: &DataType) -> Result<ArrayRef> {
    if array.data_type() == dt {
        Ok(array)
    } else {
        Ok(cast(&array, dt)?)
    }
}

/// A chunk of `rows` rows with `schema` (also for a schema without fields, which
/// `RecordBatch::try_new` rejects for want of a column to count rows by).
pub fn make_batch(schema: &SchemaRef, columns: Vec<ArrayRef>, rows: usize) -> Result<RecordBatch> {
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    Ok(RecordBatch::try_new_with_options(schema.clone(), columns, &options)?)
}
