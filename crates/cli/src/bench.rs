//! `flumen bench <workload> --data DIR`: the reference workloads of
//! `../shared/bench/WORKLOADS.md`, written the way a tf.data user writes them (per element:
//! map, then filter, then batch; the optimizer finds the fast form), each printing the JSON
//! line that `compare.py` reads:
//! `{"engine", "workload", "variant", "rows", "batches", "seconds", "rows_per_s", "checksum", "peak_rss_mb"}`.
//!
//! - w1: CSV files `csv_tabular/*.csv` (f0..f15, label) → interleave(cycle 4, parallel) →
//!   map(x_j, cross, label) → filter(x_0 > -1.5 and label != 9) → shuffle(10000, seed 42) →
//!   batch(1024) → prefetch; checksum Σ cross.
//! - w2: TFRecord files `tfrecord_example/*.tfrecord` → interleave(cycle 8, parallel) →
//!   map(parse_example: features `f32[64]`, label, id, weight) → map(features × weight) →
//!   filter(label < 8) → batch(256, drop_remainder) → prefetch; checksum Σ features[:, 0].
//!   The scaling is a tensor expression: `features * weight` broadcasts the weight.
//! - w3: Avro files `avro_atds/*.avro` (deflate) read with AvroTensorDataset's feature specs
//!   (label, weight, age, score, flag, `dense_f` f32[128], `emb2d` f32[4, 16], `sparse_f`
//!   sparse f32[50001], `tokens` varlen int64) → batch(1024); checksum Σ dense_f[:, 0].
//!   Blocks are inflated and decoded on the pool.
//! - w4: range(2,000,000) → map(f64(3x+1)) → map(sqrt(v)·0.5) → filter(floor(v) mod 3 ≠ 0) →
//!   map(v·v+1) → batch(4096); checksum Σ v.
//!
//! - w5: TFRecord files `tfrecord_jpeg/*.tfrecord` (128x128 JPEGs) → interleave(cycle 4,
//!   parallel) → map(parse_example: image bytes, label) → map(decode_jpeg → random_crop
//!   112x112 → random_flip_left_right → float32 / 255 → normalize by the RGB mean and std)
//!   → batch(128) → prefetch; checksum: rows.
//! - w7: `jpeg_files/*/*.jpg` (ImageFolder layout) → list_files(shuffle, seed 7) →
//!   map(read_file → decode_jpeg → random_resized_crop 224x224 (area 0.08..1, aspect
//!   3/4..4/3, bilinear) → random_flip_left_right → float32 / 255 → normalize) → batch(32) →
//!   prefetch; checksum: rows.
//! - w6: TFRecord files `tfrecord_text/*.tfrecord` → interleave(cycle 4, parallel) →
//!   map(parse_example: tokens int64 varlen, label) → filter(len(tokens) ≥ 8) →
//!   bucket_by_sequence_length(boundaries [32, 64, 128], batch sizes [128, 64, 32, 16], pad 0)
//!   → prefetch; checksum: the number of non-zero tokens.

use std::path::Path;
use std::time::Instant;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Float32Type, Float64Type};
use flumen::prelude::*;
use flumen::Parallel;

use crate::limit::Outcome;
use crate::workload_data::{w2_features, w2_scale, w6_features};

/// The workloads `flumen bench` runs.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Workload {
    /// CSV tabular.
    W1,
    /// TFRecord + tf.train.Example.
    W2,
    /// Avro with feature specs.
    W3,
    /// Map chain over a range.
    W4,
    /// JPEGs in TFRecords: decode, random crop, flip, normalize.
    W5,
    /// Variable-length text, bucketed by length.
    W6,
    /// JPEG files: decode, random resized crop, flip, normalize.
    W7,
}

impl Workload {
    fn id(self) -> &'static str {
        match self {
            Workload::W1 => "w1",
            Workload::W2 => "w2",
            Workload::W3 => "w3",
            Workload::W4 => "w4",
            Workload::W5 => "w5",
            Workload::W6 => "w6",
            Workload::W7 => "w7",
        }
    }
}

fn autotuned() -> Parallel {
    Parallel { num_parallel_calls: Tunable::Autotune, deterministic: None }
}

/// The `.extension` files in `data/dir`, sorted; an error naming the directory when none.
fn files(data: &Path, dir: &str, extension: &str) -> Result<Vec<String>, String> {
    let folder = data.join(dir);
    let read = std::fs::read_dir(&folder).map_err(|e| format!("cannot read {}: {e}", folder.display()))?;
    let mut found: Vec<String> = read
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == extension))
        .map(|p| p.display().to_string())
        .collect();
    found.sort();
    if found.is_empty() {
        return Err(format!("no .{extension} files in {} (see ../shared/bench/gen_data.py)", folder.display()));
    }
    Ok(found)
}

fn w1(data: &Path) -> Result<Dataset, String> {
    let paths = files(data, "csv_tabular", "csv")?;
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    let read = FileRead::Csv(CsvOptions::default());
    let mut fields: Vec<(String, Expr)> = (0..16)
        .map(|j| (format!("x{j}"), (col(format!("f{j}")) - lit(0.5 * j as f64)) / lit(1.0 + 0.1 * j as f64)))
        .collect();
    fields.push(("cross".into(), col("f0") * col("f1")));
    fields.push(("label".into(), col("label")));
    let ds = Dataset::splits(&paths, read.clone())
        .and_then(|d| d.interleave_with(DatasetFunction::ReadSplit(read), Tunable::Fixed(4), 1, autotuned()))
        .and_then(|d| d.map(MapFunction::select(fields)))
        .and_then(|d| d.filter(col("x0").gt(lit(-1.5)).and(col("label").not_eq(lit(9i64)))))
        .and_then(|d| d.shuffle(10_000, Some(42)))
        .and_then(|d| d.batch(1024))
        .and_then(|d| d.prefetch(Tunable::Autotune));
    ds.map_err(|e| e.to_string())
}

fn w2(data: &Path) -> Result<Dataset, String> {
    let paths = files(data, "tfrecord_example", "tfrecord")?;
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    let read = FileRead::TfRecord(RecordCompression::None);
    let parse = MapFunction::parse_example("record", w2_features()).map_err(|e| e.to_string())?;
    let scale = w2_scale();
    let ds = Dataset::splits(&paths, read.clone())
        .and_then(|d| d.interleave_with(DatasetFunction::ReadSplit(read), Tunable::Fixed(8), 1, autotuned()))
        .and_then(|d| d.map(parse))
        .and_then(|d| d.map(scale))
        .and_then(|d| d.filter(col("label").lt(lit(8i64))))
        .and_then(|d| d.batch_with(256, true))
        .and_then(|d| d.prefetch(Tunable::Autotune));
    ds.map_err(|e| e.to_string())
}

fn w3(data: &Path) -> Result<Dataset, String> {
    let paths = files(data, "avro_atds", "avro")?;
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    let options = AvroOptions::default().with_features(crate::w3_data::features());
    let ds = Dataset::avro(&paths, options).and_then(|d| d.batch(1024));
    ds.map_err(|e| e.to_string())
}

fn w5(data: &Path) -> Result<Dataset, String> {
    let paths = files(data, "tfrecord_jpeg", "tfrecord")?;
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    let read = FileRead::TfRecord(RecordCompression::None);
    let features =
        vec![FeatureSpec::fixed("image", DType::Binary, vec![]), FeatureSpec::fixed("label", DType::Int64, vec![])];
    let parse = MapFunction::parse_example("record", features).map_err(|e| e.to_string())?;
    let image = random_flip_left_right(random_crop(decode_jpeg(col("image"), 3), 112, 112, 7), 7);
    let augment = MapFunction::select([
        ("image", normalize(convert_image_dtype(image), &RGB_MEAN, &RGB_STD)),
        ("label", col("label")),
    ]);
    let ds = Dataset::splits(&paths, read.clone())
        .and_then(|d| d.interleave_with(DatasetFunction::ReadSplit(read), Tunable::Fixed(4), 1, autotuned()))
        .and_then(|d| d.map(parse))
        .and_then(|d| d.map_with(augment, autotuned()))
        .and_then(|d| d.batch(128))
        .and_then(|d| d.prefetch(Tunable::Autotune));
    ds.map_err(|e| e.to_string())
}

/// The ImageNet RGB mean and standard deviation w5 and w7 normalize by.
const RGB_MEAN: [f64; 3] = [0.485, 0.456, 0.406];
const RGB_STD: [f64; 3] = [0.229, 0.224, 0.225];

fn w7(data: &Path) -> Result<Dataset, String> {
    files(data, "jpeg_files/class_0", "jpg")?;
    let pattern = format!("{}/jpeg_files/*/*.jpg", data.display());
    let image = decode_jpeg(read_file(col("filename")), 3);
    let image = random_resized_crop(image, 224, 224, 7, (0.08, 1.0), (3.0 / 4.0, 4.0 / 3.0));
    let image = normalize(convert_image_dtype(random_flip_left_right(image, 7)), &RGB_MEAN, &RGB_STD);
    let ds = Dataset::list_files(&pattern, true, Some(7))
        .and_then(|d| d.map_with(MapFunction::select([("image", image)]), autotuned()))
        .and_then(|d| d.batch(32))
        .and_then(|d| d.prefetch(Tunable::Autotune));
    ds.map_err(|e| e.to_string())
}

fn w6(data: &Path) -> Result<Dataset, String> {
    let paths = files(data, "tfrecord_text", "tfrecord")?;
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    let read = FileRead::TfRecord(RecordCompression::None);
    let parse = MapFunction::parse_example("record", w6_features()).map_err(|e| e.to_string())?;
    let options = BucketOptions {
        padding_values: std::collections::BTreeMap::from([("tokens".to_string(), lit(0i64))]),
        ..Default::default()
    };
    let ds = Dataset::splits(&paths, read.clone())
        .and_then(|d| d.interleave_with(DatasetFunction::ReadSplit(read), Tunable::Fixed(4), 1, autotuned()))
        .and_then(|d| d.map(parse))
        .and_then(|d| d.filter(length(col("tokens")).gt_eq(lit(8i64))))
        .and_then(|d| {
            d.bucket_by_sequence_length(length(col("tokens")), vec![32, 64, 128], vec![128, 64, 32, 16], options)
        })
        .and_then(|d| d.prefetch(Tunable::Autotune));
    ds.map_err(|e| e.to_string())
}

/// The non-zero values of an int64 list column (padded token lists).
fn non_zero(column: &ArrayRef) -> f64 {
    use arrow::datatypes::Int64Type;
    let values = match column.data_type() {
        DataType::List(_) => {
            let lists = column.as_list::<i32>();
            let (start, end) = (lists.value_offsets()[0] as usize, lists.value_offsets()[lists.len()] as usize);
            lists.values().slice(start, end - start)
        }
        DataType::FixedSizeList(..) => {
            let lists = column.as_fixed_size_list();
            let width = lists.value_length() as usize;
            lists.values().slice(lists.offset() * width, lists.len() * width)
        }
        other => unreachable!("tokens of type {other}"),
    };
    values.as_primitive::<Int64Type>().values().iter().filter(|v| **v != 0).count() as f64
}

fn w4() -> Result<Dataset, String> {
    let ds = Dataset::range(0, 2_000_000)
        .and_then(|d| {
            d.map(MapFunction::select([("v", cast(col("value") * lit(3i64) + lit(1i64), DataType::Float64))]))
        })
        .and_then(|d| d.map(MapFunction::select([("v", sqrt(col("v")) * lit(0.5))])))
        .and_then(|d| d.filter((floor(col("v")) % lit(3.0)).not_eq(lit(0.0))))
        .and_then(|d| d.map(MapFunction::select([("v", col("v") * col("v") + lit(1.0))])))
        .and_then(|d| d.batch(4096));
    ds.map_err(|e| e.to_string())
}

/// Σ of a float column (f32 or f64), or of the first value of each row of a float32 tensor
/// (or of a batch of them).
///
/// A float64 column is summed with Arrow's `sum` kernel, as the tf.data consumer sums with
/// `tf.reduce_sum`: a value-at-a-time `f64` sum waits on each addition, and in a profile of
/// `flumen bench w4 --rounds 20` it took 5% of the process's samples (Arrow's: 1.6%), on
/// the cores the pipeline needs.
fn sum_first(column: &ArrayRef) -> f64 {
    match column.data_type() {
        DataType::Float64 => arrow::compute::sum(column.as_primitive::<Float64Type>()).unwrap_or(0.0),
        DataType::Float32 => column.as_primitive::<Float32Type>().values().iter().map(|v| f64::from(*v)).sum(),
        DataType::FixedSizeList(..) => {
            let rows = column.as_fixed_size_list();
            let width = rows.value_length() as usize;
            let values = rows.values().as_primitive::<Float32Type>();
            (0..rows.len()).map(|r| f64::from(values.value((rows.offset() + r) * width))).sum()
        }
        // A batch of fixed-shape rows: the rows it holds.
        DataType::List(_) => {
            let batch = column.as_list::<i32>();
            let (start, end) = (batch.value_offsets()[0] as usize, batch.value_offsets()[batch.len()] as usize);
            sum_first(&batch.values().slice(start, end - start))
        }
        other => unreachable!("a checksum over {other}"),
    }
}

/// This process's peak resident set (`VmHWM`) in MB; 0 where it cannot be read.
fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    kib * 1024.0 / 1e6
}

/// One pass of flumen's pipeline for `workload` over the files under `data`; with `analyze`,
/// its `explain analyze` goes to stderr afterwards.
fn run_flumen(workload: Workload, data: &Path, analyze: bool) -> Result<Outcome, String> {
    let (ds, field) = match workload {
        Workload::W1 => (w1(data)?, "cross"),
        Workload::W2 => (w2(data)?, "features"),
        Workload::W3 => (w3(data)?, "dense_f"),
        Workload::W4 => (w4()?, "v"),
        Workload::W5 => (w5(data)?, "image"),
        Workload::W6 => (w6(data)?, "tokens"),
        Workload::W7 => (w7(data)?, "image"),
    };
    let (mut rows, mut batches, mut checksum) = (0u64, 0u64, 0.0f64);
    let mut it = ds.iter();
    for batch in &mut it {
        let batch = batch.map_err(|e| e.to_string())?;
        let column = batch.column_by_name(field).ok_or_else(|| format!("no field {field}"))?;
        checksum += match workload {
            Workload::W6 => non_zero(column),
            Workload::W5 | Workload::W7 => batch.num_rows() as f64,
            _ => sum_first(column),
        };
        rows += match workload {
            // A batch of tensors is one element per batch: its rows are the list's.
            Workload::W3 => {
                let rows = column.as_list::<i32>().value_offsets();
                (rows[rows.len() - 1] - rows[0]) as u64
            }
            _ => batch.num_rows() as u64,
        };
        batches += 1;
    }
    if analyze {
        eprint!("{}", it.analyze().map_err(|e| e.to_string())?);
    }
    Ok(Outcome { rows, batches, checksum })
}

/// Runs one pass (flumen's pipeline, or its hand-written limit when `limit`) and returns
/// its JSON line.
fn pass(workload: Workload, data: &Path, limit: bool, analyze: bool) -> Result<serde_json::Value, String> {
    let start = Instant::now();
    let outcome = if limit {
        crate::limit::run(workload.id(), |dir, extension| files(data, dir, extension))?
    } else {
        run_flumen(workload, data, analyze)?
    };
    let seconds = start.elapsed().as_secs_f64();
    Ok(serde_json::json!({
        "engine": if limit { "hand-written" } else { "flumen" },
        "workload": workload.id(),
        "variant": if limit { "limit" } else { "natural" },
        "rows": outcome.rows,
        "batches": outcome.batches,
        "seconds": seconds,
        "rows_per_s": outcome.rows as f64 / seconds,
        "checksum": outcome.checksum,
        "peak_rss_mb": peak_rss_mb(),
    }))
}

/// Runs `workload` over the files under `data` and prints its JSON line: flumen's pass, or
/// the hand-written limit's when `limit`. With `rounds` > 1, alternates the two `rounds`
/// times each, prints every line, then a summary line with each one's median rows/s and
/// flumen's fraction of the limit. `analyze` prints each flumen pass's `explain analyze`
/// to stderr.
pub fn bench(workload: Workload, data: &Path, limit: bool, rounds: usize, analyze: bool) -> Result<(), String> {
    if rounds <= 1 {
        println!("{}", pass(workload, data, limit, analyze)?);
        return Ok(());
    }
    let (mut engine, mut hand, mut sums) = (vec![], vec![], vec![]);
    for _ in 0..rounds {
        for limit in [false, true] {
            let line = pass(workload, data, limit, analyze)?;
            println!("{line}");
            let speed = line["rows_per_s"].as_f64().unwrap_or(0.0);
            if limit {
                hand.push(speed)
            } else {
                engine.push(speed)
            }
            sums.push((line["rows"].as_u64(), line["checksum"].as_f64().unwrap_or(f64::NAN)));
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (engine, hand) = (median(&mut engine), median(&mut hand));
    let agree = sums.windows(2).all(|w| w[0].0 == w[1].0 && (w[0].1 - w[1].1).abs() <= 1e-6 * w[0].1.abs().max(1.0));
    let summary = serde_json::json!({
        "workload": workload.id(),
        "rounds": rounds,
        "flumen_rows_per_s": engine,
        "limit_rows_per_s": hand,
        "fraction_of_limit": engine / hand,
        "checksums_agree": agree,
    });
    println!("{summary}");
    Ok(())
}
