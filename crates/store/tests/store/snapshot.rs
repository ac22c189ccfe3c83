//! Snapshots in one process: the state machine, the lost race, codecs, corruption, order,
//! shuffling, checkpoints, custom shard functions.

use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, SystemTime};

use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use flumen_store::snapshot::{self, ShardAssignment, SnapshotMetadata, METADATA_FILE};
use flumen_store::{ChunkFileReader, Compression, Decision, Finished, SnapshotOptions, SnapshotReader, SnapshotWriter};

use crate::common::{assert_data_error, chunks, flip_byte, ids, names, schema, truncate};

pub const FINGERPRINT: &str = "f-abc123";
pub const DAY: Duration = Duration::from_secs(24 * 60 * 60);

pub fn options(num_shards: usize, compression: Compression) -> SnapshotOptions {
    SnapshotOptions { num_shards, compression, ..SnapshotOptions::default() }
}

pub fn begin(path: &Path, options: &SnapshotOptions, now: SystemTime) -> Decision {
    snapshot::begin(path, FINGERPRINT, schema(), options, now).unwrap()
}

pub fn expect_write(decision: Decision) -> SnapshotWriter {
    match decision {
        Decision::Write(writer) => writer,
        other => panic!("expected WRITE, got {other:?}"),
    }
}

pub fn expect_read(decision: Decision) -> SnapshotReader {
    match decision {
        Decision::Read(reader) => reader,
        other => panic!("expected READ, got {other:?}"),
    }
}

pub fn write_all(mut writer: SnapshotWriter, data: &[RecordBatch]) -> Finished {
    for b in data {
        writer.write(b.clone()).unwrap();
    }
    writer.finish().unwrap()
}

pub fn read_all(reader: SnapshotReader) -> Vec<RecordBatch> {
    reader.collect::<Result<_, _>>().unwrap()
}

pub fn metadata(path: &Path) -> SnapshotMetadata {
    serde_json::from_slice(&std::fs::read(path.join(FINGERPRINT).join(METADATA_FILE)).unwrap()).unwrap()
}

/// Writes and finalizes a snapshot of `data`.
fn finalized(path: &Path, options: &SnapshotOptions, data: &[RecordBatch]) -> Finished {
    write_all(expect_write(begin(path, options, SystemTime::now())), data)
}

#[test]
fn no_snapshot_writes_then_a_finalized_one_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let opts = options(4, Compression::Lz4);
    let now = SystemTime::now();
    let data = chunks(0, 13, 50);
    let writer = expect_write(begin(dir.path(), &opts, now));
    let pending = metadata(dir.path());
    assert!(!pending.finalized);
    assert_eq!(pending.run_id, writer.run_id());
    assert_eq!(pending.num_shards, 4);
    assert_eq!(names(writer.run_dir()), ["00000000.shard", "00000001.shard", "00000002.shard", "00000003.shard"]);
    let Finished::Finalized(totals) = write_all(writer, &data) else { panic!("the only writer lost") };
    assert_eq!((totals.chunks, totals.rows), (13, 650));
    let done = metadata(dir.path());
    assert!(done.finalized);
    assert_eq!((done.chunks, done.rows, done.bytes), (Some(13), Some(650), Some(totals.bytes)));
    assert_eq!(done.shard_assignment, ShardAssignment::RoundRobin);
    // Still read long after: a finalized snapshot does not expire.
    let reader = expect_read(begin(dir.path(), &opts, now + 30 * DAY));
    assert_eq!(reader.shard_paths().len(), 4);
    assert!(reader.shard_paths().iter().all(|p| p.exists()));
    assert_eq!(read_all(reader), data, "13 chunks over 4 shards come back in the written order");
}

#[test]
fn a_fresh_pending_snapshot_passes_through_and_an_expired_one_is_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let opts = SnapshotOptions { pending_expiry: Duration::from_secs(60), ..options(2, Compression::Lz4) };
    let now = SystemTime::now();
    let first = expect_write(begin(dir.path(), &opts, now));
    assert!(matches!(begin(dir.path(), &opts, now), Decision::Passthrough));
    assert!(matches!(begin(dir.path(), &opts, now + Duration::from_secs(59)), Decision::Passthrough));
    let second = expect_write(begin(dir.path(), &opts, now + Duration::from_secs(60)));
    assert_ne!(second.run_id(), first.run_id());
    let taken = metadata(dir.path());
    assert_eq!(taken.run_id, second.run_id());
    assert!(!taken.finalized);
    // The new run is fresh in turn.
    assert!(matches!(begin(dir.path(), &opts, now + Duration::from_secs(61)), Decision::Passthrough));
    drop(first);
    assert_eq!(metadata(dir.path()).run_id, second.run_id(), "the overtaken run leaves the new metadata alone");
}

#[test]
fn of_two_racing_writers_only_the_current_one_finalizes() {
    let dir = tempfile::tempdir().unwrap();
    let path = Arc::new(dir.path().to_path_buf());
    let opts = Arc::new(options(3, Compression::Lz4));
    let now = SystemTime::now();
    let (first_started, taken_over) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
    let first = {
        let (path, opts, first_started, taken_over) =
            (path.clone(), opts.clone(), first_started.clone(), taken_over.clone());
        std::thread::spawn(move || {
            let mut writer = expect_write(begin(&path, &opts, now));
            let data = chunks(1_000_000, 10, 30);
            for b in &data[..5] {
                writer.write(b.clone()).unwrap();
            }
            first_started.wait();
            taken_over.wait();
            // Still writing after the takeover: it learns it lost only at the end.
            for b in &data[5..] {
                writer.write(b.clone()).unwrap();
            }
            let run_dir = writer.run_dir().to_path_buf();
            (writer.finish().unwrap(), run_dir)
        })
    };
    let second = {
        let (path, opts) = (path.clone(), opts.clone());
        std::thread::spawn(move || {
            first_started.wait();
            let writer = expect_write(begin(&path, &opts, now + 2 * DAY));
            taken_over.wait();
            write_all(writer, &chunks(0, 8, 30))
        })
    };
    let (first, first_dir) = first.join().unwrap();
    let second = second.join().unwrap();
    assert_eq!(first, Finished::Lost);
    assert!(matches!(second, Finished::Finalized(_)), "{second:?}");
    assert!(!first_dir.exists(), "the loser's files are gone");
    let reader = expect_read(begin(&path, &opts, now));
    assert_eq!(ids(&read_all(reader)), (0..240).collect::<Vec<_>>());
    let run_id = metadata(&path).run_id;
    assert_eq!(names(&path.join(FINGERPRINT)), [run_id, METADATA_FILE.to_string()]);
}

#[test]
fn a_writer_dropped_mid_pass_leaves_nothing_and_frees_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let opts = options(2, Compression::Lz4);
    let now = SystemTime::now();
    let mut writer = expect_write(begin(dir.path(), &opts, now));
    for b in chunks(0, 5, 20) {
        writer.write(b).unwrap();
    }
    drop(writer);
    assert!(names(&dir.path().join(FINGERPRINT)).is_empty(), "no metadata, no run directory");
    // The next run writes at once instead of waiting for an expiry.
    let data = chunks(0, 3, 20);
    assert!(matches!(write_all(expect_write(begin(dir.path(), &opts, now)), &data), Finished::Finalized(_)));
    assert_eq!(read_all(expect_read(begin(dir.path(), &opts, now))), data);
}

#[test]
fn every_codec_round_trips_and_compression_shrinks_the_snapshot() {
    let data = chunks(0, 12, 400);
    let mut bytes = Vec::new();
    for codec in [Compression::None, Compression::Lz4, Compression::Zstd] {
        let dir = tempfile::tempdir().unwrap();
        let opts = options(3, codec);
        let Finished::Finalized(totals) = finalized(dir.path(), &opts, &data) else { panic!("lost") };
        assert_eq!(metadata(dir.path()).compression, codec);
        assert_eq!(read_all(expect_read(begin(dir.path(), &opts, SystemTime::now()))), data, "{codec}");
        bytes.push(totals.bytes as f64 / totals.rows as f64);
    }
    let [none, lz4, zstd] = bytes[..] else { unreachable!() };
    assert!(lz4 < none / 2.0 && zstd < lz4, "bytes per row: none {none}, lz4 {lz4}, zstd {zstd}");
}

#[test]
fn a_corrupt_shard_is_an_error_naming_the_shard_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let opts = options(3, Compression::Zstd);
    finalized(dir.path(), &opts, &chunks(0, 9, 50));
    let shard = expect_read(begin(dir.path(), &opts, SystemTime::now())).shard_paths()[1].clone();
    let first_chunk = ChunkFileReader::open(&shard).unwrap().position().offset;
    flip_byte(&shard, first_chunk + 45);
    let mut reader = expect_read(begin(dir.path(), &opts, SystemTime::now()));
    assert!(reader.next().unwrap().is_ok(), "chunk 0 is in shard 0");
    let error = reader.next().unwrap().expect_err("chunk 1 is corrupt");
    assert_data_error(&error, &shard, first_chunk, "checksum mismatch");
    assert!(reader.next().is_none(), "the reader ends after an error");
}

#[test]
fn a_truncated_shard_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let opts = options(2, Compression::Lz4);
    finalized(dir.path(), &opts, &chunks(0, 4, 50));
    let shard = expect_read(begin(dir.path(), &opts, SystemTime::now())).shard_paths()[0].clone();
    truncate(&shard, 48);
    let results: Vec<_> = expect_read(begin(dir.path(), &opts, SystemTime::now())).collect();
    let error = results.last().unwrap().as_ref().expect_err("the cut shard ends in an error");
    assert!(error.to_string().contains("no end frame") && error.to_string().contains(&shard.display().to_string()));
}

#[test]
fn shuffled_reads_are_seeded_permutations() {
    let dir = tempfile::tempdir().unwrap();
    let data = chunks(0, 40, 10);
    finalized(dir.path(), &options(4, Compression::Lz4), &data);
    let read = |seed: u64| {
        let opts = SnapshotOptions { shuffle_on_read: Some(seed), shuffle_window: 8, ..options(4, Compression::Lz4) };
        let reader = expect_read(begin(dir.path(), &opts, SystemTime::now()));
        assert!(reader.position().is_none(), "shuffled reads have no checkpoint");
        ids(&read_all(reader))
    };
    let (a, again, other) = (read(7), read(7), read(8));
    assert_eq!(a, again, "the same seed, the same order");
    assert_ne!(a, other, "another seed, another order");
    let written: Vec<i64> = (0..400).collect();
    assert_ne!(a, written);
    let mut sorted = a.clone();
    sorted.sort();
    assert_eq!(sorted, written, "every row exactly once");
}

#[test]
fn an_in_order_reader_seeks_to_any_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let opts = options(3, Compression::Lz4);
    let data = chunks(0, 10, 7);
    finalized(dir.path(), &opts, &data);
    let mut reader = expect_read(begin(dir.path(), &opts, SystemTime::now()));
    let mut checkpoints = vec![reader.position().unwrap()];
    while let Some(chunk) = reader.next() {
        chunk.unwrap();
        checkpoints.push(reader.position().unwrap());
    }
    for (k, checkpoint) in checkpoints.into_iter().enumerate() {
        let mut resumed = expect_read(begin(dir.path(), &opts, SystemTime::now()));
        resumed.next().unwrap().unwrap();
        resumed.seek(checkpoint).unwrap();
        assert_eq!(read_all(resumed), data[k..], "resumed after {k} chunks");
    }
}

#[test]
fn a_custom_shard_function_keeps_each_shards_order() {
    let dir = tempfile::tempdir().unwrap();
    let opts = options(3, Compression::Lz4);
    let data = chunks(0, 9, 5);
    let writer = expect_write(begin(dir.path(), &opts, SystemTime::now())).with_shard_fn(|i, _| (i / 3) as usize);
    assert!(matches!(write_all(writer, &data), Finished::Finalized(_)));
    assert_eq!(metadata(dir.path()).shard_assignment, ShardAssignment::Custom);
    let reader = expect_read(begin(dir.path(), &opts, SystemTime::now()));
    for (shard, path) in reader.shard_paths().iter().enumerate() {
        let chunks: Vec<RecordBatch> = ChunkFileReader::open(path).unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(chunks, data[shard * 3..shard * 3 + 3], "shard {shard} holds its chunks in order");
    }
    // Read round-robin across the shards: 0, 3, 6, 1, 4, 7, 2, 5, 8.
    let order: Vec<RecordBatch> = [0, 3, 6, 1, 4, 7, 2, 5, 8].iter().map(|&i| data[i].clone()).collect();
    assert_eq!(read_all(reader), order);
}

#[test]
fn a_shard_function_out_of_range_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut writer =
        expect_write(begin(dir.path(), &options(2, Compression::Lz4), SystemTime::now())).with_shard_fn(|_, _| 5);
    let error = writer.write(chunks(0, 1, 5).remove(0)).expect_err("shard 5 of 2");
    assert!(error.to_string().contains("shard 5"), "{error}");
    assert!(writer.finish().is_err());
    assert!(names(&dir.path().join(FINGERPRINT)).is_empty(), "the failed run is cleaned up");
}

#[test]
fn a_snapshot_of_another_schema_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let opts = options(1, Compression::Lz4);
    finalized(dir.path(), &opts, &chunks(0, 2, 5));
    let other = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let error = snapshot::begin(dir.path(), FINGERPRINT, other, &opts, SystemTime::now()).expect_err("schema");
    assert!(error.to_string().contains("differ"), "{error}");
}

#[test]
fn fingerprints_must_be_plain_names() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["", "..", "a/b", ".hidden"] {
        let result = snapshot::begin(dir.path(), bad, schema(), &options(1, Compression::Lz4), SystemTime::now());
        assert!(result.is_err(), "fingerprint {bad:?}");
    }
}

#[test]
fn corrupt_metadata_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let fingerprint_dir = dir.path().join(FINGERPRINT);
    std::fs::create_dir_all(&fingerprint_dir).unwrap();
    std::fs::write(fingerprint_dir.join(METADATA_FILE), b"{\"version\": 1, ").unwrap();
    let error = snapshot::begin(dir.path(), FINGERPRINT, schema(), &options(1, Compression::Lz4), SystemTime::now())
        .expect_err("bad metadata");
    assert!(error.to_string().contains(METADATA_FILE), "{error}");
}

#[test]
fn store_handles_move_across_threads() {
    fn send<T: Send>() {}
    send::<Decision>();
    send::<SnapshotWriter>();
    send::<SnapshotReader>();
    send::<ChunkFileReader>();
    send::<flumen_store::ChunkFileWriter>();
    send::<flumen_store::FileCacheWriter>();
}
