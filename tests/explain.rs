//! `explain` pinned by snapshots: the logical plan, every optimizer stage with the plan it
//! produced (verbose), the optimized plan and the physical operators, for the tf.data paper's
//! Figure 3 and Figure 4 pipelines, the six reference workloads of `../shared/bench/WORKLOADS.md`
//! written in flumen's natural per-element style, and one focused pipeline per rule family.
//!
//! Every test also runs its pipeline twice — optimized, and as written with the optimizer
//! off — and requires the same elements (errors included), so a snapshot pins a plan that is
//! known to compute what the written one computes.
//!
//! Files the pipelines read are written by the tests at fixed paths relative to the crate
//! root (`target/explain-data/...`), never into temporary directories: a `list_files`
//! pattern is part of the plan text, and the snapshots must read the same on every machine.

mod common;

#[path = "../examples/pipelines/figure4.rs"]
mod figure4;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BooleanArray, Float32Array, Float64Array, Int32Array, Int64Array, ListArray,
    StringArray, UInt8Array,
};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Float32Type, Int64Type, UInt8Type};
use arrow::record_batch::RecordBatch;
use common::*;
use flumen::prelude::*;
use flumen::FieldKind;

// ----- helpers -----

/// `explain` in verbose text: each optimizer stage followed by the plan it produced.
fn verbose(ds: &Dataset) -> String {
    ds.explain_with(ExplainFormat::Text, true).expect("explain")
}

/// Every item a fresh iteration yields, errors as text.
fn items(ds: &Dataset) -> Vec<Result<RecordBatch, String>> {
    ds.iter().map(|item| item.map_err(|e| e.to_string())).collect()
}

/// A fresh dataset over `ds`'s plan and closures with the optimizer off. It must not
/// share `ds`'s iteration counter, which seeds each iteration's reshuffle.
fn as_written(ds: &Dataset) -> Dataset {
    let plain = Dataset::from_plan(ds.plan().clone(), ds.registry().clone())
        .with_options(Options::default().without_optimizations());
    assert!(plain.optimization_report().unwrap().stages.is_empty(), "the optimizer is off");
    plain
}

/// Runs `ds` optimized and as written (optimizer off) and requires the same items, in the
/// same order, errors included; returns how many there were.
fn same_as_unoptimized(ds: &Dataset) -> usize {
    let optimized = items(ds);
    let plain = items(&as_written(ds));
    for (i, (a, b)) in optimized.iter().zip(&plain).enumerate() {
        assert_eq!(a, b, "item {i} differs between the optimized and the written plan");
    }
    assert_eq!(optimized.len(), plain.len(), "number of items");
    assert!(!optimized.is_empty(), "the pipeline yields something");
    optimized.len()
}

/// Writes `bytes` to `path` unless it already holds them; a write goes to a file of its own
/// and is renamed into place, so concurrent test processes never see a partial file.
fn write_if_changed(path: &str, bytes: &[u8]) {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return;
    }
    let dir = std::path::Path::new(path).parent().expect("a directory");
    std::fs::create_dir_all(dir).unwrap();
    let tmp = format!("{path}.{}.{:?}.tmp", std::process::id(), std::thread::current().id());
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A deterministic stream of numbers in [0, 1) (an LCG: the same on every machine).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

const W1_FILES: [&str; 4] = [
    "target/explain-data/w1/part-0.csv",
    "target/explain-data/w1/part-1.csv",
    "target/explain-data/w1/part-2.csv",
    "target/explain-data/w1/part-3.csv",
];
const W1_PATTERN: &str = "target/explain-data/w1/*.csv";

/// w1's files in miniature: 4 CSV files of 60 rows, columns `f0..f15` (float) and `label`
/// (int 0..9), with `f_j` spread around w1's mean `0.5 j` so that the filter drops some rows.
fn w1_files() -> &'static [&'static str] {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let mut rng = Lcg(1);
        for path in W1_FILES {
            let mut text = (0..16).map(|j| format!("f{j},")).collect::<String>() + "label\n";
            for _ in 0..60 {
                for j in 0..16 {
                    let f = 0.5 * j as f64 + (rng.next() - 0.5) * 4.0 * (1.0 + 0.1 * j as f64);
                    text.push_str(&format!("{f:.4},"));
                }
                text.push_str(&format!("{}\n", (rng.next() * 10.0) as i64));
            }
            write_if_changed(path, text.as_bytes());
        }
    });
    &W1_FILES
}

const EVENTS: &str = "target/explain-data/events.parquet";

/// A Parquet file of 100 rows in 4 row groups of 25, six columns:
/// `id` int64 (0..99), `user` string, `score` float64 (rising with `id`), `clicks` int32,
/// `weight` float32, `country` string.
fn events_parquet() -> &'static str {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let n = 100;
        let batch = RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from_iter_values(0..n)) as ArrayRef),
            ("user", Arc::new(StringArray::from_iter_values((0..n).map(|i| format!("user{}", i % 7))))),
            ("score", Arc::new(Float64Array::from_iter_values((0..n).map(|i| i as f64 / 100.0)))),
            ("clicks", Arc::new(Int32Array::from_iter_values((0..n).map(|i| (i * 13 % 11) as i32)))),
            ("weight", Arc::new(Float32Array::from_iter_values((0..n).map(|i| 0.5 + (i % 4) as f32 * 0.25)))),
            ("country", Arc::new(StringArray::from_iter_values((0..n).map(|i| ["de", "fr", "jp"][i as usize % 3])))),
        ])
        .unwrap();
        let props =
            parquet::file::properties::WriterProperties::builder().set_max_row_group_row_count(Some(25)).build();
        let mut bytes = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut bytes, batch.schema(), Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        write_if_changed(EVENTS, &bytes);
    });
    EVENTS
}

/// The innermost values of row 0 of a column of (nested) fixed-size lists.
fn tensor_values(column: &ArrayRef) -> ArrayRef {
    let mut values = column.slice(0, 1);
    while let Some(list) = values.as_fixed_size_list_opt() {
        values = list.values().clone();
    }
    values
}

fn int_of(row: &RecordBatch, field: &str) -> i64 {
    column_i64(row, field)[0]
}

fn binary_of(row: &RecordBatch, field: &str) -> Vec<u8> {
    row.column_by_name(field).expect("field").as_binary::<i32>().value(0).to_vec()
}

/// The element spec of a serialized record: one `binary` field `serialized` (a record of
/// a TFRecord file, as `TFRecordDataset` yields it).
fn serialized_spec() -> ElementSpec {
    ElementSpec::new(vec![FieldSpec::scalar("serialized", DType::Binary)]).unwrap()
}

/// A named generator of serialized records, `chunks` chunks of `per_chunk` records, record
/// `i` being `record(i)`: the stand-in for `list_files → interleave(TFRecordDataset)`.
fn serialized_records(
    name: &str,
    chunks: usize,
    per_chunk: usize,
    record: impl Fn(usize) -> Vec<u8> + Send + Sync + Clone + 'static,
) -> Dataset {
    Dataset::from_generator(Some(name), serialized_spec(), move || {
        let record = record.clone();
        Box::new((0..chunks).map(move |c| {
            let records: Vec<Vec<u8>> = (c * per_chunk..(c + 1) * per_chunk).map(&record).collect();
            let array = BinaryArray::from_iter_values(records.iter());
            Ok(RecordBatch::try_from_iter([("serialized", Arc::new(array) as ArrayRef)])?)
        }))
    })
    .unwrap()
}

fn spec(fields: Vec<FieldSpec>) -> ElementSpec {
    ElementSpec::new(fields).unwrap()
}

// ----- the tf.data paper -----

/// The tf.data paper's Figure 3 (the naive pipeline): read the files one after the other
/// (`interleave` with cycle 1, no parallelism), `map(parse)` per element, `batch(10)`, no
/// prefetch. `parse` is Figure 4's (see `examples/pipelines/figure4.rs`).
#[test]
fn figure3_naive_sequential_pipeline() {
    let ds = Dataset::list_files("examples/data/tabular/*.csv", false, None)
        .unwrap()
        .interleave(DatasetFunction::read_file("filename", FileRead::Csv(CsvOptions::default())), Tunable::Fixed(1), 1)
        .unwrap()
        .map(MapFunction::select([
            ("x", (col("f0") - lit(0.5)) * lit(2.0)),
            ("cross", col("f0") * col("f1")),
            ("label", col("label")),
        ]))
        .unwrap()
        .batch(10)
        .unwrap();
    insta::assert_snapshot!(verbose(&ds));
    assert_eq!(same_as_unoptimized(&ds), 60, "600 rows in batches of 10");
}

/// The tf.data paper's Figure 4, as the `figure4` example defines it.
#[test]
fn figure4_parallel_pipelined() {
    let ds = figure4::pipeline().unwrap();
    insta::assert_snapshot!(verbose(&ds));
    same_as_unoptimized(&ds);
}

// ----- the reference workloads (../shared/bench/WORKLOADS.md) -----

/// w1: CSV files → map (16 normalized features, `cross`, `label`) → filter → shuffle →
/// batch(1024) → prefetch, over four small CSV files with w1's columns.
#[test]
fn w1_csv_tabular() {
    w1_files();
    let mut fields: Vec<(String, Expr)> = (0..16)
        .map(|j| {
            let (mean, std) = (j as f64 * 0.5, 1.0 + j as f64 * 0.1);
            (format!("x_{j}"), (col(format!("f{j}")) - lit(mean)) / lit(std))
        })
        .collect();
    fields.push(("cross".into(), col("f0") * col("f1")));
    fields.push(("label".into(), col("label")));
    let parallel = Parallel { num_parallel_calls: Tunable::Autotune, deterministic: None };
    let ds = Dataset::list_files(W1_PATTERN, false, None)
        .unwrap()
        .interleave_with(
            DatasetFunction::read_file("filename", FileRead::Csv(CsvOptions::default())),
            Tunable::Fixed(4),
            1,
            parallel,
        )
        .unwrap()
        .map(MapFunction::select(fields))
        .unwrap()
        .filter(col("x_0").gt(lit(-1.5)).and(col("label").not_eq(lit(9i64))))
        .unwrap()
        .shuffle(10_000, Some(42))
        .unwrap()
        .batch(1024)
        .unwrap()
        .prefetch(Tunable::Autotune)
        .unwrap();
    insta::assert_snapshot!(verbose(&ds));
    assert_eq!(same_as_unoptimized(&ds), 1, "at most 240 rows: one batch");
}

const W2_FILES: [&str; 3] = [
    "target/explain-data/w2/part-0.tfrecord",
    "target/explain-data/w2/part-1.tfrecord",
    "target/explain-data/w2/part-2.tfrecord",
];

/// w2's files in miniature: 3 TFRecord files of 128 `tf.train.Example`s; record `i` of file
/// `f` (`n = 128 f + i`) holds `features` = `n + k/64` for k in 0..64, `label` = `n mod 10`,
/// `id` = `n` and `weight` = `0.5 + (n mod 4)/4`.
fn w2_files() -> &'static [&'static str] {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        for (f, path) in W2_FILES.iter().enumerate() {
            let examples = ((128 * f as i64)..(128 * f as i64 + 128)).map(|n| {
                let features: Vec<f32> = (0..64).map(|k| n as f32 + k as f32 / 64.0).collect();
                let weight = [0.5 + (n % 4) as f32 * 0.25];
                flumen::serialize_example(&[
                    ("features", flumen::FeatureValues::Float32(&features)),
                    ("label", flumen::FeatureValues::Int64(&[n % 10])),
                    ("id", flumen::FeatureValues::Int64(&[n])),
                    ("weight", flumen::FeatureValues::Float32(&weight)),
                ])
            });
            // Framed in a file of this process's own, then put in place as write_if_changed
            // puts every input file: concurrent test processes never see a partial file.
            let tmp = format!("{path}.{}.framing", std::process::id());
            std::fs::create_dir_all(std::path::Path::new(path).parent().unwrap()).unwrap();
            write_tfrecords(&tmp, examples);
            write_if_changed(path, &std::fs::read(&tmp).unwrap());
            std::fs::remove_file(&tmp).unwrap();
        }
    });
    &W2_FILES
}

/// w2: TFRecord files of `tf.train.Example`s → interleave(cycle 3, block 1, parallel) →
/// map(parse_example) → map(features *= weight) → filter(label < 8) → batch(256,
/// drop_remainder) → prefetch. `parse_example` is a plan function: the optimizer vectorizes
/// it (one call per chunk) and parallelizes it; the written plan, run with the optimizer
/// off, parses record by record.
#[test]
fn w2_tfrecord_example() {
    let read = FileRead::TfRecord(RecordCompression::None);
    let features = vec![
        FeatureSpec::fixed("features", DType::Float32, vec![64]),
        FeatureSpec::fixed("label", DType::Int64, vec![]),
        FeatureSpec::fixed("id", DType::Int64, vec![]),
        FeatureSpec::fixed("weight", DType::Float32, vec![]),
    ];
    let parallel = Parallel { num_parallel_calls: Tunable::Autotune, deterministic: None };
    let ds = Dataset::splits(w2_files(), read.clone())
        .unwrap()
        .interleave_with(DatasetFunction::ReadSplit(read), Tunable::Fixed(3), 1, parallel)
        .unwrap()
        .map(MapFunction::parse_example("record", features).unwrap())
        .unwrap()
        .map(MapFunction::select([
            ("features", col("features") * col("weight")),
            ("label", col("label")),
            ("id", col("id")),
        ]))
        .unwrap()
        .filter(col("label").lt(lit(8i64)))
        .unwrap()
        .batch_with(256, true)
        .unwrap()
        .prefetch(Tunable::Autotune)
        .unwrap();
    insta::assert_snapshot!(verbose(&ds));
    assert_eq!(same_as_unoptimized(&ds), 1, "308 of 384 examples pass: one full batch, the rest dropped");
    // The one batch holds, in the interleave's order (file 0, 1, 2, 0, ...), the examples
    // whose label n mod 10 is under 8, each feature scaled by its weight.
    let batch = ds.iter().next().unwrap().unwrap();
    let expected_ids: Vec<i64> =
        (0..128).flat_map(|i| [i, 128 + i, 256 + i]).filter(|n| n % 10 < 8).take(256).collect();
    assert_eq!(column_i64(&batch, "id"), expected_ids);
    let features =
        batch.column_by_name("features").unwrap().as_fixed_size_list().values().as_primitive::<Float32Type>().clone();
    let n = expected_ids[5];
    let weight = 0.5 + (n % 4) as f32 * 0.25;
    assert_eq!(features.value(5 * 64 + 3), (n as f32 + 3.0 / 64.0) * weight);
}

/// w3: Avro files read with ATDS-style feature specs → batch(1024).
///
/// This models the Avro reader until Avro support lands: a named generator yields the
/// records already decoded by the feature specs (dense scalars and tensors, a sparse and a
/// varlen feature), as `ATDSDataset` does.
#[test]
fn w3_avro_atds() {
    let decoded = spec(vec![
        FieldSpec::scalar("label", DType::Int64),
        FieldSpec::scalar("weight", DType::Float32),
        FieldSpec::scalar("age", DType::Int32),
        FieldSpec::scalar("score", DType::Float64),
        FieldSpec::scalar("flag", DType::Bool),
        FieldSpec::tensor("dense_f", DType::Float32, vec![128]),
        FieldSpec::tensor("emb2d", DType::Float32, vec![4, 16]),
        FieldSpec::sparse("sparse_f", DType::Float32, vec![50001]),
        FieldSpec::ragged("tokens", DType::Int64, vec![-1]),
    ]);
    let schema = decoded.arrow_schema();
    let sparse_type = decoded.field("sparse_f").unwrap().arrow_type();
    let ds = Dataset::from_generator(Some("avro_atds_files"), decoded, move || {
        let (schema, sparse_type) = (schema.clone(), sparse_type.clone());
        Box::new((0..3).map(move |c| {
            let rows: Vec<usize> = (c * 400..(c + 1) * 400).collect();
            let n = rows.len();
            let ints = |f: &dyn Fn(usize) -> i64| Int64Array::from_iter_values(rows.iter().map(|&i| f(i)));
            let dense =
                Float32Array::from_iter_values(rows.iter().flat_map(|&i| (0..128).map(move |k| (i + k) as f32)));
            let emb = Float32Array::from_iter_values(rows.iter().flat_map(|&i| (0..64).map(move |k| (i * k) as f32)));
            // sparse_f: three entries per record, at indices i, i + 1000 and i + 2000.
            let DataType::Struct(parts) = &sparse_type else { panic!("sparse is a struct") };
            let sparse = flumen_ir::sparse::SparseParts {
                offsets: OffsetBuffer::from_lengths(std::iter::repeat_n(3, n)),
                coords: rows.iter().flat_map(|&i| [i, i + 1000, i + 2000].map(|x| x as i64)).collect(),
                values: Arc::new(Float32Array::from_iter_values(rows.iter().flat_map(|&i| [1.0, 0.5, i as f32]))),
                dense_shapes: vec![50001; n],
            };
            let sparse = flumen_ir::sparse::build(parts, sparse, None).unwrap();
            let tokens = ListArray::from_iter_primitive::<Int64Type, _, _>(
                rows.iter().map(|&i| Some((0..(i % 5) as i64).map(|t| Some(t + 1)))),
            );
            let columns: Vec<ArrayRef> = vec![
                Arc::new(ints(&|i| i as i64 % 2)),
                Arc::new(Float32Array::from_iter_values(rows.iter().map(|&i| i as f32 * 0.5))),
                Arc::new(Int32Array::from_iter_values(rows.iter().map(|&i| 20 + (i % 50) as i32))),
                Arc::new(Float64Array::from_iter_values(rows.iter().map(|&i| i as f64 / 7.0))),
                Arc::new(BooleanArray::from_iter(rows.iter().map(|&i| Some(i % 3 == 0)))),
                tensors(Arc::new(dense), &[128]),
                tensors(Arc::new(emb), &[4, 16]),
                Arc::new(sparse),
                Arc::new(tokens),
            ];
            Ok(RecordBatch::try_new(schema.clone(), columns)?)
        }))
    })
    .unwrap()
    .batch(1024)
    .unwrap();
    assert_eq!(ds.element_spec().field("sparse_f").unwrap().kind, FieldKind::Sparse);
    insta::assert_snapshot!(verbose(&ds));
    assert_eq!(same_as_unoptimized(&ds), 2, "1200 records: a batch of 1024 and one of 176");
}

/// w4 on `range(n)`: map(x → f64(3x+1)) → map(v → sqrt(v)·0.5) → filter(floor(v) mod 3 ≠ 0)
/// → map(v → v·v+1) → batch(4096).
fn w4(n: i64) -> Dataset {
    Dataset::range(0, n)
        .unwrap()
        .map(MapFunction::select([("v", cast(col("value") * lit(3i64) + lit(1i64), DataType::Float64))]))
        .unwrap()
        .map(MapFunction::select([("v", sqrt(col("v")) * lit(0.5))]))
        .unwrap()
        .filter((floor(col("v")) % lit(3.0)).not_eq(lit(0.0)))
        .unwrap()
        .map(MapFunction::select([("v", col("v") * col("v") + lit(1.0))]))
        .unwrap()
        .batch(4096)
        .unwrap()
}

/// w4: the map chain over `range(2,000,000)`. The run compares the same pipeline over
/// `range(50,000)`: the written plan runs every expression per element, which is slow in a
/// debug build.
#[test]
fn w4_map_chain() {
    let full = w4(2_000_000);
    insta::assert_snapshot!(verbose(&full));
    let small = w4(50_000);
    let plan = |ds: &Dataset| ds.optimized_plan().unwrap().to_string();
    assert_eq!(plan(&small).replace("50000", "2000000"), plan(&full), "the same plan at either size");
    same_as_unoptimized(&small);
}

const RGB_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
const RGB_STD: [f32; 3] = [0.229, 0.224, 0.225];

fn image_spec(dtype: DType, side: i64) -> ElementSpec {
    spec(vec![FieldSpec::tensor("image", dtype, vec![side, side, 3]), FieldSpec::scalar("label", DType::Int64)])
}

/// The `uint8` pixels of row 0's `image` (a `[side, side, 3]` tensor).
fn pixels(row: &RecordBatch) -> Vec<u8> {
    tensor_values(row.column_by_name("image").unwrap()).as_primitive::<UInt8Type>().values().to_vec()
}

fn image_row(image: ArrayRef, side: i32, row: &RecordBatch) -> flumen::Result<RecordBatch> {
    Ok(RecordBatch::try_from_iter([
        ("image", tensors(image, &[side, side, 3])),
        ("label", row.column_by_name("label").unwrap().clone()),
    ])?)
}

/// w5: TFRecord files of JPEG images → map(parse, decode_jpeg, random_crop 112x112x3,
/// random_flip_left_right, f32/255, normalize by the RGB mean and std) → batch(128) →
/// prefetch, each step a map of its own.
///
/// This models the TFRecord reader and the image functions until TFRecord support (and
/// the image kernels) land: a named generator of serialized records stands for
/// `interleave(TFRecord files)`, and named per-element closures stand for
/// `parse_single_example`, `decode_jpeg` (a "JPEG" here is the 8-byte seed of a 128x128x3
/// image), `random_crop` and `random_flip_left_right` (declared non-deterministic; their
/// draws are derived from the label so that runs can be compared) and the normalization.
#[test]
fn w5_jpeg_augment() {
    let record = |i: usize| {
        let mut bytes = (i as u64 * 7919).to_le_bytes().to_vec(); // the "JPEG"
        bytes.extend((i as i64 % 10).to_le_bytes());
        bytes
    };
    let parsed = spec(vec![FieldSpec::scalar("image", DType::Binary), FieldSpec::scalar("label", DType::Int64)]);
    let parse = MapFunction::element(Some("parse_single_example"), parsed, |row| {
        let bytes = binary_of(row, "serialized");
        Ok(RecordBatch::try_from_iter([
            ("image", Arc::new(BinaryArray::from_iter_values([&bytes[..8]])) as ArrayRef),
            ("label", Arc::new(Int64Array::from(vec![i64::from_le_bytes(bytes[8..16].try_into().unwrap())]))),
        ])?)
    });
    let decode = MapFunction::element(Some("decode_jpeg"), image_spec(DType::UInt8, 128), |row| {
        let seed = u64::from_le_bytes(binary_of(row, "image")[..8].try_into().unwrap());
        let pixels = (0..128 * 128 * 3u64).map(|p| (seed.wrapping_mul(31).wrapping_add(p * 7) % 251) as u8);
        image_row(Arc::new(UInt8Array::from_iter_values(pixels)), 128, row)
    });
    let crop = MapFunction::element(Some("random_crop"), image_spec(DType::UInt8, 112), |row| {
        let (src, label) = (pixels(row), int_of(row, "label") as usize);
        let (top, left) = (label * 7 % 17, label * 3 % 17);
        let cropped = (0..112).flat_map(|y| (0..112 * 3).map(move |x| (y, x)));
        let values: Vec<u8> = cropped.map(|(y, x)| src[(top + y) * 128 * 3 + left * 3 + x]).collect();
        image_row(Arc::new(UInt8Array::from(values)), 112, row)
    })
    .nondeterministic();
    let flip = MapFunction::element(Some("random_flip_left_right"), image_spec(DType::UInt8, 112), |row| {
        let (src, flip) = (pixels(row), int_of(row, "label") % 2 == 1);
        let values: Vec<u8> = (0..112 * 112 * 3)
            .map(|p| {
                let (y, x, c) = (p / (112 * 3), p / 3 % 112, p % 3);
                src[y * 112 * 3 + if flip { 111 - x } else { x } * 3 + c]
            })
            .collect();
        image_row(Arc::new(UInt8Array::from(values)), 112, row)
    })
    .nondeterministic();
    let normalize = MapFunction::element(Some("normalize"), image_spec(DType::Float32, 112), |row| {
        let values =
            pixels(row).into_iter().enumerate().map(|(p, v)| (v as f32 / 255.0 - RGB_MEAN[p % 3]) / RGB_STD[p % 3]);
        image_row(Arc::new(Float32Array::from_iter_values(values)), 112, row)
    });
    let ds = serialized_records("tfrecord_jpeg_files", 2, 3, record)
        .map(parse)
        .unwrap()
        .map(decode)
        .unwrap()
        .map(crop)
        .unwrap()
        .map(flip)
        .unwrap()
        .map(normalize)
        .unwrap()
        .batch(128)
        .unwrap()
        .prefetch(Tunable::Autotune)
        .unwrap();
    insta::assert_snapshot!(verbose(&ds));
    assert_eq!(same_as_unoptimized(&ds), 1, "6 images: one partial batch");
}

/// w6: TFRecord files of token sequences → map(parse: tokens, label) → filter(len(tokens)
/// ≥ 8) → bucket_by_sequence_length(boundaries [32, 64, 128], batch sizes [128, 64, 32, 16],
/// pad with 0) → prefetch.
///
/// This models the TFRecord reader until TFRecord support lands: a named generator of
/// serialized records stands for `interleave(TFRecord files)`, and a named per-element
/// closure for `parse_single_example` (a record here is the label and the tokens as
/// little-endian int64s; `tokens` comes out dense, as `tf.sparse.to_dense` makes it).
#[test]
fn w6_text_bucket() {
    let record = |i: usize| {
        let len = 5 + (i * 37) % 196; // 5..200 tokens
        let mut bytes = (i as i64 % 2).to_le_bytes().to_vec();
        for t in 0..len {
            bytes.extend(((i + t) as i64 % 1000 + 1).to_le_bytes());
        }
        bytes
    };
    let parsed =
        spec(vec![FieldSpec::tensor("tokens", DType::Int64, vec![-1]), FieldSpec::scalar("label", DType::Int64)]);
    let parse = MapFunction::element(Some("parse_single_example"), parsed, |row| {
        let bytes = binary_of(row, "serialized");
        let ints: Vec<i64> = bytes.chunks(8).map(|b| i64::from_le_bytes(b.try_into().unwrap())).collect();
        let tokens = ListArray::from_iter_primitive::<Int64Type, _, _>([Some(ints[1..].iter().map(|t| Some(*t)))]);
        Ok(RecordBatch::try_from_iter([
            ("tokens", Arc::new(tokens) as ArrayRef),
            ("label", Arc::new(Int64Array::from(vec![ints[0]]))),
        ])?)
    });
    let options =
        BucketOptions { padding_values: BTreeMap::from([("tokens".into(), lit(0i64))]), ..Default::default() };
    let ds = serialized_records("tfrecord_text_files", 4, 50, record)
        .map(parse)
        .unwrap()
        .filter(length(col("tokens")).gt_eq(lit(8i64)))
        .unwrap()
        .bucket_by_sequence_length(length(col("tokens")), vec![32, 64, 128], vec![128, 64, 32, 16], options)
        .unwrap()
        .prefetch(Tunable::Autotune)
        .unwrap();
    insta::assert_snapshot!(verbose(&ds));
    same_as_unoptimized(&ds);
}

// ----- one pipeline per rule family -----

/// map-fusion: three expression maps become one; `b`, which no later map reads, is not
/// computed at all. (Float arithmetic: integer arithmetic can overflow, and the guard then
/// keeps fields that could fail — see `integer_overflow_errors_are_neither_hidden_nor_invented`.)
#[test]
fn map_chain_fusion_drops_dead_fields() {
    let ds = Dataset::range(0, 20)
        .unwrap()
        .map(MapFunction::with_fields([
            ("a", cast(col("value"), DataType::Float64) + lit(1.0)),
            ("b", cast(col("value"), DataType::Float64) * lit(2.0)),
        ]))
        .unwrap()
        .map(MapFunction::with_fields([("c", col("a") * lit(3.0))]))
        .unwrap()
        .map(MapFunction::select([("value", col("value")), ("d", col("c") - col("a"))]))
        .unwrap();
    insta::assert_snapshot!(verbose(&ds));
    assert_eq!(same_as_unoptimized(&ds), 20);
}

/// filter-fusion: consecutive expression filters become one conjunction.
#[test]
fn filter_fusion() {
    let ds = Dataset::range(0, 50)
        .unwrap()
        .filter(col("value").gt(lit(5i64)))
        .unwrap()
        .filter(col("value").lt(lit(40i64)))
        .unwrap()
        .filter(col("value").not_eq(lit(17i64)))
        .unwrap();
    insta::assert_snapshot!(verbose(&ds));
    assert_eq!(same_as_unoptimized(&ds), 33);
}

/// filter-hoist: a filter reading only fields a map passes through moves below the map,
/// so the map runs on the kept elements only.
#[test]
fn filter_hoisting() {
    let ds = Dataset::range(0, 30)
        .unwrap()
        .map(MapFunction::with_fields([("y", sqrt(cast(col("value"), DataType::Float64) * lit(2.0) + lit(1.0)))]))
        .unwrap()
        .filter(col("value").gt(lit(20i64)))
        .unwrap();
    insta::assert_snapshot!(verbose(&ds));
    assert_eq!(same_as_unoptimized(&ds), 9);
}

/// map-filter-fusion: a filter on a computed field is rewritten over the map's input and
/// runs first; the map then runs on the kept elements only.
#[test]
fn map_filter_fusion() {
    let ds = Dataset::range(0, 30)
        .unwrap()
        .map(MapFunction::select([("y", cast(col("value"), DataType::Float64) * lit(3.0) + lit(1.0))]))
        .unwrap()
        .filter((col("y") % lit(2.0)).eq(lit(0.0)).or(col("y").gt(lit(80.0))))
        .unwrap();
    insta::assert_snapshot!(verbose(&ds));
    same_as_unoptimized(&ds);
}

/// pfor-batch: `map(f).batch(b)` becomes `batch(b).map(pfor f)`: the map runs once per
/// batch, over its columns.
#[test]
fn pfor_vectorization_of_map_then_batch() {
    let ds = Dataset::range(0, 23)
        .unwrap()
        .map(MapFunction::select([
            ("x", cast(col("value"), DataType::Float64) * lit(2.0) + lit(1.0)),
            ("big", col("value").gt(lit(10i64))),
        ]))
        .unwrap()
        .batch_with(5, true)
        .unwrap();
    insta::assert_snapshot!(verbose(&ds));
    assert_eq!(same_as_unoptimized(&ds), 4, "23 elements, batches of 5, the remainder dropped");
}

/// A per-element closure cannot be vectorized: before `batch` it stays a per-row map and
/// the physical plan says so.
#[test]
fn per_element_closure_map_then_batch_runs_per_row() {
    let out = spec(vec![FieldSpec::scalar("value", DType::Int64), FieldSpec::scalar("square", DType::Int64)]);
    let square = MapFunction::element(Some("square"), out, |row| {
        let v = int_of(row, "value");
        Ok(RecordBatch::try_from_iter([
            ("value", Arc::new(Int64Array::from(vec![v])) as ArrayRef),
            ("square", Arc::new(Int64Array::from(vec![v * v]))),
        ])?)
    });
    let ds = Dataset::range(0, 10).unwrap().map(square).unwrap().batch(4).unwrap();
    insta::assert_snapshot!(verbose(&ds));
    assert!(ds.explain().contains("per-row fallback: closure 'square'"));
    assert_eq!(same_as_unoptimized(&ds), 3);
}

/// shuffle-repeat-fusion: `shuffle(...).repeat(k)` becomes one `shuffle_and_repeat` with
/// the same seeds, so every epoch gets the order it had.
#[test]
fn shuffle_repeat_fusion() {
    let ds = Dataset::range(0, 10).unwrap().shuffle(4, Some(3)).unwrap().repeat(Some(3)).unwrap().batch(7).unwrap();
    insta::assert_snapshot!(verbose(&ds));
    assert_eq!(same_as_unoptimized(&ds), 5);
}

/// No-op elimination: `take(-1)`, `skip(0)`, `repeat(1)`, `shard(1, 0)`, an identity map,
/// `prefetch(0)` and `take(n)` of a dataset with at most n elements all disappear.
#[test]
fn noop_elimination() {
    let ds = Dataset::range(0, 12)
        .unwrap()
        .take(-1)
        .unwrap()
        .skip(0)
        .unwrap()
        .repeat(Some(1))
        .unwrap()
        .shard(1, 0)
        .unwrap()
        .map(MapFunction::with_fields([("value", col("value"))]))
        .unwrap()
        .prefetch(Tunable::Fixed(0))
        .unwrap()
        .take(100)
        .unwrap()
        .filter(col("value").gt(lit(3i64)))
        .unwrap();
    insta::assert_snapshot!(verbose(&ds));
    assert_eq!(same_as_unoptimized(&ds), 8);
}

/// Projection pushdown into CSV: the string columns nobody reads are never parsed; the
/// numeric ones are, since a malformed number is an error of its record whether anyone
/// reads the column or not (see `csv_projection_keeps_bad_records_bad`).
#[test]
fn projection_pushdown_into_csv() {
    let path = "target/explain-data/wide/people.csv";
    let mut text = String::from("id,name,comment,age,score\n");
    for i in 0..40 {
        text.push_str(&format!("{i},name {i},\"a comment, number {i}\",{},{}.5\n", 20 + i % 7, i % 10));
    }
    write_if_changed(path, text.as_bytes());
    let ds = Dataset::csv(&[path], CsvOptions::default())
        .unwrap()
        .filter(col("age").lt(lit(24i64)))
        .unwrap()
        .map(MapFunction::select([("id", col("id")), ("score", col("score") * lit(2.0))]))
        .unwrap()
        .batch(8)
        .unwrap();
    insta::assert_snapshot!(verbose(&ds));
    same_as_unoptimized(&ds);
}

/// Projection pushdown into Parquet: only the columns the map reads are read.
#[test]
fn projection_pushdown_into_parquet() {
    let ds = Dataset::parquet(&[events_parquet()], None)
        .unwrap()
        .map(MapFunction::select([
            ("id", col("id")),
            ("weighted", cast(col("clicks"), DataType::Float32) * col("weight")),
        ]))
        .unwrap();
    insta::assert_snapshot!(verbose(&ds));
    assert_eq!(same_as_unoptimized(&ds), 100);
}

/// Projection pushdown below `parse_example`: the parse reads only its records' column, so
/// a Parquet file of serialized Examples next to other columns is read for that column
/// alone. Its features all stay (each can fail: record 5 lacks its label and is an error
/// of that element, optimized or not).
#[test]
fn projection_pushdown_below_parse_example() {
    let path = "target/explain-data/examples.parquet";
    let records: Vec<Vec<u8>> =
        (0..12i64).map(|i| example((i != 5).then_some(i % 3), [i as f32 * 0.5, -(i as f32)])).collect();
    let batch = RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from_iter_values(0..12)) as ArrayRef),
        ("note", Arc::new(StringArray::from_iter_values((0..12).map(|i| format!("note {i}"))))),
        ("record", Arc::new(BinaryArray::from_iter_values(records.iter()))),
    ])
    .unwrap();
    let mut bytes = Vec::new();
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut bytes, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    write_if_changed(path, &bytes);
    let features =
        vec![FeatureSpec::fixed("x", DType::Float32, vec![2]), FeatureSpec::fixed("label", DType::Int64, vec![])];
    let ds = Dataset::parquet(&[path], None)
        .unwrap()
        .map(MapFunction::parse_example("record", features).unwrap())
        .unwrap()
        .batch(4)
        .unwrap();
    insta::assert_snapshot!(verbose(&ds));
    assert_eq!(same_as_unoptimized(&ds), 4, "3 batches and the error of record 5");
    let out = items(&ds);
    assert!(out[1].as_ref().is_err_and(|e| e.contains("required feature 'label' is missing")), "{out:?}");
    // As in tf.data, the batch that meets the error is lost with it: ids 0..3, then 6..9 and
    // 10..11 (label = id mod 3).
    let labels: Vec<i64> = out.iter().flatten().flat_map(|b| column_i64(b, "label")).collect();
    assert_eq!(labels, [0, 1, 2, 0, 0, 1, 2, 0, 1, 2]);
}

/// Predicate pushdown into Parquet: a filter right above the read becomes the reader's
/// predicate (row groups pruned by statistics, then an exact row filter).
#[test]
fn predicate_pushdown_into_parquet() {
    let ds = Dataset::parquet(&[events_parquet()], None)
        .unwrap()
        .filter(col("score").gt_eq(lit(0.6)).and(col("country").not_eq(lit("fr"))))
        .unwrap()
        .map(MapFunction::select([("id", col("id")), ("user", col("user"))]))
        .unwrap();
    insta::assert_snapshot!(verbose(&ds));
    assert_eq!(same_as_unoptimized(&ds), 27, "ids 60..99 except the 13 with id % 3 == 1");
}

/// The guard: a map that can fail (integer division) is not moved behind a filter, even
/// one that reads only passed-through fields — the element the filter would drop first is
/// the one whose division fails, and that error must still be reported.
#[test]
fn fallible_map_stops_hoisting() {
    let ds = Dataset::from_arrays([
        ("value", Arc::new(Int64Array::from(vec![1, 2, 3, 4, 5, 6])) as ArrayRef),
        ("d", Arc::new(Int64Array::from(vec![1, 0, 1, 2, 1, 3])) as ArrayRef),
    ])
    .unwrap()
    .map(MapFunction::with_fields([("q", col("value") / col("d"))]))
    .unwrap()
    .filter(col("value").gt(lit(2i64)))
    .unwrap();
    insta::assert_snapshot!(verbose(&ds));
    let out = items(&ds);
    assert!(out.iter().any(|i| i.as_ref().is_err_and(|e| e.contains("zero"))), "{out:?}");
    assert_eq!(same_as_unoptimized(&ds), 5, "the error, then 4 elements");
}

/// `Options::without_optimizations`: no stage runs, the plan runs as written.
#[test]
fn optimizer_switched_off() {
    let ds = figure4::pipeline().unwrap().with_options(Options::default().without_optimizations());
    let text = verbose(&ds);
    assert!(text.contains("optimization is off"), "{text}");
    insta::assert_snapshot!(text);
    same_as_unoptimized(&ds);
}

/// The JSON form: the same content as the text, as a document for tools.
#[test]
fn json_format() {
    let ds = w4(100_000);
    let json = ds.explain_with(ExplainFormat::Json, true).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(doc["stages"].as_array().unwrap().len(), 5);
    insta::assert_snapshot!(json);
    same_as_unoptimized(&ds);
}

/// The DOT form: the optimized plan as a Graphviz graph.
#[test]
fn dot_format() {
    let ds = figure4::pipeline().unwrap();
    let dot = ds.explain_with(ExplainFormat::Dot, false).unwrap();
    assert_eq!(dot, ds.optimized_plan().unwrap().to_dot());
    insta::assert_snapshot!(dot);
    same_as_unoptimized(&ds);
}

// ----- regressions: errors are neither hidden nor invented -----

/// Integer `+`, `-` and `*` fail on overflow at run time, so the fallibility guard must
/// stop map fusion from dropping a dead field that overflows, a filter from being hoisted
/// over a map that overflows on the elements it drops, and two filters from fusing so that
/// the second one's overflow is evaluated on elements the first one rejected.
#[test]
fn integer_overflow_errors_are_neither_hidden_nor_invented() {
    let x =
        Dataset::from_arrays([("x", Arc::new(arrow::array::Int8Array::from(vec![1i8, 100, 2])) as ArrayRef)]).unwrap();
    let overflows = || MapFunction::with_fields([("b", col("x") + lit(100i64))]);
    let dead_field = x.map(overflows()).unwrap().map(MapFunction::select([("x", col("x"))])).unwrap();
    let hoisted = x.map(overflows()).unwrap().filter(col("x").lt(lit(50i64))).unwrap();
    let fused = x.filter(col("x").lt(lit(50i64))).unwrap().filter((col("x") + lit(100i64)).gt(lit(0i64))).unwrap();
    let wrong: Vec<&str> = [("dead field", dead_field), ("hoisted filter", hoisted), ("fused filters", fused)]
        .iter()
        .filter(|(_, ds)| items(ds) != items(&as_written(ds)))
        .map(|(name, _)| *name)
        .collect();
    assert!(wrong.is_empty(), "the optimized plan yields other items: {wrong:?}");
}

/// Projection pushdown into CSV must not change which records are bad: a record whose
/// unread numeric column does not parse stays an error (and `ignore_errors` skips it).
#[test]
fn csv_projection_keeps_bad_records_bad() {
    let path = "target/explain-data/bad/bad.csv";
    write_if_changed(path, b"a,b\n1,1.5\n2,oops\n3,2.5\n");
    let schema = spec(vec![FieldSpec::scalar("a", DType::Int64), FieldSpec::scalar("b", DType::Float64)]);
    let csv = Dataset::csv(&[path], CsvOptions::default().with_schema(schema)).unwrap();
    let a_only = MapFunction::select([("a", col("a"))]);
    same_as_unoptimized(&csv.map(a_only.clone()).unwrap());
    same_as_unoptimized(&csv.ignore_errors().unwrap().map(a_only).unwrap());
}
