//! The sources only the full generator draws: a stepped range, in-memory columns of every
//! dtype family (narrow ints and floats, strings, a fixed-shape tensor, special floats), a
//! named generator (stateful across its passes, possibly failing), table files of every
//! format (CSV, Parquet, Arrow IPC file and stream, text lines) and TFRecord files of
//! serialized `tf.train.Example`s, read directly, through `flat_map`/`interleave` of
//! `list_files`, or as splits; and images, decoded and augmented by a map.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{
    ArrayRef, FixedSizeListArray, Float32Array, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
};
use arrow::datatypes::{DataType, Field};
use flumen::prelude::*;
use flumen::{serialize_example, Error, FeatureKind, FeatureValues, RecordCompression, TfRecordWriter};
use serde::{Deserialize, Serialize};

use super::{rows_batch, Row};

/// The float values special-float codes stand for (JSON has no NaN or infinities, so
/// recipes hold codes): ordinary values, both zeros, NaN, both infinities, and values
/// that overflow narrower types.
pub const FLOATS: [f64; 12] =
    [-1.5, 0.0, 0.25, 2.0, 3.5, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 1e300, -7.0, 100.5];

/// The value of float code `c`.
pub fn float(c: u8) -> f64 {
    FLOATS[usize::from(c) % FLOATS.len()]
}

/// The strings string codes stand for: numbers `cast` reads, and text it cannot.
pub const STRINGS: [&str; 8] = ["1.5", "-2", "0", "abc", "7", "", "1e3", "nan?"];

/// The int32 values int32 codes stand for (some near the limits: narrow overflow).
pub const INT32S: [i32; 8] = [0, 1, -3, 5, i32::MAX, i32::MIN, 2, -1];

/// One row of a [`super::SourceRecipe::Typed`] source: codes of each field's value.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct TypedRow {
    /// `i: int64` (the usual ints, or near the limits); `None` is a null.
    pub i: Option<i64>,
    /// `n: int32`, an [`INT32S`] code.
    pub n: u8,
    /// `h: float32`, a [`FLOATS`] code.
    pub h: u8,
    /// `x: float64`, a [`FLOATS`] code.
    pub x: u8,
    /// `s: utf8`, a [`STRINGS`] code.
    pub s: u8,
    /// `t: float32[3]`: [`FLOATS`] codes.
    pub t: [u8; 3],
}

/// The in-memory batch of typed rows: `{i, n, h, x, s, t}`.
pub fn typed_batch(rows: &[TypedRow]) -> RecordBatch {
    let t_values: Vec<f32> = rows.iter().flat_map(|r| r.t.iter().map(|&c| float(c) as f32)).collect();
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let t = FixedSizeListArray::new(item, 3, Arc::new(Float32Array::from(t_values)), None);
    RecordBatch::try_from_iter([
        ("i", Arc::new(Int64Array::from(rows.iter().map(|r| r.i).collect::<Vec<_>>())) as ArrayRef),
        ("n", Arc::new(Int32Array::from(rows.iter().map(|r| INT32S[usize::from(r.n) % 8]).collect::<Vec<_>>()))),
        ("h", Arc::new(Float32Array::from(rows.iter().map(|r| float(r.h) as f32).collect::<Vec<_>>()))),
        ("x", Arc::new(Float64Array::from(rows.iter().map(|r| float(r.x)).collect::<Vec<_>>()))),
        ("s", Arc::new(StringArray::from(rows.iter().map(|r| STRINGS[usize::from(r.s) % 8]).collect::<Vec<_>>()))),
        ("t", Arc::new(t)),
    ])
    .expect("typed batch")
}

/// `rows` as `parts` in-memory batches (the source's own chunk boundaries); one part is
/// built with `from_arrays`, of the batch's columns.
pub fn typed_source(rows: &[TypedRow], parts: u8) -> flumen::Result<Dataset> {
    if parts <= 1 {
        let batch = typed_batch(rows);
        let names: Vec<String> = batch.schema().fields().iter().map(|f| f.name().clone()).collect();
        return Dataset::from_arrays(names.into_iter().zip(batch.columns().iter().cloned()));
    }
    let per = rows.len().div_ceil(usize::from(parts)).max(1);
    Dataset::from_batches(rows.chunks(per).map(typed_batch).collect())
}

/// A named generator of `{value: int64}` yielding `values` in chunks of `chunk` rows, an
/// error in place of the chunk starting at row `error_at`, and, when `stateful`, every value
/// plus 100 times the number of passes the generator started before (a source whose
/// epochs differ: each pass and each repeat epoch calls the factory again).
pub fn generator(values: &[i64], chunk: u8, stateful: bool, error_at: Option<usize>) -> flumen::Result<Dataset> {
    let spec = ElementSpec::new(vec![FieldSpec::scalar("value", DType::Int64)])?;
    let schema = spec.arrow_schema();
    let values = values.to_vec();
    let passes = Arc::new(AtomicU64::new(0));
    let chunk = usize::from(chunk.max(1));
    let make = if stateful { Dataset::from_stateful_generator } else { Dataset::from_generator };
    make(Some("gen"), spec, move || {
        let pass = passes.fetch_add(1, Ordering::SeqCst);
        let offset = if stateful { 100 * pass as i64 } else { 0 };
        let schema = schema.clone();
        let items: Vec<flumen::Result<RecordBatch>> = values
            .chunks(chunk)
            .enumerate()
            .map(|(i, part)| {
                if error_at.is_some_and(|e| e / chunk == i) {
                    return Err(Error::execution("gen", format!("chunk {i} failed")));
                }
                let column = Int64Array::from(part.iter().map(|v| v.wrapping_add(offset)).collect::<Vec<_>>());
                Ok(RecordBatch::try_new(schema.clone(), vec![Arc::new(column)])?)
            })
            .collect();
        Box::new(items.into_iter()) as flumen::crates::udf::closure::ChunkIter
    })
}

/// The table file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TableFormat {
    /// CSV with a given schema; a bad row has a malformed `b` cell.
    Csv,
    /// Parquet in row groups of 3; a bad row truncates its file.
    Parquet,
    /// Arrow IPC file; a bad row truncates its file.
    IpcFile,
    /// Arrow IPC stream; a bad row truncates its file.
    IpcStream,
    /// Text lines (the `a` value, or `x?` for a bad row).
    Text,
}

impl TableFormat {
    /// The extension of its files.
    pub fn extension(self) -> &'static str {
        match self {
            TableFormat::Csv => "csv",
            TableFormat::Parquet => "parquet",
            TableFormat::IpcFile => "arrow",
            TableFormat::IpcStream => "arrows",
            TableFormat::Text => "txt",
        }
    }

    /// How `read_file`, `splits` and the direct builders read the format.
    pub fn read(self) -> FileRead {
        match self {
            TableFormat::Csv => FileRead::Csv(
                CsvOptions::default().with_schema(
                    ElementSpec::new(vec![
                        FieldSpec::scalar("a", DType::Int64),
                        FieldSpec::scalar("b", DType::Int64),
                        FieldSpec::scalar("x", DType::Float64),
                    ])
                    .expect("schema"),
                ),
            ),
            TableFormat::Parquet => FileRead::Parquet { columns: None },
            TableFormat::IpcFile => FileRead::IpcFile,
            TableFormat::IpcStream => FileRead::IpcStream,
            TableFormat::Text => FileRead::TextLines,
        }
    }
}

/// `rows` split over `files` files (at least one row each).
fn parts(rows: &[Row], files: usize) -> Vec<&[Row]> {
    let files = files.clamp(1, rows.len().max(1));
    let per_file = rows.len().div_ceil(files).max(1);
    rows.chunks(per_file).collect()
}

/// Writes the table files of `rows` into `dir` in `format`; their paths, in order.
pub fn write_tables(
    dir: &Path,
    rows: &[Row],
    format: TableFormat,
    files: usize,
    bad_row: Option<usize>,
) -> Vec<String> {
    if matches!(format, TableFormat::Csv | TableFormat::Parquet) {
        let paths = super::write_files(dir, rows, format == TableFormat::Parquet, files, bad_row);
        if format == TableFormat::Parquet {
            truncate_bad(&paths, rows, files, bad_row);
        }
        return paths;
    }
    let mut first = 0;
    let paths: Vec<String> = parts(rows, files)
        .into_iter()
        .enumerate()
        .map(|(i, part)| {
            let path = dir.join(format!("part-{i}.{}", format.extension())).to_string_lossy().into_owned();
            let batch = rows_batch(part);
            let file = std::fs::File::create(&path).expect("create");
            match format {
                TableFormat::IpcFile => {
                    let mut w = arrow::ipc::writer::FileWriter::try_new(file, &batch.schema()).expect("writer");
                    // Two batches per file where it can: readers cross batch boundaries.
                    let half = batch.num_rows() / 2;
                    w.write(&batch.slice(0, half)).expect("write");
                    w.write(&batch.slice(half, batch.num_rows() - half)).expect("write");
                    w.finish().expect("finish");
                }
                TableFormat::IpcStream => {
                    let mut w = arrow::ipc::writer::StreamWriter::try_new(file, &batch.schema()).expect("writer");
                    w.write(&batch).expect("write");
                    w.finish().expect("finish");
                }
                _ => {
                    let text: String = part
                        .iter()
                        .enumerate()
                        .map(|(j, (a, _, _))| match (bad_row == Some(first + j), a) {
                            (true, _) => "x?\n".to_string(),
                            (false, Some(a)) => format!("{a}\n"),
                            (false, None) => "\n".to_string(),
                        })
                        .collect();
                    std::fs::write(&path, text).expect("write");
                }
            }
            first += part.len();
            path
        })
        .collect();
    if matches!(format, TableFormat::IpcFile | TableFormat::IpcStream) {
        truncate_bad(&paths, rows, files, bad_row);
    }
    paths
}

/// Cuts the file holding `bad_row` to two thirds of its length (a corrupt binary file).
fn truncate_bad(paths: &[String], rows: &[Row], files: usize, bad_row: Option<usize>) {
    let Some(bad) = bad_row else { return };
    let mut first = 0;
    for (path, part) in paths.iter().zip(parts(rows, files)) {
        if (first..first + part.len()).contains(&bad) {
            let bytes = std::fs::read(path).expect("read");
            std::fs::write(path, &bytes[..bytes.len() * 2 / 3]).expect("truncate");
        }
        first += part.len();
    }
}

/// How a file source is read: 0 directly, 1 `list_files().flat_map(read_file)`, 2
/// `interleave(read_file, cycle 2, block 1)`, 3 `splits().interleave(ReadSplit, cycle 2)`, 4
/// a shuffled (seeded) `list_files` interleaved with 2 parallel calls.
pub fn read_files(
    dir: &Path,
    paths: &[String],
    extension: &str,
    read: FileRead,
    mode: u8,
) -> flumen::Result<(Dataset, String)> {
    let pattern = format!("{}/*.{extension}", dir.display());
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    let described = format!("{} .{extension} files", paths.len());
    let read_file = DatasetFunction::read_file("filename", read.clone());
    Ok(match mode % 5 {
        1 => {
            (Dataset::list_files(&pattern, false, None)?.flat_map(read_file)?, format!("flat_map(read) of {described}"))
        }
        2 => (
            Dataset::list_files(&pattern, false, None)?.interleave(read_file, Tunable::Fixed(2), 1)?,
            format!("interleave(read, cycle 2, block 1) of {described}"),
        ),
        3 => (
            Dataset::splits(&refs, read.clone())?.interleave(DatasetFunction::ReadSplit(read), Tunable::Fixed(2), 1)?,
            format!("splits().interleave(ReadSplit, cycle 2, block 1) of {described}"),
        ),
        4 => {
            let parallel = Parallel { num_parallel_calls: Tunable::Fixed(2), deterministic: None };
            (
                Dataset::list_files(&pattern, true, Some(3))?.interleave_with(
                    read_file,
                    Tunable::Fixed(2),
                    2,
                    parallel,
                )?,
                format!(
                    "list_files(shuffle, seed 3).interleave_with(read, cycle 2, block 2, parallel 2) of {described}"
                ),
            )
        }
        _ => {
            let ds = match read {
                FileRead::Csv(o) => Dataset::csv(&refs, o)?,
                FileRead::Parquet { columns } => Dataset::parquet(&refs, columns)?,
                FileRead::IpcFile => Dataset::ipc_file(&refs)?,
                FileRead::IpcStream => Dataset::ipc_stream(&refs)?,
                FileRead::TextLines => Dataset::text_lines(&refs)?,
                FileRead::TfRecord(c) => Dataset::tfrecord(&refs, c)?,
                other => return Err(Error::plan("fuzz", format!("no direct reader for {other:?}"))),
            };
            (ds, format!("direct read of {described}"))
        }
    })
}

/// One `tf.train.Example` of a TFRecord source.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExampleRecipe {
    /// Feature `label` (int64); missing when `None` (an error unless it has a default).
    pub label: Option<i64>,
    /// Feature `x` (float32[2]), [`FLOATS`] codes; one value only when `short` (an error).
    pub x: [u8; 2],
    /// Write `x` with one value only.
    pub short: bool,
    /// Feature `v` (int64, variable length).
    pub v: Vec<i64>,
    /// Write bytes that are no `Example` instead.
    pub garbage: bool,
}

/// The serialized record of `e`.
pub fn example_bytes(e: &ExampleRecipe) -> Vec<u8> {
    if e.garbage {
        return vec![0x0a, 0xff, 0xff, 0x01, 0x07];
    }
    let x = [float(e.x[0]) as f32, float(e.x[1]) as f32];
    let label = e.label.map(|l| [l]);
    let mut features: Vec<(&str, FeatureValues)> = Vec::new();
    if let Some(l) = &label {
        features.push(("label", FeatureValues::Int64(l)));
    }
    features.push(("x", FeatureValues::Float32(if e.short { &x[..1] } else { &x[..] })));
    features.push(("v", FeatureValues::Int64(&e.v)));
    serialize_example(&features)
}

/// Writes the TFRecord files of `examples` (gzip-compressed with `gzip`; the record
/// `corrupt` with a flipped data byte, which fails its checksum); their paths.
pub fn write_records(
    dir: &Path,
    examples: &[ExampleRecipe],
    files: usize,
    corrupt: Option<usize>,
    gzip: bool,
) -> Vec<String> {
    let files = files.clamp(1, examples.len().max(1));
    let per_file = examples.len().div_ceil(files).max(1);
    let compression = if gzip { RecordCompression::Gzip } else { RecordCompression::None };
    let mut first = 0;
    examples
        .chunks(per_file)
        .enumerate()
        .map(|(i, part)| {
            let name = if gzip { format!("part-{i}.tfrecord.gz") } else { format!("part-{i}.tfrecord") };
            let path = dir.join(name).to_string_lossy().into_owned();
            let mut writer = TfRecordWriter::create(&path, compression).expect("writer");
            for e in part {
                writer.write(&example_bytes(e)).expect("write");
            }
            writer.finish().expect("finish");
            // A flipped first data byte of the corrupt record: its length and checksums stay
            // those of the good data, so the data checksum fails and the reader goes on.
            if !gzip {
                if let Some(c) = corrupt.filter(|c| (first..first + part.len()).contains(c)) {
                    let mut offset = 0usize;
                    for e in &part[..c - first] {
                        offset += 16 + example_bytes(e).len();
                    }
                    let mut bytes = std::fs::read(&path).expect("read");
                    bytes[offset + 12] ^= 0x40;
                    std::fs::write(&path, bytes).expect("corrupt");
                }
            }
            first += part.len();
            path
        })
        .collect()
}

/// The features `parse` code `p` parses: 1 `label` and `x`; 2 adds `v` (variable length);
/// 3 gives `label` a default (a missing label is no error).
pub fn features(p: u8) -> Vec<FeatureSpec> {
    let mut label = FeatureSpec::fixed("label", DType::Int64, vec![]);
    if p % 4 == 3 {
        label = FeatureSpec {
            kind: FeatureKind::FixedLen { shape: vec![], default: Some(FeatureDefaults::Int64(vec![-1])) },
            ..label
        };
    }
    let mut out = vec![label, FeatureSpec::fixed("x", DType::Float32, vec![2])];
    if p % 4 == 2 {
        out.push(FeatureSpec::var_len("v", DType::Int64));
    }
    out
}

/// The test images (`tests/data/images`, written by Pillow and TensorFlow) an image source
/// draws from; the last is the first cut short (an error of its element).
pub const IMAGE_FILES: [&str; 6] = [
    "tf_baseline_52x40.jpg",
    "baseline_420_37x29.jpg",
    "progressive_37x29.jpg",
    "restart_markers_64x48.jpg",
    "rgb_19x13.png",
    "cut.jpg",
];

/// The directory of the test images.
const IMAGE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/images");

/// An image source: `{i: int64, img}`, where `img` is each file's image decoded, made a
/// fixed size by its first step, maybe flipped, maybe converted to float and normalized
/// (with a color jitter, or cast to bfloat16). Its random steps draw by element, so every
/// configuration must give the same pixels.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImageRecipe {
    /// Each element's file, an [`IMAGE_FILES`] index.
    pub files: Vec<u8>,
    /// The bytes read by `read_file` of the paths (else held in memory).
    pub read_file: bool,
    /// The step that fixes the size: 0 `crop`, 1 `random_crop`, 2 `random_resized_crop`,
    /// 3 `resize`.
    pub first: u8,
    /// The seed of the random steps (and the crop offset, the resize method).
    pub seed: u8,
    /// Bits: 1 `random_flip_left_right`, 2 `flip_up_down`, 4 `flip_left_right`.
    pub flips: u8,
    /// 0 uint8 pixels; 1 normalized float32; 2 jittered and normalized; 3 normalized, as
    /// bfloat16.
    pub float: u8,
    /// Bits: element `i` has no image (a null path or null bytes) when bit `i % 8` is set.
    #[serde(default)]
    pub nulls: u8,
}

/// The bytes of image file `index` (the cut one is the first cut short).
fn image_bytes(index: u8) -> Vec<u8> {
    let name = IMAGE_FILES[usize::from(index) % IMAGE_FILES.len()];
    if name == "cut.jpg" {
        let mut bytes = std::fs::read(format!("{IMAGE_DIR}/{}", IMAGE_FILES[0])).expect("a test image");
        bytes.truncate(bytes.len() - 300);
        return bytes;
    }
    std::fs::read(format!("{IMAGE_DIR}/{name}")).expect("a test image")
}

/// Writes the cut image into `dir`, where a `read_file` image source reads it.
pub fn write_images(dir: &Path) {
    std::fs::write(dir.join("cut.jpg"), image_bytes(5)).expect("the cut image");
}

/// The dataset of `r` (its files in `dir` where it reads them) and its description.
pub fn image_source(r: &ImageRecipe, dir: &Path) -> flumen::Result<(Dataset, String)> {
    let index: ArrayRef = Arc::new(Int64Array::from_iter_values(0..r.files.len() as i64));
    let present = |i: usize| r.nulls & (1 << (i % 8)) == 0;
    let (column, bytes): (ArrayRef, Expr) = if r.read_file {
        let path = |f: &u8| match IMAGE_FILES[usize::from(*f) % IMAGE_FILES.len()] {
            "cut.jpg" => dir.join("cut.jpg").to_string_lossy().into_owned(),
            name => format!("{IMAGE_DIR}/{name}"),
        };
        let paths = r.files.iter().enumerate().map(|(i, f)| present(i).then(|| path(f)));
        (Arc::new(StringArray::from_iter(paths)), read_file(col("path")))
    } else {
        let bytes = r.files.iter().enumerate().map(|(i, f)| present(i).then(|| image_bytes(*f)));
        (Arc::new(arrow::array::BinaryArray::from_iter(bytes)), col("image"))
    };
    let name = if r.read_file { "path" } else { "image" };
    let seed = i64::from(r.seed);
    let decoded = decode_image(bytes, 3);
    // Sizes that fit every test image (the smallest is 19x13).
    let mut img = match r.first % 4 {
        0 => crop(decoded, seed % 4, seed % 3, 8, 9),
        1 => random_crop(decoded, 7, 6, seed),
        2 => random_resized_crop(decoded, 9, 8, seed, (0.08, 1.0), (0.75, 1.33)),
        _ => resize(decoded, 10, 7, ["nearest", "bilinear", "bicubic", "area"][usize::from(r.seed % 4)]),
    };
    if r.flips & 1 != 0 {
        img = random_flip_left_right(img, seed + 1);
    }
    if r.flips & 2 != 0 {
        img = flip_up_down(img);
    }
    if r.flips & 4 != 0 {
        img = flip_left_right(img);
    }
    let (mean, std) = ([0.5, 0.4, 0.3], [0.2, 0.25, 0.3]);
    img = match r.float % 4 {
        0 => img,
        1 => normalize(convert_image_dtype(img), &mean, &std),
        2 => {
            let jittered = random_contrast(random_brightness(convert_image_dtype(img), 0.2, seed), 0.5, 1.5, seed + 2);
            normalize(random_saturation(jittered, 0.5, 1.5, seed + 3), &mean, &std)
        }
        _ => cast_bfloat16(normalize(convert_image_dtype(img), &mean, &std)),
    };
    let ds = Dataset::from_arrays([("i", index), (name, column)])?
        .map(MapFunction::select([("i", col("i")), ("img", img.clone())]))?;
    Ok((ds, format!("images {:?} (nulls {:#b}) read_file {}: select i, img := {img}", r.files, r.nulls, r.read_file)))
}
