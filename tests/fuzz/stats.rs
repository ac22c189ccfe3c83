//! Coverage statistics of a fuzzer run: cases, items, errors, operators applied, expression
//! families, sources, rules fired, configurations run, optimizer times and
//! failures. One process-wide set (the tiers of one test binary add to the same counters).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use flumen::crates::optimizer::Report;

use super::configs::Config;
use super::{Compare, Failure, Item, Run};
use crate::common::pipelines::families::{expr_family, pred_family};
use crate::common::pipelines::{Case, OpRecipe, SourceRecipe};

/// The counters.
#[derive(Default)]
struct Stats {
    cases: usize,
    unbuildable: BTreeMap<String, usize>,
    ops_generated: usize,
    ops_applied: usize,
    ops_skipped: usize,
    ops_rejected: usize,
    rejections: BTreeMap<String, usize>,
    items: usize,
    error_items: usize,
    cases_with_errors: usize,
    empty_cases: usize,
    capped: usize,
    modes: BTreeMap<String, usize>,
    operators: BTreeMap<&'static str, usize>,
    expr_families: BTreeMap<&'static str, usize>,
    sources: BTreeMap<String, usize>,
    rules: BTreeMap<String, usize>,
    configs: BTreeMap<String, usize>,
    runs: usize,
    plans_changed: usize,
    not_serializable: BTreeMap<String, usize>,
    message_diffs: usize,
    max_time: Duration,
    max_time_config: String,
    total_time: Duration,
    optimizations: usize,
    max_nodes: usize,
    failures: Vec<String>,
    shrink_tries: usize,
}

static STATS: LazyLock<Mutex<Stats>> = LazyLock::new(Mutex::default);

fn with(f: impl FnOnce(&mut Stats)) {
    f(&mut STATS.lock().unwrap_or_else(|p| p.into_inner()));
}

/// The first line of `text`, shortened (messages grouped by kind).
fn gist(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    let cut: String = line.chars().take(110).collect();
    // Paths of temporary directories differ from case to case.
    cut.split("/tmp/").next().unwrap_or_default().to_string()
}

/// One optimization's wall time.
pub fn optimizer_time(time: Duration, config: Config) {
    with(|s| {
        s.optimizations += 1;
        s.total_time += time;
        if time > s.max_time {
            s.max_time = time;
            s.max_time_config = config.name();
        }
    });
}

/// One stage's e-graph size.
pub fn egraph(nodes: usize) {
    with(|s| s.max_nodes = s.max_nodes.max(nodes));
}

/// A pair of errors at the same position, worded the same or not.
pub fn message(differs: bool) {
    if differs {
        with(|s| s.message_diffs += 1);
    }
}

/// A case whose reference did not build.
pub fn unbuildable(text: &str) {
    with(|s| *s.unbuildable.entry(gist(text)).or_default() += 1);
}

/// A plan that does not serialize (the `Serde` configuration is skipped).
pub fn not_serializable(text: &str) {
    with(|s| *s.not_serializable.entry(gist(text)).or_default() += 1);
}

/// The source recipe's name.
fn source_name(r: &SourceRecipe) -> String {
    match r {
        SourceRecipe::Range { .. } => "range".into(),
        SourceRecipe::RangeStep { .. } => "range_step".into(),
        SourceRecipe::Arrays { .. } => "from_batches (a, b, x)".into(),
        SourceRecipe::Typed { .. } => "from_batches (typed, tensor)".into(),
        SourceRecipe::Generator { stateful, .. } => format!("from_generator (stateful {stateful})"),
        SourceRecipe::Files { parquet, read, .. } => {
            format!("{} read {read}", if *parquet { "parquet" } else { "csv" })
        }
        SourceRecipe::Tables { format, read, .. } => format!("{format:?} read {read}"),
        SourceRecipe::Records { read, gzip, parse, .. } => format!("tfrecord read {read} gzip {gzip} parse {parse}"),
        SourceRecipe::Images(r) => format!("images read_file {} first {} float {}", r.read_file, r.first, r.float),
    }
}

/// The expression families a recipe draws.
fn families_of(r: &OpRecipe) -> Vec<&'static str> {
    match r {
        OpRecipe::MapExpr { mode: 2, e1, e2, .. } => vec![expr_family(e1.kind), expr_family(e2.kind)],
        OpRecipe::MapExpr { e1, .. } => vec![expr_family(e1.kind)],
        OpRecipe::MapSelectComputed { e, .. } => vec![expr_family(e.kind)],
        OpRecipe::Filter(p) | OpRecipe::TakeWhile(p) | OpRecipe::FilterWith { p, .. } => {
            vec![pred_family(p.kind)]
        }
        OpRecipe::MapThenFilter { e, p, .. } => vec![expr_family(e.kind), pred_family(p.kind)],
        _ => Vec::new(),
    }
}

/// A case whose reference ran (`mode`: how much of it is compared).
pub fn case(case: &Case, reference: &Run, mode: Compare) {
    with(|s| {
        s.cases += 1;
        let built = &reference.built;
        s.ops_generated += case.ops.len();
        s.ops_applied += built.applied.len();
        s.ops_skipped += built.skipped;
        s.ops_rejected += built.rejected;
        for call in built.calls.iter().filter(|c| c.starts_with("// rejected")) {
            *s.rejections.entry(gist(call)).or_default() += 1;
        }
        let items: usize = reference.passes.iter().map(Vec::len).sum();
        let errors: usize = reference.passes.iter().flatten().filter(|i| matches!(i, Item::Err(_))).count();
        s.items += items;
        s.error_items += errors;
        s.cases_with_errors += usize::from(errors > 0);
        s.empty_cases += usize::from(items == 0);
        s.capped += usize::from(reference.capped);
        *s.modes.entry(format!("{mode:?}")).or_default() += 1;
        for op in &built.applied {
            *s.operators.entry(op).or_default() += 1;
        }
        for r in &built.recipes {
            for f in families_of(r) {
                *s.expr_families.entry(f).or_default() += 1;
            }
        }
        *s.sources.entry(source_name(&case.source)).or_default() += 1;
    });
}

/// One configuration's run (with the optimizer's report where it optimized).
pub fn config_run(config: Config, report: Option<&Report>) {
    with(|s| {
        s.runs += 1;
        *s.configs.entry(config.name()).or_default() += 1;
        if let Some(report) = report {
            s.plans_changed += usize::from(report.output != report.input);
            let fired: std::collections::BTreeSet<&String> =
                report.stages.iter().flat_map(|st| st.rules_fired.keys()).collect();
            for rule in fired {
                *s.rules.entry(rule.clone()).or_default() += 1;
            }
        }
    });
}

/// Shrinking tried `tries` cases.
pub fn shrunk(tries: usize) {
    with(|s| s.shrink_tries += tries);
}

/// A (shrunk) failure.
pub fn failure(f: &Failure) {
    with(|s| s.failures.push(format!("{} ({:?}): {}", f.config.name(), f.kind, gist(&f.text))));
}

/// How many cases ran so far (reference built).
pub fn cases() -> usize {
    STATS.lock().map(|s| s.cases).unwrap_or_default()
}

/// The statistics as text.
pub fn report() -> String {
    let s = STATS.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = String::new();
    let generated = s.ops_generated.max(1);
    let _ = writeln!(
        out,
        "{} cases ({} more did not build: {:?})\nops: {} generated, {} applied ({:.0}%), {} not applicable, {} rejected by a builder {:?}\n\
         items: {} ({} errors); {} cases with errors, {} empty, {} cut at the item cap\ncompared: {:?}\n\
         runs: {} configuration runs besides the references, {} with the plan changed by the optimizer; error pairs worded differently: {}\n\
         optimizer: {} optimizations, max {:?} ({}), mean {:?}, largest e-graph {} nodes\n\
         shrinking: {} cases tried",
        s.cases,
        s.unbuildable.values().sum::<usize>(),
        s.unbuildable,
        s.ops_generated,
        s.ops_applied,
        100.0 * s.ops_applied as f64 / generated as f64,
        s.ops_skipped,
        s.ops_rejected,
        s.rejections,
        s.items,
        s.error_items,
        s.cases_with_errors,
        s.empty_cases,
        s.capped,
        s.modes,
        s.runs,
        s.plans_changed,
        s.message_diffs,
        s.optimizations,
        s.max_time,
        s.max_time_config,
        s.total_time.checked_div(s.optimizations.max(1) as u32).unwrap_or_default(),
        s.max_nodes,
        s.shrink_tries,
    );
    let _ = writeln!(out, "sources: {:?}", s.sources);
    let _ = writeln!(out, "operators applied: {:?}", s.operators);
    let _ = writeln!(out, "expression families: {:?}", s.expr_families);
    let _ = writeln!(out, "rules fired (runs): {:?}", s.rules);
    let _ = writeln!(out, "configurations run: {:?}", s.configs);
    let _ = writeln!(out, "plans that do not serialize: {:?}", s.not_serializable);
    let _ = writeln!(out, "failures: {}", s.failures.len());
    for f in &s.failures {
        let _ = writeln!(out, "  {f}");
    }
    out
}
