//! Chunks to store: a tensor-like schema, deterministic and compressible data.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, FixedSizeListArray, Float32Array, Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;

/// `id: int64`, `x: float32[4]` (a tensor field), `label: utf8`.
pub fn schema() -> SchemaRef {
    let item = Arc::new(Field::new("item", DataType::Float32, false));
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("x", DataType::FixedSizeList(item, 4), false),
        Field::new("label", DataType::Utf8, true),
    ]))
}

/// Rows `start..start + rows`; the values repeat, so codecs have something to find.
pub fn batch(start: i64, rows: usize) -> RecordBatch {
    let ids: Vec<i64> = (start..start + rows as i64).collect();
    let values: Vec<f32> = ids.iter().flat_map(|i| (0..4).map(move |k| ((i + k) % 16) as f32)).collect();
    let item = Arc::new(Field::new("item", DataType::Float32, false));
    let x = FixedSizeListArray::try_new(item, 4, Arc::new(Float32Array::from(values)), None).expect("tensor column");
    let labels: Vec<Option<String>> =
        ids.iter().map(|i| if i % 10 == 3 { None } else { Some(format!("label-{}", i % 5)) }).collect();
    let columns: Vec<ArrayRef> =
        vec![Arc::new(Int64Array::from(ids)), Arc::new(x), Arc::new(StringArray::from(labels))];
    RecordBatch::try_new(schema(), columns).expect("valid batch")
}

/// `count` chunks of `rows` rows, ids numbered on from `start`.
pub fn chunks(start: i64, count: usize, rows: usize) -> Vec<RecordBatch> {
    (0..count).map(|c| batch(start + (c * rows) as i64, rows)).collect()
}

/// The ids of the rows of `batches`, in order.
pub fn ids(batches: &[RecordBatch]) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| {
            let column = b.column(0).as_any().downcast_ref::<Int64Array>().expect("id column").clone();
            (0..column.len()).map(move |i| column.value(i))
        })
        .collect()
}

/// Flips every bit of the byte at `offset` of the file at `path`.
pub fn flip_byte(path: &Path, offset: u64) {
    let mut bytes = std::fs::read(path).expect("read file");
    bytes[offset as usize] ^= 0xff;
    std::fs::write(path, bytes).expect("write file");
}

/// Cuts the last `by` bytes off the file at `path`.
pub fn truncate(path: &Path, by: u64) {
    let file = std::fs::OpenOptions::new().write(true).open(path).expect("open file");
    let len = file.metadata().expect("file length").len();
    file.set_len(len - by).expect("truncate");
}

/// The names in directory `dir`, sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("list dir")
        .map(|e| e.expect("dir entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Asserts that `error` is bad data located in `path` at `byte {offset}`, with `message` in it.
pub fn assert_data_error(error: &flumen_ir::Error, path: &Path, offset: u64, message: &str) {
    match error {
        flumen_ir::Error::Data { location, message: m } => {
            assert_eq!(location.source, path.display().to_string(), "{error}");
            assert_eq!(location.position.as_deref(), Some(format!("byte {offset}").as_str()), "{error}");
            assert!(m.contains(message), "expected '{message}' in: {error}");
        }
        other => panic!("expected a data error, got {other}"),
    }
}
