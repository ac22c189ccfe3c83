//! w2- and w6-like TFRecord files of `tf.train.Example`s that the benches write for
//! themselves (deterministic, no network, no TensorFlow), with the layouts and value ranges
//! of `../shared/bench/gen_data.py`.

use std::path::Path;

use flumen::prelude::RecordCompression;
use flumen::{serialize_example, FeatureValues, TfRecordWriter};

/// A xorshift stream of `u64`s from a fixed seed.
fn stream(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

/// Writes `files` files `{prefix}-{i}.tfrecord` of `per_file` records each from `record(i)`;
/// returns their paths.
fn write(dir: &Path, prefix: &str, files: usize, per_file: usize, mut record: impl FnMut() -> Vec<u8>) -> Vec<String> {
    (0..files)
        .map(|f| {
            let path = dir.join(format!("{prefix}-{f}.tfrecord")).to_str().expect("a UTF-8 path").to_string();
            let mut writer = TfRecordWriter::create(&path, RecordCompression::None).expect("the file opens");
            for _ in 0..per_file {
                writer.write(&record()).expect("the record is written");
            }
            writer.finish().expect("the file is written");
            path
        })
        .collect()
}

/// w2's files: `features` float32[64], `label` in 0..10, `id`, `weight` in [0.5, 1.5).
pub fn write_w2(dir: &Path, files: usize, per_file: usize) -> Vec<String> {
    let mut next = stream(0x9e37_79b9_7f4a_7c15);
    let mut id = 0i64;
    write(dir, "w2", files, per_file, || {
        let features: Vec<f32> = (0..64).map(|_| (next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5).collect();
        let weight = [0.5 + (next() >> 40) as f32 / (1u64 << 24) as f32];
        id += 1;
        serialize_example(&[
            ("features", FeatureValues::Float32(&features)),
            ("label", FeatureValues::Int64(&[(next() % 10) as i64])),
            ("id", FeatureValues::Int64(&[id])),
            ("weight", FeatureValues::Float32(&weight)),
        ])
    })
}

/// w6's files: `tokens`, 5 to 200 int64s in 1..30000, and a `label` of 0 or 1.
pub fn write_w6(dir: &Path, files: usize, per_file: usize) -> Vec<String> {
    let mut next = stream(0x2545_f491_4f6c_dd1d);
    write(dir, "w6", files, per_file, || {
        let len = 5 + (next() % 196) as usize;
        let tokens: Vec<i64> = (0..len).map(|_| 1 + (next() % 29_999) as i64).collect();
        serialize_example(&[
            ("tokens", FeatureValues::Int64(&tokens)),
            ("label", FeatureValues::Int64(&[(next() % 2) as i64])),
        ])
    })
}
