//! Sources end to end: file pipelines and the errors bad files produce.

mod common;

use std::sync::Arc;

use arrow::array::{Float32Array, Int64Array};
use arrow::record_batch::RecordBatch;
use common::*;
use flumen::prelude::*;

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

#[test]
fn figure4_pipeline_over_csv_files() {
    // tf.data paper, Figure 4: list_files -> interleave(read) -> map(parse) -> batch -> prefetch
    let dir = tempfile::tempdir().unwrap();
    for f in 0..3 {
        let rows: String = (0..5).map(|r| format!("{},{}\n", f * 100 + r, r as f64 * 0.5)).collect();
        write(dir.path(), &format!("part-{f}.csv"), &format!("id,x\n{rows}"));
    }
    let ds = Dataset::list_files(&format!("{}/part-*.csv", dir.path().display()), false, None)
        .unwrap()
        .interleave(DatasetFunction::read_file("filename", FileRead::Csv(CsvOptions::default())), Tunable::Fixed(2), 2)
        .unwrap()
        .map(MapFunction::with_fields([("x2", col("x") * lit(2.0))]))
        .unwrap()
        .batch(4)
        .unwrap()
        .prefetch(Tunable::Autotune)
        .unwrap();
    let ids: Vec<i64> = int_batches(&ds, "id").concat();
    // cycle 2, block 2: files 0 and 1 alternate two rows at a time, then file 2 takes over
    // slot 0 when file 0 ends.
    assert_eq!(ids, vec![0, 1, 100, 101, 2, 3, 102, 103, 4, 104, 200, 201, 202, 203, 204]);
    let x2: Vec<f64> = ds.iter().flat_map(|b| column_f64(&b.unwrap(), "x2")).collect();
    assert_eq!(x2[..4], [0.0, 1.0, 0.0, 1.0]);
}

#[test]
fn list_files_sorts_and_shuffles_by_seed() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["c.txt", "a.txt", "b.txt", "d.txt", "e.txt"] {
        write(dir.path(), name, "x\n");
    }
    let pattern = format!("{}/*.txt", dir.path().display());
    let sorted = strings(&Dataset::list_files(&pattern, false, None).unwrap(), "filename");
    let names: Vec<String> = sorted.iter().map(|p| p.rsplit('/').next().unwrap().to_string()).collect();
    assert_eq!(names, vec!["a.txt", "b.txt", "c.txt", "d.txt", "e.txt"]);
    let shuffled = Dataset::list_files(&pattern, true, Some(11)).unwrap();
    let first = strings(&shuffled, "filename");
    let mut check = first.clone();
    check.sort();
    assert_eq!(check, sorted);
    let again = Dataset::list_files(&pattern, true, Some(11)).unwrap();
    assert_eq!(strings(&again, "filename"), first, "same seed, same first order");
    let err = Dataset::list_files(&format!("{}/*.nothing", dir.path().display()), false, None).unwrap_err();
    assert!(err.to_string().contains("*.nothing"), "{err}");
}

#[test]
fn csv_errors_name_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(dir.path(), "bad.csv", "a,b\n1,2\n3,4\n5\n7,8\n");
    let schema =
        ElementSpec::new(vec![FieldSpec::scalar("a", DType::Int64), FieldSpec::scalar("b", DType::Int64)]).unwrap();
    let ds = Dataset::csv(&[&bad], CsvOptions::default().with_schema(schema.clone())).unwrap();
    let err = ds.iter_chunks().find_map(|c| c.err()).expect("an error").to_string();
    assert!(err.contains("bad.csv") && err.contains("line 4"), "{err}");
    let unparsable = write(dir.path(), "nan.csv", "a,b\n1,2\n3,four\n");
    let ds = Dataset::csv(&[&unparsable], CsvOptions::default().with_schema(schema)).unwrap();
    let err = ds.iter_chunks().find_map(|c| c.err()).expect("an error").to_string();
    assert!(err.contains("nan.csv") && err.contains("line 3"), "{err}");
}

#[test]
fn missing_and_truncated_files_are_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.csv").to_string_lossy().into_owned();
    let err = Dataset::csv(&[&missing], CsvOptions::default()).unwrap_err().to_string();
    assert!(err.contains("missing.csv"), "{err}");

    let batch =
        RecordBatch::try_from_iter([("v", Arc::new(Int64Array::from((0..1000).collect::<Vec<_>>())) as _)]).unwrap();
    let path = dir.path().join("cut.parquet");
    let mut w =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let full = path.to_string_lossy().into_owned();
    let ds = Dataset::parquet(&[&full], None).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let err = ds.iter_chunks().find_map(|c| c.err()).expect("an error").to_string();
    assert!(err.contains("cut.parquet"), "{err}");
}

#[test]
fn parquet_reads_only_projected_columns() {
    let dir = tempfile::tempdir().unwrap();
    let batch = RecordBatch::try_from_iter([
        ("a", Arc::new(Int64Array::from(vec![1, 2, 3])) as _),
        ("b", Arc::new(Float32Array::from(vec![0.5, 1.5, 2.5])) as _),
    ])
    .unwrap();
    let path = dir.path().join("t.parquet");
    let mut w =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let p = path.to_string_lossy().into_owned();
    let ds = Dataset::parquet(&[&p], Some(vec!["b".into()])).unwrap();
    assert_eq!(ds.element_spec().to_string(), "{b: float32[]}");
    let values: Vec<f64> = ds.iter_chunks().flat_map(|c| column_f64(&c.unwrap(), "b")).collect();
    assert_eq!(values, vec![0.5, 1.5, 2.5]);
}

#[test]
fn text_lines_and_generators() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "t.txt", "alpha\r\nbeta\ngamma");
    assert_eq!(strings(&Dataset::text_lines(&[&p]).unwrap(), "line"), vec!["alpha", "beta", "gamma"]);
    let spec = ElementSpec::new(vec![FieldSpec::scalar("v", DType::Int64)]).unwrap();
    let g =
        Dataset::from_generator(Some("g"), spec, || Box::new((0..4).map(|i| Ok(int_batch("v", vec![i; i as usize])))))
            .unwrap();
    assert_eq!(ints(&g, "v"), vec![1, 2, 2, 3, 3, 3], "empty chunks are skipped");
    let bad_spec = ElementSpec::new(vec![FieldSpec::scalar("v", DType::Utf8)]).unwrap();
    let liar =
        Dataset::from_generator(Some("liar"), bad_spec, || Box::new(std::iter::once(Ok(int_batch("v", vec![1])))))
            .unwrap();
    let err = liar.iter().next().unwrap().unwrap_err().to_string();
    assert!(err.contains("generator 'liar'"), "{err}");
}

#[test]
fn splits_let_shard_and_interleave_work_on_row_groups() {
    // Two Parquet files of 3 row groups of 4 rows each: values f*100 + r.
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    for f in 0..2i64 {
        let batch = RecordBatch::try_from_iter([(
            "v",
            Arc::new(Int64Array::from_iter_values((0..12).map(|r| f * 100 + r))) as _,
        )])
        .unwrap();
        let props = parquet::file::properties::WriterProperties::builder().set_max_row_group_row_count(Some(4)).build();
        let path = dir.path().join(format!("p{f}.parquet"));
        let mut w =
            parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), batch.schema(), Some(props))
                .unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        paths.push(path.to_string_lossy().into_owned());
    }
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    let splits = Dataset::splits(&paths, FileRead::Parquet { columns: None }).unwrap();
    assert_eq!(splits.element_spec().to_string(), "{file: string[], row_group: int64[]}");
    assert_eq!(ints(&splits, "row_group"), vec![0, 1, 2, 0, 1, 2]);
    // Worker 1 of 2 takes splits 1, 3, 5: file 0 group 1, file 1 groups 0 and 2.
    let shard = splits
        .shard(2, 1)
        .unwrap()
        .interleave(DatasetFunction::ReadSplit(FileRead::Parquet { columns: None }), Tunable::Fixed(1), 1)
        .unwrap();
    assert_eq!(ints(&shard, "v"), vec![4, 5, 6, 7, 100, 101, 102, 103, 108, 109, 110, 111]);
    // Text files are one split each.
    let text = write(dir.path(), "t.txt", "a\nb\n");
    let text_splits = Dataset::splits(&[&text], FileRead::TextLines).unwrap();
    assert_eq!(ints(&text_splits, "row_group"), vec![-1]);
}

#[test]
fn ignore_errors_skips_exactly_the_bad_csv_records() {
    // tf.data: CsvDataset(...).ignore_errors() drops only the malformed records.
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a.csv", "x,y\n1,10\n2\n3,30\n4,forty\n5,50\n");
    let b = write(dir.path(), "b.csv", "x,y\n6,60\n7,70\n");
    let schema =
        ElementSpec::new(vec![FieldSpec::scalar("x", DType::Int64), FieldSpec::scalar("y", DType::Int64)]).unwrap();
    let ds = Dataset::csv(&[&a, &b], CsvOptions::default().with_schema(schema)).unwrap();
    let errors: Vec<String> = ds.iter().filter_map(|e| e.err()).map(|e| e.to_string()).collect();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].contains("a.csv") && errors[0].contains("line 3"), "{}", errors[0]);
    assert!(errors[1].contains("a.csv") && errors[1].contains("line 5"), "{}", errors[1]);
    let kept = ds.ignore_errors().unwrap();
    assert_eq!(ints(&kept, "x"), vec![1, 3, 5, 6, 7]);
    assert_eq!(ints(&kept, "y"), vec![10, 30, 50, 60, 70]);
}

/// Writes `n` records `"<tag>-<i>"` to `name` in `dir`.
fn write_tfrecord(dir: &std::path::Path, name: &str, tag: &str, n: usize, compression: RecordCompression) -> String {
    let path = dir.join(name).to_str().unwrap().to_string();
    let mut writer = flumen::TfRecordWriter::create(&path, compression).unwrap();
    for i in 0..n {
        writer.write(format!("{tag}-{i}").as_bytes()).unwrap();
    }
    writer.finish().unwrap();
    path
}

fn records(ds: &Dataset) -> Vec<String> {
    use arrow::array::AsArray;
    ds.iter()
        .flat_map(|b| {
            let b = b.unwrap();
            let column = b.column_by_name("record").unwrap().as_binary::<i32>().clone();
            column.iter().map(|r| String::from_utf8(r.unwrap().to_vec()).unwrap()).collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn tfrecord_files_read_in_order_interleaved_and_sharded() {
    let dir = tempfile::tempdir().unwrap();
    let a = write_tfrecord(dir.path(), "a.tfrecord", "a", 3, RecordCompression::None);
    let b = write_tfrecord(dir.path(), "b.tfrecord.gz", "b", 2, RecordCompression::Gzip);
    let plain = Dataset::tfrecord(&[&a], RecordCompression::None).unwrap();
    assert_eq!(plain.element_spec().to_string(), "{record: bytes[]}");
    assert_eq!(records(&plain), vec!["a-0", "a-1", "a-2"]);
    // Mapped (the default) or read, the records are the same.
    assert!(Options::default().map_files);
    assert_eq!(records(&plain.with_options(Options::default().with_map_files(false))), vec!["a-0", "a-1", "a-2"]);
    assert_eq!(records(&Dataset::tfrecord(&[&b], RecordCompression::Gzip).unwrap()), vec!["b-0", "b-1"]);
    // tf.data's parallel reading: files (one split each) interleaved, then a shard of them.
    let gz = write_tfrecord(dir.path(), "c.tfrecord.gz", "c", 3, RecordCompression::Gzip);
    let read = FileRead::TfRecord(RecordCompression::Gzip);
    let splits = Dataset::splits(&[&b, &gz], read.clone()).unwrap();
    assert_eq!(ints(&splits, "row_group"), vec![-1, -1]);
    let interleaved = splits.interleave(DatasetFunction::ReadSplit(read.clone()), Tunable::Fixed(2), 1).unwrap();
    assert_eq!(records(&interleaved), vec!["b-0", "c-0", "b-1", "c-1", "c-2"]);
    let second =
        splits.shard(2, 1).unwrap().interleave(DatasetFunction::ReadSplit(read), Tunable::Fixed(1), 1).unwrap();
    assert_eq!(records(&second), vec!["c-0", "c-1", "c-2"]);
}

/// `Options::map_files` reaches the reader: while an iterator is in the middle of a file, the
/// process maps that file only when the option is on (Linux lists maps in `/proc/self/maps`).
#[cfg(target_os = "linux")]
#[test]
fn map_files_decides_whether_a_tfrecord_file_is_mapped() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_tfrecord(dir.path(), "mapped-or-read.tfrecord", "r", 10, RecordCompression::None);
    let mapped = || std::fs::read_to_string("/proc/self/maps").unwrap().contains(&path);
    for map in [true, false] {
        let options = Options { chunk_rows: 2, ..Options::default() }.with_map_files(map);
        let ds = Dataset::tfrecord(&[&path], RecordCompression::None).unwrap().with_options(options);
        let mut it = ds.iter();
        let first = it.next().unwrap().unwrap().num_rows();
        assert!(first < 10, "the iterator is in the middle of the file");
        assert_eq!(mapped(), map, "map_files {map}");
        assert_eq!(first + it.map(|b| b.unwrap().num_rows()).sum::<usize>(), 10);
    }
    assert!(!mapped(), "the map is gone with the iterator");
}

#[test]
fn a_corrupt_tfrecord_names_file_and_offset_and_ignore_errors_skips_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_tfrecord(dir.path(), "a.tfrecord", "rec", 4, RecordCompression::None);
    let mut bytes = std::fs::read(&path).unwrap();
    // Record 2 starts at 12 + 5 + 4 = 21; flip a byte of its data.
    bytes[21 + 12 + 1] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    for map in [true, false] {
        let ds = Dataset::tfrecord(&[&path], RecordCompression::None).unwrap();
        let ds = ds.with_options(Options::default().with_map_files(map));
        let errors: Vec<String> = ds.iter().filter_map(|e| e.err()).map(|e| e.to_string()).collect();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("a.tfrecord") && errors[0].contains("record index 1 at byte 21"), "{}", errors[0]);
        assert_eq!(records(&ds.ignore_errors().unwrap()), vec!["rec-0", "rec-2", "rec-3"]);
    }
}

#[test]
fn tfrecord_examples_parse_batch_and_skip_bad_records() {
    use arrow::array::AsArray;
    use arrow::datatypes::{Float32Type, Int64Type};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("e.tfrecord").to_str().unwrap().to_string();
    // Record 3 lacks its label.
    write_tfrecords(&path, (0..5i64).map(|i| example((i != 3).then_some(i * 10), [i as f32, -(i as f32)])));
    let features =
        vec![FeatureSpec::fixed("label", DType::Int64, vec![]), FeatureSpec::fixed("x", DType::Float32, vec![2])];
    let parse = MapFunction::parse_example("record", features).unwrap();
    let ds = Dataset::tfrecord(&[&path], RecordCompression::None).unwrap().map(parse).unwrap();
    assert_eq!(ds.element_spec().to_string(), "{label: int64[], x: float32[2]}");
    let (mut rows, mut errors) = (0, vec![]);
    for item in ds.iter() {
        match item {
            Ok(chunk) => rows += chunk.num_rows(),
            Err(e) => errors.push(e.to_string()),
        }
    }
    assert_eq!(rows, 4);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("required feature 'label' is missing"), "{}", errors[0]);
    let batched = ds.ignore_errors().unwrap().batch(2).unwrap();
    // A batch is a RecordBatch whose rows are its elements.
    let batches: Vec<_> = batched.iter().map(|b| b.unwrap()).collect();
    let sizes: Vec<usize> = batches.iter().map(|b| b.num_rows()).collect();
    assert_eq!(sizes, vec![2, 2]);
    let labels: Vec<i64> =
        batches.iter().flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec()).collect();
    assert_eq!(labels, vec![0, 10, 20, 40]);
    let x = batches[1].column(1).as_fixed_size_list().values().as_primitive::<Float32Type>().clone();
    assert_eq!(x.values().to_vec(), vec![2.0, -2.0, 4.0, -4.0]);
}

/// A parse straight after an interleave of TFRecord files reads the records where the readers
/// read them (the interleave hands it views of their windows rather than copying the bytes).
/// What comes out must be what the records the interleave yields on its own (copied, as
/// bytes) parse to, in their order, sequential or parallel, with a bad record failing in its
/// place.
#[test]
fn tfrecord_examples_parsed_straight_after_an_interleave_come_in_its_order() {
    use arrow::array::AsArray;
    let dir = tempfile::tempdir().unwrap();
    let mut labels = std::collections::HashMap::new();
    let mut paths = vec![];
    for (f, n) in [7usize, 3, 5, 4].into_iter().enumerate() {
        let path = dir.path().join(format!("p{f}.tfrecord")).to_str().unwrap().to_string();
        // File 1's second record has no label, which is required: an error.
        let label = |i: usize| ((f, i) != (1, 1)).then_some(100 * f as i64 + i as i64);
        let records: Vec<Vec<u8>> = (0..n).map(|i| example(label(i), [f as f32, i as f32])).collect();
        for (i, r) in records.iter().enumerate() {
            labels.insert(r.clone(), label(i));
        }
        write_tfrecords(&path, &records);
        paths.push(path);
    }
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    let read = FileRead::TfRecord(RecordCompression::None);
    let features =
        vec![FeatureSpec::fixed("label", DType::Int64, vec![]), FeatureSpec::fixed("x", DType::Float32, vec![2])];
    for parallel in [false, true] {
        let calls = Parallel { num_parallel_calls: Tunable::Fixed(if parallel { 3 } else { 1 }), deterministic: None };
        let splits = Dataset::splits(&paths, read.clone()).unwrap();
        let interleaved =
            splits.interleave_with(DatasetFunction::ReadSplit(read.clone()), Tunable::Fixed(3), 2, calls).unwrap();
        let parsed =
            interleaved.map_with(MapFunction::parse_example("record", features.clone()).unwrap(), calls).unwrap();
        for chunk_rows in [2, 1000] {
            let options = Options::default().with_chunk_rows(chunk_rows);
            // The interleave alone yields the records as bytes, copied out of the windows.
            let mut want = vec![];
            for chunk in interleaved.with_options(options.clone()).iter_chunks() {
                let chunk = chunk.unwrap();
                let records = chunk.column_by_name("record").unwrap().as_binary::<i32>();
                want.extend(records.iter().map(|r| labels[r.unwrap()].ok_or("missing")));
            }
            assert_eq!(want.len(), 19);
            let mut got = vec![];
            for item in parsed.with_options(options).iter_chunks() {
                match item {
                    Ok(chunk) => got.extend(column_i64(&chunk, "label").into_iter().map(Ok)),
                    Err(e) => {
                        assert!(e.to_string().contains("required feature 'label' is missing"), "{e}");
                        got.push(Err("missing"));
                    }
                }
            }
            assert_eq!(got, want, "parallel {parallel}, chunks of {chunk_rows}");
        }
    }
}

#[test]
fn sparse_features_parse_from_tfrecords_and_batch() {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Float32Type, Int64Type};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.tfrecord").to_str().unwrap().to_string();
    let rows: [(&[i64], &[f32]); 4] = [(&[2, 0], &[2.0, 0.5]), (&[], &[]), (&[9], &[1.0]), (&[1], &[3.0])];
    write_tfrecords(
        &path,
        rows.iter().map(|(idx, val)| {
            flumen::serialize_example(&[
                ("idx", flumen::FeatureValues::Int64(idx)),
                ("val", flumen::FeatureValues::Float32(val)),
            ])
        }),
    );
    let features = vec![FeatureSpec::sparse("s", DType::Float32, vec!["idx".into()], "val", vec![4])];
    let parse = MapFunction::parse_example("record", features).unwrap();
    let ds = Dataset::tfrecord(&[&path], RecordCompression::None).unwrap().map(parse).unwrap();
    assert_eq!(ds.element_spec().to_string(), "{s: sparse float32[4]}");
    // Record 2's index 9 lies outside the dense shape [4].
    let errors: Vec<String> = ds.iter().filter_map(|e| e.err()).map(|e| e.to_string()).collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("index 9 of feature 'idx' is outside [0, 4)"), "{}", errors[0]);
    let kept: Vec<_> = ds.ignore_errors().unwrap().iter().map(|e| e.unwrap()).collect();
    // Each element's sparse tensor as its flat coordinates and its values.
    let entry = |element: &arrow::record_batch::RecordBatch| {
        let s = element.column(0).as_struct();
        let coords = s.column(0).as_list::<i32>().value(0);
        let coords = coords.as_fixed_size_list().values().as_primitive::<Int64Type>().values().to_vec();
        let values = s.column(1).as_list::<i32>().value(0);
        (coords, values.as_primitive::<Float32Type>().values().to_vec())
    };
    let entries: Vec<(Vec<i64>, Vec<f32>)> = kept.iter().map(entry).collect();
    assert_eq!(entries, vec![(vec![0, 2], vec![0.5, 2.0]), (vec![], vec![]), (vec![1], vec![3.0])]);
    assert!(kept.iter().all(|e| e.column(0).null_count() == 0));
    // Batched as tf.data batches SparseTensors: each entry's element position comes first.
    let batched = ds.ignore_errors().unwrap().batch(2).unwrap();
    assert_eq!(batched.element_spec().to_string(), "{s: sparse float32[?, 4]}");
    let batches: Vec<(Vec<i64>, Vec<f32>)> = batched
        .iter_chunks()
        .map(|chunk| {
            let chunk = chunk.unwrap();
            let s = chunk.column(0).as_struct();
            let coords = s.column(0).as_list::<i32>();
            let values = s.column(1).as_list::<i32>();
            (0..chunk.num_rows())
                .map(|r| {
                    let c = coords.value(r);
                    let c = c.as_fixed_size_list().values().as_primitive::<Int64Type>().values().to_vec();
                    (c, values.value(r).as_primitive::<Float32Type>().values().to_vec())
                })
                .collect::<Vec<_>>()
        })
        .collect::<Vec<_>>()
        .concat();
    assert_eq!(batches, vec![(vec![0, 0, 0, 2], vec![0.5, 2.0]), (vec![0, 1], vec![3.0])]);
    // The element iterator gives each batch as one row, the same entries, and each batch's
    // dense shape: its element count before the feature's size.
    let elements: Vec<(Vec<i64>, Vec<f32>)> = batched.iter().map(|e| entry(&e.unwrap())).collect();
    assert_eq!(elements, batches);
    let shapes: Vec<Vec<i64>> = batched
        .iter()
        .map(|e| flumen::crates::ir::sparse::dense_shape(e.unwrap().column(0).as_struct(), 0).unwrap())
        .collect();
    assert_eq!(shapes, vec![vec![2, 4], vec![1, 4]]);
    // Unbatched back into the elements, as many as each batch's dense_shape[0] says.
    let unbatched = batched.unbatch().unwrap();
    assert_eq!(unbatched.element_spec().to_string(), "{s: sparse float32[4]}");
    let unbatched: Vec<(Vec<i64>, Vec<f32>)> = unbatched.iter().map(|e| entry(&e.unwrap())).collect();
    assert_eq!(unbatched, entries);
}

/// Avro files of `rows` records each (`id` long, `score` nullable double, `name` string,
/// `tokens` array of longs), small deflate blocks; record `i` of file `f` has id
/// `f * 1000 + i`.
fn avro_files(dir: &std::path::Path, files: usize, rows: i64) -> Vec<String> {
    use flumen::crates::sources::avro::container::Codec;
    use flumen::crates::sources::avro::writer::{AvroWriter, Datum};
    let schema = r#"{"type":"record","name":"r","fields":[{"name":"id","type":"long"},
        {"name":"score","type":["null","double"]},{"name":"name","type":"string"},
        {"name":"tokens","type":{"type":"array","items":"long"}}]}"#;
    (0..files)
        .map(|f| {
            let path = dir.join(format!("part-{f}.avro")).to_str().unwrap().to_string();
            let mut w = AvroWriter::create(&path, schema, Codec::Deflate).unwrap().with_block_bytes(300);
            for i in 0..rows {
                let id = f as i64 * 1000 + i;
                let score = match i % 4 {
                    0 => Datum::Union(0, Box::new(Datum::Null)),
                    _ => Datum::Union(1, Box::new(Datum::Double(id as f64 / 2.0))),
                };
                let tokens = Datum::Array((0..i % 3).map(Datum::Long).collect());
                w.append(&Datum::Record(vec![Datum::Long(id), score, Datum::String(format!("r{id}")), tokens]))
                    .unwrap();
            }
            w.finish().unwrap();
            path
        })
        .collect()
}

fn avro_ids(ds: &Dataset) -> Vec<i64> {
    use arrow::array::AsArray;
    ds.iter_chunks()
        .flat_map(|c| {
            c.unwrap().column_by_name("id").unwrap().as_primitive::<arrow::datatypes::Int64Type>().values().to_vec()
        })
        .collect()
}

#[test]
fn avro_files_read_as_their_records() {
    use arrow::array::{Array, AsArray};
    let dir = tempfile::tempdir().unwrap();
    let paths = avro_files(dir.path(), 2, 50);
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    let ds = Dataset::avro(&refs, AvroOptions::default()).unwrap();
    assert_eq!(
        ds.element_spec().to_string(),
        "{id: int64[], score: float64[], name: string[], tokens: ragged int64[?]}"
    );
    let expected: Vec<i64> = (0..2).flat_map(|f| (0..50).map(move |i| f * 1000 + i)).collect();
    assert_eq!(avro_ids(&ds), expected);
    // Every value as written, nulls included.
    for chunk in ds.iter_chunks() {
        let chunk = chunk.unwrap();
        let ids = chunk.column(0).as_primitive::<arrow::datatypes::Int64Type>();
        let scores = chunk.column(1).as_primitive::<arrow::datatypes::Float64Type>();
        let names = chunk.column(2).as_string::<i32>();
        let tokens = chunk.column(3).as_list::<i32>();
        for r in 0..chunk.num_rows() {
            let (id, i) = (ids.value(r), ids.value(r) % 1000);
            assert_eq!(scores.is_null(r), i % 4 == 0);
            if i % 4 != 0 {
                assert_eq!(scores.value(r), id as f64 / 2.0);
            }
            assert_eq!(names.value(r), format!("r{id}"));
            let t = tokens.value(r);
            assert_eq!(
                t.as_primitive::<arrow::datatypes::Int64Type>().values().to_vec(),
                (0..i % 3).collect::<Vec<i64>>()
            );
        }
    }
    // Projection: the optimizer pushes the fields read into the reader.
    let projected = ds.map(MapFunction::select([("id", col("id"))])).unwrap();
    assert!(projected.explain().contains("columns [id]"), "{}", projected.explain());
    assert_eq!(avro_ids(&projected), expected);
    // Blocks as splits, read in parallel, in order.
    let splits = Dataset::splits(&refs, FileRead::Avro(AvroOptions::default())).unwrap();
    let parallel = splits
        .interleave_with(
            DatasetFunction::ReadSplit(FileRead::Avro(AvroOptions::default())),
            Tunable::Fixed(4),
            1,
            Parallel { num_parallel_calls: Tunable::Fixed(2), deterministic: Some(true) },
        )
        .unwrap();
    let mut got = avro_ids(&parallel);
    got.sort_unstable();
    assert_eq!(got, expected);
    assert!(splits.iter_chunks().map(|c| c.unwrap().num_rows()).sum::<usize>() > 4, "several blocks per file");
}

#[test]
fn avro_checkpoints_resume_exactly_and_bad_blocks_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let paths = avro_files(dir.path(), 1, 80);
    let ds = Dataset::avro(&[paths[0].as_str()], AvroOptions::default()).unwrap();
    let mut it = ds.iter();
    let head: Vec<RecordBatch> = (0..23).map(|_| it.next().unwrap().unwrap()).collect();
    let checkpoint = it.save(SaveMode::Symbolic).unwrap();
    let rest: Vec<RecordBatch> = ds.iter_from(&checkpoint).unwrap().map(|e| e.unwrap()).collect();
    let whole: Vec<RecordBatch> = ds.iter().map(|e| e.unwrap()).collect();
    assert_eq!(head.len() + rest.len(), whole.len());
    assert_eq!([head, rest].concat(), whole);
    // A corrupt byte in a block's data: that block is an error naming the file and block,
    // and ignore_errors keeps every other record.
    let mut bytes = std::fs::read(&paths[0]).unwrap();
    let at = bytes.len() / 2;
    bytes[at..at + 8].copy_from_slice(&[0xff; 8]);
    let bad = dir.path().join("bad.avro");
    std::fs::write(&bad, &bytes).unwrap();
    let bad = bad.to_str().unwrap();
    let ds = Dataset::avro(&[bad], AvroOptions::default()).unwrap();
    let errors: Vec<String> = ds.iter().filter_map(|e| e.err()).map(|e| e.to_string()).collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("bad.avro") && errors[0].contains("block"), "{}", errors[0]);
    // The records lost are those of the block holding the corrupt bytes (found in the
    // intact file).
    use flumen::crates::sources::avro::container::{block, header};
    let intact = std::fs::read(&paths[0]).unwrap();
    let h = header(&intact).unwrap();
    let mut offset = h.data_start;
    let lost = loop {
        let (b, next) = block(&intact, offset, &h.sync).unwrap().unwrap();
        if next > at {
            break b.count;
        }
        offset = next;
    };
    let kept = avro_ids(&ds.ignore_errors().unwrap());
    assert_eq!(kept.len(), 80 - lost);
    // Not an Avro file: an error when the dataset is built.
    let err = Dataset::avro(&[paths[0].replace(".avro", ".missing").as_str()], AvroOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains(".missing"), "{err}");
}

#[test]
fn avro_feature_specs_read_fixed_shapes_sparse_records_and_varlen_arrays() {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Float32Type, Int64Type};
    use flumen::crates::sources::avro::container::Codec;
    use flumen::crates::sources::avro::writer::{AvroWriter, Datum};
    let schema = r#"{"type":"record","name":"Row","fields":[{"name":"label","type":"long"},
        {"name":"dense_f","type":{"type":"array","items":"float"}},
        {"name":"emb2d","type":{"type":"array","items":{"type":"array","items":"float"}}},
        {"name":"sparse_f","type":{"type":"record","name":"sparse_f","fields":[
            {"name":"indices0","type":{"type":"array","items":"long"}},
            {"name":"values","type":{"type":"array","items":"float"}}]}},
        {"name":"tokens","type":{"type":"array","items":"long"}}]}"#;
    let floats = |v: Vec<f32>| Datum::Array(v.into_iter().map(Datum::Float).collect());
    let longs = |v: Vec<i64>| Datum::Array(v.into_iter().map(Datum::Long).collect());
    // Record `i`: dense_f = [i, i+1, i+2, i+3], emb2d = 2x3 of i, sparse entries at i % 50
    // and 49, tokens 0..i%5. Record 7 (in `bad`) has a dense_f of 3 values.
    let record = |i: i64, dense_len: usize| {
        Datum::Record(vec![
            Datum::Long(i),
            floats((0..dense_len).map(|k| (i + k as i64) as f32).collect()),
            Datum::Array((0..2).map(|_| floats(vec![i as f32; 3])).collect()),
            Datum::Record(vec![longs(vec![i % 50, 49]), floats(vec![1.0, 2.0])]),
            longs((0..i % 5).collect()),
        ])
    };
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, bad: Option<i64>| {
        let path = dir.path().join(name).to_str().unwrap().to_string();
        let mut w = AvroWriter::create(&path, schema, Codec::Deflate).unwrap().with_block_bytes(400);
        for i in 0..30 {
            w.append(&record(i, if Some(i) == bad { 3 } else { 4 })).unwrap();
        }
        w.finish().unwrap();
        path
    };
    let good = write("good.avro", None);
    let features = ElementSpec::new(vec![
        FieldSpec::scalar("label", DType::Int64),
        FieldSpec::tensor("dense_f", DType::Float32, vec![4]),
        FieldSpec::tensor("emb2d", DType::Float32, vec![2, 3]),
        FieldSpec::sparse("sparse_f", DType::Float32, vec![50]),
        FieldSpec::ragged("tokens", DType::Int64, vec![-1]),
    ])
    .unwrap();
    let options = AvroOptions::default().with_features(features.clone());
    let ds = Dataset::avro(&[good.as_str()], options.clone()).unwrap();
    assert_eq!(ds.element_spec(), &features);
    let chunks: Vec<RecordBatch> = ds.iter_chunks().map(|c| c.unwrap()).collect();
    let mut i = 0i64;
    for c in &chunks {
        let dense = c.column(1).as_fixed_size_list();
        let emb = c.column(2).as_fixed_size_list();
        let sparse = c.column(3).as_struct();
        let tokens = c.column(4).as_list::<i32>();
        for r in 0..c.num_rows() {
            let d = dense.value(r);
            assert_eq!(
                d.as_primitive::<Float32Type>().values().to_vec(),
                (0..4).map(|k| (i + k) as f32).collect::<Vec<_>>()
            );
            let e = emb.value(r);
            assert_eq!(e.len(), 2);
            let coords = sparse.column(0).as_list::<i32>().value(r);
            let coords = coords.as_fixed_size_list().values().as_primitive::<Int64Type>().values().to_vec();
            assert_eq!(coords, vec![i % 50, 49]);
            let t = tokens.value(r);
            assert_eq!(t.as_primitive::<Int64Type>().values().to_vec(), (0..i % 5).collect::<Vec<_>>());
            i += 1;
        }
    }
    assert_eq!(i, 30);
    // Batched as tf.data batches (a batch with a sparse field is one row of lists).
    let batched = ds.batch(8).unwrap();
    let sizes: Vec<usize> = batched.iter().map(|b| b.unwrap().column(0).as_list::<i32>().value(0).len()).collect();
    assert_eq!(sizes, vec![8, 8, 8, 6]);
    // A record that does not fit its spec is an error naming file, block and record; the
    // other records of the file are read with ignore_errors, those of its block lost.
    let bad = write("bad.avro", Some(7));
    let ds = Dataset::avro(&[bad.as_str()], options.clone()).unwrap();
    let errors: Vec<String> = ds.iter().filter_map(|e| e.err()).map(|e| e.to_string()).collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    // Where record 7 lies: the blocks' record counts in the file as written.
    use flumen::crates::sources::avro::container::{block, header};
    let bytes = std::fs::read(&bad).unwrap();
    let h = header(&bytes).unwrap();
    let (mut offset, mut first, mut index) = (h.data_start, 0, 0);
    let (block_index, record) = loop {
        let (b, next) = block(&bytes, offset, &h.sync).unwrap().unwrap();
        if first + b.count > 7 {
            break (index, 7 - first);
        }
        (offset, first, index) = (next, first + b.count, index + 1);
    };
    let want = [
        format!("block {block_index},"),
        format!("record {record} of the block"),
        "3 values where its shape says 4".into(),
    ];
    assert!(errors[0].contains("bad.avro") && want.iter().all(|w| errors[0].contains(w.as_str())), "{}", errors[0]);
    let kept: usize = ds.ignore_errors().unwrap().iter_chunks().map(|c| c.unwrap().num_rows()).sum();
    // The record that does not fit is skipped, and only it.
    assert_eq!(kept, 29);
    // A spec the writer schema cannot give is refused when the dataset is built.
    let wrong = ElementSpec::new(vec![FieldSpec::tensor("label", DType::Float32, vec![2])]).unwrap();
    let err = Dataset::avro(&[good.as_str()], AvroOptions::default().with_features(wrong)).unwrap_err().to_string();
    assert!(err.contains("good.avro") && err.contains("\"label\""), "{err}");
}

#[test]
fn avro_blocks_decode_on_the_pool_in_order_and_resume_exactly() {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::Int64Type;
    let dir = tempfile::tempdir().unwrap();
    let paths = avro_files(dir.path(), 3, 120);
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    let want: Vec<i64> = (0..3).flat_map(|f| (0..120).map(move |i| f * 1000 + i)).collect();
    // The ids of a chunk: a column of ids, or of batches of them.
    let ids = |c: &RecordBatch| -> Vec<i64> {
        let column = c.column_by_name("id").unwrap();
        match column.as_list_opt::<i32>() {
            Some(lists) => {
                (0..lists.len()).flat_map(|i| lists.value(i).as_primitive::<Int64Type>().values().to_vec()).collect()
            }
            None => column.as_primitive::<Int64Type>().values().to_vec(),
        }
    };
    for (threads, batch) in [(1, None), (2, None), (2, Some(1)), (2, Some(7)), (4, Some(50))] {
        let options = Options::default().with_threads(threads).with_chunk_rows(10);
        let mut ds = Dataset::avro(&refs, AvroOptions::default()).unwrap().with_options(options.clone());
        if let Some(b) = batch {
            ds = ds.batch(b).unwrap();
        }
        let whole: Vec<RecordBatch> = ds.iter_chunks().map(|c| c.unwrap()).collect();
        assert_eq!(whole.iter().flat_map(ids).collect::<Vec<_>>(), want, "{threads} threads, batch {batch:?}");
        // A checkpoint after any number of chunks resumes exactly.
        for cut in (0..=whole.len()).step_by(3) {
            let mut it = ds.iter_chunks();
            let head: Vec<RecordBatch> = (0..cut).map(|_| it.next().unwrap().unwrap()).collect();
            let checkpoint = it.save(SaveMode::Symbolic).unwrap();
            let mut resumed = ds.iter_chunks();
            resumed.restore(&checkpoint).unwrap();
            let rest: Vec<RecordBatch> = resumed.map(|c| c.unwrap()).collect();
            let got: Vec<i64> = head.iter().chain(&rest).flat_map(ids).collect();
            assert_eq!(got, want, "{threads} threads, batch {batch:?}, resumed after {cut} chunks");
        }
        // Not deterministic: runs come out as they are made, every record once.
        let loose = ds.with_options(options.with_deterministic(false));
        let mut got: Vec<i64> = loose.iter_chunks().flat_map(|c| ids(&c.unwrap())).collect();
        got.sort_unstable();
        assert_eq!(got, want, "{threads} threads, batch {batch:?}, not deterministic");
    }
}

#[test]
fn avro_blocks_in_a_seeded_order_reshuffled_each_iteration_and_resumed_exactly() {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::Int64Type;
    let dir = tempfile::tempdir().unwrap();
    let paths = avro_files(dir.path(), 3, 120);
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    let want: Vec<i64> = (0..3).flat_map(|f| (0..120).map(move |i| f * 1000 + i)).collect();
    let ids = |c: &RecordBatch| -> Vec<i64> {
        let lists = c.column_by_name("id").unwrap().as_list::<i32>();
        (0..lists.len()).flat_map(|i| lists.value(i).as_primitive::<Int64Type>().values().to_vec()).collect()
    };
    let shuffled = |seed: u64| {
        let read = AvroOptions::default().with_shuffled_blocks(Some(seed));
        let options = Options::default().with_threads(2).with_chunk_rows(10);
        Dataset::avro(&refs, read).unwrap().with_options(options).batch(8).unwrap()
    };
    let ds = shuffled(7);
    let explain = ds.explain();
    assert!(explain.contains("blocks in a random order each iteration (seed 7)"), "{explain}");
    let pass = |ds: &Dataset| -> Vec<i64> { ds.iter_chunks().flat_map(|c| ids(&c.unwrap())).collect() };
    let (first, second) = (pass(&ds), pass(&ds));
    for got in [&first, &second] {
        let mut sorted = got.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, want, "every record once");
    }
    assert_ne!(first, want, "not in file order");
    assert_ne!(first, second, "another order each iteration");
    assert_eq!(pass(&shuffled(7)), first, "the same seed, the same orders");
    assert_ne!(pass(&shuffled(8)), first);
    // A checkpoint resumes the same order exactly.
    let whole: Vec<RecordBatch> = ds.iter_chunks().map(|c| c.unwrap()).collect();
    for cut in [0, 1, 5, 17, whole.len()] {
        let mut it = ds.iter_chunks();
        let head: Vec<i64> = (0..cut).flat_map(|_| ids(&it.next().unwrap().unwrap())).collect();
        let checkpoint = it.save(SaveMode::Symbolic).unwrap();
        let mut resumed = ds.iter_chunks();
        resumed.restore(&checkpoint).unwrap();
        let rest: Vec<i64> = resumed.flat_map(|c| ids(&c.unwrap())).collect();
        // The pass saved from goes on in the same order as the restored one.
        let original: Vec<i64> = it.flat_map(|c| ids(&c.unwrap())).collect();
        assert_eq!(rest, original, "resumed after {cut} batches");
        let mut got = head.clone();
        got.extend(rest);
        got.sort_unstable();
        assert_eq!(got, want, "resumed after {cut} batches: every record once");
    }
}

#[test]
fn avro_files_of_different_writer_schemas_read_as_one_reader_schema() {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Float64Type, Int64Type};
    use flumen::crates::sources::avro::container::Codec;
    use flumen::crates::sources::avro::writer::{AvroWriter, Datum};
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, schema: &str, rows: Vec<Datum>| {
        let path = dir.path().join(name).to_str().unwrap().to_string();
        let mut w = AvroWriter::create(&path, schema, Codec::Snappy).unwrap().with_block_bytes(40);
        rows.iter().for_each(|r| w.append(r).unwrap());
        w.finish().unwrap();
        path
    };
    // Old files: `id` an int, `x` a float named `x_old`, no `name`, a field since dropped.
    let old = write(
        "old.avro",
        r#"{"type":"record","name":"r","fields":[{"name":"id","type":"int"},{"name":"x_old","type":"float"},
            {"name":"dropped","type":{"type":"array","items":"long"}}]}"#,
        (0..10)
            .map(|i| {
                Datum::Record(vec![
                    Datum::Int(i),
                    Datum::Float(i as f32 + 0.5),
                    Datum::Array(vec![Datum::Long(i as i64)]),
                ])
            })
            .collect(),
    );
    // New files: the reader's own layout, in another field order.
    let new = write(
        "new.avro",
        r#"{"type":"record","name":"r","fields":[{"name":"name","type":"string"},{"name":"x","type":"double"},
            {"name":"id","type":"long"}]}"#,
        (10..20)
            .map(|i| Datum::Record(vec![Datum::String(format!("n{i}")), Datum::Double(i as f64 * 2.0), Datum::Long(i)]))
            .collect(),
    );
    let reader = r#"{"type":"record","name":"r","fields":[{"name":"id","type":"long"},
        {"name":"x","type":"double","aliases":["x_old"]},{"name":"name","type":"string","default":"none"}]}"#;
    let options = AvroOptions::default().with_reader_schema(reader);
    let ds = Dataset::avro(&[old.as_str(), new.as_str()], options.clone()).unwrap();
    assert_eq!(ds.element_spec().to_string(), "{id: int64[], x: float64[], name: string[]}");
    let (mut ids, mut xs, mut names) = (vec![], vec![], vec![]);
    for chunk in ds.iter_chunks() {
        let chunk = chunk.unwrap();
        ids.extend(chunk.column(0).as_primitive::<Int64Type>().values().iter().copied());
        xs.extend(chunk.column(1).as_primitive::<Float64Type>().values().iter().copied());
        let name = chunk.column(2).as_string::<i32>();
        names.extend((0..name.len()).map(|i| name.value(i).to_string()));
    }
    assert_eq!(ids, (0..20).collect::<Vec<i64>>());
    let want_x: Vec<f64> = (0..10).map(|i| i as f64 + 0.5).chain((10..20).map(|i| i as f64 * 2.0)).collect();
    assert_eq!(xs, want_x);
    let want_names: Vec<String> = (0..20).map(|i| if i < 10 { "none".into() } else { format!("n{i}") }).collect();
    assert_eq!(names, want_names);
    // A file that has neither `x` nor an alias of it, where `x` has no default: an error
    // naming the file and the field; the other files are read.
    let lacking = write(
        "lacking.avro",
        r#"{"type":"record","name":"r","fields":[{"name":"id","type":"long"}]}"#,
        vec![Datum::Record(vec![Datum::Long(99)])],
    );
    let ds = Dataset::avro(&[old.as_str(), lacking.as_str(), new.as_str()], options.clone()).unwrap();
    let errors: Vec<String> = ds.iter().filter_map(|e| e.err()).map(|e| e.to_string()).collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("lacking.avro") && errors[0].contains("\"x\"") && errors[0].contains("no default"),
        "{}",
        errors[0]
    );
    assert_eq!(ds.ignore_errors().unwrap().iter().count(), 20);
    // A type that does not promote is refused when the dataset is built.
    let narrowing = r#"{"type":"record","name":"r","fields":[{"name":"x_old","type":"int"}]}"#;
    let err = Dataset::avro(&[old.as_str()], AvroOptions::default().with_reader_schema(narrowing)).unwrap_err();
    assert!(err.to_string().contains("old.avro") && err.to_string().contains("x_old"), "{err}");
}

#[test]
fn avro_nested_records_read_as_flattened_fields_and_maps_as_keys_and_values() {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Float64Type, Int64Type};
    use flumen::crates::sources::avro::container::Codec;
    use flumen::crates::sources::avro::writer::{AvroWriter, Datum};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested.avro").to_str().unwrap().to_string();
    let schema = r#"{"type":"record","name":"r","fields":[
        {"name":"id","type":"long"},
        {"name":"user","type":{"type":"record","name":"u","fields":[
            {"name":"age","type":"int"},{"name":"score","type":"double"},{"name":"note","type":"string"}]}},
        {"name":"counts","type":{"type":"map","values":"long"}}]}"#;
    let mut w = AvroWriter::create(&path, schema, Codec::Deflate).unwrap().with_block_bytes(64);
    for i in 0..9i64 {
        // A map is encoded as an array of (key, value) records.
        let counts = (0..i % 3).map(|k| Datum::Record(vec![Datum::String(format!("k{k}")), Datum::Long(i * 10 + k)]));
        let user = Datum::Record(vec![
            Datum::Int(i as i32 + 20),
            Datum::Double(i as f64 / 4.0),
            Datum::String(format!("u{i}")),
        ]);
        w.append(&Datum::Record(vec![Datum::Long(i), user, Datum::Array(counts.collect())])).unwrap();
    }
    w.finish().unwrap();
    let ds = Dataset::avro(&[path.as_str()], AvroOptions::default()).unwrap();
    assert_eq!(
        ds.element_spec().to_string(),
        "{id: int64[], user.age: int32[], user.score: float64[], user.note: string[], counts.keys: ragged string[?], counts.values: ragged int64[?]}"
    );
    // Reading some of them: a nested field promoted by the features, the map's values alone.
    let features = ElementSpec::new(vec![
        FieldSpec::scalar("user.score", DType::Float64),
        FieldSpec::scalar("user.age", DType::Int64),
        FieldSpec::ragged("counts.values", DType::Int64, vec![-1]),
    ])
    .unwrap();
    let ds = Dataset::avro(&[path.as_str()], AvroOptions::default().with_features(features)).unwrap();
    let chunk = ds
        .iter_chunks()
        .map(|c| c.unwrap())
        .reduce(|a, b| arrow::compute::concat_batches(&a.schema(), &[a.clone(), b]).unwrap())
        .unwrap();
    let scores: Vec<f64> = chunk.column(0).as_primitive::<Float64Type>().values().to_vec();
    assert_eq!(scores, (0..9).map(|i| i as f64 / 4.0).collect::<Vec<_>>());
    let ages: Vec<i64> = chunk.column(1).as_primitive::<Int64Type>().values().to_vec();
    assert_eq!(ages, (20..29).collect::<Vec<i64>>());
    let values = chunk.column(2).as_list::<i32>();
    for i in 0..9usize {
        let got = values.value(i).as_primitive::<Int64Type>().values().to_vec();
        assert_eq!(got, (0..i as i64 % 3).map(|k| i as i64 * 10 + k).collect::<Vec<_>>(), "row {i}");
    }
    assert_eq!(values.len(), 9);
}

#[test]
fn avro_reader_schemas_resolve_nested_records_enums_and_map_defaults() {
    // What fastavro's reader_schema gives for the same files (Avro 1.11's resolution rules):
    // nested records resolve field by field (names, aliases, promotions, defaults), enums
    // by symbol (an unknown symbol reads as the reader enum's default, or fails its record),
    // and a map the writer lacks takes its default.
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Float64Type, Int64Type};
    use flumen::crates::sources::avro::container::Codec;
    use flumen::crates::sources::avro::writer::{AvroWriter, Datum};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested.avro").to_str().unwrap().to_string();
    let writer = r#"{"type":"record","name":"r","fields":[
        {"name":"id","type":"long"},
        {"name":"inner","type":{"type":"record","name":"i","fields":[
            {"name":"a","type":"int"},{"name":"old_b","type":"float"}]}},
        {"name":"kind","type":{"type":"enum","name":"K","symbols":["A","B","C"]}}]}"#;
    let mut w = AvroWriter::create(&path, writer, Codec::Null).unwrap();
    for i in 0..3i64 {
        let inner = Datum::Record(vec![Datum::Int(i as i32), Datum::Float(i as f32 + 0.5)]);
        w.append(&Datum::Record(vec![Datum::Long(i), inner, Datum::Enum(i as i32)])).unwrap();
    }
    w.finish().unwrap();
    let rows = |reader: &str| -> Vec<Result<RecordBatch, String>> {
        let ds = Dataset::avro(&[path.as_str()], AvroOptions::default().with_reader_schema(reader)).unwrap();
        ds.iter().map(|r| r.map_err(|e| e.to_string())).collect()
    };
    // The writer's own schema as the reader schema reads the file as written.
    let same = rows(writer);
    assert_eq!(same.len(), 3);
    let first = same[0].as_ref().unwrap();
    assert_eq!(first.column_by_name("inner.a").unwrap().as_primitive::<arrow::datatypes::Int32Type>().value(0), 0);
    assert_eq!(first.column_by_name("kind").unwrap().as_string::<i32>().value(0), "A");

    // Evolved: `inner.a` promoted to long, `inner.b` found by its alias and promoted to
    // double, `inner.c` filled from its default, `kind` read as [A, OTHER] with default
    // OTHER, and a map `tags` the writer lacks filled from its default.
    let reader = r#"{"type":"record","name":"r","fields":[
        {"name":"id","type":"long"},
        {"name":"inner","type":{"type":"record","name":"i","fields":[
            {"name":"a","type":"long"},{"name":"b","type":"double","aliases":["old_b"]},
            {"name":"c","type":"string","default":"none"}]}},
        {"name":"kind","type":{"type":"enum","name":"K","symbols":["A","OTHER"],"default":"OTHER"}},
        {"name":"tags","type":{"type":"map","values":"long"},"default":{"x":1,"y":2}}]}"#;
    let evolved = rows(reader);
    let evolved: Vec<RecordBatch> = evolved.into_iter().map(|r| r.unwrap()).collect();
    let column = |b: &RecordBatch, name: &str| b.column_by_name(name).unwrap_or_else(|| panic!("no {name}")).clone();
    for (i, b) in evolved.iter().enumerate() {
        assert_eq!(column(b, "inner.a").as_primitive::<Int64Type>().value(0), i as i64);
        assert_eq!(column(b, "inner.b").as_primitive::<Float64Type>().value(0), i as f64 + 0.5);
        assert_eq!(column(b, "inner.c").as_string::<i32>().value(0), "none");
        let tags = column(b, "tags.keys");
        let keys = tags.as_list::<i32>().value(0);
        let keys: Vec<&str> = (0..keys.len()).map(|k| keys.as_string::<i32>().value(k)).collect();
        assert_eq!(keys, ["x", "y"]);
        let values = column(b, "tags.values").as_list::<i32>().value(0);
        assert_eq!(values.as_primitive::<Int64Type>().values().to_vec(), [1, 2]);
    }
    let kinds: Vec<String> =
        evolved.iter().map(|b| column(b, "kind").as_string::<i32>().value(0).to_string()).collect();
    assert_eq!(kinds, ["A", "OTHER", "OTHER"]);

    // A reader enum that lacks a written symbol and has no default: that record's error,
    // naming the symbol; the other records are read. Also when nobody reads `kind`.
    let strict = r#"{"type":"record","name":"r","fields":[{"name":"id","type":"long"},
        {"name":"kind","type":{"type":"enum","name":"K","symbols":["A","B"]}}]}"#;
    let got = rows(strict);
    assert!(got[0].is_ok() && got[1].is_ok(), "{got:?}");
    let error = got[2].as_ref().unwrap_err();
    assert!(error.contains("nested.avro") && error.contains("\"C\""), "{error}");
    let ids = Dataset::avro(&[path.as_str()], AvroOptions::default().with_reader_schema(strict))
        .and_then(|d| d.map(MapFunction::select([("id", col("id"))])))
        .unwrap();
    let outcomes: Vec<bool> = ids.iter().map(|r| r.is_ok()).collect();
    assert_eq!(outcomes, [true, true, false], "{}", ids.explain());
}

#[test]
fn avro_reads_under_shard_cache_and_snapshot_as_any_source() {
    let dir = tempfile::tempdir().unwrap();
    let paths = avro_files(dir.path(), 2, 90);
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    let want: Vec<i64> = (0..2).flat_map(|f| (0..90).map(move |i| f * 1000 + i)).collect();
    let options = Options::default().with_threads(2).with_chunk_rows(16);
    let ds = Dataset::avro(&refs, AvroOptions::default()).unwrap().with_options(options);
    let mut sharded: Vec<i64> = (0..3).flat_map(|i| avro_ids(&ds.shard(3, i).unwrap())).collect();
    sharded.sort_unstable();
    assert_eq!(sharded, want, "three shards hold every record once");
    let cached = ds.cache().unwrap();
    assert_eq!(avro_ids(&cached), want);
    assert_eq!(avro_ids(&cached), want, "the second pass from the cache");
    let snapshots = dir.path().join("snap");
    let snap = ds.snapshot(snapshots.to_str().unwrap(), SnapshotOptions::default()).unwrap();
    assert_eq!(avro_ids(&snap), want, "the pass that writes the snapshot");
    assert_eq!(avro_ids(&snap), want, "a pass that reads it");
}

#[test]
fn avro_logical_types_read_as_dates_times_and_timestamps() {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{
        DataType, Date32Type, Int64Type, Time64MicrosecondType, TimeUnit, TimestampMicrosecondType,
    };
    use flumen::crates::sources::avro::container::Codec;
    use flumen::crates::sources::avro::writer::{AvroWriter, Datum};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("logical.avro").to_str().unwrap().to_string();
    let schema = r#"{"type":"record","name":"r","fields":[
        {"name":"day","type":{"type":"int","logicalType":"date"}},
        {"name":"clock","type":{"type":"int","logicalType":"time-millis"}},
        {"name":"fine_clock","type":{"type":"long","logicalType":"time-micros"}},
        {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
        {"name":"fine_at","type":["null",{"type":"long","logicalType":"timestamp-micros"}]},
        {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
        {"name":"id","type":{"type":"string","logicalType":"uuid"}},
        {"name":"delta","type":{"type":"fixed","name":"d3","size":3,"logicalType":"decimal","precision":6,"scale":1}},
        {"name":"huge","type":{"type":"bytes","logicalType":"decimal","precision":60}}]}"#;
    let mut w = AvroWriter::create(&path, schema, Codec::Null).unwrap();
    for i in 0..5i64 {
        let fine_at = match i {
            2 => Datum::Union(0, Box::new(Datum::Null)),
            _ => Datum::Union(1, Box::new(Datum::Long(1_700_000_000_000_000 + i))),
        };
        w.append(&Datum::Record(vec![
            Datum::Int(19_000 + i as i32),
            Datum::Int(3_600_000 + i as i32),
            Datum::Long(7_000_000 + i),
            Datum::Long(1_700_000_000_000 + i),
            fine_at,
            Datum::Bytes(vec![0x01, i as u8]),
            Datum::String(format!("00000000-0000-0000-0000-00000000000{i}")),
            Datum::Fixed((-(i as i32) - 1).to_be_bytes()[1..].to_vec()),
            Datum::Bytes(vec![7; 20]),
        ]))
        .unwrap();
    }
    w.finish().unwrap();
    let ds = Dataset::avro(&[path.as_str()], AvroOptions::default()).unwrap();
    assert_eq!(
        ds.element_spec().to_string(),
        "{day: date32[], clock: time64_us[], fine_clock: time64_us[], at: timestamp_us[], fine_at: timestamp_us[], price: decimal128(9, 2)[], id: string[], delta: decimal128(6, 1)[], huge: bytes[]}"
    );
    let chunk = ds.iter_chunks().next().unwrap().unwrap();
    assert_eq!(chunk.column(0).data_type(), &DataType::Date32);
    assert_eq!(chunk.column(3).data_type(), &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())));
    let days: Vec<i32> = chunk.column(0).as_primitive::<Date32Type>().values().to_vec();
    assert_eq!(days, (19_000..19_005).collect::<Vec<i32>>());
    let clock: Vec<i64> = chunk.column(1).as_primitive::<Time64MicrosecondType>().values().to_vec();
    assert_eq!(clock, (0..5).map(|i| (3_600_000 + i) * 1000).collect::<Vec<i64>>(), "milliseconds scaled");
    let fine_clock: Vec<i64> = chunk.column(2).as_primitive::<Time64MicrosecondType>().values().to_vec();
    assert_eq!(fine_clock, (7_000_000..7_000_005).collect::<Vec<i64>>());
    let at: Vec<i64> = chunk.column(3).as_primitive::<TimestampMicrosecondType>().values().to_vec();
    assert_eq!(at, (0..5).map(|i| (1_700_000_000_000 + i) * 1000).collect::<Vec<i64>>());
    let fine_at = chunk.column(4).as_primitive::<TimestampMicrosecondType>();
    assert!(fine_at.is_null(2) && fine_at.value(4) == 1_700_000_000_000_004);
    // Decimals: the unscaled big-endian integers, over bytes and fixed, negative ones too;
    // one of more than 38 digits stays bytes, as the specification says.
    let price = chunk.column(5).as_primitive::<arrow::datatypes::Decimal128Type>();
    assert_eq!(price.data_type(), &DataType::Decimal128(9, 2));
    assert_eq!(price.value(3), 0x0103);
    let delta: Vec<i128> = chunk.column(7).as_primitive::<arrow::datatypes::Decimal128Type>().values().to_vec();
    assert_eq!(delta, vec![-1, -2, -3, -4, -5]);
    assert_eq!(chunk.column(8).as_binary::<i32>().value(0), &[7; 20]);
    // A timestamp read raw as int64 where the features say so (microseconds: unscaled).
    let raw = ElementSpec::new(vec![FieldSpec::scalar("fine_clock", DType::Int64)]).unwrap();
    let ds = Dataset::avro(&[path.as_str()], AvroOptions::default().with_features(raw)).unwrap();
    let chunk = ds.iter_chunks().next().unwrap().unwrap();
    assert_eq!(chunk.column(0).as_primitive::<Int64Type>().value(1), 7_000_001);
    // Milliseconds cannot be read raw as microseconds.
    let wrong = ElementSpec::new(vec![FieldSpec::scalar("at", DType::Int64)]).unwrap();
    assert!(Dataset::avro(&[path.as_str()], AvroOptions::default().with_features(wrong)).is_err());
}

#[test]
fn avro_nullable_arrays_read_as_dense_features_with_null_rows() {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::Float32Type;
    use flumen::crates::sources::avro::container::Codec;
    use flumen::crates::sources::avro::writer::{AvroWriter, Datum};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nullable.avro").to_str().unwrap().to_string();
    let schema = r#"{"type":"record","name":"r","fields":[
        {"name":"v","type":["null",{"type":"array","items":"float"}]}]}"#;
    let mut w = AvroWriter::create(&path, schema, Codec::Deflate).unwrap();
    for i in 0..6 {
        let v = match i % 3 {
            0 => Datum::Union(0, Box::new(Datum::Null)),
            _ => Datum::Union(1, Box::new(Datum::Array(vec![Datum::Float(i as f32), Datum::Float(i as f32 + 0.5)]))),
        };
        w.append(&Datum::Record(vec![v])).unwrap();
    }
    w.finish().unwrap();
    let features = ElementSpec::new(vec![FieldSpec::tensor("v", DType::Float32, vec![2])]).unwrap();
    let ds = Dataset::avro(&[path.as_str()], AvroOptions::default().with_features(features)).unwrap();
    let chunk = ds.iter_chunks().next().unwrap().unwrap();
    let v = chunk.column(0).as_fixed_size_list();
    let nulls: Vec<bool> = (0..6).map(|i| v.is_null(i)).collect();
    assert_eq!(nulls, [true, false, false, true, false, false]);
    assert_eq!(v.value(4).as_primitive::<Float32Type>().values().to_vec(), vec![4.0, 4.5]);
}

#[test]
fn avro_unions_resolve_value_by_value_to_the_type_the_spec_says() {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::Int64Type;
    use flumen::crates::sources::avro::container::Codec;
    use flumen::crates::sources::avro::writer::{AvroWriter, Datum};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("unions.avro").to_str().unwrap().to_string();
    // `n` is an int, a long or null; `v` an int or a string (the one string record is an
    // error when `v` is read as int64, and only that record).
    let schema = r#"{"type":"record","name":"r","fields":[
        {"name":"id","type":"long"},
        {"name":"n","type":["int","long","null"]},
        {"name":"v","type":["int","string"]}]}"#;
    let mut w = AvroWriter::create(&path, schema, Codec::Null).unwrap();
    for i in 0..6i64 {
        let n = match i % 3 {
            0 => Datum::Union(0, Box::new(Datum::Int(i as i32))),
            1 => Datum::Union(1, Box::new(Datum::Long(i << 40))),
            _ => Datum::Union(2, Box::new(Datum::Null)),
        };
        let v = match i {
            4 => Datum::Union(1, Box::new(Datum::String("four".into()))),
            _ => Datum::Union(0, Box::new(Datum::Int(10 * i as i32))),
        };
        w.append(&Datum::Record(vec![Datum::Long(i), n, v])).unwrap();
    }
    w.finish().unwrap();
    // Without a spec saying how to read them, the unions are refused when the dataset is built.
    let err = Dataset::avro(&[path.as_str()], AvroOptions::default()).unwrap_err().to_string();
    assert!(err.contains("union"), "{err}");
    let features = ElementSpec::new(vec![
        FieldSpec::scalar("id", DType::Int64),
        FieldSpec::scalar("n", DType::Int64),
        FieldSpec::scalar("v", DType::Int64),
    ])
    .unwrap();
    let read = |features: ElementSpec| Dataset::avro(&[path.as_str()], AvroOptions::default().with_features(features));
    let ds = read(features.clone()).unwrap();
    let items: Vec<_> = ds.iter().collect();
    assert_eq!(items.len(), 6);
    let err = items[4].as_ref().unwrap_err().to_string();
    assert!(err.contains("union branch 1") && err.contains(&path) && err.contains("record 4"), "{err}");
    let rows: Vec<(i64, Option<i64>, i64)> = items
        .iter()
        .filter_map(|b| b.as_ref().ok())
        .map(|b| {
            let n = b.column(1).as_primitive::<Int64Type>();
            let at = |c: usize| b.column(c).as_primitive::<Int64Type>().value(0);
            (at(0), n.is_valid(0).then(|| n.value(0)), at(2))
        })
        .collect();
    assert_eq!(rows, vec![(0, Some(0), 0), (1, Some(1 << 40), 10), (2, None, 20), (3, Some(3), 30), (5, None, 50)]);
    // `ignore_errors` skips the one record.
    assert_eq!(ds.ignore_errors().unwrap().iter().count(), 5);
    // A union none of whose branches can be read as the spec's dtype is refused up front.
    let bools = ElementSpec::new(vec![FieldSpec::scalar("v", DType::Bool)]).unwrap();
    let err = read(bools).unwrap_err().to_string();
    assert!(err.contains("no branch of the union"), "{err}");
}

#[test]
fn avro_a_file_that_cannot_be_opened_is_one_error_in_a_shuffled_blocks_read() {
    use arrow::array::AsArray;
    use arrow::datatypes::Int64Type;
    let dir = tempfile::tempdir().unwrap();
    let mut paths = avro_files(dir.path(), 2, 40);
    let missing = dir.path().join("gone.avro").to_str().unwrap().to_string();
    paths.insert(1, missing.clone());
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    let want: Vec<i64> = (0..2).flat_map(|f| (0..40).map(move |i| f * 1000 + i)).collect();
    for order in [None, Some(AvroOptions::default().with_shuffled_blocks(Some(3)))] {
        let shuffled = order.is_some();
        let ds = Dataset::avro(&refs, order.unwrap_or_default()).unwrap();
        let mut errors = Vec::new();
        let mut ids = Vec::new();
        for item in ds.iter_chunks() {
            match item {
                Ok(c) => ids.extend(c.column_by_name("id").unwrap().as_primitive::<Int64Type>().values().to_vec()),
                Err(e) => errors.push(e.to_string()),
            }
        }
        ids.sort_unstable();
        assert_eq!(ids, want, "every record of the files that open (shuffled: {shuffled})");
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("gone.avro"), "{errors:?}");
    }
}

#[test]
fn avro_runs_count_against_the_ram_budget_and_progress_under_any() {
    use flumen::crates::sources::avro::container::Codec;
    use flumen::crates::sources::avro::writer::{AvroWriter, Datum};
    let dir = tempfile::tempdir().unwrap();
    // 4,000 records of 2 KiB: runs of a few hundred KiB, megabytes in all.
    let path = dir.path().join("big.avro").to_str().unwrap().to_string();
    let schema = r#"{"type":"record","name":"r","fields":[{"name":"id","type":"long"},{"name":"s","type":"string"}]}"#;
    let mut w = AvroWriter::create(&path, schema, Codec::Null).unwrap().with_block_bytes(64 << 10);
    for i in 0..4000i64 {
        w.append(&Datum::Record(vec![Datum::Long(i), Datum::String("x".repeat(2048))])).unwrap();
    }
    w.finish().unwrap();
    let refs = [path.as_str()];
    let want: Vec<i64> = (0..4000).collect();
    let held = |budget: u64| {
        // Unoptimized: no prefetch is added, so what the budget saw is the reader's runs.
        let options = Options::default().without_optimizations().with_threads(2).with_ram_budget(budget);
        let ds = Dataset::avro(&refs, AvroOptions::default()).unwrap().with_options(options);
        assert_eq!(avro_ids(&ds), want, "every record under a budget of {budget} bytes");
        let report = ds.explain_analyze().unwrap();
        let at_most = report.split("buffers held at most ").nth(1).and_then(|r| r.split(' ').next()).unwrap();
        at_most.parse::<f64>().unwrap()
    };
    assert!(held(1 << 30) > 0.0, "the runs are counted");
    // A budget smaller than one run still reads every record, one run at a time.
    held(1024);
}

#[test]
fn avro_bzip2_files_of_another_writer_read_as_written() {
    use arrow::array::AsArray;
    use arrow::datatypes::{Float64Type, Int64Type};
    // Written by fastavro (tests/data/avro/README.md says how): ids 0..300, names "n{i}",
    // x = i / 4, in several bzip2 blocks.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/avro/fastavro_bzip2.avro");
    let ds = Dataset::avro(&[path], AvroOptions::default()).unwrap();
    let (mut ids, mut names, mut xs) = (Vec::new(), Vec::new(), Vec::new());
    for chunk in ds.iter_chunks() {
        let chunk = chunk.unwrap();
        ids.extend(chunk.column(0).as_primitive::<Int64Type>().values().to_vec());
        names.extend(chunk.column(1).as_string::<i32>().iter().map(|s| s.unwrap().to_string()));
        xs.extend(chunk.column(2).as_primitive::<Float64Type>().values().to_vec());
    }
    assert_eq!(ids, (0..300).collect::<Vec<i64>>());
    assert_eq!(names, (0..300).map(|i| format!("n{i}")).collect::<Vec<_>>());
    assert_eq!(xs, (0..300).map(|i| i as f64 / 4.0).collect::<Vec<_>>());
    assert!(flumen::crates::sources::avro::reader::block_count(path).unwrap() > 1, "several blocks");
}
