//! Operator throughput over `range` and in-memory data: map chains, filter, batch, shuffle,
//! padded_batch.
//!
//! Each benchmark iterates a whole pipeline of `N` elements chunk by chunk (the 18-column
//! shuffle: 250,000; padded_batch: 200,000 token lists of 5 to 200 int64s, as w6's);
//! criterion reports time per pass, and elements/s through `Throughput::Elements`.

use std::hint::black_box;
use std::sync::Arc;

use arrow::array::{Float64Array, ListArray};
use arrow::datatypes::DataType;
use arrow::datatypes::Int64Type;
use arrow::record_batch::RecordBatch;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use flumen::prelude::*;

const N: i64 = 1_000_000;

fn drain(ds: &Dataset) -> usize {
    ds.iter_chunks().map(|c| c.expect("pipeline runs").num_rows()).sum()
}

fn in_memory() -> Dataset {
    let chunks: Vec<RecordBatch> = (0..N / 8192 + 1)
        .map(|c| {
            let start = c * 8192;
            let end = (start + 8192).min(N);
            let x = Float64Array::from_iter_values((start..end).map(|i| i as f64 * 0.001));
            RecordBatch::try_from_iter([("x", Arc::new(x) as _)]).expect("batch")
        })
        .filter(|b| b.num_rows() > 0)
        .collect();
    Dataset::from_batches(chunks).expect("in-memory dataset")
}

/// `rows` rows of `columns` float64 columns (w1's shuffle carries 18), in chunks of 8192.
fn wide(rows: i64, columns: usize) -> Dataset {
    let chunks: Vec<RecordBatch> = (0..(rows + 8191) / 8192)
        .map(|c| {
            let (start, end) = (c * 8192, ((c + 1) * 8192).min(rows));
            let fields = (0..columns).map(|k| {
                let values = Float64Array::from_iter_values((start..end).map(|i| (i as f64) * 0.5 + k as f64));
                (format!("f{k}"), Arc::new(values) as _)
            });
            RecordBatch::try_from_iter(fields).expect("batch")
        })
        .collect();
    Dataset::from_batches(chunks).expect("in-memory dataset")
}

/// `rows` token lists of 5 to 200 int64s (a fixed xorshift sequence), in chunks of 8192.
fn token_lists(rows: usize) -> Dataset {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let chunks: Vec<RecordBatch> = (0..rows.div_ceil(8192))
        .map(|c| {
            let lists = (c * 8192..((c + 1) * 8192).min(rows)).map(|_| {
                let len = 5 + next() as usize % 196;
                Some((0..len).map(|_| Some(1 + (next() % 30_000) as i64)).collect::<Vec<_>>())
            });
            let tokens = ListArray::from_iter_primitive::<Int64Type, _, _>(lists);
            RecordBatch::try_from_iter([("tokens", Arc::new(tokens) as _)]).expect("batch")
        })
        .collect();
    Dataset::from_batches(chunks).expect("in-memory dataset")
}

fn map_chain(ds: &Dataset, len: usize) -> Dataset {
    let mut ds = ds
        .map(MapFunction::select([("v", cast(col(ds.element_spec().fields[0].name.as_str()), DataType::Float64))]))
        .unwrap();
    for i in 0..len {
        ds = ds.map(MapFunction::select([("v", col("v") * lit(1.0001) + lit(i as f64))])).unwrap();
    }
    ds
}

fn benches(c: &mut Criterion) {
    let range = Dataset::range(0, N).unwrap();
    let memory = in_memory();
    let mut g = c.benchmark_group("operators");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(10);
    for (source, ds) in [("range", &range), ("memory", &memory)] {
        g.bench_function(format!("{source}/scan"), |b| b.iter(|| black_box(drain(ds))));
        let one = map_chain(ds, 1);
        g.bench_function(format!("{source}/map x1"), |b| b.iter(|| black_box(drain(&one))));
        let four = map_chain(ds, 4);
        g.bench_function(format!("{source}/map x4"), |b| b.iter(|| black_box(drain(&four))));
        let filter = map_chain(ds, 1).filter((col("v") % lit(3.0)).gt(lit(1.0))).unwrap();
        g.bench_function(format!("{source}/map+filter"), |b| b.iter(|| black_box(drain(&filter))));
        let batch = ds.batch(1024).unwrap();
        g.bench_function(format!("{source}/batch 1024"), |b| b.iter(|| black_box(drain(&batch))));
        let chain = map_chain(ds, 4).filter((col("v") % lit(3.0)).gt(lit(1.0))).unwrap().batch(1024).unwrap();
        g.bench_function(format!("{source}/map x4+filter+batch"), |b| b.iter(|| black_box(drain(&chain))));
        let shuffle = ds.shuffle_with(10_000, Some(1), false).unwrap();
        g.bench_function(format!("{source}/shuffle 10k"), |b| b.iter(|| black_box(drain(&shuffle))));
    }
    // w1's shuffle: 18 float64 columns through a 10k buffer.
    let rows = 250_000;
    g.throughput(Throughput::Elements(rows as u64));
    let wide = wide(rows, 18).shuffle_with(10_000, Some(1), false).unwrap();
    g.bench_function("memory/shuffle 10k, 18 columns", |b| b.iter(|| black_box(drain(&wide))));
    let rows = 200_000;
    g.throughput(Throughput::Elements(rows as u64));
    let padded = token_lists(rows).padded_batch(64, PaddedBatchOptions::default()).unwrap();
    g.bench_function("memory/padded_batch 64, token lists", |b| b.iter(|| black_box(drain(&padded))));
    g.finish();
}

criterion_group!(operators, benches);
criterion_main!(operators);
