//! Iterator checkpoints, operator by operator: for every operator (and sources, with errors
//! in the stream), an iterator is cut after every k elements, saved in both modes, written to
//! bytes and read back, restored into a new iterator, and what the restored iterator yields
//! must equal what the cut iterator yields when it simply goes on.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{Float64Array, Int64Array, StringArray};
use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;
use common::*;
use flumen::prelude::*;
use flumen::{Error, Options};

/// Every item of an iterator as text (an element's rows, or its error's message).
fn show(item: &Result<RecordBatch, Error>) -> String {
    match item {
        Ok(b) => arrow::util::pretty::pretty_format_batches(std::slice::from_ref(b)).unwrap().to_string(),
        Err(e) => format!("Err: {e}"),
    }
}

/// Items of `it` as text, at most `max`.
fn drain(it: impl Iterator<Item = Result<RecordBatch, Error>>, max: usize) -> Vec<String> {
    it.take(max).map(|i| show(&i)).collect()
}

const MAX: usize = 400;

/// Cuts after k items for several k, saves in `mode`, restores into a new iterator, and
/// checks the restored rest equals the cut iterator's own rest.
fn assert_resumes_in(name: &str, ds: &Dataset, mode: SaveMode) {
    let total = drain(ds.iter(), MAX).len();
    assert!(total > 0, "{name}: the pipeline yields nothing");
    let cuts: Vec<usize> =
        if total <= 40 { (0..=total).collect() } else { (0..=total).step_by(total / 30).chain([total - 1]).collect() };
    for k in cuts {
        let mut it = ds.iter();
        let before = drain(it.by_ref(), k);
        let checkpoint = it.save(mode).unwrap_or_else(|e| panic!("{name}: save after {k}: {e}"));
        let bytes = checkpoint.to_bytes().unwrap();
        let read = Checkpoint::from_bytes(&bytes).unwrap();
        assert_eq!(read, checkpoint, "{name}: the checkpoint round-trips through bytes");
        let rest = drain(it, MAX - k);
        let restored = ds.iter_from(&read).unwrap_or_else(|e| panic!("{name}: restore after {k}: {e}"));
        let resumed = drain(restored, MAX - k);
        assert_eq!(
            resumed,
            rest,
            "{name}: {mode:?} checkpoint after {k} items (of {}) resumes differently",
            before.len()
        );
    }
}

/// Both modes, small and large chunks, and symbolic checkpoints that store the rest of the
/// chunks being read (the first of an iterator) or replay them (`symbolic_checkpoint`).
fn assert_resumes(name: &str, ds: Dataset) {
    for chunk_rows in [3, 1000] {
        let options = Options::default().with_chunk_rows(chunk_rows);
        let ds = ds.with_options(options.clone());
        assert_resumes_in(name, &ds, SaveMode::Full);
        assert_resumes_in(name, &ds, SaveMode::Symbolic);
        let recording = ds.with_options(options.with_symbolic_checkpoint(true));
        assert_resumes_in(&format!("{name} (recording)"), &recording, SaveMode::Symbolic);
    }
}

fn range(a: i64, b: i64) -> Dataset {
    Dataset::range(a, b).unwrap()
}

/// `range(a, b)` with `y = 100 / (value - 5)`: element 5 is an error.
fn failing(a: i64, b: i64) -> Dataset {
    range(a, b).map(MapFunction::with_fields([("y", lit(100i64) / (col("value") - lit(5i64)))])).unwrap()
}

fn spec(name: &str) -> ElementSpec {
    ElementSpec::new(vec![FieldSpec::scalar(name, DType::Int64)]).unwrap()
}

#[test]
fn element_wise_operators_resume_exactly() {
    assert_resumes("range", range(0, 23));
    assert_resumes("map with an error", failing(0, 17));
    assert_resumes("filter", failing(0, 30).filter(col("value").gt(lit(3i64))).unwrap());
    assert_resumes("ignore_errors", failing(0, 12).ignore_errors().unwrap());
    let repeating = failing(0, 40).map(MapFunction::select([("value", col("value") % lit(7i64))])).unwrap();
    assert_resumes("unique", repeating.unique().unwrap());
    assert_resumes("take_while", failing(0, 20).take_while(col("value").lt(lit(14i64))).unwrap());
    let odd = PredicateFunction::element(Some("odd"), |row| Ok(column_i64(row, "value")[0] % 2 == 1));
    assert_resumes("filter closure", range(0, 20).filter(odd).unwrap());
    assert_resumes("prefetch", failing(0, 11).prefetch(Tunable::Autotune).unwrap());
    assert_resumes(
        "scan",
        failing(0, 15)
            .scan(&[("s".into(), lit(0i64))], &[("s".into(), col("s") + col("y"))], &[("running".into(), col("s"))])
            .unwrap(),
    );
    // A scan function's state is the operator's, saved with it.
    let running = MapFunction::element(Some("running"), spec("running"), |scope| {
        let s = column_i64(scope, "s")[0] + column_i64(scope, "y")[0];
        let schema = arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("s", arrow::datatypes::DataType::Int64, true),
            arrow::datatypes::Field::new("running", arrow::datatypes::DataType::Int64, true),
        ]);
        let columns = vec![int_batch("s", vec![s]).column(0).clone(), int_batch("running", vec![s]).column(0).clone()];
        Ok(RecordBatch::try_new(Arc::new(schema), columns)?)
    });
    assert_resumes("scan closure", failing(0, 15).scan_with(&[("s".into(), lit(0i64))], running).unwrap());
}

#[test]
fn parallel_operators_resume_exactly() {
    let parallel = |n| Parallel { num_parallel_calls: Tunable::Fixed(n), deterministic: Some(true) };
    let autotuned = Parallel { num_parallel_calls: Tunable::Autotune, deterministic: None };
    let failing_closure = MapFunction::element(Some("every_7th_fails"), spec("value"), |row| {
        let v = column_i64(row, "value")[0];
        if v % 7 == 3 {
            return Err(Error::execution("every_7th_fails", format!("{v}")));
        }
        Ok(int_batch("value", vec![v + 1]))
    });
    assert_resumes("parallel map", range(0, 40).map_with(failing_closure.clone(), parallel(3)).unwrap());
    assert_resumes(
        "autotuned map",
        failing(0, 40).map_with(MapFunction::with_fields([("z", col("y"))]), autotuned).unwrap(),
    );
    assert_resumes(
        "parallel map_and_batch",
        range(0, 45).map_with(failing_closure, parallel(2)).unwrap().batch(4).unwrap(),
    );
    assert_resumes("parallel batch", failing(0, 30).batch_parallel(4, false, parallel(3)).unwrap());
    let odd_or_fails = PredicateFunction::element(Some("odd_or_fails"), |row| {
        let v = column_i64(row, "value")[0];
        if v % 11 == 4 {
            return Err(Error::execution("odd_or_fails", format!("{v}")));
        }
        Ok(v % 2 == 1)
    });
    assert_resumes("parallel filter", range(0, 60).filter_with(odd_or_fails, parallel(3)).unwrap());
    assert_resumes("prefetch of 2", failing(0, 30).prefetch(Tunable::Fixed(2)).unwrap());
    let files = DatasetFunction::closure(Some("file"), spec("value"), |row| {
        let f = column_i64(row, "value")[0];
        Dataset::range(f * 100, f * 100 + 9)?
            .map(MapFunction::with_fields([("value", lit(50i64) / (col("value") % lit(5i64)))]))
    });
    assert_resumes(
        "parallel interleave",
        range(0, 5).interleave_with(files.clone(), Tunable::Fixed(3), 2, parallel(2)).unwrap(),
    );
    // An input error met while the cycle is opened ahead is held for its slot.
    let inputs =
        range(0, 8).map(MapFunction::with_fields([("value", lit(12i64) / (col("value") - lit(4i64)))])).unwrap();
    assert_resumes(
        "parallel interleave with an input error",
        inputs.interleave_with(files, Tunable::Fixed(3), 2, parallel(3)).unwrap(),
    );
}

#[test]
fn counting_operators_resume_exactly() {
    assert_resumes("take", failing(0, 30).take(12).unwrap());
    assert_resumes("skip", failing(0, 30).skip(7).unwrap());
    assert_resumes("shard", failing(0, 30).shard(3, 1).unwrap());
    assert_resumes("enumerate", failing(0, 13).enumerate(100).unwrap());
}

#[test]
fn batching_operators_resume_exactly() {
    assert_resumes("batch", failing(0, 23).batch(4).unwrap());
    assert_resumes("batch drop_remainder", range(0, 23).batch_with(4, true).unwrap());
    assert_resumes("unbatch", range(0, 23).batch(4).unwrap().unbatch().unwrap());
    assert_resumes("rebatch", range(0, 23).batch(4).unwrap().rebatch(3, false).unwrap());
    assert_resumes("rebatch sizes", failing(0, 23).batch(4).unwrap().rebatch_sizes(vec![3, 0, 2], false).unwrap());
    let lengths = range(1, 12).map(MapFunction::with_fields([("n", col("value") % lit(4i64))])).unwrap();
    let ragged = lengths
        .flat_map(DatasetFunction::closure(Some("n_copies"), spec("value"), |row| {
            let n = column_i64(row, "n")[0];
            Dataset::from_batches(vec![int_batch("value", vec![column_i64(row, "value")[0]])])?.repeat(Some(n as u64))
        }))
        .unwrap();
    assert_resumes("padded_batch", ragged.batch(3).unwrap().padded_batch(2, PaddedBatchOptions::default()).unwrap());
    assert_resumes("window sliding", failing(0, 20).window(4, 2, 1, false).unwrap());
    assert_resumes("window strided", range(0, 20).window(3, 1, 2, true).unwrap());
    assert_resumes("window tumbling", failing(0, 20).window(4, 4, 1, false).unwrap());
    assert_resumes("group_by_window", failing(0, 40).group_by_window(col("value") % lit(3i64), 4).unwrap());
    let rows: Vec<Vec<i64>> = (0..30).map(|i| (0..(i * 7 % 5)).map(|j| i * 10 + j).collect()).collect();
    let lists = Dataset::from_batches(vec![ragged_batch("x", rows)]).unwrap();
    assert_resumes(
        "bucket_by_sequence_length",
        lists.bucket_by_sequence_length(length(col("x")), vec![2, 4], vec![2, 3, 2], BucketOptions::default()).unwrap(),
    );
}

#[test]
fn reordering_operators_resume_exactly() {
    assert_resumes("shuffle", failing(0, 60).shuffle(10, Some(3)).unwrap());
    assert_resumes("shuffle, big buffer", range(0, 60).shuffle(1000, Some(3)).unwrap());
    assert_resumes("shuffle unseeded", range(0, 40).shuffle(7, None).unwrap());
    assert_resumes("shuffle of shuffle", range(0, 50).shuffle(5, Some(1)).unwrap().shuffle(9, Some(2)).unwrap());
    assert_resumes("repeat reshuffling", range(0, 15).shuffle(6, Some(9)).unwrap().repeat(Some(4)).unwrap());
    assert_resumes("repeat forever, take", failing(0, 7).repeat(None).unwrap().take(40).unwrap());
    let a = range(0, 30);
    let b = range(100, 140).skip(3).unwrap();
    assert_resumes(
        "sample_from_datasets",
        Dataset::sample_from_datasets(&[&a, &b], vec![0.3, 0.7], Some(5), false).unwrap(),
    );
    assert_resumes(
        "sample_from_datasets stop on empty",
        Dataset::sample_from_datasets(&[&a, &b], vec![0.5, 0.5], Some(6), true).unwrap(),
    );
    // Choices (with one out of range, an error in its place) from inputs with an error.
    let choices = range(0, 80).map(MapFunction::select([("c", (col("value") * lit(7i64)) % lit(3i64))])).unwrap();
    assert_resumes(
        "choose_from_datasets",
        Dataset::choose_from_datasets(
            &[&failing(0, 20), &b.map(MapFunction::with_fields([("y", col("value"))])).unwrap()],
            &choices,
            false,
        )
        .unwrap(),
    );
}

#[test]
fn combining_operators_resume_exactly() {
    let left = failing(0, 20);
    let right = range(50, 80).map(MapFunction::select([("z", col("value") * lit(2i64))])).unwrap();
    assert_resumes("zip", Dataset::zip(&[&left, &right]).unwrap());
    assert_resumes("concatenate", failing(0, 9).concatenate(&failing(3, 12)).unwrap());
    let copies = DatasetFunction::closure(Some("copies"), spec("value"), |row| {
        let v = column_i64(row, "value")[0];
        Dataset::range(v * 10, v * 10 + v % 4)
    });
    assert_resumes("flat_map closure", range(0, 9).flat_map(copies.clone()).unwrap());
    assert_resumes("interleave closure", range(0, 9).interleave(copies, Tunable::Fixed(3), 2).unwrap());
    assert_resumes(
        "flat_map slices",
        range(0, 20).batch(3).unwrap().flat_map(DatasetFunction::FromTensorSlices).unwrap(),
    );
    let shuffled_inner = DatasetFunction::closure(Some("shuffled_inner"), spec("value"), |row| {
        let v = column_i64(row, "value")[0];
        Dataset::range(0, 6)?.map(MapFunction::select([("value", col("value") + lit(v * 10))]))?.shuffle(3, None)
    });
    assert_resumes(
        "interleave of unseeded shuffles",
        range(0, 6).interleave(shuffled_inner, Tunable::Fixed(2), 3).unwrap(),
    );
}

#[test]
fn cache_resumes_while_filling_and_while_replaying() {
    let ds = failing(0, 14).shuffle(5, Some(2)).unwrap().cache().unwrap().repeat(Some(3)).unwrap();
    assert_resumes("cache under repeat", ds);
    // Replaying a cache a previous iterator filled.
    let cached = range(0, 25).shuffle(8, None).unwrap().cache().unwrap();
    let first = drain(cached.iter(), MAX);
    assert_resumes("cache replay", cached.clone());
    assert_eq!(drain(cached.iter(), MAX), first, "the cache was kept");
}

#[test]
fn generators_are_advanced_to_their_position() {
    let ds = Dataset::from_generator(Some("gen"), spec("value"), || {
        Box::new((0..6).map(|i| Ok(int_batch("value", vec![3 * i, 3 * i + 1, 3 * i + 2]))))
    })
    .unwrap();
    assert_resumes("generator", ds.shuffle(4, Some(1)).unwrap());
}

fn write_files(dir: &Path) -> BTreeMap<&'static str, String> {
    let mut files = BTreeMap::new();
    let csv = dir.join("a.csv");
    let mut text = String::from("a,b\n");
    for i in 0..20 {
        if i == 7 {
            text.push_str("7,oops\n");
        } else {
            text.push_str(&format!("{i},{}\n", i as f64 / 2.0));
        }
    }
    std::fs::write(&csv, text).unwrap();
    files.insert("csv", csv.display().to_string());
    let lines = dir.join("a.txt");
    std::fs::write(&lines, (0..17).map(|i| format!("line {i}\n")).collect::<String>()).unwrap();
    files.insert("text", lines.display().to_string());
    let batch = RecordBatch::try_from_iter([
        ("a", Arc::new(Int64Array::from_iter_values(0..40)) as _),
        ("x", Arc::new(Float64Array::from_iter_values((0..40).map(|i| i as f64))) as _),
        ("s", Arc::new(StringArray::from_iter_values((0..40).map(|i| format!("s{i}")))) as _),
    ])
    .unwrap();
    for (name, rows) in [("p1", 0..25), ("p2", 25..40)] {
        let path = dir.join(format!("{name}.parquet"));
        let props = parquet::file::properties::WriterProperties::builder().set_max_row_group_row_count(Some(6)).build();
        let file = std::fs::File::create(&path).unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(props)).unwrap();
        w.write(&batch.slice(rows.start, rows.len())).unwrap();
        w.close().unwrap();
        files.insert(name, path.display().to_string());
    }
    let ipc = dir.join("a.arrow");
    let mut w = arrow::ipc::writer::FileWriter::try_new(std::fs::File::create(&ipc).unwrap(), &batch.schema()).unwrap();
    for start in (0..40).step_by(9) {
        w.write(&batch.slice(start, 9.min(40 - start))).unwrap();
    }
    w.finish().unwrap();
    files.insert("ipc", ipc.display().to_string());
    // Examples labelled 100·file + i; record 4 of t1 lacks its (required) label.
    for (f, name, n) in [(0, "t0", 9), (1, "t1", 6)] {
        let path = dir.join(format!("{name}.tfrecord")).display().to_string();
        write_tfrecords(&path, (0..n).map(|i| example(((f, i) != (1, 4)).then_some(100 * f + i), [0.0, 1.0])));
        files.insert(name, path);
    }
    files
}

#[test]
fn file_sources_resume_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let f = write_files(dir.path());
    let csv = Dataset::csv(&[&f["csv"]], CsvOptions::default()).unwrap();
    assert_resumes("csv with a bad record", csv.clone());
    assert_resumes("csv batched", csv.batch(4).unwrap());
    assert_resumes("text lines", Dataset::text_lines(&[&f["text"]]).unwrap());
    assert_resumes("parquet", Dataset::parquet(&[&f["p1"], &f["p2"]], None).unwrap());
    assert_resumes("parquet projected", Dataset::parquet(&[&f["p1"], &f["p2"]], Some(vec!["s".into()])).unwrap());
    assert_resumes("ipc file", Dataset::ipc_file(&[&f["ipc"]]).unwrap());
    let pattern = format!("{}/*.parquet", dir.path().display());
    let listed = Dataset::list_files(&pattern, true, Some(4)).unwrap();
    let read = DatasetFunction::read_file("filename", FileRead::Parquet { columns: None });
    assert_resumes(
        "list_files + interleave",
        listed.interleave(read, Tunable::Fixed(2), 4).unwrap().shuffle(7, Some(1)).unwrap(),
    );
    let splits = Dataset::splits(&[&f["p1"], &f["p2"]], FileRead::Parquet { columns: None }).unwrap();
    let read_split = DatasetFunction::ReadSplit(FileRead::Parquet { columns: None });
    assert_resumes(
        "splits + shard + interleave",
        splits.shard(2, 1).unwrap().interleave(read_split, Tunable::Fixed(2), 3).unwrap(),
    );
    // The parse reads the interleave's records as views of its readers' windows.
    let read = FileRead::TfRecord(RecordCompression::None);
    let splits = Dataset::splits(&[&f["t0"], &f["t1"]], read.clone()).unwrap();
    let parse = MapFunction::parse_example("record", vec![FeatureSpec::fixed("label", DType::Int64, vec![])]);
    let parallel = Parallel { num_parallel_calls: Tunable::Fixed(2), deterministic: None };
    let interleaved = splits.interleave_with(DatasetFunction::ReadSplit(read), Tunable::Fixed(2), 2, parallel).unwrap();
    assert_resumes(
        "tfrecord splits + interleave + parse_example",
        interleaved.map_with(parse.unwrap(), parallel).unwrap(),
    );
}

#[test]
fn a_checkpoint_of_another_dataset_is_refused() {
    let ds = range(0, 10).shuffle(4, Some(1)).unwrap();
    let mut it = ds.iter();
    it.next();
    let checkpoint = it.save(SaveMode::Full).unwrap();
    let other = range(0, 10).shuffle(4, Some(2)).unwrap();
    let err = other.iter_from(&checkpoint).err().expect("another seed is another dataset").to_string();
    assert!(err.contains("another dataset"), "{err}");
    let mut bytes = checkpoint.to_bytes().unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    let err = Checkpoint::from_bytes(&bytes).expect_err("a flipped byte").to_string();
    assert!(err.contains("checksum"), "{err}");
    let err = Checkpoint::from_bytes(&bytes[..bytes.len() - 9]).expect_err("truncated").to_string();
    assert!(err.contains("checkpoint"), "{err}");
}

#[test]
fn stateful_closures_refuse_to_be_saved_unless_ignored() {
    let counter = MapFunction::element(Some("counter"), spec("value"), |row| Ok(row.clone())).stateful();
    let ds = range(0, 5).map(counter).unwrap();
    let mut it = ds.iter();
    it.next();
    let err = it.save(SaveMode::Symbolic).expect_err("a stateful closure").to_string();
    assert!(err.contains("counter") && err.contains("ExternalState::Ignore"), "{err}");
    let ignored = ds.with_options(Options::default().with_external_state(ExternalState::Ignore));
    let mut it = ignored.iter();
    it.next();
    assert!(it.save(SaveMode::Symbolic).is_ok());
}

#[test]
fn symbolic_checkpoints_of_a_large_shuffle_hold_no_elements() {
    let wide = range(0, 5000).map(MapFunction::with_fields([("pad", cast(col("value"), DataType::Utf8))])).unwrap();
    // Chunks of 100 rows: what the iterator keeps of its current output chunk is small.
    let ds = wide.shuffle(2000, Some(11)).unwrap().with_options(Options::default().with_chunk_rows(100));
    let mut it = ds.iter();
    drain(it.by_ref(), 750);
    // The first symbolic save starts recording; until then the prefetch the optimizer adds
    // at the output can only store what it has buffered.
    it.save(SaveMode::Symbolic).unwrap();
    drain(it.by_ref(), 750);
    let full = it.save(SaveMode::Full).unwrap().to_bytes().unwrap().len();
    let symbolic = it.save(SaveMode::Symbolic).unwrap().to_bytes().unwrap().len();
    // 2000 slot indices of 4 bytes, against 2000 buffered elements of two columns.
    assert!(symbolic < 12_000, "symbolic: {symbolic} bytes");
    assert!(full > 3 * symbolic, "full {full} vs symbolic {symbolic} bytes");
}

/// The buffered chunks a checkpoint holds, all operators together.
fn stored_chunks(state: &flumen::crates::runtime::checkpoint::OpState) -> usize {
    state.chunks.len() + state.children.iter().flatten().map(stored_chunks).sum::<usize>()
}

/// The kinds of the operators that hold chunks, for failure messages.
fn holders(state: &flumen::crates::runtime::checkpoint::OpState) -> String {
    let mut out = String::new();
    if !state.chunks.is_empty() {
        out += &format!("{}:{} ", state.kind, state.chunks.len());
    }
    state.children.iter().flatten().for_each(|c| out += &holders(c));
    out
}

#[test]
fn recording_symbolic_checkpoints_hold_no_element() {
    let failing_map =
        |ds: Dataset| ds.map(MapFunction::with_fields([("y", lit(1000i64) / (col("value") % lit(97i64)))]));
    let ds = failing_map(range(0, 3000))
        .unwrap()
        .shuffle(500, Some(3))
        .unwrap()
        .batch(7)
        .unwrap()
        .unbatch()
        .unwrap()
        .take(2900)
        .unwrap()
        .batch(16)
        .unwrap()
        .with_options(Options::default().with_chunk_rows(64).with_symbolic_checkpoint(true));
    for k in [0, 1, 5, 33, 100, 150, 181] {
        let mut it = ds.iter();
        drain(it.by_ref(), k);
        let symbolic = it.save(SaveMode::Symbolic).unwrap();
        // Only the shuffle's slot index chunk.
        assert_eq!(stored_chunks(&symbolic.state), 1, "after {k}: {}", holders(&symbolic.state));
        let full = it.save(SaveMode::Full).unwrap();
        if (5..180).contains(&k) {
            assert!(stored_chunks(&full.state) > 1, "after {k}: {}", holders(&full.state));
        }
        let rest = drain(it, MAX);
        assert_eq!(drain(ds.iter_from(&symbolic).unwrap(), MAX), rest, "symbolic after {k}");
        assert_eq!(drain(ds.iter_from(&full).unwrap(), MAX), rest, "full after {k}");
    }
    // Without the option, only the first symbolic checkpoint stores the chunks being read.
    let lazy = ds.with_options(Options::default().with_chunk_rows(64));
    let mut it = lazy.iter();
    drain(it.by_ref(), 40);
    assert!(stored_chunks(&it.save(SaveMode::Symbolic).unwrap().state) > 1);
    drain(it.by_ref(), 40);
    let second = it.save(SaveMode::Symbolic).unwrap();
    assert_eq!(stored_chunks(&second.state), 1);
    let rest = drain(it, MAX);
    assert_eq!(drain(lazy.iter_from(&second).unwrap(), MAX), rest);
}

// ----- bugs found by the property test `checkpoint_equivalence` -----

/// A symbolic shuffle checkpoint rewinds the shuffle's input to a mark and replays it up to
/// the rows the shuffle had pulled, but not past the errors the input reported after the last
/// of them: the restored iterator reported such an error a second time.
#[test]
fn symbolic_shuffle_reports_an_input_error_again_after_a_restore() {
    assert_resumes("an error, shuffled", failing(5, 6).shuffle(1, Some(0)).unwrap());
    assert_resumes("shuffle of an input failing early", failing(0, 9).shuffle(4, Some(3)).unwrap());
}

/// A cache completed before the cut but not yet read by the iterator's operators (here: by
/// the repeat's first epoch, not opened yet) was not in the checkpoint: restored in another
/// process (a second build of the pipeline, without the cache), its pass was computed again,
/// under the restoring iteration's seeds.
#[test]
fn a_cache_completed_before_the_cut_is_lost_in_another_process() {
    let make = || range(0, 8).shuffle(8, Some(1)).unwrap().cache().unwrap().repeat(Some(2)).unwrap();
    for mode in [SaveMode::Full, SaveMode::Symbolic] {
        let ds = make();
        // Iteration 0 fills the cache in its order; iteration 1 replays it.
        drain(ds.iter(), MAX);
        let it = ds.iter();
        let bytes = it.save(mode).unwrap().to_bytes().unwrap();
        let rest = drain(it, MAX);
        let restored = make().iter_from(&Checkpoint::from_bytes(&bytes).unwrap()).unwrap();
        assert_eq!(drain(restored, MAX), rest, "{mode:?}");
    }
}

/// A restored iterator read the caches that other iterators of the dataset had completed
/// since its checkpoint was saved (here: the saved iterator itself, going on), where the
/// saved iterator would have recorded the pass: it skipped the errors of the cached input,
/// which a cache does not record and the saved iterator reported.
#[test]
fn a_restored_iterator_read_a_cache_completed_after_its_checkpoint() {
    for mode in [SaveMode::Full, SaveMode::Symbolic] {
        let ds = failing(3, 8).cache().unwrap().repeat(Some(2)).unwrap();
        let it = ds.iter();
        let checkpoint = it.save(mode).unwrap();
        // Going on completes the cache: 3 4 Err 6 7, then 3 4 6 7 replayed.
        let rest = drain(it, MAX);
        assert_eq!(rest.iter().filter(|i| i.starts_with("Err")).count(), 1);
        assert_eq!(drain(ds.iter_from(&checkpoint).unwrap(), MAX), rest, "{mode:?}");
    }
}

/// Open: a symbolic shuffle checkpoint rewinds the shuffle's input to a mark and replays it.
/// When the mark precedes a cache's first complete pass (here: the mark before epoch 0, the
/// checkpoint in epoch 1), the replay builds the cache again in a state where its pass is
/// complete, and reads it where the saved run recorded it: the errors the recording reported
/// (a cache records none) are missing, and the operators between that count errors (here
/// `enumerate`; also `window`, `zip`, `batch`) give the replayed rows other values. An exact
/// replay needs the caches complete at the mark's time, which marks do not record.
#[test]
#[ignore = "open: a symbolic shuffle replay reads a cache completed after its mark"]
fn symbolic_shuffle_replay_reads_a_cache_its_input_was_recording() {
    // 4 Err 6 7 recorded as 4 6 7, then 4 6 7 replayed: enumerated 0..=6, shuffled.
    let make = || {
        let ds = failing(4, 8).cache()?.repeat(Some(2))?.enumerate(0)?.shuffle(3, Some(0))?;
        Ok::<_, Error>(ds.with_options(Options::default().with_chunk_rows(1)))
    };
    for k in 0..=7 {
        // A new dataset each time: the cut run is the one that records the cache.
        let ds = make().unwrap();
        let mut it = ds.iter();
        drain(it.by_ref(), k);
        let checkpoint = it.save(SaveMode::Symbolic).unwrap();
        let rest = drain(it, MAX);
        assert_eq!(drain(ds.iter_from(&checkpoint).unwrap(), MAX), rest, "after {k}");
    }
}

#[test]
fn chunk_iterators_resume_exactly_and_only_as_chunk_iterators() {
    let ds = failing(0, 300)
        .shuffle(40, Some(8))
        .unwrap()
        .batch(3)
        .unwrap()
        .with_options(Options::default().with_chunk_rows(16));
    let total = drain(ds.iter_chunks(), MAX).len();
    for mode in [SaveMode::Full, SaveMode::Symbolic] {
        for k in 0..=total {
            let mut it = ds.iter_chunks();
            drain(it.by_ref(), k);
            let checkpoint = Checkpoint::from_bytes(&it.save(mode).unwrap().to_bytes().unwrap()).unwrap();
            let rest = drain(it, MAX);
            assert_eq!(drain(ds.iter_chunks_from(&checkpoint).unwrap(), MAX), rest, "{mode:?} after {k} chunks");
        }
    }
    let mut chunks = ds.iter_chunks();
    chunks.next();
    let checkpoint = chunks.save(SaveMode::Full).unwrap();
    let err = ds.iter_from(&checkpoint).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("'chunks'") && err.contains("'elements'"), "{err}");
}

/// The first state of `kind` in the tree, depth first.
fn find_state<'a>(
    state: &'a mut flumen::crates::runtime::checkpoint::OpState,
    kind: &str,
) -> Option<&'a mut flumen::crates::runtime::checkpoint::OpState> {
    if state.kind == kind {
        return Some(state);
    }
    state.children.iter_mut().flatten().find_map(|c| find_state(c, kind))
}

#[test]
fn a_malformed_checkpoint_is_an_error_not_a_panic() {
    let copies = DatasetFunction::closure(Some("copies3"), spec("value"), |row| {
        let v = column_i64(row, "value")[0];
        Dataset::range(v * 10, v * 10 + 5)
    });
    let interleaved = range(0, 9).interleave(copies, Tunable::Fixed(3), 2).unwrap();
    let shuffled = range(0, 50).shuffle(10, Some(1)).unwrap();
    let windowed = range(0, 30).window(4, 2, 1, false).unwrap();
    let cases: Vec<(Dataset, SaveMode, &str, &str, serde_json::Value)> = vec![
        (interleaved.clone(), SaveMode::Full, "interleave", "cycle_index", 99.into()),
        (interleaved, SaveMode::Full, "interleave", "block_index", 5.into()),
        (shuffled.clone(), SaveMode::Full, "shuffle", "incoming", serde_json::json!([99, 0])),
        (shuffled, SaveMode::Full, "shuffle", "slots", serde_json::json!([[0, 5000]])),
        (windowed, SaveMode::Full, "window", "starts", serde_json::json!([])),
    ];
    for (ds, mode, kind, field, value) in cases {
        let ds = ds.with_options(Options::default().with_chunk_rows(2));
        let mut it = ds.iter();
        drain(it.by_ref(), 3);
        let mut checkpoint = it.save(mode).unwrap();
        let state = find_state(&mut checkpoint.state, kind).unwrap_or_else(|| panic!("no {kind} state"));
        state.fields.insert(field.to_string(), value);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ds.iter_from(&checkpoint).map(|it| drain(it, MAX))
        }));
        let outcome = outcome.unwrap_or_else(|_| panic!("{kind}.{field}: a malformed checkpoint panicked"));
        assert!(outcome.is_err(), "{kind}.{field}: accepted: {outcome:?}");
    }
}
