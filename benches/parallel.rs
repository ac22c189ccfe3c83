//! The parallel runtime and the autotuner, measured on the examples tf.data's own authors use
//! to motivate them. A plain bench binary: `cargo bench --bench parallel [-- CASE]`, where
//! `CASE` picks the cases whose name contains it (`figure4`, `two-stage`, `autotune-figure4`,
//! `autotune-w4`, `autotune-csv`, `autotune-w2`, `autotune-w6`, `autotune-closure`, `memory`;
//! `autotune` runs all six grids). Every
//! figure is the median of several rounds whose variants alternate, because this machine is
//! shared and noisy; ratios are taken within the run.
//!
//! - **`figure4`**: the tf.data paper's Figure 3 pipeline (`read → map(parse) → batch(10)`,
//!   all sequential) against its Figure 4 (`interleave(cycle 2, num_parallel_calls 2) →
//!   map(parse, num_parallel_calls 10) → batch(10) → prefetch(1)`), with the paper's
//!   simulated costs (§3.2), unscaled so that timer overshoot stays a small share of each
//!   sleep: 5 ms to read an element, 2 ms to parse one, 1 ms per batch of 10. Reads and
//!   parses sleep (they stand in for I/O and for compute on other cores), elements flow one
//!   by one (`chunk_rows` 1), and the per-batch latency compares with the paper's 71 ms
//!   (`(5+2)·10+1`) and 25 ms (`max(10·5/2, 10·2/10, 1)`). Figure 4 runs on a pool of 10 threads, so that its 10
//!   parse calls can sleep at once; a third row writes `AUTOTUNE` everywhere instead, with
//!   the default pool and CPU budget (the cores).
//! - **`two-stage`**: the multi-threaded generators tutorial's Example 3 (Tajbakhsh & Chiang,
//!   "Building Multi-threaded Custom Data Pipelines for Tensorflow"): a generator that loads
//!   a shard (a 20 ms sleep) and then yields its slices stalls its consumer once per shard;
//!   splitting it into a parallel interleave of loaders and a fast slicing stage
//!   (`flat_map(from_tensor_slices)`) hides the load behind the consumer's own work (a
//!   0.15 ms "training step" per element). Elements flow one by one (`chunk_rows` 1), except
//!   in a last row that shows the split pipeline with the default chunks. Reported: the
//!   consumer's wait in `next()` per element (p50, p99, max, stalls over 5 ms; the first
//!   element, which waits for at least the first load in every variant, is shown apart) and
//!   the total time.
//! - **`autotune-w4`, `autotune-csv`, `autotune-w2`, `autotune-w6`, `autotune-closure`**:
//!   `AUTOTUNE` everywhere (the tf.data paper's §3.3.2, and its Figure 7, where auto-tuned
//!   parallelism matches expert tuning on input-pipeline throughput) against a grid of fixed
//!   settings (map and filter parallelism 1/2/4, prefetch buffer 1/4, interleave parallelism
//!   1/2/4 where there is an interleave) on five workloads: w4 of `WORKLOADS.md` (an
//!   expression map chain over `range(2,000,000)`), a w1-like CSV pipeline (4 generated files,
//!   parallel interleave, normalizing map, filter, `batch(1024)`), w2 and w6 over TFRecord
//!   files of Examples the bench writes as `flumen gen-data` does (`workload_data.rs`: 400,000 and 200,000
//!   records, the sizes of WORKLOADS.md), and a per-element Rust closure of about 20 µs of arithmetic over
//!   `range(50,000)`, `batch(256)`. Grid configs
//!   run with autotuning off, so nothing in them is tuned (an interleave's per-input
//!   read-ahead then takes tf.data's untuned 2); the `AUTOTUNE` config runs with the
//!   defaults. Rows/s per config, the best fixed config, and `AUTOTUNE`/best; every config's
//!   checksum must agree. Then the best fixed config and `AUTOTUNE` run again, alternating,
//!   for three times as many fresh rounds: the grid's best is the largest of many noisy medians and so
//!   biased upwards, and this head-to-head ratio is the one without that bias.
//! - **`autotune-figure4`**: the `figure4` pipeline's `AUTOTUNE` against a grid of fixed
//!   settings (interleave parallelism 1/2, map 1/2/4/8, prefetch 1/2/4), as the grids below,
//!   at 2 and at 8 pool threads (`Options::with_threads`; the tuner's CPU budget stays the
//!   cores); once with reads of 5 ms a record (read-bound) and once of 5 ms a file
//!   (parse-bound: the 2 ms parses, sleeps, gain from more calls than cores).
//! - **`memory`**: 4 MB elements (a float32 tensor of 2^20 values each) through a parallel
//!   closure map (`AUTOTUNE`) and a prefetch (`AUTOTUNE`, or a fixed 100 elements, 400 MB)
//!   to a slow consumer (10 ms per element, `FLUMEN_PARALLEL_CONSUMER_US`), under
//!   `Options::with_ram_budget(256 MiB)` and under 64 GiB, each with glibc's default malloc
//!   and with `MALLOC_MMAP_THRESHOLD_` fixed at 128 KiB. Each run is a child process (this
//!   binary re-executed), so its peak RSS (`VmHWM`) is its own; reported with the RSS at the
//!   child's start and their difference, the pipeline's own. The budget counts the buffers,
//!   the running map tasks (input and output), the prefetch's pull in progress and the
//!   element the consumer holds; RSS also counts the process itself (`before`), what the
//!   map's progress rule lets past the budget (one task's input: the prefetch made room
//!   for the element its pull returns, not for the input the map reads to make it), and what
//!   the allocator keeps: by default glibc serves 4 MB blocks from per-thread arenas that keep
//!   freed memory resident, which the fixed threshold avoids.
//!
//! Scale: `FLUMEN_PARALLEL_ROUNDS` (default 3; at least 31 for `autotune-w4` and 15 for
//! `autotune-csv`, `autotune-w2` and `autotune-w6`, whose passes are short),
//! `FLUMEN_PARALLEL_CSV_ROWS` (default 400000), `FLUMEN_PARALLEL_W2_RECORDS` (400000),
//! `FLUMEN_PARALLEL_W6_RECORDS` (200000),
//! `FLUMEN_PARALLEL_CLOSURE_ROWS` (default 50000). `FLUMEN_PARALLEL_ANALYZE=1` prints the
//! `explain analyze` of each `AUTOTUNE` run and of each memory run (what the tuner chose,
//! and when).

#[path = "common/w1_csv.rs"]
mod w1_csv;
#[path = "../crates/cli/src/workload_data.rs"]
mod workload_data;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Array, ArrayRef, AsArray, FixedSizeListArray, Float32Array, Float64Array, Int64Array};
use arrow::datatypes::{DataType, Float32Type, Float64Type, Int64Type};
use arrow::record_batch::RecordBatch;
use flumen::prelude::*;
use flumen::{Options, Result};

/// Set in a child process: the memory run it is to do (see [`memory_child`]).
const CHILD: &str = "FLUMEN_PARALLEL_MEMORY_CHILD";

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn analyze_wanted() -> bool {
    std::env::var("FLUMEN_PARALLEL_ANALYZE").is_ok_and(|v| v == "1")
}

fn median(xs: &[f64]) -> f64 {
    let mut xs = xs.to_vec();
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

/// The `p` quantile (0..=1) of sorted values, nearest rank.
fn quantile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn sleep_us(us: u64) {
    std::thread::sleep(Duration::from_micros(us));
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn calls(n: Tunable) -> Parallel {
    Parallel { num_parallel_calls: n, deterministic: None }
}

fn show(t: Tunable) -> String {
    match t {
        Tunable::Fixed(n) => n.to_string(),
        Tunable::Autotune => "AUTOTUNE".into(),
        Tunable::Default => "-".into(),
    }
}

fn spec(fields: Vec<FieldSpec>) -> ElementSpec {
    ElementSpec::new(fields).expect("valid spec")
}

/// The int64 of a one-row batch's first column.
fn first_int(row: &RecordBatch) -> i64 {
    row.column(0).as_primitive::<Int64Type>().value(0)
}

/// One element of `spec`'s single field from one array.
fn element(spec: &ElementSpec, column: ArrayRef) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(spec.arrow_schema(), vec![column])?)
}

/// A one-element column of fixed-shape float32 tensor type `dt` holding `values` (row-major).
fn f32_tensor(dt: &DataType, values: Vec<f32>) -> ArrayRef {
    fn wrap(dt: &DataType, flat: ArrayRef) -> ArrayRef {
        match dt {
            DataType::FixedSizeList(item, n) => {
                Arc::new(FixedSizeListArray::new(item.clone(), *n, wrap(item.data_type(), flat), None))
            }
            _ => flat,
        }
    }
    wrap(dt, Arc::new(Float32Array::from(values)))
}

/// The sum of every float in `a` (nested lists included), row by row so that sliced arrays
/// count only their own rows.
fn float_sum(a: &dyn Array) -> f64 {
    match a.data_type() {
        DataType::Float64 => a.as_primitive::<Float64Type>().iter().flatten().sum(),
        DataType::Float32 => a.as_primitive::<Float32Type>().iter().flatten().map(f64::from).sum(),
        DataType::Int64 => a.as_primitive::<Int64Type>().iter().flatten().map(|v| v as f64).sum(),
        DataType::List(_) => (0..a.len()).map(|i| float_sum(&a.as_list::<i32>().value(i))).sum(),
        DataType::FixedSizeList(..) => (0..a.len()).map(|i| float_sum(&a.as_fixed_size_list().value(i))).sum(),
        other => panic!("no float sum of {other}"),
    }
}

/// What one pass delivered.
struct Pass {
    /// Elements; a batch counts its rows.
    rows: usize,
    secs: f64,
    /// The sum of the checksum field.
    checksum: f64,
    /// `explain analyze` of the pass, when asked for.
    analysis: Option<String>,
}

/// One full pass over `ds`, summing float field `field` (when given) as the checksum.
fn drain(ds: &Dataset, field: Option<&str>, analyze: bool) -> Pass {
    let start = Instant::now();
    let mut it = ds.iter();
    let (mut rows, mut checksum) = (0, 0.0);
    for element in it.by_ref() {
        let element = element.expect("the pipeline runs");
        rows += element.num_rows();
        if let Some(f) = field {
            checksum += float_sum(element.column_by_name(f).expect("checksum field"));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let analysis = analyze.then(|| it.analyze().expect("explain analyze"));
    Pass { rows, secs, checksum, analysis }
}

// ---------------------------------------------------------------------------------------
// The tf.data paper's Figure 3 vs Figure 4
// ---------------------------------------------------------------------------------------

/// The paper's costs, scaled down 10x: microseconds to read an element, to parse one, and
/// to batch 10.
const READ_US: u64 = 5_000;
const PARSE_US: u64 = 2_000;
const BATCH_US: u64 = 1_000;
const FIG_BATCH: u64 = 10;
const FIG_FILES: i64 = 2;
const FIG_RECORDS: i64 = 60;

/// `range(files) → interleave(file → records, cycle = files)`: each "file" a generator of
/// one-element chunks that sleeps `READ_US` per element, or once per file when `per_file`.
fn figure_records(parallel: Parallel, per_file: bool) -> Result<Dataset> {
    let record = spec(vec![FieldSpec::scalar("record", DType::Int64)]);
    let read = DatasetFunction::closure(None, record.clone(), move |row| {
        let file = first_int(row);
        let record = record.clone();
        Dataset::from_generator(None, record.clone(), move || {
            let record = record.clone();
            Box::new((0..FIG_RECORDS).map(move |i| {
                if !per_file || i == 0 {
                    sleep_us(READ_US);
                }
                element(&record, Arc::new(Int64Array::from(vec![file * FIG_RECORDS + i])))
            }))
        })
    });
    Dataset::range(0, FIG_FILES)?.interleave_with(read, Tunable::Fixed(FIG_FILES as u32), 1, parallel)
}

/// Figure 3 or 4: records → map(parse) → batch(10) → map(batch cost) [→ prefetch].
fn figure_pipeline(interleave: Parallel, parse: Parallel, prefetch: Option<Tunable>) -> Result<Dataset> {
    figure_pipeline_reading(interleave, parse, prefetch, false)
}

/// [`figure_pipeline`], its reads costing `READ_US` per file rather than per record when
/// `per_file`.
fn figure_pipeline_reading(
    interleave: Parallel,
    parse: Parallel,
    prefetch: Option<Tunable>,
    per_file: bool,
) -> Result<Dataset> {
    let parsed = spec(vec![FieldSpec::scalar("x", DType::Float64)]);
    let out = parsed.clone();
    let parse_fn = MapFunction::element(None, parsed, move |row| {
        sleep_us(PARSE_US);
        element(&out, Arc::new(Float64Array::from(vec![first_int(row) as f64 * 0.5])))
    });
    let batched = figure_records(interleave, per_file)?.map_with(parse_fn, parse)?.batch(FIG_BATCH)?;
    let batch_cost = MapFunction::element(None, batched.element_spec().clone(), |row| {
        sleep_us(BATCH_US);
        Ok(row.clone())
    });
    let ds = batched.map(batch_cost)?;
    match prefetch {
        Some(n) => ds.prefetch(n),
        None => Ok(ds),
    }
}

/// What `sleep` of `us` microseconds really takes here, in milliseconds (timer slack and
/// wake-up latency make it longer).
fn sleep_cost(us: u64) -> f64 {
    let start = Instant::now();
    for _ in 0..50 {
        sleep_us(us);
    }
    ms(start.elapsed()) / 50.0
}

fn figure4_bench(rounds: usize) {
    let one_by_one = Options::default().with_chunk_rows(1);
    let none = calls(Tunable::Default);
    let variants: Vec<(&str, Dataset)> = vec![
        (
            "Figure 3: sequential, no prefetch",
            figure_pipeline(none, none, None).unwrap().with_options(one_by_one.clone().with_autotune(false)),
        ),
        (
            "Figure 4: interleave 2/2, map 10, prefetch(1)",
            figure_pipeline(calls(Tunable::Fixed(2)), calls(Tunable::Fixed(10)), Some(Tunable::Fixed(1)))
                .unwrap()
                .with_options(one_by_one.clone().with_autotune(false).with_threads(10)),
        ),
        (
            "Figure 4, AUTOTUNE everywhere",
            figure_pipeline(calls(Tunable::Autotune), calls(Tunable::Autotune), Some(Tunable::Autotune))
                .unwrap()
                .with_options(one_by_one),
        ),
    ];
    let elements = (FIG_FILES * FIG_RECORDS) as usize;
    let batches = elements.div_ceil(FIG_BATCH as usize);
    let mut per_batch = vec![vec![]; variants.len()];
    let mut analyses = vec![None; variants.len()];
    for round in 0..rounds {
        for (i, (_, ds)) in variants.iter().enumerate() {
            let pass = drain(ds, None, analyze_wanted() && round + 1 == rounds && i == 2);
            assert_eq!(pass.rows, elements, "every record arrives once");
            per_batch[i].push(pass.secs * 1e3 / batches as f64);
            analyses[i] = pass.analysis;
        }
    }
    let (read, parse, batch) = (sleep_cost(READ_US), sleep_cost(PARSE_US), sleep_cost(BATCH_US));
    let b = FIG_BATCH as f64;
    let model3 = (read + parse) * b + batch;
    let model4 = (b * read / 2.0).max(b * parse / 10.0).max(batch);
    println!(
        "## tf.data paper Figure 3 vs Figure 4, the paper's costs (read {} ms, parse {} ms, batch {} ms), \
         {FIG_FILES} files x {FIG_RECORDS} records, batch({FIG_BATCH}), chunk_rows 1",
        READ_US as f64 / 1e3,
        PARSE_US as f64 / 1e3,
        BATCH_US as f64 / 1e3
    );
    println!("| pipeline | ms / batch | paper | model with this machine's sleeps | speed-up |");
    println!("|---|---|---|---|---|");
    let base = median(&per_batch[0]);
    let expected = [("71", model3), ("25", model4), ("25", model4)];
    for (i, (name, _)) in variants.iter().enumerate() {
        let m = median(&per_batch[i]);
        let (paper, model) = expected[i];
        println!("| {name} | {m:.1} | {paper} | {model:.1} | {:.2}x |", base / m);
    }
    println!(
        "(sleeps of {} / {} / {} ms take {read:.3} / {parse:.3} / {batch:.3} ms here; \
         {batches} batches per pass, medians of {rounds} rounds)",
        READ_US as f64 / 1e3,
        PARSE_US as f64 / 1e3,
        BATCH_US as f64 / 1e3
    );
    if let Some(a) = &analyses[2] {
        println!("explain analyze of the AUTOTUNE run:\n{a}");
    }
    println!();
}

// ---------------------------------------------------------------------------------------
// The two-stage generator of the multi-threaded generators tutorial
// ---------------------------------------------------------------------------------------

const LOAD_US: u64 = 20_000;
const SHARDS: i64 = 16;
const SLICES: i64 = 64;
const SLICE_WIDTH: i64 = 256;
const STEP_US: u64 = 150;
const LOADERS: i64 = 4;

/// The values of shard `s` (`SLICES` x `SLICE_WIDTH`), after a `LOAD_US` "load".
fn load_shard(s: i64) -> Vec<f32> {
    sleep_us(LOAD_US);
    (0..SLICES * SLICE_WIDTH).map(|i| (s * SLICES * SLICE_WIDTH + i) as f32).collect()
}

fn slice_spec() -> ElementSpec {
    spec(vec![FieldSpec::tensor("slices", DType::Float32, vec![SLICE_WIDTH])])
}

fn shard_spec() -> ElementSpec {
    spec(vec![FieldSpec::tensor("slices", DType::Float32, vec![SLICES, SLICE_WIDTH])])
}

/// The tutorial's first generator: load a shard, then yield its slices one at a time.
fn naive_generator() -> Result<Dataset> {
    let slice = slice_spec();
    Dataset::from_generator(None, slice.clone(), move || {
        let slice = slice.clone();
        let dt = slice.arrow_schema().field(0).data_type().clone();
        Box::new((0..SHARDS).flat_map(move |s| {
            let values = load_shard(s);
            let (slice, dt) = (slice.clone(), dt.clone());
            (0..SLICES as usize).map(move |k| {
                let w = SLICE_WIDTH as usize;
                element(&slice, f32_tensor(&dt, values[k * w..(k + 1) * w].to_vec()))
            })
        }))
    })
}

/// A generator of whole loaded shards (one element each): `shards` in order.
fn shard_loader(shards: Vec<i64>) -> Result<Dataset> {
    let shard = shard_spec();
    Dataset::from_generator(None, shard.clone(), move || {
        let (shard, shards) = (shard.clone(), shards.clone());
        let dt = shard.arrow_schema().field(0).data_type().clone();
        Box::new(shards.into_iter().map(move |s| element(&shard, f32_tensor(&dt, load_shard(s)))))
    })
}

/// The tutorial's Example 3, first try: `LOADERS` load-then-slice generators (each over
/// every `LOADERS`-th shard) read by a parallel interleave.
fn parallel_generators() -> Result<Dataset> {
    let open = DatasetFunction::closure(None, slice_spec(), |row| {
        // Load-then-slice in one inner dataset: the slices of a shard follow its load.
        shard_loader((first_int(row)..SHARDS).step_by(LOADERS as usize).collect())?
            .flat_map(DatasetFunction::FromTensorSlices)
    });
    let fixed = Tunable::Fixed(LOADERS as u32);
    Dataset::range(0, LOADERS)?.interleave_with(open, fixed, 1, calls(fixed))
}

/// The tutorial's fix: stage 1 loads shards in a parallel interleave (`LOADERS` loaders, or
/// one inner dataset per shard when `per_shard`), stage 2 slices them.
fn split(per_shard: bool) -> Result<Dataset> {
    let fixed = Tunable::Fixed(LOADERS as u32);
    let loads = if per_shard {
        let open = DatasetFunction::closure(None, shard_spec(), |row| shard_loader(vec![first_int(row)]));
        Dataset::range(0, SHARDS)?.interleave_with(open, fixed, 1, calls(fixed))?
    } else {
        let open = DatasetFunction::closure(None, shard_spec(), |row| {
            shard_loader((first_int(row)..SHARDS).step_by(LOADERS as usize).collect())
        });
        Dataset::range(0, LOADERS)?.interleave_with(open, fixed, 1, calls(fixed))?
    };
    loads.flat_map(DatasetFunction::FromTensorSlices)
}

/// Per-element waits of one pass of a consumer that works `STEP_US` per element.
struct Waits {
    first: f64,
    p50: f64,
    p99: f64,
    max: f64,
    stalls: usize,
    total: f64,
}

fn consume(ds: &Dataset) -> Waits {
    let start = Instant::now();
    let mut it = ds.iter();
    let mut waits = Vec::with_capacity((SHARDS * SLICES) as usize);
    loop {
        let t = Instant::now();
        let Some(element) = it.next() else { break };
        waits.push(ms(t.elapsed()));
        element.expect("the pipeline runs");
        sleep_us(STEP_US);
    }
    let total = ms(start.elapsed());
    assert_eq!(waits.len() as i64, SHARDS * SLICES, "every slice arrives once");
    let first = waits.remove(0);
    waits.sort_by(|a, b| a.total_cmp(b));
    Waits {
        first,
        p50: quantile(&waits, 0.5),
        p99: quantile(&waits, 0.99),
        max: *waits.last().unwrap(),
        stalls: waits.iter().filter(|w| **w > 5.0).count(),
        total,
    }
}

fn two_stage_bench(rounds: usize) {
    let one_by_one = Options::default().with_chunk_rows(1);
    let variants: Vec<(&str, Dataset)> = vec![
        (
            "naive generator (load, then slices)",
            naive_generator().unwrap().with_options(one_by_one.clone().with_autotune(false)),
        ),
        (
            "naive generator + prefetch(AUTOTUNE)",
            naive_generator().unwrap().prefetch(Tunable::Autotune).unwrap().with_options(one_by_one.clone()),
        ),
        (
            "4 load+slice generators, parallel interleave",
            parallel_generators().unwrap().with_options(one_by_one.clone()),
        ),
        ("split: 4 parallel loaders -> flat_map(slices)", split(false).unwrap().with_options(one_by_one.clone())),
        (
            "split: one loader per shard, interleave 4/4 -> flat_map(slices)",
            split(true).unwrap().with_options(one_by_one),
        ),
        ("split: 4 parallel loaders, default chunk_rows", split(false).unwrap()),
    ];
    let mut results: Vec<Vec<Waits>> = variants.iter().map(|_| vec![]).collect();
    for _ in 0..rounds {
        for (i, (_, ds)) in variants.iter().enumerate() {
            results[i].push(consume(ds));
        }
    }
    println!(
        "## Two-stage generator: {SHARDS} shards, each a {} ms load then {SLICES} slices of f32[{SLICE_WIDTH}]; \
         the consumer works {} ms per element",
        LOAD_US as f64 / 1e3,
        STEP_US as f64 / 1e3
    );
    println!("| pipeline | first (ms) | wait p50 (ms) | p99 (ms) | max (ms) | waits > 5 ms | total (ms) |");
    println!("|---|---|---|---|---|---|---|");
    for ((name, _), r) in variants.iter().zip(&results) {
        let m = |f: fn(&Waits) -> f64| median(&r.iter().map(f).collect::<Vec<_>>());
        println!(
            "| {name} | {:.1} | {:.3} | {:.2} | {:.2} | {:.0} | {:.0} |",
            m(|w| w.first),
            m(|w| w.p50),
            m(|w| w.p99),
            m(|w| w.max),
            m(|w| w.stalls as f64),
            m(|w| w.total)
        );
    }
    let ideal = (SHARDS * SLICES) as f64 * sleep_cost(STEP_US) + LOAD_US as f64 / 1e3;
    println!(
        "(waits exclude the first element's; the consumer alone needs about {ideal:.0} ms; \
         medians of {rounds} rounds)"
    );
    println!();
}

// ---------------------------------------------------------------------------------------
// AUTOTUNE against a grid of fixed settings
// ---------------------------------------------------------------------------------------

/// One point of the grid (or `AUTOTUNE` everywhere).
#[derive(Clone, Copy)]
struct Config {
    /// Interleave parallelism (`Default` where the workload has no interleave).
    interleave: Tunable,
    map: Tunable,
    prefetch: Tunable,
}

impl Config {
    fn autotune(has_interleave: bool) -> Self {
        let interleave = if has_interleave { Tunable::Autotune } else { Tunable::Default };
        Config { interleave, map: Tunable::Autotune, prefetch: Tunable::Autotune }
    }

    fn is_autotune(&self) -> bool {
        self.map == Tunable::Autotune
    }

    fn label(&self) -> String {
        let interleave = if self.interleave == Tunable::Default {
            String::new()
        } else {
            format!("interleave {}, ", show(self.interleave))
        };
        format!("{interleave}map {}, prefetch {}", show(self.map), show(self.prefetch))
    }
}

/// Map parallelism x prefetch buffer (x interleave parallelism), then `AUTOTUNE`.
fn grid(has_interleave: bool) -> Vec<Config> {
    let interleaves = if has_interleave { [1, 2, 4].map(Tunable::Fixed).to_vec() } else { vec![Tunable::Default] };
    let mut configs = Vec::new();
    for interleave in interleaves {
        for map in [1, 2, 4] {
            for prefetch in [1, 4] {
                configs.push(Config { interleave, map: Tunable::Fixed(map), prefetch: Tunable::Fixed(prefetch) });
            }
        }
    }
    configs.push(Config::autotune(has_interleave));
    configs
}

/// Runs every config of `grid` `rounds` times, alternating, and prints rows/s, the best
/// fixed config, `AUTOTUNE` against it, and whether the checksums agree.
fn compare(title: &str, rounds: usize, configs: &[Config], field: &str, build: impl Fn(Config) -> Result<Dataset>) {
    compare_with(title, rounds, configs, field, &Options::default(), build)
}

/// [`compare`] with `base` options for every config (autotuning off for the fixed ones).
fn compare_with(
    title: &str,
    rounds: usize,
    configs: &[Config],
    field: &str,
    base: &Options,
    build: impl Fn(Config) -> Result<Dataset>,
) {
    let datasets: Vec<Dataset> = configs
        .iter()
        .map(|c| {
            let options = if c.is_autotune() { base.clone() } else { base.clone().with_autotune(false) };
            let ds = build(*c).expect("the pipeline builds").with_options(options);
            ds.optimized_plan().expect("the pipeline optimizes"); // not timed
            ds
        })
        .collect();
    let mut speed = vec![vec![]; configs.len()];
    let mut sums = vec![0.0; configs.len()];
    let mut rows = 0;
    for round in 0..rounds {
        for (i, (c, ds)) in configs.iter().zip(&datasets).enumerate() {
            let pass = drain(ds, Some(field), analyze_wanted() && c.is_autotune() && round + 1 == rounds);
            speed[i].push(pass.rows as f64 / pass.secs);
            sums[i] = pass.checksum;
            rows = pass.rows;
            if let Some(a) = pass.analysis {
                println!("explain analyze of the AUTOTUNE run of {title}:\n{a}");
            }
        }
    }
    let speed: Vec<f64> = speed.iter().map(|s| median(s)).collect();
    let fixed = configs.iter().zip(&speed).enumerate().filter(|(_, (c, _))| !c.is_autotune());
    let (best, _) = fixed.max_by(|(_, (_, a)), (_, (_, b))| a.total_cmp(b)).expect("a fixed config");
    let auto = configs.iter().position(Config::is_autotune).expect("an AUTOTUNE config");
    println!("## AUTOTUNE vs fixed settings: {title}");
    println!("| config | rows/s | vs best fixed |");
    println!("|---|---|---|");
    for (i, c) in configs.iter().enumerate() {
        let mark = if i == best { " (best fixed)" } else { "" };
        println!("| {}{mark} | {:.0} | {:.2} |", c.label(), speed[i], speed[i] / speed[best]);
    }
    let agree = sums.iter().all(|s| (s - sums[0]).abs() <= 1e-9 * sums[0].abs().max(1.0));
    let checksums = if agree {
        format!("all {} equal ({field} sums to {:.6e})", sums.len(), sums[0])
    } else {
        format!("DIFFER: {sums:?}")
    };
    println!(
        "Grid: best fixed {} at {:.0} rows/s; AUTOTUNE {:.0} rows/s ({:.2} of it). \
         {rows} rows per pass, medians of {rounds} rounds. Checksums: {checksums}.",
        configs[best].label(),
        speed[best],
        speed[auto],
        speed[auto] / speed[best]
    );
    // The grid's best is the largest of many noisy medians, so it is biased upwards (the
    // winner's curse: with a dozen configs within a few percent, the luckiest one wins).
    // Fresh rounds of just the two, alternating, measure the ratio without that bias.
    // Two configs a round against the grid's whole list (7 to 19 configs): three times the
    // rounds still cost less than the grid did.
    let head_rounds = 3 * rounds;
    let (mut fixed_speed, mut auto_speed) = (Vec::new(), Vec::new());
    for _ in 0..head_rounds {
        for (i, out) in [(best, &mut fixed_speed), (auto, &mut auto_speed)] {
            let pass = drain(&datasets[i], Some(field), false);
            out.push(pass.rows as f64 / pass.secs);
        }
    }
    let (fixed_speed, auto_speed) = (median(&fixed_speed), median(&auto_speed));
    println!(
        "Head to head ({head_rounds} fresh rounds of the two, alternating): {} at {fixed_speed:.0} rows/s, \
         AUTOTUNE at {auto_speed:.0} rows/s; AUTOTUNE / best fixed = {:.2}.",
        configs[best].label(),
        auto_speed / fixed_speed
    );
    println!();
}

/// w4: range(2,000,000) → map(x → f64(3x+1)) → map(v → sqrt(v)·0.5) → filter(floor(v) mod 3
/// ≠ 0) → map(v → v·v+1) → batch(4096) [→ prefetch].
fn w4(c: Config) -> Result<Dataset> {
    let p = calls(c.map);
    Dataset::range(0, 2_000_000)?
        .map_with(MapFunction::select([("v", cast(col("value") * lit(3i64) + lit(1i64), DataType::Float64))]), p)?
        .map_with(MapFunction::select([("v", sqrt(col("v")) * lit(0.5))]), p)?
        .filter_with((floor(col("v")) % lit(3.0)).not_eq(lit(0.0)), p)?
        .map_with(MapFunction::select([("v", col("v") * col("v") + lit(1.0))]), p)?
        .batch(4096)?
        .prefetch(c.prefetch)
}

/// w1 without its shuffle: interleave(CSV files, cycle 4, block 16) → map (x_j, cross,
/// label) → filter → batch(1024) → prefetch.
fn w1(dir: &Path, c: Config) -> Result<Dataset> {
    let files = Dataset::list_files(&format!("{}/*.csv", dir.display()), false, None)?;
    let read = DatasetFunction::read_file("filename", FileRead::Csv(CsvOptions::default()));
    let fields = w1_csv::w1_fields();
    files
        .interleave_with(read, Tunable::Fixed(4), 16, calls(c.interleave))?
        .map_with(MapFunction::select(fields), calls(c.map))?
        .filter_with(col("x0").gt(lit(-1.5)).and(col("label").not_eq(lit(9i64))), calls(c.map))?
        .batch(1024)?
        .prefetch(c.prefetch)
}

/// w2: interleave(8 TFRecord files, cycle 8, block 1) → map(parse_example: features
/// f32[64], label, id, weight) → map(features × weight) → filter(label < 8) → batch(256,
/// drop_remainder) → prefetch.
fn w2(paths: &[String], c: Config) -> Result<Dataset> {
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    let read = FileRead::TfRecord(RecordCompression::None);
    Dataset::splits(&paths, read.clone())?
        .interleave_with(DatasetFunction::ReadSplit(read), Tunable::Fixed(8), 1, calls(c.interleave))?
        .map_with(MapFunction::parse_example("record", workload_data::w2_features())?, calls(c.map))?
        .map_with(workload_data::w2_scale(), calls(c.map))?
        .filter_with(col("label").lt(lit(8i64)), calls(c.map))?
        .batch_with(256, true)?
        .prefetch(c.prefetch)
}

/// w6: interleave(4 TFRecord files, cycle 4, block 1) → map(parse_example: tokens int64
/// varlen, label) → filter(len(tokens) ≥ 8) → bucket_by_sequence_length(boundaries [32, 64,
/// 128], batch sizes [128, 64, 32, 16], pad 0) → prefetch.
fn w6(paths: &[String], c: Config) -> Result<Dataset> {
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    let read = FileRead::TfRecord(RecordCompression::None);
    let options = BucketOptions {
        padding_values: std::collections::BTreeMap::from([("tokens".to_string(), lit(0i64))]),
        ..Default::default()
    };
    Dataset::splits(&paths, read.clone())?
        .interleave_with(DatasetFunction::ReadSplit(read), Tunable::Fixed(4), 1, calls(c.interleave))?
        .map_with(MapFunction::parse_example("record", workload_data::w6_features())?, calls(c.map))?
        .filter_with(length(col("tokens")).gt_eq(lit(8i64)), calls(c.map))?
        .bucket_by_sequence_length(length(col("tokens")), vec![32, 64, 128], vec![128, 64, 32, 16], options)?
        .prefetch(c.prefetch)
}

/// About `iters` dependent multiply-add-sqrt steps: arithmetic the compiler cannot skip.
fn kernel(v: i64, iters: u32) -> f64 {
    let mut x = 1.0 + (v % 1024) as f64 / 1024.0;
    for i in 0..std::hint::black_box(iters) {
        x = (x * x + f64::from(i)).sqrt();
    }
    x
}

/// The kernel's iterations for about `us` microseconds per call on this machine.
fn calibrate(us: f64) -> u32 {
    let probe = 1000;
    let start = Instant::now();
    let mut sink = 0.0;
    for v in 0..500 {
        sink += kernel(std::hint::black_box(v), probe);
    }
    std::hint::black_box(sink);
    let per_call_us = start.elapsed().as_secs_f64() * 1e6 / 500.0;
    ((us / per_call_us) * f64::from(probe)).round().max(1.0) as u32
}

/// range(rows) → map(per-element closure of `iters` kernel steps) → batch(256) → prefetch.
fn closure_workload(rows: i64, iters: u32, c: Config) -> Result<Dataset> {
    let out = spec(vec![FieldSpec::scalar("y", DType::Float64)]);
    let schema = out.clone();
    let f = MapFunction::element(None, out, move |row| {
        element(&schema, Arc::new(Float64Array::from(vec![kernel(first_int(row), iters)])))
    });
    Dataset::range(0, rows)?.map_with(f, calls(c.map))?.batch(256)?.prefetch(c.prefetch)
}

/// The Figure 4 pipeline's grid: interleave parallelism 1/2 (its cycle is 2), map 1/2/4/8,
/// prefetch 1/2/4.
fn figure4_grid() -> Vec<Config> {
    let mut configs = Vec::new();
    for interleave in [1, 2] {
        for map in [1, 2, 4, 8] {
            for prefetch in [1, 2, 4] {
                configs.push(Config {
                    interleave: Tunable::Fixed(interleave),
                    map: Tunable::Fixed(map),
                    prefetch: Tunable::Fixed(prefetch),
                });
            }
        }
    }
    configs.push(Config::autotune(true));
    configs
}

fn autotune_figure4_bench(rounds: usize) {
    for (per_file, reads) in [(false, "read 5 ms a record"), (true, "read 5 ms a file")] {
        for threads in [2, 8] {
            let title = format!(
                "the tf.data paper's Figure 4 pipeline ({reads}, parse 2 ms, batch(10) + 1 ms; sleeps), \
                 {FIG_FILES} files x {FIG_RECORDS} records, chunk_rows 1, {threads} threads"
            );
            let base = Options::default().with_chunk_rows(1).with_threads(threads);
            compare_with(&title, rounds, &figure4_grid(), "x", &base, |c| {
                figure_pipeline_reading(calls(c.interleave), calls(c.map), Some(c.prefetch), per_file)
            });
        }
    }
}

fn autotune_w4_bench(rounds: usize) {
    // A pass takes about 20 ms, so scheduling noise moves single passes by ±20%: 31 rounds
    // (a few seconds) steady the medians enough to tell configs 5% apart.
    let title = "w4, range(2000000) -> 3 expression maps + filter -> batch(4096)";
    compare(title, rounds.max(31), &grid(false), "v", w4);
}

fn autotune_csv_bench(rounds: usize) {
    let rows = env("FLUMEN_PARALLEL_CSV_ROWS", 400_000);
    let dir = tempfile::tempdir().unwrap();
    w1_csv::write_csv(dir.path(), rows);
    let title = format!("w1-like, 4 CSV files ({rows} rows) -> interleave(cycle 4) -> map -> filter -> batch(1024)");
    // A pass takes about 0.1 s: 15 rounds cost half a minute.
    compare(&title, rounds.max(15), &grid(true), "cross", |c| w1(dir.path(), c));
}

fn autotune_w2_bench(rounds: usize) {
    let per_file = env("FLUMEN_PARALLEL_W2_RECORDS", 400_000) / 8;
    let dir = tempfile::tempdir().unwrap();
    let paths = workload_data::examples(dir.path(), per_file, &mut workload_data::Rng(42)).unwrap();
    let title = format!("w2, 8 TFRecord files ({} Examples) -> interleave(cycle 8) -> parse_example -> map -> filter -> batch(256, drop_remainder)", per_file * 8);
    // A pass takes about 0.15 s: 15 rounds cost 45 s. Shorter passes are tuned on less: at
    // 160,000 records (60 ms) AUTOTUNE reached 0.89 of the best, at 400,000 0.96.
    compare(&title, rounds.max(15), &grid(true), "features", |c| w2(&paths, c));
}

fn autotune_w6_bench(rounds: usize) {
    let per_file = env("FLUMEN_PARALLEL_W6_RECORDS", 200_000) / 4;
    let dir = tempfile::tempdir().unwrap();
    let paths = workload_data::text(dir.path(), per_file, &mut workload_data::Rng(42)).unwrap();
    let title = format!("w6, 4 TFRecord files ({} Examples) -> interleave(cycle 4) -> parse_example -> filter -> bucket_by_sequence_length", per_file * 4);
    compare(&title, rounds.max(15), &grid(true), "tokens", |c| w6(&paths, c));
}

fn autotune_closure_bench(rounds: usize) {
    let rows = env("FLUMEN_PARALLEL_CLOSURE_ROWS", 50_000) as i64;
    let iters = calibrate(20.0);
    let title = format!("range({rows}) -> map(closure, ~20 us/element: {iters} sqrt steps) -> batch(256)");
    compare(&title, rounds, &grid(false), "y", |c| closure_workload(rows, iters, c));
}

// ---------------------------------------------------------------------------------------
// Memory under a RAM budget
// ---------------------------------------------------------------------------------------

const TENSOR: i64 = 1 << 20;
const BIG_ELEMENTS: i64 = 120;
const BUDGET_MIB: u64 = 256;
/// What glibc's `MALLOC_MMAP_THRESHOLD_` is set to in the runs that fix it.
const MMAP_THRESHOLD: &str = "131072";

/// The consumer's work per element, in microseconds (`FLUMEN_PARALLEL_CONSUMER_US`).
fn consumer_us() -> u64 {
    // Well above what producing and mapping an element costs on two cores (about 2 to 3 ms),
    // so that the buffers run ahead until the budget stops them: with a consumer barely
    // slower than the producer, the budget is reached in some runs and not others.
    env("FLUMEN_PARALLEL_CONSUMER_US", 10_000) as u64
}

/// This process's peak resident set (`VmHWM`), in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap_or("VmHWM: 0 kB");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// `BIG_ELEMENTS` elements of a float32[2^20] tensor (4 MB each) → parallel map (x/2+1,
/// AUTOTUNE) → prefetch(`prefetch`).
fn big_elements(prefetch: Tunable) -> Result<Dataset> {
    let tensor = spec(vec![FieldSpec::tensor("x", DType::Float32, vec![TENSOR])]);
    let dt = tensor.arrow_schema().field(0).data_type().clone();
    let (gen_spec, gen_dt) = (tensor.clone(), dt.clone());
    let source = Dataset::from_generator(None, tensor.clone(), move || {
        let (spec, dt) = (gen_spec.clone(), gen_dt.clone());
        Box::new((0..BIG_ELEMENTS).map(move |i| element(&spec, f32_tensor(&dt, vec![i as f32; TENSOR as usize]))))
    })?;
    let out = tensor.clone();
    let half = MapFunction::element(None, tensor, move |row| {
        let x = row.column(0).as_fixed_size_list().value(0);
        let y = x.as_primitive::<Float32Type>().values().iter().map(|v| v * 0.5 + 1.0).collect();
        element(&out, f32_tensor(&dt, y))
    });
    source.map_with(half, calls(Tunable::Autotune))?.prefetch(prefetch)
}

/// In a child process: one pass over [`big_elements`] with `config` = "PREFETCH,BUDGET_BYTES"
/// by a consumer working [`consumer_us`] per element; prints what [`memory_bench`] parses.
fn memory_child(config: &str) {
    let (prefetch, budget) = config.split_once(',').expect("PREFETCH,BUDGET");
    let prefetch = match prefetch {
        "autotune" => Tunable::Autotune,
        n => Tunable::Fixed(n.parse().expect("a prefetch size")),
    };
    let budget: u64 = budget.parse().expect("a budget in bytes");
    let before = peak_rss_kib();
    let ds = big_elements(prefetch).unwrap().with_options(Options::default().with_ram_budget(budget));
    let start = Instant::now();
    let mut it = ds.iter();
    let (mut n, mut checksum) = (0, 0.0);
    for element in it.by_ref() {
        let element = element.expect("the pipeline runs");
        let x = element.column(0).as_fixed_size_list().value(0);
        let x = x.as_primitive::<Float32Type>();
        checksum += f64::from(x.value(0)) + f64::from(x.value(x.len() - 1));
        n += 1;
        sleep_us(consumer_us());
    }
    let secs = start.elapsed().as_secs_f64();
    let analysis = it.analyze().unwrap_or_default();
    let held = analysis
        .lines()
        .find_map(|l| l.split("buffers held at most ").nth(1)?.split(' ').next()?.parse::<f64>().ok())
        .map_or("-".to_string(), |m| format!("{m:.0}"));
    let peak = peak_rss_kib();
    if analyze_wanted() {
        eprintln!("explain analyze of the run with prefetch {prefetch:?}, budget {budget} bytes:\n{analysis}");
    }
    println!("peak_kib={peak} before_kib={before} elements={n} secs={secs:.3} held_mib={held} checksum={checksum}");
}

fn memory_bench(_rounds: usize) {
    let exe = std::env::current_exe().expect("this binary");
    let budgets = [BUDGET_MIB << 20, 64 << 30];
    let mut runs = vec![];
    for mmap in [false, true] {
        for prefetch in ["autotune", "100"] {
            runs.extend(budgets.map(|budget| (prefetch, budget, mmap)));
        }
    }
    println!(
        "## Memory: {BIG_ELEMENTS} elements of float32[{TENSOR}] (4 MB) -> map(closure, AUTOTUNE) -> prefetch, \
         consumer {} ms per element; each run in a child process",
        consumer_us() as f64 / 1e3
    );
    println!(
        "| malloc | prefetch | RAM budget | peak RSS (MiB) | before (MiB) | peak - before (MiB) | buffers peak (MiB) \
         | peak under {BUDGET_MIB} MiB | time (s) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut checksums = vec![];
    for (prefetch, budget, mmap) in runs {
        let mut child = Command::new(&exe);
        child.env(CHILD, format!("{prefetch},{budget}"));
        // glibc serves a freed block above its mmap threshold back to the system, but raises
        // the threshold to the size of each mmapped block freed: from then on 4 MB blocks
        // come from its arenas, which keep freed memory resident, one arena per thread that
        // allocates (the generator's, each map worker's). Fixing the threshold keeps the
        // dynamic raise off, so that RSS follows what the pipeline holds.
        if mmap {
            child.env("MALLOC_MMAP_THRESHOLD_", MMAP_THRESHOLD);
        }
        let malloc = if mmap { format!("mmap >= {MMAP_THRESHOLD} B") } else { "default".to_string() };
        let output = child.output().expect("child runs");
        let text = String::from_utf8_lossy(&output.stdout);
        let field = |name: &str| {
            text.split_whitespace().find_map(|kv| kv.strip_prefix(&format!("{name}="))).unwrap_or("?").to_string()
        };
        if !output.status.success() || field("elements") != BIG_ELEMENTS.to_string() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            println!(
                "| {malloc} | {prefetch} | {budget} bytes | child failed ({}): {stderr} | | | | | |",
                output.status
            );
            continue;
        }
        let mib = |kib: &str| kib.parse::<f64>().map_or(f64::NAN, |k| k / 1024.0);
        let (peak, before) = (mib(&field("peak_kib")), mib(&field("before_kib")));
        let under = peak < BUDGET_MIB as f64;
        let budget = if budget >= 1 << 30 { format!("{} GiB", budget >> 30) } else { format!("{} MiB", budget >> 20) };
        println!(
            "| {malloc} | {} | {budget} | {peak:.0} | {before:.0} | {:.0} | {} | {} | {} |",
            if prefetch == "autotune" { "AUTOTUNE" } else { prefetch },
            peak - before,
            field("held_mib"),
            if under { "yes" } else { "no" },
            field("secs")
        );
        checksums.push(field("checksum"));
        if analyze_wanted() {
            println!("{}", String::from_utf8_lossy(&output.stderr));
        }
    }
    let same = checksums.windows(2).all(|w| w[0] == w[1]);
    println!(
        "(peak RSS: the child's VmHWM, before: at its start; buffers peak: what the iterator's buffers and running \
         work held at most, from explain analyze; checksums {})",
        if same { "equal" } else { "DIFFER" }
    );
    println!();
}

/// A case of this bench: its name and what runs it, given the rounds.
type Case = (&'static str, fn(usize));

fn main() {
    if let Ok(config) = std::env::var(CHILD) {
        memory_child(&config);
        return;
    }
    // `cargo bench` passes `--bench`; the first other argument filters the cases.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let rounds = env("FLUMEN_PARALLEL_ROUNDS", 3).max(1);
    let cases: [Case; 9] = [
        ("figure4", figure4_bench),
        ("autotune-figure4", autotune_figure4_bench),
        ("two-stage", two_stage_bench),
        ("autotune-w4", autotune_w4_bench),
        ("autotune-csv", autotune_csv_bench),
        ("autotune-w2", autotune_w2_bench),
        ("autotune-w6", autotune_w6_bench),
        ("autotune-closure", autotune_closure_bench),
        ("memory", memory_bench),
    ];
    let chosen: Vec<_> = cases.iter().filter(|(name, _)| filter.as_deref().is_none_or(|f| name.contains(f))).collect();
    if chosen.is_empty() {
        let names: Vec<&str> = cases.iter().map(|(n, _)| *n).collect();
        eprintln!("no case matches {filter:?}; cases: {}", names.join(", "));
        std::process::exit(2);
    }
    for (_, run) in chosen {
        run(rounds);
    }
}
