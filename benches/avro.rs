//! Avro block decoding into Arrow columns, one block of 1,024 records (its bytes as inflated):
//! `cargo bench --bench avro`.
//!
//! - **per type**: a dense `f32[128]` array, a sparse record (`indices0` / `values`, 0..=50
//!   entries of a 50,001-wide vector), a varlen `long` array (0..=64 tokens) and a string
//!   (5..=30 characters), each the record's only field.
//! - **w3 projection**: w3's records (`../shared/bench/gen_data.py`'s schema, nine fields),
//!   decoded whole against decoded for three of them (label, weight, tokens), the other six
//!   walked over: what projection saves in the decoder.
//! - **w3 read**: w3's files as `flumen gen-data` writes them (deflate, 64 KiB blocks; here
//!   4 files of 5,000 records) through `Dataset::avro(...).batch(1024)`, all nine features
//!   against three. Inflating the blocks costs more than decoding them and projection cannot
//!   skip it, so three features are not three times faster to read than nine.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use flumen::crates::sources::avro::decode::Decoder;
use flumen::crates::sources::avro::schema::parse;
use flumen::crates::sources::avro::writer::Datum;
use flumen::prelude::*;

#[allow(dead_code)] // this bench uses only the generator's draws
#[path = "../crates/cli/src/workload_data.rs"]
mod workload_data;

#[path = "../crates/cli/src/w3_data.rs"]
mod w3_data;

const RECORDS: usize = 1024;

/// A fixed-seed generator (SplitMix64), so that every run decodes the same bytes.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> i64 {
        (self.next() % n) as i64
    }

    fn float(&mut self) -> Datum {
        Datum::Float((self.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
    }

    fn floats(&mut self, n: usize) -> Datum {
        Datum::Array((0..n).map(|_| self.float()).collect())
    }

    fn sparse(&mut self) -> Datum {
        let n = self.below(51) as usize;
        let mut indices: Vec<i64> = (0..n).map(|_| self.below(50_001)).collect();
        indices.sort_unstable();
        indices.dedup();
        let values = self.floats(indices.len());
        Datum::Record(vec![Datum::Array(indices.into_iter().map(Datum::Long).collect()), values])
    }

    fn tokens(&mut self) -> Datum {
        let n = self.below(65);
        Datum::Array((0..n).map(|_| Datum::Long(self.below(100_000))).collect())
    }
}

const SPARSE_TYPE: &str = r#"{"type":"record","name":"sparse_f","fields":[
    {"name":"indices0","type":{"type":"array","items":"long"}},
    {"name":"values","type":{"type":"array","items":"float"}}]}"#;

/// A block of `RECORDS` records of `record()`, as inflated bytes.
fn block(mut record: impl FnMut() -> Datum) -> Vec<u8> {
    let mut out = Vec::new();
    (0..RECORDS).for_each(|_| record().encode(&mut out));
    out
}

fn decode(c: &mut Criterion, name: &str, schema: &str, spec: ElementSpec, data: &[u8]) {
    let decoder = Decoder::new(&parse(schema).expect("schema"), &spec).expect("decoder");
    let mut group = c.benchmark_group("avro_decode");
    group.throughput(Throughput::Elements(RECORDS as u64));
    group.bench_function(name, |b| {
        b.iter(|| {
            let mut columns = decoder.columns();
            decoder.append(&mut columns, black_box(data), RECORDS, 0, RECORDS).expect("decodes");
            black_box(decoder.finish(columns))
        })
    });
    group.finish();
}

fn per_type(c: &mut Criterion) {
    let mut draw = Draw(7);
    let one =
        |field: &str, t: &str| format!(r#"{{"type":"record","name":"r","fields":[{{"name":"{field}","type":{t}}}]}}"#);
    let data = block(|| Datum::Record(vec![draw.floats(128)]));
    let spec = ElementSpec::new(vec![FieldSpec::tensor("dense_f", DType::Float32, vec![128])]).unwrap();
    decode(c, "dense_f32x128", &one("dense_f", r#"{"type":"array","items":"float"}"#), spec, &data);
    let data = block(|| Datum::Record(vec![draw.sparse()]));
    let spec = ElementSpec::new(vec![FieldSpec::sparse("sparse_f", DType::Float32, vec![50_001])]).unwrap();
    decode(c, "sparse", &one("sparse_f", SPARSE_TYPE), spec, &data);
    let data = block(|| Datum::Record(vec![draw.tokens()]));
    let spec = ElementSpec::new(vec![FieldSpec::ragged("tokens", DType::Int64, vec![-1])]).unwrap();
    decode(c, "varlen_int64", &one("tokens", r#"{"type":"array","items":"long"}"#), spec, &data);
    let data = block(|| {
        let n = 5 + draw.below(26) as usize;
        Datum::Record(vec![Datum::String(
            (0..n).map(|i| (b'a' + ((i as u64 + draw.next()) % 26) as u8) as char).collect(),
        )])
    });
    let spec = ElementSpec::new(vec![FieldSpec::scalar("name", DType::Utf8)]).unwrap();
    decode(c, "string", &one("name", r#""string""#), spec, &data);
}

/// Three of w3's nine features: label, weight and tokens.
fn three_of(all: &ElementSpec) -> ElementSpec {
    let three = ["label", "weight", "tokens"];
    ElementSpec::new(all.fields.iter().filter(|f| three.contains(&f.name.as_str())).cloned().collect()).unwrap()
}

fn w3_projection(c: &mut Criterion) {
    let mut draw = Draw(11);
    let data = block(|| {
        Datum::Record(vec![
            Datum::Long(draw.below(10)),
            draw.float(),
            Datum::Int(18 + draw.below(72) as i32),
            Datum::Double(draw.below(1000) as f64 / 999.0),
            Datum::Boolean(draw.below(2) == 1),
            draw.floats(128),
            Datum::Array((0..4).map(|_| draw.floats(16)).collect()),
            draw.sparse(),
            draw.tokens(),
        ])
    });
    let all = w3_data::features();
    let three = three_of(&all);
    decode(c, "w3_all_9_fields", w3_data::SCHEMA, all, &data);
    decode(c, "w3_3_of_9_fields", w3_data::SCHEMA, three, &data);
}

fn w3_read(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let paths = w3_data::files(dir.path(), 5_000, &mut workload_data::Rng(5)).expect("w3's files");
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    let all = w3_data::features();
    let three = three_of(&all);
    let mut group = c.benchmark_group("avro_read");
    group.throughput(Throughput::Elements(20_000));
    group.sample_size(20);
    for (name, spec) in [("w3_all_9_features", all), ("w3_3_of_9_features", three)] {
        let ds = Dataset::avro(&paths, AvroOptions::default().with_features(spec)).and_then(|d| d.batch(1024)).unwrap();
        group
            .bench_function(name, |b| b.iter(|| ds.iter_chunks().map(|c| c.expect("reads").num_rows()).sum::<usize>()));
    }
    group.finish();
}

criterion_group!(benches, per_type, w3_projection, w3_read);
criterion_main!(benches);
