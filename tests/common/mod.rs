//! Helpers shared by the integration tests: reading a pipeline's output back as plain values,
//! and (in [`pipelines`]) the random-pipeline generator of the property tests.
#![allow(dead_code)]

use arrow::array::{Array, AsArray, Float64Array, Int64Array, ListArray, StringArray};
use arrow::datatypes::{DataType, Float64Type, Int64Type};
use arrow::record_batch::RecordBatch;
use flumen::Dataset;

pub mod pipelines;

/// Every element of an unbatched dataset's int field, in order.
pub fn ints(ds: &Dataset, field: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for chunk in ds.iter_chunks() {
        let chunk = chunk.expect("pipeline runs");
        out.extend(column_i64(&chunk, field));
    }
    out
}

/// An int column of a batch as values (cast to int64; nulls are a test failure).
pub fn column_i64(batch: &RecordBatch, field: &str) -> Vec<i64> {
    let col = batch.column_by_name(field).unwrap_or_else(|| panic!("no field {field}"));
    let col = arrow::compute::cast(col, &DataType::Int64).expect("int column");
    let col = col.as_primitive::<Int64Type>();
    assert_eq!(col.null_count(), 0, "unexpected nulls in {field}");
    col.values().to_vec()
}

/// Every item of a dataset as text: an element's values of int field `field`, or `Err: `
/// and the error's message (for comparing sequences with their errors in place).
pub fn item_texts(ds: &Dataset, field: &str) -> Vec<String> {
    ds.iter()
        .map(|item| match item {
            Ok(b) => format!("{:?}", column_i64(&b, field)),
            Err(e) => format!("Err: {e}"),
        })
        .collect()
}

/// A float column of a batch as values.
pub fn column_f64(batch: &RecordBatch, field: &str) -> Vec<f64> {
    let col = batch.column_by_name(field).unwrap_or_else(|| panic!("no field {field}"));
    let col = arrow::compute::cast(col, &DataType::Float64).expect("float column");
    col.as_primitive::<Float64Type>().values().to_vec()
}

/// Every element of a dataset batched once: the field's values per batch.
pub fn int_batches(ds: &Dataset, field: &str) -> Vec<Vec<i64>> {
    ds.iter().map(|b| column_i64(&b.expect("pipeline runs"), field)).collect()
}

/// Every element of a dataset whose field is a list per batch row: batches of rows of values.
pub fn int_matrix_batches(ds: &Dataset, field: &str) -> Vec<Vec<Vec<i64>>> {
    ds.iter()
        .map(|b| {
            let b = b.expect("pipeline runs");
            let col = b.column_by_name(field).expect("field");
            (0..col.len()).map(|i| list_values(col.as_ref(), i)).collect()
        })
        .collect()
}

/// The int values of row `i` of a List or FixedSizeList column.
pub fn list_values(col: &dyn Array, i: usize) -> Vec<i64> {
    let row = match col.data_type() {
        DataType::List(_) => col.as_any().downcast_ref::<ListArray>().expect("list").value(i),
        DataType::FixedSizeList(_, _) => col.as_fixed_size_list().value(i),
        other => panic!("not a list: {other}"),
    };
    let row = arrow::compute::cast(&row, &DataType::Int64).expect("ints");
    row.as_primitive::<Int64Type>().values().to_vec()
}

/// Every element's string field.
pub fn strings(ds: &Dataset, field: &str) -> Vec<String> {
    let mut out = Vec::new();
    for chunk in ds.iter_chunks() {
        let chunk = chunk.expect("pipeline runs");
        let col = chunk.column_by_name(field).expect("field");
        let col = col.as_any().downcast_ref::<StringArray>().expect("string column");
        out.extend(col.iter().map(|s| s.expect("no nulls").to_string()));
    }
    out
}

/// A one-column int64 batch.
pub fn int_batch(name: &str, values: Vec<i64>) -> RecordBatch {
    RecordBatch::try_from_iter([(name, std::sync::Arc::new(Int64Array::from(values)) as _)]).expect("batch")
}

/// A one-column float64 batch.
pub fn float_batch(name: &str, values: Vec<f64>) -> RecordBatch {
    RecordBatch::try_from_iter([(name, std::sync::Arc::new(Float64Array::from(values)) as _)]).expect("batch")
}

/// A one-column batch of int64 lists (ragged rows).
pub fn ragged_batch(name: &str, rows: Vec<Vec<i64>>) -> RecordBatch {
    let list =
        ListArray::from_iter_primitive::<Int64Type, _, _>(rows.into_iter().map(|r| Some(r.into_iter().map(Some))));
    RecordBatch::try_from_iter([(name, std::sync::Arc::new(list) as _)]).expect("batch")
}

/// The error of the first failing item, with the items before it.
pub fn until_error(ds: &Dataset, field: &str) -> (Vec<i64>, Option<String>) {
    let mut values = Vec::new();
    for element in ds.iter() {
        match element {
            Ok(b) => values.extend(column_i64(&b, field)),
            Err(e) => return (values, Some(e.to_string())),
        }
    }
    (values, None)
}

/// Writes `records` to a new uncompressed TFRecord file at `path`.
pub fn write_tfrecords(path: &str, records: impl IntoIterator<Item = impl AsRef<[u8]>>) {
    let mut writer = flumen::TfRecordWriter::create(path, flumen::prelude::RecordCompression::None).unwrap();
    for record in records {
        writer.write(record.as_ref()).unwrap();
    }
    writer.finish().unwrap();
}

/// A serialized `tf.train.Example` with `label` (int64) and `x` (two floats), or without
/// `label` when `None`.
pub fn example(label: Option<i64>, x: [f32; 2]) -> Vec<u8> {
    let label = label.map(|l| [l]);
    let mut features = vec![("x", flumen::FeatureValues::Float32(&x))];
    if let Some(label) = &label {
        features.push(("label", flumen::FeatureValues::Int64(label)));
    }
    flumen::serialize_example(&features)
}

/// `values` as a column of (nested) fixed-size lists of `shape`, outermost dimension first.
pub fn tensors(values: arrow::array::ArrayRef, shape: &[i32]) -> arrow::array::ArrayRef {
    shape.iter().rev().fold(values, |inner, &d| {
        let item = std::sync::Arc::new(arrow::datatypes::Field::new("item", inner.data_type().clone(), true));
        std::sync::Arc::new(arrow::array::FixedSizeListArray::new(item, d, inner, None))
    })
}
