//! `snapshot` and `cache_to` through the Dataset API: the RFC's state machine as pipelines
//! see it, fingerprints, compression, corruption, checkpoints through a snapshot, and the
//! file cache's completion rules. (`crates/store` tests the layer below, including writers
//! in two processes; `crates/cli/tests` kills a writing process.)

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use flumen::prelude::*;
use flumen::Options;

/// `range(0, n)` through a generator that counts how many passes it was asked for, plus a
/// computed field.
fn counted(n: i64, passes: Arc<AtomicUsize>) -> Dataset {
    let spec = ElementSpec::new(vec![FieldSpec::scalar("value", DType::Int64)]).unwrap();
    Dataset::from_generator(Some("counted"), spec, move || {
        passes.fetch_add(1, Ordering::SeqCst);
        Box::new((0..n).step_by(7).map(move |i| Ok(int_batch("value", (i..(i + 7).min(n)).collect()))))
    })
    .unwrap()
    .map(MapFunction::with_fields([("sq", col("value") * col("value"))]))
    .unwrap()
}

fn metadata(dir: &Path) -> Vec<(PathBuf, serde_json::Value)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path().join("snapshot.metadata");
        if let Ok(text) = std::fs::read_to_string(&path) {
            out.push((path, serde_json::from_str(&text).unwrap()));
        }
    }
    out
}

fn shard_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for fp in std::fs::read_dir(dir).unwrap() {
        let fp = fp.unwrap().path();
        if !fp.is_dir() {
            continue;
        }
        for run in std::fs::read_dir(&fp).unwrap() {
            let run = run.unwrap().path();
            if run.is_dir() {
                out.extend(std::fs::read_dir(&run).unwrap().map(|f| f.unwrap().path()));
            }
        }
    }
    out.sort();
    out
}

fn values(ds: &Dataset) -> Vec<i64> {
    ints(ds, "value")
}

#[test]
fn the_first_pass_writes_and_later_passes_read() {
    let dir = tempfile::tempdir().unwrap();
    let passes = Arc::new(AtomicUsize::new(0));
    let ds = counted(100, passes.clone()).snapshot(dir.path().to_str().unwrap(), SnapshotOptions::default()).unwrap();
    let first = values(&ds);
    assert_eq!(first, (0..100).collect::<Vec<_>>());
    assert_eq!(passes.load(Ordering::SeqCst), 1);
    let meta = metadata(dir.path());
    assert_eq!(meta.len(), 1);
    assert_eq!(meta[0].1["finalized"], true, "{:?}", meta[0]);
    assert_eq!(meta[0].1["rows"], 100);
    assert_eq!(shard_files(dir.path()).len(), 2, "two shards by default");
    // Read: the input is not computed again, the elements are the same, in order.
    assert_eq!(values(&ds), first);
    assert_eq!(ints(&ds, "sq")[..3], [0, 1, 4]);
    assert_eq!(passes.load(Ordering::SeqCst), 1);
    // A new dataset with the same upstream plan finds the snapshot too.
    let again =
        counted(100, passes.clone()).snapshot(dir.path().to_str().unwrap(), SnapshotOptions::default()).unwrap();
    assert_eq!(values(&again), first);
    assert_eq!(passes.load(Ordering::SeqCst), 1);
}

#[test]
fn a_run_passes_through_while_another_writes_and_an_abandoned_write_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let passes = Arc::new(AtomicUsize::new(0));
    let ds = counted(50, passes.clone()).snapshot(dir.path().to_str().unwrap(), SnapshotOptions::default()).unwrap();
    let mut writer = ds.iter();
    let head: Vec<_> = writer.by_ref().take(10).collect();
    assert_eq!(head.len(), 10);
    assert_eq!(metadata(dir.path())[0].1["finalized"], false, "pending while the writer runs");
    // PASSTHROUGH: computes, writes nothing, finalizes nothing.
    assert_eq!(values(&ds), (0..50).collect::<Vec<_>>());
    assert_eq!(passes.load(Ordering::SeqCst), 2);
    assert_eq!(metadata(dir.path())[0].1["finalized"], false);
    // The writer is dropped mid-pass: its files and pending metadata go.
    drop(writer);
    assert!(metadata(dir.path()).is_empty());
    assert!(shard_files(dir.path()).is_empty());
    // So the next pass writes, and the one after reads.
    assert_eq!(values(&ds), (0..50).collect::<Vec<_>>());
    assert_eq!(values(&ds), (0..50).collect::<Vec<_>>());
    assert_eq!(passes.load(Ordering::SeqCst), 3);
}

#[test]
fn an_expired_pending_snapshot_is_taken_over_and_the_old_writer_loses() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let passes = Arc::new(AtomicUsize::new(0));
    let slow = counted(40, passes.clone()).snapshot(path, SnapshotOptions::default()).unwrap();
    let eager = counted(40, passes.clone())
        .snapshot(path, SnapshotOptions::default().with_pending_expiry(Duration::ZERO))
        .unwrap();
    let mut old = slow.iter();
    let old_head: Vec<_> = old.by_ref().take(5).map(Result::unwrap).collect();
    let old_run = metadata(dir.path())[0].1["run_id"].clone();
    // Two writers in two threads: the new one took over; the old one finishes first and loses.
    let taker = std::thread::spawn({
        let eager = eager.clone();
        move || {
            let mut it = eager.iter();
            let first = it.next().unwrap().unwrap();
            (it, first)
        }
    });
    let (mut new, new_first) = taker.join().unwrap();
    let new_run = metadata(dir.path())[0].1["run_id"].clone();
    assert_ne!(old_run, new_run);
    let old_rest = std::thread::spawn(move || old.map(|e| column_i64(&e.unwrap(), "value")[0]).collect::<Vec<_>>());
    let old_rest = old_rest.join().unwrap();
    assert_eq!(old_head.len() + old_rest.len(), 40, "the losing pass still delivers every element");
    assert_eq!(metadata(dir.path())[0].1["finalized"], false, "the loser does not finalize");
    let new_rest: Vec<i64> = new.by_ref().map(|e| column_i64(&e.unwrap(), "value")[0]).collect();
    assert_eq!(column_i64(&new_first, "value")[0], 0);
    assert_eq!(new_rest.len(), 39);
    let meta = metadata(dir.path());
    assert_eq!((meta[0].1["finalized"].clone(), meta[0].1["run_id"].clone()), (true.into(), new_run));
    // Only the winner's shards remain, and a read gives the elements.
    assert_eq!(shard_files(dir.path()).len(), 2);
    let before = passes.load(Ordering::SeqCst);
    assert_eq!(values(&slow), (0..40).collect::<Vec<_>>());
    assert_eq!(passes.load(Ordering::SeqCst), before, "read, not computed");
}

#[test]
fn the_fingerprint_ignores_seeds_but_not_computation_and_can_be_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let base = |seed: u64, factor: i64| {
        Dataset::range(0, 30)
            .unwrap()
            .shuffle(8, Some(seed))
            .unwrap()
            .map(MapFunction::with_fields([("y", col("value") * lit(factor))]))
            .unwrap()
    };
    let a = base(1, 2).snapshot(path, SnapshotOptions::default()).unwrap();
    let written = ints(&a, "y");
    assert_eq!(metadata(dir.path()).len(), 1);
    // Another seed: the same snapshot (READ gives the first run's order).
    let b = base(2, 2).snapshot(path, SnapshotOptions::default()).unwrap();
    assert_eq!(ints(&b, "y"), written);
    assert_eq!(metadata(dir.path()).len(), 1);
    // Another computation: another snapshot.
    let c = base(1, 3).snapshot(path, SnapshotOptions::default()).unwrap();
    assert_eq!(ints(&c, "y").iter().sum::<i64>(), 3 * (0..30).sum::<i64>());
    assert_eq!(metadata(dir.path()).len(), 2);
    // Pinned: different computations share the name's snapshot.
    let pinned = SnapshotOptions::default().with_snapshot_fingerprint("features_v1");
    let d = base(1, 4).snapshot(path, pinned.clone()).unwrap();
    let d_values = ints(&d, "y");
    let e = base(5, 5).snapshot(path, pinned).unwrap();
    assert_eq!(ints(&e, "y"), d_values);
    assert!(dir.path().join("features_v1").join("snapshot.metadata").exists());
    // Stable: the key is the upstream plan's seedless fingerprint, the same in every process.
    let expected = flumen::crates::ir::fingerprint::fingerprint_without_seeds(base(9, 2).plan());
    assert!(dir.path().join(&expected).exists(), "{expected}");
}

#[test]
fn every_compression_round_trips_and_zstd_is_smallest() {
    let mut sizes = Vec::new();
    for compression in [Compression::None, Compression::Lz4, Compression::Zstd] {
        let dir = tempfile::tempdir().unwrap();
        let ds = Dataset::range(0, 20_000)
            .unwrap()
            .map(MapFunction::with_fields([("bucket", col("value") % lit(10i64))]))
            .unwrap()
            .snapshot(dir.path().to_str().unwrap(), SnapshotOptions::default().with_compression(compression))
            .unwrap();
        let written = ints(&ds, "bucket");
        assert_eq!(ints(&ds, "bucket"), written, "{compression:?}");
        assert_eq!(ints(&ds, "value"), (0..20_000).collect::<Vec<_>>());
        let bytes: u64 = shard_files(dir.path()).iter().map(|f| f.metadata().unwrap().len()).sum();
        sizes.push(bytes);
    }
    assert!(sizes[0] > sizes[1] && sizes[1] > sizes[2], "none, lz4, zstd: {sizes:?}");
}

#[test]
fn a_corrupt_shard_is_an_error_naming_the_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let ds = Dataset::range(0, 5000)
        .unwrap()
        .snapshot(dir.path().to_str().unwrap(), SnapshotOptions::default().with_shards(1))
        .unwrap();
    values(&ds);
    let shard = shard_files(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&shard).unwrap();
    let at = bytes.len() * 2 / 3;
    bytes[at] ^= 0xff;
    std::fs::write(&shard, bytes).unwrap();
    let errors: Vec<String> = ds.iter().filter_map(|e| e.err()).map(|e| e.to_string()).collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains(&shard.display().to_string()) && errors[0].contains("byte "), "{}", errors[0]);
}

#[test]
fn shard_by_and_a_custom_reader() {
    let dir = tempfile::tempdir().unwrap();
    let options = SnapshotOptions::default()
        .with_shards(3)
        .with_shard_by(col("value") % lit(3i64))
        .with_reader(Some("shards_in_turn"), |shards, read_shard| shards.flat_map(read_shard));
    let ds = Dataset::range(0, 30).unwrap().snapshot(dir.path().to_str().unwrap(), options).unwrap();
    assert_eq!(values(&ds), (0..30).collect::<Vec<_>>(), "the writing pass yields the input");
    // Each shard holds one residue class; the reader reads shard 0, 1, 2 in turn.
    let read = values(&ds);
    let expected: Vec<i64> = (0..3).flat_map(|r| (0..30).filter(move |v| v % 3 == r)).collect();
    assert_eq!(read, expected);
}

#[test]
fn a_snapshot_read_resumes_from_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let ds = Dataset::range(0, 500)
        .unwrap()
        .snapshot(dir.path().to_str().unwrap(), SnapshotOptions::default().with_shards(3))
        .unwrap()
        .with_options(Options::default().with_chunk_rows(16));
    values(&ds);
    for mode in [SaveMode::Full, SaveMode::Symbolic] {
        let mut it = ds.iter();
        let head: Vec<_> = it.by_ref().take(77).map(Result::unwrap).collect();
        let checkpoint = it.save(mode).unwrap();
        let rest: Vec<_> = it.map(Result::unwrap).collect();
        let resumed: Vec<_> = ds.iter_from(&checkpoint).unwrap().map(Result::unwrap).collect();
        assert_eq!(resumed, rest);
        assert_eq!(head.len() + rest.len(), 500);
    }
}

#[test]
fn a_file_cache_is_published_only_by_a_complete_pass() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cache.chunks");
    let passes = Arc::new(AtomicUsize::new(0));
    let ds = counted(60, passes.clone()).cache_to(file.to_str().unwrap()).unwrap();
    // A partial pass leaves nothing.
    let mut partial = ds.iter();
    partial.next().unwrap().unwrap();
    drop(partial);
    assert!(!file.exists());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "no temporary file left");
    // Two passes at once: both complete; the first to finish publishes, the other drops its copy.
    let mut a = ds.iter();
    let mut b = ds.iter();
    let mut from_a = vec![a.next().unwrap().unwrap()];
    let from_b: Vec<_> = b.by_ref().map(Result::unwrap).collect();
    assert!(file.exists());
    from_a.extend(a.map(Result::unwrap));
    assert_eq!(from_a, from_b);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "only the published file");
    assert_eq!(passes.load(Ordering::SeqCst), 3);
    // Later passes, and other datasets naming the file, read it.
    assert_eq!(values(&ds), (0..60).collect::<Vec<_>>());
    let other = counted(60, passes.clone()).cache_to(file.to_str().unwrap()).unwrap();
    assert_eq!(values(&other), (0..60).collect::<Vec<_>>());
    assert_eq!(passes.load(Ordering::SeqCst), 3);
}

#[test]
fn a_corrupt_cache_file_reports_its_error_once_across_a_restore() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.chunks");
    let ds = Dataset::range(0, 20)
        .unwrap()
        .cache_to(file.to_str().unwrap())
        .unwrap()
        .with_options(Options::default().with_chunk_rows(5));
    values(&ds);
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0xff;
    std::fs::write(&file, bytes).unwrap();
    let mut it = ds.iter_chunks();
    let errors = it.by_ref().take_while(|c| c.is_ok()).count();
    assert!(errors < 4, "the corrupt chunk fails before the end");
    let checkpoint = it.save(SaveMode::Symbolic).unwrap();
    let rest: Vec<String> = it.map(|c| format!("{c:?}")).collect();
    let resumed: Vec<String> = ds.iter_chunks_from(&checkpoint).unwrap().map(|c| format!("{c:?}")).collect();
    assert_eq!(resumed, rest);
    assert!(rest.is_empty(), "{rest:?}");
}
