//! The RAM budget bounds what a process holds (its peak resident set, `VmHWM`), whatever the
//! element size, and whether parallelism and buffers are autotuned or set large by hand; and
//! what it counts is what is resident, when the allocator keeps no freed memory per thread.
//!
//! Each case runs in a process of its own: this test binary again, running
//! `one_pipeline_in_its_own_process` with the case in `FLUMEN_MEMORY_CASE`. The child reads
//! its peak RSS once the pipeline is built (the idle process) and after it has been drained
//! by a consumer slower than the producers (so that every buffer fills), and prints both
//! with its `explain analyze`, which says the most the budget counted.

use std::process::Command;
use std::sync::Arc;

use arrow::array::{BinaryArray, RecordBatch};
use flumen::prelude::*;
use flumen::{DType, ElementSpec, FieldSpec, Parallel, Tunable};

/// One pipeline: `elements` elements of `bytes` bytes each, made by a per-element function
/// behind a parallel map, a shuffle of `shuffle` elements when not 0, and a prefetch (map and
/// prefetch autotuned, or fixed large), under `budget`.
#[derive(Debug, Clone, Copy)]
struct Case {
    bytes: usize,
    elements: i64,
    autotune: bool,
    budget: u64,
    shuffle: u64,
}

impl Case {
    fn encode(&self) -> String {
        format!("{} {} {} {} {}", self.bytes, self.elements, self.autotune, self.budget, self.shuffle)
    }

    fn decode(text: &str) -> Case {
        let parts: Vec<&str> = text.split(' ').collect();
        Case {
            bytes: parts[0].parse().unwrap(),
            elements: parts[1].parse().unwrap(),
            autotune: parts[2].parse().unwrap(),
            budget: parts[3].parse().unwrap(),
            shuffle: parts[4].parse().unwrap(),
        }
    }

    fn dataset(&self) -> Dataset {
        let bytes = self.bytes;
        let spec = ElementSpec::new(vec![FieldSpec::scalar("payload", DType::Binary)]).unwrap();
        let schema = spec.arrow_schema();
        let make = MapFunction::element(Some("payload"), spec, move |row| {
            let value = row.column(0).as_any().downcast_ref::<arrow::array::Int64Array>().unwrap().value(0);
            // Made in place: what a function allocates besides its output is its own.
            let values = arrow::buffer::Buffer::from_vec(vec![value as u8; bytes]);
            let payload = BinaryArray::new(arrow::buffer::OffsetBuffer::from_lengths([bytes]), values, None);
            Ok(RecordBatch::try_new(schema.clone(), vec![Arc::new(payload)])?)
        });
        let (calls, buffer) = match self.autotune {
            true => (Tunable::Autotune, Tunable::Autotune),
            false => (Tunable::Fixed(8), Tunable::Fixed(128)),
        };
        let mut ds = Dataset::range(0, self.elements)
            .unwrap()
            .map_with(make, Parallel { num_parallel_calls: calls, deterministic: None })
            .unwrap();
        if self.shuffle > 0 {
            ds = ds.shuffle_with(self.shuffle, Some(7), false).unwrap();
        }
        ds.prefetch(buffer).unwrap().with_options(Options::default().with_ram_budget(self.budget))
    }
}

/// This process's peak resident set so far, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

#[test]
#[ignore = "one case of the memory tests, run by them in a process of its own"]
fn one_pipeline_in_its_own_process() {
    let case = Case::decode(&std::env::var("FLUMEN_MEMORY_CASE").expect("a case"));
    let ds = case.dataset();
    let idle = peak_rss();
    let mut count = 0;
    let mut it = ds.iter();
    for element in it.by_ref() {
        let element = element.unwrap();
        assert_eq!(element.column(0).as_any().downcast_ref::<BinaryArray>().unwrap().value(0).len(), case.bytes);
        count += 1;
        // A consumer slower than the producers, so that every buffer fills: 200 pauses
        // of 2 ms in all.
        if count % (case.elements / 200).max(1) == 0 {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
    assert_eq!(count, case.elements);
    println!("memory-case idle {idle} peak {}", peak_rss());
    println!("{}", it.analyze().unwrap());
}

/// What a case's process held: its RSS when idle and at its peak, and the most the budget
/// counted, in bytes.
struct Measured {
    idle: u64,
    peak: u64,
    counted: u64,
}

/// Runs `case` in a process of its own, with `env` set.
fn measure(case: Case, env: &[(&str, &str)]) -> Measured {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "one_pipeline_in_its_own_process", "--ignored", "--nocapture", "--test-threads", "1"])
        .env("FLUMEN_MEMORY_CASE", case.encode())
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{case:?}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    let line = stdout.lines().find_map(|l| l.split("memory-case ").nth(1)).expect("the child's report");
    let numbers: Vec<u64> = line.split(' ').filter_map(|w| w.parse().ok()).collect();
    // `explain analyze` says "buffers held at most N MiB".
    let held = stdout.split("buffers held at most ").nth(1).and_then(|rest| rest.split(' ').next());
    let counted = held.and_then(|mib| mib.parse::<f64>().ok()).expect("the child's explain analyze");
    Measured { idle: numbers[0], peak: numbers[1], counted: (counted * 1048576.0) as u64 }
}

fn check(cases: &[Case]) {
    let mut failures = vec![];
    for &case in cases {
        let Measured { idle, peak, .. } = measure(case, &[]);
        let bound = idle + case.budget + case.budget / 10;
        let line = format!("{case:?}: peak {} MiB, idle {} MiB, bound {} MiB", peak >> 20, idle >> 20, bound >> 20);
        eprintln!("{line}");
        if peak > bound {
            failures.push(line);
        }
    }
    assert!(failures.is_empty(), "over the budget:\n{}", failures.join("\n"));
}

#[test]
fn large_elements_stay_within_the_budget() {
    let mut cases = large_cases(256 << 20);
    // The shuffle autotuned too: the buffers around it hold back either way.
    cases.push(Case { bytes: 1 << 20, elements: 400, autotune: true, budget: 256 << 20, shuffle: 150 });
    check(&cases);
}

/// The cases with large elements: 4 and 16 MiB, autotuned or fixed large, and 1 MiB
/// elements under a shuffle of 150.
fn large_cases(budget: u64) -> Vec<Case> {
    let mut cases = vec![];
    for (bytes, elements) in [(4 << 20, 200), (16 << 20, 60)] {
        for autotune in [true, false] {
            cases.push(Case { bytes, elements, autotune, budget, shuffle: 0 });
        }
    }
    cases.push(Case { bytes: 1 << 20, elements: 400, autotune: false, budget, shuffle: 150 });
    cases
}

#[test]
fn the_budget_counts_what_is_resident() {
    // With one malloc arena, freed blocks are reused by every thread, so what is resident
    // beyond the idle process is what the pipeline holds: the budget's count must be it,
    // within 10% and a few MiB of threads and code. (glibc's default per-thread arenas keep
    // freed blocks besides, up to a third more for 16 MiB elements: the budget leaves room
    // for them, `flumen_runtime::budget`.) A buffer the budget does not count (the shuffle's
    // before it was) shows here as resident memory far past the count.
    let mut failures = vec![];
    for case in large_cases(256 << 20) {
        let Measured { idle, peak, counted } = measure(case, &[("MALLOC_ARENA_MAX", "1")]);
        let resident = peak.saturating_sub(idle);
        let line = format!("{case:?}: {} MiB resident past idle, {} MiB counted", resident >> 20, counted >> 20);
        eprintln!("{line}");
        if resident > counted + counted / 10 + (10 << 20) || counted > resident + resident / 10 + (10 << 20) {
            failures.push(line);
        }
    }
    assert!(failures.is_empty(), "the count and the resident memory differ:\n{}", failures.join("\n"));
}

#[test]
fn small_elements_stay_within_the_budget() {
    let budget = 64 << 20;
    let mut cases = vec![];
    for (bytes, elements) in [(8, 20_000), (64 << 10, 4_000)] {
        for autotune in [true, false] {
            cases.push(Case { bytes, elements, autotune, budget, shuffle: 0 });
        }
    }
    check(&cases);
}
