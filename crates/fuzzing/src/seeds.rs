//! Valid inputs for each target, written with flumen's own writers (and Arrow's and
//! Parquet's): where the fuzzers start, so that mutations land in well-formed files and
//! reach the decoders' deep paths.

use std::sync::Arc;

use arrow::array::{ArrayRef, FixedSizeListArray, Float64Array, Int64Array, ListArray, StringArray};
use arrow::datatypes::{Float32Type, Int64Type};
use arrow::record_batch::RecordBatch;
use flumen::prelude::*;
use flumen::{serialize_example, FeatureValues, SaveMode};
use flumen_store::{ChunkFileWriter, Compression as ChunkCompression};

use crate::targets::{framed_prefix, items, pipeline};

/// A batch with the column kinds tables hold: int64, float64 with a null, string, a
/// fixed-size list and a ragged list.
fn table(rows: i64) -> RecordBatch {
    let ids: Vec<i64> = (0..rows).collect();
    let floats: Vec<Option<f64>> = ids.iter().map(|&i| (i % 5 != 3).then_some(i as f64 * 0.5)).collect();
    let names: Vec<String> = ids.iter().map(|i| format!("n{i}")).collect();
    let pairs = FixedSizeListArray::from_iter_primitive::<Float32Type, _, _>(
        ids.iter().map(|&i| Some(vec![Some(i as f32), Some(-i as f32)])),
        2,
    );
    let tags = ListArray::from_iter_primitive::<Int64Type, _, _>(
        ids.iter().map(|&i| Some((0..i % 3).map(Some).collect::<Vec<_>>())),
    );
    RecordBatch::try_from_iter_with_nullable([
        ("id", Arc::new(Int64Array::from(ids.clone())) as ArrayRef, true),
        ("x", Arc::new(Float64Array::from(floats)) as ArrayRef, true),
        ("name", Arc::new(StringArray::from(names)) as ArrayRef, true),
        ("pair", Arc::new(pairs) as ArrayRef, true),
        ("tags", Arc::new(tags) as ArrayRef, true),
    ])
    .expect("a table")
}

/// Serialized examples with the features `targets::example` parses.
fn examples() -> Vec<Vec<u8>> {
    (0..6)
        .map(|i: i64| {
            let tokens: Vec<i64> = (0..i).map(|t| t * 300).collect();
            let weights: Vec<f32> = (0..i).map(|t| t as f32 * 0.25).collect();
            let features = [1.0f32, 2.0, 3.0, 4.0];
            let index: Vec<i64> = (0..i % 4).map(|t| (t * 5) % 16).collect();
            let values: Vec<f32> = index.iter().map(|&t| t as f32).collect();
            let text: Vec<&[u8]> = vec![b"hello", b"tf.data"];
            serialize_example(&[
                ("label", FeatureValues::Int64(&[i])),
                ("tokens", FeatureValues::Int64(&tokens)),
                ("weights", FeatureValues::Float32(&weights)),
                ("features", FeatureValues::Float32(&features)),
                ("text", FeatureValues::Bytes(&text)),
                ("index", FeatureValues::Int64(&index)),
                ("values", FeatureValues::Float32(&values)),
            ])
        })
        .collect()
}

/// TFRecord framing of `records`.
fn framed(records: &[Vec<u8>]) -> Vec<u8> {
    let crc = flumen::crates::sources::tfrecord::masked_crc32c;
    let mut out = vec![];
    for r in records {
        let len = (r.len() as u64).to_le_bytes();
        out.extend_from_slice(&len);
        out.extend_from_slice(&crc(&len).to_le_bytes());
        out.extend_from_slice(r);
        out.extend_from_slice(&crc(r).to_le_bytes());
    }
    debug_assert_eq!(framed_prefix(&out).len(), records.len());
    out
}

/// Inputs of `targets::tfrecord`: framed examples, uncompressed and through each compressor,
/// and ready-made GZIP and ZLIB files.
pub fn tfrecord() -> Vec<Vec<u8>> {
    let body = framed(&examples());
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut seeds: Vec<Vec<u8>> = (0u8..3).map(|mode| [vec![mode], body.clone()].concat()).collect();
    for (mode, compression) in [(3u8, RecordCompression::Gzip), (4, RecordCompression::Zlib)] {
        let path = dir.path().join(format!("{mode}.tfrecord"));
        let path = path.to_str().expect("a UTF-8 path");
        let mut writer = flumen::TfRecordWriter::create(path, compression).expect("a writer");
        for record in examples() {
            writer.write(&record).expect("write");
        }
        writer.finish().expect("finish");
        seeds.push([vec![mode], std::fs::read(path).expect("read")].concat());
    }
    seeds
}

/// Inputs of `targets::example`: examples, each after its length byte.
pub fn example() -> Vec<Vec<u8>> {
    let records: Vec<Vec<u8>> = examples().into_iter().filter(|r| r.len() < 256).collect();
    let all: Vec<u8> = records.iter().flat_map(|r| [vec![r.len() as u8], r.clone()].concat()).collect();
    vec![all, [vec![records[0].len() as u8], records[0].clone()].concat()]
}

/// Inputs of `targets::csv`: the mode byte, then CSV text (a header, quotes, CRLF, an empty
/// value, a blank line).
pub fn csv() -> Vec<Vec<u8>> {
    let texts = [
        "a,b,c\n1,2.5,x\n2,-3,\"y, z\"\n3,,w\n",
        "a,b,c\r\n4,1e3,\"multi\nline\"\r\n\r\n5,0.0,q\r\n",
        "1,2.5,x\n2,3.5,y\n",
    ];
    (0u8..3).flat_map(|mode| texts.iter().map(move |t| [vec![mode], t.as_bytes().to_vec()].concat())).collect()
}

/// Inputs of `targets::text`.
pub fn text() -> Vec<Vec<u8>> {
    vec![b"first line\nsecond\r\n\nlast without end".to_vec(), "d\u{e9}j\u{e0} vu\n\u{1F600}\n".as_bytes().to_vec()]
}

/// Inputs of `targets::parquet`: a table in row groups of 4 rows, plain and compressed.
pub fn parquet() -> Vec<Vec<u8>> {
    use parquet::basic::Compression;
    [Compression::UNCOMPRESSED, Compression::SNAPPY]
        .into_iter()
        .map(|compression| {
            let batch = table(10);
            let props = parquet::file::properties::WriterProperties::builder()
                .set_max_row_group_row_count(Some(4))
                .set_compression(compression)
                .build();
            let mut out = vec![];
            let mut writer =
                parquet::arrow::ArrowWriter::try_new(&mut out, batch.schema(), Some(props)).expect("writer");
            writer.write(&batch).expect("write");
            writer.close().expect("close");
            out
        })
        .collect()
}

/// Inputs of `targets::ipc_file`.
pub fn ipc_file() -> Vec<Vec<u8>> {
    let batch = table(7);
    let mut out = vec![];
    let mut writer = arrow::ipc::writer::FileWriter::try_new(&mut out, &batch.schema()).expect("writer");
    writer.write(&batch).expect("write");
    writer.write(&table(3)).expect("write");
    writer.finish().expect("finish");
    drop(writer);
    vec![out]
}

/// Inputs of `targets::ipc_stream`.
pub fn ipc_stream() -> Vec<Vec<u8>> {
    let batch = table(7);
    let mut out = vec![];
    let mut writer = arrow::ipc::writer::StreamWriter::try_new(&mut out, &batch.schema()).expect("writer");
    writer.write(&batch).expect("write");
    writer.write(&table(3)).expect("write");
    writer.finish().expect("finish");
    drop(writer);
    vec![out]
}

/// Inputs of `targets::avro`: a file of several small blocks in each codec, with nullable,
/// array, string, enum and map fields (the map skipped: it is not read).
pub fn avro() -> Vec<Vec<u8>> {
    use flumen::crates::sources::avro::container::Codec;
    use flumen::crates::sources::avro::writer::{AvroWriter, Datum};
    let schema = r#"{"type":"record","name":"r","fields":[{"name":"id","type":"long"},
        {"name":"x","type":["null","float"]},{"name":"v","type":{"type":"array","items":"int"}},
        {"name":"s","type":"string"},{"name":"e","type":{"type":"enum","name":"e","symbols":["a","b"]}}]}"#;
    let dir = tempfile::tempdir().expect("a temporary directory");
    [Codec::Null, Codec::Deflate, Codec::Snappy, Codec::Zstandard, Codec::Bzip2]
        .into_iter()
        .map(|codec| {
            let path = dir.path().join(format!("{}.avro", codec.name()));
            let path = path.to_str().expect("a UTF-8 path");
            let mut writer = AvroWriter::create(path, schema, codec).expect("writer").with_block_bytes(40);
            for i in 0..12i64 {
                let x = if i % 3 == 0 {
                    Datum::Union(0, Box::new(Datum::Null))
                } else {
                    Datum::Union(1, Box::new(Datum::Float(i as f32)))
                };
                let v = Datum::Array((0..i % 3).map(|k| Datum::Int(k as i32)).collect());
                let record = Datum::Record(vec![
                    Datum::Long(i),
                    x,
                    v,
                    Datum::String(format!("s{i}")),
                    Datum::Enum((i % 2) as i32),
                ]);
                writer.append(&record).expect("append");
            }
            writer.finish().expect("finish");
            std::fs::read(path).expect("read")
        })
        .collect()
}

/// Inputs of `targets::chunk_file`: the table in each of the chunk files' compressions.
pub fn chunk_file() -> Vec<Vec<u8>> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    [ChunkCompression::None, ChunkCompression::Lz4, ChunkCompression::Zstd]
        .into_iter()
        .enumerate()
        .map(|(i, compression)| {
            let path = dir.path().join(format!("{i}.chunks"));
            let batch = table(9);
            let mut writer = ChunkFileWriter::create(&path, batch.schema(), compression).expect("writer");
            writer.write(&batch).expect("write");
            writer.write(&table(2)).expect("write");
            writer.finish().expect("finish");
            std::fs::read(&path).expect("read")
        })
        .collect()
}

/// Inputs of `targets::snapshot`: the metadata the fuzzing pipeline's snapshot writes.
pub fn snapshot() -> Vec<Vec<u8>> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let root = dir.path().join("snap");
    let ds = pipeline().snapshot(root.to_str().expect("a UTF-8 path"), SnapshotOptions::default()).expect("snapshot");
    items(&ds, 1000);
    std::fs::read_dir(&root)
        .expect("the snapshot directory")
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read(e.path().join("snapshot.metadata")).ok())
        .collect()
}

/// Inputs of `targets::checkpoint`: the fuzzing pipeline's checkpoints after 0, 3 and 7
/// elements, full and symbolic.
pub fn checkpoint() -> Vec<Vec<u8>> {
    let ds = pipeline();
    let mut seeds = vec![];
    for at in [0, 3, 7] {
        for mode in [SaveMode::Full, SaveMode::Symbolic] {
            let mut it = ds.iter();
            for _ in 0..at {
                drop(it.next());
            }
            seeds.push(it.save(mode).expect("save").to_bytes().expect("bytes"));
        }
    }
    seeds
}

/// Inputs of `targets::plan_json`: plans of most operators, serialized.
pub fn plan_json() -> Vec<Vec<u8>> {
    let base = pipeline();
    let more = Dataset::range(0, 100)
        .and_then(|d| d.filter(col("value").gt(lit(3i64))))
        .and_then(|d| {
            d.map(MapFunction::select([("v", cast(col("value"), arrow::datatypes::DataType::Float64) * lit(0.5))]))
        })
        .and_then(|d| d.repeat(Some(2)))
        .and_then(|d| d.take(50))
        .and_then(|d| d.prefetch(Tunable::Autotune))
        .expect("a plan");
    let examples = MapFunction::parse_example("record", vec![flumen::FeatureSpec::var_len("tokens", DType::Int64)]);
    let parsed = Dataset::from_arrays([(
        "record",
        Arc::new(arrow::array::BinaryArray::from_vec(vec![b"x" as &[u8]])) as ArrayRef,
    )])
    .and_then(|d| d.map(examples?))
    .expect("a parse");
    [base, more, parsed].iter().map(|d| d.serialize().expect("serializes").into_bytes()).collect()
}

/// The test images other encoders wrote (`tests/data/images`), of `extension`.
fn images(extension: &str) -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/images");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("the test images")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == extension))
        .collect();
    paths.sort();
    paths.iter().map(|p| std::fs::read(p).expect("a test image")).collect()
}

/// Inputs of `targets::jpeg`: baseline (4:2:0, 4:4:4), progressive, restart markers,
/// grayscale and CMYK JPEGs written by Pillow and TensorFlow.
pub fn jpeg() -> Vec<Vec<u8>> {
    images("jpg")
}

/// Inputs of `targets::png`: RGB, RGBA, gray, 16-bit gray and palette PNGs written by Pillow.
pub fn png() -> Vec<Vec<u8>> {
    images("png")
}
