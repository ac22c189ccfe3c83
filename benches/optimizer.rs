//! The optimizer: how long it takes, and what it buys.
//!
//! - `optimize`: `flumen_optimizer::optimize` alone on prebuilt plans: the w4 chain below (7
//!   operators; every pass of a fresh dataset pays it before its first batch), plans of 10
//!   and 50 operators (targets: under 1 ms and under 20 ms), and `constant filter`,
//!   `map(f1 := -3).filter(f1 > -4)`, whose filter the fusion stage proves a no-op (it ran
//!   into a rule cycle: 18 s and 2.4 GB before the appliers skipped matches through no-ops).
//! - `w4 chain`: WORKLOADS.md's w4 shape, 4 expression maps + filter + batch(1024) over
//!   `range`: optimized, vectorized but with the fusion rules off, and with every rule off
//!   (each function called once per element, as tf.data runs it). Target: optimized at least
//!   2× the rules-off rate.
//! - `map+batch`: one expression map then batch(1024): pfor-vectorized, and with the vectorize
//!   rules off (the map runs once per element). Target: at least 10×.
//!
//! The per-element variants run about 160k elements/s for the w4 chain, so they run over
//! `N_PER_ELEMENT` (1M) elements instead of `N` (10M) to keep `cargo bench --bench optimizer`
//! within a few minutes; every variant declares `Throughput::Elements` for its own size, so
//! compare the elements/s criterion prints (the per-element cost does not depend on `N`).
//! The consumer only counts rows of the chunks it is handed.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use arrow::array::{Array, AsArray};
use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use flumen::crates::optimizer::{optimize, OptimizerConfig};
use flumen::prelude::*;
use flumen::Plan;

/// Elements of the vectorized runs.
const N: i64 = 10_000_000;
/// Elements of the per-element (rules off) runs.
const N_PER_ELEMENT: i64 = 1_000_000;

/// The fusion rules; switching them off leaves vectorization on.
const FUSION: [&str; 5] = ["map-fusion", "filter-fusion", "filter-hoist", "map-filter-fusion", "map-batch-fusion"];
/// The pfor rules.
const VECTORIZE: [&str; 4] = ["pfor-batch", "pfor-map-and-batch", "pfor-map", "pfor-filter"];

/// The consumer: rows (batches) handed out.
fn drain(ds: &Dataset) -> usize {
    ds.iter_chunks().map(|c| c.expect("pipeline runs").num_rows()).sum()
}

/// Elements delivered: the rows' list lengths for a batched first field (checked once per
/// variant, outside the measurement, so that variants are known to compute the same thing).
fn elements(ds: &Dataset) -> usize {
    ds.iter_chunks()
        .map(|c| {
            let c: RecordBatch = c.expect("pipeline runs");
            let col = c.column(0);
            match col.data_type() {
                DataType::List(_) => {
                    let offsets = col.as_list::<i32>().offsets();
                    (offsets[offsets.len() - 1] - offsets[0]) as usize
                }
                DataType::FixedSizeList(_, n) => col.len() * *n as usize,
                _ => c.num_rows(),
            }
        })
        .sum()
}

fn without(options: Options, rules: &[&str]) -> Options {
    rules.iter().fold(options, |o, r| o.with_optimization_rule(r, false))
}

// ---------- optimizer speed ----------

/// A realistic 10-operator pipeline: range → map → map → filter → map(select) → shuffle →
/// repeat → batch → take → prefetch.
fn plan_10() -> Plan {
    let x = cast(col("value"), DataType::Float64);
    Dataset::range(0, 1_000_000)
        .and_then(|d| {
            d.map(MapFunction::select([("x", x), ("y", col("value") % lit(10i64)), ("k", col("value") * lit(7i64))]))
        })
        .and_then(|d| d.map(MapFunction::with_fields([("z", col("x") * lit(2.0) + lit(1.0))])))
        .and_then(|d| d.filter(col("y").not_eq(lit(3i64))))
        .and_then(|d| d.map(MapFunction::select([("z", col("z")), ("w", sqrt(col("z")) * lit(0.5))])))
        .and_then(|d| d.shuffle(10_000, Some(42)))
        .and_then(|d| d.repeat(Some(2)))
        .and_then(|d| d.batch(256))
        .and_then(|d| d.take(1000))
        .and_then(|d| d.prefetch(Tunable::Autotune))
        .expect("10-operator plan")
        .plan()
        .clone()
}

/// A 50-operator pipeline: range, then 7 blocks of map → map → filter → map(select) →
/// filter → map → take over one float field `v`.
fn plan_50() -> Plan {
    let mut ds = Dataset::range(0, 1_000_000).expect("source");
    for i in 0..7 {
        let c = i as f64;
        let v = if i == 0 { cast(col("value"), DataType::Float64) } else { col("v") };
        ds = ds
            .map(MapFunction::select([("v", v.clone()), ("a", v * lit(1.5) + lit(c))]))
            .and_then(|d| d.map(MapFunction::with_fields([("b", col("a") - col("v"))])))
            .and_then(|d| d.filter(col("b").gt(lit(-1e12))))
            .and_then(|d| d.map(MapFunction::select([("v", col("a") + col("b") * lit(0.5))])))
            .and_then(|d| d.filter((floor(col("v")) % lit(7.0)).not_eq(lit(c))))
            .and_then(|d| d.map(MapFunction::with_fields([("v", abs(col("v")) * lit(0.25))])))
            .and_then(|d| d.take(900_000 - i * 1000))
            .expect("block");
    }
    ds.plan().clone()
}

fn count_operators(plan: &Plan) -> usize {
    1 + plan.inputs().iter().map(count_operators).sum::<usize>()
}

fn optimizer_speed(c: &mut Criterion) {
    let config = OptimizerConfig::default();
    let mut g = c.benchmark_group("optimize");
    g.warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    let w4 = w4_chain(2_000_000).plan().clone();
    let constant_filter = Dataset::range(0, 10)
        .and_then(|d| d.map(MapFunction::with_fields([("f1", lit(-3i64))])))
        .and_then(|d| d.filter(col("f1").gt(lit(-4i64))))
        .expect("constant filter")
        .plan()
        .clone();
    let plans = [
        ("w4 chain", w4, 7),
        ("10 operators", plan_10(), 10),
        ("50 operators", plan_50(), 50),
        ("constant filter", constant_filter, 3),
    ];
    for (name, plan, ops) in plans {
        assert_eq!(count_operators(&plan), ops, "{name}");
        optimize(&plan, &config).expect("optimizes");
        g.bench_function(name, |b| b.iter(|| black_box(optimize(black_box(&plan), &config).expect("optimizes"))));
    }
    g.finish();
}

// ---------- what the optimizer buys ----------

/// w4's shape with 4 maps: map(x → f64(3x+1)) → map(v → sqrt(v)·0.5) → filter(⌊v⌋ mod 3 ≠ 0)
/// → map(v → v²+1) → map(v → v/4 − 2) → batch(1024).
fn w4_chain(n: i64) -> Dataset {
    Dataset::range(0, n)
        .and_then(|d| {
            d.map(MapFunction::select([("v", cast(col("value") * lit(3i64) + lit(1i64), DataType::Float64))]))
        })
        .and_then(|d| d.map(MapFunction::select([("v", sqrt(col("v")) * lit(0.5))])))
        .and_then(|d| d.filter((floor(col("v")) % lit(3.0)).not_eq(lit(0.0))))
        .and_then(|d| d.map(MapFunction::select([("v", col("v") * col("v") + lit(1.0))])))
        .and_then(|d| d.map(MapFunction::select([("v", col("v") * lit(0.25) - lit(2.0))])))
        .and_then(|d| d.batch(1024))
        .expect("w4 chain")
}

/// One expression map then batch(1024).
fn map_batch(n: i64) -> Dataset {
    Dataset::range(0, n)
        .and_then(|d| {
            d.map(MapFunction::select([("v", sqrt(cast(col("value"), DataType::Float64)) * lit(0.5) + lit(1.0))]))
        })
        .and_then(|d| d.batch(1024))
        .expect("map+batch")
}

/// Benchmarks `build(n)` under each variant's options, after checking that variants of the
/// same size deliver the same elements.
fn variants(c: &mut Criterion, group: &str, build: fn(i64) -> Dataset, variants: &[(&str, i64, Options)]) {
    let mut g = c.benchmark_group(group);
    // One pass per iteration, the same number of iterations per sample: the per-element
    // variants take seconds per pass.
    g.sample_size(10).sampling_mode(SamplingMode::Flat).warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(4));
    let mut delivered = BTreeMap::new();
    for (name, n, options) in variants {
        let ds = build(*n).with_options(options.clone());
        let mut checked = false;
        g.throughput(Throughput::Elements(*n as u64));
        g.bench_function(format!("{name} ({}M)", n / 1_000_000), |b| {
            // Once, and only when the benchmark is selected: criterion calls this closure
            // for the warm-up and for every sample.
            if !checked {
                let got = elements(&ds);
                assert_eq!(*delivered.entry(*n).or_insert(got), got, "{group}/{name} delivers other elements");
                checked = true;
            }
            b.iter(|| black_box(drain(&ds)))
        });
    }
    g.finish();
}

fn optimizer_gains(c: &mut Criterion) {
    let on = Options::default();
    let vectorized_unfused = without(Options::default(), &FUSION);
    let off = Options::default().without_optimizations();
    variants(
        c,
        "w4 chain",
        w4_chain,
        &[
            ("optimized", N, on.clone()),
            ("vectorized, fusion off", N, vectorized_unfused),
            ("rules off", N_PER_ELEMENT, off),
            ("optimized", N_PER_ELEMENT, on.clone()),
        ],
    );
    variants(
        c,
        "map+batch",
        map_batch,
        &[
            ("pfor", N, on.clone()),
            ("vectorize off", N_PER_ELEMENT, without(Options::default(), &VECTORIZE)),
            ("pfor", N_PER_ELEMENT, on),
        ],
    );
}

criterion_group!(benches, optimizer_speed, optimizer_gains);
criterion_main!(benches);
