//! Iterator checkpoints, tested on random pipelines: an iterator cut at any position, saved,
//! written to bytes, read back and restored into a new iterator of the same dataset yields
//! exactly what the cut iterator yields when it simply goes on — the same elements and the
//! same errors (compared by message) at the same positions.
//!
//! `random_pipelines_resume_exactly_from_checkpoints` draws its pipelines with the generator of
//! `optimizer_equivalence` (`common::pipelines`: a small source and 3–12 operator recipes from
//! the whole operator set) and runs them as users do: optimizer on with default options, in
//! default-sized chunks or (most cases) in chunks of 1–5 rows, so that operators hold partial
//! chunks when they are cut; a quarter of the cases record symbolic positions from the start
//! (`Options::symbolic_checkpoint`). For each case, one run of the iterator is cut at its
//! start, at up to four random positions, just before its last item, before its end is
//! reported and after it; each cut saves a checkpoint in a random mode (`Full` or `Symbolic`).
//! Each checkpoint goes through `to_bytes`/`from_bytes` (it must read back equal), is restored
//! with `Dataset::iter_from`, and the restored iterator must yield the rest of the cut run. It
//! is also restored into a second build of the case (as in another process), and the restored
//! iterator of one cut is itself cut and restored again. A third of the cases iterate the
//! dataset once before the cut run, so caches replay and reshuffling shuffles use iteration 1.
//! Each case runs on its own thread with a time limit, so a hang fails the case instead of
//! the suite.
//!
//! Pipelines calling closures flagged stateful or nondeterministic cannot be saved (`save`
//! asks for `ExternalState::Ignore`): such cases are checked to be refused, counted as
//! skipped, and kept rare by drawing most of this test's closures pure (the equivalence
//! test's strategy is unchanged). The run is deterministic (fixed seed, no persistence);
//! `FLUMEN_CHECKPOINT_CASES` and `FLUMEN_CHECKPOINT_SEED` override the case count and seed
//! for longer bug hunts, and `--nocapture` shows the coverage statistics.

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use common::pipelines::*;
use flumen::prelude::*;
use flumen::{Error, Options};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

/// At most this many items are read per run (pipelines are finite; this bounds the work of
/// the ones that repeat and concatenate a lot, each run being read several times).
const MAX_READ: usize = 1000;

/// A case: a random pipeline, and where and how its iterator is cut.
#[derive(Debug, Clone)]
struct CheckpointCase {
    case: Case,
    /// Cut positions besides the start and the end, in thousandths of the run's length.
    cuts: [u16; 4],
    /// Bit `i`: the `i`-th checkpoint is saved in `Symbolic` mode (else `Full`).
    modes: u16,
    /// Items the iterator restored from the first random cut reads before it is cut again.
    recut: u8,
    /// Iterate the dataset once before the cut run.
    warm: bool,
    /// Run with `Options::symbolic_checkpoint`.
    recording: bool,
}

/// The equivalence test's cases, with three in four stateful or random closures made pure
/// (those cannot be checkpointed: left as drawn, they would make a fifth of the cases skip).
fn checkpoint_case() -> impl Strategy<Value = CheckpointCase> {
    let keep_impure = proptest::collection::vec(proptest::bool::weighted(0.25), 12);
    (
        case(),
        keep_impure,
        [0u16..=1000, 0u16..=1000, 0u16..=1000, 0u16..=1000],
        any::<u16>(),
        0u8..6,
        proptest::bool::weighted(0.33),
        proptest::bool::weighted(0.25),
    )
        .prop_map(|(mut case, keep_impure, cuts, modes, recut, warm, recording)| {
            for (op, keep) in case.ops.iter_mut().zip(keep_impure) {
                if let OpRecipe::MapClosure { flavor: flavor @ (Flavor::Stateful | Flavor::Random), .. } = op {
                    if !keep {
                        *flavor = Flavor::Pure;
                    }
                }
            }
            CheckpointCase { case, cuts, modes, recut, warm, recording }
        })
}

/// Counters over all cases run (the statistics printed at the end).
#[derive(Default)]
struct Stats {
    cases: AtomicUsize,
    build_failed: AtomicUsize,
    checked: AtomicUsize,
    skipped: AtomicUsize,
    /// Cases with a stateful or random closure that saved anyway (the optimizer removed it).
    impure_saved: AtomicUsize,
    warm: AtomicUsize,
    recording: AtomicUsize,
    capped: AtomicUsize,
    empty: AtomicUsize,
    cases_with_errors: AtomicUsize,
    items: AtomicUsize,
    error_items: AtomicUsize,
    cuts_full: AtomicUsize,
    cuts_symbolic: AtomicUsize,
    /// Cuts strictly inside a run (neither at its start nor at its end).
    cuts_inside: AtomicUsize,
    recuts: AtomicUsize,
    /// Checkpoints restored into another build of their case.
    other_restores: AtomicUsize,
    resumed_items: AtomicUsize,
    /// Checkpoints written to bytes, read back and restored.
    restores: AtomicUsize,
    checkpoint_bytes: AtomicUsize,
    largest_checkpoint: AtomicUsize,
    checked_ops: Mutex<BTreeMap<&'static str, usize>>,
    skipped_ops: Mutex<BTreeMap<&'static str, usize>>,
}

static STATS: LazyLock<Stats> = LazyLock::new(Stats::default);

fn count(counter: &AtomicUsize, n: usize) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// One item as compared here: an element, or an error's message (a restored error must
/// read exactly like the original).
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Ok(RecordBatch),
    Err(String),
}

impl Seen {
    fn of(item: flumen::Result<RecordBatch>) -> Self {
        match item {
            Ok(b) => Seen::Ok(b),
            Err(e) => Seen::Err(e.to_string()),
        }
    }

    fn show(&self) -> String {
        match self {
            Seen::Ok(b) => show(Some(&Item::Ok(b.clone()))),
            Seen::Err(e) => show(Some(&Item::Err(e.clone()))),
        }
    }
}

fn show_seen(item: Option<&Seen>) -> String {
    item.map_or_else(|| show(None), Seen::show)
}

/// The mode of the `i`-th checkpoint of a case.
fn mode(c: &CheckpointCase, i: usize) -> SaveMode {
    if c.modes & (1 << (i % 16)) != 0 {
        SaveMode::Symbolic
    } else {
        SaveMode::Full
    }
}

/// Whether a save failed because the pipeline calls stateful or random closures.
fn refused_for_external_state(e: &Error) -> bool {
    e.to_string().contains("ExternalState::Ignore")
}

/// `checkpoint` (taken after `at` items) read back from its bytes, which must read back equal.
fn through_bytes(checkpoint: &Checkpoint, at: usize) -> Result<Checkpoint, String> {
    let what = format!("the {:?} checkpoint after {at} items", checkpoint.mode);
    if checkpoint.elements != at as u64 {
        return Err(format!("{what} records position {}", checkpoint.elements));
    }
    let bytes = checkpoint.to_bytes().map_err(|e| format!("{what}: to_bytes: {e}"))?;
    count(&STATS.restores, 1);
    count(&STATS.checkpoint_bytes, bytes.len());
    STATS.largest_checkpoint.fetch_max(bytes.len(), Ordering::Relaxed);
    let read = Checkpoint::from_bytes(&bytes).map_err(|e| format!("{what}: from_bytes: {e}"))?;
    if read != *checkpoint {
        return Err(format!("{what} reads back different from its bytes"));
    }
    Ok(read)
}

/// Where `resumed` first differs from `expected` (the cut run's items after the cut).
fn first_difference(resumed: &[Seen], expected: &[Seen]) -> Option<String> {
    (0..resumed.len().max(expected.len())).find(|&i| resumed.get(i) != expected.get(i)).map(|i| {
        format!(
            "item {i} after the cut (of {} resumed / {} expected) differs:\nresumed: {}\nexpected: {}",
            resumed.len(),
            expected.len(),
            show_seen(resumed.get(i)),
            show_seen(expected.get(i))
        )
    })
}

/// Restores `checkpoint` (taken after `at` items of the cut run `seen`) into a new iterator
/// of `ds` and compares what it yields with the rest of the cut run. With `recut`, the
/// restored iterator is itself saved after that many items and restored once more.
fn check_resume(
    ds: &Dataset,
    checkpoint: &Checkpoint,
    at: usize,
    seen: &[Seen],
    recut: Option<(usize, SaveMode)>,
) -> Result<(), String> {
    let what = format!("{:?} checkpoint after {at} items", checkpoint.mode);
    let mut restored = ds.iter_from(&through_bytes(checkpoint, at)?).map_err(|e| format!("{what}: restore: {e}"))?;
    let mut resumed = Vec::new();
    let mut again = None;
    while at + resumed.len() < MAX_READ {
        if let Some((j, mode)) = recut.filter(|&(j, _)| j == resumed.len()) {
            let saved = restored.save(mode).map_err(|e| format!("restored from the {what}: save: {e}"))?;
            again = Some((at + j, saved));
        }
        match restored.next() {
            Some(item) => resumed.push(Seen::of(item)),
            None => break,
        }
    }
    count(&STATS.resumed_items, resumed.len());
    if let Some(diff) = first_difference(&resumed, &seen[at..]) {
        return Err(format!("{what}: {diff}"));
    }
    if let Some((at_again, again)) = again {
        count(&STATS.recuts, 1);
        check_resume(ds, &again, at_again, seen, None).map_err(|e| format!("restored from the {what}, then {e}"))?;
    }
    Ok(())
}

/// The cut run of a built case: iterates `ds` once, saving checkpoints at `cuts` (cuts past
/// the end of the run at its end) and after the end, then restores each into `ds` and into
/// `other`, another build of the case, and checks that they resume exactly. `Ok(false)` when
/// the pipeline cannot be saved (stateful or random closures).
fn cut_and_resume(c: &CheckpointCase, ds: &Dataset, other: &Dataset, cuts: &[usize]) -> Result<bool, String> {
    let mut it = ds.iter();
    let mut seen = Vec::new();
    let mut saved: Vec<(usize, Checkpoint)> = Vec::new();
    let mut save = |it: &flumen::DatasetIterator, at: usize| {
        let mode = mode(c, saved.len());
        let checkpoint = it.save(mode).map_err(|e| (e, format!("{mode:?} save after {at} items")))?;
        saved.push((at, checkpoint));
        Ok::<_, (Error, String)>(())
    };
    let mut pending = cuts.iter().copied().peekable();
    let ended = loop {
        let at = seen.len();
        if pending.next_if(|&k| k <= at).is_some() {
            while pending.next_if(|&k| k <= at).is_some() {}
            match save(&it, at) {
                Err((e, _)) if at == 0 && refused_for_external_state(&e) => return Ok(false),
                Err((e, what)) => return Err(format!("{what} failed: {e}")),
                Ok(()) => {}
            }
        }
        if at == MAX_READ {
            break false;
        }
        match it.next() {
            Some(item) => seen.push(Seen::of(item)),
            None => break true,
        }
    };
    let len = seen.len();
    if ended {
        // After the end has been reported: the restored iterator must report it too.
        save(&it, len).map_err(|(e, what)| format!("{what}, after the end, failed: {e}"))?;
    }
    let errors = seen.iter().filter(|s| matches!(s, Seen::Err(_))).count();
    count(&STATS.items, len);
    count(&STATS.error_items, errors);
    count(&STATS.cases_with_errors, usize::from(errors > 0));
    count(&STATS.empty, usize::from(len == 0));
    count(&STATS.capped, usize::from(!ended));
    let first_inside = saved.iter().position(|&(at, _)| at > 0 && at < len);
    for (i, (at, checkpoint)) in saved.iter().enumerate() {
        let recut = (Some(i) == first_inside).then(|| (usize::from(c.recut), mode(c, saved.len() + i)));
        check_resume(ds, checkpoint, *at, &seen, recut)?;
        check_resume(other, checkpoint, *at, &seen, None).map_err(|e| format!("in another build: {e}"))?;
        count(&STATS.other_restores, 1);
        match checkpoint.mode {
            SaveMode::Full => count(&STATS.cuts_full, 1),
            SaveMode::Symbolic => count(&STATS.cuts_symbolic, 1),
        }
        count(&STATS.cuts_inside, usize::from(*at > 0 && *at < len));
    }
    Ok(true)
}

/// Builds `case` under the options users run with: the optimizer on, default options, and
/// the case's small chunks (its largest chunk size stands for the default).
fn build_case(c: &CheckpointCase, dir: &std::path::Path) -> flumen::Result<Built> {
    let options = Options::default().with_symbolic_checkpoint(c.recording);
    let options = if c.case.chunk_rows < 1024 { options.with_chunk_rows(c.case.chunk_rows) } else { options };
    build(&c.case, options, dir)
}

/// Runs one case; a description of the first failure, if any.
fn run_case(c: &CheckpointCase) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    if let SourceRecipe::Files { rows, parquet, files, bad_row, .. } = &c.case.source {
        write_files(dir.path(), rows, *parquet, *files, *bad_row);
    }
    let Ok(built) = build_case(c, dir.path()) else {
        count(&STATS.build_failed, 1);
        return Ok(());
    };
    count(&STATS.cases, 1);
    count(&STATS.recording, usize::from(c.recording));
    let other = build_case(c, dir.path()).map_err(|e| format!("the second build failed: {e}"))?.ds;
    // The length of a run, to place the cuts: the first pass over the dataset in warm cases
    // (caches are filled and replay, reshuffling shuffles use iteration 1 in the cut run),
    // else the first pass over the other build (the same seeds: the cut run's length). The
    // other build is then in the state of another process that iterated it once, or none.
    let first = if c.warm { &built.ds } else { &other };
    count(&STATS.warm, usize::from(c.warm));
    let len = first.iter().take(MAX_READ).count();
    let at = |p: u16| len * usize::from(p) / 1000;
    let mut cuts: Vec<usize> = c.cuts.iter().map(|&p| at(p)).collect();
    cuts.extend([0, len.saturating_sub(1), len]);
    cuts.sort_unstable();
    let impure =
        built.applied.iter().any(|op| matches!(*op, "map(closure stateful)" | "map(closure nondeterministic)"));
    let checked = cut_and_resume(c, &built.ds, &other, &cuts).map_err(|e| format!("{e}\n\n{}", describe(&built)))?;
    let ops = match (checked, impure) {
        (false, false) => return Err(format!("a pure pipeline cannot be saved\n\n{}", describe(&built))),
        (false, true) => {
            count(&STATS.skipped, 1);
            &STATS.skipped_ops
        }
        (true, _) => {
            count(&STATS.checked, 1);
            count(&STATS.impure_saved, usize::from(impure));
            &STATS.checked_ops
        }
    };
    let mut ops = ops.lock().unwrap();
    built.applied.iter().for_each(|op| *ops.entry(op).or_default() += 1);
    Ok(())
}

/// A built case for failure messages: its builder calls and the plan that ran.
fn describe(built: &Built) -> String {
    format!("pipeline:\n  {}\n\n{}", built.calls.join("\n    ."), built.ds.explain())
}

/// The statistics of the run, as text.
fn stats_report(elapsed: Duration) -> String {
    let s = &*STATS;
    let get = |c: &AtomicUsize| c.load(Ordering::Relaxed);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} cases in {:.1?} ({} failed to build): {} checked, {} skipped (stateful or random closures), {} saved \
         despite such a closure; {} warm, {} recording, {} capped at {MAX_READ} items, {} empty, {} with errors; {} items ({} \
         errors) in cut runs; cuts: {} full, {} symbolic, {} strictly inside a run; {} checkpoints restored ({} of \
         restored iterators, {} into another build), {} items resumed; checkpoints of {} bytes on average, {} at most",
        get(&s.cases) + get(&s.build_failed),
        elapsed,
        get(&s.build_failed),
        get(&s.checked),
        get(&s.skipped),
        get(&s.impure_saved),
        get(&s.warm),
        get(&s.recording),
        get(&s.capped),
        get(&s.empty),
        get(&s.cases_with_errors),
        get(&s.items),
        get(&s.error_items),
        get(&s.cuts_full),
        get(&s.cuts_symbolic),
        get(&s.cuts_inside),
        get(&s.restores),
        get(&s.recuts),
        get(&s.other_restores),
        get(&s.resumed_items),
        get(&s.checkpoint_bytes) / get(&s.restores).max(1),
        get(&s.largest_checkpoint),
    );
    let _ = writeln!(out, "operators in checked cases: {:?}", s.checked_ops.lock().unwrap());
    let _ = writeln!(out, "operators in skipped cases: {:?}", s.skipped_ops.lock().unwrap());
    out
}

/// The property: a checkpoint taken anywhere in a random pipeline's run resumes it exactly.
///
/// `FLUMEN_CHECKPOINT_CASES` and `FLUMEN_CHECKPOINT_SEED` override the case count and the
/// seed (for longer bug hunts); CI runs the fixed defaults.
#[test]
fn random_pipelines_resume_exactly_from_checkpoints() {
    let config = fixed_config("FLUMEN_CHECKPOINT_CASES", 256, "FLUMEN_CHECKPOINT_SEED", 0x00C0_FFEE);
    let start = Instant::now();
    let result = TestRunner::new(config)
        .run(&checkpoint_case(), |c| run_with_timeout("checkpoint-case", Duration::from_secs(60), &c, run_case));
    let report = stats_report(start.elapsed());
    eprintln!("{report}");
    if let Err(e) = result {
        panic!("{e}\n{report}");
    }
    let s = &*STATS;
    let (checked, cases) = (s.checked.load(Ordering::Relaxed), s.cases.load(Ordering::Relaxed));
    assert!(checked * 4 >= cases * 3, "too few cases checked: {checked} of {cases}\n{report}");
    let inside = s.cuts_inside.load(Ordering::Relaxed);
    assert!(inside >= checked, "too few cuts inside runs: {inside} in {checked} cases\n{report}");
}
