//! The optimizer's guarantee, fuzzed: however a user runs a pipeline — the optimizer on or
//! off, any rule family switched off, one thread, autotuning or stage fusion off, any
//! `chunk_rows`, or the plan serialized and read back — it yields the same items as the plan
//! run as written (`Options::default().without_optimizations()`, default chunks): equal
//! elements (schema and values; NaNs and zeros of either sign alike) and errors at the same
//! positions (their messages may differ; the statistics count those), on two passes over
//! the same dataset.
//!
//! Cases come from `common::pipelines::full_case`: a source of any kind (ranges, in-memory
//! columns of every dtype family with a fixed-shape tensor field, a stateful generator,
//! CSV/Parquet/IPC/text files and TFRecord files of `tf.train.Example`s, some records bad,
//! read directly, through `flat_map`/`interleave` of `list_files`, or as splits; JPEG and
//! PNG images, one cut short, some missing (null), decoded, cropped or resized with random
//! draws, flipped and normalized, color-jittered or cast to bfloat16) and 1–12
//! operator recipes from the whole operator set with every expression family (casts of
//! literals, constants that fail, `AND`/`OR` with a fallible operand, math over NaN and
//! infinities, integer overflow, narrow types, tensor fields, `parse_example`), pure,
//! failing, stateful and random closures per element and per chunk, parallel arguments,
//! nested datasets of batched elements, caches cut short and reshuffling repeats. Each
//! configuration builds the case from scratch (fresh closure state, fresh caches).
//!
//! An operator given `deterministic: false` may hand out its elements out of order, and so
//! may every run: such a case is compared as multisets of rows and counts of errors where
//! nothing after that operator depends on the order, and not at all where something does
//! (`fuzz::compare_mode`).
//!
//! Stateful closures are compared fully, with one exemption (`fuzz::compare_mode`): where
//! the user wrote read-ahead above a stateful closure (a `prefetch`, or parallel arguments)
//! and an early stop above that (`take`, `take_while`, `zip`, ...), the closure is called a
//! timing-dependent number of times past what was consumed, as in tf.data: then only the
//! first pass is compared, and nothing when the pipeline runs the closure's input again.
//!
//! Optimizer slowness fails a case deterministically: a stage that stops for a limit or whose
//! e-graph grows past 2,000 nodes; the long tier's release build also fails an optimization
//! slower than 50 ms (three tries). The fastest and slowest optimizations are in the
//! statistics. Each case runs on a thread of its own with a time limit,
//! so a hang fails the case. A failure is shrunk (proptest's simplify/complicate walk, each
//! candidate run under the failing configuration) and printed with the minimal case as one
//! line of JSON; such lines go into `tests/equivalence_regressions.jsonl` (each under a `#`
//! comment saying what it found), which `regressions_replay` runs under every configuration.
//!
//! Tiers:
//! - `short_tier` (in `cargo test`): 300 cases (`FLUMEN_FUZZ_SHORT_CASES`), each under four
//!   configurations drawn by the case's seed.
//! - `long_tier` (ignored; every configuration per case, all failures collected):
//!
//!   ```sh
//!   FLUMEN_FUZZ_CASES=20000 cargo test --release --test optimizer_equivalence -- --ignored --nocapture long_tier
//!   ```
//!
//!   `FLUMEN_FUZZ_SEED` overrides the seed, `FLUMEN_FUZZ_JOBS` the worker threads (default:
//!   the cores; each worker draws its own cases from the seed plus its index). It prints
//!   the coverage statistics (cases, items, errors, operators, expression families,
//!   sources, rules fired, configurations, optimizer times, failures).
//! - `replay` (ignored): `FLUMEN_FUZZ_REPLAY='<case JSON>'` runs one case under every
//!   configuration and prints each one's difference from the reference (with the rules
//!   in `FLUMEN_FUZZ_OFF`, comma-separated, switched off too).

mod common;
mod fuzz;

use std::time::{Duration, Instant};

use common::pipelines::env_or;
use fuzz::configs::Config;
use fuzz::{regressions, report_failure, run_cases, stats, Tier};
use proptest::test_runner::TestRunner;

/// The default seed of both tiers.
const SEED: u64 = 0x0F1E_2D3C_4B5A_6978;

/// The deterministic runner of `seed` (portable ChaCha, no persistence).
fn runner(seed: u64) -> TestRunner {
    TestRunner::new(proptest::test_runner::Config {
        failure_persistence: None,
        rng_algorithm: proptest::test_runner::RngAlgorithm::ChaCha,
        rng_seed: proptest::test_runner::RngSeed::Fixed(seed),
        ..proptest::test_runner::Config::default()
    })
}

#[test]
fn short_tier() {
    let tier = Tier { configs: None, sampled: 4, timed: false, limit: Duration::from_secs(60), record: true };
    let cases = env_or("FLUMEN_FUZZ_SHORT_CASES", 300usize);
    let start = Instant::now();
    let failures = run_cases(&mut runner(env_or("FLUMEN_FUZZ_SEED", SEED)), cases, &tier, true);
    eprintln!("short tier: {cases} cases in {:.1?}\n{}", start.elapsed(), stats::report());
    if let Some((case, f)) = failures.first() {
        panic!("{}", report_failure(case, f));
    }
}

#[test]
fn regressions_replay() {
    let tier =
        Tier { configs: Some(Config::all()), sampled: 0, timed: false, limit: Duration::from_secs(120), record: true };
    fuzz::quiet_panics();
    let mut failed = Vec::new();
    for (comment, case) in regressions(include_str!("equivalence_regressions.jsonl")) {
        if let Some(f) = fuzz::failure_of(&case, &Config::all(), &tier) {
            failed.push(format!("regression \"{comment}\":\n{}", report_failure(&case, &f)));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

#[test]
#[ignore = "the long tier: FLUMEN_FUZZ_CASES=20000 cargo test --release --test optimizer_equivalence -- --ignored --nocapture long_tier"]
fn long_tier() {
    let tier = Tier {
        configs: Some(Config::all()),
        sampled: 0,
        timed: !cfg!(debug_assertions),
        limit: Duration::from_secs(if cfg!(debug_assertions) { 300 } else { 120 }),
        record: true,
    };
    let cases = env_or("FLUMEN_FUZZ_CASES", 20_000usize);
    let seed = env_or("FLUMEN_FUZZ_SEED", SEED);
    let jobs = env_or("FLUMEN_FUZZ_JOBS", std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
    let start = Instant::now();
    let workers: Vec<_> = (0..jobs)
        .map(|w| {
            let tier = tier.clone();
            let share = cases / jobs + usize::from(w < cases % jobs);
            std::thread::spawn(move || {
                let mut runner = runner(seed.wrapping_add(w as u64));
                let mut failures = Vec::new();
                // Batches of 500 cases, so progress shows while it runs.
                for done in (0..share).step_by(500) {
                    failures.extend(run_cases(&mut runner, 500.min(share - done), &tier, false));
                    if w == 0 {
                        eprintln!("[{:.0?}] {} cases so far", start.elapsed(), stats::cases());
                    }
                }
                failures
            })
        })
        .collect();
    let failures: Vec<_> = workers.into_iter().flat_map(|w| w.join().expect("a worker")).collect();
    eprintln!("long tier: {cases} cases, seed {seed:#x}, {jobs} jobs, in {:.1?}\n{}", start.elapsed(), stats::report());
    for (case, f) in &failures {
        eprintln!("{}", report_failure(case, f));
    }
    assert!(failures.is_empty(), "{} failures (above)", failures.len());
}

/// Replays the case in `FLUMEN_FUZZ_REPLAY` (one line of JSON, as a failure prints it) under
/// every configuration and prints what each gives: for investigating a finding.
#[test]
#[ignore = "FLUMEN_FUZZ_REPLAY='<case JSON>' cargo test --test optimizer_equivalence -- --ignored --nocapture replay"]
fn replay() {
    let json = std::env::var("FLUMEN_FUZZ_REPLAY").expect("FLUMEN_FUZZ_REPLAY holds a case");
    let case: common::pipelines::Case = serde_json::from_str(&json).expect("a case");
    let tier =
        Tier { configs: Some(Config::all()), sampled: 0, timed: false, limit: Duration::from_secs(300), record: true };
    let off = std::env::var("FLUMEN_FUZZ_OFF").unwrap_or_default();
    let off: Vec<&str> = off.split(',').filter(|r| !r.is_empty()).collect();
    fuzz::quiet_panics();
    let dir = tempfile::tempdir().expect("a temporary directory");
    common::pipelines::prepare(&case, dir.path());
    let reference = fuzz::run(&case, Config::Off(None), &[], dir.path(), &tier, 2).expect("the reference runs");
    let mode = fuzz::compare_mode(&reference.built.marks, reference.capped, fuzz::has_errors(&reference));
    eprintln!(
        "reference items: {:?}, compared: {mode:?}",
        reference.passes.iter().map(|p| fuzz::brief(p)).collect::<Vec<_>>()
    );
    for config in Config::all() {
        match fuzz::compare_config(&case, config, &off, dir.path(), &tier, &reference, mode) {
            Ok(()) => eprintln!("{}: same items", config.name()),
            Err(f) => {
                eprintln!("{}: {:?}\n{}\n", config.name(), f.kind, f.text);
            }
        }
    }
}
