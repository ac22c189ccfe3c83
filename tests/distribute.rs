//! A dataset split among workers: the parts hold every element of the whole exactly once,
//! the shard goes down to the sources where that is sound, and each part is deterministic.

mod common;

use std::sync::Arc;

use arrow::array::Int64Array;
use arrow::record_batch::RecordBatch;
use common::column_i64;
use flumen::prelude::*;
use flumen::SplitPolicy;

/// Every element's `field` (unbatching list fields), sorted: the multiset of a run.
fn sorted_values(ds: &Dataset, field: &str) -> Vec<i64> {
    let ds = if ds.element_spec().batch_dims > 0 { ds.unbatch().unwrap() } else { ds.clone() };
    let mut v = common::ints(&ds, field);
    v.sort_unstable();
    v
}

/// The parts of `ds` for `n` workers: their values (in order) and the policy.
fn parts(ds: &Dataset, n: u64, field: &str) -> (Vec<Vec<i64>>, SplitPolicy) {
    let mut policy = None;
    let values = (0..n)
        .map(|i| {
            let split = ds.split_for_worker(n, i, 7).unwrap();
            policy = Some(split.policy.clone());
            let part = if split.dataset.element_spec().batch_dims > 0 {
                split.dataset.unbatch().unwrap()
            } else {
                split.dataset
            };
            common::ints(&part, field)
        })
        .collect();
    (values, policy.unwrap())
}

/// Asserts that the parts for 1..=4 workers hold exactly `ds`'s elements, and returns the
/// policy of the last split.
fn assert_exactly_once(ds: &Dataset, field: &str) -> SplitPolicy {
    let whole = sorted_values(ds, field);
    let mut policy = None;
    for n in 1..=4 {
        let (values, p) = parts(ds, n, field);
        let mut union: Vec<i64> = values.concat();
        union.sort_unstable();
        assert_eq!(union, whole, "{n} workers ({p})");
        policy = Some(p);
    }
    policy.unwrap()
}

/// `files` text files of `per_file` lines each, line `r` of file `f` the number `1000 f + r`.
fn text_files(dir: &std::path::Path, files: usize, per_file: usize) -> Vec<String> {
    (0..files)
        .map(|f| {
            let path = dir.join(format!("r{f}.txt"));
            let lines: Vec<String> = (0..per_file).map(|r| format!("{}", f * 1000 + r)).collect();
            std::fs::write(&path, lines.join("\n")).unwrap();
            path.to_string_lossy().into_owned()
        })
        .collect()
}

/// The lines (decimal numbers) as int field `v`.
fn lines_as_ints(ds: Dataset) -> Dataset {
    ds.map(MapFunction::select([("v", cast(col("line"), arrow::datatypes::DataType::Int64))])).unwrap()
}

#[test]
fn maps_filters_unseeded_shuffles_and_batches_split_at_the_source() {
    let ds = Dataset::range(0, 100)
        .unwrap()
        .map(MapFunction::with_fields([("y", col("value") * lit(3i64))]))
        .unwrap()
        .filter(col("value").gt(lit(9i64)))
        .unwrap()
        .shuffle(16, None)
        .unwrap()
        .batch(7)
        .unwrap()
        .prefetch(Tunable::Autotune)
        .unwrap();
    assert_eq!(assert_exactly_once(&ds, "y"), SplitPolicy::Sources);
    // Each part reads only its own share of the range.
    let explain = ds.split_for_worker(4, 1, 7).unwrap().dataset.explain();
    assert!(explain.contains("shard"), "{explain}");
}

#[test]
fn a_part_is_the_same_every_time_even_with_unseeded_randomness() {
    let ds = Dataset::range(0, 200).unwrap().shuffle(50, None).unwrap();
    let run = |seed| common::ints(&ds.split_for_worker(3, 2, seed).unwrap().dataset, "value");
    assert_eq!(run(11), run(11));
    assert_ne!(run(11), run(12), "the seed pins the shuffle");
}

#[test]
fn operators_that_count_elements_shard_the_output() {
    let ds = Dataset::range(0, 50).unwrap().map(MapFunction::with_fields([("y", col("value") + lit(1i64))])).unwrap();
    for (ds, op) in [
        (ds.take(20).unwrap(), "take"),
        (ds.skip(5).unwrap(), "skip"),
        (ds.batch_with(8, true).unwrap(), "batch"),
        (ds.enumerate(0).unwrap(), "enumerate"),
    ] {
        match assert_exactly_once(&ds, "y") {
            SplitPolicy::Output { reason } => assert!(reason.starts_with(op), "{reason}"),
            SplitPolicy::Sources => panic!("{op} must see every element"),
        }
    }
}

#[test]
fn files_are_split_by_file_and_too_few_files_by_record() {
    let dir = tempfile::tempdir().unwrap();
    let paths = text_files(dir.path(), 3, 40);
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    let files = lines_as_ints(Dataset::text_lines(&refs).unwrap());
    assert_eq!(assert_exactly_once(&files, "v"), SplitPolicy::Sources);
    // With at least one file per worker each worker reads whole files of its own.
    let (two, _) = parts(&files, 3, "v");
    for (i, part) in two.iter().enumerate() {
        assert!(part.iter().all(|v| v / 1000 == i as i64), "worker {i} read another's file: {part:?}");
    }
    // With fewer files than workers, every worker still gets records (by record).
    let (four, _) = parts(&files, 4, "v");
    assert!(four.iter().all(|p| p.len() == 30), "{:?}", four.iter().map(Vec::len).collect::<Vec<_>>());

    // The same for splits read by a parallel interleave (Python's read_files).
    let splits = Dataset::splits(&refs, FileRead::TextLines)
        .unwrap()
        .interleave_with(
            DatasetFunction::ReadSplit(FileRead::TextLines),
            Tunable::Fixed(2),
            1,
            Parallel { num_parallel_calls: Tunable::Fixed(2), deterministic: Some(false) },
        )
        .unwrap();
    let splits = lines_as_ints(splits);
    assert_eq!(assert_exactly_once(&splits, "v"), SplitPolicy::Sources);
    let (four, _) = parts(&splits, 4, "v");
    assert!(four.iter().all(|p| p.len() == 30), "{:?}", four.iter().map(Vec::len).collect::<Vec<_>>());
}

#[test]
fn an_unseeded_file_list_shuffle_is_pinned_for_all_workers() {
    let dir = tempfile::tempdir().unwrap();
    text_files(dir.path(), 6, 5);
    let pattern = dir.path().join("*.txt").to_string_lossy().into_owned();
    let ds = Dataset::list_files(&pattern, true, None)
        .unwrap()
        .interleave(DatasetFunction::read_file("filename", FileRead::TextLines), Tunable::Fixed(2), 1)
        .unwrap();
    assert_eq!(assert_exactly_once(&lines_as_ints(ds), "v"), SplitPolicy::Sources);
}

#[test]
fn parquet_row_groups_of_one_file_are_shared_out() {
    let dir = tempfile::tempdir().unwrap();
    let batch =
        RecordBatch::try_from_iter([("v", Arc::new(Int64Array::from((0..100).collect::<Vec<_>>())) as _)]).unwrap();
    let props = parquet::file::properties::WriterProperties::builder().set_max_row_group_row_count(Some(10)).build();
    let path = dir.path().join("one.parquet");
    let mut w =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), batch.schema(), Some(props))
            .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let p = path.to_string_lossy().into_owned();
    let ds = Dataset::parquet(&[&p], None).unwrap();
    assert_eq!(assert_exactly_once(&ds, "v"), SplitPolicy::Sources);
    let (three, _) = parts(&ds, 3, "v");
    // Row groups 0, 3, 6, 9 go to worker 0: whole groups of ten, not every third row.
    assert_eq!(three[0], (0..10).chain(30..40).chain(60..70).chain(90..100).collect::<Vec<i64>>());
}

#[test]
fn zipped_and_concatenated_inputs() {
    let a = Dataset::range(0, 30).unwrap();
    let b = Dataset::range(100, 130).unwrap().map(MapFunction::select([("w", col("value"))])).unwrap();
    let zipped = Dataset::zip(&[&a, &b]).unwrap();
    assert!(matches!(assert_exactly_once(&zipped, "w"), SplitPolicy::Output { .. }));
    let both = a.concatenate(&Dataset::range(500, 517).unwrap()).unwrap();
    assert_eq!(assert_exactly_once(&both, "value"), SplitPolicy::Sources);
}

#[test]
fn a_worker_index_out_of_range_is_an_error() {
    let ds = Dataset::range(0, 3).unwrap();
    let err = ds.split_for_worker(2, 2, 0).err().expect("an error").to_string();
    assert!(err.contains("worker 2 of 2"), "{err}");
    assert!(ds.split_for_worker(0, 0, 0).is_err());
}

#[test]
fn the_batch_of_a_part_is_its_own() {
    // Batches form within a part: 10 elements over 2 workers in batches of 4 are 4+1 each.
    let ds = Dataset::range(0, 10).unwrap().batch(4).unwrap();
    let sizes: Vec<usize> =
        ds.split_for_worker(2, 0, 0).unwrap().dataset.iter().map(|b| column_i64(&b.unwrap(), "value").len()).collect();
    assert_eq!(sizes, vec![4, 1]);
}

#[test]
fn split_units_count_whole_files_and_values() {
    let dir = tempfile::tempdir().unwrap();
    let paths = text_files(dir.path(), 3, 4);
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    assert_eq!(Dataset::text_lines(&refs).unwrap().split_units(), Some(3));
    let both = Dataset::range(0, 2).unwrap().concatenate(&Dataset::range(0, 9).unwrap()).unwrap();
    assert_eq!(both.split_units(), Some(2));
    assert_eq!(Dataset::range(0, 9).unwrap().take(3).unwrap().split_units(), None);
}

#[test]
fn avro_blocks_of_one_file_are_shared_out() {
    use flumen::crates::sources::avro::container::Codec;
    use flumen::crates::sources::avro::writer::{AvroWriter, Datum};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("one.avro").to_string_lossy().into_owned();
    let schema = r#"{"type":"record","name":"r","fields":[{"name":"v","type":"long"}]}"#;
    // Blocks of about 100 bytes: dozens of blocks in one file.
    let mut w = AvroWriter::create(&path, schema, Codec::Null).unwrap().with_block_bytes(100);
    for v in 0..600i64 {
        w.append(&Datum::Record(vec![Datum::Long(v)])).unwrap();
    }
    w.finish().unwrap();
    let ds = Dataset::avro(&[&path], AvroOptions::default()).unwrap();
    assert_eq!(assert_exactly_once(&ds, "v"), SplitPolicy::Sources);
    let (three, _) = parts(&ds, 3, "v");
    assert!(three.iter().all(|p| !p.is_empty()), "{:?}", three.iter().map(Vec::len).collect::<Vec<_>>());
    // Whole blocks: each part's first values run on consecutively.
    assert_eq!(three[0][1], three[0][0] + 1);
}
