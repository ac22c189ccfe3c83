//! TFRecord reading and `parse_example`, each against a hand-written loop doing the same work
//! into reused buffers: the limit a general engine can approach. `cargo bench --bench tfrecord`.
//!
//! - **read**: 200,000 records of 300 bytes; framing and both CRC32C checks.
//! - **parse**: 200,000 w2-shaped `tf.train.Example`s (features f32[64], label, id, weight), read
//!   and parsed into Arrow columns. The hand-written parse is a fixed-layout decoder of the
//!   same protos (it knows the keys and their order), the fastest a parser can be here.
//! - **w6 token lists**: one chunk of 4,096 w6-shaped Examples (5 to 200 int64 tokens below
//!   100,000, and a label) parsed into a list column, against a decoder that finds the packed
//!   list after the `tokens` key and decodes its varints.
//!
//! - **crc32c**: the checksum alone, over 100,000 buffers of 40, 330 and 1,000 bytes at
//!   varying alignment (1 MB in all, in cache): flumen's (`checksum::crc32c`) against the
//!   `crc32c` crate's.
//!
//! The files are in the page cache after the first pass.

use std::hint::black_box;
use std::io::{BufReader, Read};

use arrow::array::{Array, BinaryArray};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use flumen::crates::sources::checksum;
use flumen::crates::sources::tfrecord::masked_crc32c;
use flumen::crates::udf::short_varints;
use flumen::prelude::*;
use flumen::TfRecordWriter;

const RECORDS: usize = 200_000;
const RECORD_BYTES: usize = 300;

fn write(path: &str, compression: RecordCompression) {
    let mut writer = TfRecordWriter::create(path, compression).expect("create");
    let mut record = vec![0u8; RECORD_BYTES];
    for i in 0..RECORDS {
        for (j, b) in record.iter_mut().enumerate() {
            *b = (i * 31 + j * 7) as u8;
        }
        writer.write(&record).expect("write");
    }
    writer.finish().expect("finish");
}

/// The limit: framing and both checksums, nothing kept.
fn hand_written(path: &str) -> usize {
    let mut input = BufReader::with_capacity(1 << 16, std::fs::File::open(path).expect("open"));
    let (mut header, mut data, mut n) = ([0u8; 12], Vec::new(), 0);
    while input.read_exact(&mut header).is_ok() {
        let length = u64::from_le_bytes(header[..8].try_into().unwrap());
        assert_eq!(masked_crc32c(&header[..8]), u32::from_le_bytes(header[8..].try_into().unwrap()));
        data.resize(length as usize + 4, 0);
        input.read_exact(&mut data).expect("a whole record");
        let (body, crc) = data.split_at(length as usize);
        assert_eq!(masked_crc32c(body), u32::from_le_bytes(crc.try_into().unwrap()));
        n += 1;
    }
    n
}

/// A w2 `tf.train.Example`: `features` (64 floats), `label`, `id` and `weight`.
fn w2_example(i: usize) -> Vec<u8> {
    let features: Vec<f32> = (0..64).map(|j| (i + j) as f32 * 0.01).collect();
    flumen::serialize_example(&[
        ("features", flumen::FeatureValues::Float32(&features)),
        ("label", flumen::FeatureValues::Int64(&[(i % 10) as i64])),
        ("id", flumen::FeatureValues::Int64(&[(i % 100) as i64])),
        ("weight", flumen::FeatureValues::Float32(&[0.5])),
    ])
}

/// The limit of reading and parsing: framing, checksums, and a decoder that knows where each
/// value of the fixed layout [`w2_example`] writes sits.
fn hand_parse(path: &str) -> f32 {
    let mut input = BufReader::with_capacity(1 << 16, std::fs::File::open(path).expect("open"));
    let (mut header, mut data, mut sum) = ([0u8; 12], Vec::new(), 0.0f32);
    let mut features = Vec::with_capacity(64);
    while input.read_exact(&mut header).is_ok() {
        let length = u64::from_le_bytes(header[..8].try_into().unwrap()) as usize;
        assert_eq!(masked_crc32c(&header[..8]), u32::from_le_bytes(header[8..].try_into().unwrap()));
        data.resize(length + 4, 0);
        input.read_exact(&mut data).expect("a whole record");
        let (body, crc) = data.split_at(length);
        assert_eq!(masked_crc32c(body), u32::from_le_bytes(crc.try_into().unwrap()));
        // Example(2..) > entry(..) > key "features" > Feature > FloatList > packed 256 bytes.
        let floats = body.windows(3).position(|w| w == [0x0a, 0x80, 0x02]).expect("the packed floats") + 3;
        features.clear();
        features.extend(body[floats..floats + 256].chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())));
        sum += features[0];
    }
    sum
}

fn drain(ds: &Dataset) -> usize {
    ds.iter_chunks().map(|c| c.expect("reads").num_rows()).sum()
}

fn benches(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let plain = dir.path().join("a.tfrecord").to_str().unwrap().to_string();
    let gzip = dir.path().join("a.tfrecord.gz").to_str().unwrap().to_string();
    write(&plain, RecordCompression::None);
    write(&gzip, RecordCompression::Gzip);
    let mut g = c.benchmark_group("tfrecord");
    g.throughput(Throughput::Elements(RECORDS as u64));
    g.sample_size(10);
    g.bench_function("hand-written loop", |b| b.iter(|| black_box(hand_written(&plain))));
    let ds = Dataset::tfrecord(&[&plain], RecordCompression::None).unwrap();
    g.bench_function("flumen", |b| b.iter(|| black_box(drain(&ds))));
    let gz = Dataset::tfrecord(&[&gzip], RecordCompression::Gzip).unwrap();
    g.bench_function("flumen, gzip", |b| b.iter(|| black_box(drain(&gz))));
    g.finish();

    let examples = dir.path().join("w2.tfrecord").to_str().unwrap().to_string();
    let mut writer = TfRecordWriter::create(&examples, RecordCompression::None).expect("create");
    for i in 0..RECORDS {
        writer.write(&w2_example(i)).expect("write");
    }
    writer.finish().expect("finish");
    let features = vec![
        FeatureSpec::fixed("features", DType::Float32, vec![64]),
        FeatureSpec::fixed("label", DType::Int64, vec![]),
        FeatureSpec::fixed("id", DType::Int64, vec![]),
        FeatureSpec::fixed("weight", DType::Float32, vec![]),
    ];
    let parsed = Dataset::tfrecord(&[&examples], RecordCompression::None)
        .unwrap()
        .map(MapFunction::parse_example("record", features.clone()).unwrap())
        .unwrap();
    let mut g = c.benchmark_group("parse_example");
    g.throughput(Throughput::Elements(RECORDS as u64));
    g.sample_size(10);
    g.bench_function("hand-written loop", |b| b.iter(|| black_box(hand_parse(&examples))));
    g.bench_function("flumen", |b| b.iter(|| black_box(drain(&parsed))));
    let sequential = parsed.with_options(Options::default().with_autotune(false));
    g.bench_function("flumen, one thread", |b| b.iter(|| black_box(drain(&sequential))));
    g.finish();

    // The parse alone, of one chunk already in memory, into columns.
    let records = BinaryArray::from_iter_values((0..CHUNK).map(w2_example));
    let mut g = c.benchmark_group("parse_examples, one chunk");
    g.throughput(Throughput::Elements(CHUNK as u64));
    g.bench_function("hand-written loop", |b| b.iter(|| black_box(hand_columns(&records))));
    g.bench_function("flumen", |b| {
        b.iter(|| black_box(flumen::crates::udf::example::parse_examples(&records, &features).expect("parses")))
    });
    g.finish();

    // w6's token lists, one chunk in memory, into a list column.
    let records = BinaryArray::from_iter_values((0..CHUNK).map(w6_example));
    let tokens = vec![FeatureSpec::var_len("tokens", DType::Int64), FeatureSpec::fixed("label", DType::Int64, vec![])];
    let parsed = flumen::crates::udf::example::parse_examples(&records, &tokens).expect("parses");
    let (values, offsets) = hand_tokens(&records);
    let list = parsed[0].as_any().downcast_ref::<arrow::array::ListArray>().expect("a list column");
    assert_eq!(list.value_offsets(), offsets.as_slice());
    assert_eq!(
        list.values().as_any().downcast_ref::<arrow::array::Int64Array>().unwrap().values().as_ref(),
        values.as_slice()
    );
    let mut g = c.benchmark_group("parse_examples, w6 token lists, one chunk");
    g.throughput(Throughput::Elements(values.len() as u64));
    g.bench_function("hand-written loop", |b| b.iter(|| black_box(hand_tokens(&records))));
    g.bench_function("flumen", |b| {
        b.iter(|| black_box(flumen::crates::udf::example::parse_examples(&records, &tokens).expect("parses")))
    });
    g.finish();
}

/// Records in the chunk of the parse-alone case (the default chunk).
const CHUNK: usize = 4096;

/// A w6 `tf.train.Example`: `tokens`, 5 to 200 int64s below 100,000 (varints of 1 to 3
/// bytes), and `label`.
fn w6_example(i: usize) -> Vec<u8> {
    let mut x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let len = 5 + next() as usize % 196;
    let tokens: Vec<i64> = (0..len).map(|_| (next() % 100_000) as i64).collect();
    flumen::serialize_example(&[
        ("tokens", flumen::FeatureValues::Int64(&tokens)),
        ("label", flumen::FeatureValues::Int64(&[(i % 10) as i64])),
    ])
}

/// The limit of parsing w6's token lists into a column: a decoder that finds the packed
/// list after the `tokens` key (its three length-delimited wrappers known) and decodes its
/// varints into one flat buffer with offsets (runs of short ones with
/// `flumen_udf::short_varints`, as the parse does).
fn hand_tokens(records: &BinaryArray) -> (Vec<i64>, Vec<i32>) {
    fn varint(bytes: &[u8], at: &mut usize) -> u64 {
        let (mut value, mut shift) = (0u64, 0);
        loop {
            let b = bytes[*at];
            *at += 1;
            value |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return value;
            }
            shift += 7;
        }
    }
    let (mut values, mut offsets) =
        (Vec::with_capacity(records.value_data().len() / 2), Vec::with_capacity(records.len() + 1));
    offsets.push(0);
    for body in records.iter().flatten() {
        // Feature (0x12) > Int64List (0x1a) > packed values (0x0a), each with its length.
        let mut at = body.windows(6).position(|w| w == b"tokens").expect("the tokens key") + 6;
        let mut len = 0;
        for _ in 0..3 {
            at += 1;
            len = varint(body, &mut at) as usize;
        }
        let end = at + len;
        // Runs of short values four at a time, as the parse decodes them.
        values.reserve(len);
        while at < end {
            at += short_varints::decode(&body[at..end], 0, &mut values);
            if at < end {
                values.push(varint(body, &mut at) as i64);
            }
        }
        offsets.push(values.len() as i32);
    }
    (values, offsets)
}

/// The limit of parsing a chunk into columns: a decoder that knows where each value of the
/// fixed layout [`w2_example`] writes sits (it checks the bytes before each), into fresh
/// column buffers as a parse must.
fn hand_columns(records: &BinaryArray) -> (Vec<f32>, Vec<i64>, Vec<i64>, Vec<f32>) {
    // Example > entry > "features" > Feature > FloatList > 256 packed bytes, then the
    // entries of "label", "id" (a one-byte varint each) and "weight" (4 bytes).
    const FLOATS: usize = 25;
    const LABEL: usize = FLOATS + 256 + 15;
    const ID: usize = FLOATS + 256 + 28;
    const WEIGHT: usize = FLOATS + 256 + 45;
    let n = records.len();
    let (mut features, mut labels, mut ids, mut weights) =
        (Vec::with_capacity(64 * n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    for body in records.iter().map(|r| r.expect("not null")) {
        assert!(body[FLOATS - 3..FLOATS] == [0x0a, 0x80, 0x02] && body[LABEL - 6] == 0x12 && body[WEIGHT - 1] == 4);
        features.extend(body[FLOATS..FLOATS + 256].chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())));
        labels.push(i64::from(body[LABEL]));
        ids.push(i64::from(body[ID]));
        weights.push(f32::from_le_bytes(body[WEIGHT..WEIGHT + 4].try_into().unwrap()));
    }
    (features, labels, ids, weights)
}

/// Buffers of about `len` bytes (± 20) laid out one after another with gaps, so that they
/// start at every alignment: 1 MB of them, as (start, length).
fn buffers(len: usize) -> (Vec<u8>, Vec<(usize, usize)>) {
    let count = 1_000_000 / len;
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let bytes: Vec<u8> = (0..count * (len + 27))
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let spans = (0..count).map(|i| (i * (len + 27) + i % 8, len - 20 + (i * 7919) % 40)).collect();
    (bytes, spans)
}

fn checksums(c: &mut Criterion) {
    for len in [40, 330, 1000] {
        let (bytes, spans) = buffers(len);
        let mut g = c.benchmark_group(format!("crc32c, {len} bytes"));
        g.throughput(Throughput::Bytes(spans.iter().map(|s| s.1 as u64).sum()));
        let all = |f: fn(&[u8]) -> u32| spans.iter().fold(0, |acc, &(at, n)| acc ^ f(&bytes[at..at + n]));
        g.bench_function("crc32c crate", |b| b.iter(|| black_box(all(crc32c::crc32c))));
        g.bench_function("flumen", |b| b.iter(|| black_box(all(checksum::crc32c))));
        g.finish();
    }
}

criterion_group!(crc, checksums);
criterion_group!(tfrecord, benches);
criterion_main!(crc, tfrecord);
