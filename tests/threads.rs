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

/// [`flumen_threads`] once the kernel has reaped the threads joined so far.
///
/// `join` returns when the kernel clears the thread's id, early in its exit; the thread
/// leaves `/proc/self/task` only when it is reaped, a moment later. On a loaded machine a
/// joined thread was seen there once in many CI runs. Its entry goes within microseconds,
/// while a thread that was not joined stays: the count is read again until it is zero or
/// five seconds have passed (no sleeping; the kernel needs no wake-up).
fn threads_after_joins() -> usize {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let left = flumen_threads();
        if left == 0 || std::time::Instant::now() > deadline {
            return left;
        }
        std::thread::yield_now();
    }
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
        assert_eq!(threads_after_joins(), 0, "threads left after the iterator was dropped");
    }
}
