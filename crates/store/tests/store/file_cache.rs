//! The cache file: published only when a pass completes, exactly once under races.

use std::path::Path;
use std::sync::{Arc, Barrier};

use arrow::record_batch::RecordBatch;
use flumen_store::{CacheFinished, Compression, FileCache, FileCacheWriter};

use crate::common::{assert_data_error, chunks, flip_byte, ids, names, schema, truncate};

fn read_cache(path: &Path) -> Vec<RecordBatch> {
    match FileCache::open(path).unwrap() {
        FileCache::Complete(reader) => reader.collect::<Result<_, _>>().unwrap(),
        FileCache::Missing => panic!("expected a complete cache at {}", path.display()),
    }
}

fn write_cache(path: &Path, data: &[RecordBatch]) -> CacheFinished {
    let mut writer = FileCacheWriter::create(path, schema(), Compression::Lz4).unwrap();
    for b in data {
        writer.write(b).unwrap();
    }
    writer.finish().unwrap()
}

#[test]
fn a_complete_pass_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    assert!(matches!(FileCache::open(&path).unwrap(), FileCache::Missing));
    let data = chunks(0, 5, 64);
    match write_cache(&path, &data) {
        CacheFinished::Published(summary) => assert_eq!((summary.chunks, summary.rows), (5, 320)),
        CacheFinished::Lost => panic!("the only writer lost"),
    }
    assert_eq!(read_cache(&path), data);
    assert_eq!(names(dir.path()), ["cache"], "no temporary file is left");
}

#[test]
fn a_partial_pass_leaves_nothing_readable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    let mut writer = FileCacheWriter::create(&path, schema(), Compression::Lz4).unwrap();
    for b in chunks(0, 3, 64) {
        writer.write(&b).unwrap();
    }
    assert!(matches!(FileCache::open(&path).unwrap(), FileCache::Missing), "nothing is visible mid-pass");
    drop(writer);
    assert!(matches!(FileCache::open(&path).unwrap(), FileCache::Missing));
    assert!(names(dir.path()).is_empty(), "the temporary file is removed: {:?}", names(dir.path()));
}

#[test]
fn of_two_concurrent_writers_exactly_one_publishes() {
    let dir = tempfile::tempdir().unwrap();
    let path = Arc::new(dir.path().join("cache"));
    let both_written = Arc::new(Barrier::new(2));
    let writers: Vec<_> = [0i64, 1_000_000]
        .into_iter()
        .map(|start| {
            let (path, both_written) = (path.clone(), both_written.clone());
            std::thread::spawn(move || {
                let mut writer = FileCacheWriter::create(path.as_path(), schema(), Compression::Zstd).unwrap();
                for b in chunks(start, 6, 100) {
                    writer.write(&b).unwrap();
                }
                // Both passes are complete before either publishes: a real race to publish.
                both_written.wait();
                (start, writer.finish().unwrap())
            })
        })
        .collect();
    let results: Vec<(i64, CacheFinished)> = writers.into_iter().map(|t| t.join().unwrap()).collect();
    let winners: Vec<i64> =
        results.iter().filter(|(_, r)| matches!(r, CacheFinished::Published(_))).map(|(s, _)| *s).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    assert_eq!(results.iter().filter(|(_, r)| *r == CacheFinished::Lost).count(), 1);
    assert_eq!(ids(&read_cache(&path)), (winners[0]..winners[0] + 600).collect::<Vec<_>>());
    assert_eq!(names(dir.path()), ["cache"]);
}

#[test]
fn a_corrupt_cache_file_is_an_error_naming_path_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    write_cache(&path, &chunks(0, 2, 64));
    let FileCache::Complete(reader) = FileCache::open(&path).unwrap() else { panic!("cache missing") };
    let first = reader.position().offset;
    flip_byte(&path, first + 50);
    let FileCache::Complete(reader) = FileCache::open(&path).unwrap() else { panic!("cache missing") };
    let error = reader.into_iter().find_map(Result::err).expect("a corrupt chunk");
    assert_data_error(&error, &path, first, "checksum mismatch");
}

#[test]
fn a_truncated_cache_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    write_cache(&path, &chunks(0, 2, 64));
    truncate(&path, 20);
    let FileCache::Complete(reader) = FileCache::open(&path).unwrap() else { panic!("cache missing") };
    let results: Vec<_> = reader.collect();
    assert_eq!(results.len(), 3, "two chunks, then the error");
    let error = results[2].as_ref().expect_err("truncated");
    assert!(error.to_string().contains("truncated"), "{error}");
}
