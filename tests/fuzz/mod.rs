//! The optimizer-equivalence fuzzer: runs a case of `common::pipelines::full_case` under
//! the reference configuration and under others ([`configs`]), compares the items element
//! by element, fails on optimizer slowness, shrinks failures, and counts what it covered
//! ([`stats`]).

pub mod configs;
pub mod stats;

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::{Array, ArrayRef, AsArray, FixedSizeListArray, ListArray};
use arrow::datatypes::{DataType, Float32Type, Float64Type};
use arrow::record_batch::RecordBatch;
use flumen::crates::optimizer::Report;
use flumen::Dataset;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;

use crate::common::pipelines::*;
use configs::{Config, REFERENCE};

/// A stage whose e-graph grows past this many nodes fails the case (optimizer slowness).
pub const MAX_EGRAPH_NODES: usize = 2_000;

/// In the long tier's release build, an optimization slower than this fails the case
/// (after two more tries: the time of the fastest counts).
pub const MAX_OPTIMIZER_TIME: Duration = Duration::from_millis(50);

/// At most this many items are read per pass (pipelines are finite; this bounds the work of
/// the ones that repeat and concatenate a lot).
pub const MAX_ITEMS: usize = 2000;

/// How a tier runs its cases.
#[derive(Debug, Clone)]
pub struct Tier {
    /// The configurations each case runs besides the reference; `None`: a sample of
    /// `sampled` drawn by the case's seed.
    pub configs: Option<Vec<Config>>,
    /// Configurations per case when sampling.
    pub sampled: usize,
    /// Check the optimizer's wall time ([`MAX_OPTIMIZER_TIME`]).
    pub timed: bool,
    /// A case not finished in this long fails (a hang).
    pub limit: Duration,
    /// Count the runs in the statistics (off while shrinking).
    pub record: bool,
}

/// What went wrong in one configuration of a case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// An item differs from the reference's (or one sequence is longer).
    Mismatch {
        /// 0 or 1.
        pass: usize,
        /// The first differing position.
        index: usize,
        /// The two items differ in schema (a field's type or name), not only in values.
        schema: bool,
    },
    /// An optimizer stage stopped for a limit, grew too big, or took too long.
    Slow,
    /// Building or optimizing failed where the reference's did not.
    Build,
    /// A panic.
    Panic,
    /// The case did not finish in time.
    Timeout,
}

/// A failure of a case: where, what, and a description with the items and the plan.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The configuration that failed.
    pub config: Config,
    /// The kind of failure.
    pub kind: Kind,
    /// What happened, for the report.
    pub text: String,
}

/// One configuration's run of a case.
pub struct Run {
    /// The pipeline as built (the builder calls, the applied recipes and their marks).
    pub built: Built,
    /// The dataset that ran (for `Serde`, the deserialized one).
    pub ds: Dataset,
    /// The items of each pass.
    pub passes: Vec<Vec<Item>>,
    /// Some pass stopped at [`MAX_ITEMS`].
    pub capped: bool,
    /// The optimizer's report (optimized configurations).
    pub report: Option<Arc<Report>>,
}

/// How much of a case's runs are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Compare {
    /// Every pass, every item.
    Full,
    /// Every pass, as a multiset of rows and a count of errors: an operator may hand out
    /// its elements out of order (`deterministic: false`) and nothing after it depends on
    /// the order.
    Unordered,
    /// The first pass only: a stateful closure under written read-ahead under an early
    /// stop was called a timing-dependent number of times past what the first pass used.
    FirstPass,
    /// Nothing: the same, and the pipeline itself runs the closure's input again (a repeat,
    /// a second branch), so even the first pass sees the timing-dependent count.
    Nothing,
}

/// The comparison rule for operators whose results depend on how far they are read (see the
/// module docs of the test): exact, except where such an operator has read-ahead the user
/// wrote above it and an early stop above that (or the pass was cut at [`MAX_ITEMS`]): then
/// the first pass only, or nothing where the pipeline runs that input again.
fn ordered_mode(marks: &[Marks], capped: bool) -> Compare {
    let Some(i) = marks.iter().position(|m| m.stateful) else { return Compare::Full };
    let Some(j) = marks.iter().skip(i).position(|m| m.read_ahead).map(|p| p + i) else { return Compare::Full };
    if !capped && !marks[j..].iter().any(|m| m.stops) {
        return Compare::Full;
    }
    if marks[j..].iter().any(|m| m.again) {
        Compare::Nothing
    } else {
        Compare::FirstPass
    }
}

/// How much of a case's runs are compared ([`ordered_mode`]), and how: where an operator may
/// hand out its elements out of order, as multisets of rows if nothing after it depends on
/// their order, else not at all. Depending on the order are the operators so marked, and a
/// batch when errors are in the stream (the rows it gathered before an error are discarded,
/// and the order decides which) or a second batch level (its lists are groups the order
/// decides). `errors`: the reference met errors.
pub fn compare_mode(marks: &[Marks], capped: bool, errors: bool) -> Compare {
    let ordered = ordered_mode(marks, capped);
    let Some(first) = marks.iter().position(|m| m.unordered) else { return ordered };
    let after = &marks[first + 1..];
    let loses_rows = after.iter().any(|m| m.groups) && (errors || after.iter().any(|m| m.drops_errors));
    let sensitive = after.iter().any(|m| m.order_sensitive) || after.iter().filter(|m| m.nests).count() > 1;
    if ordered != Compare::Full || capped || loses_rows || sensitive {
        Compare::Nothing
    } else {
        Compare::Unordered
    }
}

/// Builds `case` for `config` (with rules `off` switched off too) in `dir`.
pub fn build_for(case: &Case, config: Config, off: &[&str], dir: &Path) -> Result<(Built, Dataset), String> {
    let options = config.options_without(off);
    let built = build(case, options.clone(), dir).map_err(|e| format!("build failed: {e}"))?;
    let ds = if config == Config::Serde {
        let json = built.ds.serialize().map_err(|e| format!("serialize failed: {e}"))?;
        Dataset::deserialize(&json, built.ds.registry().clone())
            .map_err(|e| format!("deserialize failed: {e}\n{json}"))?
            .with_options(options)
    } else {
        built.ds.clone()
    };
    Ok((built, ds))
}

/// Runs `case` under `config` (rules `off` off too): builds it from scratch, checks the
/// optimizer's report, and iterates `passes` times.
pub fn run(case: &Case, config: Config, off: &[&str], dir: &Path, tier: &Tier, passes: usize) -> Result<Run, Failure> {
    let fail = |kind, text: String| Failure { config, kind, text };
    let (built, ds) = build_for(case, config, off, dir).map_err(|e| fail(Kind::Build, e))?;
    let report = if config.optimizes() {
        let report = ds.optimization_report().map_err(|e| fail(Kind::Build, format!("optimizing failed: {e}")))?;
        check_report(case, config, off, dir, tier, &report).map_err(|e| fail(Kind::Slow, e))?;
        Some(report)
    } else {
        None
    };
    let mut out = Run { built, ds, passes: Vec::new(), capped: false, report };
    for _ in 0..passes {
        let items = crate::common::pipelines::items_up_to(&out.ds, MAX_ITEMS);
        out.capped |= items.len() >= MAX_ITEMS;
        out.passes.push(items);
    }
    Ok(out)
}

/// Fails a report whose stages stopped for a limit or grew past [`MAX_EGRAPH_NODES`], or
/// (timed) that took longer than [`MAX_OPTIMIZER_TIME`] three times in a row.
fn check_report(
    case: &Case,
    config: Config,
    off: &[&str],
    dir: &Path,
    tier: &Tier,
    report: &Report,
) -> Result<(), String> {
    if tier.record {
        stats::optimizer_time(report.time, config);
    }
    for stage in &report.stages {
        if tier.record {
            stats::egraph(stage.egraph_nodes);
        }
        if stage.stop_reason != "saturated" || stage.egraph_nodes > MAX_EGRAPH_NODES {
            return Err(format!(
                "optimizer stage {} stopped: {} after {} iterations with {} e-graph nodes (limit {})",
                stage.name, stage.stop_reason, stage.iterations, stage.egraph_nodes, MAX_EGRAPH_NODES
            ));
        }
    }
    if tier.timed && report.time > MAX_OPTIMIZER_TIME {
        let mut fastest = report.time;
        for _ in 0..2 {
            let (_, ds) = build_for(case, config, off, dir)?;
            fastest = fastest.min(ds.optimization_report().map_err(|e| e.to_string())?.time);
        }
        if fastest > MAX_OPTIMIZER_TIME {
            return Err(format!("optimizing took {fastest:?} (three tries), more than {MAX_OPTIMIZER_TIME:?}"));
        }
    }
    Ok(())
}

/// `array` with every NaN made the same NaN and `-0.0` made `0.0` (through list nesting):
/// evaluation orders may produce either sign of a NaN or of a zero, which no user can tell
/// apart by value.
fn canonical(array: &ArrayRef) -> ArrayRef {
    fn f64s(v: f64) -> f64 {
        if v.is_nan() {
            f64::NAN
        } else if v == 0.0 {
            0.0
        } else {
            v
        }
    }
    match array.data_type() {
        DataType::Float64 => Arc::new(array.as_primitive::<Float64Type>().unary::<_, Float64Type>(f64s)),
        DataType::Float32 => {
            Arc::new(array.as_primitive::<Float32Type>().unary::<_, Float32Type>(|v| f64s(f64::from(v)) as f32))
        }
        DataType::List(field) => {
            let l = array.as_list::<i32>();
            Arc::new(ListArray::new(field.clone(), l.offsets().clone(), canonical(l.values()), l.nulls().cloned()))
        }
        DataType::FixedSizeList(field, size) => {
            let l = array.as_fixed_size_list();
            Arc::new(FixedSizeListArray::new(field.clone(), *size, canonical(l.values()), l.nulls().cloned()))
        }
        _ => array.clone(),
    }
}

/// Whether two elements are equal: the same schema and the same values, NaNs and zeros of
/// either sign alike.
fn same(a: &RecordBatch, b: &RecordBatch) -> bool {
    if a == b {
        return true;
    }
    a.schema() == b.schema()
        && a.num_rows() == b.num_rows()
        && a.columns().iter().zip(b.columns()).all(|(x, y)| canonical(x).to_data() == canonical(y).to_data())
}

/// The first position where `got` differs from `want`: elements must be [`same`], errors
/// need only be errors (their messages may differ; those are counted).
fn difference(want: &[Item], got: &[Item]) -> Option<(usize, bool)> {
    for i in 0..want.len().max(got.len()) {
        match (want.get(i), got.get(i)) {
            (Some(Item::Ok(a)), Some(Item::Ok(b))) if same(a, b) => {}
            (Some(Item::Err(a)), Some(Item::Err(b))) => stats::message(a != b),
            (Some(Item::Ok(a)), Some(Item::Ok(b))) => return Some((i, a.schema() != b.schema())),
            _ => return Some((i, false)),
        }
    }
    None
}

/// Whether any pass of `run` met an error.
pub fn has_errors(run: &Run) -> bool {
    run.passes.iter().flatten().any(|i| matches!(i, Item::Err(_)))
}

/// The rows of `items` as text (field names, types and values, NaNs and zeros of either sign
/// alike), sorted, and the number of errors.
fn sorted_rows(items: &[Item]) -> (Vec<String>, usize) {
    let options = arrow::util::display::FormatOptions::default();
    let (mut rows, mut errors) = (Vec::new(), 0);
    for item in items {
        let batch = match item {
            Item::Err(_) => {
                errors += 1;
                continue;
            }
            Item::Ok(batch) => batch,
        };
        let schema = batch.schema();
        let columns: Vec<ArrayRef> = batch.columns().iter().map(canonical).collect();
        let formatters: Vec<_> = columns
            .iter()
            .map(|c| arrow::util::display::ArrayFormatter::try_new(c.as_ref(), &options).expect("a formatter"))
            .collect();
        for r in 0..batch.num_rows() {
            let fields = schema.fields().iter().zip(&formatters);
            rows.push(
                fields
                    .map(|(f, v)| format!("{}: {} = {}", f.name(), f.data_type(), v.value(r)))
                    .collect::<Vec<_>>()
                    .join(", "),
            );
        }
    }
    rows.sort();
    (rows, errors)
}

/// Where `got` differs from `want` as multisets of rows and counts of errors: the first
/// differing sorted row, and what differs.
fn unordered_difference(want: &[Item], got: &[Item]) -> Option<(usize, String)> {
    let ((a, a_errors), (b, b_errors)) = (sorted_rows(want), sorted_rows(got));
    if a_errors != b_errors {
        return Some((0, format!("{a_errors} errors (reference) / {b_errors}")));
    }
    let index = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i))?;
    let row = |r: Option<&String>| r.cloned().unwrap_or_else(|| "no more rows".into());
    Some((
        index,
        format!(
            "{} rows (reference) / {}, sorted; first difference at row {index}:\nreference: {}\nthis run: {}",
            a.len(),
            b.len(),
            row(a.get(index)),
            row(b.get(index))
        ),
    ))
}

/// The text of a case for a failure message: its builder calls, its JSON, and the plan.
pub fn describe(case: &Case, run: &Run) -> String {
    format!(
        "pipeline:\n  {}\n\ncase (one line of JSON, for tests/equivalence_regressions.jsonl):\n{}\n\n{}",
        run.built.calls.join("\n    ."),
        serde_json::to_string(case).expect("a case serializes"),
        run.ds.explain()
    )
}

/// Runs one case: the reference, then `configs`; the first failure, if any.
pub fn check(case: &Case, configs: &[Config], tier: &Tier, progress: &Mutex<Config>) -> Result<(), Failure> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    prepare(case, dir.path());
    *progress.lock().unwrap() = REFERENCE;
    let reference = match guarded(REFERENCE, || run(case, REFERENCE, &[], dir.path(), tier, 2)) {
        Ok(r) => r,
        Err(f) if f.kind == Kind::Build => {
            if tier.record {
                stats::unbuildable(&f.text);
            }
            return Ok(());
        }
        Err(f) => return Err(f),
    };
    let mode = compare_mode(&reference.built.marks, reference.capped, has_errors(&reference));
    if tier.record {
        stats::case(case, &reference, mode);
    }
    for &config in configs {
        *progress.lock().unwrap() = config;
        compare_config(case, config, &[], dir.path(), tier, &reference, mode)?;
    }
    Ok(())
}

/// Runs `config` and compares it with `reference` under `mode`.
pub fn compare_config(
    case: &Case,
    config: Config,
    off: &[&str],
    dir: &Path,
    tier: &Tier,
    reference: &Run,
    mode: Compare,
) -> Result<(), Failure> {
    let got = guarded(config, || run(case, config, off, dir, tier, 2));
    let got = match got {
        Err(f) if config == Config::Serde && f.kind == Kind::Build && f.text.starts_with("serialize failed") => {
            if tier.record {
                stats::not_serializable(&f.text);
            }
            return Ok(());
        }
        other => other?,
    };
    if tier.record {
        stats::config_run(config, got.report.as_deref());
    }
    let passes = match mode {
        Compare::Full | Compare::Unordered => 2,
        Compare::FirstPass => 1,
        Compare::Nothing => 0,
    };
    if mode == Compare::Unordered {
        for p in 0..passes {
            let (want, have) = (&reference.passes[p], &got.passes[p]);
            if let Some((index, text)) = unordered_difference(want, have) {
                let text = format!(
                    "pass {p}, out of order, {text}\n\nreference items: {}\n{} items: {}\n\n{}",
                    brief(want),
                    config.name(),
                    brief(have),
                    describe(case, &got)
                );
                return Err(Failure { config, kind: Kind::Mismatch { pass: p, index, schema: false }, text });
            }
        }
        return Ok(());
    }
    for p in 0..passes {
        let (want, have) = (&reference.passes[p], &got.passes[p]);
        if let Some((index, schema)) = difference(want, have) {
            let text = format!(
                "pass {p}, item {index} of {} (reference) / {} ({}):\nreference: {}\n{}: {}\n\nreference items: {}\n{} items: {}\n\n{}",
                want.len(),
                have.len(),
                config.name(),
                show(want.get(index)),
                config.name(),
                show(have.get(index)),
                brief(want),
                config.name(),
                brief(have),
                describe(case, &got)
            );
            return Err(Failure { config, kind: Kind::Mismatch { pass: p, index, schema }, text });
        }
    }
    Ok(())
}

/// Items in brief: `Ok(rows)` or `Err`, at most 40 of them.
pub fn brief(items: &[Item]) -> String {
    let mut parts: Vec<String> = items
        .iter()
        .take(40)
        .map(|i| match i {
            Item::Ok(b) => format!("{}r", b.num_rows()),
            Item::Err(_) => "Err".into(),
        })
        .collect();
    if items.len() > 40 {
        parts.push(format!("... ({} in all)", items.len()));
    }
    format!("[{}]", parts.join(", "))
}

/// Runs `f`, turning a panic into a [`Kind::Panic`] failure of `config`.
fn guarded<T>(config: Config, f: impl FnOnce() -> Result<T, Failure>) -> Result<T, Failure> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let message = panic_message(p.as_ref());
        Err(Failure { config, kind: Kind::Panic, text: format!("panicked: {message}") })
    })
}

/// Installs (once) a panic hook that keeps the fuzzer's case threads quiet: their panics
/// are failures reported with the case.
pub fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !std::thread::current().name().is_some_and(|n| n.starts_with("fuzz-case")) {
                default(info);
            }
        }));
    });
}

/// Runs `check` on a thread of its own, failing the case after `tier.limit` (the thread is
/// left behind: a hang must not stall the run).
pub fn check_with_timeout(case: &Case, configs: &[Config], tier: &Tier) -> Result<(), Failure> {
    let (tx, rx) = mpsc::channel();
    let progress = Arc::new(Mutex::new(REFERENCE));
    let (owned, configs_owned, tier_owned, progress_owned) =
        (case.clone(), configs.to_vec(), tier.clone(), progress.clone());
    std::thread::Builder::new()
        .name("fuzz-case".into())
        .spawn(move || {
            let outcome = check(&owned, &configs_owned, &tier_owned, &progress_owned);
            let _ = tx.send(outcome);
        })
        .expect("spawn a case thread");
    match rx.recv_timeout(tier.limit) {
        Ok(outcome) => outcome,
        Err(_) => {
            let config = *progress.lock().unwrap();
            Err(Failure {
                config,
                kind: Kind::Timeout,
                text: format!(
                    "the case did not finish within {:?} (in {})\n\ncase:\n{}",
                    tier.limit,
                    config.name(),
                    serde_json::to_string(case).expect("a case serializes")
                ),
            })
        }
    }
}

/// The configurations `case` runs in `tier`.
pub fn configs_for(case: &Case, tier: &Tier) -> Vec<Config> {
    tier.configs.clone().unwrap_or_else(|| configs::sample(case.seed, tier.sampled))
}

/// Checks `case`: its failure, if any.
pub fn failure_of(case: &Case, configs: &[Config], tier: &Tier) -> Option<Failure> {
    check_with_timeout(case, configs, tier).err()
}

/// Shrinks a failing case (proptest's simplify/complicate walk): each simpler case is run
/// under the failing configuration only and must fail the same way; the simplest one's
/// failure.
pub fn shrink(tree: &mut impl ValueTree<Value = Case>, first: Failure, tier: &Tier) -> (Case, Failure) {
    let focus = [first.config];
    let same = |f: &Failure| std::mem::discriminant(&f.kind) == std::mem::discriminant(&first.kind);
    let mut best = (tree.current(), first.clone());
    // A hang costs the whole limit per try: few tries, each with a shorter limit (a case
    // that deadlocks still does; one that was only slow stops shrinking).
    let budget = if first.kind == Kind::Timeout { 8 } else { 600 };
    let limit = if first.kind == Kind::Timeout { tier.limit.min(Duration::from_secs(30)) } else { tier.limit };
    let tier = &Tier { limit, record: false, ..tier.clone() };
    let start = Instant::now();
    let mut tries = 0;
    if !tree.simplify() {
        return best;
    }
    loop {
        tries += 1;
        let case = tree.current();
        let outcome =
            if first.config == REFERENCE { failure_of(&case, &[], tier) } else { failure_of(&case, &focus, tier) };
        let fails = outcome.filter(same);
        let more = match fails {
            Some(f) => {
                best = (case, f);
                tree.simplify()
            }
            None => tree.complicate(),
        };
        if !more || tries >= budget || start.elapsed() > Duration::from_secs(600) {
            break;
        }
    }
    stats::shrunk(tries);
    greedy(best, tier)
}

/// The smaller cases of `case`: each with one operator recipe or one source row left out
/// (proptest deletes each element once, in order, so an element that a later one needed
/// stays after that one is gone).
fn smaller(case: &Case) -> Vec<Case> {
    let mut out = Vec::new();
    for i in (0..case.ops.len()).rev() {
        let mut c = case.clone();
        c.ops.remove(i);
        out.push(c);
    }
    let rows = match &case.source {
        SourceRecipe::Arrays { rows } | SourceRecipe::Files { rows, .. } | SourceRecipe::Tables { rows, .. } => {
            rows.len()
        }
        SourceRecipe::Typed { rows, .. } => rows.len(),
        SourceRecipe::Generator { values, .. } => values.len(),
        SourceRecipe::Records { examples, .. } => examples.len(),
        SourceRecipe::Images(r) => r.files.len(),
        SourceRecipe::Range { len, .. } => usize::try_from(*len).unwrap_or(0),
        SourceRecipe::RangeStep { .. } => 0,
    };
    for i in (0..rows).rev() {
        let mut c = case.clone();
        match &mut c.source {
            SourceRecipe::Arrays { rows } | SourceRecipe::Files { rows, .. } | SourceRecipe::Tables { rows, .. } => {
                rows.remove(i);
            }
            SourceRecipe::Typed { rows, .. } => {
                rows.remove(i);
            }
            SourceRecipe::Generator { values, .. } => {
                values.remove(i);
            }
            SourceRecipe::Records { examples, .. } => {
                examples.remove(i);
            }
            SourceRecipe::Images(r) => {
                r.files.remove(i);
            }
            SourceRecipe::Range { start, len } if i == 0 => (*start, *len) = (*start + 1, *len - 1),
            SourceRecipe::Range { len, .. } if i + 1 == rows => *len -= 1,
            _ => continue,
        }
        out.push(c);
    }
    out
}

/// Shrinks further by leaving out one recipe or row at a time while the case still fails
/// the same way, until nothing more can go.
fn greedy(mut best: (Case, Failure), tier: &Tier) -> (Case, Failure) {
    let tier = &Tier { record: false, ..tier.clone() };
    let focus = [best.1.config];
    let kind = std::mem::discriminant(&best.1.kind);
    let start = Instant::now();
    let mut progress = true;
    while progress && best.1.kind != Kind::Timeout && start.elapsed() < Duration::from_secs(300) {
        progress = false;
        for candidate in smaller(&best.0) {
            let configs: &[Config] = if focus[0] == REFERENCE { &[] } else { &focus };
            if let Some(f) = failure_of(&candidate, configs, tier).filter(|f| std::mem::discriminant(&f.kind) == kind) {
                best = (candidate, f);
                progress = true;
                break;
            }
        }
    }
    best
}

/// Runs `cases` cases drawn by `runner` under `tier`; the shrunk failures (`stop_at_first`:
/// at most one).
pub fn run_cases(runner: &mut TestRunner, cases: usize, tier: &Tier, stop_at_first: bool) -> Vec<(Case, Failure)> {
    quiet_panics();
    let strategy = full_case();
    let mut failures = Vec::new();
    for _ in 0..cases {
        let mut tree = strategy.new_tree(runner).expect("a case");
        let case = tree.current();
        let configs = configs_for(&case, tier);
        if let Some(failure) = failure_of(&case, &configs, tier) {
            // Shrinking can take long (a hang costs the time limit per try): the case as
            // found comes first, so a long run shows it at once.
            eprintln!("found, shrinking: {}", report_failure(&case, &failure));
            let shrunk = shrink(&mut tree, failure, tier);
            stats::failure(&shrunk.1);
            failures.push(shrunk);
            if stop_at_first {
                break;
            }
        }
    }
    failures
}

/// A failure as text: the configuration, the options, and the failure's description.
pub fn report_failure(case: &Case, f: &Failure) -> String {
    format!(
        "FAILURE in {} ({:?}; options {}):\n{}\n\nminimal case: {}\n",
        f.config.name(),
        f.kind,
        f.config.rust(),
        f.text,
        serde_json::to_string(case).expect("a case serializes")
    )
}

/// The regression cases of `text` (JSON lines; `#` lines are comments): each with the
/// comment above it.
pub fn regressions(text: &str) -> Vec<(String, Case)> {
    let mut comment = String::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(c) = line.strip_prefix('#') {
            comment = c.trim().to_string();
        } else if !line.is_empty() {
            let case: Case = serde_json::from_str(line).unwrap_or_else(|e| panic!("bad regression line {line}: {e}"));
            out.push((std::mem::take(&mut comment), case));
        }
    }
    out
}
