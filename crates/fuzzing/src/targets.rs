//! The fuzz targets: each takes arbitrary bytes, feeds them to one decoder or parser through
//! flumen's public API, and panics when a property fails (see the crate docs). A panic
//! inside flumen that it caught and turned into an error is the right answer to bad input;
//! one that escapes a target is a crash.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, BinaryArray};
use flumen::crates::optimizer::{optimize, OptimizerConfig};
use flumen::prelude::*;
use flumen::{Checkpoint, FeatureSpec, Registry};

/// A fuzz target: a name (the libFuzzer target's and the corpus directory's), the function,
/// and its seed inputs.
pub struct Target {
    /// The target's name.
    pub name: &'static str,
    /// Runs one input; panics when a property fails.
    pub run: fn(&[u8]),
    /// Valid inputs to start from.
    pub seeds: fn() -> Vec<Vec<u8>>,
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target { name: "tfrecord", run: tfrecord, seeds: crate::seeds::tfrecord },
    Target { name: "example", run: example, seeds: crate::seeds::example },
    Target { name: "csv", run: csv, seeds: crate::seeds::csv },
    Target { name: "text", run: text, seeds: crate::seeds::text },
    Target { name: "parquet", run: parquet, seeds: crate::seeds::parquet },
    Target { name: "ipc_file", run: ipc_file, seeds: crate::seeds::ipc_file },
    Target { name: "avro", run: avro, seeds: crate::seeds::avro },
    Target { name: "ipc_stream", run: ipc_stream, seeds: crate::seeds::ipc_stream },
    Target { name: "chunk_file", run: chunk_file, seeds: crate::seeds::chunk_file },
    Target { name: "snapshot", run: snapshot, seeds: crate::seeds::snapshot },
    Target { name: "checkpoint", run: checkpoint, seeds: crate::seeds::checkpoint },
    Target { name: "plan_json", run: plan_json, seeds: crate::seeds::plan_json },
    Target { name: "jpeg", run: jpeg, seeds: crate::seeds::jpeg },
    Target { name: "png", run: png, seeds: crate::seeds::png },
];

/// At most this many items are read from a pipeline: targets read small inputs, and a plan
/// from `plan_json` may be endless.
const MAX_ITEMS: usize = 10_000;

/// One item of a pass: an element's values as text, or an error.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// An element, printed.
    Element(String),
    /// An error's message.
    Error(String),
}

/// The items of one pass over `ds` in chunks of `chunk_rows`.
pub fn items(ds: &Dataset, chunk_rows: usize) -> Vec<Item> {
    let ds = ds.with_options(Options::default().with_chunk_rows(chunk_rows).with_threads(1));
    ds.iter()
        .take(MAX_ITEMS)
        .map(|item| match item {
            Ok(batch) => Item::Element(format!("{:?}", batch.columns())),
            Err(e) => Item::Error(e.to_string()),
        })
        .collect()
}

/// The same elements, and errors in the same places (their wording may differ).
fn same_items(a: &[Item], b: &[Item]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|pair| match pair {
            (Item::Element(a), Item::Element(b)) => a == b,
            (Item::Error(_), Item::Error(_)) => true,
            _ => false,
        })
}

/// Reading in chunks of one row and of a thousand gives the same items: where chunks end
/// must change nothing.
fn same_in_any_chunks(what: &str, ds: &Dataset) -> Vec<Item> {
    let (one, many) = (items(ds, 1), items(ds, 1000));
    assert!(same_items(&one, &many), "{what}: chunks of 1 and of 1000 give other items:\n{one:?}\n{many:?}");
    many
}

/// A temporary directory, and `bytes` written to `name` in it.
fn file(name: &str, bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).expect("write the input");
    (dir, path)
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temporary path")
}

// ---------------------------------------------------------------------------------------
// TFRecord framing.
// ---------------------------------------------------------------------------------------

/// The records a TFRecord reader must give before anything else: the framed records up to
/// the first bad header, length, checksum or end.
pub fn framed_prefix(bytes: &[u8]) -> Vec<Vec<u8>> {
    let crc = |b: &[u8]| flumen::crates::sources::tfrecord::masked_crc32c(b);
    let mut out = vec![];
    let mut at = 0usize;
    while bytes.len() - at >= 12 {
        let length_bytes: [u8; 8] = bytes[at..at + 8].try_into().expect("8 bytes");
        if crc(&length_bytes).to_le_bytes() != bytes[at + 8..at + 12] {
            break;
        }
        let Ok(length) = usize::try_from(u64::from_le_bytes(length_bytes)) else { break };
        let Some(end) = length.checked_add(at + 16).filter(|end| *end <= bytes.len()) else { break };
        let data = &bytes[at + 12..at + 12 + length];
        if crc(data).to_le_bytes() != bytes[end - 4..end] {
            break;
        }
        out.push(data.to_vec());
        at = end;
    }
    out
}

fn compress(mode: u8, bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let level = flate2::Compression::fast();
    match mode {
        1 => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), level);
            e.write_all(bytes).expect("in memory");
            e.finish().expect("in memory")
        }
        _ => {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), level);
            e.write_all(bytes).expect("in memory");
            e.finish().expect("in memory")
        }
    }
}

/// TFRecord files. The first byte picks the case: the rest as an uncompressed file (0), or
/// GZIP- (1) or ZLIB-compressed (2) by the harness, so that the framing is fuzzed through
/// the decompressors; or the rest as a GZIP (3) or ZLIB (4) file as it is, so that the
/// compressed stream is. In the first three, the reader must give every record before the
/// first corrupt byte.
pub fn tfrecord(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    let mode = mode % 5;
    let (compression, bytes) = match mode {
        0 => (RecordCompression::None, rest.to_vec()),
        1 | 2 => (if mode == 1 { RecordCompression::Gzip } else { RecordCompression::Zlib }, compress(mode, rest)),
        3 => (RecordCompression::Gzip, rest.to_vec()),
        _ => (RecordCompression::Zlib, rest.to_vec()),
    };
    let (_dir, path) = file("input.tfrecord", &bytes);
    let ds = Dataset::tfrecord(&[path_str(&path)], compression).expect("a TFRecord dataset builds without reading");
    let got = same_in_any_chunks("tfrecord", &ds);
    if mode <= 2 {
        let want = framed_prefix(rest);
        let first: Vec<String> =
            want.iter().map(|r| format!("{:?}", [Arc::new(BinaryArray::from_vec(vec![r])) as ArrayRef])).collect();
        let head: Vec<&Item> = got.iter().take(want.len()).collect();
        let expected: Vec<Item> = first.into_iter().map(Item::Element).collect();
        assert!(
            head.iter().copied().eq(expected.iter()),
            "the reader must give the {} records before the first corrupt byte first; it gave {head:?}",
            want.len()
        );
    }
}

// ---------------------------------------------------------------------------------------
// tf.train.Example.
// ---------------------------------------------------------------------------------------

/// The feature sets `example` parses with.
fn feature_sets() -> Vec<Vec<FeatureSpec>> {
    vec![
        vec![
            FeatureSpec::fixed("label", DType::Int64, vec![]),
            FeatureSpec::var_len("tokens", DType::Int64),
            FeatureSpec::var_len("weights", DType::Float32),
        ],
        vec![FeatureSpec::fixed("features", DType::Float32, vec![2, 2]), FeatureSpec::var_len("text", DType::Binary)],
        vec![FeatureSpec::sparse("sparse", DType::Float32, vec!["index".into()], "values", vec![16])],
    ]
}

/// Splits `data` into records: each a byte of length then that many bytes.
fn records(data: &[u8]) -> Vec<Vec<u8>> {
    let mut out = vec![];
    let mut rest = data;
    while let Some((&n, tail)) = rest.split_first() {
        let n = usize::from(n).min(tail.len());
        out.push(tail[..n].to_vec());
        rest = &tail[n..];
    }
    out
}

/// `parse_example` of records (a length byte then the record, repeated) under each feature
/// set: parsed a chunk at a time (the optimizer vectorizes it) and record by record (as the
/// written plan runs), which must give the same items.
pub fn example(data: &[u8]) {
    let records = records(data);
    if records.is_empty() {
        return;
    }
    let column: ArrayRef = Arc::new(BinaryArray::from_vec(records.iter().map(|r| r.as_slice()).collect()));
    let source = Dataset::from_arrays([("record", column)]).expect("a binary column");
    for features in feature_sets() {
        let map = MapFunction::parse_example("record", features).expect("the feature sets are valid");
        let ds = source.map(map).expect("records are bytes");
        let chunked = items(&ds, 1000);
        let plain = items(&ds.with_options(Options::default().without_optimizations()), 1000);
        assert!(
            same_items(&chunked, &plain),
            "parsed a chunk at a time and record by record differ:\n{chunked:?}\n{plain:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Tables and lines.
// ---------------------------------------------------------------------------------------

/// CSV files, with the schema inferred (header or not) and with a given one (a first byte
/// of the input picks): the same items in any chunks.
pub fn csv(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    let (_dir, path) = file("input.csv", rest);
    let path = path_str(&path);
    let options = match mode % 3 {
        0 => CsvOptions::default(),
        1 => CsvOptions::default().with_header(false),
        _ => {
            let schema = ElementSpec::new(vec![
                FieldSpec::scalar("a", DType::Int64),
                FieldSpec::scalar("b", DType::Float64),
                FieldSpec::scalar("c", DType::Utf8),
            ])
            .expect("a schema");
            CsvOptions::default().with_schema(schema)
        }
    };
    // Inference reads the file when the dataset is built: a bad file is an error there.
    if let Ok(ds) = Dataset::csv(&[path], options) {
        same_in_any_chunks("csv", &ds);
    }
}

/// Text files: each line (valid UTF-8, `\n` or `\r\n` cut off) comes out, and a line that is
/// not UTF-8 is an error in its place.
pub fn text(data: &[u8]) {
    let (_dir, path) = file("input.txt", data);
    let ds = Dataset::text_lines(&[path_str(&path)]).expect("a text dataset builds without reading");
    let got = same_in_any_chunks("text", &ds);
    let mut want = vec![];
    let mut rest = data;
    while !rest.is_empty() {
        let (line, tail) = match rest.iter().position(|&b| b == b'\n') {
            // A terminated line loses its `\n`, and a `\r` before it.
            Some(i) => (rest[..i].strip_suffix(b"\r").unwrap_or(&rest[..i]), &rest[i + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        want.push(std::str::from_utf8(line).ok().map(str::to_string));
        rest = tail;
    }
    assert_eq!(got.len(), want.len(), "one item per line");
    for (item, line) in got.iter().zip(&want) {
        match (item, line) {
            (Item::Element(e), Some(line)) => {
                let array: ArrayRef = Arc::new(arrow::array::StringArray::from(vec![line.as_str()]));
                assert_eq!(e, &format!("{:?}", [array]), "a line as it is");
            }
            (Item::Error(_), None) => {}
            (item, line) => panic!("line {line:?} gave {item:?}"),
        }
    }
}

/// Parquet files: the schema read when the dataset is built, every row group read after a
/// bad one, the same items in any chunks.
pub fn parquet(data: &[u8]) {
    let (_dir, path) = file("input.parquet", data);
    if let Ok(ds) = Dataset::parquet(&[path_str(&path)], None) {
        same_in_any_chunks("parquet", &ds);
    }
}

/// Avro container files.
pub fn avro(data: &[u8]) {
    let (_dir, path) = file("input.avro", data);
    if let Ok(ds) = Dataset::avro(&[path_str(&path)], flumen::AvroOptions::default()) {
        same_in_any_chunks("avro", &ds);
    }
}

/// Arrow IPC files.
pub fn ipc_file(data: &[u8]) {
    let (_dir, path) = file("input.arrow", data);
    if let Ok(ds) = Dataset::ipc_file(&[path_str(&path)]) {
        same_in_any_chunks("ipc_file", &ds);
    }
}

/// Arrow IPC streams.
pub fn ipc_stream(data: &[u8]) {
    let (_dir, path) = file("input.arrows", data);
    if let Ok(ds) = Dataset::ipc_stream(&[path_str(&path)]) {
        same_in_any_chunks("ipc_stream", &ds);
    }
}

// ---------------------------------------------------------------------------------------
// Images.
// ---------------------------------------------------------------------------------------

/// The first item of `map(outputs)` over one element holding `data` as bytes field
/// `image`, under `options`.
fn first_image_item(data: &[u8], outputs: Vec<(&str, Expr)>, options: Options) -> Option<Item> {
    let column: ArrayRef = Arc::new(BinaryArray::from_iter_values([data]));
    let ds = Dataset::from_arrays([("image", column)]).ok()?.with_options(options.with_threads(1));
    let ds = ds.map(MapFunction::select(outputs)).ok()?;
    let item = ds.iter().next()?;
    Some(match item {
        Ok(batch) => Item::Element(format!("{:?}", batch.columns())),
        Err(e) => Item::Error(e.to_string()),
    })
}

/// JPEGs: decoded to 1, 3 and 4 channels; and a crop of the rows-only decode
/// (`jpeg-row-decode`) equal to the crop of the whole image wherever the whole decode
/// succeeds.
pub fn jpeg(data: &[u8]) {
    let decode = |c| decode_jpeg(col("image"), c);
    let all = vec![("gray", decode(1)), ("rgb", decode(3)), ("rgba", decode(4))];
    first_image_item(data, all, Options::default());
    let cropped = || vec![("top", crop(decode(3), 1, 2, 3, 4)), ("random", random_crop(decode(3), 5, 3, 9))];
    let whole = first_image_item(data, cropped(), Options::default().without_optimizations());
    let rows = first_image_item(data, cropped(), Options::default());
    if let Some(Item::Element(whole)) = whole {
        assert_eq!(
            rows,
            Some(Item::Element(whole)),
            "jpeg: the rows-only decode's crops differ from the whole image's"
        );
    }
}

/// PNGs: decoded to 1, 3 and 4 channels, and by `decode_image`.
pub fn png(data: &[u8]) {
    let decode = |c| decode_png(col("image"), c);
    let all =
        vec![("gray", decode(1)), ("rgb", decode(3)), ("rgba", decode(4)), ("any", decode_image(col("image"), 3))];
    first_image_item(data, all, Options::default());
}

// ---------------------------------------------------------------------------------------
// flumen's own formats.
// ---------------------------------------------------------------------------------------

/// flumen chunk files (cache files, snapshot shards), read as a `cache_to` file would be.
pub fn chunk_file(data: &[u8]) {
    let (dir, _path) = file("input.chunks", data);
    let pattern = format!("{}/*.chunks", dir.path().display());
    let read = DatasetFunction::read_file("filename", FileRead::Chunks);
    let ds = Dataset::list_files(&pattern, false, None).and_then(|d| d.flat_map(read));
    if let Ok(ds) = ds {
        same_in_any_chunks("chunk_file", &ds);
    }
}

/// The pipeline the `snapshot` and `checkpoint` targets run: `range(0, 40)`, mapped,
/// shuffled, batched.
pub fn pipeline() -> Dataset {
    Dataset::range(0, 40)
        .and_then(|d| d.map(MapFunction::with_fields([("y", col("value") * lit(3i64))])))
        .and_then(|d| d.shuffle_with(8, Some(5), false))
        .and_then(|d| d.batch(4))
        .expect("the fuzzing pipeline builds")
}

/// The values of field `value` of every element, in order.
fn values(items: &[Item]) -> Vec<String> {
    items.iter().filter_map(|i| if let Item::Element(e) = i { Some(e.clone()) } else { None }).collect()
}

/// A snapshot whose metadata file is the input: a pass over the snapshotted pipeline reads
/// it, writes it again or passes through, and either way yields the pipeline's elements or
/// an error naming the file: never other elements.
pub fn snapshot(data: &[u8]) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let root = dir.path().join("snap");
    let ds = pipeline().snapshot(path_str(&root), SnapshotOptions::default()).expect("a snapshot builds");
    let written = items(&ds, 1000);
    let metadata = std::fs::read_dir(&root)
        .expect("the snapshot directory")
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("snapshot.metadata"))
        .find(|p| p.exists())
        .expect("the first pass wrote the snapshot");
    std::fs::write(&metadata, data).expect("overwrite the metadata");
    let again = items(&ds.with_options(Options::default()), 1000);
    if !again.iter().any(|i| matches!(i, Item::Error(_))) {
        assert_eq!(values(&again), values(&written), "a pass over a snapshot with bad metadata gave other elements");
    }
}

/// Checkpoint bytes, restored into the fuzzing pipeline: an error, or an iterator that
/// yields some of the pipeline's elements; never a panic.
pub fn checkpoint(data: &[u8]) {
    let Ok(checkpoint) = Checkpoint::from_bytes(data) else { return };
    let ds = pipeline();
    if let Ok(it) = ds.iter_from(&checkpoint) {
        for item in it.take(MAX_ITEMS) {
            drop(item);
        }
    }
}

/// Pipeline JSON: deserialized, fingerprinted, optimized and explained (not run: a plan
/// may ask for any amount of work); never a panic.
pub fn plan_json(data: &[u8]) {
    let Ok(json) = std::str::from_utf8(data) else { return };
    let Ok(ds) = Dataset::deserialize(json, Registry::default()) else { return };
    let _ = ds.fingerprint();
    let _ = optimize(ds.plan(), &OptimizerConfig::default());
    let _ = ds.explain();
}
