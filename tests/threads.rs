//! No thread outlives its iterator: dropping an iterator mid-stream stops and joins the
//! producer, pool and tuner threads of every parallel operator. (A test binary of its own:
//! it counts the process's threads, which other tests running alongside would change.)

#![cfg(target_os = "linux")]

mod common;

use common::*;
use flumen::prelude::*;
use flumen::Options;

/// The process's threads that flumen started (their names begin with `flumen-`).
fn flumen_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("flumen-"))
        .count()
}

#[test]
fn dropping_an_iterator_mid_stream_joins_every_thread() {
    let spec = ElementSpec::new(vec![FieldSpec::scalar("value", DType::Int64)]).unwrap();
    let slow = MapFunction::element(None, spec.clone(), |row| Ok(row.clone()));
    let files = DatasetFunction::closure(None, spec, |row| {
        let f = column_i64(row, "value")[0];
        Dataset::range(f * 1_000_000, (f + 1) * 1_000_000)
    });
    let parallel = Parallel { num_parallel_calls: Tunable::Autotune, deterministic: None };
    let ds = Dataset::range(0, 8)
        .unwrap()
        .interleave_with(files, Tunable::Fixed(4), 1, parallel)
        .unwrap()
        .map_with(slow, parallel)
        .unwrap()
        .batch(16)
        .unwrap()
        .prefetch(Tunable::Autotune)
        .unwrap()
        .with_options(Options::default().with_chunk_rows(8).with_threads(3));
    assert_eq!(flumen_threads(), 0);
    for _ in 0..3 {
        let mut it = ds.iter();
        for item in it.by_ref().take(50) {
            item.unwrap();
        }
        // Pool workers, the prefetch producer, four interleave readers and the tuner.
        assert!(flumen_threads() >= 6, "{} threads while running", flumen_threads());
        drop(it);
        assert_eq!(flumen_threads(), 0, "threads left after the iterator was dropped");
    }
}
