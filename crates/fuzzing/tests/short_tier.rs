//! The short, deterministic tier of the fuzz targets: every target's seed inputs, the
//! crashing inputs kept under `regressions/<target>/`, and a few hundred mutations of the
//! seeds drawn from a fixed stream, each run under the capped allocator and a time limit.
//! `FLUMEN_FUZZ_MUTATIONS` sets the mutations per target (default 300); the long tier is
//! libFuzzer's (`fuzz/README.md`).

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use flumen_fuzzing::alloc::{cap_for, with_cap, CappedAlloc};
use flumen_fuzzing::mutate::{mutate, Rng};
use flumen_fuzzing::TARGETS;

#[global_allocator]
static ALLOC: CappedAlloc = CappedAlloc;

/// The longest one input may take (a hang is a failure too).
const LIMIT: Duration = Duration::from_secs(20);

/// The inputs kept under `regressions/<target>/`.
fn regressions(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions").join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else { return vec![] };
    let mut inputs: Vec<(String, Vec<u8>)> = entries
        .filter_map(|e| e.ok())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).expect("a regression input")))
        .collect();
    inputs.sort();
    inputs
}

/// Runs `input` through target `index` on a thread of its own, under the allocation cap
/// for its size; why it failed, if it did.
fn run(index: usize, input: Vec<u8>) -> Result<(), String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let target = &TARGETS[index];
        let cap = cap_for(input.len());
        let outcome = std::panic::catch_unwind(|| with_cap(cap, || (target.run)(&input)));
        let _ = tx.send(outcome.map_err(|p| {
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        }));
    });
    match rx.recv_timeout(LIMIT) {
        Ok(outcome) => outcome,
        Err(_) => Err(format!("did not finish within {} s", LIMIT.as_secs())),
    }
}

#[test]
fn every_target_keeps_its_properties_on_seeds_regressions_and_mutations() {
    // The decoders' panics that flumen catches and reports as errors are the expected
    // answer to bad input: not printed. A target's own failures are collected below.
    std::panic::set_hook(Box::new(|_| {}));
    let mutations: usize = std::env::var("FLUMEN_FUZZ_MUTATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let failures_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-failures");
    let mut failures = vec![];
    for (index, target) in TARGETS.iter().enumerate() {
        let seeds = (target.seeds)();
        assert!(!seeds.is_empty(), "{}: no seeds", target.name);
        let mut inputs: Vec<(String, Vec<u8>)> =
            seeds.iter().enumerate().map(|(i, s)| (format!("seed {i}"), s.clone())).collect();
        inputs.extend(regressions(target.name));
        let mut rng = Rng::new(0x5eed ^ index as u64);
        for m in 0..mutations {
            let (a, b) = (&seeds[rng.below(seeds.len())], &seeds[rng.below(seeds.len())]);
            inputs.push((format!("mutation {m}"), mutate(a, b, &mut rng)));
        }
        for (name, input) in inputs {
            if let Err(why) = run(index, input.clone()) {
                std::fs::create_dir_all(&failures_dir).expect("a directory for failing inputs");
                let saved = failures_dir.join(format!("{}-{}", target.name, name.replace(' ', "-")));
                std::fs::write(&saved, &input).expect("save the failing input");
                failures.push(format!("{} {name} (saved to {}): {why}", target.name, saved.display()));
            }
        }
    }
    // The default hook again, so that this test's own failure is printed.
    drop(std::panic::take_hook());
    assert!(failures.is_empty(), "{} failing inputs:\n{}", failures.len(), failures.join("\n"));
}
