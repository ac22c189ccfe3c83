//! TFRecord reading: flumen's reader (`Dataset::tfrecord`, checksums verified) against a
//! hand-written loop over the same file that does the same framing and the same CRC32C
//! checks into one reused buffer, the limit a general reader can approach. Records are
//! 300 bytes (about one serialized w2 `tf.train.Example`); the file is in the page cache
//! after the first pass. `cargo bench --bench tfrecord`.

use std::hint::black_box;
use std::io::{BufReader, Read};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use flumen::crates::sources::tfrecord::masked_crc32c;
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
}

criterion_group!(tfrecord, benches);
criterion_main!(tfrecord);
